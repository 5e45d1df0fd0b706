//! The writer allow-list: the Ed25519 public keys whose snapshots and
//! tombstones the server accepts. Writer records in the repository are sealed,
//! so the server cannot read them; the operator feeds it the keys that
//! `coffer writers` prints on a client. Stored as `writers.json` in the state
//! directory. See docs/design.md#server.

use std::path::{Path, PathBuf};

use coffer_core::crypto::sign::PublicKey;
use serde::{Deserialize, Serialize};

use crate::ServerError;
use crate::state;

/// One allowed writer.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct AllowedWriter {
    /// The public key, 64 hex digits.
    pub public_key: String,
    /// A note for people (who it is).
    #[serde(default)]
    pub note: String,
}

/// The content of `writers.json`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct AllowList {
    /// The allowed writers.
    pub writers: Vec<AllowedWriter>,
}

impl AllowList {
    /// Whether `key` is allowed.
    pub fn contains(&self, key: &PublicKey) -> bool {
        let hex = key.to_hex();
        self.writers.iter().any(|w| w.public_key == hex)
    }
}

/// Where the allow-list of the state directory `dir` is.
pub fn path(dir: &Path) -> PathBuf {
    dir.join("writers.json")
}

/// Adds `hex` to the allow-list (nothing if it is there); the key must be a
/// valid, strong Ed25519 public key.
pub fn allow(dir: &Path, hex: &str, note: &str) -> Result<bool, ServerError> {
    let hex = hex.trim().to_ascii_lowercase();
    let key = PublicKey::from_hex(&hex).ok_or_else(|| {
        ServerError::Invalid(format!("{hex:?} is not a public key: give the 64 hex digits `coffer writers` prints"))
    })?;
    if key.is_weak() {
        return Err(ServerError::Invalid(format!(
            "{hex} is a weak key (small order or non-canonical) and verifies nothing"
        )));
    }
    let mut list: AllowList = state::read_json(&path(dir))?;
    if list.contains(&key) {
        return Ok(false);
    }
    list.writers.push(AllowedWriter { public_key: hex, note: note.to_string() });
    state::write_json(&path(dir), &list)?;
    Ok(true)
}

/// Removes `hex`; false if it was not there.
pub fn remove(dir: &Path, hex: &str) -> Result<bool, ServerError> {
    let hex = hex.trim().to_ascii_lowercase();
    let mut list: AllowList = state::read_json(&path(dir))?;
    let before = list.writers.len();
    list.writers.retain(|w| w.public_key != hex);
    if list.writers.len() == before {
        return Ok(false);
    }
    state::write_json(&path(dir), &list)?;
    Ok(true)
}

/// The allow-list.
pub fn list(dir: &Path) -> Result<Vec<AllowedWriter>, ServerError> {
    Ok(state::read_json::<AllowList>(&path(dir))?.writers)
}
