//! Removing snapshots on purpose: a signed tombstone first, then the snapshots.
//! See docs/design.md#tombstones.

use std::time::SystemTime;

use crate::error::{Error, Result};
use crate::format::tombstone::{Forgotten, Tombstone};
use crate::format::{FORMAT_VERSION, ObjectKind};
use crate::history::History;
use crate::id::Id;
use crate::repo::Repository;
use crate::sign::SigningKey;

/// Forgets the snapshots `ids`: writes one tombstone recording them (with the
/// history links they held) and then deletes them. A crash in between leaves
/// snapshots that are both stored and forgotten; they are hidden, and forgetting
/// them again finishes the job without a new tombstone. Returns the id of the
/// tombstone that records the removal.
pub fn forget(repo: &Repository, history: &History, ids: &[Id], key: &SigningKey) -> Result<Id> {
    if ids.is_empty() {
        return Err(Error::InvalidInput("no snapshot to forget".into()));
    }
    let already = history.forgotten();
    let fresh: Vec<Id> = ids.iter().filter(|id| !already.contains_key(id)).copied().collect();
    if fresh.is_empty() {
        for id in ids {
            repo.backend().delete(&ObjectKind::Snapshot.path(id))?;
        }
        return Ok(already[&ids[0]].0);
    }
    let mut forgotten = Vec::new();
    for id in &fresh {
        match history.snapshots.iter().find(|(i, _)| i == id) {
            Some((_, s)) => forgotten.push(Forgotten {
                id: *id,
                time: s.time.clone(),
                end: humantime::format_rfc3339_nanos(s.end_time()).to_string(),
                hostname: s.hostname.clone(),
                paths: s.paths.clone(),
                history: s.history.clone(),
            }),
            // A damaged snapshot can be forgotten too; what it held is unknown.
            None if history.present.contains(id) => forgotten.push(Forgotten {
                id: *id,
                time: String::new(),
                end: String::new(),
                hostname: String::new(),
                paths: Vec::new(),
                history: Vec::new(),
            }),
            None => return Err(Error::SnapshotNotFound(id.to_hex())),
        }
    }
    let tombstone = Tombstone {
        version: FORMAT_VERSION,
        time: humantime::format_rfc3339_nanos(SystemTime::now()).to_string(),
        hostname: crate::fsmeta::hostname(),
        username: crate::fsmeta::username(),
        writer: key.public(),
        history: history.heads(),
        forgotten,
        program: format!("coffer {}", env!("CARGO_PKG_VERSION")),
        signature: Default::default(),
    };
    let tid = repo.save_tombstone(&tombstone, key)?;
    for id in ids {
        repo.backend().delete(&ObjectKind::Snapshot.path(id))?;
    }
    Ok(tid)
}
