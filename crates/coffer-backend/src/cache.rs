//! The local cache: copies, on the client's disk, of the repository objects
//! every command reads again, so that a second command against a remote
//! repository downloads only what is new. See docs/design.md#local-cache.
//!
//! # Brief overview
//!
//! A [`Cache`] is one repository's cache directory, written through a
//! [`LocalBackend`] (no link followed inside it, files 0600, directories 0700,
//! atomic writes by rename; not synced, since every entry is verified when read).
//! It holds the bytes as the repository stores them (encrypted; never
//! plaintext), of two kinds:
//!
//! - whole objects named by the unkeyed BLAKE3 hash of their bytes (index files,
//!   snapshots, tombstones, writer records, key files), under their own names.
//!   Every hit is hashed and compared with its name.
//! - ranges of packs, kept and served through [`RangeCache`]: the repository
//!   keeps the sealed tree blobs there, and authenticates every hit (AEAD and
//!   blob id) before using it, dropping one that fails.
//!
//! [`CachingBackend`] wraps the storage stack and serves whole-object reads from
//! the cache once one is attached to its [`CacheSlot`] (the repository id, which
//! names the directory, is known only once the config is read). A listing that
//! no longer shows an object removes its entries; a deletion does too. The cache
//! is bounded: past its budget, the entries used least recently (modification
//! time, set on every hit) are deleted.
//!
//! Nothing in the cache is trusted: an entry that fails to verify is deleted and
//! the object fetched from the storage again. Trouble with the cache itself (a
//! full disk, a permission) never fails a command: the storage serves instead.

use std::collections::HashSet;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use super::{Backend, BackendResult, ErrorKind, LocalBackend, Modes, ObjectInfo};

/// The default budget of one repository's cache: 1 GiB.
pub const DEFAULT_CACHE_SIZE: u64 = 1 << 30;

/// The file that marks a cache directory, so that backup tools skip it
/// (<https://bford.info/cachedir/>); its modification time is the cache's last use.
pub const CACHEDIR_TAG: &str = "CACHEDIR.TAG";

const CACHEDIR_TAG_CONTENT: &[u8] = b"Signature: 8a477f597d28d172789f06886806bc55\n\
# This file is a cache directory tag created by coffer.\n\
# For information about cache directory tags, see https://bford.info/cachedir/\n";

/// Prefixes of the objects cached whole: immutable, and named by the hash of
/// their bytes (docs/design.md#layout).
const WHOLE_PREFIXES: [&str; 5] = ["index/", "snapshots/", "tombstones/", "writers/", "keys/"];

/// The prefix of packs, whose ranges [`RangeCache`] keeps.
const PACK_PREFIX: &str = "data/";

/// Where ranges of packs are kept: `ranges/<first 2 hex digits>/<pack id>.<offset>.<length>`.
const RANGE_PREFIX: &str = "ranges/";

/// The local backend's directory of temporary files.
const TMP_PREFIX: &str = "tmp/";

/// Eviction brings the cache down to this many tenths of its budget, so that it
/// does not run again at the next write.
const EVICT_TO_TENTHS: u64 = 9;

/// An entry's last use (its modification time) is recorded to within this: a
/// hit on an entry used more recently leaves its time alone, which spares a
/// system call per hit when a command reads thousands of entries.
const USE_RECORDED_WITHIN: Duration = Duration::from_secs(3600);

/// A temporary file older than this was left by a process that died mid-write.
const STALE_TMP_NANOS: i64 = 3600 * 1_000_000_000;

