//! The items of a dump as this module hands them over: [`Item`], its chunks and content
//! key, the reasons an item is rejected, and [`HardLinks`] to resolve hard link slaves.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use sha2::{Digest, Sha256};

/// Why an item was rejected. Shown as "item PATH: REASON", its messages read after "it".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Reject {
    /// The element of `_items` is not a JSON object.
    #[error("it is {found}, not an object")]
    NotAnObject { found: &'static str },
    /// A field every item has is missing.
    #[error("it has no {field}")]
    Missing { field: &'static str },
    /// A field is of the wrong type or value.
    #[error("its {field} is {problem}")]
    Field { field: String, problem: String },
    /// A byte string is longer than its limit.
    #[error("its {field} is {len} bytes, more than the {limit} accepted")]
    TooLong { field: String, len: usize, limit: usize },
    /// More chunks than [`Limits::chunks_per_item`](super::Limits::chunks_per_item).
    #[error("it has more than the {limit} chunks accepted")]
    TooManyChunks { limit: usize },
    /// More xattrs than [`Limits::xattrs_per_item`](super::Limits::xattrs_per_item).
    #[error("it has more than the {limit} extended attributes accepted")]
    TooManyXattrs { limit: usize },
    /// An entry of the chunk list is malformed.
    #[error("its chunk {index} is malformed: {problem}")]
    Chunk { index: usize, problem: String },
    /// The chunk list does not add up to the size (or is longer than the size allows).
    #[error("its chunk list ({count} chunks, {total} bytes) does not fit its size of {size} bytes")]
    SizeMismatch { count: usize, total: u64, size: u64 },
    /// The path is absolute, empty, holds a NUL or a `..` component.
    #[error("its path {problem}")]
    UnsafePath { problem: &'static str },
}

/// One entry of a file's chunk list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Chunk {
    /// The chunk's id (a keyed hash of its plain text, so only comparable within one
    /// repository).
    pub id: [u8; 32],
    /// Plain-text size.
    pub size: u32,
    /// Stored (compressed, encrypted) size.
    pub csize: u32,
}

/// A file's content as a 32-byte key: SHA-256 over a domain prefix and its chunk ids and
/// sizes in order, so that two items with the same chunk list have the same key.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ContentKey(pub [u8; 32]);

impl ContentKey {
    /// The key of a chunk list (the empty list for an empty file).
    pub fn of_chunks(chunks: &[Chunk]) -> ContentKey {
        let mut h = Sha256::new();
        h.update(b"coffer-import borg content v1\0");
        h.update((chunks.len() as u64).to_le_bytes());
        for c in chunks {
            h.update(c.id);
            h.update(c.size.to_le_bytes());
        }
        ContentKey(h.finalize().into())
    }
}

impl fmt::Debug for ContentKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ContentKey({})", hex::encode(self.0))
    }
}

/// What kind of file system object an item is, from its mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ItemKind {
    /// A regular file with its own chunk list.
    File,
    /// A regular file that is a hard link to an earlier item (its `source`).
    HardLink,
    Directory,
    Symlink,
    Fifo,
    CharDevice,
    BlockDevice,
    Socket,
    /// A file type borg should not have stored.
    Unknown,
}

/// One item of the archive, every byte string decoded back to its bytes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Item {
    /// Relative to the archive's root, as borg stored it (no leading `/`).
    pub path: Vec<u8>,
    /// `st_mode`: file type and permission bits.
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// User and group names (`None` where borg had none, e.g. `--numeric-ids`).
    pub user: Option<Vec<u8>>,
    pub group: Option<Vec<u8>>,
    /// Times in integer nanoseconds since the epoch. borg stores `atime` only with
    /// `--atime`, `birthtime` only where the system has one.
    pub mtime: i64,
    pub ctime: Option<i64>,
    pub atime: Option<i64>,
    pub birthtime: Option<i64>,
    /// Plain-text size; borg writes none for hard link slaves and non-files.
    pub size: Option<u64>,
    /// The chunk list of a regular file (`None` for hard link slaves and non-files).
    pub chunks: Option<Vec<Chunk>>,
    /// A symlink's target; for a hard link slave, the master's path.
    pub source: Option<Vec<u8>>,
    /// This file is the first of a set of hard links; later ones name it in `source`.
    pub hardlink_master: bool,
    /// A device's `st_rdev`.
    pub rdev: Option<u64>,
    /// Extended attributes, name to value.
    pub xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
    /// ACLs in borg's text forms.
    pub acl_access: Option<Vec<u8>>,
    pub acl_default: Option<Vec<u8>>,
    pub acl_extended: Option<Vec<u8>>,
    pub acl_nfs4: Option<Vec<u8>>,
    pub bsdflags: Option<u32>,
    /// `Some(n)` for the n-th part file borg writes at a checkpoint in the middle of a
    /// large file (path `FILE.borg_part_N`); the complete file follows later in the same
    /// archive, so importers skip part items as `borg extract` does.
    pub part: Option<u64>,
    /// `borg check --repair` replaced missing chunks of this file with zeros (the item
    /// has `chunks_healthy`): its content is damaged.
    pub repaired: bool,
    /// The content key of a regular file with a chunk list. `None` for a hard link slave:
    /// its master (named by `source`) came earlier in the archive, and [`HardLinks`]
    /// gives the slave the master's key.
    pub content_key: Option<ContentKey>,
}

impl Item {
    /// The kind of object, from `mode` (and `source` for hard links).
    pub fn kind(&self) -> ItemKind {
        match self.mode & 0o170000 {
            0o100000 if self.chunks.is_none() && self.source.is_some() => ItemKind::HardLink,
            0o100000 => ItemKind::File,
            0o040000 => ItemKind::Directory,
            0o120000 => ItemKind::Symlink,
            0o010000 => ItemKind::Fifo,
            0o020000 => ItemKind::CharDevice,
            0o060000 => ItemKind::BlockDevice,
            0o140000 => ItemKind::Socket,
            _ => ItemKind::Unknown,
        }
    }

    /// For a part item, the path of the file it is a part of.
    pub fn part_of(&self) -> Option<&[u8]> {
        let n = self.part?;
        let suffix = format!(".borg_part_{n}");
        self.path.strip_suffix(suffix.as_bytes())
    }
}

/// Gives hard link slaves their master's content key and size.
///
/// In borg 1.2 the master of a set of hard links (`hardlink_master: true`, with the chunk
/// list) comes before its slaves, which have `source` = the master's path and no chunks.
/// Pass every item through [`HardLinks::resolve`] in the dump's order; only masters are
/// remembered.
#[derive(Debug, Default)]
pub struct HardLinks {
    masters: HashMap<Vec<u8>, (ContentKey, Option<u64>)>,
}

impl HardLinks {
    /// Remembers a master; fills a slave's `content_key` and `size`. Returns `false` for
    /// a slave whose master was not seen (a damaged or filtered archive).
    pub fn resolve(&mut self, item: &mut Item) -> bool {
        match item.kind() {
            ItemKind::File if item.hardlink_master => {
                if let Some(k) = item.content_key {
                    self.masters.insert(item.path.clone(), (k, item.size));
                }
                true
            }
            ItemKind::HardLink => {
                let master = item.source.as_deref().and_then(|s| self.masters.get(s));
                match master {
                    Some(&(k, size)) => {
                        item.content_key = Some(k);
                        if item.size.is_none() {
                            item.size = size;
                        }
                        true
                    }
                    None => false,
                }
            }
            _ => true,
        }
    }
}
