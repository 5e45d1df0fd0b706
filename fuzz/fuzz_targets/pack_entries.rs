//! `format::pack::decode_entries`: a pack header's plaintext (entry count, then entries).
#![no_main]

use coffer_core::format::pack::{ENTRY_LEN, decode_entries};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(entries) = decode_entries(data) {
        assert_eq!(data.len(), 4 + entries.len() * ENTRY_LEN);
        let mut again = (entries.len() as u32).to_le_bytes().to_vec();
        for e in &entries {
            e.encode(&mut again);
        }
        assert_eq!(again, data);
    }
});
