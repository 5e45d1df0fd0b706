//! Storage backends: a backend stores opaque named objects and knows nothing of
//! packs, keys or snapshots. See docs/design.md#storage-contract.
//!
//! Names are relative paths with `/` separators such as `data/3f/3fa2…`. The
//! contract every implementation keeps:
//! - `write` is atomic: a reader sees the whole object or none of it, never a part;
//!   writing the same name with the same bytes again is harmless (idempotent).
//! - after `write` returns, `read`, `stat` and `list` see the object (read-after-write).
//! - `read_range` returns the bytes asked for, fewer only when the object ends
//!   first; the caller decides whether a short object is damage.
//! - `read_max` refuses an object larger than the caller allows without reading
//!   it, so a planted giant object costs no memory.
//! - `list(prefix)` returns every object whose name starts with the prefix
//!   directory, up to two directory levels below it, and sees every object whose
//!   `write` has returned (list-after-write).
//! - `delete` of an absent object succeeds.
//!
//! A backend also says how many requests it wants in flight
//! ([`Backend::connections`]); [`fan_out`] runs a batch of object reads on that
//! many threads, so fetching many objects does not borrow the CPU pool. The
//! wrappers ([`RetryBackend`], [`CountingBackend`], [`FaultyBackend`],
//! [`ThrottledBackend`], [`CachingBackend`], the local cache) are composed by the binary in one
//! place; [`Location`] parses where a repository is. [`placement`] decides
//! which backends hold each pack when a repository spans several. The feature
//! `testing` adds [`testing::run_suite`], the conformance suite
//! every backend must pass.

mod cache;
mod counting;
mod faulty;
mod local;
pub mod location;
mod mem;
mod memory_ranges;
mod opendal;
pub mod placement;
mod remote_error;
mod replicated;
mod retry;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
mod throttle;

pub use self::opendal::{
    CREDENTIAL_VARIABLES, DEFAULT_REMOTE_CONNECTIONS, DEFAULT_SFTP_CONNECTIONS, OpendalBackend, RemoteOptions,
    check_cacert,
};
pub use cache::{
    CACHEDIR_TAG, Cache, CacheInfo, CacheSlot, CacheStats, CachingBackend, DEFAULT_CACHE_SIZE, RangeCache, list_caches,
    remove_cache,
};
pub use counting::{CountingBackend, Counts, CountsHandle, Latency};
pub use faulty::{Faults, FaultyBackend};
pub use local::io_err as local_io_error;
pub use local::open_private_dir;
pub use local::{LocalBackend, Modes};
pub use location::{Location, LocationError};
pub use mem::MemBackend;
pub use memory_ranges::{DEFAULT_MEMORY_RANGES, MemoryRanges};
pub use replicated::{MemberHealth, ReplicatedBackend, ShortCopy, pack_id_of};
pub use retry::{RetryBackend, RetryEvent, RetryPolicy};
pub use throttle::{Throttle, ThrottledBackend};

use std::fmt;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

/// How a backend error should be handled by the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The object does not exist.
    NotFound,
    /// May succeed if retried (timeouts, throttling, connection resets).
    Transient,
    /// Will not succeed if retried (permissions, full disk, invalid configuration).
    Permanent,
    /// The object is larger than the reader allowed ([`Backend::read_max`]); it
    /// was not read. The repository layer reports it as damage.
    TooLarge,
}

/// An error from a backend, naming the object concerned.
#[derive(Clone, Debug, thiserror::Error)]
pub struct BackendError {
    /// The class of the error.
    pub kind: ErrorKind,
    /// The object name, or the operation when it concerns no object.
    pub object: String,
    /// What the backend said, in words for the user.
    pub message: String,
    /// The underlying service's own report, when `message` puts it in other
    /// words (shown with `-v`; it may be long and technical).
    pub detail: Option<String>,
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            ErrorKind::NotFound => {
                write!(f, "{}: not found in the repository storage", self.object)
            }
            ErrorKind::Transient => {
                write!(f, "{}: storage error (temporary, retry later): {}", self.object, self.message)
            }
            ErrorKind::Permanent => write!(f, "{}: storage error: {}", self.object, self.message),
            ErrorKind::TooLarge => write!(f, "{}: {}", self.object, self.message),
        }
    }
}

