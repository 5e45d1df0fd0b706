//! The archiver: walks directory trees and stores them as a snapshot.
//! See docs/design.md#backup.
//!
//! Directories are walked depth first; the entries of a directory are processed in
//! parallel (rayon), and a large file's chunks are hashed, compressed and
//! encrypted in parallel batches. A file whose size, mtime, ctime and inode match
//! its entry in the parent snapshot is not read again: its content list is reused.
//! Entries that cannot be read are reported through [`Progress::warn`], left out,
//! and counted in the snapshot, which is then marked incomplete.
//!
//! A backup takes part in the lock-free protocol with prune through
//! [`WriterGuard`] (docs/design.md#prune), called at four points: before the
//! index is read, after it, as the saver's observer, and before the snapshot is
//! committed.

mod foreign;
mod leaves;
mod staged;
mod stream;

use std::collections::{BTreeMap, HashMap};
use std::fs::{File, Metadata};
use std::io::{Read, Take};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Instant, SystemTime};

use ignore::gitignore::Gitignore;
use rayon::prelude::*;

use crate::chunker::{Block, BlockBuffers, BlockReader};
use crate::crypto::sign::SigningKey;
use crate::error::{Error, Result};
use crate::format::pack::BlobType;
use crate::format::signed::SignatureStatus;
use crate::format::snapshot::{MAX_SKIPPED_LISTED, SNAPSHOT_VERSION, Skipped, Snapshot, Summary};
use crate::format::tree::{self, ListingWriter, MAX_XATTR_BYTES, Node, NodeKind, SplitLimits};
use crate::fs::meta::{self, NameCache};
use crate::fs::paths::resolve_path;
use crate::fs::select::{build_excludes, build_matcher};
use crate::fs::source;
use crate::id::Id;
use crate::lifecycle::Timing;
use crate::lifecycle::writer::WriterGuard;
use crate::local_state::LocalState;
use crate::merkle;
use crate::progress::{FileChange, Progress};
use crate::repo::history::{HEADS_FILE, History};
use crate::repo::tree_walk::{self, Located};
use crate::repo::{BlobSaver, Repository, SnapshotFilter, TreeNodes};
pub use foreign::{
    ContentMemo, Fed, ForeignEntry, ForeignTree, Listing, MAX_DEPTH as FOREIGN_MAX_DEPTH, Payload, Store,
};
use leaves::{Leaves, Spill};
pub use staged::{StagedTree, archive_components};
pub use stream::{StreamSource, stream_path};

/// Bytes read from a file at a time (plus the part of a chunk left from the
/// previous read); the chunks cut in them are stored in parallel.
const BLOCK_BYTES: usize = 2 << 20;
/// Blocks at least this long have their part of the file digest hashed by
/// several workers (below it, splitting costs more than it gains).
const PARALLEL_DIGEST_BYTES: usize = 512 << 10;
/// Blocks that may be read ahead at once, across all files (see [`ReadAhead`]).
const READ_AHEAD_SLOTS: usize = 1;
/// Entries of a directory processed together: their nodes are then encoded into
/// the directory's tree parts and dropped, so memory does not grow with the
/// directory (only its sorted list of names does).
const DIR_BATCH: usize = 4096;

/// What to back up and how.
#[derive(Clone, Debug, Default)]
pub struct BackupOptions {
    /// Files and directories to back up (made absolute).
    pub paths: Vec<PathBuf>,
    /// gitignore-style patterns of entries to leave out.
    pub excludes: Vec<String>,
    /// Do not descend into directories on other file systems.
    pub one_file_system: bool,
    /// Read and chunk everything but write nothing.
    pub dry_run: bool,
    /// Tags for the snapshot.
    pub tags: Vec<String>,
    /// Host name to record; defaults to this machine's.
    pub hostname: Option<String>,
    /// The parent snapshot for change detection. `None` picks the newest snapshot
    /// with the same host and paths.
    pub parent: Option<Id>,
    /// Read every file even when the parent says it is unchanged.
    pub force: bool,
    /// Percentage (0 to 100) of unchanged files to read again anyway, picked at
    /// random, to catch content that changed without its metadata (silent
    /// corruption, or writers that restore mtimes).
    pub reread_share: f64,
    /// This client's local state of the repository: the history heads it saw are
    /// checked (rollback is reported as a warning) and updated.
    pub state: Option<LocalState>,
    /// gitignore-style patterns matched without regard to case (`--iexclude`).
    pub iexcludes: Vec<String>,
    /// Leave out a directory that holds an entry of one of these names.
    pub exclude_if_present: Vec<String>,
    /// Leave out a directory holding a `CACHEDIR.TAG` with the standard signature.
    pub exclude_caches: bool,
    /// Leave out regular files larger than this many bytes.
    pub exclude_larger_than: Option<u64>,
    /// The snapshot's time instead of now.
    pub time: Option<SystemTime>,
    /// Write no snapshot when the tree equals the parent snapshot's (the result's
    /// `id` is then `None` and `unchanged` true).
    pub skip_if_unchanged: bool,
    /// The lock-free protocol's durations: how often this backup's session marker
    /// is rewritten, and the grace period its final checks must fit in.
    pub timing: Timing,
    /// The head of the server's transparency log followed when the repository
    /// was opened, recorded in the snapshot (docs/design.md#transparency-log).
    pub server_log: Option<crate::format::snapshot::LogMark>,
}

/// The first bytes of a cache directory tag (<https://bford.info/cachedir/>).
const CACHEDIR_SIGNATURE: &[u8] = b"Signature: 8a477f597d28d172789f06886806bc55";

impl BackupOptions {
    /// Whether the options other than the gitignore patterns leave `path` (with
    /// metadata `md`) out: a directory holding a marker file, a cache directory,
    /// a file over the size limit.
    fn excluded_otherwise(&self, path: &Path, md: &Metadata) -> bool {
        if md.is_dir() {
            if self.exclude_if_present.iter().any(|name| std::fs::symlink_metadata(path.join(name)).is_ok()) {
                return true;
            }
            if self.exclude_caches {
                use std::os::unix::fs::OpenOptionsExt;
                let mut head = [0u8; CACHEDIR_SIGNATURE.len()];
                // Neither a symlink nor a FIFO planted as the tag is followed or waited on.
                let tagged = std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
                    .open(path.join("CACHEDIR.TAG"))
                    .and_then(|mut f| {
                        if !f.metadata()?.is_file() {
                            return Err(std::io::ErrorKind::InvalidInput.into());
                        }
                        f.read_exact(&mut head)
                    })
                    .is_ok();
                if tagged && head == CACHEDIR_SIGNATURE {
                    return true;
                }
            }
        }
        md.is_file() && self.exclude_larger_than.is_some_and(|limit| md.len() > limit)
    }
}

