//! coffer's parsers of borg's output against the real borg (1.2, `borg` on the PATH or
//! `COFFER_TEST_BORG`): a tree with every kind of file is backed up, and what `borg list
//! --json`, `borg info --json` and `borg debug dump-archive` print must give back every
//! field as the file system has it. Then hand-written hostile documents, which must give a
//! typed error or a rejected item, never a panic.

use std::collections::BTreeMap;
use std::ffi::{CString, OsStr, OsString};
use std::fs;
use std::io::{self, Read};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, UNIX_EPOCH};

use coffer_import::borg::{
    self, ArchiveInfo, BorgTime, DumpEvent, DumpMeta, Error, HardLinks, Item, ItemKind, Limits, Reject, RepoList,
};

/// The borg binary. Without it the tests fail: CI installs borg.
fn borg_bin() -> PathBuf {
    let bin = std::env::var_os("COFFER_TEST_BORG")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("borg"));
    match Command::new(&bin).arg("--version").output() {
        Ok(o) if o.status.success() => bin,
        _ => panic!(
            "these tests need BorgBackup 1.2 ('borg' on the PATH, or COFFER_TEST_BORG=/path/to/borg): install it, e.g. apt-get install borgbackup"
        ),
    }
}

/// A repository of its own in a temporary directory, with borg's state there too.
struct Repo {
    dir: tempfile::TempDir,
    bin: PathBuf,
}

impl Repo {
    fn new() -> Repo {
        let r = Repo { dir: tempfile::tempdir().unwrap(), bin: borg_bin() };
        r.ok(&[OsStr::new("init"), OsStr::new("-e"), OsStr::new("repokey"), r.repo().as_os_str()]);
        r
    }

    fn repo(&self) -> PathBuf {
        self.dir.path().join("repo")
    }

    fn archive(&self, name: &str) -> OsString {
        let mut s = self.repo().into_os_string();
        s.push("::");
        s.push(name);
        s
    }

    fn run(&self, args: &[&OsStr], cwd: &Path) -> Output {
        Command::new(&self.bin)
            .args(args)
            .current_dir(cwd)
            .env("BORG_BASE_DIR", self.dir.path().join("base"))
            .env("BORG_PASSPHRASE", "coffer-import-test")
            .env("BORG_RELOCATED_REPO_ACCESS_IS_OK", "yes")
            .env("BORG_UNKNOWN_UNENCRYPTED_REPO_ACCESS_IS_OK", "yes")
            .env("TZ", "UTC")
            .output()
            .unwrap()
    }

    fn ok_in(&self, args: &[&OsStr], cwd: &Path) -> Vec<u8> {
        let o = self.run(args, cwd);
        assert!(o.status.success(), "borg {args:?} failed: {}", String::from_utf8_lossy(&o.stderr));
        o.stdout
    }

    fn ok(&self, args: &[&OsStr]) -> Vec<u8> {
        self.ok_in(args, self.dir.path())
    }

    /// `borg create` of `paths` (relative to the temporary directory).
    fn create(&self, name: &str, extra: &[&str], paths: &[&str]) {
        let archive = self.archive(name);
        let mut args: Vec<&OsStr> = vec![OsStr::new("create")];
        args.extend(extra.iter().map(OsStr::new));
        args.push(&archive);
        args.extend(paths.iter().map(OsStr::new));
        self.ok(&args);
    }

    fn list(&self) -> RepoList {
        let out = self.ok(&[OsStr::new("list"), OsStr::new("--json"), self.repo().as_os_str()]);
        borg::parse_list(&out[..]).unwrap()
    }

    fn info(&self, name: &str) -> ArchiveInfo {
        let out = self.ok(&[OsStr::new("info"), OsStr::new("--json"), &self.archive(name)]);
        borg::parse_info(&out[..]).unwrap()
    }

    fn dump_raw(&self, name: &str) -> Output {
        let archive = self.archive(name);
        self.run(&[OsStr::new("debug"), OsStr::new("dump-archive"), &archive, OsStr::new("-")], self.dir.path())
    }

    /// The dump's metadata and items (rejections fail the test), by path.
    fn dump(&self, name: &str) -> (DumpMeta, BTreeMap<Vec<u8>, Item>) {
        let o = self.dump_raw(name);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let mut items = BTreeMap::new();
        let mut links = HardLinks::default();
        let meta = borg::read_dump(&o.stdout[..], &Limits::default(), &mut |ev| {
            match ev {
                DumpEvent::Item(mut it) => {
                    assert!(links.resolve(&mut it), "no master for {:?}", it.path);
                    items.insert(it.path.clone(), it);
                }
                DumpEvent::Rejected { path, reason, .. } => panic!("rejected {path:?}: {reason}"),
            }
            Ok::<_, Error>(())
        })
        .unwrap();
        (meta, items)
    }
}

fn ns(secs: i64, nsec: i64) -> i64 {
    secs * 1_000_000_000 + nsec
}

