//! Locating damage: which files of which snapshots a damaged or missing blob
//! affects. See docs/design.md#check.
//!
//! # Brief overview
//!
//! A data blob is referenced by file nodes, a tree blob by directory nodes (or by a
//! snapshot as its root). Finding the files behind a damaged blob needs no data
//! read again, only the trees. Trees are content-addressed: one tree id names one
//! listing however many snapshots and directories share it. The walk therefore
//! memoizes, per tree id, whether the tree is clean, unreadable, or which of its
//! entries lead to damage; a tree seen once, in any snapshot, is never loaded or
//! walked again. The cost is one load per distinct tree, plus, per snapshot, a walk
//! down only the paths that lead to affected entries.

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use crate::error::{Error, Result};
use crate::format::bytes::Bytes;
use crate::format::pack::BlobType;
use crate::format::tree::{NodeKind, Tree};
use crate::id::Id;
use crate::repo::Repository;

use super::CheckReport;

/// Loads trees by id; [`Repository`] is the real one, tests pass a map.
pub trait TreeSource {
    /// Loads and decodes tree `id`. A tree that fails to verify is damage
    /// ([`Error::Corrupt`]); storage errors ([`Error::Backend`]) are passed on.
    fn tree(&self, id: &Id) -> Result<Tree>;
}

impl TreeSource for Repository {
    fn tree(&self, id: &Id) -> Result<Tree> {
        self.load_tree(id)
    }
}

/// A blob that cannot be read intact.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DamagedBlob {
    /// The blob id.
    pub id: Id,
    /// Data or tree.
    pub blob_type: BlobType,
    /// The pack the index serves it from; `None` when no index lists it.
    pub pack: Option<Id>,
}

/// What a damaged blob costs an entry of a snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AffectedKind {
    /// A file whose content includes damaged data blobs: it cannot be restored whole.
    File,
    /// A directory whose own listing (tree blob) is damaged: nothing below it can
    /// be listed or restored.
    Directory,
}

/// One entry of one snapshot that damage affects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AffectedFile {
    /// The snapshot.
    pub snapshot: Id,
    /// Absolute path of the entry in the snapshot.
    pub path: PathBuf,
    /// File or directory.
    pub kind: AffectedKind,
    /// The damaged blobs it references, in content order, each once.
    pub blobs: Vec<Id>,
}

/// How an entry of a tree leads to damage.
enum Hit {
    /// A file: these damaged data blobs of its content.
    Content(Vec<Id>),
    /// A directory whose tree is readable but leads to damage further down.
    Below(Id),
    /// A directory whose tree is damaged or cannot be loaded.
    Lost(Id),
}

/// A tree that is not clean.
enum Mark {
    /// Damaged or failed to load.
    Unreadable,
    /// Readable; these entries lead to damage.
    Affected(Vec<(Bytes, Hit)>),
}

/// The memo: every distinct tree walked so far, clean ones in a plain set since
/// they are nearly all of them.
struct Walk<'a> {
    trees: &'a dyn TreeSource,
    damaged: &'a HashSet<Id>,
    clean: HashSet<Id>,
    marked: HashMap<Id, Mark>,
}