/// A saved entry and the Merkle leaves below it, in tree order.
type Saved = (Node, Leaves);

/// A file's blob ids and content digest.
type FileContent = (Vec<Id>, Id);

/// A file's content as read, and the size and times recorded with it.
type ReadFile = (FileContent, source::Stamp);

/// The outcome of a backup.
#[derive(Debug)]
pub struct BackupResult {
    /// The snapshot's id; `None` for a dry run.
    pub id: Option<Id>,
    /// The snapshot as written (or as it would have been).
    pub snapshot: Snapshot,
    /// With `skip_if_unchanged`: nothing changed since the parent, so no snapshot
    /// was written.
    pub unchanged: bool,
}

/// The virtual directory structure above the backed-up paths.
enum VirtualNode {
    /// A path given by the user: backed up as it is.
    Real(PathBuf),
    /// A directory above the given paths: only the children listed here.
    Dir(PathBuf, BTreeMap<Vec<u8>, VirtualNode>),
}

fn build_virtual_root(paths: &[PathBuf]) -> BTreeMap<Vec<u8>, VirtualNode> {
    let mut sorted = paths.to_vec();
    sorted.sort();
    sorted.dedup();
    let mut root = BTreeMap::new();
    'outer: for p in sorted {
        let comps: Vec<_> = p
            .components()
            .filter_map(|c| match c {
                Component::Normal(n) => Some(n.as_bytes().to_vec()),
                _ => None,
            })
            .collect();
        let mut map = &mut root;
        let mut here = PathBuf::from("/");
        for (i, c) in comps.iter().enumerate() {
            here.push(std::ffi::OsStr::from_bytes(c));
            if i + 1 == comps.len() {
                map.insert(c.clone(), VirtualNode::Real(here.clone()));
                continue 'outer;
            }
            let entry = map.entry(c.clone()).or_insert_with(|| VirtualNode::Dir(here.clone(), BTreeMap::new()));
            match entry {
                VirtualNode::Real(_) => continue 'outer, // an ancestor is already backed up whole
                VirtualNode::Dir(_, children) => map = children,
            }
        }
    }
    root
}

struct Archiver<'a> {
    repo: &'a Repository,
    saver: BlobSaver<'a>,
    excludes: Gitignore,
    /// `--iexclude` patterns (case-insensitive).
    iexcludes: Gitignore,
    opts: &'a BackupOptions,
    progress: &'a dyn Progress,
    names: NameCache,
    /// Content and digest of files with several links, by (device, inode).
    hardlinks: Mutex<HashMap<(u64, u64), ReadFile>>,
    merkle_key: [u8; 32],
    /// Where the Merkle leaves of directories already saved are kept.
    spill: Spill,
    limits: SplitLimits,
    cut_key: [u8; 32],
    read_ahead: ReadAhead,
    blocks: BlockBuffers,
    skipped: Mutex<Vec<Skipped>>,
    skipped_count: AtomicU64,
    files_new: AtomicU64,
    files_changed: AtomicU64,
    files_unchanged: AtomicU64,
    dirs: AtomicU64,
    others: AtomicU64,
    bytes_read: AtomicU64,
    bytes_total: AtomicU64,
}

/// Read-ahead slots: a file may read its next block while the current one is
/// stored only with a slot, so at most this many blocks beyond one per worker
/// are in memory at once.
struct ReadAhead {
    free: AtomicUsize,
}

/// A taken read-ahead slot; dropping it returns it.
struct ReadAheadSlot<'a>(&'a ReadAhead);

impl ReadAhead {
    fn new(slots: usize) -> Self {
        ReadAhead { free: AtomicUsize::new(slots) }
    }

    fn try_take(&self) -> Option<ReadAheadSlot<'_>> {
        self.free.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1)).ok()?;
        Some(ReadAheadSlot(self))
    }
}

impl Drop for ReadAheadSlot<'_> {
    fn drop(&mut self) {
        self.0.free.fetch_add(1, Ordering::AcqRel);
    }
}

/// Backs up `opts.paths` into `repo` and writes a snapshot (unless a dry run).
pub fn backup(
    repo: &Repository,
    opts: &BackupOptions,
    key: &SigningKey,
    progress: &dyn Progress,
) -> Result<BackupResult> {
    backup_with_limits(repo, opts, key, progress, SplitLimits::default())
}

/// [`backup`] with the given sizes of tree parts (tests use small ones to split
/// directories of a few entries).
pub fn backup_with_limits(
    repo: &Repository,
    opts: &BackupOptions,
    key: &SigningKey,
    progress: &dyn Progress,
    limits: SplitLimits,
) -> Result<BackupResult> {
    run(repo, opts, Input::Paths, key, progress, limits)
}

/// Backs up what `stream` reads, to its end, as one file of the snapshot
/// (`backup --stdin`; docs/design.md#backup-from-a-stream). `opts.paths` is not
/// used; the snapshot's one path is `/NAME`. A read error (the stream's source may
/// return one at its end, as a failed command does) ends the backup without a
/// snapshot.
pub fn backup_stream(
    repo: &Repository,
    opts: &BackupOptions,
    stream: StreamSource<'_>,
    key: &SigningKey,
    progress: &dyn Progress,
) -> Result<BackupResult> {
    run(repo, opts, Input::Stream(stream), key, progress, SplitLimits::default())
}

