//! Tests of the bandwidth limits: the bucket's schedule exactly, then real
//! transfers through the wrapper around the memory backend, timed. The
//! bounds on times are generous (the machine may be loaded, and a sleep may
//! last longer than asked, never shorter); the benchmark `bench/limit.sh`
//! measures the rate closely.

use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::MemBackend;
use crate::testing::run_suite;

const MIB: u64 = 1 << 20;

fn rate(bytes: u64) -> Option<NonZeroU64> {
    NonZeroU64::new(bytes)
}

fn limited(up: u64, down: u64) -> Arc<ThrottledBackend<MemBackend>> {
    Arc::new(ThrottledBackend::new(MemBackend::new(), Throttle::new(rate(up), rate(down))))
}

/// Seconds `f` took.
fn timed<T>(f: impl FnOnce() -> T) -> (T, f64) {
    let t = Instant::now();
    let r = f();
    (r, t.elapsed().as_secs_f64())
}

/// `lo <= got <= hi`, with the figures in the message.
fn within(what: &str, got: f64, lo: f64, hi: f64) {
    assert!((lo..=hi).contains(&got), "{what}: {got:.3} s, expected {lo:.3} to {hi:.3} s");
}

#[test]
fn the_schedule_gives_a_burst_then_the_rate() {
    let burst = 1.0;
    let mut s = Schedule::full(burst);
    // A full bucket gives its burst at once, in pieces.
    assert_eq!(s.reserve(0.5, burst, 0.0), 0.0);
    assert_eq!(s.reserve(0.5, burst, 0.0), 0.0);
    // Then each piece waits for its own cost.
    assert_eq!(s.reserve(0.25, burst, 0.0), 0.25);
    assert_eq!(s.reserve(0.25, burst, 0.1), 0.5);
    // An idle bucket fills up to a burst, no more.
    assert_eq!(s.reserve(1.0, burst, 10.0), 10.0);
    assert_eq!(s.reserve(0.5, burst, 10.0), 10.5);
    // More than a burst waits for a full bucket, and leaves a debt the next waits off.
    let mut s = Schedule::full(burst);
    assert_eq!(s.reserve(3.0, burst, 5.0), 5.0);
    assert_eq!(s.reserve(0.0, burst, 5.0), 7.0);
    // A debt charged after a read; a refund gives back what did not come.
    let mut s = Schedule::full(burst);
    s.charge(2.0, burst, 1.0);
    assert_eq!(s.reserve(0.0, burst, 1.0), 2.0);
    s.refund(1.0);
    assert_eq!(s.reserve(0.0, burst, 1.0), 1.0);
}

#[test]
fn the_wrapper_keeps_the_storage_contract() {
    // Fast enough that the suite's 60-odd MiB take a fraction of a second.
    run_suite(|| ThrottledBackend::new(MemBackend::new(), Throttle::new(rate(4 << 30), rate(4 << 30)))).assert_passed();
}

#[test]
fn one_thread_uploads_at_the_limit() {
    let be = limited(MIB, 0);
    // 3 MiB in 64 KiB objects: the first MiB is the burst, the other two take 2 s.
    let ((), secs) = timed(|| {
        for i in 0..48 {
            be.write(&format!("data/{i}"), vec![7; 64 << 10]).unwrap();
        }
    });
    within("3 MiB at 1 MiB/s with a 1 MiB burst", secs, 1.9, 2.8);
    assert_eq!(be.list("data/").unwrap().len(), 48);
}

