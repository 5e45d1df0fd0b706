//! The backend conformance suite (feature `testing`): one check per point of the
//! storage contract (docs/design.md#storage-contract), run on any backend. Every
//! backend coffer ships passes it in its tests (memory, local, OpenDAL's fs, and
//! S3 and SFTP when their test servers are configured).
//!
//! `run_suite(make)` calls `make` once per check for a fresh, empty backend (a
//! new directory, or a new prefix in a bucket), runs every check even when some
//! fail, and returns a [`SuiteReport`]; [`SuiteReport::assert_passed`] fails a
//! test with every failed point listed.
//!
//! [`servers`] says what a test does when the server it needs was not started.

use std::fmt;
use std::io::Write;

use super::{Backend, BackendError, BackendResult, ErrorKind, ObjectInfo};

pub mod servers;

/// The outcome of the suite on one backend.
#[derive(Debug)]
pub struct SuiteReport {
    /// The backend's location, as it describes itself.
    pub location: String,
    /// Each contract point checked, and what went wrong with it.
    pub results: Vec<(&'static str, Result<(), String>)>,
}

impl SuiteReport {
    /// The points that failed.
    pub fn failures(&self) -> Vec<&(&'static str, Result<(), String>)> {
        self.results.iter().filter(|(_, r)| r.is_err()).collect()
    }

    /// Panics listing every failed point, if any.
    pub fn assert_passed(&self) {
        assert!(self.failures().is_empty(), "{self}");
    }
}

impl fmt::Display for SuiteReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let failed = self.failures().len();
        writeln!(
            f,
            "conformance on {}: {} of {} points passed",
            self.location,
            self.results.len() - failed,
            self.results.len()
        )?;
        for (point, r) in &self.results {
            match r {
                Ok(()) => writeln!(f, "  ok    {point}")?,
                Err(e) => writeln!(f, "  FAIL  {point}: {e}")?,
            }
        }
        Ok(())
    }
}

type Check<B> = fn(&B) -> Result<(), String>;

/// Runs every contract check, each on a fresh backend from `make`.
pub fn run_suite<B: Backend + 'static>(make: impl Fn() -> B) -> SuiteReport {
    let checks: Vec<(&'static str, Check<B>)> = vec![
        ("read-after-write (read, read_max, stat)", read_after_write),
        ("idempotent write (same name, same bytes)", idempotent_write),
        ("atomic write (readers see nothing or all of it)", atomic_write),
        ("list-after-write and prefix semantics", listing),
        ("read_range: exact, short at the end, empty past it", read_range),
        ("read_ranges: batch equals single reads", read_ranges),
        ("read_max: TooLarge above the limit", read_max),
        ("NotFound for absent objects and directories", not_found),
        ("delete: gone for every reader; absent is ok", delete),
        ("nested names (two directory levels)", nested_names),
        ("empty objects", empty_objects),
        ("large objects (9 MiB, write and write_file; 33 MiB write_file)", large_objects),
        ("write_file: first len bytes, repeatable", write_file),
        ("write_new: creates once, never replaces", write_new),
        ("concurrent writers of distinct objects", concurrent_writers),
    ];
    let mut location = String::new();
    let results = checks
        .into_iter()
        .map(|(point, check)| {
            let be = make();
            if location.is_empty() {
                location = be.location();
            }
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&be)))
                .unwrap_or_else(|p| Err(format!("panicked: {}", panic_text(&p))));
            (point, r)
        })
        .collect();
    SuiteReport { location, results }
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default()
}

fn ensure(cond: bool, what: impl FnOnce() -> String) -> Result<(), String> {
    if cond { Ok(()) } else { Err(what()) }
}

fn ok<T>(r: BackendResult<T>, what: &str) -> Result<T, String> {
    r.map_err(|e| format!("{what}: {e}"))
}

fn kind_is<T: fmt::Debug>(r: BackendResult<T>, kind: ErrorKind, what: &str) -> Result<(), String> {
    match r {
        Err(BackendError { kind: k, .. }) if k == kind => Ok(()),
        Err(e) => Err(format!("{what}: expected {kind:?}, got {:?} ({e})", e.kind)),
        Ok(v) => Err(format!("{what}: expected {kind:?}, got Ok({v:?})")),
    }
}

