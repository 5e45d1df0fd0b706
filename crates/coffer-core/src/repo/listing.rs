//! Fewer round trips to the storage: the first round of an open (the config,
//! the key files' listing and the listings every command reads next, fetched
//! together), and listings fetched ahead, concurrently, on the backend's I/O
//! concurrency, each served once to the next reader of its prefix
//! (docs/design.md#round-trips).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use coffer_backend::{Backend, BackendError, ErrorKind, ObjectInfo, fan_out};

use super::{KeyFileRead, Repository, read_bounded};
use crate::error::{Error, Result};
use crate::format::ObjectKind;
use crate::format::keyfile::{KeyFile, MasterKeys};
use crate::id::Id;
use crate::lifecycle::session::Opening;

/// A listing fetched ahead is served only this soon after it was taken: one that
/// waited longer (its reader came late) is dropped and the prefix listed again.
const FRESH_FOR: Duration = Duration::from_secs(30);

/// The listings [`Repository::probe`] fetches beside the config: the key files
/// (to unlock), the layout (a repository over several backends) and the writers
/// (every snapshot's signature is checked against them).
const PROBED: [ObjectKind; 3] = [ObjectKind::Key, ObjectKind::Layout, ObjectKind::Writer];

/// Listings fetched ahead, by prefix, with when each was taken; the packs'
/// listing the index load took, kept for the adoption of orphan packs alone; and
/// the opening marker a backup wrote before these listings.
#[derive(Default)]
pub(crate) struct Prefetched {
    by_prefix: HashMap<&'static str, (Instant, Vec<ObjectInfo>)>,
    /// The packs the index load found stored but unindexed, and when.
    orphans_loaded: Option<(Instant, Vec<(Id, u64)>)>,
    opening: Option<Opening>,
}

