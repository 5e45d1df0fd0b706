//! The Merkle leaves a backup collects, in memory that does not grow with the
//! number of files. See docs/design.md#merkle-root.
//!
//! A snapshot's leaves are its files in tree order, but directories are saved in
//! parallel and finish in any order, so each directory's leaves are kept until its
//! parent is saved, and the root is computed from the whole sequence at the end.
//! [`Leaves`] holds such a sequence as a rope: a few pieces and a short tail of
//! leaves in memory, everything else in an unnamed spill file. Leaves are written
//! to the file once and read back once; a list of pieces that grows long is itself
//! written to the file and replaced by one piece, so a directory's sequence costs
//! at most a few kilobytes however many files lie below it.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Mutex;

use crate::error::{Error, Result};
use crate::merkle::{Builder, Hash};

/// A run of the sequence stored in the spill file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Piece {
    /// `count` leaves of 32 bytes at `offset`.
    Leaves { offset: u64, count: u32 },
    /// `count` encoded pieces at `offset`, each standing for its own run.
    Pieces { offset: u64, count: u32 },
}

/// Bytes of an encoded piece: a tag (0 for leaves, 1 for pieces), the offset
/// (u64 LE) and the count (u32 LE).
const PIECE_LEN: usize = 13;

impl Piece {
    fn encode(&self, out: &mut Vec<u8>) {
        let (tag, offset, count) = match *self {
            Piece::Leaves { offset, count } => (0u8, offset, count),
            Piece::Pieces { offset, count } => (1u8, offset, count),
        };
        out.push(tag);
        out.extend_from_slice(&offset.to_le_bytes());
        out.extend_from_slice(&count.to_le_bytes());
    }

    fn decode(b: &[u8]) -> Piece {
        let offset = u64::from_le_bytes(b[1..9].try_into().expect("8 bytes"));
        let count = u32::from_le_bytes(b[9..13].try_into().expect("4 bytes"));
        if b[0] == 0 { Piece::Leaves { offset, count } } else { Piece::Pieces { offset, count } }
    }
}

/// How much of a sequence stays in memory.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    /// Leaves and pieces a sequence being built may hold before spilling them.
    pub building: usize,
    /// Leaves and pieces a finished sequence (one directory's) may hold.
    pub kept: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { building: 1024, kept: 16 }
    }
}

/// The spill file of one backup, created when first needed.
pub(crate) struct Spill {
    dir: PathBuf,
    limits: Limits,
    file: Mutex<Option<(File, u64)>>,
}

/// Leaves read back from the spill file at a time.
const READ_BATCH: usize = 1 << 14;

impl Spill {
    /// A spill file in `dir` (made when first written).
    pub fn new(dir: PathBuf, limits: Limits) -> Spill {
        Spill { dir, limits, file: Mutex::new(None) }
    }

    fn error(&self, e: std::io::Error) -> Error {
        let e =
            std::io::Error::new(e.kind(), format!("cannot use a temporary file for the snapshot's Merkle leaves: {e}"));
        Error::io(&self.dir, e)
    }

    /// Appends `bytes` to the file and returns their offset.
    fn write(&self, bytes: &[u8]) -> Result<u64> {
        let mut guard = self.file.lock().expect("poisoned");
        if guard.is_none() {
            let f = tempfile::tempfile_in(&self.dir)
                .or_else(|_| std::fs::create_dir_all(&self.dir).and_then(|()| tempfile::tempfile_in(&self.dir)))
                .map_err(|e| self.error(e))?;
            *guard = Some((f, 0));
        }
        let (file, len) = guard.as_mut().expect("created above");
        let offset = *len;
        file.write_all_at(bytes, offset).map_err(|e| self.error(e))?;
        *len += bytes.len() as u64;
        Ok(offset)
    }

    fn read(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        let guard = self.file.lock().expect("poisoned");
        let (file, _) = guard.as_ref().ok_or_else(|| self.error(std::io::ErrorKind::NotFound.into()))?;
        let mut buf = vec![0; len];
        file.read_exact_at(&mut buf, offset).map_err(|e| self.error(e))?;
        Ok(buf)
    }

    /// Feeds the leaves of `piece` to `b`, in order.
    fn feed(&self, piece: Piece, b: &mut Builder) -> Result<()> {
        match piece {
            Piece::Leaves { mut offset, count } => {
                let mut left = count as usize;
                while left > 0 {
                    let n = left.min(READ_BATCH);
                    for leaf in self.read(offset, n * 32)?.chunks_exact(32) {
                        b.push(leaf.try_into().expect("32 bytes"));
                    }
                    offset += (n * 32) as u64;
                    left -= n;
                }
            }
            Piece::Pieces { offset, count } => {
                for p in self.read(offset, count as usize * PIECE_LEN)?.chunks_exact(PIECE_LEN) {
                    self.feed(Piece::decode(p), b)?;
                }
            }
        }
        Ok(())
    }
}

/// A sequence of leaves in tree order: `pieces` (in the spill file) then `tail`.
#[derive(Debug, Default)]
pub(crate) struct Leaves {
    pieces: Vec<Piece>,
    tail: Vec<Hash>,
}

impl Leaves {
    /// The sequence of one leaf.
    pub fn one(leaf: Hash) -> Leaves {
        Leaves { pieces: Vec::new(), tail: vec![leaf] }
    }

    /// Appends `other` after the leaves of `self`.
    pub fn append(&mut self, other: Leaves, spill: &Spill) -> Result<()> {
        if !other.pieces.is_empty() {
            self.spill_tail(spill)?;
            self.pieces.extend(other.pieces);
        }
        self.tail.extend(other.tail);
        self.bound(spill.limits.building, spill)
    }

