//! `coffer import-tar` against archives made by GNU tar, and `coffer import
//! borg:…` against repositories made by the real borg (the pinned one of the test
//! tools, `COFFER_TEST_BORG`): every imported snapshot restores to what `tar -x`
//! or `borg extract` gives of the same archive, byte for byte and with its
//! metadata; an import run again imports nothing; what is damaged is left out and
//! listed, never imported wrong.

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use coffer_backend::testing::servers::{Server, absent};
use common::trees::{describe, make_source};
use common::*;

/// The restored copy of `src` below `target` (restores recreate the path).
fn under(target: &Path, src: &Path) -> PathBuf {
    target.join(src.strip_prefix("/").unwrap())
}

fn snapshot_ids(env: &Env) -> Vec<String> {
    env.json(&["snapshots"]).as_array().unwrap().iter().map(|s| s["id"].as_str().unwrap().to_string()).collect()
}

fn snapshots(env: &Env) -> Vec<serde_json::Value> {
    env.json(&["snapshots"]).as_array().unwrap().iter().map(|s| s["snapshot"].clone()).collect()
}

fn restore(env: &Env, id: &str, target: &Path) {
    assert_success(&env.run(&["-q", "restore", id, "--target", target.to_str().unwrap()]));
}

/// Asserts that two descriptions of restored trees are the same, entry by entry.
fn assert_same(mine: &BTreeMap<Vec<u8>, String>, expected: &BTreeMap<Vec<u8>, String>, what: &str) {
    for (path, e) in expected {
        assert_eq!(mine.get(path), Some(e), "{:?} in {what}", String::from_utf8_lossy(path));
    }
    assert_eq!(
        mine.len(),
        expected.len(),
        "entries of {what}: {:?}",
        mine.keys().map(|k| String::from_utf8_lossy(k)).collect::<Vec<_>>()
    );
}

/// `make_source`'s tree, with a sparse file and a character device besides.
fn make_tar_source(src: &Path) {
    make_source(src);
    let sparse = std::fs::File::create(src.join("sparse.img")).unwrap();
    sparse.set_len(64 << 20).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&sparse, &random_bytes(100_000, 7), 20 << 20).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        src.join("null"),
        rustix::fs::FileType::CharacterDevice,
        rustix::fs::Mode::from_raw_mode(0o666),
        rustix::fs::makedev(1, 3),
    )
    .unwrap();
}

fn gnu_tar(args: &[&str], dir: &Path) -> Output {
    let out = Command::new("tar").args(args).current_dir(dir).output().unwrap();
    assert_success(&out);
    out
}

/// An archive of each format GNU tar writes restores as `tar -x` extracts it.
#[test]
fn tar_archives_import_as_gnu_tar_extracts_them() {
    let env = Env::new();
    let src = env.path("src");
    make_tar_source(&src);
    for (i, format) in ["pax", "gnu"].iter().enumerate() {
        let archive = env.path(&format!("a-{format}.tar"));
        let mut args = vec!["--sparse", "--format", format, "-cf", archive.to_str().unwrap()];
        if *format == "pax" {
            args.insert(0, "--xattrs");
        }
        args.push("src");
        gnu_tar(&args, env.dir.path());
        let out = env
            .cmd()
            .args(["--json", "import-tar", archive.to_str().unwrap(), "--host", "tarhost", "--tag", format])
            .args(["--time", &format!("2024-05-0{}T10:00:00Z", i + 1)])
            .output()
            .unwrap();
        assert_success(&out);
        let ids = snapshot_ids(&env);
        assert_eq!(ids.len(), i + 1);
        let snap = &snapshots(&env)[i];
        assert_eq!(snap["imported_from"]["tool"], "tar");
        assert_eq!(snap["hostname"], "tarhost");
        assert_eq!(snap["paths"], serde_json::json!(["/src"]));
        assert_eq!(snap["tags"], serde_json::json!([format]));
        assert!(snap["time"].as_str().unwrap().starts_with(&format!("2024-05-0{}T10:00:00", i + 1)), "{snap}");

        let (c, t) = (env.path(&format!("coffer-{format}")), env.path(&format!("tar-{format}")));
        restore(&env, &ids[i], &c);
        std::fs::create_dir_all(&t).unwrap();
        let mut x = vec!["-xpf", archive.to_str().unwrap()];
        if *format == "pax" {
            x.extend(["--xattrs", "--xattrs-include=*"]);
        }
        gnu_tar(&x, &t);
        assert_same(&describe(&c.join("src")), &describe(&t.join("src")), &format!("the {format} archive"));
        let md = std::fs::symlink_metadata(c.join("src/null")).unwrap();
        assert_eq!(md.rdev(), rustix::fs::makedev(1, 3), "the device node's numbers");
        let sparse = std::fs::File::open(c.join("src/sparse.img")).unwrap();
        let stored: u64 = data_extents(&sparse, 64 << 20).iter().map(|(s, e)| e - s).sum();
        assert!(stored < 8 << 20, "the sparse file's holes are restored as holes: {stored} bytes of data");
    }
    // The same archive from standard input: same content, nothing read twice
    // from the repository's point of view (its data is stored once).
    let archive = env.path("a-pax.tar");
    let before = env.repo_size();
    let mut child = env
        .cmd()
        .args(["-q", "import-tar", "-", "--path", "/src"])
        .stdin(std::fs::File::open(&archive).unwrap())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(child.wait().unwrap().success());
    assert!(env.repo_size() - before < 1 << 20, "the content is stored once");
    let listing = text(&env.run(&["snapshots"]).stdout);
    assert_eq!(listing.matches("(imported from a tar archive)").count(), 3, "{listing}");
    assert_success(&env.run(&["check", "--read-data"]));
}

