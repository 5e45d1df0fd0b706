//! Reader ⊇ writer: the largest object each writer can produce is accepted by
//! its reader, for every object kind (tree blobs aside: see format/tree.rs), and
//! a planted object above its kind's limit is damage that names it.

use std::sync::Arc;

use super::index::{self as index_file, PackRecord};
use super::keyfile::{KeyFile, MasterKeys};
use super::limits;
use super::pack::{BlobType, ENTRY_LEN, PackEntry};
use super::snapshot::{MAX_SKIPPED_LISTED, MAX_SKIPPED_TEXT, Skipped, Snapshot, Summary};
use super::tombstone::{Forgotten, Tombstone};
use super::{FORMAT_VERSION, ObjectKind};
use crate::crypto::sign::SigningKey;
use crate::crypto::{Cipher, DataKeys, Key};
use crate::error::Error;
use crate::format::envelope::SealedKind;
use crate::id::Id;
use crate::repo::{InitOptions, Repository};
use coffer_backend::{Backend, LocalBackend};

use crate::testing::FAST_KDF as FAST;

fn repo(dir: &std::path::Path) -> Repository {
    let be: Arc<dyn Backend> = Arc::new(LocalBackend::open(dir).unwrap());
    Repository::init(be, b"pw", &InitOptions { kdf: FAST, ..InitOptions::default() }).unwrap()
}

fn id(n: u64) -> Id {
    let mut b = [0u8; 32];
    b[..8].copy_from_slice(&n.to_le_bytes());
    b[8] = 1;
    Id(b)
}

fn stored_len(repo: &Repository, kind: ObjectKind, id: &Id) -> u64 {
    repo.backend().stat(&kind.path(id)).unwrap()
}

#[test]
fn the_largest_key_file_is_accepted() {
    // Epochs are a u16: a key file wraps at most 65,536 data keys.
    let keys = MasterKeys {
        data: DataKeys::from_vec((0..=u16::MAX as u32).map(|_| Key::random()).collect()).unwrap(),
        id: Key::random(),
        chunker: Key::random(),
    };
    let kf = KeyFile::create(&keys, b"pw", FAST, Cipher::preferred(), "h".repeat(255), "u".repeat(255)).unwrap();
    let bytes = kf.encode();
    assert!(bytes.len() as u64 <= limits::KEY_FILE, "{} bytes", bytes.len());
    assert!(KeyFile::decode(&bytes).is_ok());
}

#[test]
fn the_largest_index_files_are_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let repo = repo(dir.path());
    let record = |n: u64, blobs: usize| PackRecord {
        id: id(n),
        salt: [3; 32],
        cipher: Cipher::preferred(),
        epoch: 0,
        entries: (0..blobs)
            .map(|i| PackEntry {
                blob_type: BlobType::Data,
                id: id(n << 32 | i as u64),
                offset: i as u64 * 17,
                length: 17,
                raw_length: 0,
            })
            .collect(),
    };
    // The worst a writer closes: records just under the target, then the largest
    // record a pack can have (a pack is closed at PACK_BLOBS blobs).
    let under = (limits::INDEX_FILE_TARGET as usize - 1) / ENTRY_LEN - 200;
    let mut records = vec![record(1, under), record(2, limits::PACK_BLOBS)];
    records.extend((3..40).map(|n| record(n, 10)));
    let batches = index_file::batches(&records);
    assert!(batches.len() >= 3, "split by size and by count");
    assert_eq!(batches.iter().map(|b| b.len()).sum::<usize>(), records.len());
    for batch in batches {
        assert!(batch.len() <= limits::INDEX_FILE_PACKS);
        let fid = repo.save_sealed(SealedKind::Index, &index_file::encode(batch)).unwrap();
        assert!(stored_len(&repo, ObjectKind::Index, &fid) <= limits::INDEX_FILE);
        assert_eq!(repo.load_index_file(&fid).unwrap(), batch);
    }
}

