//! Unit tests of [`WriterGuard`] on the memory backend: what a writer does about
//! prune notices before it commits, its marker, and the commit deadline.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use super::*;
use crate::format::FORMAT_VERSION;
use crate::format::envelope::SealedKind;
use crate::format::notice::PruneNotice;
use crate::format::pack::BlobType;
use crate::lifecycle::session;
use crate::testing::{TestRepo, TestTree, noise, test_repo};
use coffer_backend::Backend;

/// Long enough that no check expires while a test runs on a busy machine.
fn relaxed() -> Timing {
    Timing::with_grace(Duration::from_secs(8))
}

fn store_notice(repo: &Repository, packs: &[Id]) -> Id {
    let n = PruneNotice {
        version: FORMAT_VERSION,
        time: "t".into(),
        hostname: "h".into(),
        packs: packs.to_vec(),
        backends: Vec::new(),
    };
    repo.save_sealed(SealedKind::PruneNotice, &n.encode()).unwrap()
}

/// Every blob the tree `root` uses.
fn blobs_of(repo: &Repository, root: Id) -> Vec<(BlobType, Id)> {
    let mut out = Vec::new();
    crate::lifecycle::each_used_blob(repo, root, &mut HashSet::new(), &mut |t, id| {
        out.push((t, id));
        Ok(())
    })
    .unwrap();
    out
}

fn packs(t: &TestRepo) -> HashSet<Id> {
    t.repo.list_ids(ObjectKind::Pack).unwrap().into_iter().collect()
}

/// The packs the stored index files place `blob` in.
fn indexed_in(repo: &Repository, blob: &Id) -> HashSet<Id> {
    let mut out = HashSet::new();
    for f in repo.list_ids(ObjectKind::Index).unwrap() {
        for rec in repo.load_index_file(&f).unwrap() {
            if rec.entries.iter().any(|e| e.id == *blob) {
                out.insert(rec.id);
            }
        }
    }
    out
}

/// A test repository holding one snapshot of two small files in a subdirectory;
/// its root tree, and the two packs everything is in (one of data, one of trees).
fn with_snapshot() -> (TestRepo, Id, Vec<Id>) {
    let t = test_repo();
    let tree = TestTree::new().file("a", &[&noise(1000, 1)]).dir("d", TestTree::new().file("b", &[&noise(2000, 2)]));
    let (_, root) = t.snapshot(&tree);
    let all = packs(&t);
    let (data, trees) = crate::testing::packs_by_type(&t.backend);
    assert_eq!((all.len(), data.len(), trees.len()), (2, 1, 1));
    (t, root, all.into_iter().collect())
}

#[test]
fn a_noticed_pack_holding_used_blobs_has_them_stored_again() {
    let (t, root, noticed) = with_snapshot();
    let writer = t.reopen();
    let mut guard = WriterGuard::begin(&writer, relaxed(), false).unwrap();
    writer.load_index().unwrap();
    store_notice(&t.repo, &noticed);
    let mut calls = 0;
    let rescued = guard
        .before_commit(root, || {
            calls += 1;
            Ok(())
        })
        .unwrap();
    let used = blobs_of(&writer, root);
    assert_eq!(used.len(), 4, "two trees and two files: {used:?}");
    assert_eq!(rescued.blobs, 4);
    assert_eq!(calls, 1);
    // Every used blob now has a copy in a pack the notice does not name.
    for (_, id) in &used {
        let places = indexed_in(&t.repo, id);
        let in_noticed = places.iter().filter(|p| noticed.contains(p)).count();
        assert!(in_noticed == 1 && places.len() == 2, "{id:?} is in {places:?}");
    }
    guard.ready_to_commit().unwrap();
    guard.finish().unwrap();
    assert!(session::list(&t.repo).unwrap().is_empty());
}

#[test]
fn a_notice_read_at_the_start_counts_even_when_gone_at_the_end() {
    let (t, root, noticed) = with_snapshot();
    let n = store_notice(&t.repo, &noticed);
    let writer = t.reopen();
    let mut guard = WriterGuard::begin(&writer, relaxed(), false).unwrap();
    writer.load_index().unwrap();
    // The prune ended and removed its notice; its deletions may be under way.
    t.backend.delete(&ObjectKind::PruneNotice.path(&n)).unwrap();
    assert_eq!(guard.before_commit(root, || Ok(())).unwrap().blobs, 4);
}

#[test]
fn without_a_notice_naming_its_packs_nothing_is_stored_again() {
    let (t, root, _) = with_snapshot();
    store_notice(&t.repo, &[Id([9; 32])]);
    let before = packs(&t);
    let writer = t.reopen();
    let mut guard = WriterGuard::begin(&writer, relaxed(), false).unwrap();
    writer.load_index().unwrap();
    assert_eq!(guard.before_commit(root, || Ok(())).unwrap().blobs, 0);
    assert_eq!(packs(&t), before);
    guard.finish().unwrap();
}

