//! `format::tombstone::Tombstone::decode`: tombstone plaintexts (JSON).
#![no_main]

use coffer_core::format::tombstone::Tombstone;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(t) = Tombstone::decode(data) {
        let _ = t.system_time();
        assert_eq!(Tombstone::decode(&t.encode()).as_ref(), Ok(&t));
    }
});
