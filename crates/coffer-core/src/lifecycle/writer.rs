//! The writer's side of the lock-free protocol, in one type: [`WriterGuard`] is
//! what a backup calls, at four points, so that a concurrent prune never deletes
//! what its snapshot uses (docs/design.md#prune, "Backups", steps (a) to (f)).
//!
//! ```text
//! let guard = WriterGuard::begin(repo, timing, dry_run)?;   // (a) marker, (b) notices
//! repo.load_index()?;                                        // (c)
//! guard.adopt_orphan_packs()?;                               // (d)
//! let saver = BlobSaver::new(repo).with_observer(guard.observer()?);
//! ... store the tree ...
//! guard.before_commit(tree, || refresh_heads())?;            // (e), (f)
//! guard.ready_to_commit()?; save the snapshot;
//! guard.finish()?;                                           // marker deleted
//! ```

use std::collections::HashSet;
use std::time::Instant;

use super::session::Session;
use super::{Timing, notices};
use crate::error::{Error, Result};
use crate::format::ObjectKind;
use crate::id::Id;
use crate::repo::{BlobSaver, Repository, SaverEvent, SaverStats};

/// Attempts at a final check recent enough to commit (step (f)) before giving up.
const COMMIT_ATTEMPTS: usize = 5;

/// A running writer's part in the protocol, from before it reads the index to
/// after it commits its snapshot. Dropping it without [`WriterGuard::finish`]
/// (a failed backup) removes the marker too.
pub struct WriterGuard<'r> {
    repo: &'r Repository,
    timing: Timing,
    /// `None` for a dry run, which writes nothing and so needs no protection.
    session: Option<Session>,
    /// The packs the notices named when this writer began.
    noticed_at_start: HashSet<Id>,
    /// When the notices were last checked, by [`WriterGuard::before_commit`].
    checked: Option<Instant>,
}

impl<'r> WriterGuard<'r> {
    /// Steps (a) and (b): writes this writer's session marker, rewritten every
    /// `timing.heartbeat`, then reads the notices. Call before the index is read,
    /// so that a prune either sees this writer or has finished rewriting the index
    /// before it is read. A dry run writes no marker and reads no notice.
    pub fn begin(repo: &'r Repository, timing: Timing, dry_run: bool) -> Result<WriterGuard<'r>> {
        // What a backup lists next, all at once (after the marker is written,
        // which the protocol needs before the notices and the index are read).
        let next = [ObjectKind::Index, ObjectKind::Pack, ObjectKind::Snapshot, ObjectKind::Tombstone];
        let (session, noticed_at_start) = if dry_run {
            repo.prefetch_listings(&next);
            (None, HashSet::new())
        } else {
            let session = Session::start(repo, timing.heartbeat)?;
            let mut kinds = vec![ObjectKind::PruneNotice];
            kinds.extend(next);
            repo.prefetch_listings(&kinds);
            (Some(session), notices::read(repo)?.packs)
        };
        Ok(WriterGuard { repo, timing, session, noticed_at_start, checked: None })
    }

    /// Step (d), once the index is read: indexes packs no index file lists (left
    /// by interrupted backups, or by backups still running: harmless, their
    /// markers protect them), except those a notice names, and protects the index
    /// file written for them with this writer's marker. Returns that file.
    pub fn adopt_orphan_packs(&self) -> Result<Option<Id>> {
        let Some(session) = &self.session else {
            return Ok(None);
        };
        let adopted = self.repo.adopt_orphan_packs(&self.noticed_at_start)?;
        if let Some(f) = adopted {
            session.sink()(SaverEvent::IndexFile(f, Vec::new()));
        }
        Ok(adopted)
    }

    /// What the writer's saver must report its packs and index files to (pass it
    /// to [`BlobSaver::with_observer`]), so that the marker protects them; `None`
    /// for a dry run.
    pub fn observer(&self) -> Option<impl Fn(SaverEvent) + Send + Sync + 'static> {
        self.session.as_ref().map(Session::sink)
    }

