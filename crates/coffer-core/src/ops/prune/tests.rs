//! Unit tests of prune's steps, one at a time, and of a whole prune running while
//! a backup commits, on the memory backend with a grace period of milliseconds.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use super::plan::{Usage, decide};
use super::*;
use crate::format::envelope::SealedKind;
use crate::format::notice::PruneNotice;
use crate::format::pack::BlobType;
use crate::lifecycle::session::{Opening, Session, SessionRecord};
use crate::lifecycle::writer::WriterGuard;
use crate::lifecycle::{each_used_blob, notices};
use crate::progress::NoProgress;
use crate::repo::{BlobSaver, SaverEvent};
use crate::testing::{TestRepo, TestTree, noise, snapshot_of, test_repo};
use coffer_backend::Backend;

fn id(b: u8) -> Id {
    Id([b; 32])
}

fn live_tree() -> TestTree {
    TestTree::new()
        .file("a", &[&noise(3000, 1), &noise(3000, 2)])
        .dir("d", TestTree::new().file("b", &[&noise(2000, 3)]))
}

fn garbage_tree() -> TestTree {
    TestTree::new().file("old", &[&noise(4000, 7)])
}

/// Every blob the tree `root` uses.
fn blobs_of(repo: &Repository, root: Id) -> Vec<(BlobType, Id)> {
    let mut out = Vec::new();
    each_used_blob(repo, root, &mut HashSet::new(), &mut |t, id| {
        out.push((t, id));
        Ok(())
    })
    .unwrap();
    out
}

fn packs(t: &TestRepo) -> HashSet<Id> {
    t.repo.list_ids(ObjectKind::Pack).unwrap().into_iter().collect()
}

/// Stores `tree` with a saver of its own (so in packs of its own), without a
/// snapshot; returns its root and the packs it added.
fn store_unreferenced(t: &TestRepo, tree: &TestTree) -> (Id, HashSet<Id>) {
    let before = packs(t);
    let saver = BlobSaver::new(&t.repo);
    let root = tree.store(&saver).unwrap();
    saver.finish().unwrap();
    (root, packs(t).difference(&before).copied().collect())
}

/// A repository with a snapshot of [`live_tree`] (a data pack and a tree pack)
/// and an unreferenced [`garbage_tree`] in two other packs: (repository, live
/// root, live packs, garbage packs).
fn live_and_garbage() -> (TestRepo, Id, HashSet<Id>, HashSet<Id>) {
    let t = test_repo();
    let (_, root) = t.snapshot(&live_tree());
    let live = packs(&t);
    let (_, garbage) = store_unreferenced(&t, &garbage_tree());
    // Each holds one pack of data and one of trees (docs/design.md#packs).
    let (data, trees) = crate::testing::packs_by_type(&t.backend);
    for set in [&live, &garbage] {
        assert_eq!((set.intersection(&data).count(), set.intersection(&trees).count(), set.len()), (1, 1, 2));
    }
    (t, root, live, garbage)
}

/// `set`, sorted.
fn sorted(set: &HashSet<Id>) -> Vec<Id> {
    let mut v: Vec<Id> = set.iter().copied().collect();
    v.sort();
    v
}

/// Steps 1 to 3 on a fresh handle of `t`'s storage, as a prune process runs them.
fn load_mark_plan(t: &TestRepo, max_unused: f64) -> (Repository, History, Vec<Id>, mark::Marks, plan::Plan) {
    let repo = t.reopen();
    let mut report = PruneReport::default();
    let (history, index_files) = load(&repo, false, &mut report).unwrap();
    let marks = mark::mark(&repo, &history).unwrap();
    let plan = plan::plan(&repo, &index_files, &marks, max_unused).unwrap();
    (repo, history, index_files, marks, plan)
}

fn fast(max_unused: f64) -> PruneOptions {
    PruneOptions { max_unused, dry_run: false, timing: Timing::with_grace(Duration::from_millis(20)) }
}

