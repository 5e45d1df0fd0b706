//! The layout object: the sealed, signed object `layout/<id>` (kind 8) that says
//! which backends a repository spans, with what capacity and zone, and which of
//! them own each partition of the pack id space. Stored on every backend, so any
//! one of them opens the repository; it never holds locations or credentials.
//! See docs/design.md#many-backends.
//!
//! Plaintext (integers little-endian):
//! ```text
//! magic "clay" (4) | format 1 (1) | layout version u64 (8) | writer public key (32)
//! | time: len u16 (2) + RFC 3339 UTF-8 | backend count u16 (2)
//! | per backend: name len u8 (1) + name | capacity u64 (8) | zone len u8 (1) + zone | state u8 (1)
//! | table | previous present u8 (1) | [previous table]
//! table = replicas u8 (1) | partitions u32 (4) | owners: partitions × replicas u16
//! ```
//! Every count is checked against the bytes left before anything is allocated.

pub use coffer_backend::placement::{BackendSpec, Table};

use super::Reader;
use crate::crypto::sign::{PUBLIC_KEY_LEN, PublicKey};

/// The magic at the start of a layout's plaintext.
pub const MAGIC: &[u8; 4] = b"clay";
/// The plaintext format this coffer reads and writes.
pub const FORMAT: u8 = 1;
/// Most backends a layout names.
pub const MAX_BACKENDS: usize = 1024;
/// Most copies of a pack.
pub const MAX_REPLICAS: u8 = 16;
/// Most partitions: a pack's partition comes from its id's first two bytes.
pub const MAX_PARTITIONS: u32 = 1 << 16;
/// Longest backend name or zone, in bytes.
pub const MAX_NAME: usize = 64;
/// Longest time string.
const MAX_TIME: usize = 64;

/// Whether a backend takes part in the current table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendState {
    /// A member of the repository.
    Active = 0,
    /// Being removed: it owns nothing in the current table and keeps its copies
    /// until a rebalance has moved them.
    Removing = 1,
}

/// One backend named by a layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayoutBackend {
    /// Name, capacity and zone.
    pub spec: BackendSpec,
    /// Whether it is being removed.
    pub state: BackendState,
}

/// A layout version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Increases by one with every change; the highest valid version is current.
    pub version: u64,
    /// The writer that signed it (must equal the signature's key).
    pub writer: PublicKey,
    /// When it was made, RFC 3339 in UTC.
    pub time: String,
    /// The backends; the tables' owners are indices into this list.
    pub backends: Vec<LayoutBackend>,
    /// Which backends own each partition.
    pub table: Table,
    /// While a migration runs: the table being left.
    pub previous: Option<Table>,
}

/// Whether `name` may name a backend: 1 to 64 bytes of ASCII letters, digits,
/// `.`, `_` and `-`, not starting with `.` or `-`.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME
        && !name.starts_with(['.', '-'])
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

impl Layout {
    /// How this layout keeps less than `than` does, if it does: fewer copies of
    /// every pack, or its copies spread over fewer failure zones.
    pub fn lowers_protection(&self, than: &Layout) -> Option<String> {
        if self.table.replicas < than.table.replicas {
            return Some(format!(
                "{} copies of every pack where version {} keeps {}",
                self.table.replicas, than.version, than.table.replicas
            ));
        }
        let (mine, theirs) = (self.zones_spanned(), than.zones_spanned());
        (mine < theirs).then(|| {
            format!("copies spread over {mine} failure zones where version {} spreads them over {theirs}", than.version)
        })
    }

    /// How many failure zones a pack's copies can span: the replicas, at most
    /// the distinct zones of the backends that own partitions (a backend without
    /// a zone is a zone of its own).
    fn zones_spanned(&self) -> usize {
        let mut zones: Vec<String> = Vec::new();
        for (i, b) in self.backends.iter().enumerate() {
            if !self.table.owners.iter().any(|&o| usize::from(o) == i) {
                continue;
            }
            let z = match &b.spec.zone {
                Some(z) if !z.is_empty() => format!("z:{z}"),
                _ => format!("b:{}", b.spec.name),
            };
            if !zones.contains(&z) {
                zones.push(z);
            }
        }
        zones.len().min(usize::from(self.table.replicas))
    }

