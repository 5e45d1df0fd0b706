//! Set reconciliation by invertible Bloom lookup tables (docs/design.md#server,
//! "Reconciliation"):
//! two parties holding sets of object ids learn the ids one holds and the
//! other lacks from a sketch whose size follows the size of the difference,
//! not of the sets. A sketch of `m` cells decodes a difference of up to
//! about `m / 1.5` ids; a larger difference fails to decode, and the caller
//! asks for a larger sketch.
//!
//! Everything here is pure: no storage, no clock, no randomness.

use crate::format::ObjectKind;
use crate::id::Id;

/// Bytes per encoded cell: count (i64 LE), id sum (32), check sum (u64 LE).
pub const CELL_LEN: usize = 48;
/// The most cells a sketch may have (6 MiB encoded).
pub const MAX_CELLS: usize = 1 << 17;
/// Hash functions (one cell in each third of the table).
const K: usize = 3;
const CONTEXT: &str = "coffer v2 reconciliation";

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Cell {
    count: i64,
    ids: [u8; 32],
    check: u64,
}

impl Cell {
    fn toggle(&mut self, id: &[u8; 32], check: u64, sign: i64) {
        self.count = self.count.wrapping_add(sign);
        self.ids.iter_mut().zip(id).for_each(|(a, b)| *a ^= b);
        self.check ^= check;
    }

    fn is_empty(&self) -> bool {
        self.count == 0 && self.check == 0 && self.ids == [0; 32]
    }
}

/// An invertible Bloom lookup table of ids.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sketch {
    cells: Vec<Cell>,
}

/// The cells `id` lands in, and its check value.
fn place(id: &[u8; 32], cells: usize) -> ([usize; K], u64) {
    let h = blake3::derive_key(CONTEXT, id);
    let third = cells / K;
    let word = |i: usize| u64::from_le_bytes(h[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
    let mut at = [0; K];
    for (i, a) in at.iter_mut().enumerate() {
        *a = i * third + (word(i) % third as u64) as usize;
    }
    (at, word(3))
}

/// The difference a sketch decoded to.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Difference {
    /// Ids in the first set only.
    pub only_first: Vec<Id>,
    /// Ids in the second set only.
    pub only_second: Vec<Id>,
}

impl Sketch {
    /// An empty sketch of about `cells` cells (rounded up to a multiple of 3,
    /// at least 3, at most [`MAX_CELLS`]).
    pub fn new(cells: usize) -> Sketch {
        let n = cells.clamp(K, MAX_CELLS).div_ceil(K) * K;
        Sketch { cells: vec![Cell::default(); n.min(MAX_CELLS / K * K)] }
    }

    /// A sketch of `ids`.
    pub fn of<'a>(cells: usize, ids: impl IntoIterator<Item = &'a Id>) -> Sketch {
        let mut s = Sketch::new(cells);
        ids.into_iter().for_each(|id| s.insert(id));
        s
    }

    /// The number of cells.
    pub fn cells(&self) -> usize {
        self.cells.len()
    }

    /// The number of ids sketched (of a difference: first minus second).
    pub fn count(&self) -> i64 {
        self.cells[..self.cells.len() / K].iter().fold(0i64, |a, c| a.wrapping_add(c.count))
    }

    /// Adds `id` (adding it twice is not removing it: sets hold each id once).
    pub fn insert(&mut self, id: &Id) {
        let (at, check) = place(&id.0, self.cells.len());
        at.iter().for_each(|&i| self.cells[i].toggle(&id.0, check, 1));
    }

    /// `count × 48` bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.cells.len() * CELL_LEN);
        for c in &self.cells {
            out.extend_from_slice(&c.count.to_le_bytes());
            out.extend_from_slice(&c.ids);
            out.extend_from_slice(&c.check.to_le_bytes());
        }
        out
    }

    /// Decodes a sketch of `cells` cells (as [`Sketch::new`] rounds them); the
    /// length is checked before anything is allocated.
    pub fn decode(bytes: &[u8], cells: usize) -> Result<Sketch, String> {
        let n = Sketch::new(cells).cells.len();
        if bytes.len() != n * CELL_LEN {
            return Err(format!("a sketch of {n} cells is {} bytes, not {}", n * CELL_LEN, bytes.len()));
        }
        let cells = bytes
            .chunks_exact(CELL_LEN)
            .map(|c| Cell {
                count: i64::from_le_bytes(c[..8].try_into().expect("8 bytes")),
                ids: c[8..40].try_into().expect("32 bytes"),
                check: u64::from_le_bytes(c[40..].try_into().expect("8 bytes")),
            })
            .collect();
        Ok(Sketch { cells })
    }

    /// The difference between the set sketched here (first) and the one
    /// sketched in `other` (second, of the same size), or `None` if the
    /// difference is too large for this many cells.
    pub fn difference(&self, other: &Sketch) -> Option<Difference> {
        if self.cells.len() != other.cells.len() {
            return None;
        }
        let mut cells: Vec<Cell> = self
            .cells
            .iter()
            .zip(&other.cells)
            .map(|(a, b)| {
                let mut c = *a;
                c.toggle(&b.ids, b.check, b.count.wrapping_neg());
                c
            })
            .collect();
        let mut d = Difference::default();
        let mut pure: Vec<usize> = (0..cells.len()).collect();
        let limit = cells.len() * 4;
        let mut found = 0;
        while let Some(i) = pure.pop() {
            let c = cells[i];
            if c.count != 1 && c.count != -1 {
                continue;
            }
            let (at, check) = place(&c.ids, cells.len());
            if check != c.check || !at.contains(&i) {
                continue;
            }
            let id = Id(c.ids);
            if c.count == 1 { &mut d.only_first } else { &mut d.only_second }.push(id);
            found += 1;
            if found > limit {
                return None;
            }
            for &j in &at {
                cells[j].toggle(&c.ids, check, -c.count);
                pure.push(j);
            }
        }
        if !cells.iter().all(Cell::is_empty) {
            return None;
        }
        d.only_first.sort();
        d.only_second.sort();
        Some(d)
    }
}

