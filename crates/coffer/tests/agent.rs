//! The agent end to end (docs/design.md#agent), through the real binary: `coffer
//! run` with its hooks, forget and the state database; failing jobs with their
//! hook, their webhook (an HTTP server started here) and their mail (the SMTP
//! test server); `coffer agent` running two jobs on second-level schedules
//! against a local and an S3 repository, scraped as Prometheus text; SIGTERM
//! during a backup; a restart that catches up a missed run once; bad
//! configuration refused; the systemd units written and removed.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use coffer_backend::testing::servers::{Server, absent};
use common::remote::{Remote, var};
use common::*;

/// The passphrase the agent's environment holds, which no job uses.
const WRONG: &str = "not the passphrase of any repository";

/// A scratch directory with a jobs file, a passphrase file and a state database.
struct Agent {
    env: Env,
}

impl Agent {
    fn new() -> Agent {
        let env = Env::new();
        std::fs::write(env.path("pass"), format!("{PASSWORD}\n")).unwrap();
        std::fs::create_dir_all(env.path("home")).unwrap();
        Agent { env }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.env.path(rel)
    }

    fn write_jobs(&self, text: &str) {
        std::fs::write(self.path("jobs.toml"), text).unwrap();
    }

    /// `coffer` with the jobs file and the state here, and no repository of its
    /// own: what a job gives is all it has. The agent's environment holds a wrong
    /// COFFER_PASSWORD, which neither the job's steps (their passphrase is the
    /// job's password file) nor its hooks may see.
    fn cmd(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_coffer"));
        c.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.path("home"))
            .env("XDG_CONFIG_HOME", self.path("config"))
            .env("COFFER_JOBS", self.path("jobs.toml"))
            .env("COFFER_AGENT_STATE", self.path("state/agent.sqlite"))
            .env("COFFER_PASSWORD", WRONG)
            .env("COFFER_RETRY_BASE_MS", "20");
        c
    }

    fn run(&self, args: &[&str]) -> std::process::Output {
        self.cmd().args(args).output().unwrap()
    }

    fn status(&self) -> serde_json::Value {
        let out = self.run(&["--json", "agent", "status"]);
        assert_success(&out);
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// The status row of `job`'s `kind`.
    fn row(&self, job: &str, kind: &str) -> serde_json::Value {
        let s = self.status();
        s["jobs"].as_array().unwrap().iter().find(|r| r["job"] == job && r["kind"] == kind).cloned().unwrap()
    }
}

/// The repository's snapshots.
fn snapshots(a: &Agent, repo: &Path) -> Vec<serde_json::Value> {
    let out = a.env.cmd().env("COFFER_REPOSITORY", repo).args(["--json", "snapshots"]).output().unwrap();
    assert_success(&out);
    serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap().as_array().unwrap().clone()
}

fn wait_for(what: &str, secs: u64, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A running `coffer agent` whose standard error is collected line by line.
struct Daemon {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Daemon {
    fn start(a: &Agent) -> Daemon {
        let mut child = a.cmd().arg("agent").stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let l = Arc::clone(&lines);
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                eprintln!("agent: {line}");
                l.lock().unwrap().push(line);
            }
        });
        Daemon { child, lines }
    }

    fn has(&self, needle: &str) -> bool {
        self.lines.lock().unwrap().iter().any(|l| l.contains(needle))
    }

    fn wait_line(&self, needle: &str, secs: u64) -> String {
        wait_for(&format!("the agent to log {needle:?}"), secs, || self.has(needle));
        self.lines.lock().unwrap().iter().find(|l| l.contains(needle)).unwrap().clone()
    }

    /// SIGTERM; the agent must exit 0 within `secs`.
    fn terminate(mut self, secs: u64) {
        let pid = i32::try_from(self.child.id()).unwrap();
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(status.success(), "the agent exited {status} after SIGTERM: {:#?}", self.lines.lock().unwrap());
                return;
            }
            assert!(Instant::now() < deadline, "the agent did not stop within {secs} s of SIGTERM");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One request as an HTTP server started here received it.
struct Hit {
    path: String,
    body: Vec<u8>,
}

