//! The snapshot history: a hash-linked DAG of snapshots and tombstones.
//! See docs/design.md#history.
//!
//! Every snapshot and tombstone lists the *heads* its writer saw: the entries that
//! nothing referred to yet. Concurrent writers fork the history; the next writer
//! that sees both joins it again. Since entries are named by the hash of their
//! signed bytes, the storage cannot reorder or alter the links; it can only hide
//! entries, which shows as a reference to a missing entry, or as a head this client
//! remembers that is gone (rollback).

use std::collections::{HashMap, HashSet};
use std::time::SystemTime;

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::format::ObjectKind;
use crate::format::snapshot::LogMark;
use crate::format::snapshot::Snapshot;
use crate::format::tombstone::{Forgotten, Tombstone};
use crate::id::Id;
use crate::local_state::LocalState;
use crate::repo::Repository;
use crate::repo::roots::RootCheck;
use coffer_backend::ErrorKind;

/// Local state file: the heads this client saw last.
pub const HEADS_FILE: &str = "heads";

/// Every history entry in the repository.
#[derive(Debug, Default)]
pub struct History {
    /// Snapshots that loaded, oldest first (forgotten ones included while stored).
    pub snapshots: Vec<(Id, Snapshot)>,
    /// Tombstones that loaded.
    pub tombstones: Vec<(Id, Tombstone)>,
    /// Snapshots that could not be loaded, each as the error naming it.
    pub damaged: Vec<Error>,
    /// Tombstones that could not be loaded.
    pub damaged_tombstones: Vec<Error>,
    /// Ids of every snapshot and tombstone stored, loaded or not.
    pub present: HashSet<Id>,
}

/// The entries of a listing that a holder of the history did not have yet.
#[derive(Debug, Default)]
pub struct Loaded {
    /// Snapshots that loaded, in no particular order.
    pub snapshots: Vec<(Id, Snapshot)>,
    /// Tombstones that loaded.
    pub tombstones: Vec<(Id, Tombstone)>,
    /// Snapshots that could not be loaded, each as the error naming it.
    pub damaged: Vec<Error>,
    /// Tombstones that could not be loaded.
    pub damaged_tombstones: Vec<Error>,
    /// Every snapshot and tombstone listed and still there when read, known or not.
    pub present: HashSet<Id>,
}

/// Loads the entries of `listed` not in `known`, on the backend's I/O pool (as
/// many requests in flight as it wants). An entry deleted between the listing
/// and its reading (a forget running meanwhile) is left out of `present`.
pub fn load_unknown(repo: &Repository, listed: &Listed, known: &HashSet<Id>) -> Result<Loaded> {
    let Listed { snapshots: snap_ids, tombstones: tomb_ids } = listed;
    let mut out = Loaded { present: snap_ids.iter().chain(tomb_ids.iter()).copied().collect(), ..Loaded::default() };
    let snap_new: Vec<Id> = snap_ids.iter().filter(|i| !known.contains(i)).copied().collect();
    let new_snaps: Vec<_> = repo.fetch_many(&snap_new, |i| (*i, repo.load_snapshot(i)));
    let tomb_new: Vec<Id> = tomb_ids.iter().filter(|i| !known.contains(i)).copied().collect();
    let new_tombs: Vec<_> = repo.fetch_many(&tomb_new, |i| (*i, repo.load_tombstone(i)));
    for (id, r) in new_snaps {
        match r {
            Ok(s) => out.snapshots.push((id, s)),
            Err(Error::Backend(e)) if e.kind == ErrorKind::NotFound => {
                out.present.remove(&id);
            }
            Err(Error::Backend(e)) => return Err(Error::Backend(e)),
            Err(e) => out.damaged.push(e),
        }
    }
    for (id, r) in new_tombs {
        match r {
            Ok(t) => out.tombstones.push((id, t)),
            Err(Error::Backend(e)) if e.kind == ErrorKind::NotFound => {
                out.present.remove(&id);
            }
            Err(Error::Backend(e)) => return Err(Error::Backend(e)),
            Err(e) => out.damaged_tombstones.push(e),
        }
    }
    Ok(out)
}

