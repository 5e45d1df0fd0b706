//! A repository on a real S3 server under the faults of real networks and real
//! use (docs/design.md#storage-contract, #write-order, #prune): resets and cut
//! answers on about a tenth of the connections through a toxiproxy proxy, four
//! writers and a prune at once, and a backup killed with SIGKILL over a slow
//! link then resumed. Each test runs only when the test servers' variables are
//! set (docs/testing.md), in its own bucket prefix and through its own proxy.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::remote::*;
use common::*;

const INIT: &[&str] = &["init", "--kdf-log-n", "10", "--insecure-kdf", "--pack-size", "1M"];

/// The `retry` events a `--json` run printed on stderr.
fn retries(stderr: &[u8]) -> usize {
    text(stderr)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["type"] == "retry")
        .count()
}

/// Runs `args` with `--json`, which must succeed; its summary and the number of
/// retries it reported.
fn json_retrying(r: &Remote, args: &[&str]) -> (serde_json::Value, usize) {
    let out = r.run(&[&["--json"], args].concat());
    assert_success(&out);
    let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(&out.stdout)));
    (v, retries(&out.stderr))
}

#[test]
fn s3_backup_restore_and_check_are_clean_with_a_tenth_of_the_connections_broken() {
    let Some(proxy) = Proxy::s3("resets") else { return };
    let Some(r) = Remote::s3_at(&proxy.endpoint, "resets") else { return };
    assert_success(&r.run(INIT));
    // While writing: a tenth of the connections are reset (TCP RST) as the
    // answer starts, and another tenth a quarter of a second after the request
    // starts, in the middle of an upload.
    proxy.toxic("reset_peer", "downstream", 0.1, serde_json::json!({"timeout": 0}));
    proxy.toxic("reset_peer", "upstream", 0.1, serde_json::json!({"timeout": 250}));

    let src = r.path("src");
    make_tree(&src);
    let mut written = 0;
    for round in 0..2 {
        std::fs::write(src.join("round"), random_bytes(300_000, 90 + round)).unwrap();
        let (v, n) = json_retrying(&r, &["backup", src.to_str().unwrap()]);
        assert!(v["snapshot_id"].is_string(), "{v}");
        written += n;
    }
    assert!(written > 0, "no connection was reset while writing: the proxy's toxics did not act");

    // While reading: a tenth of the answers are cut after 64 KiB, and a tenth
    // of the requests are swallowed and their connection closed after a
    // quarter of a second. (Not resets here: while a reset toxic is in place
    // the proxy resets every connection it closes, and a server that closes
    // after each GET then loses the tail of any answer the client has not
    // taken yet, a fault of the proxy no retry can get past.)
    proxy.heal();
    proxy.toxic("limit_data", "downstream", 0.1, serde_json::json!({"bytes": 65536}));
    proxy.toxic("timeout", "upstream", 0.1, serde_json::json!({"timeout": 250}));
    let target = r.path("out");
    let (_, mut read) = json_retrying(&r, &["restore", "latest", "--target", target.to_str().unwrap()]);
    assert_same_tree(&src, &target.join(src.strip_prefix("/").unwrap()));
    // Clean means exit 0: check exits 20 on damage.
    read += json_retrying(&r, &["check", "--read-data"]).1;
    eprintln!("requests retried: {written} while writing, {read} while reading");
    assert!(read > 0, "no connection was broken while reading: the proxy's toxics did not act");
}

/// A source directory of `files` pseudo-random files of `size` bytes.
fn make_source(dir: &Path, files: u64, size: usize, seed: u64) {
    std::fs::create_dir_all(dir).unwrap();
    for i in 0..files {
        std::fs::write(dir.join(format!("f{i}")), random_bytes(size, seed * 1000 + i)).unwrap();
    }
}

