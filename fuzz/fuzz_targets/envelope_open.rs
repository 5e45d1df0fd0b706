//! `format::envelope::open`: sealed objects (config, index files, snapshots) as read from
//! storage, opened with fixed data keys (epochs 0 and 1) as each of the three kinds. What
//! opens is decoded with the matching decoder.
#![no_main]

use coffer_core::format::envelope::{SealedKind, open};
use coffer_core::format::{config::Config, index, snapshot::Snapshot};
use coffer_fuzz::data_keys;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let keys = data_keys();
    for kind in [SealedKind::Config, SealedKind::Index, SealedKind::Snapshot] {
        if let Ok(plain) = open(&keys, kind, data) {
            match kind {
                SealedKind::Config => drop(Config::decode(&plain)),
                SealedKind::Index => drop(index::decode(&plain)),
                SealedKind::Snapshot => drop(Snapshot::decode(&plain)),
                _ => {}
            }
        }
    }
});
