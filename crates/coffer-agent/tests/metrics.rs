//! Metrics: the text checked line by line as Prometheus reads it, made from a
//! real state database, written as a textfile, and served over real HTTP to
//! well-behaved and hostile clients.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use coffer_agent::config::Kind;
use coffer_agent::metrics::{
    BackupCounts, JobInput, JobMetrics, MetricsError, MetricsSnapshot, RepositoryMetrics, from_db, render, serve,
    write_textfile,
};
use coffer_agent::state::{Db, Finish, Outcome, Trigger};
use jiff::Timestamp;

// ---------------------------------------------------------------- a checker of the text format

#[derive(Debug, PartialEq)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// Parses Prometheus text format 0.0.4 strictly: every line a HELP, a TYPE or
/// a sample `name{labels} value`; every sample's family has a TYPE line
/// before it, TYPE once per family, and the same series never twice.
fn parse(text: &str) -> Vec<Sample> {
    assert!(text.is_empty() || text.ends_with('\n'), "the text ends with a newline");
    let mut types: HashMap<String, String> = HashMap::new();
    let mut seen = BTreeSet::new();
    let mut samples = Vec::new();
    let name_ok = |n: &str| {
        !n.is_empty()
            && n.chars()
                .enumerate()
                .all(|(i, c)| c.is_ascii_alphabetic() || c == '_' || c == ':' || (i > 0 && c.is_ascii_digit()))
    };
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# ") {
            let mut parts = rest.splitn(3, ' ');
            let (what, name, arg) = (parts.next().unwrap(), parts.next().unwrap(), parts.next().unwrap_or(""));
            assert!(name_ok(name), "bad metric name in {line:?}");
            match what {
                "HELP" => assert!(!arg.is_empty(), "empty HELP: {line:?}"),
                "TYPE" => {
                    assert!(["counter", "gauge", "histogram", "summary", "untyped"].contains(&arg), "{line:?}");
                    assert!(types.insert(name.to_string(), arg.to_string()).is_none(), "TYPE twice: {line:?}");
                }
                _ => panic!("unknown comment {line:?}"),
            }
            continue;
        }
        let name_end = line.find(['{', ' ']).unwrap_or_else(|| panic!("no value: {line:?}"));
        let name = &line[..name_end];
        assert!(name_ok(name), "bad name in {line:?}");
        assert!(types.contains_key(name), "{name} has no TYPE before its sample {line:?}");
        let mut labels = BTreeMap::new();
        let mut rest = &line[name_end..];
        if let Some(r) = rest.strip_prefix('{') {
            let mut chars = r.char_indices().peekable();
            let end;
            loop {
                // label name
                let start = chars.peek().unwrap().0;
                let mut eq = None;
                for (i, c) in chars.by_ref() {
                    if c == '=' {
                        eq = Some(i);
                        break;
                    }
                }
                let key = &r[start..eq.expect("a label without =")];
                assert!(name_ok(key), "bad label name {key:?} in {line:?}");
                assert_eq!(chars.next().map(|(_, c)| c), Some('"'), "label value not quoted in {line:?}");
                let mut value = String::new();
                loop {
                    match chars.next().unwrap_or_else(|| panic!("unterminated label value in {line:?}")).1 {
                        '\\' => match chars.next().unwrap().1 {
                            '\\' => value.push('\\'),
                            '"' => value.push('"'),
                            'n' => value.push('\n'),
                            c => panic!("bad escape \\{c} in {line:?}"),
                        },
                        '"' => break,
                        '\n' => panic!("raw newline in {line:?}"),
                        c => value.push(c),
                    }
                }
                assert!(labels.insert(key.to_string(), value).is_none(), "label twice in {line:?}");
                match chars.next() {
                    Some((_, ',')) => continue,
                    Some((i, '}')) => {
                        end = i;
                        break;
                    }
                    other => panic!("unexpected {other:?} in {line:?}"),
                }
            }
            rest = &r[end + 1..];
        }
        let value = rest.strip_prefix(' ').unwrap_or_else(|| panic!("no space before the value in {line:?}"));
        let value: f64 = match value {
            "NaN" => f64::NAN,
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("bad value {v:?} in {line:?}")),
        };
        assert!(seen.insert((name.to_string(), format!("{labels:?}"))), "series twice: {line:?}");
        samples.push(Sample { name: name.to_string(), labels, value });
    }
    samples
}

fn find<'a>(samples: &'a [Sample], name: &str, labels: &[(&str, &str)]) -> Option<&'a Sample> {
    samples
        .iter()
        .find(|s| s.name == name && labels.iter().all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v)))
}

fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    find(samples, name, labels).unwrap_or_else(|| panic!("no {name} {labels:?}")).value
}

#[test]
fn the_checker_refuses_bad_text() {
    for bad in [
        "coffer_x 1\n",                                      // no TYPE
        "# TYPE coffer_x gauge\ncoffer_x{job=\"a} 1\n",      // unterminated
        "# TYPE coffer_x gauge\ncoffer_x{job=\"a\\q\"} 1\n", // bad escape
        "# TYPE coffer_x gauge\ncoffer_x one\n",             // bad value
        "# TYPE coffer_x gauge\ncoffer_x 1\ncoffer_x 2\n",   // series twice
    ] {
        assert!(std::panic::catch_unwind(|| parse(bad)).is_err(), "accepted {bad:?}");
    }
}

// ---------------------------------------------------------------- rendering

fn ts(s: &str) -> Timestamp {
    s.parse().unwrap()
}

#[test]
fn render_writes_every_metric_with_escaped_labels() {
    let hostile = "we\"ird\\job\nname";
    let snap = MetricsSnapshot {
        jobs: vec![
            JobMetrics {
                job: hostile.into(),
                kind: Kind::Backup,
                last_success: Some(ts("2026-12-01T03:00:30.5Z")),
                last_run_end: Some(ts("2026-12-01T03:00:30.5Z")),
                last_run_duration: Some(30.25),
                last_run_success: Some(true),
                runs_total: vec![(Outcome::Success, 4), (Outcome::Failure, 1)],
                overdue: false,
                next_run: Some(ts("2026-12-02T03:00:00Z")),
                last_backup: Some(BackupCounts { bytes_read: 1000, bytes_added: 200, files: 30, errors: 2 }),
            },
            JobMetrics {
                job: "work".into(),
                kind: Kind::Check,
                last_success: None,
                last_run_end: None,
                last_run_duration: None,
                last_run_success: None,
                runs_total: vec![],
                overdue: true,
                next_run: None,
                last_backup: None,
            },
        ],
        repositories: vec![RepositoryMetrics {
            job: hostile.into(),
            repository: "s3:https://s3.example.net/b".into(),
            snapshots: Some(12),
            size_bytes: Some(1 << 40),
            last_check: Some(ts("2026-11-30T04:30:00Z")),
            verified_ratio: Some(0.5),
        }],
    };
    let text = render(&snap);
    let s = parse(&text);
    let j = [("job", hostile), ("kind", "backup")];
    assert_eq!(value(&s, "coffer_job_last_success_timestamp_seconds", &j), seconds_of("2026-12-01T03:00:30.5Z"));
    assert_eq!(value(&s, "coffer_job_last_run_timestamp_seconds", &j), seconds_of("2026-12-01T03:00:30.5Z"));
    assert_eq!(value(&s, "coffer_job_last_run_duration_seconds", &j), 30.25);
    assert_eq!(value(&s, "coffer_job_last_run_success", &j), 1.0);
    assert_eq!(value(&s, "coffer_job_runs_total", &[("job", hostile), ("outcome", "success")]), 4.0);
    assert_eq!(value(&s, "coffer_job_runs_total", &[("job", hostile), ("outcome", "failure")]), 1.0);
    assert_eq!(value(&s, "coffer_job_overdue", &j), 0.0);
    assert_eq!(value(&s, "coffer_job_overdue", &[("job", "work"), ("kind", "check")]), 1.0);
    assert_eq!(value(&s, "coffer_job_next_run_timestamp_seconds", &j), seconds_of("2026-12-02T03:00:00Z"));
    assert_eq!(value(&s, "coffer_job_last_bytes_read", &j), 1000.0);
    assert_eq!(value(&s, "coffer_job_last_bytes_added", &j), 200.0);
    assert_eq!(value(&s, "coffer_job_last_files", &j), 30.0);
    assert_eq!(value(&s, "coffer_job_last_errors", &j), 2.0);
    let r = [("job", hostile), ("repository", "s3:https://s3.example.net/b")];
    assert_eq!(value(&s, "coffer_repository_snapshots", &r), 12.0);
    assert_eq!(value(&s, "coffer_repository_size_bytes", &r), (1u64 << 40) as f64);
    assert_eq!(value(&s, "coffer_repository_last_check_timestamp_seconds", &r), seconds_of("2026-11-30T04:30:00Z"));
    assert_eq!(value(&s, "coffer_repository_verified_ratio", &r), 0.5);
    // What is not known is left out, not made 0.
    assert!(find(&s, "coffer_job_last_run_success", &[("job", "work")]).is_none());
    assert!(text.contains("# TYPE coffer_job_runs_total counter\n"));
    assert!(text.contains("# TYPE coffer_job_overdue gauge\n"));
    assert!(text.contains(r#"job="we\"ird\\job\nname""#), "{text}");
    assert_eq!(render(&MetricsSnapshot::default()), "");
}

// ---------------------------------------------------------------- from the state database

fn run(db: &Db, job: &str, kind: Kind, start: &str, secs: i64, outcome: Outcome, summary: Option<serde_json::Value>) {
    let started = ts(start);
    let id = db.start_run(job, kind, Trigger::Schedule, None, started, 1).unwrap();
    let ended = started.checked_add(jiff::SignedDuration::from_secs(secs)).unwrap();
    db.finish_run(
        id,
        Finish { ended, outcome, exit_code: None, snapshot: None, summary: summary.as_ref(), error: None },
    )
    .unwrap();
}

fn backup_summary(read: u64, added: u64) -> serde_json::Value {
    serde_json::json!({
        "type": "summary", "repository": "/srv/coffer", "snapshot_id": "ab12", "skipped": 2, "missing_paths": 1,
        "summary": {"files_new": 5, "files_changed": 3, "files_unchanged": 92, "bytes_read": read, "bytes_added": added},
        "stats": {"snapshots_count": 17, "total_size": 123456789}
    })
}

fn check_summary(packs: u64, read: u64) -> serde_json::Value {
    serde_json::json!({"type": "summary", "ok": true, "packs": packs, "packs_read": read})
}

#[test]
fn from_db_reads_the_history() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(&dir.path().join("s.sqlite")).unwrap();
    run(&db, "home", Kind::Backup, "2026-12-01T03:00:00Z", 60, Outcome::Success, Some(backup_summary(10, 1)));
    run(&db, "home", Kind::Backup, "2026-12-02T03:00:00Z", 90, Outcome::Warning, Some(backup_summary(5000, 700)));
    run(&db, "home", Kind::Backup, "2026-12-03T03:00:00Z", 12, Outcome::Failure, None);
    // Three rotating checks of four packs each (read-all-every = 3), and a failed one.
    run(&db, "home", Kind::Check, "2026-11-28T04:30:00Z", 5, Outcome::Success, Some(check_summary(400, 100)));
    run(&db, "home", Kind::Check, "2026-11-29T04:30:00Z", 5, Outcome::Success, Some(check_summary(400, 130)));
    run(&db, "home", Kind::Check, "2026-11-30T04:30:00Z", 5, Outcome::Success, Some(check_summary(400, 130)));
    run(&db, "home", Kind::Check, "2026-12-01T04:30:00Z", 5, Outcome::Failure, None);
    run(&db, "home", Kind::Check, "2026-12-02T04:30:00Z", 10, Outcome::Success, Some(check_summary(400, 140)));
    let id = db.start_run("home", Kind::Backup, Trigger::Manual, None, ts("2026-12-04T00:00:00Z"), 1).unwrap();
    let _ = id; // still running: neither the last run nor a count

    let jobs = [
        JobInput { name: "home".into(), kinds: vec![Kind::Backup, Kind::Check], check_window: 3 },
        JobInput { name: "new".into(), kinds: vec![Kind::Backup], check_window: 1 },
    ];
    let next: BTreeMap<(String, Kind), Timestamp> =
        [(("home".to_string(), Kind::Backup), ts("2026-12-05T03:00:00Z"))].into_iter().collect();
    let overdue: BTreeSet<(String, Kind)> = [("new".to_string(), Kind::Backup)].into_iter().collect();
    let snap = from_db(&db, &jobs, &next, &overdue).unwrap();
    let s = parse(&render(&snap));
    let hb = [("job", "home"), ("kind", "backup")];
    assert_eq!(value(&s, "coffer_job_last_run_timestamp_seconds", &hb), seconds_of("2026-12-03T03:00:12Z"));
    assert_eq!(value(&s, "coffer_job_last_run_duration_seconds", &hb), 12.0);
    assert_eq!(value(&s, "coffer_job_last_run_success", &hb), 0.0);
    assert_eq!(value(&s, "coffer_job_last_success_timestamp_seconds", &hb), seconds_of("2026-12-02T03:01:30Z"));
    assert_eq!(value(&s, "coffer_job_next_run_timestamp_seconds", &hb), seconds_of("2026-12-05T03:00:00Z"));
    assert_eq!(value(&s, "coffer_job_overdue", &hb), 0.0);
    assert_eq!(value(&s, "coffer_job_overdue", &[("job", "new"), ("kind", "backup")]), 1.0);
    // The counts of the last backup that wrote a snapshot (the warning).
    assert_eq!(value(&s, "coffer_job_last_bytes_read", &hb), 5000.0);
    assert_eq!(value(&s, "coffer_job_last_bytes_added", &hb), 700.0);
    assert_eq!(value(&s, "coffer_job_last_files", &hb), 100.0);
    assert_eq!(value(&s, "coffer_job_last_errors", &hb), 3.0);
    for (outcome, n) in [("success", 1.0), ("warning", 1.0), ("failure", 1.0), ("skipped", 0.0), ("interrupted", 0.0)] {
        assert_eq!(value(&s, "coffer_job_runs_total", &[("job", "home"), ("kind", "backup"), ("outcome", outcome)]), n);
    }
    assert!(find(&s, "coffer_job_runs_total", &[("outcome", "running")]).is_none());
    assert_eq!(value(&s, "coffer_job_runs_total", &[("job", "home"), ("kind", "check"), ("outcome", "success")]), 4.0);
    let r = [("job", "home"), ("repository", "/srv/coffer")];
    assert_eq!(value(&s, "coffer_repository_snapshots", &r), 17.0);
    assert_eq!(value(&s, "coffer_repository_size_bytes", &r), 123456789.0);
    assert_eq!(value(&s, "coffer_repository_last_check_timestamp_seconds", &r), seconds_of("2026-12-02T04:30:10Z"));
    // The last three successful checks read 130 + 130 + 140 of 400 packs.
    assert_eq!(value(&s, "coffer_repository_verified_ratio", &r), 1.0);
    // A job with no runs has counts of 0 and nothing else.
    let nb = [("job", "new"), ("kind", "backup")];
    assert!(find(&s, "coffer_job_last_run_timestamp_seconds", &nb).is_none());
    assert_eq!(value(&s, "coffer_job_runs_total", &[("job", "new"), ("outcome", "success")]), 0.0);

    let jobs = [JobInput { name: "home".into(), kinds: vec![Kind::Check], check_window: 2 }];
    let s = parse(&render(&from_db(&db, &jobs, &BTreeMap::new(), &BTreeSet::new()).unwrap()));
    assert_eq!(value(&s, "coffer_repository_verified_ratio", &[("job", "home")]), 270.0 / 400.0);
}

fn seconds_of(t: &str) -> f64 {
    ts(t).as_millisecond() as f64 / 1000.0
}

// ---------------------------------------------------------------- the textfile

#[test]
fn the_textfile_is_replaced_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("coffer.prom");
    write_textfile(&path, "# TYPE a gauge\na 1\n").unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "# TYPE a gauge\na 1\n");
    write_textfile(&path, "# TYPE a gauge\na 2\n").unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "# TYPE a gauge\na 2\n");
    assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o644);
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, vec![std::ffi::OsString::from("coffer.prom")], "no temporary file is left");

    let err = write_textfile(&dir.path().join("missing/coffer.prom"), "x").unwrap_err();
    assert!(matches!(err, MetricsError::Textfile { .. }));
    assert!(err.to_string().contains("missing/coffer.prom"), "{err}");
}