fn is_id(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The id (64 hex digits) of an object cached whole, or `None` for any other name.
fn content_id(name: &str) -> Option<&str> {
    let rest = WHOLE_PREFIXES.iter().find_map(|p| name.strip_prefix(p))?;
    is_id(rest).then_some(rest)
}

/// The id of a pack named `data/<fan-out>/<id>`.
fn pack_id(name: &str) -> Option<&str> {
    let id = name.strip_prefix(PACK_PREFIX)?.rsplit('/').next()?;
    is_id(id).then_some(id)
}

/// The entry keeping `len` bytes at `offset` of pack `name`.
fn range_entry(name: &str, offset: u64, len: u64) -> Option<String> {
    let id = pack_id(name)?;
    Some(format!("{RANGE_PREFIX}{}/{id}.{offset}.{len}", &id[..2]))
}

/// The pack id of a range entry.
fn pack_of_range(entry: &str) -> Option<&str> {
    let id = entry.rsplit('/').next()?.split('.').next()?;
    is_id(id).then_some(id)
}

fn blake3_hex(bytes: &[u8]) -> blake3::Hash {
    blake3::hash(bytes)
}

/// What a cache did for this process so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Reads served from the cache (verified).
    pub hits: u64,
    /// Reads the cache could not serve.
    pub misses: u64,
    /// Bytes served from the cache.
    pub hit_bytes: u64,
    /// Entries written.
    pub stored: u64,
    /// Entries deleted because they failed to verify (then fetched again).
    pub dropped: u64,
    /// Entries deleted to keep the cache within its budget.
    pub evicted: u64,
}

#[derive(Default)]
struct Counters {
    hits: AtomicU64,
    misses: AtomicU64,
    hit_bytes: AtomicU64,
    stored: AtomicU64,
    dropped: AtomicU64,
    evicted: AtomicU64,
}

/// Sealed byte ranges of objects, kept by a cache for a caller that verifies
/// them: the repository keeps sealed tree blobs here, authenticates every range
/// it gets (AEAD and blob id), and drops one that fails.
pub trait RangeCache: Send + Sync {
    /// The `len` bytes at `offset` of object `name`, if kept. Unverified: the
    /// caller MUST verify them, and call [`RangeCache::drop_range`] if they fail.
    fn get_range(&self, name: &str, offset: u64, len: u64) -> Option<Vec<u8>>;

    /// Keeps `bytes`, read (and verified) at `offset` of object `name`.
    fn put_range(&self, name: &str, offset: u64, bytes: &[u8]);

    /// Forgets the range, which failed to verify.
    fn drop_range(&self, name: &str, offset: u64, len: u64);
}

/// One repository's cache directory.
pub struct Cache {
    dir: PathBuf,
    store: LocalBackend,
    budget: u64,
    /// Bytes the cache holds: a scan, plus what this process stored and deleted
    /// since; `None` until the first write needs it.
    used: Mutex<Option<u64>>,
    counters: Counters,
}

