//! `format::pack::open_blob`: one blob's bytes from a pack, with a fixed pack key.
//! Input layout (see `coffer_fuzz::blob_case`): flags (1) | offset (u64 LE) | raw_length
//! (u32 LE) | rest. With flag bit `FLAG_SEAL` the rest is a blob plaintext (compression byte
//! and payload) that is sealed here first, so that decompression and the length checks
//! behind the AEAD are reached; without it the rest is passed as the sealed blob.
#![no_main]

use coffer_core::format::pack::open_blob;
use coffer_fuzz::blob_case;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(c) = blob_case(data)
        && let Ok(plain) = open_blob(&c.key, &c.entry, &c.sealed)
    {
        assert_eq!(plain.len(), c.entry.raw_length as usize);
    }
});
