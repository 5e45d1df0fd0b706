//! `format::envelope::open`: sealed objects (config, index files, snapshots) as read from
//! storage, opened with a fixed data key as each of the three kinds. What opens is decoded
//! with the matching decoder.
#![no_main]

use coffer_core::format::envelope::{SealedKind, open};
use coffer_core::format::{config::Config, index, snapshot::Snapshot};
use coffer_fuzz::DATA_KEY;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for kind in [SealedKind::Config, SealedKind::Index, SealedKind::Snapshot] {
        if let Ok(plain) = open(&DATA_KEY, kind, data) {
            match kind {
                SealedKind::Config => drop(Config::decode(&plain)),
                SealedKind::Index => drop(index::decode(&plain)),
                SealedKind::Snapshot => drop(Snapshot::decode(&plain)),
            }
        }
    }
});
