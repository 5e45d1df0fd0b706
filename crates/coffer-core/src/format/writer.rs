//! Writer registrations: which Ed25519 public keys may sign snapshots in this
//! repository. Sealed JSON under `writers/<id>`. See docs/design.md#writers.

use serde::{Deserialize, Serialize};

use crate::crypto::sign::PublicKey;

/// One registered writer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriterRecord {
    /// Format version; MUST equal 2.
    pub version: u32,
    /// The writer's public key.
    pub public_key: PublicKey,
    /// Host the writer was created on.
    pub hostname: String,
    /// User who created it.
    pub username: String,
    /// When, RFC 3339 in UTC.
    pub created: String,
}

impl WriterRecord {
    /// `user@host`.
    pub fn name(&self) -> String {
        format!("{}@{}", self.username, self.hostname)
    }

    /// Serializes to JSON.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("writer records always serialize")
    }

    /// Parses JSON and checks the version.
    pub fn decode(buf: &[u8]) -> Result<WriterRecord, String> {
        let w: WriterRecord = serde_json::from_slice(buf).map_err(|e| format!("writer record does not parse: {e}"))?;
        if w.version != super::FORMAT_VERSION {
            return Err(format!("writer record version {} is not supported by this coffer", w.version));
        }
        Ok(w)
    }
}
