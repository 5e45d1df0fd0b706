//! The data `coffer bench` measures: a sample read from the user's files, or
//! generated data, and inputs chosen to hurt each stage (data on which the
//! chunker never finds a boundary, all-zero, incompressible, highly
//! compressible, many tiny files). See docs/design.md#coffer-bench.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::chunker::ChunkerParams;
use crate::crypto::Key;

/// The data to measure, as a list of files (byte buffers), and where it came from.
#[derive(Clone, Debug, Default)]
pub struct Sample {
    /// The files' contents: whole files, or the pieces of larger files the
    /// sample's runs read ([`super::sample`]).
    pub files: Vec<Vec<u8>>,
    /// Where each of `files` was read from (empty for generated data).
    pub paths: Vec<PathBuf>,
    /// The directories the walk backs up whole, in name order, none below
    /// another ([`super::sample`]): directories spread over the files counted,
    /// for the per-file work of a backup. Empty for generated data, and when no
    /// directory below the paths is small enough.
    pub whole_dirs: Vec<PathBuf>,
    /// What it is, for the report.
    pub info: SampleInfo,
}

/// What a sample holds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SampleInfo {
    /// `files` (read from the paths given) or `generated`.
    pub source: String,
    /// Files in the sample (pieces of one file count once each).
    pub files: u64,
    /// Bytes in the sample.
    pub bytes: u64,
    /// Whether the sample holds less than every byte counted.
    pub truncated: bool,
    /// Entries counted but left out: symbolic links, special files, and
    /// entries that could not be read.
    pub skipped: u64,
    /// Wall seconds taken to open and read the sample's files, listing
    /// directories and counting not included (none for generated data).
    pub read_seconds: Option<f64>,
    /// Seconds one thread took to read a byte of the sample: the slope of a
    /// least-squares line through each piece's time against its length (none
    /// for generated data).
    #[serde(default)]
    pub read_per_byte: Option<f64>,
    /// Seconds one thread took to open a file beyond its bytes: that line's
    /// time at length 0.
    #[serde(default)]
    pub read_per_file: Option<f64>,
    /// Whether each file was evicted from the page cache just before it was
    /// read, so that `read_seconds` is a read from the disk.
    #[serde(default)]
    pub cold: bool,
    /// Directories in [`Sample::whole_dirs`].
    #[serde(default)]
    pub whole_dirs: u64,
    /// Runs of consecutive files the sample was read in, at even steps of the
    /// bytes counted ([`super::sample::RUNS`]; 1 when it holds everything).
    #[serde(default)]
    pub runs: u64,
    /// Regular files at or below the paths given, counted from their metadata
    /// before the sample is read (for at most
    /// [`super::sample::CENSUS_SECONDS`]): the projection takes its files per
    /// byte from them.
    #[serde(default)]
    pub census_files: u64,
    /// The bytes of those files.
    #[serde(default)]
    pub census_bytes: u64,
    /// Whether the count reached every entry below the paths given.
    #[serde(default)]
    pub census_complete: bool,
}

impl Sample {
    /// A sample of the given buffers.
    pub fn from_buffers(source: &str, files: Vec<Vec<u8>>) -> Sample {
        let bytes = files.iter().map(|f| f.len() as u64).sum();
        let info = SampleInfo { source: source.into(), files: files.len() as u64, bytes, ..SampleInfo::default() };
        Sample { files, paths: Vec::new(), whole_dirs: Vec::new(), info }
    }

    /// Total bytes.
    pub fn len(&self) -> u64 {
        self.info.bytes
    }

    /// Whether it holds no byte.
    pub fn is_empty(&self) -> bool {
        self.info.bytes == 0
    }
}

/// Opens a file for reading without following a link (nor hanging on a FIFO).
pub(crate) fn open_file(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path)
}

/// Drops the file's clean pages from the page cache (`posix_fadvise` with
/// `DONTNEED`), so that the next read comes from the disk. Anyone who may read
/// a file may do this; pages still being written back stay cached.
pub fn evict(path: &Path) -> std::io::Result<()> {
    let f = open_file(path)?;
    rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed)?;
    Ok(())
}

/// Reads the first `len` bytes of `path` into `buf` (reused between calls),
/// returning how many there were; 0 when the file cannot be read.
pub fn read_again(path: &Path, len: u64, buf: &mut Vec<u8>) -> u64 {
    use std::io::Read;
    buf.clear();
    open_file(path).and_then(|f| f.take(len).read_to_end(buf)).map_or(0, |n| n as u64)
}

