//! Backup of a tree that another program's repository describes: an import
//! (docs/design.md#import). The tree's directories are listed and its files read
//! through [`ForeignTree`]; each entry's metadata comes as the other program
//! recorded it, already in coffer's [`Node`]. Files are chunked and stored like
//! any file, so what they share with what is stored already is stored once.
//!
//! A file whose content key ([`Payload::File`]) was imported before in the same
//! [`ContentMemo`] is not read again: its content list is reused. What cannot be
//! listed or read is left out and listed in the snapshot, which is then marked
//! incomplete, as a backup does with what it cannot read.

use std::collections::HashMap;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::Ordering;

use rayon::prelude::*;

use super::leaves::Leaves;
use super::stream::Counted;
use super::{Archiver, DIR_BATCH, ParentDir, Saved, cap_xattrs};
use crate::error::{Error, Result};
use crate::format::tree::{self, Node, NodeKind};
use crate::id::Id;
use crate::merkle;
use crate::progress::FileChange;

/// The deepest directory an import enters: a path one name longer than this has
/// more than 4096 bytes (Linux's `PATH_MAX`), which no file system gives. A
/// crafted chain deeper than this is cut there, and what is below is listed as
/// left out.
pub const MAX_DEPTH: usize = 2048;

/// What an entry holds beside its node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Payload {
    /// A directory: the handle [`ForeignTree::list`] takes.
    Dir(Vec<u8>),
    /// A regular file: the key of its content (two files of one key have the
    /// same bytes, as the other program knows it: the hash of its list of chunk
    /// ids, say) and the handle [`ForeignTree::open`] takes.
    File {
        /// The content's key.
        key: [u8; 32],
        /// What `open` takes.
        handle: Vec<u8>,
    },
    /// Anything else: the node says it all.
    Other,
}

/// One entry of a foreign directory.
#[derive(Clone, Debug)]
pub struct ForeignEntry {
    /// Its metadata; content, digest and subtree are filled in by the import.
    pub node: Node,
    /// What it holds.
    pub payload: Payload,
}

/// A directory's listing: the entries, and those the other program's record
/// holds that cannot be imported (a name, lossy, and why), which are listed as
/// left out.
#[derive(Clone, Debug, Default)]
pub struct Listing {
    /// The entries, in any order.
    pub entries: Vec<ForeignEntry>,
    /// What cannot be imported.
    pub left_out: Vec<(String, String)>,
}

/// A tree held by another program's repository.
///
/// Errors are the reasons in words, naming the object of the other repository;
/// the entry they concern is left out and listed.
pub trait ForeignTree: Sync {
    /// The handle of the root directory.
    fn root(&self) -> Vec<u8>;
    /// The entries of the directory `dir`.
    fn list(&self, dir: &[u8]) -> std::result::Result<Listing, String>;
    /// The content of the file `file`, read to its end. A read error ends the
    /// file: it is left out and listed.
    fn open<'a>(&'a self, file: &[u8]) -> std::result::Result<Box<dyn Read + Send + 'a>, String>;

    /// For a source read in one pass, in its own order (a tar stream), or one
    /// that reads contents ahead of their use (restic's, over remote storage):
    /// called once, before the root is listed, to hand over each file's content to
    /// `store`, which reads it to its end, stores it and remembers it in the
    /// import's [`ContentMemo`] under its key; a file of that key is then not
    /// opened. `store` gives `Ok(Err(reason))` when the content could not be
    /// read: the source keeps the reason for `open` to give. A fatal error of
    /// `store` (the repository's) must be returned as it is. `Ok(Err(reason))`
    /// from `feed` says the source broke off (a damaged archive): what it did
    /// not hand over is missing, and the snapshot is marked incomplete.
    fn feed(&self, _store: &mut Store<'_>) -> Result<std::result::Result<(), String>> {
        Ok(Ok(()))
    }
}

