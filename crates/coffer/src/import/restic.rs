//! A restic repository as coffer imports it (docs/design.md#import): its storage
//! reached through coffer's own backends ([`BackendSource`]), and each snapshot's
//! tree handed to the import as a [`ForeignTree`] ([`ResticTree`]), its nodes'
//! metadata mapped to coffer's nodes.
//!
//! Over remote storage a round trip per object would bound the import, so the
//! tree reads ahead: on its first listing the trees of every snapshot still to
//! import are fetched level by level into the reader's tree cache
//! ([`ResticRepo::prefetch_trees`]), and [`ForeignTree::feed`] hands the import
//! the contents of the files it has not stored yet, in the tree's order, read
//! ahead with merged range requests ([`ResticRepo::read_ahead`]).

use std::collections::HashSet;
use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::{Arc, Once};

use coffer_backend::{Backend, ErrorKind};
use coffer_core::format::bytes::Bytes;
use coffer_core::format::tree::{Node, NodeKind, Timestamp, Xattr};
use coffer_core::ops::backup::{
    ContentMemo, FOREIGN_MAX_DEPTH, Fed, ForeignEntry, ForeignTree, Listing, Payload, Store,
};
use coffer_import::restic::id::Id as BlobId;
use coffer_import::restic::tree::{self as rtree, NodeType};
use coffer_import::restic::{ReadAheadLimits, ResticRepo};
use coffer_import::{Source, SourceError, SourceErrorKind};

/// A coffer storage backend read as the storage of a restic repository.
pub struct BackendSource(pub Arc<dyn Backend>);

fn source_error(e: coffer_backend::BackendError) -> SourceError {
    let kind = if e.kind == ErrorKind::NotFound { SourceErrorKind::NotFound } else { SourceErrorKind::Other };
    SourceError::new(kind, e.object.clone(), e.message.clone())
}

impl Source for BackendSource {
    fn list(&self, dir: &str) -> Result<Vec<(String, u64)>, SourceError> {
        let prefix = format!("{}/", dir.trim_end_matches('/'));
        Ok(self.0.list(&prefix).map_err(source_error)?.into_iter().map(|o| (o.name, o.size)).collect())
    }

    fn read_range(&self, name: &str, offset: u64, len: u64) -> Result<Vec<u8>, SourceError> {
        self.0.read_range(name, offset, len).map_err(source_error)
    }

    fn size(&self, name: &str) -> Result<u64, SourceError> {
        self.0.stat(name).map_err(source_error)
    }

    fn connections(&self) -> usize {
        self.0.connections()
    }
}

/// The tree of one snapshot of an open restic repository (its index loaded).
pub struct ResticTree<'a> {
    /// The repository.
    repo: &'a ResticRepo,
    /// The snapshot's root tree.
    root: BlobId,
    /// The roots whose trees are read ahead on the first listing: this one's and
    /// those of the snapshots to import after it.
    ahead: Vec<BlobId>,
    prefetched: Once,
    /// What the import knows already: files whose content it holds are not fed.
    memo: Option<&'a ContentMemo>,
}

impl<'a> ResticTree<'a> {
    /// The tree of root `root`, whose files are not fed (read only when opened).
    pub fn new(repo: &'a ResticRepo, root: BlobId) -> Self {
        ResticTree { repo, root, ahead: Vec::new(), prefetched: Once::new(), memo: None }
    }

    /// Reads ahead, on the first listing, the trees of this snapshot and of `roots`
    /// (the snapshots to import after it); without it no tree is read ahead.
    pub fn with_trees_ahead(mut self, roots: impl IntoIterator<Item = BlobId>) -> Self {
        let root = self.root;
        self.ahead = std::iter::once(root).chain(roots.into_iter().filter(|r| *r != root)).collect();
        self
    }

    /// Feeds the import ([`ForeignTree::feed`]) the files whose content `memo`
    /// does not hold, read ahead.
    pub fn feeding(mut self, memo: &'a ContentMemo) -> Self {
        self.memo = Some(memo);
        self
    }

    fn prefetch(&self) {
        if self.ahead.is_empty() {
            return;
        }
        self.prefetched.call_once(|| {
            self.repo.prefetch_trees(&self.ahead);
        });
    }
}

