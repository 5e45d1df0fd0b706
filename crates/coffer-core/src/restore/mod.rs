//! The restorer: recreates a snapshot (or part of it) in a local directory.
//! See docs/design.md#restore.
//!
//! The trees are walked once to create directories, symlinks and special files
//! and to plan the regular files; file contents are then written in parallel,
//! each blob verified against its id before it is written; hard links are linked
//! to the first restored path of their inode; directory metadata is applied
//! last, deepest first, so that writing into a directory does not change its mtime
//! afterwards. A file whose content cannot be restored is removed, never left
//! half-written, and reported in [`RestoreSummary::failures`].

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use ignore::gitignore::Gitignore;
use rayon::prelude::*;

mod content;

use crate::backup::build_excludes;
use crate::error::{Error, Result};
use crate::format::snapshot::Snapshot;
use crate::format::tree::{Node, NodeKind};
use crate::fsmeta;
use crate::id::Id;
use crate::progress::Progress;
use crate::repo::Repository;
use crate::walk::{Located, locate};

/// What to restore and where.
#[derive(Clone, Debug, Default)]
pub struct RestoreOptions {
    /// Directory to restore into; created if missing.
    pub target: PathBuf,
    /// Path inside the snapshot to restore (default: everything). A directory's
    /// contents land directly in the target; a file lands as `target/<name>`.
    pub subpath: Option<PathBuf>,
    /// gitignore-style patterns: only matching entries (and what is below them) are restored.
    pub includes: Vec<String>,
    /// gitignore-style patterns of entries not to restore.
    pub excludes: Vec<String>,
    /// Replace what is already in the target instead of refusing.
    pub overwrite: bool,
}

/// What a restore did.
#[derive(Debug, Default)]
pub struct RestoreSummary {
    /// Regular files written.
    pub files: u64,
    /// Directories restored.
    pub dirs: u64,
    /// Symlinks, FIFOs, devices and hard links created.
    pub others: u64,
    /// Bytes of file content written.
    pub bytes: u64,
    /// Non-fatal problems (metadata that could not be applied, entries not recreated).
    pub warnings: u64,
    /// Entries that could not be restored, with the reason.
    pub failures: Vec<(PathBuf, Error)>,
}

struct Planner<'a> {
    repo: &'a Repository,
    includes: Option<Gitignore>,
    excludes: Gitignore,
    overwrite: bool,
    as_root: bool,
    progress: &'a dyn Progress,
    files: Vec<(PathBuf, Node)>,
    links: Vec<(PathBuf, PathBuf)>,
    first_link: HashMap<(u64, u64), PathBuf>,
    dirs: Vec<(PathBuf, Node)>,
    target: PathBuf,
    made: std::collections::HashSet<PathBuf>,
    summary: RestoreSummary,
}

