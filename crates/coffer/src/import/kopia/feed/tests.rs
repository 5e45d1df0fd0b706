//! The read-ahead against a fake object store: order, contents, requests in flight,
//! memory, failures.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::*;

/// Objects in memory, each request waiting `latency` for its answer; counts the
/// requests in flight and the bytes read from bodies that the caller has not read.
#[derive(Default)]
struct Fake {
    objects: HashMap<String, Vec<u8>>,
    /// Objects whose request fails.
    refused: HashSet<String>,
    /// Objects whose body fails after this many bytes.
    cut: HashMap<String, usize>,
    latency: Duration,
    in_flight: AtomicUsize,
    most_in_flight: AtomicUsize,
    /// Bytes read from bodies less bytes the caller read.
    outstanding: AtomicI64,
    most_outstanding: AtomicI64,
}

impl Fake {
    fn add(&mut self, object: &str, bytes: Vec<u8>) {
        self.objects.insert(object.into(), bytes);
    }

    fn taken(&self, n: usize) {
        self.outstanding.fetch_sub(n as i64, Ordering::SeqCst);
    }
}

struct Body<'a> {
    fake: &'a Fake,
    bytes: &'a [u8],
    at: usize,
    cut: Option<usize>,
}

impl Read for Body<'_> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.cut.is_some_and(|c| self.at >= c) {
            return Err(std::io::Error::other("connection cut"));
        }
        let end = self.bytes.len().min(self.at + out.len()).min(self.cut.unwrap_or(usize::MAX));
        let n = end - self.at;
        out[..n].copy_from_slice(&self.bytes[self.at..end]);
        self.at = end;
        let now = self.fake.outstanding.fetch_add(n as i64, Ordering::SeqCst) + n as i64;
        self.fake.most_outstanding.fetch_max(now, Ordering::SeqCst);
        Ok(n)
    }
}

impl<'a> Objects for &'a Fake {
    type Body = Body<'a>;

    fn get(&self, object: &str) -> Result<Body<'a>, String> {
        let fake: &'a Fake = self;
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_in_flight.fetch_max(now, Ordering::SeqCst);
        std::thread::sleep(self.latency);
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        if self.refused.contains(object) {
            return Err(format!("kopia's server answered 500 for object {object}"));
        }
        let bytes = fake.objects.get(object).ok_or_else(|| format!("no object {object}"))?;
        Ok(Body { fake, bytes, at: 0, cut: fake.cut.get(object).copied() })
    }
}

