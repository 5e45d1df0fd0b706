//! Reading ahead from a repository the real restic made (`COFFER_TEST_RESTIC`): the
//! contents that [`ResticRepo::read_ahead`] hands out equal those read blob by blob,
//! with fewer requests than blobs, under any limits; a damaged blob fails only its file,
//! named; and [`ResticRepo::prefetch_trees`] reads each tree once.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use coffer_import::restic::plan::PlanLimits;
use coffer_import::restic::{BlobId, NodeType, ReadAheadLimits, ResticRepo};
use coffer_import::{Error, LocalDir, Source, SourceError};

const PASSWORD: &str = "coffer-import-test";

/// The restic binary, or `None` when the `restic` group is skipped by name.
fn restic(test: &str) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("COFFER_TEST_RESTIC").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let skip = std::env::var("COFFER_TEST_SKIP").unwrap_or_default();
    if skip.split([',', ' ']).any(|g| g.trim().eq_ignore_ascii_case("restic")) {
        eprintln!("skipped: {test} (COFFER_TEST_SKIP names restic)");
        return None;
    }
    panic!("{test} needs restic 0.19.1: run the tests with `bash .ci/test.sh`, or skip with COFFER_TEST_SKIP=restic");
}

fn run(restic: &Path, repo: &Path, args: &[&str], cwd: &Path) {
    let out = Command::new(restic)
        .arg("-r")
        .arg(repo)
        .args(args)
        .env("RESTIC_PASSWORD", PASSWORD)
        .env("RESTIC_CACHE_DIR", repo.with_extension("cache"))
        .current_dir(cwd)
        .output()
        .unwrap();
    assert!(out.status.success(), "restic {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
}

/// Deterministic bytes: a SplitMix64 stream.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut s = seed;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        out.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// A storage that counts its range reads.
struct Counted {
    inner: LocalDir,
    reads: AtomicU64,
}

impl Source for Counted {
    fn list(&self, dir: &str) -> Result<Vec<(String, u64)>, SourceError> {
        self.inner.list(dir)
    }
    fn read_range(&self, name: &str, offset: u64, len: u64) -> Result<Vec<u8>, SourceError> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.inner.read_range(name, offset, len)
    }
    fn size(&self, name: &str) -> Result<u64, SourceError> {
        self.inner.size(name)
    }
    fn connections(&self) -> usize {
        4
    }
}

/// A restic repository (version 2, compressed) of 12 directories of small files, a few
/// files of several blobs, copies and empty files.
fn make_repo(restic: &Path, tmp: &Path) -> PathBuf {
    let src = tmp.join("src");
    for d in 0..12u64 {
        let dir = src.join(format!("dir-{d:02}")).join("inner");
        fs::create_dir_all(&dir).unwrap();
        for f in 0..25u64 {
            let len = 1 + ((d * 31 + f * 7919) % 20_000) as usize;
            fs::write(dir.join(format!("f{f:02}")), noise(d * 100 + f, len)).unwrap();
        }
        fs::write(dir.join("empty"), b"").unwrap();
    }
    for b in 0..3u64 {
        fs::write(src.join(format!("big-{b}")), noise(1000 + b, 3 * 1024 * 1024 + 4321 * b as usize)).unwrap();
    }
    fs::copy(src.join("big-1"), src.join("dir-03/copy-of-big-1")).unwrap();
    let repo = tmp.join("repo");
    run(restic, &repo, &["init", "-q", "--repository-version", "2"], tmp);
    run(restic, &repo, &["backup", "-q", "."], &src);
    repo
}

fn open(dir: &Path) -> (ResticRepo, Arc<Counted>) {
    let src = Arc::new(Counted { inner: LocalDir::new(dir), reads: AtomicU64::new(0) });
    let mut repo = ResticRepo::open(src.clone(), PASSWORD.as_bytes()).unwrap();
    repo.load_index().unwrap();
    (repo, src)
}