/// What [`History::verify`] found.
#[derive(Debug, Default)]
pub struct Findings {
    /// Loss, rollback, bad signatures: the history is not intact.
    pub errors: Vec<String>,
    /// Out-of-order times, unfinished forgets.
    pub warnings: Vec<String>,
    /// Snapshots removed on purpose, with a tombstone.
    pub forgotten: usize,
    /// Of those, the ones `coffer tag` replaced by a retagged snapshot.
    pub replaced: usize,
}

impl History {
    /// Loads every snapshot and tombstone.
    pub fn load(repo: &Repository) -> Result<History> {
        let mut h = History::default();
        h.refresh(repo)?;
        Ok(h)
    }

    /// Loads entries added since the last load and drops those that are gone.
    pub fn refresh(&mut self, repo: &Repository) -> Result<()> {
        let listed = list(repo)?;
        self.refresh_listed(repo, &listed)
    }

    /// [`History::refresh`] from listings taken earlier ([`list`]).
    pub fn refresh_listed(&mut self, repo: &Repository, listed: &Listed) -> Result<()> {
        let known: HashSet<Id> =
            self.snapshots.iter().map(|(i, _)| *i).chain(self.tombstones.iter().map(|(i, _)| *i)).collect();
        let loaded = load_unknown(repo, listed, &known)?;
        self.snapshots.retain(|(i, _)| loaded.present.contains(i));
        self.tombstones.retain(|(i, _)| loaded.present.contains(i));
        self.snapshots.extend(loaded.snapshots);
        self.tombstones.extend(loaded.tombstones);
        self.damaged = loaded.damaged;
        self.damaged_tombstones = loaded.damaged_tombstones;
        self.snapshots.sort_by(|a, b| a.1.system_time().cmp(&b.1.system_time()).then(a.0.cmp(&b.0)));
        self.tombstones.sort_by(|a, b| a.1.system_time().cmp(&b.1.system_time()).then(a.0.cmp(&b.0)));
        // A long-lived reader holds the history between refreshes: what a
        // vector grew into while loading is handed back.
        self.snapshots.shrink_to_fit();
        self.tombstones.shrink_to_fit();
        self.present = loaded.present;
        Ok(())
    }

    /// Snapshots removed on purpose: id -> (tombstone id, what it recorded).
    pub fn forgotten(&self) -> HashMap<Id, (Id, &Forgotten)> {
        let mut m = HashMap::new();
        for (tid, t) in &self.tombstones {
            for f in &t.forgotten {
                m.entry(f.id).or_insert((*tid, f));
            }
        }
        m
    }

    /// Snapshots that are stored and not forgotten, oldest first.
    pub fn live_snapshots(&self) -> Vec<(Id, Snapshot)> {
        let forgotten = self.forgotten();
        self.snapshots.iter().filter(|(id, _)| !forgotten.contains_key(id)).cloned().collect()
    }

    /// Every link: (entry, the entry it refers to). Forgotten snapshots' links come
    /// from their tombstone's record, so the chain stays whole without them.
    fn links(&self) -> Vec<(Id, Id)> {
        let mut out = Vec::new();
        for (id, s) in &self.snapshots {
            out.extend(s.history.iter().map(|h| (*id, *h)));
        }
        for (id, t) in &self.tombstones {
            out.extend(t.history.iter().map(|h| (*id, *h)));
            for f in &t.forgotten {
                out.extend(f.history.iter().map(|h| (f.id, *h)));
            }
        }
        out
    }

    /// The heads: stored entries that loaded and that no entry refers to, sorted. A
    /// damaged entry is never linked to: it may be garbage the storage planted.
    pub fn heads(&self) -> Vec<Id> {
        let referenced: HashSet<Id> = self.links().into_iter().map(|(_, to)| to).collect();
        let loaded = self.snapshots.iter().map(|(id, _)| id).chain(self.tombstones.iter().map(|(id, _)| id));
        let mut heads: Vec<Id> = loaded.filter(|i| !referenced.contains(i)).copied().collect();
        heads.sort();
        heads
    }

