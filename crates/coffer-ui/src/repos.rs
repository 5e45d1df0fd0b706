//! The repositories the UI shows (docs/design.md#ui-pages): their snapshots,
//! kept and refreshed from the history, directory listings read a page at a
//! time from decoded trees kept in a bounded cache, and file contents read
//! chunk by chunk, each chunk verified as it is loaded.
//!
//! Paths inside a snapshot are given relative to its root, as bytes: `a/b`.
//! An absolute path, an empty component, `.`, `..` or a NUL is refused, not
//! normalised.

use std::collections::{HashMap, HashSet, VecDeque};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use coffer_core::Id;
use coffer_core::format::snapshot::Snapshot;
use coffer_core::format::tombstone::Tombstone;
use coffer_core::format::tree::{Node, NodeKind, Tree};
use coffer_core::local_state::LocalState;
use coffer_core::ops::diff::{Change, DiffStats};
use coffer_core::repo::Repository;

use crate::brief::{self, Brief};
use crate::forgets::Retention;
use crate::health::{ReplicaScan, ServerLog};

/// Whole snapshot records kept for the pages about one snapshot.
const RECORDS_KEPT: usize = 4;
/// Decoded tree entries kept across requests, at most (about 250 B each).
const TREE_CACHE_NODES: usize = 400_000;
/// The longest path accepted, in bytes (as the trees' own limit).
const MAX_PATH: usize = 4096;

/// Why a request about a repository's contents fails.
#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    /// No such repository, snapshot or entry (404).
    #[error("{0}")]
    NotFound(String),
    /// A path or parameter that is not accepted (400).
    #[error("{0}")]
    BadRequest(String),
    /// The repository could not be opened (503): why.
    #[error("{0}")]
    Unavailable(String),
    /// Reading the repository failed: damage or storage trouble (502).
    #[error("{0}")]
    Repo(#[from] coffer_core::Error),
}

/// A repository as the binary opened it for the UI.
pub struct RepoSource {
    /// Its name in the UI and the API: letters, digits, `.`, `_`, `-`.
    pub name: String,
    /// Where it is, as the user gave it (for display; holds no secret).
    pub location: String,
    /// The repository, its index loaded; or why it could not be opened.
    pub repo: Result<Arc<Repository>, String>,
    /// This client's state of it (its writer key): without it, the UI does not forget.
    pub writer: Option<LocalState>,
    /// The retention policy of its job, which the UI can apply.
    pub retention: Option<Retention>,
    /// The jobs that back up into it, whose checks are its health.
    pub jobs: Vec<String>,
    /// On a coffer server: its transparency log, followed on the health page.
    pub server_log: Option<ServerLog>,
    /// Over several backends: how its packs' copies stand, for the health page.
    pub replicas: Option<ReplicaScan>,
}

/// The history as last read: each stored snapshot that loaded as its brief
/// (oldest first), the tombstones, and the live snapshots as positions among
/// the briefs, so that each is held once however many pages list it.
pub struct Live {
    snapshots: Vec<(Id, Brief)>,
    tombstones: Vec<(Id, Tombstone)>,
    /// Every snapshot and tombstone stored, loaded or not.
    present: HashSet<Id>,
    live: Vec<usize>,
}

impl Live {
    fn new(mut snapshots: Vec<(Id, Brief)>, tombstones: Vec<(Id, Tombstone)>, present: HashSet<Id>) -> Live {
        brief::sort(&mut snapshots);
        snapshots.shrink_to_fit();
        let forgotten: HashSet<Id> = tombstones.iter().flat_map(|(_, t)| t.forgotten.iter().map(|f| f.id)).collect();
        let live = (0..snapshots.len()).filter(|&i| !forgotten.contains(&snapshots[i].0)).collect();
        Live { snapshots, tombstones, present, live }
    }

    /// The live snapshots, oldest first.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &(Id, Brief)> + '_ {
        self.live.iter().map(|&i| &self.snapshots[i])
    }

    pub fn len(&self) -> usize {
        self.live.len()
    }

    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    fn contains(&self, id: &Id) -> bool {
        self.iter().any(|(i, _)| i == id)
    }
}