fn bytes(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

fn file(object: &str, size: u64) -> FeedFile {
    FeedFile {
        key: super::super::content_key(object),
        path: PathBuf::from(format!("/{object}")),
        size,
        object: object.into(),
    }
}

/// Reads every file to its end: (object, its bytes or the error).
fn read_all(fake: &Fake, files: Vec<FeedFile>, limits: FeedLimits) -> Vec<(String, Result<Vec<u8>, String>)> {
    let mut got = Vec::new();
    read_ahead(&fake, files.into_iter(), limits, |f, r| {
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        let res = loop {
            match r.read(&mut buf) {
                Ok(0) => break Ok(out),
                Ok(n) => {
                    fake.taken(n);
                    out.extend_from_slice(&buf[..n]);
                }
                Err(e) => break Err(e.to_string()),
            }
        };
        got.push((f.object.clone(), res));
        Ok::<(), ()>(())
    })
    .unwrap();
    got
}

#[test]
fn files_come_whole_and_in_order_within_the_memory_bound() {
    let mut fake = Fake::default();
    let mut files = Vec::new();
    let mut want = Vec::new();
    for i in 0..300 {
        // Mostly small files, an empty one, and a few far larger than the budget.
        let n = match i % 50 {
            7 => 0,
            13 => 700_000,
            _ => (i * 37) % 5000,
        };
        let name = format!("k{i}");
        fake.add(&name, bytes(n, i as u8));
        files.push(file(&name, n as u64));
        want.push((name, Ok(bytes(n, i as u8))));
    }
    let limits = FeedLimits { requests: 6, bytes: 64 << 10, block: 16 << 10, files: 50 };
    assert_eq!(read_all(&fake, files, limits), want);
    let most = fake.most_outstanding.load(Ordering::SeqCst);
    assert!(most <= (64 << 10) + 2 * (16 << 10), "at most the budget and two blocks are held: {most}");
}

#[test]
fn small_files_are_read_many_at_once() {
    let mut fake = Fake { latency: Duration::from_millis(20), ..Fake::default() };
    let files: Vec<FeedFile> = (0..64)
        .map(|i| {
            let name = format!("s{i}");
            fake.add(&name, bytes(100, i));
            file(&name, 100)
        })
        .collect();
    let start = Instant::now();
    let got = read_all(&fake, files, FeedLimits { requests: 8, ..FeedLimits::default() });
    let took = start.elapsed();
    assert_eq!(got.len(), 64);
    assert!(got.iter().all(|(_, r)| r.as_ref().is_ok_and(|b| b.len() == 100)));
    let most = fake.most_in_flight.load(Ordering::SeqCst);
    assert!((4..=8).contains(&most), "up to eight requests in flight: {most}");
    // One after the other they would take 64 x 20 ms.
    assert!(took < Duration::from_millis(64 * 20 / 3), "{took:?}");
}

#[test]
fn a_file_that_fails_to_read_gives_its_error_and_the_rest_comes() {
    let mut fake = Fake::default();
    for (name, n) in [("a", 10), ("refused", 10), ("cut", 50_000), ("b", 30_000)] {
        fake.add(name, bytes(n, 1));
    }
    fake.refused.insert("refused".into());
    fake.cut.insert("cut".into(), 20_000);
    let files = vec![file("a", 10), file("refused", 10), file("cut", 50_000), file("b", 30_000)];
    let got = read_all(&fake, files, FeedLimits { requests: 2, bytes: 8 << 10, block: 4 << 10, files: 8 });
    assert_eq!(got[0], ("a".into(), Ok(bytes(10, 1))));
    assert!(got[1].1.as_ref().is_err_and(|e| e.contains("answered 500 for object refused")), "{:?}", got[1].1);
    assert!(got[2].1.as_ref().is_err_and(|e| e.contains("object cut") && e.contains("connection cut")));
    assert_eq!(got[3], ("b".into(), Ok(bytes(30_000, 1))));
}

#[test]
fn a_body_other_than_recorded_comes_as_it_is() {
    let mut fake = Fake::default();
    fake.add("longer", bytes(10_000, 2));
    fake.add("shorter", bytes(10, 3));
    fake.add("none-recorded", bytes(5000, 4));
    let files = vec![file("longer", 100), file("shorter", 9000), file("none-recorded", 0)];
    let got = read_all(&fake, files, FeedLimits { requests: 3, bytes: 4096, block: 1024, files: 8 });
    assert_eq!(got[0].1, Ok(bytes(10_000, 2)));
    assert_eq!(got[1].1, Ok(bytes(10, 3)));
    assert_eq!(got[2].1, Ok(bytes(5000, 4)));
}

#[test]
fn files_left_unread_are_dropped_and_an_error_ends_it_all() {
    let mut fake = Fake::default();
    let mut files = Vec::new();
    for i in 0..40 {
        let name = format!("f{i}");
        fake.add(&name, bytes(20_000, i));
        files.push(file(&name, 20_000));
    }
    // Only every other file read, and then only its first bytes: the rest waits for
    // room no more.
    let mut seen = Vec::new();
    let r = read_ahead(
        &&fake,
        files.clone().into_iter(),
        FeedLimits { requests: 4, bytes: 16 << 10, block: 4096, files: 8 },
        |f, r| {
            seen.push(f.object.clone());
            if seen.len() % 2 == 0 {
                let mut first = [0u8; 100];
                r.read_exact(&mut first).unwrap();
                assert_eq!(first[..], bytes(20_000, (seen.len() - 1) as u8)[..100]);
            }
            if seen.len() == 30 { Err("stop") } else { Ok(()) }
        },
    );
    assert_eq!(r, Err("stop"));
    assert_eq!(seen.len(), 30);
    assert_eq!(seen[29], "f29");
}

#[test]
fn reads_ask_for_a_block_or_what_is_left_and_a_byte() {
    assert_eq!(next_want(0, false, 1024), 1);
    assert_eq!(next_want(10, false, 1024), 11);
    assert_eq!(next_want(1023, false, 1024), 1024);
    assert_eq!(next_want(1024, false, 1024), 1024);
    assert_eq!(next_want(1 << 40, false, 1024), 1024);
    assert_eq!(next_want(0, true, 1024), 1024);
}

fn entry(name: &str) -> k::Entry {
    k::Entry {
        name: name.into(),
        kind: EntryType::File,
        go_mode: 0o644,
        size: 1,
        mtime: (0, 0),
        uid: 0,
        gid: 0,
        object: format!("k{name}"),
        below: None,
    }
}

#[test]
fn listings_are_kept_once_within_their_bound() {
    let l = Listings::default();
    let small = k::Dir { entries: vec![entry("a"), entry("b")], refused: Vec::new() };
    l.put("d1", &small);
    assert_eq!(l.take("d1"), Some(small.clone()));
    assert_eq!(l.take("d1"), None, "taken once");
    // A listing larger than the bound is not kept; what fits still is.
    let huge = k::Dir { entries: (0..300_000).map(|i| entry(&format!("{i:0>40}"))).collect(), refused: Vec::new() };
    assert!(Listings::cost(&huge) > LISTINGS_BYTES);
    l.put("big", &huge);
    assert_eq!(l.take("big"), None);
    l.put("d2", &small);
    assert_eq!(l.take("d2"), Some(small));
    assert_eq!(l.0.lock().unwrap().1, 0, "nothing counted once all is taken");
}

#[test]
fn walked_directories_are_remembered() {
    let w = WalkedDirs::default();
    assert!(!w.contains("kdir"));
    w.insert("kdir".into());
    assert!(w.contains("kdir"));
}
