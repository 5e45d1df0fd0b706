//! Planning range reads: which wanted blobs are read together, in one request.
//!
//! Over remote storage a request costs a round trip whatever its size, so blobs that lie
//! near each other in one pack are read with one range request: the wanted blobs are
//! sorted by pack and offset, and a blob joins the request before it when it is in the
//! same pack, starts at most [`PlanLimits::max_gap`] bytes after the request's end, and
//! the request stays within [`PlanLimits::max_request`] bytes (a blob longer than that is
//! a request of its own). The bytes of a gap are read and thrown away. Requests come out
//! in the order their first wanted blob is wanted, so that a reader taking blobs in order
//! waits for as little as possible. See docs/design.md#import-restic.

use super::id::PackId;

/// One wanted blob: where it lies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Want {
    pub pack: PackId,
    /// Offset of the encrypted blob in its pack.
    pub offset: u64,
    /// Its length in the pack.
    pub length: u64,
}

impl Want {
    fn end(&self) -> u64 {
        self.offset + self.length
    }
}

/// How requests are formed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanLimits {
    /// The most bytes read between two wanted blobs of one request (read and dropped).
    pub max_gap: u64,
    /// The most bytes one request reads, unless a single blob is longer.
    pub max_request: u64,
}

/// Largest gap read between two wanted blobs: 1 MiB (a millisecond at a gigabit;
/// a round trip saved is tens of them).
pub const MAX_GAP: u64 = 1 << 20;
/// Largest range request for file contents: 1 MiB stored, up to a few MiB once
/// decompressed, so that several are in flight within the read-ahead's byte budget
/// (with 4 MiB requests of compressible data one filled it, and the reader waited a
/// round trip for each).
pub const MAX_REQUEST: u64 = 1 << 20;
/// Largest range request for trees: 16 MiB (a pack, as restic writes them), read once
/// per level of the walk.
pub const MAX_TREE_REQUEST: u64 = 16 << 20;

impl Default for PlanLimits {
    fn default() -> Self {
        PlanLimits { max_gap: MAX_GAP, max_request: MAX_REQUEST }
    }
}

/// One range request: `length` bytes of `pack` from `offset`, holding the wanted blobs
/// `members` (indices into the planned wants, by offset).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub pack: PackId,
    pub offset: u64,
    pub length: u64,
    pub members: Vec<usize>,
}

impl Request {
    /// The bytes it reads that no member holds.
    pub fn gap_bytes(&self, wants: &[Want]) -> u64 {
        let mut covered = 0;
        let mut end = self.offset;
        for &m in &self.members {
            let w = &wants[m];
            let start = w.offset.max(end);
            if w.end() > start {
                covered += w.end() - start;
            }
            end = end.max(w.end());
        }
        self.length - covered
    }
}