/// One repository's view.
pub struct RepoView {
    pub name: String,
    pub location: String,
    repo: Result<Arc<Repository>, String>,
    pub(crate) writer: Option<LocalState>,
    pub(crate) retention: Option<Retention>,
    pub jobs: Vec<String>,
    pub(crate) server_log: Option<ServerLog>,
    pub(crate) replicas: Option<ReplicaScan>,
    history: Mutex<Option<Arc<Live>>>,
    /// The whole records of the snapshots shown last, newest last.
    records: Mutex<VecDeque<(Id, Snapshot)>>,
    trees: Mutex<TreeCache>,
}

/// A page of a directory.
pub struct Page {
    /// The directory's entries in all.
    pub total: usize,
    pub offset: usize,
    pub entries: Vec<Node>,
}

/// Whether `name` may name a repository in the UI.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        && name != "."
        && name != ".."
}

/// Splits a snapshot path (relative, `/`-separated) into its components.
pub fn components(path: &[u8]) -> Result<Vec<&[u8]>, ViewError> {
    if path.is_empty() {
        return Ok(Vec::new());
    }
    if path.len() > MAX_PATH {
        return Err(ViewError::BadRequest(format!("the path is longer than {MAX_PATH} bytes")));
    }
    if path[0] == b'/' {
        return Err(ViewError::BadRequest("the path is absolute: give it relative to the snapshot's root".into()));
    }
    let parts: Vec<&[u8]> = path.split(|b| *b == b'/').collect();
    for p in &parts {
        if p.is_empty() || *p == b"." || *p == b".." || p.contains(&0) {
            return Err(ViewError::BadRequest(format!(
                "the path has a component {:?}: paths are relative to the snapshot's root, without `.`, `..` or \
                 empty components",
                String::from_utf8_lossy(p)
            )));
        }
    }
    Ok(parts)
}

impl RepoView {
    pub fn new(s: RepoSource) -> RepoView {
        RepoView {
            name: s.name,
            location: s.location,
            repo: s.repo,
            writer: s.writer,
            retention: s.retention,
            jobs: s.jobs,
            server_log: s.server_log,
            replicas: s.replicas,
            history: Mutex::new(None),
            records: Mutex::new(VecDeque::new()),
            trees: Mutex::new(TreeCache::default()),
        }
    }

    /// The repository, or why it is unavailable.
    pub fn repo(&self) -> Result<&Arc<Repository>, ViewError> {
        self.repo.as_ref().map_err(|e| ViewError::Unavailable(format!("repository {}: {e}", self.name)))
    }

    /// The live snapshots, oldest first. The storage is listed at each call
    /// and only what is new is read, so a snapshot a job has just written is
    /// shown on the next page, the index files stored with it loaded.
    pub fn snapshots(&self) -> Result<Arc<Live>, ViewError> {
        let repo = self.repo()?;
        let mut h = self.history.lock().expect("history lock");
        // A listing fetched ahead at open (of the writers, say) would show the
        // storage as it was then.
        repo.drop_listings_ahead();
        let listed = coffer_core::repo::history::list(repo)?;
        let (mut snapshots, mut tombstones, known) = match h.as_ref() {
            None => Default::default(),
            Some(current) => {
                let present: HashSet<Id> = listed.snapshots.iter().chain(listed.tombstones.iter()).copied().collect();
                if present == current.present {
                    return Ok(current.clone());
                }
                let known: HashSet<Id> = current
                    .snapshots
                    .iter()
                    .map(|(i, _)| *i)
                    .chain(current.tombstones.iter().map(|(i, _)| *i))
                    .collect();
                (current.snapshots.clone(), current.tombstones.clone(), known)
            }
        };
        let first = h.is_none();
        *h = None;
        let loaded = coffer_core::repo::history::load_unknown(repo, &listed, &known)?;
        snapshots.retain(|(i, _)| loaded.present.contains(i));
        tombstones.retain(|(i, _)| loaded.present.contains(i));
        let mut pool = brief::Pool::of(snapshots.iter().map(|(_, b)| b));
        snapshots.extend(loaded.snapshots.iter().map(|(i, s)| (*i, Brief::of(s, &mut pool))));
        drop(pool);
        tombstones.extend(loaded.tombstones);
        if !first {
            // Snapshots are stored after the index files of their packs: those of a
            // snapshot just listed are there to be read. One that does not load shows
            // as the blobs it lists not found, when they are needed.
            let _ = repo.load_new_index_files()?;
        }
        let live = Arc::new(Live::new(snapshots, tombstones, loaded.present));
        *h = Some(live.clone());
        Ok(live)
    }

