//! The repository: opens keys, reads the config, loads the index, and loads and
//! saves blobs and sealed objects. The layers above (backup, restore, check) use it;
//! it uses the backend, crypto and format layers. See docs/design.md.

/// The damage of blob `entry` in pack `pack_info`, as `detail` says.
fn blob_damage(pack_info: &PackInfo, entry: &PackEntry, detail: impl Into<String>) -> Error {
    let object = format!("{} {} in pack {}", entry.blob_type.noun(), entry.id.short(), pack_info.id.short());
    Error::corrupt(object, detail)
}

#[cfg(test)]
mod copies_tests;
pub mod history;
mod index;
pub mod layout;
mod listing;
pub mod roots;
#[cfg(test)]
mod round_trip_tests;
mod saver;
mod signed;
#[cfg(test)]
mod tree_cache_tests;
mod tree_runs;
pub mod tree_walk;
mod trees;
mod uploader;

pub use index::{IndexEntry, MasterIndex, PackInfo};
pub use listing::{Fetched, Probe, UnlockedAhead};
pub use saver::{BlobSaver, SaverEvent, SaverStats};
pub use signed::{WRITER_KEY_FILE, Writers};
pub use trees::{TREE_CUT_CONTEXT, TreeNodes};

use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};

use crate::chunker::{Chunker, ChunkerParams};
use crate::crypto::{AeadKey, Cipher, Epoch, Key, ScryptParams, blob_id, random_array};
use coffer_backend::{Backend, ErrorKind, RangeCache};

/// Derivation context of the key for tree blob ids (from the id key).
pub const TREE_ID_CONTEXT: &str = "coffer v1 tree id";
use crate::error::{Error, Result};
use crate::format::config::{Config, DEFAULT_COMPRESSION_LEVEL, DEFAULT_PACK_SIZE};
use crate::format::envelope::{self, SealedKind};
use crate::format::keyfile::{KeyFile, MasterKeys};
use crate::format::pack::{self, BlobType, PackEntry};
use crate::format::snapshot::Snapshot;
use crate::format::{FORMAT_VERSION, ObjectKind, index as index_file};
use crate::id::Id;

/// Snapshots that could not be loaded, each as the error naming it.
pub type DamagedSnapshots = Vec<Error>;

/// Index files that could not be loaded, each as the error naming it.
pub type DamagedIndexFiles = Vec<Error>;

/// What a command that skips a damaged index file tells the user.
pub const INDEX_FILE_SKIPPED: &str =
    "skipped, so the blobs only it lists are not found; run `coffer check`, then `coffer repair index`";

/// At most this many bad copies of blobs are remembered for
/// [`Repository::take_bad_copies`].
const BAD_COPIES_KEPT: usize = 1000;

/// Key files read at once when a repository is opened (most have one or two).
const KEY_FILES_AHEAD: usize = 8;

/// Why an empty passphrase is refused for a new key file.
pub const EMPTY_PASSPHRASE: &str = "an empty passphrase is not allowed: anyone could open the repository";

/// Settings chosen when a repository is created.
#[derive(Clone, Debug)]
pub struct InitOptions {
    /// Chunk size limits.
    pub chunker: ChunkerParams,
    /// zstd level, 0 to store uncompressed.
    pub compression_level: i32,
    /// Target pack size.
    pub pack_size: u32,
    /// KDF cost of the first key file.
    pub kdf: ScryptParams,
}

impl Default for InitOptions {
    fn default() -> Self {
        InitOptions {
            chunker: ChunkerParams::default(),
            compression_level: DEFAULT_COMPRESSION_LEVEL,
            pack_size: DEFAULT_PACK_SIZE,
            kdf: ScryptParams::DEFAULT,
        }
    }
}

/// An open repository.
pub struct Repository {
    backend: Arc<dyn Backend>,
    keys: MasterKeys,
    config: Config,
    cipher: Cipher,
    chunker: Chunker,
    index: RwLock<MasterIndex>,
    /// The key file that opened the repository (or that `init` wrote).
    opener: KeyFileRead,
    tree_id_key: Key,
    writers: RwLock<Option<Writers>>,
    writer_loads: signed::WriterLoads,
    /// Copies of blobs that failed to read while another copy served.
    bad_copies: Mutex<Vec<String>>,
    /// Where sealed tree blobs are kept between commands (the local cache), if
    /// anywhere (docs/design.md#local-cache).
    tree_cache: std::sync::OnceLock<Arc<dyn RangeCache>>,
    /// Listings fetched ahead for their next reader (docs/design.md#round-trips).
    prefetched: Mutex<listing::Prefetched>,
    /// Where tree blobs lie, for reading them pack-wide into the cache.
    tree_places: tree_runs::TreePlaces,
    /// The index files loaded into the master index (or found damaged), for
    /// [`Repository::load_new_index_files`].
    index_files_read: Mutex<std::collections::HashSet<Id>>,
}

/// A key file as read from the storage: its id (the hash of its bytes) and its
/// bytes.
#[derive(Clone, Debug)]
pub(crate) struct KeyFileRead {
    id: Id,
    bytes: Vec<u8>,
}

/// Which snapshots a name like `latest` may pick.
#[derive(Clone, Debug, Default)]
pub struct SnapshotFilter {
    /// Only snapshots of this host.
    pub host: Option<String>,
    /// Only snapshots carrying all of these tags.
    pub tags: Vec<String>,
    /// Only snapshots whose paths include all of these.
    pub paths: Vec<String>,
}

impl SnapshotFilter {
    /// Whether `s` passes the filter.
    pub fn matches(&self, s: &Snapshot) -> bool {
        self.host.as_ref().is_none_or(|h| &s.hostname == h)
            && self.tags.iter().all(|t| s.tags.contains(t))
            && self.paths.iter().all(|p| s.paths.contains(p))
    }
}

/// How far after the reader's clock a snapshot's `time` may lie and the snapshot
/// still be `latest`: clocks need not agree across machines, and one keeping local
/// time as if it were UTC is off by up to 14 hours (docs/design.md#snapshots).
pub const FUTURE_TOLERANCE: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// What `latest` names: the newest snapshot passing a filter that is not dated
/// more than [`FUTURE_TOLERANCE`] ahead, and those passed over for their date.
#[derive(Debug, Default)]
pub struct Latest {
    /// The snapshot `latest` names, if any.
    pub found: Option<(Id, Snapshot)>,
    /// Snapshots passing the filter but dated too far ahead, newest first: their id and `time`.
    pub future: Vec<(Id, String)>,
}

