//! A wrapper that counts the requests a command sends to its storage (PUT, GET,
//! HEAD, LIST, DELETE) and the bytes sent and received, for `--verbose` and the
//! `--json` summaries, with the latency of each request (percentiles from a
//! histogram of quarter-octave buckets: within 19% of the true value). It sits
//! below the retry wrapper, so every attempt counts: the figures are what the
//! storage saw. See docs/design.md#storage-contract.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

use super::{Backend, BackendResult, ObjectInfo};

/// Requests and bytes so far, as counted by a [`CountingBackend`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Writes (`write`, `write_file`).
    pub put: u64,
    /// Reads (`read_max`, `read_range`; each range of `read_ranges`).
    pub get: u64,
    /// Size queries (`stat`).
    pub head: u64,
    /// Listings (`list`), one per call whatever the number of pages.
    pub list: u64,
    /// Deletions.
    pub delete: u64,
    /// Bytes written.
    pub bytes_up: u64,
    /// Bytes read.
    pub bytes_down: u64,
    /// Rounds: requests that began while no other request was in flight. Over a
    /// storage with a round-trip time `L`, a command spends at least `rounds × L`
    /// waiting on it: requests made one after the other each count, requests sent
    /// together count once (docs/design.md#round-trips).
    pub rounds: u64,
    /// Request latency, microseconds: the median, the 99th percentile and the
    /// largest (bucket upper bounds; 0 when no request was made).
    pub latency_us: Latency,
}

/// Latency percentiles in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Latency {
    /// Half the requests took at most this long.
    pub p50: u64,
    /// 99% of the requests took at most this long.
    pub p99: u64,
    /// The slowest request took at most this long.
    pub max: u64,
}

/// Buckets per doubling of the latency.
const PER_OCTAVE: f64 = 4.0;
/// Buckets: from 1 µs up to about an hour.
const BUCKETS: usize = 128;

fn bucket_of(us: u64) -> usize {
    if us <= 1 {
        return 0;
    }
    ((us as f64).log2() * PER_OCTAVE).ceil().min((BUCKETS - 1) as f64) as usize
}

/// The largest latency a bucket holds, in microseconds.
fn bucket_bound(b: usize) -> u64 {
    (2f64).powf(b as f64 / PER_OCTAVE).round() as u64
}

/// Requests per latency bucket.
struct Histogram([AtomicU64; BUCKETS]);

impl Default for Histogram {
    fn default() -> Self {
        Histogram(std::array::from_fn(|_| AtomicU64::new(0)))
    }
}

impl Histogram {
    fn record(&self, us: u64) {
        self.0[bucket_of(us)].fetch_add(1, Relaxed);
    }

    fn latency(&self) -> Latency {
        let counts: Vec<u64> = self.0.iter().map(|c| c.load(Relaxed)).collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return Latency::default();
        }
        let at = |share: f64| {
            let want = ((total as f64) * share).ceil().max(1.0) as u64;
            let mut seen = 0;
            for (b, n) in counts.iter().enumerate() {
                seen += n;
                if seen >= want {
                    return bucket_bound(b);
                }
            }
            bucket_bound(BUCKETS - 1)
        };
        Latency { p50: at(0.5), p99: at(0.99), max: at(1.0) }
    }
}

#[derive(Default)]
struct Counters {
    put: AtomicU64,
    get: AtomicU64,
    head: AtomicU64,
    list: AtomicU64,
    delete: AtomicU64,
    bytes_up: AtomicU64,
    bytes_down: AtomicU64,
    rounds: AtomicU64,
    in_flight: AtomicU64,
    latency: Histogram,
}

/// One request in flight, from [`CountingBackend::begin`] to its drop, which
/// records its latency.
struct InFlight<'a>(&'a Counters, Instant);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.latency.record(self.1.elapsed().as_micros() as u64);
        self.0.in_flight.fetch_sub(1, Relaxed);
    }
}

/// Counts the requests made to the backend it wraps.
pub struct CountingBackend<B> {
    inner: B,
    counters: std::sync::Arc<Counters>,
}

