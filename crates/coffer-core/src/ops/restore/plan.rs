//! Walking the snapshot's trees in order: directories, symlinks and special files
//! are created on the way; regular files, hard links and completed directories
//! are collected into bounded batches, each handed to the writer when full.
//! See docs/design.md#restore.
//!
//! The walk keeps an explicit stack of the directories from the restore's root
//! down to the one being walked (no recursion per level), and one snapshot path
//! buffer that grows and shrinks with it. Each directory of the stack that was
//! made in the target may hold an open handle; to keep the number of open
//! handles bounded however deep the tree, only some are kept (see [`keep`]) and
//! the others are opened again, when needed, from the nearest one kept.

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::SyncSender;

use super::handles::{self, DirName, Handle, Place};
use super::{BatchLimits, Overwrite, RestoreOptions, RestoreSummary, Selector};
use crate::error::{Error, Result};
use crate::format::tree::{Node, NodeKind};
use crate::fs::meta::{self, MODE_BITS, RestorePolicy};
use crate::id::Id;
use crate::progress::Progress;
use crate::repo::tree_walk::Located;
use crate::repo::{Repository, TreeNodes};

/// The most distinct directory handles one batch holds; the batch is handed
/// over when it reaches this many, so that the handles open at any time stay
/// bounded: the batch being planned, those between the walk and the writer (as
/// many as the fetch stage's budget of handles allows), the walk's stack, and
/// the files being written.
const MAX_BATCH_HANDLES: usize = 256;

/// The spacing of the directory handles the walk keeps; see [`keep`].
const SPAN: usize = 16;

/// Whether the walk, at depth `current`, keeps the handle of the directory on its
/// stack at depth `depth`: the `SPAN` deepest ones, every `SPAN`-th one among the
/// `SPAN²` deepest, every `SPAN²`-th among the `SPAN³` deepest, and so on. That
/// is at most `SPAN` per power of `SPAN` in the depth (80 handles for a million
/// levels), and any directory of the stack is at most `SPAN^(k+1)` levels below
/// a kept one, where `SPAN^k` divides its depth.
fn keep(depth: usize, current: usize) -> bool {
    if depth == 0 || current - depth < SPAN {
        return true;
    }
    let mut unit = SPAN;
    while unit <= depth {
        if !depth.is_multiple_of(unit) {
            return false;
        }
        match unit.checked_mul(SPAN) {
            Some(next) if current - depth >= next => unit = next,
            _ => return true,
        }
    }
    false
}

/// A regular file to write, the first restored name of its inode.
pub(super) struct FileJob {
    pub place: Place,
    pub node: Node,
}

/// A hard link to make: `place` is another name of the inode `key`, first
/// written as `first_name` in directory `first_dir`.
pub(super) struct Link {
    pub key: (u64, u64),
    pub first_dir: Arc<DirName>,
    pub first_name: Vec<u8>,
    pub place: Place,
}

/// A directory whose contents are all planned: its metadata is applied through `handle`.
pub(super) struct DirJob {
    pub handle: Handle,
    pub name: Arc<DirName>,
    pub node: Node,
}

/// What the writer does for one batch, in this order: write `files` (with their
/// metadata), create `links`, then apply the metadata of `dirs`.
#[derive(Default)]
pub(super) struct Batch {
    /// Regular files to write, each the first restored name of its inode.
    pub files: Vec<FileJob>,
    /// Further names of inodes written in this or an earlier batch.
    pub links: Vec<Link>,
    /// Directories whose whole contents were planned in this or an earlier
    /// batch, children before their parents.
    pub dirs: Vec<DirJob>,
    /// Chunk references of `files`.
    chunks: usize,
    /// Distinct directory handles held (counted when they change from one entry to the next).
    handles: usize,
    last_handle: usize,
}

impl Batch {
    fn entries(&self) -> usize {
        self.files.len() + self.links.len() + self.dirs.len()
    }

    fn is_empty(&self) -> bool {
        self.entries() == 0
    }

    /// The distinct directory handles the batch holds (about: counted where
    /// they change from one entry to the next).
    pub fn handles(&self) -> usize {
        self.handles
    }

