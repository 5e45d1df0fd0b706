//! `format::config::Config::decode`: the repository config plaintext (JSON).
#![no_main]

use coffer_core::format::config::Config;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(c) = Config::decode(data) {
        assert_eq!(Config::decode(&c.encode()).as_ref(), Ok(&c));
    }
});