impl Walk<'_> {
    fn known(&self, id: &Id) -> bool {
        self.clean.contains(id) || self.marked.contains_key(id)
    }

    /// Settles `root` and every tree below it that is not settled yet: a
    /// depth-first, post-order walk with an explicit stack (trees may be deep).
    fn settle(&mut self, root: Id) -> Result<()> {
        let mut stack: Vec<(Id, Option<Tree>)> = vec![(root, None)];
        while let Some((id, loaded)) = stack.pop() {
            let Some(tree) = loaded else {
                if self.known(&id) {
                    continue;
                }
                if self.damaged.contains(&id) {
                    self.marked.insert(id, Mark::Unreadable);
                    continue;
                }
                let tree = match self.trees.tree(&id) {
                    Ok(t) => t,
                    Err(Error::Backend(e)) => return Err(Error::Backend(e)),
                    Err(_) => {
                        self.marked.insert(id, Mark::Unreadable);
                        continue;
                    }
                };
                let children: Vec<Id> = subtrees(&tree).filter(|s| !self.known(s)).collect();
                stack.push((id, Some(tree)));
                stack.extend(children.into_iter().map(|c| (c, None)));
                continue;
            };
            // Every subtree was settled above this frame on the stack.
            let mut hits = Vec::new();
            for node in &tree.nodes {
                match (node.kind, node.subtree) {
                    (NodeKind::Dir, Some(sub)) => match self.marked.get(&sub) {
                        Some(Mark::Unreadable) => hits.push((node.name.clone(), Hit::Lost(sub))),
                        Some(Mark::Affected(_)) => hits.push((node.name.clone(), Hit::Below(sub))),
                        None => {}
                    },
                    _ => {
                        let mut bad: Vec<Id> = Vec::new();
                        for b in node.content.iter().filter(|b| self.damaged.contains(b)) {
                            if !bad.contains(b) {
                                bad.push(*b);
                            }
                        }
                        if !bad.is_empty() {
                            hits.push((node.name.clone(), Hit::Content(bad)));
                        }
                    }
                }
            }
            if hits.is_empty() {
                self.clean.insert(id);
            } else {
                self.marked.insert(id, Mark::Affected(hits));
            }
        }
        Ok(())
    }

    /// The affected entries below settled tree `root` of `snapshot`, sorted by path.
    fn list(&self, snapshot: Id, root: Id, out: &mut Vec<AffectedFile>) {
        let start = out.len();
        if let Some(Mark::Unreadable) = self.marked.get(&root) {
            out.push(AffectedFile { snapshot, path: "/".into(), kind: AffectedKind::Directory, blobs: vec![root] });
        }
        // One path buffer, extended and truncated: a deep chain of affected
        // directories costs time linear in its depth.
        let mut path: Vec<u8> = b"/".to_vec();
        let mut stack = Vec::new();
        if let Some(Mark::Affected(hits)) = self.marked.get(&root) {
            stack.push((hits.iter(), path.len()));
        }
        while let Some((hits, len)) = stack.last_mut() {
            let len = *len;
            let Some((name, hit)) = hits.next() else {
                stack.pop();
                continue;
            };
            path.truncate(len);
            if !path.ends_with(b"/") {
                path.push(b'/');
            }
            path.extend_from_slice(&name.0);
            let here = || PathBuf::from(OsStr::from_bytes(&path));
            match hit {
                Hit::Content(blobs) => {
                    out.push(AffectedFile { snapshot, path: here(), kind: AffectedKind::File, blobs: blobs.clone() })
                }
                Hit::Lost(t) => {
                    out.push(AffectedFile { snapshot, path: here(), kind: AffectedKind::Directory, blobs: vec![*t] })
                }
                Hit::Below(t) => {
                    if let Some(Mark::Affected(below)) = self.marked.get(t) {
                        stack.push((below.iter(), path.len()));
                    }
                }
            }
        }
        out[start..].sort_by(|a, b| a.path.cmp(&b.path));
    }
}

fn subtrees(tree: &Tree) -> impl Iterator<Item = Id> + '_ {
    tree.nodes.iter().filter(|n| n.kind == NodeKind::Dir).filter_map(|n| n.subtree)
}

/// Finds every entry of `snapshots` (snapshot id, root tree id) that references a
/// blob in `damaged`, directly (a file's content, a directory's tree) or because
/// its tree fails to load. Each distinct tree is loaded at most once. The result
/// follows the order of `snapshots`, then paths.
pub fn locate_damage(
    trees: &dyn TreeSource,
    snapshots: &[(Id, Id)],
    damaged: &HashSet<Id>,
) -> Result<Vec<AffectedFile>> {
    let mut walk = Walk { trees, damaged, clean: HashSet::new(), marked: HashMap::new() };
    let mut out = Vec::new();
    for (snapshot, root) in snapshots {
        walk.settle(*root)?;
        walk.list(*snapshot, *root, &mut out);
    }
    Ok(out)
}

/// The blobs the index serves from any of `packs` (packs found missing).
pub(super) fn served_from(repo: &Repository, packs: &HashSet<Id>) -> Vec<DamagedBlob> {
    if packs.is_empty() {
        return Vec::new();
    }
    let idx = repo.index();
    idx.iter()
        .filter_map(|e| {
            let pack = idx.packs()[e.pack as usize].id;
            packs.contains(&pack).then_some(DamagedBlob {
                id: e.entry.id,
                blob_type: e.entry.blob_type,
                pack: Some(pack),
            })
        })
        .collect()
}

