//! The lenient visitors of an item's fields: they accept any JSON type, so that a field
//! of the wrong type or value becomes a rejection of the item (the rest of the item is
//! still read, without being kept) rather than an error that ends the dump.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::Limits;
use super::item::{Chunk, Reject};
use super::text::{Meter, borg_bytes, text_bytes};

// ---------------------------------------------------------------------------------------
// Lenient values: anything JSON, containers skipped without being kept.

pub(super) enum Val {
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

pub(super) struct ValSeed;

impl<'de> DeserializeSeed<'de> for ValSeed {
    type Value = Val;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Val, D::Error> {
        d.deserialize_any(ValVisitor)
    }
}

pub(super) struct ValVisitor;

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

pub(super) fn field(name: &str, problem: impl Into<String>) -> Reject {
    Reject::Field { field: name.to_string(), problem: problem.into() }
}

/// A byte string of at most `limit` bytes, in borg's dump encoding.
pub(super) fn bytes_of(name: &str, v: Val, limit: usize) -> Result<Vec<u8>, Reject> {
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

pub(super) fn opt_bytes_of(name: &str, v: Val, limit: usize) -> Result<Option<Vec<u8>>, Reject> {
    match v {
        Val::Null => Ok(None),
        v => bytes_of(name, v, limit).map(Some),
    }
}

pub(super) fn u64_of(name: &str, v: Val) -> Result<u64, Reject> {
    match v {
        Val::U(n) => Ok(n),
        Val::I(_) => Err(field(name, "negative")),
        v => Err(field(name, format!("{}, not an integer", v.what()))),
    }
}

pub(super) fn u32_of(name: &str, v: Val) -> Result<u32, Reject> {
    let n = u64_of(name, v)?;
    u32::try_from(n).map_err(|_| field(name, format!("{n}, more than 32 bits")))
}

pub(super) fn i64_of(name: &str, v: Val) -> Result<i64, Reject> {
    match v {
        Val::I(n) => Ok(n),
        Val::U(n) => i64::try_from(n).map_err(|_| field(name, format!("{n}, out of range"))),
        v => Err(field(name, format!("{}, not an integer", v.what()))),
    }
}

pub(super) fn bool_of(name: &str, v: Val) -> Result<bool, Reject> {
    match v {
        Val::B(b) => Ok(b),
        v => Err(field(name, format!("{}, not a boolean", v.what()))),
    }
}

// ---------------------------------------------------------------------------------------
// Chunk lists.

pub(super) struct ChunksSeed<'a> {
    pub(super) limits: &'a Limits,
    pub(super) meter: &'a Meter,
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

pub(super) struct XattrsSeed<'a> {
    pub(super) limits: &'a Limits,
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
