//! Tree blobs kept in memory once read and checked, within a byte budget, so that an
//! import reads each tree once: the walk that counts or feeds a snapshot and the walk
//! that stores it list the same directories, and the snapshots of one history share
//! most of their trees. What is kept is a tree's JSON (its plaintext, authenticated and
//! hashed to its id); the least recently used is dropped when the budget is reached.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::id::BlobId;

/// The trees' bytes kept at most, unless set otherwise: 64 MiB, the trees of a few
/// hundred thousand files.
pub const DEFAULT_TREE_CACHE: u64 = 64 << 20;

/// A bounded cache of tree blobs' plaintext by id.
#[derive(Debug)]
pub struct TreeCache {
    budget: u64,
    used: u64,
    tick: u64,
    map: HashMap<BlobId, (Arc<Vec<u8>>, u64)>,
    by_use: BTreeMap<u64, BlobId>,
}

impl TreeCache {
    pub fn new(budget: u64) -> TreeCache {
        TreeCache { budget, used: 0, tick: 0, map: HashMap::new(), by_use: BTreeMap::new() }
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

    /// The tree `id`, counted as used now.
    pub fn get(&mut self, id: &BlobId) -> Option<Arc<Vec<u8>>> {
        self.tick += 1;
        let (data, at) = self.map.get_mut(id)?;
        self.by_use.remove(at);
        *at = self.tick;
        self.by_use.insert(self.tick, *id);
        Some(data.clone())
    }

    /// Keeps `data` as the tree `id`, dropping the least recently used to make room; a
    /// tree larger than the whole budget is not kept.
    pub fn insert(&mut self, id: BlobId, data: Arc<Vec<u8>>) {
        let len = data.len() as u64;
        if len > self.budget || self.map.contains_key(&id) {
            return;
        }
        self.evict(len);
        self.put(id, data);
    }

    /// Keeps `data` as the tree `id` only if it fits without dropping another (a
    /// read-ahead must not push out what it read a moment before); whether it is held.
    pub fn insert_if_room(&mut self, id: BlobId, data: Arc<Vec<u8>>) -> bool {
        if self.map.contains_key(&id) {
            return true;
        }
        if self.used + data.len() as u64 > self.budget {
            return false;
        }
        self.put(id, data);
        true
    }

    fn put(&mut self, id: BlobId, data: Arc<Vec<u8>>) {
        self.tick += 1;
        self.used += data.len() as u64;
        self.by_use.insert(self.tick, id);
        self.map.insert(id, (data, self.tick));
    }

    /// Drops the least recently used until `room` more bytes fit.
    fn evict(&mut self, room: u64) {
        while self.used + room > self.budget {
            let Some((_, id)) = self.by_use.pop_first() else { break };
            if let Some((data, _)) = self.map.remove(&id) {
                self.used -= data.len() as u64;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::restic::Id;

    fn t(n: u8, len: usize) -> (BlobId, Arc<Vec<u8>>) {
        (Id([n; 32]), Arc::new(vec![n; len]))
    }

    #[test]
    fn keeps_within_its_budget_dropping_the_least_recently_used() {
        let mut c = TreeCache::new(100);
        for n in 0..3 {
            let (id, d) = t(n, 40);
            c.insert(id, d);
        }
        // 0 was dropped for 2; 1 and 2 remain.
        assert_eq!(c.used(), 80);
        assert!(!c.contains(&Id([0; 32])));
        assert!(c.get(&Id([1; 32])).is_some());
        let (id, d) = t(3, 40);
        c.insert(id, d);
        assert!(c.contains(&Id([1; 32])), "used last, so kept");
        assert!(!c.contains(&Id([2; 32])));
        let (id, d) = t(4, 101);
        c.insert(id, d);
        assert!(!c.contains(&id), "larger than the budget: not kept");
        assert_eq!(c.used(), 80);
        let (id, d) = t(5, 30);
        assert!(!c.insert_if_room(id, d), "does not push another out");
        let (id, d) = t(6, 20);
        assert!(c.insert_if_room(id, d));
        assert_eq!(c.used(), 100);
        c.set_budget(50);
        assert!(c.used() <= 50);
    }
}
