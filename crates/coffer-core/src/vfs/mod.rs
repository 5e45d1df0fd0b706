//! The read-only snapshot file system behind `coffer mount`: the layout of
//! snapshots (`snapshots/`, `ids/`, `hosts/`, `tags/`, `latest` links), inode
//! numbers, attributes, directory listings streamed part by part, extended
//! attributes and file reads through verified, cached and prefetched blob loads.
//! It knows nothing of FUSE: the binary translates. See docs/design.md#mount.

mod cache;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::error::Error;
use crate::format::pack::BlobType;
use crate::format::tree::{Node, NodeKind, Timestamp, TreeBlob};
use crate::id::Id;
use crate::repo::Repository;
use cache::Bounded;

/// An inode number.
pub type Ino = u64;
/// The mount's root directory.
pub const ROOT: Ino = 1;
const SNAPSHOTS: Ino = 2;
const IDS: Ino = 3;
const HOSTS: Ino = 4;
const TAGS: Ino = 5;
/// Inode numbers below this are the fixed directories above.
const FIRST_FREE: Ino = 16;

/// Why an operation fails; the binary maps each to an errno.
#[derive(Debug, thiserror::Error)]
pub enum VfsError {
    /// No such entry (ENOENT).
    #[error("no such entry")]
    NotFound,
    /// Not a directory (ENOTDIR).
    #[error("not a directory")]
    NotDir,
    /// Not a regular file or symlink where one is needed (EINVAL).
    #[error("not a regular file or symbolic link")]
    Invalid,
    /// No such extended attribute (ENODATA).
    #[error("no such extended attribute")]
    NoXattr,
    /// The repository could not serve the data: damage or storage trouble (EIO).
    /// Damage has been reported through the damage callback.
    #[error("{0}")]
    Io(String),
}

impl From<Error> for VfsError {
    fn from(e: Error) -> Self {
        VfsError::Io(e.to_string())
    }
}

/// What an operation returns on failure.
pub type VResult<T> = std::result::Result<T, VfsError>;

/// The kind of an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Directory.
    Dir,
    /// Regular file.
    File,
    /// Symbolic link.
    Symlink,
    /// Named pipe.
    Fifo,
    /// Character device.
    Chardev,
    /// Block device.
    Blockdev,
    /// Unix socket.
    Socket,
}

impl From<NodeKind> for Kind {
    fn from(k: NodeKind) -> Self {
        match k {
            NodeKind::Dir => Kind::Dir,
            NodeKind::File => Kind::File,
            NodeKind::Symlink => Kind::Symlink,
            NodeKind::Fifo => Kind::Fifo,
            NodeKind::Chardev => Kind::Chardev,
            NodeKind::Blockdev => Kind::Blockdev,
            NodeKind::Socket => Kind::Socket,
        }
    }
}

/// An entry's attributes, as `stat` shows them.
#[derive(Clone, Copy, Debug)]
pub struct Attr {
    /// Inode number: the same for hard links of one snapshot.
    pub ino: Ino,
    /// Kind.
    pub kind: Kind,
    /// Size in bytes (files: content length; symlinks: target length).
    pub size: u64,
    /// Permission bits with setuid, setgid and sticky.
    pub perm: u16,
    /// Link count.
    pub nlink: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Device number of a device node.
    pub rdev: u32,
    /// Modification time (also given as access time).
    pub mtime: SystemTime,
    /// Status change time as recorded.
    pub ctime: SystemTime,
}

/// One directory entry of a listing.
#[derive(Clone, Debug)]
pub struct DirEntry {
    /// Inode number (the one a lookup of the name gives).
    pub ino: Ino,
    /// Kind.
    pub kind: Kind,
    /// Name.
    pub name: Vec<u8>,
}

/// Options of the file system.
#[derive(Clone, Debug)]
pub struct VfsOptions {
    /// Bytes of decoded trees and data blobs kept in memory (`--cache-size`).
    pub cache_bytes: usize,
    /// How long the list of snapshots is trusted before it is read again.
    pub refresh: Duration,
    /// Bytes of blobs fetched ahead of a sequential reader.
    pub prefetch_bytes: u64,
    /// Threads fetching blobs ahead.
    pub prefetch_threads: usize,
    /// Owner of the directories the mount makes up (root, `snapshots`, …).
    pub uid: u32,
    /// Group of those directories.
    pub gid: u32,
}

impl Default for VfsOptions {
    fn default() -> Self {
        VfsOptions {
            cache_bytes: 256 << 20,
            refresh: Duration::from_secs(2),
            prefetch_bytes: 16 << 20,
            prefetch_threads: 4,
            uid: 0,
            gid: 0,
        }
    }
}

/// Called with a line describing damage found while serving a read.
pub type DamageReport = Box<dyn Fn(&str) + Send + Sync>;

