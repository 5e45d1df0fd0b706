//! Cryptographic primitives: AEAD, key derivation, keyed blob ids, randomness.
//! See docs/design.md#cryptography.
//!
//! Two AEADs are supported, chosen per object and recorded in it by a cipher byte:
//! AES-256-GCM (used when the CPU has AES instructions) and ChaCha20-Poly1305.
//! Both come from `ring`, whose tag comparison is constant-time. Nonces are never
//! random inside a key's lifetime: every key that encrypts more than one message is
//! a fresh subkey derived from a random 32-byte salt, and the messages under it get
//! distinct counter nonces (see [`Nonce`]).

mod lanes;
pub mod sign;

use ring::aead::{self, Aad, LessSafeKey, UnboundKey};
use serde::{Deserialize, Serialize};
use zeroize::{Zeroize, ZeroizeOnDrop};

use crate::id::Id;

/// Bytes a seal adds to its plaintext (the authentication tag).
pub const TAG_LEN: usize = 16;
/// Length of every nonce.
pub const NONCE_LEN: usize = 12;
/// Length of every symmetric key and of every salt.
pub const KEY_LEN: usize = 32;

/// An AEAD algorithm, stored as one byte in every object it encrypts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Cipher {
    /// AES-256-GCM (NIST SP 800-38D).
    Aes256Gcm,
    /// ChaCha20-Poly1305 (RFC 8439).
    #[serde(rename = "chacha20-poly1305")]
    ChaCha20Poly1305,
}

impl Cipher {
    /// The byte that names this cipher in stored objects.
    pub fn to_byte(self) -> u8 {
        match self {
            Cipher::Aes256Gcm => 1,
            Cipher::ChaCha20Poly1305 => 2,
        }
    }

    /// Parses a cipher byte.
    pub fn from_byte(b: u8) -> Option<Cipher> {
        match b {
            1 => Some(Cipher::Aes256Gcm),
            2 => Some(Cipher::ChaCha20Poly1305),
            _ => None,
        }
    }

    /// AES-256-GCM when this CPU accelerates it, ChaCha20-Poly1305 otherwise.
    pub fn preferred() -> Cipher {
        if aes_accelerated() { Cipher::Aes256Gcm } else { Cipher::ChaCha20Poly1305 }
    }

    fn algorithm(self) -> &'static aead::Algorithm {
        match self {
            Cipher::Aes256Gcm => &aead::AES_256_GCM,
            Cipher::ChaCha20Poly1305 => &aead::CHACHA20_POLY1305,
        }
    }
}

#[cfg(target_arch = "x86_64")]
fn aes_accelerated() -> bool {
    std::arch::is_x86_feature_detected!("aes") && std::arch::is_x86_feature_detected!("pclmulqdq")
}

#[cfg(target_arch = "aarch64")]
fn aes_accelerated() -> bool {
    std::arch::is_aarch64_feature_detected!("aes") && std::arch::is_aarch64_feature_detected!("pmull")
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn aes_accelerated() -> bool {
    false
}

/// A 256-bit secret key; wiped from memory when dropped and never printed.
#[derive(Clone, PartialEq, Eq, Zeroize, ZeroizeOnDrop)]
pub struct Key(pub [u8; KEY_LEN]);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(<secret>)")
    }
}

impl Key {
    /// A fresh random key.
    pub fn random() -> Key {
        Key(random_array())
    }

    /// Derives a purpose-bound subkey: BLAKE3 `derive_key(context, self || salt)`.
    /// Distinct contexts make keys for distinct purposes independent.
    pub fn derive(&self, context: &str, salt: &[u8]) -> Key {
        let mut h = blake3::Hasher::new_derive_key(context);
        h.update(&self.0);
        h.update(salt);
        Key(*h.finalize().as_bytes())
    }
}

/// A data key's epoch: 0 for the key made at `init`, one more at every rotation.
/// Objects sealed with a data-key-derived subkey record it. See docs/design.md#master-keys.
pub type Epoch = u16;

/// The data keys a key file holds, by epoch: the key of epoch `e` is the `e`-th, and
/// the last is current (new objects are sealed with it). Never empty.
#[derive(Clone, PartialEq, Eq)]
pub struct DataKeys(Vec<Key>);

