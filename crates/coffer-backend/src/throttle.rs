//! Bandwidth limits (docs/design.md#limits): a token bucket per direction,
//! shared by every backend of a command that holds the same [`Throttle`], and
//! the wrapper that makes each request take its bytes from it. It sits right
//! above the real backend, below the retries: every attempt pays for what it
//! sends or receives, which is what the link carries.
//!
//! A bucket fills at the limit and holds one second's worth (the burst). A
//! request whose size is known before it goes (every write; a range read)
//! takes its bytes before it is sent: up to a slice of the burst at once, and
//! a larger one slice after slice, one such request at a time (in the order
//! they came), so that small requests (a session marker, a snapshot) take
//! their turn between the slices of a large one instead of waiting behind
//! whole packs. A 16 MiB pack at 2 MiB/s thus waits about 8 s (7 s when
//! the bucket was full), and goes. A whole-object read (`read_max`), whose size is known only
//! once it came, waits until the bucket is out of debt, then pays for what it
//! read: the bucket goes into debt by as much, and the next request waits it
//! off. Waits are sleeps until a time computed when the request came
//! (the bucket's schedule), never a poll; requests are served in the order
//! they reserved, so no thread starves.

use std::fmt;
use std::num::NonZeroU64;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::{Backend, BackendResult, ObjectInfo, PlacedCopy};

/// The most bytes a range read takes from the bucket before it is sent; what
/// it reads beyond is paid for after, as debt (a caller asking far past an
/// object's end does not wait for bytes that never come).
const MOST_BEFORE_A_READ: u64 = 64 << 20;

/// The smallest slice a large request takes at a time.
const MIN_SLICE: u64 = 4 << 10;

/// The largest slice.
const MAX_SLICE: u64 = 1 << 20;

/// The limits of one command: a bucket for the bytes sent to the storage and
/// one for the bytes read from it, either unlimited. Clones share the buckets:
/// give every backend of the command a clone, and the limit holds over all of
/// them together.
#[derive(Clone, Default)]
pub struct Throttle {
    upload: Option<Arc<Bucket>>,
    download: Option<Arc<Bucket>>,
}

impl fmt::Debug for Throttle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Throttle")
            .field("upload_bytes_per_second", &self.upload.as_ref().map(|b| b.rate))
            .field("download_bytes_per_second", &self.download.as_ref().map(|b| b.rate))
            .finish()
    }
}

impl Throttle {
    /// Limits of `upload` and `download` bytes per second (`None`: unlimited).
    pub fn new(upload: Option<NonZeroU64>, download: Option<NonZeroU64>) -> Throttle {
        Throttle {
            upload: upload.map(|r| Arc::new(Bucket::new(r))),
            download: download.map(|r| Arc::new(Bucket::new(r))),
        }
    }

    /// Whether neither direction is limited (a wrapper would change nothing).
    pub fn is_unlimited(&self) -> bool {
        self.upload.is_none() && self.download.is_none()
    }

    /// Takes `bytes` to be sent, sleeping until the upload bucket gives them.
    fn send(&self, bytes: u64) {
        if let Some(b) = &self.upload {
            b.take(bytes);
        }
    }

    /// Before a read of at most `asked` bytes: takes them (up to
    /// [`MOST_BEFORE_A_READ`]) from the download bucket. Returns what was taken,
    /// for [`Throttle::received`].
    fn before_read(&self, asked: u64) -> u64 {
        let Some(b) = &self.download else { return 0 };
        let before = asked.min(MOST_BEFORE_A_READ);
        b.take(before);
        before
    }

    /// Before a read of unknown size: waits until the download bucket is out of debt.
    fn before_unknown_read(&self) {
        if let Some(b) = &self.download {
            b.wait_clear();
        }
    }

    /// After a read that took `before` bytes ahead and `got` came: pays the
    /// rest (debt) or gives back what did not come.
    fn received(&self, before: u64, got: u64) {
        if let Some(b) = &self.download {
            match got.cmp(&before) {
                std::cmp::Ordering::Greater => b.charge(got - before),
                std::cmp::Ordering::Less => b.refund(before - got),
                std::cmp::Ordering::Equal => {}
            }
        }
    }
}

/// The schedule of a bucket, in seconds since the bucket was made: the time at
/// which it is (or was) empty. At time `t` it holds `min(burst, rate × (t -
/// empty_at))` bytes, fewer than none (a debt) while `t < empty_at`. Times
/// are seconds in a `f64`: below a microsecond's error over years.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Schedule {
    empty_at: f64,
}