    /// Snapshot `id` (its full hex id), a live one, its whole record read again
    /// (the last few are kept).
    pub fn snapshot(&self, id: &str) -> Result<(Id, Snapshot), ViewError> {
        let want = Id::from_hex(id).ok_or_else(|| ViewError::BadRequest(format!("{id:?} is not a snapshot id")))?;
        if !self.snapshots()?.contains(&want) {
            return Err(ViewError::NotFound(format!("repository {} has no snapshot {}", self.name, want.short())));
        }
        if let Some(s) = self.records.lock().expect("record cache lock").iter().find(|(i, _)| *i == want) {
            return Ok(s.clone());
        }
        let s = (want, self.repo()?.load_snapshot(&want)?);
        let mut records = self.records.lock().expect("record cache lock");
        if records.len() >= RECORDS_KEPT {
            records.pop_front();
        }
        records.push_back(s.clone());
        Ok(s)
    }

    /// Drops the decoded trees if unused for [`TREE_CACHE_IDLE`]; says whether it did.
    /// The snapshot records kept go with them.
    pub fn expire_trees(&self, now: std::time::Instant) -> bool {
        let expired = self.trees.lock().expect("tree cache lock").expire(now);
        if expired {
            self.records.lock().expect("record cache lock").clear();
        }
        expired
    }

    fn tree(&self, id: &Id) -> Result<Arc<Tree>, ViewError> {
        if let Some(t) = self.trees.lock().expect("tree cache lock").get(id) {
            return Ok(t);
        }
        let t = Arc::new(self.repo()?.load_tree(id)?);
        self.trees.lock().expect("tree cache lock").insert(*id, t.clone());
        Ok(t)
    }

    /// The entry at `path` in the snapshot whose root tree is `root`: None for the root itself.
    fn locate(&self, root: Id, path: &[u8]) -> Result<(Id, Option<Node>), ViewError> {
        let parts = components(path)?;
        let mut tree = root;
        let mut node: Option<Node> = None;
        for (i, part) in parts.iter().enumerate() {
            if let Some(n) = &node {
                tree = n.subtree.filter(|_| n.kind == NodeKind::Dir).ok_or_else(|| {
                    ViewError::NotFound(format!(
                        "{} is not a directory",
                        String::from_utf8_lossy(&path_of(&parts[..i]))
                    ))
                })?;
            }
            let t = self.tree(&tree)?;
            let found = t.nodes.binary_search_by(|n| n.name.0.as_slice().cmp(part)).ok();
            node = Some(found.map(|k| t.nodes[k].clone()).ok_or_else(|| {
                ViewError::NotFound(format!("no entry {} in the snapshot", String::from_utf8_lossy(path)))
            })?);
        }
        Ok((tree, node))
    }

    /// The entries `offset..offset+limit` of the directory at `path`.
    pub fn list(&self, snapshot: &str, path: &[u8], offset: usize, limit: usize) -> Result<Page, ViewError> {
        let (_, snap) = self.snapshot(snapshot)?;
        let dir = match self.locate(snap.tree, path)? {
            (root, None) => root,
            (_, Some(n)) => match (n.kind, n.subtree) {
                (NodeKind::Dir, Some(t)) => t,
                _ => {
                    return Err(ViewError::BadRequest(format!("{} is not a directory", String::from_utf8_lossy(path))));
                }
            },
        };
        let t = self.tree(&dir)?;
        let start = offset.min(t.nodes.len());
        let end = start.saturating_add(limit).min(t.nodes.len());
        Ok(Page { total: t.nodes.len(), offset: start, entries: t.nodes[start..end].to_vec() })
    }

    /// The entry at `path` (None for the snapshot's root), or NotFound.
    pub fn entry(&self, snapshot: &str, path: &[u8]) -> Result<Option<Node>, ViewError> {
        let (_, snap) = self.snapshot(snapshot)?;
        Ok(self.locate(snap.tree, path)?.1)
    }

