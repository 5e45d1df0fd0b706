//! `coffer import kopia:…` against repositories made by the real kopia (the
//! pinned one of the test tools, `COFFER_TEST_KOPIA`): every imported snapshot
//! restores to what `kopia snapshot restore` gives of the same snapshot, byte
//! for byte and with the metadata kopia keeps; only what changed is read again;
//! an import run again imports nothing; a wrong password is exit code 12; what
//! is damaged is left out and listed, never imported wrong.

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use coffer_backend::testing::servers::{Server, absent};
use common::trees::{describe, make_source};
use common::*;

const PASSWORD: &str = "kopia test password";

/// A kopia repository on the file system, made by the real kopia, with its
/// config file, cache and logs in `env`'s scratch space.
struct Kopia {
    bin: PathBuf,
    config: PathBuf,
    base: PathBuf,
    repo: PathBuf,
}

impl Kopia {
    fn init(env: &Env) -> Option<Kopia> {
        let Some(bin) = std::env::var_os("COFFER_TEST_KOPIA") else {
            absent(Server::Kopia);
            return None;
        };
        let base = env.path("kopia-base");
        std::fs::create_dir_all(&base).unwrap();
        let k = Kopia { bin: bin.into(), config: base.join("repository.config"), repo: env.path("kopia-repo"), base };
        let out = k
            .cmd(&["repository", "create", "filesystem", "--path"])
            .arg(&k.repo)
            .arg("--cache-directory")
            .arg(k.base.join("cache"))
            .output()
            .unwrap();
        assert_success(&out);
        Some(k)
    }

    /// `kopia ARGS` with this repository's config file, cache, logs and password.
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.bin);
        c.arg("--config-file").arg(&self.config).args(args);
        self.environment(&mut c, PASSWORD);
        c
    }

    fn environment(&self, c: &mut Command, password: &str) {
        c.env("KOPIA_PASSWORD", password)
            .env("KOPIA_CHECK_FOR_UPDATES", "false")
            .env("KOPIA_LOG_DIR", self.base.join("logs"))
            .env("KOPIA_CACHE_DIRECTORY", self.base.join("cache"));
    }

    fn snapshot(&self, src: &Path, description: &str, tag: &str) {
        let out =
            self.cmd(&["snapshot", "create", "--description", description, "--tags", tag]).arg(src).output().unwrap();
        assert_success(&out);
    }

    /// The snapshots' manifests, oldest first.
    fn snapshots(&self) -> Vec<serde_json::Value> {
        let out = self.cmd(&["snapshot", "list", "--all", "--json"]).output().unwrap();
        assert_success(&out);
        let mut v: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
        v.sort_by_key(|s| s["startTime"].as_str().unwrap().to_string());
        v
    }

    fn restore(&self, id: &str, target: &Path) {
        let out = self.cmd(&["snapshot", "restore", id]).arg(target).output().unwrap();
        assert_success(&out);
    }

    fn import(&self, env: &Env, extra: &[&str], password: &str) -> Output {
        self.import_spec(env, extra, &format!("kopia:{}", self.config.display()), password)
    }

    /// `coffer import EXTRA SPEC` with kopia's environment.
    fn import_spec(&self, env: &Env, extra: &[&str], spec: &str, password: &str) -> Output {
        let mut c = env.cmd();
        c.env("COFFER_KOPIA", &self.bin).arg("import").args(extra).arg(spec);
        self.environment(&mut c, password);
        c.output().unwrap()
    }
}

fn snapshot_ids(env: &Env) -> Vec<String> {
    env.json(&["snapshots"]).as_array().unwrap().iter().map(|s| s["id"].as_str().unwrap().to_string()).collect()
}

fn snapshots(env: &Env) -> Vec<serde_json::Value> {
    env.json(&["snapshots"]).as_array().unwrap().iter().map(|s| s["snapshot"].clone()).collect()
}