/// A made-up entry of the layout.
enum Virt {
    /// A directory of made-up entries, sorted by name.
    Dir(Vec<(Vec<u8>, Ino)>),
    /// A `latest` link.
    Link(Vec<u8>),
    /// A snapshot's root directory.
    Root { tree: Id, time: SystemTime },
}

#[derive(Default)]
struct Layout {
    virt: HashMap<Ino, Virt>,
    snapshots: HashSet<Id>,
}

/// A looked-up entry inside a snapshot, kept while the kernel holds it: 96
/// bytes and its name, so that a kernel holding a million entries after
/// `ls -lR` costs about 150 MB (docs/design.md#mount).
struct Entry {
    /// The snapshot root directory's inode (hard links are grouped within it).
    root: Ino,
    /// The tree holding the entry (an index of [`EntryTable::trees`]), and its name there.
    dir: u32,
    /// The directory's own tree, or [`NO_TREE`].
    subtree: u32,
    lookups: u64,
    name: Box<[u8]>,
    attr: StoredAttr,
}

/// `subtree` of an entry that is not a directory.
const NO_TREE: u32 = u32::MAX;

/// [`Attr`] as an entry keeps it: without the inode number (the table's key),
/// times as seconds and nanoseconds.
#[derive(Clone, Copy)]
struct StoredAttr {
    size: u64,
    mtime: i64,
    ctime: i64,
    mtime_ns: u32,
    ctime_ns: u32,
    nlink: u32,
    uid: u32,
    gid: u32,
    rdev: u32,
    perm: u16,
    kind: Kind,
}

impl StoredAttr {
    fn of(a: &Attr, n: &Node) -> StoredAttr {
        StoredAttr {
            size: a.size,
            mtime: n.mtime.0,
            ctime: n.ctime.0,
            mtime_ns: n.mtime.1,
            ctime_ns: n.ctime.1,
            nlink: a.nlink,
            uid: a.uid,
            gid: a.gid,
            rdev: a.rdev,
            perm: a.perm,
            kind: a.kind,
        }
    }

    fn attr(&self, ino: Ino) -> Attr {
        Attr {
            ino,
            kind: self.kind,
            size: self.size,
            perm: self.perm,
            nlink: self.nlink,
            uid: self.uid,
            gid: self.gid,
            rdev: self.rdev,
            mtime: time(Timestamp(self.mtime, self.mtime_ns)),
            ctime: time(Timestamp(self.ctime, self.ctime_ns)),
        }
    }
}

/// The entries the kernel holds, and the trees they name, each tree id kept
/// once however many entries name it (directories are few beside files). The
/// trees are kept for the life of the mount: at most one per distinct directory
/// looked into or looked up.
#[derive(Default)]
struct EntryTable {
    map: HashMap<Ino, Entry>,
    trees: Vec<Id>,
    tree_index: HashMap<Id, u32>,
}

impl EntryTable {
    fn intern(&mut self, id: Id) -> u32 {
        if let Some(&i) = self.tree_index.get(&id) {
            return i;
        }
        // More distinct trees than fit in a u32 cannot be looked up in one mount's
        // life on any machine that runs it; the last index is never handed out.
        let i = u32::try_from(self.trees.len()).unwrap_or(NO_TREE - 1).min(NO_TREE - 1);
        self.trees.push(id);
        self.tree_index.insert(id, i);
        i
    }

    fn tree(&self, i: u32) -> Option<Id> {
        self.trees.get(i as usize).copied()
    }
}

/// A listing being read.
struct DirHandle {
    ino: Ino,
    cursor: Option<Cursor>,
    /// Offset of the next entry the cursor yields.
    pos: u64,
    pending: Option<DirEntry>,
}

/// An open file: where each blob of its content lies.
struct OpenFile {
    name: String,
    /// Per blob: id, offset in the file, length.
    blobs: Vec<(Id, u64, u32)>,
    size: u64,
    /// End of the last read, to spot sequential readers.
    last_end: AtomicU64,
    /// Index of the blob up to which prefetches were started.
    prefetched: AtomicU64,
}

/// A blob load in progress, which other readers wait for.
#[derive(Default)]
struct Flight {
    done: Mutex<Option<Result<Arc<Vec<u8>>, String>>>,
    cv: Condvar,
}

struct Inner {
    repo: Arc<Repository>,
    opts: VfsOptions,
    on_damage: DamageReport,
    layout: RwLock<Layout>,
    refreshed: Mutex<Option<Instant>>,
    entries: Mutex<EntryTable>,
    dirs: Mutex<HashMap<u64, Arc<Mutex<DirHandle>>>>,
    files: Mutex<HashMap<u64, Arc<OpenFile>>>,
    next_fh: AtomicU64,
    trees: Mutex<Bounded<TreeBlob>>,
    blobs: Mutex<Bounded<Vec<u8>>>,
    flights: Mutex<HashMap<Id, Arc<Flight>>>,
    reported: Mutex<HashSet<Id>>,
    pool: rayon::ThreadPool,
}

