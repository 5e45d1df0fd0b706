//! `borg debug dump-archive REPO::ARCHIVE -`, streamed: the top-level map is visited key by
//! key and `_items` element by element, so that memory is per item, not per archive.
//!
//! The document borg 1.2 writes is `{"_name": ..., "_manifest_entry": {...}, "_meta":
//! {...}, "_items": [{...}, ...]}`. Each item is visited field by field with visitors that
//! accept any JSON type (a wrong type becomes a rejection of the item, not an error), and
//! every read is metered (see `text::Meter`) so that no item can make serde_json buffer
//! more than [`Limits::item_json_bytes`].

use std::fmt;
use std::io::Read;
use std::rc::Rc;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::fields::{
    ChunksSeed, Val, ValSeed, ValVisitor, XattrsSeed, bool_of, bytes_of, field, i64_of, opt_bytes_of, u32_of, u64_of,
};
use super::item::{ContentKey, Item, Reject};
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
/// Hard link slaves come without a content key: pass items through [`HardLinks`](super::HardLinks) to
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