fn set_mtime(p: &Path, secs: u64, nanos: u32) {
    let f = fs::File::options().write(true).open(p).unwrap();
    f.set_modified(UNIX_EPOCH + Duration::new(secs, nanos)).unwrap();
}

fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// Bytes that do not repeat, so that borg's chunker cuts them into many chunks.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

const SMALL_CHUNKS: &str = "buzhash,10,16,12,4095";

/// The tree: regular, empty and large files, a hard link pair, a symlink, a fifo, a
/// character device, xattrs, a non-UTF-8 name, nanosecond mtimes.
fn make_tree(t: &Path) {
    fs::create_dir_all(t.join("sub")).unwrap();
    fs::write(t.join("a"), b"hello\n").unwrap();
    fs::write(t.join("a-copy"), b"hello\n").unwrap();
    fs::write(t.join("empty"), b"").unwrap();
    fs::write(t.join("big"), noise(600_000, 1)).unwrap();
    fs::write(t.join("sub/changing"), b"version 1").unwrap();
    fs::write(t.join("link-master"), b"linked content").unwrap();
    fs::hard_link(t.join("link-master"), t.join("sub/link-slave")).unwrap();
    std::os::unix::fs::symlink("../a", t.join("sub/sym")).unwrap();
    assert_eq!(unsafe { libc::mkfifo(cpath(&t.join("fifo")).as_ptr(), 0o640) }, 0);
    let dev = libc::makedev(1, 3);
    let r = unsafe { libc::mknod(cpath(&t.join("null-dev")).as_ptr(), libc::S_IFCHR | 0o600, dev) };
    assert_eq!(r, 0, "mknod needs root: {}", io::Error::last_os_error());
    let odd = t.join(OsStr::from_bytes(b"caf\xe9"));
    fs::write(&odd, b"latin-1 name").unwrap();
    xattr::set(t.join("a"), "user.bin", b"\xff\x00\x7f").unwrap();
    xattr::set(t.join("a"), "user.text", b"plain").unwrap();
    xattr::set(t.join("a"), "user.del", b"\x7fstarts with DEL").unwrap();
    xattr::set(t.join("a"), "user.empty", b"").unwrap();
    set_mtime(&t.join("a"), 1_700_000_000, 123_456_789);
    set_mtime(&odd, 1_600_000_000, 987_654_321);
}

fn walk(root: &Path, rel: &Path, out: &mut Vec<PathBuf>) {
    out.push(rel.to_path_buf());
    let here = root.join(rel);
    if fs::symlink_metadata(&here).unwrap().is_dir() {
        for e in fs::read_dir(&here).unwrap() {
            walk(root, &rel.join(e.unwrap().file_name()), out);
        }
    }
}

fn xattrs_of(p: &Path) -> BTreeMap<Vec<u8>, Vec<u8>> {
    xattr::list(p)
        .unwrap()
        .filter(|n| n.as_bytes().starts_with(b"user."))
        .map(|n| {
            let v = xattr::get(p, &n).unwrap().unwrap();
            (n.into_vec(), v)
        })
        .collect()
}