/// What [`ForeignTree::feed`] hands each file's content to.
pub type Store<'a> = dyn FnMut(Fed<'_>) -> Result<std::result::Result<(), String>> + 'a;

/// A file's content handed over by [`ForeignTree::feed`].
pub struct Fed<'a> {
    /// The key its entries' [`Payload::File`] hold.
    pub key: [u8; 32],
    /// Where it is in the snapshot (one of its paths), for progress and messages.
    pub path: &'a Path,
    /// The content, read to its end.
    pub reader: &'a mut (dyn Read + Send),
    /// Its size as the source records it.
    pub size: u64,
}

/// File contents already imported, by content key: kept across the snapshots
/// of one import, so that a file seen in an earlier snapshot is not read again.
#[derive(Default)]
pub struct ContentMemo {
    map: Mutex<HashMap<[u8; 32], Remembered>>,
    /// Keys fed ([`ForeignTree::feed`]) for the snapshot being imported and not
    /// yet met in its tree: the first entry met holding one counts as read.
    fed: Mutex<std::collections::HashSet<[u8; 32]>>,
}

#[derive(Clone)]
struct Remembered {
    content: Vec<Id>,
    digest: Id,
    size: u64,
}

impl ContentMemo {
    /// How many contents it holds.
    pub fn len(&self) -> usize {
        self.map.lock().expect("poisoned").len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn get(&self, key: &[u8; 32]) -> Option<Remembered> {
        self.map.lock().expect("poisoned").get(key).cloned()
    }

    fn put(&self, key: [u8; 32], r: Remembered) {
        self.map.lock().expect("poisoned").insert(key, r);
    }

    /// Remembers a fed content: the first entry of its key met in the tree
    /// counts as read.
    fn put_fed(&self, key: [u8; 32], r: Remembered) {
        self.put(key, r);
        self.fed.lock().expect("poisoned").insert(key);
    }

    /// Whether it holds the content of key `key`.
    pub fn knows(&self, key: &[u8; 32]) -> bool {
        self.map.lock().expect("poisoned").contains_key(key)
    }

    /// Remembers the contents of the files of the coffer tree `tree` that an
    /// import stored from the foreign tree `foreign` (the snapshot it made of
    /// it): walking both side by side, a file at the same path in both gets its
    /// foreign key and its coffer content. So a run after an interrupted or
    /// earlier one does not read again what the last imported snapshot holds.
    /// How many contents it learnt; a foreign listing that fails is passed over
    /// (only what it would have taught is lost).
    pub fn seed(&self, repo: &crate::repo::Repository, tree: Id, foreign: &dyn ForeignTree) -> Result<u64> {
        let mut learnt = 0;
        let mut stack = vec![(tree, foreign.root(), 0usize)];
        while let Some((id, handle, depth)) = stack.pop() {
            let Ok(listing) = foreign.list(&handle) else { continue };
            let by_name: HashMap<&[u8], &ForeignEntry> =
                listing.entries.iter().map(|e| (e.node.name.0.as_slice(), e)).collect();
            for node in repo.tree_nodes(&id)? {
                let node = node?;
                let Some(e) = by_name.get(node.name.0.as_slice()) else { continue };
                match (&e.payload, node.kind, node.subtree, node.digest) {
                    (Payload::Dir(h), NodeKind::Dir, Some(sub), _) if depth < MAX_DEPTH => {
                        stack.push((sub, h.clone(), depth + 1));
                    }
                    (Payload::File { key, .. }, NodeKind::File, _, Some(digest)) if !self.knows(key) => {
                        let content = repo.resolve_content(&node, &mut |_| {})?;
                        self.put(*key, Remembered { content, digest, size: node.size });
                        learnt += 1;
                    }
                    _ => {}
                }
            }
        }
        Ok(learnt)
    }

    /// Whether `key` was fed for this snapshot and not met yet; it is met now.
    fn take_fed(&self, key: &[u8; 32]) -> bool {
        self.fed.lock().expect("poisoned").remove(key)
    }
}

/// A fed file of at most this many bytes is read whole and stored by another
/// worker while the source goes on.
const FED_SMALL: u64 = 1 << 20;

/// The most bytes of small fed files read and not yet stored.
const FED_IN_FLIGHT: u64 = 32 << 20;

/// The bytes of small fed files read and not yet stored.
#[derive(Default)]
struct InFlight {
    bytes: Mutex<u64>,
    freed: std::sync::Condvar,
}

impl InFlight {
    /// Waits until `n` more bytes fit (one file always does), running waiting
    /// stores meanwhile (on a pool of one thread no other would), and counts them.
    fn take(&self, n: u64) {
        loop {
            {
                let mut b = self.bytes.lock().expect("poisoned");
                if *b == 0 || *b + n <= FED_IN_FLIGHT {
                    *b += n;
                    return;
                }
            }
            if rayon::yield_now() != Some(rayon::Yield::Executed) {
                let b = self.bytes.lock().expect("poisoned");
                let _ = self.freed.wait_timeout(b, std::time::Duration::from_millis(5)).expect("poisoned");
            }
        }
    }

