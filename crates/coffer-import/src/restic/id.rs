//! Object and blob ids: 32-byte SHA-256 hashes, written as 64 lowercase hex digits.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};
use sha2::{Digest, Sha256};

/// A 32-byte id: of a stored file (the hash of its bytes as stored) or of a blob (the hash
/// of its plaintext).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Id(pub [u8; 32]);

/// The id of a blob: SHA-256 of its plaintext.
pub type BlobId = Id;
/// The id of a pack file: SHA-256 of the file's bytes.
pub type PackId = Id;
/// The id of a snapshot file: SHA-256 of the file's bytes.
pub type SnapshotId = Id;

impl Id {
    /// Parses 64 hex digits (either case).
    pub fn parse(s: &str) -> Option<Id> {
        if s.len() != 64 {
            return None;
        }
        let mut out = [0u8; 32];
        hex::decode_to_slice(s, &mut out).ok()?;
        Some(Id(out))
    }

    /// SHA-256 of `data`.
    pub fn hash(data: &[u8]) -> Id {
        Id(Sha256::digest(data).into())
    }

    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// The first 8 hex digits, as restic's short ids.
    pub fn short(&self) -> String {
        hex::encode(&self.0[..4])
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Id({})", self.to_hex())
    }
}

impl<'de> Deserialize<'de> for Id {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Id, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Id;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an id of 64 hex digits")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Id, E> {
                Id::parse(s).ok_or_else(|| E::custom(format!("invalid id {s:?}")))
            }
        }
        d.deserialize_str(V)
    }
}