#[test]
fn every_field_comes_back_as_the_file_system_has_it() {
    let repo = Repo::new();
    let base = repo.dir.path();
    make_tree(&base.join("t"));
    repo.create("first", &["--chunker-params", SMALL_CHUNKS, "--comment", "a comment"], &["t"]);

    // borg list --json
    let list = repo.list();
    assert_eq!(list.location, repo.repo().as_os_str().as_bytes());
    assert_eq!(list.archives.len(), 1);
    let summary = &list.archives[0];
    assert_eq!(summary.name, b"first");

    // borg info --json
    let info = repo.info("first");
    assert_eq!(info.name, b"first");
    assert_eq!(info.id, summary.id);
    assert_eq!(info.start, summary.start);
    assert!(info.end >= info.start);
    assert_eq!(info.comment, b"a comment");
    assert_eq!(info.username, b"root");
    assert!(!info.hostname.is_empty());
    assert_eq!(info.command_line[1], b"create");
    let now = std::time::SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64;
    assert!((info.start.secs - now).abs() < 600, "start {:?} is not now (TZ=UTC?)", info.start);

    // borg debug dump-archive
    let (meta, items) = repo.dump("first");
    assert_eq!(meta.name, b"first");
    assert_eq!(meta.hostname, info.hostname);
    assert_eq!(meta.username, info.username);
    assert_eq!(meta.comment, info.comment);
    assert_eq!(meta.cmdline, info.command_line);
    assert_eq!(meta.rejected, 0);
    assert_eq!(meta.items as usize, items.len());
    assert_eq!(meta.time.secs, info.start.secs, "{meta:?} {info:?}");
    assert!(meta.time_end.unwrap() >= meta.time);
    assert_eq!(
        meta.chunker_params,
        Some(borg::ChunkerParams::Buzhash { min_exp: 10, max_exp: 16, mask_bits: 12, window: 4095 })
    );

    let mut paths = Vec::new();
    walk(base, Path::new("t"), &mut paths);
    assert_eq!(paths.len(), items.len(), "{:?}", items.keys().collect::<Vec<_>>());
    for rel in &paths {
        let key = rel.as_os_str().as_bytes();
        let it = items.get(key).unwrap_or_else(|| panic!("no item for {rel:?}"));
        let full = base.join(rel);
        let md = fs::symlink_metadata(&full).unwrap();
        assert_eq!(it.mode, md.mode(), "{rel:?}");
        assert_eq!(it.uid, md.uid(), "{rel:?}");
        assert_eq!(it.gid, md.gid(), "{rel:?}");
        assert_eq!(it.user.as_deref(), Some(&b"root"[..]), "{rel:?}");
        assert_eq!(it.group.as_deref(), Some(&b"root"[..]), "{rel:?}");
        assert_eq!(it.mtime, ns(md.mtime(), md.mtime_nsec()), "{rel:?}");
        assert_eq!(it.ctime, Some(ns(md.ctime(), md.ctime_nsec())), "{rel:?}");
        assert_eq!(it.part, None);
        assert!(!it.repaired);
        let ft = md.file_type();
        use std::os::unix::fs::FileTypeExt;
        if ft.is_file() {
            let data = fs::read(&full).unwrap();
            assert_eq!(it.size, Some(data.len() as u64), "{rel:?}");
            assert!(it.content_key.is_some(), "{rel:?}");
            if it.kind() == ItemKind::File {
                let chunks = it.chunks.as_ref().unwrap();
                let total: u64 = chunks.iter().map(|c| c.size as u64).sum();
                assert_eq!(total, data.len() as u64, "{rel:?}");
            }
            assert_eq!(it.xattrs, xattrs_of(&full), "{rel:?}");
        } else if ft.is_symlink() {
            assert_eq!(it.kind(), ItemKind::Symlink);
            let target = fs::read_link(&full).unwrap();
            assert_eq!(it.source.as_deref(), Some(target.as_os_str().as_bytes()));
        } else if ft.is_dir() {
            assert_eq!(it.kind(), ItemKind::Directory);
        } else if ft.is_fifo() {
            assert_eq!(it.kind(), ItemKind::Fifo);
            assert_eq!(it.chunks, None);
        } else if ft.is_char_device() {
            assert_eq!(it.kind(), ItemKind::CharDevice);
            assert_eq!(it.rdev, Some(md.rdev()));
        } else {
            panic!("unexpected file type at {rel:?}");
        }
    }

    // The tricky fields, by name.
    let a = &items[&b"t/a"[..]];
    assert_eq!(a.mtime, 1_700_000_000_123_456_789);
    assert_eq!(a.xattrs[&b"user.bin"[..]], b"\xff\x00\x7f");
    assert_eq!(a.xattrs[&b"user.del"[..]], b"\x7fstarts with DEL");
    assert_eq!(a.xattrs[&b"user.empty"[..]], b"");
    let odd = &items[&b"t/caf\xe9"[..]];
    assert_eq!(odd.mtime, 1_600_000_000_987_654_321);
    assert_eq!(odd.size, Some(12));
    let big = &items[&b"t/big"[..]];
    assert!(big.chunks.as_ref().unwrap().len() > 3, "big file in one chunk");
    assert_eq!(items[&b"t/empty"[..]].chunks.as_deref(), Some(&[][..]));
    assert_eq!(items[&b"t/a"[..]].content_key, items[&b"t/a-copy"[..]].content_key, "same content, same key");
    assert_ne!(items[&b"t/a"[..]].content_key, items[&b"t/empty"[..]].content_key);

    // Hard links: the first in the archive is the master, the other names it.
    let links: Vec<&Item> =
        items.values().filter(|i| i.path.ends_with(b"link-master") || i.path.ends_with(b"link-slave")).collect();
    let master = links.iter().find(|i| i.hardlink_master).expect("a master");
    let slave = links.iter().find(|i| !i.hardlink_master).expect("a slave");
    assert_eq!(master.kind(), ItemKind::File);
    assert_eq!(slave.kind(), ItemKind::HardLink);
    assert_eq!(slave.source.as_deref(), Some(&master.path[..]));
    assert_eq!(slave.chunks, None);
    assert_eq!(slave.content_key, master.content_key);
    assert_eq!(slave.size, Some(14));
}

