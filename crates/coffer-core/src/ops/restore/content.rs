//! The contents of the files of a batch: where they come from, and writing
//! them. See docs/design.md#restore.
//!
//! Every chunk reference of the batch's files is planned first and grouped by
//! the pack that holds the blob ([`Sources::locate`]); each pack's references are
//! cut into few large reads (neighbouring blobs are fetched together, so the
//! storage does not see individual blob lengths), and the reads into waves
//! ([`Sizing`]). The fetch stage (module `fetch`) has the waves read; the writer
//! creates the files, then, as each read of a wave arrives, decrypts, verifies
//! (each blob once) and writes its blobs in parallel, with positioned writes, to
//! every place that needs them ([`write_read`]).
//! Files are created at their full length first, so the chunks of zeros skipped
//! in sparse files stay holes.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::ops::Range;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::FileExt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use rayon::prelude::*;

use super::handles;
use super::plan::FileJob;
use crate::error::{Error, Result};
use crate::format::pack::{BlobType, PackEntry};
use crate::progress::Progress;
use crate::repo::{PackInfo, Repository};

/// How blobs are gathered into reads, how much one wave fetches, and how far
/// the fetch stage runs ahead of the writer: waves are fetched while earlier
/// ones are written, so that the storage's round trips overlap the decryption
/// and the writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Sizing {
    /// Blobs of a pack closer than this are read with one request (the gap
    /// between them is read and discarded).
    max_gap: u64,
    /// The longest single read.
    max_range: u64,
    /// The most bytes one wave fetches (unless a single range is longer).
    wave_bytes: u64,
    /// The most bytes fetched (or being fetched) and not yet written.
    pub ahead: u64,
}

impl Sizing {
    /// For a backend with `connections` requests in flight: on a local disk (a
    /// few), blobs less than 1 MiB apart read together (a seek costs about as
    /// much as reading that), waves of 8 MiB in reads of up to 8 MiB, one wave
    /// ahead (more saved no time there: docs/performance.md); on a remote store
    /// (many), blobs less than 64 KiB apart read together (with many requests in
    /// flight a request costs little time, while every byte of a gap is
    /// transferred, and often paid for), waves of up to 32 MiB in reads of up to
    /// 4 MiB, so that a wave is several requests at once, and two waves ahead,
    /// so that the reads of many small batches are in flight together.
    pub fn for_connections(connections: usize) -> Sizing {
        const MIB: u64 = 1 << 20;
        if connections < 8 {
            return Sizing { max_gap: MIB, max_range: 8 * MIB, wave_bytes: 8 * MIB, ahead: 8 * MIB };
        }
        let wave_bytes = (connections as u64 * MIB).min(32 * MIB);
        Sizing { max_gap: 64 << 10, max_range: 4 * MIB, wave_bytes, ahead: 2 * wave_bytes }
    }
}

/// One place a blob goes: a file and an offset in it.
#[derive(Clone, Copy)]
struct Target {
    entry: PackEntry,
    file: usize,
    offset: u64,
}

/// One read: the targets `targets` of pack `pack` (indices in
/// [`Sources::packs`]), sorted by their place in the pack, lie in `start..end`
/// of that pack.
struct Span {
    pack: usize,
    start: u64,
    end: u64,
    targets: Range<usize>,
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

    /// Per file: its length and identity, or why it failed. Takes the errors out.
    fn results(&self, sizes: &[u64], created: Vec<Option<Created>>) -> Vec<Written> {
        self.0
            .iter()
            .zip(sizes)
            .zip(created)
            .map(|((e, &size), created)| Written {
                result: e.lock().expect("poisoned").take().map_or(Ok(size), Err),
                created,
            })
            .collect()
    }
}

/// What became of one file of the batch.
pub(super) struct Written {
    /// Its length, or why it failed.
    pub result: Result<u64>,
    /// The file created, if it was.
    pub created: Option<Created>,
}

