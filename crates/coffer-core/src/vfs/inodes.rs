//! Inode numbers of the entries inside snapshots, and the few records the
//! mount keeps to serve them: one per directory the kernel holds something in,
//! none per file. See docs/design.md#mount ("Inode numbers").
//!
//! An entry's inode number is its position: the *slot* of the directory
//! holding it and its index in that directory's listing (parts included, in
//! order). From the number alone the entry is found again in its directory's
//! tree, which the bounded tree cache holds or reloads, so nothing per entry is
//! kept however many entries the kernel holds. A slot is kept while the kernel
//! holds the directory itself or anything inside it, counted by lookups and
//! `forget`s, and is then reused. Hard-linked files are the exception: they
//! share a number derived from their recorded inode, and each such number maps
//! to one position while the kernel holds it.

use std::collections::HashMap;
use std::sync::Arc;

use crate::id::Id;

use super::Ino;

/// Inode numbers with this bit are positions; the others are hashes (which
/// clear it) or the fixed numbers of the layout.
const POSITIONAL: u64 = 1 << 63;
/// Bits of the position within a directory (68 billion entries).
const POS_BITS: u32 = 36;
/// Bits of the slot number (134 million directories held at once).
const SLOT_BITS: u32 = 63 - POS_BITS;

/// The inode number of entry `pos` of the directory in `slot`, if both fit.
pub fn positional(slot: u32, pos: u64) -> Option<Ino> {
    (u64::from(slot) < (1 << SLOT_BITS) && pos < (1 << POS_BITS))
        .then_some(POSITIONAL | (u64::from(slot) << POS_BITS) | pos)
}

/// The slot and position an inode number names, if it is positional.
pub fn position(ino: Ino) -> Option<(u32, u64)> {
    (ino & POSITIONAL != 0).then_some((((ino & !POSITIONAL) >> POS_BITS) as u32, ino & ((1 << POS_BITS) - 1)))
}

/// A directory's listing parts when it is a split listing: the id of each
/// listing part reached, the position of its first entry and its first name.
pub struct Leaf {
    pub id: Id,
    pub start: u64,
    pub first: Box<[u8]>,
}

/// A directory whose entries have positional inode numbers.
pub struct Slot {
    /// The directory's own inode number.
    pub ino: Ino,
    /// Its tree.
    pub tree: Id,
    /// The snapshot root directory's inode (hard links are grouped within it).
    pub root: Ino,
    /// A snapshot root: kept for the life of the mount.
    permanent: bool,
    /// Kernel references to the directory itself.
    own: u64,
    /// Kernel references to entries inside it, and hard links resolved through it.
    inside: u64,
    /// Open listing handles.
    opens: u64,
    /// The listing parts, once a split listing was located in.
    pub leaves: Option<Arc<Vec<Leaf>>>,
}

/// A hard-linked file the kernel holds: where it was found.
struct Link {
    slot: u32,
    pos: u64,
    lookups: u64,
}

/// How a directory is kept.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Keep {
    /// For the life of the mount (snapshot roots).
    Always,
    /// While the kernel holds it or something inside it.
    Counted,
}

/// The directories and hard links the kernel holds something of.
#[derive(Default)]
pub struct Slots {
    slots: Vec<Option<Slot>>,
    free: Vec<u32>,
    by_ino: HashMap<Ino, u32>,
    links: HashMap<Ino, Link>,
}

/// What the table holds, for tests and `-v`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held {
    /// Directory records (snapshot roots included).
    pub dirs: usize,
    /// Hard-linked files the kernel holds.
    pub links: usize,
}

impl Slots {
    pub fn get(&self, slot: u32) -> Option<&Slot> {
        self.slots.get(slot as usize)?.as_ref()
    }

    pub fn get_mut(&mut self, slot: u32) -> Option<&mut Slot> {
        self.slots.get_mut(slot as usize)?.as_mut()
    }

    /// The slot of directory `ino`, if it has one.
    pub fn of_dir(&self, ino: Ino) -> Option<u32> {
        self.by_ino.get(&ino).copied()
    }

    /// Where hard link `ino` was found.
    pub fn link(&self, ino: Ino) -> Option<(u32, u64)> {
        self.links.get(&ino).map(|l| (l.slot, l.pos))
    }

