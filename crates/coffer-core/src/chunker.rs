//! Content-defined chunking: FastCDC (2020) with normalized chunking and a gear
//! table derived from the repository's chunker key. See docs/design.md#chunking.
//!
//! A boundary is placed after byte `i` when the rolling gear hash
//! `h = (h << 1) + G[b]` has all of its top `k` bits zero. Between the minimum size
//! and the average size `k = log2(avg) + 2` (harder), after it `k = log2(avg) - 2`
//! (easier); a chunk never exceeds the maximum size. The top bits are used because
//! they depend on the last 64 bytes, while the low bits depend on the last few only.

use std::io::{self, Read};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::crypto::Key;

/// Chunk size limits, fixed when a repository is created.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkerParams {
    /// No chunk is shorter, except a file's last.
    pub min_size: u32,
    /// Target average; a power of two.
    pub avg_size: u32,
    /// No chunk is longer.
    pub max_size: u32,
}

impl Default for ChunkerParams {
    fn default() -> Self {
        ChunkerParams { min_size: 512 << 10, avg_size: 1 << 20, max_size: 4 << 20 }
    }
}

impl ChunkerParams {
    /// The largest maximum chunk size accepted (blob lengths are stored as u32, and
    /// restore holds whole chunks in memory).
    pub const MAX_MAX_SIZE: u32 = 64 << 20;

    /// Checks the invariants `64 <= min <= avg <= max <= 64 MiB`, `avg` a power of two.
    pub fn validate(&self) -> Result<(), String> {
        let ChunkerParams { min_size, avg_size, max_size } = *self;
        if !(min_size >= 64
            && min_size <= avg_size
            && avg_size <= max_size
            && max_size <= Self::MAX_MAX_SIZE
            && avg_size.is_power_of_two()
            && avg_size >= 256)
        {
            return Err(format!(
                "chunker sizes must satisfy 64 <= min <= avg <= max <= 64 MiB with avg a power of two >= 256 \
                 (got min {min_size}, avg {avg_size}, max {max_size})"
            ));
        }
        Ok(())
    }
}

/// A keyed FastCDC chunker.
#[derive(Clone)]
pub struct Chunker {
    gear: [u64; 256],
    mask_hard: u64,
    mask_easy: u64,
    params: ChunkerParams,
}

fn top_bits(k: u32) -> u64 {
    !0u64 << (64 - k)
}

impl Chunker {
    /// Builds the chunker for `params`, with the gear table derived from `key`:
    /// the first 2048 bytes of the BLAKE3 XOF of `derive_key("coffer v1 chunker gear table", key)`,
    /// read as 256 little-endian u64.
    pub fn new(key: &Key, params: ChunkerParams) -> Chunker {
        let mut h = blake3::Hasher::new_derive_key("coffer v1 chunker gear table");
        h.update(&key.0);
        let mut bytes = [0u8; 256 * 8];
        h.finalize_xof().fill(&mut bytes);
        let mut gear = [0u64; 256];
        for (g, b) in gear.iter_mut().zip(bytes.chunks_exact(8)) {
            *g = u64::from_le_bytes(b.try_into().expect("8 bytes"));
        }
        let bits = params.avg_size.trailing_zeros();
        Chunker { gear, mask_hard: top_bits(bits + 2), mask_easy: top_bits(bits.saturating_sub(2).max(1)), params }
    }

    /// The limits this chunker enforces.
    pub fn params(&self) -> ChunkerParams {
        self.params
    }

    /// Length of the chunk that starts at `data[0]`. `data` must hold at least
    /// `max_size` bytes unless it is the end of the stream.
    pub fn cut(&self, data: &[u8]) -> usize {
        let min = self.params.min_size as usize;
        if data.len() <= min {
            return data.len();
        }
        let max = data.len().min(self.params.max_size as usize);
        let normal = max.min(self.params.avg_size as usize);
        let mut h = 0u64;
        let mut i = min;
        while i < normal {
            h = (h << 1).wrapping_add(self.gear[data[i] as usize]);
            if h & self.mask_hard == 0 {
                return i + 1;
            }
            i += 1;
        }
        while i < max {
            h = (h << 1).wrapping_add(self.gear[data[i] as usize]);
            if h & self.mask_easy == 0 {
                return i + 1;
            }
            i += 1;
        }
        max
    }

    /// Splits a whole in-memory buffer into chunk lengths.
    pub fn chunk_lengths(&self, mut data: &[u8]) -> Vec<usize> {
        let mut out = Vec::new();
        while !data.is_empty() {
            let n = self.cut(data);
            out.push(n);
            data = &data[n..];
        }
        out
    }
}

/// Block buffers kept for reuse, so that reading a large file allocates (and the
/// kernel zero-fills) its buffers once rather than once per block.
pub struct BlockBuffers {
    free: Mutex<Vec<Vec<u8>>>,
    keep: usize,
}

