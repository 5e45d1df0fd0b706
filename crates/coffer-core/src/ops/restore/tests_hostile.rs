//! Restores against a hostile target and hostile or damaged snapshots: a
//! directory swapped for a symlink during the restore, symlinks planted in the
//! target, privileged entries in a snapshot nobody vouched for, damaged pieces
//! among intact ones, and a 200,000-level directory chain.

use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::tests::{assert_same, backed_up, entries, write};
use super::*;
use crate::format::bytes::Bytes;
use crate::format::pack::BlobType;
use crate::format::tree::{Node, NodeKind, Timestamp, Tree};
use crate::id::Id;
use crate::progress::NoProgress;
use crate::repo::BlobSaver;
use crate::testing::noise;
use coffer_backend::OpendalBackend;

fn is_root() -> bool {
    let root = rustix::process::geteuid().is_root();
    if !root {
        eprintln!("skipped: needs root");
    }
    root
}

/// A source with files in nested directories.
fn build_source(src: &Path) {
    for d in ["d", "d/sub", "d/sub/deeper", "e"] {
        std::fs::create_dir_all(src.join(d)).unwrap();
        for f in 0..8u64 {
            write(src.join(d).join(format!("f{f}")), &noise(500 + f as usize * 300, f + 1));
        }
    }
    std::fs::set_permissions(src.join("d"), std::fs::Permissions::from_mode(0o751)).unwrap();
}

/// A directory outside the target that nothing may touch, and what it looks like.
fn outside(dir: &Path) -> (std::path::PathBuf, (u32, i64)) {
    let out = dir.join("outside");
    std::fs::create_dir(&out).unwrap();
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o700)).unwrap();
    let md = std::fs::metadata(&out).unwrap();
    (out, (md.mode(), md.mtime()))
}

fn assert_untouched(out: &Path, before: (u32, i64)) {
    assert_eq!(entries(out), Vec::<std::path::PathBuf>::new(), "something was written outside the target");
    let md = std::fs::metadata(out).unwrap();
    assert_eq!((md.mode(), md.mtime()), before, "the directory outside the target was changed");
}

fn options(target: &Path, subpath: &Path, overwrite: bool, limit: usize) -> RestoreOptions {
    RestoreOptions {
        target: target.to_path_buf(),
        subpath: Some(subpath.to_path_buf()),
        overwrite: if overwrite { Overwrite::Always } else { Overwrite::Refuse },
        batch: BatchLimits { entries: limit, chunks: limit, ..BatchLimits::DEFAULT },
        ..RestoreOptions::default()
    }
}

/// Swaps `target/d` for a symlink to `out` while the first batch is about to be
/// written: every later write meant for `d` must still land in the directory
/// the restore made, now `d.moved`, never in `out`.
#[test]
fn a_directory_swapped_for_a_symlink_never_redirects_a_write() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    build_source(&src);
    let (repo, snapshot) = backed_up(dir.path(), &src);
    let (out, before) = outside(dir.path());
    let target = dir.path().join("target");
    let swapped = AtomicBool::new(false);
    let swap = |_: &plan::Batch| {
        let d = target.join("d");
        if d.is_dir() && !swapped.swap(true, Ordering::SeqCst) {
            std::fs::rename(&d, target.join("d.moved")).unwrap();
            std::os::unix::fs::symlink(&out, &d).unwrap();
        }
    };
    let opts = options(&target, &src, false, 1);
    let summary = restore_observed(&repo, &snapshot, &opts, &NoProgress, &swap).unwrap();
    assert!(swapped.load(Ordering::SeqCst));
    assert_untouched(&out, before);
    assert!(summary.failures.is_empty(), "{:?}", summary.failures);
    // Everything was restored, into the directory the restore made.
    std::fs::remove_file(target.join("d")).unwrap();
    std::fs::rename(target.join("d.moved"), target.join("d")).unwrap();
    assert_same(&src, &target);
}