/// Listings taken before a repository is opened, each with when it was taken:
/// [`Repository::keep_fetched`] serves them to their first readers.
#[derive(Default)]
pub struct Fetched(Vec<(&'static str, Instant, Vec<ObjectInfo>)>);

impl Fetched {
    /// Lists the prefixes of `kinds` at once (one round trip on a remote
    /// storage). A listing that fails is left out, for its reader to list again
    /// and report.
    pub fn list(backend: &dyn Backend, kinds: &[ObjectKind]) -> Fetched {
        let got = fan_out(backend.connections().max(kinds.len()), kinds, |k| {
            let at = Instant::now();
            (k.prefix(), at, backend.list(k.prefix()))
        });
        Fetched(got.into_iter().filter_map(|(p, at, l)| l.ok().map(|l| (p, at, l))).collect())
    }
}

impl Prefetched {
    fn put(&mut self, prefix: &'static str, listing: Vec<ObjectInfo>) {
        self.put_taken(prefix, Instant::now(), listing);
    }

    fn put_taken(&mut self, prefix: &'static str, at: Instant, listing: Vec<ObjectInfo>) {
        self.by_prefix.insert(prefix, (at, listing));
    }

    fn take(&mut self, prefix: &str) -> Option<Vec<ObjectInfo>> {
        self.by_prefix.remove(prefix).filter(|(at, _)| at.elapsed() < FRESH_FOR).map(|(_, l)| l)
    }

    /// Forgets every listing but those [`Repository::probe`] always takes (the
    /// key files, the layout, the writers), and the packs' listing the index
    /// load took.
    pub(crate) fn keep_only_probed(&mut self) {
        self.by_prefix.retain(|p, _| PROBED.iter().any(|k| k.prefix() == *p));
        self.orphans_loaded = None;
    }

    fn has(&self, prefix: &str) -> bool {
        self.by_prefix.get(prefix).is_some_and(|(at, _)| at.elapsed() < FRESH_FOR)
    }
}

/// What one round of concurrent requests learns of a location before its
/// repository is opened: the bytes of `config` and the listings a command reads
/// first. [`Repository::open_probed`] opens the repository from it.
pub struct Probe {
    config: std::result::Result<Vec<u8>, BackendError>,
    keys: std::result::Result<Vec<ObjectInfo>, BackendError>,
    others: Vec<(&'static str, Vec<ObjectInfo>)>,
}

impl Probe {
    /// Whether `config` is there (a repository exists). A read that failed for
    /// another reason than absence counts as present: opening reports it.
    pub fn exists(&self) -> bool {
        !matches!(&self.config, Err(e) if e.kind == ErrorKind::NotFound)
    }

    /// The bytes of `config`, if they were read.
    pub fn config(&self) -> Option<&[u8]> {
        self.config.as_deref().ok()
    }

    /// Why `config` could not be read, when it is neither absent nor too large:
    /// the storage's own error, after the retries the backend makes. An open
    /// reports it as it is rather than read again (and wait out the retries
    /// again).
    pub fn config_failure(&self) -> Option<&BackendError> {
        self.config.as_ref().err().filter(|e| !matches!(e.kind, ErrorKind::NotFound | ErrorKind::TooLarge))
    }

    /// Whether the repository is known to be on this storage alone: `layout/`
    /// was listed, and is empty.
    pub fn on_one_backend(&self) -> bool {
        self.others.iter().any(|(p, l)| *p == ObjectKind::Layout.prefix() && l.is_empty())
    }
}

/// A key file unlocked before its repository is opened, from a copy the client
/// kept of the key file that opened the same location last time
/// ([`Repository::key_file`]): its key derivation runs while the storage is
/// probed, and the open needs no read of the key files. It is used only if the
/// storage still lists that key file (docs/design.md#round-trips).
pub struct UnlockedAhead {
    keys: MasterKeys,
    file: KeyFileRead,
}

impl Repository {
    /// Unlocks the key file `bytes` with `passphrase`, without the storage: `None`
    /// if they do not decode as a key file or the passphrase does not open it.
    /// The id is the hash of the bytes, so a copy that was altered names another
    /// key file, one the storage does not list. The key derivation runs its lanes
    /// on up to `threads` threads ([`crate::crypto::scrypt_kdf_on`]).
    pub fn unlock_ahead(bytes: Vec<u8>, passphrase: &[u8], threads: usize) -> Option<UnlockedAhead> {
        let keys = KeyFile::decode(&bytes).ok()?.open_on(passphrase, threads).ok()??;
        Some(UnlockedAhead { keys, file: KeyFileRead { id: Id::hash_of(&bytes), bytes } })
    }

    /// Reads `config` and lists the key files, the layout and the writers, all at
    /// once (one round trip on a remote storage). A listing that fails is left to
    /// its reader, which lists again and reports the error.
    pub fn probe(backend: &dyn Backend) -> Probe {
        Self::probe_with(backend, &[])
    }

    /// [`Repository::probe`], listing the prefixes of `also` in the same round:
    /// those the command reads next (a restore's index and snapshots, say). A
    /// backup must not list the index before its marker is written; it uses
    /// [`crate::lifecycle::writer::announce`] instead.
    pub fn probe_with(backend: &dyn Backend, also: &[ObjectKind]) -> Probe {
        #[derive(Clone, Copy)]
        enum Req {
            Config,
            List(ObjectKind),
        }
        enum Got {
            Config(std::result::Result<Vec<u8>, BackendError>),
            List(&'static str, std::result::Result<Vec<ObjectInfo>, BackendError>),
        }
        let mut kinds = PROBED.to_vec();
        kinds.extend(also.iter().filter(|k| !PROBED.contains(k)));
        let reqs: Vec<Req> = std::iter::once(Req::Config).chain(kinds.into_iter().map(Req::List)).collect();
        let got = fan_out(backend.connections().max(reqs.len()), &reqs, |r| match *r {
            Req::Config => Got::Config(backend.read_max("config", ObjectKind::Config.max_len())),
            Req::List(k) => Got::List(k.prefix(), backend.list(k.prefix())),
        });
        let mut probe = Probe {
            config: Err(BackendError::new(ErrorKind::NotFound, "config", "not read")),
            keys: Ok(Vec::new()),
            others: Vec::new(),
        };
        for g in got {
            match g {
                Got::Config(c) => probe.config = c,
                Got::List(p, l) if p == ObjectKind::Key.prefix() => probe.keys = l,
                Got::List(p, Ok(l)) => probe.others.push((p, l)),
                Got::List(_, Err(_)) => {}
            }
        }
        probe
    }

    /// Opens the repository that `probe` found at `backend` with `passphrase`:
    /// with the keys of `ahead` if the probe listed its key file; else the key
    /// files listed are read together (the second and last round trip of an
    /// open), then tried in order. The listings the probe took are served to
    /// their first readers.
    pub fn open_probed(
        backend: Arc<dyn Backend>,
        probe: Probe,
        passphrase: &[u8],
        ahead: Option<UnlockedAhead>,
    ) -> Result<Repository> {
        if !probe.exists() {
            Self::check_new_location(backend.as_ref())?;
            return Err(Error::RepoNotFound { location: backend.location() });
        }
        if let Some(e) = probe.config_failure() {
            return Err(Error::Backend(e.clone()));
        }
        let sealed = match probe.config {
            Ok(bytes) => bytes,
            // Too large: read again for the error that names the object.
            Err(_) => read_bounded(backend.as_ref(), ObjectKind::Config, "config", "config")?,
        };
        let listed = probe.keys.map_err(Error::Backend)?;
        let ahead = ahead.filter(|a| listed.iter().any(|k| k.name == ObjectKind::Key.path(&a.file.id)));
        let (keys, opener) = match ahead {
            Some(a) => (a.keys, a.file),
            None => Self::unlock_listed(backend.as_ref(), listed, passphrase)?,
        };
        let repo = Self::from_sealed_config(backend, keys, opener, &sealed)?;
        {
            let mut pre = repo.prefetched.lock().expect("poisoned");
            for (prefix, listing) in probe.others {
                pre.put(prefix, listing);
            }
        }
        Ok(repo)
    }

    /// Lists the prefixes of `kinds` at once, on the backend's I/O concurrency,
    /// for their next readers ([`Repository::list_ids`] and the index load); a
    /// kind already fetched ahead and still fresh is not listed again. A failed
    /// listing is left to its reader.
    pub fn prefetch_listings(&self, kinds: &[ObjectKind]) {
        let todo: Vec<&'static str> = {
            let pre = self.prefetched.lock().expect("poisoned");
            kinds.iter().map(|k| k.prefix()).filter(|p| !pre.has(p)).collect()
        };
        let got = fan_out(self.backend.connections().max(todo.len()), &todo, |p| (*p, self.backend.list(p)));
        let mut pre = self.prefetched.lock().expect("poisoned");
        for (prefix, listing) in got {
            if let Ok(l) = listing {
                pre.put(prefix, l);
            }
        }
    }

    /// The objects below `kind`'s prefix: the listing fetched ahead, if fresh
    /// (each is served once), else a new listing.
    pub(crate) fn list_objects(&self, kind: ObjectKind) -> Result<Vec<ObjectInfo>> {
        if let Some(l) = self.prefetched.lock().expect("poisoned").take(kind.prefix()) {
            return Ok(l);
        }
        Ok(self.backend.list(kind.prefix())?)
    }

    /// Forgets every listing fetched ahead: for a long-running reader (the UI),
    /// whose next reads must see what other processes stored since.
    pub fn drop_listings_ahead(&self) {
        self.prefetched.lock().expect("poisoned").by_prefix.clear();
    }

    /// Forgets the listing of `kind` fetched ahead (a newer one is being taken).
    pub(crate) fn drop_prefetched(&self, kind: ObjectKind) {
        self.prefetched.lock().expect("poisoned").by_prefix.remove(kind.prefix());
    }

    /// Serves the listings of `fetched` to their first readers, as if fetched
    /// ahead by this repository (if still fresh).
    pub fn keep_fetched(&self, fetched: Fetched) {
        let mut pre = self.prefetched.lock().expect("poisoned");
        for (prefix, at, listing) in fetched.0 {
            pre.put_taken(prefix, at, listing);
        }
    }

    /// Keeps the opening marker a backup wrote before opening this repository,
    /// for [`Repository::take_opening`].
    pub fn keep_opening(&self, opening: Opening) {
        self.prefetched.lock().expect("poisoned").opening = Some(opening);
    }

    /// The opening marker kept by [`Repository::keep_opening`], once.
    pub(crate) fn take_opening(&self) -> Option<Opening> {
        self.prefetched.lock().expect("poisoned").opening.take()
    }

    /// Keeps the packs the index load found in `data/` that no index file
    /// lists, with their sizes, for the adoption of orphan packs that follows it
    /// in a backup ([`Repository::loaded_orphans`]): only those, not the whole
    /// listing, which at 16 blobs a pack would cost ~7.5 B per blob.
    pub(crate) fn keep_loaded_orphans(&self, orphans: Vec<(Id, u64)>) {
        self.prefetched.lock().expect("poisoned").orphans_loaded = Some((Instant::now(), orphans));
    }

    /// The packs stored that may be orphans, with their sizes: those the index
    /// load found, if fresh (served once), else every pack of a new listing (the
    /// caller leaves out those it knows): `data/` is listed once per backup.
    pub(crate) fn loaded_orphans(&self) -> Result<Vec<(Id, u64)>> {
        let kept = self.prefetched.lock().expect("poisoned").orphans_loaded.take();
        match kept.filter(|(at, _)| at.elapsed() < FRESH_FOR) {
            Some((_, o)) => Ok(o),
            None => Ok(packs_of(self.backend.list(ObjectKind::Pack.prefix())?)),
        }
    }
}

/// The packs of a `data/` listing and their sizes (names that are not packs left out).
pub(crate) fn packs_of(listing: Vec<ObjectInfo>) -> Vec<(Id, u64)> {
    listing.into_iter().filter_map(|o| Some((ObjectKind::Pack.id_from_path(&o.name)?, o.size))).collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use coffer_backend::{Backend, CountingBackend, MemBackend};

    use crate::format::ObjectKind;
    use crate::repo::{InitOptions, Repository};
    use crate::testing::FAST_KDF;

    fn init() -> Arc<MemBackend> {
        let be = Arc::new(MemBackend::new());
        let opts = InitOptions { kdf: FAST_KDF, ..InitOptions::default() };
        Repository::init(be.clone(), b"pw", &opts).unwrap();
        be
    }

    #[test]
    fn an_open_is_one_get_of_config_one_get_per_key_file_and_three_listings() {
        let mem = init();
        let counting = Arc::new(CountingBackend::new(mem.clone()));
        let probe = Repository::probe(counting.as_ref());
        assert!(probe.exists() && probe.config().is_some());
        let repo = Repository::open_probed(counting.clone(), probe, b"pw", None).unwrap();
        let c = counting.counts();
        assert_eq!((c.get, c.head, c.list), (2, 0, 3), "{c:?}");
        // The writers' listing is served from the probe, once.
        repo.list_ids_ahead(ObjectKind::Writer).unwrap();
        assert_eq!(counting.counts().list, 3);
        repo.list_ids_ahead(ObjectKind::Writer).unwrap();
        assert_eq!(counting.counts().list, 4);
    }

    #[test]
    fn a_key_file_unlocked_ahead_saves_reading_the_key_files_while_it_is_listed() {
        let mem = init();
        let first = Repository::open(mem.clone(), b"pw").unwrap();
        let copy = first.key_file().to_vec();
        assert!(Repository::unlock_ahead(copy.clone(), b"wrong", 1).is_none());
        let mut altered = copy.clone();
        *altered.last_mut().unwrap() ^= 1;
        assert!(Repository::unlock_ahead(altered, b"pw", 2).is_none(), "an altered copy does not open");

        let counting = Arc::new(CountingBackend::new(mem.clone()));
        let ahead = Repository::unlock_ahead(copy.clone(), b"pw", 1).unwrap();
        let probe = Repository::probe(counting.as_ref());
        let repo = Repository::open_probed(counting.clone(), probe, b"pw", Some(ahead)).unwrap();
        assert_eq!((counting.counts().get, repo.key_id()), (1, first.key_id()), "config only");
        assert_eq!(repo.config().id, first.config().id);

        // Once that key file is gone (removed, or replaced by `key passwd`), the
        // copy is not used: the key files listed are read and tried.
        let other = crate::ops::keys::add(&repo, b"pw", FAST_KDF).unwrap();
        mem.delete(&ObjectKind::Key.path(&first.key_id())).unwrap();
        let counting = Arc::new(CountingBackend::new(mem.clone()));
        let ahead = Repository::unlock_ahead(copy, b"pw", 2).unwrap();
        let probe = Repository::probe(counting.as_ref());
        let repo = Repository::open_probed(counting.clone(), probe, b"pw", Some(ahead)).unwrap();
        assert_eq!((counting.counts().get, repo.key_id()), (2, other));
    }

    #[test]
    fn a_config_the_storage_would_not_give_is_reported_from_the_probe_without_a_second_read() {
        let mem = init();
        // Every read of `config` fails, as one through a storage that cannot be reached.
        let faults = coffer_backend::Faults { transient: 1.0, only: "config".into(), ..Default::default() };
        let failing = coffer_backend::FaultyBackend::new(mem.clone(), faults);
        let counting = Arc::new(CountingBackend::new(Arc::new(failing)));
        let probe = Repository::probe(counting.as_ref());
        assert!(probe.exists(), "a failed read is not absence");
        let failure = probe.config_failure().expect("the read failed").clone();
        assert_eq!(failure.kind, coffer_backend::ErrorKind::Transient);
        let gets = counting.counts().get;
        match Repository::open_probed(counting.clone(), probe, b"pw", None) {
            Err(crate::error::Error::Backend(e)) => assert_eq!(e.to_string(), failure.to_string()),
            Err(other) => panic!("{other}"),
            Ok(_) => panic!("opened"),
        }
        assert_eq!(counting.counts().get, gets, "config not read again");
        let absent = Repository::probe(&MemBackend::new());
        assert!(absent.config_failure().is_none(), "absence is not a failure");
    }

    #[test]
    fn a_location_without_config_is_no_repository() {
        let be: Arc<dyn Backend> = Arc::new(MemBackend::new());
        let probe = Repository::probe(be.as_ref());
        assert!(!probe.exists());
        assert!(matches!(
            Repository::open_probed(be, probe, b"pw", None),
            Err(crate::error::Error::RepoNotFound { .. })
        ));
    }

    #[test]
    fn the_snapshots_are_found_from_the_listing_the_open_fetched() {
        let mem = init();
        Repository::open(mem.clone(), b"pw").unwrap();
        let counting = Arc::new(CountingBackend::new(mem.clone()));
        let probe = Repository::probe_with(counting.as_ref(), &[ObjectKind::Snapshot]);
        let repo = Repository::open_probed(counting.clone(), probe, b"pw", None).unwrap();
        let listed = counting.counts().list;
        repo.snapshots().unwrap();
        assert_eq!(counting.counts().list, listed, "no listing of its own");
        repo.snapshots().unwrap();
        assert_eq!(counting.counts().list, listed + 1, "the next call lists afresh");
    }

    #[test]
    fn listings_fetched_ahead_are_served_once_and_then_listed_afresh() {
        let mem = init();
        let counting = Arc::new(CountingBackend::new(mem.clone()));
        let repo = Repository::open(counting.clone(), b"pw").unwrap();
        let before = counting.counts().list;
        repo.prefetch_listings(&[ObjectKind::Snapshot, ObjectKind::Tombstone]);
        assert_eq!(counting.counts().list, before + 2);
        // Fetched already: not listed again.
        repo.prefetch_listings(&[ObjectKind::Snapshot]);
        assert_eq!(counting.counts().list, before + 2);
        repo.list_ids_ahead(ObjectKind::Snapshot).unwrap();
        repo.list_ids_ahead(ObjectKind::Tombstone).unwrap();
        assert_eq!(counting.counts().list, before + 2);
        // A new object is seen by the next listing.
        mem.write(&ObjectKind::Snapshot.path(&crate::id::Id([7; 32])), b"x".to_vec()).unwrap();
        assert_eq!(repo.list_ids_ahead(ObjectKind::Snapshot).unwrap().len(), 1);
        assert_eq!(counting.counts().list, before + 3);
        // A plain listing never takes one fetched ahead, and drops it.
        repo.prefetch_listings(&[ObjectKind::Snapshot]);
        mem.write(&ObjectKind::Snapshot.path(&crate::id::Id([8; 32])), b"y".to_vec()).unwrap();
        assert_eq!(repo.list_ids(ObjectKind::Snapshot).unwrap().len(), 2);
        assert_eq!(repo.list_ids_ahead(ObjectKind::Snapshot).unwrap().len(), 2);
        assert_eq!(counting.counts().list, before + 6);
    }
}
