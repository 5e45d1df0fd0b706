//! Compression policy: zstd at the repository's level, kept only when it saves
//! bytes, and skipped without trying when a cheap probe says the data will not
//! compress (media, archives, encrypted files). See docs/design.md#compression.

/// Chunks shorter than this are compressed without probing (the probe would
/// cost as much as the compression).
const PROBE_MIN_LEN: usize = 64 << 10;
/// Bytes taken from each of the probe's sample points.
const SAMPLE_LEN: usize = 4 << 10;
/// Sample points spread across the chunk.
const SAMPLES: usize = 4;
/// A probe compressing to more than this fraction of its input predicts that the
/// whole chunk will not compress usefully.
const PROBE_KEEP_RATIO: f64 = 0.97;

/// Whether compressing `data` is worth trying: compresses four 4 KiB samples
/// taken across the chunk at zstd level 1 and looks at the ratio.
pub fn worth_compressing(data: &[u8]) -> bool {
    if data.len() < PROBE_MIN_LEN {
        return true;
    }
    let step = (data.len() - SAMPLE_LEN) / (SAMPLES - 1);
    let mut sample = Vec::with_capacity(SAMPLES * SAMPLE_LEN);
    for i in 0..SAMPLES {
        sample.extend_from_slice(&data[i * step..i * step + SAMPLE_LEN]);
    }
    match with_compressor(PROBE_LEVEL, |c| c.compress(&sample)) {
        Ok(c) => (c.len() as f64) < sample.len() as f64 * PROBE_KEEP_RATIO,
        Err(_) => true,
    }
}

/// The zstd level of the probe.
const PROBE_LEVEL: i32 = 1;

thread_local! {
    /// Each thread's zstd contexts, by level: creating a context allocates and
    /// clears megabytes of tables, which is worth doing once per thread rather
    /// than once per chunk.
    static COMPRESSORS: std::cell::RefCell<Vec<(i32, zstd::bulk::Compressor<'static>)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Runs `f` with this thread's compressor for `level`.
fn with_compressor<T>(
    level: i32,
    f: impl FnOnce(&mut zstd::bulk::Compressor<'static>) -> std::io::Result<T>,
) -> std::io::Result<T> {
    COMPRESSORS.with(|cell| {
        let mut all = cell.borrow_mut();
        let i = match all.iter().position(|(l, _)| *l == level) {
            Some(i) => i,
            None => {
                all.push((level, zstd::bulk::Compressor::new(level)?));
                all.len() - 1
            }
        };
        f(&mut all[i].1)
    })
}

thread_local! {
    /// Each thread's output buffer, reused from chunk to chunk: a fresh buffer of
    /// a megabyte or more per chunk would be mapped, faulted in and zeroed by the
    /// kernel every time.
    static OUTPUT: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Output buffers larger than this (for a chunk well above the average size)
/// are not kept for the next chunk.
const OUTPUT_KEEP: usize = 2 << 20;

/// Calls `f` with `data` compressed at `level` if that is enabled, promising and
/// smaller, or with `None` to store it as is. The compressed bytes are in a buffer
/// this thread reuses.
pub fn with_compressed<T>(data: &[u8], level: i32, f: impl FnOnce(Option<&[u8]>) -> T) -> T {
    if level <= 0 || !worth_compressing(data) {
        return f(None);
    }
    let mut out = OUTPUT.take();
    out.clear();
    // Output that does not fit in fewer bytes than the input is not kept, so the
    // buffer needs no more room than that: zstd stops with an error when it is full.
    out.reserve(data.len());
    let smaller = with_compressor(level, |c| c.compress_to_buffer(data, &mut out)).is_ok_and(|n| n < data.len());
    let r = f(smaller.then_some(out.as_slice()));
    if out.capacity() <= OUTPUT_KEEP {
        OUTPUT.set(out);
    }
    r
}

/// Compresses `data` like [`with_compressed`], into a new buffer.
pub fn compress(data: &[u8], level: i32) -> Option<Vec<u8>> {
    with_compressed(data, level, |c| c.map(<[u8]>::to_vec))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noise(len: usize) -> Vec<u8> {
        crate::testing::noise(len, 0x1234_5678_9abc_def1)
    }

    #[test]
    fn probe_skips_noise_and_keeps_text() {
        assert!(!worth_compressing(&noise(1 << 20)));
        assert!(compress(&noise(1 << 20), 3).is_none());
        let text = "a line of log output, 2026-11-22 level=info\n".repeat(30_000);
        assert!(worth_compressing(text.as_bytes()));
        assert!(compress(text.as_bytes(), 3).unwrap().len() < text.len() / 10);
        assert!(compress(text.as_bytes(), 0).is_none());
        // Small inputs are not probed: they are compressed when that helps.
        assert!(compress(&[0u8; 1000], 3).is_some());
        assert!(compress(&noise(1000), 3).is_none());
        // The reused output buffer gives the same bytes as a fresh compression.
        let z = with_compressed(text.as_bytes(), 3, |c| c.unwrap().to_vec());
        assert_eq!(zstd::bulk::decompress(&z, text.len()).unwrap(), text.as_bytes());
        assert_eq!(compress(text.as_bytes(), 3).unwrap(), z);
        // A chunk that would only just not shrink is stored as is.
        let mut nearly = noise(3000);
        nearly.extend_from_slice(&[0; 8]);
        assert!(with_compressed(&nearly, 3, |c| c.is_none_or(|c| c.len() < nearly.len())));
    }
}
