//! Session markers: a running backup announces itself so that a concurrent prune
//! spares what it is writing. Not a lock: nobody waits for a marker. A marker is
//! rewritten every heartbeat interval ([`super::Timing::heartbeat`], passed in);
//! a prune that sees it unchanged across its grace period (four intervals, timed
//! by the prune's own clock) treats its writer as gone. The marker's encoding is
//! [`crate::format::session`]. See docs/design.md#prune.

use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use crate::crypto::{Cipher, Epoch, Key};
use crate::error::{Error, Result};
use crate::format::envelope::{self, SealedKind};
use crate::format::{FORMAT_VERSION, ObjectKind};
use crate::id::Id;
use crate::repo::{Repository, SaverEvent};
use coffer_backend::Backend;

use crate::format::session::OPENING;
pub use crate::format::session::SessionRecord;

struct Shared {
    stop: Mutex<bool>,
    wake: Condvar,
    index_files: Mutex<Vec<Id>>,
    packs: Mutex<Vec<Id>>,
    /// Every pack this writer stored, indexed or not.
    stored: Mutex<std::collections::HashSet<Id>>,
    /// The marker was found removed: a prune took this writer for stopped.
    lost: std::sync::atomic::AtomicBool,
}

/// A running writer's marker, rewritten by a background thread until finished.
pub struct Session {
    id: Id,
    name: String,
    backend: Arc<dyn Backend>,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// The data key a marker is sealed with, and its epoch.
type SealKey = (Epoch, Key);

fn write_marker(backend: &dyn Backend, key: &SealKey, cipher: Cipher, name: &str, rec: &SessionRecord) -> Result<()> {
    let plain = rec.encode();
    let sealed = envelope::seal(&key.1, key.0, cipher, SealedKind::Session, &plain);
    crate::repo::check_storable(ObjectKind::Session, sealed.len())?;
    backend.write(name, sealed)?;
    Ok(())
}

/// A marker written before the repository's keys are known: the fixed bytes
/// [`crate::format::session::OPENING`], which protect nothing a writer stored
/// (it has stored nothing yet) but announce it, so that a backup can list the
/// notices and the index while its keys are derived
/// (docs/design.md#round-trips). [`Session::adopt`] takes it over; dropped
/// otherwise, it is deleted.
pub struct Opening {
    id: Id,
    backend: Arc<dyn Backend>,
    adopted: bool,
}

impl Opening {
    /// Writes an opening marker under a new random name.
    pub fn write(backend: Arc<dyn Backend>) -> Result<Opening> {
        let id = Id(crate::crypto::random_array());
        backend.write(&ObjectKind::Session.path(&id), OPENING.to_vec())?;
        Ok(Opening { id, backend, adopted: false })
    }

    /// The marker's id (its name under `sessions/`).
    pub fn id(&self) -> Id {
        self.id
    }
}

impl Drop for Opening {
    fn drop(&mut self) {
        if !self.adopted {
            let _ = self.backend.delete(&ObjectKind::Session.path(&self.id));
        }
    }
}

/// A marker's name, record and sealing key, before its heartbeat runs.
struct Marker {
    id: Id,
    name: String,
    backend: Arc<dyn Backend>,
    key: SealKey,
    cipher: Cipher,
    rec: SessionRecord,
}

impl Marker {
    fn new(repo: &Repository, id: Id) -> Marker {
        let (epoch, key) = repo.keys().data.current();
        Marker {
            id,
            name: ObjectKind::Session.path(&id),
            backend: repo.backend_arc(),
            key: (epoch, key.clone()),
            cipher: repo.cipher(),
            rec: SessionRecord {
                version: FORMAT_VERSION,
                hostname: crate::fs::meta::hostname(),
                started: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
                beat: 0,
                index_files: Vec::new(),
                packs: Vec::new(),
            },
        }
    }

    fn write(&self) -> Result<()> {
        write_marker(self.backend.as_ref(), &self.key, self.cipher, &self.name, &self.rec)
    }

