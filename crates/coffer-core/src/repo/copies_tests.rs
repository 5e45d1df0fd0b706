//! Several copies of a blob: a read falls back from a copy in a missing pack (an
//! index file the storage replays after a prune) or a damaged copy to a good one,
//! and one index file that does not load does not hide the others.

use std::sync::Arc;

use super::*;
use crate::crypto::sign::SigningKey;
use crate::ops::backup::{BackupOptions, backup};
use crate::progress::NoProgress;
use crate::testing::noise;
use coffer_backend::{Backend, OpendalBackend};

use crate::testing::FAST_KDF as FAST;

struct Setup {
    dir: tempfile::TempDir,
    be: Arc<dyn Backend>,
    /// The one data blob backed up, its content, and the index file and pack record listing it.
    blob: Id,
    content: Vec<u8>,
    index_file: Id,
    record: index_file::PackRecord,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let content = noise(40_000, 7);
    std::fs::write(src.join("f"), &content).unwrap();
    let be: Arc<dyn Backend> = Arc::new(OpendalBackend::local(&dir.path().join("repo")).unwrap());
    let repo = Repository::init(be.clone(), b"pw", &InitOptions { kdf: FAST, ..InitOptions::default() }).unwrap();
    let key = SigningKey::generate();
    repo.register_writer(&key.public(), "host".into(), "user".into()).unwrap();
    backup(&repo, &BackupOptions { paths: vec![src], ..BackupOptions::default() }, &key, &NoProgress).unwrap();
    let blob = repo.blob_id(BlobType::Data, &content);
    for index_file in repo.list_ids(ObjectKind::Index).unwrap() {
        for record in repo.load_index_file(&index_file).unwrap() {
            if record.entries.iter().any(|e| e.id == blob) {
                return Setup { dir, be, blob, content, index_file, record };
            }
        }
    }
    panic!("the file's blob is in no index file");
}

/// Stores an index file listing `record`, named so that it loads before `before`
/// (index files load in id order, and the first copy loaded is served first).
fn store_index_loading_first(repo: &Repository, record: &index_file::PackRecord, before: &Id) -> Id {
    loop {
        let id = repo.save_sealed(SealedKind::Index, &index_file::encode(std::slice::from_ref(record))).unwrap();
        if id < *before {
            return id;
        }
        repo.backend().delete(&ObjectKind::Index.path(&id)).unwrap();
    }
}

/// An index file replayed by the storage: it lists the blob in a pack that is gone,
/// and that copy is served first. The read falls back to the good copy.
#[test]
fn a_copy_in_a_missing_pack_gives_way() {
    let s = setup();
    let repo = Repository::open(s.be.clone(), b"pw").unwrap();
    let mut stale = s.record.clone();
    stale.id = Id([0xee; 32]);
    store_index_loading_first(&repo, &stale, &s.index_file);

    let repo = Repository::open(s.be.clone(), b"pw").unwrap();
    repo.load_index_files(&repo.list_ids(ObjectKind::Index).unwrap()).unwrap();
    assert_eq!(repo.index().get(&s.blob).unwrap().1.id, stale.id, "the stale copy is served first");
    assert_eq!(repo.load_blob(BlobType::Data, &s.blob).unwrap(), s.content);
    let bad = repo.take_bad_copies();
    assert!(bad.len() == 1 && bad[0].contains(&stale.id.short()) && bad[0].contains("missing"), "{bad:?}");

    // Loading the whole index serves the copy in a stored pack first.
    let repo = Repository::open(s.be.clone(), b"pw").unwrap();
    assert!(repo.load_index().unwrap().is_empty());
    assert_eq!(repo.index().get(&s.blob).unwrap().1.id, s.record.id);
    assert!(repo.index().contains(&s.blob, BlobType::Data));
}

