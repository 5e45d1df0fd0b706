//! Unit tests of `coffer copy` over memory repositories (docs/design.md#copy).

use std::collections::HashSet;
use std::sync::Arc;

use coffer_backend::{Backend, MemBackend};

use super::*;
use crate::format::pack::BlobType;
use crate::progress::NoProgress;
use crate::repo::InitOptions;
use crate::repo::history::History;
use crate::testing::{FAST_KDF, PASSPHRASE, TestRepo, TestTree, noise, snapshot_of, test_repo};

fn related(src: &Repository) -> (Arc<MemBackend>, Repository) {
    let be = Arc::new(MemBackend::new());
    let opts = InitOptions { kdf: FAST_KDF, ..InitOptions::default() };
    let repo = Repository::init_related(be.clone() as Arc<dyn Backend>, PASSPHRASE, &opts, src, true).unwrap();
    (be, repo)
}

fn names(be: &MemBackend, prefix: &str) -> HashSet<String> {
    be.list(prefix).unwrap().into_iter().map(|o| o.name).collect()
}

fn run(src: &Repository, dst: &Repository, opts: &CopyOptions) -> CopySummary {
    copy(src, dst, opts, None, &NoProgress).unwrap()
}

/// A tree of `files` files of 300 KiB noise each, seeded by `seed`.
fn tree(files: u64, seed: u64) -> TestTree {
    (0..files).fold(TestTree::new(), |t, i| t.file(&format!("f{i}"), &[&noise(300 << 10, seed * 1000 + i)]))
}

#[test]
fn related_repository_shares_keys_and_records_the_relation() {
    let src = test_repo();
    let (_, dst) = related(&src.repo);
    assert_eq!(relate(&src.repo, &dst).unwrap(), Relation::SharedKeys);
    let r = dst.config().related.clone().unwrap();
    assert_eq!(r.repository, src.repo.config().id);
    assert!(r.data_keys);
    assert_ne!(dst.config().id, src.repo.config().id);
    assert_eq!(dst.config().chunker, src.repo.config().chunker);
    // Own data keys: blob ids agree, objects do not copy byte for byte.
    let be = Arc::new(MemBackend::new());
    let opts = InitOptions { kdf: FAST_KDF, ..InitOptions::default() };
    let own = Repository::init_related(be as Arc<dyn Backend>, PASSPHRASE, &opts, &src.repo, false).unwrap();
    assert_eq!(relate(&src.repo, &own).unwrap(), Relation::SharedIds);
    assert!(unsupported(Relation::SharedIds, false).is_none());
    // Unrelated, and the same repository, are told apart.
    let other = test_repo();
    assert_eq!(relate(&src.repo, &other.repo).unwrap(), Relation::Unrelated);
    let err = relate(&src.repo, &src.reopen()).unwrap_err().to_string();
    assert!(err.contains("same repository"), "{err}");
    let err = copy(&src.repo, &other.repo, &CopyOptions::default(), None, &NoProgress).unwrap_err().to_string();
    assert!(err.contains("--rechunk") && err.contains("init --from-repo"), "{err}");
}

#[test]
fn copy_sends_every_object_byte_for_byte_then_nothing() {
    let src = test_repo();
    let (snap, _) = src.snapshot(&tree(8, 1));
    let (dbe, dst) = related(&src.repo);
    let r = run(&src.repo, &dst, &CopyOptions::default());
    assert_eq!(r.snapshots, vec![snap]);
    for prefix in ["data/", "index/", "snapshots/", "writers/"] {
        assert_eq!(names(&dbe, prefix), names(&src.backend, prefix), "{prefix}");
        for name in names(&dbe, prefix) {
            assert_eq!(dbe.read(&name).unwrap(), src.backend.read(&name).unwrap(), "{name}");
        }
    }
    assert_eq!(r.packs.objects as usize, names(&src.backend, "data/").len());
    assert!(r.packs.objects >= 2, "{r:?}");
    // The copied snapshot keeps its original signature, valid in the destination.
    let dst = Repository::open(dbe.clone() as Arc<dyn Backend>, PASSPHRASE).unwrap();
    let s = dst.load_snapshot(&snap).unwrap();
    assert!(s.signature.is_valid(), "{}", s.signature.describe());
    assert!(History::load(&dst).unwrap().verify(&[]).errors.is_empty());
    // Every blob reads in the destination.
    assert!(dst.load_index().unwrap().is_empty());
    let tree_blob = dst.load_blob(BlobType::Tree, &s.tree);
    assert!(tree_blob.is_ok());
    // Again: nothing to send, and no pack or index file read.
    let again = run(&src.repo, &dst, &CopyOptions::default());
    assert_eq!(again.total(), Sent::default(), "{again:?}");
    assert!(again.snapshots.is_empty());
}

