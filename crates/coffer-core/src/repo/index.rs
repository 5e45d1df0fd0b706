//! The in-memory master index: blob id -> where the blob lies.
//! See docs/design.md#in-memory-index.
//!
//! It answers "is this blob already stored?" for every chunk of a backup, so it
//! must stay small and fast however large the repository grows. Entries are kept
//! in one sorted array of fixed 48-byte records (full 32-byte id, pack number
//! with the type in its top bit, offset, length, raw length), with a 65 536-way
//! fan-out table over the first two id bytes: a lookup is a binary search over
//! about n / 65 536 records, and no general-purpose hash map of full entries
//! exists. A decision always compares the full id, never a prefix. Blobs added
//! during a run go to a small hash map first and are merged into the array in
//! bulk, so adding stays amortised O(1) per blob.
//!
//! Every location the index files give is kept: the array holds one per blob (the
//! copy served first), and the rare further copies (concurrent writers,
//! interrupted runs, an index file the storage replays after a prune) wait in a
//! side table, so that a read can fall back to them when a copy is bad.

use std::collections::HashMap;

use rayon::slice::ParallelSliceMut;

use crate::crypto::{Cipher, Epoch};
use crate::format::index::PackRecord;
use crate::format::pack::{BlobType, PackEntry};
use crate::id::Id;

/// A pack known to the index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackInfo {
    /// Pack id.
    pub id: Id,
    /// Salt of its key.
    pub salt: [u8; 32],
    /// Its cipher.
    pub cipher: Cipher,
    /// Epoch of the data key its key derives from.
    pub epoch: Epoch,
}

impl From<&PackRecord> for PackInfo {
    fn from(rec: &PackRecord) -> PackInfo {
        PackInfo { id: rec.id, salt: rec.salt, cipher: rec.cipher, epoch: rec.epoch }
    }
}

/// Where one blob lies; `pack` indexes [`MasterIndex::packs`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexEntry {
    /// Position of the pack in the pack table.
    pub pack: u32,
    /// The blob's placement, as in the pack header.
    pub entry: PackEntry,
}

/// Top bit of [`Record::pack`]: set for tree blobs.
const TREE_BIT: u32 = 1 << 31;
/// Session additions are merged into the sorted array once they number this many
/// (or an eighth of the array, whichever is larger).
const MERGE_THRESHOLD: usize = 1 << 16;
const FANOUT: usize = 1 << 16;

/// One index record: 48 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Record {
    id: Id,
    pack: u32,
    offset: u32,
    length: u32,
    raw_length: u32,
}

impl Record {
    fn new(pack: u32, e: &PackEntry) -> Result<Record, String> {
        let offset = u32::try_from(e.offset).map_err(|_| {
            format!("blob {} lies at offset {} beyond the 4 GiB a pack may hold", e.id.short(), e.offset)
        })?;
        let tree = if e.blob_type == BlobType::Tree { TREE_BIT } else { 0 };
        Ok(Record { id: e.id, pack: pack | tree, offset, length: e.length, raw_length: e.raw_length })
    }

    fn entry(&self) -> IndexEntry {
        let blob_type = if self.pack & TREE_BIT != 0 { BlobType::Tree } else { BlobType::Data };
        IndexEntry {
            pack: self.pack & !TREE_BIT,
            entry: PackEntry {
                blob_type,
                id: self.id,
                offset: self.offset as u64,
                length: self.length,
                raw_length: self.raw_length,
            },
        }
    }
}

/// Packs being added in bulk; see [`MasterIndex::bulk`].
pub(crate) struct BulkLoad<'a>(&'a mut MasterIndex);

impl BulkLoad<'_> {
    /// Adds the blobs of `recs`.
    pub(crate) fn add<'r>(&mut self, recs: impl IntoIterator<Item = &'r PackRecord>) -> Result<(), String> {
        self.0.push_packs(recs)
    }
}

impl Drop for BulkLoad<'_> {
    fn drop(&mut self) {
        self.0.rebuild();
    }
}