/// Deterministic incompressible bytes: the BLAKE3 output stream keyed by `seed`.
pub fn incompressible(len: usize, seed: u64) -> Vec<u8> {
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    let mut out = vec![0u8; len];
    blake3::Hasher::new_keyed(&key).finalize_xof().fill(&mut out);
    out
}

/// Text-like bytes (words, spaces, line ends, numbers) that zstd compresses
/// about 3 to 4 to 1, varying with `seed`.
pub fn text_like(len: usize, seed: u64) -> Vec<u8> {
    const WORDS: [&str; 24] = [
        "backup",
        "chunk",
        "repository",
        "snapshot",
        "index",
        "pack",
        "tree",
        "blob",
        "key",
        "restore",
        "the",
        "of",
        "and",
        "level=info",
        "error",
        "request",
        "user",
        "file",
        "/usr/lib",
        "size",
        "time",
        "value",
        "config",
        "check",
    ];
    let r = incompressible(len / 2 + 64, seed);
    let mut out = Vec::with_capacity(len + 32);
    let mut i = 0;
    while out.len() < len {
        let x = r[i % r.len()] as usize;
        if x < 20 {
            out.extend_from_slice(format!("{}", u32::from(r[(i + 1) % r.len()]) * 997).as_bytes());
        } else {
            out.extend_from_slice(WORDS[x % WORDS.len()].as_bytes());
        }
        out.push(if x.is_multiple_of(9) { b'\n' } else { b' ' });
        i += 2;
    }
    out.truncate(len);
    out
}

/// Highly compressible bytes: one short line repeated. zstd's high levels spend
/// the most time per byte searching such data for matches.
pub fn repetitive(len: usize) -> Vec<u8> {
    b"2026-11-24T06:00:00Z INFO request served in 3 ms\n".iter().copied().cycle().take(len).collect()
}

/// The built-in sample: `len` bytes in files of 1 to 8 units (a unit is 1/64 of
/// `len`, at least 16 KiB, at most 1 MiB), a third text-like,
/// a third incompressible and a sixth all-zero, and a sixth copies of earlier
/// files (so deduplication has something to find).
pub fn generated(len: usize) -> Sample {
    let mut files = Vec::new();
    let mut made = 0usize;
    let mut i = 0u64;
    let unit = (len / 64).clamp(16 << 10, 1 << 20);
    while made < len {
        let size = ((1 + (i as usize * 7) % 8) * unit).min(len - made);
        let data = match i % 6 {
            0 | 3 => text_like(size, i),
            1 | 4 => incompressible(size, i),
            2 => vec![0; size],
            _ => {
                let mut d: Vec<u8> = files.first().cloned().unwrap_or_default();
                d.resize(size, 7);
                d
            }
        };
        made += data.len();
        files.push(data);
        i += 1;
    }
    Sample::from_buffers("generated", files)
}

/// `count` files of `size` bytes each, half text-like and half incompressible,
/// all distinct: the pipeline's many-tiny-files case.
pub fn tiny_files(count: usize, size: usize) -> Vec<Vec<u8>> {
    (0..count as u64)
        .map(|i| {
            let mut d = if i % 2 == 0 { text_like(size, i) } else { incompressible(size, i) };
            d[..8.min(size)].copy_from_slice(&i.to_le_bytes()[..8.min(size)]);
            d
        })
        .collect()
}

/// The gear table of the chunker keyed by `key`, derived as docs/design.md#chunking
/// specifies (the chunker keeps its own copy private); a test checks that data
/// built from it defeats the real chunker.
fn gear_table(key: &Key) -> [u64; 256] {
    let mut h = blake3::Hasher::new_derive_key("coffer v1 chunker gear table");
    h.update(&key.0);
    let mut bytes = [0u8; 256 * 8];
    h.finalize_xof().fill(&mut bytes);
    let mut gear = [0u64; 256];
    for (g, b) in gear.iter_mut().zip(bytes.chunks_exact(8)) {
        *g = u64::from_le_bytes(b.try_into().unwrap_or_default());
    }
    gear
}