#[test]
fn second_copy_sends_only_the_new_packs() {
    let src = test_repo();
    src.snapshot(&tree(6, 1));
    let (dbe, dst) = related(&src.repo);
    let first = run(&src.repo, &dst, &CopyOptions::default());
    let before: HashSet<String> = names(&src.backend, "data/");
    // One file changed, one added: the new packs are the only ones sent.
    let t = tree(6, 1).file("new", &[&noise(200 << 10, 99)]);
    let (snap2, _) = src.snapshot(&t);
    let new_packs: HashSet<String> = names(&src.backend, "data/").difference(&before).cloned().collect();
    let dry = run(&src.repo, &dst, &CopyOptions { dry_run: true, ..CopyOptions::default() });
    let second = run(&src.repo, &dst, &CopyOptions::default());
    assert_eq!(second.snapshots, vec![snap2]);
    assert_eq!(second.packs.objects as usize, new_packs.len());
    let new_bytes: u64 = new_packs.iter().map(|n| src.backend.stat(n).unwrap()).sum();
    assert_eq!(second.packs.bytes, new_bytes);
    assert!(second.packs.bytes < first.packs.bytes / 2, "{second:?} {first:?}");
    // The dry run saw exactly what the real one sent.
    assert_eq!(dry.packs, second.packs);
    assert_eq!(dry.index_files, second.index_files);
    assert_eq!(dry.snapshot_objects, second.snapshot_objects);
    assert_eq!(names(&dbe, "data/"), names(&src.backend, "data/"));
}

#[test]
fn dry_run_writes_nothing() {
    let src = test_repo();
    src.snapshot(&tree(3, 1));
    let (dbe, dst) = related(&src.repo);
    let before: Vec<String> = dbe.list("").unwrap().into_iter().map(|o| o.name).collect();
    let r = run(&src.repo, &dst, &CopyOptions { dry_run: true, ..CopyOptions::default() });
    assert_eq!(r.snapshots.len(), 1);
    assert!(r.packs.objects > 0 && r.packs.bytes > 0);
    let after: Vec<String> = dbe.list("").unwrap().into_iter().map(|o| o.name).collect();
    assert_eq!(before, after);
}

#[test]
fn an_interrupted_copy_resumes_without_sending_packs_again() {
    let src = test_repo();
    let (snap, _) = src.snapshot(&tree(8, 3));
    let (dbe, dst) = related(&src.repo);
    // An interrupted copy: half the packs arrived, nothing else.
    let packs: Vec<String> = {
        let mut v: Vec<String> = names(&src.backend, "data/").into_iter().collect();
        v.sort();
        v
    };
    let half = packs.len() / 2;
    assert!(half >= 1);
    for name in &packs[..half] {
        dbe.write(name, src.backend.read(name).unwrap()).unwrap();
    }
    let r = run(&src.repo, &dst, &CopyOptions::default());
    assert_eq!(r.packs_present as usize, half);
    assert_eq!(r.packs.objects as usize, packs.len() - half);
    assert_eq!(r.snapshots, vec![snap]);
    assert_eq!(names(&dbe, "data/"), names(&src.backend, "data/"));
}

#[test]
fn a_damaged_source_pack_is_not_copied() {
    let src = test_repo();
    src.snapshot(&tree(2, 4));
    let name = names(&src.backend, "data/").into_iter().next().unwrap();
    let mut bytes = src.backend.read(&name).unwrap();
    bytes[10] ^= 1;
    src.backend.write(&name, bytes).unwrap();
    let (dbe, dst) = related(&src.repo);
    let err = copy(&src.repo, &dst, &CopyOptions::default(), None, &NoProgress).unwrap_err().to_string();
    assert!(err.contains("does not match its name"), "{err}");
    assert!(names(&dbe, "snapshots/").is_empty() && names(&dbe, "index/").is_empty());
}

