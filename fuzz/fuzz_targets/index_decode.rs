//! `format::index::decode`: index file plaintexts (binary).
#![no_main]

use coffer_core::format::index;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(packs) = index::decode(data) {
        // Decoding accepts exactly the canonical encoding.
        assert_eq!(index::encode(&packs), data);
    }
});
