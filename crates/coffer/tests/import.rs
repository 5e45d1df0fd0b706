//! `coffer import restic:…` against repositories made by the real restic (the
//! pinned binary of the test tools, `COFFER_TEST_RESTIC`): every imported snapshot
//! restores to what `restic restore` gives of the same snapshot, byte for byte
//! and with its metadata; an import run again imports nothing; what is damaged in
//! the source is left out and listed, never imported wrong.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use coffer_backend::testing::servers::{Server, absent};
use common::trees::{describe, make_source};
use common::*;

const RESTIC_PASSWORD: &str = "restic test passphrase";

/// A restic repository made by the real restic, in `env`'s scratch space.
struct Restic {
    bin: PathBuf,
    repo: PathBuf,
    home: PathBuf,
    version: u32,
}

impl Restic {
    /// A new repository of format `version` (1 or 2); `None` (after the
    /// notice) when restic is skipped by name.
    fn init(env: &Env, version: u32) -> Option<Restic> {
        let Some(bin) = std::env::var_os("COFFER_TEST_RESTIC") else {
            absent(Server::Restic);
            return None;
        };
        let r = Restic { bin: bin.into(), repo: env.path("restic-repo"), home: env.path("restic-home"), version };
        std::fs::create_dir_all(&r.home).unwrap();
        let out = r.cmd(&["init", "--repository-version", &version.to_string()]).output().unwrap();
        assert_success(&out);
        Some(r)
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.bin);
        c.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &self.home)
            .env("RESTIC_CACHE_DIR", self.home.join("cache"))
            .env("RESTIC_REPOSITORY", &self.repo)
            .env("RESTIC_PASSWORD", RESTIC_PASSWORD)
            .args(args);
        c
    }

    /// A backup of `src`, tagged; `compression` (`off`, `auto`, `max`) where
    /// the repository's version has it.
    fn backup(&self, src: &Path, tag: &str, compression: &str) {
        let mut c = self.cmd(&["backup", "--tag", tag, "--host", "old-laptop"]);
        if self.version >= 2 {
            c.args(["--compression", compression]);
        }
        assert_success(&c.arg(src).output().unwrap());
    }

    /// restic's snapshots, oldest first: (id, time, tags).
    fn snapshots(&self) -> Vec<serde_json::Value> {
        let out = self.cmd(&["snapshots", "--json"]).output().unwrap();
        assert_success(&out);
        let mut v: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
        v.sort_by(|a, b| a["time"].as_str().cmp(&b["time"].as_str()));
        v
    }

    fn restore(&self, id: &str, target: &Path) {
        let out = self.cmd(&["restore", id, "--target"]).arg(target).output().unwrap();
        assert_success(&out);
    }
}

/// `coffer import` with restic's passphrase in its own variable.
fn import(env: &Env, r: &Restic, extra: &[&str]) -> Output {
    let mut c = env.cmd();
    c.env("RESTIC_PASSWORD", RESTIC_PASSWORD).arg("import").args(extra).arg(format!("restic:{}", r.repo.display()));
    c.output().unwrap()
}

/// The restored copy of `src` below `target` (restores recreate the absolute path).
fn under(target: &Path, src: &Path) -> PathBuf {
    target.join(src.strip_prefix("/").unwrap())
}

fn imported_snapshots(env: &Env) -> Vec<serde_json::Value> {
    let v = env.json(&["snapshots"]);
    v.as_array().unwrap().iter().map(|s| s["snapshot"].clone()).collect()
}

