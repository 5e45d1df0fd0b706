//! Sealed pack ranges kept in memory for one command: the [`RangeCache`] of a
//! remote repository opened without a local cache (`--no-cache`, or a cache
//! that cannot be opened), so that a walk of a snapshot's trees still reads
//! each run of neighbouring tree blobs once rather than one request per tree
//! (docs/design.md#local-cache). Bounded: past its budget, the ranges kept
//! longest are forgotten first.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use super::RangeCache;

/// The budget of a [`MemoryRanges`] when none is given: two runs of tree blobs
/// at the most one request reads.
pub const DEFAULT_MEMORY_RANGES: u64 = 16 << 20;

type Key = (String, u64, u64);

/// Ranges in a map, oldest first in a queue; gone when the value is dropped.
pub struct MemoryRanges {
    budget: u64,
    kept: Mutex<Kept>,
}

#[derive(Default)]
struct Kept {
    ranges: HashMap<Key, Vec<u8>>,
    order: VecDeque<Key>,
    bytes: u64,
}

impl MemoryRanges {
    /// An empty store that holds at most `budget` bytes.
    pub fn new(budget: u64) -> MemoryRanges {
        MemoryRanges { budget, kept: Mutex::new(Kept::default()) }
    }

    /// Bytes held now.
    pub fn bytes(&self) -> u64 {
        self.kept().bytes
    }

    fn kept(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Kept {
    fn remove(&mut self, key: &Key) {
        if let Some(b) = self.ranges.remove(key) {
            self.bytes -= b.len() as u64;
        }
    }
}

impl RangeCache for MemoryRanges {
    fn get_range(&self, name: &str, offset: u64, len: u64) -> Option<Vec<u8>> {
        self.kept().ranges.get(&(name.to_string(), offset, len)).cloned()
    }

    fn put_range(&self, name: &str, offset: u64, bytes: &[u8]) {
        let len = bytes.len() as u64;
        if len > self.budget {
            return;
        }
        let key = (name.to_string(), offset, len);
        let mut kept = self.kept();
        if kept.ranges.contains_key(&key) {
            return;
        }
        while kept.bytes + len > self.budget {
            let Some(oldest) = kept.order.pop_front() else { break };
            kept.remove(&oldest);
        }
        kept.bytes += len;
        kept.ranges.insert(key.clone(), bytes.to_vec());
        kept.order.push_back(key);
    }

    fn drop_range(&self, name: &str, offset: u64, len: u64) {
        // Its place in the queue stays until it comes up: removing a missing key is nothing.
        self.kept().remove(&(name.to_string(), offset, len));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_served_exactly_and_the_oldest_go_past_the_budget() {
        let m = MemoryRanges::new(10);
        m.put_range("data/ab", 0, &[1; 4]);
        m.put_range("data/ab", 4, &[2; 4]);
        assert_eq!(m.get_range("data/ab", 0, 4), Some(vec![1; 4]));
        assert_eq!(m.get_range("data/ab", 0, 3), None, "a range is served only as kept");
        assert_eq!(m.get_range("data/cd", 0, 4), None);
        m.put_range("data/ab", 8, &[3; 4]);
        assert_eq!(m.get_range("data/ab", 0, 4), None, "the oldest made room");
        assert_eq!(m.get_range("data/ab", 4, 4), Some(vec![2; 4]));
        assert_eq!(m.bytes(), 8);
        m.put_range("data/ab", 12, &[4; 11]);
        assert_eq!(m.bytes(), 8, "a range larger than the budget is not kept");
        m.drop_range("data/ab", 4, 4);
        assert_eq!(m.get_range("data/ab", 4, 4), None);
        assert_eq!(m.bytes(), 4);
        m.put_range("data/ab", 4, &[5; 4]);
        m.put_range("data/ab", 16, &[6; 2]);
        assert_eq!(m.bytes(), 10, "a dropped range's stale place in the queue frees nothing twice");
        assert_eq!(m.get_range("data/ab", 4, 4), Some(vec![5; 4]));
    }
}