/// Bytes that differ at every position and between seeds.
fn pattern(seed: u8, len: usize) -> Vec<u8> {
    let mut x = 0x9E37_79B9u32 ^ seed as u32;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

fn sorted(mut v: Vec<ObjectInfo>) -> Vec<ObjectInfo> {
    v.sort_by(|a, b| a.name.cmp(&b.name));
    v
}

fn info(name: &str, size: u64) -> ObjectInfo {
    ObjectInfo { name: name.to_string(), size }
}

fn read_after_write<B: Backend>(be: &B) -> Result<(), String> {
    let data = pattern(1, 1000);
    ok(be.write("index/aa01", data.clone()), "write")?;
    ensure(ok(be.read("index/aa01"), "read")? == data, || "read returned other bytes".into())?;
    ensure(ok(be.read_max("index/aa01", 1000), "read_max")? == data, || "read_max returned other bytes".into())?;
    let size = ok(be.stat("index/aa01"), "stat")?;
    ensure(size == 1000, || format!("stat says {size}, not 1000"))
}

fn idempotent_write<B: Backend>(be: &B) -> Result<(), String> {
    let data = pattern(2, 5000);
    for i in 0..3 {
        ok(be.write("snapshots/bb02", data.clone()), &format!("write #{}", i + 1))?;
    }
    ensure(ok(be.read("snapshots/bb02"), "read")? == data, || "bytes changed".into())?;
    let listed = ok(be.list("snapshots/"), "list")?;
    ensure(listed == vec![info("snapshots/bb02", 5000)], || format!("listed {listed:?}"))
}

fn atomic_write<B: Backend>(be: &B) -> Result<(), String> {
    let data = pattern(3, 4 << 20);
    let name = "data/cc/cc03";
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let reader = s.spawn(|| -> Result<u32, String> {
            let mut seen = 0;
            loop {
                let finished = done.load(std::sync::atomic::Ordering::Acquire);
                match be.read(name) {
                    Ok(d) if d == data => seen += 1,
                    Ok(d) => return Err(format!("a reader saw {} bytes that are not the object written", d.len())),
                    Err(e) if e.kind == ErrorKind::NotFound => {}
                    Err(e) => return Err(format!("read while writing: {e}")),
                }
                if finished {
                    return Ok(seen);
                }
            }
        });
        let w = ok(be.write(name, data.clone()), "write");
        done.store(true, std::sync::atomic::Ordering::Release);
        let seen = reader.join().map_err(|p| format!("reader panicked: {}", panic_text(&p)))??;
        w?;
        ensure(seen >= 1, || "the object was not readable once write returned".into())
    })
}

fn listing<B: Backend>(be: &B) -> Result<(), String> {
    for (name, len) in [
        ("index/a1", 10),
        ("index/b2", 20),
        ("index2/c3", 30),
        ("data/aa/d4", 40),
        ("data/bb/e5", 50),
        ("database", 60),
        ("keys/f6", 0),
    ] {
        ok(be.write(name, pattern(len as u8, len)), &format!("write {name}"))?;
    }
    let got = sorted(ok(be.list("index/"), "list index/")?);
    ensure(got == vec![info("index/a1", 10), info("index/b2", 20)], || format!("list index/ gave {got:?}"))?;
    let got = sorted(ok(be.list("data/"), "list data/")?);
    ensure(got == vec![info("data/aa/d4", 40), info("data/bb/e5", 50)], || format!("list data/ gave {got:?}"))?;
    let got = sorted(ok(be.list("data/aa/"), "list data/aa/")?);
    ensure(got == vec![info("data/aa/d4", 40)], || format!("list data/aa/ gave {got:?}"))?;
    let got = ok(be.list("keys/"), "list keys/")?;
    ensure(got == vec![info("keys/f6", 0)], || format!("list keys/ gave {got:?}"))?;
    let got = ok(be.list("snapshots/"), "list of a prefix never written")?;
    ensure(got.is_empty(), || format!("list snapshots/ gave {got:?}"))
}

fn read_range<B: Backend>(be: &B) -> Result<(), String> {
    let data = pattern(5, 1000);
    ok(be.write("data/dd/dd05", data.clone()), "write")?;
    let cases: [(u64, u64, &[u8]); 6] = [
        (0, 1000, &data[..]),
        (10, 20, &data[10..30]),
        (990, 100, &data[990..]),
        (1000, 10, &[]),
        (5000, 10, &[]),
        (500, 0, &[]),
    ];
    for (offset, len, want) in cases {
        let got = ok(be.read_range("data/dd/dd05", offset, len), &format!("read_range({offset}, {len})"))?;
        ensure(got == want, || format!("read_range({offset}, {len}) gave {} bytes, not {}", got.len(), want.len()))?;
    }
    kind_is(be.read_range("data/dd/none", 0, 10), ErrorKind::NotFound, "read_range of an absent object")
}

