//! Tests of the local cache: hits, misses, corrupted entries, eviction,
//! invalidation by listings and deletions, and concurrent use.

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::*;
use crate::{CountingBackend, CountsHandle, MemBackend};

fn named(prefix: &str, bytes: &[u8]) -> String {
    format!("{prefix}{}", blake3::hash(bytes).to_hex())
}

fn pack_name(bytes: &[u8]) -> String {
    let id = blake3::hash(bytes).to_hex();
    format!("data/{}/{id}", &id[..2])
}

struct Stack {
    storage: Arc<MemBackend>,
    counts: CountsHandle,
    backend: CachingBackend<CountingBackend<Arc<MemBackend>>>,
    cache: Arc<Cache>,
    _dir: tempfile::TempDir,
}

/// Storage, a request counter above it, and a caching backend with a cache
/// attached of `budget` bytes.
fn stack(budget: u64) -> Stack {
    let dir = tempfile::tempdir().unwrap();
    let storage = Arc::new(MemBackend::new());
    let counting = CountingBackend::new(storage.clone());
    let counts = counting.handle();
    let slot = CacheSlot::new();
    let backend = CachingBackend::new(counting, slot.clone());
    let cache = Arc::new(Cache::open(&dir.path().join("repo-id"), budget).unwrap());
    assert!(slot.attach(cache.clone()));
    Stack { storage, counts, backend, cache, _dir: dir }
}

#[test]
fn a_second_read_of_a_content_named_object_is_served_from_the_cache() {
    let s = stack(DEFAULT_CACHE_SIZE);
    let bytes = b"an index file".to_vec();
    let name = named("index/", &bytes);
    s.storage.write(&name, bytes.clone()).unwrap();
    assert_eq!(s.backend.read_max(&name, 1000).unwrap(), bytes);
    assert_eq!(s.counts.get().get, 1);
    for _ in 0..3 {
        assert_eq!(s.backend.read_max(&name, 1000).unwrap(), bytes);
    }
    assert_eq!(s.counts.get().get, 1, "later reads reach no storage");
    let st = s.cache.stats();
    assert_eq!((st.hits, st.misses, st.stored), (3, 1, 1));
    // Stored as in the repository (the same bytes), owner-only.
    let file = s.cache.dir().join(&name);
    assert_eq!(std::fs::read(&file).unwrap(), bytes);
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
    assert_eq!(std::fs::metadata(s.cache.dir().join("index")).unwrap().permissions().mode() & 0o777, 0o700);
    assert!(std::fs::read(s.cache.dir().join(CACHEDIR_TAG)).unwrap().starts_with(b"Signature: 8a477f597d28d172"));
}

#[test]
fn objects_written_are_cached_and_other_objects_never() {
    let s = stack(DEFAULT_CACHE_SIZE);
    let snap = b"a snapshot".to_vec();
    let name = named("snapshots/", &snap);
    s.backend.write(&name, snap.clone()).unwrap();
    assert_eq!(s.backend.read_max(&name, 100).unwrap(), snap);
    assert_eq!(s.counts.get().get, 0, "written, then read from the cache");
    // Neither the config, nor session markers, nor packs, nor a name that is not an id.
    for name in ["config", "sessions/abc", &pack_name(b"pack"), "index/not-an-id"] {
        s.backend.write(name, b"x".to_vec()).unwrap();
        s.backend.read_max(name, 100).unwrap();
        s.backend.read_max(name, 100).unwrap();
    }
    assert_eq!(s.counts.get().get, 8);
    assert!(!s.cache.dir().join("config").exists());
}

#[test]
fn an_object_that_does_not_match_its_name_is_returned_but_not_cached() {
    let s = stack(DEFAULT_CACHE_SIZE);
    let name = named("index/", b"what was written");
    s.storage.write(&name, b"damaged bytes".to_vec()).unwrap();
    for _ in 0..2 {
        assert_eq!(s.backend.read_max(&name, 100).unwrap(), b"damaged bytes");
    }
    assert_eq!(s.counts.get().get, 2, "damage is read from the storage each time, for the reader to report");
    assert!(!s.cache.dir().join(&name).exists());
}

