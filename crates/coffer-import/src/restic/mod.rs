//! A read-only reader of restic's repository format (repository versions 1 and 2).
//!
//! [`ResticRepo::open`] finds the master key in a key file, then reads the config. Then,
//! in the order an import needs them: [`ResticRepo::snapshots`], [`ResticRepo::load_index`]
//! (or [`ResticRepo::rebuild_index_from_packs`]), [`ResticRepo::tree`] from each
//! snapshot's root tree down, and [`ResticRepo::blob`] for each file's content.
//!
//! Config, key, index and snapshot files are "unpacked" files: one encrypted object each
//! (key files are plain JSON). Their names are the SHA-256 of their stored bytes, which
//! the reader checks (except for the config and key files). In repository version 2 an
//! unpacked file's plaintext begins with a version byte: `2` then a zstd frame of the
//! JSON; a plaintext starting with `[` or `{` is the JSON itself. The config is never
//! compressed.
//!
//! Blobs live in pack files ([`pack`]); the index says where. A blob is read by range,
//! authenticated, decrypted, decompressed if compressed (bounded by its indexed
//! uncompressed length) and its SHA-256 checked against its id.

pub mod crypto;
pub mod id;
pub mod index;
pub mod keyfile;
pub mod pack;
pub mod plan;
pub mod read_ahead;
pub mod snapshot;
pub mod time;
pub mod tree;
pub mod tree_cache;

use std::collections::HashSet;
use std::io::Read;
use std::sync::{Arc, Mutex};

use serde::Deserialize;

use crate::Error;
use crate::source::{Source, SourceErrorKind};
pub use crypto::MasterKey;
pub use id::{BlobId, Id, PackId, SnapshotId};
pub use index::{Index, Location};
pub use keyfile::KeyFile;
pub use pack::{BlobType, PackedBlob};
pub use read_ahead::{CurrentFile, ReadAhead, ReadAheadLimits};
pub use snapshot::{Snapshot, SnapshotSummary};
pub use time::Timestamp;
pub use tree::{Node, NodeType, RejectedNode, Tree};
use tree_cache::TreeCache;

/// Largest config file read: 64 KiB.
pub const MAX_CONFIG_FILE: u64 = 64 * 1024;
/// Largest data blob read, decompressed: 64 MiB (restic's chunks are at most 8 MiB).
pub const MAX_DATA_BLOB: u64 = 64 * 1024 * 1024;
/// Largest zstd window a decompression may use: 2^27 bytes (128 MiB), zstd's default
/// decoder limit; restic's compressor stays well below it.
pub const MAX_ZSTD_WINDOW_LOG: u32 = 27;

#[derive(Deserialize)]
struct ConfigJson {
    version: u64,
    id: String,
    chunker_polynomial: String,
}

/// A damaged object that a listing skipped: its name and the error.
#[derive(Debug)]
pub struct Damaged {
    pub name: String,
    pub error: Error,
}

/// The snapshots of a repository: those read, sorted by time then id, and those damaged.
#[derive(Debug, Default)]
pub struct Snapshots {
    pub good: Vec<(SnapshotId, Snapshot)>,
    pub damaged: Vec<Damaged>,
}

/// What loading the index found.
#[derive(Debug, Default)]
pub struct IndexReport {
    /// Index files (or, when rebuilding, packs) read.
    pub files_read: usize,
    /// Packs indexed.
    pub packs: usize,
    /// Distinct blobs indexed.
    pub blobs: usize,
    /// Blobs stored in more than one pack.
    pub duplicates: usize,
    /// Index files (or packs) skipped as damaged.
    pub damaged: Vec<Damaged>,
}

/// An open restic repository.
pub struct ResticRepo {
    source: Arc<dyn Source>,
    key: MasterKey,
    key_file: String,
    id: String,
    version: u32,
    chunker_polynomial: String,
    index: Option<Index>,
    /// Trees read, kept within a budget ([`tree_cache`]).
    trees: Mutex<TreeCache>,
    /// Roots whose trees [`ResticRepo::prefetch_trees`] has read.
    prefetched: Mutex<HashSet<BlobId>>,
}

/// What [`ResticRepo::prefetch_trees`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Prefetched {
    /// Trees read.
    pub trees: u64,
    /// Range requests made.
    pub requests: u64,
    /// Levels of the walk.
    pub levels: u64,
    /// Whether it stopped at the tree cache's budget (the rest is read when listed).
    pub budget_reached: bool,
}

