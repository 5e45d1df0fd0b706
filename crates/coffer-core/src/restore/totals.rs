//! The totals a progress display shows: a separate walk of the trees, made only
//! when the display wants them, that counts what the restore will write without
//! keeping any of it.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::Selector;
use crate::error::{Error, Result};
use crate::format::tree::{Node, NodeKind};
use crate::id::Id;
use crate::repo::Repository;
use crate::walk::Located;

/// Regular files a restore writes (each inode once) and their bytes.
#[derive(Debug, Default)]
pub(super) struct Totals {
    pub bytes: u64,
    pub files: u64,
}

struct Counter<'a> {
    repo: &'a Repository,
    select: &'a Selector,
    /// Inodes with several names already counted.
    seen: HashSet<(u64, u64)>,
    totals: Totals,
}

/// Counts what restoring `located` (found at `snap_root`) writes.
pub(super) fn count(repo: &Repository, select: &Selector, located: &Located, snap_root: &Path) -> Result<Totals> {
    let mut c = Counter { repo, select, seen: HashSet::new(), totals: Totals::default() };
    match located {
        Located::Root(id) => c.dir(*id, snap_root, false)?,
        Located::Entry(node) if node.kind == NodeKind::Dir => c.dir(subtree(node)?, snap_root, false)?,
        Located::Entry(node) => {
            let parent = snap_root.parent().unwrap_or(Path::new("/"));
            c.node(node, &parent.join(OsStr::from_bytes(&node.name.0)), false)?;
        }
    }
    Ok(c.totals)
}

fn subtree(node: &Node) -> Result<Id> {
    node.subtree.ok_or_else(|| Error::corrupt("tree", "directory without subtree"))
}

impl Counter<'_> {
    fn dir(&mut self, id: Id, snap_dir: &Path, selected: bool) -> Result<()> {
        let tree = self.repo.load_tree(&id)?;
        for node in &tree.nodes {
            self.node(node, &snap_dir.join(OsStr::from_bytes(&node.name.0)), selected)?;
        }
        Ok(())
    }

    fn node(&mut self, node: &Node, snap_path: &Path, ancestor_selected: bool) -> Result<()> {
        let is_dir = node.kind == NodeKind::Dir;
        let Some(selected) = self.select.judge(snap_path, is_dir, ancestor_selected) else {
            return Ok(());
        };
        if is_dir {
            return self.dir(subtree(node)?, snap_path, selected);
        }
        if !selected || node.kind != NodeKind::File {
            return Ok(());
        }
        if node.links > 1 && !self.seen.insert((node.device, node.inode)) {
            return Ok(());
        }
        self.totals.bytes += node.size;
        self.totals.files += 1;
        Ok(())
    }
}
