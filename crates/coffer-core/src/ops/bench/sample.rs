//! Which files the sample holds. The regular files below the paths are first
//! counted from their metadata (for at most [`CENSUS_SECONDS`]); the sample is
//! then read in runs of consecutive files starting at even steps of the counted
//! bytes, and the whole directories the walk backs up are picked at even steps
//! of the counted files. So neither depends on which path comes first, nor on
//! what the first files in name order happen to be. See
//! docs/design.md#coffer-bench, "Sample" and "Walk".

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::data::{Sample, evict, open_file};
use crate::error::{Error, Result};

/// The longest the count of the files below the paths may take.
pub const CENSUS_SECONDS: f64 = 3.0;

/// Runs of consecutive files the sample is read in, when it cannot hold everything.
pub const RUNS: u64 = 16;

/// Steps of the counted files at which the walk's directories are picked (a
/// power of two).
const WALK_STEPS: u64 = 32;

/// The most regular files the walk backs up.
pub const WALK_FILES: u64 = 32_768;

/// A counted directory (its regular files directly in it), or a file given as a path.
#[derive(Debug)]
struct Block {
    path: PathBuf,
    parent: Option<usize>,
    is_file: bool,
    /// Regular files directly in it, and their bytes.
    files: u64,
    bytes: u64,
    /// Regular files at or below it, and their bytes.
    sub_files: u64,
    sub_bytes: u64,
    /// Whether the count reached every entry below it.
    complete: bool,
}

/// The regular files below the paths, by directory in depth-first name order.
#[derive(Debug, Default)]
struct Census {
    blocks: Vec<Block>,
    files: u64,
    bytes: u64,
    complete: bool,
    /// Symbolic links, special files and entries that could not be read.
    skipped: u64,
}

impl Census {
    /// Counts the regular files at or below `paths` from their metadata,
    /// without following links, for at most `limit`. A path that does not
    /// exist is an error.
    fn count(paths: &[PathBuf], limit: Duration) -> Result<Census> {
        let start = Instant::now();
        let mut c = Census::default();
        let mut stack: Vec<(PathBuf, Option<usize>)> = Vec::new();
        for p in paths.iter().rev() {
            std::fs::symlink_metadata(p).map_err(|e| Error::Io { path: p.clone(), source: e })?;
            stack.push((p.clone(), None));
        }
        while let Some((path, parent)) = stack.pop() {
            if start.elapsed() > limit {
                stack.push((path, parent));
                break;
            }
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                c.skipped += 1;
                continue;
            };
            if meta.is_dir() {
                let Ok(rd) = std::fs::read_dir(&path) else {
                    c.skipped += 1;
                    continue;
                };
                let mut names: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
                names.sort();
                let at = c.blocks.len();
                c.blocks.push(Block::new(path, parent, false));
                stack.extend(names.into_iter().rev().map(|n| (n, Some(at))));
            } else if meta.is_file() {
                let at = match parent {
                    Some(p) => p,
                    None => {
                        c.blocks.push(Block::new(path, None, true));
                        c.blocks.len() - 1
                    }
                };
                c.blocks[at].files += 1;
                c.blocks[at].bytes += meta.len();
                c.files += 1;
                c.bytes += meta.len();
            } else {
                c.skipped += 1;
            }
        }
        c.complete = stack.is_empty();
        // Directories whose entries were not all reached are not whole.
        for (_, parent) in &stack {
            let mut at = *parent;
            while let Some(i) = at {
                c.blocks[i].complete = false;
                at = c.blocks[i].parent;
            }
        }
        // Children come after their parent: add each subtree into its parent.
        for i in (0..c.blocks.len()).rev() {
            let b = &mut c.blocks[i];
            b.sub_files += b.files;
            b.sub_bytes += b.bytes;
            let (f, n, parent, complete) = (b.sub_files, b.sub_bytes, b.parent, b.complete);
            if let Some(p) = parent {
                c.blocks[p].sub_files += f;
                c.blocks[p].sub_bytes += n;
                c.blocks[p].complete &= complete;
            }
        }
        Ok(c)
    }

    /// The block holding the `n`-th unit (counted by `units`, 0-based), and
    /// how far into the block it is; `None` past the end.
    fn locate(&self, n: u64, units: impl Fn(&Block) -> u64) -> Option<(usize, u64)> {
        let mut before = 0u64;
        for (i, b) in self.blocks.iter().enumerate() {
            let u = units(b);
            if n < before + u {
                return Some((i, n - before));
            }
            before += u;
        }
        None
    }
}