/// The restored copy of `src` below `target` (restores recreate the path).
fn under(target: &Path, src: &Path) -> PathBuf {
    target.join(src.strip_prefix("/").unwrap())
}

/// Every file of the repository's storage, for telling that an import wrote nothing there.
fn storage_listing(dir: &Path) -> Vec<(PathBuf, u64, Vec<u8>)> {
    let mut out: Vec<(PathBuf, u64, Vec<u8>)> = files_under(dir)
        .into_iter()
        .map(|p| (p.clone(), std::fs::metadata(&p).unwrap().len(), std::fs::read(&p).unwrap()))
        .collect();
    out.sort();
    out
}

/// Three snapshots, each restored as `kopia snapshot restore` restores it;
/// only what changed is read again; a second run imports nothing; the kopia
/// repository is not written to.
///
/// kopia keeps regular files, directories and symbolic links, with their
/// permission and special bits, owner ids, modification times and sizes; it
/// keeps no FIFO, no extended attribute and no hard link (each name becomes a
/// file of its own), and writes a name that is not UTF-8 with U+FFFD. The
/// comparison is with what kopia restores, so those are compared as kopia
/// keeps them: the FIFO is absent on both sides, the xattr too, the hard link
/// is two files.
#[test]
fn a_kopia_history_imports_whole_and_once() {
    let env = Env::new();
    let Some(k) = Kopia::init(&env) else { return };
    let src = env.path("src");
    make_source(&src);
    k.snapshot(&src, "monday", "day:monday");
    std::fs::write(src.join("f4"), random_bytes(33_333, 4444)).unwrap();
    std::fs::write(src.join("new-file"), b"added later").unwrap();
    k.snapshot(&src, "tuesday", "day:tuesday");
    std::fs::remove_file(src.join("f5")).unwrap();
    k.snapshot(&src, "wednesday", "day:wednesday");
    let manifests = k.snapshots();
    assert_eq!(manifests.len(), 3);
    let before = storage_listing(&k.repo);

    let dry = k.import(&env, &["--dry-run"], PASSWORD);
    assert_success(&dry);
    assert!(text(&dry.stdout).contains("3 to import"), "{}", text(&dry.stdout));
    assert!(snapshot_ids(&env).is_empty(), "a dry run writes nothing");

    let out = k.import(&env, &["--json"], PASSWORD);
    assert_success(&out);
    let lines: Vec<serde_json::Value> = text(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let done: Vec<&serde_json::Value> = lines.iter().filter(|l| l["type"] == "imported").collect();
    assert_eq!(done.len(), 3, "{lines:?}");
    assert_eq!(done[0]["incomplete"], false, "{}", done[0]);
    assert_eq!(done[1]["summary"]["files_new"], 2, "only the two changed files are read: {}", done[1]);
    assert_eq!(done[2]["summary"]["files_new"], 0, "{}", done[2]);
    assert!(storage_listing(&k.repo) == before, "the import wrote nothing to the kopia repository's storage");

    let status = k.cmd(&["repository", "status", "--json"]).output().unwrap();
    assert_success(&status);
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let snaps = snapshots(&env);
    let ids = snapshot_ids(&env);
    for (i, (m, snap)) in manifests.iter().zip(&snaps).enumerate() {
        let day = m["description"].as_str().unwrap();
        assert_eq!(snap["imported_from"]["tool"], "kopia");
        assert_eq!(snap["imported_from"]["repository"], status["uniqueIDHex"]);
        assert_eq!(snap["imported_from"]["snapshot"], m["id"]);
        assert_eq!(snap["hostname"], m["source"]["host"]);
        assert_eq!(snap["username"], m["source"]["userName"]);
        assert_eq!(snap["paths"], serde_json::json!([src.to_str().unwrap()]));
        assert_eq!(snap["tags"], serde_json::json!([format!("day:{day}"), format!("description:{day}")]));
        let start = m["startTime"].as_str().unwrap();
        assert_eq!(&snap["time"].as_str().unwrap()[..19], &start[..19], "{snap}");
        let (c, x) = (env.path(&format!("coffer-{i}")), env.path(&format!("kopia-{i}")));
        assert_success(&env.run(&["-q", "restore", &ids[i], "--target", c.to_str().unwrap()]));
        k.restore(m["id"].as_str().unwrap(), &x);
        let (mine, theirs) = (describe(&under(&c, &src)), describe(&x));
        // kopia's restore gives a directory a time of its own choosing (it moves with
        // the clock tick its entries were made in): directories' times are compared
        // with the source's, the rest with kopia's restore.
        if i == 0 {
            for d in ["dir", "dir/deeper"] {
                let m = std::fs::metadata(src.join(d)).unwrap();
                let source = format!("mtime {}.{:09}", m.mtime(), m.mtime_nsec());
                assert!(
                    mine[d.as_bytes()].contains(&source),
                    "{d}: {} against the source's {source}",
                    mine[d.as_bytes()]
                );
            }
        }
        let undated = |t: &BTreeMap<Vec<u8>, String>| -> BTreeMap<Vec<u8>, String> {
            t.iter()
                .map(|(k, v)| {
                    let v = match (v.starts_with("dir "), v.find(" mtime "), v.find(" xattrs")) {
                        (true, Some(a), Some(b)) => format!("{}{}", &v[..a], &v[b..]),
                        _ => v.clone(),
                    };
                    (k.clone(), v)
                })
                .collect()
        };
        assert_eq!(undated(&mine), undated(&theirs), "snapshot {day}");
        assert!(mine.keys().any(|p| p.starts_with(b"name-")), "the name that is not UTF-8 is there: {mine:?}");
        assert!(mine[b"tool".as_slice()].contains("mode 4755"), "{}", mine[b"tool".as_slice()]);
        assert!(mine[b"dir/deeper".as_slice()].contains("mode 1777"), "{}", mine[b"dir/deeper".as_slice()]);
        assert!(mine[b"dir/link".as_slice()].starts_with("link -> \"../f1\""), "{}", mine[b"dir/link".as_slice()]);
        assert_eq!(mine.contains_key(b"f5".as_slice()), i < 2);
    }
    let checked = env.run(&["check", "--read-data"]);
    assert_success(&checked);

    let before = storage_listing(&k.repo);
    let again = k.import(&env, &[], PASSWORD);
    assert_success(&again);
    assert!(text(&again.stdout).contains("3 imported before, 0 to import"), "{}", text(&again.stdout));
    assert_eq!(snapshot_ids(&env).len(), 3);
    assert!(storage_listing(&k.repo) == before, "the kopia repository's storage is unchanged");
    // A new snapshot: only its changed file is read (what the snapshot imported
    // last holds is known from it).
    std::fs::write(src.join("f0"), b"changed again").unwrap();
    k.snapshot(&src, "fourth", "n:4");
    let out = k.import(&env, &[], PASSWORD);
    assert_success(&out);
    assert!(text(&out.stdout).contains("3 imported before, 1 to import"), "{}", text(&out.stdout));
    assert!(text(&out.stdout).contains(": 1 files read"), "{}", text(&out.stdout));
}

#[test]
fn a_wrong_kopia_password_is_exit_12_and_a_missing_kopia_is_named() {
    let env = Env::new();
    let Some(k) = Kopia::init(&env) else { return };
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("a"), b"a").unwrap();
    k.snapshot(&src, "one", "n:1");
    let out = k.import(&env, &[], "not the password");
    let err = assert_code(&out, 12);
    assert!(err.contains("password"), "{err}");
    assert!(snapshot_ids(&env).is_empty());

    let out = env
        .cmd()
        .env("COFFER_KOPIA", env.path("no-such-kopia"))
        .args(["import", &format!("kopia:{}", k.config.display())])
        .output()
        .unwrap();
    let err = assert_code(&out, 1);
    assert!(err.contains("is kopia installed"), "{err}");

    let out = env
        .cmd()
        .env("COFFER_KOPIA", &k.bin)
        .args(["import", &format!("kopia:{}", env.path("nothing.config").display())])
        .output()
        .unwrap();
    let err = assert_code(&out, 10);
    assert!(err.contains("nothing.config"), "{err}");
}