/// A thread keeps swapping directories of the target for symlinks to a
/// directory outside while an `--overwrite` restore runs: entries may fail,
/// but nothing is ever written, chmodded or chowned outside.
#[test]
fn a_racing_swapper_never_gets_a_byte_written_outside() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    build_source(&src);
    let (repo, snapshot) = backed_up(dir.path(), &src);
    let (out, before) = outside(dir.path());
    for round in 0..4 {
        let target = dir.path().join(format!("target{round}"));
        std::fs::create_dir(&target).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let swapper = {
            let (stop, target, out) = (stop.clone(), target.clone(), out.clone());
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for d in ["d", "d/sub", "e", "d/sub/deeper"] {
                        let p = target.join(d);
                        if std::fs::rename(&p, target.join(format!("moved{n}"))).is_ok() {
                            let _ = std::os::unix::fs::symlink(&out, &p);
                        }
                        n += 1;
                    }
                    std::thread::yield_now();
                }
            })
        };
        let opts = options(&target, &src, true, 1 + round * 3);
        let summary = restore(&repo, &snapshot, &opts, &NoProgress);
        stop.store(true, Ordering::Relaxed);
        swapper.join().unwrap();
        drop(summary);
        assert_untouched(&out, before);
    }
}

/// Symlinks planted where the restore puts directories, files and symlinks are
/// replaced with `--overwrite`, never followed.
#[test]
fn planted_symlinks_are_replaced_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    build_source(&src);
    std::os::unix::fs::symlink("f0", src.join("e/link")).unwrap();
    let (repo, snapshot) = backed_up(dir.path(), &src);
    let (out, before) = outside(dir.path());
    let victim = dir.path().join("victim");
    write(&victim, b"keep me");
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
    let target = dir.path().join("target");
    std::fs::create_dir_all(target.join("e")).unwrap();
    std::os::unix::fs::symlink(&out, target.join("d")).unwrap();
    std::os::unix::fs::symlink(&victim, target.join("e/f0")).unwrap();
    std::os::unix::fs::symlink(&victim, target.join("e/link")).unwrap();
    let summary = restore(&repo, &snapshot, &options(&target, &src, true, 1), &NoProgress).unwrap();
    assert!(summary.failures.is_empty(), "{:?}", summary.failures);
    assert_untouched(&out, before);
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep me");
    assert_eq!(std::fs::metadata(&victim).unwrap().mode() & 0o7777, 0o600);
    assert_same(&src, &target);
}

/// As root, a restore not told to trust the snapshot's author restores no
/// device node, setuid bit, `trusted.` attribute or foreign owner, and counts
/// what it withheld; told to, it restores them all.
#[test]
fn privileged_entries_are_restored_only_when_asked() {
    if !is_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let suid = src.join("suid");
    write(&suid, b"#!/bin/sh\n");
    std::os::unix::fs::chown(&suid, Some(1234), Some(1234)).unwrap();
    std::fs::set_permissions(&suid, std::fs::Permissions::from_mode(0o4755)).unwrap();
    xattr::set(&suid, "trusted.coffer", b"x").unwrap();
    let dev = src.join("null");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &dev,
        rustix::fs::FileType::CharacterDevice,
        0o666.into(),
        rustix::fs::makedev(1, 3),
    )
    .unwrap();
    let (repo, snapshot) = backed_up(dir.path(), &src);

    let target = dir.path().join("plain");
    let summary = restore(&repo, &snapshot, &options(&target, &src, false, 1024), &NoProgress).unwrap();
    assert!(summary.failures.is_empty(), "{:?}", summary.failures);
    let md = std::fs::metadata(target.join("suid")).unwrap();
    assert_eq!((md.mode() & 0o7777, md.uid(), md.gid()), (0o755, 0, 0));
    assert_eq!(xattr::get(target.join("suid"), "trusted.coffer").unwrap(), None);
    assert!(std::fs::symlink_metadata(target.join("null")).is_err(), "device node made");
    assert_eq!(summary.withheld, Withheld { owners: 1, setid: 1, xattrs: 1, devices: 1 });

    let target = dir.path().join("privileged");
    let opts = RestoreOptions { privileged: true, ..options(&target, &src, false, 1024) };
    let summary = restore(&repo, &snapshot, &opts, &NoProgress).unwrap();
    assert!(summary.failures.is_empty(), "{:?}", summary.failures);
    let md = std::fs::metadata(target.join("suid")).unwrap();
    assert_eq!((md.mode() & 0o7777, md.uid(), md.gid()), (0o4755, 1234, 1234));
    assert_eq!(xattr::get(target.join("suid"), "trusted.coffer").unwrap(), Some(b"x".to_vec()));
    assert_eq!(std::fs::symlink_metadata(target.join("null")).unwrap().rdev(), rustix::fs::makedev(1, 3));
    assert!(summary.withheld.is_empty());
}

