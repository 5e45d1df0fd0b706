//! `borg debug dump-archive REPO::ARCHIVE -`, streamed: the top-level map is visited key by
//! key and `_items` element by element, so that memory is per item, not per archive.
//!
//! The document borg 1.2 writes is `{"_name": ..., "_manifest_entry": {...}, "_meta":
//! {...}, "_items": [{...}, ...]}`. Each item is visited field by field with visitors that
//! accept any JSON type (a wrong type becomes a rejection of the item, not an error), and
//! every read is metered (see `text::Meter`) so that no item can make serde_json buffer
//! more than [`Limits::item_json_bytes`].

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::io::Read;
use std::rc::Rc;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use sha2::{Digest, Sha256};

use super::text::{BorgTime, Meter, Prepass, borg_bytes, parse_time, text_bytes};
use super::{Error, Limits};

/// What [`read_dump`] hands its callback, once per element of `_items`, in the dump's order.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(clippy::large_enum_variant)] // handed over once, by value
pub enum DumpEvent {
    /// An item read in full.
    Item(Item),
    /// An item that could not be understood; the dump goes on after it.
    Rejected {
        /// Items before it in the dump.
        index: u64,
        /// Its path, when that much could be read.
        path: Option<Vec<u8>>,
        /// Why.
        reason: Reject,
    },
}

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
    /// More chunks than [`Limits::chunks_per_item`].
    #[error("it has more than the {limit} chunks accepted")]
    TooManyChunks { limit: usize },
    /// More xattrs than [`Limits::xattrs_per_item`].
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

/// The archive's metadata, from the dump's `_name` and `_meta`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DumpMeta {
    /// The archive's name.
    pub name: Vec<u8>,
    pub hostname: Vec<u8>,
    pub username: Vec<u8>,
    /// Start and end of the backup, UTC, to the microsecond.
    pub time: BorgTime,
    pub time_end: Option<BorgTime>,
    /// The `borg create` command line.
    pub cmdline: Vec<Vec<u8>>,
    pub comment: Vec<u8>,
    pub chunker_params: Option<ChunkerParams>,
    /// The archive format version (1 in borg 1.x).
    pub version: Option<u64>,
    /// Elements of `_items` seen, and how many of them were rejected.
    pub items: u64,
    pub rejected: u64,
}

/// The chunker borg used for the archive's files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChunkerParams {
    /// Content-defined chunking: chunks of 2^min_exp..2^max_exp bytes, cut where the
    /// rolling hash over `window` bytes has `mask_bits` zero bits.
    Buzhash { min_exp: u64, max_exp: u64, mask_bits: u64, window: u64 },
    /// Fixed-size blocks after a header.
    Fixed { block_size: u64, header_size: u64 },
    /// Anything else, as printed.
    Other(Vec<String>),
}

