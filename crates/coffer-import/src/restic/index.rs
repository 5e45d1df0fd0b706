//! Index files (`index/<id>`) and the in-memory index built from them.
//!
//! An index file opens to JSON listing packs and the blobs in each:
//!
//! ```json
//! {"supersedes": ["<id>", ...],
//!  "packs": [{"id": "<pack id>",
//!             "blobs": [{"id": "<blob id>", "type": "data" | "tree",
//!                        "offset": 0, "length": 123, "uncompressed_length": 456}]}]}
//! ```
//!
//! (`uncompressed_length` only for compressed blobs; `supersedes` is obsolete and
//! ignored; very old repositories hold a bare array of packs, also read.) `length` is the
//! blob's encrypted length in the pack.
//!
//! In memory, each blob takes one [`Entry`] of 56 bytes: its id, a `u32` number into the
//! list of pack ids, its offset, lengths and type, in a vector sorted by blob id (binary
//! search). A blob stored in several packs keeps every location, in the order found, so
//! that a damaged copy can be passed over.

use serde::Deserialize;

use super::id::{BlobId, Id, PackId};
use super::pack::{BlobType, PackedBlob};

/// Largest index file read, as stored: 128 MiB.
pub const MAX_INDEX_FILE: u64 = 128 * 1024 * 1024;
/// Largest index file read, opened and decompressed: 256 MiB (restic's index files
/// hold some tens of thousands of blobs, a few MiB each).
pub const MAX_INDEX_PLAIN: u64 = 256 * 1024 * 1024;

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum TypeJson {
    Data,
    Tree,
}

#[derive(Deserialize)]
struct BlobJson {
    id: Id,
    #[serde(rename = "type")]
    blob_type: TypeJson,
    offset: u64,
    length: u64,
    #[serde(default)]
    uncompressed_length: u64,
}

#[derive(Deserialize)]
struct PackJson {
    id: Id,
    #[serde(default)]
    blobs: Vec<BlobJson>,
}

#[derive(Deserialize)]
struct IndexJson {
    #[serde(default)]
    packs: Vec<PackJson>,
}

/// The packs and blobs of one index file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexFile {
    pub packs: Vec<(PackId, Vec<PackedBlob>)>,
}

/// Parses an opened index file's JSON, checking each blob's lengths.
pub fn parse_index(json: &[u8]) -> Result<IndexFile, String> {
    // The first byte tells the formats apart (no buffering of the whole document, as an
    // untagged enum would).
    let legacy = json.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[');
    let packs = if legacy {
        serde_json::from_slice::<Vec<PackJson>>(json)
    } else {
        serde_json::from_slice::<IndexJson>(json).map(|j| j.packs)
    }
    .map_err(|e| format!("not an index: {e}"))?;
    let mut out = Vec::with_capacity(packs.len());
    for p in packs {
        let mut blobs = Vec::with_capacity(p.blobs.len());
        for b in p.blobs {
            let length =
                u32::try_from(b.length).map_err(|_| format!("pack {}: blob {} of length {}", p.id, b.id, b.length))?;
            let uncompressed_length = match b.uncompressed_length {
                0 => None,
                n => Some(
                    u32::try_from(n).map_err(|_| format!("pack {}: blob {} of uncompressed length {n}", p.id, b.id))?,
                ),
            };
            if (length as usize) < super::crypto::OVERHEAD {
                return Err(format!("pack {}: blob {} of length {length} cannot be encrypted data", p.id, b.id));
            }
            b.offset.checked_add(b.length).ok_or_else(|| format!("pack {}: blob {} offset overflows", p.id, b.id))?;
            blobs.push(PackedBlob {
                id: b.id,
                blob_type: match b.blob_type {
                    TypeJson::Data => BlobType::Data,
                    TypeJson::Tree => BlobType::Tree,
                },
                offset: b.offset,
                length,
                uncompressed_length,
            });
        }
        out.push((p.id, blobs));
    }
    Ok(IndexFile { packs: out })
}

/// One blob's location, compactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub id: [u8; 32],
    /// Number of the pack in [`Index::packs`].
    pub pack: u32,
    pub length: u32,
    pub offset: u64,
    /// 0 when stored uncompressed.
    pub uncompressed_length: u32,
    /// 0 data, 1 tree.
    pub blob_type: u8,
}

/// Where a blob is: the answer of [`Index::find`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Location {
    pub pack: PackId,
    pub blob: PackedBlob,
}

/// The index of every blob: blob id → pack and place.
#[derive(Debug, Default, Clone)]
pub struct Index {
    packs: Vec<PackId>,
    pack_numbers: std::collections::HashMap<PackId, u32>,
    entries: Vec<Entry>,
    sorted: bool,
}

