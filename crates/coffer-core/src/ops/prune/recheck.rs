//! Prune step 6, re-check: snapshots written since step 1 keep what they use.
//! Their blobs may be in packs indexed only since the index was read, so the
//! index files stored meanwhile are read first; every pack such a snapshot's
//! blobs are served from is spared, whatever the plan said. See
//! docs/design.md#prune.

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
    if late.is_empty() {
        return Ok(());
    }
    let known: HashSet<&Id> = index_files.iter().collect();
    let mut added = Vec::new();
    for fid in repo.list_ids(ObjectKind::Index)?.iter().filter(|f| !known.contains(f)) {
        added.extend(repo.load_index_file(fid)?);
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
