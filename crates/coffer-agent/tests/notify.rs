//! Notifications against real servers: an HTTP server started here for the
//! webhooks (each preset's request as received), servers that fail or never
//! answer for the dispatcher's retries and timeouts, and mailpit (the SMTP test
//! server of .ci/services.sh, STARTTLS required) for e-mail, read back through
//! its HTTP API.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use coffer_agent::config::{Event, Kind, MailConfig, NotifierConfig, Preset, Target};
use coffer_agent::notify::{Dispatcher, DispatcherOptions, LogFn, MemoryNotices, Message, Notifier, NotifyError};
use coffer_agent::state::{Db, Outcome};

// ---------------------------------------------------------------- a test HTTP server

#[derive(Debug, Clone)]
struct Request {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("body is not JSON ({e}): {:?}", self.text()))
    }

    fn text(&self) -> String {
        String::from_utf8(self.body.clone()).unwrap()
    }
}

/// An HTTP/1.1 server on 127.0.0.1 that records every request and answers
/// with the statuses given, one per request (the last one repeated).
struct Server {
    addr: SocketAddr,
    requests: Receiver<Request>,
    count: Arc<AtomicUsize>,
}

impl Server {
    fn start(statuses: &[(u16, &str)]) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = channel();
        let statuses: Vec<(u16, String)> = statuses.iter().map(|(s, b)| (*s, b.to_string())).collect();
        let count = Arc::new(AtomicUsize::new(0));
        let n = Arc::clone(&count);
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let i = n.fetch_add(1, Ordering::SeqCst);
                let (status, body) = statuses[i.min(statuses.len() - 1)].clone();
                let tx: Sender<Request> = tx.clone();
                std::thread::spawn(move || serve_one(conn, status, &body, &tx));
            }
        });
        Server { addr, requests: rx, count }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn next(&self) -> Request {
        self.requests.recv_timeout(Duration::from_secs(20)).expect("the server got no request")
    }
}

fn serve_one(conn: TcpStream, status: u16, body: &str, tx: &Sender<Request>) {
    conn.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut r = BufReader::new(conn.try_clone().unwrap());
    let mut line = String::new();
    if r.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_string();
    let path = parts.next().unwrap_or_default().to_string();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        r.read_line(&mut h).unwrap();
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':').unwrap();
        headers.push((k.trim().to_string(), v.trim().to_string()));
    }
    let len: usize =
        headers.iter().find(|(k, _)| k.eq_ignore_ascii_case("content-length")).map_or(0, |(_, v)| v.parse().unwrap());
    let mut data = vec![0; len];
    r.read_exact(&mut data).unwrap();
    tx.send(Request { method, path, headers, body: data }).unwrap();
    let mut w = conn;
    let _ = write!(w, "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
}

/// A server that takes connections and never answers.
fn silent_server() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let n = Arc::clone(&count);
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming().flatten() {
            n.fetch_add(1, Ordering::SeqCst);
            held.push(conn);
        }
    });
    (addr, count)
}

// ---------------------------------------------------------------- messages and notifiers

fn message(job: &str, event: Event) -> Message {
    Message {
        job: job.into(),
        kind: Kind::Backup,
        event,
        outcome: Some(if event == Event::Failure { Outcome::Failure } else { Outcome::Success }),
        host: "nas".into(),
        time: "2026-12-01T03:00:00Z".parse().unwrap(),
        snapshot: (event != Event::Failure).then(|| "5f3a9c01".to_string()),
        error: (event == Event::Failure).then(|| "storage refused the connection".to_string()),
        summary: Some(serde_json::json!({"files_new": 3})),
    }
}

fn webhook(name: &str, url: String, preset: Preset) -> NotifierConfig {
    NotifierConfig {
        name: name.into(),
        target: Target::Webhook { url, preset },
        cacert: None,
        rate_limit: Duration::from_secs(600),
    }
}

fn quick() -> Notifier {
    Notifier::with_timeout(Duration::from_secs(10))
}

// ---------------------------------------------------------------- presets

#[test]
fn json_preset_posts_the_record() {
    let s = Server::start(&[(200, "")]);
    quick().send(&webhook("hook", s.url("/coffer/events"), Preset::Json), &message("home", Event::Failure)).unwrap();
    let r = s.next();
    assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/coffer/events"));
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert!(r.header("user-agent").unwrap().starts_with("coffer/"));
    assert_eq!(
        r.json(),
        serde_json::json!({"job": "home", "kind": "backup", "event": "failure", "outcome": "failure", "host": "nas",
            "time": "2026-12-01T03:00:00Z", "snapshot": null, "error": "storage refused the connection",
            "summary": {"files_new": 3}})
    );
}