/// The snapshot file system.
pub struct Vfs {
    inner: Arc<Inner>,
}

fn hash_ino(parts: &[&[u8]]) -> Ino {
    let mut h = blake3::Hasher::new();
    for p in parts {
        h.update(&(p.len() as u64).to_le_bytes());
        h.update(p);
    }
    let b = h.finalize();
    let n = u64::from_le_bytes(b.as_bytes()[..8].try_into().expect("8 bytes"));
    // Keep clear of the fixed numbers (and of 0 and u64::MAX, which mean nothing).
    (n >> 1).max(FIRST_FREE)
}

fn time(t: Timestamp) -> SystemTime {
    if t.0 >= 0 {
        UNIX_EPOCH + Duration::new(t.0 as u64, t.1.min(999_999_999))
    } else {
        UNIX_EPOCH.checked_sub(Duration::from_secs(t.0.unsigned_abs())).unwrap_or(UNIX_EPOCH)
    }
}

/// A directory's entries streamed part by part from cached tree blobs.
struct Cursor {
    splits: Vec<(Arc<TreeBlob>, usize)>,
    part: Option<(Arc<TreeBlob>, usize)>,
}

impl Inner {
    fn damage(&self, id: &Id, line: String) {
        let mut seen = self.reported.lock().expect("poisoned");
        if seen.len() < 100_000 && seen.insert(*id) {
            (self.on_damage)(&line);
        }
    }

    fn report_bad_copies(&self) {
        for line in self.repo.take_bad_copies() {
            (self.on_damage)(&line);
        }
    }

    fn tree_part(&self, id: &Id) -> VResult<Arc<TreeBlob>> {
        if let Some(t) = self.trees.lock().expect("poisoned").get(id) {
            return Ok(t);
        }
        let data = self.repo.load_tree_blob(id).inspect_err(|e| self.damage(id, e.to_string()))?;
        self.report_bad_copies();
        let blob = TreeBlob::decode(&data).map_err(|e| {
            let e = Error::corrupt(format!("tree {}", id.short()), e);
            self.damage(id, e.to_string());
            VfsError::from(e)
        })?;
        let blob = Arc::new(blob);
        // Decoded nodes take about twice their JSON.
        self.trees.lock().expect("poisoned").insert(*id, blob.clone(), data.len() * 2 + 64);
        Ok(blob)
    }

    fn cursor(&self, tree: &Id) -> VResult<Cursor> {
        let first = self.tree_part(tree)?;
        Ok(match &*first {
            TreeBlob::Listing(_) => Cursor { splits: Vec::new(), part: Some((first, 0)) },
            TreeBlob::Split(_) => Cursor { splits: vec![(first, 0)], part: None },
        })
    }

    /// The next entry of `c`; with `skip_below`, whole listing parts whose last
    /// name sorts before it are passed without being walked.
    fn next_node(&self, c: &mut Cursor, skip_below: Option<&[u8]>) -> VResult<Option<Node>> {
        loop {
            if let Some((part, i)) = &mut c.part {
                if let TreeBlob::Listing(nodes) = &**part
                    && let Some(n) = nodes.get(*i)
                {
                    *i += 1;
                    return Ok(Some(n.clone()));
                }
                c.part = None;
            }
            let Some((split, i)) = c.splits.last_mut() else { return Ok(None) };
            let TreeBlob::Split(ids) = &**split else { return Err(VfsError::Io("split listing expected".into())) };
            let Some(id) = ids.get(*i).copied() else {
                c.splits.pop();
                continue;
            };
            *i += 1;
            let blob = self.tree_part(&id)?;
            match &*blob {
                TreeBlob::Split(_) if c.splits.len() >= crate::format::tree::MAX_SPLIT_DEPTH => {
                    let e = Error::corrupt(format!("tree {}", id.short()), "split listings nest too deeply");
                    self.damage(&id, e.to_string());
                    return Err(e.into());
                }
                TreeBlob::Split(_) => c.splits.push((blob, 0)),
                TreeBlob::Listing(nodes) => {
                    let start = match (skip_below, nodes.last()) {
                        (Some(name), Some(last)) if last.name.0.as_slice() < name => nodes.len(),
                        (Some(name), _) => nodes.partition_point(|n| n.name.0.as_slice() < name),
                        _ => 0,
                    };
                    c.part = Some((blob, start));
                }
            }
        }
    }

    /// The entry `name` of tree `dir`.
    fn find(&self, dir: &Id, name: &[u8]) -> VResult<Option<Node>> {
        let mut c = self.cursor(dir)?;
        if let Some((part, i)) = &mut c.part
            && let TreeBlob::Listing(nodes) = &**part
        {
            *i = nodes.partition_point(|n| n.name.0.as_slice() < name);
        }
        while let Some(n) = self.next_node(&mut c, Some(name))? {
            match n.name.0.as_slice().cmp(name) {
                std::cmp::Ordering::Less => {}
                std::cmp::Ordering::Equal => return Ok(Some(n)),
                std::cmp::Ordering::Greater => return Ok(None),
            }
        }
        Ok(None)
    }

