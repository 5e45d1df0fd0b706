//! Reading trees: a directory's entries streamed part by part
//! ([`Repository::tree_nodes`]), or assembled whole ([`Repository::load_tree`]),
//! and file content lists kept in content parts. See docs/design.md#trees.

use super::Repository;
use crate::error::{Error, Result};
use crate::format::bytes::Bytes;
use crate::format::pack::BlobType;
use crate::format::tree::{ContentPart, MAX_SPLIT_DEPTH, MAX_TREE_BLOB, Node, Tree, TreeBlob};
use crate::id::Id;

/// Derivation context of the key that chooses where listings are cut.
pub const TREE_CUT_CONTEXT: &str = "coffer v3 tree cut";

/// The entries of one directory, in name order, loading its parts only as they
/// are reached: memory is one part (at most [`crate::format::tree::MAX_TREE_BLOB`]
/// of plaintext) plus the split listings above it, whatever the directory's size.
/// Entries are yielded as stored: a file's `content_parts` are not resolved
/// (see [`Repository::resolve_content`]).
pub struct TreeNodes<'r> {
    repo: &'r Repository,
    tree: Id,
    /// Split listings being read, each with the index of its next part.
    splits: Vec<(Vec<Id>, usize)>,
    nodes: std::vec::IntoIter<Node>,
    /// Name of the last entry of the previous part, to check order across parts.
    last: Option<Bytes>,
    /// Every blob loaded so far: the tree's own and its parts.
    loaded: Vec<Id>,
    failed: bool,
}

impl<'r> TreeNodes<'r> {
    fn corrupt(&self, part: Option<&Id>, detail: impl Into<String>) -> Error {
        match part {
            Some(p) => Error::corrupt(format!("tree {} (part {})", self.tree.short(), p.short()), detail),
            None => Error::corrupt(format!("tree {}", self.tree.short()), detail),
        }
    }

    /// The tree blobs loaded so far (the tree itself and the parts reached), in
    /// the order loaded.
    pub fn loaded_blobs(&self) -> &[Id] {
        &self.loaded
    }

    /// The id of the directory's tree.
    pub fn id(&self) -> Id {
        self.tree
    }

    fn next_part(&mut self) -> Result<bool> {
        loop {
            let Some((ids, i)) = self.splits.last_mut() else { return Ok(false) };
            let Some(&part) = ids.get(*i) else {
                self.splits.pop();
                continue;
            };
            *i += 1;
            let data = self.repo.load_tree_blob(&part)?;
            self.loaded.push(part);
            match TreeBlob::decode(&data).map_err(|e| self.corrupt(Some(&part), e))? {
                TreeBlob::Split(ids) => {
                    if self.splits.len() >= MAX_SPLIT_DEPTH {
                        return Err(self.corrupt(
                            Some(&part),
                            format!("split listings nest deeper than {MAX_SPLIT_DEPTH} levels"),
                        ));
                    }
                    self.splits.push((ids, 0));
                }
                TreeBlob::Listing(nodes) => {
                    let (Some(first), Some(last)) = (nodes.first(), nodes.last()) else {
                        return Err(self.corrupt(Some(&part), "empty part of a split listing"));
                    };
                    if self.last.as_ref().is_some_and(|l| *l >= first.name) {
                        return Err(
                            self.corrupt(Some(&part), "entries are not sorted by name across parts, or a name repeats")
                        );
                    }
                    self.last = Some(last.name.clone());
                    self.nodes = nodes.into_iter();
                    return Ok(true);
                }
            }
        }
    }
}

impl Iterator for TreeNodes<'_> {
    type Item = Result<Node>;

    fn next(&mut self) -> Option<Result<Node>> {
        loop {
            if let Some(n) = self.nodes.next() {
                return Some(Ok(n));
            }
            if self.failed {
                return None;
            }
            match self.next_part() {
                Ok(true) => {}
                Ok(false) => return None,
                Err(e) => {
                    self.failed = true;
                    self.splits.clear();
                    return Some(Err(e));
                }
            }
        }
    }
}