impl ChunkerParams {
    fn from_json(v: &[serde_json::Value]) -> ChunkerParams {
        let nums: Vec<Option<u64>> = v.iter().map(|x| x.as_u64()).collect();
        let all = |s: &[Option<u64>]| s.iter().copied().collect::<Option<Vec<u64>>>();
        let algo = v.first().and_then(|x| x.as_str());
        match (algo, v.len()) {
            (Some("buzhash"), 5) | (None, 4) => {
                let p = all(&nums[v.len() - 4..]);
                if let Some(p) = p {
                    return ChunkerParams::Buzhash { min_exp: p[0], max_exp: p[1], mask_bits: p[2], window: p[3] };
                }
            }
            (Some("fixed"), 2 | 3) => {
                if let Some(p) = all(&nums[1..]) {
                    return ChunkerParams::Fixed { block_size: p[0], header_size: p.get(1).copied().unwrap_or(0) };
                }
            }
            _ => {}
        }
        ChunkerParams::Other(
            v.iter()
                .map(|x| match x {
                    serde_json::Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect(),
        )
    }
}

// ---------------------------------------------------------------------------------------
// Lenient values: anything JSON, containers skipped without being kept.

enum Val {
    U(u64),
    I(i64),
    F,
    B(bool),
    S(String),
    Null,
    Seq,
    Map,
}

impl Val {
    fn what(&self) -> &'static str {
        match self {
            Val::U(_) | Val::I(_) => "an integer",
            Val::F => "a fractional or huge number",
            Val::B(_) => "a boolean",
            Val::S(_) => "a string",
            Val::Null => "null",
            Val::Seq => "a list",
            Val::Map => "an object",
        }
    }
}

struct ValSeed;

impl<'de> DeserializeSeed<'de> for ValSeed {
    type Value = Val;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Val, D::Error> {
        d.deserialize_any(ValVisitor)
    }
}

struct ValVisitor;

impl<'de> Visitor<'de> for ValVisitor {
    type Value = Val;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_u64<E>(self, v: u64) -> Result<Val, E> {
        Ok(Val::U(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Val, E> {
        Ok(Val::I(v))
    }
    fn visit_f64<E>(self, _: f64) -> Result<Val, E> {
        Ok(Val::F)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Val, E> {
        Ok(Val::B(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Val, E> {
        Ok(Val::S(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Val, E> {
        Ok(Val::S(v))
    }
    fn visit_unit<E>(self) -> Result<Val, E> {
        Ok(Val::Null)
    }
    fn visit_none<E>(self) -> Result<Val, E> {
        Ok(Val::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Val, A::Error> {
        while a.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Val::Seq)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Val, A::Error> {
        while a.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Val::Map)
    }
}

fn field(name: &str, problem: impl Into<String>) -> Reject {
    Reject::Field { field: name.to_string(), problem: problem.into() }
}

/// A byte string of at most `limit` bytes, in borg's dump encoding.
fn bytes_of(name: &str, v: Val, limit: usize) -> Result<Vec<u8>, Reject> {
    let Val::S(s) = v else {
        return Err(field(name, format!("{}, not a string", v.what())));
    };
    // Hex doubles the length: refuse before decoding what cannot fit.
    if s.len() > 2 * limit + 1 {
        let len = match s.strip_prefix('\u{7f}') {
            Some(h) => h.len() / 2,
            None => s.len(),
        };
        return Err(Reject::TooLong { field: name.to_string(), len, limit });
    }
    let b = borg_bytes(&s).map_err(|e| field(name, e))?;
    if b.len() > limit {
        return Err(Reject::TooLong { field: name.to_string(), len: b.len(), limit });
    }
    Ok(b)
}

fn opt_bytes_of(name: &str, v: Val, limit: usize) -> Result<Option<Vec<u8>>, Reject> {
    match v {
        Val::Null => Ok(None),
        v => bytes_of(name, v, limit).map(Some),
    }
}

fn u64_of(name: &str, v: Val) -> Result<u64, Reject> {
    match v {
        Val::U(n) => Ok(n),
        Val::I(_) => Err(field(name, "negative")),
        v => Err(field(name, format!("{}, not an integer", v.what()))),
    }
}

fn u32_of(name: &str, v: Val) -> Result<u32, Reject> {
    let n = u64_of(name, v)?;
    u32::try_from(n).map_err(|_| field(name, format!("{n}, more than 32 bits")))
}

fn i64_of(name: &str, v: Val) -> Result<i64, Reject> {
    match v {
        Val::I(n) => Ok(n),
        Val::U(n) => i64::try_from(n).map_err(|_| field(name, format!("{n}, out of range"))),
        v => Err(field(name, format!("{}, not an integer", v.what()))),
    }
}

fn bool_of(name: &str, v: Val) -> Result<bool, Reject> {
    match v {
        Val::B(b) => Ok(b),
        v => Err(field(name, format!("{}, not a boolean", v.what()))),
    }
}

// ---------------------------------------------------------------------------------------
// Chunk lists.

struct ChunksSeed<'a> {
    limits: &'a Limits,
    meter: &'a Meter,
}

impl<'de> DeserializeSeed<'de> for ChunksSeed<'_> {
    type Value = Result<Vec<Chunk>, Reject>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ChunksSeed<'_> {
    type Value = Result<Vec<Chunk>, Reject>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a chunk list")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut out = Vec::new();
        let mut bad = None;
        loop {
            let before = self.meter.pos.get();
            let next = seq.next_element_seed(ChunkSeed)?;
            // A chunk list is bounded by its count, not by the item's JSON budget: give
            // back what the entry took (each entry alone stays within the budget).
            let used = self.meter.pos.get() - before;
            self.meter.limit.set(self.meter.limit.get().saturating_add(used));
            let Some(entry) = next else { break };
            if bad.is_some() {
                continue;
            }
            match entry {
                Ok(c) if out.len() < self.limits.chunks_per_item => out.push(c),
                Ok(_) => {
                    bad = Some(Reject::TooManyChunks { limit: self.limits.chunks_per_item });
                    out = Vec::new();
                }
                Err(problem) => {
                    bad = Some(Reject::Chunk { index: out.len(), problem });
                    out = Vec::new();
                }
            }
        }
        Ok(match bad {
            Some(r) => Err(r),
            None => Ok(out),
        })
    }
    fn visit_map<A: MapAccess<'de>>(self, a: A) -> Result<Self::Value, A::Error> {
        ValVisitor.visit_map(a)?;
        Ok(Err(field("chunks", "an object, not a list")))
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(Err(field("chunks", "a string, not a list")))
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(Err(field("chunks", "a number, not a list")))
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(Err(field("chunks", "a number, not a list")))
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Err(field("chunks", "a number, not a list")))
    }
    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Err(field("chunks", "a boolean, not a list")))
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Err(field("chunks", "null, not a list")))
    }
}

struct ChunkSeed;

impl<'de> DeserializeSeed<'de> for ChunkSeed {
    type Value = Result<Chunk, String>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

fn chunk_num(v: Option<Val>, what: &str) -> Result<u32, String> {
    match v {
        Some(Val::U(n)) => u32::try_from(n).map_err(|_| format!("its {what} {n} is too large")),
        Some(v) => Err(format!("its {what} is {}, not a size", v.what())),
        None => Err(format!("it has no {what}")),
    }
}

impl<'de> Visitor<'de> for ChunkSeed {
    type Value = Result<Chunk, String>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("[id, size, csize]")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let id = seq.next_element_seed(ValSeed)?;
        let size = seq.next_element_seed(ValSeed)?;
        let csize = seq.next_element_seed(ValSeed)?;
        let mut extra = 0usize;
        while seq.next_element::<IgnoredAny>()?.is_some() {
            extra += 1;
        }
        Ok((|| {
            if extra > 0 {
                return Err(format!("it has {} fields, not 3", 3 + extra));
            }
            let id = match id {
                Some(Val::S(s)) if s.len() <= 80 => {
                    let b = borg_bytes(&s).map_err(|e| format!("its id: {e}"))?;
                    <[u8; 32]>::try_from(&b[..]).map_err(|_| format!("its id is {} bytes, not 32", b.len()))?
                }
                Some(Val::S(s)) => return Err(format!("its id is {} characters long", s.len())),
                Some(v) => return Err(format!("its id is {}, not a string", v.what())),
                None => return Err("it is empty".to_string()),
            };
            Ok(Chunk { id, size: chunk_num(size, "size")?, csize: chunk_num(csize, "csize")? })
        })())
    }
    fn visit_map<A: MapAccess<'de>>(self, a: A) -> Result<Self::Value, A::Error> {
        ValVisitor.visit_map(a)?;
        Ok(Err("it is an object, not [id, size, csize]".into()))
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(Err("it is a string, not [id, size, csize]".into()))
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(Err("it is a number, not [id, size, csize]".into()))
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(Err("it is a number, not [id, size, csize]".into()))
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Err("it is a number, not [id, size, csize]".into()))
    }
    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Err("it is a boolean, not [id, size, csize]".into()))
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Err("it is null, not [id, size, csize]".into()))
    }
}