/// The requests that read every one of `wants` (each exactly once; a blob wanted twice
/// is read once, for both), in the order of their first member in `wants`.
pub fn plan(wants: &[Want], limits: PlanLimits) -> Vec<Request> {
    let mut order: Vec<usize> = (0..wants.len()).collect();
    order.sort_by_key(|&i| (wants[i].pack, wants[i].offset, i));
    let mut out: Vec<Request> = Vec::new();
    for i in order {
        let w = &wants[i];
        if let Some(r) = out.last_mut() {
            let end = r.offset + r.length;
            let new_end = end.max(w.end());
            if r.pack == w.pack
                && w.offset <= end.saturating_add(limits.max_gap)
                && new_end - r.offset <= limits.max_request
            {
                r.length = new_end - r.offset;
                r.members.push(i);
                continue;
            }
        }
        out.push(Request { pack: w.pack, offset: w.offset, length: w.length, members: vec![i] });
    }
    out.sort_by_key(|r| r.members.iter().min().copied());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::restic::Id;

    fn want(pack: u8, offset: u64, length: u64) -> Want {
        Want { pack: Id([pack; 32]), offset, length }
    }

    const L: PlanLimits = PlanLimits { max_gap: 100, max_request: 1000 };

    fn shape(rs: &[Request]) -> Vec<(u8, u64, u64, Vec<usize>)> {
        rs.iter().map(|r| (r.pack.0[0], r.offset, r.length, r.members.clone())).collect()
    }

    #[test]
    fn neighbours_merge_and_gaps_split() {
        // Adjacent, then a gap of exactly the limit, then one byte more.
        let w = [want(1, 0, 10), want(1, 10, 10), want(1, 120, 10), want(1, 231, 10)];
        let r = plan(&w, L);
        assert_eq!(shape(&r), vec![(1, 0, 130, vec![0, 1, 2]), (1, 231, 10, vec![3])]);
        assert_eq!(r[0].gap_bytes(&w), 100);
        assert_eq!(r[1].gap_bytes(&w), 0);
    }

    #[test]
    fn packs_are_never_merged() {
        // Back to back offsets, but in two packs.
        let w = [want(1, 0, 10), want(2, 10, 10), want(1, 10, 10)];
        let r = plan(&w, L);
        assert_eq!(shape(&r), vec![(1, 0, 20, vec![0, 2]), (2, 10, 10, vec![1])]);
    }

    #[test]
    fn a_request_stays_within_its_size() {
        let w = [want(1, 0, 400), want(1, 400, 400), want(1, 800, 400), want(1, 1200, 5000)];
        let r = plan(&w, L);
        assert_eq!(
            shape(&r),
            vec![(1, 0, 800, vec![0, 1]), (1, 800, 400, vec![2]), (1, 1200, 5000, vec![3])],
            "a blob longer than a request is one of its own"
        );
        assert!(r.iter().all(|r| r.length <= L.max_request || r.members.len() == 1));
    }

    #[test]
    fn requests_come_in_the_order_blobs_are_wanted() {
        // Wanted from the pack's end to its start, and interleaved with another pack.
        let w = [want(1, 500, 10), want(2, 0, 10), want(1, 0, 10), want(2, 5000, 10)];
        let r = plan(&w, L);
        assert_eq!(
            shape(&r),
            vec![(1, 500, 10, vec![0]), (2, 0, 10, vec![1]), (1, 0, 10, vec![2]), (2, 5000, 10, vec![3])]
        );
        // Out of order but near each other: one request, wanted first.
        let w = [want(1, 20, 10), want(1, 0, 10), want(1, 10, 10)];
        assert_eq!(shape(&plan(&w, L)), vec![(1, 0, 30, vec![1, 2, 0])]);
    }

    #[test]
    fn a_blob_wanted_twice_is_read_once() {
        let w = [want(1, 0, 10), want(1, 0, 10), want(1, 5, 10)];
        let r = plan(&w, L);
        assert_eq!(shape(&r), vec![(1, 0, 15, vec![0, 1, 2])]);
        assert_eq!(r[0].gap_bytes(&w), 0);
        assert!(plan(&[], L).is_empty());
    }

    #[test]
    fn every_want_is_in_exactly_one_request_within_it() {
        // A seeded shuffle of blobs over three packs.
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let w: Vec<Want> = (0..500).map(|_| want((next() % 3) as u8, next() % 100_000, 1 + next() % 700)).collect();
        let r = plan(&w, L);
        let mut seen = vec![0; w.len()];
        for q in &r {
            assert!(q.length <= L.max_request || q.members.len() == 1);
            for &m in &q.members {
                seen[m] += 1;
                assert_eq!(w[m].pack, q.pack);
                assert!(w[m].offset >= q.offset && w[m].end() <= q.offset + q.length);
            }
        }
        assert!(seen.iter().all(|&n| n == 1));
        let firsts: Vec<usize> = r.iter().map(|q| *q.members.iter().min().unwrap()).collect();
        assert!(firsts.windows(2).all(|p| p[0] < p[1]));
    }
}