/// An HTTP server on loopback that answers 200 to every request and hands each over.
fn webhook_server() -> (String, Receiver<Hit>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let tx = tx.clone();
            std::thread::spawn(move || {
                conn.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                let mut r = BufReader::new(conn.try_clone().unwrap());
                let mut line = String::new();
                if r.read_line(&mut line).unwrap_or(0) == 0 {
                    return;
                }
                let path = line.split_whitespace().nth(1).unwrap_or_default().to_string();
                let mut len = 0usize;
                loop {
                    let mut h = String::new();
                    r.read_line(&mut h).unwrap();
                    let h = h.trim_end();
                    if h.is_empty() {
                        break;
                    }
                    if let Some((k, v)) = h.split_once(':')
                        && k.eq_ignore_ascii_case("content-length")
                    {
                        len = v.trim().parse().unwrap();
                    }
                }
                let mut body = vec![0; len];
                r.read_exact(&mut body).unwrap();
                let mut w = conn;
                let _ = w.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
                let _ = tx.send(Hit { path, body });
            });
        }
    });
    (format!("http://{addr}"), rx)
}

fn job_toml(name: &str, repo: &str, pass: &Path, paths: &[&Path], extra: &str) -> String {
    let paths: Vec<String> = paths.iter().map(|p| format!("{:?}", p.display().to_string())).collect();
    format!(
        "[job.{name}]\nrepository = {repo:?}\npassword-file = {:?}\npaths = [{}]\n{extra}\n",
        pass.display().to_string(),
        paths.join(", ")
    )
}

fn make_source(a: &Agent, dir: &str, files: usize, size: usize) -> PathBuf {
    let src = a.path(dir);
    std::fs::create_dir_all(&src).unwrap();
    for i in 0..files {
        std::fs::write(src.join(format!("f{i}")), random_bytes(size, i as u64 + 7)).unwrap();
    }
    src
}

#[test]
fn run_backs_up_forgets_runs_the_hooks_and_records_the_run() {
    let a = Agent::new();
    let src = make_source(&a, "src", 3, 10_000);
    let repo = a.env.repo().display().to_string();
    let hooks = format!(
        "forget = {{ keep-last = 2 }}\n[job.home.hooks]\nbefore = \"env > {before}\"\n\
         after-success = \"cat > {after}; env > {after_env}\"\nfinally = \"echo done >> {fin}\"\n",
        before = a.path("before.env").display(),
        after = a.path("after.json").display(),
        after_env = a.path("after.env").display(),
        fin = a.path("finally.txt").display(),
    );
    a.write_jobs(&job_toml("home", &repo, &a.path("pass"), &[&src], &hooks));
    for _ in 0..3 {
        assert_success(&a.run(&["run", "home"]));
    }
    assert_eq!(snapshots(&a, &a.env.repo()).len(), 2, "forget kept the last two");
    assert_eq!(std::fs::read_to_string(a.path("finally.txt")).unwrap(), "done\ndone\ndone\n");

    let out = a.run(&["--json", "run", "home"]);
    assert_success(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["type"], "run");
    assert_eq!(v["outcome"], "success");
    assert_eq!(v["trigger"], "manual");
    let snapshot = v["snapshot"].as_str().unwrap().to_string();
    assert_eq!(v["summary"]["forget"]["forgotten"].as_array().map(Vec::len), Some(1), "{v}");
    assert_eq!(v["summary"]["stats"]["snapshots_count"], 2, "{v}");
    assert_eq!(v["summary"]["repository"], repo.as_str());

    // The hooks' environment names the job and the run, never the passphrase.
    let env = std::fs::read_to_string(a.path("after.env")).unwrap();
    assert!(env.contains("COFFER_JOB=home\n") && env.contains("COFFER_JOB_KIND=backup\n"), "{env}");
    assert!(env.contains("COFFER_STATUS=success\n"), "{env}");
    assert!(env.contains(&format!("COFFER_SNAPSHOT_ID={snapshot}\n")), "{env}");
    assert!(env.contains(&format!("COFFER_REPOSITORY={repo}\n")), "{env}");
    assert!(!env.contains(PASSWORD) && !env.contains(WRONG) && !env.contains("COFFER_PASSWORD"), "{env}");
    let before = std::fs::read_to_string(a.path("before.env")).unwrap();
    assert!(before.contains("COFFER_STATUS=\n") && !before.contains(WRONG), "{before}");
    let record: serde_json::Value = serde_json::from_slice(&std::fs::read(a.path("after.json")).unwrap()).unwrap();
    assert_eq!(record["outcome"], "success");
    assert_eq!(record["snapshot"], snapshot.as_str());
    assert_eq!(record["summary"]["snapshot_id"], snapshot.as_str());

    // The run is in the state database; nothing there holds the passphrase.
    let row = a.row("home", "backup");
    assert_eq!(row["last"]["outcome"], "success");
    assert_eq!(row["last"]["snapshot"], snapshot.as_str());
    assert_eq!(row["last"]["trigger"], "manual");
    let db = std::fs::read(a.path("state/agent.sqlite")).unwrap();
    assert!(!db.windows(PASSWORD.len()).any(|w| w == PASSWORD.as_bytes()));
    let text = a.run(&["agent", "status"]);
    assert_success(&text);
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains("home") && text.contains(&snapshot[..8]), "{text}");

    // An unknown job, and --no-wait while the job's lock is held.
    let out = a.run(&["run", "nothere"]);
    let err = assert_code(&out, 2);
    assert!(err.contains("no job \"nothere\"; the jobs are home"), "{err}");
    let lock = std::fs::OpenOptions::new().write(true).open(a.path("state/locks/home.lock")).unwrap();
    lock.lock().unwrap();
    let err = assert_code(&a.run(&["run", "--no-wait", "home"]), 27);
    assert!(err.contains("job home is running already"), "{err}");
}