/// Builds an archive entry by entry with the `tar` crate (which writes what
/// it is given, `..` included).
fn hand_made(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (name, data) in entries {
        let mut h = tar::Header::new_gnu();
        h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_entry_type(tar::EntryType::Regular);
        h.set_cksum();
        b.append(&h, *data).unwrap();
    }
    b.into_inner().unwrap()
}

/// Names that climb out of the snapshot are left out and listed; a truncated
/// archive keeps what came before the damage and says what is missing; neither
/// imports anything wrong.
#[test]
fn hostile_and_damaged_archives_import_only_what_is_sound() {
    let env = Env::new();
    let bytes = hand_made(&[("ok/a", b"fine"), ("../escape", b"evil"), ("ok/../../up", b"evil"), ("ok/b", b"also")]);
    let archive = env.path("hostile.tar");
    std::fs::write(&archive, &bytes).unwrap();
    let out = env.run(&["import-tar", archive.to_str().unwrap()]);
    let err = assert_code(&out, 3);
    assert!(err.contains("../escape") && err.contains(".."), "{err}");
    let snap = &snapshots(&env)[0];
    assert_eq!(snap["skipped_count"], 2, "{snap}");
    let c = env.path("out");
    restore(&env, &snapshot_ids(&env)[0], &c);
    assert_eq!(std::fs::read(c.join("ok/a")).unwrap(), b"fine");
    assert_eq!(std::fs::read(c.join("ok/b")).unwrap(), b"also");
    assert!(!env.path("escape").exists() && !env.path("up").exists());
    assert_eq!(files_under(&c).len(), 2);

    // Cut in the middle of the second file's data.
    let bytes = hand_made(&[("t/first", &random_bytes(3000, 1)), ("t/second", &random_bytes(5000, 2))]);
    let cut = 512 + 3072 + 512 + 1000;
    std::fs::write(&archive, &bytes[..cut]).unwrap();
    let out = env.run(&["import-tar", archive.to_str().unwrap()]);
    let err = assert_code(&out, 3);
    assert!(err.contains("t/second"), "the file cut short is named: {err}");
    let ids = snapshot_ids(&env);
    let c = env.path("out-cut");
    restore(&env, &ids[1], &c);
    assert_eq!(std::fs::read(c.join("t/first")).unwrap(), random_bytes(3000, 1));
    assert!(!c.join("t/second").exists(), "a file cut short is not restored as if whole");
}

const BORG_PASSPHRASE: &str = "borg test passphrase";

/// A borg repository made by the real borg, in `env`'s scratch space.
struct Borg {
    bin: PathBuf,
    repo: PathBuf,
    base: PathBuf,
}

impl Borg {
    fn init(env: &Env) -> Option<Borg> {
        let Some(bin) = std::env::var_os("COFFER_TEST_BORG") else {
            absent(Server::Borg);
            return None;
        };
        let b = Borg { bin: bin.into(), repo: env.path("borg-repo"), base: env.path("borg-base") };
        std::fs::create_dir_all(&b.base).unwrap();
        assert_success(&b.cmd(&["init", "-e", "repokey"]).arg(&b.repo).output().unwrap());
        Some(b)
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.bin);
        c.env("BORG_BASE_DIR", &self.base).env("BORG_PASSPHRASE", BORG_PASSPHRASE).args(args);
        c
    }

    fn create(&self, name: &str, src: &Path) {
        let out = self
            .cmd(&["create", "--chunker-params", "buzhash,10,16,12,4095"])
            .arg(self.archive(name))
            .arg(src)
            .output()
            .unwrap();
        assert_success(&out);
    }

    fn archive(&self, name: &str) -> String {
        format!("{}::{name}", self.repo.display())
    }

    fn extract(&self, name: &str, target: &Path) {
        std::fs::create_dir_all(target).unwrap();
        let out = self.cmd(&["extract"]).arg(self.archive(name)).current_dir(target).output().unwrap();
        assert_success(&out);
    }

    /// Archive names and ids, oldest first.
    fn archives(&self) -> Vec<(String, String)> {
        let out = self.cmd(&["list", "--json"]).arg(&self.repo).output().unwrap();
        assert_success(&out);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["archives"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| (a["name"].as_str().unwrap().into(), a["id"].as_str().unwrap().into()))
            .collect()
    }
}