/// A snapshot of `t` with host `host`.
fn snapshot_on(src: &TestRepo, t: &TestTree, host: &str) -> Id {
    let saver = crate::repo::BlobSaver::new(&src.repo);
    let root = t.store(&saver).unwrap();
    saver.finish().unwrap();
    let mut s = snapshot_of(root, &src.key);
    s.hostname = host.into();
    s.history = History::load(&src.repo).unwrap().heads();
    src.repo.save_snapshot(&s, &src.key).unwrap()
}

#[test]
fn a_filtered_copy_sends_only_what_the_chosen_snapshots_use() {
    let src = test_repo();
    let a = snapshot_on(&src, &tree(4, 5), "a");
    let b = snapshot_on(&src, &tree(4, 6), "b");
    let (dbe, dst) = related(&src.repo);
    let opts = CopyOptions {
        filter: SnapshotFilter { host: Some("b".into()), ..SnapshotFilter::default() },
        ..CopyOptions::default()
    };
    let r = run(&src.repo, &dst, &opts);
    assert_eq!(r.snapshots, vec![b]);
    assert!(r.packs.objects >= 1 && (r.packs.objects as usize) < names(&src.backend, "data/").len(), "{r:?}");
    // b links to a, which was not chosen: said so.
    assert_eq!(r.unlinked, vec![a]);
    // Every blob of b reads in the destination.
    let dst = Repository::open(dbe.clone() as Arc<dyn Backend>, PASSPHRASE).unwrap();
    assert!(dst.load_index().unwrap().is_empty());
    let snap = dst.load_snapshot(&b).unwrap();
    let mut seen = HashSet::new();
    crate::lifecycle::each_used_blob(&dst, snap.tree, &mut seen, &mut |t, id| dst.load_blob(t, &id).map(|_| ()))
        .unwrap();
    // Then the rest: only a's packs, and the history is whole.
    let rest = run(&src.repo, &dst, &CopyOptions::default());
    assert_eq!(rest.snapshots, vec![a]);
    assert!(rest.unlinked.is_empty());
    assert!(History::load(&dst).unwrap().verify(&[]).errors.is_empty());
    let again = run(&src.repo, &dst, &CopyOptions::default());
    assert_eq!(again.total(), Sent::default(), "{again:?}");
}

#[test]
fn tombstones_travel_with_forgets_only() {
    let src = test_repo();
    let a = snapshot_on(&src, &tree(2, 7), "h");
    let (dbe, dst) = related(&src.repo);
    run(&src.repo, &dst, &CopyOptions::default());
    crate::ops::forget::forget(&src.repo, &History::load(&src.repo).unwrap(), &[a], &src.key).unwrap();
    let b = snapshot_on(&src, &tree(2, 8), "h");
    // Without --with-forgets, a stays; the tombstone b links to forgets a, which
    // the destination holds, so it is not copied and the link is reported.
    let r = run(&src.repo, &dst, &CopyOptions::default());
    assert_eq!(r.snapshots, vec![b]);
    assert_eq!(r.tombstones.objects, 0);
    assert_eq!(r.unlinked.len(), 1);
    assert!(names(&dbe, "snapshots/").contains(&ObjectKind::Snapshot.path(&a)));
    // With it, the tombstone arrives and a is removed: the history is whole.
    let r = run(&src.repo, &dst, &CopyOptions { with_forgets: true, ..CopyOptions::default() });
    assert_eq!(r.tombstones.objects, 1);
    assert_eq!(r.snapshots_removed, vec![a]);
    assert!(!names(&dbe, "snapshots/").contains(&ObjectKind::Snapshot.path(&a)));
    let f = History::load(&dst).unwrap().verify(&[]);
    assert!(f.errors.is_empty() && f.warnings.is_empty(), "{f:?}");
}

#[test]
fn a_tombstone_forgetting_nothing_here_completes_the_history() {
    let src = test_repo();
    let a = snapshot_on(&src, &tree(2, 9), "h");
    crate::ops::forget::forget(&src.repo, &History::load(&src.repo).unwrap(), &[a], &src.key).unwrap();
    let b = snapshot_on(&src, &tree(2, 10), "h");
    let (_, dst) = related(&src.repo);
    let r = run(&src.repo, &dst, &CopyOptions::default());
    assert_eq!(r.snapshots, vec![b]);
    assert_eq!(r.tombstones.objects, 1);
    assert!(r.unlinked.is_empty());
    let f = History::load(&dst).unwrap().verify(&[]);
    assert!(f.errors.is_empty(), "{f:?}");
}