#[test]
fn a_failing_job_fires_its_hook_its_webhook_and_its_mail() {
    let a = Agent::new();
    let src = make_source(&a, "src", 1, 1000);
    let (url, hits) = webhook_server();
    let smtp = var("COFFER_TEST_SMTP");
    let mail = match &smtp {
        Some(addr) => {
            std::fs::write(a.path("smtp-pass"), var("COFFER_TEST_SMTP_PASSWORD").unwrap()).unwrap();
            format!(
                "[notify.mail]\nsmtp = \"smtp://{addr}\"\nfrom = \"coffer@agent.test\"\nto = [\"ops@agent.test\"]\n\
                 username = {:?}\npassword-file = {:?}\ncacert = {:?}\n",
                var("COFFER_TEST_SMTP_USER").unwrap(),
                a.path("smtp-pass").display().to_string(),
                var("COFFER_TEST_SMTP_CACERT").unwrap()
            )
        }
        None => {
            absent(Server::Smtp);
            String::new()
        }
    };
    let job = unique_name("broken");
    let notify = if smtp.is_some() { "[\"hook\", \"mail\"]" } else { "[\"hook\"]" };
    let missing = a.path("no-such-repository").display().to_string();
    let extra = format!(
        "notify = {notify}\n[job.{job}.hooks]\nafter-failure = \"env > {}; cat > {}\"\n",
        a.path("failure.env").display(),
        a.path("failure.json").display()
    );
    a.write_jobs(&format!(
        "{}\n[notify.hook]\nurl = \"{url}/hook\"\n{mail}",
        job_toml(&job, &missing, &a.path("pass"), &[&src], &extra)
    ));
    let out = a.run(&["run", &job]);
    let err = assert_code(&out, 10);
    assert!(err.contains("failure") && err.contains("no-such-repository"), "{err}");

    let env = std::fs::read_to_string(a.path("failure.env")).unwrap();
    assert!(env.contains("COFFER_STATUS=failure\n") && env.contains("COFFER_SNAPSHOT_ID=\n"), "{env}");
    let record: serde_json::Value = serde_json::from_slice(&std::fs::read(a.path("failure.json")).unwrap()).unwrap();
    assert_eq!(record["outcome"], "failure");
    assert!(record["error"].as_str().unwrap().contains("no-such-repository"), "{record}");

    let hit = hits.recv_timeout(Duration::from_secs(30)).expect("the webhook got no request");
    assert_eq!(hit.path, "/hook");
    let body: serde_json::Value = serde_json::from_slice(&hit.body).unwrap();
    assert_eq!(body["job"], job.as_str());
    assert_eq!(body["event"], "failure");
    assert_eq!(body["outcome"], "failure");
    assert!(body["error"].as_str().unwrap().contains("no-such-repository"), "{body}");

    if smtp.is_some() {
        let subject = format!("coffer: {job} failure");
        let api = var("COFFER_TEST_SMTP_API").unwrap();
        let api = api.trim_start_matches("http://").to_string();
        wait_for("the mail", 30, || {
            let (_, text) = http("GET", &api, "/api/v1/messages?limit=500");
            let list: serde_json::Value = serde_json::from_str(&text).unwrap();
            list["messages"].as_array().unwrap().iter().any(|m| m["Subject"] == subject.as_str())
        });
    }

    // A failing before hook skips the run: exit 1, nothing backed up.
    let skip = format!(
        "[job.{job}.hooks]\nbefore = \"echo not today >&2; exit 4\"\nafter-failure = \"echo $COFFER_STATUS > {}\"\n",
        a.path("skipped.txt").display()
    );
    a.write_jobs(&job_toml(&job, &a.env.repo().display().to_string(), &a.path("pass"), &[&src], &skip));
    let err = assert_code(&a.run(&["run", &job]), 1);
    assert!(err.contains("skipped") && err.contains("not today"), "{err}");
    assert_eq!(std::fs::read_to_string(a.path("skipped.txt")).unwrap(), "skipped\n");
    assert!(snapshots(&a, &a.env.repo()).is_empty());
}

