//! Tree blobs in the local cache (docs/design.md#local-cache): a backup keeps the
//! sealed trees it uploads, a later read takes them from the cache without a
//! request, and a damaged cached tree is dropped and read from its pack.

use std::sync::Arc;

use super::*;
use crate::testing::{PASSPHRASE, TestTree, noise, test_repo};
use coffer_backend::{Cache, CountingBackend, DEFAULT_CACHE_SIZE};

/// Every file below `dir`, recursively.
fn files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.file_type().unwrap().is_dir() { stack.push(e.path()) } else { out.push(e.path()) }
        }
    }
    out
}

#[test]
fn trees_are_kept_when_uploaded_served_from_the_cache_and_refetched_when_damaged() {
    let t = test_repo();
    let dir = tempfile::tempdir().unwrap();
    let cache = Arc::new(Cache::open(&dir.path().join("c"), DEFAULT_CACHE_SIZE).unwrap());
    assert!(t.repo.set_tree_cache(cache.clone()));
    let a = noise(5000, 1);
    let tree = TestTree::new().file("a", &[&a]).dir("sub", TestTree::new().file("b", &[b"bee"]));
    let (_, root) = t.snapshot(&tree);
    assert_eq!(cache.stats().stored, 2, "the root and its subdirectory, kept as uploaded");
    let ranges: Vec<_> = files(&dir.path().join("c/ranges"));
    assert_eq!(ranges.len(), 2);

    // Another process with the same cache: the trees cost no request.
    let counting = Arc::new(CountingBackend::new(t.backend.clone()));
    let repo = Repository::open(counting.clone() as Arc<dyn Backend>, PASSPHRASE).unwrap();
    repo.load_index().unwrap();
    repo.set_tree_cache(cache.clone());
    let expected = t.repo.load_tree(&root).unwrap();
    let before = counting.counts().get;
    let got = repo.load_tree(&root).unwrap();
    assert_eq!(got.nodes, expected.nodes);
    let sub = got.find(b"sub").unwrap().subtree.unwrap();
    repo.load_tree(&sub).unwrap();
    assert_eq!(counting.counts().get, before, "both trees from the cache");

    // Damaged cached trees are never used: they are dropped, read from the pack and kept again.
    for p in &ranges {
        let mut b = std::fs::read(p).unwrap();
        b[3] ^= 1;
        std::fs::write(p, b).unwrap();
    }
    // The root's entry is dropped and the root read again with its neighbour in
    // their tree pack, in one request; the subdirectory's entry is replaced by
    // the verified copy read with it, so it costs no request.
    assert_eq!(repo.load_tree(&root).unwrap().nodes, expected.nodes);
    assert!(repo.load_tree(&sub).is_ok());
    assert_eq!(counting.counts().get, before + 1);
    assert_eq!(cache.stats().dropped, 1);
    assert!(repo.take_bad_copies().is_empty(), "a damaged cache entry is no damage of the repository");
    repo.load_tree(&root).unwrap();
    assert_eq!(counting.counts().get, before + 1, "the entries were written again, intact");
}
