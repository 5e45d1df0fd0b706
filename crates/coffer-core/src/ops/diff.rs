//! Comparing two snapshots: which entries were added, removed or changed between
//! two root trees. See docs/design.md#diff.
//!
//! The two trees are walked together, their sorted node lists merged by name. Tree
//! ids are content hashes, so two directory nodes with the same `subtree` id hold
//! identical contents and the walk does not descend into them: the number of trees
//! loaded grows with the change, not with the size of the snapshots. Changes are
//! reported as a stream, depth first in name order, a directory before its entries.

use crate::error::Result;
use crate::format::tree::{Node, NodeKind, Tree};
use crate::id::Id;
use crate::repo::Repository;

/// Where the diff gets its trees from; a repository, or a map in tests.
pub trait TreeLoader {
    /// Loads and decodes tree `id`. Errors are passed through to the caller of
    /// [`diff`] unchanged (a tree missing from the index is [`crate::Error::Corrupt`]).
    fn load_tree(&self, id: &Id) -> Result<Tree>;
}

impl TreeLoader for Repository {
    fn load_tree(&self, id: &Id) -> Result<Tree> {
        Repository::load_tree(self, id)
    }
}

/// How an entry differs between the older and the newer snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeKind {
    /// Only in the newer snapshot.
    Added,
    /// Only in the older snapshot.
    Removed,
    /// A file whose content differs (its list of data blobs).
    Modified,
    /// The entry's type changed, e.g. a file became a symlink.
    TypeChanged,
    /// Same type and content, but some metadata differs.
    MetadataOnly,
}

impl ChangeKind {
    /// The name used in JSON output: `added`, `removed`, `modified`, `type_changed`, `metadata_only`.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::Added => "added",
            ChangeKind::Removed => "removed",
            ChangeKind::Modified => "modified",
            ChangeKind::TypeChanged => "type_changed",
            ChangeKind::MetadataOnly => "metadata_only",
        }
    }
}

/// A node field whose difference counts as a change. Fields that exist only for
/// change detection at backup (`ctime`, `inode`, `device`, `links`) are not compared;
/// `size` follows the content and `subtree` is compared by descending into it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    /// The file's content (its data blob ids).
    Content,
    /// Permission bits.
    Mode,
    /// Numeric owner.
    Uid,
    /// Numeric group.
    Gid,
    /// Owner name.
    User,
    /// Group name.
    Group,
    /// Modification time.
    Mtime,
    /// Extended attributes.
    Xattrs,
    /// Symlink target.
    Target,
    /// Device number of a device node.
    Rdev,
}

impl Field {
    /// The node field's name as in a tree blob (docs/design.md#trees).
    pub fn as_str(self) -> &'static str {
        match self {
            Field::Content => "content",
            Field::Mode => "mode",
            Field::Uid => "uid",
            Field::Gid => "gid",
            Field::User => "user",
            Field::Group => "group",
            Field::Mtime => "mtime",
            Field::Xattrs => "xattrs",
            Field::Target => "target",
            Field::Rdev => "rdev",
        }
    }
}

/// One changed entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// Absolute path in the snapshot, components joined by `/` (any bytes but NUL).
    pub path: Vec<u8>,
    /// What changed.
    pub kind: ChangeKind,
    /// The entry's type: in the newer snapshot, or in the older one if it was removed.
    pub node_kind: NodeKind,
    /// For [`ChangeKind::Modified`] and [`ChangeKind::MetadataOnly`], the fields that
    /// differ (`Content` first when present); empty otherwise.
    pub fields: Vec<Field>,
}

/// Counts over one diff.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiffStats {
    /// Entries only in the newer snapshot, every entry below an added directory included.
    pub added: u64,
    /// Entries only in the older snapshot, every entry below a removed directory included.
    pub removed: u64,
    /// Files whose content differs.
    pub modified: u64,
    /// Entries whose type changed.
    pub type_changed: u64,
    /// Entries with only metadata changes.
    pub metadata_only: u64,
    /// Sum of the sizes of the files that appeared at a path (added, or replacing another type).
    pub bytes_added: u64,
    /// Sum of the sizes of the files that are gone from a path (removed, or replaced by another type).
    pub bytes_removed: u64,
    /// Tree blobs loaded: identical subtrees are skipped, so this grows with the change.
    pub trees_loaded: u64,
}