fn unique_name(tag: &str) -> String {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    format!("{tag}-{}-{t}", std::process::id())
}

/// A plain HTTP/1.1 request to `addr` (host:port): the status and the body.
fn http(method: &str, addr: &str, path: &str) -> (u16, String) {
    let mut conn = std::net::TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(conn, "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n").unwrap();
    let mut answer = String::new();
    conn.read_to_string(&mut answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body =
        if head.to_ascii_lowercase().contains("transfer-encoding: chunked") { unchunk(body) } else { body.to_string() };
    (status, body)
}

/// The body of a chunked answer.
fn unchunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        body = &rest[n + 2..];
    }
    out
}

/// Prometheus text parsed into `name{labels} value` pairs.
fn scrape(addr: &str) -> Vec<(String, f64)> {
    let (status, text) = http("GET", addr, "/metrics");
    assert_eq!(status, 200, "{text}");
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with('#') || line.is_empty() {
            assert!(line.is_empty() || line.starts_with("# HELP ") || line.starts_with("# TYPE "), "{line}");
            continue;
        }
        let (name, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("not a sample: {line}"));
        out.push((name.to_string(), value.parse().unwrap_or_else(|_| panic!("not a value: {line}"))));
    }
    out
}

fn sample(samples: &[(String, f64)], name: &str) -> Option<f64> {
    samples.iter().find(|(n, _)| n == name).map(|(_, v)| *v)
}

#[test]
fn the_agent_runs_two_jobs_on_schedule_against_local_and_s3() {
    let Some(s3) = Remote::s3("agent") else { return };
    let a = Agent::new();
    let src = make_source(&a, "src", 2, 20_000);
    let mut storage = String::from("[job.remote.storage]\n");
    for (k, v) in &s3.env {
        storage.push_str(&format!("{k} = {v:?}\n"));
    }
    // The S3 repository, made as the agent's job will open it.
    let init = Command::new(env!("CARGO_BIN_EXE_coffer"))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", a.path("home"))
        .env("COFFER_PASSWORD", PASSWORD)
        .envs(s3.env.iter().map(|(k, v)| (k, v)))
        .args(["--repo", &s3.repo, "init", "--kdf-log-n", "10", "--insecure-kdf"])
        .output()
        .unwrap();
    assert_success(&init);
    let jobs = format!(
        "[agent]\nmetrics = \"127.0.0.1:0\"\ntextfile = {:?}\n\n{}{}\n{storage}",
        a.path("metrics.prom").display().to_string(),
        job_toml("local", &a.env.repo().display().to_string(), &a.path("pass"), &[&src], "schedule = \"*:*:0/2\""),
        job_toml(
            "remote",
            &s3.repo,
            &a.path("pass"),
            &[&src],
            "schedule = \"*:*:0/3\"\nretries = 1\nretry-delay = \"1s\""
        ),
    );
    a.write_jobs(&jobs);
    let d = Daemon::start(&a);
    let line = d.wait_line("metrics at http://", 30);
    let addr = line.split("http://").nth(1).unwrap().trim_end_matches("/metrics").to_string();
    d.wait_line("job \"local\" backup (schedule): success", 120);
    d.wait_line("job \"remote\" backup (schedule): success", 120);

    let samples = scrape(&addr);
    assert_eq!(sample(&samples, "coffer_job_last_run_success{job=\"local\",kind=\"backup\"}"), Some(1.0));
    assert_eq!(sample(&samples, "coffer_job_last_run_success{job=\"remote\",kind=\"backup\"}"), Some(1.0));
    assert!(
        sample(&samples, "coffer_job_runs_total{job=\"local\",kind=\"backup\",outcome=\"success\"}").unwrap() >= 1.0
    );
    assert_eq!(sample(&samples, "coffer_job_overdue{job=\"local\",kind=\"backup\"}"), Some(0.0));
    assert!(sample(&samples, "coffer_job_next_run_timestamp_seconds{job=\"local\",kind=\"backup\"}").is_some());
    let files = samples.iter().find(|(n, _)| n.starts_with("coffer_job_last_files{job=\"local\"")).unwrap().1;
    assert_eq!(files, 2.0);
    assert!(
        samples.iter().any(|(n, v)| n.starts_with("coffer_repository_snapshots{job=\"remote\"") && *v >= 1.0),
        "{samples:?}"
    );
    // Other paths and methods are refused.
    assert_eq!(http("GET", &addr, "/other").0, 404);
    assert_eq!(http("POST", &addr, "/metrics").0, 405);

    // SIGHUP with a broken file keeps the jobs running.
    std::fs::write(a.path("jobs.toml"), format!("{jobs}\n[job.bad]\nschedule = \"dialy\"\n")).unwrap();
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(i32::try_from(d.child.id()).unwrap(), libc::SIGHUP) };
    d.wait_line("configuration not reloaded", 30);
    std::fs::write(a.path("jobs.toml"), &jobs).unwrap();

    d.terminate(60);
    let prom = std::fs::read_to_string(a.path("metrics.prom")).unwrap();
    assert!(prom.contains("coffer_job_last_success_timestamp_seconds{job=\"local\",kind=\"backup\"}"), "{prom}");
    assert_success(&a.env.run(&["check", "--read-data"]));
    let check = s3.cmd().env("COFFER_REPOSITORY", &s3.repo).args(["check", "--read-data"]).output().unwrap();
    assert_success(&check);
}

