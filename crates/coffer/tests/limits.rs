//! Bandwidth limits (docs/design.md#limits) through the real binary on a local
//! repository: `--limit-upload` slows a backup to the limit and every byte
//! arrives; `--limit-download` slows a restore and the source side of a copy;
//! a limit of 0 or one that is not a number is a usage error, and `coffer
//! serve` refuses a limit (it is the clients').
//!
//! Times are lower bounds with a margin (a debug build on a loaded machine is
//! only slower); `bench/limit.sh` measures the rate itself.

mod common;

use std::time::Instant;

use common::*;

const MIB: usize = 1 << 20;

/// Six MiB of random data in three files, under `dir`.
fn six_mib(env: &Env, dir: &str) -> std::path::PathBuf {
    let src = env.path(dir);
    std::fs::create_dir_all(&src).unwrap();
    for i in 0..3u64 {
        std::fs::write(src.join(format!("f{i}")), random_bytes(2 * MIB, 40 + i)).unwrap();
    }
    src
}

/// Runs `c` and returns its output and the seconds it took.
fn timed(c: &mut std::process::Command) -> (std::process::Output, f64) {
    let t = Instant::now();
    let out = c.output().expect("run coffer");
    (out, t.elapsed().as_secs_f64())
}

#[test]
fn a_limited_backup_takes_its_time_and_every_byte_arrives() {
    let env = Env::new();
    let src = six_mib(&env, "src");
    // 6 MiB at 1 MiB/s with a 1 MiB burst: 5 s at least.
    let (out, secs) = timed(env.cmd().args(["--json", "--limit-upload", "1024", "backup"]).arg(&src));
    assert_success(&out);
    eprintln!("backup of 6 MiB at 1 MiB/s: {secs:.2} s");
    assert!(secs >= 4.5, "a backup of 6 MiB at 1 MiB/s took {secs:.2} s");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["summary"]["files_new"], 3, "{v}");
    assert!(v["storage"]["bytes_up"].as_u64().unwrap() >= 6 * MIB as u64, "{v}");
    assert_success(&env.run(&["check", "--read-data"]));

    // The same through the environment, reading: a restore at 1 MiB/s.
    let target = env.path("restored");
    let (out, secs) =
        timed(env.cmd().env("COFFER_LIMIT_DOWNLOAD", "1024").args(["restore", "latest", "--target"]).arg(&target));
    assert_success(&out);
    eprintln!("restore of 6 MiB at 1 MiB/s: {secs:.2} s");
    assert!(secs >= 4.0, "a restore of 6 MiB at 1 MiB/s took {secs:.2} s");
    assert_same_tree(&src, &target.join(src.strip_prefix("/").unwrap()));
}

#[test]
fn a_copy_reads_its_source_within_the_limit() {
    let from = Env::new();
    let src = six_mib(&from, "src");
    from.backup(&[&src]);
    // A related destination: the copy sends packs byte for byte.
    let to = Env::empty();
    let init = to
        .cmd()
        .env("COFFER_FROM_PASSWORD", PASSWORD)
        .args(["init", "--kdf-log-n", "10", "--insecure-kdf", "--from-repo"])
        .arg(from.repo())
        .output()
        .unwrap();
    assert_success(&init);
    let (out, secs) = timed(
        to.cmd()
            .env("COFFER_FROM_PASSWORD", PASSWORD)
            .args(["--limit-download", "1024", "copy", "--from-repo"])
            .arg(from.repo()),
    );
    assert_success(&out);
    eprintln!("copy of 6 MiB read at 1 MiB/s: {secs:.2} s");
    assert!(secs >= 4.0, "a copy of 6 MiB read at 1 MiB/s took {secs:.2} s");
    assert_success(&to.run(&["check", "--read-data"]));
    let snaps = to.json(&["snapshots"]);
    assert_eq!(snaps.as_array().map(Vec::len), Some(1), "{snaps}");
}

#[test]
fn limits_of_zero_or_not_a_number_are_usage_errors() {
    let env = Env::new();
    let err = assert_code(&env.run(&["--limit-upload", "0", "snapshots"]), 2);
    assert!(err.contains("--limit-upload") && err.contains("0 KiB/s would stop every transfer"), "{err}");
    for bad in ["2M", "-1", "fast", "1.5"] {
        let err = assert_code(&env.run(&[&format!("--limit-download={bad}"), "snapshots"]), 2);
        assert!(err.contains("--limit-download") && err.contains("not a number of KiB per second"), "{bad}: {err}");
    }
    let err = assert_code(&env.cmd().env("COFFER_LIMIT_UPLOAD", "lots").arg("snapshots").output().unwrap(), 2);
    assert!(err.contains("--limit-upload") && err.contains("\"lots\""), "{err}");
    // A server does not take one: it would slow every client.
    let state = env.path("serve-state");
    let out = env.cmd().args(["--limit-upload", "100", "serve", "--state-dir"]).arg(&state).output().unwrap();
    let err = assert_code(&out, 2);
    assert!(err.contains("does not take --limit-upload") && err.contains("give it to the clients"), "{err}");
}
