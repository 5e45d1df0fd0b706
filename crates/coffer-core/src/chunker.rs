//! Content-defined chunking: FastCDC (2020) with normalized chunking and a gear
//! table derived from the repository's chunker key. See docs/design.md#chunking.
//!
//! A boundary is placed after byte `i` when the rolling gear hash
//! `h = (h << 1) + G[b]` has all of its top `k` bits zero. Between the minimum size
//! and the average size `k = log2(avg) + 2` (harder), after it `k = log2(avg) - 2`
//! (easier); a chunk never exceeds the maximum size. The top bits are used because
//! they depend on the last 64 bytes, while the low bits depend on the last few only.

use std::io::{self, Read};

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
        ChunkerParams { min_size: 512 << 10, avg_size: 1 << 20, max_size: 8 << 20 }
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

/// Reads a stream and yields its chunks in order, holding at most about twice
/// the maximum chunk size in memory.
pub struct ChunkReader<R> {
    reader: R,
    chunker: Chunker,
    buf: Vec<u8>,
    pos: usize,
    eof: bool,
}

impl<R: Read> ChunkReader<R> {
    /// Chunks `reader` with `chunker`.
    pub fn new(reader: R, chunker: Chunker) -> Self {
        ChunkReader { reader, chunker, buf: Vec::new(), pos: 0, eof: false }
    }

    fn fill(&mut self) -> io::Result<()> {
        let max = self.chunker.params.max_size as usize;
        if self.eof || self.buf.len() - self.pos >= max {
            return Ok(());
        }
        self.buf.drain(..self.pos);
        self.pos = 0;
        // `read_to_end` on a `Take` reads into spare capacity without zero-filling it
        // first (for readers such as `File`), which matters for many small files.
        let want = (2 * max - self.buf.len()) as u64;
        let n = (&mut self.reader).take(want).read_to_end(&mut self.buf)?;
        if (n as u64) < want {
            self.eof = true;
        }
        Ok(())
    }

    /// The next chunk, or `None` at the end of the stream.
    pub fn next_chunk(&mut self) -> io::Result<Option<Vec<u8>>> {
        self.fill()?;
        let rest = &self.buf[self.pos..];
        if rest.is_empty() {
            return Ok(None);
        }
        let n = self.chunker.cut(rest);
        let chunk = rest[..n].to_vec();
        self.pos += n;
        Ok(Some(chunk))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testutil::noise as pseudo_random;

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
        let data = pseudo_random(300_001, 4);
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
        let mut r = ChunkReader::new(Trickle(&data), c.clone());
        let mut lens = Vec::new();
        let mut joined = Vec::new();
        while let Some(ch) = r.next_chunk().unwrap() {
            lens.push(ch.len());
            joined.extend_from_slice(&ch);
        }
        assert_eq!(joined, data);
        assert_eq!(lens, c.chunk_lengths(&data));
    }

    #[test]
    fn validate_rejects_bad_sizes() {
        assert!(ChunkerParams::default().validate().is_ok());
        assert!(ChunkerParams { min_size: 10, avg_size: 1024, max_size: 4096 }.validate().is_err());
        assert!(ChunkerParams { min_size: 1024, avg_size: 3000, max_size: 4096 }.validate().is_err());
        assert!(ChunkerParams { min_size: 1024, avg_size: 4096, max_size: 1 << 30 }.validate().is_err());
    }
}
