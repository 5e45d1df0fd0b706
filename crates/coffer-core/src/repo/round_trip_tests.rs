//! Round trips to a slow storage (docs/design.md#round-trips): an open is two
//! rounds, an unchanged backup against a warm cache sends a bounded number of
//! requests in a bounded number of rounds, and reads no pack, and a restore of
//! many batches has their reads in flight together.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use coffer_backend::testing::{Hook, Intercepted, Request};
use coffer_backend::{
    BackendResult, Cache, CacheSlot, CachingBackend, CountingBackend, Counts, DEFAULT_CACHE_SIZE, MemBackend,
};

use super::*;
use crate::crypto::sign::SigningKey;
use crate::ops::backup::{BackupOptions, backup};
use crate::progress::NoProgress;
use crate::testing::{FAST_KDF, PASSPHRASE, noise};

/// Added to every request, so that requests sent together overlap.
const LATENCY: Duration = Duration::from_millis(40);

/// Answers after [`LATENCY`] and records the names it was asked to read and
/// the prefixes it listed (`list <prefix>`).
#[derive(Default)]
struct Latency {
    reads: Mutex<Vec<String>>,
}

impl Hook for Latency {
    fn before(&self, request: Request<'_>) -> BackendResult<()> {
        std::thread::sleep(LATENCY);
        let read = match request {
            Request::Read(name) => name.to_string(),
            Request::List(prefix) => format!("list {prefix}"),
            Request::Write(_) | Request::Stat(_) | Request::Delete(_) => return Ok(()),
        };
        self.reads.lock().unwrap().push(read);
        Ok(())
    }
}

/// A storage that wants 32 requests in flight, answering as [`Latency`] says.
type Slow = Intercepted<MemBackend, Latency>;

/// The storage stack of the command line over `slow`: counter, then the cache.
fn stack(slow: &Arc<Slow>, cache: Option<&Arc<Cache>>) -> (Arc<dyn Backend>, coffer_backend::CountsHandle) {
    let counting = CountingBackend::new(slow.clone());
    let handle = counting.handle();
    let slot = CacheSlot::new();
    if let Some(c) = cache {
        slot.attach(c.clone());
    }
    (Arc::new(CachingBackend::new(counting, slot)), handle)
}

fn new_repo() -> Arc<Slow> {
    let slow = Arc::new(Intercepted::new(MemBackend::new(), 32, Latency::default()));
    let opts = InitOptions { kdf: FAST_KDF, ..InitOptions::default() };
    Repository::init(slow.clone(), PASSPHRASE, &opts).unwrap();
    slow
}

fn requests(c: &Counts) -> u64 {
    c.put + c.get + c.head + c.list + c.delete
}

#[test]
fn an_open_is_two_rounds_and_no_head() {
    let slow = new_repo();
    let (be, counts) = stack(&slow, None);
    let repo = Repository::open(be, PASSPHRASE).unwrap();
    let c = counts.get();
    assert_eq!((c.rounds, c.head), (2, 0), "{c:?}");
    // The writers were listed in the first round: their reader sends nothing.
    repo.writer_records().unwrap();
    assert_eq!(counts.get().list, c.list);
}

/// A small tree of a few directories.
fn source(dir: &Path) {
    for d in 0..4 {
        let sub = dir.join(format!("d{d}"));
        std::fs::create_dir_all(&sub).unwrap();
        for f in 0..3 {
            std::fs::write(sub.join(format!("f{f}")), noise(3000 + f * 100, (d * 10 + f) as u64)).unwrap();
        }
    }
}

/// An unchanged backup against a warm cache: with `announced`, the repository is
/// opened as the command line opens it for a backup, its opening marker and
/// first listings taken while it opens.
fn unchanged_backup(announced: bool) -> Counts {
    let slow = new_repo();
    // Not under the system's temporary directory: a snapshot records the
    // directories above its paths, and other tests running meanwhile change the
    // times of that one, so the second backup would not be unchanged.
    let dir = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
    let src = dir.path().join("src");
    source(&src);
    // The cache apart from the source's directory, whose times it would change.
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = Arc::new(Cache::open(&cache_dir.path().join("cache"), DEFAULT_CACHE_SIZE).unwrap());
    let key = SigningKey::generate();
    let opts = BackupOptions { paths: vec![src.clone()], ..BackupOptions::default() };
    let run = |first: bool| {
        let (be, counts) = stack(&slow, Some(&cache));
        let repo = if announced {
            let probe = Repository::probe(be.as_ref());
            let ahead = crate::lifecycle::writer::announce(be.clone()).unwrap();
            let repo = Repository::open_probed(be, probe, PASSPHRASE, None).unwrap();
            ahead.hand_to(&repo);
            repo
        } else {
            Repository::open(be, PASSPHRASE).unwrap()
        };
        repo.set_tree_cache(cache.clone());
        // The first backup registers the writer's key itself.
        assert_eq!(repo.writer(&key.public()).unwrap().is_some(), !first);
        slow.hook().reads.lock().unwrap().clear();
        let before = counts.get();
        let r = backup(&repo, &opts, &key, &NoProgress).unwrap();
        let c = counts.get();
        let during = Counts {
            put: c.put - before.put,
            get: c.get - before.get,
            head: c.head - before.head,
            list: c.list - before.list,
            delete: c.delete - before.delete,
            bytes_up: 0,
            bytes_down: 0,
            rounds: c.rounds - before.rounds,
            latency_us: Default::default(),
        };
        (r, during, std::mem::take(&mut *slow.hook().reads.lock().unwrap()))
    };
    let (first, ..) = run(true);
    let (second, c, reads) = run(false);
    assert_eq!(second.snapshot.parent, first.id, "the first backup is the parent");
    assert_eq!(second.snapshot.tree, first.snapshot.tree);
    assert!(reads.iter().all(|n| !n.starts_with("data/")), "no pack read: {reads:?}");
    assert!(slow.inner().list("sessions/").unwrap().is_empty(), "the marker is removed");
    c
}