impl std::fmt::Debug for DataKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DataKeys(<{} secrets>)", self.0.len())
    }
}

impl DataKeys {
    /// The most epochs there can be: epochs are u16.
    pub const MAX: usize = 1 << 16;

    /// Only the key of epoch 0.
    pub fn new(first: Key) -> DataKeys {
        DataKeys(vec![first])
    }

    /// The keys of epochs `0..keys.len()`; fails if there are none or too many.
    pub fn from_vec(keys: Vec<Key>) -> Result<DataKeys, String> {
        if keys.is_empty() || keys.len() > Self::MAX {
            return Err(format!("{} data keys; there must be 1 to {}", keys.len(), Self::MAX));
        }
        Ok(DataKeys(keys))
    }

    /// All keys, by epoch.
    pub fn as_slice(&self) -> &[Key] {
        &self.0
    }

    /// The key of `epoch`, if held.
    pub fn get(&self, epoch: Epoch) -> Option<&Key> {
        self.0.get(epoch as usize)
    }

    /// The key of `epoch`, or a message naming the epoch for the caller to report as
    /// damage: an object under an epoch not held was sealed after a rotation that the
    /// key file used predates (or its epoch field was altered).
    pub fn for_epoch(&self, epoch: Epoch) -> Result<&Key, String> {
        self.get(epoch).ok_or_else(|| {
            format!(
                "sealed under data key epoch {epoch}, but the key file that opened the repository holds epochs \
                 0 to {} only (it predates a key rotation, or the epoch was altered); open the repository with \
                 a passphrase added after the rotation",
                self.current().0
            )
        })
    }

    /// The current epoch and its key: what new objects are sealed with.
    pub fn current(&self) -> (Epoch, &Key) {
        let last = self.0.len() - 1;
        (last as Epoch, &self.0[last])
    }

    /// These keys and a fresh random one for the next epoch, which becomes current.
    pub fn rotated(&self) -> Result<DataKeys, String> {
        if self.0.len() >= Self::MAX {
            return Err(format!("all {} data key epochs are used", Self::MAX));
        }
        let mut keys = self.0.clone();
        keys.push(Key::random());
        Ok(DataKeys(keys))
    }
}

/// A 96-bit AEAD nonce built from a domain word and a counter, so that nonces under
/// one key are distinct by construction: `domain (u32 LE) || counter (u64 LE)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Nonce(pub [u8; NONCE_LEN]);

impl Nonce {
    /// The nonce for `domain` and `counter`.
    pub fn new(domain: u32, counter: u64) -> Nonce {
        let mut n = [0u8; NONCE_LEN];
        n[..4].copy_from_slice(&domain.to_le_bytes());
        n[4..].copy_from_slice(&counter.to_le_bytes());
        Nonce(n)
    }
}

/// A key ready for sealing and opening with one cipher.
pub struct AeadKey {
    key: LessSafeKey,
    cipher: Cipher,
}

impl AeadKey {
    /// Prepares `key` for `cipher`.
    pub fn new(cipher: Cipher, key: &Key) -> AeadKey {
        let unbound = UnboundKey::new(cipher.algorithm(), &key.0).expect("key length is 32");
        AeadKey { key: LessSafeKey::new(unbound), cipher }
    }

    /// The cipher this key is for.
    pub fn cipher(&self) -> Cipher {
        self.cipher
    }

    /// Encrypts `buf` in place and appends the tag. The caller guarantees that
    /// `nonce` is never used twice with this key.
    pub fn seal_in_place(&self, nonce: Nonce, aad: &[u8], buf: &mut Vec<u8>) {
        self.seal_suffix(nonce, aad, buf, 0);
    }

    /// Encrypts `buf[start..]` in place and appends the tag, leaving `buf[..start]`
    /// untouched: lets a pack seal each blob where it lies, without a copy.
    pub fn seal_suffix(&self, nonce: Nonce, aad: &[u8], buf: &mut Vec<u8>, start: usize) {
        let tag = self
            .key
            .seal_in_place_separate_tag(aead::Nonce::assume_unique_for_key(nonce.0), Aad::from(aad), &mut buf[start..])
            .expect("plaintext length within AEAD limits");
        buf.extend_from_slice(tag.as_ref());
    }