/// Applies `f` to every item on up to `workers` threads (the caller's included), the
/// results in the order of `items`.
fn fan_out<T: Sync, R: Send>(workers: usize, items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
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
            for (i, r) in h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)) {
                slots[i] = Some(r);
            }
        }
    });
    slots.into_iter().map(|r| r.expect("every item taken")).collect()
}

/// The largest decoded size of `blob` (of `pack`), or the error when its lengths pass
/// its type's limit: checked before anything is read or allocated for it.
pub(crate) fn check_blob_limits(pack: &PackId, blob: &PackedBlob) -> Result<u64, Error> {
    let limit = match blob.blob_type {
        BlobType::Data => MAX_DATA_BLOB,
        BlobType::Tree => tree::MAX_TREE,
    };
    let length = u64::from(blob.length);
    let plain_max = blob.uncompressed_length.map(u64::from).unwrap_or(length.saturating_sub(crypto::OVERHEAD as u64));
    if plain_max > limit || length > limit + crypto::OVERHEAD as u64 {
        return Err(Error::Blob {
            pack: *pack,
            blob: blob.id,
            reason: format!("{plain_max} bytes, more than the {limit} accepted for a {} blob", blob.blob_type),
        });
    }
    Ok(plain_max)
}

impl std::fmt::Debug for ResticRepo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResticRepo").field("id", &self.id).field("version", &self.version).finish()
    }
}

/// Reads a whole object of at most `limit` bytes.
fn read_whole(source: &dyn Source, name: &str, limit: u64) -> Result<Vec<u8>, Error> {
    let size = source.size(name)?;
    if size > limit {
        return Err(Error::TooLarge { object: name.to_string(), size, limit });
    }
    let data = source.read_range(name, 0, size)?;
    if data.len() as u64 != size {
        return Err(Error::Source(crate::SourceError::new(
            SourceErrorKind::Other,
            name,
            format!("read {} of {size} bytes", data.len()),
        )));
    }
    Ok(data)
}

/// Decompresses a zstd stream to at most `limit` bytes, checked as it goes.
pub fn zstd_decompress(data: &[u8], limit: u64) -> Result<Vec<u8>, String> {
    let mut d = zstd::stream::read::Decoder::with_buffer(data).map_err(|e| format!("zstd: {e}"))?;
    d.window_log_max(MAX_ZSTD_WINDOW_LOG).map_err(|e| format!("zstd: {e}"))?;
    let mut out = Vec::new();
    d.take(limit + 1).read_to_end(&mut out).map_err(|e| format!("zstd: {e}"))?;
    if out.len() as u64 > limit {
        return Err(format!("decompresses to more than the {limit} bytes accepted"));
    }
    Ok(out)
}

/// The JSON of an opened unpacked file of a version 2 repository (see the module's
/// documentation), at most `limit` bytes.
pub fn decode_unpacked(plain: Vec<u8>, version: u32, limit: u64) -> Result<Vec<u8>, String> {
    if version < 2 {
        return Ok(plain);
    }
    match plain.first() {
        None | Some(b'[') | Some(b'{') => Ok(plain),
        Some(2) => zstd_decompress(&plain[1..], limit),
        Some(v) => Err(format!("unknown encoding version {v}")),
    }
}

