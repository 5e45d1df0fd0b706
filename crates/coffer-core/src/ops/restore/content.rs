//! Writing the contents of one batch of files, pack by pack.
//! See docs/design.md#restore.
//!
//! Every chunk reference of the batch's files is planned first and grouped by
//! the pack that holds the blob; each pack's references are cut into few large
//! ranges (neighbouring blobs are fetched together, so the storage does not see
//! individual blob lengths). The ranges are fetched in waves ([`Sizing`]), the
//! ranges of a wave concurrently; the blobs of the wave are
//! then decrypted, verified (each once) and written in parallel, with positioned
//! writes, to every place that needs them, while the next wave is fetched. Two
//! waves are in memory at a time.
//! Files are created at their full length first, so the chunks of zeros skipped
//! in sparse files stay holes.

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::sync::Mutex;

use rayon::prelude::*;

use super::handles;
use super::plan::FileJob;
use crate::error::{Error, Result};
use crate::format::pack::{BlobType, PackEntry};
use crate::progress::Progress;
use crate::repo::{PackInfo, Repository};

/// Blobs closer than this in a pack are read with one request (the gap is read
/// and discarded).
const MAX_GAP: u64 = 1 << 20;
/// How much one wave fetches, and in how long reads. One wave is written while
/// the next is fetched, so that the storage's round trips overlap the decryption
/// and the writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Sizing {
    /// The longest single read.
    max_range: u64,
    /// The most bytes one wave fetches (unless a single range is longer).
    wave_bytes: u64,
}

impl Sizing {
    /// For a backend with `connections` requests in flight: on a local disk (a
    /// few), waves of 8 MiB in reads of up to 8 MiB; on a remote store (many),
    /// waves of up to 32 MiB in reads of up to 4 MiB, so that a wave is several
    /// requests at once and one round trip fetches what a batch of files needs.
    fn for_connections(connections: usize) -> Sizing {
        const MIB: u64 = 1 << 20;
        if connections < 8 {
            return Sizing { max_range: 8 * MIB, wave_bytes: 8 * MIB };
        }
        Sizing { max_range: 4 * MIB, wave_bytes: (connections as u64 * MIB).min(32 * MIB) }
    }
}

/// One place a blob goes: a file and an offset in it.
#[derive(Clone, Copy)]
struct Target {
    entry: PackEntry,
    file: usize,
    offset: u64,
}

/// One read: `targets`, sorted by their place in the pack, lie in
/// `start..end` of `pack`.
struct Range<'a> {
    pack: &'a PackInfo,
    start: u64,
    end: u64,
    targets: &'a [Target],
}

/// The first error of each file of the batch.
struct Errors(Vec<Mutex<Option<Error>>>);

impl Errors {
    fn new(n: usize) -> Errors {
        Errors((0..n).map(|_| Mutex::new(None)).collect())
    }

    /// Records that file `i` failed, unless it already had.
    fn fail(&self, i: usize, e: Error) {
        let mut slot = self.0[i].lock().expect("poisoned");
        if slot.is_none() {
            *slot = Some(e);
        }
    }

    fn failed(&self, i: usize) -> bool {
        self.0[i].lock().expect("poisoned").is_some()
    }

    /// Fails every file `targets` write to with `err`, met reading `pack`: a
    /// storage error stays a storage error (exit 23, try again later), so that
    /// only damage is reported as damage.
    fn fail_all(&self, targets: &[Target], pack: &PackInfo, err: &Error) {
        for t in targets {
            let e = match err {
                Error::Backend(b) => Error::Backend(b.clone()),
                Error::Corrupt { object, detail } => Error::corrupt(object.clone(), detail.clone()),
                other => Error::corrupt(format!("pack {}", pack.id.short()), other.to_string()),
            };
            self.fail(t.file, e);
        }
    }

    /// Per file: its length and identity, or why it failed.
    fn into_results(self, sizes: Vec<u64>, created: Vec<Option<(u64, u64)>>) -> Vec<Written> {
        self.0
            .into_iter()
            .zip(sizes)
            .zip(created)
            .map(|((e, size), created)| Written {
                result: e.into_inner().expect("poisoned").map_or(Ok(size), Err),
                created,
            })
            .collect()
    }
}

/// What became of one file of the batch.
pub(super) struct Written {
    /// Its length, or why it failed.
    pub result: Result<u64>,
    /// The device and inode of the file created, if it was.
    pub created: Option<(u64, u64)>,
}

