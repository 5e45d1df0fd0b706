//! Snapshots: what was backed up, when, by whom, and the root tree.
//! Stored as sealed JSON. See docs/design.md#snapshots.

use serde::{Deserialize, Serialize};

use super::signed::SignatureStatus;
use crate::crypto::sign::PublicKey;
use crate::id::Id;

/// Counts recorded at the end of a backup.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    /// Files not in the parent snapshot.
    pub files_new: u64,
    /// Files in the parent whose content or metadata changed.
    pub files_changed: u64,
    /// Files unchanged since the parent.
    pub files_unchanged: u64,
    /// Directories.
    pub dirs: u64,
    /// Other entries (symlinks, devices, FIFOs, sockets).
    pub others: u64,
    /// Bytes of file content read.
    pub bytes_read: u64,
    /// Bytes of content in the snapshot.
    pub bytes_total: u64,
    /// Bytes of file content added after deduplication (before compression).
    pub bytes_new: u64,
    /// Bytes of metadata (tree blobs) added after deduplication (before
    /// compression); absent from snapshots written before it was recorded.
    #[serde(default)]
    pub bytes_new_trees: u64,
    /// Bytes added to the repository (packs, after compression and encryption).
    pub bytes_added: u64,
    /// Blobs added.
    pub blobs_added: u64,
    /// Wall time in milliseconds.
    pub duration_ms: u64,
}

/// An entry that could not be read during backup.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    /// The path, lossily rendered.
    pub path: String,
    /// Why.
    pub error: String,
}

/// The snapshot version this library writes: 3, whose trees may be split
/// (docs/design.md#trees). Readers accept 2 and 3; a reader that knows only 2
/// refuses a version 3 snapshot rather than misread its trees.
pub const SNAPSHOT_VERSION: u32 = 3;
/// The oldest snapshot version this library reads.
pub const MIN_SNAPSHOT_VERSION: u32 = 2;

/// How many skipped entries a snapshot lists by name (the count is always exact).
pub const MAX_SKIPPED_LISTED: usize = 1000;

/// The longest path or message a skipped entry records, in bytes; longer ones are
/// cut (at a character boundary) and marked with `…`, so the listed entries stay
/// well under the snapshot's size limit.
pub const MAX_SKIPPED_TEXT: usize = 4096;

impl Skipped {
    /// A skipped entry, its path and message cut to [`MAX_SKIPPED_TEXT`].
    pub fn new(path: String, error: String) -> Skipped {
        Skipped { path: cut(path), error: cut(error) }
    }
}

fn cut(mut s: String) -> String {
    if s.len() > MAX_SKIPPED_TEXT {
        let mut end = MAX_SKIPPED_TEXT - '…'.len_utf8();
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push('…');
    }
    s
}

/// Checks that what a snapshot records from the command line (its paths, tags,
/// exclude patterns and host name) fits in [`super::limits::SNAPSHOT_LISTS`]
/// bytes, so the snapshot stays under its size limit. Called at the start of a
/// backup; the error says what to do.
pub fn check_lists(paths: &[String], tags: &[String], excludes: &[String], hostname: &str) -> Result<(), String> {
    let total: usize = paths.iter().chain(tags).chain(excludes).map(|s| s.len() + 8).sum::<usize>() + hostname.len();
    let max = super::limits::SNAPSHOT_LISTS;
    if total as u64 > max {
        return Err(format!(
            "the paths, tags, exclude patterns and host name of this backup take {total} bytes, more than the \
             {max} a snapshot may record: back up a common parent directory instead of many paths, or use fewer \
             tags or exclude patterns"
        ));
    }
    Ok(())
}

/// One snapshot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Format version of this record.
    pub version: u32,
    /// When the backup started, RFC 3339 in UTC with nanoseconds.
    pub time: String,
    /// Host name (or `--host`).
    pub hostname: String,
    /// User who ran the backup.
    pub username: String,
    /// Absolute paths backed up, sorted.
    pub paths: Vec<String>,
    /// Tags.
    #[serde(default)]
    pub tags: Vec<String>,
    /// The root tree, mirroring the absolute paths.
    pub tree: Id,
    /// The snapshot used for change detection, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<Id>,
    /// Exclude patterns in force.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub excludes: Vec<String>,
    /// Entries that could not be read: a snapshot with any is incomplete.
    #[serde(default)]
    pub skipped_count: u64,
    /// The first [`MAX_SKIPPED_LISTED`] skipped entries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<Skipped>,
    /// Counts.
    pub summary: Summary,
    /// The program that wrote it, e.g. `coffer 0.1.0`.
    pub program: String,
    /// The public key of the writer that signed it.
    pub writer: PublicKey,
    /// The history heads the writer saw when it wrote this snapshot: the snapshots
    /// and tombstones that nothing else referred to yet (docs/design.md#history).
    #[serde(default)]
    pub history: Vec<Id>,
    /// Root of the Merkle tree over the snapshot's files (docs/design.md#merkle-root).
    pub merkle_root: Id,
    /// Number of leaves (regular files) under the Merkle root.
    pub merkle_leaves: u64,
    /// Secret from which the leaves' salts derive; never shown outside the repository.
    pub merkle_key: Id,
    /// Set when `coffer copy` wrote this snapshot anew (encrypted again) from a
    /// snapshot of another repository: which one, and who signed it there
    /// (docs/design.md#copy). Absent otherwise; readers that do not know it
    /// ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copied_from: Option<Box<CopiedFrom>>,
    /// When the snapshot was written (its history heads taken), RFC 3339 in
    /// UTC, where `time` says otherwise: a backup given `--time`, a snapshot
    /// copied with its source's time. Absent from snapshots written before it
    /// was recorded, whose end is `time` plus the duration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub written: Option<String>,
    /// The head of the server's transparency log this snapshot's writer had
    /// followed when it wrote it through a coffer server (docs/design.md#transparency-log,
    /// "Heads in snapshots"): another client that follows the same log checks
    /// it was shown the same history. Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_log: Option<Box<LogMark>>,
    /// Set when `coffer import` wrote this snapshot from a snapshot of another
    /// program's repository: which program, repository and snapshot
    /// (docs/design.md#import). It is signed with the rest: an import run again
    /// finds what it imported by it. Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub imported_from: Option<Box<ImportedFrom>>,
    /// The signature, as checked when loaded (not stored in the JSON).
    #[serde(skip)]
    pub signature: SignatureStatus,
}