impl ResticRepo {
    /// Opens the repository: the first key file that `password` opens gives the master
    /// key, then the config is read and checked.
    pub fn open(source: Arc<dyn Source>, password: &[u8]) -> Result<ResticRepo, Error> {
        let keys = match source.list("keys") {
            Ok(k) => k,
            Err(e) if e.kind == SourceErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e.into()),
        };
        if keys.is_empty() {
            return Err(Error::NoKeyFiles);
        }
        let (mut tried, mut skipped) = (0, 0);
        let mut found = None;
        for (name, size) in &keys {
            if *size > keyfile::MAX_KEY_FILE {
                skipped += 1;
                continue;
            }
            let kf = match read_whole(&*source, name, keyfile::MAX_KEY_FILE).and_then(|b| KeyFile::parse(name, &b)) {
                Ok(kf) => kf,
                Err(_) => {
                    skipped += 1;
                    continue;
                }
            };
            tried += 1;
            match kf.open(password) {
                Ok(Some(k)) => {
                    found = Some((k, name.clone()));
                    break;
                }
                Ok(None) => {}
                // The password opened the key file but what it holds is not a key.
                Err(e) => return Err(e),
            }
        }
        let Some((key, key_file)) = found else {
            return Err(Error::WrongPassword { tried, skipped });
        };
        let raw = match read_whole(&*source, "config", MAX_CONFIG_FILE) {
            Ok(r) => r,
            Err(Error::Source(e)) if e.kind == SourceErrorKind::NotFound => {
                return Err(Error::Config { reason: "no config file: is this a restic repository?".into() });
            }
            Err(e) => return Err(e),
        };
        let plain = key.open(&raw).map_err(|_| Error::Config {
            reason: "fails its authentication (damaged, altered, or not this repository's key files)".into(),
        })?;
        let cfg: ConfigJson =
            serde_json::from_slice(&plain).map_err(|e| Error::Config { reason: format!("not a config: {e}") })?;
        if !(1..=2).contains(&cfg.version) {
            return Err(Error::UnsupportedVersion { version: cfg.version });
        }
        Ok(ResticRepo {
            source,
            key,
            key_file,
            id: cfg.id,
            version: cfg.version as u32,
            chunker_polynomial: cfg.chunker_polynomial,
            index: None,
            trees: Mutex::new(TreeCache::new(tree_cache::DEFAULT_TREE_CACHE)),
            prefetched: Mutex::new(HashSet::new()),
        })
    }

    /// The repository's id (from its config).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The repository version: 1 or 2.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The chunker's polynomial, hex, as the config states it.
    pub fn chunker_polynomial(&self) -> &str {
        &self.chunker_polynomial
    }

    /// The key file that the password opened.
    pub fn key_file(&self) -> &str {
        &self.key_file
    }

    /// The storage read from.
    pub fn source(&self) -> &Arc<dyn Source> {
        &self.source
    }

    /// The master key, for tests that plant objects.
    #[cfg(feature = "testing")]
    pub fn master_key(&self) -> &MasterKey {
        &self.key
    }

    /// Reads, checks the name-hash of, opens and decodes an unpacked file.
    fn load_unpacked(&self, name: &str, stored_limit: u64, plain_limit: u64) -> Result<Vec<u8>, String> {
        let raw = read_whole(&*self.source, name, stored_limit).map_err(|e| match e {
            Error::TooLarge { size, limit, .. } => format!("{size} bytes, more than the {limit} accepted"),
            e => e.to_string(),
        })?;
        let base = name.rsplit('/').next().unwrap_or(name);
        let id = Id::parse(base).ok_or("the name is not an id")?;
        let actual = Id::hash(&raw);
        if actual != id {
            return Err(format!("its contents hash to {actual}, not its name (damaged or renamed)"));
        }
        let plain = self.key.open(&raw).map_err(|_| "fails its authentication (damaged or altered)".to_string())?;
        decode_unpacked(plain, self.version, plain_limit)
    }

    /// Lists and reads the snapshots. A snapshot that is damaged does not fail the
    /// listing: it goes to [`Snapshots::damaged`].
    pub fn snapshots(&self) -> Result<Snapshots, Error> {
        let mut out = Snapshots::default();
        for (name, _) in self.list_or_empty("snapshots")? {
            let result = self
                .load_unpacked(&name, snapshot::MAX_SNAPSHOT_FILE, snapshot::MAX_SNAPSHOT_FILE)
                .and_then(|json| snapshot::parse_snapshot(&json));
            let base = name.rsplit('/').next().unwrap_or(&name);
            match (result, Id::parse(base)) {
                (Ok(s), Some(id)) => out.good.push((id, s)),
                (Err(reason), _) => {
                    out.damaged.push(Damaged { error: Error::Snapshot { name: name.clone(), reason }, name })
                }
                (Ok(_), None) => unreachable!("load_unpacked checks the name"),
            }
        }
        out.good.sort_by_key(|(id, s)| (s.time.secs, s.time.nanos, *id));
        Ok(out)
    }

    /// Reads one snapshot by id.
    pub fn snapshot(&self, id: &SnapshotId) -> Result<Snapshot, Error> {
        let name = format!("snapshots/{id}");
        self.load_unpacked(&name, snapshot::MAX_SNAPSHOT_FILE, snapshot::MAX_SNAPSHOT_FILE)
            .and_then(|json| snapshot::parse_snapshot(&json))
            .map_err(|reason| Error::Snapshot { name, reason })
    }

    fn list_or_empty(&self, dir: &str) -> Result<Vec<(String, u64)>, Error> {
        match self.source.list(dir) {
            Ok(v) => Ok(v),
            Err(e) if e.kind == SourceErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(e.into()),
        }
    }

    /// Reads one index file's packs and blobs.
    pub fn read_index_file(&self, name: &str) -> Result<index::IndexFile, Error> {
        self.load_unpacked(name, index::MAX_INDEX_FILE, index::MAX_INDEX_PLAIN)
            .and_then(|json| index::parse_index(&json))
            .map_err(|reason| Error::Index { name: name.to_string(), reason })
    }

    /// Reads every index file into the in-memory index. Damaged index files are skipped
    /// and listed in the report; their packs' blobs are then missing unless another
    /// index file lists them (see [`ResticRepo::rebuild_index_from_packs`]).
    pub fn load_index(&mut self) -> Result<IndexReport, Error> {
        let mut idx = Index::new();
        let mut report = IndexReport::default();
        for (name, _) in self.list_or_empty("index")? {
            match self.read_index_file(&name) {
                Ok(f) => {
                    report.files_read += 1;
                    for (pack, blobs) in &f.packs {
                        idx.add_pack(*pack, blobs);
                    }
                }
                Err(error) => report.damaged.push(Damaged { name, error }),
            }
        }
        Ok(self.install_index(idx, report))
    }

    /// Builds the in-memory index from the packs' own headers instead of the index
    /// files: reads every pack's header. Damaged packs are skipped and listed.
    pub fn rebuild_index_from_packs(&mut self) -> Result<IndexReport, Error> {
        let mut idx = Index::new();
        let mut report = IndexReport::default();
        for (name, size) in self.list_or_empty("data")? {
            let base = name.rsplit('/').next().unwrap_or(&name);
            let Some(id) = Id::parse(base) else { continue };
            match pack::read_header(&*self.source, &self.key, id, size) {
                Ok(blobs) => {
                    report.files_read += 1;
                    idx.add_pack(id, &blobs);
                }
                Err(error) => report.damaged.push(Damaged { name, error }),
            }
        }
        Ok(self.install_index(idx, report))
    }

    /// Finishes `idx`, counts it into `report` and makes it the index blobs are read by.
    fn install_index(&mut self, mut idx: Index, mut report: IndexReport) -> IndexReport {
        report.duplicates = idx.finish();
        report.packs = idx.packs().len();
        report.blobs = idx.blob_count();
        self.index = Some(idx);
        report
    }

    /// The loaded index, if any.
    pub fn index(&self) -> Option<&Index> {
        self.index.as_ref()
    }

    /// Reads the header of one pack: its blobs and where they lie.
    pub fn pack_header(&self, pack: &PackId) -> Result<Vec<PackedBlob>, Error> {
        let size = self.source.size(&pack::pack_name(pack))?;
        pack::read_header(&*self.source, &self.key, *pack, size)
    }

    /// Reads one blob at a known place: range read, authentication, decryption,
    /// decompression (bounded) and the check of its hash against its id.
    pub fn read_blob_at(&self, pack: &PackId, blob: &PackedBlob) -> Result<Vec<u8>, Error> {
        check_blob_limits(pack, blob)?;
        let name = pack::pack_name(pack);
        let length = u64::from(blob.length);
        let data = self.source.read_range(&name, blob.offset, length)?;
        if (data.len() as u64) < length {
            return Err(self.truncated(pack, blob, blob.offset + data.len() as u64));
        }
        self.decode_blob(pack, blob, data)
    }

    /// The error for `blob` of `pack` cut short: the pack ends before it does (at
    /// `seen`, or where the storage says).
    fn truncated(&self, pack: &PackId, blob: &PackedBlob, seen: u64) -> Error {
        let size = self.source.size(&pack::pack_name(pack)).unwrap_or(seen);
        Error::PackTruncated { pack: *pack, blob: blob.id, offset: blob.offset, length: u64::from(blob.length), size }
    }

    /// [`ResticRepo::decode_blob`] of a blob read as part of a longer range.
    fn decode_blob_slice(&self, pack: &PackId, blob: &PackedBlob, raw: &[u8]) -> Result<Vec<u8>, Error> {
        let plain = self.key.open(raw).map_err(|_| Error::BlobUnauthenticated { pack: *pack, blob: blob.id })?;
        self.finish_blob(pack, blob, plain)
    }

    /// Authenticates, decrypts, decompresses (bounded) and checks the hash of `data`,
    /// the stored bytes of `blob` of `pack` (its limits already checked).
    fn decode_blob(&self, pack: &PackId, blob: &PackedBlob, data: Vec<u8>) -> Result<Vec<u8>, Error> {
        let plain = self.key.open_owned(data).map_err(|_| Error::BlobUnauthenticated { pack: *pack, blob: blob.id })?;
        self.finish_blob(pack, blob, plain)
    }

    fn finish_blob(&self, pack: &PackId, blob: &PackedBlob, plain: Vec<u8>) -> Result<Vec<u8>, Error> {
        let bad = |reason: String| Error::Blob { pack: *pack, blob: blob.id, reason };
        let plain = match blob.uncompressed_length {
            None => plain,
            Some(n) => {
                let out = zstd_decompress(&plain, u64::from(n)).map_err(&bad)?;
                if out.len() as u64 != u64::from(n) {
                    return Err(bad(format!("decompresses to {} bytes, not the {n} indexed", out.len())));
                }
                out
            }
        };
        let actual = Id::hash(&plain);
        if actual != blob.id {
            return Err(Error::BlobHash { pack: *pack, blob: blob.id, actual });
        }
        Ok(plain)
    }

    /// Reads the blob `id` from the first pack holding it that reads back intact; when
    /// none does, the error of the first.
    pub fn blob(&self, id: &BlobId) -> Result<Vec<u8>, Error> {
        let idx = self.index.as_ref().ok_or(Error::IndexNotLoaded)?;
        let locations = idx.find(id);
        let mut first_err = None;
        for loc in locations {
            match self.read_blob_at(&loc.pack, &loc.blob) {
                Ok(b) => return Ok(b),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        Err(first_err.unwrap_or(Error::BlobNotFound { blob: *id }))
    }

    /// Reads and decodes the tree blob `id`: from the tree cache when it holds it, else
    /// read (and then kept, within the cache's budget).
    pub fn tree(&self, id: &BlobId) -> Result<Tree, Error> {
        let cached = self.trees.lock().unwrap_or_else(|p| p.into_inner()).get(id);
        let json = match cached {
            Some(j) => j,
            None => {
                let j = self.blob(id)?;
                self.trees.lock().unwrap_or_else(|p| p.into_inner()).insert(*id, &j);
                j
            }
        };
        tree::parse_tree(&json).map_err(|reason| Error::Tree { tree: *id, reason })
    }

    /// Sets the bytes of trees kept in memory once read (default
    /// [`tree_cache::DEFAULT_TREE_CACHE`]); 0 keeps none.
    pub fn set_tree_cache(&mut self, bytes: u64) {
        self.trees.get_mut().unwrap_or_else(|p| p.into_inner()).set_budget(bytes);
    }

    /// Bytes of trees held in memory.
    pub fn tree_cache_used(&self) -> u64 {
        self.trees.lock().unwrap_or_else(|p| p.into_inner()).used()
    }

    /// Reads ahead, into the tree cache, every tree below `roots` (those of roots given
    /// before are not walked again): level by level, each level's trees not held yet
    /// planned into merged range requests ([`plan`]) and fetched with up to the
    /// storage's connections in flight. It stops where the cache's budget is reached;
    /// a tree that fails here is passed over, and its error comes when it is listed.
    pub fn prefetch_trees(&self, roots: &[BlobId]) -> Prefetched {
        let mut done = Prefetched::default();
        let Some(index) = self.index.as_ref() else { return done };
        let mut level: Vec<BlobId> = {
            let mut p = self.prefetched.lock().unwrap_or_else(|p| p.into_inner());
            roots.iter().filter(|r| p.insert(**r)).copied().collect()
        };
        let mut seen: HashSet<BlobId> = level.iter().copied().collect();
        let workers = self.source.connections().max(1);
        let limits = plan::PlanLimits { max_gap: plan::MAX_GAP, max_request: plan::MAX_TREE_REQUEST };
        while !level.is_empty() {
            done.levels += 1;
            let missing: Vec<(BlobId, Location)> = {
                let cache = self.trees.lock().unwrap_or_else(|p| p.into_inner());
                level
                    .iter()
                    .filter(|id| !cache.contains(id))
                    .filter_map(|id| index.find(id).into_iter().next().map(|l| (*id, l)))
                    .filter(|(_, l)| check_blob_limits(&l.pack, &l.blob).is_ok())
                    .collect()
            };
            let wants: Vec<plan::Want> = missing
                .iter()
                .map(|(_, l)| plan::Want { pack: l.pack, offset: l.blob.offset, length: u64::from(l.blob.length) })
                .collect();
            let requests = plan::plan(&wants, limits);
            done.requests += requests.len() as u64;
            let fetched = fan_out(workers, &requests, |r| {
                let job = read_ahead::tree_job(r, &missing);
                self.fetch_job_plain(&job)
            });
            let mut trees = self.trees.lock().unwrap_or_else(|p| p.into_inner());
            for (id, plain) in fetched.into_iter().flatten() {
                if !trees.insert_if_room(id, &plain) {
                    done.budget_reached = true;
                }
                done.trees += 1;
            }
            if done.budget_reached {
                break;
            }
            let held: Vec<Vec<u8>> = level.iter().filter_map(|id| trees.get(id)).collect();
            drop(trees);
            let mut next = Vec::new();
            for json in held {
                let Ok(t) = tree::parse_tree(&json) else { continue };
                for n in t.nodes {
                    if let (NodeType::Dir, Some(sub)) = (&n.node_type, n.subtree)
                        && seen.insert(sub)
                    {
                        next.push(sub);
                    }
                }
            }
            level = next;
        }
        done
    }

    /// A reader of a file node's contents: its data blobs one after the other, each read
    /// and checked as [`ResticRepo::blob`] does when the previous one is used up. An error
    /// comes out as an `io::Error` whose inner error is this crate's [`Error`]
    /// (`e.get_ref().and_then(|e| e.downcast_ref::<Error>())`).
    pub fn file_reader<'a>(&'a self, node: &'a Node) -> FileReader<'a> {
        self.content_reader(node.content.clone())
    }

    /// [`ResticRepo::file_reader`] of a content given by its list of data blobs.
    pub fn content_reader(&self, blobs: Vec<BlobId>) -> FileReader<'_> {
        FileReader { repo: self, blobs, next: 0, current: Vec::new(), pos: 0 }
    }

    /// The error for a node a tree refused, for the caller's list of skipped entries.
    pub fn node_error(tree: &BlobId, rejected: &RejectedNode) -> Error {
        Error::Node {
            tree: *tree,
            position: rejected.position,
            name: rejected.name.clone(),
            reason: rejected.reason.clone(),
        }
    }
}

