//! `format::envelope::open`: sealed objects (config, index files, snapshots, writer records,
//! tombstones, session markers, prune notices) as read from storage, opened with fixed data
//! keys (epochs 0 and 1) as each kind. What opens is decoded with the matching decoder.
#![no_main]

use coffer_core::format::envelope::{SealedKind, open};
use coffer_core::format::notice::PruneNotice;
use coffer_core::format::session::SessionRecord;
use coffer_core::format::{config::Config, index, snapshot::Snapshot, tombstone::Tombstone, writer::WriterRecord};
use coffer_fuzz::data_keys;
use libfuzzer_sys::fuzz_target;

/// Every kind, with the decoder of its plaintext.
const KINDS: [(SealedKind, fn(&[u8]) -> bool); 7] = [
    (SealedKind::Config, |p| Config::decode(p).is_ok()),
    (SealedKind::Index, |p| index::decode(p).is_ok()),
    (SealedKind::Snapshot, |p| Snapshot::decode(p).is_ok()),
    (SealedKind::Writer, |p| WriterRecord::decode(p).is_ok()),
    (SealedKind::Tombstone, |p| Tombstone::decode(p).is_ok()),
    (SealedKind::Session, |p| SessionRecord::decode(p).is_ok()),
    (SealedKind::PruneNotice, |p| PruneNotice::decode(p).is_ok()),
];

fuzz_target!(|data: &[u8]| {
    let keys = data_keys();
    for (kind, decode) in KINDS {
        if let Ok(plain) = open(&keys, kind, data) {
            let _ = decode(&plain);
        }
    }
});
