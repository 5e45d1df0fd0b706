//! Which access key wrote each session marker (docs/design.md#server, "Access
//! levels"), so that an `append` key rewrites and deletes only its own. Kept
//! in `sessions.json` in the state directory, written when a marker is first
//! stored and when it is deleted (not on every heartbeat), so ownership holds
//! across restarts. A marker the storage holds that the file does not name
//! (stored before the server kept owners, or written to the storage directly)
//! is no key's: only `prune` and `admin` keys may rewrite or delete it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::ServerError;
use crate::state;

/// The file's name in the state directory.
pub const FILE: &str = "sessions.json";

/// Marker name → the access key id that wrote it.
pub struct Owners {
    path: PathBuf,
    map: Mutex<BTreeMap<String, String>>,
}

impl Owners {
    /// The owners kept in `state_dir`, of the markers in `stored` (the
    /// storage's markers now); owners of markers no longer stored are dropped.
    pub fn load(state_dir: &Path, stored: &[String]) -> Result<Owners, ServerError> {
        let path = state_dir.join(FILE);
        let kept: BTreeMap<String, String> = state::read_json(&path)?;
        let map = kept.into_iter().filter(|(n, _)| stored.binary_search(n).is_ok()).collect();
        let o = Owners { path, map: Mutex::new(map) };
        o.save()?;
        Ok(o)
    }

    fn save(&self) -> Result<(), ServerError> {
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner()).clone();
        state::write_json(&self.path, &map)
    }

    /// The key that wrote `name`, if known.
    pub fn owner(&self, name: &str) -> Option<String> {
        self.map.lock().unwrap_or_else(|e| e.into_inner()).get(name).cloned()
    }

    /// `key` stored `name`: it becomes the owner unless the marker had one.
    pub fn stored(&self, name: &str, key: &str) -> Result<(), ServerError> {
        let new = {
            let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
            if map.contains_key(name) {
                false
            } else {
                map.insert(name.to_string(), key.to_string());
                true
            }
        };
        if new { self.save() } else { Ok(()) }
    }

    /// `name` was deleted.
    pub fn deleted(&self, name: &str) -> Result<(), ServerError> {
        if self.map.lock().unwrap_or_else(|e| e.into_inner()).remove(name).is_some() {
            self.save()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_persist_and_unknown_markers_are_no_ones() {
        let dir = tempfile::tempdir().unwrap();
        let o = Owners::load(dir.path(), &[]).unwrap();
        o.stored("sessions/a", "K1").unwrap();
        o.stored("sessions/a", "K2").unwrap();
        assert_eq!(o.owner("sessions/a").as_deref(), Some("K1"));
        let stored = ["sessions/a".to_string(), "sessions/b".to_string()];
        let o = Owners::load(dir.path(), &stored).unwrap();
        assert_eq!(o.owner("sessions/a").as_deref(), Some("K1"));
        assert_eq!(o.owner("sessions/b"), None);
        o.deleted("sessions/a").unwrap();
        assert_eq!(Owners::load(dir.path(), &stored).unwrap().owner("sessions/a"), None);
    }
}
