//! Reading a kopia snapshot's files ahead of their use, with several requests in
//! flight (docs/design.md#import-from-kopia).
//!
//! kopia's server gives one object a request. Read one after the other, a file a
//! round trip, an import of small files waits on the server's latency, not on its
//! bandwidth. So [`read_ahead`] takes the files the import will store, in the order
//! it stores them (a walk of the snapshot's tree, on a thread of its own), and up to
//! [`FeedLimits::requests`] threads fetch them at once while the caller reads the
//! files before; each file is handed to the caller whole and in order.
//!
//! Memory is bounded whatever the sizes. A body is read in blocks of at most
//! [`FeedLimits::block`] bytes, and a block is read only when its bytes fit, beside
//! those read and not yet taken, in [`FeedLimits::bytes`]; a small file reserves its
//! recorded size (capped at a block) before its request goes out. The one exception
//! is the file the caller is reading, when nothing of it waits to be taken: it always
//! goes on (else the caller could wait for a file that waits for room). So many small
//! files are in flight at once, a large one streams through a block at a time, and no
//! size a source records is allocated before its bytes come. The walk runs at most
//! [`FeedLimits::files`] files ahead of the caller.

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::{Condvar, Mutex, MutexGuard};

use coffer_core::ops::backup::{ContentMemo, FOREIGN_MAX_DEPTH};
use coffer_import::kopia::{self as k, EntryType};

/// Where the objects of a kopia repository are read: kopia's server, or a fake in tests.
pub trait Objects: Sync {
    /// A body being read.
    type Body: Read;
    /// The object `object`, its bytes to be read; `Err(reason)` when it cannot be.
    fn get(&self, object: &str) -> Result<Self::Body, String>;
}

/// A file to read ahead.
#[derive(Clone, Debug)]
pub struct FeedFile {
    /// Its content key ([`super::content_key`] of its object).
    pub key: [u8; 32],
    /// One of its paths in the snapshot.
    pub path: PathBuf,
    /// Its size as kopia records it.
    pub size: u64,
    /// Its object id.
    pub object: String,
}

/// How far and how wide the read-ahead reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeedLimits {
    /// Requests in flight at most.
    pub requests: usize,
    /// Bytes read (or reserved for a read) and not yet taken by the caller, at most,
    /// beside one block of the file the caller reads.
    pub bytes: u64,
    /// The largest block of a body read at once.
    pub block: u64,
    /// Files the walk is ahead of the caller, at most.
    pub files: usize,
}

/// Requests in flight by default: kopia's server answers each on a goroutine of its
/// own, and on two cores more than eight only wait for them.
pub const FEED_REQUESTS: usize = 8;
/// Bytes in flight by default, as restic's read-ahead holds.
pub const FEED_BYTES: u64 = 32 << 20;
/// The largest block read at once by default: a small file of the import's
/// (`FED_SMALL`, 1 MiB) is then one block.
pub const FEED_BLOCK: u64 = 1 << 20;
/// Files walked ahead of the caller at most by default.
pub const FEED_FILES: usize = 4096;

impl Default for FeedLimits {
    fn default() -> Self {
        FeedLimits { requests: FEED_REQUESTS, bytes: FEED_BYTES, block: FEED_BLOCK, files: FEED_FILES }
    }
}

/// A file walked and not yet passed by the caller.
struct Slot {
    file: FeedFile,
    /// Blocks read and not yet taken.
    blocks: std::collections::VecDeque<Vec<u8>>,
    /// Their bytes.
    queued: u64,
    /// How its body ended, once it has.
    end: Option<Result<(), String>>,
}

#[derive(Default)]
struct State {
    /// Files walked and not yet passed, by their number in the walk.
    slots: HashMap<u64, Slot>,
    /// Files walked so far.
    walked: u64,
    walk_done: bool,
    /// The next file a request thread takes.
    next_fetch: u64,
    /// The file the caller reads.
    current: u64,
    /// Bytes of blocks read, or reserved for reading, not yet taken.
    reserved: u64,
    /// Set when the caller stops (or a thread failed): every thread ends.
    closing: bool,
}

struct Shared {
    state: Mutex<State>,
    /// A file walked, or the walk ended: request threads wait for it.
    work: Condvar,
    /// A block read or a body ended: the caller waits for it.
    done: Condvar,
    /// Bytes taken, a file passed: the walk and request threads wait for it.
    room: Condvar,
    limits: FeedLimits,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wake_all(&self) {
        self.work.notify_all();
        self.done.notify_all();
        self.room.notify_all();
    }

