//! Helpers shared by the command-line tests: run the real `coffer` binary against
//! a repository in a temporary directory, with a cheap KDF (`--kdf-log-n 10
//! --insecure-kdf`, so that the suite stays fast).
#![allow(dead_code)]

pub mod remote;
pub mod replicas;
pub mod trees;
pub mod ui;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The passphrase every test repository uses.
pub const PASSWORD: &str = "correct horse battery staple";

/// A test repository and scratch space, removed on drop.
pub struct Env {
    pub dir: tempfile::TempDir,
}

impl Env {
    /// A fresh scratch directory with an initialised repository at `repo()`.
    pub fn new() -> Env {
        Self::with_init_args(&[])
    }

    /// Like [`Env::new`], passing extra arguments to `coffer init`.
    pub fn with_init_args(extra: &[&str]) -> Env {
        let env = Env { dir: tempfile::tempdir().expect("tempdir") };
        let mut args = vec!["init", "--kdf-log-n", "10", "--insecure-kdf"];
        args.extend_from_slice(extra);
        let out = env.run(&args);
        assert_success(&out);
        env
    }

    /// A scratch directory without a repository.
    pub fn empty() -> Env {
        Env { dir: tempfile::tempdir().expect("tempdir") }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub fn repo(&self) -> PathBuf {
        self.path("repo")
    }

    /// The `coffer` command with the repository and passphrase set.
    pub fn cmd(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_coffer"));
        c.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.path("home"))
            .env("COFFER_REPOSITORY", self.repo())
            .env("COFFER_PASSWORD", PASSWORD);
        c
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd().args(args).output().expect("run coffer")
    }

    /// Runs a command that must succeed and returns its stdout parsed as JSON.
    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut a = vec!["--json"];
        a.extend_from_slice(args);
        let out = self.run(&a);
        assert_success(&out);
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", text(&out.stdout)))
    }

    /// Backs up `paths` and returns the snapshot id.
    pub fn backup(&self, paths: &[&Path]) -> String {
        let mut args = vec!["backup".to_string()];
        args.extend(paths.iter().map(|p| p.to_string_lossy().into_owned()));
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let v = self.json(&a);
        v["snapshot_id"].as_str().expect("snapshot id").to_string()
    }

    /// Total bytes of every file in the repository.
    pub fn repo_size(&self) -> u64 {
        files_under(&self.repo()).iter().map(|p| std::fs::metadata(p).unwrap().len()).sum()
    }
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

pub fn assert_success(out: &Output) {
    assert!(
        out.status.success(),
        "coffer failed with {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        text(&out.stdout),
        text(&out.stderr)
    );
}

/// Asserts the exit code and returns stderr.
pub fn assert_code(out: &Output, code: i32) -> String {
    assert_eq!(
        out.status.code(),
        Some(code),
        "unexpected exit code\nstdout: {}\nstderr: {}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stderr)
}

/// Every regular file below `dir`, recursively, sorted.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let p = e.path();
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                stack.push(p);
            } else if ft.is_file() {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Deterministic pseudo-random bytes (xorshift), incompressible.
pub fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Asserts that the regular files below `expected` and `got` have the same relative
/// paths and contents.
pub fn assert_same_tree(expected: &Path, got: &Path) {
    let rel = |root: &Path| -> Vec<PathBuf> {
        files_under(root).iter().map(|p| p.strip_prefix(root).unwrap().to_path_buf()).collect()
    };
    assert_eq!(rel(expected), rel(got), "file lists differ: {} vs {}", expected.display(), got.display());
    for r in rel(expected) {
        assert!(std::fs::read(expected.join(&r)).unwrap() == std::fs::read(got.join(&r)).unwrap(), "{r:?} differs");
    }
}

/// Waits (at most a minute) until the repository of `env` holds an object under
/// `dir`, then sends `child` SIGINT, as Ctrl-C would.
pub fn interrupt_once_stored(env: &Env, dir: &str, child: &std::process::Child) {
    let start = std::time::Instant::now();
    while files_under(&env.repo().join(dir)).is_empty() && start.elapsed() < std::time::Duration::from_secs(60) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let pid = rustix::process::Pid::from_raw(child.id() as i32).expect("a child's pid");
    rustix::process::kill_process(pid, rustix::process::Signal::INT).expect("SIGINT");
}

/// Starts `c` and kills it (SIGKILL) as soon as the repository of `env` holds
/// one more object under `dir` than before (or after a minute, or when it ends
/// by itself): an interruption at a point the test chooses.
pub fn kill_once_more_stored(env: &Env, mut c: Command, dir: &str) {
    let mut child = c.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).spawn().unwrap();
    let before = files_under(&env.repo().join(dir)).len();
    let start = std::time::Instant::now();
    while files_under(&env.repo().join(dir)).len() == before && start.elapsed() < std::time::Duration::from_secs(60) {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let _ = child.kill();
    child.wait().unwrap();
}

/// The data extents of `f` (SEEK_DATA/SEEK_HOLE), or the whole file if the file
/// system cannot tell.
pub fn data_extents(f: &std::fs::File, size: u64) -> Vec<(u64, u64)> {
    use rustix::fs::SeekFrom;
    let mut out = Vec::new();
    let mut off = 0;
    while off < size {
        let start = match rustix::fs::seek(f, SeekFrom::Data(off)) {
            Ok(s) => s,
            Err(rustix::io::Errno::NXIO) => break,
            Err(_) => return vec![(0, size)],
        };
        let end = rustix::fs::seek(f, SeekFrom::Hole(start)).unwrap_or(size).min(size);
        if end <= start {
            return vec![(0, size)];
        }
        out.push((start, end));
        off = end;
    }
    out
}