impl Cache {
    /// Opens (creating it, 0700, with its `CACHEDIR.TAG`) the cache directory
    /// `dir`, to hold at most `budget` bytes, and records its use now. A `dir`
    /// that is a symbolic link, or not a directory owned by this user, is
    /// refused ([`LocalBackend::private_dir`]); what lies below it is reached
    /// without following links.
    pub fn open(dir: &Path, budget: u64) -> BackendResult<Cache> {
        let location = dir.display().to_string();
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| super::local::io_err(&location, e))?;
        let store = LocalBackend::private_dir(dir, Modes::PRIVATE)?.without_sync();
        match store.touch(CACHEDIR_TAG) {
            Ok(()) => {}
            Err(e) if e.kind == ErrorKind::NotFound => store.write(CACHEDIR_TAG, CACHEDIR_TAG_CONTENT.to_vec())?,
            Err(e) => return Err(e),
        }
        Ok(Cache { dir: dir.to_path_buf(), store, budget, used: Mutex::new(None), counters: Counters::default() })
    }

    /// The cache directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// What the cache did so far.
    pub fn stats(&self) -> CacheStats {
        let c = &self.counters;
        CacheStats {
            hits: c.hits.load(Relaxed),
            misses: c.misses.load(Relaxed),
            hit_bytes: c.hit_bytes.load(Relaxed),
            stored: c.stored.load(Relaxed),
            dropped: c.dropped.load(Relaxed),
            evicted: c.evicted.load(Relaxed),
        }
    }

    /// Whether the object `name` is one the cache keeps whole.
    pub fn keeps(name: &str) -> bool {
        content_id(name).is_some()
    }

    /// The object `name` (of at most `max` bytes) from the cache, verified
    /// against its name; an entry that fails is deleted. `None` when the cache
    /// does not hold it whole and intact.
    pub fn get(&self, name: &str, max: u64) -> Option<Vec<u8>> {
        let id = content_id(name)?;
        let bytes = match self.store.read_max_used(name, max, USE_RECORDED_WITHIN) {
            Ok(b) => b,
            Err(e) => {
                if e.kind != ErrorKind::NotFound {
                    self.drop_entry(name);
                }
                self.counters.misses.fetch_add(1, Relaxed);
                return None;
            }
        };
        if blake3_hex(&bytes).to_hex().as_str() != id {
            self.drop_entry(name);
            self.counters.misses.fetch_add(1, Relaxed);
            return None;
        }
        self.hit(bytes.len());
        Some(bytes)
    }

    /// Keeps object `name` read from (or written to) the storage, if the cache
    /// keeps such objects and `bytes` match its name.
    pub fn put(&self, name: &str, bytes: &[u8]) {
        let Some(id) = content_id(name) else { return };
        if blake3_hex(bytes).to_hex().as_str() == id {
            self.store_entry(name, bytes);
        }
    }

    /// Forgets what the cache holds of object `name` (it was deleted): the whole
    /// object, or every range of a pack.
    pub fn forget(&self, name: &str) {
        if content_id(name).is_some() {
            self.delete_entry(name, None);
        } else if let Some(id) = pack_id(name) {
            let dir = format!("{RANGE_PREFIX}{}/", &id[..2]);
            for (o, _) in self.store.list_with_mtime(&dir).unwrap_or_default() {
                if pack_of_range(&o.name) == Some(id) {
                    self.delete_entry(&o.name, Some(o.size));
                }
            }
        }
    }

    /// Removes the entries a complete listing of `prefix` (`index/`, `data/`, …)
    /// in the storage shows gone: whole objects not listed, ranges of packs not
    /// listed. Listings of other prefixes, or of part of one, change nothing.
    pub fn retain_listed(&self, prefix: &str, listed: &[ObjectInfo]) {
        let prefix = format!("{}/", prefix.trim_end_matches('/'));
        if WHOLE_PREFIXES.contains(&prefix.as_str()) {
            let names: HashSet<&str> = listed.iter().map(|o| o.name.as_str()).collect();
            for (o, _) in self.store.list_with_mtime(&prefix).unwrap_or_default() {
                if !names.contains(o.name.as_str()) {
                    self.delete_entry(&o.name, Some(o.size));
                }
            }
        } else if prefix == PACK_PREFIX {
            let packs: HashSet<&str> = listed.iter().filter_map(|o| pack_id(&o.name)).collect();
            for (o, _) in self.store.list_with_mtime(RANGE_PREFIX).unwrap_or_default() {
                if pack_of_range(&o.name).is_none_or(|p| !packs.contains(p)) {
                    self.delete_entry(&o.name, Some(o.size));
                }
            }
        }
    }

    fn hit(&self, len: usize) {
        self.counters.hits.fetch_add(1, Relaxed);
        self.counters.hit_bytes.fetch_add(len as u64, Relaxed);
    }

    /// Deletes an entry that failed to verify.
    fn drop_entry(&self, entry: &str) {
        self.counters.dropped.fetch_add(1, Relaxed);
        let size = self.store.stat(entry).ok();
        self.delete_entry(entry, size);
    }

    fn delete_entry(&self, entry: &str, size: Option<u64>) {
        if self.store.delete(entry).is_ok()
            && let Some(size) = size
            && let Some(used) = self.used.lock().expect("cache lock poisoned").as_mut()
        {
            *used = used.saturating_sub(size);
        }
    }

    /// Writes an entry (atomically: a reader sees all of it or none), then
    /// evicts if the cache outgrew its budget. An entry larger than the whole
    /// budget is not kept.
    fn store_entry(&self, entry: &str, bytes: &[u8]) {
        let len = bytes.len() as u64;
        if len > self.budget || self.store.write(entry, bytes.to_vec()).is_err() {
            return;
        }
        self.counters.stored.fetch_add(1, Relaxed);
        let mut used = self.used.lock().expect("cache lock poisoned");
        // The first write scans the cache (which then holds the new entry).
        let now = match *used {
            Some(u) => u + len,
            None => self.entries().iter().map(|(o, _)| o.size).sum(),
        };
        *used = Some(if now > self.budget { self.evict(self.budget / 10 * EVICT_TO_TENTHS) } else { now });
    }

    /// Every entry with its last use (nanoseconds since the Unix epoch).
    fn entries(&self) -> Vec<(ObjectInfo, i64)> {
        WHOLE_PREFIXES
            .iter()
            .chain([&RANGE_PREFIX])
            .flat_map(|p| self.store.list_with_mtime(p).unwrap_or_default())
            .collect()
    }

    /// Deletes the entries used least recently until the cache holds at most
    /// `target` bytes, and temporary files left by processes that died; returns
    /// the bytes left.
    fn evict(&self, target: u64) -> u64 {
        let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i64);
        for (o, mtime) in self.store.list_with_mtime(TMP_PREFIX).unwrap_or_default() {
            if now.saturating_sub(mtime) > STALE_TMP_NANOS {
                let _ = self.store.delete(&o.name);
            }
        }
        let mut entries = self.entries();
        let mut total: u64 = entries.iter().map(|(o, _)| o.size).sum();
        entries.sort_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.name.cmp(&b.0.name)));
        for (o, _) in entries {
            if total <= target {
                break;
            }
            if self.store.delete(&o.name).is_ok() {
                total -= o.size;
                self.counters.evicted.fetch_add(1, Relaxed);
            }
        }
        total
    }
}