    /// Steps (e) and (f), once everything the snapshot references is stored:
    ///
    /// - if a prune took this writer for stopped (its marker was removed), every
    ///   pack it stored must still exist, else its index files are deleted and the
    ///   commit refused;
    /// - every blob the tree `root` uses that sits in a pack a notice names (read
    ///   at [`WriterGuard::begin`] or now) is stored again in a new pack; a pack
    ///   already gone refuses the commit;
    /// - `then` runs after each check (the caller takes what must be taken last,
    ///   such as the history heads), and the check is made again if it all took
    ///   longer than [`Timing::check_window`].
    ///
    /// Returns what was stored again. A dry run checks nothing and does not call `then`.
    pub fn before_commit(&mut self, root: Id, mut then: impl FnMut() -> Result<()>) -> Result<SaverStats> {
        let mut rescued = SaverStats::default();
        self.checked = Some(Instant::now());
        let Some(session) = &self.session else {
            return Ok(rescued);
        };
        // The notices, and the history `then` refreshes, are listed at once, and
        // beside them the marker is looked for.
        let listings = [ObjectKind::PruneNotice, ObjectKind::Snapshot, ObjectKind::Tombstone];
        let lost = std::thread::scope(|s| {
            let lost = s.spawn(|| session.was_lost());
            self.repo.prefetch_listings(&listings);
            lost.join().unwrap_or_else(|p| std::panic::resume_unwind(p))
        });
        if lost {
            ensure_own_packs_exist(self.repo, &session.index_files())?;
        }
        for _attempt in 0..COMMIT_ATTEMPTS {
            let checked = Instant::now();
            self.checked = Some(checked);
            self.repo.prefetch_listings(&listings);
            let mut noticed = notices::read(self.repo)?.packs;
            noticed.extend(&self.noticed_at_start);
            if !noticed.is_empty() {
                let r = keep_what_prune_deletes(self.repo, root, &noticed)?;
                rescued.bytes_stored += r.bytes_stored;
                rescued.blobs += r.blobs;
                rescued.bytes_new += r.bytes_new;
                rescued.tree_bytes_new += r.tree_bytes_new;
                rescued.packs += r.packs;
            }
            then()?;
            if checked.elapsed() < self.timing.check_window() {
                break;
            }
        }
        Ok(rescued)
    }

    /// Refuses to commit when the last check of [`WriterGuard::before_commit`] is
    /// older than [`Timing::check_window`] (or was not made): a prune may have
    /// announced and waited meanwhile. Call right before storing the snapshot.
    pub fn ready_to_commit(&self) -> Result<()> {
        match self.checked {
            Some(t) if t.elapsed() < self.timing.check_window() => Ok(()),
            _ => Err(Error::Conflict("preparing the snapshot took longer than the prune grace period allows".into())),
        }
    }

    /// Ends the protocol once the snapshot is stored: stops the heartbeat and
    /// deletes the marker.
    pub fn finish(self) -> Result<()> {
        match self.session {
            Some(s) => s.finish(),
            None => Ok(()),
        }
    }
}

/// Copies into new packs every blob of the tree `root` (trees and file content)
/// that the index places in a pack a running prune is deleting, so the snapshot
/// about to be written does not rely on them. A pack already gone makes the backup
/// fail cleanly: no snapshot is written, and the next backup stores the data again.
fn keep_what_prune_deletes(repo: &Repository, root: Id, noticed: &HashSet<Id>) -> Result<SaverStats> {
    let saver = BlobSaver::new(repo);
    let mut seen = HashSet::new();
    super::each_used_blob(repo, root, &mut seen, &mut |blob_type, id| {
        let (_, pack) = repo.locate_blob(blob_type, &id)?;
        if !noticed.contains(&pack.id) {
            return Ok(());
        }
        // Another copy serves if this one is gone already.
        let data = repo.load_blob(blob_type, &id).map_err(|e| {
            Error::Conflict(format!("a prune running at the same time deleted data this backup relies on ({e})"))
        })?;
        saver.store_copy(blob_type, id, &data)?;
        Ok(())
    })?;
    saver.finish()
}

/// After a prune took this backup for stopped: if a pack this backup stored is
/// gone, its index files are removed (so nothing lists a missing pack) and the
/// backup fails without a snapshot.
fn ensure_own_packs_exist(repo: &Repository, index_files: &[Id]) -> Result<()> {
    let stored: HashSet<Id> = repo
        .backend()
        .list(ObjectKind::Pack.prefix())?
        .iter()
        .filter_map(|o| ObjectKind::Pack.id_from_path(&o.name))
        .collect();
    let mut missing = false;
    for f in index_files {
        if repo.load_index_file(f)?.iter().any(|r| !stored.contains(&r.id)) {
            missing = true;
        }
    }
    if !missing {
        return Ok(());
    }
    for f in index_files {
        repo.backend().delete(&ObjectKind::Index.path(f))?;
    }
    Err(Error::Conflict(
        "this backup was paused for longer than the prune grace period and a prune removed data it had stored".into(),
    ))
}

#[cfg(test)]
#[path = "writer_tests.rs"]
mod tests;
