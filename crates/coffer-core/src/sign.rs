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
    /// `S` required to be below the group order).
    pub fn verify(&self, msg: &[u8], sig: &[u8]) -> bool {
        sig.len() == SIGNATURE_LEN
            && signature::UnparsedPublicKey::new(&signature::ED25519, self.0).verify(msg, sig).is_ok()
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
