//! The read-only snapshot file system behind `coffer mount`: the layout of
//! snapshots (`snapshots/`, `ids/`, `hosts/`, `tags/`, `latest` links), inode
//! numbers, attributes, directory listings streamed part by part, extended
//! attributes and file reads through verified, cached and prefetched blob loads.
//! It knows nothing of FUSE: the binary translates. See docs/design.md#mount.

pub mod access;
mod cache;
mod inodes;
mod layout;

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
pub use inodes::Held;
use inodes::{Keep, Leaf, Slots, position, positional};
use layout::{Layout, Virt, build_layout};

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

/// How a listing is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listing {
    /// Names, inode numbers and kinds.
    Names,
    /// Attributes too, each entry counting as a lookup (FUSE `readdirplus`).
    Plus,
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

/// A listing being read.
struct DirHandle {
    ino: Ino,
    /// The directory's slot (snapshot directories; kept while the handle is open).
    slot: Option<u32>,
    cursor: Option<Cursor>,
    /// Offset of the next entry the cursor yields.
    pos: u64,
    pending: Option<(DirEntry, NodeRef)>,
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
    slots: Mutex<Slots>,
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

/// One entry of a decoded listing part, held without copying it.
#[derive(Clone)]
struct NodeRef {
    part: Arc<TreeBlob>,
    index: usize,
}

impl NodeRef {
    fn new(part: Arc<TreeBlob>, index: usize) -> Option<NodeRef> {
        match &*part {
            TreeBlob::Listing(nodes) if index < nodes.len() => Some(NodeRef { part, index }),
            _ => None,
        }
    }

    fn node(&self) -> &Node {
        match &*self.part {
            TreeBlob::Listing(nodes) => &nodes[self.index],
            // `new` only makes references into listings.
            TreeBlob::Split(_) => unreachable!("a node reference into a split listing"),
        }
    }
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

    /// The next listing part of a split listing walk, with its id.
    fn next_part(&self, splits: &mut Vec<(Arc<TreeBlob>, usize)>) -> VResult<Option<(Id, Arc<TreeBlob>)>> {
        loop {
            let Some((split, i)) = splits.last_mut() else { return Ok(None) };
            let TreeBlob::Split(ids) = &**split else { return Err(VfsError::Io("split listing expected".into())) };
            let Some(id) = ids.get(*i).copied() else {
                splits.pop();
                continue;
            };
            *i += 1;
            let blob = self.tree_part(&id)?;
            match &*blob {
                TreeBlob::Split(_) if splits.len() >= crate::format::tree::MAX_SPLIT_DEPTH => {
                    let e = Error::corrupt(format!("tree {}", id.short()), "split listings nest too deeply");
                    self.damage(&id, e.to_string());
                    return Err(e.into());
                }
                TreeBlob::Split(_) => splits.push((blob, 0)),
                TreeBlob::Listing(_) => return Ok(Some((id, blob))),
            }
        }
    }

    /// The next entry of `c`.
    fn next_node(&self, c: &mut Cursor) -> VResult<Option<NodeRef>> {
        loop {
            if let Some((part, i)) = &mut c.part {
                if let Some(n) = NodeRef::new(part.clone(), *i) {
                    *i += 1;
                    return Ok(Some(n));
                }
                c.part = None;
            }
            match self.next_part(&mut c.splits)? {
                Some((_, blob)) => c.part = Some((blob, 0)),
                None => return Ok(None),
            }
        }
    }

    /// The listing parts of split listing `top`, each with the position of its
    /// first entry and its first name: what locating an entry by name or by
    /// position needs without walking the directory again.
    fn leaves(&self, top: Arc<TreeBlob>) -> VResult<Vec<Leaf>> {
        let mut out = Vec::new();
        let mut start = 0u64;
        let mut splits = vec![(top, 0)];
        while let Some((id, blob)) = self.next_part(&mut splits)? {
            if let TreeBlob::Listing(nodes) = &*blob
                && let Some(first) = nodes.first()
            {
                out.push(Leaf { id, start, first: first.name.0.clone().into() });
                start += nodes.len() as u64;
            }
        }
        Ok(out)
    }