/// Where a snapshot written by `coffer import` comes from (docs/design.md#import).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImportedFrom {
    /// The program whose repository it was: `restic`, `borg`, `kopia`, `tar`.
    pub tool: String,
    /// That repository's id, as the program gives it.
    pub repository: String,
    /// The snapshot's (or archive's) id there.
    pub snapshot: String,
}

impl ImportedFrom {
    /// The longest field, in bytes: ids of every such program are far shorter.
    pub const MAX_FIELD: usize = 256;

    /// Checks the fields' lengths.
    pub fn check(&self) -> Result<(), String> {
        for (what, v) in [("tool", &self.tool), ("repository", &self.repository), ("snapshot", &self.snapshot)] {
            if v.is_empty() || v.len() > Self::MAX_FIELD {
                return Err(format!("the import's {what} id must have 1 to {} bytes", Self::MAX_FIELD));
            }
        }
        Ok(())
    }
}

/// A head of a server's transparency log, as a snapshot records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogMark {
    /// The key that signs the log's heads: which server's log it is.
    pub key: PublicKey,
    /// The number of entries.
    pub size: u64,
    /// The Merkle root of those entries.
    pub root: Id,
}

/// Where a snapshot written by `coffer copy` comes from (docs/design.md#copy).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CopiedFrom {
    /// The source repository's id.
    pub repository: Id,
    /// The source snapshot's id (the hash of its stored bytes there).
    pub snapshot: Id,
    /// The public key of the writer that signed the source snapshot.
    pub writer: PublicKey,
    /// The source snapshot's Ed25519 signature (128 hex), checkable against the
    /// source's stored object. Absent from copies made before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// The writer of the original backup when the source snapshot was itself a
    /// copy written anew (its own `copied_from`'s origin, or writer); absent when
    /// `writer` wrote the original.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<PublicKey>,
}

impl CopiedFrom {
    /// The writers a reader must trust to trust the copy's content, beside the
    /// copy's own signer: the source snapshot's writer, and the original's.
    pub fn writers(&self) -> Vec<PublicKey> {
        let mut v = vec![self.writer];
        v.extend(self.origin.filter(|o| *o != self.writer));
        v
    }
}

impl Snapshot {
    /// What the snapshot's signature commits to in the clear: its Merkle root and
    /// leaf count ([`crate::merkle::commitment`]).
    pub fn commitment(&self) -> [u8; 32] {
        crate::merkle::commitment(&self.merkle_root.0, self.merkle_leaves)
    }

    /// When the backup finished: `time` plus its duration.
    pub fn end_time(&self) -> std::time::SystemTime {
        self.written_time()
            .unwrap_or_else(|| self.system_time() + std::time::Duration::from_millis(self.summary.duration_ms))
    }

    /// When it was written, if recorded ([`Snapshot::written`]).
    pub fn written_time(&self) -> Option<std::time::SystemTime> {
        self.written.as_deref().and_then(|w| humantime::parse_rfc3339(w).ok())
    }

    /// Whether some entries could not be read.
    pub fn is_incomplete(&self) -> bool {
        self.skipped_count > 0
    }

    /// Serializes to JSON.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("snapshots always serialize")
    }

    /// Parses JSON and checks the version.
    pub fn decode(buf: &[u8]) -> Result<Snapshot, String> {
        let s: Snapshot = serde_json::from_slice(buf).map_err(|e| format!("snapshot does not parse: {e}"))?;
        if !(MIN_SNAPSHOT_VERSION..=SNAPSHOT_VERSION).contains(&s.version) {
            return Err(format!("snapshot version {} is not supported by this coffer", s.version));
        }
        humantime::parse_rfc3339(&s.time).map_err(|e| format!("snapshot time {:?}: {e}", s.time))?;
        Ok(s)
    }

    /// The time as a system time.
    pub fn system_time(&self) -> std::time::SystemTime {
        humantime::parse_rfc3339(&self.time).unwrap_or(std::time::UNIX_EPOCH)
    }
}
