//! Trees: one directory's entries sorted by name with full metadata, stored as
//! JSON in tree blobs. A directory whose listing fits in one part is one blob
//! (a *listing*); a larger one is a *split listing* naming its parts, and a file
//! with a very long content list keeps it in *content parts*. See
//! docs/design.md#trees.

use serde::{Deserialize, Serialize};

use super::bytes::Bytes;
use crate::id::Id;

/// A point in time: seconds and nanoseconds since the Unix epoch, as `[s, ns]`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Timestamp(pub i64, pub u32);

/// The kind of a directory entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeKind {
    /// A regular file.
    File,
    /// A directory; `subtree` names its tree.
    Dir,
    /// A symbolic link; `target` holds its target.
    Symlink,
    /// A named pipe.
    Fifo,
    /// A character device; `rdev` holds its number.
    Chardev,
    /// A block device; `rdev` holds its number.
    Blockdev,
    /// A Unix socket (recorded, not recreated).
    Socket,
}

/// One extended attribute.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Xattr {
    /// Attribute name, e.g. `user.comment`.
    pub name: Bytes,
    /// Attribute value.
    pub value: Bytes,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// One directory entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    /// File name (one path component; any bytes but `/` and NUL).
    pub name: Bytes,
    /// Entry kind.
    #[serde(rename = "type")]
    pub kind: NodeKind,
    /// Permission bits including setuid, setgid and sticky (`st_mode & 0o7777`).
    pub mode: u32,
    /// Owner user id.
    pub uid: u32,
    /// Owner group id.
    pub gid: u32,
    /// Owner user name, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Owner group name, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Modification time.
    pub mtime: Timestamp,
    /// Status change time (used for change detection; cannot be restored).
    pub ctime: Timestamp,
    /// Size in bytes (files), else 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub size: u64,
    /// Inode number.
    #[serde(default)]
    pub inode: u64,
    /// Device of the file system holding the entry.
    #[serde(default)]
    pub device: u64,
    /// Hard link count.
    #[serde(default)]
    pub links: u64,
    /// Device number of a device node.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub rdev: u64,
    /// Symlink target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<Bytes>,
    /// Extended attributes, sorted by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub xattrs: Vec<Xattr>,
    /// File content: data blob ids in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub content: Vec<Id>,
    /// File content stored out of line: tree blobs holding [`ContentPart`]s whose
    /// ids, concatenated in order, are the content. Never together with `content`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub content_parts: Vec<Id>,
    /// Regular files: the unkeyed BLAKE3 hash of the content, the file's Merkle leaf.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<Id>,
    /// The file had holes: all-zero chunks are restored as holes.
    #[serde(default, skip_serializing_if = "is_false")]
    pub sparse: bool,
    /// Directory content: the tree blob id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subtree: Option<Id>,
}

impl Node {
    /// A node of `kind` named `name` with permission bits `mode` and time
    /// `mtime` (its ctime too), owned by root, one link, and nothing else: for
    /// entries described by something other than `lstat` (an imported archive).
    pub fn new(name: Bytes, kind: NodeKind, mode: u32, mtime: Timestamp) -> Node {
        Node {
            name,
            kind,
            mode,
            uid: 0,
            gid: 0,
            user: None,
            group: None,
            mtime,
            ctime: mtime,
            size: 0,
            inode: 0,
            device: 0,
            links: 1,
            rdev: 0,
            target: None,
            xattrs: Vec::new(),
            content: Vec::new(),
            content_parts: Vec::new(),
            digest: None,
            sparse: false,
            subtree: None,
        }
    }
}

/// A directory listing.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tree {
    /// Entries sorted by name bytes, names unique.
    pub nodes: Vec<Node>,
}

impl Tree {
    /// Serializes the tree as one listing (entries must already be sorted).
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("trees always serialize")
    }

    /// Parses a single listing and checks its invariants: names sorted, unique,
    /// valid path components; directories have a subtree. A split listing is an
    /// error here: it is assembled by the repository.
    pub fn decode(buf: &[u8]) -> Result<Tree, String> {
        match TreeBlob::decode(buf)? {
            TreeBlob::Listing(nodes) => Ok(Tree { nodes }),
            TreeBlob::Split(_) => Err("a split listing where a single listing was expected".into()),
        }
    }

    /// The entry named `name`.
    pub fn find(&self, name: &[u8]) -> Option<&Node> {
        self.nodes.binary_search_by(|n| n.name.0.as_slice().cmp(name)).ok().map(|i| &self.nodes[i])
    }
}