#[test]
fn a_noticed_pack_already_deleted_refuses_the_commit() {
    let (t, root, noticed) = with_snapshot();
    let writer = t.reopen();
    let mut guard = WriterGuard::begin(&writer, relaxed(), false).unwrap();
    writer.load_index().unwrap();
    store_notice(&t.repo, &noticed);
    for pack in &noticed {
        t.backend.delete(&ObjectKind::Pack.path(pack)).unwrap();
    }
    let e = guard.before_commit(root, || Ok(())).unwrap_err();
    assert!(matches!(e, Error::Conflict(_)), "a conflict, with its own exit code: {e}");
    let e = e.to_string();
    assert!(e.contains("a prune running at the same time deleted data") && e.contains("run the backup again"), "{e}");
    drop(guard);
    assert!(session::list(&t.repo).unwrap().is_empty(), "a dropped guard removes its marker");
}

#[test]
fn the_index_load_keeps_only_the_packs_no_index_file_lists_for_the_adoption() {
    let t = test_repo();
    // One backup's packs indexed, then another's left without an index file.
    let saver = BlobSaver::new(&t.repo);
    TestTree::new().file("a", &[&noise(500, 1)]).store(&saver).unwrap();
    saver.finish().unwrap();
    let indexed = packs(&t);
    let files: HashSet<Id> = t.repo.list_ids(ObjectKind::Index).unwrap().into_iter().collect();
    let saver = BlobSaver::new(&t.repo);
    TestTree::new().file("b", &[&noise(500, 2)]).store(&saver).unwrap();
    saver.finish().unwrap();
    for f in t.repo.list_ids(ObjectKind::Index).unwrap() {
        if !files.contains(&f) {
            t.backend.delete(&ObjectKind::Index.path(&f)).unwrap();
        }
    }
    let orphans: HashSet<Id> = packs(&t).difference(&indexed).copied().collect();
    assert_eq!(orphans.len(), 2, "a data pack and a tree pack");
    let r = t.reopen();
    r.load_index().unwrap();
    let kept = r.loaded_orphans().unwrap();
    assert_eq!(kept.iter().map(|(id, _)| *id).collect::<HashSet<_>>(), orphans, "only the orphans are kept");
    for (id, size) in &kept {
        assert_eq!(*size, t.backend.stat(&ObjectKind::Pack.path(id)).unwrap(), "with their sizes");
    }
    // Served once: the next asks the storage again, for every pack.
    let listed: HashSet<Id> = r.loaded_orphans().unwrap().into_iter().map(|(id, _)| id).collect();
    assert_eq!(listed, packs(&t));
}

#[test]
fn orphan_packs_a_notice_names_are_not_adopted_and_the_others_are_protected() {
    let t = test_repo();
    // Two pairs of packs (data and trees) that no index lists, as interrupted
    // backups leave them.
    let mut orphans: Vec<HashSet<Id>> = Vec::new();
    for seed in 0..2 {
        let saver = BlobSaver::new(&t.repo);
        TestTree::new().file("f", &[&noise(500, 10 + seed)]).store(&saver).unwrap();
        saver.finish().unwrap();
        let new: HashSet<Id> = packs(&t).into_iter().filter(|p| !orphans.iter().any(|o| o.contains(p))).collect();
        assert_eq!(new.len(), 2, "a data pack and a tree pack");
        orphans.push(new);
    }
    for f in t.repo.list_ids(ObjectKind::Index).unwrap() {
        t.backend.delete(&ObjectKind::Index.path(&f)).unwrap();
    }
    store_notice(&t.repo, &orphans[0].iter().copied().collect::<Vec<_>>());
    let writer = t.reopen();
    let guard = WriterGuard::begin(&writer, Timing::with_grace(Duration::from_millis(40)), false).unwrap();
    writer.load_index().unwrap();
    let f = guard.adopt_orphan_packs().unwrap().expect("an index file for the adopted pack");
    let listed: HashSet<Id> = writer.load_index_file(&f).unwrap().iter().map(|r| r.id).collect();
    assert_eq!(listed, orphans[1]);
    // The marker protects the adoption's index file from the next heartbeat on.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !session::list(&t.repo).unwrap().iter().any(|(_, r)| r.as_ref().is_some_and(|r| r.index_files == [f])) {
        assert!(Instant::now() < deadline, "the marker never listed the adoption's index file");
        std::thread::sleep(Duration::from_millis(5));
    }
    guard.finish().unwrap();
}

