//! Sealed objects: the encryption envelope of `config`, index files, snapshots and
//! the other small objects. See docs/design.md#sealed-objects.
//!
//! ```text
//! magic "coffer" (6) | version 0x02 | kind (1) | cipher (1) | epoch u16 LE (2) | salt (32) | ciphertext | tag (16)
//! ```
//! The key is `data_key[epoch].derive("coffer v1 object", salt)`, unique per object
//! since the salt is 32 random bytes, so the single nonce `Nonce::new(0, 0)` is never
//! reused. The first 11 bytes (the header) are the associated data, so the epoch
//! cannot be changed without failing authentication.

use crate::crypto::{AeadKey, Cipher, DataKeys, Epoch, KEY_LEN, Key, Nonce, TAG_LEN, random_array};

/// The six magic bytes that open every sealed object.
pub const MAGIC: &[u8; 6] = b"coffer";
/// Version byte of the envelope layout.
pub const VERSION: u8 = 2;
/// Length of the plaintext header (magic, version, kind, cipher, epoch): the
/// associated data.
pub const HEADER_LEN: usize = 11;
/// Offset of the epoch (u16 LE) in the header.
pub const EPOCH_OFFSET: usize = 9;
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
    /// A layout: the backends a repository spans.
    Layout = 8,
}

/// Encrypts `plaintext` into a sealed object of `kind` under `data_key`, the data
/// key of `epoch`.
pub fn seal(data_key: &Key, epoch: Epoch, cipher: Cipher, kind: SealedKind, plaintext: &[u8]) -> Vec<u8> {
    let salt: [u8; KEY_LEN] = random_array();
    let mut out = Vec::with_capacity(plaintext.len() + OVERHEAD);
    out.extend_from_slice(MAGIC);
    out.push(VERSION);
    out.push(kind as u8);
    out.push(cipher.to_byte());
    out.extend_from_slice(&epoch.to_le_bytes());
    out.extend_from_slice(&salt);
    let key = AeadKey::new(cipher, &data_key.derive(KEY_CONTEXT, &salt));
    let ct = key.seal(Nonce::new(0, 0), &out[..HEADER_LEN], plaintext);
    out.extend_from_slice(&ct);
    out
}

/// The data key epoch a sealed object's header names, if it is long enough to have
/// one. Not authenticated until the object is opened.
pub fn epoch(sealed: &[u8]) -> Option<Epoch> {
    Some(u16::from_le_bytes(sealed.get(EPOCH_OFFSET..HEADER_LEN)?.try_into().ok()?))
}

