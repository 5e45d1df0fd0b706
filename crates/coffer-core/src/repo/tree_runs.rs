//! Tree blobs fetched pack-wide into the local cache: on a cache miss, the run of
//! tree blobs around the one asked for in its pack (the whole pack, for a tree
//! pack) is read in one request, and every tree blob in it that verifies is kept,
//! so that reading a snapshot's trees on a cold cache costs about one request per
//! tree pack rather than one per tree (docs/design.md#packs, "Tree packs";
//! docs/design.md#local-cache).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use coffer_backend::RangeCache;

use super::{PackInfo, Repository};
use crate::error::Result;
use crate::format::ObjectKind;
use crate::format::pack::{BlobType, PackEntry};
use crate::id::Id;

/// Bytes between two tree blobs of a pack up to which they are read together
/// (the same as `check`'s runs).
const MAX_GAP: u64 = 64 << 10;
/// Bytes read in one request at most.
const MAX_READ: u64 = 8 << 20;

/// Every pack's tree blobs, by pack id, sorted by offset.
type TreesByPack = Arc<HashMap<Id, Vec<PackEntry>>>;

/// The tree blobs of every indexed pack, by pack id, sorted by offset: built from
/// the index on the first cache miss; and a lock per pack, so that threads
/// missing trees of one pack at once read it once.
#[derive(Default)]
pub(crate) struct TreePlaces {
    by_pack: Mutex<Option<TreesByPack>>,
    reading: Mutex<HashMap<Id, Arc<Mutex<()>>>>,
}

impl Repository {
    /// The sealed bytes of tree `entry` in `pack`, on a cache miss: reads the run
    /// of tree blobs around it, keeps those that verify in `cache`, and returns
    /// its own bytes (verified by the caller, as any read).
    pub(crate) fn read_tree_run(&self, cache: &dyn RangeCache, pack: &PackInfo, entry: &PackEntry) -> Result<Vec<u8>> {
        let name = ObjectKind::Pack.path(&pack.id);
        let lock = {
            let mut reading = self.tree_places.reading.lock().expect("poisoned");
            reading.entry(pack.id).or_default().clone()
        };
        let _one_reader = match lock.try_lock() {
            Ok(g) => g,
            Err(_) => {
                let g = lock.lock().expect("poisoned");
                // The thread waited for may have read this tree with its run.
                if let Some(sealed) = cache.get_range(&name, entry.offset, entry.length as u64) {
                    return Ok(sealed);
                }
                g
            }
        };
        let trees = self.trees_by_pack();
        let run = trees.get(&pack.id).map(|t| run_around(t, entry)).unwrap_or_default();
        if run.len() <= 1 {
            return self.read_pack_range(pack, entry.offset, entry.length as u64);
        }
        let start = run[0].offset;
        let end = run.iter().map(|e| e.offset + e.length as u64).max().unwrap_or(start);
        let bytes = self.read_pack_range(pack, start, end - start)?;
        let slice = |e: &PackEntry| {
            let from = (e.offset - start) as usize;
            bytes.get(from..from + e.length as usize)
        };
        for e in &run {
            if e.id != entry.id
                && let Some(sealed) = slice(e)
                && self.decode_blob(pack, e, sealed).is_ok()
            {
                cache.put_range(&name, e.offset, sealed);
            }
        }
        Ok(slice(entry).map(<[u8]>::to_vec).unwrap_or_default())
    }

    /// Every indexed pack's tree blobs, sorted by offset (built once).
    fn trees_by_pack(&self) -> TreesByPack {
        let mut slot = self.tree_places.by_pack.lock().expect("poisoned");
        if let Some(m) = slot.as_ref() {
            return m.clone();
        }
        let index = self.index();
        let packs = index.packs();
        let mut m: HashMap<Id, Vec<PackEntry>> = HashMap::new();
        for e in index.iter().filter(|e| e.entry.blob_type == BlobType::Tree) {
            if let Some(p) = packs.get(e.pack as usize) {
                m.entry(p.id).or_default().push(e.entry);
            }
        }
        for v in m.values_mut() {
            v.sort_by_key(|e| e.offset);
        }
        let m = Arc::new(m);
        *slot = Some(m.clone());
        m
    }
}

/// The tree blobs of `trees` (one pack's, sorted by offset) read together with
/// `entry`: its neighbours within [`MAX_GAP`] of each other, at most
/// [`MAX_READ`] bytes from the first to the last. Empty if `entry` is not among
/// them.
fn run_around(trees: &[PackEntry], entry: &PackEntry) -> Vec<PackEntry> {
    let Some(i) = trees.iter().position(|e| e.offset == entry.offset && e.id == entry.id) else {
        return Vec::new();
    };
    let end_of = |e: &PackEntry| e.offset + e.length as u64;
    let (mut lo, mut hi) = (i, i);
    let (mut start, mut end) = (trees[i].offset, end_of(&trees[i]));
    loop {
        let mut grew = false;
        if let Some(next) = trees.get(hi + 1)
            && next.offset <= end + MAX_GAP
            && end_of(next).max(end) - start <= MAX_READ
        {
            hi += 1;
            end = end.max(end_of(next));
            grew = true;
        }
        if lo > 0 {
            let prev = &trees[lo - 1];
            if end_of(prev) + MAX_GAP >= start && end - prev.offset.min(start) <= MAX_READ {
                lo -= 1;
                start = start.min(prev.offset);
                grew = true;
            }
        }
        if !grew {
            break;
        }
    }
    trees[lo..=hi].to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(offset: u64, length: u32) -> PackEntry {
        PackEntry { blob_type: BlobType::Tree, id: Id([offset as u8; 32]), offset, length, raw_length: length }
    }

    #[test]
    fn a_run_takes_near_neighbours_up_to_the_read_limit() {
        let trees = [tree(0, 100), tree(100, 100), tree(200 + MAX_GAP + 1, 100), tree(MAX_READ * 2, 100)];
        let ids = |v: Vec<PackEntry>| v.iter().map(|e| e.offset).collect::<Vec<_>>();
        assert_eq!(ids(run_around(&trees, &trees[1])), [0, 100]);
        assert_eq!(ids(run_around(&trees, &trees[2])), [200 + MAX_GAP + 1]);
        assert_eq!(ids(run_around(&trees, &trees[3])), [MAX_READ * 2]);
        assert!(run_around(&trees, &tree(5, 1)).is_empty());
        let big: Vec<PackEntry> = (0..100).map(|i| tree(i * (1 << 20), 1 << 20)).collect();
        let run = run_around(&big, &big[50]);
        assert_eq!(run.len(), 8, "8 MiB of 1 MiB blobs");
        assert!(run.iter().any(|e| e.offset == 50 << 20));
    }
}
