//! Restores in bounded batches: with tiny limits, a tree with nested directories,
//! hard links whose names fall in different batches, files sharing chunks, a
//! sparse file, symlinks and empty directories must come back exactly as with
//! one large batch, and no batch may exceed the limits.

use std::collections::HashMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::*;
use crate::chunker::ChunkerParams;
use crate::crypto::sign::SigningKey;
use crate::ops::backup::{BackupOptions, backup};
use crate::progress::NoProgress;
use crate::repo::InitOptions;
use crate::testing::noise;
use coffer_backend::testing::{Hook, Intercepted, Request};
use coffer_backend::{Backend, OpendalBackend};

pub(super) use crate::testing::FAST_KDF as FAST;

/// Small chunks, so that files of a few tens of KiB have several.
pub(super) const SMALL_CHUNKS: ChunkerParams =
    ChunkerParams { min_size: 1 << 10, avg_size: 4 << 10, max_size: 16 << 10 };

pub(super) fn write(path: impl AsRef<Path>, data: &[u8]) {
    std::fs::write(path, data).unwrap();
}

fn set_mtime(path: &Path, secs: i64, nanos: u32) {
    let t = rustix::fs::Timespec { tv_sec: secs, tv_nsec: nanos as _ };
    let times = rustix::fs::Timestamps {
        last_access: rustix::fs::Timespec { tv_sec: 0, tv_nsec: rustix::fs::UTIME_OMIT },
        last_modification: t,
    };
    rustix::fs::utimensat(rustix::fs::CWD, path, &times, rustix::fs::AtFlags::SYMLINK_NOFOLLOW).unwrap();
}