fn node(name: &[u8], kind: NodeKind) -> Node {
    let mut n = crate::format::tree::tests::node(name, kind);
    n.mode = if kind == NodeKind::Dir { 0o755 } else { 0o644 };
    n.mtime = Timestamp(1_500_000_000, 0);
    n
}

fn file(saver: &BlobSaver, name: &[u8], data: &[u8]) -> Node {
    let mut n = node(name, NodeKind::File);
    n.content = vec![saver.save(BlobType::Data, data).unwrap().0];
    n.size = data.len() as u64;
    n
}

fn dir_node(name: &[u8], subtree: Id) -> Node {
    Node { subtree: Some(subtree), ..node(name, NodeKind::Dir) }
}

fn save_tree(saver: &BlobSaver, mut nodes: Vec<Node>) -> Id {
    nodes.sort_by(|a, b| a.name.cmp(&b.name));
    saver.save(BlobType::Tree, &Tree { nodes }.encode()).unwrap().0
}

/// The repository in `dir` opened afresh, with its index.
fn reopen(dir: &Path) -> Repository {
    let be: Arc<dyn coffer_backend::Backend> = Arc::new(OpendalBackend::local(&dir.join("repo")).unwrap());
    let repo = Repository::open(be, b"pw").unwrap();
    repo.load_index().unwrap();
    repo
}

/// A snapshot whose root tree is made by `build`, in the repository of `dir`
/// (made by a backup of an empty directory).
fn forged(dir: &Path, build: impl FnOnce(&BlobSaver) -> Id) -> (Repository, Snapshot) {
    let empty = dir.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let (repo, mut snapshot) = backed_up(dir, &empty);
    let saver = BlobSaver::new(&repo);
    snapshot.tree = build(&saver);
    saver.finish().unwrap();
    (reopen(dir), snapshot)
}

/// One damaged tree, a missing blob, a bad symlink target, an over-long name
/// and a mode with bits no mode holds each fail their entry only: everything
/// intact is restored, and the damage is reported as such.
#[test]
fn one_bad_piece_does_not_sink_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let (repo, snapshot) = forged(dir.path(), |s| {
        let ok_dir = save_tree(s, vec![file(s, b"inner", b"inner content")]);
        let mut missing_blob = file(s, b"c_missing_blob", b"x");
        missing_blob.content = vec![Id([7; 32])];
        let mut badlink = node(b"e_badlink", NodeKind::Symlink);
        badlink.target = Some(Bytes(b"a\0b".to_vec()));
        let mut badmode = file(s, b"f_badmode", b"mode");
        badmode.mode = 0o170644;
        let long = vec![b'n'; 300];
        save_tree(
            s,
            vec![
                file(s, b"a_ok", b"a content"),
                dir_node(b"b_missing_tree", Id([9; 32])),
                missing_blob,
                file(s, &long, b"long name"),
                badlink,
                badmode,
                dir_node(b"g_ok_dir", ok_dir),
                file(s, b"z_ok", b"z content"),
            ],
        )
    });
    let target = dir.path().join("target");
    let opts = RestoreOptions { target: target.clone(), ..RestoreOptions::default() };
    let summary = restore(&repo, &snapshot, &opts, &NoProgress).unwrap();
    assert_eq!(std::fs::read(target.join("a_ok")).unwrap(), b"a content");
    assert_eq!(std::fs::read(target.join("z_ok")).unwrap(), b"z content");
    assert_eq!(std::fs::read(target.join("g_ok_dir/inner")).unwrap(), b"inner content");
    assert_eq!(std::fs::read(target.join("f_badmode")).unwrap(), b"mode");
    assert!(target.join("b_missing_tree").is_dir());
    assert!(!target.join("c_missing_blob").exists(), "a file that failed was left behind");
    let mut failed: Vec<String> = summary
        .failures
        .iter()
        .map(|(p, _)| p.strip_prefix(&target).unwrap().to_string_lossy().chars().take(12).collect())
        .collect();
    failed.sort();
    let why: Vec<String> = summary.failures.iter().map(|(p, e)| format!("{}: {e}", p.display())).collect();
    assert_eq!(failed, ["b_missing_tr", "c_missing_bl", "e_badlink", "f_badmode", "nnnnnnnnnnnn"], "{why:?}");
    assert!(summary.damaged());
    assert_eq!(summary.files, 4);
}

