//! Sealed objects: the encryption envelope of `config`, index files and snapshots.
//! See docs/design.md#sealed-objects.
//!
//! ```text
//! magic "coffer" (6) | version 0x01 | kind (1) | cipher (1) | salt (32) | ciphertext | tag (16)
//! ```
//! The key is `data_key.derive("coffer v1 object", salt)`, unique per object since the
//! salt is 32 random bytes, so the single nonce `Nonce::new(0, 0)` is never reused.
//! The first 9 bytes are the associated data.

use crate::crypto::{AeadKey, Cipher, KEY_LEN, Key, Nonce, TAG_LEN, random_array};

/// The six magic bytes that open every sealed object.
pub const MAGIC: &[u8; 6] = b"coffer";
/// Version byte of the envelope layout.
pub const VERSION: u8 = 1;
/// Length of the plaintext header (magic, version, kind, cipher).
pub const HEADER_LEN: usize = 9;
/// Bytes the envelope adds to its plaintext.
pub const OVERHEAD: usize = HEADER_LEN + KEY_LEN + TAG_LEN;
/// Key-derivation context for sealed objects.
pub const KEY_CONTEXT: &str = "coffer v1 object";

/// What a sealed object holds, stored as its kind byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SealedKind {
    /// The repository config.
    Config = 1,
    /// An index file.
    Index = 2,
    /// A snapshot.
    Snapshot = 3,
    /// A writer registration.
    Writer = 4,
    /// A tombstone.
    Tombstone = 5,
    /// A running writer's session marker.
    Session = 6,
    /// A prune's deletion notice.
    PruneNotice = 7,
}

/// Encrypts `plaintext` into a sealed object of `kind`.
pub fn seal(data_key: &Key, cipher: Cipher, kind: SealedKind, plaintext: &[u8]) -> Vec<u8> {
    let salt: [u8; KEY_LEN] = random_array();
    let mut out = Vec::with_capacity(plaintext.len() + OVERHEAD);
    out.extend_from_slice(MAGIC);
    out.push(VERSION);
    out.push(kind as u8);
    out.push(cipher.to_byte());
    out.extend_from_slice(&salt);
    let key = AeadKey::new(cipher, &data_key.derive(KEY_CONTEXT, &salt));
    let ct = key.seal(Nonce::new(0, 0), &out[..HEADER_LEN], plaintext);
    out.extend_from_slice(&ct);
    out
}

/// Authenticates and decrypts a sealed object, checking that it is of `kind`.
/// The error says what is wrong, for the caller to name the object.
pub fn open(data_key: &Key, kind: SealedKind, sealed: &[u8]) -> Result<Vec<u8>, String> {
    if sealed.len() < OVERHEAD {
        return Err(format!("truncated: {} bytes, a sealed object has at least {OVERHEAD}", sealed.len()));
    }
    if &sealed[..6] != MAGIC {
        return Err("not a coffer object (bad magic)".into());
    }
    if sealed[6] != VERSION {
        return Err(format!("envelope version {} is not supported by this coffer", sealed[6]));
    }
    if sealed[7] != kind as u8 {
        return Err(format!("holds object kind {} where kind {} was expected", sealed[7], kind as u8));
    }
    let cipher = Cipher::from_byte(sealed[8]).ok_or_else(|| format!("unknown cipher byte {}", sealed[8]))?;
    let salt = &sealed[HEADER_LEN..HEADER_LEN + KEY_LEN];
    let key = AeadKey::new(cipher, &data_key.derive(KEY_CONTEXT, salt));
    key.open(Nonce::new(0, 0), &sealed[..HEADER_LEN], &sealed[HEADER_LEN + KEY_LEN..])
        .ok_or_else(|| "authentication failed: the object was altered or truncated".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_tamper() {
        let k = Key::random();
        let s = seal(&k, Cipher::ChaCha20Poly1305, SealedKind::Snapshot, b"secret");
        assert_eq!(s.len(), 6 + OVERHEAD);
        assert_eq!(open(&k, SealedKind::Snapshot, &s).unwrap(), b"secret");
        assert!(open(&k, SealedKind::Index, &s).is_err());
        assert!(open(&Key::random(), SealedKind::Snapshot, &s).is_err());
        for i in 0..s.len() {
            let mut t = s.clone();
            t[i] ^= 0x40;
            assert!(open(&k, SealedKind::Snapshot, &t).is_err(), "flip at {i} undetected");
        }
        for n in 0..s.len() {
            assert!(open(&k, SealedKind::Snapshot, &s[..n]).is_err());
        }
    }

    #[test]
    fn two_seals_differ() {
        let k = Key::random();
        let a = seal(&k, Cipher::Aes256Gcm, SealedKind::Config, b"x");
        let b = seal(&k, Cipher::Aes256Gcm, SealedKind::Config, b"x");
        assert_ne!(a, b);
    }
}