#[test]
fn a_tombstone_written_after_its_snapshots_were_copied_completes_their_history() {
    // b (linking to a) is copied without a; a is then forgotten in the source.
    let src = test_repo();
    let a = snapshot_on(&src, &tree(2, 9), "h");
    let b = snapshot_on(&src, &tree(2, 10), "h");
    let (_, dst) = related(&src.repo);
    let only_b = CopyOptions { snapshots: vec![b.to_hex()], ..CopyOptions::default() };
    assert_eq!(run(&src.repo, &dst, &only_b).unlinked, vec![a]);
    crate::ops::forget::forget(&src.repo, &History::load(&src.repo).unwrap(), &[a], &src.key).unwrap();
    // A copy of everything: no snapshot to copy, the tombstone travels.
    let r = run(&src.repo, &dst, &CopyOptions::default());
    assert!(r.snapshots.is_empty());
    assert_eq!(r.tombstones.objects, 1);
    let f = History::load(&dst).unwrap().verify(&[]);
    assert!(f.errors.is_empty(), "{f:?}");
}

#[test]
fn own_data_keys_copy_only_missing_blobs_encrypted_again() {
    let src = test_repo();
    let (a, _) = src.snapshot(&tree(4, 11));
    let be = Arc::new(MemBackend::new());
    let opts = InitOptions { kdf: FAST_KDF, ..InitOptions::default() };
    let dst = Repository::init_related(be.clone() as Arc<dyn Backend>, PASSPHRASE, &opts, &src.repo, false).unwrap();
    let key = crate::crypto::sign::SigningKey::generate();
    dst.register_writer(&key.public(), "dst-host".into(), "dst-user".into()).unwrap();
    // A writer key is needed, and --with-forgets is refused.
    assert!(copy(&src.repo, &dst, &CopyOptions::default(), None, &NoProgress).is_err());
    let wf = CopyOptions { with_forgets: true, ..CopyOptions::default() };
    let err = copy(&src.repo, &dst, &wf, Some(&key), &NoProgress).unwrap_err().to_string();
    assert!(err.contains("init --from-repo"), "{err}");
    let dry =
        copy(&src.repo, &dst, &CopyOptions { dry_run: true, ..CopyOptions::default() }, None, &NoProgress).unwrap();
    assert!(names(&be, "data/").is_empty());
    let r = copy(&src.repo, &dst, &CopyOptions::default(), Some(&key), &NoProgress).unwrap();
    assert_eq!(r.relation, Relation::SharedIds);
    assert_eq!(r.snapshots, vec![a]);
    assert_eq!(r.blobs.objects, 5, "{r:?}"); // four files and the tree
    assert_eq!(dry.blobs, r.blobs);
    // Nothing is the same object: encrypted under other keys.
    assert!(names(&be, "data/").is_disjoint(&names(&src.backend, "data/")));
    let dst = Repository::open(be.clone() as Arc<dyn Backend>, PASSPHRASE).unwrap();
    assert!(dst.load_index().unwrap().is_empty());
    let (snaps, damaged) = dst.snapshots().unwrap();
    assert!(damaged.is_empty());
    let (_, s) = &snaps[0];
    assert!(s.signature.is_valid(), "{}", s.signature.describe());
    assert_eq!(s.writer, key.public());
    let from = s.copied_from.clone().unwrap();
    assert_eq!((from.repository, from.snapshot, from.writer), (src.repo.config().id, a, src.key.public()));
    let orig = src.repo.load_snapshot(&a).unwrap();
    assert_eq!((s.tree, s.merkle_root, &s.time), (orig.tree, orig.merkle_root, &orig.time));
    let mut seen = HashSet::new();
    crate::lifecycle::each_used_blob(&dst, s.tree, &mut seen, &mut |t, id| dst.load_blob(t, &id).map(|_| ())).unwrap();
    // Again: nothing. Then a snapshot sharing all but one file: one data blob and
    // its tree travel.
    let again = copy(&src.repo, &dst, &CopyOptions::default(), Some(&key), &NoProgress).unwrap();
    assert_eq!((again.snapshots.len(), again.snapshots_present, again.packs.objects), (0, 1, 0));
    let (b, _) = src.snapshot(&tree(4, 11).file("more", &[&noise(1000, 5)]));
    let r = copy(&src.repo, &dst, &CopyOptions::default(), Some(&key), &NoProgress).unwrap();
    assert_eq!(r.snapshots, vec![b]);
    assert_eq!(r.blobs.objects, 2, "{r:?}");
    let f = History::load(&dst).unwrap().verify(&[]);
    assert!(f.errors.is_empty(), "{f:?}");
}

