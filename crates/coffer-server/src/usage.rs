//! Bytes each access key has uploaded, for quotas (docs/design.md#server).
//! An upload reserves its announced length before its body is read
//! ([`Usage::reserve`]): the reservations of uploads in flight count against
//! the quota with the bytes already stored, so concurrent uploads cannot
//! together pass it. A stored upload's reservation becomes usage; a failed
//! or identical one is released. Usage is counted in memory and written to
//! `usage.json` in the state directory at most every few seconds, so quotas
//! hold across restarts; a crash forgets at most the last few seconds' uploads.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::ServerError;
use crate::state;

/// The usage file's name in the state directory.
pub const FILE: &str = "usage.json";

/// Bytes uploaded per access key id.
pub struct Usage {
    path: PathBuf,
    /// The counts, and whether they changed since the last flush.
    counts: Mutex<(BTreeMap<String, u64>, bool)>,
    /// Bytes reserved by uploads in flight, per key.
    reserved: Mutex<HashMap<String, u64>>,
}

/// Bytes an upload in flight holds against its key's quota: counted as used
/// by [`Reservation::commit`], given back when dropped otherwise.
pub struct Reservation {
    usage: Arc<Usage>,
    key: String,
    bytes: u64,
}

/// A quota an upload would pass.
#[derive(Debug, PartialEq, Eq)]
pub struct OverQuota {
    /// Bytes stored.
    pub used: u64,
    /// Bytes reserved by uploads in flight.
    pub reserved: u64,
}

impl Reservation {
    /// The upload was stored: its bytes count as used.
    pub fn commit(self) {
        self.usage.add(&self.key, self.bytes);
        // Drop gives the reservation back.
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut r = self.usage.reserved.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = r.get_mut(&self.key) {
            *n = n.saturating_sub(self.bytes);
            if *n == 0 {
                r.remove(&self.key);
            }
        }
    }
}

impl Usage {
    /// The counts kept in `state_dir`.
    pub fn load(state_dir: &Path) -> Result<Usage, ServerError> {
        let path = state_dir.join(FILE);
        let counts = state::read_json(&path)?;
        Ok(Usage { path, counts: Mutex::new((counts, false)), reserved: Mutex::new(HashMap::new()) })
    }

    /// Reserves `bytes` for an upload by `key_id`, if its `quota` (none:
    /// unlimited) leaves room beside what it stored and what its other
    /// uploads in flight reserved.
    pub fn reserve(self: &Arc<Self>, key_id: &str, bytes: u64, quota: Option<u64>) -> Result<Reservation, OverQuota> {
        // Lock order: reserved, then counts (as everywhere).
        let mut r = self.reserved.lock().unwrap_or_else(|e| e.into_inner());
        let reserved = r.get(key_id).copied().unwrap_or(0);
        if let Some(q) = quota {
            let used = self.used(key_id);
            if used.saturating_add(reserved).saturating_add(bytes) > q {
                return Err(OverQuota { used, reserved });
            }
        }
        *r.entry(key_id.to_string()).or_insert(0) += bytes;
        Ok(Reservation { usage: self.clone(), key: key_id.to_string(), bytes })
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

    #[test]
    fn reservations_count_against_the_quota_until_committed_or_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let u = Arc::new(Usage::load(dir.path()).unwrap());
        let a = u.reserve("A", 3, Some(5)).unwrap();
        assert_eq!(u.reserve("A", 3, Some(5)).err(), Some(OverQuota { used: 0, reserved: 3 }));
        let b = u.reserve("A", 2, Some(5)).unwrap();
        drop(b);
        a.commit();
        assert_eq!(u.used("A"), 3);
        assert!(u.reserve("A", 3, Some(5)).is_err());
        assert!(u.reserve("A", 2, Some(5)).is_ok());
        assert!(u.reserve("B", 100, None).is_ok());
    }
}
