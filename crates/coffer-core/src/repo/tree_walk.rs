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

/// The longest snapshot path a bounded walk ([`walk_bounded`]) visits, in bytes:
/// Linux's `PATH_MAX`. A crafted chain of directories has paths that grow with its
/// depth, and printing every one grows with the square of it (tens of GB for a
/// 200,000-level chain); no path a file system gives is longer (docs/design.md#dump).
pub const MAX_PATH_LEN: usize = 4096;

/// How much of an over-long entry's directory [`TooLong`] shows.
const HEAD_LEN: usize = 200;

/// An entry a bounded walk left out, with what is below it: its path would be
/// longer than [`MAX_PATH_LEN`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TooLong {
    /// The first bytes of the path of its directory (lossy UTF-8).
    pub head: String,
    /// The entry's name (lossy UTF-8), cut to 255 bytes.
    pub name: String,
    /// The number of directories above it, below the root.
    pub depth: usize,
    /// How long its path would be, in bytes.
    pub len: usize,
}

impl std::fmt::Display for TooLong {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "entry `{}` at depth {} below `{}…`: its path would be {} bytes, more than the {MAX_PATH_LEN} a path may \
             have; it and everything below it are left out (the tree was crafted: no file system gives such a path)",
            self.name, self.depth, self.head, self.len
        )
    }
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
    walk_within(repo, id, prefix, usize::MAX, visit, &mut |_| Ok(()))
}

/// [`walk`], for what prints or writes paths (`ls`, `dump`, `find`): an entry
/// whose path would be longer than [`MAX_PATH_LEN`] is neither visited nor
/// entered but given to `too_long`, and the walk goes on with the next one. What
/// is visited then costs at most [`MAX_PATH_LEN`] bytes of path per entry.
pub fn walk_bounded(
    repo: &Repository,
    id: Id,
    prefix: &Path,
    visit: &mut dyn FnMut(&Path, &Node) -> Result<()>,
    too_long: &mut dyn FnMut(TooLong) -> Result<()>,
) -> Result<()> {
    walk_within(repo, id, prefix, MAX_PATH_LEN, visit, too_long)
}

fn walk_within(
    repo: &Repository,
    id: Id,
    prefix: &Path,
    max_len: usize,
    visit: &mut dyn FnMut(&Path, &Node) -> Result<()>,
    too_long: &mut dyn FnMut(TooLong) -> Result<()>,
) -> Result<()> {
    let mut path = prefix.to_path_buf();
    let base_depth = prefix.components().filter(|c| matches!(c, Component::Normal(_))).count();
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
            *named = false;
        }
        let dir = path.as_os_str().as_bytes();
        let len = dir.len() + usize::from(!dir.ends_with(b"/")) + node.name.0.len();
        if len > max_len {
            too_long(TooLong {
                head: String::from_utf8_lossy(&dir[..dir.len().min(HEAD_LEN)]).into_owned(),
                name: String::from_utf8_lossy(&node.name.0[..node.name.0.len().min(255)]).into_owned(),
                depth: base_depth + stack.len() - 1,
                len,
            })?;
            continue;
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

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::format::pack::BlobType;
    use crate::format::tree::Tree;
    use crate::repo::BlobSaver;
    use crate::testing::{test_node, test_repo};

    fn save_tree(saver: &BlobSaver, mut nodes: Vec<Node>) -> Id {
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        saver.save(BlobType::Tree, &Tree { nodes }.encode()).unwrap().0
    }

    fn dir(name: &str, subtree: Id) -> Node {
        Node { subtree: Some(subtree), ..test_node(name, NodeKind::Dir) }
    }

    /// A crafted chain of directories `d/d/…` deeper than any path can be, with
    /// an entry beside it at the root and one beside it past the limit: the walk
    /// leaves out the first entry whose path is too long, with what is below it,
    /// names it, and goes on with the rest.
    #[test]
    fn a_chain_deeper_than_a_path_can_be_is_cut_where_its_paths_pass_the_limit() {
        const LEVELS: usize = 20_000;
        let t = test_repo();
        let saver = BlobSaver::new(&t.repo);
        let mut id = save_tree(&saver, vec![test_node("bottom", NodeKind::Fifo)]);
        for level in (0..LEVELS).rev() {
            let mut nodes = vec![dir("d", id)];
            // Beside the directory at depth 3000 (past the limit): an entry left out with it.
            if level == 3000 {
                nodes.push(test_node("e", NodeKind::Fifo));
            }
            id = save_tree(&saver, nodes);
        }
        let root = save_tree(&saver, vec![dir("a", id), test_node("z", NodeKind::Fifo)]);
        saver.finish().unwrap();
        let (mut visited, mut bytes, mut last) = (0usize, 0usize, PathBuf::new());
        let mut left_out = Vec::new();
        walk_bounded(
            &t.repo,
            root,
            Path::new("/"),
            &mut |p, _| {
                visited += 1;
                bytes += p.as_os_str().len();
                last = p.to_path_buf();
                Ok(())
            },
            &mut |too_long| {
                left_out.push(too_long);
                Ok(())
            },
        )
        .unwrap();
        // "/a" then "/d" per level: the deepest visited path is at most the limit.
        let deepest = (MAX_PATH_LEN - "/a".len()) / 2;
        assert_eq!(visited, 1 + deepest + 1, "a, the chain down to the limit, and z");
        assert_eq!(last, Path::new("/z"), "the walk goes on after the chain");
        assert_eq!(left_out.len(), 1, "{left_out:?}");
        let cut = &left_out[0];
        assert_eq!((cut.name.as_str(), cut.depth, cut.len), ("d", deepest + 1, "/a".len() + 2 * (deepest + 1)));
        assert!(cut.len > MAX_PATH_LEN);
        assert!(cut.head.starts_with("/a/d/d") && cut.head.len() <= 200, "{}", cut.head);
        assert!(cut.to_string().contains("more than the 4096"), "{cut}");
        // What is printed grows with the entries, not with the square of the depth.
        assert!(bytes <= visited * MAX_PATH_LEN, "{bytes}");
        // The unbounded walk, which the Merkle roots need, still visits everything.
        let mut all = 0usize;
        walk(&t.repo, root, Path::new("/"), &mut |_, _| {
            all += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(all, 1 + LEVELS + 1 + 1 + 1, "a, the chain, bottom, e and z");
    }
}
