//! Reading blobs ahead of their use, with several range requests in flight.
//!
//! Over remote storage one blob per round trip, one after the other, leaves the link
//! idle: a 50 ms round trip caps a reader at twenty blobs a second. So an import hands
//! [`ResticRepo::read_ahead`] the files it will read, in the order it will read them;
//! their blobs are planned into merged range requests ([`plan`](super::plan)) a window at
//! a time, and up to [`ReadAheadLimits::requests`] I/O threads fetch, authenticate,
//! decrypt, decompress and hash them while the caller reads the files before. Memory is
//! bounded by [`ReadAheadLimits::bytes`]: a request goes out only when its bytes (its
//! blobs decoded, and its gaps until it is read) fit beside those fetched and not yet
//! taken, except the request the reader is waiting for, which always goes. So memory
//! does not grow with the repository, nor with a file.
//!
//! Every blob is checked as [`ResticRepo::blob`] checks it, every length against its
//! limit before anything is allocated. A blob that fails where it was fetched is read
//! again through [`ResticRepo::blob`], which tries its other copies and gives the error
//! an unhurried reader would give.

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::Read;
use std::sync::{Condvar, Mutex};

use super::id::{BlobId, PackId};
use super::pack::{self, PackedBlob};
use super::plan::{self, PlanLimits, Want};
use super::{Error, ResticRepo};

/// How far and how wide a read-ahead reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadAheadLimits {
    /// Requests in flight at most (the storage's connections).
    pub requests: usize,
    /// Bytes fetched or being fetched and not yet taken by the reader, at most (one
    /// request more when the reader waits for it).
    pub bytes: u64,
    /// Bytes of blobs planned together, at most: the wider, the more neighbours merge.
    pub window: u64,
    /// Files planned and not yet handed out, at most (empty files have no bytes).
    pub files: usize,
    /// How requests are formed.
    pub plan: PlanLimits,
}

/// Bytes in flight by default: 32 MiB, counted decoded. At a 50 ms round trip 16 MiB
/// left the import of compressible data waiting for the storage (9.3 s for a first
/// snapshot that 32 MiB read in 6.6 s; docs/performance.md#import-from-restic).
pub const READ_AHEAD_BYTES: u64 = 32 << 20;
/// Bytes planned together by default: 16 MiB.
pub const READ_AHEAD_WINDOW: u64 = 16 << 20;
/// Files planned ahead at most by default.
pub const READ_AHEAD_FILES: usize = 4096;
/// Requests in flight at most, whatever the storage allows: within the byte budget
/// more would only wait.
pub const MAX_REQUESTS: usize = 16;

impl ReadAheadLimits {
    /// The defaults for a storage that takes `connections` requests at once.
    pub fn for_connections(connections: usize) -> ReadAheadLimits {
        ReadAheadLimits {
            requests: connections.clamp(1, MAX_REQUESTS),
            bytes: READ_AHEAD_BYTES,
            window: READ_AHEAD_WINDOW,
            files: READ_AHEAD_FILES,
            plan: PlanLimits::default(),
        }
    }
}

/// One wanted blob of a request: its number in the read-ahead's order, where it lies,
/// and the bytes it holds in memory once decoded.
#[derive(Debug, Clone)]
struct Member {
    seq: u64,
    blob: PackedBlob,
    cost: u64,
}

/// A range request and the blobs it holds.
#[derive(Debug)]
pub(super) struct Job {
    pack: PackId,
    offset: u64,
    length: u64,
    members: Vec<Member>,
    /// Bytes read that no member holds.
    gap: u64,
    /// The smallest `seq` of its members.
    first: u64,
    cost: u64,
}

#[derive(Default)]
struct State {
    /// Requests sent to the I/O threads and not yet taken by one.
    queue: VecDeque<Job>,
    /// Blobs fetched and not yet taken: their result and cost.
    done: HashMap<u64, (Result<Vec<u8>, Error>, u64)>,
    /// Blobs the reader no longer wants (a file it passed over): dropped on arrival.
    dropped: HashSet<u64>,
    /// Bytes of requests sent and blobs fetched, not yet taken or dropped.
    reserved: u64,
    closing: bool,
}