/// Whether two records place a blob at the same spot of the same pack.
fn same_place(a: &Record, b: &Record) -> bool {
    a.pack & !TREE_BIT == b.pack & !TREE_BIT && a.offset == b.offset
}

fn bucket(id: &Id) -> usize {
    (id.0[0] as usize) << 8 | id.0[1] as usize
}

/// All index files merged.
pub struct MasterIndex {
    sorted: Vec<Record>,
    /// `sorted[fanout[b]..fanout[b + 1]]` holds the ids whose first two bytes are `b`.
    fanout: Vec<u32>,
    recent: HashMap<Id, Record>,
    /// Further copies of blobs, besides the one in `sorted` or `recent`.
    extra: HashMap<Id, Vec<Record>>,
    packs: Vec<PackInfo>,
    pack_pos: HashMap<Id, u32>,
    /// By pack number: whether the storage does not hold the pack (see
    /// [`MasterIndex::set_stored_packs`]).
    absent: Vec<bool>,
}

impl Default for MasterIndex {
    fn default() -> Self {
        MasterIndex {
            sorted: Vec::new(),
            fanout: vec![0; FANOUT + 1],
            recent: HashMap::new(),
            extra: HashMap::new(),
            packs: Vec::new(),
            pack_pos: HashMap::new(),
            absent: Vec::new(),
        }
    }
}

impl MasterIndex {
    fn pack_number(&mut self, rec: &PackRecord) -> Result<u32, String> {
        if let Some(&pos) = self.pack_pos.get(&rec.id) {
            return Ok(pos);
        }
        let pos = u32::try_from(self.packs.len()).ok().filter(|p| p & TREE_BIT == 0).ok_or("too many packs")?;
        self.packs.push(PackInfo::from(rec));
        self.pack_pos.insert(rec.id, pos);
        Ok(pos)
    }

    /// Records `r` as a further copy of its blob, unless it is known already.
    fn add_copy(extra: &mut HashMap<Id, Vec<Record>>, first: &Record, r: Record) {
        if same_place(first, &r) {
            return;
        }
        let copies = extra.entry(r.id).or_default();
        if !copies.iter().any(|c| same_place(c, &r)) {
            copies.push(r);
        }
    }

    /// Adds the blobs of one pack written during this run.
    pub fn add_pack(&mut self, rec: &PackRecord) -> Result<(), String> {
        let pos = self.pack_number(rec)?;
        for e in &rec.entries {
            let r = Record::new(pos, e)?;
            if let Some(slot) = self.slot(&e.id) {
                // A copy in a pack that is gone gives way to this one.
                if self.is_absent(&self.sorted[slot]) {
                    let old = std::mem::replace(&mut self.sorted[slot], r);
                    Self::add_copy(&mut self.extra, &r, old);
                } else {
                    Self::add_copy(&mut self.extra, &self.sorted[slot], r);
                }
            } else if let Some(first) = self.recent.get(&e.id).copied() {
                Self::add_copy(&mut self.extra, &first, r);
            } else {
                self.recent.insert(e.id, r);
            }
        }
        if self.recent.len() > MERGE_THRESHOLD.max(self.sorted.len() / 8) {
            self.merge_recent();
        }
        Ok(())
    }

