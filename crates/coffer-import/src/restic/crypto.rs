//! The cryptography of restic's repository format, open-only.
//!
//! Every encrypted object is `IV (16 bytes) ‖ ciphertext ‖ MAC (16 bytes)`. The
//! ciphertext is AES-256 in counter mode (the IV is the initial 128-bit big-endian
//! counter block) under the 32-byte encryption key. The MAC is Poly1305-AES over the
//! ciphertext alone: Poly1305 with the 16-byte key `r` (clamped as Poly1305 requires) and,
//! as the one-time pad `s`, the IV encrypted with AES-128 under the 16-byte key `k`.
//! The MAC is checked, in constant time, before anything is decrypted.
//!
//! Passphrases become keys with scrypt: 64 bytes are derived, the first 32 the encryption
//! key, then `k` (16) and `r` (16).
//!
//! This module never encrypts, except through [`MasterKey::seal`] under the `testing`
//! feature, which tests use to plant objects.

use aes::cipher::{BlockEncrypt, KeyInit, KeyIvInit, StreamCipher};
use poly1305::Poly1305;
use subtle::ConstantTimeEq;
use zeroize::{Zeroize, ZeroizeOnDrop, Zeroizing};

type Aes256Ctr = ctr::Ctr128BE<aes::Aes256>;

/// Bytes of an IV.
pub const IV_LEN: usize = 16;
/// Bytes of a MAC.
pub const MAC_LEN: usize = 16;
/// What encryption adds to a plaintext: IV and MAC.
pub const OVERHEAD: usize = IV_LEN + MAC_LEN;

/// Why an encrypted object does not open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenError {
    /// Shorter than an IV and a MAC.
    TooShort,
    /// The MAC does not match: damaged, altered, or another key.
    Unauthenticated,
}

/// A set of keys: the encryption key and the two MAC keys. A repository's master key, or
/// the key derived from a passphrase that opens a key file. Wiped when dropped.
#[derive(Clone, Zeroize, ZeroizeOnDrop)]
pub struct MasterKey {
    encrypt: [u8; 32],
    mac_k: [u8; 16],
    mac_r: [u8; 16],
}

impl std::fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MasterKey(..)")
    }
}

impl MasterKey {
    pub fn new(encrypt: [u8; 32], mac_k: [u8; 16], mac_r: [u8; 16]) -> MasterKey {
        MasterKey { encrypt, mac_k, mac_r }
    }

    /// The keys of 64 derived bytes: encryption key, then `k`, then `r`.
    pub fn from_derived(bytes: &[u8; 64]) -> MasterKey {
        let mut k = MasterKey { encrypt: [0; 32], mac_k: [0; 16], mac_r: [0; 16] };
        k.encrypt.copy_from_slice(&bytes[..32]);
        k.mac_k.copy_from_slice(&bytes[32..48]);
        k.mac_r.copy_from_slice(&bytes[48..64]);
        k
    }

    /// True when none of the keys is all zeros (restic refuses such keys too).
    pub fn is_valid(&self) -> bool {
        self.encrypt.iter().any(|&b| b != 0) && self.mac_k.iter().any(|&b| b != 0) && self.mac_r.iter().any(|&b| b != 0)
    }

    fn mac(&self, iv: &[u8], ciphertext: &[u8]) -> [u8; 16] {
        let mut poly_key = Zeroizing::new([0u8; 32]);
        poly_key[..16].copy_from_slice(&self.mac_r);
        let aes = aes::Aes128::new(&self.mac_k.into());
        let mut block = aes::Block::clone_from_slice(iv);
        aes.encrypt_block(&mut block);
        poly_key[16..].copy_from_slice(&block);
        block.zeroize();
        let poly = Poly1305::new(poly1305::Key::from_slice(&poly_key[..]));
        let tag = poly.compute_unpadded(ciphertext);
        tag.into()
    }

    /// Authenticates and decrypts `IV ‖ ciphertext ‖ MAC`.
    pub fn open(&self, data: &[u8]) -> Result<Vec<u8>, OpenError> {
        if data.len() < OVERHEAD {
            return Err(OpenError::TooShort);
        }
        let (iv, rest) = data.split_at(IV_LEN);
        let (ciphertext, mac) = rest.split_at(rest.len() - MAC_LEN);
        let want = self.mac(iv, ciphertext);
        if !bool::from(want.ct_eq(mac)) {
            return Err(OpenError::Unauthenticated);
        }
        let mut plain = ciphertext.to_vec();
        let mut cipher = Aes256Ctr::new(&self.encrypt.into(), iv.into());
        cipher.apply_keystream(&mut plain);
        Ok(plain)
    }

