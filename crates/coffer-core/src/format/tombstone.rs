//! Tombstones: signed records of snapshots removed on purpose by `forget`, so that
//! a deletion can be told apart from a loss. Sealed JSON under `tombstones/<id>`,
//! signed like snapshots. See docs/design.md#tombstones.

use serde::{Deserialize, Serialize};

use super::signed::SignatureStatus;
use crate::crypto::sign::PublicKey;
use crate::id::Id;

/// What a tombstone remembers of one forgotten snapshot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Forgotten {
    /// The snapshot's id.
    pub id: Id,
    /// Its time (when its backup started).
    pub time: String,
    /// When its backup finished (`time` plus its duration), RFC 3339; empty when
    /// unknown (a damaged snapshot, or a tombstone written before this field existed).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub end: String,
    /// Its host.
    pub hostname: String,
    /// Its paths.
    pub paths: Vec<String>,
    /// The history it linked to, so the chain stays whole without it.
    #[serde(default)]
    pub history: Vec<Id>,
    /// The snapshot that replaces it (`coffer tag`), which lists it in its
    /// history (docs/design.md#tag). Absent for a plain forget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaced_by: Option<Id>,
}

/// A tombstone.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tombstone {
    /// Format version; MUST equal 2.
    pub version: u32,
    /// When the snapshots were forgotten, RFC 3339 in UTC.
    pub time: String,
    /// Host that forgot them.
    pub hostname: String,
    /// User who forgot them.
    pub username: String,
    /// The signing writer's public key.
    pub writer: PublicKey,
    /// The history heads this writer saw.
    #[serde(default)]
    pub history: Vec<Id>,
    /// The snapshots removed.
    pub forgotten: Vec<Forgotten>,
    /// The program that wrote it.
    pub program: String,
    /// The signature, as checked when loaded (not stored in the JSON).
    #[serde(skip)]
    pub signature: SignatureStatus,
}

impl Tombstone {
    /// Serializes to JSON.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("tombstones always serialize")
    }

    /// Parses JSON and checks the version and time.
    pub fn decode(buf: &[u8]) -> Result<Tombstone, String> {
        let t: Tombstone = serde_json::from_slice(buf).map_err(|e| format!("tombstone does not parse: {e}"))?;
        if t.version != super::FORMAT_VERSION {
            return Err(format!("tombstone version {} is not supported by this coffer", t.version));
        }
        humantime::parse_rfc3339(&t.time).map_err(|e| format!("tombstone time {:?}: {e}", t.time))?;
        Ok(t)
    }

    /// The time as a system time.
    pub fn system_time(&self) -> std::time::SystemTime {
        humantime::parse_rfc3339(&self.time).unwrap_or(std::time::UNIX_EPOCH)
    }
}