    /// The plaintext, to be sealed and signed.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.backends.len() * 32 + self.table.owners.len() * 2);
        out.extend_from_slice(MAGIC);
        out.push(FORMAT);
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&self.writer.0);
        out.extend_from_slice(&(self.time.len() as u16).to_le_bytes());
        out.extend_from_slice(self.time.as_bytes());
        out.extend_from_slice(&(self.backends.len() as u16).to_le_bytes());
        for b in &self.backends {
            out.push(b.spec.name.len() as u8);
            out.extend_from_slice(b.spec.name.as_bytes());
            out.extend_from_slice(&b.spec.capacity.to_le_bytes());
            let zone = b.spec.zone.as_deref().unwrap_or("");
            out.push(zone.len() as u8);
            out.extend_from_slice(zone.as_bytes());
            out.push(b.state as u8);
        }
        encode_table(&mut out, &self.table);
        match &self.previous {
            Some(p) => {
                out.push(1);
                encode_table(&mut out, p);
            }
            None => out.push(0),
        }
        out
    }

    /// Parses and checks a plaintext: every field within its limit, names
    /// valid and distinct, every owner an index of a listed backend, no
    /// partition owned twice by one backend, nothing left over.
    pub fn decode(buf: &[u8]) -> Result<Layout, String> {
        let mut r = Reader::new(buf);
        let short = || "layout is truncated".to_string();
        if r.take(4).ok_or_else(short)? != MAGIC {
            return Err("not a layout (bad magic)".into());
        }
        let format = r.u8().ok_or_else(short)?;
        if format != FORMAT {
            return Err(format!("layout format {format} is not supported by this coffer"));
        }
        let version = r.u64().ok_or_else(short)?;
        let writer = PublicKey(r.take(PUBLIC_KEY_LEN).ok_or_else(short)?.try_into().map_err(|_| short())?);
        let time_len = r.u16().ok_or_else(short)? as usize;
        if time_len > MAX_TIME {
            return Err(format!("layout time is {time_len} bytes long, at most {MAX_TIME} allowed"));
        }
        let time = text(r.take(time_len).ok_or_else(short)?, "time")?;
        humantime::parse_rfc3339(&time).map_err(|e| format!("layout time {time:?}: {e}"))?;
        let count = r.u16().ok_or_else(short)? as usize;
        // Each backend takes at least 11 bytes: check before allocating.
        if count == 0 || count > MAX_BACKENDS || count * 11 > r.remaining() {
            return Err(format!("layout names {count} backends: between 1 and {MAX_BACKENDS}, within its size"));
        }
        let mut backends = Vec::with_capacity(count);
        for _ in 0..count {
            let n = r.u8().ok_or_else(short)? as usize;
            let name = text(r.take(n).ok_or_else(short)?, "backend name")?;
            if !valid_name(&name) {
                return Err(format!("layout backend name {name:?} is not a valid name"));
            }
            if backends.iter().any(|b: &LayoutBackend| b.spec.name == name) {
                return Err(format!("layout names backend {name:?} twice"));
            }
            let capacity = r.u64().ok_or_else(short)?;
            let z = r.u8().ok_or_else(short)? as usize;
            let zone = text(r.take(z).ok_or_else(short)?, "zone")?;
            if zone.len() > MAX_NAME {
                return Err(format!("layout zone of backend {name} is longer than {MAX_NAME} bytes"));
            }
            let state = match r.u8().ok_or_else(short)? {
                0 => BackendState::Active,
                1 => BackendState::Removing,
                s => return Err(format!("layout backend {name} has unknown state {s}")),
            };
            let zone = (!zone.is_empty()).then_some(zone);
            backends.push(LayoutBackend { spec: BackendSpec { name, capacity, zone }, state });
        }
        let table = decode_table(&mut r, count, "table")?;
        let previous = match r.u8().ok_or_else(short)? {
            0 => None,
            1 => Some(decode_table(&mut r, count, "previous table")?),
            f => return Err(format!("layout previous-table flag {f} is neither 0 nor 1")),
        };
        if r.remaining() != 0 {
            return Err(format!("layout has {} bytes after its end", r.remaining()));
        }
        if let Some(b) = table.owners.iter().map(|&o| &backends[o as usize]).find(|b| b.state != BackendState::Active) {
            return Err(format!("layout's table gives partitions to backend {}, which is being removed", b.spec.name));
        }
        Ok(Layout { version, writer, time, backends, table, previous })
    }

    /// The backends' specifications, in table order.
    pub fn specs(&self) -> Vec<BackendSpec> {
        self.backends.iter().map(|b| b.spec.clone()).collect()
    }

    /// The index of backend `name`.
    pub fn position(&self, name: &str) -> Option<usize> {
        self.backends.iter().position(|b| b.spec.name == name)
    }
}