impl ForeignTree for ResticTree<'_> {
    fn root(&self) -> Vec<u8> {
        self.root.0.to_vec()
    }

    fn list(&self, dir: &[u8]) -> Result<Listing, String> {
        let id = blob_id(dir)?;
        self.prefetch();
        let tree = self.repo.tree(&id).map_err(|e| e.to_string())?;
        let mut listing = Listing::default();
        for r in &tree.rejected {
            listing
                .left_out
                .push((r.name.clone(), format!("restic's tree {} records it badly: {}", id.short(), r.reason)));
        }
        for n in &tree.nodes {
            match entry(n) {
                Ok(e) => listing.entries.push(e),
                Err(why) => listing.left_out.push((n.name_lossy(), why)),
            }
        }
        Ok(listing)
    }

    fn open<'a>(&'a self, file: &[u8]) -> Result<Box<dyn Read + Send + 'a>, String> {
        if !file.len().is_multiple_of(32) {
            return Err("a file handle that is not a list of blob ids".into());
        }
        let blobs = file.chunks(32).map(blob_id).collect::<Result<Vec<_>, _>>()?;
        Ok(Box::new(self.repo.content_reader(blobs)))
    }

    /// The files the import has not stored yet, in the tree's order (each content
    /// once), read ahead. A file whose content fails to read is not remembered: the
    /// import opens it again when it meets it, and lists it with that error.
    fn feed(&self, store: &mut Store<'_>) -> coffer_core::error::Result<Result<(), String>> {
        let Some(memo) = self.memo else { return Ok(Ok(())) };
        self.prefetch();
        let walk = FileWalk::new(self.repo, memo, self.root);
        let limits = ReadAheadLimits::for_connections(self.repo.source().connections());
        self.repo.read_ahead(walk, limits, |ahead| {
            while let Some(file) = ahead.next_file() {
                let mut reader = ahead.reader();
                // A content that fails to read is read again by `open`, which gives its error.
                let _ = store(Fed { key: file.key, path: &file.path, reader: &mut reader, size: file.size })?;
            }
            Ok(Ok(()))
        })
    }
}

/// A file the feed hands over.
struct FeedFile {
    key: [u8; 32],
    path: PathBuf,
    size: u64,
}

/// The files of a restic tree whose content the memo does not hold, depth first
/// in name order (the order restic stored them in, so neighbours in the walk are
/// neighbours in the packs), each content once. A tree that cannot be read is
/// passed over: the import's own walk lists it.
struct FileWalk<'a> {
    repo: &'a ResticRepo,
    memo: &'a ContentMemo,
    stack: Vec<(PathBuf, std::vec::IntoIter<rtree::Node>)>,
    fed: HashSet<[u8; 32]>,
}

impl<'a> FileWalk<'a> {
    fn new(repo: &'a ResticRepo, memo: &'a ContentMemo, root: BlobId) -> Self {
        let mut w = FileWalk { repo, memo, stack: Vec::new(), fed: HashSet::new() };
        w.enter(PathBuf::from("/"), &root);
        w
    }

    fn enter(&mut self, path: PathBuf, tree: &BlobId) {
        if self.stack.len() > FOREIGN_MAX_DEPTH {
            return;
        }
        if let Ok(t) = self.repo.tree(tree) {
            self.stack.push((path, t.nodes.into_iter()));
        }
    }
}

impl Iterator for FileWalk<'_> {
    type Item = (FeedFile, Vec<BlobId>);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let (dir, nodes) = self.stack.last_mut()?;
            let Some(n) = nodes.next() else {
                self.stack.pop();
                continue;
            };
            let path = dir.join(OsStr::from_bytes(&n.name));
            match n.node_type {
                NodeType::File => {
                    let key = content_key(&n.content);
                    if self.memo.knows(&key) || !self.fed.insert(key) {
                        continue;
                    }
                    return Some((FeedFile { key, path, size: n.size }, n.content));
                }
                NodeType::Dir => {
                    if let Some(sub) = n.subtree {
                        self.enter(path, &sub);
                    }
                }
                _ => {}
            }
        }
    }
}

fn blob_id(b: &[u8]) -> Result<BlobId, String> {
    let a: [u8; 32] = b.try_into().map_err(|_| format!("a blob id of {} bytes", b.len()))?;
    Ok(BlobId(a))
}

/// The key of a file's content: its list of blob ids, hashed (two files with
/// the same list have the same bytes).
fn content_key(blobs: &[BlobId]) -> [u8; 32] {
    let mut h = blake3::Hasher::new_derive_key("coffer import restic content 2026-12");
    h.update(&(blobs.len() as u64).to_le_bytes());
    for b in blobs {
        h.update(&b.0);
    }
    *h.finalize().as_bytes()
}