// ---------------------------------------------------------------------------------------
// Extended attributes.

struct XattrsSeed<'a> {
    limits: &'a Limits,
}

type Xattrs = BTreeMap<Vec<u8>, Vec<u8>>;

impl<'de> DeserializeSeed<'de> for XattrsSeed<'_> {
    type Value = Result<Xattrs, Reject>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for XattrsSeed<'_> {
    type Value = Result<Xattrs, Reject>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a map of extended attributes")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let l = self.limits;
        let mut out = BTreeMap::new();
        let mut bad = None;
        while let Some(name) = map.next_key::<String>()? {
            let value = map.next_value_seed(ValSeed)?;
            if bad.is_some() {
                continue;
            }
            let r = (|| {
                if out.len() >= l.xattrs_per_item {
                    return Err(Reject::TooManyXattrs { limit: l.xattrs_per_item });
                }
                // borg writes xattr names (dict keys) as plain text, never in hex.
                let name = text_bytes(&name).map_err(|e| field("xattr name", e))?;
                let shown = String::from_utf8_lossy(&name).into_owned();
                if name.len() > l.xattr_name_bytes {
                    return Err(Reject::TooLong {
                        field: format!("xattr name {shown:?}"),
                        len: name.len(),
                        limit: l.xattr_name_bytes,
                    });
                }
                let what = format!("xattr {shown:?}");
                let value = match value {
                    Val::Null => Vec::new(),
                    v => bytes_of(&what, v, l.xattr_value_bytes)?,
                };
                out.insert(name, value);
                Ok(())
            })();
            if let Err(r) = r {
                bad = Some(r);
                out = BTreeMap::new();
            }
        }
        Ok(match bad {
            Some(r) => Err(r),
            None => Ok(out),
        })
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Ok(BTreeMap::new()))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, a: A) -> Result<Self::Value, A::Error> {
        ValVisitor.visit_seq(a)?;
        Ok(Err(field("xattrs", "a list, not an object")))
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(Err(field("xattrs", "a string, not an object")))
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(Err(field("xattrs", "a number, not an object")))
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(Err(field("xattrs", "a number, not an object")))
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Err(field("xattrs", "a number, not an object")))
    }
    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Err(field("xattrs", "a boolean, not an object")))
    }
}