    /// The directory at `path` (the root when empty), for an archive of it:
    /// its tree, its own entry (none for the root) and its path in the snapshot.
    pub fn dir(&self, snapshot: &str, path: &[u8]) -> Result<Directory, ViewError> {
        let (id, snap) = self.snapshot(snapshot)?;
        let (tree, entry) = match self.locate(snap.tree, path)? {
            (root, None) => (root, None),
            (_, Some(n)) => match (n.kind, n.subtree) {
                (NodeKind::Dir, Some(t)) => (t, Some(n)),
                _ => {
                    return Err(ViewError::BadRequest(format!("{} is not a directory", String::from_utf8_lossy(path))));
                }
            },
        };
        let name = match &entry {
            Some(n) => String::from_utf8_lossy(&n.name.0).into_owned(),
            None => format!("{}-{}", snap.hostname, id.short()),
        };
        let prefix = PathBuf::from("/").join(std::ffi::OsStr::from_bytes(path));
        Ok(Directory { repo: self.repo()?.clone(), tree, entry, prefix, name })
    }

    /// The regular file at `path`: its node, for [`coffer_core::ops::dump::ContentReader`].
    pub fn file(&self, snapshot: &str, path: &[u8]) -> Result<(Arc<Repository>, Node, PathBuf), ViewError> {
        let (_, snap) = self.snapshot(snapshot)?;
        match self.locate(snap.tree, path)? {
            (_, Some(n)) if n.kind == NodeKind::File => {
                let shown = PathBuf::from(String::from_utf8_lossy(path).into_owned());
                Ok((self.repo()?.clone(), n, shown))
            }
            _ => Err(ViewError::BadRequest(format!("{} is not a regular file", String::from_utf8_lossy(path)))),
        }
    }
}

/// A directory of a snapshot, found by [`RepoView::dir`].
pub struct Directory {
    pub repo: Arc<Repository>,
    pub tree: Id,
    /// Its own entry; none for the snapshot's root.
    pub entry: Option<Node>,
    /// Its path in the snapshot, from `/`.
    pub prefix: PathBuf,
    /// The archive's name: the directory's, or host and snapshot for the root.
    pub name: String,
}

/// The changes from one snapshot to another, the first `limit` of them.
pub struct Compared {
    pub from: (Id, Snapshot),
    pub to: (Id, Snapshot),
    pub changes: Vec<Change>,
    pub stats: DiffStats,
    /// More changes than `limit` were found (all are counted in `stats`).
    pub truncated: bool,
}

impl RepoView {
    /// The changes from snapshot `from` to snapshot `to`, the first `limit`
    /// kept (the walk goes on to count them all).
    pub fn diff(&self, from: &str, to: &str, limit: usize) -> Result<Compared, ViewError> {
        let (a, b) = (self.snapshot(from)?, self.snapshot(to)?);
        let repo = self.repo()?;
        let mut changes = Vec::new();
        let mut truncated = false;
        let stats = coffer_core::ops::diff::diff(repo.as_ref(), a.1.tree, b.1.tree, &mut |c| {
            if changes.len() < limit {
                changes.push(c);
            } else {
                truncated = true;
            }
            Ok(())
        })?;
        Ok(Compared { from: a, to: b, changes, stats, truncated })
    }
}

/// An entry found by name: its snapshot, its path (relative to the root) and node.
pub struct Found {
    pub snapshot: Id,
    pub time: String,
    pub path: Vec<u8>,
    pub node: Node,
}

