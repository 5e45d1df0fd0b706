//! `format::pack::decode_trailer`: the fixed 48-byte trailer at a pack's end, read before
//! anything is authenticated. Input: `pack_len (u64 LE) || trailer bytes`; the trailer is
//! also tried with the input's own length as the pack length.
#![no_main]

use coffer_core::format::pack::{TRAILER_LEN, decode_trailer};
use coffer_fuzz::split_trailer_input;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some((pack_len, trailer)) = split_trailer_input(data)
        && let Ok(t) = decode_trailer(trailer, pack_len)
    {
        // What readers rely on: the sealed header fits in the pack, before the trailer.
        assert!(t.header_len as u64 + TRAILER_LEN as u64 <= pack_len);
        assert!(t.header_len >= 20);
    }
    let _ = decode_trailer(data, data.len() as u64);
});