    /// The listing parts of the directory in `slot`, found once and kept with it.
    fn slot_leaves(&self, slot: u32, top: Arc<TreeBlob>) -> VResult<Arc<Vec<Leaf>>> {
        if let Some(l) = self.slots.lock().expect("poisoned").get(slot).and_then(|s| s.leaves.clone()) {
            return Ok(l);
        }
        let leaves = Arc::new(self.leaves(top)?);
        if let Some(s) = self.slots.lock().expect("poisoned").get_mut(slot) {
            s.leaves = Some(leaves.clone());
        }
        Ok(leaves)
    }

    /// The tree and snapshot root of the directory in `slot`.
    fn slot_dir(&self, slot: u32) -> VResult<(Id, Ino)> {
        self.slots.lock().expect("poisoned").get(slot).map(|s| (s.tree, s.root)).ok_or(VfsError::NotFound)
    }

    /// The entry `name` of the directory in `slot`, with its position.
    fn find(&self, slot: u32, name: &[u8]) -> VResult<Option<(u64, NodeRef)>> {
        let (tree, _) = self.slot_dir(slot)?;
        let top = self.tree_part(&tree)?;
        let (start, part) = match &*top {
            TreeBlob::Listing(_) => (0, top),
            TreeBlob::Split(_) => {
                let leaves = self.slot_leaves(slot, top)?;
                let i = leaves.partition_point(|l| &*l.first <= name);
                let Some(leaf) = i.checked_sub(1).and_then(|i| leaves.get(i)) else { return Ok(None) };
                (leaf.start, self.tree_part(&leaf.id)?)
            }
        };
        let TreeBlob::Listing(nodes) = &*part else { return Ok(None) };
        let i = nodes.partition_point(|n| n.name.0.as_slice() < name);
        Ok(NodeRef::new(part.clone(), i).filter(|n| n.node().name.0 == name).map(|n| (start + i as u64, n)))
    }

    /// The entry at `pos` of the directory in `slot`.
    fn node_at(&self, slot: u32, pos: u64) -> VResult<NodeRef> {
        let (tree, _) = self.slot_dir(slot)?;
        let top = self.tree_part(&tree)?;
        let (start, part) = match &*top {
            TreeBlob::Listing(_) => (0, top),
            TreeBlob::Split(_) => {
                let leaves = self.slot_leaves(slot, top)?;
                let i = leaves.partition_point(|l| l.start <= pos);
                let leaf = i.checked_sub(1).and_then(|i| leaves.get(i)).ok_or(VfsError::NotFound)?;
                (leaf.start, self.tree_part(&leaf.id)?)
            }
        };
        let i = usize::try_from(pos - start).map_err(|_| VfsError::NotFound)?;
        NodeRef::new(part, i).ok_or(VfsError::NotFound)
    }

    /// The inode number of entry `pos` of the directory in `slot`, holding
    /// `n`, in snapshot directory `root`.
    fn node_ino(slot: u32, pos: u64, root: Ino, n: &Node) -> VResult<Ino> {
        if n.kind != NodeKind::Dir && n.links > 1 && (n.inode != 0 || n.device != 0) {
            Ok(hash_ino(&[b"link", &root.to_le_bytes(), &n.device.to_le_bytes(), &n.inode.to_le_bytes()]))
        } else {
            positional(slot, pos).ok_or_else(|| VfsError::Io(format!("entry {pos}: too many entries in one directory")))
        }
    }