#[test]
fn mark_finds_exactly_the_blobs_live_snapshots_reach() {
    let t = test_repo();
    let (_, root) = t.snapshot(&live_tree());
    let (groot, _) = store_unreferenced(&t, &garbage_tree());
    // A second snapshot sharing a subtree with the first: marked once, still marked.
    let (_, root2) = t.snapshot(&TestTree::new().dir("d", TestTree::new().file("b", &[&noise(2000, 3)])));
    let (repo, _, _, marks, _) = load_mark_plan(&t, 5.0);
    let reachable: HashSet<Id> =
        blobs_of(&repo, root).into_iter().chain(blobs_of(&repo, root2)).map(|(_, b)| b).collect();
    let garbage: HashSet<Id> = blobs_of(&repo, groot).into_iter().map(|(_, b)| b).collect();
    assert_eq!(reachable.len(), 6, "{reachable:?}");
    assert_eq!(garbage.len(), 2);
    let index = repo.index();
    for b in &reachable {
        assert!(marks.get(index.slot(b).unwrap()), "reachable {b:?} unmarked");
    }
    for b in &garbage {
        assert!(!marks.get(index.slot(b).unwrap()), "garbage {b:?} marked");
    }
}

#[test]
fn mark_stops_at_a_blob_no_index_lists() {
    let t = test_repo();
    let (_, root) = t.snapshot(&live_tree());
    for f in t.repo.list_ids(ObjectKind::Index).unwrap() {
        t.backend.delete(&ObjectKind::Index.path(&f)).unwrap();
    }
    let repo = t.reopen();
    let (history, _) = load(&repo, false, &mut PruneReport::default()).unwrap();
    let e = mark::mark(&repo, &history).err().expect("an unindexed tree stops the prune").to_string();
    assert!(e.contains(&root.short()) && e.contains("no index lists it") && e.contains("coffer check"), "{e}");
}

fn usage(size: u64, used_bytes: u64, used_blobs: u64, files: &[u8]) -> Usage {
    let index_files = files.iter().map(|b| id(*b)).collect();
    Usage { size, used_bytes, used_blobs, unused_blobs: 1, unused_bytes: size.saturating_sub(used_bytes), index_files }
}

#[test]
fn plan_deletes_unused_and_unlisted_packs_and_repacks_above_the_threshold() {
    let stored: HashMap<Id, u64> = [(1, 100), (2, 100), (3, 100), (5, 100), (6, 100)].map(|(p, s)| (id(p), s)).into();
    let usage: HashMap<Id, Usage> = [
        (id(1), usage(100, 0, 0, &[101])),  // nothing used: deleted
        (id(2), usage(100, 95, 3, &[101])), // 5% unused: kept at 5
        (id(3), usage(100, 90, 3, &[102])), // 10% unused: repacked
        (id(4), usage(0, 10, 1, &[102])),   // listed, not stored: left to `check`
        (id(6), usage(100, 100, 2, &[102])),
    ]
    .into();
    let p = decide(stored.clone(), usage.clone(), 5.0);
    assert_eq!(p.delete, [id(1), id(5)].into());
    assert_eq!(p.repack, vec![id(3)]);
    assert_eq!(p.unindexed, [id(5)].into());
    let mut strict = decide(stored, usage, 0.0).repack;
    strict.sort();
    assert_eq!(strict, vec![id(2), id(3)]);
}

#[test]
fn plan_spares_what_session_markers_protect() {
    let stored: HashMap<Id, u64> = [(1, 100), (2, 100), (3, 100), (5, 100)].map(|(p, s)| (id(p), s)).into();
    let usage: HashMap<Id, Usage> =
        [(id(1), usage(100, 0, 0, &[101])), (id(2), usage(100, 0, 0, &[102])), (id(3), usage(100, 50, 1, &[103]))]
            .into();
    let fresh = || decide(stored.clone(), usage.clone(), 5.0);
    let marker = |files: &[u8], packs: &[u8]| SessionRecord {
        version: crate::format::FORMAT_VERSION,
        hostname: "h".into(),
        started: "t".into(),
        beat: 0,
        index_files: files.iter().map(|b| id(*b)).collect(),
        packs: packs.iter().map(|b| id(*b)).collect(),
    };
    // No marker: nothing spared.
    let mut p = fresh();
    assert_eq!(p.spare(&[]), 0);
    assert_eq!(p.delete.len(), 3);
    // A marker listing index file 103 (pack 3) and pack 1; pack 5, unindexed, is
    // spared while any marker exists.
    let mut p = fresh();
    assert_eq!(p.spare(&[(id(50), Some(marker(&[103], &[1])))]), 3);
    assert_eq!((p.delete, p.repack), ([id(2)].into(), vec![]));
    // A marker that does not decode protects the unindexed packs only.
    let mut p = fresh();
    assert_eq!(p.spare(&[(id(50), None)]), 1);
    assert_eq!(p.delete, [id(1), id(2)].into());
    // After repacking, only the deletions change.
    let mut p = fresh();
    p.delete.insert(id(3));
    assert_eq!(p.spare_deletions(&[(id(50), Some(marker(&[103], &[])))]), 2);
    assert_eq!((p.delete, p.repack), ([id(1), id(2)].into(), vec![id(3)]));
}