/// The import of a restic history of three snapshots, for one repository
/// version and compression.
fn imports_restic_history(version: u32, compression: &str) {
    let env = Env::new();
    let Some(r) = Restic::init(&env, version) else { return };
    let src = env.path("src");
    make_source(&src);
    r.backup(&src, "first", compression);
    std::fs::write(src.join("f4"), random_bytes(33_333, 4444)).unwrap();
    std::fs::write(src.join("new-file"), b"added later").unwrap();
    r.backup(&src, "second", compression);
    std::fs::remove_file(src.join("f5")).unwrap();
    r.backup(&src, "third", compression);
    let restic_snaps = r.snapshots();
    assert_eq!(restic_snaps.len(), 3);

    let dry = import(&env, &r, &["--dry-run"]);
    assert_success(&dry);
    assert!(text(&dry.stdout).contains("3 to import"), "{}", text(&dry.stdout));
    assert!(imported_snapshots(&env).is_empty(), "a dry run writes nothing");

    let out = import(&env, &r, &["--json"]);
    assert_success(&out);
    let lines: Vec<serde_json::Value> = text(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let done: Vec<&serde_json::Value> = lines.iter().filter(|l| l["type"] == "imported").collect();
    assert_eq!(done.len(), 3, "{lines:?}");
    // Only what changed is read again: two files in the second, none in the third.
    assert_eq!(done[1]["summary"]["files_new"], 2, "{}", done[1]);
    assert_eq!(done[2]["summary"]["files_new"], 0, "{}", done[2]);
    assert!(done[2]["summary"]["files_unchanged"].as_u64().unwrap() > 10, "{}", done[2]);

    let snaps = imported_snapshots(&env);
    assert_eq!(snaps.len(), 3);
    for (mine, theirs) in snaps.iter().zip(&restic_snaps) {
        assert_eq!(mine["imported_from"]["tool"], "restic");
        assert_eq!(mine["imported_from"]["snapshot"], theirs["id"]);
        assert_eq!(mine["hostname"], "old-laptop");
        assert_eq!(mine["tags"], theirs["tags"]);
        assert_eq!(mine["paths"], theirs["paths"]);
    }
    // Each imported snapshot restores to what restic restores of it.
    let ids: Vec<String> =
        env.json(&["snapshots"]).as_array().unwrap().iter().map(|s| s["id"].as_str().unwrap().to_string()).collect();
    for (i, (id, theirs)) in ids.iter().zip(&restic_snaps).enumerate() {
        let (c, rr) = (env.path(&format!("coffer-out-{i}")), env.path(&format!("restic-out-{i}")));
        assert_success(&env.run(&["-q", "restore", id, "--target", c.to_str().unwrap()]));
        r.restore(theirs["id"].as_str().unwrap(), &rr);
        let (mine, expected) = (describe(&under(&c, &src)), describe(&under(&rr, &src)));
        assert_eq!(mine.len(), expected.len(), "entries of snapshot {i}");
        for (path, e) in &expected {
            assert_eq!(mine.get(path), Some(e), "{:?} in snapshot {i}", String::from_utf8_lossy(path));
        }
    }
    assert_success(&env.run(&["check", "--read-data"]));
    let listing = text(&env.run(&["snapshots"]).stdout);
    let first = restic_snaps[0]["id"].as_str().unwrap();
    assert!(listing.contains(&format!("(imported from restic {})", &first[..8])), "{listing}");

    // Run again: nothing to import, nothing written.
    let again = import(&env, &r, &[]);
    assert_success(&again);
    assert!(text(&again.stdout).contains("3 imported before, 0 to import"), "{}", text(&again.stdout));
    assert_eq!(imported_snapshots(&env).len(), 3);
    // A new restic backup: only it is imported.
    std::fs::write(src.join("f0"), b"changed again").unwrap();
    r.backup(&src, "fourth", compression);
    let out = import(&env, &r, &[]);
    assert_success(&out);
    assert!(text(&out.stdout).contains("3 imported before, 1 to import"), "{}", text(&out.stdout));
    // What the snapshot imported last holds is known without this run having
    // read it: only the changed file is read.
    assert!(text(&out.stdout).contains(": 1 files read"), "{}", text(&out.stdout));
    assert_eq!(imported_snapshots(&env).len(), 4);
}

#[test]
fn a_restic_version_1_history_imports_whole_and_once() {
    imports_restic_history(1, "off");
}

#[test]
fn a_restic_version_2_history_imports_whole_and_once() {
    imports_restic_history(2, "auto");
}

#[test]
fn a_wrong_restic_passphrase_is_told_and_nothing_is_written() {
    let env = Env::new();
    let Some(r) = Restic::init(&env, 2) else { return };
    let mut c = env.cmd();
    let out =
        c.env("RESTIC_PASSWORD", "not it").args(["import", &format!("restic:{}", r.repo.display())]).output().unwrap();
    let err = assert_code(&out, 12);
    assert!(err.contains("wrong password"), "{err}");
    assert!(imported_snapshots(&env).is_empty());
}

#[test]
fn a_damaged_restic_pack_leaves_its_files_out_and_says_so() {
    let env = Env::new();
    let Some(r) = Restic::init(&env, 2) else { return };
    let src = env.path("src");
    make_source(&src);
    r.backup(&src, "only", "off");
    // Damage the pack holding the large file's data: the largest pack.
    let pack =
        files_under(&r.repo.join("data")).into_iter().max_by_key(|p| std::fs::metadata(p).unwrap().len()).unwrap();
    let mut bytes = std::fs::read(&pack).unwrap();
    bytes[100] ^= 0x40;
    std::fs::set_permissions(&pack, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::write(&pack, &bytes).unwrap();
    let out = import(&env, &r, &[]);
    let err = assert_code(&out, 3);
    assert!(err.contains("left out") || err.contains("cannot read"), "{err}");
    let snaps = imported_snapshots(&env);
    assert_eq!(snaps.len(), 1);
    assert!(snaps[0]["skipped_count"].as_u64().unwrap() >= 1, "{}", snaps[0]);
    // What was not damaged restores exactly; nothing restores wrong.
    let c = env.path("out");
    let restore = env.run(&["-q", "restore", "latest", "--target", c.to_str().unwrap()]);
    assert!(restore.status.code() == Some(0) || restore.status.code() == Some(3), "{}", text(&restore.stderr));
    for f in files_under(&under(&c, &src)) {
        let rel = f.strip_prefix(under(&c, &src)).unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), std::fs::read(src.join(rel)).unwrap(), "{rel:?}");
    }
}