    fn give(&self, n: u64) {
        *self.bytes.lock().expect("poisoned") -= n;
        self.freed.notify_all();
    }
}

/// Why a name cannot be an entry's: what a file system could not hold.
fn bad_name(name: &[u8]) -> Option<&'static str> {
    match name {
        [] => Some("an empty name"),
        b"." | b".." => Some("the name `.` or `..`"),
        n if n.contains(&b'/') => Some("a name holding `/`"),
        n if n.contains(&0) => Some("a name holding a NUL byte"),
        _ => None,
    }
}

impl Archiver<'_> {
    /// Saves the foreign tree `tree`: what it feeds first, then its directories
    /// from the root.
    pub(super) fn save_foreign(&self, tree: &dyn ForeignTree, memo: &ContentMemo) -> Result<(Id, Leaves)> {
        memo.fed.lock().expect("poisoned").clear();
        let failed: Mutex<Option<Error>> = Mutex::new(None);
        let in_flight = InFlight::default();
        let fed = rayon::scope(|scope| {
            let mut store = |f: Fed<'_>| self.store_fed(memo, f, scope, &in_flight, &failed);
            tree.feed(&mut store)
        });
        if let Some(e) = failed.into_inner().expect("poisoned") {
            return Err(e);
        }
        if let Err(why) = fed? {
            self.skip(Path::new("/"), format!("{why}: what follows it in the source is missing from the snapshot"));
        }
        self.save_foreign_dir(tree, memo, &tree.root(), Path::new("/"), 0)
    }

    /// Stores a fed file's content, unless the memo holds its key already. A
    /// small file is read whole and stored by another worker while the source
    /// goes on (one pass over a source reads one file at a time: without this
    /// one core would chunk and seal them all).
    fn store_fed<'s>(
        &'s self,
        memo: &'s ContentMemo,
        f: Fed<'_>,
        scope: &rayon::Scope<'s>,
        in_flight: &'s InFlight,
        failed: &'s Mutex<Option<Error>>,
    ) -> Result<std::result::Result<(), String>> {
        if memo.knows(&f.key) {
            return Ok(Ok(()));
        }
        if f.size > FED_SMALL {
            self.progress.start_item(f.path);
            return Ok(self.read_stored(f.reader, f.size, f.path)?.map(|r| memo.put_fed(f.key, r)));
        }
        let mut bytes = Vec::with_capacity(f.size as usize);
        if let Err(e) = f.reader.take(FED_SMALL + 1).read_to_end(&mut bytes) {
            return Ok(Err(format!("cannot read the file from the source: {e}")));
        }
        if bytes.len() as u64 > FED_SMALL {
            // More than the source records: stored here, as it comes.
            self.progress.start_item(f.path);
            let mut all = std::io::Cursor::new(bytes).chain(f.reader);
            return Ok(self.read_stored(&mut all, f.size, f.path)?.map(|r| memo.put_fed(f.key, r)));
        }
        let len = bytes.len() as u64;
        in_flight.take(len);
        let (key, size, path) = (f.key, f.size, f.path.to_path_buf());
        scope.spawn(move |_| {
            self.progress.start_item(&path);
            match self.read_stored(&mut bytes.as_slice(), size, &path) {
                Ok(Ok(r)) => memo.put_fed(key, r),
                // Bytes in memory read without fail.
                Ok(Err(_)) => {}
                Err(e) => {
                    failed.lock().expect("poisoned").get_or_insert(e);
                }
            }
            in_flight.give(len);
        });
        Ok(Ok(()))
    }

    /// Saves the foreign directory `dir` at snapshot path `path`, `depth`
    /// directories below the root.
    pub(super) fn save_foreign_dir(
        &self,
        tree: &dyn ForeignTree,
        memo: &ContentMemo,
        dir: &[u8],
        path: &Path,
        depth: usize,
    ) -> Result<(Id, Leaves)> {
        let Listing { mut entries, left_out } = match tree.list(dir) {
            Ok(l) => l,
            Err(e) => {
                self.skip(path, format!("cannot list the directory: {e}"));
                return self.save_empty_tree();
            }
        };
        for (name, why) in left_out {
            self.skip(&path.join(name), why);
        }
        entries.sort_by(|a, b| a.node.name.0.cmp(&b.node.name.0));
        let mut kept: Vec<ForeignEntry> = Vec::with_capacity(entries.len());
        for e in entries {
            let name = &e.node.name.0;
            if let Some(why) = bad_name(name) {
                let shown = String::from_utf8_lossy(name);
                self.skip(&path.join(&*shown), format!("an entry of this directory has {why}: left out"));
            } else if kept.last().is_some_and(|k| k.node.name.0 == *name) {
                let at = path.join(std::ffi::OsStr::from_bytes(name));
                self.skip(&at, "the directory lists this name twice: the second entry is left out".into());
            } else {
                kept.push(e);
            }
        }
        let mut dir_writer = self.dir_writer();
        let mut none = ParentDir { nodes: None, same: false };
        for batch in kept.chunks(DIR_BATCH) {
            let results: Vec<Result<Option<Saved>>> = batch
                .par_iter()
                .map(|e| {
                    let at = path.join(std::ffi::OsStr::from_bytes(&e.node.name.0));
                    self.save_foreign_entry(tree, memo, e, &at, depth)
                })
                .collect();
            let pnodes = vec![None; results.len()];
            dir_writer.add_batch(self, results, pnodes, &mut none)?;
        }
        dir_writer.finish(self, none)
    }

    fn save_foreign_entry(
        &self,
        tree: &dyn ForeignTree,
        memo: &ContentMemo,
        entry: &ForeignEntry,
        path: &Path,
        depth: usize,
    ) -> Result<Option<Saved>> {
        let mut node = entry.node.clone();
        node.content = Vec::new();
        node.content_parts = Vec::new();
        node.digest = None;
        node.subtree = None;
        if let Some(w) = cap_xattrs(&mut node) {
            self.progress.warn(path, &w);
        }
        let mut leaves = Leaves::default();
        match (&entry.payload, node.kind) {
            (Payload::Dir(handle), NodeKind::Dir) => {
                if depth + 1 > MAX_DEPTH {
                    self.skip(
                        path,
                        format!(
                            "the directory is {} levels deep, more than the {MAX_DEPTH} a path of 4096 bytes can \
                             reach: it and everything below it are left out (the source tree was crafted)",
                            depth + 1
                        ),
                    );
                    return Ok(None);
                }
                self.dirs.fetch_add(1, Ordering::Relaxed);
                let (sub, below) = self.save_foreign_dir(tree, memo, handle, path, depth + 1)?;
                node.subtree = Some(sub);
                leaves = below;
            }
            (Payload::File { key, handle }, NodeKind::File) => {
                let Some(r) = self.import_file(tree, memo, key, handle, node.size, path)? else { return Ok(None) };
                node.size = r.size;
                node.content_parts = tree::content_parts(&r.content, &self.limits, &mut |b| self.save_tree_blob(b))?;
                if node.content_parts.is_empty() {
                    node.content = r.content;
                }
                node.digest = Some(r.digest);
                let p = path.as_os_str().as_bytes();
                leaves = Leaves::one(merkle::file_leaf(&merkle::leaf_salt(&self.merkle_key, p), &r.digest.0, p));
            }
            (Payload::Other, kind) if kind != NodeKind::Dir && kind != NodeKind::File => {
                self.others.fetch_add(1, Ordering::Relaxed);
            }
            (payload, kind) => {
                let held = match payload {
                    Payload::Dir(_) => "a directory's listing",
                    Payload::File { .. } => "a file's content",
                    Payload::Other => "nothing",
                };
                self.skip(path, format!("the source records a {kind:?} entry holding {held}: left out"));
                return Ok(None);
            }
        }
        Ok(Some((node, leaves)))
    }

    /// The content of a foreign file: remembered, or read and stored (and then
    /// remembered). `None` when it could not be read (it is then listed).
    fn import_file(
        &self,
        tree: &dyn ForeignTree,
        memo: &ContentMemo,
        key: &[u8; 32],
        handle: &[u8],
        recorded: u64,
        path: &Path,
    ) -> Result<Option<Remembered>> {
        if let Some(r) = memo.get(key) {
            self.bytes_total.fetch_add(r.size, Ordering::Relaxed);
            let change = if memo.take_fed(key) {
                FileChange::New
            } else {
                self.progress.add_bytes(r.size);
                FileChange::Unchanged
            };
            self.count_file(change);
            self.progress.file_saved(path, change);
            self.progress.add_item(path);
            return Ok(Some(r));
        }
        self.progress.start_item(path);
        let mut reader = match tree.open(handle) {
            Ok(r) => r,
            Err(e) => {
                self.skip(path, format!("cannot read the file from the source: {e}"));
                return Ok(None);
            }
        };
        let r = match self.read_stored(&mut *reader, recorded, path)? {
            Ok(r) => r,
            Err(why) => {
                self.skip(path, why);
                return Ok(None);
            }
        };
        self.bytes_total.fetch_add(r.size, Ordering::Relaxed);
        self.count_file(FileChange::New);
        self.progress.file_saved(path, FileChange::New);
        self.progress.add_item(path);
        memo.put(*key, r.clone());
        Ok(Some(r))
    }

    /// Reads `reader` to its end and stores what it holds; `Ok(Err(reason))`
    /// when it fails to read.
    fn read_stored(
        &self,
        reader: &mut (dyn Read + Send),
        recorded: u64,
        path: &Path,
    ) -> Result<std::result::Result<Remembered, String>> {
        let mut counted = Counted { inner: reader, bytes: 0 };
        let (content, digest) = match self.read_content(&mut counted, recorded, path) {
            Ok(c) => c,
            Err(Error::Io { source, .. }) => return Ok(Err(format!("cannot read the file from the source: {source}"))),
            Err(e) => return Err(e),
        };
        let size = counted.bytes;
        if size != recorded {
            self.progress.warn(
                path,
                &format!(
                    "the source records {recorded} bytes for this file and its content holds {size}: the content is \
                     stored as it is"
                ),
            );
        }
        Ok(Ok(Remembered { content, digest, size }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_no_file_system_holds_are_named() {
        assert!(bad_name(b"").is_some());
        assert!(bad_name(b".").is_some());
        assert!(bad_name(b"..").is_some());
        assert!(bad_name(b"a/b").is_some());
        assert!(bad_name(b"a\0").is_some());
        assert!(bad_name(b"...").is_none());
        assert!(bad_name(b"\xff\xfe").is_none());
    }
}