// ---------------------------------------------------------------------------------------
// Items.

struct ItemSeed<'a> {
    limits: &'a Limits,
    meter: &'a Meter,
}

type ItemResult = Result<Item, (Option<Vec<u8>>, Reject)>;

impl<'de> DeserializeSeed<'de> for ItemSeed<'_> {
    type Value = ItemResult;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<ItemResult, D::Error> {
        d.deserialize_any(self)
    }
}

#[derive(Default)]
struct Fields {
    item: Item,
    path: bool,
    mode: bool,
    mtime: bool,
    uid: bool,
    gid: bool,
    problem: Option<Reject>,
}

impl Fields {
    fn note<T>(&mut self, r: Result<T, Reject>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                if self.problem.is_none() {
                    self.problem = Some(e);
                }
                None
            }
        }
    }

    fn scalar(&mut self, name: &str, v: Val, l: &Limits) {
        let it = &mut self.item;
        let r: Result<(), Reject> = (|| {
            match name {
                "path" => {
                    it.path = bytes_of(name, v, l.path_bytes)?;
                    self.path = true;
                }
                "source" => it.source = opt_bytes_of(name, v, l.path_bytes)?,
                "user" => it.user = opt_bytes_of(name, v, l.text_bytes)?,
                "group" => it.group = opt_bytes_of(name, v, l.text_bytes)?,
                "acl_access" => it.acl_access = opt_bytes_of(name, v, l.text_bytes)?,
                "acl_default" => it.acl_default = opt_bytes_of(name, v, l.text_bytes)?,
                "acl_extended" => it.acl_extended = opt_bytes_of(name, v, l.text_bytes)?,
                "acl_nfs4" => it.acl_nfs4 = opt_bytes_of(name, v, l.text_bytes)?,
                "mode" => {
                    let m = u32_of(name, v)?;
                    if m > 0o177777 {
                        return Err(field(name, format!("{m:o} (octal), not a file mode")));
                    }
                    it.mode = m;
                    self.mode = true;
                }
                "uid" => {
                    it.uid = u32_of(name, v)?;
                    self.uid = true;
                }
                "gid" => {
                    it.gid = u32_of(name, v)?;
                    self.gid = true;
                }
                "mtime" => {
                    it.mtime = i64_of(name, v)?;
                    self.mtime = true;
                }
                "ctime" => it.ctime = Some(i64_of(name, v)?),
                "atime" => it.atime = Some(i64_of(name, v)?),
                "birthtime" => it.birthtime = Some(i64_of(name, v)?),
                "size" => it.size = Some(u64_of(name, v)?),
                "rdev" => it.rdev = Some(u64_of(name, v)?),
                "bsdflags" => it.bsdflags = Some(u32_of(name, v)?),
                "part" => it.part = Some(u64_of(name, v)?),
                "hardlink_master" => it.hardlink_master = bool_of(name, v)?,
                // Fields of newer or older borg versions that an import does not need.
                _ => {}
            }
            Ok(())
        })();
        self.note(r);
    }

    fn finish(mut self) -> ItemResult {
        let path = self.path.then(|| self.item.path.clone());
        if let Some(p) = self.problem.take() {
            return Err((path, p));
        }
        let missing =
            [(self.path, "path"), (self.mode, "mode"), (self.mtime, "mtime"), (self.uid, "uid"), (self.gid, "gid")];
        if let Some((_, field)) = missing.iter().find(|(seen, _)| !seen) {
            return Err((path, Reject::Missing { field }));
        }
        let it = &mut self.item;
        if let Some(problem) = unsafe_path(&it.path) {
            return Err((path, Reject::UnsafePath { problem }));
        }
        let regular = it.mode & 0o170000 == 0o100000;
        if let Some(chunks) = &it.chunks {
            let total: u64 = chunks.iter().map(|c| c.size as u64).sum();
            // borg's smallest chunk is 64 bytes (its minimum block size and chunk size).
            let fits = |size: u64| total == size && chunks.len() as u64 <= size / 64 + 1;
            if let Some(size) = it.size.filter(|&s| !fits(s)) {
                let count = chunks.len();
                return Err((path, Reject::SizeMismatch { count, total, size }));
            }
            if regular {
                it.content_key = Some(ContentKey::of_chunks(chunks));
            }
        } else if regular && it.source.is_none() {
            return Err((path, Reject::Missing { field: "chunks" }));
        }
        if let Some(n) = it.part {
            let suffix = format!(".borg_part_{n}");
            if !it.path.ends_with(suffix.as_bytes()) {
                return Err((path, field("part", format!("{n} but the path does not end in {suffix}"))));
            }
        }
        Ok(self.item)
    }
}