    /// Adds many packs at once (loading index files): one sort for all of them.
    pub fn add_packs<'a>(&mut self, recs: impl IntoIterator<Item = &'a PackRecord>) -> Result<(), String> {
        let mut bulk = self.bulk(0);
        bulk.add(recs)
    }

    /// Starts adding many packs in several steps, with room for `expected`
    /// records if that much memory can be had; the lookup structures are rebuilt once, when the returned
    /// [`BulkLoad`] is dropped (also on error, so the index stays consistent).
    pub(crate) fn bulk(&mut self, expected: usize) -> BulkLoad<'_> {
        self.merge_recent();
        // A hint from object sizes the storage reports: if it cannot be had, the
        // array grows as records come.
        let _ = self.sorted.try_reserve_exact(expected);
        BulkLoad(self)
    }

    fn push_packs<'a>(&mut self, recs: impl IntoIterator<Item = &'a PackRecord>) -> Result<(), String> {
        for rec in recs {
            let pos = self.pack_number(rec)?;
            for e in &rec.entries {
                self.sorted.push(Record::new(pos, e)?);
            }
        }
        Ok(())
    }

    fn merge_recent(&mut self) {
        if self.recent.is_empty() {
            return;
        }
        self.sorted.extend(self.recent.drain().map(|(_, r)| r));
        self.rebuild();
    }

    fn rebuild(&mut self) {
        // Several copies of a blob (concurrent writers, interrupted runs) hold the same
        // plaintext: the one of the pack loaded first is served, the others are kept
        // aside for reads to fall back to.
        self.sorted.par_sort_unstable_by_key(|a| (a.id, a.pack & !TREE_BIT, a.offset));
        let mut kept = 0;
        for i in 0..self.sorted.len() {
            let r = self.sorted[i];
            if kept > 0 && self.sorted[kept - 1].id == r.id {
                Self::add_copy(&mut self.extra, &self.sorted[kept - 1], r);
            } else {
                self.sorted[kept] = r;
                kept += 1;
            }
        }
        self.sorted.truncate(kept);
        self.sorted.shrink_to_fit();
        let mut b = 0;
        for (i, r) in self.sorted.iter().enumerate() {
            let rb = bucket(&r.id);
            while b <= rb {
                self.fanout[b] = i as u32;
                b += 1;
            }
        }
        while b <= FANOUT {
            self.fanout[b] = self.sorted.len() as u32;
            b += 1;
        }
    }

    fn find_sorted(&self, id: &Id) -> Option<&Record> {
        let b = bucket(id);
        let slice = &self.sorted[self.fanout[b] as usize..self.fanout[b + 1] as usize];
        slice.binary_search_by(|r| r.id.cmp(id)).ok().map(|i| &slice[i])
    }

    fn find(&self, id: &Id) -> Option<&Record> {
        self.find_sorted(id).or_else(|| self.recent.get(id))
    }

    /// The position of blob `id` among the sorted records (`0..len()`), for
    /// per-blob bitmaps; `None` if absent or added since the last merge.
    pub fn slot(&self, id: &Id) -> Option<usize> {
        let b = bucket(id);
        let (lo, hi) = (self.fanout[b] as usize, self.fanout[b + 1] as usize);
        self.sorted[lo..hi].binary_search_by(|r| r.id.cmp(id)).ok().map(|i| lo + i)
    }

    /// Merges blobs added one pack at a time into the sorted records.
    pub fn merge(&mut self) {
        self.merge_recent();
    }

    /// The location of blob `id`: the copy served first.
    pub fn get(&self, id: &Id) -> Option<(IndexEntry, &PackInfo)> {
        let e = self.find(id)?.entry();
        Some((e, &self.packs[e.pack as usize]))
    }

    /// Every location of blob `id` the index files give, the one [`get`](Self::get)
    /// returns first.
    pub fn copies(&self, id: &Id) -> Vec<(IndexEntry, &PackInfo)> {
        let Some(first) = self.find(id) else { return Vec::new() };
        std::iter::once(first)
            .chain(self.extra.get(id).into_iter().flatten())
            .map(|r| {
                let e = r.entry();
                (e, &self.packs[e.pack as usize])
            })
            .collect()
    }

    /// Number of blobs with more than one indexed copy.
    pub fn blobs_with_copies(&self) -> usize {
        self.extra.len()
    }

    fn is_absent(&self, r: &Record) -> bool {
        self.absent.get((r.pack & !TREE_BIT) as usize).copied().unwrap_or(false)
    }

    /// Whether blob `id` of `blob_type` is stored, in a pack the storage holds (as
    /// far as [`set_stored_packs`](Self::set_stored_packs) was told). Compares the
    /// full id.
    pub fn contains(&self, id: &Id, blob_type: BlobType) -> bool {
        self.find(id).is_some_and(|r| (r.pack & TREE_BIT != 0) == (blob_type == BlobType::Tree) && !self.is_absent(r))
    }

    /// Tells the index which packs the storage holds: a blob served from a pack it
    /// does not hold is served from another copy if one lies in a stored pack, and
    /// a blob with no such copy no longer counts as stored for
    /// [`contains`](Self::contains) (so a backup stores it again rather than refer
    /// to a pack that is gone, for example one an index file the storage replayed
    /// still lists). [`get`](Self::get) still finds it, so a read names the missing pack.
    pub fn set_stored_packs(&mut self, stored: &std::collections::HashSet<Id>) {
        self.merge_recent();
        self.absent = self.packs.iter().map(|p| !stored.contains(&p.id)).collect();
        let absent = |r: &Record| self.absent[(r.pack & !TREE_BIT) as usize];
        let mut swaps = Vec::new();
        for (id, copies) in &self.extra {
            let Some(slot) = self.slot(id) else { continue };
            if absent(&self.sorted[slot])
                && let Some(i) = copies.iter().position(|c| !absent(c))
            {
                swaps.push((*id, slot, i));
            }
        }
        for (id, slot, i) in swaps {
            let copies = self.extra.get_mut(&id).expect("listed above");
            std::mem::swap(&mut self.sorted[slot], &mut copies[i]);
        }
    }

    /// Number of indexed blobs.
    pub fn len(&self) -> usize {
        self.sorted.len() + self.recent.len()
    }

    /// Whether nothing is indexed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether an index file loaded lists pack `id`.
    pub fn has_pack(&self, id: &Id) -> bool {
        self.pack_pos.contains_key(id)
    }

    /// Every indexed pack.
    pub fn packs(&self) -> &[PackInfo] {
        &self.packs
    }

    /// Every indexed blob with its location, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = IndexEntry> + '_ {
        self.sorted.iter().chain(self.recent.values()).map(Record::entry)
    }

    /// Bytes of memory the blob records take (the pack table aside).
    pub fn memory_bytes(&self) -> usize {
        self.sorted.capacity() * std::mem::size_of::<Record>()
            + self.fanout.capacity() * 4
            + self.extra.values().map(|c| c.capacity() * std::mem::size_of::<Record>() + 64).sum::<usize>()
            + self.recent.capacity() * (std::mem::size_of::<Record>() + std::mem::size_of::<Id>() + 8)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(pack_seed: u8, ids: &[Id]) -> PackRecord {
        PackRecord {
            id: Id([pack_seed; 32]),
            salt: [0; 32],
            cipher: Cipher::Aes256Gcm,
            epoch: 0,
            entries: ids
                .iter()
                .enumerate()
                .map(|(i, id)| PackEntry {
                    blob_type: if i % 3 == 0 { BlobType::Tree } else { BlobType::Data },
                    id: *id,
                    offset: i as u64 * 100,
                    length: 50 + i as u32,
                    raw_length: 70 + i as u32,
                })
                .collect(),
        }
    }

    fn ids(n: usize, seed: u8) -> Vec<Id> {
        (0..n).map(|i| Id::hash_of(&[seed, (i >> 16) as u8, (i >> 8) as u8, i as u8])).collect()
    }

    #[test]
    fn bulk_and_incremental_agree() {
        let a = ids(5000, 1);
        let b = ids(70_000, 2);
        let mut idx = MasterIndex::default();
        idx.add_packs([&record(1, &a)]).unwrap();
        idx.add_pack(&record(2, &b)).unwrap(); // crosses the merge threshold
        assert_eq!(idx.len(), a.len() + b.len());
        for (i, id) in a.iter().enumerate() {
            let (e, p) = idx.get(id).unwrap();
            assert_eq!(p.id, Id([1; 32]));
            assert_eq!(e.entry.offset, i as u64 * 100);
            let t = if i % 3 == 0 { BlobType::Tree } else { BlobType::Data };
            assert!(idx.contains(id, t));
        }
        for (i, id) in b.iter().enumerate() {
            assert_eq!(idx.get(id).unwrap().0.entry.raw_length, 70 + i as u32);
        }
        // Unknown ids, including one that shares a long prefix with a known id.
        let mut near = a[7];
        near.0[31] ^= 1;
        assert!(idx.get(&near).is_none());
        assert!(!idx.contains(&Id([9; 32]), BlobType::Data));
        assert_eq!(idx.iter().count(), idx.len());
    }

    #[test]
    fn duplicates_are_kept_once() {
        let a = ids(10, 3);
        let mut idx = MasterIndex::default();
        idx.add_packs([&record(1, &a), &record(2, &a)]).unwrap();
        assert_eq!(idx.len(), 10);
        idx.add_pack(&record(3, &a)).unwrap();
        assert_eq!(idx.len(), 10);
        assert_eq!(idx.packs().len(), 3);
    }

    /// Every copy the index files give is kept, the first loaded served first; the
    /// same pack listed twice is one copy.
    #[test]
    fn every_copy_is_kept() {
        let a = ids(10, 3);
        let mut idx = MasterIndex::default();
        idx.add_packs([&record(1, &a), &record(2, &a), &record(1, &a)]).unwrap();
        idx.add_pack(&record(3, &a)).unwrap();
        idx.add_pack(&record(3, &a)).unwrap();
        idx.merge();
        for id in &a {
            let packs: Vec<Id> = idx.copies(id).iter().map(|(_, p)| p.id).collect();
            assert_eq!(packs, [Id([1; 32]), Id([2; 32]), Id([3; 32])]);
            assert_eq!(idx.get(id).unwrap().1.id, Id([1; 32]));
        }
        assert_eq!(idx.blobs_with_copies(), 10);
        assert!(idx.copies(&Id([9; 32])).is_empty());
    }

    /// A copy in a pack the storage lacks gives way to one it holds; a blob with
    /// no copy left does not count as stored, but is still found.
    #[test]
    fn copies_in_absent_packs_give_way() {
        let a = ids(4, 5);
        let only = ids(2, 6);
        let mut idx = MasterIndex::default();
        let mut old = record(1, &a);
        old.entries.extend(record(1, &only).entries.into_iter().map(|mut e| {
            e.offset += 10_000;
            e
        }));
        idx.add_packs([&old, &record(2, &a)]).unwrap();
        assert_eq!(idx.get(&a[0]).unwrap().1.id, Id([1; 32]));
        idx.set_stored_packs(&[Id([2; 32])].into_iter().collect());
        for (i, id) in a.iter().enumerate() {
            assert_eq!(idx.get(id).unwrap().1.id, Id([2; 32]));
            let t = if i % 3 == 0 { BlobType::Tree } else { BlobType::Data };
            assert!(idx.contains(id, t));
        }
        let t = BlobType::Tree;
        assert!(!idx.contains(&only[0], t));
        assert_eq!(idx.get(&only[0]).unwrap().1.id, Id([1; 32]));
        // Stored again during a run, it counts as stored, served from the new copy.
        idx.add_pack(&record(3, &only[..1])).unwrap();
        assert!(idx.contains(&only[0], t));
        assert_eq!(idx.get(&only[0]).unwrap().1.id, Id([3; 32]));
        assert_eq!(idx.copies(&only[0]).len(), 2);
    }

    #[test]
    fn offsets_beyond_u32_are_refused() {
        let mut r = record(1, &ids(1, 4));
        r.entries[0].offset = 1 << 33;
        assert!(MasterIndex::default().add_packs([&r]).is_err());
    }

    #[test]
    fn records_are_48_bytes() {
        assert_eq!(std::mem::size_of::<Record>(), 48);
    }
}