    /// Waits until `n` more bytes for file `seq` fit; false when the file was passed
    /// (or the read-ahead closes), and then nothing is reserved.
    fn reserve(&self, seq: u64, n: u64) -> bool {
        let mut st = self.lock();
        loop {
            if st.closing {
                return false;
            }
            let Some(slot) = st.slots.get(&seq) else { return false };
            let waited_for = seq == st.current && slot.queued == 0;
            if st.reserved + n <= self.limits.bytes || waited_for {
                st.reserved += n;
                return true;
            }
            st = self.room.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Hands over a block of file `seq` read with `reserved` bytes reserved, and
    /// ends its body with `end` when given; false when the file was passed.
    fn deliver(&self, seq: u64, block: Vec<u8>, reserved: u64, end: Option<Result<(), String>>) -> bool {
        let mut st = self.lock();
        let kept = block.len() as u64;
        st.reserved -= reserved - kept.min(reserved);
        let Some(slot) = st.slots.get_mut(&seq) else {
            st.reserved -= kept.min(reserved);
            drop(st);
            self.room.notify_all();
            return false;
        };
        if kept > 0 {
            slot.queued += kept;
            slot.blocks.push_back(block);
        }
        slot.end = end;
        drop(st);
        self.done.notify_all();
        self.room.notify_all();
        true
    }
}

/// Ends the read-ahead's threads when dropped (however the caller ends, a panic
/// too), or when a thread of it panics.
struct Closer<'a>(&'a Shared);

impl Drop for Closer<'_> {
    fn drop(&mut self) {
        self.0.lock().closing = true;
        self.0.wake_all();
    }
}

/// Runs `each` on the files of `files`, in that order, with a reader of each one's
/// content read ahead from `objects` (see the module's documentation). `each` need not
/// read a file to its end; a file whose object cannot be read gives its reader an
/// error (the caller decides what that means). The first error of `each` ends it all
/// and is returned.
pub fn read_ahead<O, I, E>(
    objects: &O,
    files: I,
    limits: FeedLimits,
    mut each: impl FnMut(&FeedFile, &mut FeedReader<'_>) -> Result<(), E>,
) -> Result<(), E>
where
    O: Objects,
    I: Iterator<Item = FeedFile> + Send,
{
    let shared = Shared {
        state: Mutex::new(State::default()),
        work: Condvar::new(),
        done: Condvar::new(),
        room: Condvar::new(),
        limits,
    };
    std::thread::scope(|s| {
        let shared = &shared;
        s.spawn(move || {
            let _closer = PanicCloser(shared);
            walk_thread(shared, files);
        });
        for _ in 0..limits.requests.max(1) {
            s.spawn(move || {
                let _closer = PanicCloser(shared);
                request_thread(shared, objects);
            });
        }
        let _closer = Closer(shared);
        loop {
            let file = {
                let mut st = shared.lock();
                loop {
                    let seq = st.current;
                    if let Some(slot) = st.slots.get(&seq) {
                        break slot.file.clone();
                    }
                    if st.closing || (st.walk_done && seq == st.walked) {
                        return Ok(());
                    }
                    st = shared.done.wait(st).unwrap_or_else(|p| p.into_inner());
                }
            };
            let mut reader = FeedReader { shared, buf: Vec::new(), pos: 0 };
            let r = each(&file, &mut reader);
            let mut st = shared.lock();
            let seq = st.current;
            if let Some(slot) = st.slots.remove(&seq) {
                st.reserved -= slot.queued;
            }
            st.current += 1;
            drop(st);
            shared.room.notify_all();
            r?;
        }
    })
}

/// Closes the read-ahead when the thread it lives on panics, so that no other
/// thread waits for it forever (the panic is then the scope's).
struct PanicCloser<'a>(&'a Shared);

impl Drop for PanicCloser<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.lock().closing = true;
            self.0.wake_all();
        }
    }
}