#[test]
fn sigterm_during_a_backup_leaves_the_repository_clean() {
    let a = Agent::new();
    let src = make_source(&a, "src", 4, 2 << 20);
    // 8 MiB at 512 KiB/s: the backup runs for about 15 s.
    let extra = "schedule = \"*:*:0/1\"\nlimit-upload = 512";
    a.write_jobs(&job_toml("slow", &a.env.repo().display().to_string(), &a.path("pass"), &[&src], extra));
    let d = Daemon::start(&a);
    wait_for("the backup to run", 60, || a.row("slow", "backup")["running"].is_object());
    std::thread::sleep(Duration::from_secs(2));
    d.terminate(60);
    let row = a.row("slow", "backup");
    assert!(row["running"].is_null(), "{row}");
    assert_eq!(row["last"]["outcome"], "interrupted", "{row}");
    assert!(snapshots(&a, &a.env.repo()).is_empty(), "the interrupted backup wrote no snapshot");
    assert_success(&a.env.run(&["check", "--read-data"]));
    // The next run finishes it.
    a.write_jobs(&job_toml("slow", &a.env.repo().display().to_string(), &a.path("pass"), &[&src], ""));
    assert_success(&a.run(&["run", "slow"]));
    assert_eq!(snapshots(&a, &a.env.repo()).len(), 1);
}

#[test]
fn a_restart_catches_up_a_missed_week_once() {
    let a = Agent::new();
    let src = make_source(&a, "src", 1, 1000);
    // Hourly, half an hour from now, so that no scheduled run falls within the test.
    let minute = (jiff::Zoned::now().minute() + 30) % 60;
    a.write_jobs(&job_toml(
        "local",
        &a.env.repo().display().to_string(),
        &a.path("pass"),
        &[&src],
        &format!("schedule = \"*:{minute:02}:00\""),
    ));
    // First start: the job is seen, nothing is due yet.
    let d = Daemon::start(&a);
    d.wait_line("agent started", 30);
    d.terminate(30);
    assert!(a.row("local", "backup")["last"].is_null());
    // The machine sleeps for a week: the slot the database holds is a week old.
    let db = coffer_agent::state::Db::open(&a.path("state/agent.sqlite")).unwrap();
    let week_ago = jiff::Timestamp::now().checked_sub(jiff::SignedDuration::from_hours(24 * 7)).unwrap();
    db.set_slot("local", coffer_agent::config::Kind::Backup, week_ago).unwrap();
    drop(db);
    let d = Daemon::start(&a);
    d.wait_line("job \"local\" backup (catch-up): success", 60);
    std::thread::sleep(Duration::from_secs(3));
    d.terminate(30);
    let runs = a.status();
    let row = runs["jobs"].as_array().unwrap().iter().find(|r| r["job"] == "local").unwrap().clone();
    assert_eq!(row["last"]["trigger"], "catch-up");
    assert_eq!(snapshots(&a, &a.env.repo()).len(), 1, "168 missed runs are caught up once");
}

