//! When a run is due (docs/design.md#schedules): pure functions of a schedule, the
//! slot of the last run and the current time, which the caller passes in.

use std::time::Duration;

use jiff::Timestamp;

use crate::calendar::Schedule;

/// The shortest default `overdue` period.
const MIN_OVERDUE: Duration = Duration::from_secs(3600);

/// The slot a run is due for, or None when the schedule's next time after
/// `last_slot` is still to come (or never comes). The slot is the *latest*
/// scheduled time at or before `now`: runs missed while the machine slept are
/// caught up once.
pub fn due(schedule: &Schedule, last_slot: Timestamp, now: Timestamp) -> Option<Timestamp> {
    let first = schedule.next_after(last_slot)?;
    if first > now {
        return None;
    }
    // Slots are whole seconds. The latest slot L at or before `now` is the one
    // after the last second p with next_after(p) <= now (p = L - 1 s); whether a
    // second is before p is monotone, so it is found by bisection, in about 40
    // steps even after years of sleep, however dense the schedule.
    let mut lo = seconds_floor(first);
    let mut hi = seconds_floor(now);
    let within = |p: i64| Timestamp::from_second(p).ok().and_then(|t| schedule.next_after(t)).is_some_and(|n| n <= now);
    if !within(lo) {
        return Some(first);
    }
    // Invariant: within(lo), !within(hi) (a slot after `now`'s second is after `now`).
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if within(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Timestamp::from_second(lo).ok().and_then(|t| schedule.next_after(t)).or(Some(first))
}

fn seconds_floor(t: Timestamp) -> i64 {
    let s = t.as_second();
    if t.subsec_nanosecond() < 0 { s - 1 } else { s }
}

/// The slot of the next run: when a run is due already, the slot it is due for
/// (at or before `now`: run it at once); else the schedule's next time after
/// `last_slot`. None when the schedule has no more times.
pub fn next_run(schedule: &Schedule, last_slot: Timestamp, now: Timestamp) -> Option<Timestamp> {
    due(schedule, last_slot, now).or_else(|| schedule.next_after(last_slot))
}

/// When to try a failed run again: `retry_delay` × 2^`attempt` after the failure,
/// for `attempt` (counted from 0) below `retries`; None when the retries are used
/// up, or when the next slot comes first (its run takes over).
pub fn retry_at(
    failed_at: Timestamp,
    attempt: u32,
    retries: u32,
    retry_delay: Duration,
    next_slot: Option<Timestamp>,
) -> Option<Timestamp> {
    if attempt >= retries {
        return None;
    }
    let delay = retry_delay.checked_mul(2u32.checked_pow(attempt)?)?;
    let at = failed_at.checked_add(delay).ok()?;
    match next_slot {
        Some(slot) if slot <= at => None,
        _ => Some(at),
    }
}

/// The `overdue` period of a job that sets none: twice the gap between the
/// schedule's next two times after `now`, at least one hour. A schedule with fewer
/// than two times left is never overdue: [`Duration::MAX`].
pub fn default_overdue(schedule: &Schedule, now: Timestamp) -> Duration {
    let Some(a) = schedule.next_after(now) else { return Duration::MAX };
    let Some(b) = schedule.next_after(a) else { return Duration::MAX };
    let gap = b.duration_since(a).unsigned_abs();
    gap.saturating_mul(2).max(MIN_OVERDUE)
}

/// A delay drawn from [0, `max`) by the caller's random number (uniform when
/// `random` is).
pub fn random_delay(max: Duration, random: u64) -> Duration {
    // `random` / 2^64 of the way to `max`, exactly: max × random / 2^64 with max
    // split at 2^64 nanoseconds so that no product overflows.
    let nanos = max.as_nanos();
    let (high, low) = (nanos >> 64, nanos & u128::from(u64::MAX));
    let drawn = high * u128::from(random) + ((low * u128::from(random)) >> 64);
    // `drawn` < `max` fits a Duration again.
    let secs = u64::try_from(drawn / 1_000_000_000).unwrap_or(u64::MAX);
    Duration::new(secs, (drawn % 1_000_000_000) as u32)
}