    fn time_of(&self, id: &Id) -> Option<(SystemTime, &'static str)> {
        if let Some((_, s)) = self.snapshots.iter().find(|(i, _)| i == id) {
            return Some((s.written_time().unwrap_or_else(|| s.system_time()), "snapshot"));
        }
        self.tombstones.iter().find(|(i, _)| i == id).map(|(_, t)| (t.system_time(), "tombstone"))
    }

    /// The heads in `remembered` (what this client saw last) that are gone with
    /// nothing recording their removal: the storage serves an older state, or lost
    /// them. Empty when no rollback shows.
    pub fn missing_heads(&self, remembered: &[Id]) -> Vec<Id> {
        let forgotten = self.forgotten();
        remembered.iter().filter(|r| !self.present.contains(r) && !forgotten.contains_key(r)).copied().collect()
    }

    /// Lists the storage again when heads in `remembered` are missing from the
    /// listing this history was loaded from. `remembered` may have been read
    /// after that listing was taken (at open, or by [`History::load`]), and
    /// another command of this client may have stored a snapshot and remembered
    /// it in between: a listing taken now holds it (a command remembers a head
    /// after storing it), so what is still missing then is really gone.
    pub fn relist_if_missing(&mut self, repo: &Repository, remembered: &[Id]) -> Result<()> {
        if !self.missing_heads(remembered).is_empty() {
            repo.drop_listings_ahead();
            self.refresh(repo)?;
        }
        Ok(())
    }

    /// Checks the links, the signatures, and that every head in `remembered` (what
    /// this client saw last time) is still accounted for.
    pub fn verify(&self, remembered: &[Id]) -> Findings {
        let mut f = Findings::default();
        let forgotten = self.forgotten();
        f.forgotten = forgotten.len();
        f.replaced = forgotten.values().filter(|(_, r)| r.replaced_by.is_some()).count();
        for (id, s) in &self.snapshots {
            if !s.signature.is_valid() {
                f.errors.push(format!("snapshot {}: {}", id.short(), s.signature.describe()));
            }
            if let Some((tid, _)) = forgotten.get(id) {
                f.warnings.push(format!(
                    "snapshot {} was forgotten by tombstone {} but is still stored: run `coffer forget {}` again to \
                     finish removing it",
                    id.short(),
                    tid.short(),
                    id.short()
                ));
            }
        }
        for (id, t) in &self.tombstones {
            if !t.signature.is_valid() {
                f.errors.push(format!("tombstone {}: {}", id.short(), t.signature.describe()));
            }
            // A snapshot replaced by `coffer tag`: its replacement must link to it.
            for r in &t.forgotten {
                let Some(by) = r.replaced_by else { continue };
                match self.snapshots.iter().find(|(i, _)| *i == by) {
                    Some((_, s)) if !s.history.contains(&r.id) => f.errors.push(format!(
                        "tombstone {} says snapshot {} replaces {}, but {} does not link to it in its history",
                        id.short(),
                        by.short(),
                        r.id.short(),
                        by.short()
                    )),
                    Some(_) => {}
                    None if forgotten.contains_key(&by) => {}
                    None => f.errors.push(format!(
                        "snapshot {} that replaces {} (tombstone {}) is missing: it is not in the repository and no \
                         tombstone records its removal",
                        by.short(),
                        r.id.short(),
                        id.short()
                    )),
                }
            }
        }
        // Each missing entry is reported once, with the first entry that refers to it.
        let mut reported = HashSet::new();
        let end_of = |id: &Id| -> Option<SystemTime> {
            self.snapshots
                .iter()
                .find(|(i, _)| i == id)
                .map(|(_, s)| s.end_time())
                .or_else(|| self.tombstones.iter().find(|(i, _)| i == id).map(|(_, t)| t.system_time()))
                // A forgotten snapshot's links were taken when its backup ended: its
                // start time would date them too early.
                .or_else(|| forgotten.get(id).and_then(|(_, r)| humantime::parse_rfc3339(&r.end).ok()))
        };
        for (from, to) in self.links() {
            if self.present.contains(&to) {
                if let (Some((t_to, kind)), Some(end_from)) = (self.time_of(&to), end_of(&from))
                    && t_to > end_from
                {
                    f.warnings.push(format!(
                        "out of order: {} was written after {} {} by its links but is dated before it (clocks out of \
                         step, or an entry forged by a key holder)",
                        from.short(),
                        kind,
                        to.short()
                    ));
                }
            } else if !forgotten.contains_key(&to) && reported.insert(to) {
                f.errors.push(format!(
                    "history entry {} is missing: {} refers to it, but it is not in the repository and no tombstone \
                     records its removal, so it was lost or deleted by the storage",
                    to.short(),
                    from.short()
                ));
            }
        }
        for r in self.missing_heads(remembered) {
            if reported.contains(&r) {
                continue;
            }
            f.errors.push(format!(
                "rolled back: history entry {} that this client saw earlier is gone, and nothing in the repository \
                 records its removal; the storage is serving an older state of the repository or lost it (if the \
                 repository was restored from an older copy on purpose, delete the local file `{}` to accept it)",
                r.short(),
                HEADS_FILE
            ));
        }
        f
    }