fn read_ranges<B: Backend>(be: &B) -> Result<(), String> {
    let data = pattern(6, 100_000);
    ok(be.write("data/ee/ee06", data.clone()), "write")?;
    let ranges: Vec<(u64, u64)> = (0..40).map(|i| (i * 2500, 1000)).chain([(99_990, 100), (200_000, 5)]).collect();
    let got = be.read_ranges("data/ee/ee06", &ranges);
    ensure(got.len() == ranges.len(), || format!("{} results for {} ranges", got.len(), ranges.len()))?;
    for (r, &(offset, len)) in got.into_iter().zip(&ranges) {
        let want = &data[(offset as usize).min(data.len())..((offset + len) as usize).min(data.len())];
        let r = ok(r, &format!("range ({offset}, {len})"))?;
        ensure(r == want, || format!("range ({offset}, {len}) gave other bytes"))?;
    }
    let missing = be.read_ranges("data/ee/none", &[(0, 10), (10, 10)]);
    ensure(missing.len() == 2, || "two results for two ranges of an absent object".into())?;
    for r in missing {
        kind_is(r, ErrorKind::NotFound, "a range of an absent object")?;
    }
    Ok(())
}

fn read_max<B: Backend>(be: &B) -> Result<(), String> {
    ok(be.write("index/ff07", pattern(7, 4096)), "write")?;
    ok(be.read_max("index/ff07", 4096), "read_max at exactly the size")?;
    kind_is(be.read_max("index/ff07", 4095), ErrorKind::TooLarge, "read_max one byte below the size")?;
    kind_is(be.read_max("index/ff07", 0), ErrorKind::TooLarge, "read_max of 0")?;
    kind_is(be.read_max("index/none", 10), ErrorKind::NotFound, "read_max of an absent object")
}

fn not_found<B: Backend>(be: &B) -> Result<(), String> {
    ok(be.write("index/gg08", vec![1]), "write")?;
    for name in ["index/none", "nodir/none", "data/zz/none"] {
        kind_is(be.read(name), ErrorKind::NotFound, &format!("read {name}"))?;
        kind_is(be.stat(name), ErrorKind::NotFound, &format!("stat {name}"))?;
        kind_is(be.read_range(name, 0, 1), ErrorKind::NotFound, &format!("read_range {name}"))?;
    }
    Ok(())
}

fn delete<B: Backend>(be: &B) -> Result<(), String> {
    ok(be.write("index/hh09", vec![9; 9]), "write")?;
    ok(be.write("index/hh10", vec![10; 10]), "write")?;
    ok(be.delete("index/hh09"), "delete")?;
    kind_is(be.read("index/hh09"), ErrorKind::NotFound, "read after delete")?;
    kind_is(be.stat("index/hh09"), ErrorKind::NotFound, "stat after delete")?;
    let got = ok(be.list("index/"), "list after delete")?;
    ensure(got == vec![info("index/hh10", 10)], || format!("list after delete gave {got:?}"))?;
    ok(be.delete("index/hh09"), "delete again")?;
    ok(be.delete("nodir/none"), "delete in a directory never made")
}

fn nested_names<B: Backend>(be: &B) -> Result<(), String> {
    let name = "data/3f/3fa2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2";
    let data = pattern(11, 333);
    ok(be.write(name, data.clone()), "write")?;
    ensure(ok(be.read(name), "read")? == data, || "read gave other bytes".into())?;
    let got = ok(be.list("data/"), "list")?;
    ensure(got == vec![info(name, 333)], || format!("list gave {got:?}"))
}

fn empty_objects<B: Backend>(be: &B) -> Result<(), String> {
    ok(be.write("sessions/ii12", Vec::new()), "write")?;
    ensure(ok(be.read("sessions/ii12"), "read")?.is_empty(), || "read of an empty object gave bytes".into())?;
    ensure(ok(be.stat("sessions/ii12"), "stat")? == 0, || "stat of an empty object is not 0".into())?;
    ensure(ok(be.read_range("sessions/ii12", 0, 10), "read_range")?.is_empty(), || "range gave bytes".into())?;
    let got = ok(be.list("sessions/"), "list")?;
    ensure(got == vec![info("sessions/ii12", 0)], || format!("list gave {got:?}"))
}