    /// The slot of directory `ino` (tree `tree`), made if it has none. None
    /// when every slot number is in use.
    pub fn dir(&mut self, ino: Ino, tree: Id, root: Ino, keep: Keep) -> Option<u32> {
        if let Some(s) = self.of_dir(ino) {
            return Some(s);
        }
        let slot = Slot { ino, tree, root, permanent: keep == Keep::Always, own: 0, inside: 0, opens: 0, leaves: None };
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = Some(slot);
                i
            }
            None => {
                let i = u32::try_from(self.slots.len()).ok().filter(|i| positional(*i, 0).is_some())?;
                self.slots.push(Some(slot));
                i
            }
        };
        self.by_ino.insert(ino, i);
        Some(i)
    }

    /// The kernel took a reference to entry `ino` at `pos` of `slot`; `dir`
    /// is the entry's own slot when it is a directory.
    pub fn looked_up(&mut self, ino: Ino, slot: u32, pos: u64, dir: Option<u32>) {
        let mut holder = slot;
        if position(ino).is_none() {
            let link = self.links.entry(ino).or_insert(Link { slot, pos, lookups: 0 });
            link.lookups += 1;
            holder = link.slot;
        }
        if let Some(s) = self.get_mut(holder) {
            s.inside += 1;
        }
        if let Some(s) = dir.and_then(|d| self.get_mut(d)) {
            s.own += 1;
        }
    }

    /// The kernel dropped `n` references to `ino`.
    pub fn forget(&mut self, ino: Ino, n: u64) {
        let holder = match position(ino) {
            Some((slot, _)) => slot,
            None => {
                let Some(link) = self.links.get_mut(&ino) else { return };
                link.lookups = link.lookups.saturating_sub(n);
                let slot = link.slot;
                if link.lookups == 0 {
                    self.links.remove(&ino);
                }
                slot
            }
        };
        if let Some(d) = self.of_dir(ino) {
            if let Some(s) = self.get_mut(d) {
                s.own = s.own.saturating_sub(n);
            }
            self.release(d);
        }
        if let Some(s) = self.get_mut(holder) {
            s.inside = s.inside.saturating_sub(n);
        }
        self.release(holder);
    }

    /// A listing handle of `slot` was opened (`+1`) or closed (`-1`).
    pub fn opened(&mut self, slot: u32, open: bool) {
        if let Some(s) = self.get_mut(slot) {
            s.opens = if open { s.opens + 1 } else { s.opens.saturating_sub(1) };
        }
        if !open {
            self.release(slot);
        }
    }

    /// Frees `slot` if nothing refers to it any more.
    pub fn release(&mut self, slot: u32) {
        let Some(s) = self.get(slot) else { return };
        if s.permanent || s.own > 0 || s.inside > 0 || s.opens > 0 {
            return;
        }
        let ino = s.ino;
        self.by_ino.remove(&ino);
        self.slots[slot as usize] = None;
        self.free.push(slot);
    }

    pub fn held(&self) -> Held {
        Held { dirs: self.by_ino.len(), links: self.links.len() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_round_trip_and_stay_clear_of_hashes() {
        let ino = positional(5, 1234).unwrap();
        assert_eq!(position(ino), Some((5, 1234)));
        assert_eq!(position(u64::MAX >> 1), None);
        assert_eq!(positional(1 << SLOT_BITS, 0), None);
        assert_eq!(positional(0, 1 << POS_BITS), None);
        let last = positional((1 << SLOT_BITS) - 1, (1 << POS_BITS) - 1).unwrap();
        assert_eq!(last, u64::MAX);
    }

    #[test]
    fn slots_live_while_referenced_and_are_reused() {
        let mut t = Slots::default();
        let root = t.dir(7, Id([1; 32]), 7, Keep::Always).unwrap();
        // A directory at position 3 of the root, looked up twice.
        let d_ino = positional(root, 3).unwrap();
        let d = t.dir(d_ino, Id([2; 32]), 7, Keep::Counted).unwrap();
        t.looked_up(d_ino, root, 3, Some(d));
        t.looked_up(d_ino, root, 3, Some(d));
        // A file inside it.
        let f = positional(d, 0).unwrap();
        t.looked_up(f, d, 0, None);
        // A hard link found through it.
        t.looked_up(99, d, 1, None);
        assert_eq!(t.held(), Held { dirs: 2, links: 1 });
        t.forget(d_ino, 2);
        assert!(t.get(d).is_some(), "entries inside still held");
        t.forget(f, 1);
        assert!(t.get(d).is_some(), "the hard link still held");
        t.forget(99, 1);
        assert!(t.get(d).is_none());
        assert_eq!(t.held(), Held { dirs: 1, links: 0 });
        t.forget(d_ino, 1);
        assert!(t.get(root).is_some(), "roots are kept");
        let again = t.dir(positional(root, 4).unwrap(), Id([3; 32]), 7, Keep::Counted).unwrap();
        assert_eq!(again, d, "a freed slot is reused");
        t.opened(again, true);
        t.release(again);
        assert!(t.get(again).is_some(), "open handle keeps it");
        t.opened(again, false);
        assert!(t.get(again).is_none());
    }
}