/// A file the restore created: its device and inode, and the handle it was
/// created with, kept while the batch's share of open files allows; without
/// it, the file is opened again by name, and checked to be the same file, each
/// time it is written to or finished.
pub(super) struct Created {
    /// The device and inode.
    pub id: (u64, u64),
    file: Option<File>,
}

impl Created {
    /// Runs `f` on a handle to the file `n` of `dir`: the one kept, else the
    /// file opened again.
    pub fn with<R>(&self, dir: BorrowedFd<'_>, n: &[u8], f: impl FnOnce(&File) -> io::Result<R>) -> io::Result<R> {
        match &self.file {
            Some(file) => f(file),
            None => f(&File::from(handles::reopen_file(dir, n, self.id)?)),
        }
    }

    /// Checks that name `n` of `dir` still holds this file, as opening it again
    /// does: a file swapped for another while it was restored through its kept
    /// handle is not reported restored.
    pub fn still_there(&self, dir: BorrowedFd<'_>, n: &[u8]) -> io::Result<()> {
        if self.file.is_none() {
            return Ok(());
        }
        match handles::stat_at(dir, n)? {
            Some(st) if (st.st_dev, st.st_ino) == self.id => Ok(()),
            _ => Err(handles::replaced()),
        }
    }
}

/// Where the contents of one batch's files come from, and which files failed:
/// shared by the fetch stage and the write stage.
pub(super) struct Sources {
    /// Per file: its length.
    sizes: Vec<u64>,
    /// Per pack the batch reads from: the places its blobs go, sorted by their
    /// place in the pack.
    packs: Vec<(PackInfo, Vec<Target>)>,
    /// The reads, pack by pack.
    spans: Vec<Span>,
    /// The first error of each file.
    errors: Errors,
}

impl Sources {
    /// Where every chunk of every file comes from, grouped by pack and sorted by
    /// place in the pack, cut into reads as `sizing` says; and the length of every
    /// file. A chunk no index knows fails its file.
    pub fn locate(repo: &Repository, files: &[FileJob], sizing: Sizing) -> Sources {
        let errors = Errors::new(files.len());
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
        let spans = (packs.iter().enumerate()).flat_map(|(i, (_, targets))| split_ranges(i, targets, sizing)).collect();
        Sources { sizes, packs, spans, errors }
    }

    fn pack(&self, s: &Span) -> &PackInfo {
        &self.packs[s.pack].0
    }

    fn targets(&self, s: &Span) -> &[Target] {
        &self.packs[s.pack].1[s.targets.clone()]
    }

    /// The reads in waves: consecutive runs of reads (their places in
    /// [`Sources::spans`]) of at most `sizing`'s wave bytes together (or a
    /// single longer read).
    pub fn waves(&self, sizing: Sizing) -> impl Iterator<Item = Vec<usize>> + '_ {
        let mut next = 0;
        std::iter::from_fn(move || {
            if next == self.spans.len() {
                return None;
            }
            let mut bytes = 0;
            let n = self.spans[next..]
                .iter()
                .take_while(|s| {
                    bytes += s.end - s.start;
                    bytes <= sizing.wave_bytes
                })
                .count()
                .max(1);
            let wave = (next..next + n).collect();
            next += n;
            Some(wave)
        })
    }

    /// The bytes the reads `wave` fetch.
    pub fn bytes(&self, wave: &[usize]) -> u64 {
        wave.iter().map(|&i| self.spans[i].end - self.spans[i].start).sum()
    }

    /// Reads span `i`, unless every file it serves has already failed. A storage
    /// error fails its files; a missing or short pack leaves its blobs to other
    /// copies (see [`Read`]).
    pub fn fetch(&self, repo: &Repository, i: usize) -> Option<Bytes> {
        let s = &self.spans[i];
        let targets = self.targets(s);
        if targets.iter().all(|t| self.errors.failed(t.file)) {
            return None;
        }
        let pack = self.pack(s);
        match repo.read_pack_range(pack, s.start, s.end - s.start) {
            Ok(bytes) => Some(Ok(bytes)),
            Err(Error::Corrupt { object, detail }) => Some(Err((object, detail))),
            Err(e) => {
                self.errors.fail_all(targets, pack, &e);
                None
            }
        }
    }

    /// Per file: its length, or why it failed (taking the errors out), and
    /// the identity of the file created.
    pub fn results(&self, created: Vec<Option<Created>>) -> Vec<Written> {
        self.errors.results(&self.sizes, created)
    }
}