#[test]
fn a_corrupted_entry_is_deleted_and_the_object_fetched_again() {
    let s = stack(DEFAULT_CACHE_SIZE);
    let bytes = b"a tombstone".to_vec();
    let name = named("tombstones/", &bytes);
    s.storage.write(&name, bytes.clone()).unwrap();
    s.backend.read_max(&name, 100).unwrap();
    let file = s.cache.dir().join(&name);
    for bad in [&b"a tombstonf"[..], b"", b"a tombstone and more"] {
        std::fs::write(&file, bad).unwrap();
        assert_eq!(s.backend.read_max(&name, 100).unwrap(), bytes, "never the cached bytes");
        assert_eq!(std::fs::read(&file).unwrap(), bytes, "the entry is written again from the storage");
    }
    assert_eq!(s.counts.get().get, 4);
    assert_eq!(s.cache.stats().dropped, 3);
    assert_eq!(s.backend.read_max(&name, 100).unwrap(), bytes);
    assert_eq!(s.counts.get().get, 4);
}

#[test]
fn a_link_planted_in_the_cache_is_not_followed() {
    let s = stack(DEFAULT_CACHE_SIZE);
    let bytes = b"a writer record".to_vec();
    let name = named("writers/", &bytes);
    s.storage.write(&name, bytes.clone()).unwrap();
    let outside = s._dir.path().join("outside");
    std::fs::write(&outside, &bytes).unwrap();
    std::fs::create_dir_all(s.cache.dir().join("writers")).unwrap();
    std::os::unix::fs::symlink(&outside, s.cache.dir().join(&name)).unwrap();
    assert_eq!(s.backend.read_max(&name, 100).unwrap(), bytes);
    assert_eq!(s.counts.get().get, 1, "the link is no hit");
    let meta = std::fs::symlink_metadata(s.cache.dir().join(&name)).unwrap();
    assert!(meta.is_file(), "the link was replaced by an entry");
    assert_eq!(std::fs::read(&outside).unwrap(), bytes);
}

#[test]
fn before_a_cache_is_attached_every_read_reaches_the_storage() {
    let storage = Arc::new(MemBackend::new());
    let counting = CountingBackend::new(storage.clone());
    let counts = counting.handle();
    let backend = CachingBackend::new(counting, CacheSlot::new());
    let bytes = b"k".to_vec();
    let name = named("keys/", &bytes);
    storage.write(&name, bytes.clone()).unwrap();
    backend.read_max(&name, 10).unwrap();
    backend.read_max(&name, 10).unwrap();
    assert_eq!(counts.get().get, 2);
}

#[test]
fn a_listing_or_deletion_removes_what_the_storage_no_longer_holds() {
    let s = stack(DEFAULT_CACHE_SIZE);
    let names: Vec<String> = (0..3u8)
        .map(|i| {
            let b = vec![i; 10];
            let n = named("index/", &b);
            s.storage.write(&n, b).unwrap();
            s.backend.read_max(&n, 100).unwrap();
            n
        })
        .collect();
    // A prune replaced one index file (another process: behind the cache's back).
    s.storage.delete(&names[0]).unwrap();
    s.backend.list("snapshots/").unwrap();
    assert!(s.cache.dir().join(&names[0]).exists(), "a listing of another prefix changes nothing");
    assert_eq!(s.backend.list("index/").unwrap().len(), 2);
    assert!(!s.cache.dir().join(&names[0]).exists());
    assert!(s.cache.dir().join(&names[1]).exists());
    // Deleted through this backend.
    s.backend.delete(&names[1]).unwrap();
    assert!(!s.cache.dir().join(&names[1]).exists());
    assert!(s.cache.dir().join(&names[2]).exists());
}

