//! `translog::SignedHead::decode` and `translog::verify_consistency`: a signed log
//! head and a consistency proof as a server would send them.
#![no_main]

use coffer_core::translog::{verify_consistency, SignedHead};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = SignedHead::decode(data) {
        assert_eq!(SignedHead::decode(&h.encode()), Ok(h));
    }
    // The rest: old size, new size, two roots, then proof hashes.
    if data.len() >= 80 {
        let old = u64::from_le_bytes(data[..8].try_into().unwrap());
        let new = u64::from_le_bytes(data[8..16].try_into().unwrap());
        let old_root: [u8; 32] = data[16..48].try_into().unwrap();
        let new_root: [u8; 32] = data[48..80].try_into().unwrap();
        let proof: Vec<[u8; 32]> = data[80..].chunks_exact(32).map(|c| c.try_into().unwrap()).collect();
        let _ = verify_consistency(old, new, &old_root, &new_root, &proof);
    }
});