/// A fetched read: its place in [`Sources::spans`] and its bytes, or, when this
/// copy is missing or damaged, what is wrong with it (as the object and detail
/// of an [`Error::Corrupt`]): its blobs are then read from other copies. Reads
/// whose files had all failed, or that met a storage error, are left out (the
/// error is recorded for their files).
pub(super) type Read = (usize, Bytes);

/// The bytes of one read, or what is wrong with that copy.
pub(super) type Bytes = std::result::Result<Vec<u8>, (String, String)>;

/// Creates every file at its full length, as `sources` says (with `O_EXCL`, in
/// its directory's handle); returns each file created, the handles of the
/// first `keep` kept.
pub(super) fn create_files(files: &[FileJob], sources: &Sources, overwrite: bool, keep: usize) -> Vec<Option<Created>> {
    let (sizes, errors) = (&sources.sizes, &sources.errors);
    let kept = AtomicUsize::new(0);
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
                let file = File::from(fd);
                file.set_len(sizes[i])?;
                let keeping = kept.fetch_add(1, Ordering::Relaxed) < keep;
                Ok(Created { id, file: keeping.then_some(file) })
            });
            match made {
                Ok(created) => Some(created),
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

/// Cuts the sorted targets of pack `pack` into reads: blobs less than
/// `sizing`'s gap apart share a read, up to its longest read.
fn split_ranges(pack: usize, targets: &[Target], sizing: Sizing) -> Vec<Span> {
    let mut spans = Vec::new();
    let mut start = 0;
    while start < targets.len() {
        let first = targets[start].entry.offset;
        let mut end = first + targets[start].entry.length as u64;
        let mut stop = start + 1;
        while stop < targets.len() {
            let e = &targets[stop].entry;
            let e_end = e.offset + e.length as u64;
            if e.offset > end + sizing.max_gap || e_end - first > sizing.max_range {
                break;
            }
            end = end.max(e_end);
            stop += 1;
        }
        spans.push(Span { pack, start: first, end, targets: start..stop });
        start = stop;
    }
    spans
}

/// Writes the blobs of a fetched read in parallel, each decrypted where it lies
/// in the read ([`cut_blobs`]).
pub(super) fn write_read(
    repo: &Repository,
    files: &[FileJob],
    sources: &Sources,
    created: &[Option<Created>],
    (i, bytes): Read,
    progress: &dyn Progress,
) {
    let s = &sources.spans[i];
    let blobs: Vec<&[Target]> = sources.targets(s).chunk_by(|a, b| a.entry.offset == b.entry.offset).collect();
    let write = |(blob, sealed): (&[Target], Sealed<'_>)| {
        write_blob(repo, files, sources, created, s, sealed, blob, progress);
    };
    match bytes {
        Ok(mut bytes) => {
            let sealed = cut_blobs(&mut bytes, s.start, &blobs);
            blobs.into_par_iter().zip(sealed).for_each(write);
        }
        Err(bad) => blobs.into_par_iter().map(|blob| (blob, Sealed::Bad(&bad))).for_each(write),
    }
}

/// One blob's sealed bytes as read, to be decrypted where they lie, or what is
/// wrong with the copy they were read from.
enum Sealed<'a> {
    /// Its own part of the read.
    Part(&'a mut [u8]),
    /// A copy of its bytes (see [`cut_blobs`]).
    Copy(Vec<u8>),
    /// The copy read is missing or damaged: this object, this detail.
    Bad(&'a (String, String)),
}

/// Cuts a read beginning at pack offset `start` into the sealed bytes of each
/// of `blobs` (sorted by offset), so that each is decrypted where it lies. The
/// blobs of a pack do not overlap, but a hostile pack header could make them: a
/// blob overlapping one before it gets a copy of its bytes instead, made before
/// any blob is decrypted.
fn cut_blobs<'a>(bytes: &'a mut [u8], start: u64, blobs: &[&[Target]]) -> Vec<Sealed<'a>> {
    let range = |blob: &[Target]| {
        let e = &blob[0].entry;
        let at = (e.offset - start) as usize;
        at..at + e.length as usize
    };
    let mut end = 0;
    let copies: Vec<Option<Vec<u8>>> = blobs
        .iter()
        .map(|blob| {
            let r = range(blob);
            if r.start < end {
                return Some(bytes[r].to_vec());
            }
            end = r.end;
            None
        })
        .collect();
    let (mut rest, mut cut) = (bytes, 0);
    blobs
        .iter()
        .zip(copies)
        .map(|(blob, copy)| match copy {
            Some(copy) => Sealed::Copy(copy),
            None => {
                let r = range(blob);
                let (mine, after) = std::mem::take(&mut rest)[r.start - cut..].split_at_mut(r.len());
                (rest, cut) = (after, r.end);
                Sealed::Part(mine)
            }
        })
        .collect()
}