    /// Starts the thread that rewrites the marker every `interval`.
    fn beat(self, interval: Duration) -> Result<Session> {
        let shared = Arc::new(Shared {
            stop: Mutex::new(false),
            wake: Condvar::new(),
            index_files: Mutex::new(vec![]),
            packs: Mutex::new(vec![]),
            stored: Default::default(),
            lost: Default::default(),
        });
        let Marker { id, name, backend, key, cipher, mut rec } = self;
        let thread = {
            let (shared, backend, name) = (shared.clone(), backend.clone(), name.clone());
            std::thread::Builder::new()
                .name("coffer-session".into())
                .spawn(move || {
                    let mut stop = shared.stop.lock().expect("poisoned");
                    loop {
                        // Stopped before this thread first waited: its wake-up is gone.
                        if *stop {
                            return;
                        }
                        stop = shared.wake.wait_timeout(stop, interval).expect("poisoned").0;
                        if *stop {
                            return;
                        }
                        if matches!(backend.stat(&name), Err(e) if e.kind == coffer_backend::ErrorKind::NotFound) {
                            shared.lost.store(true, std::sync::atomic::Ordering::SeqCst);
                        }
                        rec.beat += 1;
                        rec.index_files = shared.index_files.lock().expect("poisoned").clone();
                        rec.packs = shared.packs.lock().expect("poisoned").clone();
                        // A missed beat is survivable: the backup's final check catches
                        // anything a prune removed because of it.
                        let _ = write_marker(backend.as_ref(), &key, cipher, &name, &rec);
                    }
                })
                .map_err(|e| Error::InvalidInput(format!("cannot start the session thread: {e}")))?
        };
        Ok(Session { id, name, backend, shared, thread: Some(thread) })
    }
}

impl Session {
    /// Writes a marker and starts rewriting it every `interval` (a
    /// [`super::Timing::heartbeat`]).
    pub fn start(repo: &Repository, interval: Duration) -> Result<Session> {
        let marker = Marker::new(repo, Id(crate::crypto::random_array()));
        marker.write()?;
        marker.beat(interval)
    }

    /// Takes over the marker `opening` (on the same storage as `repo`), which
    /// its first heartbeat replaces with a sealed record, and starts rewriting it
    /// every `interval`.
    pub fn adopt(repo: &Repository, mut opening: Opening, interval: Duration) -> Result<Session> {
        let marker = Marker::new(repo, opening.id);
        opening.adopted = true;
        marker.beat(interval)
    }

    /// The marker's id (its name under `sessions/`).
    pub fn id(&self) -> Id {
        self.id
    }

    /// A function recording the packs and index files this writer stores, for the
    /// next rewrite (pass it to [`crate::repo::BlobSaver::with_observer`]).
    pub fn sink(&self) -> impl Fn(SaverEvent) + Send + Sync + 'static {
        let shared = self.shared.clone();
        move |event| match event {
            SaverEvent::Pack(id) => {
                shared.stored.lock().expect("poisoned").insert(id);
                shared.packs.lock().expect("poisoned").push(id);
            }
            SaverEvent::IndexFile(id, packs) => {
                shared.stored.lock().expect("poisoned").extend(packs.iter().copied());
                shared.index_files.lock().expect("poisoned").push(id);
                shared.packs.lock().expect("poisoned").retain(|p| !packs.contains(p));
            }
        }
    }

    /// Whether a prune removed this writer's marker, taking it for stopped (the
    /// process was paused longer than the grace period).
    pub fn was_lost(&self) -> bool {
        self.shared.lost.load(std::sync::atomic::Ordering::SeqCst)
            || matches!(self.backend.stat(&self.name), Err(e) if e.kind == coffer_backend::ErrorKind::NotFound)
    }

    /// The index files this writer stored so far.
    pub fn index_files(&self) -> Vec<Id> {
        self.shared.index_files.lock().expect("poisoned").clone()
    }

    /// Every pack this writer stored so far (through [`Session::sink`]): its
    /// marker protects them from a prune.
    pub fn stored_packs(&self) -> std::collections::HashSet<Id> {
        self.shared.stored.lock().expect("poisoned").clone()
    }

    /// Stops the heartbeat and removes the marker.
    pub fn finish(mut self) -> Result<()> {
        self.stop();
        self.backend.delete(&self.name)?;
        Ok(())
    }

    fn stop(&mut self) {
        *self.shared.stop.lock().expect("poisoned") = true;
        self.shared.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.stop();
            let _ = self.backend.delete(&self.name);
        }
    }
}