#[test]
fn ntfy_preset_posts_text_with_title_priority_and_tags() {
    let s = Server::start(&[(200, "{}")]);
    quick().send(&webhook("ops", s.url("/backups"), Preset::Ntfy), &message("home", Event::Failure)).unwrap();
    let r = s.next();
    assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/backups"));
    assert_eq!(r.header("title"), Some("coffer: home failure"));
    assert_eq!(r.header("priority"), Some("high"));
    assert_eq!(r.header("tags"), Some("rotating_light,coffer,failure"));
    assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
    let text = r.text();
    assert!(text.starts_with("The backup of job home on nas failed."), "{text}");
    assert!(text.contains("\nerror: storage refused the connection\n"), "{text}");
    assert!(text.contains("\nhost: nas\n") && text.contains("\ntime: 2026-12-01T03:00:00Z\n"), "{text}");

    quick().send(&webhook("ops", s.url("/backups"), Preset::Ntfy), &message("home", Event::Recovery)).unwrap();
    let r = s.next();
    assert_eq!(r.header("priority"), Some("default"));
    assert_eq!(r.header("title"), Some("coffer: home recovery"));
    assert!(r.text().contains("\nsnapshot: 5f3a9c01\n"));
}

#[test]
fn gotify_slack_and_discord_presets() {
    let s = Server::start(&[(200, "")]);
    let msg = message("home", Event::Overdue);
    quick().send(&webhook("g", s.url("/message?token=AbC123"), Preset::Gotify), &msg).unwrap();
    let r = s.next();
    assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/message?token=AbC123"));
    let v = r.json();
    assert_eq!(v["title"], "coffer: home overdue");
    assert_eq!(v["priority"], 8);
    assert_eq!(v["message"], msg.text());
    assert_eq!(v.as_object().unwrap().len(), 3);

    quick().send(&webhook("s", s.url("/services/T0/B0/XYZ"), Preset::Slack), &msg).unwrap();
    let r = s.next();
    assert_eq!(r.path, "/services/T0/B0/XYZ");
    assert_eq!(r.json(), serde_json::json!({"text": msg.text()}));

    let mut long = msg.clone();
    long.error = Some("x".repeat(5000));
    quick().send(&webhook("d", s.url("/api/webhooks/1/tok"), Preset::Discord), &long).unwrap();
    let r = s.next();
    let content = r.json()["content"].as_str().unwrap().to_string();
    assert_eq!(content.chars().count(), 2000, "Discord's limit");
    assert!(content.starts_with("The backup of job home on nas is overdue."));
    assert_eq!(r.json().as_object().unwrap().len(), 1);
}

#[test]
fn healthchecks_preset_pings_start_success_and_fail() {
    let s = Server::start(&[(200, "OK")]);
    let hc = webhook("hc", s.url("/ping/0f3c1a2b"), Preset::Healthchecks);
    quick().start(&hc, &message("home", Event::Success)).unwrap();
    let r = s.next();
    assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/ping/0f3c1a2b/start"));
    assert_eq!(r.text(), "The backup of job home on nas starts.\n");
    quick().send(&hc, &message("home", Event::Success)).unwrap();
    assert_eq!(s.next().path, "/ping/0f3c1a2b");
    quick().send(&hc, &message("home", Event::Failure)).unwrap();
    let r = s.next();
    assert_eq!(r.path, "/ping/0f3c1a2b/fail");
    assert!(r.text().contains("error: storage refused the connection"));
    quick().send(&hc, &message("home", Event::Overdue)).unwrap();
    assert_eq!(s.next().path, "/ping/0f3c1a2b/fail");
    // A trailing slash makes no empty segment.
    let hc = webhook("hc", s.url("/ping/0f3c1a2b/"), Preset::Healthchecks);
    quick().send(&hc, &message("home", Event::Failure)).unwrap();
    assert_eq!(s.next().path, "/ping/0f3c1a2b/fail");
    // Other presets send nothing when a run starts.
    quick().start(&webhook("j", s.url("/x"), Preset::Json), &message("home", Event::Success)).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(s.count.load(Ordering::SeqCst), 5);
}