#[test]
fn a_writer_whose_marker_was_removed_and_whose_pack_is_gone_deletes_its_index_files() {
    let t = test_repo();
    let mut guard = WriterGuard::begin(&t.repo, relaxed(), false).unwrap();
    let saver = BlobSaver::new(&t.repo).with_observer(guard.observer().unwrap());
    let root = TestTree::new().file("f", &[&noise(700, 3)]).store(&saver).unwrap();
    saver.finish().unwrap();
    let own_files = t.repo.list_ids(ObjectKind::Index).unwrap();
    assert_eq!(own_files.len(), 1);
    // A prune took the writer for stopped: removed its marker and its pack.
    let (marker, _) = session::list(&t.repo).unwrap().remove(0);
    t.backend.delete(&ObjectKind::Session.path(&marker)).unwrap();
    for p in packs(&t) {
        t.backend.delete(&ObjectKind::Pack.path(&p)).unwrap();
    }
    let e = guard.before_commit(root, || Ok(())).unwrap_err();
    assert!(matches!(e, Error::Conflict(_)), "{e}");
    assert!(e.to_string().contains("paused for longer than the prune grace period"), "{e}");
    assert!(t.repo.list_ids(ObjectKind::Index).unwrap().is_empty(), "nothing may list the missing pack");
}

#[test]
fn a_writer_whose_marker_was_removed_but_whose_packs_remain_commits() {
    let (t, root, _) = with_snapshot();
    let writer = t.reopen();
    let mut guard = WriterGuard::begin(&writer, relaxed(), false).unwrap();
    writer.load_index().unwrap();
    let (marker, _) = session::list(&t.repo).unwrap().remove(0);
    t.backend.delete(&ObjectKind::Session.path(&marker)).unwrap();
    guard.before_commit(root, || Ok(())).unwrap();
    guard.ready_to_commit().unwrap();
    guard.finish().unwrap();
}

#[test]
fn a_check_older_than_a_quarter_of_the_grace_period_is_made_again_then_refused() {
    let (t, root, _) = with_snapshot();
    let timing = Timing::with_grace(Duration::from_millis(40));
    let writer = t.reopen();
    let mut guard = WriterGuard::begin(&writer, timing, false).unwrap();
    writer.load_index().unwrap();
    assert!(guard.ready_to_commit().is_err(), "no check made yet");
    // What runs after the check takes longer than the window every time: the
    // check is repeated, then given up.
    let mut calls = 0;
    guard
        .before_commit(root, || {
            calls += 1;
            std::thread::sleep(timing.check_window() + Duration::from_millis(5));
            Ok(())
        })
        .unwrap();
    assert_eq!(calls, COMMIT_ATTEMPTS);
    let e = guard.ready_to_commit().unwrap_err();
    assert!(matches!(e, Error::Conflict(_)), "{e}");
    assert!(e.to_string().contains("took longer than the prune grace period allows"), "{e}");
}

#[test]
fn a_dry_run_writes_no_marker_and_checks_nothing() {
    let (t, root, noticed) = with_snapshot();
    store_notice(&t.repo, &noticed);
    let writer = t.reopen();
    let mut guard = WriterGuard::begin(&writer, relaxed(), true).unwrap();
    writer.load_index().unwrap();
    assert!(session::list(&t.repo).unwrap().is_empty());
    assert!(guard.observer().is_none());
    assert_eq!(guard.adopt_orphan_packs().unwrap(), None);
    let mut called = false;
    assert_eq!(
        guard
            .before_commit(root, || {
                called = true;
                Ok(())
            })
            .unwrap()
            .blobs,
        0
    );
    assert!(!called);
    guard.ready_to_commit().unwrap();
    guard.finish().unwrap();
}

#[test]
fn a_look_ahead_serves_the_commit_only_while_recent() {
    let (t, root, noticed) = with_snapshot();
    let writer = t.reopen();
    // A fresh look serves: a notice stored after it is for step (f)'s bound,
    // not this check (docs/design.md#prune, "Why a blob a snapshot uses is never deleted").
    let mut guard = WriterGuard::begin(&writer, relaxed(), false).unwrap();
    writer.load_index().unwrap();
    assert!(!guard.has_recent_look());
    let look = guard.look_ahead();
    guard.keep_look(look);
    assert!(guard.has_recent_look());
    let n = store_notice(&t.repo, &noticed);
    assert_eq!(guard.before_commit(root, || Ok(())).unwrap().blobs, 0);
    guard.ready_to_commit().unwrap();
    guard.finish().unwrap();
    t.backend.delete(&ObjectKind::PruneNotice.path(&n)).unwrap();

    // One older than the check window is taken again, and sees the notice.
    let timing = Timing::with_grace(Duration::from_millis(400));
    let mut guard = WriterGuard::begin(&writer, timing, false).unwrap();
    let old = guard.look_ahead();
    std::thread::sleep(timing.check_window() / 2);
    let newer = guard.look_ahead();
    // The newer of two looks is kept, whatever the order they are given in.
    guard.keep_look(newer);
    guard.keep_look(old);
    assert!(guard.has_recent_look());
    std::thread::sleep(timing.check_window());
    assert!(!guard.has_recent_look());
    store_notice(&t.repo, &noticed);
    assert_eq!(guard.before_commit(root, || Ok(())).unwrap().blobs, 4);
    guard.ready_to_commit().unwrap();
}

