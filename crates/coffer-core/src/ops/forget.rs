//! Removing snapshots on purpose: a signed tombstone first, then the snapshots.
//! See docs/design.md#tombstones.

use std::collections::HashMap;
use std::time::SystemTime;

use crate::crypto::sign::SigningKey;
use crate::error::{Error, Result};
use crate::format::tombstone::{Forgotten, Tombstone};
use crate::format::{FORMAT_VERSION, ObjectKind, limits};
use crate::id::Id;
use crate::repo::Repository;
use crate::repo::history::History;

/// Forgets the snapshots `ids`: writes a tombstone recording them (with the
/// history links they held; several tombstones when there are more than one may
/// hold, see [`limits::TOMBSTONE_SNAPSHOTS`]) and then deletes them. A crash in between leaves
/// snapshots that are both stored and forgotten; they are hidden, and forgetting
/// them again finishes the job without a new tombstone. Returns the id of the
/// (first) tombstone that records the removal.
pub fn forget(repo: &Repository, history: &History, ids: &[Id], key: &SigningKey) -> Result<Id> {
    forget_replaced(repo, history, ids, &HashMap::new(), key)
}

/// [`forget`], recording for the snapshots in `replaced_by` the snapshot that
/// replaces each (`coffer tag`, docs/design.md#tag).
pub fn forget_replaced(
    repo: &Repository,
    history: &History,
    ids: &[Id],
    replaced_by: &HashMap<Id, Id>,
    key: &SigningKey,
) -> Result<Id> {
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
                replaced_by: replaced_by.get(id).copied(),
            }),
            // A damaged snapshot can be forgotten too; what it held is unknown.
            None if history.present.contains(id) => forgotten.push(Forgotten {
                id: *id,
                time: String::new(),
                end: String::new(),
                hostname: String::new(),
                paths: Vec::new(),
                history: Vec::new(),
                replaced_by: replaced_by.get(id).copied(),
            }),
            None => return Err(Error::SnapshotNotFound(id.to_hex())),
        }
    }
    // Several tombstones when one would grow past its size limit; all are
    // written before any snapshot is deleted.
    let mut first = None;
    for batch in tombstone_batches(forgotten) {
        let tombstone = Tombstone {
            version: FORMAT_VERSION,
            time: humantime::format_rfc3339_nanos(SystemTime::now()).to_string(),
            hostname: crate::fs::meta::hostname(),
            username: crate::fs::meta::username(),
            writer: key.public(),
            history: history.heads(),
            forgotten: batch,
            program: format!("coffer {}", env!("CARGO_PKG_VERSION")),
            signature: Default::default(),
        };
        let tid = repo.save_tombstone(&tombstone, key)?;
        first.get_or_insert(tid);
    }
    let tid = first.expect("at least one snapshot is forgotten");
    for id in ids {
        repo.backend().delete(&ObjectKind::Snapshot.path(id))?;
    }
    Ok(tid)
}

/// What one tombstone records at most, in bytes of the forgotten snapshots' paths
/// and links (well under [`limits::TOMBSTONE`]: one snapshot's paths take at most
/// [`limits::SNAPSHOT_LISTS`]).
const TOMBSTONE_TARGET: usize = 16 << 20;

/// Splits the forgotten snapshots into the contents of tombstones that stay
/// under the tombstone size limit.
pub(crate) fn tombstone_batches(forgotten: Vec<Forgotten>) -> Vec<Vec<Forgotten>> {
    let mut out = vec![Vec::new()];
    let mut bytes = 0;
    for f in forgotten {
        let len = 300
            + f.hostname.len()
            + f.time.len()
            + f.end.len()
            + f.paths.iter().map(|p| p.len() + 8).sum::<usize>()
            + f.history.len() * 70;
        let cur = out.last_mut().expect("never empty");
        if !cur.is_empty() && (cur.len() >= limits::TOMBSTONE_SNAPSHOTS || bytes + len > TOMBSTONE_TARGET) {
            out.push(Vec::new());
            bytes = 0;
        }
        bytes += len;
        out.last_mut().expect("never empty").push(f);
    }
    out
}