// ---------------------------------------------------------------- errors keep tokens out

#[test]
fn an_error_answer_names_the_notifier_but_not_the_token() {
    let s = Server::start(&[(403, "forbidden: token sEcReTtOkEn42 is not valid for /message?token=sEcReTtOkEn42")]);
    let err = quick()
        .send(
            &webhook("gotify", s.url("/message?token=sEcReTtOkEn42"), Preset::Gotify),
            &message("home", Event::Failure),
        )
        .unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, NotifyError::Status { status: 403, .. }), "{err:?}");
    assert!(msg.starts_with("notifier gotify: http://127.0.0.1:"), "{msg}");
    assert!(msg.contains("answered HTTP 403: forbidden: token … is not valid"), "{msg}");
    assert!(!msg.contains("sEcReTtOkEn42") && !format!("{err:?}").contains("sEcReTtOkEn42"), "{msg}");
}

#[test]
fn a_refused_connection_is_reported_without_the_path() {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("http://user:pa55word@127.0.0.1:{port}/hook/sEcReT?auth=tok3n");
    let err = quick().send(&webhook("ops", url, Preset::Ntfy), &message("home", Event::Failure)).unwrap_err();
    let msg = err.to_string();
    assert!(msg.starts_with(&format!("notifier ops: http://127.0.0.1:{port}/…: ")), "{msg}");
    eprintln!("refused: {msg}");
    assert!(msg.to_lowercase().contains("connect"), "{msg}");
    for secret in ["pa55word", "sEcReT", "tok3n", "user:"] {
        assert!(!msg.contains(secret), "{secret} in {msg}");
    }
}

#[test]
fn a_server_that_never_answers_fails_within_the_timeout() {
    let (addr, _) = silent_server();
    let t0 = Instant::now();
    let err = Notifier::with_timeout(Duration::from_secs(1))
        .send(&webhook("slow", format!("http://{addr}/never"), Preset::Json), &message("home", Event::Failure))
        .unwrap_err();
    let took = t0.elapsed();
    assert!(took >= Duration::from_millis(900) && took < Duration::from_secs(5), "took {took:?}");
    assert!(err.to_string().contains("no answer within 1s"), "{err}");
    assert!(!err.to_string().contains("never"), "{err}");
}

#[test]
fn a_bad_cacert_or_url_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let pem = dir.path().join("ca.pem");
    std::fs::write(&pem, "not a certificate\n").unwrap();
    let mut cfg = webhook("ops", "https://ntfy.example.net/backups".into(), Preset::Ntfy);
    cfg.cacert = Some(pem.clone());
    let err = quick().send(&cfg, &message("home", Event::Failure)).unwrap_err();
    assert!(matches!(err, NotifyError::Cacert { .. }), "{err:?}");
    assert!(err.to_string().contains(&pem.display().to_string()), "{err}");

    let err = quick()
        .send(&webhook("ops", "ftp://example.net/x".into(), Preset::Json), &message("h", Event::Failure))
        .unwrap_err();
    assert!(err.to_string().contains("not an http:// or https:// URL"), "{err}");
}

// ---------------------------------------------------------------- the dispatcher

type Lines = Arc<Mutex<Vec<String>>>;

fn logger() -> (LogFn, Lines) {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let l = Arc::clone(&lines);
    (Box::new(move |line| l.lock().unwrap().push(line)), lines)
}

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn options(backoff_ms: &[u64]) -> DispatcherOptions {
    DispatcherOptions {
        queue: 16,
        backoff: backoff_ms.iter().map(|ms| Duration::from_millis(*ms)).collect(),
        notifier: Notifier::with_timeout(Duration::from_secs(1)),
    }
}