fn spawn(r: &Remote, args: &[&str]) -> Child {
    r.cmd()
        .env("COFFER_TEST_PRUNE_GRACE_MS", "400")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn s3_four_concurrent_writers_and_a_prune_leave_every_snapshot_whole() {
    let Some(r) = Remote::s3("writers") else { return };
    assert_success(&r.run(INIT));
    // Something for the prune to do: a snapshot to forget, whose data the
    // writers partly share.
    let old = r.path("old");
    make_source(&old, 6, 400_000, 1);
    let gone = r.json(&["backup", old.to_str().unwrap()])["snapshot_id"].as_str().unwrap().to_string();
    assert_success(&r.run(&["-q", "forget", &gone]));

    let sources: Vec<PathBuf> = (0..4u64)
        .map(|w| {
            let dir = r.path(&format!("w{w}"));
            make_source(&dir, 5, 500_000, 10 + w);
            // Every writer also stores two of the forgotten snapshot's files.
            for f in 0..2 {
                std::fs::copy(old.join(format!("f{f}")), dir.join(format!("shared{f}"))).unwrap();
            }
            dir
        })
        .collect();
    let mut children: Vec<Child> =
        sources.iter().map(|s| spawn(&r, &["--json", "backup", s.to_str().unwrap()])).collect();
    let prune = spawn(&r, &["--json", "prune", "--max-unused", "0"]);
    children.push(prune);
    let mut ids = Vec::new();
    for (i, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output().unwrap();
        if i < 4 {
            // A backup may meet a prune's notice; it still completes.
            assert_success(&out);
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            ids.push(v["snapshot_id"].as_str().unwrap().to_string());
        } else {
            // A prune that meets running writers spares what they may use,
            // or stops with the conflict code; it never fails otherwise.
            assert!(out.status.success() || out.status.code() == Some(24), "prune: {}", text(&out.stderr));
        }
    }
    // A second prune after the writers finished removes what is left over.
    let out = r.cmd().env("COFFER_TEST_PRUNE_GRACE_MS", "10").args(["-q", "prune", "--max-unused", "0"]).output();
    assert_success(&out.unwrap());
    assert_success(&r.run(&["-q", "check", "--read-data"]));
    for (id, src) in ids.iter().zip(&sources) {
        let target = r.path(&format!("out-{}", &id[..8]));
        assert_success(&r.run(&["-q", "restore", id, "--target", target.to_str().unwrap()]));
        assert_same_tree(src, &target.join(src.strip_prefix("/").unwrap()));
    }
}

/// The number of objects under `data/` of `r`'s prefix, read from the S3
/// server's own directory (the test gateway stores objects as files).
fn packs_on_server(r: &Remote) -> Option<usize> {
    let run = var("COFFER_CI_RUN")?;
    let bucket = var("COFFER_TEST_S3_BUCKET")?;
    let prefix = r.repo.rsplit('/').next()?;
    let dir = PathBuf::from(run).join("s3-data").join(bucket).join(prefix).join("data");
    dir.exists().then(|| files_under(&dir).len())
}

#[test]
fn s3_backup_killed_over_a_slow_link_resumes_and_reuses_what_it_uploaded() {
    let Some(proxy) = Proxy::s3("sigkill") else { return };
    let Some(r) = Remote::s3_at(&proxy.endpoint, "sigkill") else { return };
    assert_success(&r.run(INIT));
    let src = r.path("src");
    let total: usize = 24 << 20;
    make_source(&src, 12, total / 12, 7);
    // 20 ms each way and 4 MB/s up: the backup takes several seconds.
    proxy.toxic("latency", "downstream", 1.0, serde_json::json!({"latency": 20, "jitter": 5}));
    proxy.toxic("bandwidth", "upstream", 1.0, serde_json::json!({"rate": 4096}));

    let mut child = r
        .cmd()
        .args(["-q", "backup", src.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // SIGKILL once a few packs are stored (or after 3 s where the server's
    // files cannot be seen).
    let deadline = Instant::now() + Duration::from_secs(60);
    let started = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() || Instant::now() > deadline {
            break;
        }
        match packs_on_server(&r) {
            Some(n) if n >= 4 => break,
            None if started.elapsed() > Duration::from_secs(3) => break,
            _ => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    assert!(child.try_wait().unwrap().is_none(), "the backup finished before it could be killed");
    child.kill().unwrap();
    child.wait().unwrap();
    let stored = packs_on_server(&r);
    eprintln!("killed with {stored:?} packs stored");

    proxy.heal();
    let snaps = r.json(&["snapshots"]);
    assert_eq!(snaps.as_array().map(Vec::len), Some(0), "a killed backup left a snapshot: {snaps}");
    assert_success(&r.run(&["-q", "check"]));
    let v = r.json(&["backup", src.to_str().unwrap()]);
    let added = v["summary"]["bytes_added"].as_u64().unwrap();
    eprintln!("the resumed backup added {added} of {total} bytes");
    if stored.is_some_and(|n| n >= 4) {
        assert!(added + (2 << 20) < total as u64, "the resumed backup uploaded everything again: {v}");
    }
    let target = r.path("out");
    assert_success(&r.run(&["-q", "restore", "latest", "--target", target.to_str().unwrap()]));
    assert_same_tree(&src, &target.join(src.strip_prefix("/").unwrap()));
    assert_success(&r.run(&["-q", "check", "--read-data"]));
}