#[test]
fn plan_counts_a_real_repository() {
    let (t, _, live, garbage) = live_and_garbage();
    let (_, _, _, _, p) = load_mark_plan(&t, 5.0);
    assert_eq!(p.stored.len(), 4);
    assert_eq!(p.delete, garbage);
    assert!(p.repack.is_empty());
    assert_eq!(p.blob_counts(), (5, 2));
    assert_eq!(live.iter().map(|l| p.usage[l].used_blobs).sum::<u64>(), 5);
}

#[test]
fn a_dry_run_counts_the_blobs_repacking_writes() {
    let t = test_repo();
    // A data pack and a tree pack, each holding both live and unreferenced blobs.
    let saver = BlobSaver::new(&t.repo);
    garbage_tree().store(&saver).unwrap();
    let root = live_tree().store(&saver).unwrap();
    saver.finish().unwrap();
    t.repo.save_snapshot(&snapshot_of(root, &t.key), &t.key).unwrap();
    let dry = prune(&t.reopen(), &PruneOptions { dry_run: true, ..fast(5.0) }, &NoProgress).unwrap();
    let real = prune(&t.reopen(), &fast(5.0), &NoProgress).unwrap();
    assert_eq!((dry.packs_repacked, real.packs_repacked), (2, 2));
    // The used blobs' bytes; the real run adds the new packs' headers and index files.
    assert!(dry.bytes_repacked > 0 && dry.bytes_repacked < real.bytes_repacked, "{dry:?} {real:?}");
    assert_eq!(dry.bytes_deleted, real.bytes_deleted);
}

#[test]
fn repack_copies_every_used_blob_and_nothing_else() {
    let t = test_repo();
    // A data pack and a tree pack, each holding both live and unreferenced blobs.
    let saver = BlobSaver::new(&t.repo);
    let groot = garbage_tree().store(&saver).unwrap();
    let root = live_tree().store(&saver).unwrap();
    saver.finish().unwrap();
    t.repo.save_snapshot(&snapshot_of(root, &t.key), &t.key).unwrap();
    let old = packs(&t);
    assert_eq!(old.len(), 2);
    let (repo, _, _, marks, p) = load_mark_plan(&t, 5.0);
    assert_eq!(p.repack.iter().copied().collect::<HashSet<_>>(), old);
    let written = repack::repack(&repo, &p, &marks, &NoProgress).unwrap();
    assert!(written > 0);
    // The new index files place every used blob in a new pack, and no garbage.
    let mut copied = HashSet::new();
    for f in repo.list_ids(ObjectKind::Index).unwrap() {
        for rec in repo.load_index_file(&f).unwrap().into_iter().filter(|r| !old.contains(&r.id)) {
            copied.extend(rec.entries.iter().map(|e| e.id));
        }
    }
    let used: HashSet<Id> = blobs_of(&repo, root).into_iter().map(|(_, b)| b).collect();
    assert_eq!(copied, used);
    for (_, g) in blobs_of(&repo, groot) {
        assert!(!copied.contains(&g));
    }
    // With the old packs gone, every used blob still reads.
    for o in &old {
        t.backend.delete(&ObjectKind::Pack.path(o)).unwrap();
    }
    let fresh = t.reopen();
    fresh.load_index().unwrap();
    fresh.index_mut().set_stored_packs(&packs(&t));
    for (ty, b) in blobs_of(&fresh, root) {
        fresh.load_blob(ty, &b).unwrap();
    }
}