    /// Records that the kernel took a reference to entry `pos` of `slot`
    /// (inode `ino`, holding `n`): a directory gets a slot of its own.
    fn looked_up(&self, ino: Ino, slot: u32, pos: u64, n: &Node) -> VResult<()> {
        let mut slots = self.slots.lock().expect("poisoned");
        let root = slots.get(slot).map(|s| s.root).ok_or(VfsError::NotFound)?;
        let dir =
            match n.subtree.filter(|_| n.kind == NodeKind::Dir) {
                Some(tree) => Some(slots.dir(ino, tree, root, Keep::Counted).ok_or_else(|| {
                    VfsError::Io("too many directories held at once; unmount and mount again".into())
                })?),
                None => None,
            };
        slots.looked_up(ino, slot, pos, dir);
        Ok(())
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
            slots: Mutex::new(Slots::default()),
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
        ino < FIRST_FREE
            || (position(ino).is_none() && self.inner.layout.read().expect("poisoned").virt.contains_key(&ino))
    }

    /// What the mount keeps for the kernel: directory records and hard links.
    /// Files cost nothing while the kernel holds them (docs/design.md#mount).
    pub fn held(&self) -> Held {
        self.inner.slots.lock().expect("poisoned").held()
    }

    /// Bytes of decoded trees held in the tree cache.
    pub fn tree_cache_bytes(&self) -> usize {
        self.inner.trees.lock().expect("poisoned").used()
    }

    /// The slot of snapshot directory `ino`: Ok(None) for a made-up directory.
    fn dir_slot(&self, ino: Ino) -> VResult<Option<u32>> {
        if let Some(v) = self.inner.layout.read().expect("poisoned").virt.get(&ino) {
            return match v {
                Virt::Root { tree, .. } => {
                    let mut slots = self.inner.slots.lock().expect("poisoned");
                    let slot = slots.dir(ino, *tree, ino, Keep::Always);
                    slot.map(Some).ok_or_else(|| VfsError::Io("too many directories held at once".into()))
                }
                Virt::Dir(_) => Ok(None),
                Virt::Link(_) => Err(VfsError::NotDir),
            };
        }
        if let Some(slot) = self.inner.slots.lock().expect("poisoned").of_dir(ino) {
            return Ok(Some(slot));
        }
        // A directory the kernel did not look up (or has forgotten): found
        // again from its position, and kept while a handle is open.
        let (parent, pos) = position(ino).ok_or(VfsError::NotFound)?;
        let n = self.inner.node_at(parent, pos)?;
        let n = n.node();
        let tree = n.subtree.filter(|_| n.kind == NodeKind::Dir).ok_or(VfsError::NotDir)?;
        let mut slots = self.inner.slots.lock().expect("poisoned");
        let root = slots.get(parent).map(|s| s.root).ok_or(VfsError::NotFound)?;
        let slot = slots.dir(ino, tree, root, Keep::Counted);
        slot.map(Some).ok_or_else(|| VfsError::Io("too many directories held at once".into()))
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
        let slot = self.dir_slot(parent)?.ok_or(VfsError::NotFound)?;
        let (pos, n) = self.inner.find(slot, name)?.ok_or(VfsError::NotFound)?;
        let (_, root) = self.inner.slot_dir(slot)?;
        let ino = Inner::node_ino(slot, pos, root, n.node())?;
        self.inner.looked_up(ino, slot, pos, n.node())?;
        Ok(Inner::node_attr(ino, n.node()))
    }

    /// The kernel dropped `n` references to `ino`.
    pub fn forget(&self, ino: Ino, n: u64) {
        self.inner.slots.lock().expect("poisoned").forget(ino, n);
    }

    /// The entry behind inode `ino` of a snapshot.
    fn node(&self, ino: Ino) -> VResult<NodeRef> {
        let (slot, pos) = match position(ino) {
            Some(p) => p,
            None => self.inner.slots.lock().expect("poisoned").link(ino).ok_or(VfsError::NotFound)?,
        };
        self.inner.node_at(slot, pos)
    }