/// The root tree of the repository's one snapshot.
fn root(repo: &ResticRepo) -> BlobId {
    repo.snapshots().unwrap().good[0].1.tree
}

/// Every file of the tree below `root`, depth first in name order: path and blobs.
fn files(repo: &ResticRepo, root: &BlobId) -> Vec<(String, Vec<BlobId>)> {
    let mut out = Vec::new();
    fn walk(repo: &ResticRepo, id: &BlobId, prefix: &str, out: &mut Vec<(String, Vec<BlobId>)>) {
        for n in repo.tree(id).unwrap().nodes {
            let path = format!("{prefix}/{}", n.name_lossy());
            match n.node_type {
                NodeType::File => out.push((path, n.content)),
                NodeType::Dir => walk(repo, &n.subtree.unwrap(), &path, out),
                _ => {}
            }
        }
    }
    walk(repo, root, "", &mut out);
    out
}

/// Reads `files` through a read-ahead of `limits`, every `keep`th file whole (the
/// others passed over unread): each read file's content, or its error.
fn read_all(
    repo: &ResticRepo,
    files: &[(String, Vec<BlobId>)],
    limits: ReadAheadLimits,
    keep: usize,
) -> Vec<(String, Result<Vec<u8>, std::io::Error>)> {
    let items = files.iter().map(|(p, b)| (p.clone(), b.clone()));
    repo.read_ahead(items, limits, |ahead| {
        let mut out = Vec::new();
        let mut n = 0;
        while let Some(path) = ahead.next_file() {
            n += 1;
            if n % keep != 0 {
                continue;
            }
            let mut bytes = Vec::new();
            let r = ahead.reader().read_to_end(&mut bytes).map(|_| bytes);
            out.push((path, r));
        }
        out
    })
}

/// What reading blob by blob gives.
fn plain(repo: &ResticRepo, blobs: &[BlobId]) -> Vec<u8> {
    let mut out = Vec::new();
    repo.content_reader(blobs.to_vec()).read_to_end(&mut out).unwrap();
    out
}

#[test]
fn contents_read_ahead_equal_those_read_blob_by_blob() {
    let Some(restic) = restic("contents_read_ahead_equal_those_read_blob_by_blob") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = make_repo(&restic, tmp.path());
    let (repo, counted) = open(&dir);
    let files = files(&repo, &root(&repo));
    assert!(files.len() > 300, "{}", files.len());
    let blobs: usize = files.iter().map(|(_, b)| b.len()).sum();
    let want: Vec<Vec<u8>> = files.iter().map(|(_, b)| plain(&repo, b)).collect();

    // The defaults: every content whole, with far fewer requests than blobs.
    let before = counted.reads.load(Ordering::Relaxed);
    let got = read_all(&repo, &files, ReadAheadLimits::for_connections(4), 1);
    let requests = counted.reads.load(Ordering::Relaxed) - before;
    assert_eq!(got.len(), files.len());
    for ((path, r), w) in got.iter().zip(&want) {
        assert!(r.as_ref().unwrap() == w, "{path} differs");
    }
    assert!(requests * 10 < blobs as u64, "{requests} requests for {blobs} blobs: neighbours are not merged");

    // Limits that allow almost nothing: one blob a request, one byte in flight, one
    // file planned at a time. Still every content, in order; files passed over unread
    // cost nothing that stays.
    let tight =
        ReadAheadLimits { requests: 2, bytes: 1, window: 1, files: 1, plan: PlanLimits { max_gap: 0, max_request: 1 } };
    for keep in [1, 3] {
        let got = read_all(&repo, &files, tight, keep);
        assert_eq!(got.len(), files.len() / keep);
        for (i, (path, r)) in got.iter().enumerate() {
            assert!(r.as_ref().unwrap() == &want[(i + 1) * keep - 1], "{path} differs (keep {keep})");
        }
    }
    // Many requests at once, small ones.
    let wide = ReadAheadLimits { requests: 16, plan: PlanLimits { max_gap: 4096, max_request: 64 * 1024 }, ..tight };
    let wide = ReadAheadLimits { bytes: 8 << 20, window: 1 << 20, files: 64, ..wide };
    for ((path, r), w) in read_all(&repo, &files, wide, 1).iter().zip(&want) {
        assert!(r.as_ref().unwrap() == w, "{path} differs (wide)");
    }
}