fn import_borg(env: &Env, b: &Borg, extra: &[&str], passphrase: &str) -> Output {
    let mut c = env.cmd();
    c.env("COFFER_BORG", &b.bin)
        .env("BORG_BASE_DIR", &b.base)
        .env("BORG_PASSPHRASE", passphrase)
        .arg("import")
        .args(extra)
        .arg(format!("borg:{}", b.repo.display()));
    c.output().unwrap()
}

/// Three archives, each restored as `borg extract` extracts it; only what
/// changed is read again; a second run imports nothing.
#[test]
fn a_borg_history_imports_whole_and_once() {
    let env = Env::new();
    let Some(b) = Borg::init(&env) else { return };
    let src = env.path("src");
    make_source(&src);
    b.create("monday", &src);
    std::fs::write(src.join("f4"), random_bytes(33_333, 4444)).unwrap();
    std::fs::write(src.join("new-file"), b"added later").unwrap();
    b.create("tuesday", &src);
    std::fs::remove_file(src.join("f5")).unwrap();
    b.create("wednesday", &src);
    let archives = b.archives();
    assert_eq!(archives.len(), 3);

    let dry = import_borg(&env, &b, &["--dry-run"], BORG_PASSPHRASE);
    assert_success(&dry);
    assert!(text(&dry.stdout).contains("3 to import"), "{}", text(&dry.stdout));
    assert!(snapshot_ids(&env).is_empty(), "a dry run writes nothing");

    let out = import_borg(&env, &b, &["--json"], BORG_PASSPHRASE);
    assert_success(&out);
    let lines: Vec<serde_json::Value> = text(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let done: Vec<&serde_json::Value> = lines.iter().filter(|l| l["type"] == "imported").collect();
    assert_eq!(done.len(), 3, "{lines:?}");
    assert_eq!(done[1]["summary"]["files_new"], 2, "only the two changed files are read: {}", done[1]);
    assert_eq!(done[2]["summary"]["files_new"], 0, "{}", done[2]);

    let snaps = snapshots(&env);
    let ids = snapshot_ids(&env);
    for (i, ((name, id), snap)) in archives.iter().zip(&snaps).enumerate() {
        assert_eq!(snap["imported_from"]["tool"], "borg");
        assert_eq!(&snap["imported_from"]["snapshot"], id);
        assert_eq!(snap["tags"], serde_json::json!([name]));
        let (c, x) = (env.path(&format!("coffer-{i}")), env.path(&format!("borg-{i}")));
        restore(&env, &ids[i], &c);
        b.extract(name, &x);
        assert_same(&describe(&under(&c, &src)), &describe(&under(&x, &src)), &format!("archive {name}"));
    }
    let checked = env.run(&["check", "--read-data"]);
    assert_success(&checked);
    assert!(text(&checked.stdout).contains("(3 imported: 3 from borg)"), "{}", text(&checked.stdout));
    let listing = text(&env.run(&["snapshots"]).stdout);
    assert!(listing.contains(&format!("(imported from borg {})", &archives[0].1[..8])), "{listing}");

    let again = import_borg(&env, &b, &[], BORG_PASSPHRASE);
    assert_success(&again);
    assert!(text(&again.stdout).contains("3 imported before, 0 to import"), "{}", text(&again.stdout));
    assert_eq!(snapshot_ids(&env).len(), 3);
    // A new archive: only it is imported, and only its changed file read (what
    // the archive imported last holds is known from it).
    std::fs::write(src.join("f0"), b"changed again").unwrap();
    b.create("thursday", &src);
    let out = import_borg(&env, &b, &[], BORG_PASSPHRASE);
    assert_success(&out);
    assert!(text(&out.stdout).contains("3 imported before, 1 to import"), "{}", text(&out.stdout));
    assert!(text(&out.stdout).contains(": 1 files read"), "{}", text(&out.stdout));
    let (c, x) = (env.path("coffer-3"), env.path("borg-3"));
    restore(&env, &snapshot_ids(&env)[3], &c);
    b.extract("thursday", &x);
    assert_same(&describe(&under(&c, &src)), &describe(&under(&x, &src)), "archive thursday");
}

/// Linux ACLs borg recorded are imported where a coffer backup keeps them (as
/// the `system.posix_acl_*` attributes) and restored as `borg extract` restores them.
#[test]
fn borg_acls_import_as_a_backup_keeps_them() {
    use common::trees::{ACL_GROUP, ACL_USER, posix_acl};
    let env = Env::new();
    let Some(b) = Borg::init(&env) else { return };
    let src = env.path("src");
    std::fs::create_dir_all(src.join("shared")).unwrap();
    std::fs::write(src.join("acl.txt"), b"has an ACL").unwrap();
    std::fs::write(src.join("plain.txt"), b"has none").unwrap();
    let access = posix_acl(&[(ACL_USER, 6, 1234), (ACL_GROUP, 5, 4321)], 7);
    let default = posix_acl(&[(ACL_GROUP, 5, 4321)], 5);
    // ACLs are file-system features: the test's scratch space must have them.
    xattr::set(src.join("acl.txt"), "system.posix_acl_access", &access)
        .and_then(|()| xattr::set(src.join("shared"), "system.posix_acl_default", &default))
        .expect("the test's scratch space takes POSIX ACLs");
    b.create("acls", &src);
    let out = import_borg(&env, &b, &[], BORG_PASSPHRASE);
    assert_success(&out);
    assert!(!text(&out.stderr).contains("ACLs"), "every ACL is imported: {}", text(&out.stderr));

    let (c, x) = (env.path("coffer"), env.path("borg"));
    restore(&env, &snapshot_ids(&env)[0], &c);
    b.extract("acls", &x);
    let get = |root: &Path, rel: &str, name: &str| xattr::get(under(root, &src).join(rel), name).unwrap();
    let original = |rel: &str, name: &str| xattr::get(src.join(rel), name).unwrap();
    for (rel, name) in [("acl.txt", "system.posix_acl_access"), ("shared", "system.posix_acl_default")] {
        assert!(original(rel, name).is_some());
        assert_eq!(get(&c, rel, name), original(rel, name), "{rel} {name} as the source holds it");
        assert_eq!(get(&c, rel, name), get(&x, rel, name), "{rel} {name} as borg extract restores it");
    }
    assert_eq!(get(&c, "plain.txt", "system.posix_acl_access"), None);
    assert_eq!((access.len(), default.len()), (4 + 6 * 8, 4 + 5 * 8));
}

#[test]
fn a_wrong_borg_passphrase_is_exit_12() {
    let env = Env::new();
    let Some(b) = Borg::init(&env) else { return };
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("a"), b"a").unwrap();
    b.create("one", &src);
    let out = import_borg(&env, &b, &[], "not the passphrase");
    let err = assert_code(&out, 12);
    assert!(err.contains("passphrase"), "{err}");
    assert!(snapshot_ids(&env).is_empty());
}