/// Every entry below `root` (relative paths, sorted), children before parents
/// when reversed.
pub(super) fn entries(root: &Path) -> Vec<PathBuf> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
        let mut names: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
        names.sort();
        for p in names {
            out.push(p.strip_prefix(root).unwrap().to_path_buf());
            if std::fs::symlink_metadata(&p).unwrap().is_dir() {
                walk(root, &p, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out
}

/// Builds the source tree.
fn build_source(src: &Path) {
    for d in 0..4u64 {
        for e in 0..3u64 {
            let dir = src.join(format!("d{d}/e{e}"));
            std::fs::create_dir_all(&dir).unwrap();
            for f in 0..6u64 {
                let seed = 1 + d * 100 + e * 10 + f;
                write(dir.join(format!("f{f}")), &noise(100 + (seed as usize * 997) % 30_000, seed));
            }
        }
    }
    // Files sharing chunks: a copy, and a file that starts with another's content.
    let big = noise(200_000, 7);
    write(src.join("d0/big"), &big);
    write(src.join("d2/e1/big_copy"), &big);
    let mut longer = big.clone();
    longer.extend_from_slice(&noise(50_000, 8));
    write(src.join("d3/longer"), &longer);
    // A sparse file: a hole, then data, then a hole.
    let sparse = std::fs::File::create(src.join("d1/sparse")).unwrap();
    sparse.set_len(3 << 20).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&sparse, &noise(10_000, 9), 1 << 20).unwrap();
    drop(sparse);
    // Hard links between directories, walked far apart.
    std::fs::hard_link(src.join("d0/e0/f0"), src.join("d3/e2/link_a")).unwrap();
    std::fs::hard_link(src.join("d1/e1/f3"), src.join("d2/e0/link_b")).unwrap();
    std::fs::hard_link(src.join("d1/e1/f3"), src.join("link_b2")).unwrap();
    std::fs::hard_link(src.join("d0/big"), src.join("d0/e2/big_again")).unwrap();
    // Symlinks, an empty directory, and a directory that only its mode sets apart.
    std::os::unix::fs::symlink("e0/f1", src.join("d1/to_f1")).unwrap();
    std::os::unix::fs::symlink("/nowhere/at/all", src.join("d2/dangling")).unwrap();
    std::fs::create_dir_all(src.join("d3/empty/deeper")).unwrap();
    std::fs::set_permissions(src.join("d2/e2"), std::fs::Permissions::from_mode(0o750)).unwrap();
    // Distinct times everywhere, directories last (deepest first).
    let all = entries(src);
    for (i, rel) in all.iter().enumerate().rev() {
        set_mtime(&src.join(rel), 1_400_000_000 + i as i64 * 3_600, (i as u32 * 7_919) % 1_000_000_000);
    }
    set_mtime(src, 1_300_000_000, 5);
}

/// Asserts that `got` holds what `want` holds: the same entries, kinds,
/// contents, symlink targets, modes, mtimes (directories included), the same
/// grouping of names into inodes, and holes where `want` has them.
pub(super) fn assert_same(want: &Path, got: &Path) {
    let names = entries(want);
    assert_eq!(names, entries(got), "entries differ");
    let mut inodes: HashMap<u64, u64> = HashMap::new();
    for rel in &names {
        let (w, g) = (want.join(rel), got.join(rel));
        let (wm, gm) = (std::fs::symlink_metadata(&w).unwrap(), std::fs::symlink_metadata(&g).unwrap());
        assert_eq!(wm.file_type(), gm.file_type(), "{rel:?}: kind");
        assert_eq!((wm.mtime(), wm.mtime_nsec()), (gm.mtime(), gm.mtime_nsec()), "{rel:?}: mtime");
        if wm.file_type().is_symlink() {
            assert_eq!(std::fs::read_link(&w).unwrap(), std::fs::read_link(&g).unwrap(), "{rel:?}: target");
            continue;
        }
        assert_eq!(wm.mode(), gm.mode(), "{rel:?}: mode");
        if wm.is_file() {
            assert!(std::fs::read(&w).unwrap() == std::fs::read(&g).unwrap(), "{rel:?}: content");
            assert_eq!(wm.nlink(), gm.nlink(), "{rel:?}: names");
            let same = *inodes.entry(wm.ino()).or_insert(gm.ino());
            assert_eq!(same, gm.ino(), "{rel:?}: not a name of the same file as before");
            if wm.blocks() * 512 < wm.size() {
                assert!(gm.blocks() * 512 < gm.size(), "{rel:?}: holes filled");
            }
        }
    }
    let distinct: std::collections::HashSet<u64> = inodes.values().copied().collect();
    assert_eq!(distinct.len(), inodes.len(), "different files restored as one");
}

/// A repository in `dir` holding one backup of `src`, opened afresh with its
/// index loaded, and the snapshot.
pub(super) fn backed_up(dir: &Path, src: &Path) -> (Repository, Snapshot) {
    let be: Arc<dyn Backend> = Arc::new(OpendalBackend::local(&dir.join("repo")).unwrap());
    let opts = InitOptions { kdf: FAST, chunker: SMALL_CHUNKS, pack_size: 1 << 20, ..InitOptions::default() };
    let repo = Repository::init(be.clone(), b"pw", &opts).unwrap();
    let key = SigningKey::generate();
    repo.register_writer(&key.public(), "host".into(), "user".into()).unwrap();
    let opts = BackupOptions { paths: vec![src.to_path_buf()], ..BackupOptions::default() };
    let snapshot = backup(&repo, &opts, &key, &NoProgress).unwrap().snapshot;
    let repo = Repository::open(be, b"pw").unwrap();
    assert!(repo.load_index().unwrap().is_empty());
    (repo, snapshot)
}

/// What one batch held: entries, chunk references, and those of its last file.
#[derive(Clone, Copy, Debug)]
struct Seen {
    entries: usize,
    chunks: usize,
    last_file_chunks: usize,
}

/// A progress display that wants totals and records what it is told.
#[derive(Default)]
struct Recorder {
    totals: Mutex<Option<(u64, u64)>>,
    bytes: AtomicU64,
    items: AtomicU64,
}

impl Progress for Recorder {
    fn wants_totals(&self) -> bool {
        true
    }
    fn set_total(&self, bytes: u64, items: u64) {
        *self.totals.lock().unwrap() = Some((bytes, items));
    }
    fn add_bytes(&self, n: u64) {
        self.bytes.fetch_add(n, Ordering::Relaxed);
    }
    fn add_item(&self, _path: &Path) {
        self.items.fetch_add(1, Ordering::Relaxed);
    }
    fn warn(&self, path: &Path, message: &str) {
        panic!("warning: {}: {message}", path.display());
    }
}

/// Restores `src` from the snapshot into `target` with `limits`; returns the
/// summary and what each batch held. The progress display was told the totals
/// before, and every byte and file as it was written.
fn restore_with(
    repo: &Repository,
    snapshot: &Snapshot,
    src: &Path,
    target: &Path,
    limits: BatchLimits,
    includes: &[&str],
) -> (RestoreSummary, Vec<Seen>) {
    let opts = RestoreOptions {
        target: target.to_path_buf(),
        subpath: Some(src.to_path_buf()),
        includes: includes.iter().map(|s| s.to_string()).collect(),
        batch: limits,
        ..RestoreOptions::default()
    };
    let seen = Mutex::new(Vec::new());
    let observe = |b: &plan::Batch| {
        let chunks = b.files.iter().map(|f| f.node.content.len()).sum();
        let last_file_chunks = b.files.last().map_or(0, |f| f.node.content.len());
        let entries = b.files.len() + b.links.len() + b.dirs.len();
        seen.lock().unwrap().push(Seen { entries, chunks, last_file_chunks });
    };
    let progress = Recorder::default();
    let summary = restore_observed(repo, snapshot, &opts, &progress, &observe).unwrap();
    assert!(summary.failures.is_empty(), "{:?}", summary.failures);
    assert_eq!(summary.warnings, 0);
    assert_eq!(*progress.totals.lock().unwrap(), Some((summary.bytes, summary.files)), "totals");
    assert_eq!(progress.bytes.into_inner(), summary.bytes, "bytes reported");
    assert_eq!(progress.items.into_inner(), summary.files, "files reported");
    (summary, seen.into_inner().unwrap())
}

/// Every batch stays within `limits`: at most `entries` entries, and below
/// `chunks` chunk references before its last file was added.
fn assert_bounded(seen: &[Seen], limits: BatchLimits) {
    for s in seen {
        assert!(s.entries >= 1, "empty batch");
        assert!(s.entries <= limits.entries, "{s:?} over {limits:?}");
        assert!(s.chunks - s.last_file_chunks < limits.chunks, "{s:?} over {limits:?}");
    }
}

#[test]
fn tiny_batches_restore_exactly_what_one_batch_does() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    build_source(&src);
    let (repo, snapshot) = backed_up(dir.path(), &src);

    let whole = dir.path().join("whole");
    let huge = BatchLimits { entries: usize::MAX, chunks: usize::MAX, ..BatchLimits::DEFAULT };
    let (want, seen) = restore_with(&repo, &snapshot, &src, &whole, huge, &[]);
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_same(&src, &whole);
    // 4 * 3 * 6 files, big, big_copy, longer, sparse; 4 + 12 + 2 directories;
    // 4 further names and 2 symlinks.
    assert_eq!((want.files, want.dirs, want.others), (76, 18, 4 + 2));
    let total_entries = seen[0].entries;
    assert_eq!(total_entries as u64, want.files + 4 + want.dirs);

    for limits in [
        BatchLimits { entries: 1, chunks: 1, ..BatchLimits::DEFAULT },
        BatchLimits { entries: 3, chunks: 2, ..BatchLimits::DEFAULT },
        BatchLimits { entries: 1000, chunks: 5, ..BatchLimits::DEFAULT },
        BatchLimits { entries: 7, chunks: 1000, ..BatchLimits::DEFAULT },
        // Files opened again by name for every write, or some of them.
        BatchLimits { entries: 1000, chunks: 1000, kept_files: 0 },
        BatchLimits { entries: 50, chunks: 1000, kept_files: 3 },
        // Batches that grow from 2 entries to 32.
        BatchLimits { entries: 32, chunks: 1000, ..BatchLimits::DEFAULT },
        BatchLimits::DEFAULT,
    ] {
        let target = dir.path().join(format!("out_{}_{}_{}", limits.entries, limits.chunks, limits.kept_files));
        let (got, seen) = restore_with(&repo, &snapshot, &src, &target, limits, &[]);
        assert_same(&src, &target);
        assert_bounded(&seen, limits);
        for (k, batch) in seen.iter().enumerate() {
            let ramp = plan::ramped(limits, k).entries;
            assert!(batch.entries <= ramp, "batch {k} of {limits:?}: {batch:?}");
        }
        assert_eq!(seen.iter().map(|s| s.entries).sum::<usize>(), total_entries, "{limits:?}");
        if limits.entries == 1 {
            assert_eq!(seen.len(), total_entries);
        }
        assert_eq!(
            (got.files, got.dirs, got.others, got.bytes),
            (want.files, want.dirs, want.others, want.bytes),
            "{limits:?}"
        );
    }
}

