//! Writer signatures: Ed25519 (RFC 8032) through `ring`. See docs/design.md#signatures.
//!
//! Every writer (a user on a host) has its own key pair. The secret seed never
//! enters the repository; the public key is registered there (see
//! [`crate::format::writer`]). Verification checks one signature at a time, never
//! in batches, so a bad signature costs what a good one costs and cannot change the
//! verdict on another.

use ring::signature::{self, Ed25519KeyPair, KeyPair};
use zeroize::{Zeroize, ZeroizeOnDrop};

/// Length of a public key.
pub const PUBLIC_KEY_LEN: usize = 32;
/// Length of a signature.
pub const SIGNATURE_LEN: usize = 64;
/// Length of a secret seed.
pub const SEED_LEN: usize = 32;

/// An Ed25519 public key.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PublicKey(pub [u8; PUBLIC_KEY_LEN]);

impl PublicKey {
    /// Lowercase hex.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// Parses 64 hex digits.
    pub fn from_hex(s: &str) -> Option<PublicKey> {
        let mut out = [0u8; PUBLIC_KEY_LEN];
        hex::decode_to_slice(s, &mut out).ok()?;
        Some(PublicKey(out))
    }

    /// The first eight hex digits, for display.
    pub fn short(&self) -> String {
        hex::encode(&self.0[..4])
    }

    /// Whether `sig` is this key's valid signature of `msg` (RFC 8032 §5.1.7, with
    /// `S` required to be below the group order). A weak key (see
    /// [`PublicKey::is_weak`]) verifies nothing.
    pub fn verify(&self, msg: &[u8], sig: &[u8]) -> bool {
        sig.len() == SIGNATURE_LEN
            && !self.is_weak()
            && signature::UnparsedPublicKey::new(&signature::ED25519, self.0).verify(msg, sig).is_ok()
    }

    /// Whether the key is a point of small order or a non-canonical encoding. With a
    /// small-order key, signatures can be made without any secret (the identity key
    /// "verifies" `R = identity, S = 0` for every message), and the verifier underneath
    /// does not refuse them, so coffer does. No key derived from a seed is weak.
    pub fn is_weak(&self) -> bool {
        let mut y = self.0;
        y[31] &= 0x7f;
        // y >= p = 2^255 - 19: not a canonical field element.
        let non_canonical = y[31] == 0x7f && y[1..31].iter().all(|&b| b == 0xff) && y[0] >= 0xed;
        // The y-coordinates of the eight points of small order: 1 (order 1), p - 1
        // (order 2), 0 (order 4), and the two of the order-8 points.
        const SMALL_ORDER_Y: [[u8; 32]; 5] = [
            [1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            [
                0xec, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f,
            ],
            [0; 32],
            [
                0x26, 0xe8, 0x95, 0x8f, 0xc2, 0xb2, 0x27, 0xb0, 0x45, 0xc3, 0xf4, 0x89, 0xf2, 0xef, 0x98, 0xf0, 0xd5,
                0xdf, 0xac, 0x05, 0xd3, 0xc6, 0x33, 0x39, 0xb1, 0x38, 0x02, 0x88, 0x6d, 0x53, 0xfc, 0x05,
            ],
            [
                0xc7, 0x17, 0x6a, 0x70, 0x3d, 0x4d, 0xd8, 0x4f, 0xba, 0x3c, 0x0b, 0x76, 0x0d, 0x10, 0x67, 0x0f, 0x2a,
                0x20, 0x53, 0xfa, 0x2c, 0x39, 0xcc, 0xc6, 0x4e, 0xc7, 0xfd, 0x77, 0x92, 0xac, 0x03, 0x7a,
            ],
        ];
        non_canonical || SMALL_ORDER_Y.contains(&y)
    }
}

impl std::fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PublicKey({})", self.to_hex())
    }
}

impl serde::Serialize for PublicKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_hex())
    }
}

impl<'de> serde::Deserialize<'de> for PublicKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        PublicKey::from_hex(&s).ok_or_else(|| serde::de::Error::custom("public key is not 64 hex digits"))
    }
}

/// A writer's secret signing key: the 32-byte seed of RFC 8032, wiped on drop.
#[derive(Zeroize, ZeroizeOnDrop)]
pub struct SigningKey {
    seed: [u8; SEED_LEN],
    #[zeroize(skip)]
    public: PublicKey,
}

impl SigningKey {
    /// A new key from the operating system's CSPRNG.
    pub fn generate() -> SigningKey {
        Self::from_seed(&crate::crypto::random_array())
    }

    /// The key with this seed.
    pub fn from_seed(seed: &[u8; SEED_LEN]) -> SigningKey {
        let pair = Ed25519KeyPair::from_seed_unchecked(seed).expect("every 32-byte seed is a valid Ed25519 key");
        let public = PublicKey(pair.public_key().as_ref().try_into().expect("public keys are 32 bytes"));
        SigningKey { seed: *seed, public }
    }

    /// The seed, for storing in the writer's local key file.
    pub fn seed(&self) -> &[u8; SEED_LEN] {
        &self.seed
    }

    /// The public half.
    pub fn public(&self) -> PublicKey {
        self.public
    }

    /// Signs `msg` (deterministic, RFC 8032 §5.1.6).
    pub fn sign(&self, msg: &[u8]) -> [u8; SIGNATURE_LEN] {
        let pair = Ed25519KeyPair::from_seed_unchecked(&self.seed).expect("seed checked at creation");
        pair.sign(msg).as_ref().try_into().expect("signatures are 64 bytes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sign_and_verify() {
        let k = SigningKey::generate();
        let sig = k.sign(b"message");
        assert!(k.public().verify(b"message", &sig));
        assert!(!k.public().verify(b"messagf", &sig));
        let mut bad = sig;
        bad[10] ^= 1;
        assert!(!k.public().verify(b"message", &bad));
        assert!(!k.public().verify(b"message", &sig[..63]));
        assert!(!SigningKey::generate().public().verify(b"message", &sig));
    }

    #[test]
    fn seed_round_trip() {
        let k = SigningKey::generate();
        let k2 = SigningKey::from_seed(k.seed());
        assert_eq!(k.public(), k2.public());
        assert_eq!(k.sign(b"x"), k2.sign(b"x"));
    }
}