fn unsafe_path(p: &[u8]) -> Option<&'static str> {
    if p.is_empty() {
        Some("is empty")
    } else if p[0] == b'/' {
        Some("is absolute")
    } else if p.contains(&0) {
        Some("holds a NUL byte")
    } else if p.split(|&b| b == b'/').any(|c| c == b"..") {
        Some("has a '..' component")
    } else {
        None
    }
}

impl<'de> Visitor<'de> for ItemSeed<'_> {
    type Value = ItemResult;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an item")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ItemResult, A::Error> {
        let mut fields = Fields::default();
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "chunks" => {
                    let seed = ChunksSeed { limits: self.limits, meter: self.meter };
                    let r = map.next_value_seed(seed)?;
                    fields.item.chunks = fields.note(r);
                }
                "chunks_healthy" => {
                    map.next_value::<IgnoredAny>()?;
                    fields.item.repaired = true;
                }
                "xattrs" => {
                    let r = map.next_value_seed(XattrsSeed { limits: self.limits })?;
                    fields.item.xattrs = fields.note(r).unwrap_or_default();
                }
                name => {
                    let v = map.next_value_seed(ValSeed)?;
                    fields.scalar(name, v, self.limits);
                }
            }
        }
        Ok(fields.finish())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, a: A) -> Result<ItemResult, A::Error> {
        ValVisitor.visit_seq(a)?;
        Ok(Err((None, Reject::NotAnObject { found: "a list" })))
    }
    fn visit_str<E>(self, _: &str) -> Result<ItemResult, E> {
        Ok(Err((None, Reject::NotAnObject { found: "a string" })))
    }
    fn visit_u64<E>(self, _: u64) -> Result<ItemResult, E> {
        Ok(Err((None, Reject::NotAnObject { found: "a number" })))
    }
    fn visit_i64<E>(self, _: i64) -> Result<ItemResult, E> {
        Ok(Err((None, Reject::NotAnObject { found: "a number" })))
    }
    fn visit_f64<E>(self, _: f64) -> Result<ItemResult, E> {
        Ok(Err((None, Reject::NotAnObject { found: "a number" })))
    }
    fn visit_bool<E>(self, _: bool) -> Result<ItemResult, E> {
        Ok(Err((None, Reject::NotAnObject { found: "a boolean" })))
    }
    fn visit_unit<E>(self) -> Result<ItemResult, E> {
        Ok(Err((None, Reject::NotAnObject { found: "null" })))
    }
}