/// A handle that reads the counts of a [`CountingBackend`] after the backend
/// has been handed on (inside other wrappers, or to a repository).
#[derive(Clone)]
pub struct CountsHandle(std::sync::Arc<Counters>);

impl CountsHandle {
    /// The counts so far.
    pub fn get(&self) -> Counts {
        let c = &self.0;
        Counts {
            put: c.put.load(Relaxed),
            get: c.get.load(Relaxed),
            head: c.head.load(Relaxed),
            list: c.list.load(Relaxed),
            delete: c.delete.load(Relaxed),
            bytes_up: c.bytes_up.load(Relaxed),
            bytes_down: c.bytes_down.load(Relaxed),
            rounds: c.rounds.load(Relaxed),
            latency_us: c.latency.latency(),
        }
    }
}

impl<B: Backend> CountingBackend<B> {
    /// Wraps `inner`, with every count at zero.
    pub fn new(inner: B) -> Self {
        CountingBackend { inner, counters: Default::default() }
    }

    /// A handle on the counts, valid for as long as anyone holds it.
    pub fn handle(&self) -> CountsHandle {
        CountsHandle(self.counters.clone())
    }

    /// The counts so far.
    pub fn counts(&self) -> Counts {
        self.handle().get()
    }

    /// Marks a request in flight until the result is dropped; one that begins
    /// while none is in flight begins a round.
    fn begin(&self) -> InFlight<'_> {
        if self.counters.in_flight.fetch_add(1, Relaxed) == 0 {
            self.counters.rounds.fetch_add(1, Relaxed);
        }
        InFlight(&self.counters, Instant::now())
    }

    fn got(&self, r: &BackendResult<Vec<u8>>) {
        self.counters.get.fetch_add(1, Relaxed);
        if let Ok(d) = r {
            self.counters.bytes_down.fetch_add(d.len() as u64, Relaxed);
        }
    }

    fn put(&self, len: u64) {
        self.counters.put.fetch_add(1, Relaxed);
        self.counters.bytes_up.fetch_add(len, Relaxed);
    }
}

impl<B: Backend> Backend for CountingBackend<B> {
    fn location(&self) -> String {
        self.inner.location()
    }

    fn connections(&self) -> usize {
        self.inner.connections()
    }

    fn read_max(&self, name: &str, max: u64) -> BackendResult<Vec<u8>> {
        let _in_flight = self.begin();
        let r = self.inner.read_max(name, max);
        self.got(&r);
        r
    }

    fn read_range(&self, name: &str, offset: u64, len: u64) -> BackendResult<Vec<u8>> {
        let _in_flight = self.begin();
        let r = self.inner.read_range(name, offset, len);
        self.got(&r);
        r
    }

    fn read_ranges(&self, name: &str, ranges: &[(u64, u64)]) -> Vec<BackendResult<Vec<u8>>> {
        let _in_flight = self.begin();
        let rs = self.inner.read_ranges(name, ranges);
        rs.iter().for_each(|r| self.got(r));
        rs
    }

    fn write(&self, name: &str, data: Vec<u8>) -> BackendResult<()> {
        let _in_flight = self.begin();
        self.put(data.len() as u64);
        self.inner.write(name, data)
    }

    fn write_new(&self, name: &str, data: Vec<u8>) -> BackendResult<bool> {
        let _in_flight = self.begin();
        self.put(data.len() as u64);
        self.inner.write_new(name, data)
    }

    fn write_file(&self, name: &str, file: &std::fs::File, len: u64) -> BackendResult<()> {
        let _in_flight = self.begin();
        self.put(len);
        self.inner.write_file(name, file, len)
    }

    fn spool_dir(&self) -> Option<std::path::PathBuf> {
        self.inner.spool_dir()
    }

    fn spool_file(&self) -> Option<BackendResult<std::fs::File>> {
        self.inner.spool_file()
    }

    fn stat(&self, name: &str) -> BackendResult<u64> {
        let _in_flight = self.begin();
        self.counters.head.fetch_add(1, Relaxed);
        self.inner.stat(name)
    }

    fn list(&self, prefix: &str) -> BackendResult<Vec<ObjectInfo>> {
        let _in_flight = self.begin();
        self.counters.list.fetch_add(1, Relaxed);
        self.inner.list(prefix)
    }

