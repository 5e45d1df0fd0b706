//! Prune step 3, plan: count each pack's used and unused blobs from the index
//! files (read one at a time), then choose the packs to delete (no used blob, or
//! listed by no index file) and to repack (unused bytes above the threshold), and
//! spare every pack a running backup's session marker protects. See
//! docs/design.md#prune.

use std::collections::{HashMap, HashSet};

use super::mark::Marks;
use crate::error::Result;
use crate::format::ObjectKind;
use crate::id::Id;
use crate::lifecycle::session::SessionRecord;
use crate::repo::Repository;

/// One pack's usage.
#[derive(Clone, Debug, Default)]
pub(super) struct Usage {
    /// Its stored size (0 when the pack is missing).
    pub(super) size: u64,
    pub(super) used_blobs: u64,
    pub(super) unused_blobs: u64,
    pub(super) used_bytes: u64,
    /// Bytes of the blobs no live snapshot uses. The pack's header and trailer
    /// are not counted: a small pack (a few trees) would otherwise always look
    /// worth repacking, and its repacked copy again.
    pub(super) unused_bytes: u64,
    /// Every index file that lists the pack (several writers may have).
    pub(super) index_files: Vec<Id>,
}

/// What a prune will do, and what it decided it from.
#[derive(Debug, Default)]
pub(super) struct Plan {
    /// Every stored pack and its size, listed once.
    pub(super) stored: HashMap<Id, u64>,
    /// Usage of every pack an index file lists.
    pub(super) usage: HashMap<Id, Usage>,
    /// Stored packs no index file lists: left by crashed backups, or a running
    /// backup's latest.
    pub(super) unindexed: HashSet<Id>,
    /// Packs to delete.
    pub(super) delete: HashSet<Id>,
    /// Packs whose used blobs are copied into new packs before they are deleted.
    pub(super) repack: Vec<Id>,
}

/// Lists the stored packs, counts their usage from the index files `index_files`
/// and the marks, and decides what to delete and repack (sparing nothing yet).
pub(super) fn plan(repo: &Repository, index_files: &[Id], marks: &Marks, max_unused: f64) -> Result<Plan> {
    let stored: HashMap<Id, u64> = repo
        .backend()
        .list(ObjectKind::Pack.prefix())?
        .into_iter()
        .filter_map(|o| Some((ObjectKind::Pack.id_from_path(&o.name)?, o.size)))
        .collect();
    // A blob indexed in a pack that is gone (an index file the storage replayed)
    // is served, and so counted used, from a copy in a stored pack.
    repo.index_mut().set_stored_packs(&stored.keys().copied().collect());
    let mut usage: HashMap<Id, Usage> = HashMap::new();
    {
        let index = repo.index();
        for fid in index_files {
            for rec in repo.load_index_file(fid)? {
                let u = usage.entry(rec.id).or_default();
                u.index_files.push(*fid);
                if u.index_files.len() > 1 {
                    continue; // listed twice; counted once
                }
                u.size = stored.get(&rec.id).copied().unwrap_or(0);
                for e in &rec.entries {
                    if marks.used_in(&index, &e.id, &rec.id) {
                        u.used_blobs += 1;
                        u.used_bytes += e.length as u64;
                    } else {
                        u.unused_blobs += 1;
                        u.unused_bytes += e.length as u64;
                    }
                }
            }
        }
    }
    Ok(decide(stored, usage, max_unused))
}

/// The decision from the counts alone: a stored pack with no used blob, or that
/// no index file lists, is deleted; one whose unused blobs' bytes exceed
/// `max_unused` percent of its size is repacked. A pack listed but not stored is left to `check`.
pub(super) fn decide(stored: HashMap<Id, u64>, usage: HashMap<Id, Usage>, max_unused: f64) -> Plan {
    let mut delete: HashSet<Id> = HashSet::new();
    let mut repack: Vec<Id> = Vec::new();
    for (pid, u) in &usage {
        if !stored.contains_key(pid) {
            continue; // missing: `check` reports it
        }
        if u.used_blobs == 0 {
            delete.insert(*pid);
        } else if u.size > 0 && u.unused_bytes.min(u.size) as f64 * 100.0 / u.size as f64 > max_unused {
            repack.push(*pid);
        }
    }
    let unindexed: HashSet<Id> = stored.keys().filter(|p| !usage.contains_key(p)).copied().collect();
    delete.extend(&unindexed);
    Plan { stored, usage, unindexed, delete, repack }
}

impl Plan {
    /// How many index files list a pack this plan deletes or repacks: the files
    /// the sweep replaces.
    pub(super) fn index_files_touched(&self) -> usize {
        let files: HashSet<&Id> = self
            .delete
            .iter()
            .chain(&self.repack)
            .filter_map(|p| self.usage.get(p))
            .flat_map(|u| u.index_files.iter())
            .collect();
        files.len()
    }

    /// Blobs used and unused, over every listed pack.
    pub(super) fn blob_counts(&self) -> (u64, u64) {
        (self.usage.values().map(|u| u.used_blobs).sum(), self.usage.values().map(|u| u.unused_blobs).sum())
    }

    /// Takes out of the deletions and repacks every pack the `sessions` protect;
    /// returns how many were spared.
    pub(super) fn spare(&mut self, sessions: &[(Id, Option<SessionRecord>)]) -> u64 {
        let Some(keep) = self.protected(sessions) else {
            return 0;
        };
        let mut spared = 0;
        self.delete.retain(|p| {
            let k = keep(p);
            spared += k as u64;
            !k
        });
        self.repack.retain(|p| {
            let k = keep(p);
            spared += k as u64;
            !k
        });
        spared
    }

    /// Like [`Plan::spare`], once the repacking is done: only the deletions change.
    pub(super) fn spare_deletions(&mut self, sessions: &[(Id, Option<SessionRecord>)]) -> u64 {
        let Some(keep) = self.protected(sessions) else {
            return 0;
        };
        let before = self.delete.len();
        self.delete.retain(|p| !keep(p));
        (before - self.delete.len()) as u64
    }

    /// Whether a pack is protected by one of `sessions` (`None` when there is
    /// none): one a marker lists, one listed by an index file a marker lists, and,
    /// while any marker exists, every pack no index lists. A marker that does not
    /// decode still protects the unindexed packs.
    fn protected(&self, sessions: &[(Id, Option<SessionRecord>)]) -> Option<impl Fn(&Id) -> bool + use<>> {
        if sessions.is_empty() {
            return None;
        }
        let records: Vec<&SessionRecord> = sessions.iter().filter_map(|(_, r)| r.as_ref()).collect();
        let their_files: HashSet<Id> = records.iter().flat_map(|r| r.index_files.iter().copied()).collect();
        let their_packs: HashSet<Id> = records.iter().flat_map(|r| r.packs.iter().copied()).collect();
        let through_files: HashSet<Id> = self
            .usage
            .iter()
            .filter(|(_, u)| u.index_files.iter().any(|f| their_files.contains(f)))
            .map(|(p, _)| *p)
            .collect();
        let unindexed = self.unindexed.clone();
        Some(move |p: &Id| unindexed.contains(p) || their_packs.contains(p) || through_files.contains(p))
    }
}