/// Writes the contents of `files`; returns, per file, its length or why it failed.
pub(super) fn write_contents(
    repo: &Repository,
    files: &[FileJob],
    overwrite: bool,
    progress: &dyn Progress,
) -> Vec<Written> {
    let errors = Errors::new(files.len());
    let (sizes, packs) = locate_chunks(repo, files, &errors);
    let created = create_files(files, &sizes, overwrite, &errors);
    let sizing = Sizing::for_connections(repo.backend().connections());
    let ranges: Vec<Range> =
        packs.iter().flat_map(|(pack, targets)| split_ranges(pack, targets, sizing.max_range)).collect();
    let errors_ref = &errors;
    std::thread::scope(|s| {
        let mut waves = waves(&ranges, sizing.wave_bytes);
        let mut next = waves.next().map(|w| fetch_wave(repo, w, errors_ref));
        while let Some(fetched) = next.take() {
            let ahead = waves.next().map(|w| s.spawn(move || fetch_wave(repo, w, errors_ref)));
            write_wave(repo, files, &created, &fetched, errors_ref, progress);
            drop(fetched);
            next = ahead.map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
        }
    });
    errors.into_results(sizes, created)
}

/// Where every chunk of every file comes from, grouped by pack and sorted by
/// place in the pack; and the length of every file.
fn locate_chunks(repo: &Repository, files: &[FileJob], errors: &Errors) -> (Vec<u64>, Vec<(PackInfo, Vec<Target>)>) {
    let mut sizes = vec![0u64; files.len()];
    let mut by_pack: HashMap<u32, (PackInfo, Vec<Target>)> = HashMap::new();
    let idx = repo.index();
    for (i, FileJob { node, .. }) in files.iter().enumerate() {
        let mut offset = 0;
        for id in &node.content {
            match idx.get(id) {
                Some((e, p)) if e.entry.blob_type == BlobType::Data => {
                    let target = Target { entry: e.entry, file: i, offset };
                    by_pack.entry(e.pack).or_insert_with(|| (p.clone(), Vec::new())).1.push(target);
                    offset += e.entry.raw_length as u64;
                }
                _ => {
                    errors.fail(i, Error::corrupt(format!("data blob {}", id.short()), "not in any index"));
                    break;
                }
            }
        }
        sizes[i] = offset;
    }
    let mut packs: Vec<(PackInfo, Vec<Target>)> = by_pack.into_values().collect();
    packs.sort_by_key(|(pack, _)| pack.id);
    for (_, targets) in &mut packs {
        targets.sort_by_key(|t| (t.entry.offset, t.file, t.offset));
    }
    (sizes, packs)
}

/// Creates every file at its full length (with `O_EXCL`, in its directory's
/// handle); returns the device and inode of each file created.
fn create_files(files: &[FileJob], sizes: &[u64], overwrite: bool, errors: &Errors) -> Vec<Option<(u64, u64)>> {
    files
        .par_iter()
        .enumerate()
        .map(|(i, job)| {
            if errors.failed(i) {
                return None;
            }
            let p = &job.place;
            let made = handles::create_file(p.dir.as_fd(), &p.name, overwrite).and_then(|fd| {
                let id = handles::identity(fd.as_fd())?;
                File::from(fd).set_len(sizes[i])?;
                Ok(id)
            });
            match made {
                Ok(id) => Some(id),
                Err(e) => {
                    let e = if handles::exists(&e) {
                        Error::TargetNotEmpty { path: p.path() }
                    } else {
                        Error::io(p.path(), e)
                    };
                    errors.fail(i, e);
                    None
                }
            }
        })
        .collect()
}

/// Cuts a pack's sorted targets into ranges: blobs less than [`MAX_GAP`] apart
/// share a range, up to `max_range` bytes.
fn split_ranges<'a>(pack: &'a PackInfo, targets: &'a [Target], max_range: u64) -> Vec<Range<'a>> {
    let mut ranges = Vec::new();
    let mut start = 0;
    while start < targets.len() {
        let first = targets[start].entry.offset;
        let mut end = first + targets[start].entry.length as u64;
        let mut stop = start + 1;
        while stop < targets.len() {
            let e = &targets[stop].entry;
            let e_end = e.offset + e.length as u64;
            if e.offset > end + MAX_GAP || e_end - first > max_range {
                break;
            }
            end = end.max(e_end);
            stop += 1;
        }
        ranges.push(Range { pack, start: first, end, targets: &targets[start..stop] });
        start = stop;
    }
    ranges
}

/// Consecutive runs of ranges of at most `wave_bytes` together (or a single
/// longer range).
fn waves<'r, 'a>(ranges: &'r [Range<'a>], wave_bytes: u64) -> impl Iterator<Item = &'r [Range<'a>]> {
    let mut rest = ranges;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut bytes = 0;
        let n = rest
            .iter()
            .take_while(|r| {
                bytes += r.end - r.start;
                bytes <= wave_bytes
            })
            .count()
            .max(1);
        let (wave, tail) = rest.split_at(n);
        rest = tail;
        Some(wave)
    })
}

/// A range and its bytes, or, when this copy is missing or damaged, what is
/// wrong with it (as the object and detail of an [`Error::Corrupt`]): its blobs
/// are then read from other copies.
type Fetched<'r, 'a> = (&'r Range<'a>, std::result::Result<Vec<u8>, (String, String)>);

