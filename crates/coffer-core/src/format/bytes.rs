//! Byte strings in JSON: a UTF-8 string when the bytes are valid UTF-8, otherwise
//! `{"hex": "<lowercase hex>"}`. File names, symlink targets and extended attributes
//! need not be UTF-8 on Unix; this keeps them exact. See docs/design.md#trees.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An exact byte string with a readable JSON form.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Debug)]
pub struct Bytes(pub Vec<u8>);

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum Repr<'a> {
    Text(std::borrow::Cow<'a, str>),
    Hex { hex: String },
}

impl Serialize for Bytes {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match std::str::from_utf8(&self.0) {
            Ok(t) => Repr::Text(t.into()).serialize(s),
            Err(_) => Repr::Hex { hex: hex::encode(&self.0) }.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Repr::deserialize(d)? {
            Repr::Text(t) => Ok(Bytes(t.into_owned().into_bytes())),
            Repr::Hex { hex } => hex::decode(hex).map(Bytes).map_err(serde::de::Error::custom),
        }
    }
}

impl From<&[u8]> for Bytes {
    fn from(b: &[u8]) -> Self {
        Bytes(b.to_vec())
    }
}

impl Bytes {
    /// A lossy rendering for display.
    pub fn display(&self) -> String {
        String::from_utf8_lossy(&self.0).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_and_binary_round_trip() {
        for b in [b"plain".to_vec(), vec![0x66, 0xff, 0x00, 0x80], Vec::new()] {
            let json = serde_json::to_string(&Bytes(b.clone())).unwrap();
            assert_eq!(serde_json::from_str::<Bytes>(&json).unwrap().0, b);
        }
        assert_eq!(serde_json::to_string(&Bytes(b"a".to_vec())).unwrap(), "\"a\"");
        assert_eq!(serde_json::to_string(&Bytes(vec![0xff])).unwrap(), "{\"hex\":\"ff\"}");
    }
}