    /// Verifies against the heads this client remembers and, when no rollback or
    /// loss is found, remembers the current heads. Returns the findings. The
    /// heads are read after this history was listed: a head missing from that
    /// listing is looked for in a new one ([`History::relist_if_missing`]).
    pub fn sync_remembered(&mut self, repo: &Repository, state: &LocalState) -> Result<Findings> {
        let remembered = state.read_ids(HEADS_FILE)?;
        self.relist_if_missing(repo, &remembered)?;
        self.sync_remembered_as_read(state, &remembered)
    }

    /// [`History::sync_remembered`] with the heads `remembered` read from `state`
    /// before this history was listed, so that every head this client's commands
    /// remembered by then is in the listing (a command remembers a head after
    /// storing it). The heads are written only if the file still holds
    /// `remembered`: a command of this client that wrote it meanwhile saw newer
    /// entries than this listing.
    pub fn sync_remembered_as_read(&self, state: &LocalState, remembered: &[Id]) -> Result<Findings> {
        let mut f = self.verify(remembered);
        let file = format!("`{}`", state.path(HEADS_FILE).display());
        f.errors.iter_mut().for_each(|e| *e = e.replace(&format!("`{HEADS_FILE}`"), &file));
        if f.errors.iter().all(|e| !e.starts_with("rolled back") && !e.starts_with("history entry"))
            && state.read_ids(HEADS_FILE)? == remembered
        {
            state.write_ids(HEADS_FILE, &self.heads())?;
        }
        Ok(f)
    }
}

/// What the history part of `coffer check` reads from the storage: every
/// snapshot and tombstone, and the writer records (those that do not load, as
/// findings). [`load_for_check`] reads them, while the trees are walked.
pub struct ForCheck {
    history: History,
    damaged_writers: Vec<String>,
}

/// The snapshots and tombstones stored, listed at once.
#[derive(Clone, Debug, Default)]
pub struct Listed {
    /// The snapshots' ids, sorted.
    pub snapshots: Vec<Id>,
    /// The tombstones' ids, sorted.
    pub tombstones: Vec<Id>,
}

/// Lists the snapshots and tombstones (from the listings fetched ahead, if fresh).
pub fn list(repo: &Repository) -> Result<Listed> {
    repo.prefetch_listings(&[ObjectKind::Snapshot, ObjectKind::Tombstone]);
    Ok(Listed {
        snapshots: repo.list_ids_ahead(ObjectKind::Snapshot)?,
        tombstones: repo.list_ids_ahead(ObjectKind::Tombstone)?,
    })
}

