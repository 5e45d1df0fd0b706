//! The writer's side of the lock-free protocol, in one type: [`WriterGuard`] is
//! what a backup calls, at four points, so that a concurrent prune never deletes
//! what its snapshot uses (docs/design.md#prune, "Backups", steps (a) to (f)).
//!
//! ```text
//! let guard = WriterGuard::begin(repo, timing, dry_run)?;   // (a) marker, (b) notices
//!                      // (or adopts the marker of `announce`, written at the open)
//! repo.load_index()?;                                        // (c)
//! guard.adopt_orphan_packs()?;                               // (d)
//! let saver = BlobSaver::new(repo).with_observer(guard.observer()?);
//! ... store the tree ...; beside it: guard.look_ahead()      // (e)'s round, early
//! guard.keep_look(look);
//! unless guard.has_recent_look(): guard.look_ahead() beside saver.finish()?;
//! guard.before_commit(tree, || refresh_heads())?;            // (e), (f)
//! guard.ready_to_commit()?;
//! save the snapshot; beside guard.finish()?;                 // marker deleted
//! ```

use std::collections::HashSet;
use std::time::Instant;

use super::session::{Opening, Session};
use super::{Timing, notices};
use crate::error::{Error, Result};
use crate::format::ObjectKind;
use crate::id::Id;
use crate::repo::{BlobSaver, Fetched, Repository, SaverEvent, SaverStats};
use coffer_backend::Backend;
use std::sync::Arc;

/// What a backup lists once its marker is written: the notices, then what the
/// index load, the adoption of orphan packs and the history read.
const AFTER_MARKER: [ObjectKind; 5] =
    [ObjectKind::PruneNotice, ObjectKind::Index, ObjectKind::Pack, ObjectKind::Snapshot, ObjectKind::Tombstone];

/// A backup's first steps taken while its keys are still being derived: an
/// opening marker, then the listings of [`WriterGuard::begin`] (step (a), and
/// the listings of (b) and (c)). Give them to the repository once it is open
/// ([`Announced::hand_to`]); dropped instead, the marker is deleted.
pub struct Announced {
    opening: Opening,
    listings: Fetched,
}

/// Writes an opening marker on `backend` (a repository's storage, before its
/// keys are known) and then lists what a backup reads first: two round trips,
/// which overlap the key derivation (docs/design.md#round-trips).
pub fn announce(backend: Arc<dyn Backend>) -> Result<Announced> {
    let opening = Opening::write(backend.clone())?;
    let listings = Fetched::list(backend.as_ref(), &AFTER_MARKER);
    Ok(Announced { opening, listings })
}

impl Announced {
    /// Hands the marker and the listings to `repo`, opened on the same storage:
    /// [`WriterGuard::begin`] adopts the marker.
    pub fn hand_to(self, repo: &Repository) {
        repo.keep_fetched(self.listings);
        repo.keep_opening(self.opening);
    }
}

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
    /// The notices met that do not decode, at the start or since.
    unknown: Vec<notices::Undecodable>,
    /// The snapshot this writer's tree was built from ([`WriterGuard::vouch_parent`]):
    /// its snapshot id and root tree.
    parent: Option<(Id, Id)>,
    /// When the notices were last checked, by [`WriterGuard::before_commit`].
    checked: Option<Instant>,
    /// The newest round of [`WriterGuard::look_ahead`] kept.
    looked: Option<Look>,
}

/// The round of step (e) taken ahead of the commit ([`WriterGuard::look_ahead`]):
/// when it began, and whether the marker was found gone.
pub struct Look {
    at: Instant,
    lost: bool,
}