/// Buffers smaller than this are not kept: small files get buffers of their size.
const POOLED_MIN: usize = 1 << 20;

impl BlockBuffers {
    /// A pool keeping at most `keep` buffers.
    pub fn new(keep: usize) -> Self {
        BlockBuffers { free: Mutex::new(Vec::new()), keep }
    }

    fn take(&self, capacity: usize) -> Vec<u8> {
        if capacity >= POOLED_MIN
            && let Some(mut b) = self.free.lock().expect("poisoned").pop()
        {
            b.clear();
            b.reserve_exact(capacity);
            return b;
        }
        Vec::with_capacity(capacity)
    }

    fn give(&self, b: Vec<u8>) {
        let mut free = self.free.lock().expect("poisoned");
        if b.capacity() >= POOLED_MIN && free.len() < self.keep {
            free.push(b);
        }
    }
}

/// Whole chunks read from a stream: `data` cut at the offsets in `ends`. Its
/// buffer goes back to the pool it came from when it is dropped.
pub struct Block<'p> {
    data: Vec<u8>,
    ends: Vec<usize>,
    pool: &'p BlockBuffers,
}

impl Block<'_> {
    /// The chunks, in stream order.
    pub fn chunks(&self) -> Vec<&[u8]> {
        let mut start = 0;
        self.ends
            .iter()
            .map(|&end| {
                let c = &self.data[start..end];
                start = end;
                c
            })
            .collect()
    }

    /// The bytes of all its chunks, in stream order.
    pub fn bytes(&self) -> &[u8] {
        &self.data
    }

    /// Whether it holds no chunk (the stream has ended).
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }
}

impl Drop for Block<'_> {
    fn drop(&mut self) {
        self.pool.give(std::mem::take(&mut self.data));
    }
}

/// Reads a stream in blocks of whole chunks. A block holds about `block_len`
/// bytes read plus what the previous block left after its last cut (less than the
/// maximum chunk size, and usually less than one average chunk), so a block is at
/// most `max_size + block_len` bytes, and the chunks are slices of it: nothing is
/// copied but that remainder.
///
/// A cut is taken as soon as it is certain: when the chunker finds a boundary
/// before the end of the bytes at hand, more bytes could not move it, because
/// the rolling hash looks only at bytes before the boundary. Only a chunk that
/// runs to the end of the block without a boundary waits for the next block.
/// The boundaries are therefore those of chunking the whole stream at once.
pub struct BlockReader<'p, R> {
    reader: R,
    chunker: Chunker,
    block_len: usize,
    pool: &'p BlockBuffers,
    /// The remainder of the last block, to start the next one.
    rest: Vec<u8>,
    /// Bytes the stream is expected to hold still (the file size): buffers are
    /// sized by it, so a small file costs no large allocation.
    expected: u64,
    eof: bool,
}

impl<'p, R: Read> BlockReader<'p, R> {
    /// Reads `reader`, expected to hold `expected` bytes (a hint), with `chunker`,
    /// about `block_len` new bytes per block, in buffers from `pool`.
    pub fn new(reader: R, chunker: Chunker, block_len: usize, expected: u64, pool: &'p BlockBuffers) -> Self {
        BlockReader { reader, chunker, block_len, pool, rest: Vec::new(), expected, eof: false }
    }

    /// The next block; an empty one at the end of the stream.
    pub fn next_block(&mut self) -> io::Result<Block<'p>> {
        let max = self.chunker.params.max_size as usize;
        let want = self.block_len.max(1);
        let fits = self.rest.len().saturating_add(self.expected.try_into().unwrap_or(usize::MAX)).saturating_add(1);
        let mut data = self.pool.take((self.rest.len() + want).min(fits));
        data.extend_from_slice(&self.rest);
        self.rest.clear();
        let mut ends = Vec::new();
        let mut pos = 0;
        // A chunk with no boundary in the bytes at hand waits for more, read in
        // growing steps (so it is cut again only a few times), until it reaches
        // `max_size` and is cut there; a block never passes `max_size + want`.
        let mut step = want;
        while ends.is_empty() && !(self.eof && pos == data.len()) {
            if !self.eof {
                // `read_to_end` on a `Take` reads into spare capacity without zero-filling
                // it first (for readers such as `File`), which matters for small files.
                // Exactly (grown by doubling, a block could pass `max_size + want`), and
                // no more than the file is expected to hold.
                let expected = usize::try_from(self.expected).unwrap_or(usize::MAX).saturating_add(1);
                data.reserve_exact(step.min(expected));
                let n = (&mut self.reader).take(step as u64).read_to_end(&mut data)?;
                self.expected = self.expected.saturating_sub(n as u64);
                self.eof = n < step;
                step = want.max(data.len().min(max.saturating_sub(data.len())));
            }
            while pos < data.len() {
                let at_hand = data.len() - pos;
                let n = self.chunker.cut(&data[pos..]);
                // Cut at the end of the bytes at hand, short of the maximum: with more
                // bytes the chunk could be longer.
                if n == at_hand && n < max && !self.eof {
                    break;
                }
                pos += n;
                ends.push(pos);
            }
        }
        // Sized exactly: grown by doubling, it could reach twice the maximum chunk size.
        self.rest.reserve_exact(data.len() - pos);
        self.rest.extend_from_slice(&data[pos..]);
        data.truncate(pos);
        Ok(Block { data, ends, pool: self.pool })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testing::noise as pseudo_random;

