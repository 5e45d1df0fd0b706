//! The structure of every snapshot and its Merkle root, checked in one walk of
//! its trees. See docs/design.md#check.
//!
//! # Brief overview
//!
//! Each snapshot's trees are walked depth first, the entries of each directory
//! from the last to the first. A tree is *checked* the first time any snapshot
//! reaches it: it must load and verify, and every data blob it references must be
//! indexed. Every tree is also *listed*, in every snapshot that holds it, to
//! recompute that snapshot's Merkle root from the leaves of its files, which the
//! walk meets last to first ([`ReverseBuilder`]). One load of a tree serves both.
//!
//! A tree met again, in another snapshot or at another path, is not checked again
//! but still listed. Listings (names, digests, subtrees: a fraction of a decoded
//! tree) are kept for that, the first ones met, up to a budget of bytes; a tree
//! beyond the budget is loaded again when listed again. Memory therefore does not
//! grow with the repository: it is the budget, the trees being walked (one per
//! directory level) and the trees loaded ahead (about [`AHEAD_BUDGET`]).
//!
//! Loading ahead: when the walk needs a tree it does not hold, it loads together
//! up to [`BATCH`] trees it will enter next, found by following the walk ahead
//! through the open directories and the trees at hand, so that a batch reaches
//! below the trees loaded ahead before. Neighbouring tree blobs are read in one
//! request and all are decoded in parallel ([`super::trees`]).
//!
//! The walk reaches trees in the order of the check as it always was (a
//! directory's subdirectories entered last to first), so each problem is reported
//! once, at the first path that leads to it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use coffer_backend::BackendError;

use crate::error::{Error, Result};
use crate::format::pack::BlobType;
use crate::format::snapshot::Snapshot;
use crate::format::tree::{NodeKind, Tree};
use crate::id::Id;
use crate::merkle::{self, Hash, ReverseBuilder};
use crate::repo::Repository;
use crate::repo::roots::RootCheck;

use super::{CheckReport, DamagedBlob};

/// Bytes of tree listings kept for the snapshots that share them.
pub(super) const LISTING_BUDGET: usize = 32 << 20;
/// Trees loaded together when the walk needs one it does not hold.
pub(super) const BATCH: usize = 32;
/// Bytes of trees loaded ahead beyond which only the tree needed is loaded.
const AHEAD_BUDGET: usize = 16 << 20;
/// Entries looked at when choosing the trees to load ahead.
const SCAN_LIMIT: usize = 4096;
/// Open directories, from the deepest up, that looking ahead goes through at most.
const FRAME_LIMIT: usize = 64;

/// What the walk reads from the repository.
pub(super) trait Store: Sync {
    /// Loads and decodes trees `ids`, a result for each.
    fn trees(&self, ids: &[Id]) -> Vec<Result<Tree>>;
    /// Whether the index lists data blob `id`.
    fn has_data(&self, id: &Id) -> bool;
    /// The pack the index serves blob `id` from.
    fn pack_of(&self, id: &Id) -> Option<Id>;
}

/// The repository, with the tree packs read ahead of the walk.
pub(super) struct Ahead<'a> {
    pub repo: &'a Repository,
    pub packs: super::trees::TreePacks,
}

impl Store for Ahead<'_> {
    fn trees(&self, ids: &[Id]) -> Vec<Result<Tree>> {
        super::trees::load_trees(self.repo, ids, &self.packs)
    }

    fn has_data(&self, id: &Id) -> bool {
        self.repo.has_data(id)
    }

    fn pack_of(&self, id: &Id) -> Option<Id> {
        Store::pack_of(self.repo, id)
    }
}

impl Store for Repository {
    fn trees(&self, ids: &[Id]) -> Vec<Result<Tree>> {
        super::trees::load_trees(self, ids, &super::trees::TreePacks::default())
    }

    fn has_data(&self, id: &Id) -> bool {
        self.index().contains(id, BlobType::Data)
    }

    fn pack_of(&self, id: &Id) -> Option<Id> {
        self.index().get(id).map(|(_, p)| p.id)
    }
}

/// What the Merkle walk needs of one entry.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// A regular file and its digest (none only in a tree that breaks the rules).
    File(Option<Hash>),
    /// A directory and its tree.
    Dir(Id),
    /// Anything else: no leaf, nothing below.
    Other,
}

/// One entry of a listing.
#[derive(Debug)]
struct Entry {
    name: Box<[u8]>,
    kind: Kind,
}