/// coffer's node for restic's node `n` (content and subtree are the import's
/// to fill), or why it cannot be imported.
fn entry(n: &rtree::Node) -> Result<ForeignEntry, String> {
    let (kind, payload) = match &n.node_type {
        NodeType::File => {
            let handle = n.content.iter().flat_map(|b| b.0).collect();
            (NodeKind::File, Payload::File { key: content_key(&n.content), handle })
        }
        NodeType::Dir => {
            let sub = n.subtree.ok_or("restic records a directory without its tree")?;
            (NodeKind::Dir, Payload::Dir(sub.0.to_vec()))
        }
        NodeType::Symlink => (NodeKind::Symlink, Payload::Other),
        NodeType::Dev => (NodeKind::Blockdev, Payload::Other),
        NodeType::CharDev => (NodeKind::Chardev, Payload::Other),
        NodeType::Fifo => (NodeKind::Fifo, Payload::Other),
        NodeType::Socket => (NodeKind::Socket, Payload::Other),
        NodeType::Irregular => return Err("restic records it as irregular (not a file coffer can hold)".into()),
        NodeType::Other(t) => return Err(format!("restic records an entry of type {t:?}, which coffer does not know")),
    };
    if n.node_type == NodeType::Symlink && n.link_target.is_none() {
        return Err("restic records a symbolic link without its target".into());
    }
    let stamp = |t: &Option<coffer_import::restic::time::Timestamp>| {
        t.as_ref().map(|t| Timestamp(t.secs, t.nanos)).unwrap_or(Timestamp(0, 0))
    };
    let name_of = |s: &str| (!s.is_empty()).then(|| s.to_string());
    let node = Node {
        name: Bytes(n.name.clone()),
        kind,
        mode: rtree::go_mode_permissions(n.go_mode),
        uid: n.uid,
        gid: n.gid,
        user: name_of(&n.user),
        group: name_of(&n.group),
        mtime: stamp(&n.mtime),
        ctime: stamp(&n.ctime),
        size: if kind == NodeKind::File { n.size } else { 0 },
        inode: n.inode,
        device: n.device_id,
        links: n.links.max(1),
        rdev: n.device,
        target: n.link_target.clone().map(Bytes),
        xattrs: n
            .extended_attributes
            .iter()
            .map(|(name, value)| Xattr { name: Bytes(name.as_bytes().to_vec()), value: Bytes(value.clone()) })
            .collect(),
        content: Vec::new(),
        content_parts: Vec::new(),
        digest: None,
        sparse: false,
        subtree: None,
    };
    Ok(ForeignEntry { node, payload })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rnode(t: NodeType) -> rtree::Node {
        rtree::Node {
            name: b"x".to_vec(),
            node_type: t,
            go_mode: 0o755 | (1 << 23),
            mtime: None,
            atime: None,
            ctime: None,
            uid: 1,
            gid: 2,
            user: "ann".into(),
            group: String::new(),
            inode: 7,
            device_id: 9,
            links: 0,
            size: 5,
            content: vec![BlobId([1; 32]), BlobId([2; 32])],
            subtree: Some(BlobId([3; 32])),
            link_target: Some(b"/t".to_vec()),
            device: 0x0801,
            extended_attributes: vec![("user.k".into(), b"v".to_vec())],
            generic_attributes: Default::default(),
            error: None,
        }
    }

    #[test]
    fn nodes_map_kind_by_kind() {
        let f = entry(&rnode(NodeType::File)).unwrap();
        assert_eq!(f.node.kind, NodeKind::File);
        assert_eq!(f.node.size, 5);
        assert_eq!(f.node.user.as_deref(), Some("ann"));
        assert_eq!(f.node.group, None);
        assert_eq!(f.node.links, 1);
        let Payload::File { key, handle } = &f.payload else { panic!() };
        assert_eq!(handle.len(), 64);
        assert_eq!(*key, content_key(&[BlobId([1; 32]), BlobId([2; 32])]));
        assert_ne!(*key, content_key(&[BlobId([2; 32]), BlobId([1; 32])]), "the order counts");
        let d = entry(&rnode(NodeType::Dir)).unwrap();
        assert_eq!(d.payload, Payload::Dir(vec![3; 32]));
        assert_eq!(d.node.size, 0);
        let l = entry(&rnode(NodeType::Symlink)).unwrap();
        assert_eq!(l.node.target, Some(Bytes(b"/t".to_vec())));
        let b = entry(&rnode(NodeType::Dev)).unwrap();
        assert_eq!((b.node.kind, b.node.rdev), (NodeKind::Blockdev, 0x0801));
        assert_eq!(entry(&rnode(NodeType::CharDev)).unwrap().node.kind, NodeKind::Chardev);
        assert!(entry(&rnode(NodeType::Irregular)).is_err());
        assert!(entry(&rnode(NodeType::Other("door".into()))).is_err());
        let mut no_tree = rnode(NodeType::Dir);
        no_tree.subtree = None;
        assert!(entry(&no_tree).is_err());
    }
}