#[test]
fn eight_threads_share_the_limit_and_none_starves() {
    let be = limited(MIB, 0);
    let sent: Vec<std::sync::atomic::AtomicU64> = (0..8).map(|_| Default::default()).collect();
    let ((), secs) = timed(|| {
        std::thread::scope(|s| {
            for (t, count) in sent.iter().enumerate() {
                let be = be.clone();
                s.spawn(move || {
                    // 8 × 12 × 32 KiB = 3 MiB in all.
                    for i in 0..12 {
                        be.write(&format!("data/{t}/{i}"), vec![1; 32 << 10]).unwrap();
                        count.fetch_add(32 << 10, std::sync::atomic::Ordering::Relaxed);
                    }
                });
            }
        })
    });
    within("3 MiB from 8 threads at 1 MiB/s", secs, 1.9, 2.8);
    assert_eq!(be.list("data/").unwrap().len(), 96);

    // For a fixed time, each thread gets its share of the rate (the bucket
    // emptied first: the burst goes to whoever comes first).
    let be = limited(MIB, 0);
    be.write("data/burst", vec![0; MIB as usize]).unwrap();
    let stop = Instant::now() + Duration::from_secs(2);
    let sent: Vec<u64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|t| {
                let be = be.clone();
                s.spawn(move || {
                    let mut n = 0u64;
                    while Instant::now() < stop {
                        be.write(&format!("data/{t}/{n}"), vec![2; 16 << 10]).unwrap();
                        n += 1;
                    }
                    n * (16 << 10)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let (least, most) = (*sent.iter().min().unwrap(), *sent.iter().max().unwrap());
    assert!(least * 2 >= most, "threads' bytes in 2 s: {sent:?}");
    let total: u64 = sent.iter().sum();
    // 2 s of the rate, give or take the objects in flight at the end.
    assert!((3 * MIB / 2..=(2 * MIB + 8 * (16 << 10))).contains(&total), "{total} bytes in 2 s");
}

#[test]
fn threads_sending_objects_larger_than_a_slice_take_turns() {
    let be = limited(MIB, 0);
    be.write("data/burst", vec![0; MIB as usize]).unwrap();
    let stop = Instant::now() + Duration::from_secs(2);
    // 256 KiB objects: four slices each, taken one object at a time.
    let sent: Vec<u64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let be = be.clone();
                s.spawn(move || {
                    let mut n = 0u64;
                    while Instant::now() < stop {
                        be.write(&format!("data/{t}/{n}"), vec![2; 256 << 10]).unwrap();
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    // 2 s of the rate is 8 objects, and each thread had its turns.
    assert!(sent.iter().all(|&n| (1..=3).contains(&n)), "objects per thread in 2 s: {sent:?}");
    assert!((7..=12).contains(&sent.iter().sum::<u64>()), "objects in 2 s: {sent:?}");
}

#[test]
fn a_large_upload_waits_for_its_bytes_and_small_ones_pass_between_its_slices() {
    let be = limited(MIB, 0);
    // Empties the bucket.
    be.write("data/first", vec![0; MIB as usize]).unwrap();
    let (small, large) = std::thread::scope(|s| {
        let large = s.spawn(|| timed(|| be.write("data/large", vec![3; 3 * MIB as usize]).unwrap()).1);
        std::thread::sleep(Duration::from_millis(300));
        // A session marker's worth, while the large one takes its slices.
        let small = timed(|| be.write("sessions/marker", vec![4; 1 << 10]).unwrap()).1;
        (small, large.join().unwrap())
    });
    within("a 3 MiB object at 1 MiB/s, the bucket empty", large, 2.9, 4.0);
    within("a 1 KiB object sent while it waits", small, 0.0, 0.5);
    assert_eq!(be.read("data/large").unwrap().len(), 3 * MIB as usize);
}

#[test]
fn whole_object_reads_pay_after_and_leave_a_debt() {
    let be = limited(0, MIB);
    be.write("data/big", vec![5; 3 * MIB as usize]).unwrap();
    be.write("index/small", vec![6; 100]).unwrap();
    // Its size is known once it came: it goes at once...
    let (got, first) = timed(|| be.read("data/big").unwrap());
    assert_eq!(got.len(), 3 * MIB as usize);
    within("a 3 MiB read_max with a full bucket", first, 0.0, 0.5);
    // ...and the next read waits off the debt: 3 MiB less the 1 MiB burst.
    let (got, second) = timed(|| be.read_max("index/small", 1000).unwrap());
    assert_eq!(got.len(), 100);
    within("a read after the 2 MiB debt", second, 1.8, 2.8);
}

#[test]
fn range_reads_take_what_they_ask_and_get_back_what_did_not_come() {
    let be = limited(0, MIB);
    be.write("data/obj", vec![8; 2 * MIB as usize]).unwrap();
    // 2 MiB asked of ranges and copies: 1 MiB beyond the burst.
    let (rs, secs) = timed(|| be.read_ranges("data/obj", &[(0, MIB / 2), (MIB, MIB)]));
    assert_eq!(rs.iter().map(|r| r.as_ref().unwrap().len()).sum::<usize>(), 3 * MIB as usize / 2);
    let (r, more) = timed(|| be.read_range_copy("data/obj", 0, MIB / 2, 0).unwrap());
    assert_eq!(r.len(), MIB as usize / 2);
    within("2 MiB of ranges at 1 MiB/s", secs + more, 0.9, 1.8);
    // Far past the end: 1 MiB asked, 1 KiB came; the rest is given back.
    let (r, _) = timed(|| be.read_range("data/obj", 2 * MIB - 1024, MIB).unwrap());
    assert_eq!(r.len(), 1024);
    let ((), after) = timed(|| {
        be.read_range("data/obj", 0, MIB - 2048).unwrap();
    });
    within("a 1 MiB read after one that got back 1 MiB", after, 0.0, 0.4);
}

#[test]
fn upload_and_download_are_limited_apart() {
    let be = limited(MIB, MIB);
    be.inner.write("data/down", vec![9; 3 * MIB as usize]).unwrap();
    let (secs_up, secs_down) = std::thread::scope(|s| {
        let up = s.spawn(|| timed(|| be.write("data/up", vec![1; 3 * MIB as usize]).unwrap()).1);
        let down = s.spawn(|| {
            timed(|| {
                for _ in 0..3 {
                    be.read_range("data/down", 0, MIB).unwrap();
                }
            })
            .1
        });
        (up.join().unwrap(), down.join().unwrap())
    });
    // Each direction its own 2 s (3 MiB less a burst), not 4 s together.
    within("3 MiB up while 3 MiB come down", secs_up, 1.9, 3.0);
    within("3 MiB down while 3 MiB go up", secs_down, 1.9, 3.0);
}

#[test]
fn an_unlimited_throttle_is_known_as_such() {
    assert!(Throttle::new(None, None).is_unlimited());
    assert!(!Throttle::new(rate(1), None).is_unlimited());
    let t = Throttle::new(rate(2048), None);
    assert!(format!("{t:?}").contains("2048"), "{t:?}");
}