impl BackendError {
    /// Builds an error of `kind` about `object`.
    pub fn new(kind: ErrorKind, object: impl Into<String>, message: impl Into<String>) -> Self {
        BackendError { kind, object: object.into(), message: message.into(), detail: None }
    }

    /// The same error, with the service's own report as its detail.
    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    /// A [`ErrorKind::TooLarge`] error: `object` holds `size` bytes (at least),
    /// more than the `max` its reader allows.
    pub fn too_large(object: impl Into<String>, size: u64, max: u64) -> Self {
        BackendError::new(
            ErrorKind::TooLarge,
            object,
            format!("holds {size} bytes, more than the {max} such an object may hold; it was not read"),
        )
    }
}

/// Result of backend operations.
pub type BackendResult<T> = Result<T, BackendError>;

/// One listed object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectInfo {
    /// Full object name, e.g. `index/ab12…`.
    pub name: String,
    /// Size in bytes.
    pub size: u64,
}

impl<B: Backend + ?Sized> Backend for std::sync::Arc<B> {
    fn location(&self) -> String {
        (**self).location()
    }
    fn connections(&self) -> usize {
        (**self).connections()
    }
    fn read_ranges(&self, name: &str, ranges: &[(u64, u64)]) -> Vec<BackendResult<Vec<u8>>> {
        (**self).read_ranges(name, ranges)
    }
    fn read_max(&self, name: &str, max: u64) -> BackendResult<Vec<u8>> {
        (**self).read_max(name, max)
    }
    fn read_range(&self, name: &str, offset: u64, len: u64) -> BackendResult<Vec<u8>> {
        (**self).read_range(name, offset, len)
    }
    fn write(&self, name: &str, data: Vec<u8>) -> BackendResult<()> {
        (**self).write(name, data)
    }
    fn write_new(&self, name: &str, data: Vec<u8>) -> BackendResult<bool> {
        (**self).write_new(name, data)
    }
    fn write_file(&self, name: &str, file: &File, len: u64) -> BackendResult<()> {
        (**self).write_file(name, file, len)
    }
    fn spool_dir(&self) -> Option<PathBuf> {
        (**self).spool_dir()
    }
    fn spool_file(&self) -> Option<BackendResult<File>> {
        (**self).spool_file()
    }
    fn stat(&self, name: &str) -> BackendResult<u64> {
        (**self).stat(name)
    }
    fn list(&self, prefix: &str) -> BackendResult<Vec<ObjectInfo>> {
        (**self).list(prefix)
    }
    fn delete(&self, name: &str) -> BackendResult<()> {
        (**self).delete(name)
    }
    fn copies(&self, name: &str) -> usize {
        (**self).copies(name)
    }
    fn read_range_copy(&self, name: &str, offset: u64, len: u64, copy: usize) -> BackendResult<Vec<u8>> {
        (**self).read_range_copy(name, offset, len, copy)
    }
    fn placed_copies(&self, name: &str) -> Vec<PlacedCopy> {
        (**self).placed_copies(name)
    }
    fn read_max_copy(&self, name: &str, max: u64, copy: usize) -> BackendResult<Vec<u8>> {
        (**self).read_max_copy(name, max, copy)
    }
}

/// A store of immutable named objects.
pub trait Backend: Send + Sync {
    /// A human-readable location (a path or URL), used in messages.
    fn location(&self) -> String;

    /// Reads a whole object. `Err(NotFound)` if absent. Only for objects whose
    /// size the caller trusts; the repository layer uses [`Backend::read_max`].
    fn read(&self, name: &str) -> BackendResult<Vec<u8>> {
        self.read_max(name, u64::MAX)
    }