#[test]
fn the_dispatcher_retries_failed_sends_with_backoff() {
    let s = Server::start(&[(500, "down"), (503, "still down"), (200, "")]);
    let (log, lines) = logger();
    let d = Dispatcher::new(options(&[100, 300, 900]), Box::new(MemoryNotices::default()), log);
    let t0 = Instant::now();
    d.dispatch(&webhook("ops", s.url("/hook"), Preset::Json), &message("home", Event::Failure));
    assert!(t0.elapsed() < Duration::from_millis(50), "dispatch does not wait for the send");
    let times: Vec<Duration> = (0..3)
        .map(|_| {
            s.next();
            t0.elapsed()
        })
        .collect();
    assert!(times[1] - times[0] >= Duration::from_millis(100), "{times:?}");
    assert!(times[2] - times[1] >= Duration::from_millis(300), "{times:?}");
    d.shutdown(Duration::from_secs(5));
    assert_eq!(s.count.load(Ordering::SeqCst), 3, "no try after a success");
    let lines = lines.lock().unwrap().clone();
    assert_eq!(lines.len(), 2, "{lines:#?}");
    assert!(
        lines[0].contains("notifier ops") && lines[0].contains("HTTP 500") && lines[0].contains("try 1 of 4"),
        "{lines:#?}"
    );
    assert!(
        lines[1].contains("HTTP 503") && lines[1].contains("try 2 of 4") && lines[1].contains("in 0.3s"),
        "{lines:#?}"
    );
}

#[test]
fn the_dispatcher_gives_up_after_three_retries() {
    let s = Server::start(&[(500, "")]);
    let (log, lines) = logger();
    let d = Dispatcher::new(options(&[10, 10, 10]), Box::new(MemoryNotices::default()), log);
    d.dispatch(&webhook("ops", s.url("/hook"), Preset::Json), &message("home", Event::Failure));
    wait_for("the last try to be logged", || lines.lock().unwrap().iter().any(|l| l.contains("given up")));
    assert_eq!(s.count.load(Ordering::SeqCst), 4, "one try and three retries");
    assert!(lines.lock().unwrap().last().unwrap().contains("given up after 4 tries"));
}

#[test]
fn the_dispatcher_times_out_a_hanging_notifier_and_retries_it() {
    let (addr, count) = silent_server();
    let (log, lines) = logger();
    let d = Dispatcher::new(options(&[10]), Box::new(MemoryNotices::default()), log);
    d.dispatch(&webhook("slow", format!("http://{addr}/"), Preset::Json), &message("home", Event::Failure));
    wait_for("both tries", || lines.lock().unwrap().iter().any(|l| l.contains("given up after 2 tries")));
    assert_eq!(count.load(Ordering::SeqCst), 2);
    assert!(lines.lock().unwrap()[0].contains("no answer within 1s"));
}

#[test]
fn a_full_queue_drops_without_blocking() {
    let (addr, _) = silent_server();
    let (log, lines) = logger();
    let mut opts = options(&[]);
    opts.queue = 2;
    let d = Dispatcher::new(opts, Box::new(MemoryNotices::default()), log);
    let cfg = webhook("slow", format!("http://{addr}/"), Preset::Json);
    let t0 = Instant::now();
    for i in 0..10 {
        d.dispatch(&cfg, &message(&format!("job{i}"), Event::Failure));
    }
    assert!(t0.elapsed() < Duration::from_millis(200), "dispatch never blocks: {:?}", t0.elapsed());
    let dropped = lines.lock().unwrap().iter().filter(|l| l.contains("dropped: too many notifications")).count();
    // One is being sent, two wait: the other seven (or eight, if the thread had
    // not taken the first yet) are dropped.
    assert!((7..=8).contains(&dropped), "{dropped} dropped: {:#?}", lines.lock().unwrap());
    d.shutdown(Duration::ZERO);
}

#[test]
fn the_rate_limit_holds_per_job_event_and_notifier() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.sqlite");
    let s = Server::start(&[(200, "")]);
    let (log, lines) = logger();
    let d = Dispatcher::new(options(&[10]), Box::new(Db::open(&path).unwrap()), log);
    let ops = webhook("ops", s.url("/ops"), Preset::Json);
    let other = webhook("other", s.url("/other"), Preset::Json);
    let at = |m: &str| {
        let mut msg = message("home", Event::Failure);
        msg.time = format!("2026-12-01T03:{m}:00Z").parse().unwrap();
        msg
    };
    d.dispatch(&ops, &at("00"));
    d.dispatch(&ops, &at("05")); // within 10 minutes: not sent
    d.dispatch(&other, &at("05")); // another notifier: sent
    let mut recovery = at("06");
    recovery.event = Event::Recovery;
    d.dispatch(&ops, &recovery); // another event: sent
    let mut work = at("06");
    work.job = "work".into();
    d.dispatch(&ops, &work); // another job: sent
    d.dispatch(&ops, &at("11")); // past 10 minutes: sent
    d.shutdown(Duration::from_secs(10));
    let mut got = Vec::new();
    while let Ok(r) = s.requests.try_recv() {
        let v = r.json();
        got.push(format!(
            "{} {} {} {}",
            r.path,
            v["job"].as_str().unwrap(),
            v["event"].as_str().unwrap(),
            v["time"].as_str().unwrap()
        ));
    }
    assert_eq!(
        got,
        vec![
            "/ops home failure 2026-12-01T03:00:00Z",
            "/other home failure 2026-12-01T03:05:00Z",
            "/ops home recovery 2026-12-01T03:06:00Z",
            "/ops work failure 2026-12-01T03:06:00Z",
            "/ops home failure 2026-12-01T03:11:00Z",
        ]
    );
    let lines = lines.lock().unwrap().clone();
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert!(
        lines[0].contains("notifier ops: failure of job home: not sent") && lines[0].contains("rate-limit of 600s")
    );
    // The database keeps it for the next agent.
    let db = Db::open_read_only(&path).unwrap();
    assert_eq!(db.notice_sent("home", Event::Failure, "ops").unwrap(), Some("2026-12-01T03:11:00Z".parse().unwrap()));
    assert_eq!(db.notice_sent("home", Event::Failure, "other").unwrap(), Some("2026-12-01T03:05:00Z".parse().unwrap()));
}

