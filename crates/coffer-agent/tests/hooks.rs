//! Hooks run by the real `sh`: their environment, their standard input, their
//! timeout (the whole process group killed) and their failures.

use std::ffi::OsString;
use std::path::Path;
use std::time::{Duration, Instant};

use coffer_agent::config::Kind;
use coffer_agent::hooks::{HookEnv, HookError, HookRecord, OUTPUT_TAIL, run_hook};
use coffer_agent::state::Outcome;

fn env(base: &[(&str, &str)]) -> HookEnv {
    HookEnv {
        base: base.iter().map(|(k, v)| (OsString::from(k), OsString::from(v))).collect(),
        remove: vec!["AWS_SECRET_ACCESS_KEY".into(), "COFFER_S3_SECRET".into()],
        job: "home".into(),
        kind: Kind::Backup,
        repository: "s3:https://s3.example.net/bucket/coffer".into(),
        status: Some(Outcome::Warning),
        snapshot_id: Some("5f3a9c".into()),
    }
}

fn parse_env(dump: &str) -> Vec<(String, String)> {
    dump.split('\0')
        .filter(|l| !l.is_empty())
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.into(), v.into()))
        .collect()
}

#[test]
fn the_environment_has_the_job_and_lacks_the_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("env");
    let e = env(&[
        ("PATH", "/usr/bin:/bin"),
        ("HOME", "/home/someone"),
        ("COFFER_PASSWORD", "hunter2"),
        ("AWS_SECRET_ACCESS_KEY", "s3cret"),
        ("COFFER_S3_SECRET", "s3cret2"),
        ("COFFER_JOB", "stale"),
        ("KEEP_ME", "yes"),
    ]);
    let cmd = format!("env -0 > '{}'", out.display());
    run_hook("after-success", &cmd, b"{}", &e, Duration::from_secs(20)).unwrap();
    let vars = parse_env(&std::fs::read_to_string(&out).unwrap());
    let get = |k: &str| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    assert_eq!(get("COFFER_JOB"), Some("home"), "the job's own value, not the agent's");
    assert_eq!(get("COFFER_JOB_KIND"), Some("backup"));
    assert_eq!(get("COFFER_REPOSITORY"), Some("s3:https://s3.example.net/bucket/coffer"));
    assert_eq!(get("COFFER_STATUS"), Some("warning"));
    assert_eq!(get("COFFER_SNAPSHOT_ID"), Some("5f3a9c"));
    assert_eq!(get("KEEP_ME"), Some("yes"));
    assert_eq!(get("HOME"), Some("/home/someone"));
    assert_eq!(get("COFFER_PASSWORD"), None);
    assert_eq!(get("AWS_SECRET_ACCESS_KEY"), None);
    assert_eq!(get("COFFER_S3_SECRET"), None);
    let all = std::fs::read_to_string(&out).unwrap();
    assert!(!all.contains("hunter2") && !all.contains("s3cret"), "no secret reaches the hook");
    assert_eq!(vars.iter().filter(|(k, _)| k == "COFFER_JOB").count(), 1);

    // `before` has no status and no snapshot yet: the variables are there, empty.
    let mut before = e.clone();
    before.status = None;
    before.snapshot_id = None;
    run_hook("before", &cmd, b"{}", &before, Duration::from_secs(20)).unwrap();
    let vars = parse_env(&std::fs::read_to_string(&out).unwrap());
    let get = |k: &str| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    assert_eq!(get("COFFER_STATUS"), Some(""));
    assert_eq!(get("COFFER_SNAPSHOT_ID"), Some(""));
    assert!(!format!("{before:?}").contains("hunter2"), "Debug shows no values of the base environment");
}

#[test]
fn standard_input_is_the_record() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("stdin");
    let summary = serde_json::json!({"files_new": 3});
    let started: jiff::Timestamp = "2026-12-01T03:00:00Z".parse().unwrap();
    let mut rec = HookRecord::new("home", Kind::Backup, started);
    rec.outcome = Some("success");
    rec.ended = Some("2026-12-01T03:01:00Z".into());
    rec.snapshot = Some("5f3a9c");
    rec.summary = Some(&summary);
    let input = rec.to_json();
    run_hook(
        "finally",
        &format!("cat > '{}'", out.display()),
        &input,
        &env(&[("PATH", "/usr/bin:/bin")]),
        Duration::from_secs(20),
    )
    .unwrap();
    let got: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(
        got,
        serde_json::json!({"job": "home", "kind": "backup", "outcome": "success", "started": "2026-12-01T03:00:00Z",
            "ended": "2026-12-01T03:01:00Z", "snapshot": "5f3a9c", "summary": {"files_new": 3}, "error": null})
    );
}