/// Regression guard for the promise that an import is safe to kill: killed
/// (SIGKILL) at several points, then run again, it ends with every snapshot
/// imported once, `check --read-data` clean and the last one restoring exactly.
#[test]
fn an_import_killed_at_any_point_resumes_to_the_same_history() {
    let env = Env::new();
    let Some(r) = Restic::init(&env, 2) else { return };
    let src = env.path("src");
    make_source(&src);
    for i in 0..3u64 {
        std::fs::write(src.join(format!("bulk{i}")), random_bytes(6 << 20, 500 + i)).unwrap();
        r.backup(&src, &format!("s{i}"), "auto");
    }
    // Kill once something is stored, and once a snapshot is.
    for dir in ["data", "snapshots", "snapshots"] {
        let mut c = env.cmd();
        c.env("RESTIC_PASSWORD", RESTIC_PASSWORD).args(["import", &format!("restic:{}", r.repo.display())]);
        kill_once_more_stored(&env, c, dir);
    }
    let out = import(&env, &r, &[]);
    assert_success(&out);
    let snaps = imported_snapshots(&env);
    assert_eq!(snaps.len(), 3, "each restic snapshot once: {snaps:?}");
    let mut ids: Vec<&str> = snaps.iter().map(|s| s["imported_from"]["snapshot"].as_str().unwrap()).collect();
    ids.dedup();
    assert_eq!(ids.len(), 3);
    assert_success(&env.run(&["check", "--read-data"]));
    let c = env.path("out");
    assert_success(&env.run(&["-q", "restore", "latest", "--target", c.to_str().unwrap()]));
    let rr = env.path("restic-out");
    r.restore("latest", &rr);
    assert_eq!(describe(&under(&c, &src)), describe(&under(&rr, &src)));
}