/// Fetches the ranges of a wave concurrently, as many at once as the backend
/// wants in flight (not one per core: a remote store needs many requests
/// waiting at once).
fn fetch_wave<'r, 'a>(repo: &Repository, wave: &'r [Range<'a>], errors: &Errors) -> Vec<Fetched<'r, 'a>> {
    let positions: Vec<usize> = (0..wave.len()).collect();
    repo.fetch_many(&positions, |&i| fetch(repo, &wave[i], errors).map(|bytes| (i, bytes)))
        .into_iter()
        .flatten()
        .map(|(i, bytes)| (&wave[i], bytes))
        .collect()
}

/// Writes the blobs of a fetched wave in parallel.
fn write_wave(
    repo: &Repository,
    files: &[FileJob],
    created: &[Option<(u64, u64)>],
    fetched: &[Fetched],
    errors: &Errors,
    progress: &dyn Progress,
) {
    type Bytes = std::result::Result<Vec<u8>, (String, String)>;
    let blobs: Vec<(&Range, &Bytes, &[Target])> = fetched
        .iter()
        .flat_map(|(r, bytes)| {
            r.targets.chunk_by(|a, b| a.entry.offset == b.entry.offset).map(move |blob| (*r, bytes, blob))
        })
        .collect();
    blobs.par_iter().for_each(|(r, bytes, blob)| write_blob(repo, files, created, r, bytes, blob, errors, progress));
}

/// Reads a range, unless every file it serves has already failed. A storage
/// error fails its files; a missing or short pack leaves its blobs to other copies.
fn fetch(repo: &Repository, r: &Range, errors: &Errors) -> Option<std::result::Result<Vec<u8>, (String, String)>> {
    if r.targets.iter().all(|t| errors.failed(t.file)) {
        return None;
    }
    match repo.read_pack_range(r.pack, r.start, r.end - r.start) {
        Ok(bytes) => Some(Ok(bytes)),
        Err(Error::Corrupt { object, detail }) => Some(Err((object, detail))),
        Err(e) => {
            errors.fail_all(r.targets, r.pack, &e);
            None
        }
    }
}

/// Decrypts and verifies one blob read as part of `r` (`bytes`), and writes it
/// to every target in `blob` (all of which name that blob). A blob whose copy in
/// `r`'s pack is missing or does not verify is read from another copy the index
/// knows ([`Repository::load_other_copy`]) before its files fail.
#[allow(clippy::too_many_arguments)]
fn write_blob(
    repo: &Repository,
    files: &[FileJob],
    created: &[Option<(u64, u64)>],
    r: &Range,
    bytes: &std::result::Result<Vec<u8>, (String, String)>,
    blob: &[Target],
    errors: &Errors,
    progress: &dyn Progress,
) {
    if blob.iter().all(|t| errors.failed(t.file)) {
        return;
    }
    let e = &blob[0].entry;
    let at = (e.offset - r.start) as usize;
    let decoded = match bytes {
        Ok(bytes) => repo.decode_blob(r.pack, e, &bytes[at..at + e.length as usize]),
        Err((object, detail)) => Err(Error::corrupt(object.clone(), detail.clone())),
    };
    // A bad copy gives way to another copy the index knows.
    let data = match decoded.or_else(|err| repo.load_other_copy(BlobType::Data, &e.id, &r.pack.id, err)) {
        Ok(d) => d,
        Err(err) => return errors.fail_all(blob, r.pack, &err),
    };
    let zeros = data.iter().all(|&b| b == 0);
    for t in blob {
        let FileJob { place, node } = &files[t.file];
        if errors.failed(t.file) {
            continue;
        }
        // Only a display that wants totals (a progress bar) names the current
        // file: the path is not built for the others (deep trees make it long).
        if t.offset == 0 && progress.wants_totals() {
            progress.start_item(&place.path());
        }
        if !(zeros && node.sparse) {
            let Some(id) = created[t.file] else { continue };
            let w = handles::reopen_file(place.dir.as_fd(), &place.name, id)
                .and_then(|fd| File::from(fd).write_all_at(&data, t.offset));
            if let Err(err) = w {
                errors.fail(t.file, Error::io(place.path(), err));
                continue;
            }
        }
        progress.add_bytes(data.len() as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::Sizing;

    #[test]
    fn remote_waves_are_several_reads_and_local_ones_stay_small() {
        let local = Sizing::for_connections(2);
        assert_eq!((local.max_range, local.wave_bytes), (8 << 20, 8 << 20));
        let s3 = Sizing::for_connections(32);
        assert_eq!((s3.max_range, s3.wave_bytes), (4 << 20, 32 << 20), "eight reads at once");
        assert_eq!(Sizing::for_connections(8).wave_bytes, 8 << 20);
        assert_eq!(Sizing::for_connections(1000).wave_bytes, 32 << 20, "bounded");
    }
}
