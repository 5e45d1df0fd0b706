//! Bytes each access key has uploaded, for quotas (docs/design.md#server).
//! Counted in memory as uploads are accepted and written to `usage.json` in the
//! state directory at most every few seconds, so quotas hold across restarts; a
//! crash forgets at most the last few seconds' uploads.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::ServerError;
use crate::state;

/// The usage file's name in the state directory.
pub const FILE: &str = "usage.json";

/// Bytes uploaded per access key id.
pub struct Usage {
    path: PathBuf,
    /// The counts, and whether they changed since the last flush.
    counts: Mutex<(BTreeMap<String, u64>, bool)>,
}

impl Usage {
    /// The counts kept in `state_dir`.
    pub fn load(state_dir: &Path) -> Result<Usage, ServerError> {
        let path = state_dir.join(FILE);
        let counts = state::read_json(&path)?;
        Ok(Usage { path, counts: Mutex::new((counts, false)) })
    }

    /// Bytes `key_id` has uploaded.
    pub fn used(&self, key_id: &str) -> u64 {
        self.counts.lock().unwrap_or_else(|e| e.into_inner()).0.get(key_id).copied().unwrap_or(0)
    }

    /// Counts `bytes` more for `key_id`.
    pub fn add(&self, key_id: &str, bytes: u64) {
        let mut c = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let n = c.0.entry(key_id.to_string()).or_insert(0);
        *n = n.saturating_add(bytes);
        c.1 = true;
    }

    /// Writes the counts if they changed.
    pub fn flush(&self) -> Result<(), ServerError> {
        let snapshot = {
            let mut c = self.counts.lock().unwrap_or_else(|e| e.into_inner());
            if !c.1 {
                return Ok(());
            }
            c.1 = false;
            c.0.clone()
        };
        let written = state::write_json(&self.path, &snapshot);
        if written.is_err() {
            self.counts.lock().unwrap_or_else(|e| e.into_inner()).1 = true;
        }
        written
    }
}

/// The counts in `state_dir`, for `coffer serve key list`.
pub fn read(state_dir: &Path) -> Result<BTreeMap<String, u64>, ServerError> {
    state::read_json(&state_dir.join(FILE))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_survive_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let u = Usage::load(dir.path()).unwrap();
        u.add("A", 10);
        u.add("A", 5);
        assert_eq!(u.used("A"), 15);
        u.flush().unwrap();
        u.add("B", 1);
        drop(u);
        let u = Usage::load(dir.path()).unwrap();
        assert_eq!((u.used("A"), u.used("B")), (15, 0), "only what was flushed");
        assert_eq!(read(dir.path()).unwrap().get("A"), Some(&15));
    }
}