/// The content of every file below tree `root` of `repo`, by path, read back.
fn files_of(repo: &Repository, root: Id) -> std::collections::BTreeMap<String, (Vec<u8>, crate::format::tree::Node)> {
    let mut out = std::collections::BTreeMap::new();
    crate::repo::tree_walk::walk(repo, root, std::path::Path::new("/"), &mut |p, node| {
        if node.kind == crate::format::tree::NodeKind::File {
            let mut data = Vec::new();
            for id in repo.resolve_content(node, &mut |_| {})? {
                data.extend(repo.load_blob(BlobType::Data, &id)?);
            }
            out.insert(p.display().to_string(), (data, node.clone()));
        }
        Ok(())
    })
    .unwrap();
    out
}

#[test]
fn unrelated_copy_cuts_files_again_and_keeps_nodes_and_root() {
    let src = test_repo();
    // Files of several source blobs each, and one shared by two directories.
    let big: Vec<Vec<u8>> = (0..5).map(|i| noise(200 << 10, 70 + i)).collect();
    let refs: Vec<&[u8]> = big.iter().map(|b| b.as_slice()).collect();
    let t = tree(3, 21).file("big", &refs).dir("d", TestTree::new().file("same", &[&noise(90 << 10, 21000)]));
    let (a, _) = src.snapshot(&t);
    let be = Arc::new(MemBackend::new());
    let small = crate::chunker::ChunkerParams { min_size: 16 << 10, avg_size: 64 << 10, max_size: 256 << 10 };
    let opts = InitOptions { kdf: FAST_KDF, chunker: small, pack_size: 1 << 20, ..InitOptions::default() };
    let dst = Repository::init(be.clone() as Arc<dyn Backend>, PASSPHRASE, &opts).unwrap();
    let key = crate::crypto::sign::SigningKey::generate();
    dst.register_writer(&key.public(), "dst-host".into(), "dst-user".into()).unwrap();
    assert_eq!(relate(&src.repo, &dst).unwrap(), Relation::Unrelated);
    // Refused without rechunk, with what to do.
    let err = copy(&src.repo, &dst, &CopyOptions::default(), Some(&key), &NoProgress).unwrap_err().to_string();
    assert!(err.contains("--rechunk") && err.contains("init --from-repo"), "{err}");
    let rc = CopyOptions { rechunk: true, ..CopyOptions::default() };
    let wf = CopyOptions { with_forgets: true, ..rc.clone() };
    assert!(copy(&src.repo, &dst, &wf, Some(&key), &NoProgress).is_err());
    let dry = copy(&src.repo, &dst, &CopyOptions { dry_run: true, ..rc.clone() }, None, &NoProgress).unwrap();
    assert!(names(&be, "data/").is_empty() && names(&be, "snapshots/").is_empty());
    let r = copy(&src.repo, &dst, &rc, Some(&key), &NoProgress).unwrap();
    assert_eq!(r.relation, Relation::Unrelated);
    assert_eq!(r.snapshots, vec![a]);
    assert_eq!(dry.blobs, r.blobs);
    assert_eq!((r.files_read, r.files_reused), (5, 0), "{r:?}");
    let dst = Repository::open(be.clone() as Arc<dyn Backend>, PASSPHRASE).unwrap();
    assert!(dst.load_index().unwrap().is_empty());
    let (snaps, _) = dst.snapshots().unwrap();
    let (_, s) = &snaps[0];
    let orig = src.repo.load_snapshot(&a).unwrap();
    assert!(s.signature.is_valid());
    assert_eq!(s.writer, key.public());
    assert_eq!(s.copied_from.as_ref().unwrap().snapshot, a);
    assert_eq!((s.merkle_root, s.merkle_leaves, s.merkle_key), (orig.merkle_root, orig.merkle_leaves, orig.merkle_key));
    assert_ne!(s.tree, orig.tree);
    // Same files, same nodes but for their content lists; the big file now
    // holds blobs of the destination's sizes.
    let (before, after) = (files_of(&src.repo, orig.tree), files_of(&dst, s.tree));
    assert_eq!(before.keys().collect::<Vec<_>>(), after.keys().collect::<Vec<_>>());
    for (path, (data, node)) in &before {
        let (d2, n2) = &after[path];
        assert!(data == d2, "{path}");
        let strip = |n: &crate::format::tree::Node| crate::format::tree::Node { content: vec![], ..n.clone() };
        assert_eq!(strip(node), strip(n2), "{path}");
    }
    let big_after = &after["/big"].1;
    assert!(big_after.content.len() > 5, "{}", big_after.content.len());
    assert!(big_after.content.iter().all(|id| dst.locate_blob(BlobType::Data, id).unwrap().0.raw_length <= 256 << 10));
    // Again: nothing. A new snapshot with one more file: only it is read.
    let again = copy(&src.repo, &dst, &rc, Some(&key), &NoProgress).unwrap();
    assert_eq!((again.snapshots.len(), again.snapshots_present, again.files_read), (0, 1, 0));
    let (b, _) = src.snapshot(&t.file("more", &[&noise(1000, 5)]));
    let r = copy(&src.repo, &dst, &rc, Some(&key), &NoProgress).unwrap();
    assert_eq!(r.snapshots, vec![b]);
    assert_eq!((r.files_read, r.files_reused), (1, 5), "{r:?}");
    let f = History::load(&dst).unwrap().verify(&[]);
    assert!(f.errors.is_empty(), "{f:?}");
}