    fn node_ino(parent: Ino, root: Ino, n: &Node) -> Ino {
        if n.kind != NodeKind::Dir && n.links > 1 && (n.inode != 0 || n.device != 0) {
            hash_ino(&[b"link", &root.to_le_bytes(), &n.device.to_le_bytes(), &n.inode.to_le_bytes()])
        } else {
            hash_ino(&[b"entry", &parent.to_le_bytes(), &n.name.0])
        }
    }

    fn node_attr(ino: Ino, n: &Node) -> Attr {
        let kind = Kind::from(n.kind);
        Attr {
            ino,
            kind,
            size: match kind {
                Kind::File => n.size,
                Kind::Symlink => n.target.as_ref().map_or(0, |t| t.0.len() as u64),
                _ => 0,
            },
            perm: (n.mode & 0o7777) as u16,
            nlink: match kind {
                Kind::Dir => 2,
                _ => n.links.clamp(1, u32::MAX as u64) as u32,
            },
            uid: n.uid,
            gid: n.gid,
            rdev: n.rdev as u32,
            mtime: time(n.mtime),
            ctime: time(n.ctime),
        }
    }

    fn virt_attr(&self, ino: Ino, v: &Virt) -> Attr {
        let (kind, size, perm, mtime) = match v {
            Virt::Dir(_) => (Kind::Dir, 0, 0o555, UNIX_EPOCH),
            Virt::Link(t) => (Kind::Symlink, t.len() as u64, 0o777, UNIX_EPOCH),
            Virt::Root { time, .. } => (Kind::Dir, 0, 0o555, *time),
        };
        Attr {
            ino,
            kind,
            size,
            perm,
            nlink: if kind == Kind::Dir { 2 } else { 1 },
            uid: self.opts.uid,
            gid: self.opts.gid,
            rdev: 0,
            mtime,
            ctime: mtime,
        }
    }

    /// Reads the list of snapshots again when it is older than the refresh time.
    fn refresh(&self) -> VResult<()> {
        let mut at = self.refreshed.lock().expect("poisoned");
        if at.is_some_and(|t| t.elapsed() < self.opts.refresh) {
            return Ok(());
        }
        let (snaps, _damaged) = self.repo.snapshots()?;
        let ids: HashSet<Id> = snaps.iter().map(|(id, _)| *id).collect();
        let known = self.layout.read().expect("poisoned").snapshots.clone();
        if at.is_some() && ids.iter().any(|id| !known.contains(id)) {
            // New snapshots bring new packs: their index files are read too.
            self.repo.load_index()?;
        }
        *self.layout.write().expect("poisoned") = build_layout(&snaps);
        *at = Some(Instant::now());
        Ok(())
    }

    /// Loads (or waits for, or finds cached) verified data blob `id`.
    fn blob(self: &Arc<Self>, id: &Id, file: &str) -> Result<Arc<Vec<u8>>, String> {
        if let Some(b) = self.blobs.lock().expect("poisoned").get(id) {
            return Ok(b);
        }
        let (flight, leader) = {
            let mut f = self.flights.lock().expect("poisoned");
            match f.get(id) {
                Some(fl) => (fl.clone(), false),
                None => {
                    let fl = Arc::new(Flight::default());
                    f.insert(*id, fl.clone());
                    (fl, true)
                }
            }
        };
        if !leader {
            let mut done = flight.done.lock().expect("poisoned");
            while done.is_none() {
                done = flight.cv.wait(done).expect("poisoned");
            }
            return done.clone().expect("set");
        }
        let r = match self.repo.load_blob(BlobType::Data, id) {
            Ok(data) => {
                let data = Arc::new(data);
                self.blobs.lock().expect("poisoned").insert(*id, data.clone(), data.len() + 64);
                Ok(data)
            }
            Err(e) => {
                self.damage(id, format!("file {file}: {e}; reads of it fail"));
                Err(e.to_string())
            }
        };
        self.report_bad_copies();
        *flight.done.lock().expect("poisoned") = Some(r.clone());
        flight.cv.notify_all();
        self.flights.lock().expect("poisoned").remove(id);
        r
    }
}