impl Schedule {
    /// A full bucket at time 0, of `burst` seconds.
    fn full(burst: f64) -> Schedule {
        Schedule { empty_at: -burst }
    }

    /// Reserves `cost` seconds' worth of bytes asked for at `now`: returns when
    /// they may go, the first time the bucket holds them (or a full burst, for
    /// more than a burst: the rest is then a debt).
    fn reserve(&mut self, cost: f64, burst: f64, now: f64) -> f64 {
        let at = now.max(self.empty_at + cost.min(burst));
        // What the bucket holds at `at` is capped at a burst.
        self.empty_at = self.empty_at.max(at - burst) + cost;
        at
    }

    /// Pays `cost` seconds' worth at `now`, whatever the bucket holds.
    fn charge(&mut self, cost: f64, burst: f64, now: f64) {
        self.empty_at = self.empty_at.max(now - burst) + cost;
    }

    /// Gives back `cost` seconds' worth reserved and not used.
    fn refund(&mut self, cost: f64) {
        self.empty_at -= cost;
    }
}

/// One direction's token bucket.
struct Bucket {
    /// Bytes per second.
    rate: f64,
    /// Seconds' worth of bytes the bucket holds at most.
    burst: f64,
    /// Bytes a large request takes at a time.
    slice: u64,
    origin: Instant,
    schedule: Mutex<Schedule>,
    /// The large requests take their slices one request at a time.
    large: Turnstile,
}

impl Bucket {
    const BURST_SECONDS: f64 = 1.0;

    fn new(rate: NonZeroU64) -> Bucket {
        let burst_bytes = rate.get();
        Bucket {
            rate: rate.get() as f64,
            burst: Self::BURST_SECONDS,
            slice: (burst_bytes / 16).clamp(MIN_SLICE, MAX_SLICE).min(burst_bytes),
            origin: Instant::now(),
            schedule: Mutex::new(Schedule::full(Self::BURST_SECONDS)),
            large: Turnstile::default(),
        }
    }

    fn now(&self) -> f64 {
        self.origin.elapsed().as_secs_f64()
    }

    fn cost(&self, bytes: u64) -> f64 {
        bytes as f64 / self.rate
    }

    fn schedule(&self) -> std::sync::MutexGuard<'_, Schedule> {
        // Every change is one assignment of a float: a panic cannot leave it half made.
        self.schedule.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reserves `bytes` and returns when they may go.
    fn reserve(&self, bytes: u64) -> f64 {
        let cost = self.cost(bytes);
        let now = self.now();
        self.schedule().reserve(cost, self.burst, now)
    }

    /// Takes `bytes`, asleep until the bucket gives them: at once for a slice
    /// or less, slice after slice otherwise.
    fn take(&self, bytes: u64) {
        if bytes <= self.slice {
            return self.sleep_until(self.reserve(bytes));
        }
        let _turn = self.large.enter();
        let mut left = bytes;
        while left > 0 {
            let n = left.min(self.slice);
            self.sleep_until(self.reserve(n));
            left -= n;
        }
    }

    /// Waits until the bucket is out of debt.
    fn wait_clear(&self) {
        self.sleep_until(self.reserve(0));
    }

    fn charge(&self, bytes: u64) {
        let (cost, now) = (self.cost(bytes), self.now());
        self.schedule().charge(cost, self.burst, now);
    }

    fn refund(&self, bytes: u64) {
        let cost = self.cost(bytes);
        self.schedule().refund(cost);
    }

    fn sleep_until(&self, at: f64) {
        loop {
            let wait = at - self.now();
            if wait <= 0.0 {
                return;
            }
            std::thread::sleep(Duration::from_secs_f64(wait));
        }
    }
}

/// A first-come, first-served turn: each caller waits until those who came
/// before it have left.
#[derive(Default)]
struct Turnstile {
    /// The next ticket to hand out, and the ticket being served.
    tickets: Mutex<(u64, u64)>,
    turn: Condvar,
}

/// A turn in a [`Turnstile`], given up when dropped (a panic included).
struct Turn<'a>(&'a Turnstile);

