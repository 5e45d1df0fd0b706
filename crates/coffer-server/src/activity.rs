//! What each writer stored through this server: when it last stored a
//! snapshot, and how many it stored, for the metrics endpoint
//! (docs/design.md#server, "Metrics"). The server learns a snapshot's writer
//! from its signature block, which it verifies on upload; the snapshot itself
//! is sealed, so the time is the one the server stored it at. Kept in
//! `activity.json` in the state directory, written when a snapshot is stored
//! (snapshots are few), so the figures hold across restarts; snapshots stored
//! before the file existed, or straight into the storage, are not in it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::ServerError;
use crate::state;

/// The file's name in the state directory.
pub const FILE: &str = "activity.json";

/// One writer's snapshots through this server.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriterActivity {
    /// When the last one was stored, milliseconds since the Unix epoch.
    pub last_snapshot_ms: u64,
    /// How many were stored (identical uploads of a stored one not counted).
    pub snapshots: u64,
}

/// Every writer's activity, by public key (64 hex digits).
pub struct Activity {
    path: PathBuf,
    writers: Mutex<BTreeMap<String, WriterActivity>>,
}

impl Activity {
    /// The activity kept in `state_dir` (none yet: empty).
    pub fn load(state_dir: &Path) -> Result<Activity, ServerError> {
        let path = state_dir.join(FILE);
        let writers = state::read_json(&path)?;
        Ok(Activity { path, writers: Mutex::new(writers) })
    }

    /// Records that the writer `public_key` stored a snapshot at `at_ms`, and
    /// writes the file. On a failure to write, the count in memory stands (the
    /// next snapshot writes it).
    pub fn snapshot_stored(&self, public_key: &str, at_ms: u64) -> Result<(), ServerError> {
        let mut w = self.writers.lock().unwrap_or_else(|e| e.into_inner());
        let a = w.entry(public_key.to_string()).or_default();
        a.last_snapshot_ms = a.last_snapshot_ms.max(at_ms);
        a.snapshots = a.snapshots.saturating_add(1);
        state::write_json(&self.path, &*w)
    }

    /// Every writer's activity so far.
    pub fn get(&self) -> BTreeMap<String, WriterActivity> {
        self.writers.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshots_are_counted_and_kept_across_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let a = Activity::load(dir.path()).unwrap();
        assert!(a.get().is_empty());
        a.snapshot_stored("aa", 2_000).unwrap();
        a.snapshot_stored("aa", 1_000).unwrap();
        a.snapshot_stored("bb", 5_000).unwrap();
        drop(a);
        let a = Activity::load(dir.path()).unwrap();
        let got = a.get();
        assert_eq!(got["aa"], WriterActivity { last_snapshot_ms: 2_000, snapshots: 2 });
        assert_eq!(got["bb"], WriterActivity { last_snapshot_ms: 5_000, snapshots: 1 });
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join(FILE)).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn a_damaged_file_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE), b"{not json").unwrap();
        let e = Activity::load(dir.path()).err().expect("refused").to_string();
        assert!(e.contains(FILE) && e.contains("fix or remove"), "{e}");
    }
}