#[test]
fn unrelated_copy_refuses_a_file_whose_content_is_not_its_digest() {
    let src = test_repo();
    let saver = crate::repo::BlobSaver::new(&src.repo);
    let mut node = crate::testing::test_node("lie", crate::format::tree::NodeKind::File);
    node.content = vec![saver.save(BlobType::Data, &noise(5000, 1)).unwrap().0];
    node.size = 5000;
    node.digest = Some(Id([7; 32]));
    let root = saver.save(BlobType::Tree, &crate::format::tree::Tree { nodes: vec![node] }.encode()).unwrap().0;
    saver.finish().unwrap();
    src.repo.save_snapshot(&snapshot_of(root, &src.key), &src.key).unwrap();
    let other = test_repo();
    let key = crate::crypto::sign::SigningKey::generate();
    other.repo.register_writer(&key.public(), "h".into(), "u".into()).unwrap();
    let rc = CopyOptions { rechunk: true, ..CopyOptions::default() };
    let err = copy(&src.repo, &other.repo, &rc, Some(&key), &NoProgress).unwrap_err().to_string();
    assert!(err.contains("digest") && err.contains("check --read-data"), "{err}");
    assert!(names(&other.backend, "snapshots/").is_empty());
}

/// Requests of a copy with nothing to do between a repository of `packs` packs
/// (made-up index files of 32 packs each, as backups write them, and a pack
/// object of a few bytes each) and a related one holding the same objects:
/// (source counts, destination counts), the opening excluded.
fn up_to_date_copy_requests(packs: u64) -> (coffer_backend::Counts, coffer_backend::Counts) {
    use crate::format::envelope::SealedKind;
    use crate::format::index::{self as index_file, PackRecord};
    use crate::format::pack::PackEntry;
    let src = test_repo();
    for s in 0..10 {
        src.snapshot(&TestTree::new().file("f", &[&noise(100, s)]));
    }
    let record = |p: u64| PackRecord {
        id: Id::hash_of(format!("made-up pack {p}").as_bytes()),
        salt: [0; 32],
        cipher: src.repo.cipher(),
        epoch: 0,
        entries: vec![PackEntry {
            blob_type: BlobType::Data,
            id: Id::hash_of(format!("made-up blob {p}").as_bytes()),
            offset: 0,
            length: 100,
            raw_length: 100,
        }],
    };
    let mut first = 0;
    while first < packs {
        let last = (first + 32).min(packs);
        let recs: Vec<PackRecord> = (first..last).map(record).collect();
        src.repo.save_sealed(SealedKind::Index, &index_file::encode(&recs)).unwrap();
        for p in first..last {
            let id = Id::hash_of(format!("made-up pack {p}").as_bytes());
            src.backend.write(&crate::format::ObjectKind::Pack.path(&id), vec![0; 8]).unwrap();
        }
        first = last;
    }
    let (dbe, _) = related(&src.repo);
    for prefix in ["data/", "index/", "snapshots/", "writers/"] {
        for o in src.backend.list(prefix).unwrap() {
            dbe.write(&o.name, src.backend.read(&o.name).unwrap()).unwrap();
        }
    }
    let sc = coffer_backend::CountingBackend::new(src.backend.clone());
    let dc = coffer_backend::CountingBackend::new(dbe.clone());
    let (sh, dh) = (sc.handle(), dc.handle());
    let s = Repository::open(Arc::new(sc) as Arc<dyn Backend>, PASSPHRASE).unwrap();
    let d = Repository::open(Arc::new(dc) as Arc<dyn Backend>, PASSPHRASE).unwrap();
    let (s0, d0) = (sh.get(), dh.get());
    let r = run(&s, &d, &CopyOptions::default());
    assert_eq!((r.snapshots.len(), r.total().objects), (0, 0), "{r:?}");
    let diff = |a: coffer_backend::Counts, b: coffer_backend::Counts| coffer_backend::Counts {
        put: a.put - b.put,
        get: a.get - b.get,
        head: a.head - b.head,
        list: a.list - b.list,
        delete: a.delete - b.delete,
        bytes_up: a.bytes_up - b.bytes_up,
        bytes_down: a.bytes_down - b.bytes_down,
        rounds: a.rounds - b.rounds,
        latency_us: Default::default(),
    };
    (diff(sh.get(), s0), diff(dh.get(), d0))
}