fn large_objects<B: Backend>(be: &B) -> Result<(), String> {
    let data = pattern(13, 9 << 20);
    ok(be.write("data/jj/jj13", data.clone()), "write 9 MiB")?;
    ensure(ok(be.read("data/jj/jj13"), "read")? == data, || "9 MiB read back differ".into())?;
    let tail = ok(be.read_range("data/jj/jj13", (9 << 20) - 100, 1000), "read_range at the end")?;
    ensure(tail == data[data.len() - 100..], || "the last 100 bytes differ".into())?;
    let mut file = tempfile::tempfile().map_err(|e| format!("temporary file: {e}"))?;
    file.write_all(&data).map_err(|e| format!("temporary file: {e}"))?;
    ok(be.write_file("data/jj/jj14", &file, data.len() as u64), "write_file 9 MiB")?;
    ensure(ok(be.read("data/jj/jj14"), "read")? == data, || "9 MiB written from a file differ".into())?;
    ensure(ok(be.stat("data/jj/jj14"), "stat")? == data.len() as u64, || "stat of the 9 MiB object".into())?;
    // Larger than what a remote backend sends in one request: streamed in pieces.
    let big = pattern(15, 33 << 20);
    let mut file = tempfile::tempfile().map_err(|e| format!("temporary file: {e}"))?;
    file.write_all(&big).map_err(|e| format!("temporary file: {e}"))?;
    ok(be.write_file("data/jj/jj15", &file, big.len() as u64), "write_file 33 MiB")?;
    ensure(ok(be.read("data/jj/jj15"), "read")? == big, || "33 MiB written from a file differ".into())
}

fn write_file<B: Backend>(be: &B) -> Result<(), String> {
    let data = pattern(15, 300_000);
    let mut file = tempfile::tempfile().map_err(|e| format!("temporary file: {e}"))?;
    file.write_all(&data).map_err(|e| format!("temporary file: {e}"))?;
    ok(be.write_file("data/kk/kk15", &file, 200_000), "write_file of the first 200000 bytes")?;
    ok(be.write_file("data/kk/kk15", &file, 200_000), "write_file again (a retry)")?;
    ensure(ok(be.read("data/kk/kk15"), "read")? == data[..200_000], || "write_file stored other bytes".into())
}

fn write_new<B: Backend>(be: &B) -> Result<(), String> {
    let first = pattern(16, 700);
    let created = ok(be.write_new("config", first.clone()), "write_new of an absent object")?;
    ensure(created, || "write_new of an absent object said it existed".into())?;
    let again = ok(be.write_new("config", pattern(17, 900)), "write_new over an existing object")?;
    ensure(!again, || "write_new over an existing object said it created it".into())?;
    ensure(ok(be.read("config"), "read")? == first, || "write_new replaced an existing object".into())
}