/// Every session marker in the repository, by name id. An opening marker reads
/// as [`SessionRecord::opening`]. A marker that does not decode is returned as
/// `None`: it still counts as a writer that may be running.
pub fn list(repo: &Repository) -> Result<Vec<(Id, Option<SessionRecord>)>> {
    let ids = repo.list_ids(ObjectKind::Session)?;
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        let name = ObjectKind::Session.path(&id);
        let rec = match crate::repo::read_bounded(repo.backend(), ObjectKind::Session, &name, &name) {
            Ok(b) if b == OPENING => Some(SessionRecord::opening()),
            Ok(b) => envelope::open(&repo.keys().data, SealedKind::Session, &b)
                .ok()
                .and_then(|p| SessionRecord::decode(&p).ok()),
            Err(Error::Backend(e)) if e.kind == coffer_backend::ErrorKind::NotFound => continue, // finished meanwhile
            // Too large to be a marker coffer wrote: like one that does not decode.
            Err(Error::Corrupt { .. }) => None,
            Err(e) => return Err(e),
        };
        out.push((id, rec));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::testing::test_repo;

    /// Waits (at most 10 s) until `cond` holds for the markers listed.
    fn wait_for(
        repo: &Repository,
        cond: impl Fn(&[(Id, Option<SessionRecord>)]) -> bool,
    ) -> Vec<(Id, Option<SessionRecord>)> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let l = list(repo).unwrap();
            if cond(&l) {
                return l;
            }
            assert!(Instant::now() < deadline, "markers never became as expected: {l:?}");
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    #[test]
    fn a_session_stopped_at_once_does_not_wait_for_its_heartbeat() {
        let t = test_repo();
        let started = Instant::now();
        for _ in 0..20 {
            // Ended before its thread may have begun waiting, as when a backup
            // fails right after announcing itself.
            Session::start(&t.repo, Duration::from_secs(60)).unwrap().finish().unwrap();
        }
        assert!(started.elapsed() < Duration::from_secs(30), "took {:?}", started.elapsed());
        assert!(list(&t.repo).unwrap().is_empty());
    }

    #[test]
    fn a_marker_is_written_at_start_and_removed_by_finish() {
        let t = test_repo();
        let s = Session::start(&t.repo, Duration::from_secs(60)).unwrap();
        let l = list(&t.repo).unwrap();
        assert_eq!(l.len(), 1);
        assert_eq!(l[0].0, s.id());
        let rec = l[0].1.as_ref().expect("the marker decodes");
        assert_eq!((rec.version, rec.beat), (FORMAT_VERSION, 0));
        assert!(rec.index_files.is_empty() && rec.packs.is_empty());
        assert!(!s.was_lost());
        s.finish().unwrap();
        assert!(list(&t.repo).unwrap().is_empty());
        assert!(t.backend.list("sessions/").unwrap().is_empty());
    }

    #[test]
    fn an_opening_marker_is_replaced_by_the_first_heartbeat_or_removed_when_dropped() {
        let t = test_repo();
        let opening = Opening::write(t.repo.backend_arc()).unwrap();
        let id = opening.id();
        assert_eq!(list(&t.repo).unwrap(), vec![(id, Some(SessionRecord::opening()))]);
        drop(opening);
        assert!(list(&t.repo).unwrap().is_empty());

        let opening = Opening::write(t.repo.backend_arc()).unwrap();
        let id = opening.id();
        let s = Session::adopt(&t.repo, opening, Duration::from_millis(5)).unwrap();
        assert_eq!(s.id(), id);
        let l = wait_for(&t.repo, |l| l[0].1.as_ref().is_some_and(|r| r.beat > 0));
        let rec = l[0].1.as_ref().unwrap();
        assert!(!rec.hostname.is_empty() && rec.version == FORMAT_VERSION, "{rec:?}");
        assert!(!s.was_lost());
        s.finish().unwrap();
        assert!(list(&t.repo).unwrap().is_empty());
    }

    #[test]
    fn a_dropped_session_removes_its_marker() {
        let t = test_repo();
        let s = Session::start(&t.repo, Duration::from_millis(5)).unwrap();
        assert_eq!(list(&t.repo).unwrap().len(), 1);
        drop(s);
        assert!(list(&t.repo).unwrap().is_empty());
    }

    #[test]
    fn the_heartbeat_rewrites_the_marker_with_what_the_writer_stored() {
        let t = test_repo();
        let s = Session::start(&t.repo, Duration::from_millis(5)).unwrap();
        let (pack, file) = (Id([1; 32]), Id([2; 32]));
        let sink = s.sink();
        sink(SaverEvent::Pack(pack));
        let l = wait_for(&t.repo, |l| l[0].1.as_ref().is_some_and(|r| r.beat > 0 && r.packs == [pack]));
        let beat = l[0].1.as_ref().unwrap().beat;
        // The pack, once an index file lists it, is protected through that file.
        sink(SaverEvent::IndexFile(file, vec![pack]));
        wait_for(&t.repo, |l| {
            l[0].1.as_ref().is_some_and(|r| r.beat > beat && r.index_files == [file] && r.packs.is_empty())
        });
        assert_eq!(s.index_files(), vec![file]);
        s.finish().unwrap();
    }

    #[test]
    fn a_marker_removed_by_someone_else_is_noticed() {
        let t = test_repo();
        let s = Session::start(&t.repo, Duration::from_secs(60)).unwrap();
        t.backend.delete(&ObjectKind::Session.path(&s.id())).unwrap();
        assert!(s.was_lost());
        // Finishing a lost session is not an error.
        s.finish().unwrap();
    }
}
