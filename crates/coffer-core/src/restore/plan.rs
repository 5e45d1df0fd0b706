//! Walking the snapshot's trees in order: directories, symlinks and special files
//! are created on the way; regular files, hard links and completed directories
//! are collected into bounded batches, each handed to the writer when full.
//! See docs/design.md#restore.

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::SyncSender;

use super::{BatchLimits, RestoreOptions, RestoreSummary, Selector};
use crate::error::{Error, Result};
use crate::format::tree::{Node, NodeKind};
use crate::fsmeta;
use crate::id::Id;
use crate::progress::Progress;
use crate::repo::Repository;
use crate::walk::Located;

/// What the writer does for one batch, in this order: write `files` (with their
/// metadata), create `links`, then apply the metadata of `dirs`.
#[derive(Default)]
pub(super) struct Batch {
    /// Regular files to write, each the first restored name of its inode.
    pub files: Vec<(PathBuf, Node)>,
    /// Further names of inodes written in this or an earlier batch.
    pub links: Vec<Link>,
    /// Directories whose whole contents were planned in this or an earlier
    /// batch, children before their parents.
    pub dirs: Vec<(PathBuf, Node)>,
    /// Chunk references of `files`.
    chunks: usize,
}

impl Batch {
    fn entries(&self) -> usize {
        self.files.len() + self.links.len() + self.dirs.len()
    }

    fn is_empty(&self) -> bool {
        self.entries() == 0
    }

    fn is_full(&self, limits: &BatchLimits) -> bool {
        self.entries() >= limits.entries || self.chunks >= limits.chunks
    }
}

/// A hard link to make: `path` is another name of the file written at `first`.
pub(super) struct Link {
    pub first: PathBuf,
    pub path: PathBuf,
}

/// The first restored name of an inode with several names, and how many more
/// names it is expected to have.
struct FirstName {
    path: PathBuf,
    names_left: u64,
}

/// Walks trees and plans the restore; see the module documentation.
pub(super) struct Planner<'a> {
    repo: &'a Repository,
    select: &'a Selector,
    overwrite: bool,
    as_root: bool,
    progress: &'a dyn Progress,
    target: PathBuf,
    limits: BatchLimits,
    /// Inodes with several names whose names are not all planned yet.
    first_names: HashMap<(u64, u64), FirstName>,
    /// Directories on the path being walked that are known to exist.
    made: HashSet<PathBuf>,
    batch: Batch,
    to_writer: SyncSender<Batch>,
    summary: RestoreSummary,
}