/// A file whose data kopia cannot read (its pack blob damaged in the kopia
/// repository) is left out and listed; the rest is imported whole.
#[test]
fn a_damaged_kopia_file_is_left_out_and_listed() {
    let env = Env::new();
    let Some(k) = Kopia::init(&env) else { return };
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("good"), random_bytes(1000, 1)).unwrap();
    k.snapshot(&src, "one", "n:1");
    let packs_before: Vec<PathBuf> = files_under(&k.repo).into_iter().filter(|p| is_data_pack(&k.repo, p)).collect();
    std::fs::write(src.join("bad"), random_bytes(300_000, 2)).unwrap();
    k.snapshot(&src, "two", "n:2");
    let new_packs: Vec<PathBuf> =
        files_under(&k.repo).into_iter().filter(|p| is_data_pack(&k.repo, p) && !packs_before.contains(p)).collect();
    assert_eq!(new_packs.len(), 1, "the second snapshot wrote one data pack: {new_packs:?}");
    let mut bytes = std::fs::read(&new_packs[0]).unwrap();
    let mid = bytes.len() / 2;
    for b in &mut bytes[mid..mid + 64] {
        *b ^= 0x5a;
    }
    std::fs::write(&new_packs[0], &bytes).unwrap();

    let out = k.import(&env, &[], PASSWORD);
    let err = assert_code(&out, 3);
    assert!(err.contains("bad"), "the damaged file is named: {err}");
    let snaps = snapshots(&env);
    assert_eq!(snaps.len(), 2);
    assert_eq!(snaps[0]["skipped_count"], 0);
    assert_eq!(snaps[1]["skipped_count"], 1, "{}", snaps[1]);
    let c = env.path("out");
    assert_success(&env.run(&["-q", "restore", &snapshot_ids(&env)[1], "--target", c.to_str().unwrap()]));
    assert_eq!(std::fs::read(under(&c, &src).join("good")).unwrap(), random_bytes(1000, 1));
    assert!(!under(&c, &src).join("bad").exists(), "a file kopia cannot read is not restored as if whole");
}

