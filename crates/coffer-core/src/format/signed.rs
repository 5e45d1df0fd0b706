//! Signed objects: a sealed object followed by its writer's Ed25519 signature.
//! See docs/design.md#signatures.
//!
//! ```text
//! sealed object (n) | commitment (32) | public key (32) | signature (64) | version 0x01 | magic "csig" (4)
//! signature = Ed25519-sign(writer key, "coffer v2 signed object" || commitment || sealed object)
//! ```
//! The signature covers the stored (encrypted) bytes, so anyone holding only the
//! public key can check who wrote the object without being able to read it. The
//! commitment is a hash the object vouches for in the clear: a snapshot's Merkle
//! root, zeros for a tombstone.

use crate::crypto::sign::{PUBLIC_KEY_LEN, PublicKey, SIGNATURE_LEN, SigningKey};

/// The magic that ends every signed object.
pub const MAGIC: &[u8; 4] = b"csig";
/// Version byte of the signature block.
pub const VERSION: u8 = 1;
/// Length of the signature block.
pub const BLOCK_LEN: usize = 32 + PUBLIC_KEY_LEN + SIGNATURE_LEN + 1 + MAGIC.len();
/// Domain separation prefix of the signed message.
pub const CONTEXT: &[u8] = b"coffer v2 signed object";

/// The block appended to a signed object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignatureBlock {
    /// What the object vouches for in the clear (a snapshot's Merkle root).
    pub commitment: [u8; 32],
    /// The writer's public key.
    pub public_key: PublicKey,
    /// Ed25519 signature of [`message`].
    pub signature: [u8; SIGNATURE_LEN],
}

/// The message a writer signs.
pub fn message(commitment: &[u8; 32], sealed: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(CONTEXT.len() + 32 + sealed.len());
    m.extend_from_slice(CONTEXT);
    m.extend_from_slice(commitment);
    m.extend_from_slice(sealed);
    m
}

/// Appends the signature block of `key` to `sealed`.
pub fn sign(mut sealed: Vec<u8>, commitment: &[u8; 32], key: &SigningKey) -> Vec<u8> {
    let signature = key.sign(&message(commitment, &sealed));
    sealed.extend_from_slice(commitment);
    sealed.extend_from_slice(&key.public().0);
    sealed.extend_from_slice(&signature);
    sealed.push(VERSION);
    sealed.extend_from_slice(MAGIC);
    sealed
}

/// Splits stored bytes into the sealed object and its signature block. Bytes that
/// do not end in the magic are an unsigned object (`None`); a block with an unknown
/// version is an error.
pub fn split(stored: &[u8]) -> Result<(&[u8], Option<SignatureBlock>), String> {
    if stored.len() < BLOCK_LEN || !stored.ends_with(MAGIC) {
        return Ok((stored, None));
    }
    let (sealed, block) = stored.split_at(stored.len() - BLOCK_LEN);
    if block[BLOCK_LEN - 5] != VERSION {
        return Err(format!("signature block version {} is not supported", block[BLOCK_LEN - 5]));
    }
    let commitment = block[..32].try_into().expect("32 bytes");
    let public_key = PublicKey(block[32..64].try_into().expect("32 bytes"));
    let signature = block[64..128].try_into().expect("64 bytes");
    Ok((sealed, Some(SignatureBlock { commitment, public_key, signature })))
}

impl SignatureBlock {
    /// Whether the signature is valid for `sealed` under the block's public key.
    pub fn verify(&self, sealed: &[u8]) -> bool {
        self.public_key.verify(&message(&self.commitment, sealed), &self.signature)
    }
}

/// What the signature of a snapshot or tombstone says, once checked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum SignatureStatus {
    /// Not checked (an object built in memory).
    #[default]
    Unchecked,
    /// Valid, by a writer registered in the repository.
    Valid {
        /// The writer's name, `user@host`.
        writer: String,
        /// The writer's public key.
        key: PublicKey,
    },
    /// Valid, but by a key that is not registered in the repository.
    UnknownWriter(PublicKey),
    /// Present but wrong; the reason says how.
    Invalid(String),
    /// The object carries no signature.
    Missing,
}

impl SignatureStatus {
    /// Whether the signature verifies and its writer is registered.
    pub fn is_valid(&self) -> bool {
        matches!(self, SignatureStatus::Valid { .. })
    }

    /// A short description for listings: the writer, or what is wrong.
    pub fn describe(&self) -> String {
        match self {
            SignatureStatus::Unchecked => "not checked".into(),
            SignatureStatus::Valid { writer, .. } => writer.clone(),
            SignatureStatus::UnknownWriter(k) => format!("UNKNOWN WRITER {}", k.short()),
            SignatureStatus::Invalid(why) => format!("BAD SIGNATURE ({why})"),
            SignatureStatus::Missing => "UNSIGNED".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sign_split_verify() {
        let key = SigningKey::generate();
        let stored = sign(b"sealed bytes".to_vec(), &[9; 32], &key);
        let (sealed, block) = split(&stored).unwrap();
        let block = block.unwrap();
        assert_eq!(sealed, b"sealed bytes");
        assert_eq!(block.commitment, [9; 32]);
        assert_eq!(block.public_key, key.public());
        assert!(block.verify(sealed));
        assert!(!block.verify(b"sealed bytez"));
        let mut other = block.clone();
        other.commitment[0] ^= 1;
        assert!(!other.verify(sealed));
    }

    #[test]
    fn unsigned_and_garbage() {
        assert_eq!(split(b"short").unwrap(), (&b"short"[..], None));
        let mut stored = sign(vec![1; 100], &[0; 32], &SigningKey::generate());
        let n = stored.len();
        stored[n - 5] = 9;
        assert!(split(&stored).is_err());
    }
}