    /// Encrypts `plaintext` into a new buffer: ciphertext || tag.
    pub fn seal(&self, nonce: Nonce, aad: &[u8], plaintext: &[u8]) -> Vec<u8> {
        let mut buf = Vec::with_capacity(plaintext.len() + TAG_LEN);
        buf.extend_from_slice(plaintext);
        self.seal_in_place(nonce, aad, &mut buf);
        buf
    }

    /// Authenticates and decrypts `ciphertext || tag`; `None` if anything was altered
    /// or the key is wrong.
    pub fn open(&self, nonce: Nonce, aad: &[u8], sealed: &[u8]) -> Option<Vec<u8>> {
        let mut buf = sealed.to_vec();
        let len = self.open_in_place(nonce, aad, &mut buf)?.len();
        buf.truncate(len);
        Some(buf)
    }

    /// Authenticates and decrypts `ciphertext || tag` where it lies; returns the
    /// plaintext (the front of `sealed`), or `None` if anything was altered or the
    /// key is wrong (`sealed` then holds nothing usable).
    pub fn open_in_place<'a>(&self, nonce: Nonce, aad: &[u8], sealed: &'a mut [u8]) -> Option<&'a mut [u8]> {
        self.key.open_in_place(aead::Nonce::assume_unique_for_key(nonce.0), Aad::from(aad), sealed).ok()
    }
}

/// The keyed BLAKE3 id of a blob's plaintext. Without the id key, storage cannot
/// confirm a guess of a blob's content from its id.
pub fn blob_id(id_key: &Key, plaintext: &[u8]) -> Id {
    Id(*blake3::keyed_hash(&id_key.0, plaintext).as_bytes())
}

/// Parameters of the scrypt KDF, recorded in each key file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScryptParams {
    /// log2 of the CPU/memory cost N.
    pub log_n: u8,
    /// Block size r.
    pub r: u32,
    /// Parallelism p.
    pub p: u32,
}

impl ScryptParams {
    /// The default: N = 2^15, r = 8, p = 4: 32 MiB of memory and the work of
    /// N = 2^17, r = 8, p = 1 (a few hundred ms on a current core). Above the
    /// common recommendation's equivalent settings (N = 2^15, r = 8, p = 3), while
    /// keeping the memory an open takes from bounding coffer's peak memory.
    pub const DEFAULT: ScryptParams = ScryptParams { log_n: 15, r: 8, p: 4 };

    /// Checks that parameters read from a key file are in a range that can neither
    /// crash the process nor stall it for hours.
    pub fn validate(&self) -> Result<scrypt::Params, String> {
        let ScryptParams { log_n, r, p } = *self;
        let in_range = (1..=24).contains(&log_n) && (1..=64).contains(&r) && (1..=64).contains(&p);
        // Memory is 128 * r * N bytes; work is about p * r * N.
        let n = 1u128 << log_n.min(24);
        let (memory, work) = (128 * r as u128 * n, p as u128 * r as u128 * n);
        if !in_range || memory > MAX_SCRYPT_MEMORY || work > MAX_SCRYPT_WORK {
            return Err(format!(
                "scrypt parameters out of range (log_n {log_n}, r {r}, p {p}): at most {} MiB of memory and \
                 32 times the default work are accepted",
                MAX_SCRYPT_MEMORY >> 20
            ));
        }
        scrypt::Params::new(log_n, r, p).map_err(|e| format!("scrypt parameters invalid: {e}"))
    }
}

/// The most memory a key file may ask scrypt for (1 GiB): a planted key file must
/// not be able to exhaust memory.
pub const MAX_SCRYPT_MEMORY: u128 = 1 << 30;
/// The most work (p * r * N) a key file may ask for: 32 times the default.
pub const MAX_SCRYPT_WORK: u128 = 1 << 25;

/// Derives a key-encryption key from a passphrase with scrypt.
pub fn scrypt_kdf(passphrase: &[u8], salt: &[u8], params: ScryptParams) -> Result<Key, String> {
    scrypt_kdf_on(passphrase, salt, params, 1)
}