/// A tree reduced to what listing it again needs.
#[derive(Debug)]
struct Listing {
    entries: Vec<Entry>,
}

impl Listing {
    fn of(tree: &Tree) -> Listing {
        let entries = tree
            .nodes
            .iter()
            .map(|n| Entry {
                name: n.name.0.clone().into_boxed_slice(),
                kind: match (n.kind, n.subtree) {
                    (NodeKind::Dir, Some(sub)) => Kind::Dir(sub),
                    (NodeKind::File, _) => Kind::File(n.digest.map(|d| d.0)),
                    _ => Kind::Other,
                },
            })
            .collect();
        Listing { entries }
    }

    /// Memory held, roughly, counting the map slot that keeps it.
    fn bytes(&self) -> usize {
        const SLOT: usize = 64;
        SLOT + self.entries.iter().map(|e| std::mem::size_of::<Entry>() + e.name.len()).sum::<usize>()
    }
}

/// Memory a decoded tree holds, roughly.
fn tree_bytes(tree: &Tree) -> usize {
    tree.nodes
        .iter()
        .map(|n| {
            std::mem::size_of_val(n)
                + n.name.0.len()
                + n.content.len() * std::mem::size_of::<Id>()
                + n.target.as_ref().map_or(0, |t| t.0.len())
                + n.xattrs.iter().map(|x| x.name.0.len() + x.value.0.len() + 48).sum::<usize>()
                + n.user.as_ref().map_or(0, String::len)
                + n.group.as_ref().map_or(0, String::len)
        })
        .sum()
}

/// Why a tree did not load, kept so that trees loaded ahead can be handed out later.
#[derive(Debug)]
struct Failure {
    message: String,
    /// The tree failed to verify (damage), as opposed to a storage error.
    corrupt: bool,
    /// The storage failed to serve it (after retries): nothing is known of the
    /// tree, so the check stops with this error rather than call it damage.
    storage: Option<BackendError>,
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        let corrupt = matches!(e, Error::Corrupt { .. });
        let message = e.to_string();
        match e {
            Error::Backend(b) if super::is_storage_failure(&b) => Failure { message, corrupt, storage: Some(b) },
            _ => Failure { message, corrupt, storage: None },
        }
    }
}

type Loaded = std::result::Result<Tree, Failure>;

/// A directory being listed: entries `..next` are still ahead, met from the last.
struct Open {
    listing: Arc<Listing>,
    /// The length of the directory's path in the walk's path buffer.
    len: usize,
    next: usize,
}

/// The absolute path of entry `name` of the directory at `dir`.
fn child_path(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = dir.to_vec();
    set_child(&mut p, dir.len(), name);
    p
}

/// Makes `path`, whose first `len` bytes are a directory's path, the path of the
/// directory's entry `name`: one buffer serves the whole walk, whatever its depth.
fn set_child(path: &mut Vec<u8>, len: usize, name: &[u8]) {
    path.truncate(len);
    if !path.ends_with(b"/") {
        path.push(b'/');
    }
    path.extend_from_slice(name);
}

fn shown(path: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(path)
}

/// The walk over every snapshot, with what it has seen so far.
pub(super) struct Walker<'a, S: Store> {
    store: &'a S,
    /// Trees reached by any snapshot (checked, or reported as failing).
    seen_trees: HashSet<Id>,
    /// Data blobs referenced by a checked tree.
    seen_blobs: HashSet<Id>,
    /// Listings kept for trees met again: the first ones, up to the budget.
    listings: HashMap<Id, Arc<Listing>>,
    listing_bytes: usize,
    listing_budget: usize,
    /// Trees loaded ahead of the walk, with the bytes they hold.
    ahead: HashMap<Id, (Loaded, usize)>,
    ahead_bytes: usize,
    roots: HashMap<Id, RootCheck>,
    /// The first storage failure met: the walk's findings are incomplete.
    storage: Option<BackendError>,
}

impl<'a, S: Store> Walker<'a, S> {
    /// A walk keeping up to `listing_budget` bytes of listings.
    pub(super) fn new(store: &'a S, listing_budget: usize) -> Self {
        Walker {
            store,
            seen_trees: HashSet::new(),
            seen_blobs: HashSet::new(),
            listings: HashMap::new(),
            listing_bytes: 0,
            listing_budget,
            ahead: HashMap::new(),
            ahead_bytes: 0,
            roots: HashMap::new(),
            storage: None,
        }
    }