#[test]
fn the_largest_snapshot_is_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let repo = repo(dir.path());
    let key = SigningKey::generate();
    // Paths, tags and excludes just within what a backup accepts.
    let budget = limits::SNAPSHOT_LISTS as usize - 300;
    let paths: Vec<String> = (0..budget / 1008).map(|i| format!("/{i:0>999}")).collect();
    super::snapshot::check_lists(&paths, &[], &[], "host").unwrap();
    let long = "\u{1F600}".repeat(MAX_SKIPPED_TEXT);
    let skipped: Vec<Skipped> =
        (0..MAX_SKIPPED_LISTED).map(|_| Skipped::new(format!("/{long}"), long.clone())).collect();
    assert!(skipped[0].path.len() <= MAX_SKIPPED_TEXT && skipped[0].path.ends_with('…'));
    let snap = Snapshot {
        version: FORMAT_VERSION,
        time: "2026-11-24T00:00:00.000000000Z".into(),
        hostname: "host".into(),
        username: "u".repeat(255),
        paths,
        tags: Vec::new(),
        tree: id(1),
        parent: Some(id(2)),
        excludes: Vec::new(),
        skipped_count: u64::MAX,
        skipped,
        summary: Summary::default(),
        program: "coffer".into(),
        writer: key.public(),
        history: (0..10_000).map(id).collect(),
        merkle_root: id(3),
        merkle_leaves: 0,
        merkle_key: id(4),
        copied_from: None,
        imported_from: None,
        written: None,
        server_log: None,
        signature: Default::default(),
    };
    let sid = repo.save_snapshot(&snap, &key).unwrap();
    assert!(stored_len(&repo, ObjectKind::Snapshot, &sid) <= limits::SNAPSHOT);
    assert_eq!(repo.load_snapshot(&sid).unwrap().paths, snap.paths);
    // One byte more of paths is refused when the backup starts.
    let mut more = snap.paths.clone();
    more.push("/".repeat(limits::SNAPSHOT_LISTS as usize));
    assert!(super::snapshot::check_lists(&more, &[], &[], "host").is_err());
}

#[test]
fn the_largest_tombstones_are_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let repo = repo(dir.path());
    let key = SigningKey::generate();
    // Snapshots with the most paths a backup records, and very many small ones.
    let big_paths: Vec<String> =
        (0..(limits::SNAPSHOT_LISTS as usize - 300) / 1008).map(|i| format!("/{i:0>999}")).collect();
    let mut forgotten: Vec<Forgotten> = (0..6)
        .map(|n| Forgotten {
            id: id(n),
            time: String::new(),
            end: String::new(),
            hostname: "h".into(),
            paths: big_paths.clone(),
            history: vec![id(7); 100],
            replaced_by: None,
        })
        .collect();
    forgotten.extend((10..30_000).map(|n| Forgotten {
        id: id(n),
        time: "2026-11-24T00:00:00Z".into(),
        end: "2026-11-24T00:01:00.123Z".into(),
        hostname: "h".into(),
        paths: vec!["/home".into()],
        history: vec![id(n - 1)],
        replaced_by: None,
    }));
    let batches = crate::ops::forget::tombstone_batches(forgotten);
    assert!(batches.len() >= 4);
    for batch in batches {
        let t = Tombstone {
            version: FORMAT_VERSION,
            time: "2026-11-24T00:00:00Z".into(),
            hostname: "h".into(),
            username: "u".into(),
            writer: key.public(),
            history: (0..1000).map(id).collect(),
            forgotten: batch,
            program: "coffer".into(),
            signature: Default::default(),
        };
        let tid = repo.save_tombstone(&t, &key).unwrap();
        assert!(stored_len(&repo, ObjectKind::Tombstone, &tid) <= limits::TOMBSTONE);
        assert_eq!(repo.load_tombstone(&tid).unwrap().forgotten, t.forgotten);
    }
}