impl RepoView {
    /// Entries whose name matches the glob `pattern` (a pattern holding `/`
    /// matches the whole path), in snapshot `only` or in every snapshot newest
    /// first, at most `limit`; a snapshot whose root tree was searched already
    /// is not searched again. Says whether the search stopped at the limit.
    pub fn find(&self, pattern: &str, only: Option<&str>, limit: usize) -> Result<(Vec<Found>, bool), ViewError> {
        use std::os::unix::ffi::OsStrExt;
        let patterns = coffer_core::ops::find::NamePatterns::new(&[pattern.to_string()], false)
            .map_err(|e| ViewError::BadRequest(e.to_string()))?;
        // Each snapshot searched: its id, root tree and time.
        let snaps: Vec<(Id, Id, String)> = match only {
            Some(id) => {
                let (id, s) = self.snapshot(id)?;
                vec![(id, s.tree, s.time)]
            }
            None => self.snapshots()?.iter().rev().map(|(id, b)| (*id, b.tree, b.time.to_string())).collect(),
        };
        let repo = self.repo()?;
        let mut out = Vec::new();
        let mut searched = std::collections::HashSet::new();
        // The walk is stopped by an error from the callback, told from a real one by this.
        let mut full = false;
        for (id, tree, time) in snaps {
            if !searched.insert(tree) {
                continue;
            }
            let r = coffer_core::ops::find::find(
                repo,
                tree,
                &patterns,
                &mut |path, node| {
                    if out.len() >= limit {
                        full = true;
                        return Err(coffer_core::Error::InvalidInput("the search reached its limit".into()));
                    }
                    let rel = path.as_os_str().as_bytes().strip_prefix(b"/").unwrap_or_default().to_vec();
                    out.push(Found { snapshot: id, time: time.clone(), path: rel, node: node.clone() });
                    Ok(())
                },
                &mut |_| Ok(()),
            );
            match r {
                Ok(_) => {}
                Err(_) if full => return Ok((out, true)),
                Err(e) => return Err(e.into()),
            }
        }
        Ok((out, false))
    }
}

fn path_of(parts: &[&[u8]]) -> Vec<u8> {
    parts.join(&b'/')
}

/// Decoded trees, the least recently inserted dropped first once the entries
/// kept pass [`TREE_CACHE_NODES`], all of them once unused for [`TREE_CACHE_IDLE`].
#[derive(Default)]
struct TreeCache {
    map: HashMap<Id, Arc<Tree>>,
    order: VecDeque<Id>,
    nodes: usize,
    used: Option<std::time::Instant>,
}

/// The tree cache is emptied when unused this long, so that an idle UI holds
/// no more than its snapshot lists.
pub const TREE_CACHE_IDLE: std::time::Duration = std::time::Duration::from_secs(60);

impl TreeCache {
    fn get(&mut self, id: &Id) -> Option<Arc<Tree>> {
        self.used = Some(std::time::Instant::now());
        self.map.get(id).cloned()
    }

    /// Empties the cache if unused for [`TREE_CACHE_IDLE`]; says whether it did.
    fn expire(&mut self, now: std::time::Instant) -> bool {
        match self.used {
            Some(t) if now.duration_since(t) >= TREE_CACHE_IDLE && !self.map.is_empty() => {
                *self = TreeCache::default();
                true
            }
            _ => false,
        }
    }

