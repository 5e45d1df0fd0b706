//! The local cache through the binary (docs/design.md#local-cache): a second
//! command reads what it read before from the cache, not from the storage; a
//! corrupted cache entry is detected, dropped and fetched again, with a correct
//! result; `check` reads the repository itself; `coffer cache` lists and cleans
//! up. Against a local directory with the cache forced on (`--cache-dir`), and
//! against the S3 test server when its variables are set (docs/testing.md).

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::*;

fn var(k: &str) -> Option<String> {
    std::env::var(k).ok().filter(|v| !v.is_empty())
}

/// A repository (local, or in a fresh prefix of the S3 test bucket), a cache
/// base directory, and scratch space.
struct Setup {
    dir: tempfile::TempDir,
    repo: String,
    env: Vec<(String, String)>,
    /// `--cache-dir` given on every command (a local repository needs it).
    explicit_cache: bool,
}

impl Setup {
    fn local() -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("repo").display().to_string();
        Setup { dir, repo, env: Vec::new(), explicit_cache: true }
    }

    fn s3() -> Option<Setup> {
        let Some(endpoint) = var("COFFER_TEST_S3_ENDPOINT") else {
            coffer_backend::testing::servers::absent(coffer_backend::testing::servers::Server::S3);
            return None;
        };
        let bucket = var("COFFER_TEST_S3_BUCKET")?;
        let env = vec![
            ("AWS_ACCESS_KEY_ID".into(), var("COFFER_TEST_S3_ACCESS_KEY")?),
            ("AWS_SECRET_ACCESS_KEY".into(), var("COFFER_TEST_S3_SECRET_KEY")?),
            ("AWS_REGION".into(), var("COFFER_TEST_S3_REGION")?),
        ];
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        let repo = format!("s3:{endpoint}/{bucket}/cache-{}-{t}", std::process::id());
        // A remote repository gets its cache by default: under $XDG_CACHE_HOME.
        Some(Setup { dir: tempfile::tempdir().unwrap(), repo, env, explicit_cache: false })
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// The base directory of the caches.
    fn cache_base(&self) -> PathBuf {
        if self.explicit_cache { self.path("cache") } else { self.path("xdg-cache/coffer") }
    }

    fn run(&self, args: &[&str]) -> Output {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_coffer"));
        c.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.path("home"))
            .env("XDG_CACHE_HOME", self.path("xdg-cache"))
            .env("COFFER_REPOSITORY", &self.repo)
            .env("COFFER_PASSWORD", PASSWORD)
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        if self.explicit_cache {
            c.arg("--cache-dir").arg(self.cache_base());
        }
        c.args(args).output().expect("run coffer")
    }

    /// Runs a command with `--json -v`; returns its stdout and the storage line
    /// (requests and cache) from stderr.
    fn counted(&self, args: &[&str]) -> (String, serde_json::Value) {
        let mut a = vec!["--json", "-v"];
        a.extend_from_slice(args);
        let out = self.run(&a);
        assert_success(&out);
        let storage = text(&out.stderr)
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|v| v["type"] == "storage")
            .expect("a storage line with -v");
        (text(&out.stdout), storage)
    }

    /// The one cache directory below the base (named by the repository id).
    fn cache_dir(&self) -> PathBuf {
        let dirs: Vec<_> = std::fs::read_dir(self.cache_base())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.file_name().unwrap().len() == 64)
            .collect();
        assert_eq!(dirs.len(), 1, "one repository, one cache: {dirs:?}");
        dirs.into_iter().next().unwrap()
    }
}

fn tree(dir: &Path) -> PathBuf {
    let src = dir.join("src");
    for d in 0..6 {
        let sub = src.join(format!("dir{d}/sub"));
        std::fs::create_dir_all(&sub).unwrap();
        for f in 0..4 {
            std::fs::write(sub.join(format!("f{f}")), random_bytes(3000 + 1000 * f, (d * 10 + f) as u64)).unwrap();
        }
    }
    src
}

fn files(dir: &Path) -> Vec<PathBuf> {
    files_under(dir).into_iter().filter(|p| !p.ends_with("CACHEDIR.TAG")).collect()
}

