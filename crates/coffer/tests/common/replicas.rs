//! A repository over several local directories, for the tests of
//! docs/design.md#many-backends: `coffer` opened at any one backend, copies
//! counted by listing the directories, snapshots restored and compared.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use super::*;

/// The grace period the tests give the prune protocol and copy removals.
pub const GRACE_MS: &str = "150";

/// A repository with R copies over the given backends (`NAME:SIZE` each), all
/// local directories under the test's scratch space.
pub struct Replicas {
    pub env: Env,
    pub names: Vec<String>,
}

impl Replicas {
    pub fn new(replicas: u8, backends: &[&str]) -> Replicas {
        let env = Env::empty();
        let names: Vec<String> = backends.iter().map(|b| b.split(':').next().unwrap().to_string()).collect();
        let mut args: Vec<String> = ["init", "--kdf-log-n", "10", "--insecure-kdf", "--pack-size", "1M", "--replicas"]
            .map(String::from)
            .to_vec();
        args.push(replicas.to_string());
        for (b, name) in backends.iter().zip(&names) {
            args.push("--backend".into());
            args.push(format!("{b}={}", env.path(name).display()));
        }
        let r = Replicas { env, names };
        let out = r.at(&r.names[0]).args(&args).output().unwrap();
        assert_success(&out);
        r
    }

    pub fn dir(&self, name: &str) -> PathBuf {
        self.env.path(name)
    }

    /// `coffer` opening the repository at backend `name`'s location.
    pub fn at(&self, name: &str) -> Command {
        let mut c = self.env.cmd();
        c.env("COFFER_REPOSITORY", self.dir(name))
            .env("COFFER_RETRY_BASE_MS", "1")
            .env("COFFER_TEST_PRUNE_GRACE_MS", GRACE_MS);
        c
    }

    pub fn run(&self, name: &str, args: &[&str]) -> Output {
        self.at(name).args(args).output().unwrap()
    }

    pub fn json(&self, name: &str, args: &[&str]) -> (i32, serde_json::Value) {
        let out = self.run(name, &[&["--json"], args].concat());
        let v = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{args:?}: {e}: {}{}", text(&out.stdout), text(&out.stderr)));
        (out.status.code().unwrap_or(-1), v)
    }

    /// How many backends hold each pack.
    pub fn copies(&self) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for n in &self.names {
            for f in files_under(&self.dir(n).join("data")) {
                *out.entry(f.file_name().unwrap().to_string_lossy().into_owned()).or_default() += 1;
            }
        }
        out
    }
}

pub fn make_tree(root: &Path, seed: u64) {
    std::fs::create_dir_all(root.join("sub")).unwrap();
    for i in 0..6u64 {
        std::fs::write(root.join(format!("f{i}")), random_bytes(400_000 + i as usize * 50_000, seed + i)).unwrap();
    }
    std::fs::write(root.join("sub/text"), "hello\n".repeat(5_000)).unwrap();
}

/// Restores every snapshot `(id, path backed up, what it held)` and compares.
pub fn restores_bit_exact(r: &Replicas, from: &str, sources: &[(String, PathBuf, PathBuf)]) {
    for (i, (id, path, held)) in sources.iter().enumerate() {
        let target = r.env.path(&format!("restored-{from}-{i}"));
        assert_success(&r.run(from, &["-q", "restore", id, "--target", target.to_str().unwrap()]));
        let inner = target.join(path.strip_prefix("/").unwrap());
        assert_same_tree(held, &inner);
        std::fs::remove_dir_all(&target).unwrap();
    }
}

/// Backs up `src` from backend `at`; returns the snapshot id.
pub fn backup(r: &Replicas, at: &str, src: &Path, extra: &[&str]) -> String {
    let out = r.at(at).args(extra).args(["--json", "-q", "backup", src.to_str().unwrap()]).output().unwrap();
    assert_success(&out);
    let v: serde_json::Value =
        serde_json::from_slice(out.stdout.split(|&b| b == b'\n').rfind(|l| !l.is_empty()).unwrap())
            .unwrap_or_else(|e| panic!("{e}: {}", text(&out.stdout)));
    v["snapshot_id"].as_str().or(v["id"].as_str()).unwrap_or_else(|| panic!("no snapshot id in {v}")).to_string()
}

/// Keeps a copy of `src` as it is now, for comparing a restore of this snapshot.
pub fn keep_copy(r: &Replicas, src: &Path, tag: &str) -> PathBuf {
    let copy = r.env.path(&format!("kept-{tag}"));
    std::fs::create_dir_all(&copy).unwrap();
    let status = Command::new("cp").arg("-a").arg(src).arg(&copy).status().unwrap();
    assert!(status.success());
    copy.join(src.file_name().unwrap())
}

impl Replicas {
    /// Which backends hold each pack, counting only copies whose bytes hash
    /// (BLAKE3) to the pack's name: what a reader can trust.
    pub fn verified_holders(&self) -> BTreeMap<String, Vec<String>> {
        let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for n in &self.names {
            for f in files_under(&self.dir(n).join("data")) {
                let name = f.file_name().unwrap().to_string_lossy().into_owned();
                // A file that vanished between listing and reading is no copy.
                let Ok(bytes) = std::fs::read(&f) else { continue };
                if blake3::hash(&bytes).to_hex().as_str() == name {
                    out.entry(name).or_default().push(n.clone());
                }
            }
        }
        out
    }

    /// The objects under `prefix/` of backend `name`.
    pub fn objects(&self, name: &str, prefix: &str) -> Vec<PathBuf> {
        files_under(&self.dir(name).join(prefix))
    }
}
