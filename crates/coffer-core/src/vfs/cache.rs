//! A bounded cache weighed in bytes, evicting the least recently used entry
//! first: the mount's tree and blob caches. See docs/design.md#mount.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use crate::id::Id;

/// Values kept by [`Id`], at most `limit` bytes in all (an entry larger than
/// the limit is not kept).
pub struct Bounded<T> {
    limit: usize,
    used: usize,
    clock: u64,
    map: HashMap<Id, (Arc<T>, usize, u64)>,
    /// Uses in order, oldest first; a use superseded by a later one is skipped
    /// when evicting.
    order: VecDeque<(Id, u64)>,
}

impl<T> Bounded<T> {
    /// An empty cache holding at most `limit` bytes.
    pub fn new(limit: usize) -> Self {
        Bounded { limit, used: 0, clock: 0, map: HashMap::new(), order: VecDeque::new() }
    }

    /// The value of `id`, marked as used now.
    pub fn get(&mut self, id: &Id) -> Option<Arc<T>> {
        self.clock += 1;
        let clock = self.clock;
        let (v, _, stamp) = self.map.get_mut(id)?;
        *stamp = clock;
        let v = v.clone();
        self.order.push_back((*id, clock));
        self.compact();
        Some(v)
    }

    /// Keeps `value` (weighing `weight` bytes), evicting the least recently used.
    pub fn insert(&mut self, id: Id, value: Arc<T>, weight: usize) {
        if weight > self.limit {
            return;
        }
        self.clock += 1;
        if let Some((_, w, _)) = self.map.insert(id, (value, weight, self.clock)) {
            self.used -= w;
        }
        self.used += weight;
        self.order.push_back((id, self.clock));
        while self.used > self.limit {
            let Some((old, stamp)) = self.order.pop_front() else { break };
            if self.map.get(&old).is_some_and(|(_, _, s)| *s == stamp)
                && let Some((_, w, _)) = self.map.remove(&old)
            {
                self.used -= w;
            }
        }
        self.compact();
    }

    /// Bytes held.
    pub fn used(&self) -> usize {
        self.used
    }

    /// Drops superseded uses once they outnumber the entries.
    fn compact(&mut self) {
        if self.order.len() > 4 * self.map.len() + 64 {
            let map = &self.map;
            self.order.retain(|(id, stamp)| map.get(id).is_some_and(|(_, _, s)| s == stamp));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_least_recently_used_within_limit() {
        let mut c = Bounded::new(100);
        let (a, b, d) = (Id([1; 32]), Id([2; 32]), Id([3; 32]));
        c.insert(a, Arc::new(1), 40);
        c.insert(b, Arc::new(2), 40);
        assert!(c.get(&a).is_some());
        c.insert(d, Arc::new(3), 40);
        assert_eq!(c.used(), 80);
        assert!(c.get(&b).is_none(), "b was used least recently");
        assert!(c.get(&a).is_some() && c.get(&d).is_some());
        c.insert(Id([4; 32]), Arc::new(4), 101);
        assert!(c.get(&Id([4; 32])).is_none(), "larger than the whole cache");
        for _ in 0..1000 {
            c.get(&a);
        }
        assert!(c.order.len() <= 4 * c.map.len() + 64);
    }
}