#[test]
fn a_failed_send_is_not_counted_by_the_rate_limit() {
    let s = Server::start(&[(500, ""), (200, "")]);
    let (log, _lines) = logger();
    let d = Dispatcher::new(options(&[]), Box::new(MemoryNotices::default()), log);
    let ops = webhook("ops", s.url("/ops"), Preset::Json);
    d.dispatch(&ops, &message("home", Event::Failure));
    d.dispatch(&ops, &message("home", Event::Failure));
    d.shutdown(Duration::from_secs(10));
    assert_eq!(s.count.load(Ordering::SeqCst), 2, "the second was sent: the first never got through");
}

// ---------------------------------------------------------------- e-mail through mailpit

struct Smtp {
    addr: String,
    api: String,
    cacert: PathBuf,
    user: String,
    password: String,
}

/// The SMTP test server's variables, or `None` when `COFFER_TEST_SKIP` skips
/// the `smtp` group; a test without them fails, saying how to run it.
fn smtp() -> Option<Smtp> {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    if let (Some(addr), Some(api), Some(cacert), Some(user), Some(password)) = (
        var("COFFER_TEST_SMTP"),
        var("COFFER_TEST_SMTP_API"),
        var("COFFER_TEST_SMTP_CACERT"),
        var("COFFER_TEST_SMTP_USER"),
        var("COFFER_TEST_SMTP_PASSWORD"),
    ) {
        return Some(Smtp { addr, api, cacert: cacert.into(), user, password });
    }
    let skip = var("COFFER_TEST_SKIP").unwrap_or_default();
    let test = std::thread::current().name().unwrap_or("a test").to_string();
    if !skip.split([',', ' ']).any(|g| g.trim().eq_ignore_ascii_case("smtp")) {
        panic!(
            "{test} needs the SMTP test server (COFFER_TEST_SMTP and the other COFFER_TEST_SMTP_* variables), which is \
             not set: run the tests with `bash .ci/test.sh` (the README's test command installs and starts every test \
             server), or skip this group by name with COFFER_TEST_SKIP=smtp"
        );
    }
    eprintln!("skipped: COFFER_TEST_SKIP={skip} skips the smtp tests");
    if let Some(log) = std::env::var_os("COFFER_TEST_SKIP_LOG")
        && let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(log)
    {
        let _ = f.write_all(format!("smtp {test}\n").as_bytes());
    }
    None
}

fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    format!("{prefix}-{}-{nanos}", std::process::id())
}

fn mail_notifier(s: &Smtp, dir: &std::path::Path, password: &str) -> NotifierConfig {
    let file = dir.join("smtp-password");
    std::fs::write(&file, format!("{password}\nsecond line ignored\n")).unwrap();
    NotifierConfig {
        name: "mail".into(),
        target: Target::Mail(MailConfig {
            smtp: format!("smtp://{}", s.addr),
            from: "coffer@nas.example".into(),
            to: vec!["admin@example.net".into(), "Ops <ops@example.net>".into()],
            username: Some(s.user.clone()),
            password_file: Some(file),
        }),
        cacert: Some(s.cacert.clone()),
        rate_limit: Duration::from_secs(600),
    }
}

