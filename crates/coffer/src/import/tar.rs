//! A tar stream as coffer imports it (docs/design.md#import-from-a-tar-stream):
//! read once, front to back, by [`coffer_import::tar`]; each entry's metadata
//! becomes a node of a [`StagedTree`] and each file's content is handed to the
//! import as it passes ([`ForeignTree::feed`]).

use std::collections::HashMap;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use coffer_core::format::bytes::Bytes;
use coffer_core::format::tree::{Node, NodeKind, Timestamp, Xattr};
use coffer_core::ops::backup::{
    Fed, ForeignEntry, ForeignTree, Listing, Payload, StagedTree, Store, archive_components,
};
use coffer_import::tar::{self as rtar, Entry, Kind, Limits};

use super::pump::read_tar;

/// coffer's node for a tar entry named `name` (content, subtree and hard-link
/// counts are the import's to fill), or why it cannot be imported.
pub fn node_of(e: &Entry, name: &[u8]) -> Result<Node, String> {
    let kind = match e.kind {
        Kind::File | Kind::HardLink => NodeKind::File,
        Kind::Dir => NodeKind::Dir,
        Kind::Symlink => NodeKind::Symlink,
        Kind::CharDev => NodeKind::Chardev,
        Kind::BlockDev => NodeKind::Blockdev,
        Kind::Fifo => NodeKind::Fifo,
        Kind::Unsupported(_) => {
            return Err(e
                .unsupported()
                .map(|u| u.to_string())
                .unwrap_or_else(|| "an entry of no kind coffer knows".into()));
        }
    };
    let id = |v: u64, what: &str| {
        u32::try_from(v).map_err(|_| format!("the archive records {what} {v}, more than a file system holds"))
    };
    let name_of =
        |n: &Option<Vec<u8>>| n.as_ref().and_then(|n| String::from_utf8(n.clone()).ok()).filter(|n| !n.is_empty());
    let mtime = Timestamp(e.mtime.secs, e.mtime.nanos);
    let mut node = Node::new(Bytes(name.to_vec()), kind, e.mode & 0o7777, mtime);
    node.uid = id(e.uid, "user id")?;
    node.gid = id(e.gid, "group id")?;
    node.user = name_of(&e.user);
    node.group = name_of(&e.group);
    node.ctime = e.ctime.as_ref().map(|t| Timestamp(t.secs, t.nanos)).unwrap_or(mtime);
    node.size = if kind == NodeKind::File { e.size } else { 0 };
    node.sparse = e.sparse;
    node.xattrs = e.xattrs.iter().map(|(n, v)| Xattr { name: Bytes(n.clone()), value: Bytes(v.clone()) }).collect();
    match e.kind {
        Kind::Symlink => {
            node.target = Some(Bytes(e.link.clone().ok_or("a symbolic link without its target")?));
        }
        Kind::CharDev | Kind::BlockDev => node.rdev = libc::makedev(e.dev_major, e.dev_minor),
        _ => {}
    }
    Ok(node)
}

/// The key of the content of the `n`th file of a stream: one per file, since a
/// tar stream says nothing of which files share content (hard links share it).
fn content_key(n: u64) -> [u8; 32] {
    let mut h = blake3::Hasher::new_derive_key("coffer import tar content 2026-12");
    h.update(&n.to_le_bytes());
    *h.finalize().as_bytes()
}

/// The files of one stream whose content is shared by hard links: content key
/// to the number of names, and the inode number given them.
#[derive(Default)]
struct Links {
    names: HashMap<[u8; 32], u64>,
}

/// A tar stream, to import as one snapshot.
pub struct TarTree<R> {
    input: Mutex<Option<R>>,
    limits: Limits,
    staged: OnceLock<StagedTree>,
    /// Why a file's content could not be read, by content key.
    failed: Mutex<HashMap<[u8; 32], String>>,
}

impl<R: Read + Send> TarTree<R> {
    /// The stream `input`, read when the import feeds.
    pub fn new(input: R) -> Self {
        TarTree {
            input: Mutex::new(Some(input)),
            limits: Limits::default(),
            staged: OnceLock::new(),
            failed: Mutex::default(),
        }
    }