impl<'r> WriterGuard<'r> {
    /// Steps (a) and (b): writes this writer's session marker, rewritten every
    /// `timing.heartbeat`, then reads the notices. Call before the index is read,
    /// so that a prune either sees this writer or has finished rewriting the index
    /// before it is read. A dry run writes no marker and reads no notice.
    pub fn begin(repo: &'r Repository, timing: Timing, dry_run: bool) -> Result<WriterGuard<'r>> {
        // What a backup lists next, all at once (after the marker is written,
        // which the protocol needs before the notices and the index are read).
        // A marker written at the open was followed by these listings already.
        let opening = repo.take_opening();
        let (session, noticed) = if dry_run {
            repo.prefetch_listings(&AFTER_MARKER[1..]);
            (None, notices::Notices::default())
        } else {
            let session = match opening {
                Some(o) => Session::adopt(repo, o, timing.heartbeat)?,
                None => {
                    // Listings taken before this marker existed do not count.
                    for k in AFTER_MARKER {
                        repo.drop_prefetched(k);
                    }
                    Session::start(repo, timing.heartbeat)?
                }
            };
            repo.prefetch_listings(&AFTER_MARKER);
            (Some(session), notices::read(repo)?)
        };
        Ok(WriterGuard {
            repo,
            timing,
            session,
            noticed_at_start: noticed.packs,
            unknown: noticed.unknown,
            parent: None,
            checked: None,
            looked: None,
        })
    }

    /// The notices met so far that do not decode: while one is stored, which
    /// packs a prune is deleting is unknown, so no orphan pack is adopted and the
    /// final check stores again every blob it cannot show is safe
    /// ([`WriterGuard::before_commit`]). For the caller to warn about.
    pub fn unknown_notices(&self) -> &[notices::Undecodable] {
        &self.unknown
    }

    /// Names the snapshot `snapshot` (root tree `tree`) the writer's tree reuses
    /// content from. While a notice does not decode, the blobs this snapshot uses
    /// need not be stored again, if it is still stored and not forgotten when the
    /// final check is made (docs/design.md#prune, "A notice that does not decode").
    pub fn vouch_parent(&mut self, snapshot: Id, tree: Id) {
        self.parent = Some((snapshot, tree));
    }

    /// Step (d), once the index is read: indexes packs no index file lists (left
    /// by interrupted backups, or by backups still running: harmless, their
    /// markers protect them), except those a notice names, and protects the index
    /// file written for them with this writer's marker. Returns that file.
    pub fn adopt_orphan_packs(&self) -> Result<Option<Id>> {
        let Some(session) = &self.session else {
            return Ok(None);
        };
        // A notice that does not decode may name any orphan pack.
        if !self.unknown.is_empty() {
            return Ok(None);
        }
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
        // A round looked ahead serves if recent; else (storing the last packs took
        // longer than a check may be old) it is taken again.
        let Look { at: first, lost } = match self.looked.take() {
            Some(looked) if looked.at.elapsed() < self.timing.check_window() => looked,
            _ => Look { at: Instant::now(), lost: commit_round(self.repo, session) },
        };
        if lost {
            ensure_own_packs_exist(self.repo, &session.index_files())?;
        }
        for attempt in 0..COMMIT_ATTEMPTS {
            // The first check reads the listings of the commit round, taken when it began.
            let checked = if attempt == 0 { first } else { Instant::now() };
            self.checked = Some(checked);
            if attempt > 0 {
                list_for_commit(self.repo);
            }
            let now = notices::read(self.repo)?;
            let mut noticed = now.packs;
            noticed.extend(&self.noticed_at_start);
            for u in now.unknown {
                if !self.unknown.iter().any(|k| k.id == u.id) {
                    self.unknown.push(u);
                }
            }
            let unknown = match self.unknown.is_empty() {
                true => None,
                // Read after the notices were listed (so a forget a prune saw is seen).
                false => Some(Unknown { own: session.stored_packs(), vouched: vouched_tree(self.repo, self.parent)? }),
            };
            if !noticed.is_empty() || unknown.is_some() {
                let r = keep_what_prune_deletes(self.repo, root, &noticed, unknown.as_ref())?;
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

    /// Takes the round of [`WriterGuard::before_commit`] (the marker looked
    /// for, the notices and the history listed) now, while the tree is walked
    /// or the last packs and index files are stored: any time after step (d).
    /// Give it to [`WriterGuard::keep_look`]; `before_commit` then reads what it
    /// found, as a check made when it began. `None` for a dry run.
    pub fn look_ahead(&self) -> Option<Look> {
        let session = self.session.as_ref()?;
        let at = Instant::now();
        Some(Look { at, lost: commit_round(self.repo, session) })
    }

    /// Keeps `look` for [`WriterGuard::before_commit`], unless the one kept is
    /// newer.
    pub fn keep_look(&mut self, look: Option<Look>) {
        if look.as_ref().map(|l| l.at) > self.looked.as_ref().map(|l| l.at) {
            self.looked = look;
        }
    }

    /// Whether a look kept is recent enough to serve a commit that follows
    /// shortly: younger than half the [`Timing::check_window`], so that storing
    /// the last packs may take the other half before it is taken again.
    pub fn has_recent_look(&self) -> bool {
        self.looked.as_ref().is_some_and(|l| l.at.elapsed() < self.timing.check_window() / 2)
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

    /// Ends the protocol: stops the heartbeat and deletes the marker. Once
    /// [`WriterGuard::ready_to_commit`] has passed, this may run while the
    /// snapshot is being stored: after the final check nothing relies on the
    /// marker (docs/design.md#prune, "Why a blob a snapshot uses is never
    /// deleted").
    pub fn finish(self) -> Result<()> {
        match self.session {
            Some(s) => s.finish(),
            None => Ok(()),
        }
    }
}

/// What the commit round lists: the notices, and the history `then` refreshes.
const COMMIT_LISTINGS: [ObjectKind; 3] = [ObjectKind::PruneNotice, ObjectKind::Snapshot, ObjectKind::Tombstone];

/// The round before a commit: the listings of [`COMMIT_LISTINGS`] at once, and
/// beside them the marker looked for. Returns whether it is gone.
fn commit_round(repo: &Repository, session: &Session) -> bool {
    std::thread::scope(|s| {
        let lost = s.spawn(|| session.was_lost());
        list_for_commit(repo);
        lost.join().unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

/// Lists [`COMMIT_LISTINGS`] now, for the check that follows, replacing any
/// listing of them fetched earlier and not read (an earlier look's): a check
/// counts from when its listings were taken.
fn list_for_commit(repo: &Repository) {
    for k in COMMIT_LISTINGS {
        repo.drop_prefetched(k);
    }
    repo.prefetch_listings(&COMMIT_LISTINGS);
}

/// What a writer can show is safe from a prune whose notice does not decode.
struct Unknown {
    /// The packs this writer stored: its marker protects them.
    own: HashSet<Id>,
    /// The root tree of a snapshot that is stored and not forgotten, listed after
    /// the notices: every blob it uses is kept by any prune (marked live, spared
    /// by the re-check, or, for one stored later still, kept by its own writer's
    /// final check).
    vouched: Option<Id>,
}

/// The root tree of `parent` if the snapshot is still stored and no tombstone
/// that loads forgets it, in listings taken now; else `None`.
fn vouched_tree(repo: &Repository, parent: Option<(Id, Id)>) -> Result<Option<Id>> {
    let Some((snapshot, tree)) = parent else {
        return Ok(None);
    };
    if !repo.list_ids(ObjectKind::Snapshot)?.contains(&snapshot) {
        return Ok(None);
    }
    for t in repo.list_ids(ObjectKind::Tombstone)? {
        match repo.load_tombstone(&t) {
            Ok(t) if t.forgotten.iter().any(|f| f.id == snapshot) => return Ok(None),
            Ok(_) => {}
            Err(Error::Backend(e)) if e.kind != coffer_backend::ErrorKind::NotFound => return Err(Error::Backend(e)),
            // Gone, or damaged: a prune reads snapshots as such a tombstone leaves them, live.
            Err(_) => {}
        }
    }
    Ok(Some(tree))
}

/// Copies into new packs every blob of the tree `root` (trees and file content)
/// that the index places in a pack a running prune is deleting, so the snapshot
/// about to be written does not rely on them; with a notice that does not decode
/// (`unknown`), every blob it cannot show is safe. A pack already gone makes the
/// backup fail cleanly: no snapshot is written, and the next backup stores the
/// data again.
fn keep_what_prune_deletes(
    repo: &Repository,
    root: Id,
    noticed: &HashSet<Id>,
    unknown: Option<&Unknown>,
) -> Result<SaverStats> {
    let mut safe = HashSet::new();
    if let Some(tree) = unknown.and_then(|u| u.vouched) {
        super::each_used_blob(repo, tree, &mut safe, &mut |_, _| Ok(()))?;
    }
    let saver = BlobSaver::new(repo);
    let mut seen = HashSet::new();
    super::each_used_blob(repo, root, &mut seen, &mut |blob_type, id| {
        let (_, pack) = repo.locate_blob(blob_type, &id)?;
        let at_risk = match unknown {
            _ if noticed.contains(&pack.id) => true,
            Some(u) => !u.own.contains(&pack.id) && !safe.contains(&id),
            None => false,
        };
        if !at_risk {
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
