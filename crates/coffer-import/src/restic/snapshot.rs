//! Snapshot files (`snapshots/<id>`): one JSON object per snapshot, naming its root tree.
//!
//! ```json
//! {"time": "2026-12-02T00:49:30.123456789+01:00", "tree": "<tree blob id>",
//!  "paths": ["/home"], "hostname": "h", "username": "u", "uid": 1000, "gid": 1000,
//!  "excludes": [...], "tags": [...], "parent": "<id>", "original": "<id>",
//!  "program_version": "restic 0.19.1", "summary": {...}}
//! ```
//!
//! Only `time` and `tree` are required; the rest default to empty.

use serde::Deserialize;

use super::id::{BlobId, SnapshotId};
use super::time::Timestamp;

/// Largest snapshot file read, as stored and opened: 16 MiB (a snapshot is small; its
/// size grows only with the number of paths, tags and excludes).
pub const MAX_SNAPSHOT_FILE: u64 = 16 * 1024 * 1024;

/// The statistics restic records of the backup that made a snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Default)]
#[serde(default)]
pub struct SnapshotSummary {
    pub backup_start: Option<String>,
    pub backup_end: Option<String>,
    pub files_new: u64,
    pub files_changed: u64,
    pub files_unmodified: u64,
    pub dirs_new: u64,
    pub dirs_changed: u64,
    pub dirs_unmodified: u64,
    pub data_blobs: i64,
    pub tree_blobs: i64,
    pub data_added: u64,
    pub data_added_packed: u64,
    pub total_files_processed: u64,
    pub total_bytes_processed: u64,
}

#[derive(Deserialize)]
struct SnapshotJson {
    time: String,
    tree: Option<BlobId>,
    #[serde(default)]
    paths: Option<Vec<String>>,
    #[serde(default)]
    hostname: String,
    #[serde(default)]
    username: String,
    #[serde(default)]
    uid: u32,
    #[serde(default)]
    gid: u32,
    #[serde(default)]
    excludes: Option<Vec<String>>,
    #[serde(default)]
    tags: Option<Vec<String>>,
    #[serde(default)]
    parent: Option<SnapshotId>,
    #[serde(default)]
    original: Option<SnapshotId>,
    #[serde(default)]
    program_version: Option<String>,
    #[serde(default)]
    summary: Option<SnapshotSummary>,
}

/// One snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub time: Timestamp,
    /// The root tree.
    pub tree: BlobId,
    pub paths: Vec<String>,
    pub hostname: String,
    pub username: String,
    pub uid: u32,
    pub gid: u32,
    pub tags: Vec<String>,
    pub excludes: Vec<String>,
    /// The snapshot this one's backup started from, if any.
    pub parent: Option<SnapshotId>,
    /// For a snapshot rewritten or copied by restic, the snapshot it was made from.
    pub original: Option<SnapshotId>,
    pub program_version: Option<String>,
    pub summary: Option<SnapshotSummary>,
}

/// Parses an opened snapshot file's JSON.
pub fn parse_snapshot(json: &[u8]) -> Result<Snapshot, String> {
    if json.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err("not a snapshot: not a JSON object".to_string());
    }
    let j: SnapshotJson = serde_json::from_slice(json).map_err(|e| format!("not a snapshot: {e}"))?;
    let time = Timestamp::parse(&j.time).ok_or_else(|| format!("time {:?} is not RFC 3339", j.time))?;
    let tree = j.tree.ok_or("no tree")?;
    Ok(Snapshot {
        time,
        tree,
        paths: j.paths.unwrap_or_default(),
        hostname: j.hostname,
        username: j.username,
        uid: j.uid,
        gid: j.gid,
        tags: j.tags.unwrap_or_default(),
        excludes: j.excludes.unwrap_or_default(),
        parent: j.parent,
        original: j.original,
        program_version: j.program_version,
        summary: j.summary,
    })
}