impl Block {
    fn new(path: PathBuf, parent: Option<usize>, is_file: bool) -> Block {
        Block { path, parent, is_file, files: 0, bytes: 0, sub_files: 0, sub_bytes: 0, complete: true }
    }

    /// Its regular files now, in name order, with their sizes.
    fn listing(&self) -> Vec<(PathBuf, u64)> {
        if self.is_file {
            let len = std::fs::symlink_metadata(&self.path).map_or(0, |m| m.len());
            return vec![(self.path.clone(), len)];
        }
        let Ok(rd) = std::fs::read_dir(&self.path) else { return Vec::new() };
        let mut names: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
        names.sort();
        names
            .into_iter()
            .filter_map(|p| {
                let m = std::fs::symlink_metadata(&p).ok()?;
                m.is_file().then_some((p, m.len()))
            })
            .collect()
    }
}

/// Reads up to `limit` bytes of the regular files at or below `paths`, without
/// following symbolic links (a link given as a path is skipped too), and picks
/// the directories the walk backs up; see the module documentation. Files that
/// cannot be read are counted as skipped; a path that does not exist is an
/// error. With `cold`, each file is evicted from the page cache ([`evict`])
/// just before it is read.
pub fn read_sample(paths: &[PathBuf], limit: u64, cold: bool) -> Result<Sample> {
    let census = Census::count(paths, Duration::from_secs_f64(CENSUS_SECONDS))?;
    let mut reader = Reader {
        census: &census,
        cold,
        listed: None,
        next: (0, 0, 0),
        files: Vec::new(),
        paths: Vec::new(),
        unreadable: 0,
        read_time: Duration::ZERO,
        timings: Vec::new(),
    };
    let everything = census.complete && census.bytes <= limit;
    if everything {
        reader.take((0, 0, 0), limit);
    } else {
        let per_run = limit.div_ceil(RUNS);
        let mut left = limit;
        for i in 0..RUNS {
            let Some(start) = reader.position(step(census.bytes, i, RUNS), per_run) else { break };
            let got = reader.take(start, per_run.min(left));
            left -= got.min(left);
        }
    }
    let whole_dirs = walk_dirs(&census, limit / 2);
    let total: u64 = reader.files.iter().map(|f| f.len() as u64).sum();
    let mut s = Sample::from_buffers("files", std::mem::take(&mut reader.files));
    s.paths = std::mem::take(&mut reader.paths);
    s.info.whole_dirs = whole_dirs.len() as u64;
    s.whole_dirs = whole_dirs;
    s.info.cold = cold;
    s.info.truncated = !census.complete || total < census.bytes;
    s.info.skipped = census.skipped + reader.unreadable;
    s.info.read_seconds = Some(reader.read_time.as_secs_f64());
    let (per_file, per_byte) = fit(&reader.timings);
    (s.info.read_per_file, s.info.read_per_byte) = (Some(per_file), Some(per_byte));
    s.info.runs = if everything { 1 } else { RUNS };
    s.info.census_files = census.files;
    s.info.census_bytes = census.bytes;
    s.info.census_complete = census.complete;
    Ok(s)
}

/// The middle of the `i`-th of `n` equal parts of `total`: `total x (2i + 1) / 2n`.
fn step(total: u64, i: u64, n: u64) -> u64 {
    u64::try_from(u128::from(total) * u128::from(2 * i + 1) / u128::from(2 * n)).unwrap_or(total)
}

/// Where the reading is: block, file in its listing, offset in the file.
type Cursor = (usize, usize, u64);

/// Reads the sample's runs, never the same bytes twice.
struct Reader<'a> {
    census: &'a Census,
    cold: bool,
    /// The last block listed, and its listing.
    listed: Option<(usize, Vec<(PathBuf, u64)>)>,
    /// Where the last run ended.
    next: Cursor,
    files: Vec<Vec<u8>>,
    paths: Vec<PathBuf>,
    unreadable: u64,
    /// Time spent opening and reading, not listing.
    read_time: Duration,
    /// Each piece's length and the seconds it took to open and read.
    timings: Vec<(f64, f64)>,
}