/// A damaged copy of a pack, listed by its own index file and served first: the
/// read falls back to the intact copy and names the damaged one.
#[test]
fn a_damaged_copy_gives_way() {
    let s = setup();
    let repo = Repository::open(s.be.clone(), b"pw").unwrap();
    let mut bytes = s.be.read(&ObjectKind::Pack.path(&s.record.id)).unwrap();
    let e = s.record.entries.iter().find(|e| e.id == s.blob).unwrap();
    bytes[e.offset as usize + 20] ^= 0x40;
    let mut damaged = s.record.clone();
    damaged.id = Id::hash_of(&bytes);
    s.be.write(&ObjectKind::Pack.path(&damaged.id), bytes).unwrap();
    store_index_loading_first(&repo, &damaged, &s.index_file);

    let repo = Repository::open(s.be.clone(), b"pw").unwrap();
    assert!(repo.load_index().unwrap().is_empty());
    assert_eq!(repo.index().get(&s.blob).unwrap().1.id, damaged.id, "the damaged copy is served first");
    assert_eq!(repo.load_blob(BlobType::Data, &s.blob).unwrap(), s.content);
    let bad = repo.take_bad_copies();
    assert!(bad.len() == 1 && bad[0].contains(&damaged.id.short()), "{bad:?}");
    assert!(repo.has_good_copy_elsewhere(BlobType::Data, &s.blob, &damaged.id));
    assert!(!repo.has_good_copy_elsewhere(BlobType::Data, &s.blob, &s.record.id));

    // A restore reads packs by ranges: it falls back the same way.
    let (_, snap) = repo.find_snapshot("latest", &SnapshotFilter::default()).unwrap();
    let target = s.dir.path().join("target");
    let opts = crate::ops::restore::RestoreOptions { target: target.clone(), ..Default::default() };
    let summary = crate::ops::restore::restore(&repo, &snap, &opts, &NoProgress).unwrap();
    assert!(summary.failures.is_empty(), "{:?}", summary.failures);
    let restored = std::fs::read(target.join(s.dir.path().strip_prefix("/").unwrap()).join("src/f")).unwrap();
    assert_eq!(restored, s.content);
    let bad = repo.take_bad_copies();
    assert!(bad.len() == 1 && bad[0].contains(&damaged.id.short()), "{bad:?}");
}

/// A garbage index file and a damaged one are skipped and named; the others load.
#[test]
fn a_bad_index_file_does_not_hide_the_others() {
    let s = setup();
    let garbage = Id::hash_of(b"garbage");
    s.be.write(&ObjectKind::Index.path(&garbage), b"garbage".to_vec()).unwrap();
    let repo = Repository::open(s.be.clone(), b"pw").unwrap();
    let damaged = store_index_loading_first(&repo, &s.record, &Id([0xff; 32]));
    let path = ObjectKind::Index.path(&damaged);
    let mut bytes = s.be.read(&path).unwrap();
    bytes[40] ^= 1;
    s.be.write(&path, bytes).unwrap();

    let repo = Repository::open(s.be.clone(), b"pw").unwrap();
    let skipped: Vec<String> = repo.load_index().unwrap().iter().map(|e| e.to_string()).collect();
    assert_eq!(skipped.len(), 2, "{skipped:?}");
    assert!(skipped.iter().any(|e| e.contains(&garbage.short())), "{skipped:?}");
    assert!(skipped.iter().any(|e| e.contains(&damaged.short())), "{skipped:?}");
    assert_eq!(repo.load_blob(BlobType::Data, &s.blob).unwrap(), s.content);
    // Prune needs every index file: it refuses.
    let repo = Repository::open(s.be.clone(), b"pw").unwrap();
    assert!(repo.load_index_files(&repo.list_ids(ObjectKind::Index).unwrap()).is_err());
}

/// `check` names a damaged copy as its pack's problem, but does not count the
/// blob lost while another copy is good; with the good copy damaged too, it does.
#[test]
fn check_counts_a_blob_lost_only_when_no_copy_is_good() {
    let s = setup();
    let repo = Repository::open(s.be.clone(), b"pw").unwrap();
    let good = s.be.read(&ObjectKind::Pack.path(&s.record.id)).unwrap();
    let e = *s.record.entries.iter().find(|e| e.id == s.blob).unwrap();
    let mut bytes = good.clone();
    bytes[e.offset as usize + 20] ^= 0x40;
    let mut damaged = s.record.clone();
    damaged.id = Id::hash_of(&bytes);
    s.be.write(&ObjectKind::Pack.path(&damaged.id), bytes.clone()).unwrap();
    store_index_loading_first(&repo, &damaged, &s.index_file);

    let opts = crate::ops::check::CheckOptions { read_data: true, ..Default::default() };
    let check =
        || crate::ops::check::check(&Repository::open(s.be.clone(), b"pw").unwrap(), &opts, &NoProgress).unwrap();
    let r = check();
    assert!(r.errors.iter().any(|e| e.contains(&damaged.id.short())), "{:?}", r.errors);
    assert!(r.damaged_blobs.iter().all(|d| d.id != s.blob), "{:?}", r.damaged_blobs);

    // The good copy damaged too (in place): now the blob is lost.
    s.be.delete(&ObjectKind::Pack.path(&s.record.id)).unwrap();
    s.be.write(&ObjectKind::Pack.path(&s.record.id), bytes).unwrap();
    let r = check();
    assert!(r.damaged_blobs.iter().any(|d| d.id == s.blob), "{:?}", r.damaged_blobs);
}