#[test]
fn bad_configuration_is_refused_with_file_line_and_key() {
    let a = Agent::new();
    a.write_jobs(
        "[job.home]\nrepository = \"/r\"\npassword-file = \"/p\"\npaths = [\"/home\"]\nschedule = \"dialy\"\n",
    );
    for args in [&["run", "home"][..], &["agent"], &["agent", "status"]] {
        let err = assert_code(&a.run(args), 2);
        assert!(err.contains("jobs.toml:5: job.home.schedule: \"dialy\""), "{args:?}: {err}");
    }
    a.write_jobs("[job.home]\nrepository = \"/r\"\npassword-file = \"/p\"\npaths = [\"/home\"]\n[job.home.storage]\nAWS_SECRET = \"x\"\n");
    let err = assert_code(&a.run(&["run", "home"]), 2);
    assert!(err.contains("job.home.storage.AWS_SECRET") && err.contains("not a storage variable"), "{err}");
    a.write_jobs("[job.home]\nrepository = \"/r\"\npassword = \"hunter2\"\npaths = [\"/home\"]\n");
    let err = assert_code(&a.run(&["run", "home"]), 2);
    assert!(err.contains("a passphrase is never written in a job") && !err.contains("hunter2"), "{err}");
}

#[test]
fn install_writes_units_that_uninstall_removes() {
    let a = Agent::new();
    let jobs = job_toml(
        "home",
        "/srv/repo",
        &a.path("pass"),
        &[Path::new("/home")],
        "schedule = \"daily\"\ncheck = { schedule = \"Sun 04:00\", read-all-every = 4 }",
    );
    a.write_jobs(&jobs);
    let units = a.path("config/systemd/user");
    let out = a.run(&["agent", "install", "--user", "--no-enable"]);
    assert_success(&out);
    let agent_unit = std::fs::read_to_string(units.join("coffer-agent.service")).unwrap();
    assert!(agent_unit.contains("\"agent\"") && agent_unit.contains("KillMode=mixed"), "{agent_unit}");
    assert!(agent_unit.contains(&a.path("jobs.toml").display().to_string()), "{agent_unit}");
    let out = a.run(&["agent", "install", "--user", "--no-enable", "--timers"]);
    assert_success(&out);
    let timer = std::fs::read_to_string(units.join("coffer-job-home.timer")).unwrap();
    assert!(timer.contains("OnCalendar=") && timer.contains("Persistent=true"), "{timer}");
    let check = std::fs::read_to_string(units.join("coffer-check-home.service")).unwrap();
    assert!(check.contains("\"--kind\" \"check\" \"--\" \"home\""), "{check}");
    for f in std::fs::read_dir(&units).unwrap() {
        let text = std::fs::read_to_string(f.unwrap().path()).unwrap();
        assert!(!text.contains(PASSWORD), "{text}");
    }
    // A unit of the user's own is left alone.
    std::fs::write(units.join("coffer-job-mine.timer"), "[Timer]\nOnCalendar=daily\n").unwrap();
    let out = a.run(&["--json", "agent", "uninstall", "--user"]);
    assert_success(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["removed"].as_array().unwrap().len(), 5, "{v}");
    let left: Vec<String> =
        std::fs::read_dir(&units).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(left, ["coffer-job-mine.timer"]);
}

#[test]
fn a_profile_with_a_job_table_is_a_job_and_still_a_profile() {
    let a = Agent::new();
    let src = make_source(&a, "src", 2, 5000);
    std::fs::create_dir_all(a.path("config/coffer")).unwrap();
    std::fs::write(
        a.path("config/coffer/home.toml"),
        format!(
            "repository = {:?}\npassword-file = {:?}\n[forget]\nkeep-last = 1\n[job]\npaths = [{:?}]\n",
            a.env.repo().display().to_string(),
            a.path("pass").display().to_string(),
            src.display().to_string()
        ),
    )
    .unwrap();
    let _ = std::fs::remove_file(a.path("jobs.toml"));
    let run = |args: &[&str]| a.cmd().env_remove("COFFER_JOBS").args(args).output().unwrap();
    assert_success(&run(&["run", "home"]));
    assert_success(&run(&["run", "home"]));
    // The profile's [forget] policy was applied after each backup. (The command
    // line takes COFFER_PASSWORD over the profile's password file; the job's steps
    // never see it.)
    let out = a.cmd().env_remove("COFFER_PASSWORD").args(["-P", "home", "--json", "snapshots"]).output().unwrap();
    assert_success(&out);
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
}