    fn delete(&self, name: &str) -> BackendResult<()> {
        let _in_flight = self.begin();
        self.counters.delete.fetch_add(1, Relaxed);
        self.inner.delete(name)
    }

    fn copies(&self, name: &str) -> usize {
        self.inner.copies(name)
    }

    fn read_range_copy(&self, name: &str, offset: u64, len: u64, copy: usize) -> BackendResult<Vec<u8>> {
        let _in_flight = self.begin();
        self.counters.get.fetch_add(1, Relaxed);
        let r = self.inner.read_range_copy(name, offset, len, copy);
        if let Ok(d) = &r {
            self.counters.bytes_down.fetch_add(d.len() as u64, Relaxed);
        }
        r
    }

    fn placed_copies(&self, name: &str) -> Vec<crate::PlacedCopy> {
        self.inner.placed_copies(name)
    }

    fn read_max_copy(&self, name: &str, max: u64, copy: usize) -> BackendResult<Vec<u8>> {
        let _in_flight = self.begin();
        self.counters.get.fetch_add(1, Relaxed);
        let r = self.inner.read_max_copy(name, max, copy);
        if let Ok(d) = &r {
            self.counters.bytes_down.fetch_add(d.len() as u64, Relaxed);
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemBackend;
    use crate::testing::{Intercepted, Request};

    #[test]
    fn counts_each_kind_of_request_and_the_bytes() {
        let be = CountingBackend::new(MemBackend::new());
        let h = be.handle();
        be.write("data/aa/x", vec![1; 100]).unwrap();
        be.write("index/y", vec![2; 10]).unwrap();
        assert_eq!(be.read("data/aa/x").unwrap().len(), 100);
        assert_eq!(
            be.read_ranges("data/aa/x", &[(0, 10), (90, 20)]).iter().map(|r| r.as_ref().unwrap().len()).sum::<usize>(),
            20
        );
        assert!(be.read("data/aa/none").is_err());
        be.stat("index/y").unwrap();
        be.list("data/").unwrap();
        be.delete("index/y").unwrap();
        let c = h.get();
        assert_eq!(
            c,
            Counts {
                put: 2,
                get: 4,
                head: 1,
                list: 1,
                delete: 1,
                bytes_up: 110,
                bytes_down: 120,
                rounds: 8,
                latency_us: c.latency_us
            }
        );
        assert!(c.latency_us.p50 <= c.latency_us.p99 && c.latency_us.p99 <= c.latency_us.max);
    }

    #[test]
    fn latency_percentiles_come_within_a_quarter_octave() {
        let h = Histogram::default();
        assert_eq!(h.latency(), Latency::default());
        for us in 1..=1000u64 {
            h.record(us * 100);
        }
        let l = h.latency();
        // The true values: 50,000, 99,000 and 100,000 µs.
        for (got, want) in [(l.p50, 50_000.0), (l.p99, 99_000.0), (l.max, 100_000.0)] {
            assert!((want..=want * 1.19).contains(&(got as f64)), "{got} for {want}: {l:?}");
        }
        h.record(u64::MAX);
        assert!(h.latency().max > 3_600_000_000, "an hour or more lands in the last bucket");
    }

    #[test]
    fn requests_sent_together_are_one_round_and_those_in_turn_one_each() {
        // Lists after a pause, so that requests sent together overlap.
        let pause = |r: Request<'_>| {
            if matches!(r, Request::List(_)) {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            Ok(())
        };
        let be = CountingBackend::new(Intercepted::new(MemBackend::new(), crate::local_connections(), pause));
        let prefixes = ["a/", "b/", "c/", "d/"];
        crate::fan_out(4, &prefixes, |p| be.list(p).unwrap());
        assert_eq!((be.counts().list, be.counts().rounds), (4, 1));
        for p in prefixes {
            be.list(p).unwrap();
        }
        assert_eq!((be.counts().list, be.counts().rounds), (8, 5));
        // Each listing took at least its 50 ms pause.
        assert!(be.counts().latency_us.p50 >= 50_000, "{:?}", be.counts().latency_us);
    }
}