    fn is_full(&self, limits: &BatchLimits) -> bool {
        self.entries() >= limits.entries || self.chunks >= limits.chunks || self.handles >= MAX_BATCH_HANDLES
    }

    fn hold(&mut self, h: &Handle) {
        let p = Arc::as_ptr(h) as usize;
        if p != self.last_handle {
            self.last_handle = p;
            self.handles += 1;
        }
    }
}

/// How many batches the entry limit takes to reach its full value: batch `k`
/// (from 0) may hold `entries >> (RAMP - k)` entries until then.
const RAMP: usize = 4;

/// The limits of the batch after `handed` others: the first ones hold fewer
/// entries (a sixteenth of the limit, doubling with each batch), so that the
/// first reads go out before a whole batch's trees are walked.
pub(super) fn ramped(limits: BatchLimits, handed: usize) -> BatchLimits {
    let shift = RAMP - handed.min(RAMP);
    BatchLimits { entries: (limits.entries >> shift).max(1), ..limits }
}

/// The first restored name of an inode with several names, and how many more
/// names it is expected to have.
struct FirstName {
    dir: Arc<DirName>,
    name: Vec<u8>,
    names_left: u64,
}

/// One directory on the walk's stack.
struct Frame<'a> {
    name: Arc<DirName>,
    /// Its open handle, if made and kept (see [`keep`]).
    handle: Option<Handle>,
    /// Whether it exists in the target.
    made: bool,
    /// Its node (none for the restore's root, which is the target).
    node: Option<Node>,
    /// Its entries not walked yet.
    rest: Entries<'a>,
    selected: bool,
    /// The length of the snapshot path buffer without this directory's name.
    snap_len: usize,
    /// With `--delete`, for a restored directory: the names its tree holds, so
    /// that what else the target's directory holds is removed when it is left.
    names: Option<HashSet<Vec<u8>>>,
}

/// Walks trees and plans the restore; see the module documentation.
pub(super) struct Planner<'a> {
    repo: &'a Repository,
    select: &'a Selector,
    /// Whether entries already in the target are accepted ([`Overwrite::allows_existing`]).
    overwrite: bool,
    mode: Overwrite,
    delete: bool,
    as_root: bool,
    policy: RestorePolicy,
    progress: &'a dyn Progress,
    limits: BatchLimits,
    /// Batches handed over so far.
    handed: usize,
    /// Inodes with several names whose names are not all planned yet.
    first_names: HashMap<(u64, u64), FirstName>,
    stack: Vec<Frame<'a>>,
    /// The snapshot path of the entry being walked.
    snap: Vec<u8>,
    batch: Batch,
    to_writer: SyncSender<Batch>,
    summary: RestoreSummary,
}

/// A directory's entries still to walk: read from its tree part by part, so a
/// directory of any size costs one part of its listing in memory
/// ([split listings](docs/design.md#split-trees)), or the one entry a restore
/// of a single file starts from. Files keep their content parts unresolved.
pub(super) enum Entries<'a> {
    /// Entries at hand.
    Listed(std::vec::IntoIter<Node>),
    /// Entries of a tree, loaded as they are reached.
    Streamed(TreeNodes<'a>),
}

impl Iterator for Entries<'_> {
    type Item = Result<Node>;

    fn next(&mut self) -> Option<Result<Node>> {
        match self {
            Entries::Listed(nodes) => nodes.next().map(Ok),
            Entries::Streamed(nodes) => nodes.next(),
        }
    }
}

/// Starts reading a tree for the restore: the one place the restore reads trees.
pub(super) fn load_tree<'a>(repo: &'a Repository, id: &Id) -> Result<Entries<'a>> {
    Ok(Entries::Streamed(repo.tree_nodes(id)?))
}