/// A snapshot of another program's repository, to import as a snapshot of this
/// one (docs/design.md#import).
pub struct ForeignSource<'a> {
    /// The tree.
    pub tree: &'a dyn ForeignTree,
    /// The snapshot's paths, as the other program recorded them (absolute).
    pub paths: Vec<String>,
    /// Whether the snapshot's paths are the top-level names of the tree (each
    /// after `/`) instead of `paths`: for an archive that names none.
    pub paths_from_tree: bool,
    /// The user who made it there.
    pub username: String,
    /// What was imported before in this import: files of a known content key
    /// are not read again.
    pub memo: &'a ContentMemo,
    /// Where it comes from, recorded (signed) in the snapshot.
    pub imported_from: crate::format::snapshot::ImportedFrom,
}

/// Stores the foreign snapshot `source` as a snapshot, with the time, host name
/// and tags of `opts` (`opts.paths`, the parent and the change-detection options
/// do not apply: every file is read unless `source.memo` knows its content).
pub fn import_foreign(
    repo: &Repository,
    opts: &BackupOptions,
    source: ForeignSource<'_>,
    key: &SigningKey,
    progress: &dyn Progress,
) -> Result<BackupResult> {
    source.imported_from.check().map_err(Error::InvalidInput)?;
    run(repo, opts, Input::Foreign(source), key, progress, SplitLimits::default())
}