/// The message mailpit holds with `subject`, with its text.
fn find_mail(s: &Smtp, subject: &str) -> (serde_json::Value, String) {
    let client = reqwest::blocking::Client::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let get = |url: String| -> serde_json::Value {
            serde_json::from_str(&client.get(url).send().unwrap().text().unwrap()).unwrap()
        };
        let list = get(format!("{}/api/v1/messages?limit=500", s.api));
        if let Some(m) = list["messages"].as_array().unwrap().iter().find(|m| m["Subject"] == subject) {
            let id = m["ID"].as_str().unwrap();
            let full = get(format!("{}/api/v1/message/{id}", s.api));
            return (m.clone(), full["Text"].as_str().unwrap().to_string());
        }
        assert!(Instant::now() < deadline, "mailpit has no message with subject {subject:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn mail_goes_over_starttls_with_the_ca_and_the_login() {
    let Some(s) = smtp() else { return };
    let dir = tempfile::tempdir().unwrap();
    let job = unique("mail");
    let cfg = mail_notifier(&s, dir.path(), &s.password);
    quick().send(&cfg, &message(&job, Event::Failure)).unwrap();
    let (m, text) = find_mail(&s, &format!("coffer: {job} failure"));
    assert_eq!(m["From"]["Address"], "coffer@nas.example");
    let to: Vec<&str> = m["To"].as_array().unwrap().iter().map(|t| t["Address"].as_str().unwrap()).collect();
    assert_eq!(to, vec!["admin@example.net", "ops@example.net"]);
    assert_eq!(m["Username"], s.user.as_str(), "logged in with the password file's first line");
    assert!(text.contains(&format!("The backup of job {job} on nas failed.")), "{text}");
    assert!(text.contains("error: storage refused the connection"), "{text}");
    assert!(text.contains("event: failure") && text.contains("host: nas"), "{text}");
}

#[test]
fn mail_through_the_dispatcher() {
    let Some(s) = smtp() else { return };
    let dir = tempfile::tempdir().unwrap();
    let job = unique("dispatch");
    let (log, lines) = logger();
    let d = Dispatcher::new(options(&[10]), Box::new(MemoryNotices::default()), log);
    d.dispatch(&mail_notifier(&s, dir.path(), &s.password), &message(&job, Event::Recovery));
    d.shutdown(Duration::from_secs(20));
    assert!(lines.lock().unwrap().is_empty(), "{:#?}", lines.lock().unwrap());
    let (_, text) = find_mail(&s, &format!("coffer: {job} recovery"));
    assert!(text.contains("snapshot: 5f3a9c01"), "{text}");
}

#[test]
fn mail_without_the_ca_or_with_another_fails_clearly() {
    let Some(s) = smtp() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = mail_notifier(&s, dir.path(), &s.password);
    cfg.cacert = None;
    let err = quick().send(&cfg, &message("home", Event::Failure)).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, NotifyError::Mail { .. }), "{err:?}");
    assert!(msg.starts_with(&format!("notifier mail: cannot send mail through smtp://{}", s.addr)), "{msg}");
    assert!(msg.contains("certificate") && msg.contains("give that CA's PEM file as cacert"), "{msg}");

    // A CA of its own, which did not sign the server's certificate.
    let other = dir.path().join("other-ca.pem");
    let made = std::process::Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ed25519", "-nodes", "-days", "1", "-subj", "/CN=another CA"])
        .args(["-addext", "basicConstraints=critical,CA:TRUE", "-keyout"])
        .arg(dir.path().join("other-key.pem"))
        .arg("-out")
        .arg(&other)
        .output()
        .expect("openssl runs");
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    cfg.cacert = Some(other);
    let err = quick().send(&cfg, &message("home", Event::Failure)).unwrap_err();
    eprintln!("without the CA: {msg}\nanother CA: {err}");
    assert!(err.to_string().contains("UnknownIssuer") || err.to_string().contains("unknown issuer"), "{err}");
}

#[test]
fn a_wrong_smtp_password_fails_without_showing_it() {
    let Some(s) = smtp() else { return };
    let dir = tempfile::tempdir().unwrap();
    let cfg = mail_notifier(&s, dir.path(), "WrOnGpAsSwOrD");
    let err = quick().send(&cfg, &message("home", Event::Failure)).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, NotifyError::Mail { .. }), "{err:?}");
    assert!(!msg.contains("WrOnGpAsSwOrD") && !format!("{err:?}").contains("WrOnGpAsSwOrD"), "{msg}");
    eprintln!("wrong password: {msg}");
    assert!(msg.contains("535") || msg.to_lowercase().contains("auth"), "{msg}");
}

