//! Storage errors in words (docs/design.md#storage-errors): against the real S3
//! gateway of the test services and a real TLS server (`coffer serve`), each
//! common cause is one line naming the cause and the fix, OpenDAL's report only
//! under `-v`, and causes no retry can mend (credentials, a missing bucket, an
//! untrusted certificate) fail at once.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::remote::{Remote, var};
use common::{Env, text};

/// The error line (`error: …`) of a failed command: exit 23, one line, none of
/// OpenDAL's internals; returns it.
fn plain_storage_error(out: &Output) -> String {
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(23), "exit code: {err}");
    let line = err.lines().find(|l| l.starts_with("error: ")).unwrap_or_else(|| panic!("no error line: {err}"));
    for internal in ["context:", "reqsign", "called:", "service:", "Unexpected (", "<?xml"] {
        assert!(!line.contains(internal), "OpenDAL's internals ({internal:?}) in {line}");
    }
    line.to_string()
}

/// Runs the command, timing it.
fn timed(mut c: Command) -> (Output, Duration) {
    let start = Instant::now();
    let out = c.output().unwrap();
    (out, start.elapsed())
}

/// Regression: missing S3 credentials printed OpenDAL's internals ("Unexpected
/// (permanent) at read, context: { called: reqsign::Sign … }").
#[test]
fn s3_credentials_and_buckets_are_told_in_one_line() {
    let Some(mut r) = Remote::s3("plain-errors") else { return };
    assert!(r.run(&["init", "--kdf-log-n", "10", "--insecure-kdf"]).status.success());
    let good = r.env.clone();

    // No credentials at all (and no AWS config files in the test's home).
    r.env.retain(|(k, _)| !k.starts_with("AWS_ACCESS") && !k.starts_with("AWS_SECRET"));
    let mut c = r.cmd();
    c.arg("snapshots");
    let (out, took) = timed(c);
    let line = plain_storage_error(&out);
    assert!(line.contains("no credentials") && line.contains("AWS_ACCESS_KEY_ID"), "{line}");
    assert!(took < Duration::from_secs(10), "not retried: {took:?}");

    // A wrong secret, then an unknown access key.
    for (key, value) in [("AWS_SECRET_ACCESS_KEY", "not-the-secret"), ("AWS_ACCESS_KEY_ID", "nobody")] {
        r.env = good.clone();
        r.env.iter_mut().filter(|(k, _)| k == key).for_each(|(_, v)| *v = value.into());
        let mut c = r.cmd();
        c.arg("snapshots");
        let (out, took) = timed(c);
        let line = plain_storage_error(&out);
        assert!(line.contains("does not accept these credentials") && line.contains(key), "{key}: {line}");
        assert!(took < Duration::from_secs(10), "not retried: {took:?}");
    }

    // A bucket that does not exist.
    r.env = good.clone();
    let endpoint = var("COFFER_TEST_S3_ENDPOINT").unwrap();
    r.repo = format!("s3:{endpoint}/no-such-bucket-for-coffer/x");
    let line = plain_storage_error(&r.run(&["snapshots"]));
    assert!(line.contains("the bucket does not exist") && line.contains("create it"), "{line}");

    // -v adds OpenDAL's report below the line.
    let out = r.run(&["-v", "snapshots"]);
    let err = text(&out.stderr);
    assert!(err.lines().any(|l| l.starts_with("detail: ") && l.contains("NoSuchBucket")), "{err}");
}

/// A port nothing listens on and a host that does not resolve.
#[test]
fn refused_connections_and_unknown_hosts_say_so() {
    let env = Env::empty();
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let run = |loc: &str| {
        env.cmd()
            .env("COFFER_REPOSITORY", loc)
            .env("COFFER_RETRY_BASE_MS", "1")
            .env("AWS_ACCESS_KEY_ID", "k")
            .env("AWS_SECRET_ACCESS_KEY", "s")
            .arg("snapshots")
            .output()
            .unwrap()
    };
    let line = plain_storage_error(&run(&format!("s3:http://127.0.0.1:{closed}/b")));
    assert!(line.contains("connection was refused") && line.contains("host and port"), "{line}");
    let line = plain_storage_error(&run("s3:http://no-such-host.invalid:9000/b"));
    assert!(line.contains("does not resolve") && line.contains("check the host"), "{line}");
}

struct Served {
    child: Child,
    addr: String,
    _out: BufReader<std::process::ChildStdout>,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `coffer serve` over `env`'s repository: a TLS server with a certificate of
/// its own making, which no client trusts unless told.
fn serve(env: &Env) -> Served {
    let mut child = Command::new(env!("CARGO_BIN_EXE_coffer"))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", env.path("home"))
        .env("COFFER_REPOSITORY", env.repo())
        .arg("serve")
        .arg("--state-dir")
        .arg(env.path("serve-state"))
        .args(["--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let url = line.split_whitespace().find(|w| w.starts_with("https://")).unwrap_or_else(|| panic!("{line}"));
    Served { child, addr: url.trim_start_matches("https://").to_string(), _out: out }
}

/// Regression: a server whose certificate is not trusted was retried as a
/// temporary failure for 46 s.
#[test]
fn an_untrusted_certificate_fails_at_once_and_names_cacert() {
    let env = Env::new();
    let srv = serve(&env);
    let mut c = env.cmd();
    c.env("COFFER_REPOSITORY", format!("coffer:https://{}", srv.addr))
        .env("COFFER_SERVER_KEY_ID", "k")
        .env("COFFER_SERVER_SECRET", "s")
        .arg("snapshots");
    let (out, took) = timed(c);
    let line = plain_storage_error(&out);
    assert!(line.contains("TLS certificate is not trusted") && line.contains("--cacert"), "{line}");
    assert!(!text(&out.stderr).contains("retrying"), "retried: {}", text(&out.stderr));
    assert!(took < Duration::from_secs(10), "{took:?}");
}