#[test]
fn an_up_to_date_copy_costs_listings_only_whatever_the_size() {
    let (s, d) = up_to_date_copy_requests(1000);
    // Four listings a side: snapshots, tombstones, writers, index files. No
    // object is read, no pack is listed or stated.
    for c in [s, d] {
        assert_eq!((c.list, c.get, c.head, c.put, c.delete, c.bytes_down), (4, 0, 0, 0, 0, 0), "{c:?}");
    }
}

/// The same at 10^3 and 10^5 packs, printed for docs/performance.md:
/// `cargo test -p coffer-core --lib d0_copy_requests -- --ignored --nocapture`.
#[test]
#[ignore]
fn d0_copy_requests_at_1e3_and_1e5_packs() {
    for packs in [1_000, 100_000] {
        let t = std::time::Instant::now();
        let (s, d) = up_to_date_copy_requests(packs);
        println!("{packs} packs: source {s:?}; destination {d:?} (setup and copy {:.1?})", t.elapsed());
        assert_eq!((s.list, s.get, s.head, d.list, d.get, d.head), (4, 0, 0, 4, 0, 0));
    }
}

/// A memory backend that answers reconciliation sketches as a coffer server
/// does (docs/design.md#server, "Reconciliation").
struct Sketching(Arc<MemBackend>);

impl Backend for Sketching {
    fn location(&self) -> String {
        self.0.location()
    }
    fn read_max(&self, name: &str, max: u64) -> coffer_backend::BackendResult<Vec<u8>> {
        let Some(Ok((kind, cells))) = crate::recon::parse_request(name) else { return self.0.read_max(name, max) };
        let ids: Vec<Id> = self.0.list(kind.prefix())?.iter().filter_map(|o| kind.id_from_path(&o.name)).collect();
        Ok(crate::recon::Sketch::of(cells, &ids).encode())
    }
    fn read_range(&self, name: &str, offset: u64, len: u64) -> coffer_backend::BackendResult<Vec<u8>> {
        self.0.read_range(name, offset, len)
    }
    fn write(&self, name: &str, data: Vec<u8>) -> coffer_backend::BackendResult<()> {
        self.0.write(name, data)
    }
    fn stat(&self, name: &str) -> coffer_backend::BackendResult<u64> {
        self.0.stat(name)
    }
    fn list(&self, prefix: &str) -> coffer_backend::BackendResult<Vec<coffer_backend::ObjectInfo>> {
        self.0.list(prefix)
    }
    fn delete(&self, name: &str) -> coffer_backend::BackendResult<()> {
        self.0.delete(name)
    }
}

