//! Prune step 7, sweep: for every index file read in step 1 that lists a pack to
//! delete, store a replacement without those packs, then delete the old one; then
//! delete the packs. Finally, if no session marker exists, delete the notices
//! (this prune's and earlier ones); otherwise they stay for the backups that may
//! need them, and a later prune removes them. See docs/design.md#prune.

use super::PruneReport;
use super::announce::Announced;
use super::plan::Plan;
use crate::error::Result;
use crate::format::envelope::SealedKind;
use crate::format::{ObjectKind, index as index_file};
use crate::id::Id;
use crate::lifecycle::session;
use crate::repo::Repository;

/// Deletes what `plan.delete` still names, the index files read in step 1
/// (`index_files`) rewritten first.
pub(super) fn sweep(
    repo: &Repository,
    index_files: &[Id],
    plan: &Plan,
    announced: &Announced,
    report: &mut PruneReport,
) -> Result<()> {
    for fid in index_files {
        let recs = repo.load_index_file(fid)?;
        if !recs.iter().any(|r| plan.delete.contains(&r.id)) {
            continue;
        }
        let kept: Vec<_> = recs.into_iter().filter(|r| !plan.delete.contains(&r.id)).collect();
        if !kept.is_empty() {
            repo.save_sealed(SealedKind::Index, &index_file::encode(&kept))?;
        }
        repo.backend().delete(&ObjectKind::Index.path(fid))?;
        report.index_files_replaced += 1;
    }
    for p in &plan.delete {
        repo.backend().delete(&ObjectKind::Pack.path(p))?;
        report.bytes_deleted += plan.stored.get(p).copied().unwrap_or(0);
        if plan.repack.contains(p) {
            report.packs_repacked += 1;
        } else {
            report.packs_deleted += 1;
        }
    }
    // Earlier notices are removed once no backup is running that may have seen
    // them; this prune's stay until then too.
    if announced.active.is_empty() && session::list(repo)?.is_empty() {
        for n in announced.all_notices.iter().chain(&announced.notices) {
            repo.backend().delete(&ObjectKind::PruneNotice.path(n))?;
        }
    }
    Ok(())
}