impl Latest {
    /// Picks `latest` among `snaps` (sorted oldest first, as listed) by `filter`,
    /// judging dates against `now`.
    pub fn pick(snaps: Vec<(Id, Snapshot)>, filter: &SnapshotFilter, now: std::time::SystemTime) -> Latest {
        let limit = now + FUTURE_TOLERANCE;
        let mut out = Latest::default();
        for (id, s) in snaps.into_iter().rev().filter(|(_, s)| filter.matches(s)) {
            if s.system_time() > limit {
                out.future.push((id, s.time.clone()));
            } else {
                out.found = Some((id, s));
                break;
            }
        }
        out
    }

    /// A warning naming each snapshot passed over.
    pub fn warnings(&self) -> Vec<String> {
        self.future.iter().map(|(id, time)| future_warning(id, time, "`latest` passes it over")).collect()
    }
}

/// What is said of snapshot `id` dated `time`, more than [`FUTURE_TOLERANCE`]
/// ahead of this machine's clock, and what is done about it.
pub fn future_warning(id: &Id, time: &str, done: &str) -> String {
    format!(
        "snapshot {} is dated {time}, more than {} hours after this machine's clock (a writer's clock is wrong, or \
         the date was forged): {done}; name it by its id to use it",
        id.short(),
        FUTURE_TOLERANCE.as_secs() / 3600
    )
}

/// A pack being assembled: a spool file behind a write buffer.
pub(crate) type Spool = std::io::BufWriter<std::fs::File>;

/// The write buffer of a spool file: small blobs (trees, small files) are
/// gathered into fewer writes.
const SPOOL_BUFFER: usize = 256 << 10;

/// A spool file that could not be created or written: local storage trouble
/// (often a full disk), reported like a storage error, and never as temporary.
pub(crate) fn spool_error(dir: &std::path::Path, e: std::io::Error) -> Error {
    let e = coffer_backend::local_io_error(&dir.display().to_string(), e);
    Error::Backend(coffer_backend::BackendError::new(
        match e.kind {
            ErrorKind::Transient | ErrorKind::NotFound => ErrorKind::Permanent,
            k => k,
        },
        e.object,
        format!("cannot write a pack being assembled in this directory: {}", e.message),
    ))
}

fn is_not_found(e: &coffer_backend::BackendError) -> bool {
    e.kind == ErrorKind::NotFound
}

/// Reads a whole object of `kind` named `name`, refusing it, as damage of the
/// object `what`, when it is larger than the kind's limit
/// ([`ObjectKind::max_len`]); nothing is allocated for a larger one.
pub(crate) fn read_bounded(backend: &dyn Backend, kind: ObjectKind, name: &str, what: &str) -> Result<Vec<u8>> {
    backend.read_max(name, kind.max_len()).map_err(|e| match e.kind {
        ErrorKind::TooLarge => Error::corrupt(what, format!("{name} {}", e.message)),
        _ => Error::Backend(e),
    })
}

/// Refuses to store an object of `kind` of `len` bytes that readers would refuse
/// (a writer bug: every writer bounds what it writes below the limit).
pub(crate) fn check_storable(kind: ObjectKind, len: usize) -> Result<()> {
    if len as u64 > kind.max_len() {
        return Err(Error::InvalidInput(format!(
            "a {} of {len} bytes would be larger than the {} bytes readers accept; it was not stored",
            kind.noun(),
            kind.max_len()
        )));
    }
    Ok(())
}

/// A new config with a new repository id and the settings of `opts`, checked as
/// a reader would check it.
fn new_config(opts: &InitOptions) -> Result<Config> {
    opts.chunker.validate().map_err(Error::InvalidInput)?;
    let config = Config {
        version: FORMAT_VERSION,
        id: Id(random_array()),
        chunker: opts.chunker,
        compression_level: opts.compression_level,
        pack_size: opts.pack_size,
        related: None,
    };
    Config::decode(&config.encode()).map_err(Error::InvalidInput)?;
    Ok(config)
}