#[test]
fn content_keys_across_archives_and_oldest_first() {
    let repo = Repo::new();
    let base = repo.dir.path();
    make_tree(&base.join("t"));
    repo.create("zz-older", &["--chunker-params", SMALL_CHUNKS], &["t"]);
    fs::write(base.join("t/sub/changing"), b"version 2").unwrap();
    // borg's list has whole seconds: make the second archive start a second later.
    std::thread::sleep(Duration::from_millis(1100));
    repo.create("aa-newer", &["--chunker-params", SMALL_CHUNKS], &["t"]);

    let list = repo.list();
    let names: Vec<&[u8]> = list.archives.iter().map(|a| &a.name[..]).collect();
    assert_eq!(names, [&b"zz-older"[..], b"aa-newer"], "oldest first");
    assert!(list.archives[0].start < list.archives[1].start);
    assert_ne!(list.archives[0].id, list.archives[1].id);

    let (_, one) = repo.dump("zz-older");
    let (_, two) = repo.dump("aa-newer");
    for same in [&b"t/a"[..], b"t/big", b"t/caf\xe9", b"t/empty", b"t/link-master"] {
        assert_eq!(one[same].content_key, two[same].content_key, "{same:?}");
        assert!(one[same].content_key.is_some());
    }
    let changed = &b"t/sub/changing"[..];
    assert_ne!(one[changed].content_key, two[changed].content_key);
}

#[test]
fn part_files_of_a_checkpoint_are_recognised() {
    let repo = Repo::new();
    let base = repo.dir.path();
    fs::create_dir(base.join("q")).unwrap();
    let pipe = base.join("q/pipe");
    assert_eq!(unsafe { libc::mkfifo(cpath(&pipe).as_ptr(), 0o600) }, 0);
    // A slow writer makes borg checkpoint (every second) in the middle of the file.
    let writer = std::thread::spawn(move || {
        use std::io::Write;
        let mut f = fs::File::options().write(true).open(&pipe).unwrap();
        for i in 0..3 {
            f.write_all(&noise(200_000, 10 + i)).unwrap();
            f.flush().unwrap();
            std::thread::sleep(Duration::from_millis(1500));
        }
    });
    repo.create("slow", &["--read-special", "--checkpoint-interval", "1", "--chunker-params", SMALL_CHUNKS], &["q"]);
    writer.join().unwrap();
    let (_, items) = repo.dump("slow");
    let parts: Vec<&Item> = items.values().filter(|i| i.part.is_some()).collect();
    assert!(!parts.is_empty(), "no part items: {:?}", items.keys().collect::<Vec<_>>());
    for p in &parts {
        assert_eq!(p.part_of(), Some(&b"q/pipe"[..]));
        let n = p.part.unwrap();
        assert!(p.path.ends_with(format!(".borg_part_{n}").as_bytes()));
    }
    let whole = &items[&b"q/pipe"[..]];
    assert_eq!(whole.part, None);
    assert_eq!(whole.size, Some(600_000));
    let part_total: u64 = parts.iter().map(|p| p.size.unwrap()).sum();
    assert!(part_total <= 600_000);
}

#[test]
fn a_non_utf8_xattr_name_makes_borgs_dump_fail_and_that_is_an_error() {
    // borg 1.2 writes xattr names as text and its dump stops with a UnicodeDecodeError on
    // one that is not UTF-8: the truncated document must be an error, not a short archive.
    let repo = Repo::new();
    let base = repo.dir.path();
    fs::create_dir(base.join("x")).unwrap();
    fs::write(base.join("x/f"), b"a").unwrap();
    xattr::set(base.join("x/f"), OsStr::from_bytes(b"user.\xff"), b"v").unwrap();
    repo.create("x", &[], &["x"]);
    let o = repo.dump_raw("x");
    let mut n = 0;
    let r = borg::read_dump(&o.stdout[..], &Limits::default(), &mut |_| {
        n += 1;
        Ok::<_, Error>(())
    });
    if o.status.success() {
        // A borg that can dump it: then the name must come back.
        r.unwrap();
    } else {
        assert!(matches!(r, Err(Error::DumpSyntax { .. })), "{r:?}");
    }
}

// ---------------------------------------------------------------------------------------
// Hand-written documents.

const ID_A: &str = "\\u007f1111111111111111111111111111111111111111111111111111111111111111";

fn doc(items: &str) -> String {
    format!(
        r#"{{"_name": "arch", "_manifest_entry": {{"id": "\u007f00"}}, "_meta": {{"hostname": "h", "username": "u", "time": "2024-01-02T03:04:05.678901", "time_end": "2024-01-02T03:04:06.000000", "cmdline": ["borg", "create"], "comment": "", "chunker_params": ["buzhash", 19, 23, 21, 4095], "items": ["\u007f22"], "version": 1}}, "_items": [{items}]}}"#
    )
}

fn file_item(path: &str, extra: &str) -> String {
    format!(
        r#"{{"chunks": [["{ID_A}", 5, 9]], "gid": 0, "mode": 33188, "mtime": 5, "path": "{path}", "size": 5, "uid": 0{extra}}}"#
    )
}

