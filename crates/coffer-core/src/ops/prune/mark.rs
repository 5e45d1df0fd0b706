//! Prune step 2, mark: every blob reachable from a live snapshot, as one bit per
//! indexed blob. Each distinct tree is visited once; the parts of split listings
//! and the content parts of files are marked with their tree. See
//! docs/design.md#prune.

use crate::error::{Error, Result};
use crate::format::pack::BlobType;
use crate::format::tree::NodeKind;
use crate::id::Id;
use crate::repo::history::History;
use crate::repo::{MasterIndex, Repository};

/// One bit per indexed blob, by the blob's slot in the index.
pub(super) struct Marks {
    bits: Vec<u64>,
}

impl Marks {
    pub(super) fn new(n: usize) -> Marks {
        Marks { bits: vec![0; n.div_ceil(64)] }
    }

    /// Sets bit `i`; returns whether it was clear.
    pub(super) fn set(&mut self, i: usize) -> bool {
        let (w, b) = (i / 64, 1u64 << (i % 64));
        let was_clear = self.bits[w] & b == 0;
        self.bits[w] |= b;
        was_clear
    }

    pub(super) fn get(&self, i: usize) -> bool {
        self.bits[i / 64] & (1u64 << (i % 64)) != 0
    }

    /// Whether the copy of `blob` in `pack` is used: the blob is marked and the
    /// index serves it from that pack (of duplicate copies, only the served one
    /// counts).
    pub(super) fn used_in(&self, index: &MasterIndex, blob: &Id, pack: &Id) -> bool {
        index.slot(blob).is_some_and(|s| self.get(s)) && index.get(blob).is_some_and(|(_, p)| p.id == *pack)
    }
}

/// Marks every blob the live snapshots of `history` use. A referenced blob the
/// index lacks stops the prune: what it is stored in is unknown.
pub(super) fn mark(repo: &Repository, history: &History) -> Result<Marks> {
    let index = repo.index();
    let mut marks = Marks::new(index.len());
    for (id, snap) in history.live_snapshots() {
        mark_tree(repo, &index, &mut marks, snap.tree, &mut |blob, t| {
            Err(Error::corrupt(
                format!("{} {}", t.noun(), blob.short()),
                format!("snapshot {} references it but no index lists it; run `coffer check`", id.short()),
            ))
        })?;
    }
    Ok(marks)
}

/// Marks every blob reachable from `root`. Blobs the index does not know are
/// passed to `unknown`.
fn mark_tree(
    repo: &Repository,
    index: &MasterIndex,
    marks: &mut Marks,
    root: Id,
    unknown: &mut dyn FnMut(Id, BlobType) -> Result<()>,
) -> Result<()> {
    let mut stack = vec![root];
    while let Some(tid) = stack.pop() {
        match index.slot(&tid) {
            Some(slot) => {
                if !marks.set(slot) {
                    continue; // this tree was marked through another snapshot or directory
                }
            }
            None => {
                unknown(tid, BlobType::Tree)?;
                continue;
            }
        }
        // The listing is streamed part by part; its parts and the content parts
        // of its files are blobs this tree uses, marked like the others.
        let mut nodes = repo.tree_nodes(&tid)?;
        let mut parts = Vec::new();
        for node in nodes.by_ref() {
            let node = node?;
            match node.kind {
                NodeKind::Dir => stack.extend(node.subtree),
                NodeKind::File => {
                    for id in &repo.resolve_content(&node, &mut |p| parts.push(p))? {
                        match index.slot(id) {
                            Some(slot) => {
                                marks.set(slot);
                            }
                            None => unknown(*id, BlobType::Data)?,
                        }
                    }
                }
                _ => {}
            }
        }
        for p in nodes.loaded_blobs()[1..].iter().chain(&parts) {
            match index.slot(p) {
                Some(slot) => {
                    marks.set(slot);
                }
                None => unknown(*p, BlobType::Tree)?,
            }
        }
    }
    Ok(())
}
