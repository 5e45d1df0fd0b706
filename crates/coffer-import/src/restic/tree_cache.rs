//! Tree blobs kept in memory once read and checked, within a byte budget, so that an
//! import reads each tree once: the walk that counts or feeds a snapshot and the walk
//! that stores it list the same directories, and the snapshots of one history share
//! most of their trees. What is kept is a tree's JSON (its plaintext, authenticated and
//! hashed to its id), compressed again with zstd's fastest level (JSON of trees shrinks
//! several times, and decompresses at a gigabyte a second), counted at its compressed
//! size; the least recently used is dropped when the budget is reached.

use std::collections::{BTreeMap, HashMap};

use super::id::BlobId;

/// The trees' bytes kept at most, unless set otherwise: 64 MiB compressed, the trees
/// of a million files or more.
pub const DEFAULT_TREE_CACHE: u64 = 64 << 20;

/// zstd's level for trees kept: its fastest.
const LEVEL: i32 = 1;

/// A tree kept: its JSON compressed, and the JSON's length.
#[derive(Debug)]
struct Kept {
    packed: Vec<u8>,
    len: usize,
    at: u64,
}

/// A bounded cache of tree blobs' plaintext by id.
pub struct TreeCache {
    /// zstd's contexts, made once: a context per tree costs more than the tree.
    packer: Option<zstd::bulk::Compressor<'static>>,
    unpacker: Option<zstd::bulk::Decompressor<'static>>,
    budget: u64,
    used: u64,
    tick: u64,
    map: HashMap<BlobId, Kept>,
    by_use: BTreeMap<u64, BlobId>,
}

impl std::fmt::Debug for TreeCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TreeCache").field("budget", &self.budget).field("used", &self.used).finish()
    }
}

impl TreeCache {
    pub fn new(budget: u64) -> TreeCache {
        TreeCache {
            packer: zstd::bulk::Compressor::new(LEVEL).ok(),
            unpacker: zstd::bulk::Decompressor::new().ok(),
            budget,
            used: 0,
            tick: 0,
            map: HashMap::new(),
            by_use: BTreeMap::new(),
        }
    }

    /// The bytes held.
    pub fn used(&self) -> u64 {
        self.used
    }

    /// The budget.
    pub fn budget(&self) -> u64 {
        self.budget
    }

    /// Changes the budget, dropping what no longer fits.
    pub fn set_budget(&mut self, budget: u64) {
        self.budget = budget;
        self.evict(0);
    }

    /// Whether `id` is held (its use not counted).
    pub fn contains(&self, id: &BlobId) -> bool {
        self.map.contains_key(id)
    }

    /// The JSON of tree `id`, counted as used now.
    pub fn get(&mut self, id: &BlobId) -> Option<Vec<u8>> {
        self.tick += 1;
        let k = self.map.get_mut(id)?;
        self.by_use.remove(&k.at);
        k.at = self.tick;
        self.by_use.insert(self.tick, *id);
        self.unpacker.as_mut()?.decompress(&k.packed, k.len).ok().filter(|j| j.len() == k.len)
    }

    /// Keeps `json` as the tree `id`, dropping the least recently used to make room; a
    /// tree larger than the whole budget is not kept.
    pub fn insert(&mut self, id: BlobId, json: &[u8]) {
        if self.map.contains_key(&id) {
            return;
        }
        let Some(Ok(packed)) = self.packer.as_mut().map(|p| p.compress(json)) else { return };
        if packed.len() as u64 > self.budget {
            return;
        }
        self.evict(packed.len() as u64);
        self.put(id, packed, json.len());
    }

    /// Keeps `json` as the tree `id` only if it fits without dropping another (a
    /// read-ahead must not push out what it read a moment before); whether it is held.
    pub fn insert_if_room(&mut self, id: BlobId, json: &[u8]) -> bool {
        if self.map.contains_key(&id) {
            return true;
        }
        let Some(Ok(packed)) = self.packer.as_mut().map(|p| p.compress(json)) else { return false };
        if self.used + packed.len() as u64 > self.budget {
            return false;
        }
        self.put(id, packed, json.len());
        true
    }

    fn put(&mut self, id: BlobId, packed: Vec<u8>, len: usize) {
        self.tick += 1;
        self.used += packed.len() as u64;
        self.by_use.insert(self.tick, id);
        self.map.insert(id, Kept { packed, len, at: self.tick });
    }

    /// Drops the least recently used until `room` more bytes fit.
    fn evict(&mut self, room: u64) {
        while self.used + room > self.budget {
            let Some((_, id)) = self.by_use.pop_first() else { break };
            if let Some(k) = self.map.remove(&id) {
                self.used -= k.packed.len() as u64;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::restic::Id;

    /// `len` bytes that do not compress.
    fn noise(n: u8, len: usize) -> (BlobId, Vec<u8>) {
        let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ u64::from(n);
        let bytes = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        (Id([n; 32]), bytes)
    }

    #[test]
    fn keeps_within_its_budget_dropping_the_least_recently_used() {
        // Three trees of about 1,010 bytes compressed each in 2,500.
        let mut c = TreeCache::new(2500);
        for n in 0..3 {
            let (id, d) = noise(n, 1000);
            c.insert(id, &d);
        }
        assert!(!c.contains(&Id([0; 32])), "0 was dropped for 2");
        assert_eq!(c.get(&Id([1; 32])), Some(noise(1, 1000).1), "kept as it was");
        let (id, d) = noise(3, 1000);
        c.insert(id, &d);
        assert!(c.contains(&Id([1; 32])), "used last, so kept");
        assert!(!c.contains(&Id([2; 32])));
        let used = c.used();
        assert!(used <= 2500 && used > 2000, "{used}");
        let (id, d) = noise(4, 3000);
        c.insert(id, &d);
        assert!(!c.contains(&id), "larger than the budget: not kept");
        assert_eq!(c.used(), used);
        let (id, d) = noise(5, 700);
        assert!(!c.insert_if_room(id, &d), "does not push another out");
        let (id, d) = noise(6, 400);
        assert!(c.insert_if_room(id, &d));
        assert_eq!(c.get(&id), Some(d));
        c.set_budget(1500);
        assert!(c.used() <= 1500);
    }

    #[test]
    fn json_is_held_compressed() {
        let json = br#"{"nodes":[{"name":"a","type":"file","mode":420}]}"#.repeat(200);
        let mut c = TreeCache::new(1 << 20);
        c.insert(Id([1; 32]), &json);
        assert!(c.used() * 10 < json.len() as u64, "{} bytes for {}", c.used(), json.len());
        assert_eq!(c.get(&Id([1; 32])).unwrap(), json);
    }
}