/// The largest tree blob plaintext (listing, split listing or content part) a
/// reader accepts. Writers stay far below it (see [`SplitLimits`]).
pub const MAX_TREE_BLOB: usize = 64 << 20;
/// How deeply split listings (and content parts) may nest: a split listing's
/// parts may be split listings, down to this many levels in all.
pub const MAX_SPLIT_DEPTH: usize = 4;
/// The longest entry name a reader accepts (Linux allows 255 bytes).
pub const MAX_NAME_LEN: usize = 4096;
/// Extended attribute bytes (names and values) a writer stores per entry at
/// most; further attributes are left out with a warning.
pub const MAX_XATTR_BYTES: usize = 1 << 20;

/// What a tree blob holds.
#[derive(Debug, PartialEq, Eq)]
pub enum TreeBlob {
    /// `{"nodes":[...]}`: entries, sorted by name.
    Listing(Vec<Node>),
    /// `{"parts":[ids]}`: tree blobs whose entries, concatenated, are the listing.
    Split(Vec<Id>),
}

#[derive(Deserialize)]
struct RawTreeBlob {
    #[serde(default)]
    nodes: Option<Vec<Node>>,
    #[serde(default)]
    parts: Option<Vec<Id>>,
}

#[derive(Serialize)]
struct SplitRepr<'a> {
    parts: &'a [Id],
}

impl TreeBlob {
    /// Parses a tree blob: exactly one of a listing (whose invariants are checked)
    /// or a non-empty split listing.
    pub fn decode(buf: &[u8]) -> Result<TreeBlob, String> {
        if buf.len() > MAX_TREE_BLOB {
            return Err(format!("tree blob of {} bytes exceeds the limit of {MAX_TREE_BLOB}", buf.len()));
        }
        let raw: RawTreeBlob = serde_json::from_slice(buf).map_err(|e| format!("tree does not parse: {e}"))?;
        match (raw.nodes, raw.parts) {
            (Some(nodes), None) => {
                check_nodes(&nodes)?;
                Ok(TreeBlob::Listing(nodes))
            }
            (None, Some(parts)) if !parts.is_empty() => Ok(TreeBlob::Split(parts)),
            (None, Some(_)) => Err("split listing without parts".into()),
            _ => Err("tree holds neither exactly a listing nor a split listing".into()),
        }
    }
}

/// Checks a listing's invariants (docs/design.md#trees).
fn check_nodes(nodes: &[Node]) -> Result<(), String> {
    for n in nodes {
        let name = &n.name.0;
        if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0) {
            return Err(format!("invalid entry name {:?}", n.name.display()));
        }
        if name.len() > MAX_NAME_LEN {
            return Err(format!("entry name of {} bytes exceeds the limit of {MAX_NAME_LEN}", name.len()));
        }
        if (n.kind == NodeKind::Dir) != n.subtree.is_some() {
            return Err(format!("entry {:?}: subtree present exactly when a directory", n.name.display()));
        }
        if (n.kind == NodeKind::File) != n.digest.is_some() {
            return Err(format!("entry {:?}: digest present exactly when a regular file", n.name.display()));
        }
        if !n.content_parts.is_empty() && (n.kind != NodeKind::File || !n.content.is_empty()) {
            return Err(format!("entry {:?}: content parts only on a file without inline content", n.name.display()));
        }
    }
    if nodes.windows(2).any(|w| w[0].name >= w[1].name) {
        return Err("entries are not sorted by name, or a name repeats".into());
    }
    Ok(())
}

/// A content part: `{"content":[ids]}` (data blob ids) or
/// `{"content_parts":[ids]}` (further content parts), exactly one, non-empty.
#[derive(Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContentPart {
    /// Data blob ids, in file order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub content: Vec<Id>,
    /// Further content parts, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub content_parts: Vec<Id>,
}

impl ContentPart {
    /// Parses a content part and checks that exactly one list is present.
    pub fn decode(buf: &[u8]) -> Result<ContentPart, String> {
        if buf.len() > MAX_TREE_BLOB {
            return Err(format!("content part of {} bytes exceeds the limit of {MAX_TREE_BLOB}", buf.len()));
        }
        let p: ContentPart = serde_json::from_slice(buf).map_err(|e| format!("content part does not parse: {e}"))?;
        if p.content.is_empty() == p.content_parts.is_empty() {
            return Err("content part holds neither exactly data ids nor further parts".into());
        }
        Ok(p)
    }
}