/// Reads a file's contents blob by blob: see [`ResticRepo::file_reader`].
pub struct FileReader<'a> {
    repo: &'a ResticRepo,
    blobs: Vec<BlobId>,
    next: usize,
    current: Vec<u8>,
    pos: usize,
}

impl Read for FileReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.pos == self.current.len() {
            let Some(id) = self.blobs.get(self.next) else { return Ok(0) };
            self.current = self.repo.blob(id).map_err(std::io::Error::other)?;
            self.pos = 0;
            self.next += 1;
        }
        let n = buf.len().min(self.current.len() - self.pos);
        buf[..n].copy_from_slice(&self.current[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shareable_between_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<ResticRepo>();
        send_sync::<Error>();
    }

    #[test]
    fn unpacked_encodings() {
        assert_eq!(decode_unpacked(b"{}".to_vec(), 2, 10).unwrap(), b"{}");
        assert_eq!(decode_unpacked(b"\x02x".to_vec(), 1, 10).unwrap(), b"\x02x");
        let mut z = vec![2u8];
        z.extend(zstd::encode_all(&b"[1,2,3]"[..], 1).unwrap());
        assert_eq!(decode_unpacked(z.clone(), 2, 7).unwrap(), b"[1,2,3]");
        assert!(decode_unpacked(z, 2, 6).unwrap_err().contains("more than"));
        assert!(decode_unpacked(b"\x03".to_vec(), 2, 10).is_err());
    }
}