/// [`scrypt_kdf`] with its lanes on up to `threads` threads, each holding one
/// lane's memory, as long as they hold at most [`SIDE_BY_SIDE_MEMORY`] together
/// (docs/design.md#key-derivation). On one thread, the `scrypt` crate runs.
pub fn scrypt_kdf_on(passphrase: &[u8], salt: &[u8], params: ScryptParams, threads: usize) -> Result<Key, String> {
    let p = params.validate()?;
    let lane_memory = 128 * params.r as u64 * (1u64 << params.log_n);
    let threads = threads.min(params.p as usize).min((SIDE_BY_SIDE_MEMORY / lane_memory) as usize);
    let mut out = [0u8; KEY_LEN];
    if threads > 1 {
        lanes::derive(passphrase, salt, params, threads, &mut out);
    } else {
        scrypt::scrypt(passphrase, salt, &p, &mut out).map_err(|e| e.to_string())?;
    }
    Ok(Key(out))
}

/// The most memory the lanes of a key derivation hold together when run side by
/// side: two lanes of the default parameters.
pub const SIDE_BY_SIDE_MEMORY: u64 = 64 << 20;

/// Fills an array from the operating system's CSPRNG.
pub fn random_array<const N: usize>() -> [u8; N] {
    let mut out = [0u8; N];
    getrandom::fill(&mut out).expect("the operating system's random source failed");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seal_open_round_trip_both_ciphers() {
        for cipher in [Cipher::Aes256Gcm, Cipher::ChaCha20Poly1305] {
            let k = AeadKey::new(cipher, &Key::random());
            let ct = k.seal(Nonce::new(0, 7), b"aad", b"hello");
            assert_eq!(ct.len(), 5 + TAG_LEN);
            assert_eq!(k.open(Nonce::new(0, 7), b"aad", &ct).unwrap(), b"hello");
            assert!(k.open(Nonce::new(0, 8), b"aad", &ct).is_none());
            assert!(k.open(Nonce::new(0, 7), b"aae", &ct).is_none());
            let mut bad = ct.clone();
            bad[0] ^= 1;
            assert!(k.open(Nonce::new(0, 7), b"aad", &bad).is_none());
        }
    }

    #[test]
    fn nonce_layout() {
        let n = Nonce::new(1, 0x0102);
        assert_eq!(n.0, [1, 0, 0, 0, 2, 1, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn derived_keys_differ_by_context_and_salt() {
        let k = Key::random();
        assert_ne!(k.derive("a", b"s"), k.derive("b", b"s"));
        assert_ne!(k.derive("a", b"s"), k.derive("a", b"t"));
        assert_eq!(k.derive("a", b"s"), k.derive("a", b"s"));
    }

    #[test]
    fn scrypt_rejects_absurd_params() {
        assert!(scrypt_kdf(b"p", b"s", ScryptParams { log_n: 40, r: 8, p: 1 }).is_err());
        assert!(scrypt_kdf(b"p", b"s", ScryptParams { log_n: 4, r: 0, p: 1 }).is_err());
        // Each parameter in range, together 16 GiB: refused.
        assert!(ScryptParams { log_n: 22, r: 32, p: 1 }.validate().is_err());
        assert!(ScryptParams { log_n: 17, r: 8, p: 64 }.validate().is_err());
        assert!(ScryptParams::DEFAULT.validate().is_ok());
        assert!(ScryptParams { log_n: 20, r: 8, p: 1 }.validate().is_ok());
    }

    #[test]
    fn data_keys_by_epoch() {
        let first = Key::random();
        let keys = DataKeys::new(first.clone());
        assert_eq!(keys.current(), (0, &first));
        let r = keys.rotated().unwrap();
        assert_eq!(r.current().0, 1);
        assert_eq!(r.get(0), Some(&first));
        assert_ne!(r.get(1), Some(&first));
        assert!(keys.for_epoch(1).unwrap_err().contains("epoch 1"));
        assert!(DataKeys::from_vec(vec![]).is_err());
        assert_eq!(format!("{r:?}"), "DataKeys(<2 secrets>)");
    }

    #[test]
    fn key_debug_hides_secret() {
        assert_eq!(format!("{:?}", Key([7; 32])), "Key(<secret>)");
    }
}