    /// Spills what is over the limit for a finished sequence: call it on a
    /// directory's sequence before it is kept beside its siblings.
    pub fn seal(mut self, spill: &Spill) -> Result<Leaves> {
        self.bound(spill.limits.kept, spill)?;
        self.tail.shrink_to_fit();
        self.pieces.shrink_to_fit();
        Ok(self)
    }

    fn bound(&mut self, limit: usize, spill: &Spill) -> Result<()> {
        if self.tail.len() > limit {
            self.spill_tail(spill)?;
        }
        if self.pieces.len() > limit {
            let mut bytes = Vec::with_capacity(self.pieces.len() * PIECE_LEN);
            for p in &self.pieces {
                p.encode(&mut bytes);
            }
            let count = self.pieces.len() as u32;
            self.pieces = vec![Piece::Pieces { offset: spill.write(&bytes)?, count }];
        }
        Ok(())
    }

    fn spill_tail(&mut self, spill: &Spill) -> Result<()> {
        if self.tail.is_empty() {
            return Ok(());
        }
        let count = self.tail.len() as u32;
        let offset = spill.write(self.tail.as_flattened())?;
        // Not `clear`: a sealed sequence should not keep a building buffer's capacity.
        self.tail = Vec::new();
        self.pieces.push(Piece::Leaves { offset, count });
        Ok(())
    }

    /// The Merkle root of the sequence and its number of leaves.
    pub fn root(self, spill: &Spill) -> Result<(Hash, u64)> {
        let mut b = Builder::new();
        for p in self.pieces {
            spill.feed(p, &mut b)?;
        }
        for leaf in self.tail {
            b.push(leaf);
        }
        Ok((b.root(), b.count()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::merkle;

    fn leaf(i: u64) -> Hash {
        merkle::leaf_hash(&i.to_le_bytes())
    }

    /// Builds the sequence of leaves `next..next + n` as a random tree of appends,
    /// sealing each "directory", and returns it with the leaves in order.
    fn tree(n: u64, next: &mut u64, rng: &mut u64, spill: &Spill, all: &mut Vec<Hash>) -> Leaves {
        let mut out = Leaves::default();
        let mut left = n;
        while left > 0 {
            *rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let take = (*rng >> 33) % left.min(40) + 1;
            let part = if take > 3 && (*rng >> 20).is_multiple_of(3) {
                tree(take, next, rng, spill, all).seal(spill).unwrap()
            } else {
                let mut p = Leaves::default();
                for _ in 0..take {
                    all.push(leaf(*next));
                    p.append(Leaves::one(leaf(*next)), spill).unwrap();
                    *next += 1;
                }
                p
            };
            out.append(part, spill).unwrap();
            left -= take;
        }
        out
    }

    #[test]
    fn spilled_sequences_give_the_root_of_the_leaves_in_order() {
        let dir = tempfile::tempdir().unwrap();
        for (limits, n) in [
            (Limits { building: 1, kept: 1 }, 5000),
            (Limits { building: 3, kept: 2 }, 2000),
            (Limits::default(), 3000),
        ] {
            let spill = Spill::new(dir.path().to_path_buf(), limits);
            let (mut next, mut rng, mut all) = (0, n, Vec::new());
            let seq = tree(n, &mut next, &mut rng, &spill, &mut all).seal(&spill).unwrap();
            assert!(seq.pieces.len() <= limits.kept && seq.tail.len() <= limits.kept, "{limits:?}");
            let spilled = spill.file.lock().unwrap().as_ref().map_or(0, |f| f.1);
            assert!(spilled >= 32 * n - 32 * limits.kept as u64, "{limits:?}: {spilled} bytes spilled");
            assert_eq!(seq.root(&spill).unwrap(), (merkle::root(&all), n));
        }
        // Nothing spilled: the file is never made.
        let spill = Spill::new(dir.path().join("absent"), Limits::default());
        let mut seq = Leaves::default();
        seq.append(Leaves::one(leaf(1)), &spill).unwrap();
        assert_eq!(seq.seal(&spill).unwrap().root(&spill).unwrap(), (merkle::root(&[leaf(1)]), 1));
        assert!(!dir.path().join("absent").exists());
        assert_eq!(Leaves::default().root(&spill).unwrap(), (merkle::root(&[]), 0));
    }

    #[test]
    fn memory_stays_bounded_for_many_leaves() {
        let dir = tempfile::tempdir().unwrap();
        let spill = Spill::new(dir.path().to_path_buf(), Limits { building: 8, kept: 4 });
        let mut all = Vec::new();
        let mut root = Leaves::default();
        for d in 0..200u64 {
            let mut sub = Leaves::default();
            for f in 0..50 {
                all.push(leaf(d * 50 + f));
                sub.append(Leaves::one(leaf(d * 50 + f)), &spill).unwrap();
                assert!(sub.tail.len() <= 8 && sub.pieces.len() <= 8);
            }
            root.append(sub.seal(&spill).unwrap(), &spill).unwrap();
            assert!(root.tail.len() <= 8 && root.pieces.len() <= 8);
        }
        assert_eq!(root.root(&spill).unwrap(), (merkle::root(&all), 10_000));
    }

    #[test]
    fn a_spill_directory_that_cannot_be_made_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let blocker = dir.path().join("file");
        std::fs::write(&blocker, b"x").unwrap();
        let spill = Spill::new(blocker.join("sub"), Limits { building: 1, kept: 1 });
        let mut seq = Leaves::default();
        seq.append(Leaves::one(leaf(1)), &spill).unwrap();
        let e = seq.append(Leaves::one(leaf(2)), &spill).unwrap_err().to_string();
        assert!(e.contains("Merkle leaves") && e.contains("sub"), "{e}");
    }
}