/// Takes the walk's files into slots, at most [`FeedLimits::files`] ahead of the caller.
fn walk_thread(shared: &Shared, files: impl Iterator<Item = FeedFile>) {
    for file in files {
        let mut st = shared.lock();
        while !st.closing && st.walked - st.current >= shared.limits.files.max(1) as u64 {
            st = shared.room.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        if st.closing {
            return;
        }
        let seq = st.walked;
        st.slots.insert(seq, Slot { file, blocks: Default::default(), queued: 0, end: None });
        st.walked += 1;
        drop(st);
        shared.work.notify_one();
        shared.done.notify_all();
    }
    shared.lock().walk_done = true;
    shared.wake_all();
}

/// Fetches files, the next one not taken, until the walk ends or the read-ahead closes.
fn request_thread(shared: &Shared, objects: &impl Objects) {
    loop {
        let (seq, object, size) = {
            let mut st = shared.lock();
            loop {
                if st.closing {
                    return;
                }
                if st.next_fetch < st.walked {
                    let seq = st.next_fetch;
                    st.next_fetch += 1;
                    if let Some(slot) = st.slots.get(&seq) {
                        break (seq, slot.file.object.clone(), slot.file.size);
                    }
                    continue;
                }
                if st.walk_done {
                    return;
                }
                st = shared.work.wait(st).unwrap_or_else(|p| p.into_inner());
            }
        };
        fetch(shared, objects, seq, &object, size);
    }
}

/// The bytes to read next of a body with `left` of its recorded size to come: a
/// block, or what is left and one byte more (which tells whether the body ends
/// there); a block at a time once the body holds more than recorded.
fn next_want(left: u64, over: bool, block: u64) -> u64 {
    let block = block.max(1);
    if over || left >= block { block } else { left + 1 }
}

/// Reads file `seq`'s object into its slot, a block at a time as room allows.
fn fetch(shared: &Shared, objects: &impl Objects, seq: u64, object: &str, size: u64) {
    let block = shared.limits.block;
    let mut want = next_want(size, false, block);
    if !shared.reserve(seq, want) {
        return;
    }
    let mut body = match objects.get(object) {
        Ok(b) => b,
        Err(why) => {
            shared.deliver(seq, Vec::new(), want, Some(Err(why)));
            return;
        }
    };
    let (mut left, mut over) = (size, false);
    loop {
        let mut buf = Vec::with_capacity(want as usize);
        if let Err(e) = (&mut body).take(want).read_to_end(&mut buf) {
            let why = format!("reading kopia's object {object}: {e}");
            shared.deliver(seq, Vec::new(), want, Some(Err(why)));
            return;
        }
        let got = buf.len() as u64;
        let ended = got < want;
        over |= got > left;
        left = left.saturating_sub(got);
        if !shared.deliver(seq, buf, want, ended.then_some(Ok(()))) || ended {
            return;
        }
        want = next_want(left, over, block);
        if !shared.reserve(seq, want) {
            return;
        }
    }
}

/// The content of the file the caller reads, as it comes.
pub struct FeedReader<'a> {
    shared: &'a Shared,
    buf: Vec<u8>,
    pos: usize,
}

impl Read for FeedReader<'_> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        while self.pos == self.buf.len() {
            let mut st = self.shared.lock();
            let seq = st.current;
            let Some(slot) = st.slots.get_mut(&seq) else {
                return Err(std::io::Error::other("the read-ahead stopped"));
            };
            if let Some(b) = slot.blocks.pop_front() {
                let n = b.len() as u64;
                slot.queued -= n;
                st.reserved -= n;
                drop(st);
                self.shared.room.notify_all();
                (self.buf, self.pos) = (b, 0);
                continue;
            }
            match &slot.end {
                Some(Ok(())) => return Ok(0),
                Some(Err(why)) => return Err(std::io::Error::other(why.clone())),
                None => {}
            }
            if st.closing {
                return Err(std::io::Error::other("the read-ahead stopped"));
            }
            drop(self.shared.done.wait(st).unwrap_or_else(|p| p.into_inner()));
        }
        let n = out.len().min(self.buf.len() - self.pos);
        out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

/// The directories the feeds of one import walked to their end: every file below
/// one was then known or fed, so the walk of a later snapshot passes it over (kopia
/// names a directory by its manifest's content: the same object is the same tree).
/// It grows with the distinct directories imported, as the import's memo grows with
/// the distinct files.
#[derive(Default)]
pub struct WalkedDirs(Mutex<HashSet<String>>);

impl WalkedDirs {
    fn contains(&self, object: &str) -> bool {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).contains(object)
    }

    fn insert(&self, object: String) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).insert(object);
    }
}

/// The most bytes of directory listings the feed keeps for the import's own walk
/// (counted as [`Listings::cost`] estimates them); beyond, that walk asks the server again.
const LISTINGS_BYTES: u64 = 32 << 20;

/// Directories the feed's walk listed, by object, until the import's own walk
/// lists them (each is taken once; a directory met twice is asked for again).
#[derive(Default)]
pub(super) struct Listings(Mutex<(HashMap<String, k::Dir>, u64)>);

impl Listings {
    /// The bytes a listing holds in memory, about.
    fn cost(dir: &k::Dir) -> u64 {
        let entries: usize = dir.entries.iter().map(|e| e.name.len() + e.object.len() + 128).sum();
        let refused: usize = dir.refused.iter().map(|(n, w)| n.len() + w.len() + 48).sum();
        (entries + refused + 64) as u64
    }

    pub(super) fn put(&self, object: &str, dir: &k::Dir) {
        let cost = Self::cost(dir);
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if m.1 + cost <= LISTINGS_BYTES && !m.0.contains_key(object) {
            m.0.insert(object.to_string(), dir.clone());
            m.1 += cost;
        }
    }