#[test]
fn ranges_are_kept_served_dropped_and_forgotten_with_their_pack() {
    let s = stack(DEFAULT_CACHE_SIZE);
    let (a, b) = (pack_name(b"pack a"), pack_name(b"pack b"));
    s.storage.write(&a, vec![0; 100]).unwrap();
    s.storage.write(&b, vec![0; 100]).unwrap();
    assert_eq!(s.cache.get_range(&a, 10, 5), None);
    s.cache.put_range(&a, 10, b"12345");
    s.cache.put_range(&a, 20, b"678");
    s.cache.put_range(&b, 0, b"xy");
    assert_eq!(s.cache.get_range(&a, 10, 5).as_deref(), Some(&b"12345"[..]));
    assert_eq!(s.cache.get_range(&a, 10, 4), None, "another length is another range");
    s.cache.drop_range(&a, 10, 5);
    assert_eq!(s.cache.get_range(&a, 10, 5), None);
    // A range entry cut short is no hit, and is deleted.
    s.cache.put_range(&a, 30, b"abcdef");
    let id = blake3::hash(b"pack a").to_hex();
    let entry = s.cache.dir().join(format!("ranges/{}/{id}.30.6", &id[..2]));
    std::fs::write(&entry, b"abc").unwrap();
    assert_eq!(s.cache.get_range(&a, 30, 6), None);
    assert!(!entry.exists());
    // Prune deleted pack b behind the cache's back: a listing of the packs shows it.
    s.storage.delete(&b).unwrap();
    s.backend.list("data/").unwrap();
    assert_eq!(s.cache.get_range(&b, 0, 2), None);
    assert_eq!(s.cache.get_range(&a, 20, 3).as_deref(), Some(&b"678"[..]));
    // A pack deleted through the backend takes its ranges with it.
    s.backend.delete(&a).unwrap();
    assert_eq!(s.cache.get_range(&a, 20, 3), None);
}

#[test]
fn the_cache_stays_within_its_budget_and_keeps_what_was_used_last() {
    let s = stack(10_000);
    let objects: Vec<(String, Vec<u8>)> = (0..40u32)
        .map(|i| {
            let b: Vec<u8> = i.to_le_bytes().iter().cycle().take(1000).copied().collect();
            (named("snapshots/", &b), b)
        })
        .collect();
    let used = |i: usize, ago: Duration| {
        let file = std::fs::File::open(s.cache.dir().join(&objects[i].0)).unwrap();
        file.set_modified(SystemTime::now() - ago).unwrap();
    };
    let last_use = |i: usize| std::fs::metadata(s.cache.dir().join(&objects[i].0)).unwrap().modified().unwrap();
    const HOUR: Duration = Duration::from_secs(3600);
    for (n, b) in &objects[..9] {
        s.storage.write(n, b.clone()).unwrap();
        s.backend.read_max(n, 10_000).unwrap();
    }
    // Last used hours ago, the oldest first; object 1 half an hour ago.
    for i in 0..9 {
        used(i, HOUR * (20 - i as u32));
    }
    used(1, HOUR / 2);
    let recorded = last_use(1);
    // A hit records the use of an entry last used more than an hour ago, and
    // leaves a more recent one as it was (its use is known to within the hour).
    let (first, first_bytes) = &objects[0];
    assert_eq!(&s.backend.read_max(first, 10_000).unwrap(), first_bytes);
    assert!(SystemTime::now().duration_since(last_use(0)).unwrap() < HOUR / 2, "recorded");
    assert_eq!(&s.backend.read_max(&objects[1].0, 10_000).unwrap(), &objects[1].1);
    assert_eq!(last_use(1), recorded, "recent enough: left alone");
    for (i, (n, b)) in objects.iter().enumerate().skip(9) {
        s.storage.write(n, b.clone()).unwrap();
        s.backend.read_max(n, 10_000).unwrap();
        let held: u64 = s.cache.entries().iter().map(|(o, _)| o.size).sum();
        assert!(held <= 10_000, "{held} bytes held after {i} objects");
        if i == 11 {
            assert!(s.cache.dir().join(first).exists(), "used last: kept before those unused for hours");
            assert!(s.cache.dir().join(&objects[1].0).exists());
            assert!(!s.cache.dir().join(&objects[2].0).exists(), "unused for hours: evicted first");
        }
    }
    assert!(s.cache.stats().evicted >= 30);
    assert!(s.cache.dir().join(&objects[39].0).exists(), "the newest stays");
    // An object larger than the whole budget is not kept.
    let big = vec![7; 20_000];
    let n = named("index/", &big);
    s.storage.write(&n, big).unwrap();
    s.backend.read_max(&n, 100_000).unwrap();
    assert!(!s.cache.dir().join(&n).exists());
}