impl Index {
    pub fn new() -> Index {
        Index::default()
    }

    fn pack_number(&mut self, id: PackId) -> u32 {
        if let Some(&n) = self.pack_numbers.get(&id) {
            return n;
        }
        let n = self.packs.len() as u32;
        self.packs.push(id);
        self.pack_numbers.insert(id, n);
        n
    }

    /// Adds the blobs of one pack (call [`Index::finish`] once all are in).
    pub fn add_pack(&mut self, pack: PackId, blobs: &[PackedBlob]) {
        let n = self.pack_number(pack);
        self.entries.reserve(blobs.len());
        for b in blobs {
            self.entries.push(Entry {
                id: b.id.0,
                pack: n,
                length: b.length,
                offset: b.offset,
                uncompressed_length: b.uncompressed_length.unwrap_or(0),
                blob_type: match b.blob_type {
                    BlobType::Data => 0,
                    BlobType::Tree => 1,
                },
            });
        }
        self.sorted = false;
    }

    /// Sorts the entries (stably: the first location found stays first), drops exact
    /// duplicates (a blob listed twice for the same pack and place) and frees the spare
    /// capacity. Returns how many blobs are stored in more than one pack.
    pub fn finish(&mut self) -> usize {
        self.entries.sort_by_key(|e| e.id);
        self.entries.dedup();
        self.entries.shrink_to_fit();
        self.pack_numbers.shrink_to_fit();
        self.sorted = true;
        self.entries.windows(2).filter(|w| w[0].id == w[1].id).count()
    }

    /// Every location of `id`, the first found first.
    pub fn find(&self, id: &BlobId) -> Vec<Location> {
        debug_assert!(self.sorted || self.entries.is_empty());
        let start = self.entries.partition_point(|e| e.id < id.0);
        self.entries[start..]
            .iter()
            .take_while(|e| e.id == id.0)
            .map(|e| Location {
                pack: self.packs[e.pack as usize],
                blob: PackedBlob {
                    id: *id,
                    blob_type: if e.blob_type == 0 { BlobType::Data } else { BlobType::Tree },
                    offset: e.offset,
                    length: e.length,
                    uncompressed_length: (e.uncompressed_length != 0).then_some(e.uncompressed_length),
                },
            })
            .collect()
    }

    /// The pack ids, in the order first seen.
    pub fn packs(&self) -> &[PackId] {
        &self.packs
    }

    /// How many locations are indexed (a blob in two packs counts twice).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How many distinct blobs are indexed.
    pub fn blob_count(&self) -> usize {
        self.entries.len() - self.entries.windows(2).filter(|w| w[0].id == w[1].id).count()
    }

    /// Every distinct blob id with its type, in id order.
    pub fn blobs(&self) -> impl Iterator<Item = (BlobId, BlobType)> + '_ {
        let mut last: Option<[u8; 32]> = None;
        self.entries.iter().filter_map(move |e| {
            if last == Some(e.id) {
                return None;
            }
            last = Some(e.id);
            Some((Id(e.id), if e.blob_type == 0 { BlobType::Data } else { BlobType::Tree }))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_finds() {
        let a = "a".repeat(64);
        let b = "b".repeat(64);
        let p = "c".repeat(64);
        let json = format!(
            r#"{{"supersedes":null,"packs":[{{"id":"{p}","blobs":[
            {{"id":"{a}","type":"data","offset":0,"length":40}},
            {{"id":"{b}","type":"tree","offset":40,"length":50,"uncompressed_length":99}}]}}]}}"#
        );
        let f = parse_index(json.as_bytes()).unwrap();
        let legacy = format!(r#"[{{"id":"{p}","blobs":[{{"id":"{a}","type":"data","offset":0,"length":40}}]}}]"#);
        assert_eq!(parse_index(legacy.as_bytes()).unwrap().packs[0].1.len(), 1);
        let mut idx = Index::new();
        for (pack, blobs) in &f.packs {
            idx.add_pack(*pack, blobs);
            idx.add_pack(*pack, blobs);
        }
        assert_eq!(idx.finish(), 0);
        let loc = idx.find(&Id::parse(&b).unwrap());
        assert_eq!(loc.len(), 1);
        assert_eq!(loc[0].blob.uncompressed_length, Some(99));
        assert_eq!(loc[0].blob.blob_type, BlobType::Tree);
        assert!(idx.find(&Id([0; 32])).is_empty());
        assert_eq!(idx.blob_count(), 2);
        assert!(parse_index(br#"{"packs":[{"id":"zz","blobs":[]}]}"#).is_err());
        assert!(parse_index(br#"{"packs":[{"id":"{p}","blobs":[{"type":"x"}]}]}"#).is_err());
        assert_eq!(std::mem::size_of::<Entry>(), 56);
    }
}