/// Killed once something is stored and twice once a snapshot is, then run to
/// its end: each archive once, and the last restores as `borg extract` gives it.
#[test]
fn a_borg_import_killed_at_any_point_resumes_to_the_same_history() {
    let env = Env::new();
    let Some(b) = Borg::init(&env) else { return };
    let src = env.path("src");
    make_source(&src);
    for i in 0..3u64 {
        std::fs::write(src.join(format!("bulk{i}")), random_bytes(6 << 20, 500 + i)).unwrap();
        b.create(&format!("a{i}"), &src);
    }
    for dir in ["data", "snapshots", "snapshots"] {
        let mut c = env.cmd();
        c.env("COFFER_BORG", &b.bin)
            .env("BORG_BASE_DIR", &b.base)
            .env("BORG_PASSPHRASE", BORG_PASSPHRASE)
            .args(["import", &format!("borg:{}", b.repo.display())]);
        kill_once_more_stored(&env, c, dir);
    }
    let out = import_borg(&env, &b, &[], BORG_PASSPHRASE);
    assert_success(&out);
    let snaps = snapshots(&env);
    let mut ids: Vec<&str> = snaps.iter().map(|s| s["imported_from"]["snapshot"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 3, "each archive once: {ids:?}");
    ids.dedup();
    assert_eq!(ids.len(), 3);
    assert_success(&env.run(&["check", "--read-data"]));
    let (c, x) = (env.path("out"), env.path("borg-out"));
    restore(&env, &snapshot_ids(&env)[2], &c);
    b.extract("a2", &x);
    assert_same(&describe(&under(&c, &src)), &describe(&under(&x, &src)), "archive a2");
}
