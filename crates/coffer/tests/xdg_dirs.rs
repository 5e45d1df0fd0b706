//! With XDG_CACHE_HOME, XDG_STATE_HOME, XDG_CONFIG_HOME and XDG_DATA_HOME set,
//! the daily commands write nothing outside them, the repository and a restore
//! target: not in HOME, the working directory, TMPDIR or the backed-up source
//! (docs/design.md#local-state, #cli).

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{Env, assert_success, text};

/// Every entry (file, directory, link) below `dir`, relative to it, sorted.
fn entries(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let p = e.path();
            out.push(p.strip_prefix(dir).unwrap().to_path_buf());
            if e.file_type().unwrap().is_dir() {
                stack.push(p);
            }
        }
    }
    out.sort();
    out
}

struct Xdg {
    env: Env,
}

impl Xdg {
    const DIRS: [(&'static str, &'static str); 4] = [
        ("XDG_CACHE_HOME", "cache"),
        ("XDG_STATE_HOME", "state"),
        ("XDG_CONFIG_HOME", "config"),
        ("XDG_DATA_HOME", "data"),
    ];

    fn new() -> Xdg {
        let env = Env::empty();
        for d in ["home", "cwd", "tmp", "cache", "state", "config", "data"] {
            fs::create_dir_all(env.path(d)).unwrap();
        }
        Xdg { env }
    }

    fn cmd(&self) -> Command {
        let mut c = self.env.cmd();
        for (var, dir) in Self::DIRS {
            c.env(var, self.env.path(dir));
        }
        c.env("TMPDIR", self.env.path("tmp")).current_dir(self.env.path("cwd"));
        c
    }

    fn run(&self, args: &[&str]) -> std::process::Output {
        let out = self.cmd().args(args).output().unwrap();
        assert_success(&out);
        out
    }
}

#[test]
fn commands_write_only_to_the_xdg_directories_the_repository_and_the_target() {
    let x = Xdg::new();
    let src = x.env.path("src");
    fs::create_dir_all(src.join("sub")).unwrap();
    fs::write(src.join("a"), common::random_bytes(200_000, 5)).unwrap();
    fs::write(src.join("sub/b"), b"bee").unwrap();
    let source_before = entries(&src);
    let s = src.to_str().unwrap();
    let target = x.env.path("target");
    let t = target.to_str().unwrap();

    x.run(&["init", "--kdf-log-n", "10", "--insecure-kdf"]);
    x.run(&["backup", s]);
    fs::write(src.join("sub/b"), b"bee, changed").unwrap();
    let out = x.run(&["--json", "backup", "-v", s]);
    let id: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = id["snapshot_id"].as_str().unwrap().to_string();
    for args in [
        vec!["snapshots"],
        vec!["ls", "latest", "-l"],
        vec!["diff", &id, "latest"],
        vec!["stats"],
        vec!["find", "b"],
        vec!["check", "--read-data"],
        vec!["key", "list"],
        vec!["writers"],
        vec!["restore", "latest", "--target", t, "--verify"],
        vec!["tag", "--add", "x", "latest"],
        vec!["forget", "--keep-last", "1"],
        vec!["prune", "--grace", "10ms"],
    ] {
        let out = x.cmd().env("COFFER_TEST_PRUNE_GRACE_MS", "10").args(&args).output().unwrap();
        assert_success(&out);
    }
    let dumped = x.run(&["dump", "latest", &format!("{s}/sub/b")]);
    assert_eq!(dumped.stdout, b"bee, changed");

    // Nothing but what was named.
    for d in ["home", "cwd", "tmp", "cache", "config", "data"] {
        assert_eq!(entries(&x.env.path(d)), Vec::<PathBuf>::new(), "coffer wrote into {d}");
    }
    assert_eq!(entries(&src), source_before, "the source was written to");
    let mut top: Vec<String> =
        fs::read_dir(x.env.dir.path()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    top.sort();
    assert_eq!(top, ["cache", "config", "cwd", "data", "home", "repo", "src", "state", "target", "tmp"]);
    // The local state (writer key, heads) is where XDG_STATE_HOME says.
    let state = entries(&x.env.path("state"));
    assert!(state.iter().any(|p| p.starts_with("coffer")), "no local state under XDG_STATE_HOME: {state:?}");
}

#[test]
fn a_stdin_backup_and_the_default_repository_stay_inside_the_xdg_directories() {
    let x = Xdg::new();
    // No --repo: the default repository is created under XDG_DATA_HOME.
    let mut c = x.cmd();
    c.env_remove("COFFER_REPOSITORY").args(["backup", "--stdin", "--stdin-filename", "notes.txt"]);
    c.stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    let mut child = c.spawn().unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), b"some notes\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_success(&out);
    assert!(x.env.path("data/coffer/repo/config").is_file(), "{}", text(&out.stdout));
    for d in ["home", "cwd", "tmp", "cache", "config"] {
        assert_eq!(entries(&x.env.path(d)), Vec::<PathBuf>::new(), "coffer wrote into {d}");
    }
    assert!(!x.env.path("repo").exists());
    let dumped = x.cmd().env_remove("COFFER_REPOSITORY").args(["dump", "latest", "notes.txt"]).output().unwrap();
    assert_eq!(dumped.stdout, b"some notes\n");
}