fn events_with(input: &[u8], limits: &Limits) -> Result<(DumpMeta, Vec<DumpEvent>), Error> {
    let mut ev = Vec::new();
    let meta = borg::read_dump(input, limits, &mut |e| {
        ev.push(e);
        Ok::<_, Error>(())
    })?;
    Ok((meta, ev))
}

fn events(input: &str) -> Result<(DumpMeta, Vec<DumpEvent>), Error> {
    events_with(input.as_bytes(), &Limits::default())
}

fn rejected(input: &str) -> Reject {
    let (_, ev) = events(input).unwrap();
    match &ev[..] {
        [DumpEvent::Rejected { reason, .. }] => reason.clone(),
        other => panic!("not one rejection: {other:?}"),
    }
}

#[test]
fn a_hand_written_dump_parses() {
    let (meta, ev) = events(&doc(&file_item("d/f", ""))).unwrap();
    assert_eq!(meta.name, b"arch");
    assert_eq!(meta.time, BorgTime { secs: 1_704_164_645, nanos: 678_901_000 });
    assert_eq!(meta.cmdline, [b"borg".to_vec(), b"create".to_vec()]);
    let [DumpEvent::Item(it)] = &ev[..] else { panic!("{ev:?}") };
    assert_eq!(it.path, b"d/f");
    assert_eq!(it.chunks.as_ref().unwrap()[0].id, [0x11; 32]);
}

#[test]
fn lone_surrogates_in_paths_and_names_come_back_as_bytes() {
    let input = doc(&file_item("t/caf\\udce9", "")).replace("\"arch\"", "\"n\\udcff\"");
    let (meta, ev) = events(&input).unwrap();
    assert_eq!(meta.name, b"n\xff");
    let [DumpEvent::Item(it)] = &ev[..] else { panic!("{ev:?}") };
    assert_eq!(it.path, b"t/caf\xe9");
    // A real NUL in text is kept apart from the marker.
    let reason = rejected(&doc(&file_item("a\\u0000b", "")));
    assert_eq!(reason, Reject::UnsafePath { problem: "holds a NUL byte" });
}

#[test]
fn every_prefix_of_a_dump_is_an_error_not_a_panic() {
    let full = doc(&format!("{}, {}", file_item("a", ""), file_item("b", "")));
    for n in 0..full.len() {
        let r = events(&full[..n]);
        assert!(matches!(r, Err(Error::DumpSyntax { .. }) | Err(Error::DumpShape { .. })), "prefix {n}: {r:?}");
    }
    events(&full).unwrap();
    assert!(matches!(events(&format!("{full} x")), Err(Error::DumpSyntax { .. })));
}