#[test]
fn tiny_batches_fetched_ahead_as_over_a_remote_store_restore_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    build_source(&src);
    backed_up(dir.path(), &src);
    // The local repository through a backend that wants as many requests in
    // flight as a remote store: the restore takes the remote sizing (waves of
    // several reads, two waves ahead, many batches' reads in flight at once).
    let root = dir.path().join("repo");
    let op = opendal::Operator::new(opendal::services::Fs::default().root(&root.to_string_lossy())).unwrap();
    let be = OpendalBackend::from_operator(op, root.display().to_string(), 32).unwrap();
    assert_eq!(be.connections(), 32);
    let repo = Repository::open(Arc::new(be), b"pw").unwrap();
    assert!(repo.load_index().unwrap().is_empty());
    let snapshot = repo.snapshots().unwrap().0.pop().unwrap().1;
    for limits in [
        BatchLimits { entries: 1, chunks: 1, ..BatchLimits::DEFAULT },
        BatchLimits { entries: 5, chunks: 3, ..BatchLimits::DEFAULT },
        BatchLimits::DEFAULT,
    ] {
        let target = dir.path().join(format!("out_{}_{}", limits.entries, limits.chunks));
        let (got, seen) = restore_with(&repo, &snapshot, &src, &target, limits, &[]);
        assert_same(&src, &target);
        assert_bounded(&seen, limits);
        assert_eq!((got.files, got.dirs, got.others), (76, 18, 4 + 2), "{limits:?}");
    }
}

