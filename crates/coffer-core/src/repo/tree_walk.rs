//! Navigating a snapshot's trees: finding the entry at a path, visiting every
//! entry below a tree.

use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

use crate::error::{Error, Result};
use crate::format::tree::{Node, NodeKind};
use crate::id::Id;
use crate::repo::{Repository, TreeNodes};

/// What a snapshot path names: the root, or an entry with the path of its parent.
pub enum Located {
    /// The snapshot's root tree.
    Root(Id),
    /// An entry below the root.
    Entry(Box<Node>),
}

/// Finds the entry at `path` (absolute, as in the snapshot) below the root tree.
/// Each directory on the way is read part by part only until the name is found
/// (names are sorted), and no more than one listing part is held at a time.
pub fn locate(repo: &Repository, root: Id, path: &Path) -> Result<Located> {
    let not_found = || Error::PathNotInSnapshot(path.display().to_string());
    let mut comps = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.as_bytes()),
            _ => None,
        })
        .peekable();
    let mut tree = root;
    let mut found: Option<Node> = None;
    while let Some(name) = comps.next() {
        let node = find(repo, &tree, name)?.ok_or_else(not_found)?;
        if comps.peek().is_some() {
            tree = node.subtree.filter(|_| node.kind == NodeKind::Dir).ok_or_else(not_found)?;
        }
        found = Some(node);
    }
    Ok(match found {
        None => Located::Root(root),
        Some(n) => Located::Entry(Box::new(n)),
    })
}

/// The entry `name` of tree `id`, read part by part until it is passed.
pub fn find(repo: &Repository, id: &Id, name: &[u8]) -> Result<Option<Node>> {
    for n in repo.tree_nodes(id)? {
        let n = n?;
        match n.name.0.as_slice().cmp(name) {
            std::cmp::Ordering::Less => {}
            std::cmp::Ordering::Equal => return Ok(Some(n)),
            std::cmp::Ordering::Greater => return Ok(None),
        }
    }
    Ok(None)
}

/// Visits every entry below tree `id` depth first, in name order, with its
/// snapshot path (`prefix` joined with the names above it). Directories are
/// visited before their contents.
///
/// The walk keeps an explicit stack of directories being listed, each streamed
/// part by part ([`Repository::tree_nodes`]), and one path buffer pushed and
/// popped: a tree of any depth is walked without recursion, in time linear in
/// its entries and their names.
pub fn walk(repo: &Repository, id: Id, prefix: &Path, visit: &mut dyn FnMut(&Path, &Node) -> Result<()>) -> Result<()> {
    let mut path = prefix.to_path_buf();
    // Each directory being listed, and whether `path` ends with the name of its
    // entry visited last (popped before the next one is pushed).
    let mut stack: Vec<(TreeNodes<'_>, bool)> = vec![(repo.tree_nodes(&id)?, false)];
    while let Some((nodes, named)) = stack.last_mut() {
        let Some(node) = nodes.next() else {
            if *named {
                path.pop();
            }
            stack.pop();
            continue;
        };
        let node = node?;
        if *named {
            path.pop();
        }
        path.push(std::ffi::OsStr::from_bytes(&node.name.0));
        *named = true;
        visit(&path, &node)?;
        if let (NodeKind::Dir, Some(sub)) = (node.kind, node.subtree) {
            stack.push((repo.tree_nodes(&sub)?, false));
        }
    }
    Ok(())
}