/// Settles `r.damaged_blobs` (each blob once, sorted by pack then id, a known
/// pack preferred over none) and fills `r.affected` from every loadable snapshot.
pub(super) fn report(repo: &Repository, r: &mut CheckReport) -> Result<()> {
    let mut by_id: HashMap<Id, DamagedBlob> = HashMap::new();
    for b in r.damaged_blobs.drain(..) {
        match by_id.get(&b.id) {
            Some(known) if known.pack.is_some() || b.pack.is_none() => {}
            _ => {
                by_id.insert(b.id, b);
            }
        }
    }
    r.damaged_blobs = by_id.into_values().collect();
    r.damaged_blobs.sort_by_key(|b| (b.pack.is_none(), b.pack, b.id));
    if r.damaged_blobs.is_empty() {
        return Ok(());
    }
    let damaged: HashSet<Id> = r.damaged_blobs.iter().map(|b| b.id).collect();
    let (snapshots, _) = repo.snapshots()?;
    let roots: Vec<(Id, Id)> = snapshots.iter().map(|(id, s)| (*id, s.tree)).collect();
    r.affected = locate_damage(repo, &roots, &damaged)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;

    /// Trees in memory, counting loads.
    #[derive(Default)]
    struct Trees {
        map: HashMap<Id, Tree>,
        loads: RefCell<HashMap<Id, usize>>,
    }

    impl Trees {
        fn add(&mut self, nodes: Vec<serde_json::Value>) -> Id {
            let tree: Tree = serde_json::from_value(serde_json::json!({ "nodes": nodes })).unwrap();
            let id = Id::hash_of(&tree.encode());
            self.map.insert(id, tree);
            id
        }
    }

    impl TreeSource for Trees {
        fn tree(&self, id: &Id) -> Result<Tree> {
            *self.loads.borrow_mut().entry(*id).or_default() += 1;
            self.map.get(id).cloned().ok_or_else(|| Error::corrupt(format!("tree blob {}", id.short()), "missing"))
        }
    }

    fn node(name: &str, kind: &str, content: &[Id], subtree: Option<Id>) -> serde_json::Value {
        let mut v = serde_json::json!({"name": name, "type": kind, "mode": 420, "uid": 0, "gid": 0,
            "mtime": [0, 0], "ctime": [0, 0], "content": content});
        if let Some(s) = subtree {
            v["subtree"] = serde_json::json!(s);
        }
        v
    }

    fn blob(i: u8) -> Id {
        Id([i; 32])
    }

    fn paths(found: &[AffectedFile], snapshot: Id) -> Vec<String> {
        found.iter().filter(|f| f.snapshot == snapshot).map(|f| f.path.display().to_string()).collect()
    }

    #[test]
    fn finds_files_in_every_snapshot_loading_each_tree_once() {
        let mut t = Trees::default();
        let (bad, good, other) = (blob(1), blob(2), blob(3));
        // A shared directory holding one damaged file, used by both snapshots under
        // different parents; a subtree that is missing; an unaffected sibling.
        let shared = t.add(vec![node("a.bin", "file", &[good, bad, bad], None), node("b.txt", "file", &[good], None)]);
        let clean = t.add(vec![node("c.txt", "file", &[other], None)]);
        let lost = Id([7; 32]);
        let root1 = t.add(vec![
            node("clean", "dir", &[], Some(clean)),
            node("docs", "dir", &[], Some(shared)),
            node("gone", "dir", &[], Some(lost)),
        ]);
        let mid = t.add(vec![node("docs", "dir", &[], Some(shared)), node("x", "file", &[bad], None)]);
        let root2 = t.add(vec![node("clean", "dir", &[], Some(clean)), node("home", "dir", &[], Some(mid))]);
        let (s1, s2) = (Id([11; 32]), Id([12; 32]));
        let damaged: HashSet<Id> = [bad].into_iter().collect();
        let found = locate_damage(&t, &[(s1, root1), (s2, root2)], &damaged).unwrap();
        assert_eq!(paths(&found, s1), ["/docs/a.bin", "/gone"]);
        assert_eq!(paths(&found, s2), ["/home/docs/a.bin", "/home/x"]);
        let a = found.iter().find(|f| f.path.ends_with("a.bin")).unwrap();
        assert_eq!((a.kind, a.blobs.as_slice()), (AffectedKind::File, [bad].as_slice()));
        let gone = found.iter().find(|f| f.path.ends_with("gone")).unwrap();
        assert_eq!((gone.kind, gone.blobs.as_slice()), (AffectedKind::Directory, [lost].as_slice()));
        // One load per distinct tree, whatever the sharing.
        let loads = t.loads.borrow();
        assert_eq!(loads.len(), 6);
        assert!(loads.values().all(|n| *n == 1), "{loads:?}");
    }

    #[test]
    fn a_damaged_tree_blob_marks_its_directory_and_is_not_loaded() {
        let mut t = Trees::default();
        let sub = t.add(vec![node("f", "file", &[blob(1)], None)]);
        let root = t.add(vec![node("d", "dir", &[], Some(sub)), node("e", "file", &[blob(2)], None)]);
        let s = Id([1; 32]);
        let found = locate_damage(&t, &[(s, root)], &[sub].into_iter().collect()).unwrap();
        assert_eq!(paths(&found, s), ["/d"]);
        assert!(!t.loads.borrow().contains_key(&sub));
        let found = locate_damage(&t, &[(s, root)], &[root].into_iter().collect()).unwrap();
        assert_eq!(paths(&found, s), ["/"]);
        assert!(locate_damage(&t, &[(s, root)], &[blob(9)].into_iter().collect()).unwrap().is_empty());
    }
}