/// Flips one byte of a file in the middle.
fn corrupt(file: &Path) {
    let mut b = std::fs::read(file).unwrap();
    let i = b.len() / 2;
    b[i] ^= 0x40;
    std::fs::write(file, b).unwrap();
}

/// Asserts two outputs are equal, showing the first line that differs.
fn same(got: &str, want: &str, what: &str) {
    if let Some((g, w)) = got.lines().zip(want.lines()).find(|(g, w)| g != w) {
        panic!("{what}: got\n{g}\nwanted\n{w}");
    }
    assert_eq!(got.lines().count(), want.lines().count(), "{what}: line counts");
}

fn gets(storage: &serde_json::Value) -> u64 {
    storage["requests"]["get"].as_u64().unwrap()
}

fn scenario(s: &Setup) {
    assert_success(&s.run(&["init", "--kdf-log-n", "10", "--insecure-kdf"]));
    let src = tree(s.dir.path());
    let src = src.to_str().unwrap();
    assert_success(&s.run(&["backup", src]));
    std::fs::write(Path::new(src).join("dir0/new"), b"one more file").unwrap();
    assert_success(&s.run(&["backup", src]));
    let cache = s.cache_dir();
    assert!(cache.join("CACHEDIR.TAG").is_file());
    let (_, backup) = s.counted(&["backup", src]);

    // Without the cache: every snapshot and writer record is fetched.
    let (plain_snaps, cold) = s.counted(&["--no-cache", "snapshots"]);
    assert!(cold["cache"].is_null());
    // With it: none of them (the config is read before the repository id,
    // which names the cache, is known; so is the key file of a local
    // repository, while a remote one's comes from the copy kept of it).
    let (snaps, warm) = s.counted(&["snapshots"]);
    same(&snaps, &plain_snaps, "snapshots");
    assert_eq!(warm["cache"]["misses"], 0, "{warm}");
    assert!(warm["cache"]["hits"].as_u64().unwrap() >= 2, "{warm}");
    assert!(gets(&warm) + 2 <= gets(&cold), "warm {warm}, cold {cold}");
    let opening = gets(&warm);
    let copies = s.cache_base().join("locations");
    if s.explicit_cache {
        assert_eq!(opening, 2, "config and key file: {warm}");
        assert!(!copies.exists());
    } else {
        assert_eq!(opening, 1, "config only: {warm}");
        // A damaged copy is no key file the storage lists: the key files are read.
        let copy = files(&copies).into_iter().find(|p| p.parent() == Some(copies.as_path())).expect("a key copy");
        corrupt(&copy);
        let (snaps, damaged) = s.counted(&["snapshots"]);
        same(&snaps, &plain_snaps, "snapshots with a damaged key copy");
        assert_eq!(gets(&damaged), 2, "{damaged}");
        assert_eq!(gets(&s.counted(&["snapshots"]).1), 1, "the copy was written again");
    }

    // `ls` reads the trees: from the cache, with no GET of pack data.
    let (plain_ls, cold_ls) = s.counted(&["--no-cache", "ls", "latest"]);
    let (ls, warm_ls) = s.counted(&["ls", "latest"]);
    same(&ls, &plain_ls, "ls");
    assert!(gets(&cold_ls) > opening + 2, "{cold_ls}");
    if !s.explicit_cache {
        // Remote without a cache, the trees are still read a run at a time (kept
        // in memory): at most the three index files and one run per tree pack
        // (three backups) more than `snapshots`, where one GET per tree would be
        // one per directory of the snapshot.
        let dirs = plain_ls.lines().filter(|l| Path::new(src).starts_with(l) || l.contains("/dir")).count();
        assert!(dirs >= 13, "{plain_ls}");
        assert!(gets(&cold_ls) <= gets(&cold) + 6, "snapshots {cold}, ls {cold_ls}, {dirs} directories");
        // The config and listings (the key file from the kept copy); the index
        // files beside the snapshots and their writers; the trees' runs. A
        // round is a request begun while none was in flight, so on a loaded
        // machine one of a batch sent together can finish before the next one
        // starts and count twice: the fewest of three runs is the structure's.
        let rounds = |v: &serde_json::Value| v["requests"]["rounds"].as_u64().unwrap();
        let fewest =
            (0..2).map(|_| rounds(&s.counted(&["--no-cache", "ls", "latest"]).1)).fold(rounds(&cold_ls), u64::min);
        assert!(fewest <= 5, "{fewest} rounds at best; first run {cold_ls}");
    }
    assert_eq!(gets(&warm_ls), opening, "only the key file and config: {warm_ls}");
    assert_eq!(warm_ls["cache"]["misses"], 0, "{warm_ls}");

    // An unchanged backup of an unchanged tree: no GET of pack data either.
    assert_eq!(gets(&backup), opening, "{backup}");

    // Corrupted entries (a snapshot, a tree blob's range) are dropped and fetched again.
    let mut entries = files(&cache);
    entries.retain(|p| {
        let rel = p.strip_prefix(&cache).unwrap().to_str().unwrap().to_string();
        rel.starts_with("snapshots/") || rel.starts_with("ranges/")
    });
    assert!(entries.iter().any(|p| p.to_str().unwrap().contains("/ranges/")), "{entries:?}");
    for p in &entries {
        corrupt(p);
    }
    let (ls2, after) = s.counted(&["ls", "latest"]);
    same(&ls2, &plain_ls, "ls after the cache was damaged");
    assert!(after["cache"]["dropped"].as_u64().unwrap() >= 2, "{after}");
    assert!(gets(&after) > opening, "{after}");
    let (snaps2, _) = s.counted(&["snapshots"]);
    same(&snaps2, &plain_snaps, "snapshots after the cache was damaged");
    // The entries were written again, intact.
    for p in files(&cache).iter().filter(|p| p.to_str().unwrap().contains("/snapshots/")) {
        let name = p.file_name().unwrap().to_str().unwrap();
        assert_eq!(blake3::hash(&std::fs::read(p).unwrap()).to_hex().as_str(), name);
    }
    let (_, again) = s.counted(&["ls", "latest"]);
    assert_eq!(gets(&again), opening, "{again}");

    // `coffer cache` lists it; --cleanup removes what is old enough.
    let out = s.run(&["--json", "cache"]);
    assert_success(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["caches"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!((&v["type"], &v["caches"][0]["type"]), (&"caches".into(), &"cache".into()), "{v}");
    assert!(v["caches"][0]["size"].as_u64().unwrap() > 0);
    let out = s.run(&["--json", "cache", "--cleanup"]);
    assert_success(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((v["removed"].as_array().unwrap().len(), v["kept"].as_u64()), (0, Some(1)), "used today: kept");
    assert_eq!(v["type"], "cache_cleanup");
    let out = s.run(&["--json", "cache", "--cleanup", "--max-age", "0"]);
    assert_success(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["removed"].as_array().unwrap().len(), 1, "{v}");
    assert!(!cache.exists());
}

#[test]
fn a_warm_cache_serves_a_local_repository_when_asked_and_never_a_damaged_entry() {
    scenario(&Setup::local());
}

#[test]
fn a_warm_cache_serves_an_s3_repository_and_never_a_damaged_entry() {
    if let Some(s) = Setup::s3() {
        scenario(&s);
    }
}

#[test]
fn a_local_repository_has_no_cache_by_default() {
    let mut s = Setup::local();
    s.explicit_cache = false;
    assert_success(&s.run(&["init", "--kdf-log-n", "10", "--insecure-kdf"]));
    let src = tree(s.dir.path());
    assert_success(&s.run(&["backup", src.to_str().unwrap()]));
    assert_success(&s.run(&["snapshots"]));
    assert!(!s.path("xdg-cache/coffer").exists());
}

/// `check` verifies what the repository holds: a snapshot damaged in the
/// storage is found even though the cache holds it intact.
#[test]
fn check_reads_the_repository_not_the_cache() {
    let s = Setup::local();
    assert_success(&s.run(&["init", "--kdf-log-n", "10", "--insecure-kdf"]));
    let src = tree(s.dir.path());
    assert_success(&s.run(&["backup", src.to_str().unwrap()]));
    assert_success(&s.run(&["snapshots"]));
    let stored = files_under(&s.path("repo/snapshots"));
    assert_eq!(stored.len(), 1);
    corrupt(&stored[0]);
    let out = s.run(&["check"]);
    assert_code(&out, 20);
}
