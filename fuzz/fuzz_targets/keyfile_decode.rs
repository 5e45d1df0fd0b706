//! `format::keyfile::KeyFile::decode`: key files, stored as plaintext JSON (the outer layer,
//! parsed before any passphrase is tried). `KeyFile::open` is not called: its scrypt cost is
//! bounded by `ScryptParams::validate` but still far too slow for fuzzing.
#![no_main]

use coffer_core::format::keyfile::KeyFile;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(k) = KeyFile::decode(data) {
        assert_eq!(KeyFile::decode(&k.encode()).as_ref(), Ok(&k));
    }
});
