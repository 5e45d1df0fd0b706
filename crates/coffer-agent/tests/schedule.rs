//! The due rules with the clock passed in: catch-up once, dense schedules after long
//! sleeps, daylight saving, retries with backoff, the default overdue period and the
//! randomised delay.

use std::time::{Duration, Instant};

use coffer_agent::calendar::Schedule;
use coffer_agent::schedule::{default_overdue, due, next_run, random_delay, retry_at};
use jiff::Timestamp;
use jiff::tz::TimeZone;

fn at(rfc3339: &str) -> Timestamp {
    rfc3339.parse().unwrap_or_else(|e| panic!("{rfc3339}: {e}"))
}

fn utc(expr: &str) -> Schedule {
    Schedule::parse(expr, TimeZone::UTC).unwrap()
}

fn paris(expr: &str) -> Schedule {
    Schedule::parse(expr, TimeZone::get("Europe/Paris").unwrap()).unwrap()
}

#[test]
fn a_week_asleep_runs_once() {
    let daily = utc("daily");
    let last = at("2024-05-01T00:00:00Z");
    let now = at("2024-05-08T09:00:00Z");
    let slot = due(&daily, last, now).expect("due");
    assert_eq!(slot, at("2024-05-08T00:00:00Z"));
    // That run done, nothing else is due until the next day.
    assert_eq!(due(&daily, slot, now), None);
    assert_eq!(next_run(&daily, slot, now), Some(at("2024-05-09T00:00:00Z")));
    // Before the run, the next run is the one due now.
    assert_eq!(next_run(&daily, last, now), Some(slot));
}

#[test]
fn due_at_the_slot_itself_and_not_before() {
    let daily = utc("*-*-* 04:30");
    let last = at("2024-05-01T04:30:00Z");
    assert_eq!(due(&daily, last, at("2024-05-02T04:29:59Z")), None);
    assert_eq!(due(&daily, last, at("2024-05-02T04:30:00Z")), Some(at("2024-05-02T04:30:00Z")));
    assert_eq!(due(&daily, last, at("2024-05-02T04:30:00.5Z")), Some(at("2024-05-02T04:30:00Z")));
    assert_eq!(next_run(&daily, last, at("2024-05-02T00:00:00Z")), Some(at("2024-05-02T04:30:00Z")));
    // A clock set back before the last slot: nothing is due.
    assert_eq!(due(&daily, last, at("2024-04-01T00:00:00Z")), None);
}

#[test]
fn second_level_schedules_after_a_year_asleep() {
    let every_second = utc("*:*:0/1");
    let every_five = utc("*:*:0/5");
    let started = Instant::now();
    let now = at("2025-05-01T12:34:56.789Z");
    assert_eq!(due(&every_second, at("2024-05-01T00:00:00Z"), now), Some(at("2025-05-01T12:34:56Z")));
    assert_eq!(due(&every_five, at("2024-05-01T00:00:00Z"), now), Some(at("2025-05-01T12:34:55Z")));
    assert_eq!(due(&every_five, at("2025-05-01T12:34:55Z"), now), None);
    assert_eq!(due(&every_five, at("2025-05-01T12:34:50Z"), now), Some(at("2025-05-01T12:34:55Z")));
    // Slot by slot this would be 31 million steps.
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
}

#[test]
fn a_schedule_that_ended() {
    let once = utc("2020-01-01 12:00");
    let now = at("2024-05-01T00:00:00Z");
    assert_eq!(due(&once, at("2019-06-01T00:00:00Z"), now), Some(at("2020-01-01T12:00:00Z")));
    assert_eq!(due(&once, at("2020-01-01T12:00:00Z"), now), None);
    assert_eq!(next_run(&once, at("2020-01-01T12:00:00Z"), now), None);
}