fn concurrent_writers<B: Backend>(be: &B) -> Result<(), String> {
    let threads = 8;
    let each = 6;
    let errors: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || -> Result<(), String> {
                    for i in 0..each {
                        let name = format!("data/{t:02x}/obj{i}");
                        ok(be.write(&name, pattern((t * each + i) as u8, 10_000 + i)), &format!("write {name}"))?;
                    }
                    Ok(())
                })
            })
            .collect();
        handles.into_iter().filter_map(|h| h.join().unwrap_or_else(|_| Err("writer panicked".into())).err()).collect()
    });
    ensure(errors.is_empty(), || errors.join("; "))?;
    let got = sorted(ok(be.list("data/"), "list")?);
    ensure(got.len() == threads * each, || format!("{} objects listed, not {}", got.len(), threads * each))?;
    for t in 0..threads {
        for i in 0..each {
            let name = format!("data/{t:02x}/obj{i}");
            let want = pattern((t * each + i) as u8, 10_000 + i);
            ensure(ok(be.read(&name), "read")? == want, || format!("{name} holds other bytes"))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{LocalBackend, MemBackend, OpendalBackend};

    #[test]
    fn memory_backend_conforms() {
        run_suite(MemBackend::new).assert_passed();
    }

    #[test]
    fn local_backend_conforms() {
        let dir = tempfile::tempdir().unwrap();
        let n = std::sync::atomic::AtomicUsize::new(0);
        run_suite(|| {
            let p = dir.path().join(n.fetch_add(1, std::sync::atomic::Ordering::Relaxed).to_string());
            std::fs::create_dir(&p).unwrap();
            LocalBackend::open(&p).unwrap()
        })
        .assert_passed();
    }

    #[test]
    fn opendal_fs_backend_conforms() {
        let dir = tempfile::tempdir().unwrap();
        let n = std::sync::atomic::AtomicUsize::new(0);
        run_suite(|| {
            let p = dir.path().join(n.fetch_add(1, std::sync::atomic::Ordering::Relaxed).to_string());
            std::fs::create_dir(&p).unwrap();
            OpendalBackend::local(&p).unwrap()
        })
        .assert_passed();
    }

    #[test]
    fn a_broken_backend_fails_the_suite_with_the_points_named() {
        /// Loses every other write silently and lists nothing.
        struct Lossy(MemBackend, std::sync::atomic::AtomicBool);
        impl Backend for Lossy {
            fn location(&self) -> String {
                "lossy".into()
            }
            fn read_max(&self, n: &str, m: u64) -> BackendResult<Vec<u8>> {
                self.0.read_max(n, m)
            }
            fn read_range(&self, n: &str, o: u64, l: u64) -> BackendResult<Vec<u8>> {
                self.0.read_range(n, o, l)
            }
            fn write(&self, n: &str, d: Vec<u8>) -> BackendResult<()> {
                if !self.1.fetch_xor(true, std::sync::atomic::Ordering::Relaxed) {
                    self.0.write(n, d)?;
                }
                Ok(())
            }
            fn stat(&self, n: &str) -> BackendResult<u64> {
                self.0.stat(n)
            }
            fn list(&self, _: &str) -> BackendResult<Vec<ObjectInfo>> {
                Ok(Vec::new())
            }
            fn delete(&self, n: &str) -> BackendResult<()> {
                self.0.delete(n)
            }
        }
        let report = run_suite(|| Lossy(MemBackend::new(), Default::default()));
        let failed: Vec<&str> = report.failures().iter().map(|(p, _)| *p).collect();
        assert!(failed.contains(&"list-after-write and prefix semantics"), "{report}");
        assert!(failed.contains(&"concurrent writers of distinct objects"), "{report}");
        assert!(failed.len() >= 5, "{report}");
    }
}

/// A request on its way to the backend an [`Intercepted`] wraps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request<'a> {
    /// `read_max` or `read_range` of this object.
    Read(&'a str),
    /// `write` of this object.
    Write(&'a str),
    /// `stat` of this object.
    Stat(&'a str),
    /// `list` of this prefix.
    List(&'a str),
    /// `delete` of this object.
    Delete(&'a str),
}

/// What an [`Intercepted`] backend does with each request before passing it on:
/// wait (a slow store), record it, or refuse it with an error.
pub trait Hook: Send + Sync {
    /// Called before `request` reaches the wrapped backend; an error is the
    /// request's answer.
    fn before(&self, request: Request<'_>) -> BackendResult<()>;
}

impl<F: Fn(Request<'_>) -> BackendResult<()> + Send + Sync> Hook for F {
    fn before(&self, request: Request<'_>) -> BackendResult<()> {
        self(request)
    }
}

/// A backend for tests of a storage that misbehaves in one way: each request
/// goes through `hook` before the backend it wraps, which serves it otherwise
/// unchanged; it wants `connections` requests in flight. The trait's other
/// methods keep their defaults, which reach the wrapped backend through these.
pub struct Intercepted<B, H> {
    inner: B,
    connections: usize,
    hook: H,
}

impl<B: Backend, H: Hook> Intercepted<B, H> {
    /// Wraps `inner`.
    pub fn new(inner: B, connections: usize, hook: H) -> Self {
        Intercepted { inner, connections, hook }
    }

    /// The wrapped backend.
    pub fn inner(&self) -> &B {
        &self.inner
    }

    /// The hook.
    pub fn hook(&self) -> &H {
        &self.hook
    }
}

impl<B: Backend, H: Hook> Backend for Intercepted<B, H> {
    fn location(&self) -> String {
        self.inner.location()
    }
    fn connections(&self) -> usize {
        self.connections
    }
    fn read_max(&self, name: &str, max: u64) -> BackendResult<Vec<u8>> {
        self.hook.before(Request::Read(name))?;
        self.inner.read_max(name, max)
    }
    fn read_range(&self, name: &str, offset: u64, len: u64) -> BackendResult<Vec<u8>> {
        self.hook.before(Request::Read(name))?;
        self.inner.read_range(name, offset, len)
    }
    fn write(&self, name: &str, data: Vec<u8>) -> BackendResult<()> {
        self.hook.before(Request::Write(name))?;
        self.inner.write(name, data)
    }
    fn stat(&self, name: &str) -> BackendResult<u64> {
        self.hook.before(Request::Stat(name))?;
        self.inner.stat(name)
    }
    fn list(&self, prefix: &str) -> BackendResult<Vec<ObjectInfo>> {
        self.hook.before(Request::List(prefix))?;
        self.inner.list(prefix)
    }
    fn delete(&self, name: &str) -> BackendResult<()> {
        self.hook.before(Request::Delete(name))?;
        self.inner.delete(name)
    }
}