    fn read(
        &self,
        input: R,
        store: &mut Store<'_>,
    ) -> (StagedTree, coffer_core::error::Result<Result<(), rtar::Error>>) {
        let mut staged = StagedTree::default();
        let mut links = Links::default();
        // Files by their path in the archive: what a hard link may name.
        let mut files: HashMap<Vec<u8>, (Node, [u8; 32])> = HashMap::new();
        let mut n = 0u64;
        let r = read_tar(input, &self.limits, &mut |e: Entry,
                                                    reader: &mut (dyn Read + Send)|
         -> coffer_core::error::Result<()> {
            let shown = String::from_utf8_lossy(&e.path).into_owned();
            let comps = match archive_components(&e.path) {
                Ok(c) => c,
                Err(why) => {
                    staged.leave_out(shown, format!("{why}: left out"));
                    return Ok(());
                }
            };
            let clean = comps.join(&b'/');
            let name = comps[comps.len() - 1];
            let (node, payload) = match e.kind {
                Kind::HardLink => {
                    let target = e.link.as_deref().map(archive_components).and_then(Result::ok).map(|c| c.join(&b'/'));
                    match target.and_then(|t| files.get(&t)) {
                        Some((node, key)) => {
                            *links.names.entry(*key).or_insert(1) += 1;
                            let mut node = node.clone();
                            node.name = Bytes(name.to_vec());
                            (node, Payload::File { key: *key, handle: key.to_vec() })
                        }
                        None => {
                            let to = e.link.as_deref().map(String::from_utf8_lossy).unwrap_or_default();
                            staged.leave_out(
                                shown,
                                format!("a hard link to {to:?}, which the archive does not hold before it: left out"),
                            );
                            return Ok(());
                        }
                    }
                }
                _ => {
                    let node = match node_of(&e, name) {
                        Ok(node) => node,
                        Err(why) => {
                            staged.leave_out(shown, format!("{why}: left out"));
                            return Ok(());
                        }
                    };
                    let payload = if e.kind == Kind::File {
                        n += 1;
                        let key = content_key(n);
                        let path = snapshot_path(&clean);
                        let fed = Fed { key, path: &path, reader, size: e.size };
                        if let Err(why) = store(fed)? {
                            self.failed.lock().expect("poisoned").insert(key, why);
                        }
                        files.insert(clean.clone(), (node.clone(), key));
                        Payload::File { key, handle: key.to_vec() }
                    } else {
                        Payload::Other
                    };
                    (node, payload)
                }
            };
            if let Err(why) = staged.insert(&comps, ForeignEntry { node, payload }) {
                staged.leave_out(shown, why);
            }
            Ok(())
        });
        // Names sharing content get one inode number and their count.
        let mut inodes: HashMap<[u8; 32], u64> = HashMap::new();
        for e in staged.entries_mut() {
            if let Payload::File { key, .. } = &e.payload
                && let Some(&count) = links.names.get(key)
            {
                let next = inodes.len() as u64 + 1;
                e.node.inode = *inodes.entry(*key).or_insert(next);
                e.node.device = 1;
                e.node.links = count;
            }
        }
        (staged, r)
    }
}

impl<R: Read + Send> ForeignTree for TarTree<R> {
    fn root(&self) -> Vec<u8> {
        self.staged.get().map(StagedTree::root).unwrap_or_default()
    }

    fn list(&self, dir: &[u8]) -> Result<Listing, String> {
        match self.staged.get() {
            Some(t) => t.list(dir),
            None => Ok(Listing::default()),
        }
    }

    fn open<'a>(&'a self, file: &[u8]) -> Result<Box<dyn Read + Send + 'a>, String> {
        let key: Option<[u8; 32]> = file.try_into().ok();
        match key.and_then(|k| self.failed.lock().expect("poisoned").get(&k).cloned()) {
            Some(why) => Err(why),
            None => Err("its content is missing from the archive (it ends early)".into()),
        }
    }

    fn feed(&self, store: &mut Store<'_>) -> coffer_core::error::Result<Result<(), String>> {
        let Some(input) = self.input.lock().expect("poisoned").take() else {
            return Ok(Err("the archive was read already".into()));
        };
        let (staged, r) = self.read(input, store);
        let _ = self.staged.set(staged);
        Ok(r?.map_err(|e| e.to_string()))
    }
}

/// The snapshot path of the archive's entry named `clean` (its components
/// joined by `/`).
pub fn snapshot_path(clean: &[u8]) -> PathBuf {
    Path::new("/").join(std::ffi::OsStr::from_bytes(clean))
}