/// Compares the trees rooted at `old_root` and `new_root` and passes every change
/// to `on_change`, depth first in name order, a directory before its entries.
/// An error from `on_change` stops the walk and is returned.
///
/// The walk keeps an explicit stack (one frame per directory level being
/// compared) and one path buffer, so a tree of any depth is compared without
/// recursion and without copying the path at each level.
pub fn diff(
    loader: &dyn TreeLoader,
    old_root: Id,
    new_root: Id,
    on_change: &mut dyn FnMut(Change) -> Result<()>,
) -> Result<DiffStats> {
    let mut d = Differ { loader, on_change, stats: DiffStats::default(), path: Vec::new(), stack: Vec::new() };
    d.push_pair(old_root, new_root)?;
    d.run()?;
    Ok(d.stats)
}

/// Which side of the diff a lone entry is on.
#[derive(Clone, Copy)]
enum Side {
    Old,
    New,
}

/// A directory level being compared; `len` is the length of its path.
enum Frame {
    /// Two listings merged by name.
    Pair(Box<Merge>),
    /// The listing below a directory present on one side only.
    Lone { nodes: std::vec::IntoIter<Node>, side: Side, len: usize },
}

/// Two listings being merged by name, for [`Frame::Pair`].
struct Merge {
    old: std::iter::Peekable<std::vec::IntoIter<Node>>,
    new: std::iter::Peekable<std::vec::IntoIter<Node>>,
    len: usize,
}

struct Differ<'a> {
    loader: &'a dyn TreeLoader,
    on_change: &'a mut dyn FnMut(Change) -> Result<()>,
    stats: DiffStats,
    /// The path of the entry at hand (`/` and names), pushed and truncated.
    path: Vec<u8>,
    stack: Vec<Frame>,
}

/// Whether two nodes of the same type hold different content. A further content
/// field on file nodes (such as a content digest) belongs here.
fn content_differs(a: &Node, b: &Node) -> bool {
    a.kind == NodeKind::File && (a.content != b.content || a.content_parts != b.content_parts || a.digest != b.digest)
}

/// The metadata fields that differ between two nodes of the same type.
fn metadata_differences(a: &Node, b: &Node) -> Vec<Field> {
    [
        (a.mode != b.mode, Field::Mode),
        (a.uid != b.uid, Field::Uid),
        (a.gid != b.gid, Field::Gid),
        (a.user != b.user, Field::User),
        (a.group != b.group, Field::Group),
        (a.mtime != b.mtime, Field::Mtime),
        (a.xattrs != b.xattrs, Field::Xattrs),
        (a.target != b.target, Field::Target),
        (a.rdev != b.rdev, Field::Rdev),
    ]
    .into_iter()
    .filter_map(|(differs, f)| differs.then_some(f))
    .collect()
}