/// The made-up part of the tree for `snaps` (oldest first).
fn build_layout(snaps: &[(Id, crate::format::snapshot::Snapshot)]) -> Layout {
    let mut virt = HashMap::new();
    let mut names: Vec<(Vec<u8>, usize)> = Vec::new();
    let mut used = HashSet::new();
    for (i, (_, s)) in snaps.iter().enumerate() {
        let base = humantime::format_rfc3339_seconds(s.system_time()).to_string();
        let mut name = base.clone();
        let mut n = 1;
        while !used.insert(name.clone()) {
            name = format!("{base}-{n}");
            n += 1;
        }
        names.push((name.into_bytes(), i));
    }
    let root = |tag: &[u8], extra: &[u8], i: usize| hash_ino(&[b"root", tag, extra, &snaps[i].0.0]);
    let add_root = |virt: &mut HashMap<Ino, Virt>, ino: Ino, i: usize| {
        virt.insert(ino, Virt::Root { tree: snaps[i].1.tree, time: snaps[i].1.system_time() });
    };
    // A directory of snapshots (with a `latest` link) under `tag`/`extra`.
    let group = |virt: &mut HashMap<Ino, Virt>, tag: &[u8], extra: &[u8], members: &[&(Vec<u8>, usize)]| {
        let mut children = Vec::new();
        for (name, i) in members {
            let ino = root(tag, extra, *i);
            add_root(virt, ino, *i);
            children.push((name.clone(), ino));
        }
        if let Some((newest, _)) = members.iter().max_by_key(|(_, i)| snaps[*i].1.system_time()) {
            let ino = hash_ino(&[b"latest", tag, extra]);
            virt.insert(ino, Virt::Link(newest.clone()));
            children.push((b"latest".to_vec(), ino));
        }
        children.sort();
        children.dedup_by(|a, b| a.0 == b.0);
        children
    };
    let all: Vec<&(Vec<u8>, usize)> = names.iter().collect();
    let snapshots = group(&mut virt, b"snapshots", b"", &all);
    virt.insert(SNAPSHOTS, Virt::Dir(snapshots));
    let mut ids = Vec::new();
    for (_, i) in &names {
        let ino = root(b"ids", b"", *i);
        add_root(&mut virt, ino, *i);
        ids.push((snaps[*i].0.short().into_bytes(), ino));
    }
    ids.sort();
    virt.insert(IDS, Virt::Dir(ids));
    let clean = |s: &str| {
        let s = s.replace('/', "_");
        if s.is_empty() || s == "." || s == ".." { format!("_{s}") } else { s }
    };
    for (top, tag, keys) in [
        (HOSTS, &b"hosts"[..], snaps.iter().map(|(_, s)| vec![clean(&s.hostname)]).collect::<Vec<_>>()),
        (TAGS, &b"tags"[..], snaps.iter().map(|(_, s)| s.tags.iter().map(|t| clean(t)).collect()).collect()),
    ] {
        let mut by: std::collections::BTreeMap<String, Vec<&(Vec<u8>, usize)>> = Default::default();
        for entry in &names {
            for k in &keys[entry.1] {
                by.entry(k.clone()).or_default().push(entry);
            }
        }
        let mut children = Vec::new();
        for (k, members) in by {
            let ino = hash_ino(&[b"group", tag, k.as_bytes()]);
            let list = group(&mut virt, tag, k.as_bytes(), &members);
            virt.insert(ino, Virt::Dir(list));
            children.push((k.into_bytes(), ino));
        }
        virt.insert(top, Virt::Dir(children));
    }
    virt.insert(
        ROOT,
        Virt::Dir(vec![
            (b"hosts".to_vec(), HOSTS),
            (b"ids".to_vec(), IDS),
            (b"snapshots".to_vec(), SNAPSHOTS),
            (b"tags".to_vec(), TAGS),
        ]),
    );
    Layout { virt, snapshots: snaps.iter().map(|(id, _)| *id).collect() }
}