    /// Reads a whole object of at most `max` bytes. `Err(NotFound)` if absent;
    /// `Err(TooLarge)` if it holds more than `max` bytes, found without reading
    /// (or allocating for) more than `max + 1` of them.
    fn read_max(&self, name: &str, max: u64) -> BackendResult<Vec<u8>>;

    /// Reads `len` bytes at `offset`; returns fewer only if the object ends first.
    fn read_range(&self, name: &str, offset: u64, len: u64) -> BackendResult<Vec<u8>>;

    /// Reads several `(offset, len)` ranges of one object, each as
    /// [`Backend::read_range`] would, results in the order asked. The default
    /// reads them one after the other; a remote backend sends them concurrently.
    fn read_ranges(&self, name: &str, ranges: &[(u64, u64)]) -> Vec<BackendResult<Vec<u8>>> {
        ranges.iter().map(|&(offset, len)| self.read_range(name, offset, len)).collect()
    }

    /// How many requests this backend wants in flight at once when many objects
    /// are fetched ([`fan_out`]): a few for a local disk, tens for an object
    /// store whose every request waits a round trip.
    fn connections(&self) -> usize {
        local_connections()
    }

    /// Writes an object atomically; idempotent for equal content. Takes the
    /// bytes by value so that a backend can hand them on without a copy.
    fn write(&self, name: &str, data: Vec<u8>) -> BackendResult<()>;

    /// Writes an object only if none of that name exists: `Ok(true)` when it was
    /// written, `Ok(false)` when an object of that name was there already (it is
    /// left as it was). For objects that must never be replaced, such as
    /// `config`. The local backend and S3 (`If-None-Match: *`) decide this
    /// atomically; the default asks [`Backend::stat`] first, which leaves a window
    /// in which two writers may both create.
    fn write_new(&self, name: &str, data: Vec<u8>) -> BackendResult<bool> {
        match self.stat(name) {
            Ok(_) => Ok(false),
            Err(e) if e.kind == ErrorKind::NotFound => self.write(name, data).map(|()| true),
            Err(e) => Err(e),
        }
    }

    /// Writes an object from the first `len` bytes of a local file, with the
    /// guarantees of [`Backend::write`]. The file is read with positioned reads,
    /// so a retry may call this again with the same file. The default reads the
    /// file into memory; backends that can stream override it.
    fn write_file(&self, name: &str, file: &File, len: u64) -> BackendResult<()> {
        self.write(name, read_spool(name, file, 0, len)?)
    }

    /// A local directory for files about to be written to this backend with
    /// [`Backend::write_file`] (on the same file system as the objects for a local
    /// backend); `None` for the system's temporary directory.
    fn spool_dir(&self) -> Option<PathBuf> {
        None
    }

    /// A new unnamed file in [`Backend::spool_dir`], gone when closed, opened
    /// without following any link inside the repository; `None` when the backend
    /// has no spool directory of its own (or opens it by path).
    fn spool_file(&self) -> Option<BackendResult<File>> {
        None
    }

    /// Size of an object. `Err(NotFound)` if absent.
    fn stat(&self, name: &str) -> BackendResult<u64>;

    /// Lists every object whose name starts with `prefix` (a directory such as
    /// `index/`), recursively.
    fn list(&self, prefix: &str) -> BackendResult<Vec<ObjectInfo>>;

    /// Deletes an object; deleting an absent object is not an error.
    fn delete(&self, name: &str) -> BackendResult<()>;

    /// How many separately readable copies of object `name` this backend keeps:
    /// 1 for a plain backend, the holders for a [`ReplicatedBackend`]. With
    /// [`Backend::read_range_copy`], the repository reads another copy when what
    /// one copy returned does not verify.
    fn copies(&self, _name: &str) -> usize {
        1
    }