    /// The attributes of `ino`.
    pub fn getattr(&self, ino: Ino) -> VResult<Attr> {
        if ino < FIRST_FREE {
            self.inner.refresh()?;
        }
        if position(ino).is_none()
            && let Some(v) = self.inner.layout.read().expect("poisoned").virt.get(&ino)
        {
            return Ok(self.inner.virt_attr(ino, v));
        }
        Ok(Inner::node_attr(ino, self.node(ino)?.node()))
    }

    /// The target of symlink `ino`.
    pub fn readlink(&self, ino: Ino) -> VResult<Vec<u8>> {
        if let Some(v) = self.inner.layout.read().expect("poisoned").virt.get(&ino) {
            return match v {
                Virt::Link(t) => Ok(t.clone()),
                _ => Err(VfsError::Invalid),
            };
        }
        self.node(ino)?.node().target.as_ref().map(|t| t.0.clone()).ok_or(VfsError::Invalid)
    }

    /// The value of extended attribute `name` of `ino`.
    pub fn getxattr(&self, ino: Ino, name: &[u8]) -> VResult<Vec<u8>> {
        if self.is_layout(ino) {
            return Err(VfsError::NoXattr);
        }
        let n = self.node(ino)?;
        n.node().xattrs.iter().find(|x| x.name.0 == name).map(|x| x.value.0.clone()).ok_or(VfsError::NoXattr)
    }