thread_local! {
    /// Per writer thread, the buffer blobs are decompressed into, reused from
    /// blob to blob; one grown beyond [`SCRATCH_KEPT`] is let go after its blob.
    static SCRATCH: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// The largest decompression buffer a writer thread keeps: twice the default
/// largest chunk.
const SCRATCH_KEPT: usize = 8 << 20;

/// Decrypts and verifies one blob read as part of `s` (`sealed`, decrypted
/// where it lies), and writes it to every target in `blob` (all of which name
/// that blob). A blob whose copy in `s`'s pack is missing or does not verify is
/// read from another copy the index knows ([`Repository::load_other_copy`])
/// before its files fail.
#[allow(clippy::too_many_arguments)]
fn write_blob(
    repo: &Repository,
    files: &[FileJob],
    sources: &Sources,
    created: &[Option<Created>],
    s: &Span,
    mut sealed: Sealed<'_>,
    blob: &[Target],
    progress: &dyn Progress,
) {
    let errors = &sources.errors;
    if blob.iter().all(|t| errors.failed(t.file)) {
        return;
    }
    let pack = sources.pack(s);
    let e = &blob[0].entry;
    // Taken, not borrowed: a thread that picks up another blob while this one
    // waits (for another copy) starts a buffer of its own.
    let mut scratch = SCRATCH.take();
    let decoded = match &mut sealed {
        Sealed::Part(bytes) => repo.decode_blob_in_place(pack, e, bytes, &mut scratch),
        Sealed::Copy(bytes) => repo.decode_blob_in_place(pack, e, bytes, &mut scratch),
        Sealed::Bad((object, detail)) => Err(Error::corrupt(object.clone(), detail.clone())),
    };
    // A bad copy gives way to another copy the index knows.
    let other;
    let data = match decoded {
        Ok(d) => d,
        Err(err) => match repo.load_other_copy(BlobType::Data, &e.id, &pack.id, err) {
            Ok(d) => {
                other = d;
                &other[..]
            }
            Err(err) => return errors.fail_all(blob, pack, &err),
        },
    };
    write_targets(files, sources, created, blob, data, progress);
    if scratch.capacity() <= SCRATCH_KEPT {
        SCRATCH.set(scratch);
    }
}

/// Writes a blob's plaintext `data` to every target in `blob`.
fn write_targets(
    files: &[FileJob],
    sources: &Sources,
    created: &[Option<Created>],
    blob: &[Target],
    data: &[u8],
    progress: &dyn Progress,
) {
    let errors = &sources.errors;
    // Only a file flagged sparse leaves its chunks of zeros unwritten.
    let zeros = blob.iter().any(|t| files[t.file].node.sparse) && data.iter().all(|&b| b == 0);
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
            let Some(made) = &created[t.file] else { continue };
            let w = made.with(place.dir.as_fd(), &place.name, |file| file.write_all_at(data, t.offset));
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
    use super::{Sealed, Sizing, Target, cut_blobs, split_ranges};
    use crate::format::pack::{BlobType, PackEntry};
    use crate::id::Id;

    fn target(offset: u64, length: u32) -> Target {
        let entry = PackEntry { blob_type: BlobType::Data, id: Id([offset as u8; 32]), offset, length, raw_length: 0 };
        Target { entry, file: 0, offset: 0 }
    }

    #[test]
    fn a_read_is_cut_into_its_blobs_and_an_overlapping_blob_gets_a_copy() {
        // A read of pack bytes 100..160: blobs at 100 (10 bytes), 115 (20), one
        // a hostile header makes overlap it at 125 (10), and 140 (20).
        let targets = [target(100, 10), target(115, 20), target(125, 10), target(140, 20)];
        let blobs: Vec<&[Target]> = targets.chunks(1).collect();
        let mut bytes: Vec<u8> = (0..60).collect();
        let want: Vec<Vec<u8>> = [0..10, 15..35, 25..35, 40..60].map(|r| bytes[r].to_vec()).to_vec();
        let cut = cut_blobs(&mut bytes, 100, &blobs);
        let kinds: Vec<bool> = cut.iter().map(|c| matches!(c, Sealed::Copy(_))).collect();
        assert_eq!(kinds, [false, false, true, false], "only the overlapping blob is copied");
        for (c, want) in cut.into_iter().zip(&want) {
            match c {
                Sealed::Part(part) => {
                    assert_eq!(&part[..], &want[..]);
                    part.fill(0xff); // decrypted in place: the copy is not affected
                }
                Sealed::Copy(copy) => assert_eq!(&copy, want),
                Sealed::Bad(_) => unreachable!(),
            }
        }
    }

    #[test]
    fn a_remote_store_reads_across_small_gaps_only_and_a_local_disk_across_larger_ones() {
        const KIB: u64 = 1 << 10;
        // Blobs of 10 KiB at 0, then 40 KiB after the first (a small gap), then
        // 200 KiB after the second, then 900 KiB after the third.
        let targets = [0, 50, 260, 1170].map(|at| target(at * KIB, 10 << 10));
        let reads = |sizing| -> Vec<(u64, u64, usize)> {
            split_ranges(0, &targets, sizing).iter().map(|s| (s.start, s.end, s.targets.len())).collect()
        };
        assert_eq!(
            reads(Sizing::for_connections(32)),
            [(0, 60 * KIB, 2), (260 * KIB, 270 * KIB, 1), (1170 * KIB, 1180 * KIB, 1)],
            "only the 40 KiB gap is read over"
        );
        assert_eq!(reads(Sizing::for_connections(2)), [(0, 1180 * KIB, 4)], "every gap under 1 MiB is read over");
        let short = Sizing { max_range: 100 * KIB, ..Sizing::for_connections(2) };
        assert_eq!(reads(short), [(0, 60 * KIB, 2), (260 * KIB, 270 * KIB, 1), (1170 * KIB, 1180 * KIB, 1)]);
    }

    #[test]
    fn remote_waves_are_several_reads_and_local_ones_stay_small() {
        let local = Sizing::for_connections(2);
        assert_eq!((local.max_range, local.wave_bytes), (8 << 20, 8 << 20));
        assert_eq!(local.ahead, 8 << 20, "one wave ahead");
        let s3 = Sizing::for_connections(32);
        assert_eq!((s3.max_range, s3.wave_bytes), (4 << 20, 32 << 20), "eight reads at once");
        assert_eq!(s3.ahead, 64 << 20, "two waves ahead");
        assert_eq!(Sizing::for_connections(8).wave_bytes, 8 << 20);
        assert_eq!(Sizing::for_connections(1000).wave_bytes, 32 << 20, "bounded");
    }
}