/// What a backup reads.
enum Input<'a> {
    /// `opts.paths`, from the file system.
    Paths,
    /// A stream, as one file.
    Stream(StreamSource<'a>),
    /// A tree of another program's repository.
    Foreign(ForeignSource<'a>),
}

/// The top-level names of a foreign tree, each after `/`, sorted; `/` for an
/// empty tree.
fn top_paths(t: &dyn ForeignTree) -> Vec<String> {
    let mut top: Vec<String> = t
        .list(&t.root())
        .map(|l| l.entries.iter().map(|e| format!("/{}", String::from_utf8_lossy(&e.node.name.0))).collect())
        .unwrap_or_default();
    top.sort();
    top.dedup();
    if top.is_empty() {
        top.push("/".into());
    }
    top
}

/// The warning for a prune notice that does not decode.
fn unknown_notice_warning(u: &crate::lifecycle::notices::Undecodable) -> String {
    format!(
        "{u}; taken to announce packs this backup cannot name: it adopts no orphan pack and stores again what \
         it uses that is neither in its parent snapshot nor in its own packs; `coffer check` reports the notice, \
         and a later `coffer prune` removes it"
    )
}

/// A backup of `opts.paths`, of a stream, or of a foreign tree.
fn run(
    repo: &Repository,
    opts: &BackupOptions,
    input: Input<'_>,
    key: &SigningKey,
    progress: &dyn Progress,
    limits: SplitLimits,
) -> Result<BackupResult> {
    let start = Instant::now();
    let time = opts.time.unwrap_or_else(SystemTime::now);
    let paths: Vec<PathBuf> = match &input {
        Input::Stream(s) => vec![s.path()?],
        Input::Foreign(f) => f.paths.iter().map(PathBuf::from).collect(),
        Input::Paths if opts.paths.is_empty() => {
            return Err(Error::InvalidInput("nothing to back up: give at least one path".into()));
        }
        Input::Paths => opts.paths.iter().map(|p| resolve_path(p)).collect::<Result<_>>()?,
    };
    let hostname = opts.hostname.clone().unwrap_or_else(meta::hostname);
    let mut path_strings: Vec<String> = paths.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    path_strings.sort();
    path_strings.dedup();
    crate::format::snapshot::check_lists(&path_strings, &opts.tags, &opts.excludes, &hostname)
        .map_err(Error::InvalidInput)?;
    // Announce this backup before reading the index, so that a prune either sees
    // it or has finished rewriting the index before it is read
    // (docs/design.md#prune).
    let mut guard = WriterGuard::begin(repo, opts.timing, opts.dry_run)?;
    for e in repo.load_index()? {
        progress.warn(Path::new("index"), &format!("{e}; {}", crate::repo::INDEX_FILE_SKIPPED));
    }
    // Packs left by interrupted backups are reused.
    guard.adopt_orphan_packs()?;
    for u in guard.unknown_notices() {
        progress.warn(Path::new("prune notice"), &unknown_notice_warning(u));
    }
    let mut history = History::load(repo)?;
    let mut history_intact = true;
    if let Some(state) = &opts.state {
        let remembered = state.read_ids(HEADS_FILE)?;
        // Another backup of this client may have stored its snapshot since the listing.
        history.relist_if_missing(repo, &remembered)?;
        for e in history.verify(&remembered).errors {
            history_intact = false;
            progress.warn(Path::new("history"), &e);
        }
    }
    let parent = match opts.parent {
        // An import reads its source, not the file system: no parent applies.
        _ if matches!(input, Input::Foreign(_)) => None,
        Some(id) => Some(id),
        None => {
            let filter = SnapshotFilter { host: Some(hostname.clone()), tags: vec![], paths: vec![] };
            // A damaged snapshot cannot be a parent; `check` reports it. Nor can
            // one this client did not sign: change detection reuses a parent's
            // content unread, and anyone holding the passphrase can store a
            // snapshot naming this host and these paths.
            history
                .live_snapshots()
                .into_iter()
                .rev()
                .find(|(_, s)| filter.matches(s) && s.paths == path_strings && signed_by(s, key))
                .map(|(id, _)| id)
        }
    };
    let parent = match parent.map(|id| (id, repo.load_snapshot(&id))) {
        // Forgotten since it was listed: back up without a parent.
        Some((_, Err(Error::Backend(e)))) if e.kind == coffer_backend::ErrorKind::NotFound => None,
        Some((id, r)) => Some((id, r?)),
        None => None,
    };
    let parent_tree = match &parent {
        Some((id, p)) => {
            if !signed_by(p, key) {
                // Named with --parent: trusted as the user asked, but said.
                let by = if p.signature.is_valid() {
                    format!("signed by another writer, {}", p.signature.describe())
                } else {
                    p.signature.describe()
                };
                progress.warn(
                    Path::new("parent snapshot"),
                    &format!(
                        "snapshot {} is {by}: the content it records for files that look unchanged is stored \
                         without reading them, as --parent asked; use --force to read every file",
                        id.short()
                    ),
                );
            }
            guard.vouch_parent(*id, p.tree);
            Some(p.tree)
        }
        None => None,
    };
    let parent = parent.map(|(id, _)| id);
    let excludes = build_excludes(&opts.excludes)?;
    let iexcludes = build_matcher(&opts.iexcludes, true, "exclude")?;
    let pool = rayon::ThreadPoolBuilder::new()
        .stack_size(64 << 20)
        .thread_name(|i| format!("coffer-backup-{i}"))
        .build()
        .map_err(|e| Error::InvalidInput(format!("cannot start worker threads: {e}")))?;
    let arch = Archiver {
        repo,
        saver: match guard.observer() {
            None => BlobSaver::dry_run(repo),
            Some(observer) => BlobSaver::new(repo).with_observer(observer),
        },
        excludes,
        iexcludes,
        opts,
        progress,
        names: NameCache::default(),
        hardlinks: Mutex::new(HashMap::new()),
        merkle_key: crate::crypto::random_array(),
        spill: Spill::new(repo.spool_dir(), leaves::Limits::default()),
        limits,
        cut_key: repo.tree_cut_key(),
        read_ahead: ReadAhead::new(READ_AHEAD_SLOTS),
        blocks: BlockBuffers::new(pool.current_num_threads() + READ_AHEAD_SLOTS),
        skipped: Mutex::new(Vec::new()),
        skipped_count: AtomicU64::new(0),
        files_new: AtomicU64::new(0),
        files_changed: AtomicU64::new(0),
        files_unchanged: AtomicU64::new(0),
        dirs: AtomicU64::new(0),
        others: AtomicU64::new(0),
        bytes_read: AtomicU64::new(0),
        bytes_total: AtomicU64::new(0),
    };
    let vroot = build_virtual_root(&paths);
    // The commit's round (the marker, the notices, the history) is taken while
    // the tree is walked: for a short backup, it then costs no time of its own.
    let (username, imported_from) = match &input {
        Input::Foreign(f) => (f.username.clone(), Some(f.imported_from.clone())),
        _ => (meta::username(), None),
    };
    let top_of = match &input {
        Input::Foreign(f) if f.paths_from_tree => Some(f.tree),
        _ => None,
    };
    let (built, early) = std::thread::scope(|s| {
        let early = s.spawn(|| guard.look_ahead());
        let built = match input {
            Input::Stream(stream) => pool.install(|| arch.save_stream(stream, &paths[0], parent_tree, time)),
            Input::Foreign(f) => pool.install(|| arch.save_foreign(f.tree, f.memo)),
            Input::Paths => std::thread::scope(|s| {
                if progress.wants_totals() {
                    s.spawn(|| scan_totals(&paths, &arch.excludes, opts.one_file_system, progress));
                }
                pool.install(|| {
                    if paths.iter().any(|p| p.parent().is_none()) {
                        // The whole file system: "/" itself is the root tree.
                        let md = std::fs::symlink_metadata("/").map_err(|e| Error::io("/", e))?;
                        arch.save_dir(Path::new("/"), &md, parent_tree)
                    } else {
                        arch.save_virtual(&vroot, parent_tree)
                    }
                })
            }),
        };
        (built, joined(early))
    });
    let (tree, leaves) = built?;
    if let Some(t) = top_of {
        path_strings = top_paths(t);
        crate::format::snapshot::check_lists(&path_strings, &opts.tags, &opts.excludes, &hostname)
            .map_err(Error::InvalidInput)?;
    }
    guard.keep_look(early);
    // The last packs and index files are stored while this writer's key is
    // registered if it is not yet (before the snapshot its readers verify), and
    // the final check's round is taken again if the one taken during the walk
    // is too old.
    let (stats, registered, late) = std::thread::scope(|s| {
        let late = (!guard.has_recent_look()).then(|| s.spawn(|| guard.look_ahead()));
        let registered = (!opts.dry_run).then(|| s.spawn(|| repo.ensure_registered(key)));
        let stats = arch.saver.finish();
        (stats, registered.map(joined), late.and_then(joined))
    });
    guard.keep_look(late);
    let mut stats = stats?;
    registered.transpose()?;
    let (merkle_root, merkle_leaves) = leaves.root(&arch.spill)?;
    let skipped = arch.skipped.into_inner().expect("poisoned");
    // The final check against a concurrent prune: blobs a prune is deleting are
    // stored again. The heads are taken last, so that backups finished meanwhile
    // are linked.
    let known = guard.unknown_notices().len();
    let rescued = guard.before_commit(tree, || history.refresh(repo))?;
    for u in &guard.unknown_notices()[known..] {
        progress.warn(Path::new("prune notice"), &unknown_notice_warning(u));
    }
    stats.bytes_stored += rescued.bytes_stored;
    stats.blobs += rescued.blobs;
    let snapshot = Snapshot {
        version: SNAPSHOT_VERSION,
        time: humantime::format_rfc3339_nanos(time).to_string(),
        written: opts.time.map(|_| humantime::format_rfc3339_nanos(SystemTime::now()).to_string()),
        server_log: opts.server_log.map(Box::new),
        hostname,
        username,
        paths: path_strings,
        tags: opts.tags.clone(),
        tree,
        parent,
        excludes: opts.excludes.clone(),
        skipped_count: arch.skipped_count.load(Ordering::Relaxed),
        skipped,
        summary: Summary {
            files_new: arch.files_new.into_inner(),
            files_changed: arch.files_changed.into_inner(),
            files_unchanged: arch.files_unchanged.into_inner(),
            dirs: arch.dirs.into_inner(),
            others: arch.others.into_inner(),
            bytes_read: arch.bytes_read.into_inner(),
            bytes_total: arch.bytes_total.into_inner(),
            bytes_new: stats.bytes_new - stats.tree_bytes_new,
            bytes_new_trees: stats.tree_bytes_new,
            bytes_added: stats.bytes_stored,
            blobs_added: stats.blobs,
            // Rounded up, so that `time` plus the duration is never before the
            // heads were taken (docs/design.md#history).
            duration_ms: start.elapsed().as_micros().div_ceil(1000) as u64,
        },
        program: format!("coffer {}", env!("CARGO_PKG_VERSION")),
        writer: key.public(),
        history: history.heads(),
        merkle_root: Id(merkle_root),
        merkle_leaves,
        merkle_key: Id(arch.merkle_key),
        copied_from: None,
        imported_from: imported_from.map(Box::new),
        signature: Default::default(),
    };
    guard.ready_to_commit()?;
    let unchanged = match parent_tree {
        Some(parent_tree) if opts.skip_if_unchanged => same_sources(repo, parent_tree, snapshot.tree, &paths),
        _ => false,
    };
    // The marker is deleted while the snapshot is stored (one round trip, not two).
    let (id, finished) = if opts.dry_run || unchanged {
        (None, guard.finish())
    } else {
        std::thread::scope(|s| {
            let finished = s.spawn(|| guard.finish());
            let id = repo.save_snapshot(&snapshot, key);
            (Some(id), finished.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
        })
    };
    let id = id.transpose()?;
    finished?;
    // Copies read past while another served (the parent's trees, blobs rescued
    // from a prune): damage in their packs.
    for line in repo.take_bad_copies() {
        progress.warn(Path::new("repository"), &line);
    }
    if let (Some(id), Some(state), true) = (id, &opts.state, history_intact) {
        state.write_ids(HEADS_FILE, &[id])?;
    }
    Ok(BackupResult { id, snapshot, unchanged })
}

/// Whether every given path's entry is the same in the trees `old` and `new`
/// (the entry itself, and so, through its subtree id, everything below it). The
/// directories above the given paths are not compared: their times change with
/// whatever else happens beside the source.
fn same_sources(repo: &Repository, old: Id, new: Id, paths: &[PathBuf]) -> bool {
    old == new
        || paths.iter().all(|p| match (tree_walk::locate(repo, old, p), tree_walk::locate(repo, new, p)) {
            (Ok(Located::Entry(a)), Ok(Located::Entry(b))) => a == b,
            _ => false,
        })
}

/// Whether `snapshot` carries a valid signature by `key`, this client's writer key.
/// Whether `key` signed `snapshot` and, for a copy written anew by `coffer
/// copy`, also wrote the original: a copy of another writer's snapshot is not
/// this client's own.
fn signed_by(snapshot: &Snapshot, key: &SigningKey) -> bool {
    matches!(&snapshot.signature, SignatureStatus::Valid { key: k, .. } if *k == key.public())
        && snapshot.copied_from.as_ref().is_none_or(|c| c.writers().iter().all(|w| *w == key.public()))
}

/// What a scoped thread returned; its panic goes on in the caller.
fn joined<T>(h: std::thread::ScopedJoinHandle<'_, T>) -> T {
    h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))
}