impl RangeCache for Cache {
    fn get_range(&self, name: &str, offset: u64, len: u64) -> Option<Vec<u8>> {
        let entry = range_entry(name, offset, len)?;
        match self.store.read_max_used(&entry, len, USE_RECORDED_WITHIN) {
            Ok(b) if b.len() as u64 == len => {
                self.hit(b.len());
                Some(b)
            }
            Ok(_) => {
                self.drop_entry(&entry);
                self.counters.misses.fetch_add(1, Relaxed);
                None
            }
            Err(e) => {
                if e.kind != ErrorKind::NotFound {
                    self.drop_entry(&entry);
                }
                self.counters.misses.fetch_add(1, Relaxed);
                None
            }
        }
    }

    fn put_range(&self, name: &str, offset: u64, bytes: &[u8]) {
        if let Some(entry) = range_entry(name, offset, bytes.len() as u64) {
            self.store_entry(&entry, bytes);
        }
    }

    fn drop_range(&self, name: &str, offset: u64, len: u64) {
        if let Some(entry) = range_entry(name, offset, len) {
            self.drop_entry(&entry);
        }
    }
}

/// Where a [`CachingBackend`] finds its cache, attached once the repository's
/// id is known. Clones share the slot.
#[derive(Clone, Default)]
pub struct CacheSlot(Arc<OnceLock<Arc<Cache>>>);

impl CacheSlot {
    /// An empty slot: the backend passes every request on.
    pub fn new() -> Self {
        Self::default()
    }

    /// Attaches `cache`; `false` if one was attached already (it stays).
    pub fn attach(&self, cache: Arc<Cache>) -> bool {
        self.0.set(cache).is_ok()
    }

    /// The attached cache.
    pub fn get(&self) -> Option<&Arc<Cache>> {
        self.0.get()
    }
}

/// Serves whole-object reads of content-named objects from a [`Cache`], and
/// keeps what it reads and writes of them; everything else, and everything
/// before a cache is attached, is passed on. Placed above the request counter,
/// so that the counts are what reached the storage.
pub struct CachingBackend<B> {
    inner: B,
    slot: CacheSlot,
}

impl<B: Backend> CachingBackend<B> {
    /// Wraps `inner`, with the cache that `slot` gets.
    pub fn new(inner: B, slot: CacheSlot) -> Self {
        CachingBackend { inner, slot }
    }
}

impl<B: Backend> Backend for CachingBackend<B> {
    fn location(&self) -> String {
        self.inner.location()
    }