/// Stores bytes that are no notice as `prune/<their hash>`, as anyone who can
/// write to the storage can.
fn plant_notice(t: &TestRepo) -> Id {
    let garbage = b"\x01\x07garbage".to_vec();
    let id = Id::hash_of(&garbage);
    t.backend.write(&ObjectKind::PruneNotice.path(&id), garbage).unwrap();
    id
}

/// A notice that does not decode stops no backup: it is taken to announce any
/// pack, so the writer adopts no orphan pack and stores again the blobs it uses
/// that are neither in its parent snapshot (stored, not forgotten) nor in its
/// own packs.
#[test]
fn a_notice_that_does_not_decode_names_every_pack_but_the_parents_and_the_writers() {
    let t = test_repo();
    let (parent, parent_root) = t.snapshot(&TestTree::new().file("a", &[&noise(1000, 1)]));
    // Another host's content, which a prune may be deleting (once forgotten).
    t.snapshot(&TestTree::new().file("b", &[&noise(2000, 2)]));
    // A pack no index lists.
    let saver = BlobSaver::new(&t.repo);
    TestTree::new().file("o", &[&noise(3000, 3)]).store(&saver).unwrap();
    saver.finish().unwrap();
    let planted = plant_notice(&t);
    let writer = t.reopen();
    let mut guard = WriterGuard::begin(&writer, relaxed(), false).unwrap();
    assert_eq!(guard.unknown_notices().iter().map(|u| u.id).collect::<Vec<_>>(), [planted]);
    for f in t.repo.list_ids(ObjectKind::Index).unwrap() {
        let recs = t.repo.load_index_file(&f).unwrap();
        if recs.iter().any(|r| r.entries.iter().any(|e| e.raw_length == 3000)) {
            t.backend.delete(&ObjectKind::Index.path(&f)).unwrap();
        }
    }
    writer.load_index().unwrap();
    assert_eq!(guard.adopt_orphan_packs().unwrap(), None, "the notice may name the orphan");
    let saver = BlobSaver::new(&writer).with_observer(guard.observer().unwrap());
    let tree = TestTree::new().file("a", &[&noise(1000, 1)]).file("b", &[&noise(2000, 2)]).file("c", &[&noise(500, 4)]);
    let root = tree.store(&saver).unwrap();
    saver.finish().unwrap();
    guard.vouch_parent(parent, parent_root);
    let rescued = guard.before_commit(root, || Ok(())).unwrap();
    assert_eq!(rescued.blobs, 1, "only b's chunk: a is the parent's, the root and c are the writer's own");
    let b = blobs_of(&writer, root)
        .into_iter()
        .find(|(ty, id)| *ty == BlobType::Data && indexed_in(&t.repo, id).len() == 2);
    assert!(b.is_some(), "b's chunk has a second copy");
    guard.ready_to_commit().unwrap();
    guard.finish().unwrap();
}

/// A parent forgotten before the final check vouches for nothing.
#[test]
fn with_a_notice_that_does_not_decode_a_forgotten_parent_vouches_for_nothing() {
    let t = test_repo();
    let (parent, parent_root) = t.snapshot(&TestTree::new().file("a", &[&noise(1000, 1)]));
    plant_notice(&t);
    let writer = t.reopen();
    let mut guard = WriterGuard::begin(&writer, relaxed(), false).unwrap();
    writer.load_index().unwrap();
    let saver = BlobSaver::new(&writer).with_observer(guard.observer().unwrap());
    let root = TestTree::new().file("a", &[&noise(1000, 1)]).file("c", &[&noise(500, 4)]).store(&saver).unwrap();
    saver.finish().unwrap();
    guard.vouch_parent(parent, parent_root);
    let history = crate::repo::history::History::load(&t.repo).unwrap();
    crate::ops::forget::forget(&t.repo, &history, &[parent], &t.key).unwrap();
    let rescued = guard.before_commit(root, || Ok(())).unwrap();
    assert_eq!(rescued.blobs, 1, "a's chunk is stored again");
}