#[test]
fn a_damaged_blob_fails_its_file_only_and_is_named() {
    let Some(restic) = restic("a_damaged_blob_fails_its_file_only_and_is_named") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = make_repo(&restic, tmp.path());
    let (repo, _) = open(&dir);
    let files = files(&repo, &root(&repo));
    let want: Vec<Vec<u8>> = files.iter().map(|(_, b)| plain(&repo, b)).collect();
    // A small file in the middle of the walk: its neighbours share its requests.
    let (victim, _) = files.iter().enumerate().find(|(i, (p, b))| *i > 40 && p.contains("/f") && b.len() == 1).unwrap();
    let blob = files[victim].1[0];
    let loc = repo.index().unwrap().find(&blob)[0];
    let hex = loc.pack.to_hex();
    let pack = dir.join("data").join(&hex[..2]).join(&hex);
    let mut bytes = fs::read(&pack).unwrap();
    bytes[(loc.blob.offset + u64::from(loc.blob.length) / 2) as usize] ^= 0x40;
    fs::set_permissions(&pack, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    fs::write(&pack, bytes).unwrap();

    let got = read_all(&repo, &files, ReadAheadLimits::for_connections(4), 1);
    for (i, ((path, r), w)) in got.iter().zip(&want).enumerate() {
        if i == victim {
            let e = r.as_ref().unwrap_err();
            let inner = e.get_ref().and_then(|e| e.downcast_ref::<Error>()).expect("the reader's error");
            assert!(
                matches!(inner, Error::BlobUnauthenticated { blob: b, pack: p } if *b == blob && *p == loc.pack),
                "{inner}"
            );
            assert!(e.to_string().contains(&blob.to_hex()[..8]) || e.to_string().contains(&blob.short()), "{e}");
        } else {
            assert!(r.as_ref().unwrap() == w, "{path} differs");
        }
    }
}

#[test]
fn trees_are_read_once() {
    let Some(restic) = restic("trees_are_read_once") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = make_repo(&restic, tmp.path());
    let (repo, counted) = open(&dir);
    let root = root(&repo);
    let before = counted.reads.load(Ordering::Relaxed);
    let done = repo.prefetch_trees(&[root]);
    let requests = counted.reads.load(Ordering::Relaxed) - before;
    // The root, 12 directories and their 12 inner ones.
    assert_eq!(done.trees, 25, "{done:?}");
    assert!(!done.budget_reached);
    assert_eq!(requests, done.requests);
    assert!(requests <= done.levels, "one request a level for a repository this small: {done:?}");
    let before = counted.reads.load(Ordering::Relaxed);
    let listed = files(&repo, &root);
    assert_eq!(counted.reads.load(Ordering::Relaxed), before, "listing after the prefetch reads nothing");
    assert!(listed.len() > 300);
    assert_eq!(repo.prefetch_trees(&[root]), Default::default(), "a root is prefetched once");

    // With no room, nothing is kept, and every listing reads its tree.
    let (mut repo, counted) = open(&dir);
    repo.set_tree_cache(0);
    let done = repo.prefetch_trees(&[root]);
    assert!(done.budget_reached, "{done:?}");
    let before = counted.reads.load(Ordering::Relaxed);
    assert_eq!(files(&repo, &root), listed);
    assert_eq!(counted.reads.load(Ordering::Relaxed) - before, 25);
    assert_eq!(repo.tree_cache_used(), 0);
}