    fn connections(&self) -> usize {
        self.inner.connections()
    }

    fn read_max(&self, name: &str, max: u64) -> BackendResult<Vec<u8>> {
        let Some(cache) = self.slot.get().filter(|_| Cache::keeps(name)) else {
            return self.inner.read_max(name, max);
        };
        if let Some(bytes) = cache.get(name, max) {
            return Ok(bytes);
        }
        let bytes = self.inner.read_max(name, max)?;
        cache.put(name, &bytes);
        Ok(bytes)
    }

    fn read_range(&self, name: &str, offset: u64, len: u64) -> BackendResult<Vec<u8>> {
        self.inner.read_range(name, offset, len)
    }

    fn read_ranges(&self, name: &str, ranges: &[(u64, u64)]) -> Vec<BackendResult<Vec<u8>>> {
        self.inner.read_ranges(name, ranges)
    }

    fn write(&self, name: &str, data: Vec<u8>) -> BackendResult<()> {
        let Some(cache) = self.slot.get().filter(|_| Cache::keeps(name)) else {
            return self.inner.write(name, data);
        };
        let copy = data.clone();
        self.inner.write(name, data)?;
        cache.put(name, &copy);
        Ok(())
    }

    fn write_new(&self, name: &str, data: Vec<u8>) -> BackendResult<bool> {
        self.inner.write_new(name, data)
    }

    fn write_file(&self, name: &str, file: &std::fs::File, len: u64) -> BackendResult<()> {
        self.inner.write_file(name, file, len)
    }

    fn spool_dir(&self) -> Option<PathBuf> {
        self.inner.spool_dir()
    }

    fn spool_file(&self) -> Option<BackendResult<std::fs::File>> {
        self.inner.spool_file()
    }

    fn stat(&self, name: &str) -> BackendResult<u64> {
        self.inner.stat(name)
    }

    fn list(&self, prefix: &str) -> BackendResult<Vec<ObjectInfo>> {
        let listed = self.inner.list(prefix)?;
        if let Some(cache) = self.slot.get() {
            cache.retain_listed(prefix, &listed);
        }
        Ok(listed)
    }

    fn delete(&self, name: &str) -> BackendResult<()> {
        self.inner.delete(name)?;
        if let Some(cache) = self.slot.get() {
            cache.forget(name);
        }
        Ok(())
    }
}

/// One repository's cache directory, as `coffer cache` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheInfo {
    /// The repository id (the directory's name).
    pub id: String,
    /// The directory.
    pub path: PathBuf,
    /// Bytes of its entries.
    pub size: u64,
    /// When a command last opened it (its `CACHEDIR.TAG`'s modification time).
    pub last_used: SystemTime,
}

/// The caches under `base`: its directories named by a repository id (64 hex
/// digits) that hold a `CACHEDIR.TAG`; links and anything else are not coffer's
/// and are skipped. A missing `base` holds none.
pub fn list_caches(base: &Path) -> std::io::Result<Vec<CacheInfo>> {
    let entries = match std::fs::read_dir(base) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry?;
        let Some(id) = entry.file_name().to_str().filter(|n| is_id(n)).map(str::to_string) else { continue };
        if !entry.file_type()?.is_dir() {
            continue;
        }
        let path = entry.path();
        let Ok(store) = LocalBackend::open(&path) else { continue };
        let Ok(tag) = std::fs::symlink_metadata(path.join(CACHEDIR_TAG)) else { continue };
        if !tag.is_file() {
            continue;
        }
        let size = WHOLE_PREFIXES
            .iter()
            .chain([&RANGE_PREFIX, &TMP_PREFIX])
            .flat_map(|p| store.list(p).unwrap_or_default())
            .map(|o| o.size)
            .sum();
        out.push(CacheInfo { id, path, size, last_used: tag.modified()? });
    }
    out.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(out)
}

/// Deletes the cache directory `info` lists (nothing outside it: links inside
/// are removed, not followed).
pub fn remove_cache(info: &CacheInfo) -> std::io::Result<()> {
    std::fs::remove_dir_all(&info.path)
}

#[cfg(test)]
mod tests;