    /// [`Backend::read_range`] from copy `copy` (below [`Backend::copies`]) of the
    /// object. The default has copy 0 only; any other is `Err(NotFound)`.
    fn read_range_copy(&self, name: &str, offset: u64, len: u64, copy: usize) -> BackendResult<Vec<u8>> {
        if copy == 0 {
            self.read_range(name, offset, len)
        } else {
            Err(BackendError::new(ErrorKind::NotFound, name, format!("this storage keeps no copy {copy}")))
        }
    }

    /// The copies of object `name` this storage places on backends of its own,
    /// each with the copy number [`Backend::read_max_copy`] takes and the name
    /// of the backend that should hold it; empty for a storage that keeps one
    /// copy. `coffer check --read-data` reads each of them.
    fn placed_copies(&self, _name: &str) -> Vec<PlacedCopy> {
        Vec::new()
    }

    /// [`Backend::read_max`] from copy `copy` (as [`Backend::read_range_copy`]).
    fn read_max_copy(&self, name: &str, max: u64, copy: usize) -> BackendResult<Vec<u8>> {
        if copy == 0 {
            self.read_max(name, max)
        } else {
            Err(BackendError::new(ErrorKind::NotFound, name, format!("this storage keeps no copy {copy}")))
        }
    }
}

/// One copy of an object that a storage of several backends places
/// ([`Backend::placed_copies`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlacedCopy {
    /// The copy number, for [`Backend::read_max_copy`].
    pub copy: usize,
    /// The backend holding it.
    pub backend: String,
    /// Whether the backend must hold it now: a home in the current table, no
    /// migration running (during one, a home may not have received it yet).
    pub required: bool,
}

/// Reads `len` bytes at `offset` of the local file holding what is to become
/// object `name`.
pub(crate) fn read_spool(name: &str, file: &File, offset: u64, len: u64) -> BackendResult<Vec<u8>> {
    let mut buf = vec![0; len as usize];
    file.read_exact_at(&mut buf, offset).map_err(|e| {
        BackendError::new(ErrorKind::Permanent, name, format!("cannot read the local file being uploaded: {e}"))
    })?;
    Ok(buf)
}

/// Installs ring as the process's rustls crypto provider, which every reqwest
/// client needs before it is built (coffer links reqwest without a provider of
/// its own). Does nothing when the process has one installed.
pub fn install_tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Requests in flight for a local disk: the number of cores, between 2 and 8
/// (what the CPU pool gave before the backend chose, so local speed is kept).
pub fn local_connections() -> usize {
    std::thread::available_parallelism().map_or(4, |n| n.get()).clamp(2, 8)
}

/// Applies `f` to every item on up to `workers` threads (the caller's included)
/// and returns the results in the order of `items`: the I/O pool for fetching
/// many objects, sized by [`Backend::connections`] rather than by the cores. The
/// threads live for this call only; with one item or one worker, `f` runs on the
/// calling thread.
pub fn fan_out<T: Sync, R: Send>(workers: usize, items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let workers = workers.min(items.len()).max(1);
    if workers == 1 {
        return items.iter().map(&f).collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let work = || {
        let mut done = Vec::new();
        loop {
            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let Some(item) = items.get(i) else { return done };
            done.push((i, f(item)));
        }
    };
    let mut slots: Vec<Option<R>> = std::iter::repeat_with(|| None).take(items.len()).collect();
    std::thread::scope(|s| {
        let handles: Vec<_> = (1..workers).map(|_| s.spawn(work)).collect();
        for (i, r) in work() {
            slots[i] = Some(r);
        }
        for h in handles {
            // A panic in `f` is the caller's bug: carry it on to the caller.
            let done = h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
            for (i, r) in done {
                slots[i] = Some(r);
            }
        }
    });
    slots.into_iter().map(|r| r.expect("every item was taken by one worker")).collect()
}

/// `N` bytes from the operating system's random source, for names and jitter
/// that must not collide between processes.
fn random_array<const N: usize>() -> [u8; N] {
    let mut out = [0u8; N];
    getrandom::fill(&mut out).expect("the operating system's random source failed");
    out
}
