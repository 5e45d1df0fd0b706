//! Session markers: the sealed object `sessions/<random id>` (kind 6) by which a
//! running backup announces itself, rewritten at every heartbeat. Plaintext JSON
//! of at most [`limits::SESSION`] bytes stored. Writing, rewriting and listing
//! markers is `crate::lifecycle::session`'s. See docs/design.md#prune.
//!
//! A marker may also hold the fixed plaintext [`OPENING`]: written by a backup
//! while its keys are still being derived, before it has stored anything, and
//! replaced by a sealed record at its first heartbeat.

use serde::{Deserialize, Serialize};

use super::{FORMAT_VERSION, limits};
use crate::id::Id;

/// What a marker says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRecord {
    /// MUST equal 2.
    pub version: u32,
    /// Host of the writer.
    pub hostname: String,
    /// When it started (informational; never compared across machines).
    pub started: String,
    /// Incremented at every rewrite.
    pub beat: u64,
    /// Index files this writer has stored so far.
    pub index_files: Vec<Id>,
    /// Packs this writer has stored that none of its index files lists yet.
    #[serde(default)]
    pub packs: Vec<Id>,
}

/// The bytes of an opening marker (not sealed: it is written before the keys are
/// known). The seventh byte is not the envelope's version byte, so no sealed
/// object reads as one.
pub const OPENING: &[u8] = b"coffer opening session marker\n";

impl SessionRecord {
    /// Most bytes a stored marker takes (sealing included).
    pub const MAX_STORED: u64 = limits::SESSION;

    /// What an opening marker says: a writer that has stored nothing yet, with
    /// no name and no start time. Equal to itself, so a prune that reads the same
    /// opening marker before and after its wait takes its writer for stopped.
    pub fn opening() -> SessionRecord {
        SessionRecord {
            version: FORMAT_VERSION,
            hostname: String::new(),
            started: String::new(),
            beat: 0,
            index_files: Vec::new(),
            packs: Vec::new(),
        }
    }

    /// The marker's plaintext, to be sealed.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("session records serialize")
    }

    /// Parses a marker's plaintext.
    pub fn decode(buf: &[u8]) -> std::result::Result<SessionRecord, String> {
        let r: SessionRecord =
            serde_json::from_slice(buf).map_err(|e| format!("session marker does not parse: {e}"))?;
        if r.version != FORMAT_VERSION {
            return Err(format!("session marker version {} is not supported", r.version));
        }
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marker_round_trips_and_reads_without_packs() {
        let r = SessionRecord {
            version: FORMAT_VERSION,
            hostname: "h".into(),
            started: "2026-11-24T00:00:00Z".into(),
            beat: 3,
            index_files: vec![Id([1; 32])],
            packs: vec![Id([2; 32])],
        };
        assert_eq!(SessionRecord::decode(&r.encode()).unwrap(), r);
        // `packs` may be absent.
        let plain = br#"{"version":2,"hostname":"h","started":"t","beat":0,"index_files":[]}"#;
        assert!(SessionRecord::decode(plain).unwrap().packs.is_empty());
        let older = SessionRecord { version: 1, ..r };
        assert!(SessionRecord::decode(&older.encode()).unwrap_err().contains("version 1"));
    }

    #[test]
    fn an_opening_marker_is_no_sealed_object_and_no_record() {
        assert_eq!(&OPENING[..6], crate::format::envelope::MAGIC);
        assert_ne!(OPENING[6], crate::format::envelope::VERSION);
        assert!(SessionRecord::decode(OPENING).is_err());
        assert!(OPENING.len() as u64 <= SessionRecord::MAX_STORED);
    }
}