    /// [`MasterKey::open`] of `data` in its own buffer: the plaintext is
    /// decrypted where the ciphertext lies and moved to the buffer's start, so
    /// reading a blob costs one buffer, not two.
    pub fn open_owned(&self, mut data: Vec<u8>) -> Result<Vec<u8>, OpenError> {
        if data.len() < OVERHEAD {
            return Err(OpenError::TooShort);
        }
        let end = data.len() - MAC_LEN;
        let (iv, rest) = data.split_at(IV_LEN);
        let (ciphertext, mac) = rest.split_at(end - IV_LEN);
        let want = self.mac(iv, ciphertext);
        if !bool::from(want.ct_eq(mac)) {
            return Err(OpenError::Unauthenticated);
        }
        let iv: [u8; IV_LEN] = data[..IV_LEN].try_into().expect("checked length");
        let mut cipher = Aes256Ctr::new(&self.encrypt.into(), (&iv).into());
        cipher.apply_keystream(&mut data[IV_LEN..end]);
        data.copy_within(IV_LEN..end, 0);
        data.truncate(end - IV_LEN);
        Ok(data)
    }

    /// Encrypts `plaintext` with `iv`: for tests only, which plant objects with it.
    #[cfg(any(test, feature = "testing"))]
    pub fn seal(&self, iv: &[u8; 16], plaintext: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(plaintext.len() + OVERHEAD);
        out.extend_from_slice(iv);
        let mut ct = plaintext.to_vec();
        let mut cipher = Aes256Ctr::new(&self.encrypt.into(), iv.into());
        cipher.apply_keystream(&mut ct);
        let mac = self.mac(iv, &ct);
        out.extend_from_slice(&ct);
        out.extend_from_slice(&mac);
        out
    }
}

/// scrypt's parameters as a key file states them, checked by [`crate::restic::keyfile`]
/// before they reach [`derive`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KdfParams {
    pub log_n: u8,
    pub r: u32,
    pub p: u32,
}

/// The 64 bytes scrypt derives from `password` and `salt`, as a key. The derived bytes
/// are wiped before returning.
pub fn derive(password: &[u8], salt: &[u8], params: KdfParams) -> Result<MasterKey, String> {
    let p = scrypt::Params::new(params.log_n, params.r, params.p)
        .map_err(|e| format!("scrypt refuses the parameters: {e}"))?;
    let mut out = Zeroizing::new([0u8; 64]);
    scrypt::scrypt(password, salt, &p, &mut out[..]).map_err(|e| format!("scrypt: {e}"))?;
    Ok(MasterKey::from_derived(&out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> MasterKey {
        let mut b = [0u8; 64];
        for (i, x) in b.iter_mut().enumerate() {
            *x = i as u8 + 1;
        }
        MasterKey::from_derived(&b)
    }

    #[test]
    fn round_trip_and_tamper() {
        let k = key();
        for len in [0usize, 1, 15, 16, 17, 100, 4097] {
            let plain: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
            let sealed = k.seal(&[9u8; 16], &plain);
            assert_eq!(sealed.len(), len + OVERHEAD);
            assert_eq!(k.open(&sealed).unwrap(), plain);
            assert_eq!(k.open_owned(sealed.clone()).unwrap(), plain);
            for i in [0, IV_LEN, sealed.len() - 1] {
                let mut bad = sealed.clone();
                bad[i] ^= 1;
                assert_eq!(k.open(&bad), Err(OpenError::Unauthenticated));
                assert_eq!(k.open_owned(bad), Err(OpenError::Unauthenticated));
            }
        }
        assert_eq!(k.open(&[0u8; 31]), Err(OpenError::TooShort));
        assert_eq!(k.open_owned(vec![0u8; 31]), Err(OpenError::TooShort));
    }

    // Values computed with restic 0.19.1's crypto (the Go implementation): scrypt with
    // N=1024, r=1, p=1 of password "coffer" and salt "0123456789abcdef" four times (the
    // derived 64 bytes, hex),
    // and the sealing of "hello restic" with those keys and the IV 00 01 .. 0f.
    const DERIVED_HEX: &str = include_str!("testdata/derived.hex");
    const SEALED_HEX: &str = include_str!("testdata/sealed.hex");
    const SALT: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn matches_restic() {
        let k = derive(b"coffer", SALT.as_bytes(), KdfParams { log_n: 10, r: 1, p: 1 }).unwrap();
        let mut d = [0u8; 64];
        hex::decode_to_slice(DERIVED_HEX.trim(), &mut d).unwrap();
        let want = MasterKey::from_derived(&d);
        assert_eq!(k.encrypt, want.encrypt);
        assert_eq!(k.mac_k, want.mac_k);
        assert_eq!(k.mac_r, want.mac_r);
        let sealed = hex::decode(SEALED_HEX.trim()).unwrap();
        assert_eq!(k.open(&sealed).unwrap(), b"hello restic");
        let iv: [u8; 16] = core::array::from_fn(|i| i as u8);
        assert_eq!(k.seal(&iv, b"hello restic"), sealed);
    }
}
