//! What the server checks on every upload, without any data key
//! (docs/design.md#server, "Upload verification"), as far as each kind allows:
//!
//! - every content-named kind: the name is the BLAKE3 hash of the body;
//! - every sealed kind: coffer's envelope header (magic, version 2, the kind
//!   byte of its prefix, a known cipher byte, epoch 0 for `config`) and a
//!   length that holds the header, the salt, the tag and a plaintext;
//! - snapshots, tombstones and layouts: a version 1 signature block whose key
//!   is strong, on the allow-list, and verifies (one signature at a time), with
//!   the commitment of 32 zero bytes that tombstones and layouts carry;
//! - key files (plaintext JSON): coffer-core's key-file decoder (version, KDF
//!   and its parameters within coffer's bounds, the salt's length) and wrapped
//!   keys of the length of 1 to 65,536 data keys;
//! - a session marker may instead be the fixed bytes of an opening marker.
//!
//! Size limits are checked by the caller before the body is read. Only the
//! kinds whose check reads every byte ([`needs_whole`]) are read whole; the
//! others are judged from their first [`HEAD_LEN`] bytes and their length.

use std::sync::OnceLock;

use coffer_core::crypto::{Cipher, ScryptParams, TAG_LEN};
use coffer_core::format::keyfile::{KeyFile, MasterKeys};
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

/// Bytes of an upload read for kinds judged by their start: the envelope
/// header, or a whole opening marker.
pub const HEAD_LEN: usize =
    if session::OPENING.len() > envelope::HEADER_LEN { session::OPENING.len() } else { envelope::HEADER_LEN };

/// The most data keys a key file wraps (epochs are a u16).
const MAX_DATA_KEYS: u64 = 1 << 16;

/// What the server holds of an upload when it checks it.
#[derive(Clone, Copy, Debug)]
pub enum Body<'a> {
    /// Every byte (the kinds of [`needs_whole`]).
    Whole(&'a [u8]),
    /// The first [`HEAD_LEN`] bytes (fewer if the object is shorter) and the
    /// object's length.
    Head {
        /// The first bytes.
        head: &'a [u8],
        /// The whole object's length.
        len: u64,
    },
}

/// Whether checking an object of `kind` needs all of its bytes: signatures
/// cover the whole object, and key files are parsed.
pub fn needs_whole(kind: ObjectKind) -> bool {
    matches!(kind, ObjectKind::Snapshot | ObjectKind::Tombstone | ObjectKind::Layout | ObjectKind::Key)
}