/// Many small files in many directories, copies of one content, an empty file and
/// files larger than a block of the read-ahead: all come through the read-ahead
/// (several requests in flight, handed over in order) and restore as kopia restores
/// them; each content is read once.
#[test]
fn a_tree_of_many_files_imports_through_the_read_ahead() {
    let env = Env::new();
    let Some(k) = Kopia::init(&env) else { return };
    let src = env.path("src");
    for d in 0..12u64 {
        let dir = src.join(format!("d{d:02}"));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        for f in 0..40u64 {
            let n = (d * 40 + f) as usize;
            std::fs::write(dir.join(format!("f{f:02}")), random_bytes(n * 13 % 9000, d * 100 + f)).unwrap();
        }
        std::fs::write(dir.join("sub").join("same"), b"one content, twelve names").unwrap();
    }
    std::fs::write(src.join("empty"), b"").unwrap();
    // Larger than a block (1 MiB), streamed a block at a time.
    std::fs::write(src.join("large-a"), random_bytes(3 << 20, 7)).unwrap();
    std::fs::write(src.join("large-b"), random_bytes((5 << 20) + 123, 8)).unwrap();
    k.snapshot(&src, "many", "n:1");
    let manifests = k.snapshots();

    let out = k.import(&env, &["--json"], PASSWORD);
    assert_success(&out);
    let lines: Vec<serde_json::Value> = text(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let done: Vec<&serde_json::Value> = lines.iter().filter(|l| l["type"] == "imported").collect();
    assert_eq!(done.len(), 1, "{lines:?}");
    assert_eq!(done[0]["incomplete"], false, "{}", done[0]);
    let summary = &done[0]["summary"];
    // 480 small files and the two large ones read; the twelve copies are one
    // content, read once (the empty file is a content too).
    let files = 12 * 40 + 2 + 12 + 1;
    assert_eq!(summary["files_new"].as_u64().unwrap() + summary["files_unchanged"].as_u64().unwrap(), files);
    let (c, x) = (env.path("coffer"), env.path("kopia"));
    assert_success(&env.run(&["-q", "restore", &snapshot_ids(&env)[0], "--target", c.to_str().unwrap()]));
    k.restore(manifests[0]["id"].as_str().unwrap(), &x);
    let undated = |t: BTreeMap<Vec<u8>, String>| -> BTreeMap<Vec<u8>, String> {
        t.into_iter().filter(|(_, v)| !v.starts_with("dir ")).collect()
    };
    let (mine, theirs) = (undated(describe(&under(&c, &src))), undated(describe(&x)));
    assert_eq!(mine.len(), files as usize);
    assert_eq!(mine, theirs);
    assert_eq!(std::fs::read(under(&c, &src).join("large-b")).unwrap(), random_bytes((5 << 20) + 123, 8));
}

/// `kopia:CONFIG::SNAPSHOT_ID` imports that snapshot alone; the whole repository
/// imported after it imports the others; an id the repository does not hold is
/// named.
#[test]
fn one_kopia_snapshot_is_imported_by_its_id() {
    let env = Env::new();
    let Some(k) = Kopia::init(&env) else { return };
    let src = env.path("src");
    make_source(&src);
    k.snapshot(&src, "monday", "day:monday");
    std::fs::write(src.join("f4"), random_bytes(33_333, 4444)).unwrap();
    k.snapshot(&src, "tuesday", "day:tuesday");
    let manifests = k.snapshots();
    let second = manifests[1]["id"].as_str().unwrap();
    let config = k.config.display().to_string();

    let out = k.import_spec(&env, &[], &format!("kopia:{config}::{second}"), PASSWORD);
    assert_success(&out);
    assert!(text(&out.stdout).contains("1 snapshots, 0 imported before, 1 to import"), "{}", text(&out.stdout));
    let snaps = snapshots(&env);
    assert_eq!(snaps.len(), 1);
    assert_eq!(snaps[0]["imported_from"]["snapshot"], second);
    let (c, x) = (env.path("coffer"), env.path("kopia"));
    assert_success(&env.run(&["-q", "restore", &snapshot_ids(&env)[0], "--target", c.to_str().unwrap()]));
    k.restore(second, &x);
    let files = |t: BTreeMap<Vec<u8>, String>| -> BTreeMap<Vec<u8>, String> {
        t.into_iter().filter(|(_, v)| v.starts_with("file ")).collect()
    };
    assert_eq!(files(describe(&under(&c, &src))), files(describe(&x)));

    // Run again by id it imports nothing; the whole repository then imports the other.
    let again = k.import_spec(&env, &[], &format!("kopia:{config}::{second}"), PASSWORD);
    assert_success(&again);
    assert!(text(&again.stdout).contains("1 imported before, 0 to import"), "{}", text(&again.stdout));
    let all = k.import(&env, &[], PASSWORD);
    assert_success(&all);
    assert!(text(&all.stdout).contains("2 snapshots, 1 imported before, 1 to import"), "{}", text(&all.stdout));
    assert_eq!(snapshot_ids(&env).len(), 2);

    let out = k.import_spec(&env, &[], &format!("kopia:{config}::0123456789abcdef"), PASSWORD);
    let err = assert_code(&out, 1);
    assert!(err.contains("no snapshot \"0123456789abcdef\""), "{err}");
}

/// kopia's data packs: the blobs of its file system storage under `p/`.
fn is_data_pack(repo: &Path, p: &Path) -> bool {
    p.strip_prefix(repo).is_ok_and(|r| r.starts_with("p"))
}
