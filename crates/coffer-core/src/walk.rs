//! Navigating a snapshot's trees: finding the entry at a path, visiting every
//! entry below a tree.

use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use crate::error::{Error, Result};
use crate::format::tree::{Node, NodeKind};
use crate::id::Id;
use crate::repo::Repository;

/// What a snapshot path names: the root, or an entry with the path of its parent.
pub enum Located {
    /// The snapshot's root tree.
    Root(Id),
    /// An entry below the root.
    Entry(Box<Node>),
}

/// Finds the entry at `path` (absolute, as in the snapshot) below the root tree.
pub fn locate(repo: &Repository, root: Id, path: &Path) -> Result<Located> {
    let comps: Vec<&[u8]> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.as_bytes()),
            _ => None,
        })
        .collect();
    let mut tree = root;
    let mut found: Option<Node> = None;
    for (i, name) in comps.iter().enumerate() {
        let t = repo.load_tree(&tree)?;
        let node = t.find(name).ok_or_else(|| Error::PathNotInSnapshot(path.display().to_string()))?.clone();
        if i + 1 < comps.len() {
            tree = node
                .subtree
                .filter(|_| node.kind == NodeKind::Dir)
                .ok_or_else(|| Error::PathNotInSnapshot(path.display().to_string()))?;
        }
        found = Some(node);
    }
    Ok(match found {
        None => Located::Root(root),
        Some(n) => Located::Entry(Box::new(n)),
    })
}

/// Visits every entry below tree `id` depth first, in name order, with its
/// snapshot path (`prefix` joined with the names above it). Directories are
/// visited before their contents.
pub fn walk(repo: &Repository, id: Id, prefix: &Path, visit: &mut dyn FnMut(&Path, &Node) -> Result<()>) -> Result<()> {
    let tree = repo.load_tree(&id)?;
    for node in &tree.nodes {
        let path: PathBuf = prefix.join(std::ffi::OsStr::from_bytes(&node.name.0));
        visit(&path, node)?;
        if let (NodeKind::Dir, Some(sub)) = (node.kind, node.subtree) {
            walk(repo, sub, &path, visit)?;
        }
    }
    Ok(())
}