// ---------------------------------------------------------------- the server

fn start() -> (coffer_agent::metrics::MetricsServer, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let c = Arc::clone(&calls);
    let server = serve(
        "127.0.0.1:0".parse().unwrap(),
        false,
        Arc::new(move || {
            let n = c.fetch_add(1, Ordering::SeqCst) + 1;
            format!(
                "# HELP coffer_test_scrapes Scrapes.\n# TYPE coffer_test_scrapes counter\ncoffer_test_scrapes {n}\n"
            )
        }),
    )
    .unwrap();
    (server, calls)
}

/// Sends `request` raw and reads the answer until the server closes.
fn raw(addr: SocketAddr, request: &[u8]) -> String {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let _ = c.write_all(request);
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

fn status(answer: &str) -> u16 {
    answer.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("no status in {answer:?}"))
}

fn get(addr: SocketAddr, path: &str) -> String {
    raw(addr, format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes())
}

#[test]
fn get_metrics_serves_the_text() {
    let (server, calls) = start();
    let answer = get(server.addr(), "/metrics");
    assert_eq!(status(&answer), 200, "{answer}");
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    assert!(head.to_lowercase().contains("content-type: text/plain; version=0.0.4; charset=utf-8"), "{head}");
    let s = parse(body);
    assert_eq!(value(&s, "coffer_test_scrapes", &[]), 1.0, "the text is made afresh for each request");
    assert_eq!(status(&get(server.addr(), "/metrics?x=1")), 200);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    let addr = server.addr();
    server.shutdown();
    assert!(TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_err(), "shut down: nothing listens");
}

