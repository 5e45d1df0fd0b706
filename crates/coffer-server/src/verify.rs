//! What the server checks on every upload, without any data key
//! (docs/design.md#server): the name is the BLAKE3 hash of the body for every
//! content-named kind; every sealed kind starts with coffer's envelope header
//! with the kind byte of its prefix; snapshots and tombstones carry a version 1
//! signature block whose key is strong, on the allow-list, and verifies (one
//! signature at a time). A session marker may instead be the fixed bytes of an
//! opening marker. Size limits are checked by the caller before the body is
//! read.

use coffer_core::format::{ObjectKind, envelope, session, signed};

use crate::writers::AllowList;

/// An upload the server refuses, with the reason in words.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{name}: {reason}")]
pub struct Refused {
    /// The object name.
    pub name: String,
    /// Why.
    pub reason: String,
}

/// The envelope's kind byte for `kind`, for the kinds that are sealed.
fn sealed_kind(kind: ObjectKind) -> Option<u8> {
    Some(match kind {
        ObjectKind::Config => 1,
        ObjectKind::Index => 2,
        ObjectKind::Snapshot => 3,
        ObjectKind::Writer => 4,
        ObjectKind::Tombstone => 5,
        ObjectKind::Session => 6,
        ObjectKind::PruneNotice => 7,
        ObjectKind::Layout => 8,
        ObjectKind::Key | ObjectKind::Pack => return None,
    })
}

/// Checks the content hash: `hash` (BLAKE3 of the body) must be the name's id.
pub fn check_hash(name: &str, id: Option<&str>, hash: &blake3::Hash) -> Result<(), Refused> {
    match id {
        Some(id) if id != hash.to_hex().as_str() => Err(Refused {
            name: name.to_string(),
            reason: format!(
                "the body's BLAKE3 hash is {}, not the name's id: objects are named by the hash of their bytes",
                hash.to_hex()
            ),
        }),
        _ => Ok(()),
    }
}

/// Checks the structure of a sealed or signed object's `body` (the whole
/// object) of `kind`, and the signature of snapshots and tombstones.
pub fn check_structure(name: &str, kind: ObjectKind, body: &[u8], allow: &AllowList) -> Result<(), Refused> {
    let refuse = |reason: String| Err(Refused { name: name.to_string(), reason });
    let Some(kind_byte) = sealed_kind(kind) else { return Ok(()) };
    // A backup's opening marker, written before its keys are derived.
    if kind == ObjectKind::Session && body == session::OPENING {
        return Ok(());
    }
    let signed_kind = matches!(kind, ObjectKind::Snapshot | ObjectKind::Tombstone);
    let sealed = if signed_kind {
        let (sealed, block) = match signed::split(body) {
            Ok(s) => s,
            Err(e) => return refuse(format!("malformed signature block: {e}")),
        };
        let Some(block) = block else {
            return refuse(format!(
                "unsigned {}: this server accepts only snapshots and tombstones signed by an allowed writer",
                kind.noun()
            ));
        };
        if block.public_key.is_weak() {
            return refuse("the signing key is weak (small order or non-canonical) and verifies nothing".into());
        }
        if !allow.contains(&block.public_key) {
            return refuse(format!(
                "signed by writer {}, which is not on this server's allow-list; if it is yours, run \
                 `coffer serve writer allow {}` on the server (`coffer writers` on the client prints the key)",
                block.public_key.to_hex(),
                block.public_key.to_hex()
            ));
        }
        if !block.verify(sealed) {
            return refuse(format!("the signature by writer {} does not verify", block.public_key.to_hex()));
        }
        sealed
    } else {
        body
    };
    if sealed.len() < envelope::OVERHEAD {
        return refuse(format!(
            "{} bytes is shorter than a sealed object ({} bytes)",
            sealed.len(),
            envelope::OVERHEAD
        ));
    }
    if &sealed[..6] != envelope::MAGIC || sealed[6] != envelope::VERSION {
        return refuse("does not start with coffer's version 2 envelope header".into());
    }
    if sealed[7] != kind_byte {
        return refuse(format!(
            "the envelope's kind byte is {}, but {} under this prefix have kind {kind_byte}",
            sealed[7],
            kind.noun()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::writers::AllowedWriter;
    use coffer_core::crypto::sign::SigningKey;

    fn sealed(kind: u8) -> Vec<u8> {
        let mut b = envelope::MAGIC.to_vec();
        b.push(envelope::VERSION);
        b.push(kind);
        b.resize(envelope::OVERHEAD + 10, 7);
        b
    }

    fn allow(k: &SigningKey) -> AllowList {
        AllowList { writers: vec![AllowedWriter { public_key: k.public().to_hex(), note: String::new() }] }
    }

    #[test]
    fn signed_objects() {
        let k = SigningKey::generate();
        let good = signed::sign(sealed(3), &[0; 32], &k);
        assert_eq!(check_structure("s", ObjectKind::Snapshot, &good, &allow(&k)), Ok(()));
        // Unknown writer, unsigned, forged, wrong kind, garbage.
        let e = check_structure("s", ObjectKind::Snapshot, &good, &AllowList::default()).unwrap_err();
        assert!(e.reason.contains(&k.public().to_hex()), "{e}");
        assert!(
            check_structure("s", ObjectKind::Snapshot, &sealed(3), &allow(&k)).unwrap_err().reason.contains("unsigned")
        );
        let mut forged = good.clone();
        forged[20] ^= 1;
        assert!(check_structure("s", ObjectKind::Snapshot, &forged, &allow(&k)).unwrap_err().reason.contains("verify"));
        let tomb = signed::sign(sealed(5), &[0; 32], &k);
        assert!(check_structure("s", ObjectKind::Snapshot, &tomb, &allow(&k)).unwrap_err().reason.contains("kind"));
        assert_eq!(check_structure("t", ObjectKind::Tombstone, &tomb, &allow(&k)), Ok(()));
        assert!(check_structure("i", ObjectKind::Index, b"short", &allow(&k)).is_err());
        assert!(check_structure("i", ObjectKind::Index, &sealed(2), &allow(&k)).is_ok());
        assert!(check_structure("p", ObjectKind::Pack, b"anything", &allow(&k)).is_ok());
    }

    #[test]
    fn session_markers_are_sealed_or_opening() {
        let none = AllowList::default();
        assert!(check_structure("m", ObjectKind::Session, &sealed(6), &none).is_ok());
        assert!(check_structure("m", ObjectKind::Session, session::OPENING, &none).is_ok());
        // Those bytes under another prefix, or anything else, are refused.
        assert!(check_structure("i", ObjectKind::Index, session::OPENING, &none).is_err());
        let mut other = session::OPENING.to_vec();
        other.push(b'x');
        assert!(check_structure("m", ObjectKind::Session, &other, &none).is_err());
    }

    #[test]
    fn hashes() {
        let h = blake3::hash(b"x");
        assert!(check_hash("n", Some(h.to_hex().as_str()), &h).is_ok());
        assert!(check_hash("n", Some(&"0".repeat(64)), &h).is_err());
        assert!(check_hash("config", None, &h).is_ok());
    }
}