impl Differ<'_> {
    fn load(&mut self, id: &Id) -> Result<Tree> {
        self.stats.trees_loaded += 1;
        self.loader.load_tree(id)
    }

    fn emit(&mut self, kind: ChangeKind, node_kind: NodeKind, fields: Vec<Field>) -> Result<()> {
        (self.on_change)(Change { path: self.path.clone(), kind, node_kind, fields })
    }

    /// Sets the path to the entry `name` of the directory whose path is `len` long.
    fn enter(&mut self, len: usize, name: &[u8]) {
        self.path.truncate(len);
        self.path.push(b'/');
        self.path.extend_from_slice(name);
    }

    /// Starts comparing two directory listings, whose directory is at the path.
    fn push_pair(&mut self, old: Id, new: Id) -> Result<()> {
        if old == new {
            return Ok(());
        }
        let (old, new) = (self.load(&old)?, self.load(&new)?);
        let len = self.path.len();
        self.stack.push(Frame::Pair(Box::new(Merge {
            old: old.nodes.into_iter().peekable(),
            new: new.nodes.into_iter().peekable(),
            len,
        })));
        Ok(())
    }

    /// Starts listing everything below a directory present on one side only.
    fn push_below(&mut self, node: &Node, side: Side) -> Result<()> {
        let Some(sub) = node.subtree.filter(|_| node.kind == NodeKind::Dir) else {
            return Ok(());
        };
        let tree = self.load(&sub)?;
        let len = self.path.len();
        self.stack.push(Frame::Lone { nodes: tree.nodes.into_iter(), side, len });
        Ok(())
    }

    fn run(&mut self) -> Result<()> {
        while let Some(top) = self.stack.last_mut() {
            match top {
                Frame::Lone { nodes, side, len } => {
                    let (side, len) = (*side, *len);
                    match nodes.next() {
                        None => {
                            self.stack.pop();
                        }
                        Some(n) => {
                            self.enter(len, &n.name.0);
                            self.lone(&n, side)?;
                        }
                    }
                }
                Frame::Pair(m) => {
                    let Merge { old, new, len } = &mut **m;
                    let len = *len;
                    let order = match (old.peek(), new.peek()) {
                        (None, None) => None,
                        (Some(_), None) => Some(std::cmp::Ordering::Less),
                        (None, Some(_)) => Some(std::cmp::Ordering::Greater),
                        (Some(x), Some(y)) => Some(x.name.cmp(&y.name)),
                    };
                    match order {
                        None => {
                            self.stack.pop();
                        }
                        Some(std::cmp::Ordering::Less) => {
                            let x = old.next().expect("peeked");
                            self.enter(len, &x.name.0);
                            self.lone(&x, Side::Old)?;
                        }
                        Some(std::cmp::Ordering::Greater) => {
                            let y = new.next().expect("peeked");
                            self.enter(len, &y.name.0);
                            self.lone(&y, Side::New)?;
                        }
                        Some(std::cmp::Ordering::Equal) => {
                            let (x, y) = (old.next().expect("peeked"), new.next().expect("peeked"));
                            self.enter(len, &x.name.0);
                            self.pair(&x, &y)?;
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// An entry present on one side only, at the path: it, then everything below it.
    fn lone(&mut self, node: &Node, side: Side) -> Result<()> {
        let kind = match side {
            Side::Old => {
                self.stats.removed += 1;
                ChangeKind::Removed
            }
            Side::New => {
                self.stats.added += 1;
                ChangeKind::Added
            }
        };
        self.count_file_bytes(node, side);
        self.emit(kind, node.kind, Vec::new())?;
        self.push_below(node, side)
    }

    fn count_file_bytes(&mut self, node: &Node, side: Side) {
        if node.kind != NodeKind::File {
            return;
        }
        match side {
            Side::Old => self.stats.bytes_removed += node.size,
            Side::New => self.stats.bytes_added += node.size,
        }
    }

    /// An entry present on both sides, at the path.
    fn pair(&mut self, old: &Node, new: &Node) -> Result<()> {
        let depth = self.stack.len();
        if old.kind != new.kind {
            self.stats.type_changed += 1;
            self.count_file_bytes(old, Side::Old);
            self.count_file_bytes(new, Side::New);
            self.emit(ChangeKind::TypeChanged, new.kind, Vec::new())?;
            // What was below is reported before what is: loaded first, and put on
            // top of the stack, which runs last in first.
            self.push_below(old, Side::Old)?;
            let old_frame = (self.stack.len() > depth).then(|| self.stack.pop()).flatten();
            self.push_below(new, Side::New)?;
            self.stack.extend(old_frame);
            return Ok(());
        }
        let mut fields = metadata_differences(old, new);
        if content_differs(old, new) {
            fields.insert(0, Field::Content);
            self.stats.modified += 1;
            self.emit(ChangeKind::Modified, new.kind, fields)?;
        } else if !fields.is_empty() {
            self.stats.metadata_only += 1;
            self.emit(ChangeKind::MetadataOnly, new.kind, fields)?;
        }
        match (old.kind, old.subtree, new.subtree) {
            (NodeKind::Dir, Some(a), Some(b)) => self.push_pair(a, b),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::collections::HashMap;

    use super::*;
    use crate::Error;
    use crate::format::bytes::Bytes;
    use crate::format::tree::{Timestamp, Xattr};

    /// Trees in memory, named by the unkeyed hash of their encoding.
    #[derive(Default)]
    struct Trees {
        map: HashMap<Id, Tree>,
        loads: RefCell<Vec<Id>>,
    }

    impl Trees {
        fn add(&mut self, nodes: Vec<Node>) -> Id {
            let mut tree = Tree { nodes };
            tree.nodes.sort_by(|a, b| a.name.cmp(&b.name));
            let id = Id::hash_of(&tree.encode());
            self.map.insert(id, tree);
            id
        }
    }

    impl TreeLoader for Trees {
        fn load_tree(&self, id: &Id) -> Result<Tree> {
            self.loads.borrow_mut().push(*id);
            self.map.get(id).cloned().ok_or_else(|| Error::corrupt(format!("tree {}", id.short()), "not in any index"))
        }
    }

    fn node(name: &str, kind: NodeKind) -> Node {
        Node {
            uid: 1000,
            gid: 1000,
            user: Some("me".into()),
            group: Some("me".into()),
            inode: 1,
            device: 1,
            ..crate::testing::test_node(name, kind)
        }
    }

    fn file(name: &str, content: u8, size: u64) -> Node {
        Node { content: vec![Id([content; 32])], digest: Some(Id([content; 32])), size, ..node(name, NodeKind::File) }
    }

    fn dir(name: &str, subtree: Id) -> Node {
        Node { subtree: Some(subtree), mode: 0o755, ..node(name, NodeKind::Dir) }
    }

    fn run(trees: &Trees, old: Id, new: Id) -> (Vec<Change>, DiffStats) {
        trees.loads.borrow_mut().clear();
        let mut changes = Vec::new();
        let stats = diff(trees, old, new, &mut |c| {
            changes.push(c);
            Ok(())
        })
        .unwrap();
        assert_eq!(stats.trees_loaded as usize, trees.loads.borrow().len());
        (changes, stats)
    }

    fn summary(changes: &[Change]) -> Vec<(String, &'static str, Vec<&'static str>)> {
        changes
            .iter()
            .map(|c| {
                (
                    String::from_utf8(c.path.clone()).unwrap(),
                    c.kind.as_str(),
                    c.fields.iter().map(|f| f.as_str()).collect(),
                )
            })
            .collect()
    }

    #[test]
    fn every_kind_of_change_in_path_order() {
        let mut t = Trees::default();
        let gone = t.add(vec![file("x", 9, 100), file("y", 8, 20)]);
        let old = t.add(vec![
            file("changed", 1, 10),
            file("chmod", 2, 5),
            dir("gone", gone),
            Node {
                xattrs: vec![Xattr { name: Bytes(b"user.a".to_vec()), value: Bytes(b"1".to_vec()) }],
                ..file("meta", 3, 1)
            },
            file("removed", 4, 7),
            file("same", 5, 3),
            file("to-link", 6, 30),
        ]);
        let new_dir = t.add(vec![file("n", 7, 40)]);
        let new = t.add(vec![
            Node { mtime: Timestamp(1_800_000_000, 5), ..file("changed", 11, 12) },
            Node { mode: 0o600, ..file("chmod", 2, 5) },
            Node { uid: 0, user: Some("root".into()), ..file("meta", 3, 1) },
            dir("new", new_dir),
            file("same", 5, 3),
            Node { target: Some(Bytes(b"same".to_vec())), ..node("to-link", NodeKind::Symlink) },
        ]);
        let (changes, stats) = run(&t, old, new);
        assert_eq!(
            summary(&changes),
            vec![
                ("/changed".into(), "modified", vec!["content", "mtime"]),
                ("/chmod".into(), "metadata_only", vec!["mode"]),
                ("/gone".into(), "removed", vec![]),
                ("/gone/x".into(), "removed", vec![]),
                ("/gone/y".into(), "removed", vec![]),
                ("/meta".into(), "metadata_only", vec!["uid", "user", "xattrs"]),
                ("/new".into(), "added", vec![]),
                ("/new/n".into(), "added", vec![]),
                ("/removed".into(), "removed", vec![]),
                ("/to-link".into(), "type_changed", vec![]),
            ]
        );
        assert_eq!(changes.last().unwrap().node_kind, NodeKind::Symlink);
        assert_eq!(
            stats,
            DiffStats {
                added: 2,
                removed: 4,
                modified: 1,
                type_changed: 1,
                metadata_only: 2,
                bytes_added: 40,
                bytes_removed: 100 + 20 + 7 + 30,
                trees_loaded: 4,
            }
        );
    }

    #[test]
    fn identical_roots_load_nothing() {
        let mut t = Trees::default();
        let root = t.add(vec![file("a", 1, 1)]);
        let (changes, stats) = run(&t, root, root);
        assert!(changes.is_empty());
        assert_eq!(stats, DiffStats::default());
    }

    #[test]
    fn a_directory_replaced_by_a_file_lists_what_was_below_it() {
        let mut t = Trees::default();
        let sub = t.add(vec![file("inner", 1, 3)]);
        let old = t.add(vec![dir("d", sub)]);
        let new = t.add(vec![file("d", 2, 4)]);
        let (changes, stats) = run(&t, old, new);
        assert_eq!(
            summary(&changes),
            vec![("/d".into(), "type_changed", vec![]), ("/d/inner".into(), "removed", vec![])]
        );
        assert_eq!((stats.removed, stats.bytes_removed, stats.bytes_added), (1, 3, 4));
        let (back, _) = run(&t, new, old);
        assert_eq!(summary(&back), vec![("/d".into(), "type_changed", vec![]), ("/d/inner".into(), "added", vec![])]);
    }

    #[test]
    fn directory_metadata_and_ignored_fields() {
        let mut t = Trees::default();
        let sub = t.add(vec![file("f", 1, 1)]);
        let old = t.add(vec![dir("d", sub), file("g", 2, 2)]);
        // ctime, inode, device and links are only for change detection.
        let g = Node { ctime: Timestamp(5, 5), inode: 77, device: 9, links: 3, ..file("g", 2, 2) };
        let new = t.add(vec![Node { mtime: Timestamp(2, 0), ..dir("d", sub) }, g]);
        let (changes, stats) = run(&t, old, new);
        assert_eq!(summary(&changes), vec![("/d".into(), "metadata_only", vec!["mtime"])]);
        // The unchanged subtree of `d` was not loaded: only the two roots.
        assert_eq!(stats.trees_loaded, 2);
    }

    /// A wide and deep tree in which one file changes: only the trees on the path
    /// to it are loaded, two per level.
    #[test]
    fn identical_subtrees_are_skipped() {
        const DEPTH: usize = 4;
        const WIDTH: usize = 20;
        let mut t = Trees::default();
        // Build the same tree twice, differing in one file at the bottom of the first branch.
        let mut build = |changed: u8| -> Id {
            let mut level: Vec<Node> = (0..WIDTH).map(|i| file(&format!("f{i}"), i as u8, 1)).collect();
            level[0] = file("f0", changed, 1);
            for depth in 0..DEPTH {
                let first = t.add(level);
                let others: Vec<Node> = (0..WIDTH).map(|i| file(&format!("f{i}"), i as u8, 1)).collect();
                let other = t.add(others);
                level = (0..WIDTH).map(|i| dir(&format!("d{depth}-{i}"), if i == 0 { first } else { other })).collect();
            }
            t.add(level)
        };
        let (old, new) = (build(100), build(200));
        let (changes, stats) = run(&t, old, new);
        assert_eq!(changes.len(), 1, "{changes:?}");
        assert_eq!(changes[0].path, b"/d3-0/d2-0/d1-0/d0-0/f0");
        assert_eq!(changes[0].kind, ChangeKind::Modified);
        assert_eq!(stats.trees_loaded as usize, 2 * (DEPTH + 1));
        assert!(stats.trees_loaded as usize <= DEPTH * 2 + 2);
    }

    #[test]
    fn errors_stop_the_walk() {
        let mut t = Trees::default();
        let old = t.add(vec![file("a", 1, 1), file("b", 1, 1)]);
        let new = t.add(vec![]);
        let mut seen = 0;
        let r = diff(&t, old, new, &mut |_| {
            seen += 1;
            Err(Error::InvalidInput("stop".into()))
        });
        assert!(matches!(r, Err(Error::InvalidInput(_))));
        assert_eq!(seen, 1);
        let missing = diff(&t, old, Id([7; 32]), &mut |_| Ok(()));
        assert!(matches!(missing, Err(Error::Corrupt { .. })));
    }
}