/// Where a writer cuts listings and id lists into blobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitLimits {
    /// A listing of at most this many bytes of JSON is stored as one blob; a
    /// part of a split listing holds at most this many (unless one entry alone
    /// is larger).
    pub part_max: usize,
    /// Mean part size aimed at by the content-defined cuts.
    pub part_avg: usize,
    /// Ids per split listing and per content part at most.
    pub ids_per_blob: usize,
    /// Content ids a file node holds inline at most; a longer list goes to
    /// content parts.
    pub inline_content: usize,
}

impl Default for SplitLimits {
    fn default() -> Self {
        SplitLimits { part_max: 1 << 20, part_avg: 256 << 10, ids_per_blob: 8192, inline_content: 4096 }
    }
}

const LISTING_HEAD: &[u8] = b"{\"nodes\":[";
const LISTING_TAIL: &[u8] = b"]}";

/// Encodes one directory's entries, given in name order, into tree blobs of
/// bounded size, saving each finished blob through a callback. A listing that
/// fits in `part_max` bytes is encoded exactly as [`Tree::encode`] does. A larger
/// one is cut after every entry whose keyed name hash falls below a threshold
/// proportional to its encoded size (so parts average `part_avg` bytes, and an
/// entry added or removed changes the one or two parts around it), and before
/// an entry that would take a part past `part_max`.
pub struct ListingWriter {
    cut_key: [u8; 32],
    limits: SplitLimits,
    /// Encoded entries not yet in a stored part, joined by commas.
    buf: Vec<u8>,
    /// Ends in `buf` of the entries after which to cut (before splitting starts).
    cuts: Vec<usize>,
    /// Whether the listing is being split (it exceeded one part).
    split: bool,
    /// The parts stored so far.
    parts: Vec<Id>,
    count: usize,
}

impl ListingWriter {
    /// A writer cutting with `cut_key` (a secret, so part sizes tell nothing
    /// about names).
    pub fn new(cut_key: [u8; 32], limits: SplitLimits) -> Self {
        ListingWriter { cut_key, limits, buf: Vec::new(), cuts: Vec::new(), split: false, parts: Vec::new(), count: 0 }
    }

    /// Whether some part was stored already (the listing will be split).
    pub fn is_split(&self) -> bool {
        self.split
    }

    /// Entries pushed so far.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether no entry was pushed.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    fn cut_after(&self, name: &[u8], encoded: usize) -> bool {
        let h = blake3::keyed_hash(&self.cut_key, name);
        let h = u64::from_le_bytes(h.as_bytes()[..8].try_into().expect("8 bytes"));
        h < (encoded as u64).saturating_mul(u64::MAX / self.limits.part_avg.max(1) as u64)
    }

    /// Adds the next entry (names strictly increasing).
    pub fn push<E>(&mut self, node: &Node, save: &mut dyn FnMut(&[u8]) -> Result<Id, E>) -> Result<(), E> {
        let enc = serde_json::to_vec(node).expect("nodes always serialize");
        let wrap = LISTING_HEAD.len() + LISTING_TAIL.len();
        if !self.buf.is_empty() && self.buf.len() + 1 + enc.len() + wrap > self.limits.part_max {
            self.split = true;
            self.flush_cuts(save)?;
            if !self.buf.is_empty() && self.buf.len() + 1 + enc.len() + wrap > self.limits.part_max {
                let all = self.buf.len();
                self.emit(all, save)?;
            }
        }
        if !self.buf.is_empty() {
            self.buf.push(b',');
        }
        self.buf.extend_from_slice(&enc);
        self.count += 1;
        if self.cut_after(&node.name.0, enc.len()) {
            self.cuts.push(self.buf.len());
        }
        if self.split {
            self.flush_cuts(save)?;
        }
        Ok(())
    }

    /// Stores the entries of `buf` up to each recorded cut as parts.
    fn flush_cuts<E>(&mut self, save: &mut dyn FnMut(&[u8]) -> Result<Id, E>) -> Result<(), E> {
        if let Some(&last) = self.cuts.last() {
            let cuts = std::mem::take(&mut self.cuts);
            let mut start = 0;
            for end in cuts {
                let id = save(&listing_bytes(&self.buf[start..end]))?;
                self.parts.push(id);
                start = end + 1; // past the comma
            }
            self.buf.drain(..(last + 1).min(self.buf.len()));
        }
        Ok(())
    }

    /// Stores `buf[..end]` (all of it) as a part.
    fn emit<E>(&mut self, end: usize, save: &mut dyn FnMut(&[u8]) -> Result<Id, E>) -> Result<(), E> {
        let id = save(&listing_bytes(&self.buf[..end]))?;
        self.parts.push(id);
        self.buf.clear();
        self.cuts.clear();
        Ok(())
    }

    /// Stores what is left and returns the id of the directory's tree blob.
    pub fn finish<E>(mut self, save: &mut dyn FnMut(&[u8]) -> Result<Id, E>) -> Result<Id, E> {
        if !self.split {
            return save(&listing_bytes(&self.buf));
        }
        self.flush_cuts(save)?;
        if !self.buf.is_empty() {
            let all = self.buf.len();
            self.emit(all, save)?;
        }
        split_listing(self.parts, self.limits.ids_per_blob, save)
    }
}

