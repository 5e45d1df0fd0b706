//! A foreign tree built in memory from entries named by their paths, in any
//! order: what an archive read in one pass gives (a tar stream, borg's list of
//! an archive's items). See docs/design.md#import.
//!
//! Directories an entry's path passes through but that the source does not
//! record are made up (mode 0755, owned by root, time 0); one recorded later
//! takes the place of the one made up. An entry recorded twice keeps the later
//! one, as extracting the archive would.

use std::collections::HashMap;

use super::foreign::{ForeignEntry, ForeignTree, Listing, Payload};
use crate::format::bytes::Bytes;
use crate::format::tree::{Node, NodeKind, Timestamp};

/// A directory's listing in the making.
#[derive(Default)]
struct Dir {
    entries: Vec<ForeignEntry>,
    by_name: HashMap<Vec<u8>, usize>,
    left_out: Vec<(String, String)>,
}

/// The tree. Directories are numbered; a directory's handle is its number.
pub struct StagedTree {
    dirs: Vec<Dir>,
}

impl Default for StagedTree {
    fn default() -> Self {
        StagedTree { dirs: vec![Dir::default()] }
    }
}

/// A directory's node when the source records none.
fn implied_dir(name: &[u8]) -> Node {
    Node::new(Bytes(name.to_vec()), NodeKind::Dir, 0o755, Timestamp(0, 0))
}

fn handle(n: usize) -> Vec<u8> {
    (n as u64).to_le_bytes().to_vec()
}

fn number(h: &[u8]) -> Option<usize> {
    Some(u64::from_le_bytes(h.try_into().ok()?) as usize)
}

impl StagedTree {
    /// Adds `entry` at the path `components` (each one name, checked by the
    /// caller: none empty, `.`, `..` or holding `/`), making up the directories
    /// above it that are not there yet. The entry's node's name is set to the
    /// last component. A directory's payload is this tree's to set. Err when an
    /// entry above it is not a directory.
    pub fn insert(&mut self, components: &[&[u8]], mut entry: ForeignEntry) -> Result<(), String> {
        let Some((last, above)) = components.split_last() else {
            return Err("an empty path".into());
        };
        let mut dir = 0;
        for (depth, c) in above.iter().enumerate() {
            dir = match self.dirs[dir].by_name.get(*c).map(|&i| &self.dirs[dir].entries[i].payload) {
                Some(Payload::Dir(h)) => number(h).expect("a staged handle"),
                Some(_) => {
                    let at = components[..=depth].join(&b'/');
                    return Err(format!("{} is not a directory in the source", String::from_utf8_lossy(&at)));
                }
                None => {
                    let sub = self.new_dir();
                    let e = ForeignEntry { node: implied_dir(c), payload: Payload::Dir(handle(sub)) };
                    self.put(dir, e);
                    sub
                }
            };
        }
        entry.node.name = Bytes(last.to_vec());
        let existing = self.dirs[dir].by_name.get(*last).map(|&i| self.dirs[dir].entries[i].payload.clone());
        match (entry.node.kind, existing) {
            (NodeKind::Dir, Some(Payload::Dir(h))) => entry.payload = Payload::Dir(h),
            (_, Some(Payload::Dir(_))) => {
                return Err(
                    "the source records it as a directory and again as another kind: the second is left out".into()
                );
            }
            (NodeKind::Dir, _) => entry.payload = Payload::Dir(handle(self.new_dir())),
            _ => {}
        }
        self.put(dir, entry);
        Ok(())
    }

    /// Lists `name` as left out of the root directory, with the reason.
    pub fn leave_out(&mut self, name: String, why: String) {
        self.dirs[0].left_out.push((name, why));
    }

    /// Every entry, for the caller to amend (hard links' counts, say).
    pub fn entries_mut(&mut self) -> impl Iterator<Item = &mut ForeignEntry> {
        self.dirs.iter_mut().flat_map(|d| d.entries.iter_mut())
    }

    fn new_dir(&mut self) -> usize {
        self.dirs.push(Dir::default());
        self.dirs.len() - 1
    }

    fn put(&mut self, dir: usize, e: ForeignEntry) {
        let d = &mut self.dirs[dir];
        match d.by_name.get(&e.node.name.0) {
            Some(&i) => d.entries[i] = e,
            None => {
                d.by_name.insert(e.node.name.0.clone(), d.entries.len());
                d.entries.push(e);
            }
        }
    }

    /// The tree's listings, for [`ForeignTree`]; `open` is the caller's.
    pub fn root(&self) -> Vec<u8> {
        handle(0)
    }

    /// The listing of the directory `h`.
    pub fn list(&self, h: &[u8]) -> Result<Listing, String> {
        let d = number(h).and_then(|n| self.dirs.get(n)).ok_or("not a directory of this archive")?;
        Ok(Listing { entries: d.entries.clone(), left_out: d.left_out.clone() })
    }
}