#[test]
fn wrong_shapes_are_typed_errors() {
    let meta = r#""_meta": {"time": "2024-01-02T03:04:05"}"#;
    for bad in [
        "[]".to_string(),
        "5".to_string(),
        r#"{"_items": []}"#.to_string(),
        format!("{{{meta}}}"),
        format!(r#"{{{meta}, "_items": {{}}}}"#),
        format!(r#"{{{meta}, "_items": 5}}"#),
        r#"{"_meta": 5, "_items": []}"#.to_string(),
        r#"{"_meta": {"time": 5}, "_items": []}"#.to_string(),
        r#"{"_meta": {"time": "yesterday"}, "_items": []}"#.to_string(),
        r#"{"_meta": {}, "_items": []}"#.to_string(),
    ] {
        let r = events(&bad);
        assert!(matches!(r, Err(Error::DumpShape { .. })), "{bad}: {r:?}");
        let msg = r.unwrap_err().to_string();
        assert!(msg.contains("archive"), "{msg}");
    }
    events(&format!(r#"{{{meta}, "_items": []}}"#)).unwrap();
}

/// A malformed item and a check of the reason it is rejected for.
type Case = (String, fn(&Reject) -> bool);

#[test]
fn malformed_items_are_rejected_and_the_dump_goes_on() {
    let cases: Vec<Case> = vec![
        ("5".into(), |r| matches!(r, Reject::NotAnObject { .. })),
        ("[1, [2]]".into(), |r| matches!(r, Reject::NotAnObject { .. })),
        ("null".into(), |r| matches!(r, Reject::NotAnObject { .. })),
        (r#"{"path": 5}"#.into(), |r| matches!(r, Reject::Field { .. })),
        (r#"{"path": "x", "mtime": 1, "uid": 0, "gid": 0}"#.into(), |r| *r == Reject::Missing { field: "mode" }),
        (file_item("x", r#", "mtime": 1.5"#), |r| matches!(r, Reject::Field { .. })),
        (file_item("x", r#", "mtime": 1e300"#), |r| matches!(r, Reject::Field { .. })),
        (file_item("x", r#", "uid": 99999999999999999999999999"#), |r| matches!(r, Reject::Field { .. })),
        (file_item("x", r#", "uid": 4294967296"#), |r| matches!(r, Reject::Field { .. })),
        (file_item("x", r#", "size": -5"#), |r| matches!(r, Reject::Field { .. })),
        (file_item("x", r#", "size": 6"#), |r| matches!(r, Reject::SizeMismatch { .. })),
        (file_item("x", r#", "mode": 1048576"#), |r| matches!(r, Reject::Field { .. })),
        (file_item("x", r#", "chunks": [["\u007fzz", 1, 1]]"#), |r| matches!(r, Reject::Chunk { .. })),
        (file_item("x", r#", "chunks": [["\u007f1111", 5, 5]]"#), |r| matches!(r, Reject::Chunk { .. })),
        (file_item("x", r#", "chunks": [["plain text id", 5, 5]]"#), |r| matches!(r, Reject::Chunk { .. })),
        (file_item("x", &format!(r#", "chunks": [["{ID_A}", 5]]"#)), |r| matches!(r, Reject::Chunk { .. })),
        (file_item("x", &format!(r#", "chunks": [["{ID_A}", 5, 5, 5]]"#)), |r| matches!(r, Reject::Chunk { .. })),
        (file_item("x", &format!(r#", "chunks": [["{ID_A}", -5, 5]]"#)), |r| matches!(r, Reject::Chunk { .. })),
        (file_item("x", r#", "chunks": {"a": 1}"#), |r| matches!(r, Reject::Field { .. })),
        (file_item("x", r#", "chunks": null"#), |r| matches!(r, Reject::Field { .. })),
        (file_item("x", r#", "xattrs": {"user.a": "\u007fxyz"}"#), |r| matches!(r, Reject::Field { .. })),
        (file_item("x", r#", "xattrs": [1]"#), |r| matches!(r, Reject::Field { .. })),
        (file_item("../escape", ""), |r| matches!(r, Reject::UnsafePath { .. })),
        (file_item("/abs", ""), |r| matches!(r, Reject::UnsafePath { .. })),
        (file_item("", ""), |r| matches!(r, Reject::UnsafePath { .. })),
        (file_item("x", r#", "part": 2"#), |r| matches!(r, Reject::Field { .. })),
        (r#"{"gid": 0, "mode": 33188, "mtime": 5, "path": "nochunks", "uid": 0}"#.into(), |r| {
            *r == Reject::Missing { field: "chunks" }
        }),
    ];
    for (item, check) in cases {
        // The bad item between two good ones: both good ones come through.
        let all = format!("{}, {item}, {}", file_item("before", ""), file_item("after", ""));
        let (meta, ev) = events(&doc(&all)).unwrap_or_else(|e| panic!("{item}: {e}"));
        assert_eq!(ev.len(), 3, "{item}: {ev:?}");
        assert!(matches!(&ev[0], DumpEvent::Item(i) if i.path == b"before"), "{item}");
        assert!(matches!(&ev[2], DumpEvent::Item(i) if i.path == b"after"), "{item}");
        match &ev[1] {
            DumpEvent::Rejected { index, reason, .. } => {
                assert_eq!(*index, 1);
                assert!(check(reason), "{item}: {reason:?}");
                assert!(!reason.to_string().is_empty());
            }
            other => panic!("{item}: accepted {other:?}"),
        }
        assert_eq!(meta.rejected, 1);
        assert_eq!(meta.items, 3);
    }
    // A number past f64's range is not JSON serde_json accepts: a typed error.
    let r = events(&doc(&file_item("x", r#", "mtime": 1e400"#)));
    assert!(matches!(r, Err(Error::DumpSyntax { .. })), "{r:?}");
    // The path is reported when it was read.
    let (_, ev) = events(&doc(&file_item("named", r#", "size": 6"#))).unwrap();
    assert!(matches!(&ev[0], DumpEvent::Rejected { path: Some(p), .. } if p == b"named"));
}

#[test]
fn per_item_limits() {
    let limits =
        Limits { chunks_per_item: 2, xattrs_per_item: 2, xattr_value_bytes: 4, path_bytes: 8, ..Limits::default() };
    let chunk = format!(r#"["{ID_A}", 100, 5]"#);
    let cases = [
        (
            file_item("x", &format!(r#", "size": 300, "chunks": [{chunk}, {chunk}, {chunk}]"#)),
            Reject::TooManyChunks { limit: 2 },
        ),
        (
            file_item("x", r#", "xattrs": {"user.a": "", "user.b": "", "user.c": ""}"#),
            Reject::TooManyXattrs { limit: 2 },
        ),
        (
            file_item("x", r#", "xattrs": {"user.a": "12345"}"#),
            Reject::TooLong { field: "xattr \"user.a\"".into(), len: 5, limit: 4 },
        ),
        (
            file_item("x", r#", "xattrs": {"user.a": "\u007f0102030405"}"#),
            Reject::TooLong { field: "xattr \"user.a\"".into(), len: 5, limit: 4 },
        ),
        (file_item("123456789", ""), Reject::TooLong { field: "path".into(), len: 9, limit: 8 }),
    ];
    for (item, want) in cases {
        let (_, ev) = events_with(doc(&item).as_bytes(), &limits).unwrap();
        match &ev[..] {
            [DumpEvent::Rejected { reason, .. }] => assert_eq!(*reason, want, "{item}"),
            other => panic!("{item}: {other:?}"),
        }
    }
    // Within the limits, fine.
    let ok = file_item("x", &format!(r#", "size": 200, "chunks": [{chunk}, {chunk}]"#));
    let (_, ev) = events_with(doc(&ok).as_bytes(), &limits).unwrap();
    assert!(matches!(&ev[..], [DumpEvent::Item(_)]), "{ev:?}");
    // More chunks than borg's 64-byte minimum chunk allows for the size.
    let tiny = format!(r#"["{ID_A}", 5, 5]"#);
    let many = file_item("x", &format!(r#", "size": 10, "chunks": [{tiny}, {tiny}]"#));
    let (_, ev) = events(&doc(&many)).unwrap();
    assert!(matches!(&ev[..], [DumpEvent::Rejected { reason: Reject::SizeMismatch { count: 2, .. }, .. }]), "{ev:?}");
}

/// Serves `head`, then `fill` without end, counting what was read.
struct Endless {
    head: Vec<u8>,
    pos: usize,
    fill: u8,
    served: u64,
}

impl Read for Endless {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = if self.pos < self.head.len() {
            let n = buf.len().min(self.head.len() - self.pos);
            buf[..n].copy_from_slice(&self.head[self.pos..self.pos + n]);
            self.pos += n;
            n
        } else {
            buf.fill(self.fill);
            buf.len()
        };
        self.served += n as u64;
        Ok(n)
    }
}

#[test]
fn an_item_over_the_size_limit_stops_with_a_typed_error_and_bounded_reading() {
    let limits = Limits { item_json_bytes: 1 << 20, ..Limits::default() };
    let head = doc(&format!("{}, ", file_item("first", "")));
    // An endless path string, then an endless run of nested lists.
    for (tail, fill) in [(r#"{"path": "a"#, b'a'), (r#"{"x": [[["#, b'[')] {
        let head = format!("{}{tail}", &head[..head.len() - 2]).into_bytes();
        let mut input = Endless { head, pos: 0, fill, served: 0 };
        let mut seen = 0;
        let r = borg::read_dump(&mut input, &limits, &mut |_| {
            seen += 1;
            Ok::<_, Error>(())
        });
        match r {
            Err(Error::ItemTooLarge { archive, index, after, limit }) => {
                assert_eq!(archive, "arch");
                assert_eq!(index, 1);
                assert!(after.contains("first"), "{after}");
                assert_eq!(limit, 1 << 20);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(seen, 1);
        assert!(input.served < (1 << 20) + 256 * 1024, "read {} bytes", input.served);
    }
    // The metadata has its own limit.
    let limits = Limits { meta_json_bytes: 1 << 16, ..Limits::default() };
    let mut input =
        Endless { head: br#"{"_name": "arch", "_meta": {"hostname": ""#.to_vec(), pos: 0, fill: b'h', served: 0 };
    let r = borg::read_dump(&mut input, &limits, &mut |_| Ok::<_, Error>(()));
    assert!(matches!(r, Err(Error::MetaTooLarge { ref part, .. }) if part == "_meta"), "{r:?}");
}

#[test]
fn deep_nesting_is_no_stack_overflow() {
    let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
    // In an unknown field of an item: skipped.
    let (_, ev) = events(&doc(&file_item("x", &format!(r#", "unknown": {}"#, deep(100_000))))).unwrap();
    assert!(matches!(&ev[..], [DumpEvent::Item(_)]), "{ev:?}");
    // As an item: rejected.
    let (_, ev) = events(&doc(&deep(100_000))).unwrap();
    assert!(matches!(&ev[..], [DumpEvent::Rejected { .. }]), "{ev:?}");
    // In the metadata, and at the top: typed errors or skipped, never a crash.
    let r = events(&format!(r#"{{"_meta": {{"x": {}}}, "_items": []}}"#, deep(100_000)));
    assert!(r.is_err() || r.is_ok());
    let r = events(&format!(
        r#"{{"_other": {}, "_meta": {{"time": "2024-01-02T03:04:05"}}, "_items": []}}"#,
        deep(100_000)
    ));
    r.unwrap();
    let obj = |n: usize| format!("{}1{}", r#"{"a":"#.repeat(n), "}".repeat(n));
    let (_, ev) = events(&doc(&file_item("x", &format!(r#", "xattrs": {}"#, obj(10_000))))).unwrap();
    assert!(matches!(&ev[..], [DumpEvent::Rejected { .. }]), "{ev:?}");
}

#[test]
fn the_callbacks_error_stops_the_dump() {
    #[derive(Debug)]
    enum MyErr {
        Stop,
        Borg(Error),
    }
    impl From<Error> for MyErr {
        fn from(e: Error) -> Self {
            MyErr::Borg(e)
        }
    }
    let input = doc(&format!("{}, {}", file_item("a", ""), file_item("b", "")));
    let mut seen = 0;
    let r = borg::read_dump(input.as_bytes(), &Limits::default(), &mut |_| {
        seen += 1;
        Err(MyErr::Stop)
    });
    assert!(matches!(r, Err(MyErr::Stop)), "{r:?}");
    assert_eq!(seen, 1);
    let r = borg::read_dump(&b"{"[..], &Limits::default(), &mut |_| Ok::<_, MyErr>(()));
    assert!(matches!(r, Err(MyErr::Borg(Error::DumpSyntax { .. }))), "{r:?}");
}

const LIST: &str = r#"{"archives": [
  {"archive": "b", "barchive": "b", "id": "2d34df6272a8c04d7d048c14b41ea859dbfa5d6fe7b313f7bf563318e4da7910", "name": "b", "start": "2026-12-02T04:18:58.000000", "time": "2026-12-02T04:18:58.000000"},
  {"archive": "n?", "barchive": "n\udce9", "id": "0000000000000000000000000000000000000000000000000000000000000001", "name": "n?", "start": "2025-01-01T00:00:00.000000", "time": "2025-01-01T00:00:00.000000"},
  {"archive": "a", "barchive": "a", "id": "0000000000000000000000000000000000000000000000000000000000000002", "name": "a", "start": "2026-12-02T04:18:58.000000", "time": "2026-12-02T04:18:58.000000"}],
 "encryption": {"mode": "repokey"},
 "repository": {"id": "50d4c4392e5954640f96d6b4967e4453e76d1ce39cab33dbc3c9c94777e16a0a", "last_modified": "2026-12-02T04:18:58.000000", "location": "/tmp/x"}}"#;

#[test]
fn list_sorts_oldest_first_and_keeps_verbatim_names() {
    let l = borg::parse_list(LIST.as_bytes()).unwrap();
    let names: Vec<&[u8]> = l.archives.iter().map(|a| &a.name[..]).collect();
    assert_eq!(names, [&b"n\xe9"[..], b"a", b"b"]);
    assert_eq!(l.archives[0].start, BorgTime { secs: 1_735_689_600, nanos: 0 });
    assert_eq!(l.location, b"/tmp/x");
    assert_eq!(l.repository_id.to_hex(), "50d4c4392e5954640f96d6b4967e4453e76d1ce39cab33dbc3c9c94777e16a0a");
}

#[test]
fn hostile_listings_are_typed_errors() {
    let bad_hex = LIST.replace("0000000000000000000000000000000000000000000000000000000000000001", "zz");
    let bad_time = LIST.replace("2025-01-01T00:00:00.000000", "soon");
    for bad in [
        "".to_string(),
        LIST[..LIST.len() / 2].to_string(),
        "[]".to_string(),
        r#"{"archives": 5, "repository": {"id": "", "location": ""}}"#.to_string(),
        bad_hex,
        bad_time,
        LIST.replace("\"start\": \"2025-01-01T00:00:00.000000\"", "\"start\": 1e999"),
        format!("{}{}", "[".repeat(10_000), "]".repeat(10_000)),
    ] {
        let r = borg::parse_list(bad.as_bytes());
        assert!(matches!(r, Err(Error::Listing { .. })), "{bad:.80}: {r:?}");
    }
    let limits = Limits { listing_bytes: 100, ..Limits::default() };
    let r = borg::parse_list_with(LIST.as_bytes(), &limits);
    assert!(matches!(r, Err(Error::ListingTooLarge { limit: 100, .. })), "{r:?}");
    // info: exactly one archive.
    let info = r#"{"archives": [], "repository": {}}"#;
    assert!(matches!(borg::parse_info(info.as_bytes()), Err(Error::Listing { .. })));
    let info =
        r#"{"archives": [{"name": "x", "id": "00", "start": "2024-01-01T00:00:00", "end": "2024-01-01T00:00:00"}]}"#;
    assert!(matches!(borg::parse_info(info.as_bytes()), Err(Error::Listing { .. })));
}

#[test]
fn info_decodes_surrogates_in_the_command_line() {
    let info = r#"{"archives": [{"name": "x", "id": "0000000000000000000000000000000000000000000000000000000000000003", "start": "2024-01-01T00:00:00.000000", "end": "2024-01-01T00:00:01.000000", "hostname": "h", "username": "u", "comment": "", "command_line": ["borg", "create", "t/caf\udce9"]}]}"#;
    let i = borg::parse_info(info.as_bytes()).unwrap();
    assert_eq!(i.command_line[2], b"t/caf\xe9");
    assert_eq!(i.end.secs - i.start.secs, 1);
}