impl Reader<'_> {
    fn listing(&mut self, block: usize) -> &[(PathBuf, u64)] {
        if self.listed.as_ref().is_none_or(|(b, _)| *b != block) {
            self.listed = Some((block, self.census.blocks[block].listing()));
        }
        self.listed.as_ref().map_or(&[], |(_, l)| l.as_slice())
    }

    /// Where the run for the `at`-th counted byte starts: at that byte's file,
    /// early enough in it to read `run` bytes (from its start when it is
    /// smaller), and never before the last run's end. `None` past the end.
    fn position(&mut self, at: u64, run: u64) -> Option<Cursor> {
        let (block, mut into) = self.census.locate(at, |b| b.bytes)?;
        let mut found = (block, 0, 0);
        let listing = self.listing(block);
        for (i, (_, len)) in listing.iter().enumerate() {
            if into < *len || i + 1 == listing.len() {
                found = (block, i, into.min(len.saturating_sub(run)) & !4095);
                break;
            }
            into -= len;
        }
        Some(found.max(self.next))
    }

    /// Reads up to `want` bytes from `from` on, file after file; returns how many.
    fn take(&mut self, from: Cursor, want: u64) -> u64 {
        let (mut block, mut file, mut offset) = from;
        let mut got = 0u64;
        while got < want && block < self.census.blocks.len() {
            let Some((path, len)) = self.listing(block).get(file).cloned() else {
                (block, file, offset) = (block + 1, 0, 0);
                continue;
            };
            if self.cold {
                // A file that cannot be evicted is read all the same.
                let _ = evict(&path);
            }
            let started = Instant::now();
            let read = read_piece(&path, offset, want - got);
            let took = started.elapsed();
            self.read_time += took;
            match read {
                Ok(data) if !data.is_empty() || len == 0 => {
                    self.timings.push((data.len() as f64, took.as_secs_f64()));
                    let end = offset + data.len() as u64;
                    got += data.len() as u64;
                    self.files.push(data);
                    self.paths.push(path);
                    if end < len && got >= want {
                        offset = end;
                    } else {
                        (file, offset) = (file + 1, 0);
                    }
                }
                Ok(_) => (file, offset) = (file + 1, 0),
                Err(_) => {
                    self.unreadable += 1;
                    (file, offset) = (file + 1, 0);
                }
            }
        }
        self.next = self.next.max((block, file, offset));
        got
    }
}

/// Seconds per piece and per byte of the least-squares line through the
/// pieces' (length, seconds), neither below 0: with no spread of lengths (or a
/// line that would make one negative) the other takes the whole time.
fn fit(points: &[(f64, f64)]) -> (f64, f64) {
    let n = points.len() as f64;
    let (sx, sy) = points.iter().fold((0.0, 0.0), |(x, y), p| (x + p.0, y + p.1));
    if points.is_empty() {
        return (0.0, 0.0);
    }
    let (mx, my) = (sx / n, sy / n);
    let (cov, var) = points.iter().fold((0.0, 0.0), |(c, v), p| (c + (p.0 - mx) * (p.1 - my), v + (p.0 - mx).powi(2)));
    let slope = if var > 0.0 { cov / var } else { f64::NAN };
    let intercept = my - slope * mx;
    if slope.is_nan() || slope < 0.0 {
        (my, 0.0)
    } else if intercept < 0.0 {
        (0.0, if sx > 0.0 { sy / sx } else { 0.0 })
    } else {
        (intercept, slope)
    }
}

/// Up to `len` bytes of a file from `offset`, opened without following a link.
fn read_piece(path: &Path, offset: u64, len: u64) -> std::io::Result<Vec<u8>> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = open_file(path)?;
    let size = f.metadata()?.len();
    if offset > 0 {
        f.seek(SeekFrom::Start(offset))?;
    }
    let mut data = Vec::with_capacity(size.saturating_sub(offset).min(len) as usize);
    f.take(len).read_to_end(&mut data)?;
    Ok(data)
}

