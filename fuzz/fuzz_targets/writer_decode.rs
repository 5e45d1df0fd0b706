//! `format::writer::WriterRecord::decode`: writer record plaintexts (JSON).
#![no_main]

use coffer_core::format::writer::WriterRecord;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(w) = WriterRecord::decode(data) {
        let _ = w.name();
        assert_eq!(WriterRecord::decode(&w.encode()).as_ref(), Ok(&w));
    }
});