#[test]
fn the_largest_session_marker_and_prune_notice_are_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let repo = repo(dir.path());
    // A prune notice of the most packs one lists.
    let notice = crate::format::notice::PruneNotice {
        version: FORMAT_VERSION,
        time: "2026-11-24T00:00:00Z".into(),
        hostname: "h".repeat(255),
        packs: (0..limits::PRUNE_NOTICE_PACKS as u64).map(id).collect(),
        backends: Vec::new(),
    };
    let nid = repo.save_sealed(SealedKind::PruneNotice, &serde_json::to_vec(&notice).unwrap()).unwrap();
    assert!(stored_len(&repo, ObjectKind::PruneNotice, &nid) <= limits::PRUNE_NOTICE);
    let crate::lifecycle::notices::Notices { ids, packs, unknown } = crate::lifecycle::notices::read(&repo).unwrap();
    assert_eq!((ids, packs.len(), unknown), (vec![nid], limits::PRUNE_NOTICE_PACKS, vec![]));
    // A session marker of a backup that wrote 200,000 index files.
    let rec = crate::format::session::SessionRecord {
        version: FORMAT_VERSION,
        hostname: "h".repeat(255),
        started: "2026-11-24T00:00:00Z".into(),
        beat: u64::MAX,
        index_files: (0..200_000).map(id).collect(),
        packs: (0..limits::INDEX_FILE_PACKS as u64).map(id).collect(),
    };
    let sealed = repo.seal(SealedKind::Session, &serde_json::to_vec(&rec).unwrap());
    assert!(sealed.len() as u64 <= limits::SESSION, "{} bytes", sealed.len());
    repo.backend().write(&ObjectKind::Session.path(&id(1)), sealed).unwrap();
    let listed = crate::lifecycle::session::list(&repo).unwrap();
    assert_eq!(listed[0].1.as_ref().unwrap().index_files.len(), 200_000);
}

#[test]
fn the_largest_blob_fits_its_limits() {
    // A chunk of the largest size, stored uncompressed, is within the blob limit,
    // and a pack of the largest size with its largest header within the pack's.
    let chunk = crate::chunker::ChunkerParams::MAX_MAX_SIZE as u64;
    assert!(chunk + 1 + crate::crypto::TAG_LEN as u64 <= limits::BLOB);
    let entry =
        PackEntry { blob_type: BlobType::Data, id: id(1), offset: 0, length: limits::BLOB as u32, raw_length: 1 };
    assert!(entry.check_bounds().is_ok());
    assert!(PackEntry { length: limits::BLOB as u32 + 1, ..entry }.check_bounds().is_err());
    assert!(PackEntry { raw_length: limits::BLOB_PLAINTEXT as u32 + 1, ..entry }.check_bounds().is_err());
}

#[test]
fn planted_objects_above_their_limit_are_damage_that_names_them() {
    let dir = tempfile::tempdir().unwrap();
    let repo = repo(dir.path());
    let giant = 64u64 << 30;
    for kind in [ObjectKind::Index, ObjectKind::Snapshot, ObjectKind::Tombstone, ObjectKind::Writer] {
        let name = kind.path(&id(9));
        std::fs::create_dir_all(dir.path().join(kind.prefix())).unwrap();
        std::fs::File::create(dir.path().join(&name)).unwrap().set_len(giant).unwrap();
        let e = repo.read_object(kind, &id(9)).unwrap_err();
        assert!(matches!(e, Error::Corrupt { .. }), "{e}");
        let msg = e.to_string();
        assert!(msg.contains(&kind.describe(&id(9))) && msg.contains(&giant.to_string()), "{msg}");
        assert!(msg.contains(&kind.max_len().to_string()), "{msg}");
        std::fs::remove_file(dir.path().join(&name)).unwrap();
    }
    // A planted key file is skipped as damaged: the genuine one still opens.
    std::fs::File::create(dir.path().join(ObjectKind::Key.path(&id(0)))).unwrap().set_len(giant).unwrap();
    let be: Arc<dyn Backend> = Arc::new(LocalBackend::open(dir.path()).unwrap());
    assert!(Repository::open(be.clone(), b"pw").is_ok());
    // A planted session marker counts as a writer that may be running.
    std::fs::create_dir_all(dir.path().join("sessions")).unwrap();
    std::fs::File::create(dir.path().join(ObjectKind::Session.path(&id(5)))).unwrap().set_len(giant).unwrap();
    assert_eq!(crate::lifecycle::session::list(&repo).unwrap(), vec![(id(5), None)]);
    // A giant config is damage, not an allocation failure.
    std::fs::File::create(dir.path().join("config")).unwrap().set_len(giant).unwrap();
    let e = Repository::open(be, b"pw").err().unwrap();
    assert!(matches!(e, Error::Corrupt { .. }) && e.to_string().contains("config"), "{e}");
}