    /// The names of the extended attributes of `ino`, each followed by a NUL.
    pub fn listxattr(&self, ino: Ino) -> VResult<Vec<u8>> {
        if self.is_layout(ino) {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        for x in &self.node(ino)?.node().xattrs {
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
        let slot = self.dir_slot(ino)?;
        if let Some(s) = slot {
            self.inner.slots.lock().expect("poisoned").opened(s, true);
        }
        let fh = self.inner.next_fh.fetch_add(1, Ordering::Relaxed);
        let h = DirHandle { ino, slot, cursor: None, pos: 0, pending: None };
        self.inner.dirs.lock().expect("poisoned").insert(fh, Arc::new(Mutex::new(h)));
        Ok(fh)
    }

    /// Lists directory handle `fh` from `offset` (0 first; each entry's offset
    /// is the one to continue after it). `add` takes an entry, its attributes
    /// with [`Listing::Plus`], and its offset, and returns false when it can
    /// take no more; with `Plus` each entry taken counts as a lookup (released
    /// with [`Vfs::forget`]). `.` and `..` are left to the caller.
    pub fn readdir(
        &self,
        fh: u64,
        offset: u64,
        mode: Listing,
        add: &mut dyn FnMut(&DirEntry, Option<&Attr>, u64) -> bool,
    ) -> VResult<()> {
        let h = self.inner.dirs.lock().expect("poisoned").get(&fh).cloned().ok_or(VfsError::NotFound)?;
        let mut h = h.lock().expect("poisoned");
        let ino = h.ino;
        let Some(slot) = h.slot else {
            let layout = self.inner.layout.read().expect("poisoned");
            let Some(Virt::Dir(children)) = layout.virt.get(&ino) else { return Err(VfsError::NotFound) };
            for (i, (name, child)) in children.iter().enumerate().skip(offset as usize) {
                let v = layout.virt.get(child);
                let kind = match v {
                    Some(Virt::Link(_)) => Kind::Symlink,
                    _ => Kind::Dir,
                };
                let attr = match (mode, v) {
                    (Listing::Plus, Some(v)) => Some(self.inner.virt_attr(*child, v)),
                    _ => None,
                };
                if !add(&DirEntry { ino: *child, kind, name: name.clone() }, attr.as_ref(), i as u64 + 1) {
                    break;
                }
            }
            return Ok(());
        };
        let (tree, root) = self.inner.slot_dir(slot)?;
        if h.cursor.is_none() || h.pos != offset {
            // A new listing, or a seek: start again and skip to `offset`.
            h.cursor = Some(self.inner.cursor(&tree)?);
            h.pending = None;
            h.pos = 0;
            while h.pos < offset {
                let c = h.cursor.as_mut().expect("set");
                if self.inner.next_node(c)?.is_none() {
                    return Ok(());
                }
                h.pos += 1;
            }
        }
        loop {
            let (entry, n) = match h.pending.take() {
                Some(e) => e,
                None => {
                    let c = h.cursor.as_mut().expect("set");
                    let Some(r) = self.inner.next_node(c)? else { return Ok(()) };
                    let n = r.node();
                    let ino = Inner::node_ino(slot, h.pos, root, n)?;
                    (DirEntry { ino, kind: n.kind.into(), name: n.name.0.clone() }, r)
                }
            };
            let attr = (mode == Listing::Plus).then(|| Inner::node_attr(entry.ino, n.node()));
            if !add(&entry, attr.as_ref(), h.pos + 1) {
                h.pending = Some((entry, n));
                return Ok(());
            }
            if mode == Listing::Plus {
                self.inner.looked_up(entry.ino, slot, h.pos, n.node())?;
            }
            h.pos += 1;
        }
    }

    /// Closes a directory handle.
    pub fn releasedir(&self, fh: u64) {
        let h = self.inner.dirs.lock().expect("poisoned").remove(&fh);
        if let Some(slot) = h.and_then(|h| h.lock().expect("poisoned").slot) {
            self.inner.slots.lock().expect("poisoned").opened(slot, false);
        }
    }

    /// Opens file `ino` for reading; returns a handle.
    pub fn open(&self, ino: Ino) -> VResult<u64> {
        if self.is_layout(ino) {
            return Err(VfsError::Invalid);
        }
        let node = self.node(ino)?;
        let node = node.node();
        if node.kind != NodeKind::File {
            return Err(VfsError::Invalid);
        }
        let name = String::from_utf8_lossy(&node.name.0).into_owned();
        let content = self.inner.repo.resolve_content(node, &mut |_| {}).inspect_err(|e| {
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
    use crate::format::tree::{ListingWriter, SplitLimits};
    use crate::repo::BlobSaver;
    use crate::testing::{TestTree, test_node, test_repo};

    fn vfs_over(t: crate::testing::TestRepo, cache_bytes: usize) -> Vfs {
        let opts = VfsOptions { cache_bytes, ..VfsOptions::default() };
        Vfs::new(Arc::new(t.repo), opts, Box::new(|_| {})).unwrap()
    }

    /// Every name of directory `ino`, listed with attributes (each a lookup).
    fn list_plus(vfs: &Vfs, ino: Ino) -> Vec<(Vec<u8>, Attr)> {
        let fh = vfs.opendir(ino).unwrap();
        let mut out = Vec::new();
        loop {
            let before = out.len();
            // A small buffer: a few entries per call, as the kernel asks.
            let mut room = 7;
            vfs.readdir(fh, before as u64, Listing::Plus, &mut |e, a, _| {
                if room == 0 {
                    return false;
                }
                room -= 1;
                out.push((e.name.clone(), *a.unwrap()));
                true
            })
            .unwrap();
            if out.len() == before {
                break;
            }
        }
        vfs.releasedir(fh);
        out
    }

    #[test]
    fn lookups_give_back_what_they_gave_and_forget_frees() {
        let t = test_repo();
        let both = TestTree::new().file("b", &[b"world!"]);
        let tree = TestTree::new().file("a", &[b"hello"]).dir("d", both.clone()).dir("e", both);
        let (sid, _) = t.snapshot(&tree);
        let vfs = vfs_over(t, 256 << 20);
        let root = vfs.lookup(IDS, sid.short().as_bytes()).unwrap();
        let a = vfs.lookup(root.ino, b"a").unwrap();
        let (d, e) = (vfs.lookup(root.ino, b"d").unwrap(), vfs.lookup(root.ino, b"e").unwrap());
        let (db, eb) = (vfs.lookup(d.ino, b"b").unwrap(), vfs.lookup(e.ino, b"b").unwrap());
        assert_eq!((a.kind, a.size, db.size), (Kind::File, 5, 6));
        assert_ne!(d.ino, e.ino);
        assert_ne!(db.ino, eb.ino, "one name in two directories is two entries");
        for got in [a, d, db, eb] {
            let back = vfs.getattr(got.ino).unwrap();
            assert_eq!(
                (back.ino, back.kind, back.size, back.perm, back.nlink, back.uid, back.gid, back.mtime, back.ctime),
                (got.ino, got.kind, got.size, got.perm, got.nlink, got.uid, got.gid, got.mtime, got.ctime)
            );
            assert!(!vfs.is_layout(got.ino));
        }
        // A listing gives the numbers lookups give.
        let listed = list_plus(&vfs, root.ino);
        let names: Vec<_> = listed.iter().map(|(n, a)| (n.clone(), a.ino)).collect();
        assert_eq!(names, vec![(b"a".to_vec(), a.ino), (b"d".to_vec(), d.ino), (b"e".to_vec(), e.ino)]);
        // The snapshot root and d and e have records; files have none.
        assert_eq!(vfs.held(), Held { dirs: 3, links: 0 });
        // Each of d and e: one lookup, one more by the listing.
        vfs.forget(db.ino, 1);
        vfs.forget(d.ino, 1);
        assert_eq!(vfs.held().dirs, 3, "d is still held once");
        vfs.forget(d.ino, 1);
        assert_eq!(vfs.held().dirs, 2, "d is no longer held, nor anything in it");
        // A forgotten entry is found again from its number while it is valid.
        assert!(vfs.getattr(db.ino).is_err(), "its directory's slot is gone");
        let d2 = vfs.lookup(root.ino, b"d").unwrap();
        assert_eq!(vfs.lookup(d2.ino, b"b").unwrap().size, 6);
        assert_eq!(vfs.getattr(a.ino).unwrap().size, 5);
    }

    #[test]
    fn hard_links_share_a_number_while_held() {
        let t = test_repo();
        let saver = BlobSaver::new(&t.repo);
        let mut nodes = Vec::new();
        for name in ["x", "y", "z"] {
            let mut n = test_node(name, NodeKind::File);
            n.content = vec![saver.save(BlobType::Data, b"shared").unwrap().0];
            n.size = 6;
            n.digest = Some(Id(*blake3::hash(b"shared").as_bytes()));
            if name != "z" {
                (n.links, n.inode, n.device) = (2, 77, 1);
            }
            nodes.push(n);
        }
        let root = saver.save(BlobType::Tree, &crate::format::tree::Tree { nodes }.encode()).unwrap().0;
        saver.finish().unwrap();
        let sid = t.repo.save_snapshot(&crate::testing::snapshot_of(root, &t.key), &t.key).unwrap();
        let vfs = vfs_over(t, 1 << 20);
        let r = vfs.lookup(IDS, sid.short().as_bytes()).unwrap();
        let (x, y, z) =
            (vfs.lookup(r.ino, b"x").unwrap(), vfs.lookup(r.ino, b"y").unwrap(), vfs.lookup(r.ino, b"z").unwrap());
        assert_eq!(x.ino, y.ino);
        assert_ne!(x.ino, z.ino);
        assert_eq!(vfs.held().links, 1);
        let fh = vfs.open(x.ino).unwrap();
        assert_eq!(vfs.read(fh, 0, 100).unwrap(), b"shared");
        vfs.release(fh);
        vfs.forget(x.ino, 2);
        assert_eq!(vfs.held().links, 0);
        assert!(matches!(vfs.getattr(x.ino), Err(VfsError::NotFound)));
    }

    /// Regression test for docs/performance.md#mount: the mount used to keep an
    /// entry for everything the kernel held, 325 MB after `ls -lR` of a
    /// million files. Now nothing is kept per file, and the trees it reads stay
    /// within the cache whatever the kernel holds.
    #[test]
    fn memory_stays_bounded_whatever_the_kernel_holds() {
        let t = test_repo();
        let mut tree = TestTree::new();
        for d in 0..40 {
            let mut dir = TestTree::new();
            for f in 0..150 {
                dir = dir.file(&format!("file-with-a-longish-name-{f:05}"), &[]);
            }
            tree = tree.dir(&format!("dir{d:03}"), dir);
        }
        let (sid, _) = t.snapshot(&tree);
        let cache = 256 << 10;
        let vfs = vfs_over(t, cache);
        let root = vfs.lookup(IDS, sid.short().as_bytes()).unwrap();
        let mut files = Vec::new();
        for (name, d) in list_plus(&vfs, root.ino) {
            // As `ls -lR` does: list with attributes, then stat each entry again.
            for (fname, f) in list_plus(&vfs, d.ino) {
                let again = vfs.lookup(d.ino, &fname).unwrap();
                assert_eq!((again.ino, vfs.getattr(f.ino).unwrap().size), (f.ino, 0), "{name:?}/{fname:?}");
                files.push(f.ino);
            }
            assert!(vfs.tree_cache_bytes() <= cache / 4, "tree cache at {} bytes", vfs.tree_cache_bytes());
        }
        assert_eq!(files.len(), 6000);
        // The kernel holds 6,040 entries: the mount keeps the 41 directories' records.
        assert_eq!(vfs.held(), Held { dirs: 41, links: 0 });
        // Every entry is served again, its directory's tree reloaded if evicted.
        assert!(files.iter().all(|&f| vfs.getattr(f).is_ok()));
        for d in list_plus(&vfs, root.ino) {
            vfs.forget(d.1.ino, 3);
            for (_, f) in list_plus(&vfs, d.1.ino) {
                vfs.forget(f.ino, 3);
            }
        }
        assert_eq!(vfs.held(), Held { dirs: 1, links: 0 }, "only the snapshot root is kept");
    }

    #[test]
    fn entries_of_split_listings_are_found_by_name_and_position() {
        let t = test_repo();
        let saver = BlobSaver::new(&t.repo);
        let limits = SplitLimits { part_max: 2 << 10, part_avg: 512, ids_per_blob: 3, inline_content: 8 };
        let mut w = ListingWriter::new(t.repo.tree_cut_key(), limits);
        let mut save = |b: &[u8]| saver.save(BlobType::Tree, b).map(|(id, _)| id);
        for i in 0..500u32 {
            let mut n = test_node(&format!("n{i:04}"), NodeKind::File);
            n.digest = Some(Id([0; 32]));
            n.size = 0;
            n.mode = 0o600 + (i % 64);
            w.push(&n, &mut save).unwrap();
        }
        assert!(w.is_split());
        let top = w.finish(&mut save).unwrap();
        saver.finish().unwrap();
        let sid = t.repo.save_snapshot(&crate::testing::snapshot_of(top, &t.key), &t.key).unwrap();
        let vfs = vfs_over(t, 64 << 10);
        let r = vfs.lookup(IDS, sid.short().as_bytes()).unwrap();
        let listed = list_plus(&vfs, r.ino);
        assert_eq!(listed.len(), 500);
        for (i, (name, a)) in listed.iter().enumerate() {
            assert_eq!(name, format!("n{i:04}").as_bytes());
            assert_eq!(vfs.getattr(a.ino).unwrap().perm, 0o600 + (i as u16 % 64));
            assert_eq!(vfs.lookup(r.ino, name).unwrap().ino, a.ino);
        }
        assert!(matches!(vfs.lookup(r.ino, b"n0500"), Err(VfsError::NotFound)));
        assert!(matches!(vfs.lookup(r.ino, b"a"), Err(VfsError::NotFound)));
    }
}