/// The kinds a server sketches: every content-named kind (docs/design.md#server,
/// "Reconciliation").
pub const SKETCHED: [ObjectKind; 8] = [
    ObjectKind::Key,
    ObjectKind::Pack,
    ObjectKind::Index,
    ObjectKind::Snapshot,
    ObjectKind::Tombstone,
    ObjectKind::Writer,
    ObjectKind::PruneNotice,
    ObjectKind::Layout,
];

/// The name a client reads for a sketch of `cells` cells (as [`Sketch::new`]
/// rounds them) of the ids of `kind` a server holds: `sync/<directory>/<cells>`.
pub fn request_name(kind: ObjectKind, cells: usize) -> String {
    format!("sync/{}{}", kind.prefix(), Sketch::new(cells).cells())
}

/// The kind and number of cells a `sync/` name asks for; `None` when the name
/// is not under `sync/`, an error naming the fault when it is malformed (an
/// unknown directory, a count that is not a multiple of 3 from 3 to
/// [`MAX_CELLS`], signs or leading zeros).
pub fn parse_request(name: &str) -> Option<Result<(ObjectKind, usize), String>> {
    let rest = name.strip_prefix("sync/")?;
    let parse = || {
        let (dir, n) = rest.rsplit_once('/').ok_or("a sketch is read as sync/<directory>/<cells>")?;
        let kind = SKETCHED
            .iter()
            .find(|k| k.prefix().strip_suffix('/') == Some(dir))
            .ok_or("no sketch is kept of that directory")?;
        let cells: usize = n
            .parse()
            .ok()
            .filter(|_| n.bytes().all(|b| b.is_ascii_digit()) && !n.starts_with('0'))
            .filter(|c| (K..=MAX_CELLS).contains(c) && c % K == 0)
            .ok_or("the number of cells must be a multiple of 3 from 3 to 131070")?;
        Ok((*kind, cells))
    };
    Some(parse().map_err(|e: &str| format!("{name}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(range: std::ops::Range<u32>) -> Vec<Id> {
        range.map(|i| Id(*blake3::hash(&i.to_le_bytes()).as_bytes())).collect()
    }

    #[test]
    fn small_differences_decode_from_a_sketch_of_their_size() {
        let shared = ids(0..100_000);
        let a: Vec<Id> = shared.iter().copied().chain(ids(200_000..200_040)).collect();
        let b: Vec<Id> = shared.iter().copied().chain(ids(300_000..300_060)).collect();
        let (sa, sb) = (Sketch::of(300, &a), Sketch::of(300, &b));
        let back = Sketch::decode(&sb.encode(), 300).unwrap();
        assert_eq!(back, sb);
        let d = sa.difference(&back).expect("100 differences in 300 cells");
        let mut want_a = ids(200_000..200_040);
        let mut want_b = ids(300_000..300_060);
        want_a.sort();
        want_b.sort();
        assert_eq!((d.only_first, d.only_second), (want_a, want_b));
        // Equal sets: an empty difference.
        assert_eq!(Sketch::of(30, &shared).difference(&Sketch::of(30, &shared)), Some(Difference::default()));
    }

    #[test]
    fn a_difference_too_large_fails_instead_of_lying() {
        let a = ids(0..1000);
        let b = ids(500..1500);
        assert_eq!(Sketch::of(300, &a).difference(&Sketch::of(300, &b)), None);
        assert!(Sketch::of(3000, &a).difference(&Sketch::of(3000, &b)).is_some());
    }

    #[test]
    fn a_sketch_counts_its_ids_and_a_difference_the_excess() {
        let (a, b) = (ids(0..1000), ids(0..960));
        assert_eq!(Sketch::of(30, &a).count(), 1000);
        let mut d = Sketch::of(30, &a);
        d.cells.iter_mut().zip(Sketch::of(30, &b).cells).for_each(|(x, y)| x.toggle(&y.ids, y.check, -y.count));
        assert_eq!(d.count(), 40);
    }

    #[test]
    fn request_names_round_trip_and_malformed_ones_are_refused() {
        for kind in SKETCHED {
            let name = request_name(kind, 100);
            assert_eq!(parse_request(&name), Some(Ok((kind, 102))), "{name}");
        }
        assert_eq!(request_name(ObjectKind::Pack, 96), "sync/data/96");
        assert_eq!(parse_request("index/00"), None);
        for bad in [
            "sync/index/0",
            "sync/index/4",
            "sync/index/096",
            "sync/index/+96",
            "sync/index/131073",
            "sync/sessions/96",
            "sync/config/96",
            "sync/index",
            "sync/../index/96",
        ] {
            assert!(matches!(parse_request(bad), Some(Err(_))), "{bad}");
        }
        assert_eq!(parse_request("sync/index/131070"), Some(Ok((ObjectKind::Index, 131_070))));
    }

    #[test]
    fn hostile_sketches_are_refused_or_fail_to_decode() {
        assert!(Sketch::decode(&[0; 47], 1).is_err());
        assert!(Sketch::decode(&[0; 48 * 4], 3).is_err());
        let mut junk = Sketch::of(30, &ids(0..5)).encode();
        junk.iter_mut().step_by(7).for_each(|b| *b ^= 0x5a);
        let junk = Sketch::decode(&junk, 30).unwrap();
        // Whatever it decodes to, it terminates, and only with ids that pass their checks.
        if let Some(d) = junk.difference(&Sketch::new(30)) {
            assert!(d.only_first.len() + d.only_second.len() <= 30 * 4);
        }
    }
}