/// Authenticates and decrypts a sealed object, checking that it is of `kind`, with
/// the data key of the epoch its header names. The error says what is wrong, for
/// the caller to name the object.
pub fn open(data_keys: &DataKeys, kind: SealedKind, sealed: &[u8]) -> Result<Vec<u8>, String> {
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
    let data_key = data_keys.for_epoch(epoch(sealed).expect("length checked"))?;
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
        let keys = DataKeys::new(Key::random());
        let k = keys.current().1;
        let s = seal(k, 0, Cipher::ChaCha20Poly1305, SealedKind::Snapshot, b"secret");
        assert_eq!(s.len(), 6 + OVERHEAD);
        assert_eq!(OVERHEAD, 59);
        assert_eq!(open(&keys, SealedKind::Snapshot, &s).unwrap(), b"secret");
        assert!(open(&keys, SealedKind::Index, &s).is_err());
        assert!(open(&DataKeys::new(Key::random()), SealedKind::Snapshot, &s).is_err());
        for i in 0..s.len() {
            let mut t = s.clone();
            t[i] ^= 0x40;
            assert!(open(&keys, SealedKind::Snapshot, &t).is_err(), "flip at {i} undetected");
        }
        for n in 0..s.len() {
            assert!(open(&keys, SealedKind::Snapshot, &s[..n]).is_err());
        }
    }

    #[test]
    fn header_layout() {
        let keys = DataKeys::new(Key::random()).rotated().unwrap().rotated().unwrap();
        let s = seal(keys.get(2).unwrap(), 2, Cipher::Aes256Gcm, SealedKind::Index, b"x");
        assert_eq!(&s[..6], b"coffer");
        assert_eq!(s[6], 2, "envelope version");
        assert_eq!(s[7], SealedKind::Index as u8);
        assert_eq!(s[8], Cipher::Aes256Gcm.to_byte());
        assert_eq!(&s[9..11], &[2, 0], "epoch u16 LE");
        assert_eq!(epoch(&s), Some(2));
        assert_eq!(s.len(), HEADER_LEN + 32 + 1 + 16);
    }

    #[test]
    fn each_epoch_opens_with_its_own_key() {
        let keys = DataKeys::new(Key::random()).rotated().unwrap();
        for e in 0..=1u16 {
            let s = seal(keys.get(e).unwrap(), e, Cipher::Aes256Gcm, SealedKind::Snapshot, b"hello");
            assert_eq!(epoch(&s), Some(e));
            assert_eq!(open(&keys, SealedKind::Snapshot, &s).unwrap(), b"hello");
        }
        // Sealed with the right key but labelled with the other epoch: a different key
        // is derived, and the label is in the associated data as well.
        let s = seal(keys.get(1).unwrap(), 0, Cipher::Aes256Gcm, SealedKind::Snapshot, b"hello");
        assert!(open(&keys, SealedKind::Snapshot, &s).is_err());
    }

    #[test]
    fn unknown_epoch_is_rejected_by_name() {
        let rotated = DataKeys::new(Key::random()).rotated().unwrap();
        let s = seal(rotated.get(1).unwrap(), 1, Cipher::ChaCha20Poly1305, SealedKind::Index, b"new data");
        let old = DataKeys::from_vec(vec![rotated.get(0).unwrap().clone()]).unwrap();
        let err = open(&old, SealedKind::Index, &s).unwrap_err();
        assert!(err.contains("epoch 1"), "{err}");
        assert!(err.contains("predates a key rotation"), "{err}");
    }

    #[test]
    fn tampered_epoch_fails_authentication() {
        // Both epochs are held, so the altered epoch selects a real key: what rejects
        // the object is the tag, over a header that is associated data.
        let keys = DataKeys::new(Key::random()).rotated().unwrap();
        for (from, to) in [(0u16, 1u16), (1, 0)] {
            let mut s = seal(keys.get(from).unwrap(), from, Cipher::Aes256Gcm, SealedKind::Snapshot, b"x");
            s[EPOCH_OFFSET..HEADER_LEN].copy_from_slice(&to.to_le_bytes());
            let err = open(&keys, SealedKind::Snapshot, &s).unwrap_err();
            assert!(err.contains("authentication failed"), "{err}");
        }
        // Even where two epochs had the same key, the header alone would tell them apart.
        let k = Key::random();
        let same = DataKeys::from_vec(vec![k.clone(), k.clone()]).unwrap();
        let mut s = seal(&k, 0, Cipher::ChaCha20Poly1305, SealedKind::Index, b"x");
        assert!(open(&same, SealedKind::Index, &s).is_ok());
        s[EPOCH_OFFSET] = 1;
        assert!(open(&same, SealedKind::Index, &s).unwrap_err().contains("authentication failed"));
    }

    #[test]
    fn version_1_envelopes_are_refused() {
        let keys = DataKeys::new(Key::random());
        let mut s = seal(keys.current().1, 0, Cipher::Aes256Gcm, SealedKind::Config, b"x");
        s[6] = 1;
        assert!(open(&keys, SealedKind::Config, &s).unwrap_err().contains("version 1"));
    }

    #[test]
    fn two_seals_differ() {
        let k = Key::random();
        let a = seal(&k, 0, Cipher::Aes256Gcm, SealedKind::Config, b"x");
        let b = seal(&k, 0, Cipher::Aes256Gcm, SealedKind::Config, b"x");
        assert_ne!(a, b);
    }
}