// ---------------------------------------------------------------------------------------
// The document.

#[derive(Deserialize)]
struct RawMeta {
    name: Option<String>,
    hostname: Option<String>,
    username: Option<String>,
    time: Option<String>,
    time_end: Option<String>,
    #[serde(default)]
    cmdline: Vec<String>,
    comment: Option<String>,
    chunker_params: Option<Vec<serde_json::Value>>,
    version: Option<u64>,
}

type Callback<'f, E> = &'f mut dyn FnMut(DumpEvent) -> Result<(), E>;

struct Ctx<'f, E> {
    limits: Limits,
    meter: Rc<Meter>,
    f: Callback<'f, E>,
    /// The callback's error, which stopped the dump.
    stopped: Option<E>,
    name: Option<Vec<u8>>,
    meta: Option<RawMeta>,
    saw_items: bool,
    /// Which part of the document is being read, for errors.
    part: String,
    in_items: bool,
    index: u64,
    rejected: u64,
    last_path: Option<Vec<u8>>,
}

struct DocVisitor<'c, 'f, E> {
    ctx: &'c mut Ctx<'f, E>,
}

impl<'de, E> Visitor<'de> for DocVisitor<'_, '_, E> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("the object borg debug dump-archive writes")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let ctx = self.ctx;
        let meta_limit = ctx.limits.meta_json_bytes;
        loop {
            ctx.part = "keys".into();
            ctx.meter.allow(meta_limit);
            let Some(key) = map.next_key::<String>()? else {
                break;
            };
            ctx.part = key.clone();
            ctx.meter.allow(meta_limit);
            match key.as_str() {
                "_name" => {
                    if let Val::S(s) = map.next_value_seed(ValSeed)? {
                        ctx.name = text_bytes(&s).ok();
                    }
                }
                "_meta" => ctx.meta = Some(map.next_value()?),
                "_items" => {
                    ctx.saw_items = true;
                    ctx.in_items = true;
                    map.next_value_seed(ItemsSeed { ctx: &mut *ctx })?;
                    ctx.in_items = false;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

struct ItemsSeed<'c, 'f, E> {
    ctx: &'c mut Ctx<'f, E>,
}

impl<'de, E> DeserializeSeed<'de> for ItemsSeed<'_, '_, E> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de, E> Visitor<'de> for ItemsSeed<'_, '_, E> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("the list of items")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let ctx = self.ctx;
        let limits = ctx.limits.clone();
        let meter = ctx.meter.clone();
        loop {
            meter.allow(limits.item_json_bytes);
            let seed = ItemSeed { limits: &limits, meter: &meter };
            let Some(r) = seq.next_element_seed(seed)? else {
                break;
            };
            let event = match r {
                Ok(item) => {
                    ctx.last_path = Some(item.path.clone());
                    DumpEvent::Item(item)
                }
                Err((path, reason)) => {
                    ctx.rejected += 1;
                    if path.is_some() {
                        ctx.last_path.clone_from(&path);
                    }
                    DumpEvent::Rejected { index: ctx.index, path, reason }
                }
            };
            ctx.index += 1;
            if let Err(e) = (ctx.f)(event) {
                ctx.stopped = Some(e);
                return Err(de::Error::custom("stopped by the caller"));
            }
        }
        Ok(())
    }
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Reads the output of `borg debug dump-archive REPO::ARCHIVE -`, handing each item to `f`
/// as it is parsed, and returns the archive's metadata at the end.
///
/// Memory stays bounded by one item (see [`Limits`]), whatever the archive's size. An
/// item that cannot be understood is handed over as [`DumpEvent::Rejected`] and the dump
/// goes on. An error from `f` stops the dump and is returned as it is. Any other error
/// means the document is truncated or not a dump at all: items already handed over must
/// then be thrown away with the archive.
///
/// Hard link slaves come without a content key: pass items through [`HardLinks`] to
/// give them their master's. Part items ([`Item::part`]) are for the caller to skip.
pub fn read_dump<R: Read, E: From<Error>>(
    r: R,
    limits: &Limits,
    f: &mut dyn FnMut(DumpEvent) -> Result<(), E>,
) -> Result<DumpMeta, E> {
    let meter = Meter::new();
    let mut de = serde_json::Deserializer::from_reader(Prepass::new(r, meter.clone()));
    let mut ctx = Ctx {
        limits: limits.clone(),
        meter: meter.clone(),
        f,
        stopped: None,
        name: None,
        meta: None,
        saw_items: false,
        part: String::new(),
        in_items: false,
        index: 0,
        rejected: 0,
        last_path: None,
    };
    let res = (&mut de).deserialize_map(DocVisitor { ctx: &mut ctx }).and_then(|()| {
        meter.allow(limits.meta_json_bytes);
        de.end()
    });
    if let Some(e) = ctx.stopped.take() {
        return Err(e);
    }
    let archive = ctx.name.as_deref().map(lossy).unwrap_or_else(|| "(name not read)".into());
    if let Err(e) = res {
        return Err(if meter.tripped.get() {
            if ctx.in_items {
                Error::ItemTooLarge {
                    archive,
                    index: ctx.index,
                    after: match &ctx.last_path {
                        Some(p) => format!("the one after {}", lossy(p)),
                        None => "the first".into(),
                    },
                    limit: limits.item_json_bytes,
                }
            } else {
                Error::MetaTooLarge { archive, part: ctx.part.clone(), limit: limits.meta_json_bytes }
            }
        } else {
            use serde_json::error::Category;
            match e.classify() {
                Category::Io => Error::Read { command: "debug dump-archive", source: e.into() },
                Category::Eof | Category::Syntax => Error::DumpSyntax { archive, reason: e.to_string() },
                Category::Data => Error::DumpShape { archive, reason: format!("in {}: {e}", ctx.part) },
            }
        }
        .into());
    }
    let shape =
        |reason: &str| -> E { Error::DumpShape { archive: archive.clone(), reason: reason.to_string() }.into() };
    let Some(m) = ctx.meta.take() else {
        return Err(shape("it has no _meta"));
    };
    if !ctx.saw_items {
        return Err(shape("it has no _items"));
    }
    let meta_bytes = |what: &str, s: Option<&String>| -> Result<Vec<u8>, E> {
        match s {
            None => Ok(Vec::new()),
            Some(s) => borg_bytes(s).map_err(|e| shape(&format!("_meta {what}: {e}"))),
        }
    };
    let meta_time = |what: &str, s: Option<&String>| -> Result<Option<BorgTime>, E> {
        let Some(b) = meta_bytes(what, s).map(|b| s.map(|_| b))? else {
            return Ok(None);
        };
        match std::str::from_utf8(&b).ok().and_then(parse_time) {
            Some(t) => Ok(Some(t)),
            None => Err(shape(&format!("_meta {what} is not a time: {:?}", lossy(&b)))),
        }
    };
    let Some(time) = meta_time("time", m.time.as_ref())? else {
        return Err(shape("_meta has no time"));
    };
    let mut cmdline = Vec::with_capacity(m.cmdline.len());
    for a in &m.cmdline {
        cmdline.push(meta_bytes("cmdline", Some(a))?);
    }
    let name = match ctx.name.take() {
        Some(n) => n,
        None => meta_bytes("name", m.name.as_ref())?,
    };
    Ok(DumpMeta {
        name,
        hostname: meta_bytes("hostname", m.hostname.as_ref())?,
        username: meta_bytes("username", m.username.as_ref())?,
        time,
        time_end: meta_time("time_end", m.time_end.as_ref())?,
        cmdline,
        comment: meta_bytes("comment", m.comment.as_ref())?,
        chunker_params: m.chunker_params.as_deref().map(ChunkerParams::from_json),
        version: m.version,
        items: ctx.index,
        rejected: ctx.rejected,
    })
}