/// A 200,000-level directory chain (as a hostile co-writer can make) restores
/// in full, with `--include` too: no recursion per level, a bounded number of
/// open handles, and no path length limit.
#[test]
fn a_200000_level_chain_restores() {
    const LEVELS: usize = 200_000;
    let dir = tempfile::tempdir().unwrap();
    let started = std::time::Instant::now();
    let (repo, snapshot) = forged(dir.path(), |s| {
        let mut id = save_tree(s, vec![file(s, b"f", b"at the bottom")]);
        for _ in 0..LEVELS {
            id = save_tree(s, vec![dir_node(b"d", id)]);
        }
        id
    });
    eprintln!("made the {LEVELS}-level snapshot in {:?}", started.elapsed());
    // The second time over the first, with --overwrite: every directory is there already.
    let target = dir.path().join("target");
    for includes in [vec![], vec!["f".to_string()]] {
        let overwrite = !includes.is_empty();
        let mode = if overwrite { Overwrite::Always } else { Overwrite::Refuse };
        let opts = RestoreOptions { target: target.clone(), includes, overwrite: mode, ..RestoreOptions::default() };
        let started = std::time::Instant::now();
        let summary = restore(&repo, &snapshot, &opts, &NoProgress).unwrap();
        eprintln!("restored {LEVELS} levels (overwrite: {overwrite}) in {:?}", started.elapsed());
        assert!(summary.failures.is_empty(), "{:?}", &summary.failures[..1]);
        assert_eq!((summary.files, summary.dirs), (1, LEVELS as u64));
        let mut fd = open_dir(rustix::fs::CWD, target.as_os_str().as_bytes());
        for _ in 0..LEVELS {
            fd = open_dir(fd.as_fd(), b"d");
            let st = rustix::fs::fstat(&fd).unwrap();
            assert_eq!((st.st_mode & 0o7777, st.st_mtime), (0o755, 1_500_000_000));
        }
        let f = rustix::fs::openat(&fd, "f", rustix::fs::OFlags::RDONLY, 0.into()).unwrap();
        let mut content = String::new();
        std::io::Read::read_to_string(&mut std::fs::File::from(f), &mut content).unwrap();
        assert_eq!(content, "at the bottom");
    }
    let started = std::time::Instant::now();
    remove_chain(&target);
    eprintln!("removed the chain in {:?}", started.elapsed());
}

fn open_dir<Fd: AsFd>(dir: Fd, name: &[u8]) -> std::os::fd::OwnedFd {
    let flags = rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::NOFOLLOW;
    // `..` is only ever opened by the tests, to take a chain apart.
    rustix::fs::openat(dir, std::ffi::OsStr::from_bytes(name), flags, 0.into()).unwrap()
}

/// Removes a chain of directories `d/d/d/…/f` (too deep for a recursive
/// removal): down to the bottom one handle at a time, then up through `..`
/// removing each level.
fn remove_chain(target: &Path) {
    use rustix::fs::{AtFlags, openat, unlinkat};
    let mut fd = open_dir(rustix::fs::CWD, target.as_os_str().as_bytes());
    let mut depth = 0;
    while let Ok(sub) = openat(&fd, "d", rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY, 0.into()) {
        fd = sub;
        depth += 1;
    }
    unlinkat(&fd, "f", AtFlags::empty()).unwrap();
    for _ in 0..depth {
        fd = open_dir(fd.as_fd(), b"..");
        unlinkat(&fd, "d", AtFlags::REMOVEDIR).unwrap();
    }
}