#[test]
fn names_learnt_from_sketches_are_the_listed_names_whatever_the_difference() {
    let be = Arc::new(MemBackend::new());
    let id = |i: u32| Id::hash_of(&i.to_le_bytes());
    for i in 0..3000 {
        be.write(&ObjectKind::Index.path(&id(i)), vec![1; 3]).unwrap();
    }
    let c = coffer_backend::CountingBackend::new(Arc::new(Sketching(be.clone())));
    let h = c.handle();
    let listed: std::collections::HashMap<Id, u64> = (0..3000).map(|i| (id(i), 3)).collect();
    // Known: 10 missing, 5 extra (one request); 1,500 missing (more requests, larger sketches).
    for (missing, extra, requests) in [(10u32, 5u32, 1u64), (1500, 0, 2)] {
        let known: std::collections::HashMap<Id, u64> =
            (missing..3000 + extra).map(|i| (id(i), if i < 3000 { 3 } else { 7 })).collect();
        let before = h.get();
        let got = reconcile::names(&c, ObjectKind::Index, &known).unwrap().expect("decoded");
        let mut want = listed.clone();
        (0..missing).for_each(|i| {
            want.insert(id(i), 0);
        });
        assert_eq!(got, want, "missing {missing}, extra {extra}");
        assert_eq!((h.get().get - before.get, h.get().list - before.list), (requests, 0));
    }
    // A server without sketches: `None`, and the caller lists.
    assert_eq!(reconcile::names(be.as_ref(), ObjectKind::Index, &listed).unwrap(), None);
}

#[test]
fn a_copy_to_or_from_a_server_reads_sketches_instead_of_listings() {
    let src = test_repo();
    src.snapshot(&tree(3, 1));
    // Into a server: the result is the listed copy's.
    let (dbe, _) = related(&src.repo);
    let dc = coffer_backend::CountingBackend::new(Arc::new(Sketching(dbe.clone())));
    let dh = dc.handle();
    let dst = Repository::open(Arc::new(dc) as Arc<dyn Backend>, PASSPHRASE).unwrap();
    let into_server = CopyOptions { destination_sketches: true, ..CopyOptions::default() };
    let r = run(&src.repo, &dst, &into_server);
    assert_eq!(r.snapshots.len(), 1);
    for prefix in ["data/", "index/", "snapshots/", "writers/"] {
        assert_eq!(names(&dbe, prefix), names(&src.backend, prefix), "{prefix}");
    }
    // Up to date: four sketches of 96 cells in one round, no listing.
    src.snapshot(&tree(3, 2));
    run(&src.repo, &dst, &into_server);
    let before = dh.get();
    let r = run(&src.repo, &dst, &into_server);
    assert_eq!(r.total().objects, 0, "{r:?}");
    let c = dh.get();
    assert_eq!((c.list - before.list, c.get - before.get, c.head - before.head), (0, 4, 0));
    assert_eq!(c.bytes_down - before.bytes_down, 4 * 96 * crate::recon::CELL_LEN as u64);
    // From a server: a dry run learns the sizes it lacks, and counts what the copy sends.
    let server_src =
        Repository::open(Arc::new(Sketching(src.backend.clone())) as Arc<dyn Backend>, PASSPHRASE).unwrap();
    let (ebe, dst2) = related(&src.repo);
    let from_server = CopyOptions { source_sketches: true, ..CopyOptions::default() };
    let dry = run(&server_src, &dst2, &CopyOptions { dry_run: true, ..from_server.clone() });
    let real = run(&server_src, &dst2, &from_server);
    assert_eq!(real.snapshots.len(), 2);
    assert_eq!(
        (dry.packs, dry.index_files, dry.snapshot_objects, dry.writers),
        (real.packs, real.index_files, real.snapshot_objects, real.writers)
    );
    for prefix in ["data/", "index/", "snapshots/", "writers/"] {
        assert_eq!(names(&ebe, prefix), names(&src.backend, prefix), "{prefix}");
    }
}