struct Shared {
    state: Mutex<State>,
    work: Condvar,
    done: Condvar,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Tells the I/O threads to stop when dropped; requests not taken yet are not made.
struct Closer<'a>(&'a Shared);

impl Drop for Closer<'_> {
    fn drop(&mut self) {
        let mut st = self.0.lock();
        st.closing = true;
        st.queue.clear();
        drop(st);
        self.0.work.notify_all();
    }
}

/// A file planned: what the caller gave, its blobs and the number of its first blob.
struct Planned<T> {
    item: T,
    blobs: Vec<BlobId>,
    first: u64,
}

/// The reader's end of a read-ahead: see the module's documentation.
pub struct ReadAhead<'r, T, I> {
    repo: &'r ResticRepo,
    shared: &'r Shared,
    files: I,
    exhausted: bool,
    limits: ReadAheadLimits,
    planned: VecDeque<Planned<T>>,
    unsent: VecDeque<Job>,
    next_seq: u64,
    /// The file handed out last: its blobs, the number of its first, how many it took.
    current: Option<(Vec<BlobId>, u64, usize)>,
    buf: Vec<u8>,
    pos: usize,
}

impl ResticRepo {
    /// Runs `f` with a read-ahead of the contents of `files` (each an item of the
    /// caller's and its list of data blobs), in that order: [`ReadAhead::next_file`]
    /// hands out the items one by one and [`ReadAhead::reader`] reads the current one's
    /// content. I/O threads live for this call only.
    pub fn read_ahead<T, I, R>(
        &self,
        files: I,
        limits: ReadAheadLimits,
        f: impl FnOnce(&mut ReadAhead<'_, T, I>) -> R,
    ) -> R
    where
        T: Send,
        I: Iterator<Item = (T, Vec<BlobId>)> + Send,
    {
        let shared = Shared { state: Mutex::new(State::default()), work: Condvar::new(), done: Condvar::new() };
        std::thread::scope(|s| {
            for _ in 0..limits.requests.max(1) {
                s.spawn(|| io_thread(self, &shared));
            }
            let mut ahead = ReadAhead {
                repo: self,
                shared: &shared,
                files,
                exhausted: false,
                limits,
                planned: VecDeque::new(),
                unsent: VecDeque::new(),
                next_seq: 0,
                current: None,
                buf: Vec::new(),
                pos: 0,
            };
            // The I/O threads stop however `f` ends (a panic too), or the scope would
            // wait for them forever.
            let _closer = Closer(&shared);
            f(&mut ahead)
        })
    }

    /// Reads `job`'s range and decodes each member: (member, result).
    fn fetch_job(&self, job: &Job) -> Vec<(Member, Result<Vec<u8>, Error>)> {
        let name = pack::pack_name(&job.pack);
        let data = match self.source.read_range(&name, job.offset, job.length) {
            Ok(d) => d,
            Err(e) => {
                let e = Error::Source(e);
                return job.members.iter().map(|m| (m.clone(), Err(copy_error(&e)))).collect();
            }
        };
        let single = job.members.len() == 1 && data.len() as u64 == job.length;
        if single {
            let m = job.members[0].clone();
            let r = self.decode_blob(&job.pack, &m.blob, data);
            return vec![(m, r)];
        }
        job.members
            .iter()
            .map(|m| {
                let start = (m.blob.offset - job.offset) as usize;
                let end = start + m.blob.length as usize;
                let r = match data.get(start..end) {
                    Some(raw) => self.decode_blob_slice(&job.pack, &m.blob, raw),
                    None => Err(self.truncated(&job.pack, &m.blob, job.offset + data.len() as u64)),
                };
                (m.clone(), r)
            })
            .collect()
    }
}

/// The job reading the trees `r` plans (its members index `trees`).
pub(super) fn tree_job(r: &plan::Request, trees: &[(BlobId, super::Location)]) -> Job {
    let members: Vec<Member> =
        r.members.iter().enumerate().map(|(k, &i)| Member { seq: k as u64, blob: trees[i].1.blob, cost: 0 }).collect();
    Job { pack: r.pack, offset: r.offset, length: r.length, members, gap: 0, first: 0, cost: 0 }
}

impl ResticRepo {
    /// The blobs of `job` that read back intact, with their ids.
    pub(super) fn fetch_job_plain(&self, job: &Job) -> Vec<(BlobId, Vec<u8>)> {
        self.fetch_job(job).into_iter().filter_map(|(m, r)| r.ok().map(|p| (m.blob.id, p))).collect()
    }
}

/// An error for a second blob of a failed request (errors are not `Clone`).
fn copy_error(e: &Error) -> Error {
    match e {
        Error::Source(s) => Error::Source(s.clone()),
        other => Error::Source(crate::SourceError::new(crate::SourceErrorKind::Other, "", other.to_string())),
    }
}

fn io_thread(repo: &ResticRepo, shared: &Shared) {
    loop {
        let job = {
            let mut st = shared.lock();
            loop {
                if let Some(j) = st.queue.pop_front() {
                    break j;
                }
                if st.closing {
                    return;
                }
                st = shared.work.wait(st).unwrap_or_else(|p| p.into_inner());
            }
        };
        let results = repo.fetch_job(&job);
        let mut st = shared.lock();
        st.reserved -= job.gap;
        for (m, r) in results {
            if st.dropped.remove(&m.seq) {
                st.reserved -= m.cost;
            } else {
                st.done.insert(m.seq, (r, m.cost));
            }
        }
        drop(st);
        shared.done.notify_all();
    }
}

impl<'r, T, I> ReadAhead<'r, T, I>
where
    I: Iterator<Item = (T, Vec<BlobId>)>,
{
    /// The next file, whose content [`ReadAhead::reader`] then reads; what the reader
    /// did not take of the file before is dropped.
    pub fn next_file(&mut self) -> Option<T> {
        self.drop_current();
        while self.planned.is_empty() && self.plan_window() {}
        let p = self.planned.pop_front()?;
        self.current = Some((p.blobs, p.first, 0));
        self.pump(None);
        Some(p.item)
    }

    /// A reader of the current file's content (empty before the first file).
    pub fn reader(&mut self) -> CurrentFile<'_, 'r, T, I> {
        CurrentFile { ahead: self }
    }

    fn drop_current(&mut self) {
        self.buf = Vec::new();
        self.pos = 0;
        let Some((blobs, first, taken)) = self.current.take() else { return };
        let mut st = self.shared.lock();
        for seq in first + taken as u64..first + blobs.len() as u64 {
            match st.done.remove(&seq) {
                Some((_, cost)) => st.reserved -= cost,
                // Sent or not, it is dropped when it arrives.
                None => {
                    st.dropped.insert(seq);
                }
            }
        }
    }

    /// Plans the next window of files; false when there are no more files.
    fn plan_window(&mut self) -> bool {
        if self.exhausted {
            return false;
        }
        let index = self.repo.index.as_ref();
        let mut wants: Vec<Want> = Vec::new();
        let mut members: Vec<Member> = Vec::new();
        let mut bytes = 0u64;
        let mut files = 0usize;
        let mut immediate: Vec<(u64, Error)> = Vec::new();
        while bytes < self.limits.window && files < self.limits.files {
            let Some((item, blobs)) = self.files.next() else {
                self.exhausted = true;
                break;
            };
            files += 1;
            let first = self.next_seq;
            for id in &blobs {
                let seq = self.next_seq;
                self.next_seq += 1;
                let loc = match index {
                    None => Err(Error::IndexNotLoaded),
                    Some(idx) => idx.find(id).into_iter().next().ok_or(Error::BlobNotFound { blob: *id }),
                };
                let loc = loc.and_then(|l| check_limits(&l.pack, &l.blob).map(|cost| (l, cost)));
                match loc {
                    Ok((l, cost)) => {
                        wants.push(Want { pack: l.pack, offset: l.blob.offset, length: u64::from(l.blob.length) });
                        members.push(Member { seq, blob: l.blob, cost });
                        bytes += cost;
                    }
                    Err(e) => immediate.push((seq, e)),
                }
            }
            self.planned.push_back(Planned { item, blobs, first });
        }
        if !immediate.is_empty() {
            let mut st = self.shared.lock();
            for (seq, e) in immediate {
                st.done.insert(seq, (Err(e), 0));
            }
        }
        for r in plan::plan(&wants, self.limits.plan) {
            let gap = r.gap_bytes(&wants);
            let ms: Vec<Member> = r.members.iter().map(|&i| members[i].clone()).collect();
            let first = ms.iter().map(|m| m.seq).min().unwrap_or(0);
            let cost = gap + ms.iter().map(|m| m.cost).sum::<u64>();
            self.unsent.push_back(Job {
                pack: r.pack,
                offset: r.offset,
                length: r.length,
                members: ms,
                gap,
                first,
                cost,
            });
        }
        files > 0
    }

    /// Sends requests while they fit the budget (and the one holding `needed` in any
    /// case), planning more files when all planned are sent.
    fn pump(&mut self, needed: Option<u64>) {
        loop {
            if self.unsent.is_empty() {
                let room = self.shared.lock().reserved < self.limits.bytes;
                if !(room && self.planned.len() < self.limits.files && self.plan_window()) {
                    return;
                }
                continue;
            }
            let front = &self.unsent[0];
            let must = needed.is_some_and(|n| front.first <= n);
            let mut st = self.shared.lock();
            if !must && st.reserved + front.cost > self.limits.bytes {
                return;
            }
            let job = self.unsent.pop_front().expect("not empty");
            st.reserved += job.cost;
            st.queue.push_back(job);
            drop(st);
            self.shared.work.notify_one();
        }
    }

    /// The next blob of the current file, waiting for it; `None` at the file's end.
    fn next_blob(&mut self) -> Option<Result<Vec<u8>, Error>> {
        let (blobs, first, taken) = self.current.as_mut()?;
        let id = *blobs.get(*taken)?;
        let seq = *first + *taken as u64;
        *taken += 1;
        self.pump(Some(seq));
        let mut st = self.shared.lock();
        let (r, cost) = loop {
            if let Some(r) = st.done.remove(&seq) {
                break r;
            }
            st = self.shared.done.wait(st).unwrap_or_else(|p| p.into_inner());
        };
        st.reserved -= cost;
        drop(st);
        self.pump(None);
        // Where it was fetched it failed: its other copies are tried, and the error
        // is the one a plain read gives.
        Some(r.or_else(|_| self.repo.blob(&id)))
    }
}

/// The bytes a blob holds in memory once read and decoded, after checking its lengths
/// against its type's limit (before anything is read or allocated for it).
fn check_limits(pack: &PackId, blob: &PackedBlob) -> Result<u64, Error> {
    let plain_max = super::check_blob_limits(pack, blob)?;
    Ok(plain_max.max(u64::from(blob.length)))
}

/// Reads the current file of a [`ReadAhead`]; an error comes out as an `io::Error`
/// holding this crate's [`Error`], as [`super::FileReader`]'s do.
pub struct CurrentFile<'a, 'r, T, I> {
    ahead: &'a mut ReadAhead<'r, T, I>,
}

impl<T, I> Read for CurrentFile<'_, '_, T, I>
where
    I: Iterator<Item = (T, Vec<BlobId>)>,
{
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let a = &mut *self.ahead;
        while a.pos == a.buf.len() {
            match a.next_blob() {
                None => return Ok(0),
                Some(Ok(b)) => {
                    a.buf = b;
                    a.pos = 0;
                }
                Some(Err(e)) => return Err(std::io::Error::other(e)),
            }
        }
        let n = buf.len().min(a.buf.len() - a.pos);
        buf[..n].copy_from_slice(&a.buf[a.pos..a.pos + n]);
        a.pos += n;
        Ok(n)
    }
}