    fn small() -> ChunkerParams {
        ChunkerParams { min_size: 2 << 10, avg_size: 8 << 10, max_size: 32 << 10 }
    }

    #[test]
    fn respects_limits_and_covers_input() {
        let c = Chunker::new(&Key([1; 32]), small());
        let data = pseudo_random(1 << 20, 1);
        let lens = c.chunk_lengths(&data);
        assert_eq!(lens.iter().sum::<usize>(), data.len());
        for l in &lens[..lens.len() - 1] {
            assert!((2 << 10..=32 << 10).contains(l), "chunk of {l} bytes");
        }
        let avg = data.len() / lens.len();
        assert!((4 << 10..=16 << 10).contains(&avg), "average {avg}");
    }

    #[test]
    fn boundaries_resynchronise_after_an_insertion() {
        let c = Chunker::new(&Key([2; 32]), small());
        let data = pseudo_random(512 << 10, 2);
        let mut edited = data[..100_000].to_vec();
        edited.extend_from_slice(b"inserted bytes");
        edited.extend_from_slice(&data[100_000..]);
        let ends = |d: &[u8]| {
            let mut acc = 0;
            c.chunk_lengths(d)
                .into_iter()
                .map(|l| {
                    acc += l;
                    acc
                })
                .collect::<Vec<_>>()
        };
        let a: std::collections::HashSet<_> = ends(&data).into_iter().filter(|&e| e > 200_000).collect();
        let b: Vec<_> = ends(&edited).into_iter().filter(|&e| e > 200_000).map(|e| e - 14).collect();
        let shared = b.iter().filter(|e| a.contains(e)).count();
        assert!(shared * 10 >= b.len() * 9, "{shared} of {} boundaries shared", b.len());
    }

    #[test]
    fn gear_table_depends_on_key() {
        let data = pseudo_random(1 << 20, 3);
        let a = Chunker::new(&Key([1; 32]), small()).chunk_lengths(&data);
        let b = Chunker::new(&Key([9; 32]), small()).chunk_lengths(&data);
        assert_ne!(a, b);
    }

    #[test]
    fn reader_matches_in_memory_chunking() {
        let c = Chunker::new(&Key([4; 32]), small());
        // A run of zeros has no boundary: it is cut at the maximum chunk size.
        let mut data = pseudo_random(300_001, 4);
        data.extend_from_slice(&[0; 100_000]);
        data.extend_from_slice(&pseudo_random(50_000, 5));
        // A reader that returns short reads.
        struct Trickle<'a>(&'a [u8]);
        impl Read for Trickle<'_> {
            fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
                let n = out.len().min(self.0.len()).min(1000);
                out[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        for block_len in [1, 5_000, 40_000, 1 << 20] {
            for expected in [0, 1000, data.len() as u64, u64::MAX] {
                let pool = BlockBuffers::new(2);
                let mut r = BlockReader::new(Trickle(&data), c.clone(), block_len, expected, &pool);
                let mut lens = Vec::new();
                let mut joined = Vec::new();
                loop {
                    let b = r.next_block().unwrap();
                    if b.is_empty() {
                        break;
                    }
                    assert!(b.bytes().len() <= (32 << 10) + block_len, "block of {} bytes", b.bytes().len());
                    lens.extend(b.chunks().iter().map(|ch| ch.len()));
                    joined.extend_from_slice(b.bytes());
                }
                assert_eq!(joined, data);
                assert_eq!(lens, c.chunk_lengths(&data), "block length {block_len}, expected {expected}");
                assert!(r.next_block().unwrap().is_empty());
            }
        }
    }

    #[test]
    fn validate_rejects_bad_sizes() {
        assert!(ChunkerParams::default().validate().is_ok());
        assert!(ChunkerParams { min_size: 10, avg_size: 1024, max_size: 4096 }.validate().is_err());
        assert!(ChunkerParams { min_size: 1024, avg_size: 3000, max_size: 4096 }.validate().is_err());
        assert!(ChunkerParams { min_size: 1024, avg_size: 4096, max_size: 1 << 30 }.validate().is_err());
    }
}