#[test]
fn mail_password_file_problems_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("empty");
    std::fs::write(&file, "\nsecret on the second line\n").unwrap();
    let cfg = NotifierConfig {
        name: "mail".into(),
        target: Target::Mail(MailConfig {
            smtp: "smtp+insecure://127.0.0.1:1".into(),
            from: "coffer@nas.example".into(),
            to: vec!["admin@example.net".into()],
            username: Some("coffer".into()),
            password_file: Some(file.clone()),
        }),
        cacert: None,
        rate_limit: Duration::from_secs(600),
    };
    let err = quick().send(&cfg, &message("home", Event::Failure)).unwrap_err();
    assert!(matches!(err, NotifyError::PasswordFile { .. }), "{err:?}");
    assert!(err.to_string().contains(&file.display().to_string()) && err.to_string().contains("first line is empty"));
    assert!(!err.to_string().contains("secret on the second line"));
}

#[test]
fn plain_text_mail_to_a_host_that_is_not_loopback_is_refused() {
    let (addr, count) = silent_server();
    let _ = addr;
    let cfg = NotifierConfig {
        name: "mail".into(),
        target: Target::Mail(MailConfig {
            smtp: "smtp+insecure://mail.example.net:25".into(),
            from: "coffer@nas.example".into(),
            to: vec!["admin@example.net".into()],
            username: None,
            password_file: None,
        }),
        cacert: None,
        rate_limit: Duration::from_secs(600),
    };
    let t0 = Instant::now();
    let err = quick().send(&cfg, &message("home", Event::Failure)).unwrap_err();
    assert!(matches!(err, NotifyError::Config { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.starts_with("notifier mail: smtp+insecure://"), "{msg}");
    assert!(msg.contains("loopback") && msg.contains("mail.example.net"), "{msg}");
    assert!(t0.elapsed() < Duration::from_millis(500), "refused before any connection");
    assert_eq!(count.load(Ordering::SeqCst), 0);
}

#[test]
fn plain_text_mail_to_loopback_is_sent() {
    // A minimal SMTP server on 127.0.0.1 that offers no STARTTLS and takes one message.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = channel::<String>();
    std::thread::spawn(move || {
        let (conn, _) = listener.accept().unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut w = conn.try_clone().unwrap();
        let mut r = BufReader::new(conn);
        let mut said = String::new();
        write!(w, "220 test ESMTP\r\n").unwrap();
        let mut line = String::new();
        while r.read_line(&mut line).unwrap_or(0) > 0 {
            said.push_str(&line);
            let cmd = line.trim_end().to_ascii_uppercase();
            line.clear();
            if cmd.starts_with("EHLO") {
                write!(w, "250-test\r\n250 8BITMIME\r\n").unwrap();
            } else if cmd == "DATA" {
                write!(w, "354 go on\r\n").unwrap();
                loop {
                    let mut l = String::new();
                    r.read_line(&mut l).unwrap();
                    said.push_str(&l);
                    if l == ".\r\n" {
                        break;
                    }
                }
                write!(w, "250 queued\r\n").unwrap();
            } else if cmd == "QUIT" {
                write!(w, "221 bye\r\n").unwrap();
                break;
            } else {
                write!(w, "250 ok\r\n").unwrap();
            }
        }
        tx.send(said).unwrap();
    });
    let cfg = NotifierConfig {
        name: "local".into(),
        target: Target::Mail(MailConfig {
            smtp: format!("smtp+insecure://{addr}"),
            from: "coffer@nas.example".into(),
            to: vec!["root@localhost".into()],
            username: None,
            password_file: None,
        }),
        cacert: None,
        rate_limit: Duration::from_secs(600),
    };
    quick().send(&cfg, &message("home", Event::Success)).unwrap();
    let said = rx.recv_timeout(Duration::from_secs(20)).unwrap();
    assert!(said.starts_with("EHLO nas\r\n"), "{said}");
    assert!(said.contains("MAIL FROM:<coffer@nas.example>") && said.contains("RCPT TO:<root@localhost>"), "{said}");
    assert!(said.contains("Subject: coffer: home success\r\n"), "{said}");
    assert!(said.contains("The backup of job home on nas succeeded."), "{said}");
}
