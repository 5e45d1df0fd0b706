//! `backup --stdin` and `--stdin-from-command` (docs/design.md#backup-from-a-stream):
//! the stream round-trips through `dump`, a failing command leaves no snapshot,
//! the same stream twice adds no data pack, and Ctrl-C while reading ends with
//! 130 and no snapshot.

mod common;

use std::io::Write;
use std::process::Stdio;

use common::{Env, assert_code, assert_success, files_under, interrupt_once_stored, random_bytes, text};

/// Runs `coffer --json backup ARGS` with `input` on standard input; returns the output.
fn backup_stdin(env: &Env, args: &[&str], input: &[u8]) -> std::process::Output {
    let mut child = env
        .cmd()
        .args(["--json", "backup"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().unwrap();
    // A command refused before reading its input closes the pipe early: not an error here.
    let _ = writer.join().unwrap();
    out
}

fn snapshot_count(env: &Env) -> usize {
    files_under(&env.repo().join("snapshots")).len()
}

#[test]
fn twenty_megabytes_of_stdin_round_trip_through_dump() {
    let env = Env::new();
    let data = random_bytes(20 << 20, 18);
    let out = backup_stdin(&env, &["--stdin", "--stdin-filename", "db.sql"], &data);
    assert_success(&out);
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["summary"]["files_new"], 1);
    assert_eq!(summary["summary"]["bytes_read"], 20 << 20);
    // Chunked like any file: a 20 MiB stream is many blobs.
    assert!(summary["summary"]["blobs_added"].as_u64().unwrap() > 4, "{summary}");

    let dumped = env.run(&["dump", "latest", "db.sql"]);
    assert_success(&dumped);
    assert!(dumped.stdout == data, "dump returned {} bytes, not the 20 MiB backed up", dumped.stdout.len());

    // One file named as asked, mode 0644, owned by the user running the backup.
    let snaps = env.json(&["snapshots"]);
    assert_eq!(snaps[0]["snapshot"]["paths"], serde_json::json!(["/db.sql"]));
    let ls = env.run(&["--json", "ls", "latest"]);
    assert_success(&ls);
    let nodes: Vec<serde_json::Value> = text(&ls.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|n| n["type"] == "node")
        .collect();
    assert_eq!(nodes.len(), 1, "{nodes:?}");
    let node = &nodes[0]["node"];
    assert_eq!(node["name"], "db.sql");
    assert_eq!(node["mode"], 0o644);
    assert_eq!(node["size"], 20 << 20);
    assert_eq!(node["uid"], rustix::process::geteuid().as_raw());
    let mtime = node["mtime"].as_str().unwrap().parse::<jiff::Timestamp>().unwrap().as_second();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    assert!((now - mtime).abs() < 600, "mtime {mtime} is not now ({now})");
    assert_success(&env.run(&["check", "--read-data"]));
}

#[test]
fn the_default_name_is_stdin() {
    let env = Env::new();
    assert_success(&backup_stdin(&env, &["--stdin"], b"hello\n"));
    let dumped = env.run(&["dump", "latest", "stdin"]);
    assert_success(&dumped);
    assert_eq!(dumped.stdout, b"hello\n");
}

#[test]
fn a_second_identical_stdin_backup_adds_no_data_pack() {
    let env = Env::new();
    let data = random_bytes(6 << 20, 7);
    assert_success(&backup_stdin(&env, &["--stdin"], &data));
    let size = env.repo_size();
    let out = backup_stdin(&env, &["--stdin"], &data);
    assert_success(&out);
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // The previous stdin snapshot is the parent: the file is unchanged, and all
    // that is new is the root tree (the file's mtime is the backup's time).
    assert_eq!(summary["summary"]["files_unchanged"], 1, "{summary}");
    assert_eq!(summary["summary"]["blobs_added"], 1, "{summary}");
    // The content is stored already: nothing of it is new, only metadata.
    assert_eq!(summary["summary"]["bytes_new"], 0, "{summary}");
    let trees = summary["summary"]["bytes_new_trees"].as_u64().unwrap();
    assert!(trees > 0 && trees < 2048, "{summary}");
    let grown = env.repo_size() - size;
    assert!(grown < 64 << 10, "the repository grew by {grown} bytes for 6 MiB already stored");
    assert_eq!(snapshot_count(&env), 2);
}

#[test]
fn a_command_output_is_backed_up_and_a_failing_command_keeps_no_snapshot() {
    let env = Env::new();
    let out = backup_stdin(
        &env,
        &["--stdin-from-command", "--stdin-filename", "out.txt", "--", "sh", "-c", "printf 'from a command'"],
        b"",
    );
    assert_success(&out);
    let dumped = env.run(&["dump", "latest", "out.txt"]);
    assert_eq!(dumped.stdout, b"from a command");
    assert_eq!(snapshot_count(&env), 1);

    let out = backup_stdin(&env, &["--stdin-from-command", "--", "sh", "-c", "echo partial; exit 7"], b"");
    let err = assert_code(&out, 1);
    assert!(err.contains("sh -c echo partial; exit 7") && err.contains("exit status: 7"), "{err}");
    assert_eq!(snapshot_count(&env), 1, "a failed command's output was kept as a snapshot");

    let out = backup_stdin(&env, &["--stdin-from-command", "--", "/nonexistent/command"], b"");
    let err = assert_code(&out, 1);
    assert!(err.contains("/nonexistent/command"), "{err}");
    assert_eq!(snapshot_count(&env), 1);
}

#[test]
fn a_file_name_with_a_slash_and_paths_with_stdin_are_refused() {
    let env = Env::new();
    let err = assert_code(&backup_stdin(&env, &["--stdin", "--stdin-filename", "a/b"], b"x"), 1);
    assert!(err.contains("--stdin-filename"), "{err}");
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    assert_code(&backup_stdin(&env, &["--stdin", src.to_str().unwrap()], b"x"), 2);
    assert_eq!(snapshot_count(&env), 0);
}

#[test]
fn the_passphrase_is_not_read_from_stdin_when_stdin_is_the_data() {
    let env = Env::new();
    let mut cmd = env.cmd();
    cmd.env_remove("COFFER_PASSWORD").args(["backup", "--stdin"]).stdin(Stdio::piped());
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    // No terminal either (a new session has none), so there is nowhere to ask.
    // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            rustix::process::setsid().map(drop).map_err(std::io::Error::from)
        });
    }
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let _ = stdin.write_all(format!("{}\nsome data\n", common::PASSWORD).as_bytes());
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let err = assert_code(&out, 1);
    assert!(err.contains("COFFER_PASSWORD"), "{err}");
    assert_eq!(snapshot_count(&env), 0);
}

#[test]
fn ctrl_c_while_reading_stdin_ends_with_130_and_no_snapshot() {
    let env = Env::new();
    let mut child = env
        .cmd()
        .args(["backup", "--stdin"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(&random_bytes(1 << 20, 3)).unwrap();
    // The backup has started (and its handler is installed) once its session marker is written.
    interrupt_once_stored(&env, "sessions", &child);
    let out = child.wait_with_output().unwrap();
    drop(stdin);
    let err = assert_code(&out, 130);
    assert!(err.contains("interrupted"), "{err}");
    assert_eq!(snapshot_count(&env), 0);
    assert_success(&env.run(&["check"]));
}