    /// Walks snapshot `sid`: checks the trees no snapshot reached before, into
    /// `r`, and compares its Merkle root with its files.
    pub(super) fn snapshot(&mut self, sid: Id, snap: &Snapshot, r: &mut CheckReport) {
        r.snapshots += 1;
        let key = snap.merkle_key.0;
        // Dropped when a tree fails to load: the root cannot be recomputed.
        let mut merkle = Some(ReverseBuilder::new(snap.merkle_leaves));
        let mut stack: Vec<Open> = Vec::new();
        // The path of the entry at hand.
        let mut path = b"/".to_vec();
        let mut pending = Some(snap.tree);
        loop {
            if let Some(id) = pending.take() {
                match self.enter(sid, id, &path, &stack, merkle.is_some(), r) {
                    Entered::Open(listing) => {
                        stack.push(Open { next: listing.entries.len(), listing, len: path.len() })
                    }
                    Entered::Skipped => {}
                    Entered::Failed => merkle = None,
                }
            }
            let Some(top) = stack.last_mut() else { break };
            if top.next == 0 {
                stack.pop();
                continue;
            }
            top.next -= 1;
            let entry = &top.listing.entries[top.next];
            set_child(&mut path, top.len, &entry.name);
            match entry.kind {
                Kind::Dir(sub) => pending = Some(sub),
                Kind::File(digest) => {
                    if let Some(b) = merkle.as_mut() {
                        match digest {
                            Some(d) => b.push(leaf(&key, &path, &d)),
                            None => merkle = None,
                        }
                    }
                }
                Kind::Other => {}
            }
        }
        // Everything loaded ahead was entered or skipped.
        self.ahead.clear();
        self.ahead_bytes = 0;
        let verdict = match merkle.map(|b| b.root()) {
            None => RootCheck::Unknown,
            Some(root) if root == Some(snap.merkle_root.0) => RootCheck::Matches,
            Some(_) => RootCheck::Differs,
        };
        self.roots.insert(sid, verdict);
    }

    /// Ends the walk: counts the data blobs into `r` and returns each walked
    /// snapshot's root comparison, or the storage failure that kept a tree from
    /// being read.
    pub(super) fn finish(self, r: &mut CheckReport) -> std::result::Result<HashMap<Id, RootCheck>, BackendError> {
        r.data_blobs = self.seen_blobs.len() as u64;
        match self.storage {
            Some(e) => Err(e),
            None => Ok(self.roots),
        }
    }

    /// Reaches tree `id` at `path`. A tree reached before is skipped unless the
    /// root is still being recomputed (`listing`); one reached first is checked.
    fn enter(&mut self, sid: Id, id: Id, path: &[u8], stack: &[Open], listing: bool, r: &mut CheckReport) -> Entered {
        let first = self.seen_trees.insert(id);
        let ahead = self.ahead.remove(&id).map(|(t, bytes)| {
            self.ahead_bytes -= bytes;
            t
        });
        if !first && !listing {
            return Entered::Skipped;
        }
        // A tree reached first is never kept yet: it is checked from its full form.
        if let Some(l) = self.listings.get(&id) {
            return Entered::Open(l.clone());
        }
        let loaded = match ahead {
            Some(t) => t,
            None => self.load(id, stack, listing),
        };
        match loaded {
            Err(fail) => {
                if first {
                    self.report_failure(sid, id, path, fail, r);
                }
                Entered::Failed
            }
            Ok(tree) => {
                if first {
                    r.trees += 1;
                    self.check_nodes(sid, &tree, path, r);
                }
                Entered::Open(self.keep(id, Listing::of(&tree)))
            }
        }
    }

    /// Reports tree `id`, reached first at `path`, as failing to load.
    fn report_failure(&mut self, sid: Id, id: Id, path: &[u8], fail: Failure, r: &mut CheckReport) {
        if let Some(e) = fail.storage {
            self.storage.get_or_insert(e);
            return;
        }
        if fail.corrupt {
            r.damaged_blobs.push(DamagedBlob { id, blob_type: BlobType::Tree, pack: self.store.pack_of(&id) });
        }
        r.errors.push(format!("snapshot {}, directory {}: {}", sid.short(), shown(path), fail.message));
    }