/// The envelope's kind byte for `kind`, for the kinds that are sealed.
fn sealed_kind(kind: ObjectKind) -> Option<u8> {
    use envelope::SealedKind as S;
    let sealed = match kind {
        ObjectKind::Config => S::Config,
        ObjectKind::Index => S::Index,
        ObjectKind::Snapshot => S::Snapshot,
        ObjectKind::Writer => S::Writer,
        ObjectKind::Tombstone => S::Tombstone,
        ObjectKind::Session => S::Session,
        ObjectKind::PruneNotice => S::PruneNotice,
        ObjectKind::Layout => S::Layout,
        ObjectKind::Key | ObjectKind::Pack => return None,
    };
    Some(sealed as u8)
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

/// Checks the structure of an object of `kind` (packs: nothing to check
/// without keys), and the signature of the signed kinds.
pub fn check_structure(name: &str, kind: ObjectKind, body: Body<'_>, allow: &AllowList) -> Result<(), Refused> {
    let refuse = |reason: String| Refused { name: name.to_string(), reason };
    let (head, len) = match body {
        Body::Whole(b) => (b, b.len() as u64),
        Body::Head { head, len } => (head, len),
    };
    if kind == ObjectKind::Key {
        let Body::Whole(b) = body else { return Err(refuse("a key file is checked whole".into())) };
        return check_key_file(b).map_err(|reason| refuse(format!("{reason}; key files are written by `coffer key`")));
    }
    let Some(kind_byte) = sealed_kind(kind) else { return Ok(()) };
    // A backup's opening marker, written before its keys are derived.
    if kind == ObjectKind::Session && len == session::OPENING.len() as u64 && head == session::OPENING {
        return Ok(());
    }
    let mut sealed_len = len;
    if matches!(kind, ObjectKind::Snapshot | ObjectKind::Tombstone | ObjectKind::Layout) {
        let Body::Whole(b) = body else { return Err(refuse("a signed object is checked whole".into())) };
        sealed_len = check_signature(kind, b, allow).map_err(refuse)?;
    }
    check_envelope(kind, kind_byte, head, sealed_len).map_err(refuse)
}

/// The envelope of a sealed object whose first bytes are `head` and whose
/// sealed part is `len` bytes long.
fn check_envelope(kind: ObjectKind, kind_byte: u8, head: &[u8], len: u64) -> Result<(), String> {
    // Header, salt and tag, and a plaintext: every kind's plaintext is a JSON
    // object or a layout, never empty.
    let least = envelope::OVERHEAD as u64 + 1;
    if len < least || head.len() < envelope::HEADER_LEN {
        return Err(format!(
            "{len} bytes is shorter than the least sealed {} ({least} bytes: header, salt, tag and a plaintext)",
            kind.noun()
        ));
    }
    if &head[..6] != envelope::MAGIC || head[6] != envelope::VERSION {
        return Err("does not start with coffer's version 2 envelope header".into());
    }
    if head[7] != kind_byte {
        return Err(format!(
            "the envelope's kind byte is {}, but {} under this prefix have kind {kind_byte}",
            head[7],
            kind.noun()
        ));
    }
    if Cipher::from_byte(head[8]).is_none() {
        return Err(format!("the envelope's cipher byte {} names no cipher coffer knows", head[8]));
    }
    let epoch = envelope::epoch(head).unwrap_or(0);
    if kind == ObjectKind::Config && epoch != 0 {
        return Err(format!("a config is sealed under epoch 0, not {epoch}"));
    }
    Ok(())
}

/// Checks the signature block of a signed object; returns the length of the
/// sealed part before it.
fn check_signature(kind: ObjectKind, body: &[u8], allow: &AllowList) -> Result<u64, String> {
    let (sealed, block) = signed::split(body).map_err(|e| format!("malformed signature block: {e}"))?;
    let Some(block) = block else {
        return Err(format!(
            "unsigned {}: this server accepts only snapshots, tombstones and layouts signed by an allowed writer",
            kind.noun()
        ));
    };
    if block.public_key.is_weak() {
        return Err("the signing key is weak (small order or non-canonical) and verifies nothing".into());
    }
    if !allow.contains(&block.public_key) {
        return Err(format!(
            "signed by writer {}, which is not on this server's allow-list; if it is yours, run \
             `coffer serve writer allow {}` on the server (`coffer writers` on the client prints the key)",
            block.public_key.to_hex(),
            block.public_key.to_hex()
        ));
    }
    // Tombstones and layouts vouch for nothing in the clear (docs/design.md#signatures).
    if kind != ObjectKind::Snapshot && block.commitment != [0; 32] {
        return Err(format!("a {}'s signature commits to 32 zero bytes, not to another value", kind.noun()));
    }
    if !block.verify(sealed) {
        return Err(format!("the signature by writer {} does not verify", block.public_key.to_hex()));
    }
    Ok(sealed.len() as u64)
}

/// The lengths of the wrapped keys (plaintext, without the tag) of a key file
/// holding one and two data keys, from coffer-core's own key-file writer; the
/// plaintext grows by the same amount per data key.
fn wrapped_lengths() -> (u64, u64) {
    static LENGTHS: OnceLock<(u64, u64)> = OnceLock::new();
    *LENGTHS.get_or_init(|| {
        // The cheapest scrypt: only the length of the result is used.
        let cheap = ScryptParams { log_n: 1, r: 1, p: 1 };
        let plain_len = |m: &MasterKeys| {
            KeyFile::create(m, b"", cheap, Cipher::ChaCha20Poly1305, String::new(), String::new())
                .map(|k| (k.data.len() / 2 - TAG_LEN) as u64)
                .unwrap_or(0)
        };
        let one = MasterKeys::random();
        let two = one.rotated().ok();
        (plain_len(&one), two.as_ref().map(plain_len).unwrap_or(0))
    })
}

/// A key file's fields that can be checked without its passphrase.
fn check_key_file(body: &[u8]) -> Result<(), String> {
    let k = KeyFile::decode(body).map_err(|e| format!("not a coffer key file: {e}"))?;
    let wrapped = (k.data.len() / 2) as u64;
    let (one, two) = wrapped_lengths();
    let per_key = two.saturating_sub(one);
    let plain = wrapped.saturating_sub(TAG_LEN as u64);
    let fits = per_key > 0
        && plain >= one
        && (plain - one).is_multiple_of(per_key)
        && (plain - one) / per_key < MAX_DATA_KEYS
        && k.data.len().is_multiple_of(2);
    if !fits {
        return Err(format!(
            "its wrapped keys are {wrapped} bytes, which is not the length of 1 to {MAX_DATA_KEYS} wrapped data keys"
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
        b.push(Cipher::Aes256Gcm.to_byte());
        b.resize(envelope::OVERHEAD + 10, 0);
        b
    }

    fn allow(k: &SigningKey) -> AllowList {
        AllowList { writers: vec![AllowedWriter { public_key: k.public().to_hex(), note: String::new() }] }
    }

    fn check(kind: ObjectKind, b: &[u8], allow: &AllowList) -> Result<(), Refused> {
        let body = if needs_whole(kind) {
            Body::Whole(b)
        } else {
            Body::Head { head: &b[..b.len().min(HEAD_LEN)], len: b.len() as u64 }
        };
        check_structure("o", kind, body, allow)
    }

    fn reason(r: Result<(), Refused>) -> String {
        r.unwrap_err().reason
    }

    #[test]
    fn signed_objects() {
        let k = SigningKey::generate();
        let good = signed::sign(sealed(3), &[0; 32], &k);
        assert_eq!(check(ObjectKind::Snapshot, &good, &allow(&k)), Ok(()));
        // Unknown writer, unsigned, forged, wrong kind, garbage.
        let e = reason(check(ObjectKind::Snapshot, &good, &AllowList::default()));
        assert!(e.contains(&k.public().to_hex()), "{e}");
        assert!(reason(check(ObjectKind::Snapshot, &sealed(3), &allow(&k))).contains("unsigned"));
        let mut forged = good.clone();
        forged[20] ^= 1;
        assert!(reason(check(ObjectKind::Snapshot, &forged, &allow(&k))).contains("verify"));
        let tomb = signed::sign(sealed(5), &[0; 32], &k);
        assert!(reason(check(ObjectKind::Snapshot, &tomb, &allow(&k))).contains("kind"));
        assert_eq!(check(ObjectKind::Tombstone, &tomb, &allow(&k)), Ok(()));
        assert!(check(ObjectKind::Index, b"short", &allow(&k)).is_err());
        assert!(check(ObjectKind::Index, &sealed(2), &allow(&k)).is_ok());
        assert!(check(ObjectKind::Pack, b"anything", &allow(&k)).is_ok());
        // Layouts are signed like tombstones: zero commitment, allowed writer.
        let layout = signed::sign(sealed(8), &[0; 32], &k);
        assert_eq!(check(ObjectKind::Layout, &layout, &allow(&k)), Ok(()));
        assert!(reason(check(ObjectKind::Layout, &sealed(8), &allow(&k))).contains("unsigned"));
        let committed = signed::sign(sealed(8), &[1; 32], &k);
        assert!(reason(check(ObjectKind::Layout, &committed, &allow(&k))).contains("zero"));
        let committed = signed::sign(sealed(5), &[1; 32], &k);
        assert!(reason(check(ObjectKind::Tombstone, &committed, &allow(&k))).contains("zero"));
    }

    #[test]
    fn envelopes_are_checked_beyond_the_kind_byte() {
        let none = AllowList::default();
        for kind in [ObjectKind::PruneNotice, ObjectKind::Index, ObjectKind::Writer, ObjectKind::Session] {
            let good = sealed(sealed_kind(kind).unwrap());
            assert_eq!(check(kind, &good, &none), Ok(()), "{kind:?}");
            let mut cipher = good.clone();
            cipher[8] = 0xee;
            assert!(reason(check(kind, &cipher, &none)).contains("cipher byte 238"), "{kind:?}");
            // Exactly the envelope's overhead: no plaintext.
            assert!(reason(check(kind, &good[..envelope::OVERHEAD], &none)).contains("shorter"), "{kind:?}");
            assert!(check(kind, &good[..5], &none).is_err());
        }
        let mut config = sealed(1);
        assert_eq!(check(ObjectKind::Config, &config, &none), Ok(()));
        config[envelope::EPOCH_OFFSET] = 1;
        assert!(reason(check(ObjectKind::Config, &config, &none)).contains("epoch 0"));
    }

    #[test]
    fn key_files_are_decoded() {
        let none = AllowList::default();
        let params = ScryptParams { log_n: 1, r: 1, p: 1 };
        let m = MasterKeys::random();
        let kf = KeyFile::create(&m, b"pw", params, Cipher::Aes256Gcm, "h".into(), "u".into()).unwrap();
        assert_eq!(check(ObjectKind::Key, &kf.encode(), &none), Ok(()));
        let rotated = m.rotated().unwrap().rotated().unwrap();
        let kf3 = KeyFile::create(&rotated, b"pw", params, Cipher::Aes256Gcm, "h".into(), "u".into()).unwrap();
        assert_eq!(check(ObjectKind::Key, &kf3.encode(), &none), Ok(()));
        assert!(reason(check(ObjectKind::Key, b"garbage", &none)).contains("not a coffer key file"));
        let mut short = kf.clone();
        short.data.truncate(short.data.len() - 2);
        assert!(reason(check(ObjectKind::Key, &short.encode(), &none)).contains("wrapped"));
        let mut salt = kf.clone();
        salt.salt.truncate(10);
        assert!(check(ObjectKind::Key, &salt.encode(), &none).is_err());
        let mut costly = kf.clone();
        costly.scrypt = ScryptParams { log_n: 30, r: 8, p: 1 };
        assert!(reason(check(ObjectKind::Key, &costly.encode(), &none)).contains("scrypt"));
    }

    #[test]
    fn session_markers_are_sealed_or_opening() {
        let none = AllowList::default();
        assert!(check(ObjectKind::Session, &sealed(6), &none).is_ok());
        assert!(check(ObjectKind::Session, session::OPENING, &none).is_ok());
        // Those bytes under another prefix, or anything else, are refused.
        assert!(check(ObjectKind::Index, session::OPENING, &none).is_err());
        let mut other = session::OPENING.to_vec();
        other.push(b'x');
        assert!(check(ObjectKind::Session, &other, &none).is_err());
    }

    #[test]
    fn hashes() {
        let h = blake3::hash(b"x");
        assert!(check_hash("n", Some(h.to_hex().as_str()), &h).is_ok());
        assert!(check_hash("n", Some(&"0".repeat(64)), &h).is_err());
        assert!(check_hash("config", None, &h).is_ok());
    }
}