#[test]
fn tiny_batches_with_includes_restore_only_what_is_selected() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    build_source(&src);
    let (repo, snapshot) = backed_up(dir.path(), &src);
    let sel = &["**/e1/f2", "d2/"];
    let (want, _) = restore_with(&repo, &snapshot, &src, &dir.path().join("whole"), BatchLimits::DEFAULT, sel);
    let target = dir.path().join("tiny");
    let limits = BatchLimits { entries: 1, chunks: 1, ..BatchLimits::DEFAULT };
    let (got, seen) = restore_with(&repo, &snapshot, &src, &target, limits, sel);
    assert_bounded(&seen, limits);
    assert_eq!(entries(&dir.path().join("whole")), entries(&target));
    assert_eq!((got.files, got.dirs, got.others), (want.files, want.dirs, want.others));
    // Only d2 in full, and f2 of every e1 with the directories above it.
    let files: Vec<PathBuf> =
        entries(&target).into_iter().filter(|p| std::fs::symlink_metadata(target.join(p)).unwrap().is_file()).collect();
    assert!(files.iter().all(|p| p.starts_with("d2") || p.ends_with("e1/f2")), "{files:?}");
    assert!(files.contains(&PathBuf::from("d0/e1/f2")) && files.contains(&PathBuf::from("d2/e0/link_b")));
    for rel in ["d2", "d2/e2", "d2/e1/big_copy", "d3/e1/f2", "d2/dangling"] {
        let (w, g) =
            (std::fs::symlink_metadata(src.join(rel)).unwrap(), std::fs::symlink_metadata(target.join(rel)).unwrap());
        assert_eq!((w.mtime(), w.mtime_nsec(), w.mode()), (g.mtime(), g.mtime_nsec(), g.mode()), "{rel}");
    }
}

#[test]
fn a_file_with_more_chunks_than_the_limit_closes_the_batch_it_joins() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    write(src.join("a"), &noise(300, 1));
    write(src.join("b"), &noise(400_000, 2));
    write(src.join("c"), &noise(300, 3));
    let (repo, snapshot) = backed_up(dir.path(), &src);
    let limits = BatchLimits { entries: 100, chunks: 4, ..BatchLimits::DEFAULT };
    let target = dir.path().join("out");
    let (_, seen) = restore_with(&repo, &snapshot, &src, &target, limits, &[]);
    assert_bounded(&seen, limits);
    let sizes: Vec<(usize, usize)> = seen.iter().map(|s| (s.entries, s.chunks)).collect();
    assert_eq!(sizes.len(), 2, "{sizes:?}");
    assert_eq!(sizes[0].0, 2, "a and b close the first batch: {sizes:?}");
    assert!(sizes[0].1 > 20, "{sizes:?}");
    assert_eq!(sizes[1], (1, 1), "c alone: {sizes:?}");
    assert_same(&src, &target);
}

/// Holds back the first read of a pack of file contents until some content was
/// written (or 20 s passed).
struct HoldsARead {
    /// Names of the packs that hold trees: their reads pass.
    tree_packs: Mutex<std::collections::HashSet<String>>,
    written: Arc<AtomicU64>,
    held: std::sync::atomic::AtomicBool,
    waited_out: std::sync::atomic::AtomicBool,
    content_reads: AtomicU64,
}