#[test]
fn other_paths_are_404_and_other_methods_405() {
    let (server, calls) = start();
    let a = server.addr();
    for path in ["/", "/metrics/", "/../etc/passwd", "/metrics/../../etc/passwd", "/%2e%2e/etc/passwd", "/favicon.ico"]
    {
        let answer = get(a, path);
        assert_eq!(status(&answer), 404, "{path}: {answer}");
        assert!(!answer.contains("root:"), "{path}");
    }
    for method in ["POST", "PUT", "DELETE", "HEAD", "OPTIONS"] {
        let answer = raw(
            a,
            format!("{method} /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        );
        assert_eq!(status(&answer), 405, "{method}: {answer}");
        assert!(answer.to_lowercase().contains("allow: get"), "{answer}");
    }
    let answer = raw(a, b"GARBAGE\r\n\r\n");
    assert!(answer.is_empty() || status(&answer) == 400, "{answer}");
    assert_eq!(calls.load(Ordering::SeqCst), 0, "none of these made the metrics");
}

#[test]
fn a_huge_header_is_refused() {
    let (server, calls) = start();
    let big = format!("GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n", "a".repeat(64 * 1024));
    let answer = raw(server.addr(), big.as_bytes());
    assert!(answer.is_empty() || status(&answer) == 431, "{}", &answer[..answer.len().min(200)]);
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert_eq!(status(&get(server.addr(), "/metrics")), 200, "the server still serves");
}

#[test]
fn a_silent_connection_blocks_no_one_and_is_closed() {
    let (server, _) = start();
    let mut idle = TcpStream::connect(server.addr()).unwrap();
    let mut partial = TcpStream::connect(server.addr()).unwrap();
    partial.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n").unwrap();
    let t0 = Instant::now();
    assert_eq!(status(&get(server.addr(), "/metrics")), 200);
    assert!(t0.elapsed() < Duration::from_secs(2), "took {:?}", t0.elapsed());
    // The one that sent half a request is closed at the header timeout.
    partial.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut buf = Vec::new();
    let _ = partial.read_to_end(&mut buf);
    let waited = t0.elapsed();
    assert!(waited >= Duration::from_secs(9) && waited < Duration::from_secs(16), "closed after {waited:?}");
    idle.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let _ = idle.read_to_end(&mut buf);
    assert!(t0.elapsed() < Duration::from_secs(65), "the idle one is closed too");
}

#[test]
fn too_many_connections_are_closed_at_once_and_the_rest_served() {
    let (server, _) = start();
    let held: Vec<TcpStream> =
        (0..coffer_agent::metrics::MAX_CONNECTIONS).map(|_| TcpStream::connect(server.addr()).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(200));
    let t0 = Instant::now();
    let answer = get(server.addr(), "/metrics");
    assert!(answer.is_empty(), "over the limit: closed unanswered ({answer})");
    assert!(t0.elapsed() < Duration::from_secs(2));
    drop(held);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(status(&get(server.addr(), "/metrics")), 200);
}

#[test]
fn a_non_loopback_address_needs_metrics_remote() {
    let source: coffer_agent::metrics::Source = Arc::new(String::new);
    let err = serve("0.0.0.0:0".parse().unwrap(), false, Arc::clone(&source)).err().expect("refused");
    assert!(matches!(err, MetricsError::NotLoopback { .. }));
    assert!(err.to_string().contains("0.0.0.0:0") && err.to_string().contains("metrics-remote = true"), "{err}");
    let server = serve("0.0.0.0:0".parse().unwrap(), true, source).unwrap();
    let port = server.addr().port();
    assert_eq!(status(&get(format!("127.0.0.1:{port}").parse().unwrap(), "/metrics")), 200);

    drop(server);

    let (first, _) = start();
    let err = serve(first.addr(), false, Arc::new(String::new)).err().expect("the port is taken");
    assert!(matches!(err, MetricsError::Bind { .. }));
    assert!(err.to_string().contains(&first.addr().to_string()), "{err}");
}