#[test]
fn a_hook_that_does_not_read_a_large_input_is_not_blocked() {
    let input = vec![b'x'; 4 << 20];
    let t0 = Instant::now();
    let out =
        run_hook("before", "echo done", &input, &env(&[("PATH", "/usr/bin:/bin")]), Duration::from_secs(20)).unwrap();
    assert_eq!(out.output.trim(), "done");
    assert!(t0.elapsed() < Duration::from_secs(10));
}

/// Whether `pid` still runs (a zombie counts as gone).
fn running(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat.rsplit_once(") ").unwrap().1.starts_with('Z'),
        Err(_) => false,
    }
}

fn wait_gone(pid: i32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if !running(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

fn read_pid(path: &Path) -> i32 {
    std::fs::read_to_string(path).unwrap().trim().parse().unwrap()
}

#[test]
fn a_hook_past_its_timeout_is_killed_with_its_child() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("child");
    // The child is a separate process (not the shell's last command, which sh
    // might exec in its place).
    let cmd = format!("echo starting; sleep 300 & echo $! > '{}'; wait", pidfile.display());
    let t0 = Instant::now();
    let err =
        run_hook("before", &cmd, b"", &env(&[("PATH", "/usr/bin:/bin")]), Duration::from_millis(700)).unwrap_err();
    let took = t0.elapsed();
    assert!(matches!(err, HookError::Timeout { .. }), "{err:?}");
    assert!(took >= Duration::from_millis(700) && took < Duration::from_secs(5), "took {took:?}");
    let msg = err.to_string();
    assert!(msg.contains("before hook of job home") && msg.contains("timeout of 0.7s"), "{msg}");
    assert!(msg.contains("starting"), "the output is in the message: {msg}");
    let child = read_pid(&pidfile);
    assert!(wait_gone(child), "the hook's child {child} still runs");
}

#[test]
fn a_hook_that_ignores_sigterm_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("child");
    let cmd = format!(
        "trap '' TERM; sh -c \"trap '' TERM; sleep 300\" & echo $! > '{}'; while :; do sleep 1; done",
        pidfile.display()
    );
    let t0 = Instant::now();
    let err = run_hook("after-failure", &cmd, b"", &env(&[("PATH", "/usr/bin:/bin")]), Duration::from_millis(300))
        .unwrap_err();
    let took = t0.elapsed();
    assert!(matches!(err, HookError::Timeout { .. }), "{err:?}");
    assert!(took >= Duration::from_secs(5) && took < Duration::from_secs(12), "SIGKILL after 5 s, took {took:?}");
    assert!(wait_gone(read_pid(&pidfile)));
}

#[test]
fn a_failing_hook_names_itself_its_status_and_its_output() {
    let cmd = "echo 'dumping databases'; echo 'pg_dump: connection refused' >&2; exit 7";
    let err = run_hook("before", cmd, b"", &env(&[("PATH", "/usr/bin:/bin")]), Duration::from_secs(20)).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, HookError::Failed { .. }), "{err:?}");
    assert!(msg.contains("before hook of job home"), "{msg}");
    assert!(msg.contains("exit code 7"), "{msg}");
    assert!(msg.contains("dumping databases") && msg.contains("pg_dump: connection refused"), "{msg}");

    let err = run_hook("finally", "kill -9 $$", b"", &env(&[("PATH", "/usr/bin:/bin")]), Duration::from_secs(20))
        .unwrap_err();
    assert!(err.to_string().contains("killed by signal 9"), "{err}");
}

#[test]
fn only_the_end_of_a_long_output_is_kept() {
    let cmd = "i=0; while [ $i -lt 3000 ]; do echo \"line $i\"; i=$((i+1)); done; exit 1";
    let err = run_hook("before", cmd, b"", &env(&[("PATH", "/usr/bin:/bin")]), Duration::from_secs(20)).unwrap_err();
    let out = err.output();
    assert!(out.len() <= OUTPUT_TAIL + 4, "{} bytes kept", out.len());
    assert!(out.starts_with('…'));
    assert!(out.trim_end().ends_with("line 2999"));
    assert!(!out.contains("line 10\n"));
}

#[test]
fn a_hook_that_leaves_a_process_behind_returns() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("child");
    // The background process holds the output pipe open after the shell exits.
    let cmd = format!("sleep 30 & echo $! > '{}'; echo ok", pidfile.display());
    let t0 = Instant::now();
    let out = run_hook("finally", &cmd, b"", &env(&[("PATH", "/usr/bin:/bin")]), Duration::from_secs(20)).unwrap();
    assert!(t0.elapsed() < Duration::from_secs(6), "took {:?}", t0.elapsed());
    assert_eq!(out.output.trim(), "ok");
    let child = read_pid(&pidfile);
    // Left alone: it is not past a timeout. The test cleans up after itself.
    assert!(running(child));
    let _ = std::process::Command::new("kill").arg(child.to_string()).status();
}