impl<'a> Planner<'a> {
    pub fn new(
        repo: &'a Repository,
        select: &'a Selector,
        opts: &RestoreOptions,
        policy: RestorePolicy,
        progress: &'a dyn Progress,
        to_writer: SyncSender<Batch>,
    ) -> Planner<'a> {
        Planner {
            repo,
            select,
            overwrite: opts.overwrite.allows_existing(),
            mode: opts.overwrite,
            delete: opts.delete,
            as_root: meta::is_root(),
            policy,
            progress,
            limits: BatchLimits { entries: opts.batch.entries.max(1), chunks: opts.batch.chunks.max(1), ..opts.batch },
            handed: 0,
            first_names: HashMap::new(),
            stack: Vec::new(),
            snap: Vec::new(),
            batch: Batch::default(),
            to_writer,
            summary: RestoreSummary::default(),
        }
    }

    /// Plans everything `located` (found at `snap_root` in the snapshot) holds
    /// into the target (open as `root`, named `target`), handing every batch to
    /// the writer. Returns what the walk itself restored (directories, symlinks,
    /// special files), warned about and failed to restore.
    pub fn run(&mut self, located: Located, snap_root: &Path, target: &Path, root: Handle) -> Result<RestoreSummary> {
        let located_kind = match &located {
            Located::Root(_) => None,
            Located::Entry(node) => Some(node.kind),
        };
        let (nodes, snap) = match located {
            Located::Root(id) => (load_tree(self.repo, &id)?, snap_root.to_path_buf()),
            Located::Entry(node) if node.kind == NodeKind::Dir => {
                let sub = node.subtree.ok_or_else(|| Error::corrupt("tree", "directory without subtree"))?;
                (load_tree(self.repo, &sub)?, snap_root.to_path_buf())
            }
            Located::Entry(node) => {
                (Entries::Listed(vec![*node].into_iter()), snap_root.parent().unwrap_or(Path::new("/")).to_path_buf())
            }
        };
        self.snap = snap.as_os_str().as_bytes().to_vec();
        // The target itself is a restored directory when a whole directory is restored into it.
        let whole_dir = self.select.takes_all() && !matches!(&located_kind, Some(k) if *k != NodeKind::Dir);
        self.stack.push(Frame {
            name: DirName::root(target),
            handle: Some(root),
            made: true,
            node: None,
            rest: nodes,
            selected: false,
            snap_len: self.snap.len(),
            names: (self.delete && whole_dir).then(HashSet::new),
        });
        while let Some(top) = self.stack.last_mut() {
            match top.rest.next() {
                Some(Ok(node)) => self.visit(node)?,
                // A part of the listing that does not load: what it and the parts
                // after it hold is not restored; the rest of the directory is.
                Some(Err(e)) => {
                    let path = top.name.path();
                    self.fail(path, e);
                }
                None => self.finish_dir()?,
            }
        }
        self.hand_over()?;
        Ok(std::mem::take(&mut self.summary))
    }

    /// Hands the current batch to the writer.
    fn hand_over(&mut self) -> Result<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let batch = std::mem::take(&mut self.batch);
        self.handed += 1;
        self.to_writer
            .send(batch)
            .map_err(|_| Error::InvalidInput("the restore writer stopped before the walk ended".into()))
    }

    /// Hands the current batch over if it is full.
    fn hand_over_if_full(&mut self) -> Result<()> {
        if self.batch.is_full(&ramped(self.limits, self.handed)) { self.hand_over() } else { Ok(()) }
    }

    fn warn(&mut self, path: &Path, msg: String) {
        self.summary.warnings += 1;
        self.progress.warn(path, &msg);
    }

    fn fail(&mut self, path: PathBuf, e: Error) {
        self.summary.failures.push((path, e));
    }

    /// The snapshot path of the entry being walked.
    fn snap_path(&self) -> &Path {
        Path::new(OsStr::from_bytes(&self.snap))
    }

    fn push_name(&mut self, name: &[u8]) -> usize {
        let len = self.snap.len();
        if !self.snap.ends_with(b"/") {
            self.snap.push(b'/');
        }
        self.snap.extend_from_slice(name);
        len
    }

    /// The handle of the directory at `depth` on the stack (which must be made),
    /// opened again from the nearest kept one if it was let go.
    fn resolve(&mut self, depth: usize) -> io::Result<Handle> {
        if let Some(h) = &self.stack[depth].handle {
            return Ok(h.clone());
        }
        let mut from = depth;
        while self.stack[from].handle.is_none() {
            from -= 1;
        }
        let current = self.stack.len() - 1;
        let mut h = self.stack[from].handle.clone().expect("found above");
        for d in from + 1..=depth {
            h = Arc::new(handles::open_dir(h.as_fd(), self.stack[d].name.name())?);
            if d == depth || keep(d, current) {
                self.stack[d].handle = Some(h.clone());
            }
        }
        Ok(h)
    }

    /// Lets go of the handles [`keep`] no longer keeps now that the stack is one deeper.
    fn release(&mut self) {
        let current = self.stack.len() - 1;
        let mut gap = SPAN;
        while gap <= current {
            let depth = current - gap;
            if !keep(depth, current) {
                self.stack[depth].handle = None;
            }
            match gap.checked_mul(SPAN) {
                Some(g) => gap = g,
                None => break,
            }
        }
    }

    /// Makes every directory of the stack that is not made yet (a selected
    /// entry below needs them). Returns the top's handle.
    fn make_stack(&mut self) -> Result<Handle> {
        let top = self.stack.len() - 1;
        if self.stack[top].made {
            return self.resolve(top).map_err(|e| Error::io(self.stack[top].name.path(), e));
        }
        let mut first = top;
        while !self.stack[first].made {
            first -= 1;
        }
        let mut parent = self.resolve(first).map_err(|e| Error::io(self.stack[first].name.path(), e))?;
        for d in first + 1..=top {
            let h = handles::make_dir(parent.as_fd(), self.stack[d].name.name(), self.overwrite, self.mode.replaces())
                .map_err(|e| self.dir_error(&self.stack[d].name.path(), e))?;
            parent = Arc::new(h);
            self.stack[d].made = true;
            if d == top || keep(d, top) {
                self.stack[d].handle = Some(parent.clone());
            }
        }
        Ok(parent)
    }

    /// The error for an entry that could not be created.
    fn dir_error(&self, path: &Path, e: io::Error) -> Error {
        if handles::exists(&e) && !self.overwrite {
            Error::TargetNotEmpty { path: path.to_path_buf() }
        } else {
            Error::io(path, e)
        }
    }

    /// Plans one entry of the directory on top of the stack.
    fn visit(&mut self, node: Node) -> Result<()> {
        if let Some(names) = &mut self.stack.last_mut().expect("not empty").names {
            names.insert(node.name.0.clone());
        }
        let snap_len = self.push_name(&node.name.0);
        let is_dir = node.kind == NodeKind::Dir;
        let ancestor = self.stack.last().expect("not empty").selected;
        let Some(selected) = self.select.judge(self.snap_path(), is_dir, ancestor) else {
            self.snap.truncate(snap_len);
            return Ok(());
        };
        if is_dir {
            return self.enter(node, selected, snap_len);
        }
        self.snap.truncate(snap_len);
        if !selected || node.kind == NodeKind::Socket {
            return Ok(());
        }
        let dir = match self.make_stack() {
            Ok(h) => h,
            Err(e) => {
                let path = self.stack.last().expect("not empty").name.join(&node.name.0);
                self.fail(path, e);
                return Ok(());
            }
        };
        let dir_name = self.stack.last().expect("not empty").name.clone();
        let place = Place { dir, dir_name, name: node.name.0.clone() };
        if self.keeps_existing(&node, &place) {
            self.summary.skipped += 1;
            return Ok(());
        }
        self.check_mode(|| place.path(), &node);
        match node.kind {
            NodeKind::File => self.plan_file(node, place),
            NodeKind::Symlink => {
                self.make_symlink(&node, &place);
                Ok(())
            }
            _ => {
                self.make_special(&node, &place);
                Ok(())
            }
        }
    }

    /// Whether the entry already at `place` stays as it is ([`Overwrite`]).
    fn keeps_existing(&mut self, node: &Node, place: &Place) -> bool {
        if matches!(self.mode, Overwrite::Refuse | Overwrite::Always) {
            return false;
        }
        let st = match handles::stat_at(place.dir.as_fd(), &place.name) {
            Ok(Some(st)) => st,
            Ok(None) => return false,
            Err(e) => {
                self.warn(&place.path(), format!("cannot look at what is already there: {e}; it is replaced"));
                return false;
            }
        };
        let there = super::totals::Existing {
            is_file: rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::RegularFile,
            size: st.st_size as u64,
            mtime: (st.st_mtime as i64, st.st_mtime_nsec as u32),
        };
        super::totals::keeps_existing(self.mode, Some(there), node)
    }

    /// Removes what the target's directory on top of the stack holds that its
    /// tree does not (`--delete`), never following a symlink.
    fn delete_extra(&mut self, handle: &Handle) {
        let top = self.stack.len() - 1;
        let Some(names) = self.stack[top].names.take() else { return };
        let dir_name = self.stack[top].name.clone();
        let listed = match handles::list(handle.as_fd()) {
            Ok(l) => l,
            Err(e) => {
                self.warn(
                    &dir_name.path(),
                    format!("cannot list the directory to delete what the snapshot lacks: {e}"),
                );
                return;
            }
        };
        for n in listed.into_iter().filter(|n| !names.contains(n)) {
            match handles::remove(handle.as_fd(), &n) {
                Ok(()) => self.summary.deleted += 1,
                Err(e) => {
                    let path = dir_name.join(&n);
                    self.warn(&path, format!("cannot delete it (--delete): {e}"));
                }
            }
        }
    }

    /// Reports a mode with bits outside what a mode holds: the entry is restored
    /// without it.
    fn check_mode(&mut self, path: impl FnOnce() -> PathBuf, node: &Node) {
        if node.mode & !MODE_BITS != 0 {
            let path = path();
            let e = Error::corrupt(
                format!("tree entry {}", path.display()),
                format!("mode {:o} has bits outside {MODE_BITS:o}; it was restored without its mode", node.mode),
            );
            self.fail(path, e);
        }
    }

    /// Enters a directory: makes it if it is selected and pushes it on the stack
    /// with its entries. A directory whose tree cannot be loaded is reported and
    /// restored empty (if selected).
    fn enter(&mut self, node: Node, selected: bool, snap_len: usize) -> Result<()> {
        let parent = self.stack.last().expect("not empty").name.clone();
        let name = parent.child(&node.name.0);
        self.stack.push(Frame {
            name: name.clone(),
            handle: None,
            made: false,
            node: None,
            rest: Entries::Listed(Vec::new().into_iter()),
            selected,
            snap_len,
            names: (self.delete && selected).then(HashSet::new),
        });
        self.release();
        let path = || name.path();
        if selected && let Err(e) = self.make_stack() {
            self.fail(path(), e);
            self.stack.pop();
            self.snap.truncate(snap_len);
            return Ok(());
        }
        let loaded = match node.subtree {
            Some(id) => load_tree(self.repo, &id),
            None => Err(Error::corrupt("tree", "directory without subtree")),
        };
        match loaded {
            Ok(entries) => self.stack.last_mut().expect("pushed").rest = entries,
            Err(e) => self.fail(path(), e),
        }
        self.stack.last_mut().expect("pushed").node = Some(Node { subtree: None, ..node });
        Ok(())
    }

    /// Leaves the directory on top of the stack, all of its entries planned:
    /// if it was made, it joins the batch so that its metadata is applied after
    /// its contents are written.
    fn finish_dir(&mut self) -> Result<()> {
        let top = self.stack.len() - 1;
        if self.stack[top].names.is_some() && self.stack[top].made {
            match self.resolve(top) {
                Ok(handle) => self.delete_extra(&handle),
                Err(e) => {
                    let path = self.stack[top].name.path();
                    self.warn(&path, format!("cannot open the directory to delete what the snapshot lacks: {e}"));
                }
            }
        }
        if self.stack[top].node.is_some() && self.stack[top].made {
            match self.resolve(top) {
                Ok(handle) => {
                    let frame = &mut self.stack[top];
                    let node = frame.node.take().expect("checked");
                    let name = frame.name.clone();
                    self.check_mode(|| name.path(), &node);
                    self.batch.hold(&handle);
                    self.batch.dirs.push(DirJob { handle, name, node });
                    self.summary.dirs += 1;
                }
                Err(e) => {
                    let path = self.stack[top].name.path();
                    self.warn(&path, format!("cannot restore the directory's metadata: {e}"));
                }
            }
        }
        let frame = self.stack.pop().expect("not empty");
        self.snap.truncate(frame.snap_len);
        drop(frame);
        self.hand_over_if_full()
    }

    /// Plans a regular file: its content, or a hard link to the first restored
    /// name of its inode.
    fn plan_file(&mut self, mut node: Node, place: Place) -> Result<()> {
        if node.links > 1 {
            let key = (node.device, node.inode);
            if let Some(first) = self.first_names.get_mut(&key) {
                let link = Link { key, first_dir: first.dir.clone(), first_name: first.name.clone(), place };
                first.names_left = first.names_left.saturating_sub(1);
                if first.names_left == 0 {
                    self.first_names.remove(&key);
                }
                self.batch.hold(&link.place.dir);
                self.batch.links.push(link);
                return self.hand_over_if_full();
            }
            let first = FirstName { dir: place.dir_name.clone(), name: place.name.clone(), names_left: node.links - 1 };
            self.first_names.insert(key, first);
        }
        if !node.content_parts.is_empty() {
            match self.repo.resolve_content(&node, &mut |_| {}) {
                Ok(content) => {
                    node.content = content;
                    node.content_parts.clear();
                }
                Err(e) => {
                    // Its other names, if any, try again on their own.
                    self.first_names.remove(&(node.device, node.inode));
                    self.fail(place.path(), e);
                    return Ok(());
                }
            }
        }
        self.batch.chunks += node.content.len();
        self.batch.hold(&place.dir);
        self.batch.files.push(FileJob { place, node });
        self.hand_over_if_full()
    }

    /// Creates a symlink with its exact target and its metadata.
    fn make_symlink(&mut self, node: &Node, place: &Place) {
        let target = node.target.as_ref().map(|t| t.0.as_slice()).unwrap_or_default();
        if target.is_empty() || target.contains(&0) {
            let e =
                Error::corrupt(format!("tree entry {}", place.path().display()), "symlink target empty or holding NUL");
            return self.fail(place.path(), e);
        }
        let dir = place.dir.as_fd();
        let made = handles::make_entry(dir, &place.name, self.overwrite, || handles::symlink(dir, &place.name, target));
        if let Err(e) = made {
            let e = self.dir_error(&place.path(), e);
            return self.fail(place.path(), e);
        }
        self.summary.others += 1;
        let r = meta::apply_to_symlink(dir, &place.name, node, &self.policy, &mut self.summary.withheld);
        if let Err(e) = r {
            self.warn(&place.path(), format!("cannot restore all metadata: {e}"));
        }
    }

    /// Creates a FIFO or device node with its metadata; device nodes only as
    /// root, and only when the policy restores privileged things.
    fn make_special(&mut self, node: &Node, place: &Place) {
        if node.kind != NodeKind::Fifo {
            if !self.as_root {
                return self.warn(&place.path(), "device node not recreated: restoring device nodes needs root".into());
            }
            if !self.policy.owners {
                self.summary.withheld.devices += 1;
                return;
            }
        }
        let dir = place.dir.as_fd();
        let (policy, withheld) = (&self.policy, &mut self.summary.withheld);
        let made = handles::make_entry(dir, &place.name, self.overwrite, || {
            meta::create_special(dir, &place.name, node, policy, withheld)
        });
        match made {
            Ok(()) => self.summary.others += 1,
            Err(e) if handles::exists(&e) || e.kind() == io::ErrorKind::NotFound => {
                let e = self.dir_error(&place.path(), e);
                self.fail(place.path(), e)
            }
            Err(e) => self.warn(&place.path(), format!("cannot create special file: {e}")),
        }
    }
}