#[test]
fn announce_waits_removes_stale_markers_and_spares_what_live_ones_protect() {
    let (t, _, _, garbage) = live_and_garbage();
    let (repo, _, _, _, mut p) = load_mark_plan(&t, 5.0);
    p.delete.insert(id(1));
    // A writer that stopped (its marker is never rewritten), one that stopped
    // before its keys were derived (its opening marker left behind), and one still
    // running, from an opening marker it adopted, that has stored the garbage
    // packs (as far as the plan knows).
    let stopped = Session::start(&t.repo, Duration::from_secs(3600)).unwrap();
    std::mem::forget(Opening::write(t.repo.backend_arc()).unwrap());
    let opening = Opening::write(t.repo.backend_arc()).unwrap();
    let running = Session::adopt(&t.repo, opening, Duration::from_millis(5)).unwrap();
    for g in sorted(&garbage) {
        running.sink()(SaverEvent::Pack(g));
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while !crate::lifecycle::session::list(&t.repo)
        .unwrap()
        .iter()
        .any(|(i, r)| *i == running.id() && r.as_ref().is_some_and(|r| r.packs == sorted(&garbage)))
    {
        assert!(Instant::now() < deadline, "the running marker never listed its pack");
        std::thread::sleep(Duration::from_millis(2));
    }
    let grace = Duration::from_millis(200);
    let mut report = PruneReport::default();
    let started = Instant::now();
    let a = announce::announce(&repo, &mut p, grace, &NoProgress, &mut report).unwrap();
    assert!(started.elapsed() >= grace);
    // The notice names all three packs; those the running writer stored are spared.
    let plain = repo.load_sealed(ObjectKind::PruneNotice, SealedKind::PruneNotice, &a.notices[0]).unwrap();
    let mut named = PruneNotice::decode(&plain).unwrap().packs;
    named.sort();
    let mut want = vec![id(1)];
    want.extend(&garbage);
    want.sort();
    assert_eq!(named, want);
    assert_eq!(p.delete, [id(1)].into());
    assert_eq!((report.packs_spared, report.stale_sessions), (2, 2));
    let left: Vec<Id> = crate::lifecycle::session::list(&t.repo).unwrap().into_iter().map(|(i, _)| i).collect();
    assert_eq!(left, vec![running.id()]);
    assert_eq!(a.active.len(), 1);
    running.finish().unwrap();
    drop(stopped);
}

#[test]
fn recheck_spares_packs_a_snapshot_written_meanwhile_uses() {
    let (t, _, _, garbage) = live_and_garbage();
    let (repo, mut history, index_files, _, mut p) = load_mark_plan(&t, 5.0);
    let live: Vec<Id> = history.live_snapshots().iter().map(|(i, _)| *i).collect();
    assert!(p.delete.is_superset(&garbage));
    // A backup finishing meanwhile references the garbage tree again, and new data.
    let (_, root) = t.snapshot(&TestTree::new().dir("again", garbage_tree()).file("new", &[&noise(100, 99)]));
    let mut report = PruneReport::default();
    recheck::recheck(&repo, &mut history, &live, &index_files, &mut p.delete, &mut report).unwrap();
    assert!(p.delete.is_empty());
    assert_eq!(report.packs_spared, 2, "the garbage's data pack and tree pack");
    // The new snapshot's own blobs, indexed since step 1, were found too.
    assert_eq!(blobs_of(&repo, root).len(), 4);
}

#[test]
fn recheck_spares_every_pack_an_index_file_stored_meanwhile_lists() {
    let (t, _, _, garbage) = live_and_garbage();
    let (repo, mut history, index_files, _, mut p) = load_mark_plan(&t, 5.0);
    let live: Vec<Id> = history.live_snapshots().iter().map(|(i, _)| *i).collect();
    assert!(p.delete.is_superset(&garbage));
    // A backup that ran meanwhile stored blobs another backup stored too, in packs
    // of its own, and indexed them; no new snapshot uses them through its index,
    // since the index serves those blobs from the other packs. Step 7 rewrites only
    // the index files read in step 1, so deleting these packs would leave an index
    // file listing packs that are gone.
    let records: Vec<_> =
        index_files.iter().flat_map(|f| repo.load_index_file(f).unwrap()).filter(|r| garbage.contains(&r.id)).collect();
    assert_eq!(records.len(), 2);
    repo.save_sealed(SealedKind::Index, &crate::format::index::encode(&records)).unwrap();
    let mut report = PruneReport::default();
    recheck::recheck(&repo, &mut history, &live, &index_files, &mut p.delete, &mut report).unwrap();
    assert!(p.delete.is_disjoint(&garbage), "{:?}", sorted(&p.delete));
    assert_eq!(report.packs_spared, 2);
}

#[test]
fn sweep_deletes_only_what_the_plan_still_names() {
    let (t, root, live, garbage) = live_and_garbage();
    let (repo, _, index_files, _, p) = load_mark_plan(&t, 5.0);
    let notice = PruneNotice {
        version: 2,
        time: "t".into(),
        hostname: "h".into(),
        packs: sorted(&garbage),
        backends: Vec::new(),
    };
    let n = repo.save_sealed(SealedKind::PruneNotice, &notice.encode()).unwrap();
    // A backup still running: the notices stay.
    let running = Session::start(&t.repo, Duration::from_secs(3600)).unwrap();
    let active = crate::lifecycle::session::list(&t.repo).unwrap();
    let a = announce::Announced { notices: vec![n], all_notices: vec![n], active };
    let mut report = PruneReport::default();
    sweep::sweep(&repo, &index_files, &p, &a, &mut report).unwrap();
    assert_eq!(packs(&t), live);
    assert_eq!((report.packs_deleted, report.index_files_replaced), (2, 1));
    assert_eq!(notices::read(&t.repo).unwrap().ids, vec![n]);
    // The index files left list exactly the stored pack, and the snapshot reads.
    let fresh = t.reopen();
    fresh.load_index().unwrap();
    let listed: HashSet<Id> = fresh.index().packs().iter().map(|p| p.id).collect();
    assert_eq!(listed, live);
    for (ty, b) in blobs_of(&fresh, root) {
        fresh.load_blob(ty, &b).unwrap();
    }
    // Once no backup runs, a sweep removes the notices.
    running.finish().unwrap();
    let a = announce::Announced { notices: vec![n], all_notices: vec![n], active: vec![] };
    sweep::sweep(&repo, &[], &plan::Plan::default(), &a, &mut PruneReport::default()).unwrap();
    assert!(notices::read(&t.repo).unwrap().ids.is_empty());
}

#[test]
fn a_dry_run_reports_and_changes_nothing() {
    let (t, _, _, garbage) = live_and_garbage();
    let before = t.backend.list("").unwrap();
    let r = prune(&t.reopen(), &PruneOptions { dry_run: true, ..fast(5.0) }, &NoProgress).unwrap();
    assert_eq!((r.packs, r.packs_deleted, r.blobs_used, r.blobs_unused), (4, 2, 5, 2));
    assert!(r.dry_run && packs(&t).is_superset(&garbage));
    assert_eq!(t.backend.list("").unwrap().len(), before.len());
}

#[test]
fn a_whole_prune_frees_garbage_and_keeps_every_live_blob_readable() {
    let (t, root, live, _) = live_and_garbage();
    let r = prune(&t.reopen(), &fast(5.0), &NoProgress).unwrap();
    assert_eq!((r.packs_deleted, r.packs_repacked, r.index_files_replaced), (2, 0, 1));
    assert_eq!(packs(&t), live);
    assert!(notices::read(&t.repo).unwrap().ids.is_empty(), "no backup ran: the notice is removed");
    let fresh = t.reopen();
    fresh.load_index().unwrap();
    for (ty, b) in blobs_of(&fresh, root) {
        fresh.load_blob(ty, &b).unwrap();
    }
    // A second prune finds nothing to do, and does not wait its grace period
    // for it: nothing is announced.
    let long = PruneOptions { timing: Timing::with_grace(Duration::from_secs(30)), ..fast(5.0) };
    let started = Instant::now();
    let again = prune(&t.reopen(), &long, &NoProgress).unwrap();
    assert_eq!((again.packs_deleted, again.packs_repacked, again.blobs_unused), (0, 0, 0));
    assert!(started.elapsed() < Duration::from_secs(15), "waited {:?}", started.elapsed());
    assert!(t.backend.list("prune/").unwrap().is_empty(), "no notice stored");
}

#[test]
fn a_prune_with_nothing_to_delete_still_waits_while_a_backup_may_be_running() {
    let (t, ..) = live_and_garbage();
    prune(&t.reopen(), &fast(5.0), &NoProgress).unwrap();
    // A backup that stopped before its keys were derived left its opening marker:
    // only the wait tells a stopped backup's marker from a running one's.
    std::mem::forget(Opening::write(t.repo.backend_arc()).unwrap());
    let grace = Duration::from_millis(300);
    let opts = PruneOptions { timing: Timing::with_grace(grace), ..fast(5.0) };
    let started = Instant::now();
    let r = prune(&t.reopen(), &opts, &NoProgress).unwrap();
    assert!(started.elapsed() >= grace, "did not wait: {:?}", started.elapsed());
    assert_eq!((r.packs_deleted, r.stale_sessions), (0, 1), "{r:?}");
    assert!(crate::lifecycle::session::list(&t.repo).unwrap().is_empty(), "the stale marker is removed");
}

/// A backup that reuses blobs a running prune is deleting commits while the prune
/// waits: it stores them again, and after the prune its snapshot reads whole.
#[test]
fn a_backup_committing_during_a_prune_keeps_its_data() {
    let (t, _, _, garbage) = live_and_garbage();
    let timing = Timing::with_grace(Duration::from_millis(600));
    // The writer begins before the prune and finds the garbage's blobs indexed.
    let writer = t.reopen();
    let mut guard = WriterGuard::begin(&writer, timing, false).unwrap();
    writer.load_index().unwrap();
    let saver = BlobSaver::new(&writer).with_observer(guard.observer().unwrap());
    let root = TestTree::new().dir("again", garbage_tree()).store(&saver).unwrap();
    let stats = saver.finish().unwrap();
    assert_eq!(stats.blobs, 1, "only the new root is stored; the rest is deduplicated into the garbage pack");
    // The marker protects the writer's own index file before the prune starts.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !crate::lifecycle::session::list(&t.repo)
        .unwrap()
        .iter()
        .any(|(_, r)| r.as_ref().is_some_and(|r| r.index_files.len() == 1))
    {
        assert!(Instant::now() < deadline, "the marker never listed the writer's index file");
        std::thread::sleep(Duration::from_millis(2));
    }
    let report = std::thread::scope(|s| {
        let pruning = s.spawn(|| prune(&t.reopen(), &PruneOptions { timing, ..fast(5.0) }, &NoProgress));
        // The writer commits once the prune has announced its deletions.
        let deadline = Instant::now() + Duration::from_secs(20);
        while notices::read(&writer).unwrap().ids.is_empty() {
            assert!(Instant::now() < deadline, "the prune never announced");
            std::thread::sleep(Duration::from_millis(1));
        }
        let rescued = guard.before_commit(root, || Ok(())).unwrap();
        assert_eq!(rescued.blobs, 2, "the garbage tree and its file's chunk are stored again");
        guard.ready_to_commit().unwrap();
        writer.save_snapshot(&snapshot_of(root, &t.key), &t.key).unwrap();
        guard.finish().unwrap();
        pruning.join().unwrap().unwrap()
    });
    // The garbage pack is deleted, unless the prune's re-check found the new
    // snapshot served from it and spared it.
    assert!(packs(&t).is_disjoint(&garbage) || report.packs_spared > 0, "{report:?}");
    let fresh = t.reopen();
    fresh.load_index().unwrap();
    for (ty, b) in blobs_of(&fresh, root) {
        fresh.load_blob(ty, &b).unwrap();
    }
}

/// A notice that does not decode stops no prune, and the prune removes it with
/// its own notice when no backup runs.
#[test]
fn a_notice_that_does_not_decode_is_removed_by_the_next_prune() {
    let (t, ..) = live_and_garbage();
    let garbage = b"\x01\x07garbage".to_vec();
    let planted = Id::hash_of(&garbage);
    t.backend.write(&ObjectKind::PruneNotice.path(&planted), garbage).unwrap();
    let r = prune(&t.reopen(), &fast(5.0), &NoProgress).unwrap();
    assert!(r.packs_deleted > 0, "{r:?}");
    assert!(t.backend.list("prune/").unwrap().is_empty(), "every notice is removed");
}