/// Splits `path` as an archive names it into its components: a leading `/`
/// and `./`, empty components and `.` are dropped; `..` is refused (it would
/// name something outside the snapshot), as is a path of nothing.
pub fn archive_components(path: &[u8]) -> Result<Vec<&[u8]>, &'static str> {
    let mut out = Vec::new();
    for c in path.split(|&b| b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => return Err("the path holds `..`"),
            c if c.contains(&0) => return Err("the path holds a NUL byte"),
            c => out.push(c),
        }
    }
    if out.is_empty() {
        return Err("the path names nothing below the archive's top");
    }
    Ok(out)
}

/// A [`StagedTree`] with nothing to open: every file's content was fed.
impl ForeignTree for StagedTree {
    fn root(&self) -> Vec<u8> {
        StagedTree::root(self)
    }
    fn list(&self, dir: &[u8]) -> Result<Listing, String> {
        StagedTree::list(self, dir)
    }
    fn open<'a>(&'a self, _file: &[u8]) -> Result<Box<dyn std::io::Read + Send + 'a>, String> {
        Err("its content is not in the archive".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &[u8]) -> ForeignEntry {
        ForeignEntry {
            node: Node::new(Bytes(name.to_vec()), NodeKind::File, 0o644, Timestamp(1, 0)),
            payload: Payload::File { key: [1; 32], handle: vec![] },
        }
    }

    fn dir(mode: u32) -> ForeignEntry {
        ForeignEntry { node: Node::new(Bytes(vec![]), NodeKind::Dir, mode, Timestamp(2, 0)), payload: Payload::Other }
    }

    fn names(t: &StagedTree, h: &[u8]) -> Vec<String> {
        t.list(h).unwrap().entries.iter().map(|e| String::from_utf8_lossy(&e.node.name.0).into_owned()).collect()
    }

    fn sub(t: &StagedTree, h: &[u8], name: &str) -> Vec<u8> {
        let l = t.list(h).unwrap();
        match &l.entries.iter().find(|e| e.node.name.0 == name.as_bytes()).unwrap().payload {
            Payload::Dir(h) => h.clone(),
            p => panic!("{p:?}"),
        }
    }

    #[test]
    fn entries_in_any_order_make_one_tree() {
        let mut t = StagedTree::default();
        t.insert(&[b"a", b"b", b"f"], file(b"x")).unwrap();
        t.insert(&[b"a"], dir(0o700)).unwrap();
        t.insert(&[b"a", b"g"], file(b"x")).unwrap();
        assert_eq!(names(&t, &t.root()), ["a"]);
        let a = sub(&t, &t.root(), "a");
        assert_eq!(
            t.list(&t.root()).unwrap().entries[0].node.mode,
            0o700,
            "the recorded directory replaces the made-up one"
        );
        assert_eq!(names(&t, &a), ["b", "g"]);
        let b = sub(&t, &a, "b");
        assert_eq!(t.list(&t.root()).unwrap().entries.len(), 1);
        assert_eq!(names(&t, &b), ["f"]);
        let made_up = &t.list(&a).unwrap().entries[0].node;
        assert_eq!((made_up.kind, made_up.mode), (NodeKind::Dir, 0o755));
    }

    #[test]
    fn a_later_entry_replaces_an_earlier_but_not_a_directory() {
        let mut t = StagedTree::default();
        t.insert(&[b"f"], file(b"")).unwrap();
        let mut second = file(b"");
        second.node.mode = 0o600;
        t.insert(&[b"f"], second).unwrap();
        assert_eq!(t.list(&t.root()).unwrap().entries[0].node.mode, 0o600);
        t.insert(&[b"d", b"x"], file(b"")).unwrap();
        assert!(t.insert(&[b"d"], file(b"")).is_err());
        assert!(t.insert(&[b"f", b"y"], file(b"")).unwrap_err().contains("not a directory"));
    }

    #[test]
    fn archive_paths_split_into_names() {
        assert_eq!(archive_components(b"./a//b/./c/").unwrap(), [b"a" as &[u8], b"b", b"c"]);
        assert_eq!(archive_components(b"/etc/x").unwrap(), [b"etc" as &[u8], b"x"]);
        assert!(archive_components(b"a/../../etc").is_err());
        assert!(archive_components(b"./").is_err());
        assert!(archive_components(b"a\0b").is_err());
    }

    #[test]
    fn hostile_handles_are_refused() {
        let t = StagedTree::default();
        assert!(t.list(b"\x09\0\0\0\0\0\0\0").is_err());
        assert!(t.list(b"ab").is_err());
    }
}