fn text(b: &[u8], what: &str) -> Result<String, String> {
    String::from_utf8(b.to_vec()).map_err(|_| format!("layout {what} is not UTF-8"))
}

fn encode_table(out: &mut Vec<u8>, t: &Table) {
    out.push(t.replicas);
    out.extend_from_slice(&t.partitions.to_le_bytes());
    for o in &t.owners {
        out.extend_from_slice(&o.to_le_bytes());
    }
}

fn decode_table(r: &mut Reader<'_>, backends: usize, what: &str) -> Result<Table, String> {
    let short = || format!("layout {what} is truncated");
    let replicas = r.u8().ok_or_else(short)?;
    let partitions = r.u32().ok_or_else(short)?;
    if replicas == 0 || replicas > MAX_REPLICAS || replicas as usize > backends {
        return Err(format!(
            "layout {what} keeps {replicas} copies: between 1 and {MAX_REPLICAS}, and no more than {backends} backends"
        ));
    }
    if partitions == 0 || partitions > MAX_PARTITIONS {
        return Err(format!("layout {what} has {partitions} partitions: between 1 and {MAX_PARTITIONS}"));
    }
    let n = partitions as usize * replicas as usize;
    if n * 2 > r.remaining() {
        return Err(short());
    }
    let mut owners = Vec::with_capacity(n);
    for _ in 0..n {
        let o = r.u16().ok_or_else(short)?;
        if o as usize >= backends {
            return Err(format!("layout {what} names backend {o}, but only {backends} are listed"));
        }
        owners.push(o);
    }
    let table = Table { partitions, replicas, owners };
    for p in 0..partitions {
        let row = table.owners_of(p);
        if row.iter().enumerate().any(|(i, o)| row[..i].contains(o)) {
            return Err(format!("layout {what} gives partition {p} to one backend twice"));
        }
    }
    Ok(table)
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn sample() -> Layout {
        let spec = |name: &str, capacity, zone: Option<&str>| LayoutBackend {
            spec: BackendSpec { name: name.into(), capacity, zone: zone.map(Into::into) },
            state: BackendState::Active,
        };
        Layout {
            version: 3,
            writer: PublicKey([7; 32]),
            time: "2026-11-24T10:00:00Z".into(),
            backends: vec![
                spec("disk", 1 << 40, None),
                spec("s3-eu", 2 << 40, Some("eu")),
                LayoutBackend { state: BackendState::Removing, ..spec("old", 5, Some("eu")) },
            ],
            table: Table { partitions: 4, replicas: 2, owners: vec![0, 1, 1, 0, 0, 1, 1, 0] },
            previous: Some(Table { partitions: 4, replicas: 2, owners: vec![0, 2, 1, 2, 2, 0, 1, 0] }),
        }
    }

    #[test]
    fn a_layout_round_trips() {
        let l = sample();
        assert_eq!(Layout::decode(&l.encode()).unwrap(), l);
        let plain = Layout { previous: None, ..l };
        assert_eq!(Layout::decode(&plain.encode()).unwrap(), plain);
    }

    #[test]
    fn the_fuzz_seeds_decode() {
        let seed = Layout::decode(include_bytes!("../../../../fuzz/corpus/layout_decode/seed-0.bin")).unwrap();
        assert_eq!((seed.version, seed.backends.len(), seed.previous.is_some()), (4, 3, true));
        assert_eq!(Layout::decode(&seed.encode()).unwrap(), seed);
        assert_eq!(
            Layout::decode(include_bytes!("../../../../fuzz/corpus/layout_decode/seed-1.bin")).unwrap().version,
            1
        );
    }

    #[test]
    fn every_truncation_and_extension_is_refused() {
        let bytes = sample().encode();
        for n in 0..bytes.len() {
            assert!(Layout::decode(&bytes[..n]).is_err(), "{n} bytes accepted");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(Layout::decode(&longer).unwrap_err().contains("after its end"));
    }

    #[test]
    fn bad_fields_are_refused_with_what_is_wrong() {
        let bad = |f: &dyn Fn(&mut Layout), want: &str| {
            let mut l = sample();
            f(&mut l);
            let e = Layout::decode(&l.encode()).unwrap_err();
            assert!(e.contains(want), "{e} lacks {want}");
        };
        bad(&|l| l.table.owners[0] = 9, "names backend 9");
        bad(&|l| l.table.owners[1] = 0, "partition 0 to one backend twice");
        bad(&|l| l.table.owners[0] = 2, "being removed");
        bad(&|l| l.backends[1].spec.name = "disk".into(), "twice");
        bad(&|l| l.backends[1].spec.name = "a/b".into(), "not a valid name");
        bad(&|l| l.time = "yesterday".into(), "layout time");
        bad(&|l| l.table.replicas = 0, "copies");
    }

    #[test]
    fn the_largest_layout_a_writer_can_make_is_below_the_limit() {
        let backends: Vec<LayoutBackend> = (0..MAX_BACKENDS)
            .map(|i| LayoutBackend {
                spec: BackendSpec { name: format!("{i:0>64}"), capacity: u64::MAX, zone: Some("z".repeat(MAX_NAME)) },
                state: BackendState::Active,
            })
            .collect();
        let owners = (0..MAX_PARTITIONS as usize * MAX_REPLICAS as usize).map(|i| (i % MAX_BACKENDS) as u16).collect();
        let table = Table { partitions: MAX_PARTITIONS, replicas: MAX_REPLICAS, owners };
        let l = Layout { backends, previous: Some(table.clone()), table, ..sample() };
        let stored = l.encode().len() + crate::format::envelope::OVERHEAD + crate::format::signed::BLOCK_LEN;
        assert!((stored as u64) < crate::format::limits::LAYOUT, "{stored} bytes");
        assert_eq!(Layout::decode(&l.encode()).unwrap(), l);
    }

    #[test]
    fn huge_counts_are_refused_before_allocating() {
        let mut b = sample().encode();
        // The first table's partition count sits after the backends: make it
        // claim 65,536 partitions of 16 copies in a few hundred bytes.
        let l = sample();
        let table_at = b.len() - 1 - (5 + 16) - (5 + 16);
        assert_eq!(b[table_at], l.table.replicas);
        b[table_at] = 16;
        b[table_at + 1..table_at + 5].copy_from_slice(&MAX_PARTITIONS.to_le_bytes());
        assert!(Layout::decode(&b).is_err());
        let mut many = sample().encode();
        let count_at = 4 + 1 + 8 + 32 + 2 + l.time.len();
        many[count_at..count_at + 2].copy_from_slice(&u16::MAX.to_le_bytes());
        assert!(Layout::decode(&many).unwrap_err().contains("backends"));
    }
}