/// The directories the walk backs up whole: at even steps of the counted
/// files, taken coarse to fine from the middle, the largest directory holding
/// that file (or, when it is in a directory too large, the next one in name
/// order) whose count is complete, which fits in what is left of `bytes` and
/// [`WALK_FILES`], and which neither holds nor lies in a directory already
/// taken. (The per-file work is about the same in any directory; what matters
/// is that the walk holds many files, so a large directory is taken whole
/// rather than left out.)
fn walk_dirs(census: &Census, bytes: u64) -> Vec<PathBuf> {
    let mut picked: Vec<usize> = Vec::new();
    let (mut left_bytes, mut left_files) = (bytes, WALK_FILES);
    let overlaps = |picked: &[usize], i: usize| {
        let p = &census.blocks[i].path;
        picked.iter().any(|&q| p.starts_with(&census.blocks[q].path) || census.blocks[q].path.starts_with(p))
    };
    // The middle first, then the quarters, the eighths...: a walk full before
    // the last step is still spread over all the files.
    let bits = WALK_STEPS.trailing_zeros();
    for k in 0..WALK_STEPS {
        let j = ((k.reverse_bits() >> (64 - bits)) + WALK_STEPS / 2) % WALK_STEPS;
        let Some((block, _)) = census.locate(step(census.files, j, WALK_STEPS), |b| b.files) else { break };
        let fits = |i: usize| {
            let b = &census.blocks[i];
            !b.is_file
                && b.complete
                && b.sub_files > 0
                && b.sub_bytes <= left_bytes
                && b.sub_files <= left_files
                && !overlaps(&picked, i)
        };
        let Some(mut unit) = (block..census.blocks.len()).find(|&i| fits(i)) else { continue };
        while let Some(p) = census.blocks[unit].parent.filter(|&p| fits(p)) {
            unit = p;
        }
        left_bytes -= census.blocks[unit].sub_bytes;
        left_files -= census.blocks[unit].sub_files;
        picked.push(unit);
    }
    picked.sort_unstable();
    picked.into_iter().map(|i| census.blocks[i].path.clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::bench::data::read_again;

    fn write(path: &Path, len: usize, byte: u8) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, vec![byte; len]).unwrap();
    }

    #[test]
    fn reads_a_bounded_sample_without_following_links() {
        let dir = tempfile::tempdir().unwrap();
        write(&dir.path().join("a"), 1000, 1);
        write(&dir.path().join("sub/b"), 3000, 2);
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join("link")).unwrap();
        let root = [dir.path().to_path_buf()];
        let s = read_sample(&root, 1 << 20, false).unwrap();
        assert_eq!((s.info.files, s.info.bytes, s.info.skipped, s.info.runs), (2, 4000, 1, 1));
        assert!(!s.info.truncated);
        assert_eq!((s.info.census_files, s.info.census_bytes, s.info.census_complete), (2, 4000, true));
        // Everything fits the walk: the directory given is walked whole.
        assert_eq!(s.whole_dirs, root.to_vec());
        let s = read_sample(&root, 2000, false).unwrap();
        assert!(s.info.truncated && s.info.bytes <= 2000 && s.info.bytes > 0, "{:?}", s.info);
        // The files beyond the sample are counted, not read; the link is not a file.
        assert_eq!((s.info.census_files, s.info.census_bytes, s.info.census_complete), (2, 4000, true));
        assert!(read_sample(&[dir.path().join("absent")], 100, false).is_err());
        // Cold: the same bytes, each file evicted before it was read, and the
        // paths kept for reading again.
        let cold = read_sample(&root, 1 << 20, true).unwrap();
        assert!(cold.info.cold && !s.info.cold);
        assert_eq!(cold.files, read_sample(&root, 1 << 20, false).unwrap().files);
        assert_eq!(cold.paths, vec![dir.path().join("a"), dir.path().join("sub/b")]);
        let mut buf = Vec::new();
        assert_eq!(read_again(&cold.paths[1], 100, &mut buf), 100);
        assert_eq!(buf, vec![2u8; 100]);
        assert_eq!(read_again(&dir.path().join("link"), 100, &mut buf), 0, "a link is not followed");
        // A link given as a path is skipped, not followed.
        let s = read_sample(&[dir.path().join("link")], 100, false).unwrap();
        assert_eq!((s.info.files, s.info.skipped), (0, 1));
    }

    /// A tree of two parts: `small` with many 1 KiB files in directories of 20,
    /// then `large` with one directory of 64 KiB files. Each part is half the bytes.
    fn two_parts(root: &Path) {
        for d in 0..32 {
            for f in 0..20 {
                write(&root.join(format!("small/d{d:02}/f{f:02}")), 1024, 1);
            }
        }
        for f in 0..10 {
            write(&root.join(format!("large/f{f:02}")), 64 << 10, 2);
        }
    }

    #[test]
    fn the_sample_is_spread_over_the_bytes_whatever_the_order_of_the_paths() {
        let dir = tempfile::tempdir().unwrap();
        two_parts(dir.path());
        let (small, large) = (dir.path().join("small"), dir.path().join("large"));
        for paths in [[small.clone(), large.clone()], [large.clone(), small.clone()]] {
            let s = read_sample(&paths, 160 << 10, false).unwrap();
            assert_eq!((s.info.census_files, s.info.census_bytes), (650, 1_310_720));
            assert_eq!(s.info.runs, RUNS);
            assert!(s.info.truncated);
            let from = |part: &Path| -> u64 {
                s.paths.iter().zip(&s.files).filter(|(p, _)| p.starts_with(part)).map(|(_, f)| f.len() as u64).sum()
            };
            // Half the runs in each part, whichever comes first (the first
            // 160 KiB in name order would be all of one part).
            let (in_small, in_large) = (from(&small), from(&large));
            assert_eq!(in_small + in_large, s.info.bytes);
            assert!(in_small >= 60 << 10 && in_large >= 60 << 10, "{paths:?}: {in_small} and {in_large}");
            // Runs never read the same bytes twice.
            let mut seen = s.paths.clone();
            seen.dedup();
            assert!(seen.len() + 8 >= s.paths.len(), "{paths:?}: {:?}", s.paths);
        }
    }

    #[test]
    fn reading_time_splits_into_a_cost_per_file_and_per_byte() {
        // 10 µs a file and 1 ns a byte, exactly.
        let points: Vec<(f64, f64)> = [0.0, 1e3, 1e4, 1e5, 1e6].iter().map(|&x| (x, 1e-5 + x * 1e-9)).collect();
        let (f, b) = fit(&points);
        assert!((f - 1e-5).abs() < 1e-12 && (b - 1e-9).abs() < 1e-15, "{f} {b}");
        // One length only: all per file; a line through negative time per file: all per byte.
        assert_eq!(fit(&[(10.0, 2.0), (10.0, 4.0)]), (3.0, 0.0));
        assert_eq!(fit(&[(1.0, 0.0), (3.0, 4.0)]), (0.0, 1.0));
        assert_eq!(fit(&[]), (0.0, 0.0));
    }

    #[test]
    fn a_large_file_is_read_in_pieces_at_its_steps() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big");
        // Each 4 KiB block holds its own number, so a piece shows where it came from.
        let data: Vec<u8> = (0u32..1024).flat_map(|i| std::iter::repeat_n((i % 251) as u8, 4096)).collect();
        std::fs::write(&path, &data).unwrap();
        let s = read_sample(std::slice::from_ref(&path), 64 << 10, false).unwrap();
        assert_eq!(s.info.bytes, 64 << 10);
        assert_eq!(s.files.len(), RUNS as usize);
        let firsts: Vec<u8> = s.files.iter().map(|f| f[0]).collect();
        // 16 pieces of 4 KiB, one in each sixteenth of the file, in order.
        let expected: Vec<u8> = (0..16u32).map(|i| ((i * 64 + 32) % 251) as u8).collect();
        assert_eq!(firsts, expected);
        assert!(s.whole_dirs.is_empty(), "a file given alone has no directory to walk");
    }

    #[test]
    fn the_walk_takes_small_whole_directories_spread_over_the_files() {
        let dir = tempfile::tempdir().unwrap();
        two_parts(dir.path());
        let census = Census::count(&[dir.path().to_path_buf()], Duration::from_secs(60)).unwrap();
        assert!(census.complete);
        // A walk of at most 16 KiB: no directory fits.
        assert!(walk_dirs(&census, 16 << 10).is_empty());
        // 320 KiB: directories of 20 KiB (`small/dNN`; `small` is 640 KiB), spread over the 32.
        let walk = walk_dirs(&census, 320 << 10);
        assert!(walk.len() >= 8 && walk.len() <= 16, "{walk:?}");
        assert!(walk.iter().all(|d| d.parent() == Some(&dir.path().join("small"))), "{walk:?}");
        assert!(walk.first().unwrap().ends_with("d00") || walk.first().unwrap().ends_with("d01"), "{walk:?}");
        assert!(walk.last().unwrap().ends_with("d31") || walk.last().unwrap().ends_with("d30"), "{walk:?}");
        // In 1 MiB `small` fits whole (640 KiB in 640 files) and is taken
        // rather than its parts; `large` (another 640 KiB) no longer fits beside it.
        assert_eq!(walk_dirs(&census, 1 << 20), vec![dir.path().join("small")]);
        // Everything fits: the directory given itself.
        assert_eq!(walk_dirs(&census, 2 << 20), vec![dir.path().to_path_buf()]);
        // A count cut short leaves out the directories it did not finish.
        let cut = Census::count(&[dir.path().to_path_buf()], Duration::ZERO).unwrap();
        assert!(!cut.complete);
        assert!(walk_dirs(&cut, 2 << 20).is_empty());
    }
}
