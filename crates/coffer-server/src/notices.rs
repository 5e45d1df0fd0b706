//! When each prune notice was accepted, and by which key, so that the server
//! can hold `prune` keys to the prune protocol's order (docs/design.md#server,
//! "Prune notices"): a key deletes packs and index files only once its latest
//! notice has been stored at least the grace period. The times are the
//! server's own, kept in `notices.json` in the state directory; a notice
//! stored before the server kept its time counts from when the server
//! started, as any key's.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::ServerError;
use crate::state;

/// The file's name in the state directory.
pub const FILE: &str = "notices.json";

/// When a notice was stored, and by which key.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Stored {
    /// Seconds since the Unix epoch.
    time: u64,
    /// The access key id; empty when not known (stored before the server kept it).
    key: String,
}

/// Prune notices stored, by name.
pub struct Notices {
    path: PathBuf,
    times: Mutex<BTreeMap<String, Stored>>,
}

impl Notices {
    /// The times kept in `state_dir`; of `stored` (the notices the storage
    /// holds now), those without a time count from `now`, and times of
    /// notices no longer stored are dropped.
    pub fn load(state_dir: &Path, stored: &[String], now: u64) -> Result<Notices, ServerError> {
        let path = state_dir.join(FILE);
        let kept: BTreeMap<String, Stored> = state::read_json(&path)?;
        let times = stored
            .iter()
            .map(|n| (n.clone(), kept.get(n).cloned().unwrap_or(Stored { time: now, key: String::new() })))
            .collect();
        let n = Notices { path, times: Mutex::new(times) };
        n.save()?;
        Ok(n)
    }

    fn save(&self) -> Result<(), ServerError> {
        let times = self.times.lock().unwrap_or_else(|e| e.into_inner()).clone();
        state::write_json(&self.path, &times)
    }

    /// Records that the notice `name` was accepted from `key` at `now`.
    pub fn stored(&self, name: &str, key: &str, now: u64) -> Result<(), ServerError> {
        let stored = Stored { time: now, key: key.to_string() };
        self.times.lock().unwrap_or_else(|e| e.into_inner()).entry(name.to_string()).or_insert(stored);
        self.save()
    }

    /// Forgets the notice `name` (deleted).
    pub fn deleted(&self, name: &str) -> Result<(), ServerError> {
        if self.times.lock().unwrap_or_else(|e| e.into_inner()).remove(name).is_some() {
            self.save()?;
        }
        Ok(())
    }

    /// Whether `key` may delete packs and index files at `now`: its latest
    /// notice (or, if it stored none, the latest of unknown origin) was stored
    /// at least `grace` seconds before. Otherwise, why not.
    pub fn allow_deletes(&self, key: &str, now: u64, grace: u64) -> Result<(), String> {
        let times = self.times.lock().unwrap_or_else(|e| e.into_inner());
        let latest = |of: &str| times.values().filter(|s| s.key == of).map(|s| s.time).max();
        match latest(key).or_else(|| latest("")) {
            Some(t) if t.saturating_add(grace) <= now => Ok(()),
            Some(t) => Err(format!(
                "its latest prune notice was stored {}s ago; packs and index files are deleted only {grace}s after \
                 the notice announcing them (the prune protocol's grace period): run the prune with a grace period \
                 of at least {grace}s",
                now.saturating_sub(t)
            )),
            None => Err(format!(
                "it stored no prune notice: a prune announces the packs it deletes in a notice and waits {grace}s \
                 (the prune protocol) before deleting packs or index files"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deletes_wait_for_the_keys_latest_notice_and_times_persist() {
        let dir = tempfile::tempdir().unwrap();
        let n = Notices::load(dir.path(), &[], 1000).unwrap();
        assert!(n.allow_deletes("k1", 1000, 60).unwrap_err().contains("no prune notice"));
        n.stored("prune/aa", "k1", 1000).unwrap();
        assert!(n.allow_deletes("k1", 1059, 60).unwrap_err().contains("59s ago"));
        assert_eq!(n.allow_deletes("k1", 1060, 60), Ok(()));
        // Another key's notice is not this one's.
        assert!(n.allow_deletes("k2", 1060, 60).is_err());
        // A newer notice of the same key: its deletes wait for that one.
        n.stored("prune/cc", "k1", 2000).unwrap();
        assert!(n.allow_deletes("k1", 2010, 60).is_err());
        // Restarted: times are kept; a notice stored meanwhile counts from the
        // start, for any key without notices of its own.
        let stored = ["prune/aa".to_string(), "prune/bb".to_string(), "prune/cc".to_string()];
        let n = Notices::load(dir.path(), &stored, 5000).unwrap();
        assert_eq!(n.allow_deletes("k1", 2060, 60), Ok(()));
        assert!(n.allow_deletes("k2", 5030, 60).is_err());
        assert_eq!(n.allow_deletes("k2", 5060, 60), Ok(()));
        n.deleted("prune/cc").unwrap();
        assert_eq!(n.allow_deletes("k1", 2060, 60), Ok(()), "prune/aa is still k1's");
        // Notices no longer stored are dropped at load.
        let n = Notices::load(dir.path(), &[], 9000).unwrap();
        assert!(n.allow_deletes("k1", 9999, 60).is_err());
    }
}