/// About `len` bytes (a whole number of maximum-size chunks, at least one) on
/// which the chunker keyed by `key` with `params` never finds a boundary before
/// the maximum chunk size, so every chunk has the maximum size and the rolling
/// hash runs over all but the first `min_size` bytes of each. The bytes look
/// random (they do not compress or deduplicate): each is drawn at random, and
/// replaced by the next byte value whenever it would bring the rolling hash onto
/// the cut mask.
pub fn no_cut(key: &Key, params: ChunkerParams, len: usize) -> Vec<u8> {
    let gear = gear_table(key);
    let bits = params.avg_size.trailing_zeros();
    // The easier of the two masks has the fewer bits: staying off it stays off both.
    let mask_easy = !0u64 << (64 - bits.saturating_sub(2).max(1));
    let (min, max) = (params.min_size as usize, params.max_size.max(1) as usize);
    let chunks = len.div_ceil(max).max(1);
    let mut out = incompressible(chunks * max, 0x6e6f_2d63_7574);
    for c in 0..chunks {
        let chunk = &mut out[c * max..(c + 1) * max];
        let mut h = 0u64;
        for byte in chunk.iter_mut().skip(min) {
            let mut b = *byte;
            let mut next = (h << 1).wrapping_add(gear[b as usize]);
            // Some byte value keeps the hash off the mask unless 256 random values
            // all hit it (probability 2^-(256 * (bits - 2))).
            for _ in 0..255 {
                if next & mask_easy != 0 {
                    break;
                }
                b = b.wrapping_add(1);
                next = (h << 1).wrapping_add(gear[b as usize]);
            }
            *byte = b;
            h = next;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunker::Chunker;

    #[test]
    fn no_cut_data_gives_only_maximum_chunks() {
        let sets = [
            ChunkerParams { min_size: 2 << 10, avg_size: 8 << 10, max_size: 32 << 10 },
            ChunkerParams { min_size: 64, avg_size: 256, max_size: 1024 },
            ChunkerParams::default(),
        ];
        for (i, params) in sets.into_iter().enumerate() {
            let key = Key([i as u8 + 1; 32]);
            let max = params.max_size as usize;
            let data = no_cut(&key, params, 5 * max - 10);
            assert_eq!(data.len(), 5 * max);
            let lens = Chunker::new(&key, params).chunk_lengths(&data);
            assert_eq!(lens, vec![max; 5], "params {params:?}");
            // The same bytes under another key are cut as usual: the data is made for its key.
            let other = Chunker::new(&Key([0xee; 32]), params).chunk_lengths(&data);
            assert!(other.len() > 5, "params {params:?}: {} chunks under another key", other.len());
            // And it does not compress.
            assert!(!crate::compress::worth_compressing(&data[..data.len().min(1 << 20)]) || max < 64 << 10);
        }
    }

    #[test]
    fn random_data_is_cut_below_the_maximum() {
        // The contrast that makes the no-cut data adversarial.
        let params = ChunkerParams { min_size: 2 << 10, avg_size: 8 << 10, max_size: 32 << 10 };
        let lens = Chunker::new(&Key([1; 32]), params).chunk_lengths(&incompressible(1 << 20, 3));
        assert!(lens.iter().filter(|&&l| l == 32 << 10).count() * 10 < lens.len());
    }

    #[test]
    fn generators_have_the_promised_shape() {
        let t = text_like(1 << 20, 1);
        assert_eq!(t.len(), 1 << 20);
        let z = zstd::bulk::compress(&t, 3).unwrap();
        assert!(z.len() * 2 < t.len(), "text-like compressed to {} bytes", z.len());
        let r = incompressible(1 << 20, 1);
        assert!(zstd::bulk::compress(&r, 3).unwrap().len() >= r.len());
        assert_ne!(incompressible(64, 1), incompressible(64, 2));
        assert!(zstd::bulk::compress(&repetitive(1 << 20), 19).unwrap().len() < 1000);
        let g = generated(20 << 20);
        assert_eq!(g.len(), 20 << 20);
        assert_eq!(g.files.iter().map(Vec::len).sum::<usize>(), 20 << 20);
        assert!(g.files.iter().any(|f| f.iter().all(|&b| b == 0)));
        let tiny = tiny_files(100, 1024);
        assert_eq!(tiny.len(), 100);
        let distinct: std::collections::HashSet<_> = tiny.iter().collect();
        assert_eq!(distinct.len(), 100);
    }
}