fn listing_bytes(entries: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(entries.len() + LISTING_HEAD.len() + LISTING_TAIL.len());
    out.extend_from_slice(LISTING_HEAD);
    out.extend_from_slice(entries);
    out.extend_from_slice(LISTING_TAIL);
    out
}

/// Stores split listings over `ids` (at least one), grouping them into further
/// levels while there are more than `per_blob`; returns the top one's id. Groups
/// end after an id whose first bytes meet a condition (ids are keyed hashes), so
/// an added part changes one group.
fn split_listing<E>(mut ids: Vec<Id>, per_blob: usize, save: &mut dyn FnMut(&[u8]) -> Result<Id, E>) -> Result<Id, E> {
    let per_blob = per_blob.max(2);
    // The top split listing and the levels grouped below it stay within
    // MAX_SPLIT_DEPTH: the last level takes every id left, however many.
    for _ in 1..MAX_SPLIT_DEPTH {
        if ids.len() <= per_blob {
            break;
        }
        ids = group(&ids, per_blob, &mut |g: &[Id]| {
            save(&serde_json::to_vec(&SplitRepr { parts: g }).expect("ids serialize"))
        })?;
    }
    save(&serde_json::to_vec(&SplitRepr { parts: &ids }).expect("ids serialize"))
}

/// Cuts `ids` into groups of 2 to `per_blob` ids, saving each; returns their ids.
fn group<E>(ids: &[Id], per_blob: usize, save: &mut dyn FnMut(&[Id]) -> Result<Id, E>) -> Result<Vec<Id>, E> {
    let modulus = (per_blob / 4).max(2) as u32;
    let mut out = Vec::with_capacity(ids.len() / 2 + 1);
    let mut start = 0;
    for i in 0..ids.len() {
        let len = i + 1 - start;
        let boundary = u32::from_le_bytes(ids[i].0[..4].try_into().expect("4 bytes")) % modulus == 0;
        if len >= per_blob || (len >= 2 && boundary) {
            out.push(save(&ids[start..=i])?);
            start = i + 1;
        }
    }
    if start < ids.len() {
        out.push(save(&ids[start..])?);
    }
    Ok(out)
}

