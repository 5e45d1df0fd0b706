//! The conformance suite (docs/design.md#storage-contract) against real servers:
//! an S3 server when `COFFER_TEST_S3_*` is set, an SSH server through SFTP when
//! `COFFER_TEST_SFTP_*` is set (docs/testing.md; the test command `.ci/test.sh`
//! starts both). Without the variables a test fails, unless `COFFER_TEST_SKIP`
//! names its group.

use std::sync::atomic::{AtomicUsize, Ordering};

use coffer_backend::testing::run_suite;
use coffer_backend::testing::servers::{Server, absent};
use coffer_backend::{Backend, ErrorKind, Location, OpendalBackend, RemoteOptions};

fn var(k: &str) -> Option<String> {
    std::env::var(k).ok().filter(|v| !v.is_empty())
}

/// A prefix no other test run uses.
fn unique(tag: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    format!("{tag}-{}-{t}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

/// The S3 test server's options: its credentials and region.
fn s3_options() -> Option<(String, RemoteOptions)> {
    let endpoint = var("COFFER_TEST_S3_ENDPOINT")?;
    let mut opts = RemoteOptions::default();
    for (k, v) in [
        ("AWS_ACCESS_KEY_ID", "COFFER_TEST_S3_ACCESS_KEY"),
        ("AWS_SECRET_ACCESS_KEY", "COFFER_TEST_S3_SECRET_KEY"),
        ("AWS_REGION", "COFFER_TEST_S3_REGION"),
    ] {
        opts.vars.insert(k.to_string(), var(v)?);
    }
    Some((endpoint, opts))
}

fn s3_at(endpoint: &str, bucket: &str, prefix: &str, opts: &RemoteOptions) -> OpendalBackend {
    let loc = Location::S3 { endpoint: Some(endpoint.to_string()), bucket: bucket.into(), prefix: prefix.into() };
    OpendalBackend::open(&loc, opts).unwrap()
}

#[test]
fn s3_conforms() {
    let Some((endpoint, opts)) = s3_options() else {
        absent(Server::S3);
        return;
    };
    let bucket = var("COFFER_TEST_S3_BUCKET").unwrap();
    let report = run_suite(|| s3_at(&endpoint, &bucket, &unique("conformance"), &opts));
    eprintln!("{report}");
    report.assert_passed();
}

#[test]
fn s3_errors_are_classified_and_explained() {
    let Some((endpoint, opts)) = s3_options() else {
        absent(Server::S3);
        return;
    };
    let bucket = var("COFFER_TEST_S3_BUCKET").unwrap();
    // A bucket that does not exist: permanent, and says so.
    let be = s3_at(&endpoint, "no-such-bucket-coffer", "x", &opts);
    let e = be.write("config", vec![1]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Permanent, "{e}");
    assert!(e.to_string().contains("bucket does not exist"), "{e}");
    // Wrong credentials: permanent (403), naming the variables to check.
    let mut bad = opts.clone();
    bad.vars.insert("AWS_SECRET_ACCESS_KEY".into(), "wrong-secret".into());
    let be = s3_at(&endpoint, &bucket, &unique("badcred"), &bad);
    let e = be.read("config").unwrap_err();
    assert_eq!(e.kind, ErrorKind::Permanent, "{e}");
    assert!(e.to_string().contains("AWS_SECRET_ACCESS_KEY"), "{e}");
    // Nothing listens: transient (the retry layer retries it), and says what to check.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let be = s3_at(&format!("http://127.0.0.1:{port}"), &bucket, "x", &opts);
    let e = be.read("config").unwrap_err();
    assert_eq!(e.kind, ErrorKind::Transient, "{e}");
    assert!(e.to_string().contains("refused"), "{e}");
    // An absent object is NotFound, not an error of the bucket.
    let be = s3_at(&endpoint, &bucket, &unique("absent"), &opts);
    assert_eq!(be.read("config").unwrap_err().kind, ErrorKind::NotFound);
    assert!(be.list("index/").unwrap().is_empty());
}

#[test]
fn s3_connections_default_and_configured() {
    let Some((endpoint, mut opts)) = s3_options() else {
        absent(Server::S3);
        return;
    };
    let bucket = var("COFFER_TEST_S3_BUCKET").unwrap();
    assert_eq!(s3_at(&endpoint, &bucket, "x", &opts).connections(), 32);
    opts.connections = Some(5);
    assert_eq!(s3_at(&endpoint, &bucket, "x", &opts).connections(), 5);
}

/// Makes `ssh` (which OpenDAL's sftp service runs) use the test server's
/// known-hosts file: a wrapper script first in PATH. Set once, before any
/// thread of this test starts a connection. The wrapper's directory is removed
/// when the returned guard drops.
fn sftp_setup() -> Option<(tempfile::TempDir, String, String, u16, String, RemoteOptions)> {
    let host = var("COFFER_TEST_SFTP_HOST")?;
    let port: u16 = var("COFFER_TEST_SFTP_PORT")?.parse().ok()?;
    let user = var("COFFER_TEST_SFTP_USER")?;
    let key = var("COFFER_TEST_SFTP_KEY")?;
    let known = var("COFFER_TEST_SFTP_KNOWN_HOSTS")?;
    let root = var("COFFER_TEST_SFTP_ROOT")?;
    let guard = tempfile::Builder::new().prefix("coffer-ssh-wrapper").tempdir().unwrap();
    let dir = guard.path();
    let ssh = dir.join("ssh");
    std::fs::write(
        &ssh,
        format!("#!/bin/sh\nexec /usr/bin/ssh -o UserKnownHostsFile={known} -o IdentitiesOnly=yes \"$@\"\n"),
    )
    .unwrap();
    std::fs::set_permissions(&ssh, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", dir.display(), std::env::var("PATH").unwrap_or_default());
    // SAFETY: the only test of this binary that starts ssh; no other thread reads
    // the environment meanwhile.
    unsafe { std::env::set_var("PATH", path) };
    let mut opts = RemoteOptions::default();
    opts.vars.insert("COFFER_SFTP_KEY".into(), key);
    opts.connections = Some(4);
    Some((guard, user, host, port, root, opts))
}

#[test]
fn sftp_conforms() {
    let Some((_wrapper, user, host, port, root, opts)) = sftp_setup() else {
        absent(Server::Sftp);
        return;
    };
    let report = run_suite(|| {
        let path = format!("{root}/{}", unique("conformance"));
        let loc = Location::Sftp { user: Some(user.clone()), host: host.clone(), port: Some(port), path };
        OpendalBackend::open(&loc, &opts).unwrap()
    });
    eprintln!("{report}");
    report.assert_passed();
}
