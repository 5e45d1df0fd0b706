//! `format::snapshot::Snapshot::decode`: snapshot plaintexts (JSON).
#![no_main]

use coffer_core::format::snapshot::Snapshot;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = Snapshot::decode(data) {
        let _ = s.system_time();
        let _ = s.is_incomplete();
        assert_eq!(Snapshot::decode(&s.encode()).as_ref(), Ok(&s));
    }
});
