//! 32-byte object and blob identifiers, shown as lowercase hex.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Length of every id in bytes.
pub const ID_LEN: usize = 32;

/// An object or blob id: a BLAKE3 hash (keyed for blobs, unkeyed for stored objects).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Id(pub [u8; ID_LEN]);

impl Id {
    /// The unkeyed BLAKE3 hash of `data`: the name of a stored object.
    pub fn hash_of(data: &[u8]) -> Id {
        Id(*blake3::hash(data).as_bytes())
    }

    /// Full lowercase hex.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// The first eight hex digits, for display.
    pub fn short(&self) -> String {
        hex::encode(&self.0[..4])
    }

    /// Parses 64 hex digits.
    pub fn from_hex(s: &str) -> Option<Id> {
        let mut out = [0u8; ID_LEN];
        hex::decode_to_slice(s, &mut out).ok()?;
        Some(Id(out))
    }

    /// Reads an id from the first 32 bytes of `b`, if there are that many.
    pub fn from_slice(b: &[u8]) -> Option<Id> {
        Some(Id(b.get(..ID_LEN)?.try_into().ok()?))
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Id({})", self.short())
    }
}

impl Serialize for Id {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_hex())
    }
}

impl<'de> Deserialize<'de> for Id {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Id::from_hex(&s).ok_or_else(|| serde::de::Error::custom("id is not 64 hex digits"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip() {
        let id = Id::hash_of(b"abc");
        assert_eq!(Id::from_hex(&id.to_hex()), Some(id));
        assert_eq!(id.short().len(), 8);
        assert!(Id::from_hex("zz").is_none());
        assert!(Id::from_hex(&"0".repeat(63)).is_none());
    }
}