/// A restic repository on the test S3 server (restic's own `s3:` location,
/// compression off) imports through coffer's S3 backend like one on disk.
#[test]
fn a_restic_repository_on_s3_imports_whole() {
    let Some(remote) = common::remote::Remote::s3("restic-import") else { return };
    let Some(bin) = std::env::var_os("COFFER_TEST_RESTIC") else {
        absent(Server::Restic);
        return;
    };
    let env = Env::new();
    let src = env.path("src");
    make_source(&src);
    let restic = |args: &[&str]| {
        let mut c = Command::new(&bin);
        c.envs(remote.env.iter().map(|(k, v)| (k, v)))
            .env("HOME", env.path("restic-home"))
            .env("RESTIC_CACHE_DIR", env.path("restic-home/cache"))
            .env("RESTIC_PASSWORD", RESTIC_PASSWORD)
            .args(["-r", &remote.repo])
            .args(args);
        c
    };
    assert_success(&restic(&["init"]).output().unwrap());
    assert_success(&restic(&["backup", "--compression", "off", "--tag", "s3"]).arg(&src).output().unwrap());
    std::fs::write(src.join("f1"), b"changed on the way").unwrap();
    assert_success(&restic(&["backup", "--compression", "off"]).arg(&src).output().unwrap());
    let mut c = env.cmd();
    c.envs(remote.env.iter().map(|(k, v)| (k, v))).env("RESTIC_PASSWORD", RESTIC_PASSWORD).args([
        "--json",
        "import",
        &format!("restic:{}", remote.repo),
    ]);
    let out = c.output().unwrap();
    assert_success(&out);
    let done: Vec<serde_json::Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|v: &serde_json::Value| v["type"] == "imported")
        .collect();
    assert_eq!(done.len(), 2, "{}", text(&out.stdout));
    assert_eq!(done[1]["summary"]["files_new"], 1, "only the changed file is read again: {}", done[1]);
    let (c, rr) = (env.path("coffer-out"), env.path("restic-out"));
    assert_success(&env.run(&["-q", "restore", "latest", "--target", c.to_str().unwrap()]));
    assert_success(&restic(&["restore", "latest", "--target"]).arg(&rr).output().unwrap());
    assert_eq!(describe(&under(&c, &src)), describe(&under(&rr, &src)));
}

/// Hundreds of files in nested directories, files of several blobs and copies,
/// over several packs: the import reads them ahead with merged range requests
/// (docs/design.md#import-restic), and every file restores as restic restores it.
#[test]
fn many_files_read_ahead_restore_as_restic_restores_them() {
    let env = Env::new();
    let Some(r) = Restic::init(&env, 2) else { return };
    let src = env.path("src");
    for d in 0..30u64 {
        let dir = src.join(format!("d{d:02}/inner"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..20u64 {
            let len = 1 + ((d * 131 + f * 7919) % 30_000) as usize;
            std::fs::write(dir.join(format!("f{f:02}")), random_bytes(len, d * 1000 + f)).unwrap();
        }
        std::fs::write(dir.join("empty"), b"").unwrap();
    }
    for b in 0..4u64 {
        std::fs::write(src.join(format!("big{b}")), random_bytes(5 * 1024 * 1024 + 777 * b as usize, 90 + b)).unwrap();
    }
    std::fs::copy(src.join("big2"), src.join("d07/big2-copy")).unwrap();
    r.backup(&src, "first", "auto");
    // A second snapshot changing a few files here and there.
    for d in [3u64, 17, 29] {
        std::fs::write(src.join(format!("d{d:02}/inner/f05")), random_bytes(12_345, 7 + d)).unwrap();
    }
    r.backup(&src, "second", "auto");
    let restic_snaps = r.snapshots();

    let out = import(&env, &r, &["--json"]);
    assert_success(&out);
    let done: Vec<serde_json::Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|v: &serde_json::Value| v["type"] == "imported")
        .collect();
    assert_eq!(done.len(), 2, "{}", text(&out.stdout));
    assert_eq!(done[0]["incomplete"], false, "{}", done[0]);
    assert_eq!(done[1]["summary"]["files_new"], 3, "only the changed files are read again: {}", done[1]);
    let ids: Vec<String> =
        env.json(&["snapshots"]).as_array().unwrap().iter().map(|s| s["id"].as_str().unwrap().to_string()).collect();
    for (i, (id, theirs)) in ids.iter().zip(&restic_snaps).enumerate() {
        let (c, rr) = (env.path(&format!("coffer-out-{i}")), env.path(&format!("restic-out-{i}")));
        assert_success(&env.run(&["-q", "restore", id, "--target", c.to_str().unwrap()]));
        r.restore(theirs["id"].as_str().unwrap(), &rr);
        let (mine, expected) = (describe(&under(&c, &src)), describe(&under(&rr, &src)));
        assert!(expected.len() > 600, "{}", expected.len());
        assert_eq!(mine, expected, "snapshot {i}");
    }
}