    /// Checks that every data blob a tree reached first references is indexed.
    fn check_nodes(&mut self, sid: Id, tree: &Tree, dir: &[u8], r: &mut CheckReport) {
        for node in &tree.nodes {
            if let (NodeKind::Dir, Some(_)) = (node.kind, node.subtree) {
                continue;
            }
            for b in &node.content {
                if self.seen_blobs.insert(*b) && !self.store.has_data(b) {
                    r.damaged_blobs.push(DamagedBlob { id: *b, blob_type: BlobType::Data, pack: None });
                    r.errors.push(format!(
                        "snapshot {}, file {}: data blob {} is not in any index",
                        sid.short(),
                        shown(&child_path(dir, &node.name.0)),
                        b.short()
                    ));
                }
            }
        }
    }

    /// Keeps the listing of tree `id` if the budget allows.
    fn keep(&mut self, id: Id, listing: Listing) -> Arc<Listing> {
        let listing = Arc::new(listing);
        let bytes = listing.bytes();
        if self.listing_bytes + bytes <= self.listing_budget {
            self.listing_bytes += bytes;
            self.listings.insert(id, listing.clone());
        }
        listing
    }

    /// Loads tree `id`, and in parallel with it the trees the walk enters next.
    fn load(&mut self, id: Id, stack: &[Open], listing: bool) -> Loaded {
        let mut ids = vec![id];
        if self.ahead_bytes < AHEAD_BUDGET {
            self.upcoming(stack, listing, &mut ids);
        }
        let mut loaded: Vec<Loaded> = self.store.trees(&ids).into_iter().map(|t| t.map_err(Failure::from)).collect();
        for (i, t) in ids[1..].iter().zip(loaded.drain(1..)) {
            let bytes = t.as_ref().map_or(0, tree_bytes);
            self.ahead_bytes += bytes;
            self.ahead.insert(*i, (t, bytes));
        }
        loaded.pop().expect("the tree needed was loaded")
    }

    /// Adds to `ids`, up to [`BATCH`], the trees the walk will load next: it
    /// follows the walk ahead through the open directories and the trees at hand
    /// (loaded ahead or kept), collecting those not at hand that it would enter.
    fn upcoming(&self, stack: &[Open], listing: bool, ids: &mut Vec<Id>) {
        // The open directories are taken from the top down only as the walk
        // ahead reaches them, and at most FRAME_LIMIT of them: a deep stack
        // whose directories have nothing left to enter costs a few steps, not
        // one per level.
        let mut frames = stack.iter().rev().take(FRAME_LIMIT);
        let mut cursors: Vec<Box<dyn Iterator<Item = Id> + '_>> = Vec::new();
        let mut scanned = 0;
        while ids.len() < BATCH && scanned < SCAN_LIMIT {
            if cursors.is_empty() {
                let Some(o) = frames.next() else { break };
                scanned += 1;
                cursors.push(Box::new(subdirs(&o.listing.entries[..o.next])));
            }
            let Some(cursor) = cursors.last_mut() else { break };
            let Some(sub) = cursor.next() else {
                cursors.pop();
                continue;
            };
            scanned += 1;
            if !listing && self.seen_trees.contains(&sub) {
                continue;
            }
            match self.held_subdirs(&sub) {
                Some(below) => cursors.push(Box::new(below.into_iter())),
                None if !ids.contains(&sub) => ids.push(sub),
                None => {}
            }
        }
    }

    /// The subdirectories of tree `id`, in the order the walk enters them, if the
    /// tree is at hand.
    fn held_subdirs(&self, id: &Id) -> Option<Vec<Id>> {
        if let Some(l) = self.listings.get(id) {
            return Some(subdirs(&l.entries).collect());
        }
        match self.ahead.get(id)? {
            (Ok(tree), _) => Some(
                tree.nodes
                    .iter()
                    .rev()
                    .filter_map(|n| match (n.kind, n.subtree) {
                        (NodeKind::Dir, Some(sub)) => Some(sub),
                        _ => None,
                    })
                    .collect(),
            ),
            (Err(_), _) => Some(Vec::new()),
        }
    }
}

/// The subtrees of `entries`, in the order the walk enters them (last first).
fn subdirs(entries: &[Entry]) -> impl Iterator<Item = Id> + '_ {
    entries.iter().rev().filter_map(Entry::subdir)
}

impl Entry {
    fn subdir(&self) -> Option<Id> {
        match self.kind {
            Kind::Dir(sub) => Some(sub),
            _ => None,
        }
    }
}

