//! Trees: one blob per directory, listing its entries sorted by name with full
//! metadata. Stored as JSON inside a tree blob. See docs/design.md#trees.

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

/// A directory listing.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tree {
    /// Entries sorted by name bytes, names unique.
    pub nodes: Vec<Node>,
}

impl Tree {
    /// Serializes the tree (entries must already be sorted).
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("trees always serialize")
    }

    /// Parses a tree and checks its invariants: names sorted, unique, valid
    /// path components; directories have a subtree.
    pub fn decode(buf: &[u8]) -> Result<Tree, String> {
        let t: Tree = serde_json::from_slice(buf).map_err(|e| format!("tree does not parse: {e}"))?;
        for n in &t.nodes {
            let name = &n.name.0;
            if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0) {
                return Err(format!("invalid entry name {:?}", n.name.display()));
            }
            if (n.kind == NodeKind::Dir) != n.subtree.is_some() {
                return Err(format!("entry {:?}: subtree present exactly when a directory", n.name.display()));
            }
            if (n.kind == NodeKind::File) != n.digest.is_some() {
                return Err(format!("entry {:?}: digest present exactly when a regular file", n.name.display()));
            }
        }
        if t.nodes.windows(2).any(|w| w[0].name >= w[1].name) {
            return Err("entries are not sorted by name, or a name repeats".into());
        }
        Ok(t)
    }

    /// The entry named `name`.
    pub fn find(&self, name: &[u8]) -> Option<&Node> {
        self.nodes.binary_search_by(|n| n.name.0.as_slice().cmp(name)).ok().map(|i| &self.nodes[i])
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn node(name: &[u8], kind: NodeKind) -> Node {
        Node {
            name: Bytes(name.to_vec()),
            kind,
            mode: 0o644,
            uid: 0,
            gid: 0,
            user: None,
            group: None,
            mtime: Timestamp(1, 2),
            ctime: Timestamp(3, 4),
            size: 0,
            inode: 0,
            device: 0,
            links: 1,
            rdev: 0,
            target: None,
            xattrs: vec![],
            content: vec![],
            digest: (kind == NodeKind::File).then_some(Id([2; 32])),
            sparse: false,
            subtree: (kind == NodeKind::Dir).then_some(Id([1; 32])),
        }
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
}