/// Walks the paths once for their total size and file count, so progress can
/// show an ETA. Runs beside the backup; errors are ignored here (the backup
/// reports them).
fn scan_totals(paths: &[PathBuf], excludes: &Gitignore, one_fs: bool, progress: &dyn Progress) {
    let (mut bytes, mut files) = (0u64, 0u64);
    let mut stack: Vec<(PathBuf, Option<u64>)> = paths.iter().map(|p| (p.clone(), None)).collect();
    while let Some((p, dev)) = stack.pop() {
        let Ok(md) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        if md.is_dir() {
            if dev.is_some_and(|d| one_fs && d != md.dev()) {
                continue;
            }
            let Ok(rd) = std::fs::read_dir(&p) else {
                continue;
            };
            for e in rd.flatten() {
                let child = e.path();
                let is_dir = e.file_type().map(|t| t.is_dir()).unwrap_or(false);
                if !excludes.matched(&child, is_dir).is_ignore() {
                    stack.push((child, Some(md.dev())));
                }
            }
        } else if md.is_file() {
            bytes += md.size();
            files += 1;
        }
    }
    progress.set_total(bytes, files);
}

impl Archiver<'_> {
    fn skip(&self, path: &Path, message: String) {
        self.progress.warn(path, &message);
        self.skipped_count.fetch_add(1, Ordering::Relaxed);
        let mut s = self.skipped.lock().expect("poisoned");
        if s.len() < MAX_SKIPPED_LISTED {
            s.push(Skipped::new(path.to_string_lossy().into_owned(), message));
        }
    }

    /// The parent snapshot's listing of a directory, streamed in step with the
    /// walk. A parent tree that cannot be loaded only costs rereading: not an error.
    fn parent_dir(&self, id: Option<Id>) -> ParentDir<'_> {
        ParentDir { nodes: id.and_then(|id| Some((id, self.repo.tree_nodes(&id).ok()?.peekable()))), same: true }
    }

    fn save_virtual(&self, children: &BTreeMap<Vec<u8>, VirtualNode>, parent: Option<Id>) -> Result<(Id, Leaves)> {
        let mut parent = self.parent_dir(parent);
        let mut dir = self.dir_writer();
        let children: Vec<(&Vec<u8>, &VirtualNode)> = children.iter().collect();
        for batch in children.chunks(DIR_BATCH) {
            let pnodes = parent.take(batch.iter().map(|(n, _)| n.as_slice()));
            let results: Vec<Result<Option<Saved>>> = batch
                .par_iter()
                .zip(pnodes.par_iter())
                .map(|((name, v), pnode)| {
                    let pnode = pnode.as_ref();
                    match v {
                        VirtualNode::Real(path) => {
                            // Reached from `/` without following a symlink, and examined
                            // in the directory so reached.
                            let examined = source::Dir::open_parent_of(path).and_then(|d| {
                                let base = path.file_name().unwrap_or_default();
                                let md = d.metadata(base).map_err(source::Refused::Io)?;
                                let read = meta::read_node(name, || d.entry_path(base, path), &md, &self.names, pnode);
                                Ok((md, read))
                            });
                            match examined {
                                Ok((md, read)) => self.save_entry(path, &md, read, pnode, None),
                                Err(e) => {
                                    self.skip(path, e.to_string());
                                    Ok(None)
                                }
                            }
                        }
                        VirtualNode::Dir(path, sub) => {
                            let md = std::fs::symlink_metadata(path).map_err(|e| Error::io(path, e))?;
                            let (mut node, warning) = meta::read_node(name, || path.clone(), &md, &self.names, pnode)
                                .map_err(Error::InvalidInput)?;
                            if let Some(w) = warning {
                                self.progress.warn(path, &w);
                            }
                            if node.kind != NodeKind::Dir {
                                return Err(Error::InvalidInput(format!("{} is not a directory", path.display())));
                            }
                            let (sub, leaves) = self.save_virtual(sub, pnode.and_then(|n| n.subtree))?;
                            node.subtree = Some(sub);
                            self.dirs.fetch_add(1, Ordering::Relaxed);
                            Ok(Some((node, leaves)))
                        }
                    }
                })
                .collect();
            dir.add_batch(self, results, pnodes, &mut parent)?;
        }
        dir.finish(self, parent)
    }

    fn dir_writer(&self) -> DirWriter {
        DirWriter { listing: ListingWriter::new(self.cut_key, self.limits), leaves: Leaves::default() }
    }

    /// Stores a tree blob (a listing, a part of one, or a content part).
    fn save_tree_blob(&self, bytes: &[u8]) -> Result<Id> {
        Ok(self.saver.save(BlobType::Tree, bytes)?.0)
    }

    /// The tree of a directory recorded empty.
    fn save_empty_tree(&self) -> Result<(Id, Leaves)> {
        self.dir_writer().finish(self, ParentDir { nodes: None, same: false })
    }

    /// Saves one entry from its node as read by [`meta::read_node`] (or why it
    /// could not be); `Ok(None)` when it was skipped.
    fn save_entry(
        &self,
        path: &Path,
        md: &Metadata,
        read: std::result::Result<(Node, Option<String>), String>,
        parent: Option<&Node>,
        dev: Option<u64>,
    ) -> Result<Option<Saved>> {
        let (mut node, warning) = match read {
            Ok(r) => r,
            Err(e) => {
                self.skip(path, e);
                return Ok(None);
            }
        };
        if let Some(w) = warning {
            // The entry is kept; only its extended attributes are missing.
            self.progress.warn(path, &w);
        }
        if let Some(w) = cap_xattrs(&mut node) {
            self.progress.warn(path, &w);
        }
        let mut leaves = Leaves::default();
        match node.kind {
            NodeKind::Dir => {
                self.dirs.fetch_add(1, Ordering::Relaxed);
                let crosses = dev.is_some_and(|d| self.opts.one_file_system && d != md.dev());
                let parent_sub = parent.filter(|p| p.kind == NodeKind::Dir).and_then(|p| p.subtree);
                let (sub, below) = if crosses { self.save_empty_tree()? } else { self.save_dir(path, md, parent_sub)? };
                node.subtree = Some(sub);
                leaves = below;
            }
            NodeKind::File => {
                let parent = parent.filter(|p| p.kind == NodeKind::File);
                // A parent whose content lies in content parts is compared with its
                // content resolved; one whose parts do not load is no parent.
                let resolved;
                let parent = match parent {
                    Some(p) if !p.content_parts.is_empty() => match self.repo.resolve_content(p, &mut |_| {}) {
                        Ok(content) => {
                            resolved = Node { content, content_parts: Vec::new(), ..p.clone() };
                            Some(&resolved)
                        }
                        Err(_) => None,
                    },
                    p => p,
                };
                match self.save_file(path, &mut node, parent)? {
                    Some((content, digest)) => {
                        node.content_parts =
                            tree::content_parts(&content, &self.limits, &mut |b| self.save_tree_blob(b))?;
                        if node.content_parts.is_empty() {
                            node.content = content;
                        }
                        node.digest = Some(digest);
                        let p = path.as_os_str().as_bytes();
                        leaves = Leaves::one(merkle::file_leaf(&merkle::leaf_salt(&self.merkle_key, p), &digest.0, p));
                    }
                    None => return Ok(None),
                }
            }
            _ => {
                self.others.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(Some((node, leaves)))
    }

    /// Saves the directory at `path`, listed with metadata `md`: it is opened
    /// without following a symlink and checked against `md`, and its entries are
    /// examined in the directory so opened ([`source`]), never through its path.
    fn save_dir(&self, path: &Path, md: &Metadata, parent: Option<Id>) -> Result<(Id, Leaves)> {
        let dev = md.dev();
        let listing = source::Dir::open(path, source::Listed::of(md))
            .and_then(|d| Ok((d.names().map_err(source::Refused::Io)?, d)));
        let (names, dir) = match listing {
            Ok(l) => l,
            Err(e) => {
                self.skip(path, format!("cannot list directory: {e}"));
                return self.save_empty_tree();
            }
        };
        let mut entries = Vec::new();
        for e in names {
            match e {
                Ok(name) => entries.push(name),
                Err(e) => self.skip(path, format!("cannot list directory: {e}")),
            }
        }
        entries.sort();
        // Entries are examined (metadata, symlink target, extended attributes) in the
        // directory while it is open, a batch at a time. It is closed before the
        // batch's subdirectories are entered, so open directories do not pile up with
        // depth, and opened again (and checked again against its listing) for the next
        // batch.
        let mut parent = self.parent_dir(parent);
        let mut writer = self.dir_writer();
        let mut open = Some(dir);
        for batch in entries.chunks(DIR_BATCH) {
            let d = match open.take() {
                Some(d) => d,
                None => match source::Dir::open(path, source::Listed::of(md)) {
                    Ok(d) => d,
                    Err(e) => {
                        // Replaced while it was being saved: the rest of it is not.
                        self.skip(path, format!("cannot list directory: {e}"));
                        break;
                    }
                },
            };
            let pnodes = parent.take(batch.iter().map(|n| n.as_bytes()));
            let examined: Vec<_> = batch
                .par_iter()
                .zip(pnodes.par_iter())
                .map(|(name, pnode)| {
                    let child = path.join(name);
                    let md = match d.metadata(name) {
                        Ok(md) => md,
                        Err(e) => {
                            self.skip(&child, e.to_string());
                            return None;
                        }
                    };
                    if self.excludes.matched(&child, md.is_dir()).is_ignore()
                        || self.iexcludes.matched(&child, md.is_dir()).is_ignore()
                        || self.opts.excluded_otherwise(&child, &md)
                    {
                        return None;
                    }
                    let read = meta::read_node(
                        name.as_bytes(),
                        || d.entry_path(name, &child),
                        &md,
                        &self.names,
                        pnode.as_ref(),
                    );
                    Some((child, md, read))
                })
                .collect();
            drop(d);
            let results: Vec<Result<Option<Saved>>> = examined
                .into_par_iter()
                .zip(pnodes.par_iter())
                .map(|(e, pnode)| match e {
                    Some((child, md, read)) => self.save_entry(&child, &md, read, pnode.as_ref(), Some(dev)),
                    None => Ok(None),
                })
                .collect();
            writer.add_batch(self, results, pnodes, &mut parent)?;
        }
        writer.finish(self, parent)
    }

    /// Counts a file in the summary as `change` says; returns it.
    fn count_file(&self, change: FileChange) -> FileChange {
        let counter = match change {
            FileChange::New => &self.files_new,
            FileChange::Changed => &self.files_changed,
            FileChange::Unchanged => &self.files_unchanged,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        change
    }

    /// Whether `--reread-share` picks the next unchanged file for rereading.
    fn reread_this_one(&self) -> bool {
        let share = self.opts.reread_share;
        share > 0.0 && (u32::from_le_bytes(crate::crypto::random_array()) as f64) < share / 100.0 * u32::MAX as f64
    }

    /// Whether `node` looks unchanged since `parent` (same size, times and
    /// inode, content stored); `--force` rereads such a file all the same.
    fn unchanged(&self, node: &Node, parent: &Node) -> bool {
        node.size == parent.size
            && node.mtime == parent.mtime
            && node.ctime == parent.ctime
            && node.inode == parent.inode
            && (node.size == 0 || !parent.content.is_empty())
            && parent.digest.is_some()
            && {
                let idx = self.repo.index();
                parent.content.iter().all(|id| idx.contains(id, BlobType::Data))
            }
    }

    /// Stores a file's content; returns its blob ids and digest, or `Ok(None)` when
    /// it could not be read. A file that is read gets the size and times it was
    /// read with in `node` ([`source::read_stable`]), so its size is always its
    /// content's.
    fn save_file(&self, path: &Path, node: &mut Node, parent: Option<&Node>) -> Result<Option<FileContent>> {
        self.bytes_total.fetch_add(node.size, Ordering::Relaxed);
        let unchanged = parent.filter(|p| self.unchanged(node, p));
        let change = match unchanged {
            Some(p) if !self.opts.force && !self.reread_this_one() => {
                self.count_file(FileChange::Unchanged);
                self.progress.add_bytes(node.size);
                self.progress.file_saved(path, FileChange::Unchanged);
                self.progress.add_item(path);
                let digest = p.digest.expect("unchanged() requires a digest");
                return Ok(Some((p.content.clone(), digest)));
            }
            // Reread (`--force`, `--reread-share`): counted once its content is known.
            Some(_) => None,
            None if parent.is_some() => Some(self.count_file(FileChange::Changed)),
            None => Some(self.count_file(FileChange::New)),
        };
        let link_key = (node.links > 1).then_some((node.device, node.inode));
        if let Some(k) = link_key
            && let Some((content, stamp)) = self.hardlinks.lock().expect("poisoned").get(&k)
        {
            let change = change.unwrap_or_else(|| self.count_file(FileChange::Unchanged));
            set_stamp(node, stamp);
            self.progress.add_bytes(node.size);
            self.progress.file_saved(path, change);
            self.progress.add_item(path);
            return Ok(Some(content.clone()));
        }
        self.progress.start_item(path);
        let file = match source::open_file(path, source::Listed { dev: node.device, ino: node.inode }) {
            Ok(f) => f,
            Err(e) => {
                self.skip(path, format!("cannot read file: {e}"));
                return Ok(None);
            }
        };
        let (reading, stamp) = match source::read_stable(&file, path, |r: &mut Take<&File>| {
            let size = r.limit();
            self.read_content(r, size, path)
        }) {
            Ok(r) => r,
            Err(Error::Io { source, .. }) => {
                self.skip(path, format!("cannot read file: {source}"));
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        let (content, digest) = match reading {
            source::Reading::Stable(c) => c,
            source::Reading::Changed(c) => {
                // Kept, but the snapshot is marked incomplete: this content may
                // never have been the file's as a whole.
                self.skip(
                    path,
                    format!(
                        "the file changed while it was read, twice; stored as read the second time ({} bytes), \
                         which may mix old and new content: back it up again when it is not being written",
                        stamp.size
                    ),
                );
                c
            }
        };
        set_stamp(node, &stamp);
        if let Some(k) = link_key {
            self.hardlinks.lock().expect("poisoned").insert(k, ((content.clone(), digest), stamp));
        }
        let change = match (change, unchanged) {
            (Some(c), _) => c,
            (None, Some(p)) if p.content == content && p.digest == Some(digest) => {
                self.count_file(FileChange::Unchanged)
            }
            (None, _) => {
                self.progress.warn(
                    path,
                    "content differs from the parent snapshot although size, mtime, ctime and inode are \
                     unchanged: the file was changed without updating its times, or the disk returned \
                     different data; the content read now is saved",
                );
                self.count_file(FileChange::Changed)
            }
        };
        self.progress.file_saved(path, change);
        self.progress.add_item(path);
        Ok(Some((content, digest)))
    }

    /// Reads, chunks and stores a file, a block at a time; the chunks of a block
    /// are hashed, compressed and sealed in parallel, while the file's digest is
    /// computed beside them. While a block is stored, the next one is read ahead
    /// if a read-ahead slot is free (`rayon::join` lets an idle worker take the
    /// read, so I/O overlaps with CPU work without extra threads); the slots bound
    /// the blocks in memory to one per worker plus [`READ_AHEAD_SLOTS`].
    /// `expected` is the size the reader should hold (a hint for buffer sizes).
    fn read_content(&self, input: impl Read + Send, expected: u64, path: &Path) -> Result<FileContent> {
        let mut reader = BlockReader::new(input, self.repo.chunker().clone(), BLOCK_BYTES, expected, &self.blocks);
        let mut digest = blake3::Hasher::new();
        let mut ids = Vec::new();
        let mut block = read_block(&mut reader, path)?;
        while !block.is_empty() {
            let slot = self.read_ahead.try_take();
            let (saved, next) = rayon::join(
                || self.save_block(&block),
                || {
                    // The digest of a large block is spread over the workers (BLAKE3
                    // hashes subtrees apart), so that this arm, which must read and cut
                    // the next block in order, is not also the one hashing every byte.
                    if block.bytes().len() >= PARALLEL_DIGEST_BYTES {
                        digest.update_rayon(block.bytes());
                    } else {
                        digest.update(block.bytes());
                    }
                    if slot.is_some() { read_block(&mut reader, path).map(Some) } else { Ok(None) }
                },
            );
            ids.extend(saved?);
            block = match next? {
                Some(next) => next,
                None => {
                    drop(block);
                    read_block(&mut reader, path)?
                }
            };
            // The slot is returned only now that the stored block is freed.
            drop(slot);
        }
        Ok((ids, Id(*digest.finalize().as_bytes())))
    }

    fn save_block(&self, block: &Block<'_>) -> Result<Vec<Id>> {
        block
            .chunks()
            .par_iter()
            .map(|c| {
                let (id, _) = self.saver.save(BlobType::Data, c)?;
                self.bytes_read.fetch_add(c.len() as u64, Ordering::Relaxed);
                self.progress.add_bytes(c.len() as u64);
                Ok(id)
            })
            .collect()
    }
}

/// The parent snapshot's listing of the directory being saved, read in name
/// order alongside it, and whether every entry saved so far equals the parent's
/// entry in the same place.
struct ParentDir<'r> {
    nodes: Option<(Id, std::iter::Peekable<TreeNodes<'r>>)>,
    same: bool,
}

impl ParentDir<'_> {
    /// The parent's entries named `names` (sorted), in their order; entries of
    /// the parent between them are passed over (the listings then differ).
    fn take<'n>(&mut self, names: impl Iterator<Item = &'n [u8]>) -> Vec<Option<Node>> {
        names
            .map(|name| {
                let (_, it) = self.nodes.as_mut()?;
                loop {
                    let ord = match it.peek()? {
                        Ok(n) => n.name.0.as_slice().cmp(name),
                        Err(_) => {
                            // A parent part that does not load: go on without the parent.
                            self.nodes = None;
                            self.same = false;
                            return None;
                        }
                    };
                    match ord {
                        std::cmp::Ordering::Less => {
                            self.same = false;
                            it.next();
                        }
                        std::cmp::Ordering::Equal => return it.next()?.ok(),
                        std::cmp::Ordering::Greater => return None,
                    }
                }
            })
            .collect()
    }
}

/// A directory's tree being written: its entries are encoded as they come, in
/// name order, and its files' Merkle leaves gathered.
struct DirWriter {
    listing: ListingWriter,
    leaves: Leaves,
}

impl DirWriter {
    /// Adds a batch of saved entries (in name order) beside the parent's entries
    /// of the same names.
    fn add_batch(
        &mut self,
        arch: &Archiver<'_>,
        results: Vec<Result<Option<Saved>>>,
        pnodes: Vec<Option<Node>>,
        parent: &mut ParentDir<'_>,
    ) -> Result<()> {
        for (r, pnode) in results.into_iter().zip(pnodes) {
            match r? {
                Some((node, below)) => {
                    if pnode.as_ref() != Some(&node) {
                        parent.same = false;
                    }
                    self.listing.push(&node, &mut |b| arch.save_tree_blob(b))?;
                    self.leaves.append(below, &arch.spill)?;
                }
                None if pnode.is_some() => parent.same = false,
                None => {}
            }
        }
        Ok(())
    }

    /// Saves the directory's tree, or reuses the parent snapshot's when every
    /// entry is unchanged (it was loaded through the index, so it is stored).
    /// Returns the tree id and the Merkle leaves of the files below, in tree order.
    fn finish(self, arch: &Archiver<'_>, parent: ParentDir<'_>) -> Result<(Id, Leaves)> {
        let leaves = self.leaves.seal(&arch.spill)?;
        if let Some((id, mut rest)) = parent.nodes
            && parent.same
            && !self.listing.is_split()
            && rest.next().is_none()
        {
            return Ok((id, leaves));
        }
        Ok((self.listing.finish(&mut |b| arch.save_tree_blob(b))?, leaves))
    }
}

/// Keeps at most [`MAX_XATTR_BYTES`] of a node's extended attributes (names and
/// values, in name order), so that no entry outgrows a tree part; returns a
/// warning naming what was left out.
fn cap_xattrs(node: &mut Node) -> Option<String> {
    let mut total = 0usize;
    let keep = node.xattrs.iter().take_while(|x| {
        total += x.name.0.len() + x.value.0.len();
        total <= MAX_XATTR_BYTES
    });
    let keep = keep.count();
    if keep == node.xattrs.len() {
        return None;
    }
    let dropped: Vec<String> = node.xattrs[keep..].iter().map(|x| x.name.display().to_string()).collect();
    node.xattrs.truncate(keep);
    Some(format!("extended attributes exceed {MAX_XATTR_BYTES} bytes in all; left out: {}", dropped.join(", ")))
}

fn read_block<'p>(reader: &mut BlockReader<'p, impl Read>, path: &Path) -> Result<Block<'p>> {
    reader.next_block().map_err(|e| Error::io(path, e))
}

/// Records in `node` the size and times its content was read with.
fn set_stamp(node: &mut Node, stamp: &source::Stamp) {
    node.size = stamp.size;
    node.mtime = stamp.mtime;
    node.ctime = stamp.ctime;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::bytes::Bytes;
    use crate::format::tree::Xattr;
    use crate::format::tree::tests::node;

    #[test]
    fn extended_attributes_beyond_the_limit_are_left_out_with_a_warning() {
        let xattr =
            |name: &str, len: usize| Xattr { name: Bytes(name.as_bytes().to_vec()), value: Bytes(vec![0xff; len]) };
        let mut n = node(b"f", NodeKind::File);
        n.xattrs = vec![xattr("user.a", 1000), xattr("user.b", 1000)];
        assert_eq!(cap_xattrs(&mut n), None);
        assert_eq!(n.xattrs.len(), 2);
        n.xattrs = vec![xattr("user.a", MAX_XATTR_BYTES / 2), xattr("user.b", MAX_XATTR_BYTES / 2), xattr("user.c", 1)];
        let warning = cap_xattrs(&mut n).unwrap();
        assert_eq!(n.xattrs.len(), 1);
        assert!(warning.contains("user.b, user.c"), "{warning}");
    }
}