impl Hook for HoldsARead {
    fn before(&self, request: Request<'_>) -> coffer_backend::BackendResult<()> {
        let Request::Read(name) = request else { return Ok(()) };
        if !name.starts_with("data/") || self.tree_packs.lock().unwrap().contains(name) {
            return Ok(());
        }
        self.content_reads.fetch_add(1, Ordering::SeqCst);
        if !self.held.swap(true, Ordering::SeqCst) {
            let start = std::time::Instant::now();
            while self.written.load(Ordering::SeqCst) == 0 {
                if start.elapsed() > std::time::Duration::from_secs(20) {
                    self.waited_out.store(true, Ordering::SeqCst);
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        Ok(())
    }
}

/// Counts the bytes of file content written.
struct BytesWritten(Arc<AtomicU64>);

impl Progress for BytesWritten {
    fn add_bytes(&self, n: u64) {
        self.0.fetch_add(n, Ordering::SeqCst);
    }
}

#[test]
fn each_read_is_written_as_it_arrives_not_when_its_whole_wave_has() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    build_source(&src);
    backed_up(dir.path(), &src);
    let root = dir.path().join("repo");
    let written = Arc::new(AtomicU64::new(0));
    // The local repository behind a store that wants as many requests in flight
    // as a remote one.
    let holds = HoldsARead {
        tree_packs: Mutex::default(),
        written: written.clone(),
        held: Default::default(),
        waited_out: Default::default(),
        content_reads: AtomicU64::new(0),
    };
    let be = Arc::new(Intercepted::new(OpendalBackend::local(&root).unwrap(), 32, holds));
    let repo = Repository::open(be.clone(), b"pw").unwrap();
    assert!(repo.load_index().unwrap().is_empty());
    {
        let idx = repo.index();
        let mut trees = be.hook().tree_packs.lock().unwrap();
        for e in idx.iter().filter(|e| e.entry.blob_type == crate::format::pack::BlobType::Tree) {
            trees.insert(crate::format::ObjectKind::Pack.path(&idx.packs()[e.pack as usize].id));
        }
    }
    let snapshot = repo.snapshots().unwrap().0.pop().unwrap().1;
    let target = dir.path().join("out");
    let opts = RestoreOptions { target: target.clone(), subpath: Some(src.clone()), ..RestoreOptions::default() };
    let summary = restore(&repo, &snapshot, &opts, &BytesWritten(written)).unwrap();
    assert!(summary.failures.is_empty(), "{:?}", summary.failures);
    assert!(be.hook().content_reads.load(Ordering::SeqCst) >= 2, "one wave of several reads");
    assert!(!be.hook().waited_out.load(Ordering::SeqCst), "one read held back kept the others of its wave unwritten");
    assert_same(&src, &target);
}

/// Swaps the restored file `name` of `dir` for another file once its first
/// bytes are written, as a local user racing the restore could.
struct SwapsTheFile {
    dir: PathBuf,
    swapped: std::sync::atomic::AtomicBool,
}

impl Progress for SwapsTheFile {
    fn add_bytes(&self, _: u64) {
        if !self.swapped.swap(true, Ordering::SeqCst) {
            // In one step, as a rename over it does: the name never goes missing
            // (a restore that looked in between would rightly find no file).
            write(self.dir.join("incoming"), b"not what was backed up");
            std::fs::hard_link(self.dir.join("only"), self.dir.join("moved")).unwrap();
            std::fs::rename(self.dir.join("incoming"), self.dir.join("only")).unwrap();
        }
    }
}

#[test]
fn a_file_swapped_for_another_while_it_is_restored_is_reported_not_restored() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    write(src.join("only"), &noise(200_000, 9));
    let (repo, snapshot) = backed_up(dir.path(), &src);
    // With the handle it was created with kept, and opened again for each write.
    for kept_files in [usize::MAX, 0] {
        let target = dir.path().join(format!("out_{kept_files}"));
        let opts = RestoreOptions {
            target: target.clone(),
            subpath: Some(src.clone()),
            batch: BatchLimits { kept_files, ..BatchLimits::DEFAULT },
            ..RestoreOptions::default()
        };
        let progress = SwapsTheFile { dir: target.clone(), swapped: Default::default() };
        let summary = restore(&repo, &snapshot, &opts, &progress).unwrap();
        assert!(progress.swapped.load(Ordering::SeqCst));
        assert_eq!(summary.files, 0, "kept_files {kept_files}");
        let [(path, e)] = &summary.failures[..] else { panic!("{:?}", summary.failures) };
        assert_eq!(path, &target.join("only"));
        assert!(e.to_string().contains("replaced by another file"), "{e}");
        assert_eq!(std::fs::read(target.join("only")).unwrap(), b"not what was backed up", "left alone");
    }
}
