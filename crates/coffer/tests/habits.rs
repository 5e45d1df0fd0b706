//! Habits a restic user brings: exit codes with restic's numbers, a restic
//! repository named as such, Ctrl-C, where the repository and the passphrase come
//! from, and prune's announced wait and dry-run figures (docs/design.md#exit-codes).

mod common;

use std::io::Write;
use std::process::Stdio;

use common::*;

#[test]
fn a_restic_repository_is_not_a_coffer_repository() {
    let env = Env::empty();
    let repo = env.repo();
    for d in ["keys", "data", "snapshots", "index", "locks"] {
        std::fs::create_dir_all(repo.join(d)).unwrap();
    }
    // restic's config: IV, ciphertext and MAC, no coffer header.
    std::fs::write(repo.join("config"), random_bytes(155, 3)).unwrap();
    std::fs::write(repo.join("keys/0123abcd"), br#"{"kdf":"scrypt","N":32768,"r":8,"p":1,"salt":"x","data":"y"}"#)
        .unwrap();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    for args in [&["snapshots"][..], &["check"], &["backup", src.to_str().unwrap()]] {
        let err = assert_code(&env.run(args), 26);
        assert!(err.contains("not a coffer repository") && err.contains("restic"), "{args:?}: {err}");
    }
    let err = assert_code(&env.run(&["init", "--kdf-log-n", "10", "--insecure-kdf"]), 26);
    assert!(err.contains("not a coffer repository"), "{err}");
    let out = env.run(&["--json", "snapshots"]);
    let v: serde_json::Value = serde_json::from_str(assert_code(&out, 26).trim()).unwrap();
    assert_eq!(v["exit_code"], 26);
}

#[test]
fn wrong_passphrase_is_12_and_missing_repository_is_10() {
    let env = Env::new();
    let out = env.cmd().env("COFFER_PASSWORD", "wrong").args(["snapshots"]).output().unwrap();
    let err = assert_code(&out, 12);
    assert!(err.contains("wrong passphrase"), "{err}");
    let out = env.cmd().env("COFFER_REPOSITORY", env.path("nowhere")).args(["snapshots"]).output().unwrap();
    assert_code(&out, 10);
}

#[test]
fn ctrl_c_ends_a_backup_with_130_and_leaves_a_usable_repository() {
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    for i in 0..48 {
        std::fs::write(src.join(format!("f{i}")), random_bytes(2 << 20, i)).unwrap();
    }
    let child = env
        .cmd()
        .args(["backup", src.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Interrupt once the backup has started writing data.
    interrupt_once_stored(&env, "data", &child);
    let out = child.wait_with_output().unwrap();
    let err = assert_code(&out, 130);
    assert!(err.contains("interrupted"), "{err}");
    assert!(files_under(&env.repo().join("snapshots")).is_empty(), "no snapshot of an interrupted backup");
    assert_success(&env.run(&["check", "--read-data"]));
    // The next backup completes and restores exactly.
    env.backup(&[&src]);
    let target = env.path("restored");
    assert_success(&env.run(&["restore", "latest", "--target", target.to_str().unwrap()]));
    assert_same_tree(&src, &target.join(src.strip_prefix("/").unwrap()));
}

#[test]
fn repository_file_password_command_and_stdin() {
    let env = Env::new();
    let file = env.path("repo-location");
    std::fs::write(&file, format!("{}\n", env.repo().display())).unwrap();
    let out = env
        .cmd()
        .env_remove("COFFER_REPOSITORY")
        .args(["--repository-file", file.to_str().unwrap(), "snapshots"])
        .output()
        .unwrap();
    assert_success(&out);
    // Both a file and --repo: refused as restic does.
    let out = env.cmd().args(["--repository-file", file.to_str().unwrap(), "snapshots"]).output().unwrap();
    let err = assert_code(&out, 2);
    assert!(err.contains("give one"), "{err}");

    let cmd = format!("printf '%s\\n' '{PASSWORD}'");
    let out = env.cmd().env_remove("COFFER_PASSWORD").args(["--password-command", &cmd, "snapshots"]).output().unwrap();
    assert_success(&out);
    let out =
        env.cmd().env_remove("COFFER_PASSWORD").args(["--password-command", "exit 4", "snapshots"]).output().unwrap();
    let err = assert_code(&out, 1);
    assert!(err.contains("password command") && err.contains("failed"), "{err}");
    let out = env
        .cmd()
        .env_remove("COFFER_PASSWORD")
        .args(["--password-command", "echo wrong", "snapshots"])
        .output()
        .unwrap();
    assert_code(&out, 12);

    // Standard input that is not a terminal gives the passphrase, as in restic.
    let mut child = env
        .cmd()
        .env_remove("COFFER_PASSWORD")
        .args(["snapshots"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(format!("{PASSWORD}\n").as_bytes()).unwrap();
    assert_success(&child.wait_with_output().unwrap());
}

#[test]
fn prune_announces_its_wait_and_its_dry_run_figures_match_the_real_run() {
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    for i in 0..4 {
        std::fs::write(src.join(format!("f{i}")), random_bytes(300_000, 10 + i)).unwrap();
    }
    let first = env.backup(&[&src]);
    std::fs::remove_file(src.join("f0")).unwrap();
    std::fs::write(src.join("g"), random_bytes(100_000, 99)).unwrap();
    env.backup(&[&src]);
    assert_success(&env.run(&["forget", &first]));

    let prune = |extra: &[&str]| {
        let mut args = vec!["--json", "prune", "--grace", "300ms"];
        args.extend_from_slice(extra);
        let out = env.cmd().env("COFFER_TEST_PRUNE_GRACE_MS", "300").args(&args).output().unwrap();
        assert_success(&out);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        (v, text(&out.stderr))
    };
    let (dry, dry_err) = prune(&["--dry-run"]);
    assert!(!dry_err.contains("waiting"), "a dry run does not wait: {dry_err}");
    let (real, real_err) = prune(&[]);
    let event: serde_json::Value = real_err
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["type"] == "status" && v["action"] == "waiting")
        .unwrap_or_else(|| panic!("no waiting event: {real_err}"));
    assert_eq!(event["seconds"], 0.3);
    assert!(event["reason"].as_str().unwrap().contains("running backups"), "{event}");
    assert!(event["until"].as_str().unwrap().ends_with('Z'), "{event}");
    for field in [
        "packs",
        "bytes_before",
        "blobs_used",
        "blobs_unused",
        "packs_deleted",
        "packs_repacked",
        "bytes_deleted",
        "index_files_replaced",
    ] {
        assert_eq!(dry["report"][field], real["report"][field], "{field}: dry {dry} real {real}");
    }
    assert!(real["report"]["packs_deleted"].as_u64().unwrap() + real["report"]["packs_repacked"].as_u64().unwrap() > 0);
    // What repacking writes (whether a pack is repacked depends on how the
    // backups' blobs were packed): the blobs the dry run counts, plus new
    // headers and index files (a little).
    let repacked = |v: &serde_json::Value| v["report"]["bytes_repacked"].as_u64().unwrap() as f64;
    assert!(repacked(&dry) <= repacked(&real) && repacked(&dry) >= repacked(&real) * 0.95, "dry {dry} real {real}");
    // Text without a terminal: one line saying what it waits for and how long.
    std::fs::remove_file(src.join("g")).unwrap();
    let second = env.backup(&[&src]);
    std::fs::write(src.join("h"), random_bytes(50_000, 5)).unwrap();
    env.backup(&[&src]);
    assert_success(&env.run(&["forget", &second]));
    let out = env.cmd().env("COFFER_TEST_PRUNE_GRACE_MS", "300").args(["prune", "--grace", "1s"]).output().unwrap();
    assert_success(&out);
    let err = text(&out.stderr);
    assert!(err.contains("prune: waiting 1s (until ") && err.contains("for running backups"), "{err}");
}

#[test]
fn version_generate_and_stats() {
    let env = Env::new();
    let out = env.run(&["version"]);
    assert_success(&out);
    assert!(text(&out.stdout).starts_with(&format!("coffer {} (", env!("CARGO_PKG_VERSION"))), "{}", text(&out.stdout));
    assert_eq!(env.json(&["version"])["version"], env!("CARGO_PKG_VERSION"));

    let dir = env.path("gen");
    std::fs::create_dir_all(&dir).unwrap();
    let (bash, zsh, fish, man) =
        (dir.join("coffer.bash"), dir.join("_coffer"), dir.join("coffer.fish"), dir.join("man"));
    let out = env.run(&[
        "generate",
        "--bash-completion",
        bash.to_str().unwrap(),
        "--zsh-completion",
        zsh.to_str().unwrap(),
        "--fish-completion",
        fish.to_str().unwrap(),
        "--man",
        man.to_str().unwrap(),
    ]);
    assert_success(&out);
    let bash = std::fs::read_to_string(bash).unwrap();
    assert!(bash.contains("_coffer()") && bash.contains("--keep-hourly") && bash.contains("forget"), "bash");
    assert!(std::fs::read_to_string(zsh).unwrap().starts_with("#compdef coffer"));
    assert!(std::fs::read_to_string(fish).unwrap().contains("complete -c coffer"));
    let page = std::fs::read_to_string(man.join("coffer-forget.1")).unwrap();
    assert!(page.contains(".TH coffer-forget") && page.contains("unsafe\\-allow\\-remove\\-all"), "{page}");
    assert!(man.join("coffer.1").exists() && man.join("coffer-backup.1").exists());
    let out = env.run(&["generate", "--fish-completion", "-"]);
    assert!(text(&out.stdout).contains("complete -c coffer"));
    assert_code(&env.run(&["generate"]), 2);

    // Two snapshots of the same 300 KB: restore size counts both, raw data once.
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("a"), random_bytes(300_000, 1)).unwrap();
    std::fs::write(src.join("b"), b"small").unwrap();
    let first = env.backup(&[&src]);
    env.json(&["backup", src.to_str().unwrap(), "--force"]);
    let v = env.json(&["stats"]);
    assert_eq!((v["snapshots_count"].as_u64(), v["total_file_count"].as_u64()), (Some(2), Some(4)));
    assert_eq!(v["total_size"], 2 * 300_005);
    let raw = env.json(&["stats", "--mode", "raw-data"]);
    let stored = raw["total_size"].as_u64().unwrap();
    assert!((300_000..330_000).contains(&stored), "random data is stored once: {raw}");
    assert!(raw["dedup_ratio"].as_f64().unwrap() > 1.8, "{raw}");
    let one = env.json(&["stats", &first[..8]]);
    assert_eq!((one["snapshots_count"].as_u64(), one["total_size"].as_u64()), (Some(1), Some(300_005)));
    let out = env.run(&["stats", "--mode", "raw-data"]);
    assert!(text(&out.stdout).contains("Restore size:"), "{}", text(&out.stdout));
}

#[test]
fn without_a_terminal_a_long_command_prints_status_lines() {
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    for i in 0..8 {
        std::fs::write(src.join(format!("f{i}")), random_bytes(2 << 20, 40 + i)).unwrap();
    }
    let s = src.to_str().unwrap();
    let out = env.run(&["--progress-interval", "5ms", "backup", s]);
    assert_success(&out);
    let err = text(&out.stderr);
    assert!(err.lines().any(|l| l.starts_with("backup: ") && l.contains(" elapsed")), "{err}");
    let out = env.run(&["--json", "--progress-interval", "5ms", "backup", s, "--force"]);
    assert_success(&out);
    let status: Vec<serde_json::Value> = text(&out.stderr)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["type"] == "status" && v["action"] == "progress")
        .collect();
    assert!(!status.is_empty(), "{}", text(&out.stderr));
    assert!(status.iter().all(|v| v["bytes_done"].as_u64().unwrap() <= 16 << 20));
    let out = env.run(&["-q", "--progress-interval", "5ms", "backup", s, "--force"]);
    assert_success(&out);
    assert!(text(&out.stderr).is_empty(), "quiet: {}", text(&out.stderr));
    assert_code(&env.run(&["--progress-interval", "often", "snapshots"]), 2);
}