impl Vfs {
    /// A file system over `repo` (its index loaded). `on_damage` receives a line
    /// for each damaged object met while serving reads.
    pub fn new(repo: Arc<Repository>, opts: VfsOptions, on_damage: DamageReport) -> crate::Result<Vfs> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(opts.prefetch_threads.max(1))
            .thread_name(|i| format!("coffer-prefetch-{i}"))
            .build()
            .map_err(|e| Error::corrupt("prefetch threads", e.to_string()))?;
        let tree_bytes = opts.cache_bytes / 4;
        let blob_bytes = opts.cache_bytes - tree_bytes;
        let inner = Arc::new(Inner {
            repo,
            opts,
            on_damage,
            layout: RwLock::new(Layout::default()),
            refreshed: Mutex::new(None),
            entries: Mutex::new(EntryTable::default()),
            dirs: Mutex::new(HashMap::new()),
            files: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            trees: Mutex::new(Bounded::new(tree_bytes)),
            blobs: Mutex::new(Bounded::new(blob_bytes)),
            flights: Mutex::new(HashMap::new()),
            reported: Mutex::new(HashSet::new()),
            pool,
        });
        inner.refresh().map_err(|e| Error::corrupt("list of snapshots", e.to_string()))?;
        Ok(Vfs { inner })
    }

    /// Whether `ino` is made up by the layout (its attributes may change as
    /// snapshots come and go), rather than part of a snapshot (immutable).
    pub fn is_layout(&self, ino: Ino) -> bool {
        ino < FIRST_FREE || self.inner.layout.read().expect("poisoned").virt.contains_key(&ino)
    }

    /// Entries the kernel holds (looked up and not forgotten).
    pub fn entries_held(&self) -> usize {
        self.inner.entries.lock().expect("poisoned").map.len()
    }

    fn dir_tree(&self, ino: Ino) -> VResult<Option<(Id, Ino)>> {
        if let Some(v) = self.inner.layout.read().expect("poisoned").virt.get(&ino) {
            return match v {
                Virt::Root { tree, .. } => Ok(Some((*tree, ino))),
                Virt::Dir(_) => Ok(None),
                Virt::Link(_) => Err(VfsError::NotDir),
            };
        }
        let table = self.inner.entries.lock().expect("poisoned");
        match table.map.get(&ino) {
            Some(e) => table.tree(e.subtree).map(|t| Some((t, e.root))).ok_or(VfsError::NotDir),
            None => Err(VfsError::NotFound),
        }
    }

    /// Looks `name` up in directory `parent`; the kernel now holds one more
    /// reference to the result (released with [`Vfs::forget`]).
    pub fn lookup(&self, parent: Ino, name: &[u8]) -> VResult<Attr> {
        if parent < FIRST_FREE {
            self.inner.refresh()?;
        }
        {
            let layout = self.inner.layout.read().expect("poisoned");
            if let Some(Virt::Dir(children)) = layout.virt.get(&parent) {
                let (_, ino) = children.iter().find(|(n, _)| n == name).ok_or(VfsError::NotFound)?;
                let v = layout.virt.get(ino).ok_or(VfsError::NotFound)?;
                return Ok(self.inner.virt_attr(*ino, v));
            }
        }
        let (tree, root) = self.dir_tree(parent)?.ok_or(VfsError::NotFound)?;
        let node = self.inner.find(&tree, name)?.ok_or(VfsError::NotFound)?;
        let ino = Inner::node_ino(parent, root, &node);
        let attr = Inner::node_attr(ino, &node);
        let mut table = self.inner.entries.lock().expect("poisoned");
        if let Some(e) = table.map.get_mut(&ino) {
            e.lookups += 1;
            return Ok(attr);
        }
        let dir = table.intern(tree);
        let subtree = match node.subtree.filter(|_| node.kind == NodeKind::Dir) {
            Some(t) => table.intern(t),
            None => NO_TREE,
        };
        let stored = StoredAttr::of(&attr, &node);
        table.map.insert(ino, Entry { root, dir, subtree, lookups: 1, name: node.name.0.into(), attr: stored });
        Ok(attr)
    }

    /// The kernel dropped `n` references to `ino`.
    pub fn forget(&self, ino: Ino, n: u64) {
        let mut table = self.inner.entries.lock().expect("poisoned");
        if let Some(e) = table.map.get_mut(&ino) {
            e.lookups = e.lookups.saturating_sub(n);
            if e.lookups == 0 {
                table.map.remove(&ino);
            }
        }
    }

    /// The attributes of `ino`.
    pub fn getattr(&self, ino: Ino) -> VResult<Attr> {
        if ino < FIRST_FREE {
            self.inner.refresh()?;
        }
        if let Some(v) = self.inner.layout.read().expect("poisoned").virt.get(&ino) {
            return Ok(self.inner.virt_attr(ino, v));
        }
        self.inner.entries.lock().expect("poisoned").map.get(&ino).map(|e| e.attr.attr(ino)).ok_or(VfsError::NotFound)
    }

    fn node(&self, ino: Ino) -> VResult<Node> {
        let (dir, name) = {
            let table = self.inner.entries.lock().expect("poisoned");
            let e = table.map.get(&ino).ok_or(VfsError::NotFound)?;
            (table.tree(e.dir).ok_or(VfsError::NotFound)?, e.name.clone())
        };
        self.inner.find(&dir, &name)?.ok_or(VfsError::NotFound)
    }

    /// The target of symlink `ino`.
    pub fn readlink(&self, ino: Ino) -> VResult<Vec<u8>> {
        if let Some(v) = self.inner.layout.read().expect("poisoned").virt.get(&ino) {
            return match v {
                Virt::Link(t) => Ok(t.clone()),
                _ => Err(VfsError::Invalid),
            };
        }
        self.node(ino)?.target.map(|t| t.0).ok_or(VfsError::Invalid)
    }

    /// The value of extended attribute `name` of `ino`.
    pub fn getxattr(&self, ino: Ino, name: &[u8]) -> VResult<Vec<u8>> {
        if self.is_layout(ino) {
            return Err(VfsError::NoXattr);
        }
        let node = self.node(ino)?;
        node.xattrs.into_iter().find(|x| x.name.0 == name).map(|x| x.value.0).ok_or(VfsError::NoXattr)
    }

    /// The names of the extended attributes of `ino`, each followed by a NUL.
    pub fn listxattr(&self, ino: Ino) -> VResult<Vec<u8>> {
        if self.is_layout(ino) {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        for x in self.node(ino)?.xattrs {
            out.extend_from_slice(&x.name.0);
            out.push(0);
        }
        Ok(out)
    }

    /// Opens directory `ino` for listing; returns a handle.
    pub fn opendir(&self, ino: Ino) -> VResult<u64> {
        if ino < FIRST_FREE {
            self.inner.refresh()?;
        }
        self.dir_tree(ino)?;
        let fh = self.inner.next_fh.fetch_add(1, Ordering::Relaxed);
        let h = DirHandle { ino, cursor: None, pos: 0, pending: None };
        self.inner.dirs.lock().expect("poisoned").insert(fh, Arc::new(Mutex::new(h)));
        Ok(fh)
    }

    /// Lists directory handle `fh` from `offset` (0 first; each entry's offset
    /// is the one to continue after it). `add` takes an entry and its offset and
    /// returns false when it can take no more. `.` and `..` are left to the caller.
    pub fn readdir(&self, fh: u64, offset: u64, add: &mut dyn FnMut(&DirEntry, u64) -> bool) -> VResult<()> {
        let h = self.inner.dirs.lock().expect("poisoned").get(&fh).cloned().ok_or(VfsError::NotFound)?;
        let mut h = h.lock().expect("poisoned");
        let ino = h.ino;
        {
            let layout = self.inner.layout.read().expect("poisoned");
            if let Some(Virt::Dir(children)) = layout.virt.get(&ino) {
                for (i, (name, child)) in children.iter().enumerate().skip(offset as usize) {
                    let kind = match layout.virt.get(child) {
                        Some(Virt::Link(_)) => Kind::Symlink,
                        _ => Kind::Dir,
                    };
                    if !add(&DirEntry { ino: *child, kind, name: name.clone() }, i as u64 + 1) {
                        break;
                    }
                }
                return Ok(());
            }
        }
        let (tree, root) = self.dir_tree(ino)?.ok_or(VfsError::NotFound)?;
        if h.cursor.is_none() || h.pos != offset {
            // A new listing, or a seek: start again and skip to `offset`.
            h.cursor = Some(self.inner.cursor(&tree)?);
            h.pending = None;
            h.pos = 0;
            while h.pos < offset {
                let c = h.cursor.as_mut().expect("set");
                if self.inner.next_node(c, None)?.is_none() {
                    return Ok(());
                }
                h.pos += 1;
            }
        }
        loop {
            let entry = match h.pending.take() {
                Some(e) => e,
                None => {
                    let c = h.cursor.as_mut().expect("set");
                    let Some(n) = self.inner.next_node(c, None)? else { return Ok(()) };
                    DirEntry { ino: Inner::node_ino(ino, root, &n), kind: n.kind.into(), name: n.name.0 }
                }
            };
            if !add(&entry, h.pos + 1) {
                h.pending = Some(entry);
                return Ok(());
            }
            h.pos += 1;
        }
    }

    /// Closes a directory handle.
    pub fn releasedir(&self, fh: u64) {
        self.inner.dirs.lock().expect("poisoned").remove(&fh);
    }

    /// Opens file `ino` for reading; returns a handle.
    pub fn open(&self, ino: Ino) -> VResult<u64> {
        if self.is_layout(ino) {
            return Err(VfsError::Invalid);
        }
        let node = self.node(ino)?;
        if node.kind != NodeKind::File {
            return Err(VfsError::Invalid);
        }
        let name = String::from_utf8_lossy(&node.name.0).into_owned();
        let content = self.inner.repo.resolve_content(&node, &mut |_| {}).inspect_err(|e| {
            let id = node.content_parts.first().copied().unwrap_or_default();
            self.inner.damage(&id, format!("file {name}: {e}; reads of it fail"));
        })?;
        let mut blobs = Vec::with_capacity(content.len());
        let mut offset = 0u64;
        {
            let idx = self.inner.repo.index();
            for id in content {
                match idx.get(&id) {
                    Some((e, _)) if e.entry.blob_type == BlobType::Data => {
                        blobs.push((id, offset, e.entry.raw_length));
                        offset += e.entry.raw_length as u64;
                    }
                    _ => {
                        drop(idx);
                        let e = Error::corrupt(format!("data blob {} of file {name}", id.short()), "not in any index");
                        self.inner.damage(&id, format!("{e}; reads of it fail"));
                        return Err(e.into());
                    }
                }
            }
        }
        let file =
            OpenFile { name, blobs, size: offset, last_end: AtomicU64::new(u64::MAX), prefetched: AtomicU64::new(0) };
        let fh = self.inner.next_fh.fetch_add(1, Ordering::Relaxed);
        self.inner.files.lock().expect("poisoned").insert(fh, Arc::new(file));
        Ok(fh)
    }

    /// Reads up to `size` bytes at `offset` of open file `fh`. Every byte comes
    /// from a verified blob; a blob that does not load fails the read.
    pub fn read(&self, fh: u64, offset: u64, size: u32) -> VResult<Vec<u8>> {
        let f = self.inner.files.lock().expect("poisoned").get(&fh).cloned().ok_or(VfsError::NotFound)?;
        let end = offset.saturating_add(size as u64).min(f.size);
        let mut out = Vec::with_capacity(end.saturating_sub(offset) as usize);
        let mut i = f.blobs.partition_point(|(_, start, len)| start + *len as u64 <= offset);
        let first = i;
        let mut pos = offset;
        while pos < end {
            let Some(&(id, start, len)) = f.blobs.get(i) else { break };
            let data = self.inner.blob(&id, &f.name).map_err(VfsError::Io)?;
            if data.len() != len as usize {
                return Err(VfsError::Io(format!("data blob {} of file {}: wrong length", id.short(), f.name)));
            }
            let from = (pos - start) as usize;
            let to = ((end - start) as usize).min(data.len());
            out.extend_from_slice(&data[from..to]);
            pos = start + to as u64;
            i += 1;
        }
        // A reader going on from where it stopped gets the next blobs fetched ahead.
        let previous_end = f.last_end.swap(end, Ordering::Relaxed);
        if offset == 0 || previous_end == offset {
            self.prefetch(&f, first);
        }
        Ok(out)
    }

    fn prefetch(&self, f: &Arc<OpenFile>, from: usize) {
        let mut bytes = 0u64;
        let mut stop = from;
        while stop < f.blobs.len() && bytes < self.inner.opts.prefetch_bytes {
            bytes += f.blobs[stop].2 as u64;
            stop += 1;
        }
        let done = f.prefetched.load(Ordering::Relaxed) as usize;
        let start = from.max(done);
        if start >= stop
            || f.prefetched.compare_exchange(done as u64, stop as u64, Ordering::Relaxed, Ordering::Relaxed).is_err()
        {
            return;
        }
        for &(id, _, _) in &f.blobs[start..stop] {
            let inner = self.inner.clone();
            let file = f.clone();
            self.inner.pool.spawn(move || {
                let _ = inner.blob(&id, &file.name);
            });
        }
    }

    /// Closes a file handle.
    pub fn release(&self, fh: u64) {
        self.inner.files.lock().expect("poisoned").remove(&fh);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{TestTree, test_repo};

    #[test]
    fn entries_are_compact_and_give_back_what_lookup_gave() {
        assert!(std::mem::size_of::<Entry>() <= 96, "an entry is {} bytes", std::mem::size_of::<Entry>());
        let t = test_repo();
        let both = TestTree::new().file("b", &[b"world!"]);
        let tree = TestTree::new().file("a", &[b"hello"]).dir("d", both.clone()).dir("e", both);
        let (sid, _) = t.snapshot(&tree);
        let vfs = Vfs::new(Arc::new(t.repo), VfsOptions::default(), Box::new(|_| {})).unwrap();
        let root = vfs.lookup(IDS, sid.short().as_bytes()).unwrap();
        let a = vfs.lookup(root.ino, b"a").unwrap();
        let (d, e) = (vfs.lookup(root.ino, b"d").unwrap(), vfs.lookup(root.ino, b"e").unwrap());
        let (db, eb) = (vfs.lookup(d.ino, b"b").unwrap(), vfs.lookup(e.ino, b"b").unwrap());
        assert_eq!((a.kind, a.size, db.size), (Kind::File, 5, 6));
        assert_ne!(db.ino, eb.ino, "one name in two directories is two entries");
        for got in [a, d, db, eb] {
            let back = vfs.getattr(got.ino).unwrap();
            assert_eq!(
                (back.ino, back.kind, back.size, back.perm, back.nlink, back.uid, back.gid, back.mtime, back.ctime),
                (got.ino, got.kind, got.size, got.perm, got.nlink, got.uid, got.gid, got.mtime, got.ctime)
            );
        }
        // d and e hold the same tree: it is kept once.
        {
            let table = vfs.inner.entries.lock().unwrap();
            let (td, te) = (&table.map[&d.ino], &table.map[&e.ino]);
            assert_eq!(td.subtree, te.subtree);
            assert_eq!(table.map[&db.ino].dir, table.map[&eb.ino].dir);
        }
        // Looked up twice, forgotten twice: gone.
        vfs.lookup(root.ino, b"a").unwrap();
        let held = vfs.entries_held();
        vfs.forget(a.ino, 1);
        assert_eq!(vfs.entries_held(), held);
        vfs.forget(a.ino, 1);
        assert_eq!(vfs.entries_held(), held - 1);
        assert!(matches!(vfs.getattr(a.ino), Err(VfsError::NotFound)));
        assert!(matches!(vfs.lookup(a.ino, b"x"), Err(VfsError::NotFound)));
    }
}
