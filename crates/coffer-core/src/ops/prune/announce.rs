//! Prune step 5, announce: store notices listing every pack to delete, read the
//! session markers, wait the grace period, and read them again. A marker that did
//! not change during the wait belongs to a backup that stopped: it is deleted,
//! though what it protected is still spared this time (a backup that was only
//! paused re-creates its marker, and a later prune frees the rest). Packs that a
//! marker read after the wait protects are spared. See docs/design.md#prune.

use std::time::{Duration, SystemTime};

use super::PruneReport;
use super::plan::Plan;
use crate::error::Result;
use crate::format::envelope::SealedKind;
use crate::format::notice::PruneNotice;
use crate::format::{FORMAT_VERSION, ObjectKind};
use crate::id::Id;
use crate::lifecycle::notices;
use crate::lifecycle::session::{self, SessionRecord};
use crate::progress::Progress;
use crate::repo::Repository;

/// What the announcement left for the sweep.
pub(super) struct Announced {
    /// The notices this prune stored.
    pub(super) notices: Vec<Id>,
    /// Every notice stored when this prune's were (this prune's included).
    pub(super) all_notices: Vec<Id>,
    /// The markers of backups still running after the wait.
    pub(super) active: Vec<(Id, Option<SessionRecord>)>,
}

/// Announces `plan.delete`, waits `grace`, and spares what running backups protect.
pub(super) fn announce(
    repo: &Repository,
    plan: &mut Plan,
    grace: Duration,
    progress: &dyn Progress,
    report: &mut PruneReport,
) -> Result<Announced> {
    // Several notices when the packs are too many for one.
    let mut doomed: Vec<Id> = plan.delete.iter().copied().collect();
    doomed.sort();
    let mut batches: Vec<&[Id]> = doomed.chunks(PruneNotice::MAX_PACKS).collect();
    if batches.is_empty() {
        batches.push(&[]);
    }
    let mut stored = Vec::new();
    for packs in batches {
        let notice = PruneNotice {
            version: FORMAT_VERSION,
            time: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
            hostname: crate::fs::meta::hostname(),
            packs: packs.to_vec(),
            backends: Vec::new(),
        };
        stored.push(repo.save_sealed(SealedKind::PruneNotice, &notice.encode())?);
    }
    let all_notices = notices::read(repo)?.ids;
    let watched = session::list(repo)?;
    progress.waiting("running backups to see the prune notice and keep what they need", grace);
    std::thread::sleep(grace);
    let now = session::list(repo)?;
    report.packs_spared += plan.spare_deletions(&now);
    let mut active = Vec::new();
    for (id, rec) in now {
        let stale = watched.iter().any(|(w, wrec)| *w == id && wrec.is_some() && *wrec == rec);
        if stale {
            repo.backend().delete(&ObjectKind::Session.path(&id))?;
            report.stale_sessions += 1;
        } else {
            active.push((id, rec));
        }
    }
    Ok(Announced { notices: stored, all_notices, active })
}
