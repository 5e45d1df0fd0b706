//! `format::layout::Layout::decode`: layout plaintexts (binary, counts checked
//! against the bytes left before allocating).
#![no_main]

use coffer_core::format::layout::Layout;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(l) = Layout::decode(data) {
        for p in 0..l.table.partitions {
            assert_eq!(l.table.owners_of(p).len(), l.table.replicas as usize);
        }
        assert_eq!(Layout::decode(&l.encode()).as_ref(), Ok(&l));
    }
});