impl<'a> Planner<'a> {
    pub fn new(
        repo: &'a Repository,
        select: &'a Selector,
        opts: &RestoreOptions,
        as_root: bool,
        progress: &'a dyn Progress,
        to_writer: SyncSender<Batch>,
    ) -> Planner<'a> {
        Planner {
            repo,
            select,
            overwrite: opts.overwrite,
            as_root,
            progress,
            target: opts.target.clone(),
            limits: BatchLimits { entries: opts.batch.entries.max(1), chunks: opts.batch.chunks.max(1) },
            first_names: HashMap::new(),
            made: HashSet::new(),
            batch: Batch::default(),
            to_writer,
            summary: RestoreSummary::default(),
        }
    }

    /// Plans everything `located` (found at `snap_root` in the snapshot) holds
    /// into the target, handing every batch to the writer. Returns what the walk
    /// itself restored (directories, symlinks, special files) and warned about.
    pub fn run(&mut self, located: Located, snap_root: &Path) -> Result<RestoreSummary> {
        let target = self.target.clone();
        match located {
            Located::Root(id) => {
                self.plan_dir(id, &target, snap_root, false)?;
            }
            Located::Entry(node) if node.kind == NodeKind::Dir => {
                let sub = node.subtree.ok_or_else(|| Error::corrupt("tree", "directory without subtree"))?;
                self.plan_dir(sub, &target, snap_root, false)?;
            }
            Located::Entry(node) => {
                let name = OsStr::from_bytes(&node.name.0).to_owned();
                let parent = snap_root.parent().unwrap_or(Path::new("/")).to_path_buf();
                self.plan_node(*node, &target.join(&name), &parent.join(&name), false)?;
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
        self.to_writer
            .send(batch)
            .map_err(|_| Error::InvalidInput("the restore writer stopped before the walk ended".into()))
    }

    /// Hands the current batch over if it is full.
    fn hand_over_if_full(&mut self) -> Result<()> {
        if self.batch.is_full(&self.limits) { self.hand_over() } else { Ok(()) }
    }

    fn warn(&mut self, path: &Path, msg: String) {
        self.summary.warnings += 1;
        self.progress.warn(path, &msg);
    }

    /// Removes what stands at `path` unless it is a directory and `keep_dir`.
    fn clear(&self, path: &Path, keep_dir: bool) -> Result<()> {
        let Ok(md) = std::fs::symlink_metadata(path) else {
            return Ok(());
        };
        if !self.overwrite {
            return Err(Error::TargetNotEmpty { path: path.to_path_buf() });
        }
        let r = if md.is_dir() {
            if keep_dir {
                return Ok(());
            }
            std::fs::remove_dir_all(path)
        } else {
            std::fs::remove_file(path)
        };
        r.map_err(|e| Error::io(path, e))
    }

    /// Plans the contents of tree `id` into `dir`. Returns whether anything below
    /// was restored (which forces `dir` to exist).
    fn plan_dir(&mut self, id: Id, dir: &Path, snap_dir: &Path, selected: bool) -> Result<bool> {
        let tree = self.repo.load_tree(&id)?;
        let mut any = false;
        for node in tree.nodes {
            let name = OsStr::from_bytes(&node.name.0).to_owned();
            any |= self.plan_node(node, &dir.join(&name), &snap_dir.join(&name), selected)?;
        }
        Ok(any)
    }

    /// Makes `dir` and every directory between the target and it exist as real
    /// directories. Never follows a symlink found in the target: with
    /// `--overwrite` it is replaced by a directory, otherwise it is an error.
    fn ensure_dir(&mut self, dir: &Path) -> Result<()> {
        if dir == self.target || self.made.contains(dir) {
            return Ok(());
        }
        if let Some(parent) = dir.parent().filter(|p| p.starts_with(&self.target)) {
            self.ensure_dir(parent)?;
        }
        match std::fs::symlink_metadata(dir) {
            Ok(md) if md.is_dir() => {}
            Ok(_) => {
                self.clear(dir, true)?;
                std::fs::create_dir(dir).map_err(|e| Error::io(dir, e))?;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                std::fs::create_dir(dir).map_err(|e| Error::io(dir, e))?;
            }
            Err(e) => return Err(Error::io(dir, e)),
        }
        self.made.insert(dir.to_path_buf());
        Ok(())
    }

    fn ensure_parent(&mut self, path: &Path) -> Result<()> {
        match path.parent() {
            Some(p) => self.ensure_dir(p),
            None => Ok(()),
        }
    }

    /// Plans one entry. Returns whether it (or anything below it) is restored.
    fn plan_node(&mut self, node: Node, path: &Path, snap_path: &Path, ancestor_selected: bool) -> Result<bool> {
        let is_dir = node.kind == NodeKind::Dir;
        let Some(selected) = self.select.judge(snap_path, is_dir, ancestor_selected) else {
            return Ok(false);
        };
        if is_dir {
            return self.plan_subdir(node, path, snap_path, selected);
        }
        if !selected {
            return Ok(false);
        }
        self.clear(path, false)?;
        self.ensure_parent(path)?;
        match node.kind {
            NodeKind::File => self.plan_file(node, path)?,
            NodeKind::Symlink => {
                let target = OsStr::from_bytes(node.target.as_ref().map(|t| t.0.as_slice()).unwrap_or_default());
                std::os::unix::fs::symlink(target, path).map_err(|e| Error::io(path, e))?;
                self.summary.others += 1;
                self.apply(path, &node);
            }
            NodeKind::Fifo | NodeKind::Chardev | NodeKind::Blockdev => return Ok(self.make_special(&node, path)),
            NodeKind::Socket => return Ok(false),
            NodeKind::Dir => unreachable!("handled above"),
        }
        Ok(true)
    }

    /// Plans a directory and everything below it; once all of that is planned,
    /// the directory joins the batch so that its metadata is applied after its
    /// contents are written.
    fn plan_subdir(&mut self, node: Node, path: &Path, snap_path: &Path, selected: bool) -> Result<bool> {
        if selected {
            self.ensure_dir(path)?;
        }
        let sub = node.subtree.ok_or_else(|| Error::corrupt("tree", "directory without subtree"))?;
        let below = self.plan_dir(sub, path, snap_path, selected)?;
        // Nothing more is restored below `path`.
        self.made.remove(path);
        if !(selected || below) {
            return Ok(false);
        }
        self.summary.dirs += 1;
        self.batch.dirs.push((path.to_path_buf(), node));
        self.hand_over_if_full()?;
        Ok(true)
    }

    /// Plans a regular file: its content, or a hard link to the first restored
    /// name of its inode.
    fn plan_file(&mut self, node: Node, path: &Path) -> Result<()> {
        if node.links > 1 {
            let key = (node.device, node.inode);
            if let Some(first) = self.first_names.get_mut(&key) {
                let link = Link { first: first.path.clone(), path: path.to_path_buf() };
                first.names_left = first.names_left.saturating_sub(1);
                if first.names_left == 0 {
                    self.first_names.remove(&key);
                }
                self.batch.links.push(link);
                return self.hand_over_if_full();
            }
            self.first_names.insert(key, FirstName { path: path.to_path_buf(), names_left: node.links - 1 });
        }
        self.batch.chunks += node.content.len();
        self.batch.files.push((path.to_path_buf(), node));
        self.hand_over_if_full()
    }

    /// Creates a FIFO or device node. Returns false only for a device node that
    /// needs root to be made.
    fn make_special(&mut self, node: &Node, path: &Path) -> bool {
        if node.kind != NodeKind::Fifo && !self.as_root {
            self.warn(path, "device node not recreated: restoring device nodes needs root".into());
            return false;
        }
        match fsmeta::create_special(path, node) {
            Ok(()) => {
                self.summary.others += 1;
                self.apply(path, node);
                true
            }
            Err(e) => {
                self.warn(path, format!("cannot create special file: {e}"));
                true
            }
        }
    }

    fn apply(&mut self, path: &Path, node: &Node) {
        if let Err(e) = fsmeta::apply_metadata(path, node, self.as_root) {
            self.warn(path, format!("cannot restore all metadata: {e}"));
        }
    }
}