/// Two processes using one cache directory (each its own handles and its own
/// count of the cache's size), writing, reading and evicting the same entries at
/// once, never see a part of an entry: writes are atomic.
#[test]
fn two_users_of_one_cache_directory_never_see_a_partial_entry() {
    let dir = tempfile::tempdir().unwrap();
    let objects: Vec<(String, Vec<u8>)> = (0..24u32)
        .map(|i| {
            let b: Vec<u8> = i.to_le_bytes().iter().cycle().take(64 << 10).copied().collect();
            (pack_name(&b), b)
        })
        .collect();
    // A budget of half the entries, so that both evict while the other reads.
    let budget = 12 * (64 << 10);
    let caches: Vec<Cache> = (0..2).map(|_| Cache::open(&dir.path().join("shared"), budget).unwrap()).collect();
    std::thread::scope(|scope| {
        for cache in &caches {
            for t in 0..3 {
                let objects = &objects;
                scope.spawn(move || {
                    for round in 0..20 {
                        for (n, b) in objects.iter().skip(t).step_by(2) {
                            match cache.get_range(n, round % 2, b.len() as u64) {
                                Some(got) => assert!(got == *b, "a cached range differs from what was put"),
                                None => cache.put_range(n, round % 2, b),
                            }
                            let whole = named("index/", b);
                            match cache.get(&whole, u64::MAX) {
                                Some(got) => assert!(got == *b),
                                None => cache.put(&whole, b),
                            }
                        }
                    }
                });
            }
        }
    });
    for c in &caches {
        let st = c.stats();
        assert_eq!(st.dropped, 0, "no entry was ever seen partial: {st:?}");
        assert!(st.hits > 0 && st.stored > 0);
    }
    let tmp: Vec<_> = std::fs::read_dir(dir.path().join("shared/tmp")).unwrap().collect();
    assert!(tmp.is_empty(), "no temporary file is left behind");
}

#[test]
fn caches_are_listed_with_their_size_and_last_use_and_removed() {
    let base = tempfile::tempdir().unwrap();
    let id = "ab".repeat(32);
    let cache = Cache::open(&base.path().join(&id), DEFAULT_CACHE_SIZE).unwrap();
    let b = vec![1u8; 3000];
    cache.put(&named("index/", &b), &b);
    // Not caches: a name that is no id, a file, a directory without a tag.
    std::fs::create_dir(base.path().join("other")).unwrap();
    std::fs::write(base.path().join("cd".repeat(32)), b"x").unwrap();
    std::fs::create_dir(base.path().join("ef".repeat(32))).unwrap();
    let list = list_caches(base.path()).unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].id, id);
    assert_eq!(list[0].size, 3000);
    assert!(list[0].last_used.elapsed().unwrap().as_secs() < 60);
    remove_cache(&list[0]).unwrap();
    assert!(list_caches(base.path()).unwrap().is_empty());
    assert!(list_caches(&base.path().join("missing")).unwrap().is_empty());
}

/// Regression: a cache directory that was a link to elsewhere was followed,
/// and the cache written there.
#[test]
fn a_cache_directory_that_is_a_link_or_anothers_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let linked = dir.path().join("cache-id");
    std::os::unix::fs::symlink(&elsewhere, &linked).unwrap();
    let e = Cache::open(&linked, DEFAULT_CACHE_SIZE).err().expect("a link is refused");
    assert!(e.to_string().contains("symbolic link"), "{e}");
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0, "nothing written through the link");

    // Another user's directory: as root, one is made; otherwise root's own.
    let theirs = if rustix::process::geteuid().is_root() {
        let d = dir.path().join("theirs");
        std::fs::create_dir(&d).unwrap();
        std::os::unix::fs::chown(&d, Some(65534), Some(65534)).unwrap();
        d
    } else {
        std::path::PathBuf::from("/")
    };
    let e = crate::open_private_dir(&theirs).expect_err("another user's directory is refused");
    assert!(e.to_string().contains("is owned by user"), "{e}");

    // A directory others may enter is made owner-only.
    let open = dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
    Cache::open(&open, DEFAULT_CACHE_SIZE).unwrap();
    assert_eq!(std::fs::metadata(&open).unwrap().permissions().mode() & 0o777, 0o700);
}