#[test]
fn an_unchanged_backup_against_a_warm_cache_reads_no_pack_in_few_rounds() {
    let c = unchanged_backup(false);
    // A session marker, one round of five listings, the notices and history again
    // before the commit (with the marker looked for), then the snapshot with the
    // marker's removal beside it.
    assert_eq!((c.put, c.head, c.delete), (2, 1, 1), "{c:?}");
    assert!(c.list <= 8, "{c:?}");
    assert!(requests(&c) <= 12, "{c:?}");
    assert!(c.rounds <= 4, "marker; listings; listings before the commit; snapshot and marker removed: {c:?}");
}

#[test]
fn a_backup_announced_at_the_open_commits_in_two_rounds() {
    let c = unchanged_backup(true);
    // The marker was written, and the first listings taken, while the repository
    // opened: the backup itself sends the commit's round and then the snapshot
    // beside the marker's removal.
    assert_eq!((c.put, c.head, c.delete), (1, 1, 1), "{c:?}");
    assert!(c.list <= 3, "{c:?}");
    assert!(c.rounds <= 2, "listings before the commit; snapshot and marker removed: {c:?}");
}

#[test]
fn a_restore_of_many_batches_has_their_reads_in_flight_together() {
    let slow = new_repo();
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    source(&src);
    let key = SigningKey::generate();
    let (be, _) = stack(&slow, None);
    let repo = Repository::open(be, PASSPHRASE).unwrap();
    repo.register_writer(&key.public(), "host".into(), "user".into()).unwrap();
    let opts = BackupOptions { paths: vec![src.clone()], ..BackupOptions::default() };
    let snapshot = backup(&repo, &opts, &key, &NoProgress).unwrap().snapshot;

    let (be, counts) = stack(&slow, None);
    let repo = Repository::open(be, PASSPHRASE).unwrap();
    repo.load_index().unwrap();
    // One entry a batch: the twelve files are twelve batches, each with reads.
    let target = dir.path().join("out");
    let opts = crate::ops::restore::RestoreOptions {
        target: target.clone(),
        subpath: Some(src.clone()),
        batch: crate::ops::restore::BatchLimits { entries: 1, chunks: 1, ..crate::ops::restore::BatchLimits::DEFAULT },
        ..Default::default()
    };
    slow.hook().reads.lock().unwrap().clear();
    let before = counts.get();
    let summary = crate::ops::restore::restore(&repo, &snapshot, &opts, &NoProgress).unwrap();
    let c = counts.get();
    assert!(summary.failures.is_empty(), "{:?}", summary.failures);
    assert_eq!(summary.files, 12);
    for d in 0..4 {
        for f in 0..3 {
            let name = format!("d{d}/f{f}");
            assert!(std::fs::read(src.join(&name)).unwrap() == std::fs::read(target.join(&name)).unwrap(), "{name}");
        }
    }
    let reads = std::mem::take(&mut *slow.hook().reads.lock().unwrap());
    let pack_reads = reads.iter().filter(|n| n.starts_with("data/")).count();
    // Batches read one after the other took a round each: twelve for the files,
    // besides the trees' (the walk loads the root and each directory). The fetch
    // stage keeps up to eight batches' reads in flight at once (9 rounds here).
    let rounds = c.rounds - before.rounds;
    assert!(pack_reads >= 12, "one read per file at least: {reads:?}");
    assert!(rounds < 12, "{rounds} rounds for {pack_reads} reads: {reads:?}");
}

#[test]
fn snapshots_loaded_side_by_side_share_one_listing_of_the_writers() {
    let slow = new_repo();
    let (be, _) = stack(&slow, None);
    let repo = Repository::open(be, PASSPHRASE).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    source(&src);
    let opts = BackupOptions { paths: vec![src.clone()], ..BackupOptions::default() };
    for _ in 0..4 {
        let key = SigningKey::generate();
        repo.register_writer(&key.public(), "host".into(), "user".into()).unwrap();
        backup(&repo, &opts, &key, &NoProgress).unwrap();
    }

    let (be, _) = stack(&slow, None);
    let repo = Repository::open(be, PASSPHRASE).unwrap();
    let listed = || slow.hook().reads.lock().unwrap().iter().filter(|n| *n == "list writers/").count();
    slow.hook().reads.lock().unwrap().clear();
    let history = history::History::load(&repo).unwrap();
    assert_eq!(history.snapshots.len(), 4);
    assert!(history.snapshots.iter().all(|(_, s)| s.signature.is_valid()), "every signer is known");
    // The writers' listing of the open's first round serves the one load.
    assert_eq!(listed(), 0);
    // A writer the records do not name is looked for again, with a new listing.
    assert!(repo.writer(&SigningKey::generate().public()).unwrap().is_none());
    assert_eq!(listed(), 1);
}
