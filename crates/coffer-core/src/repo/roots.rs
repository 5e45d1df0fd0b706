//! A snapshot's Merkle root recomputed from its trees, and whether it matches
//! the signed one. See docs/design.md#merkle-root.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::error::{Error, Result};
use crate::format::snapshot::Snapshot;
use crate::format::tree::{Node, NodeKind};
use crate::merkle::{self, Hash};
use crate::repo::Repository;
use crate::repo::tree_walk;

/// Visits the snapshot's regular files in Merkle order (tree order) with their
/// leaf hashes. Fails on a file without a digest.
pub fn for_each_leaf(
    repo: &Repository,
    snap: &Snapshot,
    visit: &mut dyn FnMut(&Path, &Node, Hash) -> Result<()>,
) -> Result<()> {
    let key = snap.merkle_key.0;
    tree_walk::walk(repo, snap.tree, Path::new("/"), &mut |path, node| {
        if node.kind != NodeKind::File {
            return Ok(());
        }
        let digest = node.digest.ok_or_else(|| Error::corrupt(format!("file {}", path.display()), "has no digest"))?;
        let p = path.as_os_str().as_bytes();
        visit(path, node, merkle::file_leaf(&merkle::leaf_salt(&key, p), &digest.0, p))
    })
}

/// Recomputes the snapshot's Merkle root and leaf count from its trees.
pub fn compute_root(repo: &Repository, snap: &Snapshot) -> Result<(Hash, u64)> {
    let mut b = merkle::Builder::new();
    for_each_leaf(repo, snap, &mut |_, _, leaf| {
        b.push(leaf);
        Ok(())
    })?;
    Ok((b.root(), b.count()))
}

/// Whether a snapshot's signed Merkle root and leaf count agree with its trees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RootCheck {
    /// Recomputed from the trees, they match.
    Matches,
    /// Recomputed from the trees, they differ: the snapshot or a tree was forged.
    Differs,
    /// Not every tree loaded (damage the structure check reports).
    Unknown,
}

/// Recomputes the snapshot's root from its trees and compares it with the signed one.
pub fn check_root(repo: &Repository, snap: &Snapshot) -> RootCheck {
    match compute_root(repo, snap) {
        Ok((root, n)) if root == snap.merkle_root.0 && n == snap.merkle_leaves => RootCheck::Matches,
        Ok(_) => RootCheck::Differs,
        Err(_) => RootCheck::Unknown,
    }
}