/// What reaching a tree gave.
enum Entered {
    /// Its listing, to walk.
    Open(Arc<Listing>),
    /// Reached before and not needed again.
    Skipped,
    /// It did not load.
    Failed,
}

/// The Merkle leaf of the file at `path` with content digest `digest`.
fn leaf(key: &[u8; 32], path: &[u8], digest: &Hash) -> Hash {
    merkle::file_leaf(&merkle::leaf_salt(key, path), digest, path)
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    use std::path::Path;
    use std::sync::Mutex;

    use super::*;
    use crate::crypto::sign::PublicKey;
    use crate::format::bytes::Bytes;
    use crate::format::tree::Node;
    use coffer_backend::{BackendError, ErrorKind};

    /// Trees in memory, counting loads; `broken` trees fail with a storage error.
    #[derive(Default)]
    struct Mem {
        trees: HashMap<Id, Tree>,
        /// Trees whose pack is missing (damage that is not a bad checksum).
        broken: HashSet<Id>,
        /// Trees the storage fails to serve.
        unreachable: HashSet<Id>,
        indexed: HashSet<Id>,
        loads: Mutex<HashMap<Id, usize>>,
        batches: Mutex<Vec<usize>>,
    }

    impl Store for Mem {
        fn trees(&self, ids: &[Id]) -> Vec<Result<Tree>> {
            self.batches.lock().unwrap().push(ids.len());
            ids.iter().map(|id| self.tree(id)).collect()
        }

        fn has_data(&self, id: &Id) -> bool {
            self.indexed.contains(id)
        }

        fn pack_of(&self, id: &Id) -> Option<Id> {
            self.trees.contains_key(id).then_some(Id([0xee; 32]))
        }
    }

    impl Mem {
        fn tree(&self, id: &Id) -> Result<Tree> {
            *self.loads.lock().unwrap().entry(*id).or_default() += 1;
            if self.broken.contains(id) {
                return Err(BackendError::new(ErrorKind::NotFound, format!("tree {}", id.short()), "pack gone").into());
            }
            if self.unreachable.contains(id) {
                return Err(BackendError::new(ErrorKind::Transient, format!("tree {}", id.short()), "timed out").into());
            }
            self.trees.get(id).cloned().ok_or_else(|| Error::corrupt(format!("tree {}", id.short()), "missing"))
        }

        fn add(&mut self, mut nodes: Vec<Node>) -> Id {
            nodes.sort_by(|a, b| a.name.cmp(&b.name));
            nodes.dedup_by(|a, b| a.name == b.name);
            let tree = Tree { nodes };
            let id = Id::hash_of(&tree.encode());
            self.trees.insert(id, tree);
            id
        }

        fn loads(&self) -> HashMap<Id, usize> {
            std::mem::take(&mut *self.loads.lock().unwrap())
        }
    }

    use crate::format::tree::tests::node;

    fn file(name: &[u8], content: Vec<Id>, digest: u8) -> Node {
        Node { content, digest: Some(Id([digest; 32])), ..node(name, NodeKind::File) }
    }

    fn dir(name: &[u8], subtree: Id) -> Node {
        Node { subtree: Some(subtree), ..node(name, NodeKind::Dir) }
    }

    fn snapshot(root: Id, key: u8) -> Snapshot {
        Snapshot {
            version: crate::format::FORMAT_VERSION,
            time: "2024-05-01T10:00:00Z".into(),
            hostname: "h".into(),
            username: "u".into(),
            paths: vec!["/d".into()],
            program: "test".into(),
            writer: PublicKey([0; 32]),
            merkle_key: Id([key; 32]),
            copied_from: None,
            imported_from: None,
            written: None,
            server_log: None,
            ..crate::testing::snapshot_of(root, &crate::crypto::sign::SigningKey::generate())
        }
    }

    /// The leaves of the files below `id`, in tree order, as a proof computes them.
    fn leaves(mem: &Mem, id: Id, prefix: &Path, key: &[u8; 32], out: &mut Vec<Hash>) -> Result<()> {
        for n in &mem.tree(&id)?.nodes {
            let path = prefix.join(OsStr::from_bytes(&n.name.0));
            if n.kind == NodeKind::File {
                let d = n.digest.ok_or_else(|| Error::corrupt("file", "has no digest"))?;
                out.push(leaf(key, path.as_os_str().as_bytes(), &d.0));
            }
            if let (NodeKind::Dir, Some(sub)) = (n.kind, n.subtree) {
                leaves(mem, sub, &path, key, out)?;
            }
        }
        Ok(())
    }

    /// Signs `snap` with the root its trees give, if they all load.
    fn seal(mem: &Mem, snap: &mut Snapshot) -> bool {
        let mut l = Vec::new();
        let ok = leaves(mem, snap.tree, Path::new("/"), &snap.merkle_key.0, &mut l).is_ok();
        snap.merkle_root = Id(merkle::root(&l));
        snap.merkle_leaves = l.len() as u64;
        ok
    }

    /// The check as it was before the walk did both: the structure in one walk
    /// (subdirectories pushed on a stack), each root in a forward walk of its own.
    fn reference(mem: &Mem, snaps: &[(Id, Snapshot)]) -> (CheckReport, HashMap<Id, RootCheck>) {
        let mut r = CheckReport::default();
        let (mut seen_trees, mut seen_blobs) = (HashSet::new(), HashSet::new());
        let mut roots = HashMap::new();
        for (sid, snap) in snaps {
            r.snapshots += 1;
            let mut stack = vec![(snap.tree, "/".to_string())];
            while let Some((tid, path)) = stack.pop() {
                if !seen_trees.insert(tid) {
                    continue;
                }
                let tree = match mem.tree(&tid) {
                    Ok(t) => t,
                    Err(e) => {
                        if let Error::Corrupt { .. } = e {
                            r.damaged_blobs.push(DamagedBlob {
                                id: tid,
                                blob_type: BlobType::Tree,
                                pack: mem.pack_of(&tid),
                            });
                        }
                        r.errors.push(format!("snapshot {}, directory {path}: {e}", sid.short()));
                        continue;
                    }
                };
                r.trees += 1;
                for node in &tree.nodes {
                    let child = Path::new(&path).join(node.name.display()).to_string_lossy().into_owned();
                    match (node.kind, node.subtree) {
                        (NodeKind::Dir, Some(sub)) => stack.push((sub, child)),
                        _ => {
                            for b in &node.content {
                                if seen_blobs.insert(*b) && !mem.has_data(b) {
                                    r.damaged_blobs.push(DamagedBlob { id: *b, blob_type: BlobType::Data, pack: None });
                                    r.errors.push(format!(
                                        "snapshot {}, file {child}: data blob {} is not in any index",
                                        sid.short(),
                                        b.short()
                                    ));
                                }
                            }
                        }
                    }
                }
            }
            let mut l = Vec::new();
            let verdict = match leaves(mem, snap.tree, Path::new("/"), &snap.merkle_key.0, &mut l) {
                Ok(()) if merkle::root(&l) == snap.merkle_root.0 && l.len() as u64 == snap.merkle_leaves => {
                    RootCheck::Matches
                }
                Ok(()) => RootCheck::Differs,
                Err(_) => RootCheck::Unknown,
            };
            roots.insert(*sid, verdict);
        }
        r.data_blobs = seen_blobs.len() as u64;
        (r, roots)
    }

    fn walk(mem: &Mem, snaps: &[(Id, Snapshot)], budget: usize) -> (CheckReport, HashMap<Id, RootCheck>) {
        let mut r = CheckReport::default();
        let mut w = Walker::new(mem, budget);
        for (sid, snap) in snaps {
            w.snapshot(*sid, snap, &mut r);
        }
        let roots = w.finish(&mut r).expect("no storage failure in memory");
        (r, roots)
    }

    fn assert_same(a: &(CheckReport, HashMap<Id, RootCheck>), b: &(CheckReport, HashMap<Id, RootCheck>), what: &str) {
        assert_eq!(a.0.errors, b.0.errors, "{what}");
        assert_eq!(a.0.damaged_blobs, b.0.damaged_blobs, "{what}");
        assert_eq!((a.0.snapshots, a.0.trees, a.0.data_blobs), (b.0.snapshots, b.0.trees, b.0.data_blobs), "{what}");
        assert_eq!(a.1, b.1, "{what}");
    }

    /// Deterministic choices (xorshift64).
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    /// Levels of trees sharing subtrees at random, some missing or broken, with
    /// files whose blobs are sometimes not indexed. Returns the top level.
    fn forest(mem: &mut Mem, rng: &mut Rng) -> Vec<Id> {
        let (mut below, mut made): (Vec<Id>, Vec<Id>) = (Vec::new(), Vec::new());
        for _ in 0..4 {
            below.append(&mut made);
            for _ in 0..6 {
                let nodes = (0..rng.below(7) as u8).map(|i| random_node(mem, rng, &below, i)).collect();
                made.push(mem.add(nodes));
            }
        }
        made
    }

    /// Entry `i` of a random tree whose subdirectories are among `below`.
    fn random_node(mem: &mut Mem, rng: &mut Rng, below: &[Id], i: u8) -> Node {
        // Names sort apart from their order of making; some are not UTF-8.
        let name = [b'a' + rng.below(20) as u8, if rng.below(5) == 0 { 0xff } else { b'x' }, b'0' + i];
        match rng.below(6) {
            0 | 1 if !below.is_empty() => {
                let sub = match rng.below(12) {
                    0 => Id([100 + rng.below(50) as u8; 32]),
                    1 => {
                        let b = Id([200 + rng.below(50) as u8; 32]);
                        mem.broken.insert(b);
                        b
                    }
                    _ => below[rng.below(below.len() as u64) as usize],
                };
                dir(&name, sub)
            }
            2 => Node { target: Some(Bytes(b"t".to_vec())), ..node(&name, NodeKind::Symlink) },
            _ => {
                let content = (0..rng.below(3)).map(|_| Id([1 + rng.below(60) as u8; 32])).collect();
                file(&name, content, rng.below(256) as u8)
            }
        }
    }

    #[test]
    fn one_walk_reports_what_the_two_walks_did() {
        let mut seen = HashSet::new();
        for seed in 1..300u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
            let mut mem =
                Mem { indexed: (1..60u8).filter(|b| b % 7 != 0).map(|b| Id([b; 32])).collect(), ..Mem::default() };
            let tops = forest(&mut mem, &mut rng);
            let snaps: Vec<(Id, Snapshot)> = (0..4u8)
                .map(|i| {
                    let mut s = snapshot(tops[rng.below(tops.len() as u64) as usize], i);
                    seal(&mem, &mut s);
                    match rng.below(4) {
                        0 => s.merkle_root.0[0] ^= 1,
                        1 => s.merkle_leaves += 1,
                        _ => {}
                    }
                    (Id([i + 1; 32]), s)
                })
                .collect();
            let expected = reference(&mem, &snaps);
            for budget in [0, 2000, usize::MAX] {
                assert_same(&walk(&mem, &snaps, budget), &expected, &format!("seed {seed}, budget {budget}"));
            }
            seen.extend(expected.1.values().map(|v| format!("{v:?}")));
            seen.extend(expected.0.errors.iter().cloned());
        }
        // The forests hold every kind of problem and verdict.
        for kind in [
            "Matches",
            "Differs",
            "Unknown",
            ": missing",
            "not found in the repository storage",
            "is not in any index",
            "\u{fffd}",
        ] {
            assert!(seen.iter().any(|s| s.contains(kind)), "no {kind} in {seen:?}");
        }
    }

    #[test]
    fn a_tree_the_storage_cannot_serve_ends_the_walk_with_that_error_not_damage() {
        let mut mem = Mem { indexed: [Id([1; 32])].into_iter().collect(), ..Mem::default() };
        let leaf = mem.add(vec![file(b"a", vec![Id([1; 32])], 1)]);
        let root = mem.add(vec![dir(b"d", leaf), file(b"z", vec![], 3)]);
        mem.unreachable.insert(leaf);
        let mut s = snapshot(root, 1);
        seal(&mem, &mut s);
        let mut r = CheckReport::default();
        let mut w = Walker::new(&mem, usize::MAX);
        w.snapshot(Id([1; 32]), &s, &mut r);
        let e = w.finish(&mut r).expect_err("the walk cannot vouch for a tree it could not read");
        assert_eq!((e.kind, e.object.as_str()), (ErrorKind::Transient, format!("tree {}", leaf.short()).as_str()));
        assert!(r.errors.is_empty() && r.damaged_blobs.is_empty(), "{:?}", r.errors);
    }

    #[test]
    fn each_tree_is_loaded_once_when_its_listing_is_kept() {
        let mut mem = Mem { indexed: [Id([1; 32]), Id([2; 32])].into_iter().collect(), ..Mem::default() };
        let shared = mem.add(vec![file(b"a", vec![Id([1; 32])], 1), file(b"b", vec![Id([2; 32])], 2)]);
        let subdirs: Vec<Node> = (0..100u8).map(|i| dir(&[b'd', i], shared)).collect();
        let wide = mem.add(subdirs);
        let root1 = mem.add(vec![dir(b"w", wide), file(b"z", vec![], 3)]);
        let root2 = mem.add(vec![dir(b"w", wide), dir(b"v", shared)]);
        let snaps: Vec<(Id, Snapshot)> = [(root1, 1u8), (root2, 2), (root1, 3)]
            .into_iter()
            .map(|(root, key)| {
                let mut s = snapshot(root, key);
                assert!(seal(&mem, &mut s));
                (Id([key; 32]), s)
            })
            .collect();
        mem.loads();
        let (r, roots) = walk(&mem, &snaps, usize::MAX);
        assert!(r.errors.is_empty(), "{:?}", r.errors);
        assert_eq!((r.trees, r.data_blobs), (4, 2));
        assert!(roots.values().all(|v| *v == RootCheck::Matches), "{roots:?}");
        let loads = mem.loads();
        assert_eq!(loads.len(), 4);
        assert!(loads.values().all(|n| *n == 1), "{loads:?}");
        // Without listings kept, a tree is loaded again wherever it is listed again,
        // and the outcome is the same.
        let (r0, roots0) = walk(&mem, &snaps, 0);
        assert_eq!((r0.errors.len(), r0.trees, roots0), (0, 4, roots));
        assert_eq!(mem.loads()[&shared], 100 + 101 + 100);
    }

    #[test]
    fn trees_are_loaded_in_batches_that_reach_below_the_trees_loaded_ahead() {
        // Three levels of ten directories (111 distinct trees), each leaf with a file.
        let mut mem = Mem::default();
        let mut level: Vec<Id> = (0..100u8).map(|i| mem.add(vec![file(b"f", vec![], i)])).collect();
        for _ in 0..2 {
            level = level
                .chunks(10)
                .map(|c| mem.add(c.iter().zip(0u8..).map(|(t, i)| dir(&[b'd', i], *t)).collect()))
                .collect();
        }
        let mut snap = snapshot(level[0], 1);
        assert!(seal(&mem, &mut snap));
        let (r, roots) = walk(&mem, &[(Id([1; 32]), snap)], usize::MAX);
        assert_eq!((r.trees, roots[&Id([1; 32])]), (111, RootCheck::Matches));
        let batches = mem.batches.lock().unwrap().clone();
        assert_eq!(batches.iter().sum::<usize>(), 111);
        assert!(batches.iter().all(|n| *n <= BATCH), "{batches:?}");
        // The root alone, then its ten children, then full batches.
        assert!(batches.len() <= 2 + 100usize.div_ceil(BATCH) + 1, "{batches:?}");
    }

    #[test]
    fn a_forged_root_or_count_differs_and_a_lost_tree_leaves_it_unknown() {
        let mut mem = Mem::default();
        let sub = mem.add(vec![file(b"f", vec![], 1), file(b"g", vec![], 2)]);
        let root = mem.add(vec![dir(b"d", sub), file(b"h", vec![], 3)]);
        let lost = mem.add(vec![dir(b"d", Id([9; 32])), file(b"h", vec![], 3)]);
        let mut good = snapshot(root, 1);
        assert!(seal(&mem, &mut good));
        assert_eq!(good.merkle_leaves, 3);
        let mut forged = good.clone();
        forged.merkle_root.0[5] ^= 0x10;
        let mut counted = good.clone();
        counted.merkle_leaves = 2;
        // Another key salts every leaf differently: the same files give another root.
        let mut rekeyed = good.clone();
        rekeyed.merkle_key = Id([2; 32]);
        let mut damaged = snapshot(lost, 1);
        damaged.merkle_root = good.merkle_root;
        damaged.merkle_leaves = 3;
        let snaps: Vec<(Id, Snapshot)> = [good, forged, counted, rekeyed, damaged]
            .into_iter()
            .enumerate()
            .map(|(i, s)| (Id([i as u8 + 1; 32]), s))
            .collect();
        let (r, roots) = walk(&mem, &snaps, usize::MAX);
        let verdicts: Vec<RootCheck> = snaps.iter().map(|(id, _)| roots[id]).collect();
        use RootCheck::*;
        assert_eq!(verdicts, [Matches, Differs, Differs, Differs, Unknown]);
        assert_eq!(r.errors.len(), 1);
        assert!(
            r.errors[0].starts_with(&format!("snapshot {}, directory /d: ", Id([5; 32]).short())),
            "{:?}",
            r.errors
        );
    }
}
