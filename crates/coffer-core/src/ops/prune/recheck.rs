//! Prune step 6, re-check: what was indexed or snapshotted since step 1 is kept.
//! Every pack an index file stored since step 1 lists is spared: step 7
//! rewrites only the index files read in step 1, so deleting such a pack would
//! leave an index listing a pack that is gone (a backup that ran meanwhile and
//! stored blobs another backup also stored: the index serves them from the
//! other's pack, and its own pack looked unused). Snapshots written since step
//! 1 keep the packs their blobs are served from. See docs/design.md#prune.

use std::collections::HashSet;

use super::PruneReport;
use crate::error::{Error, Result};
use crate::format::ObjectKind;
use crate::id::Id;
use crate::repo::Repository;
use crate::repo::history::History;

/// Lists the snapshots again and takes out of `delete` every pack a live
/// snapshot not among `live` (those marked) uses. `index_files` are the index
/// files read in step 1.
pub(super) fn recheck(
    repo: &Repository,
    history: &mut History,
    live: &[Id],
    index_files: &[Id],
    delete: &mut HashSet<Id>,
    report: &mut PruneReport,
) -> Result<()> {
    history.refresh(repo)?;
    let late: Vec<_> = history.live_snapshots().into_iter().filter(|(id, _)| !live.contains(id)).collect();
    let known: HashSet<&Id> = index_files.iter().collect();
    let mut added = Vec::new();
    for fid in repo.list_ids(ObjectKind::Index)?.iter().filter(|f| !known.contains(f)) {
        added.extend(repo.load_index_file(fid)?);
    }
    for pack in &added {
        if delete.remove(&pack.id) {
            report.packs_spared += 1;
        }
    }
    if late.is_empty() {
        return Ok(());
    }
    repo.index_mut().add_packs(&added).map_err(|e| Error::corrupt("index", e))?;
    let mut seen: HashSet<Id> = HashSet::new();
    for (_, snap) in &late {
        crate::lifecycle::each_used_blob(repo, snap.tree, &mut seen, &mut |blob_type, id| {
            let (_, pack) = repo.locate_blob(blob_type, &id)?;
            if delete.remove(&pack.id) {
                report.packs_spared += 1;
            }
            Ok(())
        })?;
    }
    Ok(())
}
