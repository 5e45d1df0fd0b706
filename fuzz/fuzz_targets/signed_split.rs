//! `format::signed::split`, then `SignatureBlock::verify`: the signature block at the end
//! of a stored snapshot or tombstone, parsed before anything is decrypted. Also checks that
//! any bytes signed with a fixed key split back into themselves and a block that verifies.
#![no_main]

use coffer_core::format::signed::{BLOCK_LEN, MAGIC, VERSION, sign, split};
use coffer_fuzz::{COMMITMENT, signing_key};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match split(data) {
        Ok((sealed, Some(block))) => {
            assert_eq!(sealed.len() + BLOCK_LEN, data.len());
            let _ = block.verify(sealed);
            // The block re-encodes to the bytes it was parsed from.
            let mut again = sealed.to_vec();
            again.extend_from_slice(&block.commitment);
            again.extend_from_slice(&block.public_key.0);
            again.extend_from_slice(&block.signature);
            again.push(VERSION);
            again.extend_from_slice(MAGIC);
            assert_eq!(again, data);
        }
        Ok((sealed, None)) => assert_eq!(sealed, data),
        Err(_) => assert!(data.len() >= BLOCK_LEN && data.ends_with(MAGIC)),
    }
    // Signing then splitting is the identity, and the signature verifies.
    let key = signing_key();
    let stored = sign(data.to_vec(), &COMMITMENT, &key);
    let (sealed, block) = split(&stored).expect("a block this coffer wrote splits");
    let block = block.expect("a signed object has a block");
    assert_eq!(sealed, data);
    assert_eq!(block.public_key, key.public());
    assert_eq!(block.commitment, COMMITMENT);
    assert!(block.verify(sealed));
});