    fn insert(&mut self, id: Id, t: Arc<Tree>) {
        if self.map.contains_key(&id) {
            return;
        }
        self.nodes += t.nodes.len();
        self.map.insert(id, t);
        self.order.push_back(id);
        while self.nodes > TREE_CACHE_NODES && self.order.len() > 1 {
            let Some(old) = self.order.pop_front() else { break };
            if let Some(t) = self.map.remove(&old) {
                self.nodes -= t.nodes.len();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use coffer_core::testing::{TestTree, test_repo};

    fn view_of(r: &coffer_core::testing::TestRepo) -> RepoView {
        let source = RepoSource {
            name: "t".into(),
            location: "test".into(),
            repo: Ok(Arc::new(r.reopen())),
            writer: None,
            retention: None,
            jobs: Vec::new(),
            server_log: None,
            replicas: None,
        };
        RepoView::new(source)
    }

    #[test]
    fn paths_are_relative_and_plain() {
        assert!(components(b"").unwrap().is_empty());
        assert_eq!(components(b"a/b\xff").unwrap(), vec![&b"a"[..], &b"b\xff"[..]]);
        for bad in [&b"/etc/passwd"[..], b"a/../b", b"..", b"a//b", b"a/", b"./a", b"a\0b"] {
            assert!(matches!(components(bad), Err(ViewError::BadRequest(_))), "{:?}", String::from_utf8_lossy(bad));
        }
        assert!(components(&vec![b'a'; MAX_PATH + 1]).is_err());
    }

    #[test]
    fn names_are_plain() {
        assert!(valid_name("home-2.backup_1"));
        for bad in ["", ".", "..", "a/b", "a b", "é", &"x".repeat(65)] {
            assert!(!valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn listings_page_and_files_are_found() {
        let r = test_repo();
        let mut sub = TestTree::new();
        for i in 0..25 {
            sub = sub.file(&format!("f{i:02}"), &[format!("content {i}").as_bytes()]);
        }
        let tree = TestTree::new().file("top", &[b"top file"]).dir("sub", sub);
        let (snap, _) = r.snapshot(&tree);
        let v = view_of(&r);
        v.repo().unwrap().load_index().unwrap();
        let id = snap.to_hex();
        let root = v.list(&id, b"", 0, 10).unwrap();
        assert_eq!(root.total, 2);
        let p = v.list(&id, b"sub", 20, 10).unwrap();
        assert_eq!((p.total, p.offset, p.entries.len()), (25, 20, 5));
        assert_eq!(p.entries[0].name.0, b"f20");
        assert_eq!(v.list(&id, b"sub", 100, 10).unwrap().entries.len(), 0);
        let (_, node, _) = v.file(&id, b"sub/f03").unwrap();
        assert_eq!(node.size, 9);
        assert!(matches!(v.file(&id, b"sub"), Err(ViewError::BadRequest(_))));
        assert!(matches!(v.list(&id, b"top", 0, 1), Err(ViewError::BadRequest(_))));
        assert!(matches!(v.list(&id, b"top/x", 0, 1), Err(ViewError::NotFound(_))));
        assert!(matches!(v.list(&id, b"nothing", 0, 1), Err(ViewError::NotFound(_))));
        assert!(matches!(v.list(&"0".repeat(64), b"", 0, 1), Err(ViewError::NotFound(_))));
        assert!(matches!(v.list("zz", b"", 0, 1), Err(ViewError::BadRequest(_))));
        // Unused for a minute, the decoded trees are let go; they load again when asked.
        let now = std::time::Instant::now();
        assert!(!v.expire_trees(now), "just used");
        assert!(v.expire_trees(now + TREE_CACHE_IDLE));
        assert!(!v.expire_trees(now + TREE_CACHE_IDLE), "nothing left");
        assert_eq!(v.list(&id, b"sub", 0, 10).unwrap().total, 25);
    }

    #[test]
    fn names_are_found_across_snapshots_up_to_a_limit() {
        let r = test_repo();
        let (a, _) =
            r.snapshot(&TestTree::new().dir("d", TestTree::new().file("report.txt", &[b"1"])).file("x.bin", &[b"x"]));
        let (b, _) = r.snapshot(&TestTree::new().file("report.txt", &[b"2"]).file("other.txt", &[b"3"]));
        let v = view_of(&r);
        v.repo().unwrap().load_index().unwrap();
        let (found, full) = v.find("report.*", None, 10).unwrap();
        let got: Vec<(Id, &[u8])> = found.iter().map(|f| (f.snapshot, f.path.as_slice())).collect();
        assert_eq!(got, vec![(b, &b"report.txt"[..]), (a, &b"d/report.txt"[..])]);
        assert!(!full);
        let (found, full) = v.find("*.txt", None, 2).unwrap();
        assert_eq!((found.len(), full), (2, true));
        assert_eq!(v.find("*.bin", Some(&a.to_hex()), 10).unwrap().0.len(), 1);
        assert!(matches!(v.find("[", None, 10), Err(ViewError::BadRequest(_))));
    }

    #[test]
    fn diffs_keep_the_first_changes_and_count_all() {
        let r = test_repo();
        let (a, _) = r.snapshot(&TestTree::new().file("same", &[b"s"]).file("gone", &[b"g"]).file("edit", &[b"1"]));
        let b_tree =
            TestTree::new().file("same", &[b"s"]).file("edit", &[b"2"]).file("new1", &[b"n"]).file("new2", &[b"m"]);
        let (b, _) = r.snapshot(&b_tree);
        let v = view_of(&r);
        v.repo().unwrap().load_index().unwrap();
        let d = v.diff(&a.to_hex(), &b.to_hex(), 100).unwrap();
        assert_eq!((d.stats.added, d.stats.removed, d.stats.modified), (2, 1, 1));
        assert_eq!(d.changes.len(), 4);
        assert!(!d.truncated);
        let d = v.diff(&a.to_hex(), &b.to_hex(), 2).unwrap();
        assert_eq!((d.changes.len(), d.truncated, d.stats.added), (2, true, 2));
    }
}