#[test]
fn daylight_saving() {
    let hourly = paris("hourly");
    // Spring: 02:00 does not exist; 03:00 +02:00 is the slot (once).
    let slot = due(&hourly, at("2024-03-31T01:00:00+01:00"), at("2024-03-31T03:30:00+02:00")).unwrap();
    assert_eq!(slot, at("2024-03-31T03:00:00+02:00"));
    assert_eq!(due(&hourly, slot, at("2024-03-31T03:59:59+02:00")), None);
    // Autumn, during the second pass of 02:00..03:00: the slot is 02:00 +02:00,
    // and 02:00 +01:00 is no slot of its own.
    let slot = due(&hourly, at("2024-10-27T01:00:00+02:00"), at("2024-10-27T02:30:00+01:00")).unwrap();
    assert_eq!(slot, at("2024-10-27T02:00:00+02:00"));
    assert_eq!(due(&hourly, slot, at("2024-10-27T02:59:59+01:00")), None);
    assert_eq!(next_run(&hourly, slot, at("2024-10-27T02:59:59+01:00")), Some(at("2024-10-27T03:00:00+01:00")));
    // A daily run at 02:30 in a week spanning the spring change: caught up once.
    let nightly = paris("*-*-* 02:30");
    let slot = due(&nightly, at("2024-03-28T02:30:00+01:00"), at("2024-03-31T12:00:00+02:00")).unwrap();
    assert_eq!(slot, at("2024-03-31T03:00:00+02:00"));
}

#[test]
fn retries_back_off() {
    let failed = at("2024-05-01T10:00:00Z");
    let minute = Duration::from_secs(60);
    assert_eq!(retry_at(failed, 0, 3, minute, None), Some(at("2024-05-01T10:01:00Z")));
    assert_eq!(retry_at(failed, 1, 3, minute, None), Some(at("2024-05-01T10:02:00Z")));
    assert_eq!(retry_at(failed, 2, 3, minute, None), Some(at("2024-05-01T10:04:00Z")));
    assert_eq!(retry_at(failed, 3, 3, minute, None), None);
    assert_eq!(retry_at(failed, 0, 0, minute, None), None);
    // The next slot first: it takes over.
    assert_eq!(retry_at(failed, 1, 3, minute, Some(at("2024-05-01T10:01:30Z"))), None);
    assert_eq!(retry_at(failed, 1, 3, minute, Some(at("2024-05-01T10:02:00Z"))), None);
    assert_eq!(retry_at(failed, 1, 3, minute, Some(at("2024-05-01T10:02:01Z"))), Some(at("2024-05-01T10:02:00Z")));
    // Absurd attempts do not overflow.
    assert_eq!(retry_at(failed, 40, 100, minute, None), None);
    assert_eq!(retry_at(failed, 31, 100, Duration::MAX, None), None);
}

#[test]
fn overdue_defaults() {
    let now = at("2024-05-15T10:00:00Z");
    assert_eq!(default_overdue(&utc("daily"), now), Duration::from_secs(48 * 3600));
    assert_eq!(default_overdue(&utc("hourly"), now), Duration::from_secs(2 * 3600));
    assert_eq!(default_overdue(&utc("Mon 03:00"), now), Duration::from_secs(14 * 24 * 3600));
    // At least an hour.
    assert_eq!(default_overdue(&utc("minutely"), now), Duration::from_secs(3600));
    assert_eq!(default_overdue(&utc("*:*:0/5"), now), Duration::from_secs(3600));
    // The gap is measured in time, not in civil days: the spring change's day is 23 hours.
    assert_eq!(default_overdue(&paris("daily"), at("2024-03-30T12:00:00Z")), Duration::from_secs(46 * 3600));
    // No two times left: never overdue.
    assert_eq!(default_overdue(&utc("2020-01-01"), now), Duration::MAX);
    assert_eq!(default_overdue(&utc("2024-12-31 10:00"), now), Duration::MAX);
}

#[test]
fn random_delays() {
    let max = Duration::from_secs(15 * 60);
    assert_eq!(random_delay(max, 0), Duration::ZERO);
    assert_eq!(random_delay(Duration::ZERO, u64::MAX), Duration::ZERO);
    assert_eq!(random_delay(max, 1 << 63), Duration::from_secs(450));
    assert_eq!(random_delay(max, 1 << 62), Duration::from_secs(225));
    let top = random_delay(max, u64::MAX);
    assert!(top < max && top > max - Duration::from_micros(1), "{top:?}");
    let half = random_delay(Duration::MAX, 1 << 63);
    assert_eq!(half.as_secs(), u64::MAX / 2);
    // Many draws cover the range.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut low = false;
    let mut high = false;
    for _ in 0..1000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let d = random_delay(max, x);
        assert!(d < max);
        low |= d < Duration::from_secs(60);
        high |= d > Duration::from_secs(14 * 60);
    }
    assert!(low && high);
}