    /// The listing of directory `object`, if the feed kept it.
    pub(super) fn take(&self, object: &str) -> Option<k::Dir> {
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let dir = m.0.remove(object)?;
        m.1 -= Self::cost(&dir);
        Some(dir)
    }
}

/// What the import knows, for the feed's walk.
pub(super) struct Known<'a> {
    /// The contents stored.
    pub memo: &'a ContentMemo,
    /// The directories walked by earlier feeds.
    pub walked: &'a WalkedDirs,
    /// Where the listings are kept for the import's walk.
    pub listings: &'a Listings,
}

/// The files of a kopia snapshot whose content the memo does not hold, depth first
/// in the order kopia lists them, each content once, passing over the directories
/// an earlier snapshot's walk went through. A directory that cannot be read is
/// passed over (the import's own walk lists it); a crafted tree is cut as the
/// import's walk cuts it: no deeper than [`FOREIGN_MAX_DEPTH`], no directory inside
/// itself, no more entries than `budget`.
pub(super) struct FileWalk<'a> {
    server: &'a super::Server,
    known: Known<'a>,
    /// The directories entered: their path, object and entries still to see.
    stack: Vec<(PathBuf, String, std::vec::IntoIter<k::Entry>)>,
    /// The root entry, when it is a file.
    single: Option<FeedFile>,
    fed: HashSet<[u8; 32]>,
    budget: u64,
    /// Whether a directory was passed over for what it is (unreadable, too deep,
    /// a cycle, past the budget): the directories above it are then not recorded
    /// as walked.
    cut: bool,
}

impl<'a> FileWalk<'a> {
    /// The walk from the snapshot's root entry `root`, placed at `path`.
    pub(super) fn new(
        server: &'a super::Server,
        known: Known<'a>,
        root: &k::Entry,
        path: PathBuf,
        budget: u64,
    ) -> Self {
        let mut w =
            FileWalk { server, known, stack: Vec::new(), single: None, fed: HashSet::new(), budget, cut: false };
        match root.kind {
            EntryType::Dir => w.enter(path, &root.object),
            EntryType::File => w.single = w.wanted(root, path),
            EntryType::Symlink => {}
        }
        w
    }

    fn enter(&mut self, path: PathBuf, object: &str) {
        if self.known.walked.contains(object) {
            return;
        }
        if self.stack.len() >= FOREIGN_MAX_DEPTH || self.stack.iter().any(|(_, o, _)| o == object) {
            self.cut = true;
            return;
        }
        let dir =
            self.server.read(object, k::MAX_DIR_JSON, "directory").ok().and_then(|j| k::parse_dir(&j, object).ok());
        let Some(dir) = dir else {
            self.cut = true;
            return;
        };
        let n = (dir.entries.len() + dir.refused.len()) as u64;
        let Some(left) = self.budget.checked_sub(n) else {
            self.budget = 0;
            self.cut = true;
            return;
        };
        self.budget = left;
        self.known.listings.put(object, &dir);
        self.stack.push((path, object.to_string(), dir.entries.into_iter()));
    }

    /// The file of entry `e` at `path`, unless its content is known or fed already.
    fn wanted(&mut self, e: &k::Entry, path: PathBuf) -> Option<FeedFile> {
        let key = super::content_key(&e.object);
        if self.known.memo.knows(&key) || !self.fed.insert(key) {
            return None;
        }
        Some(FeedFile { key, path, size: e.size, object: e.object.clone() })
    }
}

/// Whether the import's walk keeps an entry of this name (see `bad_name` in
/// coffer-core's foreign import): a name no file system holds is left out there.
fn kept_name(name: &str) -> bool {
    !(name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0'))
}

impl Iterator for FileWalk<'_> {
    type Item = FeedFile;

    fn next(&mut self) -> Option<FeedFile> {
        if let Some(f) = self.single.take() {
            return Some(f);
        }
        loop {
            let (dir, _, entries) = self.stack.last_mut()?;
            let Some(e) = entries.next() else {
                let (_, object, _) = self.stack.pop().expect("not empty");
                if !self.cut {
                    self.known.walked.insert(object);
                }
                continue;
            };
            if !kept_name(&e.name) {
                continue;
            }
            let path = dir.join(OsStr::from_bytes(e.name.as_bytes()));
            match e.kind {
                EntryType::File => {
                    if let Some(f) = self.wanted(&e, path) {
                        return Some(f);
                    }
                }
                EntryType::Dir => self.enter(path, &e.object),
                EntryType::Symlink => {}
            }
        }
    }
}

#[cfg(test)]
mod tests;