impl Turnstile {
    fn lock(&self) -> std::sync::MutexGuard<'_, (u64, u64)> {
        self.tickets.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn enter(&self) -> Turn<'_> {
        let mut t = self.lock();
        let mine = t.0;
        t.0 += 1;
        while t.1 != mine {
            t = self.turn.wait(t).unwrap_or_else(|e| e.into_inner());
        }
        Turn(self)
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.0.lock().1 += 1;
        self.0.turn.notify_all();
    }
}

/// A backend whose requests take their bytes from a [`Throttle`] first: writes
/// before they are sent, reads before (what they ask for) and after (what
/// came). Listings, size queries and deletes move no object bytes and pass.
pub struct ThrottledBackend<B> {
    inner: B,
    throttle: Throttle,
}

impl<B: Backend> ThrottledBackend<B> {
    /// Wraps `inner` with the buckets of `throttle`.
    pub fn new(inner: B, throttle: Throttle) -> Self {
        ThrottledBackend { inner, throttle }
    }

    fn read_known(&self, len: u64, read: impl FnOnce() -> BackendResult<Vec<u8>>) -> BackendResult<Vec<u8>> {
        let before = self.throttle.before_read(len);
        let r = read();
        self.throttle.received(before, r.as_ref().map_or(0, |d| d.len() as u64));
        r
    }

    fn read_unknown(&self, read: impl FnOnce() -> BackendResult<Vec<u8>>) -> BackendResult<Vec<u8>> {
        self.throttle.before_unknown_read();
        let r = read();
        self.throttle.received(0, r.as_ref().map_or(0, |d| d.len() as u64));
        r
    }
}

impl<B: Backend> Backend for ThrottledBackend<B> {
    fn location(&self) -> String {
        self.inner.location()
    }

    fn connections(&self) -> usize {
        self.inner.connections()
    }

    fn read_max(&self, name: &str, max: u64) -> BackendResult<Vec<u8>> {
        self.read_unknown(|| self.inner.read_max(name, max))
    }

    fn read_range(&self, name: &str, offset: u64, len: u64) -> BackendResult<Vec<u8>> {
        self.read_known(len, || self.inner.read_range(name, offset, len))
    }

    fn read_ranges(&self, name: &str, ranges: &[(u64, u64)]) -> Vec<BackendResult<Vec<u8>>> {
        let asked = ranges.iter().fold(0u64, |sum, &(_, len)| sum.saturating_add(len));
        let before = self.throttle.before_read(asked);
        let rs = self.inner.read_ranges(name, ranges);
        let got = rs.iter().filter_map(|r| r.as_ref().ok()).map(|d| d.len() as u64).sum();
        self.throttle.received(before, got);
        rs
    }

    fn write(&self, name: &str, data: Vec<u8>) -> BackendResult<()> {
        self.throttle.send(data.len() as u64);
        self.inner.write(name, data)
    }

    fn write_new(&self, name: &str, data: Vec<u8>) -> BackendResult<bool> {
        self.throttle.send(data.len() as u64);
        self.inner.write_new(name, data)
    }

    fn write_file(&self, name: &str, file: &std::fs::File, len: u64) -> BackendResult<()> {
        // The backend reads the file itself as it sends it: the bytes are
        // taken before the request.
        self.throttle.send(len);
        self.inner.write_file(name, file, len)
    }

    fn spool_dir(&self) -> Option<std::path::PathBuf> {
        self.inner.spool_dir()
    }

    fn spool_file(&self) -> Option<BackendResult<std::fs::File>> {
        self.inner.spool_file()
    }

    fn stat(&self, name: &str) -> BackendResult<u64> {
        self.inner.stat(name)
    }

    fn list(&self, prefix: &str) -> BackendResult<Vec<ObjectInfo>> {
        self.inner.list(prefix)
    }

    fn delete(&self, name: &str) -> BackendResult<()> {
        self.inner.delete(name)
    }

    fn copies(&self, name: &str) -> usize {
        self.inner.copies(name)
    }

    fn read_range_copy(&self, name: &str, offset: u64, len: u64, copy: usize) -> BackendResult<Vec<u8>> {
        self.read_known(len, || self.inner.read_range_copy(name, offset, len, copy))
    }

    fn placed_copies(&self, name: &str) -> Vec<PlacedCopy> {
        self.inner.placed_copies(name)
    }

    fn read_max_copy(&self, name: &str, max: u64, copy: usize) -> BackendResult<Vec<u8>> {
        self.read_unknown(|| self.inner.read_max_copy(name, max, copy))
    }
}

#[cfg(test)]
#[path = "throttle_tests.rs"]
mod tests;