/// Moves a file's content list out of line when it is longer than
/// `limits.inline_content`: stores content parts and returns their ids (or an
/// empty list when the content stays inline).
pub fn content_parts<E>(
    content: &[Id],
    limits: &SplitLimits,
    save: &mut dyn FnMut(&[u8]) -> Result<Id, E>,
) -> Result<Vec<Id>, E> {
    if content.len() <= limits.inline_content {
        return Ok(Vec::new());
    }
    let per_blob = limits.ids_per_blob.max(2);
    let mut ids = Vec::with_capacity(content.len() / per_blob + 1);
    for g in content.chunks(per_blob) {
        ids.push(save(
            &serde_json::to_vec(&ContentPart { content: g.to_vec(), content_parts: vec![] }).expect("ids serialize"),
        )?);
    }
    for _ in 1..MAX_SPLIT_DEPTH {
        if ids.len() <= limits.inline_content.max(1) {
            break;
        }
        let mut next = Vec::with_capacity(ids.len() / per_blob + 1);
        for g in ids.chunks(per_blob) {
            next.push(save(
                &serde_json::to_vec(&ContentPart { content: vec![], content_parts: g.to_vec() })
                    .expect("ids serialize"),
            )?);
        }
        ids = next;
    }
    Ok(ids)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn node(name: &[u8], kind: NodeKind) -> Node {
        let mut n = Node::new(Bytes(name.to_vec()), kind, 0o644, Timestamp(1, 2));
        n.ctime = Timestamp(3, 4);
        n.digest = (kind == NodeKind::File).then_some(Id([2; 32]));
        n.subtree = (kind == NodeKind::Dir).then_some(Id([1; 32]));
        n
    }

    #[test]
    fn round_trip_with_binary_names() {
        let t = Tree { nodes: vec![node(b"a", NodeKind::File), node(&[b'b', 0xff], NodeKind::Dir)] };
        assert_eq!(Tree::decode(&t.encode()).unwrap(), t);
        assert!(t.find(&[b'b', 0xff]).is_some());
        assert!(t.find(b"c").is_none());
    }

    #[test]
    fn invariants_enforced() {
        let unsorted = Tree { nodes: vec![node(b"b", NodeKind::File), node(b"a", NodeKind::File)] };
        assert!(Tree::decode(&unsorted.encode()).is_err());
        let slash = Tree { nodes: vec![node(b"a/b", NodeKind::File)] };
        assert!(Tree::decode(&slash.encode()).is_err());
        let dotdot = Tree { nodes: vec![node(b"..", NodeKind::File)] };
        assert!(Tree::decode(&dotdot.encode()).is_err());
        let mut d = node(b"d", NodeKind::Dir);
        d.subtree = None;
        assert!(Tree::decode(&Tree { nodes: vec![d] }.encode()).is_err());
        assert!(Tree::decode(b"{").is_err());
    }

    use std::collections::HashMap;

    /// Tree blobs kept in memory by id (the hash of their bytes).
    #[derive(Default)]
    struct Store(HashMap<Id, Vec<u8>>);

    impl Store {
        fn save(&mut self, b: &[u8]) -> Result<Id, String> {
            assert!(b.len() <= MAX_TREE_BLOB, "a writer produced a tree blob of {} bytes", b.len());
            let id = Id(*blake3::hash(b).as_bytes());
            self.0.insert(id, b.to_vec());
            Ok(id)
        }

        /// The listing of tree `id`, assembled as a reader does; checks every
        /// blob against the reader's rules, and the nesting depth.
        fn assemble(&self, id: &Id, depth: usize, out: &mut Vec<Node>) {
            match TreeBlob::decode(&self.0[id]).unwrap_or_else(|e| panic!("{e}")) {
                TreeBlob::Listing(nodes) => out.extend(nodes),
                TreeBlob::Split(parts) => {
                    assert!(depth <= MAX_SPLIT_DEPTH);
                    parts.iter().for_each(|p| self.assemble(p, depth + 1, out))
                }
            }
        }

        fn content(&self, ids: &[Id], depth: usize, out: &mut Vec<Id>) {
            assert!(ids.is_empty() || depth <= MAX_SPLIT_DEPTH);
            for id in ids {
                let p = ContentPart::decode(&self.0[id]).unwrap();
                out.extend(&p.content);
                self.content(&p.content_parts, depth + 1, out);
            }
        }
    }

    fn write(nodes: &[Node], limits: SplitLimits, store: &mut Store) -> Id {
        let mut w = ListingWriter::new([7; 32], limits);
        for n in nodes {
            w.push(n, &mut |b| store.save(b)).unwrap();
        }
        w.finish(&mut |b| store.save(b)).unwrap()
    }

    fn files(count: usize, name_len: usize) -> Vec<Node> {
        (0..count).map(|i| node(format!("{i:0name_len$}").as_bytes(), NodeKind::File)).collect()
    }

    #[test]
    fn a_listing_that_fits_one_part_is_encoded_as_one_tree() {
        let nodes = files(100, 8);
        let mut store = Store::default();
        let id = write(&nodes, SplitLimits::default(), &mut store);
        assert_eq!(store.0.len(), 1);
        assert_eq!(store.0[&id], Tree { nodes }.encode(), "not byte for byte the single-blob encoding");
        let empty = write(&[], SplitLimits::default(), &mut store);
        assert_eq!(store.0[&empty], Tree::default().encode());
    }

    #[test]
    fn large_listings_split_into_bounded_parts_that_assemble_in_order() {
        for (count, limits) in [
            (20_000, SplitLimits { part_max: 16 << 10, part_avg: 4 << 10, ids_per_blob: 64, inline_content: 8 }),
            (3_000, SplitLimits { part_max: 2 << 10, part_avg: 512, ids_per_blob: 2, inline_content: 8 }),
        ] {
            let nodes = files(count, 20);
            let mut store = Store::default();
            let id = write(&nodes, limits, &mut store);
            let mut out = Vec::new();
            store.assemble(&id, 1, &mut out);
            assert_eq!(out, nodes);
            for b in store.0.values() {
                if let TreeBlob::Listing(n) = TreeBlob::decode(b).unwrap() {
                    assert!(!n.is_empty() && b.len() <= limits.part_max, "part of {} bytes", b.len());
                }
            }
        }
    }

    #[test]
    fn an_insert_into_a_large_listing_changes_few_parts() {
        let limits = SplitLimits { part_max: 64 << 10, part_avg: 16 << 10, ..SplitLimits::default() };
        let nodes = files(50_000, 24);
        let mut before = Store::default();
        write(&nodes, limits, &mut before);
        let mut changed = nodes.clone();
        changed.insert(25_000, node(format!("{:024}x", 24_999).as_bytes(), NodeKind::File));
        changed[40_000].mtime = Timestamp(99, 0);
        let mut after = Store::default();
        write(&changed, limits, &mut after);
        let new: Vec<&Id> = after.0.keys().filter(|k| !before.0.contains_key(k)).collect();
        eprintln!("{} of {} blobs new after one insert and one change", new.len(), after.0.len());
        // The two parts around the changes, plus the split listing above them.
        assert!(new.len() <= 5, "{} of {} blobs are new", new.len(), after.0.len());
        assert!(after.0.len() > 100);
    }

    #[test]
    fn the_largest_entries_a_writer_produces_decode() {
        let limits = SplitLimits::default();
        let mut big = node(&[0xff; 255], NodeKind::File);
        big.target = Some(Bytes(vec![0xfe; 4096]));
        // Non-UTF-8 values are hex: twice their size in JSON.
        big.xattrs = vec![Xattr { name: Bytes(b"user.a".to_vec()), value: Bytes(vec![0xff; MAX_XATTR_BYTES - 6]) }];
        big.content = vec![Id([3; 32]); limits.inline_content];
        big.user = Some("u".repeat(256));
        let mut nodes = Vec::new();
        for i in 0..40u8 {
            let mut n = big.clone();
            n.name.0[254] = i + 1;
            nodes.push(n);
        }
        let mut store = Store::default();
        let id = write(&nodes, limits, &mut store);
        let mut out = Vec::new();
        store.assemble(&id, 1, &mut out);
        assert_eq!(out.len(), nodes.len());
        for (a, b) in out.iter().zip(&nodes) {
            assert!(a == b, "{:?} != {:?}", a.name, b.name);
        }
        // A content list far beyond what a node holds inline.
        let content: Vec<Id> = (0..200_000u32).map(|i| Id(*blake3::hash(&i.to_le_bytes()).as_bytes())).collect();
        for limits in [limits, SplitLimits { ids_per_blob: 2, inline_content: 2, ..limits }] {
            let parts = content_parts(&content, &limits, &mut |b| store.save(b)).unwrap();
            assert!(!parts.is_empty());
            if limits == SplitLimits::default() {
                assert!(parts.len() <= limits.inline_content);
            }
            let mut back = Vec::new();
            store.content(&parts, 1, &mut back);
            assert_eq!(back, content);
        }
    }

    #[test]
    fn tree_blob_forms_are_exclusive() {
        assert!(
            TreeBlob::decode(
                br#"{"nodes":[],"parts":["0000000000000000000000000000000000000000000000000000000000000000"]}"#
            )
            .is_err()
        );
        assert!(TreeBlob::decode(br#"{"parts":[]}"#).is_err());
        assert!(TreeBlob::decode(br#"{}"#).is_err());
        assert!(ContentPart::decode(br#"{"content":[]}"#).is_err());
        let mut n = node(b"d", NodeKind::Dir);
        n.content_parts = vec![Id([1; 32])];
        assert!(Tree::decode(&Tree { nodes: vec![n] }.encode()).is_err());
        let long = node(&[b'a'; MAX_NAME_LEN + 1], NodeKind::File);
        assert!(Tree::decode(&Tree { nodes: vec![long] }.encode()).is_err());
    }
}
