//! `check` while a backup of the same client commits: whatever point of the
//! check the commit falls at, the check finds no damage (docs/design.md#check,
//! "A backup committing meanwhile").

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::*;
use crate::local_state::LocalState;
use crate::progress::NoProgress;
use crate::repo::history::{HEADS_FILE, History};
use crate::testing::{PASSPHRASE, TestRepo, TestTree, noise, snapshot_of, test_repo};
use coffer_backend::{Backend, BackendResult, MemBackend, ObjectInfo};

/// A memory backend that runs a commit once, right before the listing number
/// `at` (counted from 1) it serves.
struct CommitBeforeListing {
    inner: Arc<MemBackend>,
    listings: AtomicUsize,
    at: usize,
    commit: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl Backend for CommitBeforeListing {
    fn location(&self) -> String {
        self.inner.location()
    }
    fn read_max(&self, name: &str, max: u64) -> BackendResult<Vec<u8>> {
        self.inner.read_max(name, max)
    }
    fn read_range(&self, name: &str, offset: u64, len: u64) -> BackendResult<Vec<u8>> {
        self.inner.read_range(name, offset, len)
    }
    fn write(&self, name: &str, data: Vec<u8>) -> BackendResult<()> {
        self.inner.write(name, data)
    }
    fn stat(&self, name: &str) -> BackendResult<u64> {
        self.inner.stat(name)
    }
    fn list(&self, prefix: &str) -> BackendResult<Vec<ObjectInfo>> {
        if self.listings.fetch_add(1, Ordering::SeqCst) + 1 == self.at
            && let Some(commit) = self.commit.lock().unwrap().take()
        {
            commit();
        }
        self.inner.list(prefix)
    }
    fn delete(&self, name: &str) -> BackendResult<()> {
        self.inner.delete(name)
    }
}

/// What a backup does when it commits, in its order: packs, index files, the
/// snapshot, then the heads this client remembers.
fn commit(t: &TestRepo, state: &LocalState, seed: u64) {
    let repo = t.reopen();
    let saver = crate::repo::BlobSaver::new(&repo);
    let root = TestTree::new().file("new", &[&noise(5000, seed)]).store(&saver).unwrap();
    saver.finish().unwrap();
    let mut snap = snapshot_of(root, &t.key);
    let (merkle_root, leaves) = crate::repo::roots::compute_root(&repo, &snap).unwrap();
    (snap.merkle_root, snap.merkle_leaves) = (Id(merkle_root), leaves);
    repo.save_snapshot(&snap, &t.key).unwrap();
    state.write_ids(HEADS_FILE, &History::load(&repo).unwrap().heads()).unwrap();
}

/// Runs `check` on `t` with `state`, a commit falling right before its listing
/// number `at` (none if it makes fewer); returns the report and whether the
/// commit ran.
fn check_with_commit_at(t: &Arc<TestRepo>, state: &LocalState, at: usize, seed: u64) -> (CheckReport, bool) {
    let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let commit_fn: Box<dyn FnOnce() + Send> = {
        let (t, state, ran) = (t.clone(), state.clone(), ran.clone());
        Box::new(move || {
            commit(&t, &state, seed);
            ran.store(true, Ordering::SeqCst);
        })
    };
    let be = Arc::new(CommitBeforeListing {
        inner: t.backend.clone(),
        listings: AtomicUsize::new(0),
        at,
        commit: Mutex::new(Some(commit_fn)),
    });
    let repo = Repository::open(be.clone() as Arc<dyn Backend>, PASSPHRASE).unwrap();
    // Opening lists too: count from the check's first listing.
    be.listings.store(0, Ordering::SeqCst);
    let opts = CheckOptions { state: Some(state.clone()), ..CheckOptions::default() };
    let r = check(&repo, &opts, &NoProgress).unwrap();
    (r, ran.load(Ordering::SeqCst))
}

#[test]
fn a_backup_committing_at_any_point_of_a_check_is_no_damage() {
    let t = Arc::new(test_repo());
    let dir = tempfile::tempdir().unwrap();
    let state = LocalState::new(dir.path(), &Id([7; 32]));
    commit(&t, &state, 1);
    let (clean, _) = check_with_commit_at(&t, &state, usize::MAX, 0);
    assert!(clean.is_ok(), "{:?}", clean.errors);
    // A commit before each listing the check makes, in turn, and one after the last.
    let mut at = 1;
    loop {
        let (r, ran) = check_with_commit_at(&t, &state, at, 100 + at as u64);
        assert!(r.is_ok(), "a backup committing before listing {at} of the check: {:?}", r.errors);
        if !ran {
            break;
        }
        assert!(at < 100, "the check lists without end");
        at += 1;
    }
    assert!(at > 3, "the check listed only {} times", at - 1);
    // Afterwards, the check sees every commit and remembers the newest heads.
    let (r, _) = check_with_commit_at(&t, &state, usize::MAX, 0);
    assert!(r.is_ok(), "{:?}", r.errors);
    assert_eq!(r.snapshots, at as u64);
}