impl Repository {
    /// Whether a repository exists at `backend` (its `config` object is there).
    pub fn exists(backend: &dyn Backend) -> Result<bool> {
        match backend.stat("config") {
            Ok(_) => Ok(true),
            Err(e) if is_not_found(&e) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Whether a new repository may be created at `backend`: not where one exists,
    /// nor where one lost its `config` (key files, packs, index files or snapshots
    /// are there), which [`Error::ConfigLost`] reports with what was found.
    pub fn check_new_location(backend: &dyn Backend) -> Result<()> {
        if Self::exists(backend)? {
            return Err(Error::RepoExists { location: backend.location() });
        }
        let mut found = Vec::new();
        for kind in [ObjectKind::Key, ObjectKind::Pack, ObjectKind::Index, ObjectKind::Snapshot] {
            let n = backend.list(kind.prefix())?.iter().filter(|o| kind.id_from_path(&o.name).is_some()).count();
            if n > 0 {
                found.push(format!("{n} {}{}", kind.noun(), if n == 1 { "" } else { "s" }));
            }
        }
        if !found.is_empty() {
            return Err(Error::ConfigLost { location: backend.location(), found: found.join(", ") });
        }
        Ok(())
    }

    /// Creates a repository: a key file for `passphrase`, then the config, last, so
    /// that a half-created repository is never taken for a usable one. Refused
    /// where [`Repository::check_new_location`] refuses.
    pub fn init(backend: Arc<dyn Backend>, passphrase: &[u8], opts: &InitOptions) -> Result<Repository> {
        Self::create(backend, passphrase, opts, MasterKeys::random(), None)
    }

    /// Creates a repository related to `source` (docs/design.md#copy): it takes
    /// the source's id and chunker keys and chunker sizes, so blob ids and chunk
    /// boundaries agree and data deduplicates across the two, and with
    /// `share_data_keys` its data keys (every epoch) too, so that packs, index
    /// files, writer records and snapshots copy between them byte for byte. The
    /// compression level, pack size and KDF come from `opts`; its repository id is
    /// new. Its config records the relation.
    pub fn init_related(
        backend: Arc<dyn Backend>,
        passphrase: &[u8],
        opts: &InitOptions,
        source: &Repository,
        share_data_keys: bool,
    ) -> Result<Repository> {
        let keys = MasterKeys {
            data: if share_data_keys {
                source.keys.data.clone()
            } else {
                crate::crypto::DataKeys::new(crate::crypto::Key::random())
            },
            id: source.keys.id.clone(),
            chunker: source.keys.chunker.clone(),
        };
        let opts = InitOptions { chunker: source.config.chunker, ..opts.clone() };
        let related = crate::format::config::Related { repository: source.config.id, data_keys: share_data_keys };
        Self::create(backend, passphrase, &opts, keys, Some(related))
    }

    fn create(
        backend: Arc<dyn Backend>,
        passphrase: &[u8],
        opts: &InitOptions,
        keys: MasterKeys,
        related: Option<crate::format::config::Related>,
    ) -> Result<Repository> {
        Self::check_new_location(backend.as_ref())?;
        if passphrase.is_empty() {
            return Err(Error::InvalidInput(EMPTY_PASSPHRASE.into()));
        }
        let config = Config { related, ..new_config(opts)? };
        let cipher = Cipher::preferred();
        let kf = KeyFile::create(
            &keys,
            passphrase,
            opts.kdf,
            cipher,
            crate::fs::meta::hostname(),
            crate::fs::meta::username(),
        )
        .map_err(Error::InvalidInput)?;
        let kbytes = kf.encode();
        let opener = KeyFileRead { id: Id::hash_of(&kbytes), bytes: kbytes };
        backend.write(&ObjectKind::Key.path(&opener.id), opener.bytes.clone())?;
        // The config is sealed under epoch 0 for good: every key file, even one made
        // before a rotation, opens it.
        let config_key = keys.data.get(0).expect("a new repository has epoch 0");
        let sealed = envelope::seal(config_key, 0, cipher, SealedKind::Config, &config.encode());
        check_storable(ObjectKind::Config, sealed.len())?;
        // Never over another repository's config (two inits at once): created
        // only if absent, atomically where the storage can (docs/design.md#storage-contract).
        if !backend.write_new("config", sealed)? {
            return Err(Error::RepoExists { location: backend.location() });
        }
        Ok(Self::assemble(backend, keys, config, opener))
    }

    fn assemble(backend: Arc<dyn Backend>, keys: MasterKeys, config: Config, opener: KeyFileRead) -> Repository {
        let chunker = Chunker::new(&keys.chunker, config.chunker);
        let tree_id_key = keys.id.derive(TREE_ID_CONTEXT, b"");
        Repository {
            backend,
            keys,
            config,
            cipher: Cipher::preferred(),
            chunker,
            index: RwLock::new(MasterIndex::default()),
            opener,
            tree_id_key,
            writers: RwLock::new(None),
            writer_loads: signed::WriterLoads::default(),
            bad_copies: Mutex::new(Vec::new()),
            tree_cache: std::sync::OnceLock::new(),
            prefetched: Mutex::new(listing::Prefetched::default()),
            tree_places: tree_runs::TreePlaces::default(),
            index_files_read: Mutex::new(std::collections::HashSet::new()),
        }
    }

    /// Opens the repository with `passphrase`, trying every key file. The index is
    /// not loaded; call [`Repository::load_index`].
    pub fn open(backend: Arc<dyn Backend>, passphrase: &[u8]) -> Result<Repository> {
        let probe = Self::probe(backend.as_ref());
        Self::open_probed(backend, probe, passphrase, None)
    }

    /// The repository whose `config` is `sealed`, opened with `keys`.
    fn from_sealed_config(
        backend: Arc<dyn Backend>,
        keys: MasterKeys,
        opener: KeyFileRead,
        sealed: &[u8],
    ) -> Result<Repository> {
        if envelope::epoch(sealed).is_some_and(|e| e != 0) {
            return Err(Error::corrupt("config", "sealed under a data key epoch other than 0"));
        }
        let plain = envelope::open(&keys.data, SealedKind::Config, sealed).map_err(|e| Error::corrupt("config", e))?;
        let config = Config::decode(&plain).map_err(|e| Error::corrupt("config", e))?;
        Ok(Self::assemble(backend, keys, config, opener))
    }

    /// Writes a new `config` for a repository whose config was lost, sealed under
    /// the keys that a key file opens with `passphrase`, and opens it. What the lost
    /// config held cannot be read back: the repository id is new (this client's
    /// local state, such as its writer key and the history it saw, starts afresh),
    /// and the chunker sizes, compression level and pack size are taken from
    /// `opts`. Returns the repository and a line for each setting so reset.
    pub fn repair_config(
        backend: Arc<dyn Backend>,
        passphrase: &[u8],
        opts: &InitOptions,
    ) -> Result<(Repository, Vec<String>)> {
        if Self::exists(backend.as_ref())? {
            return Err(Error::RepoExists { location: backend.location() });
        }
        let config = new_config(opts)?;
        let (keys, opener) = Self::unlock(backend.as_ref(), passphrase)?;
        let config_key = keys.data.get(0).expect("a key file holds epoch 0");
        let sealed = envelope::seal(config_key, 0, Cipher::preferred(), SealedKind::Config, &config.encode());
        check_storable(ObjectKind::Config, sealed.len())?;
        if !backend.write_new("config", sealed)? {
            return Err(Error::RepoExists { location: backend.location() });
        }
        let c = &config.chunker;
        let reset = vec![
            format!(
                "repository id: new ({}); this client's local state for the repository (writer key, history \
                 seen, verified packs) starts afresh",
                config.id.short()
            ),
            format!(
                "chunker sizes: min {} avg {} max {} bytes; if the repository used others, new backups \
                 deduplicate less against older data (nothing is lost)",
                c.min_size, c.avg_size, c.max_size
            ),
            format!("compression level: {}", config.compression_level),
            format!("pack size: {} bytes", config.pack_size),
        ];
        Ok((Self::assemble(backend, keys, config, opener), reset))
    }

    /// The master keys from the first key file that `passphrase` opens, and that file.
    fn unlock(backend: &dyn Backend, passphrase: &[u8]) -> Result<(MasterKeys, KeyFileRead)> {
        Self::unlock_listed(backend, backend.list(ObjectKind::Key.prefix())?, passphrase)
    }

    /// [`Repository::unlock`] with the key files listed already: they are read
    /// together (one round trip), then tried in order of their names.
    fn unlock_listed(
        backend: &dyn Backend,
        mut key_names: Vec<coffer_backend::ObjectInfo>,
        passphrase: &[u8],
    ) -> Result<(MasterKeys, KeyFileRead)> {
        key_names.retain(|info| ObjectKind::Key.id_from_path(&info.name).is_some());
        if key_names.is_empty() {
            return Err(Error::NoKey);
        }
        key_names.sort_by(|a, b| a.name.cmp(&b.name));
        // At most a few key files are read ahead: a repository with very many
        // is read in batches, stopping at the first that opens.
        let mut damaged = Vec::new();
        let mut tried = 0;
        let mut found = None;
        'batches: for batch in key_names.chunks(KEY_FILES_AHEAD) {
            let read = coffer_backend::fan_out(batch.len(), batch, |info| {
                let id = ObjectKind::Key.id_from_path(&info.name).expect("kept above");
                (id, read_bounded(backend, ObjectKind::Key, &info.name, &ObjectKind::Key.describe(&id)))
            });
            for (id, bytes) in read {
                if let Some(r) = Self::try_key_file(id, bytes, passphrase, &mut damaged, &mut tried)? {
                    found = Some(r);
                    break 'batches;
                }
            }
        }
        found.ok_or_else(|| {
            if tried == 0 { damaged.into_iter().next().unwrap_or(Error::NoKey) } else { Error::WrongPassword { tried } }
        })
    }

    /// Tries the key file `id` read as `bytes`: its keys if `passphrase` opens it;
    /// `None` (counted in `damaged` or `tried`) if not.
    fn try_key_file(
        id: Id,
        bytes: Result<Vec<u8>>,
        passphrase: &[u8],
        damaged: &mut Vec<Error>,
        tried: &mut usize,
    ) -> Result<Option<(MasterKeys, KeyFileRead)>> {
        let bytes = match bytes {
            Ok(b) => b,
            Err(e @ Error::Corrupt { .. }) => {
                damaged.push(e);
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        if Id::hash_of(&bytes) != id {
            damaged.push(Error::corrupt(ObjectKind::Key.describe(&id), "content does not match its name"));
            return Ok(None);
        }
        let kf = match KeyFile::decode(&bytes) {
            Ok(k) => k,
            Err(e) => {
                damaged.push(Error::corrupt(ObjectKind::Key.describe(&id), e));
                return Ok(None);
            }
        };
        match kf.open(passphrase) {
            Ok(Some(keys)) => return Ok(Some((keys, KeyFileRead { id, bytes }))),
            Ok(None) => *tried += 1,
            Err(e) => damaged.push(Error::corrupt(ObjectKind::Key.describe(&id), e)),
        }
        Ok(None)
    }

    /// The same open repository over another backend (one that holds the same
    /// objects, such as a replicated backend over this one and its peers), with
    /// the keys already unlocked. The index is not carried over.
    pub fn with_backend(self, backend: Arc<dyn Backend>) -> Repository {
        // Only the probe's own listings carry over: the others (packs, above all)
        // list what the first backend holds, not the repository.
        let mut prefetched = self.prefetched;
        prefetched.get_mut().expect("poisoned").keep_only_probed();
        Repository { prefetched, ..Self::assemble(backend, self.keys, self.config, self.opener) }
    }

    /// The storage backend.
    pub fn backend(&self) -> &dyn Backend {
        self.backend.as_ref()
    }

    pub(crate) fn backend_arc(&self) -> Arc<dyn Backend> {
        self.backend.clone()
    }

    /// Keeps sealed tree blobs in `cache` from now on: those read, and those a
    /// backup uploads. A cached tree blob is authenticated (AEAD and blob id) like
    /// one read from its pack; one that fails is dropped and read from the pack
    /// (docs/design.md#local-cache). `false` if a cache was set already.
    pub fn set_tree_cache(&self, cache: Arc<dyn RangeCache>) -> bool {
        self.tree_cache.set(cache).is_ok()
    }

    /// The cache of sealed tree blobs, if any.
    pub(crate) fn tree_cache(&self) -> Option<Arc<dyn RangeCache>> {
        self.tree_cache.get().cloned()
    }

    /// The repository settings.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The id of the key file that opened the repository.
    pub fn key_id(&self) -> Id {
        self.opener.id
    }

    /// The bytes of the key file that opened the repository: a client may keep a
    /// copy to unlock it ahead of its next open ([`Repository::unlock_ahead`]).
    pub fn key_file(&self) -> &[u8] {
        &self.opener.bytes
    }

    /// The master secrets.
    pub(crate) fn keys(&self) -> &MasterKeys {
        &self.keys
    }

    /// The cipher this process writes with.
    pub fn cipher(&self) -> Cipher {
        self.cipher
    }

    /// The data key epoch this process writes with: the newest the key file holds.
    pub fn epoch(&self) -> Epoch {
        self.keys.data.current().0
    }

    /// Seals `plaintext` as a sealed object of `kind` under the current data key.
    pub(crate) fn seal(&self, kind: SealedKind, plaintext: &[u8]) -> Vec<u8> {
        let (epoch, key) = self.keys.data.current();
        envelope::seal(key, epoch, self.cipher, kind, plaintext)
    }

    /// Opens a sealed object of `kind` with the data key of the epoch it names.
    pub(crate) fn open_sealed(&self, kind: SealedKind, sealed: &[u8]) -> std::result::Result<Vec<u8>, String> {
        envelope::open(&self.keys.data, kind, sealed)
    }

    /// The key of a pack: derived from the data key of `epoch` and the pack's salt.
    /// An epoch the key file does not hold is an error message naming it.
    pub fn pack_key(&self, epoch: Epoch, cipher: Cipher, salt: &[u8; 32]) -> std::result::Result<AeadKey, String> {
        Ok(pack::pack_key(self.keys.data.for_epoch(epoch)?, cipher, salt))
    }

    /// Where packs are assembled before they are uploaded.
    pub(crate) fn spool_dir(&self) -> std::path::PathBuf {
        self.backend.spool_dir().unwrap_or_else(std::env::temp_dir)
    }

    /// An empty pack under the current data key, written to a new spool file (an
    /// unnamed file in the backend's spool directory, gone when closed), so a
    /// pack being filled holds no memory.
    pub(crate) fn new_pack(&self) -> Result<pack::PackBuilder<Spool>> {
        let dir = self.spool_dir();
        let file = match self.backend.spool_file() {
            Some(f) => f.map_err(|e| {
                Error::Backend(coffer_backend::BackendError::new(
                    e.kind,
                    dir.display().to_string(),
                    format!("cannot create a file for a pack being assembled: {}", e.message),
                ))
            })?,
            None => tempfile::tempfile_in(&dir)
                .or_else(|_| std::fs::create_dir_all(&dir).and_then(|()| tempfile::tempfile_in(&dir)))
                .map_err(|e| spool_error(&dir, e))?,
        };
        let (epoch, key) = self.keys.data.current();
        Ok(pack::PackBuilder::with_output(key, epoch, self.cipher, Spool::with_capacity(SPOOL_BUFFER, file)))
    }

    /// The keyed chunker.
    pub fn chunker(&self) -> &Chunker {
        &self.chunker
    }

    /// The keyed id of a blob's plaintext. Data and tree blobs are keyed apart, so
    /// a file whose bytes equal a tree's encoding never shares an id with it.
    pub fn blob_id(&self, blob_type: BlobType, data: &[u8]) -> Id {
        match blob_type {
            BlobType::Data => blob_id(&self.keys.id, data),
            BlobType::Tree => blob_id(&self.tree_id_key, data),
        }
    }

    /// Read access to the master index.
    pub fn index(&self) -> RwLockReadGuard<'_, MasterIndex> {
        self.index.read().expect("index lock poisoned")
    }

    pub(crate) fn index_mut(&self) -> std::sync::RwLockWriteGuard<'_, MasterIndex> {
        self.index.write().expect("index lock poisoned")
    }

    fn writers_cache(&self) -> RwLockReadGuard<'_, Option<Writers>> {
        self.writers.read().expect("writers lock poisoned")
    }

