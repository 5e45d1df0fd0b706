//! Session markers: a running backup announces itself so that a concurrent prune
//! spares what it is writing. Not a lock: nobody waits for a marker. A marker is
//! rewritten every heartbeat interval; a prune that sees it unchanged across its
//! grace period (at least two intervals, timed by the prune's own clock) treats its
//! writer as gone. See docs/design.md#prune.

use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::crypto::{Cipher, Epoch, Key};
use crate::error::{Error, Result};
use crate::format::envelope::{self, SealedKind};
use crate::format::{FORMAT_VERSION, ObjectKind};
use crate::id::Id;
use crate::repo::{Repository, SaverEvent};
use coffer_backend::Backend;

/// How often a running backup rewrites its marker, unless the environment says
/// otherwise (`COFFER_TEST_PRUNE_GRACE_MS`, for tests, sets it to a quarter of the grace).
pub const HEARTBEAT: Duration = Duration::from_secs(30);

/// The default grace period of a prune: four heartbeats.
pub const GRACE: Duration = Duration::from_secs(120);

/// The grace period in force: [`GRACE`], or `COFFER_TEST_PRUNE_GRACE_MS` (tests).
pub fn grace() -> Duration {
    std::env::var("COFFER_TEST_PRUNE_GRACE_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map(Duration::from_millis)
        .unwrap_or(GRACE)
}

/// The heartbeat interval in force: a quarter of [`grace`].
pub fn heartbeat() -> Duration {
    grace() / 4
}

/// What a marker says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRecord {
    /// MUST equal 2.
    pub version: u32,
    /// Host of the writer.
    pub hostname: String,
    /// When it started (informational; never compared across machines).
    pub started: String,
    /// Incremented at every rewrite.
    pub beat: u64,
    /// Index files this writer has stored so far.
    pub index_files: Vec<Id>,
    /// Packs this writer has stored that none of its index files lists yet.
    #[serde(default)]
    pub packs: Vec<Id>,
}

impl SessionRecord {
    /// Parses a marker's plaintext.
    pub fn decode(buf: &[u8]) -> std::result::Result<SessionRecord, String> {
        let r: SessionRecord =
            serde_json::from_slice(buf).map_err(|e| format!("session marker does not parse: {e}"))?;
        if r.version != FORMAT_VERSION {
            return Err(format!("session marker version {} is not supported", r.version));
        }
        Ok(r)
    }
}

struct Shared {
    stop: Mutex<bool>,
    wake: Condvar,
    index_files: Mutex<Vec<Id>>,
    packs: Mutex<Vec<Id>>,
    /// The marker was found removed: a prune took this writer for stopped.
    lost: std::sync::atomic::AtomicBool,
}

/// A running writer's marker, rewritten by a background thread until finished.
pub struct Session {
    name: String,
    backend: Arc<dyn Backend>,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// The data key a marker is sealed with, and its epoch.
type SealKey = (Epoch, Key);

fn write_marker(backend: &dyn Backend, key: &SealKey, cipher: Cipher, name: &str, rec: &SessionRecord) -> Result<()> {
    let plain = serde_json::to_vec(rec).expect("session records serialize");
    let sealed = envelope::seal(&key.1, key.0, cipher, SealedKind::Session, &plain);
    crate::repo::check_storable(ObjectKind::Session, sealed.len())?;
    backend.write(name, sealed)?;
    Ok(())
}

impl Session {
    /// Writes a marker and starts rewriting it every `interval`.
    pub fn start(repo: &Repository, interval: Duration) -> Result<Session> {
        let id = Id(crate::crypto::random_array());
        let name = ObjectKind::Session.path(&id);
        let backend = repo.backend_arc();
        let key: SealKey = {
            let (epoch, key) = repo.keys().data.current();
            (epoch, key.clone())
        };
        let cipher = repo.cipher();
        let mut rec = SessionRecord {
            version: FORMAT_VERSION,
            hostname: crate::fs::meta::hostname(),
            started: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
            beat: 0,
            index_files: Vec::new(),
            packs: Vec::new(),
        };
        write_marker(backend.as_ref(), &key, cipher, &name, &rec)?;
        let shared = Arc::new(Shared {
            stop: Mutex::new(false),
            wake: Condvar::new(),
            index_files: Mutex::new(vec![]),
            packs: Mutex::new(vec![]),
            lost: Default::default(),
        });
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
        Ok(Session { name, backend, shared, thread: Some(thread) })
    }

    /// A function recording the packs and index files this writer stores, for the
    /// next rewrite (pass it to [`crate::repo::BlobSaver::with_observer`]).
    pub fn sink(&self) -> impl Fn(SaverEvent) + Send + Sync + 'static {
        let shared = self.shared.clone();
        move |event| match event {
            SaverEvent::Pack(id) => shared.packs.lock().expect("poisoned").push(id),
            SaverEvent::IndexFile(id, packs) => {
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

/// Every session marker in the repository, by name id. A marker that does not
/// decode is returned as `None`: it still counts as a writer that may be running.
pub fn list(repo: &Repository) -> Result<Vec<(Id, Option<SessionRecord>)>> {
    let ids = repo.list_ids(ObjectKind::Session)?;
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        let name = ObjectKind::Session.path(&id);
        let rec = match crate::repo::read_bounded(repo.backend(), ObjectKind::Session, &name, &name) {
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
    use std::sync::Arc;
    use std::time::Instant;

    use super::*;
    use crate::repo::InitOptions;
    use coffer_backend::LocalBackend;

    #[test]
    fn a_session_stopped_at_once_does_not_wait_for_its_heartbeat() {
        let dir = tempfile::tempdir().unwrap();
        let be: Arc<dyn Backend> = Arc::new(LocalBackend::open(dir.path()).unwrap());
        let kdf = crate::crypto::ScryptParams { log_n: 4, r: 8, p: 1 };
        let repo = Repository::init(be, b"pw", &InitOptions { kdf, ..InitOptions::default() }).unwrap();
        let started = Instant::now();
        for _ in 0..20 {
            // Ended before its thread may have begun waiting, as when a backup
            // fails right after announcing itself.
            Session::start(&repo, Duration::from_secs(60)).unwrap().finish().unwrap();
        }
        assert!(started.elapsed() < Duration::from_secs(30), "took {:?}", started.elapsed());
        assert!(list(&repo).unwrap().is_empty());
    }
}