/// Restores `snapshot` according to `opts`.
pub fn restore(
    repo: &Repository,
    snapshot: &Snapshot,
    opts: &RestoreOptions,
    progress: &dyn Progress,
) -> Result<RestoreSummary> {
    // Find what to restore before touching the target, so a wrong path leaves nothing behind.
    let subpath = opts.subpath.clone().unwrap_or_else(|| PathBuf::from("/"));
    let snap_root = Path::new("/").join(&subpath);
    let located = locate(repo, snapshot.tree, &snap_root)?;
    let target = opts.target.clone();
    match std::fs::read_dir(&target) {
        Ok(mut rd) => {
            if rd.next().is_some() && !opts.overwrite {
                return Err(Error::TargetNotEmpty { path: target });
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            std::fs::create_dir_all(&target).map_err(|e| Error::io(&target, e))?
        }
        Err(e) => return Err(Error::io(&target, e)),
    }
    let mut p = Planner {
        repo,
        includes: if opts.includes.is_empty() { None } else { Some(build_excludes(&opts.includes)?) },
        excludes: build_excludes(&opts.excludes)?,
        overwrite: opts.overwrite,
        as_root: fsmeta::is_root(),
        progress,
        files: Vec::new(),
        links: Vec::new(),
        first_link: HashMap::new(),
        dirs: Vec::new(),
        target: target.clone(),
        made: std::collections::HashSet::new(),
        summary: RestoreSummary::default(),
    };
    match located {
        Located::Root(id) => {
            p.plan_dir(id, &target, &snap_root, false)?;
        }
        Located::Entry(node) if node.kind == NodeKind::Dir => {
            let sub = node.subtree.ok_or_else(|| Error::corrupt("tree", "directory without subtree"))?;
            p.plan_dir(sub, &target, &snap_root, false)?;
        }
        Located::Entry(node) => {
            let name = OsStr::from_bytes(&node.name.0).to_owned();
            let parent = snap_root.parent().unwrap_or(Path::new("/")).to_path_buf();
            p.plan_node(&node, &target.join(&name), &parent.join(&name), false)?;
        }
    }
    let total: u64 = p.files.iter().map(|(_, n)| n.size).sum();
    progress.set_total(total, p.files.len() as u64);
    p.write_files();
    p.make_links();
    p.finish_dirs();
    Ok(p.summary)
}

impl Planner<'_> {
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

    fn selected(&self, snap_path: &Path, is_dir: bool, ancestor_selected: bool) -> bool {
        ancestor_selected || self.includes.as_ref().is_none_or(|inc| inc.matched(snap_path, is_dir).is_ignore())
    }

    /// Plans the contents of tree `id` into `dir`. Returns whether anything below
    /// was restored (which forces `dir` to exist).
    fn plan_dir(&mut self, id: Id, dir: &Path, snap_dir: &Path, selected: bool) -> Result<bool> {
        let tree = self.repo.load_tree(&id)?;
        let mut any = false;
        for node in &tree.nodes {
            let name = OsStr::from_bytes(&node.name.0);
            let any_here = self.plan_node(node, &dir.join(name), &snap_dir.join(name), selected)?;
            any |= any_here;
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

    fn plan_node(&mut self, node: &Node, path: &Path, snap_path: &Path, ancestor_selected: bool) -> Result<bool> {
        let is_dir = node.kind == NodeKind::Dir;
        if self.excludes.matched(snap_path, is_dir).is_ignore() {
            return Ok(false);
        }
        let selected = self.selected(snap_path, is_dir, ancestor_selected);
        if is_dir {
            if selected {
                self.ensure_dir(path)?;
            }
            let sub = node.subtree.ok_or_else(|| Error::corrupt("tree", "directory without subtree"))?;
            let below = self.plan_dir(sub, path, snap_path, selected)?;
            if selected || below {
                self.summary.dirs += 1;
                self.dirs.push((path.to_path_buf(), node.clone()));
            }
            return Ok(selected || below);
        }
        if !selected {
            return Ok(false);
        }
        self.clear(path, false)?;
        self.ensure_parent(path)?;
        match node.kind {
            NodeKind::File => {
                if node.links > 1 {
                    let key = (node.device, node.inode);
                    if let Some(first) = self.first_link.get(&key) {
                        self.links.push((first.clone(), path.to_path_buf()));
                        return Ok(true);
                    }
                    self.first_link.insert(key, path.to_path_buf());
                }
                self.files.push((path.to_path_buf(), node.clone()));
            }
            NodeKind::Symlink => {
                let target = OsStr::from_bytes(node.target.as_ref().map(|t| t.0.as_slice()).unwrap_or_default());
                std::os::unix::fs::symlink(target, path).map_err(|e| Error::io(path, e))?;
                self.summary.others += 1;
                self.apply(path, node);
            }
            NodeKind::Fifo | NodeKind::Chardev | NodeKind::Blockdev => {
                if node.kind != NodeKind::Fifo && !self.as_root {
                    self.warn(path, "device node not recreated: restoring device nodes needs root".into());
                    return Ok(false);
                }
                match fsmeta::create_special(path, node) {
                    Ok(()) => {
                        self.summary.others += 1;
                        self.apply(path, node);
                    }
                    Err(e) => self.warn(path, format!("cannot create special file: {e}")),
                }
            }
            NodeKind::Socket => return Ok(false),
            NodeKind::Dir => unreachable!("handled above"),
        }
        Ok(true)
    }

    fn apply(&mut self, path: &Path, node: &Node) {
        if let Err(e) = fsmeta::apply_metadata(path, node, self.as_root) {
            self.warn(path, format!("cannot restore all metadata: {e}"));
        }
    }

    fn write_files(&mut self) {
        let files = std::mem::take(&mut self.files);
        let results = content::write_contents(self.repo, &files, self.progress);
        let progress = self.progress;
        let as_root = self.as_root;
        let warnings = AtomicU64::new(0);
        let bytes = AtomicU64::new(0);
        let failures = Mutex::new(Vec::new());
        files.par_iter().zip(results).for_each(|((path, node), r)| match r {
            Ok(n) => {
                bytes.fetch_add(n, Ordering::Relaxed);
                if let Err(e) = fsmeta::apply_metadata(path, node, as_root) {
                    warnings.fetch_add(1, Ordering::Relaxed);
                    progress.warn(path, &format!("cannot restore all metadata: {e}"));
                }
                progress.add_item(path);
            }
            Err(e) => {
                // Never leave a half-written file that looks restored.
                let _ = std::fs::remove_file(path);
                failures.lock().expect("poisoned").push((path.clone(), e));
            }
        });
        let failures = failures.into_inner().expect("poisoned");
        let failed: std::collections::HashSet<PathBuf> = failures.iter().map(|(p, _)| p.clone()).collect();
        let (lost, links): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.links).into_iter().partition(|(first, _)| failed.contains(first));
        self.links = links;
        let lost = lost.into_iter().map(|(first, path)| {
            let why = format!("hard link to {} not created: that file could not be restored", first.display());
            (path, Error::InvalidInput(why))
        });
        self.summary.files += (files.len() - failures.len()) as u64;
        self.summary.bytes += bytes.into_inner();
        self.summary.warnings += warnings.into_inner();
        self.summary.failures.extend(failures);
        self.summary.failures.extend(lost);
    }

    fn make_links(&mut self) {
        for (first, path) in std::mem::take(&mut self.links) {
            match std::fs::hard_link(&first, &path) {
                Ok(()) => self.summary.others += 1,
                Err(e) => self.summary.failures.push((path.clone(), Error::io(&path, e))),
            }
        }
    }

    fn finish_dirs(&mut self) {
        // `dirs` is in post-order: children before their parents.
        for (path, node) in std::mem::take(&mut self.dirs) {
            if std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir()) {
                self.apply(&path, &node);
            }
        }
    }
}