/// Reads what [`check`] needs: the history of the entries `listed` and the
/// writer records, at once.
pub fn load_for_check(repo: &Repository, listed: &Listed) -> Result<ForCheck> {
    let (history, writers) = std::thread::scope(|s| {
        let writers = s.spawn(|| repo.writer_records());
        let mut history = History::default();
        let history = history.refresh_listed(repo, listed).map(|()| history);
        (history, writers.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
    });
    let damaged_writers = writers?.1.iter().map(|e| e.to_string()).collect();
    Ok(ForCheck { history: history?, damaged_writers })
}

/// The history part of `coffer check`, on what [`load_for_check`] read:
/// signatures, links, rollback against the heads this client remembers (when
/// `state` is given), writer records, and every snapshot's Merkle root
/// recomputed from its trees. `roots` holds the roots the caller compared
/// already, by snapshot id; the others are recomputed here. With a server's
/// transparency log (`log`), every snapshot it records must be stored or
/// forgotten. Damaged snapshots are left to the caller, which reports them
/// already.
pub fn check(
    repo: &Repository,
    loaded: ForCheck,
    state: Option<(&LocalState, &[Id])>,
    roots: &HashMap<Id, RootCheck>,
    log: Option<&crate::server_log::Followed>,
) -> Result<Findings> {
    let ForCheck { history, damaged_writers } = loaded;
    let mut f = match state {
        Some((st, remembered)) => history.sync_remembered_as_read(st, remembered)?,
        None => history.verify(&[]),
    };
    if let Some(log) = log {
        let stored: Vec<Id> = history.present.iter().copied().collect();
        let forgotten: Vec<Id> = history.forgotten().into_keys().collect();
        for (noun, id) in crate::server_log::hidden(log, &stored, &forgotten) {
            let unless = if noun == "snapshot" { " and no tombstone forgot it" } else { "" };
            f.errors.push(format!(
                "{noun} {id}: the server's transparency log records it, but the server does not serve it{unless}: \
                 the server hides or lost it"
            ));
        }
        // Heads other clients followed, as their snapshots record them.
        let marks: Vec<(Id, LogMark)> =
            history.snapshots.iter().filter_map(|(id, s)| Some((*id, *s.server_log.as_deref()?))).collect();
        f.errors.extend(log.disagreements(&marks));
    }
    f.errors.extend(history.damaged_tombstones.iter().map(|e| e.to_string()));
    // A writer record that does not decode registers nobody: a snapshot whose
    // writer it would have registered is reported on its own.
    let hint = crate::ops::check::planted_hint("it registers no writer");
    f.warnings.extend(damaged_writers.iter().map(|e| format!("{e}; {hint}")));
    let limit = std::time::SystemTime::now() + crate::repo::FUTURE_TOLERANCE;
    for (id, s) in history.snapshots.iter().filter(|(_, s)| s.system_time() > limit) {
        f.warnings.push(crate::repo::future_warning(id, &s.time, "`latest` passes it over"));
    }
    let differs: Vec<Option<String>> = history
        .snapshots
        .par_iter()
        .map(|(id, s)| match roots.get(id).copied().unwrap_or_else(|| crate::repo::roots::check_root(repo, s)) {
            RootCheck::Differs => Some(format!(
                "snapshot {}: its Merkle root does not match its files (the snapshot or a tree was forged by a key \
                 holder)",
                id.short()
            )),
            // Trees that do not load are reported by the structure check.
            RootCheck::Matches | RootCheck::Unknown => None,
        })
        .collect();
    f.errors.extend(differs.into_iter().flatten());
    Ok(f)
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::crypto::ScryptParams;
    use crate::crypto::sign::SigningKey;
    use crate::ops::backup::{BackupOptions, backup};
    use crate::progress::Progress;
    use crate::repo::InitOptions;
    use coffer_backend::{Backend, OpendalBackend};

    /// Runs `f` once, the first time the backup reports an item: something done
    /// by another client while this backup runs.
    struct Meanwhile<F: FnMut() + Send>(Mutex<Option<F>>);

    impl<F: FnMut() + Send> Progress for Meanwhile<F> {
        fn add_item(&self, _path: &Path) {
            if let Some(mut f) = self.0.lock().unwrap().take() {
                f();
            }
        }
    }

    /// Heads read after the history was listed, naming a snapshot another
    /// command of this client stored in between, are no rollback; a head that
    /// is really gone still is.
    #[test]
    fn heads_remembered_after_the_listing_are_looked_for_in_a_new_one() {
        use crate::local_state::LocalState;
        use crate::testing::{TestTree, test_repo};
        let t = test_repo();
        let dir = tempfile::tempdir().unwrap();
        let state = LocalState::new(dir.path(), &Id([7; 32]));
        let (first, _) = t.snapshot(&TestTree::new().file("a", &[b"1"]));
        let mut h = History::load(&t.repo).unwrap();
        // Meanwhile: another backup of this client stores its snapshot and remembers it.
        let (second, _) = t.snapshot(&TestTree::new().file("a", &[b"2"]));
        state.write_ids(HEADS_FILE, &[second]).unwrap();
        let remembered = state.read_ids(HEADS_FILE).unwrap();
        assert_eq!(h.missing_heads(&remembered), vec![second], "the listing predates the head");
        let f = h.sync_remembered(&t.repo, &state).unwrap();
        assert!(f.errors.is_empty(), "{:?}", f.errors);
        assert!(h.present.contains(&first) && h.present.contains(&second));
        // A head nothing lists, even anew, is reported.
        let lost = Id([9; 32]);
        state.write_ids(HEADS_FILE, &[second, lost]).unwrap();
        let mut h = History::load(&t.repo).unwrap();
        let f = h.sync_remembered(&t.repo, &state).unwrap();
        assert!(f.errors.iter().any(|e| e.starts_with("rolled back") && e.contains(&lost.short())), "{:?}", f.errors);
    }

    /// A backup that links to a tombstone written while it ran, later forgotten
    /// itself, is in order: its links come after the tombstone.
    #[test]
    fn a_forget_during_a_backup_is_not_out_of_order() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        std::fs::create_dir(&src).unwrap();
        std::fs::write(src.join("f"), b"some content").unwrap();
        let be: Arc<dyn Backend> = Arc::new(OpendalBackend::local(&dir.path().join("repo")).unwrap());
        let opts = InitOptions { kdf: ScryptParams { log_n: 4, r: 8, p: 1 }, ..InitOptions::default() };
        let repo = Repository::init(be, b"pw", &opts).unwrap();
        let key = SigningKey::generate();
        repo.register_writer(&key.public(), "host".into(), "user".into()).unwrap();
        let bopts = BackupOptions { paths: vec![src.clone()], ..BackupOptions::default() };
        let first = backup(&repo, &bopts, &key, &crate::progress::NoProgress).unwrap().id.unwrap();
        // The second backup starts, then another client forgets the first.
        let during = Meanwhile(Mutex::new(Some(|| {
            std::thread::sleep(std::time::Duration::from_millis(20));
            crate::ops::forget::forget(&repo, &History::load(&repo).unwrap(), &[first], &key).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(20));
        })));
        let second = backup(&repo, &bopts, &key, &during).unwrap().id.unwrap();
        let h = History::load(&repo).unwrap();
        let f = h.verify(&[]);
        assert!(f.errors.is_empty() && f.warnings.is_empty(), "{f:?}");
        // Now the second snapshot is forgotten: its links live on in the tombstone.
        crate::ops::forget::forget(&repo, &h, &[second], &key).unwrap();
        let f = History::load(&repo).unwrap().verify(&[]);
        assert!(f.errors.is_empty() && f.warnings.is_empty(), "{f:?}");
        assert_eq!(f.forgotten, 2);
    }

    /// Only what the holder did not know is read; every entry listed is present.
    #[test]
    fn only_unknown_entries_are_loaded() {
        use crate::testing::{TestTree, test_repo};
        let t = test_repo();
        let (first, _) = t.snapshot(&TestTree::new().file("a", &[b"1"]));
        let (second, _) = t.snapshot(&TestTree::new().file("a", &[b"2"]));
        let tomb = crate::ops::forget::forget(&t.repo, &History::load(&t.repo).unwrap(), &[first], &t.key).unwrap();
        let (third, _) = t.snapshot(&TestTree::new().file("a", &[b"3"]));
        let listed = list(&t.repo).unwrap();
        let known: HashSet<Id> = [second, tomb].into_iter().collect();
        let l = load_unknown(&t.repo, &listed, &known).unwrap();
        let loaded: Vec<Id> = l.snapshots.iter().map(|(i, _)| *i).collect();
        assert_eq!(loaded, vec![third], "the forgotten one is deleted, the known ones are not read");
        assert!(l.tombstones.is_empty() && l.damaged.is_empty() && l.damaged_tombstones.is_empty());
        assert_eq!(l.present, [second, tomb, third].into_iter().collect::<HashSet<Id>>());
    }
}
