//! Prune: deletes what no snapshot references and repacks mostly unused packs,
//! without locks, while backups run. See docs/design.md#prune, whose steps these
//! are, one file each (the backups' side of the protocol is
//! [`crate::lifecycle::writer`]):
//!
//! 1. Load (here): list the snapshots and tombstones, then the index files once,
//!    and read them; refuse to run while a snapshot is damaged; finish the
//!    deletions of forgotten snapshots.
//! 2. [`mark`]: every blob reachable from a live snapshot, one bit per indexed blob.
//! 3. [`plan`]: count each pack's used blobs; delete packs with none and packs no
//!    index lists, repack packs whose unused share exceeds `max_unused`; spare
//!    what running backups' markers protect. A dry run stops here.
//! 4. [`repack`]: copy the used blobs of the packs to repack into new packs.
//! 5. [`announce`]: store notices of every pack to delete, wait the grace period
//!    watching the markers, remove stale markers, spare what live ones protect.
//! 6. [`recheck`]: spare the packs that snapshots written meanwhile use.
//! 7. [`sweep`]: rewrite the index files that list deleted packs, delete the
//!    packs, and delete the notices when no backup is running.
//!
//! Memory: the index, one bit per blob, a few counters per pack, and one pack at a
//! time while repacking.

mod announce;
mod mark;
mod plan;
mod recheck;
mod repack;
mod sweep;

use std::time::Instant;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::format::ObjectKind;
use crate::id::Id;
use crate::lifecycle::{Timing, session};
use crate::progress::Progress;
use crate::repo::Repository;
use crate::repo::history::History;

/// What to prune and how.
#[derive(Clone, Debug)]
pub struct PruneOptions {
    /// Repack a pack when more than this percentage of its bytes is unused.
    pub max_unused: f64,
    /// Plan and report, change nothing.
    pub dry_run: bool,
    /// The protocol's durations; the prune waits `timing.grace` between announcing
    /// deletions and making them.
    pub timing: Timing,
}

impl Default for PruneOptions {
    fn default() -> Self {
        PruneOptions { max_unused: 5.0, dry_run: false, timing: Timing::default() }
    }
}

/// What a prune did (or, for a dry run, would do).
#[derive(Clone, Debug, Default, Serialize)]
pub struct PruneReport {
    /// Packs in the repository at the start.
    pub packs: u64,
    /// Their total size.
    pub bytes_before: u64,
    /// Blobs referenced by live snapshots.
    pub blobs_used: u64,
    /// Indexed blobs no live snapshot references (duplicates included).
    pub blobs_unused: u64,
    /// Packs deleted.
    pub packs_deleted: u64,
    /// Packs repacked (their used blobs copied, then the pack deleted).
    pub packs_repacked: u64,
    /// Packs kept because a backup running meanwhile may need them.
    pub packs_spared: u64,
    /// Bytes of the packs deleted.
    pub bytes_deleted: u64,
    /// Bytes written by repacking (a dry run: the blobs it would copy, without
    /// the new packs' headers and index files).
    pub bytes_repacked: u64,
    /// Index files replaced.
    pub index_files_replaced: u64,
    /// Forgotten snapshots whose deletion was finished.
    pub snapshots_deleted: u64,
    /// Session markers of crashed backups removed.
    pub stale_sessions: u64,
    /// Wall time in milliseconds.
    pub duration_ms: u64,
    /// Nothing was changed.
    pub dry_run: bool,
}

impl PruneReport {
    /// Bytes freed: deleted minus added by repacking.
    pub fn bytes_freed(&self) -> i64 {
        self.bytes_deleted as i64 - self.bytes_repacked as i64
    }
}

/// Prunes `repo`, which must not have its index loaded yet: the snapshots are
/// listed first and the index read after, so that every snapshot seen has its
/// blobs in the index read (a snapshot is written after its index files).
pub fn prune(repo: &Repository, opts: &PruneOptions, progress: &dyn Progress) -> Result<PruneReport> {
    let start = Instant::now();
    let mut report = PruneReport { dry_run: opts.dry_run, ..Default::default() };

    // 1. Load.
    let (mut history, index_files) = load(repo, opts.dry_run, &mut report)?;
    let live: Vec<Id> = history.live_snapshots().iter().map(|(id, _)| *id).collect();

    // 2. Mark.
    let marks = mark::mark(repo, &history)?;

    // 3. Plan, sparing what running backups are writing.
    let mut plan = plan::plan(repo, &index_files, &marks, opts.max_unused)?;
    report.packs = plan.stored.len() as u64;
    report.bytes_before = plan.stored.values().sum();
    (report.blobs_used, report.blobs_unused) = plan.blob_counts();
    let markers = session::list(repo)?;
    report.packs_spared += plan.spare(&markers);
    if opts.dry_run {
        report.index_files_replaced = plan.index_files_touched() as u64;
        report.packs_deleted = plan.delete.len() as u64;
        report.packs_repacked = plan.repack.len() as u64;
        report.bytes_deleted = plan.delete.iter().chain(&plan.repack).map(|p| plan.stored[p]).sum();
        // The used blobs repacking copies; the new packs' headers and index
        // files add a little (docs/design.md#prune).
        report.bytes_repacked = plan.repack.iter().map(|p| plan.usage[p].used_bytes).sum();
        report.duration_ms = start.elapsed().as_millis() as u64;
        return Ok(report);
    }

    // Nothing to delete or repack, no backup running (no marker, stale or not)
    // and no notice left: steps 4 to 7 would change nothing, so the grace
    // period is not waited.
    if plan.delete.is_empty()
        && plan.repack.is_empty()
        && markers.is_empty()
        && repo.list_ids(ObjectKind::PruneNotice)?.is_empty()
    {
        report.duration_ms = start.elapsed().as_millis() as u64;
        return Ok(report);
    }

    // 4. Repack.
    report.bytes_repacked = repack::repack(repo, &plan, &marks, progress)?;
    plan.delete.extend(plan.repack.iter().copied());

    // 5. Announce, then wait, watching the running backups' markers.
    let announced = announce::announce(repo, &mut plan, opts.timing.grace, progress, &mut report)?;

    // 6. Re-check the snapshots written meanwhile.
    recheck::recheck(repo, &mut history, &live, &index_files, &mut plan.delete, &mut report)?;

    // 7. Sweep.
    sweep::sweep(repo, &index_files, &plan, &announced, &mut report)?;
    report.duration_ms = start.elapsed().as_millis() as u64;
    Ok(report)
}

/// Step 1: the history, then the index files (listed once: the same list serves
/// the usage count and the sweep), read into the index. A damaged snapshot stops
/// the prune; snapshots a tombstone forgot that are still stored are deleted.
fn load(repo: &Repository, dry_run: bool, report: &mut PruneReport) -> Result<(History, Vec<Id>)> {
    let history = History::load(repo)?;
    let index_files = repo.list_ids(ObjectKind::Index)?;
    repo.load_index_files(&index_files)?;
    repo.index_mut().merge();
    if let Some(e) = history.damaged.first() {
        return Err(Error::InvalidInput(format!(
            "prune refuses to run while a snapshot is damaged ({e}): what it references is unknown; run \
             `coffer check` and forget the damaged snapshot first"
        )));
    }
    // Finish forgets that were interrupted.
    let forgotten = history.forgotten();
    for (id, _) in history.snapshots.iter().filter(|(id, _)| forgotten.contains_key(id)) {
        if !dry_run {
            repo.backend().delete(&ObjectKind::Snapshot.path(id))?;
        }
        report.snapshots_deleted += 1;
    }
    Ok((history, index_files))
}

#[cfg(test)]
mod tests;