impl Repository {
    /// Loads a tree blob (a listing, a split listing or a content part), refusing
    /// one the index says is larger than a reader accepts before reading it.
    pub(crate) fn load_tree_blob(&self, id: &Id) -> Result<Vec<u8>> {
        let (entry, pack) = self.locate_blob(BlobType::Tree, id)?;
        if entry.raw_length as usize > MAX_TREE_BLOB || entry.length as usize > MAX_TREE_BLOB + 17 {
            return Err(Error::corrupt(
                format!("tree {} in pack {}", id.short(), pack.id.short()),
                format!(
                    "{} bytes, more than the {MAX_TREE_BLOB} a tree blob may hold",
                    entry.raw_length.max(entry.length)
                ),
            ));
        }
        // Like any blob, a tree whose copy is missing or damaged is read from another.
        self.load_blob(BlobType::Tree, id)
    }

    /// The key that chooses where a writer cuts large listings.
    pub fn tree_cut_key(&self) -> [u8; 32] {
        self.keys().id.derive(TREE_CUT_CONTEXT, b"").0
    }

    /// Streams the entries of tree `id` (docs/design.md#trees). The tree blob
    /// itself is loaded now, its parts as the iteration reaches them; an error
    /// ends the iteration.
    pub fn tree_nodes(&self, id: &Id) -> Result<TreeNodes<'_>> {
        let data = self.load_tree_blob(id)?;
        self.tree_nodes_from(id, &data)
    }

    /// Like [`Repository::tree_nodes`], given the blob's plaintext already loaded.
    pub(crate) fn tree_nodes_from(&self, id: &Id, data: &[u8]) -> Result<TreeNodes<'_>> {
        let mut it = TreeNodes {
            repo: self,
            tree: *id,
            splits: Vec::new(),
            nodes: Vec::new().into_iter(),
            last: None,
            loaded: vec![*id],
            failed: false,
        };
        match TreeBlob::decode(data).map_err(|e| it.corrupt(None, e))? {
            TreeBlob::Listing(nodes) => it.nodes = nodes.into_iter(),
            TreeBlob::Split(parts) => it.splits.push((parts, 0)),
        }
        Ok(it)
    }

    /// Loads tree `id` whole: every part assembled, and every file's content
    /// parts resolved into `content`. Memory grows with the directory; walks
    /// that need not hold it use [`Repository::tree_nodes`].
    pub fn load_tree(&self, id: &Id) -> Result<Tree> {
        let data = self.load_tree_blob(id)?;
        self.assemble_tree(id, &data)
    }

    /// Like [`Repository::load_tree`], given the blob's plaintext already loaded.
    pub(crate) fn assemble_tree(&self, id: &Id, data: &[u8]) -> Result<Tree> {
        let mut nodes = Vec::new();
        for n in self.tree_nodes_from(id, data)? {
            let mut n = n?;
            if !n.content_parts.is_empty() {
                n.content = self.resolve_content(&n, &mut |_| {})?;
                n.content_parts = Vec::new();
            }
            nodes.push(n);
        }
        Ok(Tree { nodes })
    }

    /// A file node's data blob ids in order: its `content`, or what its content
    /// parts hold. Calls `on_part` with every content part blob loaded.
    pub fn resolve_content(&self, node: &Node, on_part: &mut dyn FnMut(Id)) -> Result<Vec<Id>> {
        if node.content_parts.is_empty() {
            return Ok(node.content.clone());
        }
        let mut out = Vec::new();
        // Explicit stack of part lists, at most MAX_SPLIT_DEPTH deep.
        let mut stack: Vec<(Vec<Id>, usize)> = vec![(node.content_parts.clone(), 0)];
        while let Some((ids, i)) = stack.last_mut() {
            let Some(&part) = ids.get(*i) else {
                stack.pop();
                continue;
            };
            *i += 1;
            let object = || format!("content part {} of file {:?}", part.short(), node.name.display());
            let data = self.load_tree_blob(&part)?;
            on_part(part);
            let p = ContentPart::decode(&data).map_err(|e| Error::corrupt(object(), e))?;
            if p.content_parts.is_empty() {
                out.extend_from_slice(&p.content);
            } else if stack.len() >= MAX_SPLIT_DEPTH {
                return Err(Error::corrupt(
                    object(),
                    format!("content parts nest deeper than {MAX_SPLIT_DEPTH} levels"),
                ));
            } else {
                stack.push((p.content_parts, 0));
            }
        }
        Ok(out)
    }
}