    fn writers_cache_mut(&self) -> std::sync::RwLockWriteGuard<'_, Option<Writers>> {
        self.writers.write().expect("writers lock poisoned")
    }

    /// Lists the ids of all objects of `kind` (not `Config`).
    pub fn list_ids(&self, kind: ObjectKind) -> Result<Vec<Id>> {
        self.drop_prefetched(kind);
        let mut ids: Vec<Id> =
            self.backend.list(kind.prefix())?.iter().filter_map(|o| kind.id_from_path(&o.name)).collect();
        ids.sort();
        Ok(ids)
    }

    /// [`Repository::list_ids`] from the listing fetched ahead
    /// ([`Repository::prefetch_listings`]) if there is a fresh one: for the
    /// readers the listings were fetched for.
    pub(crate) fn list_ids_ahead(&self, kind: ObjectKind) -> Result<Vec<Id>> {
        let mut ids: Vec<Id> = self.list_objects(kind)?.iter().filter_map(|o| kind.id_from_path(&o.name)).collect();
        ids.sort();
        Ok(ids)
    }

    /// Reads a stored object and checks that its content matches its name.
    pub fn read_object(&self, kind: ObjectKind, id: &Id) -> Result<Vec<u8>> {
        let bytes = read_bounded(self.backend.as_ref(), kind, &kind.path(id), &kind.describe(id))?;
        if Id::hash_of(&bytes) != *id {
            return Err(Error::corrupt(kind.describe(id), "content does not match its name (altered or truncated)"));
        }
        Ok(bytes)
    }

    /// Seals and stores `plaintext` as an object of `kind`; returns its id.
    pub fn save_sealed(&self, kind: SealedKind, plaintext: &[u8]) -> Result<Id> {
        let sealed = self.seal(kind, plaintext);
        let id = Id::hash_of(&sealed);
        let okind = match kind {
            SealedKind::Config => {
                return Err(Error::InvalidInput("the config is written only at init".into()));
            }
            SealedKind::Index => ObjectKind::Index,
            SealedKind::Writer => ObjectKind::Writer,
            SealedKind::PruneNotice => ObjectKind::PruneNotice,
            SealedKind::Snapshot | SealedKind::Tombstone | SealedKind::Session | SealedKind::Layout => {
                return Err(Error::InvalidInput("snapshots and tombstones are stored signed, sessions by name".into()));
            }
        };
        check_storable(okind, sealed.len())?;
        self.backend.write(&okind.path(&id), sealed)?;
        Ok(id)
    }

    pub(crate) fn load_sealed(&self, kind: ObjectKind, sealed_kind: SealedKind, id: &Id) -> Result<Vec<u8>> {
        let bytes = self.read_object(kind, id)?;
        self.open_sealed(sealed_kind, &bytes).map_err(|e| Error::corrupt(kind.describe(id), e))
    }

    /// Loads and decodes one index file.
    pub fn load_index_file(&self, id: &Id) -> Result<Vec<index_file::PackRecord>> {
        let plain = self.load_sealed(ObjectKind::Index, SealedKind::Index, id)?;
        index_file::decode(&plain).map_err(|e| Error::corrupt(ObjectKind::Index.describe(id), e))
    }

    /// Loads every index file into the master index, in parallel, and tells it
    /// which packs the storage holds. One index file that does not load (damaged,
    /// planted, unreadable) does not stop the others: it is skipped and returned,
    /// for the caller to report with [`INDEX_FILE_SKIPPED`]. Only a failure to
    /// list the storage fails the call.
    pub fn load_index(&self) -> Result<DamagedIndexFiles> {
        // The index files and the packs are listed at once.
        self.prefetch_listings(&[ObjectKind::Index, ObjectKind::Pack]);
        let listed = self.list_objects(ObjectKind::Index)?;
        // Each blob takes at least an entry's bytes in its index file: an upper
        // bound on the records, so the record array is allocated once.
        let expected = listed.iter().map(|o| o.size as usize / pack::ENTRY_LEN).sum();
        let mut ids: Vec<Id> = listed.iter().filter_map(|o| ObjectKind::Index.id_from_path(&o.name)).collect();
        ids.sort();
        let mut damaged = self.load_index_files_expecting(&ids, expected, false)?;
        // A file gone since the listing was replaced (by a prune or a repair, which
        // store the replacement first): the new files are read instead.
        let mut seen: std::collections::HashSet<Id> = ids.into_iter().collect();
        for _ in 0..3 {
            let before = damaged.len();
            damaged.retain(|e| !matches!(e, Error::Backend(b) if is_not_found(b)));
            if damaged.len() == before {
                break;
            }
            let mut new: Vec<Id> =
                self.list_ids(ObjectKind::Index)?.into_iter().filter(|id| !seen.contains(id)).collect();
            new.sort();
            seen.extend(&new);
            damaged.extend(self.load_index_files_expecting(&new, 0, false)?);
        }
        let packs = listing::packs_of(self.list_objects(ObjectKind::Pack)?);
        let stored: std::collections::HashSet<Id> = packs.iter().map(|(id, _)| *id).collect();
        let mut index = self.index_mut();
        index.set_stored_packs(&stored);
        drop(stored);
        // A backup adopts orphan packs next: those of this listing that no index file lists.
        let orphans: Vec<(Id, u64)> = packs.into_iter().filter(|(id, _)| !index.has_pack(id)).collect();
        drop(index);
        self.keep_loaded_orphans(orphans);
        Ok(damaged)
    }

    /// Loads the index files stored since the index was loaded (by another
    /// process's backups), for a long-running reader such as the UI: those it
    /// has not read yet. Returns the ones that did not load, as
    /// [`Repository::load_index`] does; they are not tried again.
    pub fn load_new_index_files(&self) -> Result<DamagedIndexFiles> {
        let mut new: Vec<Id> = {
            let read = self.index_files_read.lock().expect("index files lock");
            self.list_ids(ObjectKind::Index)?.into_iter().filter(|id| !read.contains(id)).collect()
        };
        new.sort();
        self.load_index_files_expecting(&new, 0, false)
    }

    /// Loads the index files `ids` into the master index, in parallel. Any file
    /// that does not load fails the call (for prune, which must know every pack's
    /// use).
    pub fn load_index_files(&self, ids: &[Id]) -> Result<()> {
        match self.load_index_files_expecting(ids, 0, true)?.into_iter().next() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Loads index files a few at a time per thread, so decoded files never
    /// accumulate: memory is the index itself plus a few files. Returns the files
    /// that did not load; with `strict`, stops at the first.
    fn load_index_files_expecting(&self, ids: &[Id], expected: usize, strict: bool) -> Result<DamagedIndexFiles> {
        let mut index = self.index_mut();
        let mut bulk = index.bulk(expected);
        let mut damaged = Vec::new();
        // Batches of a few files per connection, fetched (and decoded) on the
        // backend's I/O pool: as many requests in flight as it wants.
        let workers = self.backend.connections();
        self.index_files_read.lock().expect("index files lock").extend(ids.iter().copied());
        for batch in ids.chunks(4 * workers) {
            let files: Vec<_> = self.fetch_many(batch, |id| (*id, self.load_index_file(id)));
            for (id, file) in files {
                let id = &id;
                // A file is added whole or not at all.
                let file = file.and_then(|recs| {
                    let beyond = recs.iter().flat_map(|r| &r.entries).find(|e| e.offset > u32::MAX as u64);
                    match beyond {
                        None => Ok(recs),
                        Some(e) => Err(Error::corrupt(
                            ObjectKind::Index.describe(id),
                            format!("lists blob {} at offset {}, beyond what a pack holds", e.id.short(), e.offset),
                        )),
                    }
                });
                match file {
                    Ok(recs) => bulk.add(&recs).map_err(|e| Error::corrupt(ObjectKind::Index.describe(id), e))?,
                    Err(e) if strict => return Ok(vec![e]),
                    Err(e) => damaged.push(e),
                }
            }
        }
        Ok(damaged)
    }

    /// Indexes packs that no index file lists (left by interrupted backups) by
    /// reading their trailers and headers, and stores an index file for them, so
    /// that their blobs are reused rather than uploaded again. Packs in `exclude`
    /// (those a running prune is deleting) and packs that fail to verify are left
    /// alone; `check` reports the latter. Returns the (first) index file stored,
    /// if any: several when the orphans are too many for one.
    pub fn adopt_orphan_packs(&self, exclude: &std::collections::HashSet<Id>) -> Result<Option<Id>> {
        let orphans: Vec<(Id, u64)> = {
            let idx = self.index();
            self.loaded_orphans()?.into_iter().filter(|(id, _)| !idx.has_pack(id) && !exclude.contains(id)).collect()
        };
        if orphans.is_empty() {
            return Ok(None);
        }
        let records: Vec<index_file::PackRecord> =
            self.fetch_many(&orphans, |(id, size)| self.read_pack_record(id, *size)).into_iter().flatten().collect();
        if records.is_empty() {
            return Ok(None);
        }
        let mut first = None;
        for batch in index_file::batches(&records) {
            let id = self.save_sealed(SealedKind::Index, &index_file::encode(batch))?;
            first.get_or_insert(id);
        }
        self.index_mut().add_packs(&records).map_err(|e| Error::corrupt("index", e))?;
        Ok(first)
    }

    /// A pack's index record from its trailer and header; `None` if they do not
    /// read or verify.
    fn read_pack_record(&self, id: &Id, size: u64) -> Option<index_file::PackRecord> {
        self.pack_record(id, size).ok()
    }

    /// A pack of `size` bytes' index record, from its own trailer and header
    /// (authenticated with the keys). A trailer or header that does not read whole
    /// or verify is damage naming the pack; a storage error is returned as such.
    pub fn pack_record(&self, id: &Id, size: u64) -> Result<index_file::PackRecord> {
        let name = ObjectKind::Pack.path(id);
        let damaged = |e: String| Error::corrupt(ObjectKind::Pack.describe(id), e);
        let read = |offset: u64, len: u64| -> Result<Vec<u8>> {
            let bytes = self.backend.read_range(&name, offset, len)?;
            if bytes.len() as u64 != len {
                return Err(damaged(format!("truncated: {} of the {len} bytes at offset {offset} read", bytes.len())));
            }
            Ok(bytes)
        };
        let tlen = pack::TRAILER_LEN as u64;
        let start = size.checked_sub(tlen).ok_or_else(|| damaged(format!("{size} bytes: too short for a pack")))?;
        let trailer = pack::decode_trailer(&read(start, tlen)?, size).map_err(damaged)?;
        let hlen = trailer.header_len as u64;
        let hstart = start.checked_sub(hlen).ok_or_else(|| damaged("its header would start before it".into()))?;
        let sealed = read(hstart, hlen)?;
        let key = self.pack_key(trailer.epoch, trailer.cipher, &trailer.salt).map_err(damaged)?;
        let entries = pack::open_header(&key, &trailer, &sealed, size).map_err(damaged)?;
        Ok(index_file::PackRecord {
            id: *id,
            salt: trailer.salt,
            cipher: trailer.cipher,
            epoch: trailer.epoch,
            entries,
        })
    }

    /// Loads a blob: reads its bytes from its pack, authenticates, decrypts,
    /// decompresses and checks that the plaintext hashes to `id`. When that copy is
    /// missing or damaged, the other copies the index knows are tried in turn, and
    /// the bad copy is remembered ([`Repository::take_bad_copies`]); when none
    /// serves, the first copy's error is returned. A storage error (not a missing
    /// or damaged copy) fails at once.
    pub fn load_blob(&self, blob_type: BlobType, id: &Id) -> Result<Vec<u8>> {
        let (entry, pack_info) = self.locate_blob(blob_type, id)?;
        match self.load_copy(&pack_info, &entry) {
            Err(e) if !matches!(e, Error::Backend(_)) => self.load_other_copy(blob_type, id, &pack_info.id, e),
            r => r,
        }
    }

    fn load_copy(&self, pack_info: &PackInfo, entry: &PackEntry) -> Result<Vec<u8>> {
        entry.check_bounds().map_err(|e| {
            Error::corrupt(
                format!("{} {} in pack {}", entry.blob_type.noun(), entry.id.short(), pack_info.id.short()),
                e,
            )
        })?;
        let cache = self.tree_cache.get().filter(|_| entry.blob_type == BlobType::Tree);
        let Some(cache) = cache else {
            let sealed = self.read_pack_range(pack_info, entry.offset, entry.length as u64)?;
            return self.decode_blob(pack_info, entry, &sealed);
        };
        let (name, len) = (ObjectKind::Pack.path(&pack_info.id), entry.length as u64);
        if let Some(sealed) = cache.get_range(&name, entry.offset, len) {
            match self.decode_blob(pack_info, entry, &sealed) {
                Ok(data) => return Ok(data),
                // Never trusted: a cached blob that does not verify is read again.
                Err(_) => cache.drop_range(&name, entry.offset, len),
            }
        }
        // Its neighbours in the pack come along (a tree pack's trees, pack-wide).
        let sealed = self.read_tree_run(cache.as_ref(), pack_info, entry)?;
        let data = self.decode_blob(pack_info, entry, &sealed)?;
        cache.put_range(&name, entry.offset, &sealed);
        Ok(data)
    }

    /// Loads blob `id` from a copy outside pack `bad_pack`, after its copy there
    /// failed with `err` (a missing pack, a short read, a blob that does not
    /// verify). On success the bad copy is remembered
    /// ([`Repository::take_bad_copies`]); when no other copy serves, `err` is
    /// returned, saying how many other copies failed too.
    pub fn load_other_copy(&self, blob_type: BlobType, id: &Id, bad_pack: &Id, err: Error) -> Result<Vec<u8>> {
        // A storage that keeps several copies of the pack itself is asked first.
        if let Some(data) = self.load_from_pack_copies(blob_type, id, bad_pack) {
            let mut bad = self.bad_copies.lock().expect("bad copies lock poisoned");
            let line = format!("{err}; another copy of pack {} on another backend served instead", bad_pack.short());
            if bad.len() < BAD_COPIES_KEPT && !bad.contains(&line) {
                bad.push(line);
            }
            return Ok(data);
        }
        let copies = self.other_copies(blob_type, id, bad_pack);
        let mut failed = Vec::new();
        for (entry, pack_info) in &copies {
            match self.load_copy(pack_info, entry) {
                Ok(data) => {
                    let mut bad = self.bad_copies.lock().expect("bad copies lock poisoned");
                    for e in std::iter::once(&err).chain(&failed) {
                        let what = match e {
                            Error::Corrupt { object, detail } => format!("{object}: {detail}"),
                            e => e.to_string(),
                        };
                        let line = format!("{what}; another copy in pack {} served instead", pack_info.id.short());
                        if bad.len() < BAD_COPIES_KEPT && !bad.contains(&line) {
                            bad.push(line);
                        }
                    }
                    return Ok(data);
                }
                Err(e @ Error::Backend(_)) => return Err(e),
                Err(e) => failed.push(e),
            }
        }
        Err(match (err, failed.len()) {
            (err, 0) => err,
            (Error::Corrupt { object, detail }, n) => {
                Error::Corrupt { object, detail: format!("{detail} (and the {n} other copies indexed failed too)") }
            }
            (err, _) => err,
        })
    }

    /// Blob `id` read from each copy of `pack` the storage keeps
    /// ([`Backend::copies`], several on a replicated backend) until one verifies.
    fn load_from_pack_copies(&self, blob_type: BlobType, id: &Id, pack: &Id) -> Option<Vec<u8>> {
        let name = ObjectKind::Pack.path(pack);
        let copies = self.backend.copies(&name);
        if copies <= 1 {
            return None;
        }
        let (entry, info) = self
            .index()
            .copies(id)
            .into_iter()
            .find(|(e, p)| p.id == *pack && e.entry.blob_type == blob_type)
            .map(|(e, p)| (e.entry, p.clone()))?;
        entry.check_bounds().ok()?;
        (0..copies).find_map(|c| {
            let bytes = self.backend.read_range_copy(&name, entry.offset, entry.length as u64, c).ok()?;
            (bytes.len() == entry.length as usize).then_some(())?;
            self.decode_blob(&info, &entry, &bytes).ok()
        })
    }

    /// The copies of blob `id` the index knows outside pack `bad_pack`.
    fn other_copies(&self, blob_type: BlobType, id: &Id, bad_pack: &Id) -> Vec<(PackEntry, PackInfo)> {
        self.index()
            .copies(id)
            .into_iter()
            .filter(|(e, p)| p.id != *bad_pack && e.entry.blob_type == blob_type)
            .map(|(e, p)| (e.entry, p.clone()))
            .collect()
    }

    /// Whether blob `id` has a copy outside pack `bad_pack` that reads and verifies.
    pub fn has_good_copy_elsewhere(&self, blob_type: BlobType, id: &Id, bad_pack: &Id) -> bool {
        let copies = self.other_copies(blob_type, id, bad_pack);
        copies.iter().any(|(e, p)| self.load_copy(p, e).is_ok())
    }

    /// The copies of blobs that failed to read since the last call, while another
    /// copy served: each line names the bad copy's pack and what is wrong. A
    /// command that read blobs reports them (they are pack problems `check` finds).
    pub fn take_bad_copies(&self) -> Vec<String> {
        std::mem::take(&mut *self.bad_copies.lock().expect("bad copies lock poisoned"))
    }

    /// Where blob `id` of `blob_type` lies, per the index.
    pub fn locate_blob(&self, blob_type: BlobType, id: &Id) -> Result<(PackEntry, PackInfo)> {
        let idx = self.index();
        let (e, p) = idx
            .get(id)
            .ok_or_else(|| Error::corrupt(format!("{} {}", blob_type.noun(), id.short()), "not in any index"))?;
        if e.entry.blob_type != blob_type {
            return Err(Error::corrupt(
                format!("{} {} in pack {}", blob_type.noun(), id.short(), p.id.short()),
                format!("indexed as a {}", e.entry.blob_type.noun()),
            ));
        }
        Ok((e.entry, p.clone()))
    }

    /// Reads `len` bytes at `offset` of a pack; a missing or short pack is damage.
    pub fn read_pack_range(&self, pack: &PackInfo, offset: u64, len: u64) -> Result<Vec<u8>> {
        let object = || ObjectKind::Pack.describe(&pack.id);
        if offset.saturating_add(len) > ObjectKind::Pack.max_len() {
            return Err(Error::corrupt(
                object(),
                format!("a read of {len} bytes at offset {offset} reaches beyond the largest pack possible"),
            ));
        }
        let bytes = match self.backend.read_range(&ObjectKind::Pack.path(&pack.id), offset, len) {
            Ok(b) => b,
            Err(e) if is_not_found(&e) => return Err(Error::corrupt(object(), "missing from the repository")),
            Err(e) => return Err(e.into()),
        };
        if bytes.len() as u64 != len {
            return Err(Error::corrupt(
                object(),
                format!("truncated: it ends before byte {} of the {len} read at offset {offset}", bytes.len()),
            ));
        }
        Ok(bytes)
    }

    /// Authenticates, decrypts and decompresses one blob's sealed bytes and checks
    /// that the plaintext hashes to the entry's id.
    pub fn decode_blob(&self, pack_info: &PackInfo, entry: &PackEntry, sealed: &[u8]) -> Result<Vec<u8>> {
        let key = self.blob_key(pack_info, entry)?;
        let data = pack::open_blob(&key, entry, sealed).map_err(|e| blob_damage(pack_info, entry, e))?;
        self.check_blob_id(pack_info, entry, &data)?;
        Ok(data)
    }

    /// [`Repository::decode_blob`] without a copy: decrypts `sealed` where it lies
    /// (overwriting it), decompresses into `scratch` (reused from blob to blob),
    /// checks the id, and returns the plaintext (in `sealed` or `scratch`).
    pub fn decode_blob_in_place<'a>(
        &self,
        pack_info: &PackInfo,
        entry: &PackEntry,
        sealed: &'a mut [u8],
        scratch: &'a mut Vec<u8>,
    ) -> Result<&'a [u8]> {
        let key = self.blob_key(pack_info, entry)?;
        let data: &[u8] = match pack::open_blob_in_place(&key, entry, sealed, scratch) {
            Ok(pack::Plain::Stored(range)) => &sealed[range],
            Ok(pack::Plain::Decompressed(len)) => &scratch[..len],
            Err(e) => return Err(blob_damage(pack_info, entry, e)),
        };
        self.check_blob_id(pack_info, entry, data)?;
        Ok(data)
    }

    /// The key of the pack that holds `entry`.
    fn blob_key(&self, pack_info: &PackInfo, entry: &PackEntry) -> Result<AeadKey> {
        self.pack_key(pack_info.epoch, pack_info.cipher, &pack_info.salt).map_err(|e| blob_damage(pack_info, entry, e))
    }

    /// Checks that a blob's plaintext hashes to its id.
    fn check_blob_id(&self, pack_info: &PackInfo, entry: &PackEntry, data: &[u8]) -> Result<()> {
        if self.blob_id(entry.blob_type, data) != entry.id {
            return Err(blob_damage(pack_info, entry, "content does not match its id"));
        }
        Ok(())
    }

    /// Applies `f` (which fetches objects) to every item on the backend's I/O
    /// pool: [`Backend::connections`] threads, not the CPU pool, so a remote
    /// backend has many requests in flight and a local one a few
    /// (docs/design.md#storage-contract).
    pub fn fetch_many<T: Sync, R: Send>(&self, items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
        coffer_backend::fan_out(self.backend.connections(), items, f)
    }

    /// Loads every snapshot, oldest first. A damaged snapshot does not hide the
    /// others: it is returned in the second list. Storage errors fail the call.
    /// The listing the open fetched ahead, if fresh, serves the first call (a
    /// `latest` found on a client that remembers no history costs no round trip
    /// of its own).
    pub fn snapshots(&self) -> Result<(Vec<(Id, Snapshot)>, DamagedSnapshots)> {
        let ids = self.list_ids_ahead(ObjectKind::Snapshot)?;
        let loaded: Vec<(Id, Result<Snapshot>)> = self.fetch_many(&ids, |id| (*id, self.load_snapshot(id)));
        let (mut snaps, damaged) = signed::split_damaged(loaded)?;
        snaps.sort_by(|a, b| a.1.system_time().cmp(&b.1.system_time()).then(a.0.cmp(&b.0)));
        Ok((snaps, damaged))
    }

    /// Resolves a unique hex prefix among the ids of `kind`.
    pub fn resolve_prefix(&self, kind: ObjectKind, prefix: &str) -> Result<Id> {
        if let Some(id) = Id::from_hex(prefix) {
            return Ok(id);
        }
        let p = prefix.to_ascii_lowercase();
        if p.is_empty() || !p.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(Error::SnapshotNotFound(prefix.to_string()));
        }
        let matches: Vec<Id> = self.list_ids(kind)?.into_iter().filter(|id| id.to_hex().starts_with(&p)).collect();
        match matches.as_slice() {
            [one] => Ok(*one),
            [] => Err(Error::SnapshotNotFound(prefix.to_string())),
            _ => Err(Error::AmbiguousId(prefix.to_string())),
        }
    }

    /// `latest` by `filter` ([`Latest::pick`]), among the snapshots stored now.
    pub fn find_latest(&self, filter: &SnapshotFilter) -> Result<Latest> {
        Ok(Latest::pick(self.snapshots()?.0, filter, std::time::SystemTime::now()))
    }

    /// Finds a snapshot by `latest` (the newest passing `filter`, not dated too
    /// far ahead: [`Repository::find_latest`]) or by id prefix.
    pub fn find_snapshot(&self, name: &str, filter: &SnapshotFilter) -> Result<(Id, Snapshot)> {
        if name == "latest" {
            return self.find_latest(filter)?.found.ok_or_else(|| Error::SnapshotNotFound(name.to_string()));
        }
        let found = self.resolve_prefix(ObjectKind::Snapshot, name).and_then(|id| match self.load_snapshot(&id) {
            Err(Error::Backend(e)) if is_not_found(&e) => Err(Error::SnapshotNotFound(name.to_string())),
            r => Ok((id, r?)),
        });
        match found {
            Err(Error::SnapshotNotFound(_)) => Err(self.why_not_found(name)),
            r => r,
        }
    }

    /// Why no snapshot has the id `name` starts: a tombstone that forgot it, or
    /// recorded the snapshot `coffer tag` replaced it by, says so.
    fn why_not_found(&self, name: &str) -> Error {
        let prefix = name.to_ascii_lowercase();
        let tombstones = self.tombstones().map(|(t, _)| t).unwrap_or_default();
        let forgotten = (prefix.len() >= 4)
            .then(|| tombstones.iter().flat_map(|(t, ts)| ts.forgotten.iter().map(move |f| (t, f))))
            .into_iter()
            .flatten()
            .find(|(_, f)| f.id.to_hex().starts_with(&prefix));
        match forgotten {
            Some((_, f)) if f.replaced_by.is_some() => Error::SnapshotForgotten {
                name: name.to_string(),
                why: format!(
                    "`coffer tag` replaced it by snapshot {}; use that id",
                    f.replaced_by.expect("checked").short()
                ),
            },
            Some((t, _)) => Error::SnapshotForgotten {
                name: name.to_string(),
                why: format!("it was forgotten (tombstone {})", t.short()),
            },
            None => Error::SnapshotNotFound(name.to_string()),
        }
    }
}
