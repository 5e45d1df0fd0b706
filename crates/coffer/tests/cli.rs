//! Command-line behaviour: backup options, snapshot selection, cat, JSON output.

mod common;

use std::path::Path;

use common::*;

fn make_tree(root: &Path) {
    for d in ["keep", "cache", "keep/deep"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    std::fs::write(root.join("keep/a.txt"), b"a").unwrap();
    std::fs::write(root.join("keep/b.tmp"), b"b").unwrap();
    std::fs::write(root.join("keep/deep/c.log"), b"c").unwrap();
    std::fs::write(root.join("cache/blob"), random_bytes(10_000, 3)).unwrap();
}

fn listed(env: &Env, snap: &str) -> Vec<String> {
    let out = env.run(&["--json", "ls", snap]);
    assert_success(&out);
    text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["path"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn excludes_from_options_and_files() {
    let env = Env::new();
    let src = env.path("src");
    make_tree(&src);
    let exclude_file = env.path("excludes");
    std::fs::write(&exclude_file, "# comment\n\n*.log\n").unwrap();
    let out = env.json(&[
        "backup",
        src.to_str().unwrap(),
        "--exclude",
        "cache/",
        "--exclude",
        "*.tmp",
        "--exclude-file",
        exclude_file.to_str().unwrap(),
    ]);
    let id = out["snapshot_id"].as_str().unwrap().to_string();
    let paths = listed(&env, &id);
    let rel: Vec<String> =
        paths.iter().filter_map(|p| p.strip_prefix(src.to_str().unwrap()).map(String::from)).collect();
    assert_eq!(rel, vec!["", "/keep", "/keep/a.txt", "/keep/deep"], "{paths:?}");
    let snap = env.json(&["cat", "snapshot", &id]);
    // The three given, then the repository itself and coffer's local state.
    let excludes: Vec<&str> =
        snap["snapshot"]["excludes"].as_array().unwrap().iter().map(|e| e.as_str().unwrap()).collect();
    assert_eq!(excludes[..3], ["cache/", "*.tmp", "*.log"], "{excludes:?}");
    assert!(excludes.iter().any(|e| e.ends_with("/repo")), "{excludes:?}");
    assert!(excludes.iter().any(|e| e.ends_with("/.local/state/coffer")), "{excludes:?}");
}

#[test]
fn the_repository_is_never_backed_up_into_itself() {
    let env = Env::new();
    make_tree(&env.path("src"));
    let home = env.dir.path();
    let id = env.backup(&[home]);
    let paths = listed(&env, &id);
    let repo = std::fs::canonicalize(env.repo()).unwrap();
    assert!(paths.iter().any(|p| p.ends_with("/src/keep/a.txt")), "{paths:?}");
    assert!(!paths.iter().any(|p| p.starts_with(repo.to_str().unwrap())), "{paths:?}");
}

#[test]
fn a_path_below_a_symlinked_directory_is_backed_up_under_its_real_path() {
    let env = Env::new();
    let real = env.path("real");
    make_tree(&real.join("data"));
    std::os::unix::fs::symlink(&real, env.path("link")).unwrap();
    let via_link = env.path("link/data");
    let out = env.json(&["backup", via_link.to_str().unwrap()]);
    let id = out["snapshot_id"].as_str().unwrap().to_string();
    let snap = env.json(&["cat", "snapshot", &id]);
    let real_data = std::fs::canonicalize(real.join("data")).unwrap();
    assert_eq!(snap["snapshot"]["paths"], serde_json::json!([real_data.to_str().unwrap()]));
    let paths = listed(&env, &id);
    assert!(paths.contains(&format!("{}/keep/a.txt", real_data.display())), "{paths:?}");
}

#[test]
fn dry_run_writes_nothing() {
    let env = Env::new();
    let src = env.path("src");
    make_tree(&src);
    let before = files_under(&env.repo());
    let out = env.json(&["backup", "--dry-run", src.to_str().unwrap()]);
    assert_eq!(out["dry_run"], true);
    assert!(out["snapshot_id"].is_null());
    assert_eq!(out["summary"]["files_new"], 4);
    assert!(out["summary"]["bytes_new"].as_u64().unwrap() >= 10_000);
    assert_eq!(files_under(&env.repo()), before);
}

#[test]
fn latest_tags_hosts_and_prefixes() {
    let env = Env::new();
    let src = env.path("src");
    make_tree(&src);
    let s = src.to_str().unwrap();
    let a =
        env.json(&["backup", s, "--tag", "daily,one", "--host", "alpha"])["snapshot_id"].as_str().unwrap().to_string();
    let b = env.json(&["backup", s, "--tag", "weekly", "--host", "beta"])["snapshot_id"].as_str().unwrap().to_string();
    let c = env.json(&["backup", s, "--host", "alpha"])["snapshot_id"].as_str().unwrap().to_string();
    let id_of = |args: &[&str]| -> String {
        let mut a = vec!["cat", "snapshot", "latest"];
        a.extend_from_slice(args);
        let v = env.json(&a);
        v["id"].as_str().unwrap().to_string()
    };
    // `cat snapshot latest` takes no filters; use `ls` with filters through snapshots instead.
    assert_eq!(id_of(&[]), c);
    let snaps = env.json(&["snapshots", "--host", "alpha"]);
    let ids: Vec<&str> = snaps.as_array().unwrap().iter().map(|s| s["id"].as_str().unwrap()).collect();
    assert_eq!(ids, vec![a.as_str(), c.as_str()]);
    let snaps = env.json(&["snapshots", "--tag", "weekly"]);
    assert_eq!(snaps.as_array().unwrap().len(), 1);
    assert_eq!(snaps[0]["snapshot"]["hostname"], "beta");
    assert_eq!(snaps[0]["snapshot"]["tags"], serde_json::json!(["weekly"]));
    // latest narrowed by host and tag, and a unique prefix, all restore-able names.
    let target = env.path("t1");
    let out = env.json(&["restore", "latest", "--host", "beta", "--target", target.to_str().unwrap()]);
    assert_eq!(out["snapshot_id"], b.as_str());
    let target = env.path("t2");
    let out = env.json(&["restore", "latest", "--tag", "daily", "--target", target.to_str().unwrap()]);
    assert_eq!(out["snapshot_id"], a.as_str());
    let target = env.path("t3");
    let out = env.json(&["restore", &b[..10], "--target", target.to_str().unwrap()]);
    assert_eq!(out["snapshot_id"], b.as_str());
    let err = assert_code(&env.run(&["ls", "latest", "--host", "gamma"]), 1);
    assert!(err.contains("no snapshot matches"), "{err}");
    // Each host's second backup uses its own parent for change detection.
    let snap_c = env.json(&["cat", "snapshot", &c]);
    assert_eq!(snap_c["snapshot"]["parent"], a.as_str());
    assert_eq!(snap_c["snapshot"]["summary"]["files_unchanged"], 4);
}

#[test]
fn changed_files_are_counted_and_reread() {
    let env = Env::new();
    let src = env.path("src");
    make_tree(&src);
    env.backup(&[&src]);
    std::fs::write(src.join("keep/a.txt"), b"changed content").unwrap();
    std::fs::write(src.join("keep/new.txt"), b"new").unwrap();
    let out = env.json(&["backup", src.to_str().unwrap()]);
    let m = &out["summary"];
    assert_eq!(
        (m["files_new"].as_u64(), m["files_changed"].as_u64(), m["files_unchanged"].as_u64()),
        (Some(1), Some(1), Some(3))
    );
    assert_eq!(m["bytes_read"], 18);
    let target = env.path("out");
    let spec = format!("latest:{}", src.display());
    assert_success(&env.run(&["restore", &spec, "--target", target.to_str().unwrap()]));
    assert_eq!(std::fs::read(target.join("keep/a.txt")).unwrap(), b"changed content");
}

#[test]
fn reread_share_reads_unchanged_files_again() {
    let env = Env::new();
    let src = env.path("src");
    make_tree(&src);
    env.backup(&[&src]);
    let quiet = env.json(&["backup", src.to_str().unwrap()]);
    assert_eq!(quiet["summary"]["bytes_read"], 0);
    let all = env.json(&["backup", src.to_str().unwrap(), "--reread-share", "100"]);
    let m = &all["summary"];
    assert_eq!(m["files_unchanged"], 4, "rereading finds the same content: {m}");
    assert_eq!(m["files_changed"], 0);
    assert_eq!(m["bytes_read"], m["bytes_total"]);
    // Reread content deduplicates: at most the trees above `src` are new (their mtimes
    // change as other tests use /tmp), never the 10 000-byte file.
    assert!(m["bytes_new"].as_u64().unwrap() < 4096, "{m}");
    assert_code(&env.run(&["backup", src.to_str().unwrap(), "--reread-share", "101"]), 2);
}

#[test]
fn cat_prints_every_object_kind() {
    let env = Env::new();
    let src = env.path("src");
    make_tree(&src);
    let id = env.backup(&[&src]);
    let config = env.json(&["cat", "config"]);
    assert_eq!(config["version"], 2);
    assert_eq!(config["chunker"]["avg_size"], 1 << 20);
    let key = env.json(&["cat", "key"]);
    assert_eq!(key["key"]["kdf"], "scrypt");
    assert_eq!(key["key"]["scrypt"]["log_n"], 10);
    let snap = env.json(&["cat", "snapshot", &id[..8]]);
    let tree_id = snap["snapshot"]["tree"].as_str().unwrap().to_string();
    let tree = env.json(&["cat", "tree", &tree_id]);
    assert!(tree["tree"]["nodes"].is_array());
    let sub = env.json(&["cat", "tree", &format!("{id}:{}/keep", src.display())]);
    let names: Vec<&str> =
        sub["tree"]["nodes"].as_array().unwrap().iter().map(|n| n["name"].as_str().unwrap()).collect();
    assert_eq!(names, vec!["a.txt", "b.tmp", "deep"]);
    let err = assert_code(&env.run(&["cat", "nonsense"]), 1);
    assert!(err.contains("cannot cat"), "{err}");
}

#[test]
fn every_command_documents_exit_codes() {
    let env = Env::empty();
    for cmd in ["init", "backup", "snapshots", "ls", "restore", "cat", "check"] {
        let out = env.run(&[cmd, "--help"]);
        assert_success(&out);
        let help = text(&out.stdout);
        assert!(help.contains("Exit codes") && help.contains("130"), "{cmd} --help lacks exit codes");
    }
}

/// Every exit code the README's table lists is in `--help`'s list too.
#[test]
fn help_lists_every_exit_code_the_readme_does() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    let section = &readme[readme.find("## Exit codes").expect("README has an exit code table")..];
    let table = &section[..section[3..].find("\n## ").map_or(section.len(), |i| i + 3)];
    let codes: Vec<&str> = table
        .lines()
        .filter_map(|l| l.strip_prefix("| ")?.split(' ').next())
        .filter(|c| c.parse::<u8>().is_ok())
        .collect();
    assert!(codes.contains(&"141"), "{codes:?}");
    let help = text(&Env::empty().run(&["--help"]).stdout);
    for code in codes {
        assert!(help.lines().any(|l| l.trim_start().starts_with(&format!("{code} "))), "--help lacks exit code {code}");
    }
}

#[test]
fn password_file_is_read() {
    let env = Env::new();
    let pw = env.path("pw");
    std::fs::write(&pw, format!("{PASSWORD}\n")).unwrap();
    let out = env
        .cmd()
        .env_remove("COFFER_PASSWORD")
        .args(["--password-file", pw.to_str().unwrap(), "snapshots"])
        .output()
        .unwrap();
    assert_success(&out);
    std::fs::write(&pw, "wrong\n").unwrap();
    let out =
        env.cmd().env_remove("COFFER_PASSWORD").env("COFFER_PASSWORD_FILE", &pw).args(["snapshots"]).output().unwrap();
    assert_code(&out, 12);
    // No passphrase source and no terminal: a clear error, not a hang.
    let out = env
        .cmd()
        .env_remove("COFFER_PASSWORD")
        .args(["snapshots"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let err = assert_code(&out, 1);
    assert!(err.contains("no passphrase"), "{err}");
}

#[test]
fn output_into_a_reader_that_stops_early_ends_quietly() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let env = Env::new();
    let src = env.path("src");
    for i in 0..3000 {
        let d = src.join(format!("d{}", i % 30));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join(format!("a-rather-long-file-name-to-fill-the-pipe-{i}")), b"x").unwrap();
    }
    env.backup(&[&src]);
    let mut child = env.cmd().args(["ls", "latest"]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
    // The reader is gone: the rest of the listing cannot be written.
    let out = child.wait_with_output().unwrap();
    assert!(!first.is_empty());
    let err = text(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(out.status.code(), Some(141), "{err}");
}
