//! Schedules: every syntax form, month ends, leap days, daylight saving changes in
//! both directions, second-level schedules, cron's day rule, and refusals.

use coffer_agent::calendar::{Schedule, Syntax};
use jiff::Timestamp;
use jiff::tz::TimeZone;

fn zone(name: &str) -> TimeZone {
    TimeZone::get(name).unwrap_or_else(|e| panic!("time zone {name}: {e}"))
}

fn at(rfc3339: &str) -> Timestamp {
    rfc3339.parse().unwrap_or_else(|e| panic!("{rfc3339}: {e}"))
}

/// The instant as RFC 3339 with the offset of `zone` there.
fn show(t: Timestamp, zone: &TimeZone) -> String {
    t.display_with_offset(zone.to_offset(t)).to_string()
}

/// The next `n` times of `expr` (read in `zone_name`) after `after`, shown in that zone.
fn times(expr: &str, zone_name: &str, after: &str, n: usize) -> Vec<String> {
    let tz = zone(zone_name);
    let s = Schedule::parse(expr, tz.clone()).unwrap_or_else(|e| panic!("{e}"));
    let mut t = at(after);
    let mut out = Vec::new();
    for _ in 0..n {
        t = s.next_after(t).unwrap_or_else(|| panic!("{expr}: no time after {t}"));
        out.push(show(t, s.zone()));
    }
    out
}

fn next(expr: &str, zone_name: &str, after: &str) -> String {
    times(expr, zone_name, after, 1).remove(0)
}

fn refused(expr: &str) -> String {
    match Schedule::parse(expr, TimeZone::UTC) {
        Ok(s) => panic!("{expr:?} parsed: {s:?}"),
        Err(e) => {
            assert_eq!(e.text(), expr);
            e.to_string()
        }
    }
}

#[test]
fn shorthands() {
    let after = "2024-05-15T10:20:30Z";
    assert_eq!(next("minutely", "UTC", after), "2024-05-15T10:21:00+00:00");
    assert_eq!(next("hourly", "UTC", after), "2024-05-15T11:00:00+00:00");
    assert_eq!(next("daily", "UTC", after), "2024-05-16T00:00:00+00:00");
    // 2024-05-15 is a Wednesday.
    assert_eq!(next("weekly", "UTC", after), "2024-05-20T00:00:00+00:00");
    assert_eq!(next("monthly", "UTC", after), "2024-06-01T00:00:00+00:00");
    assert_eq!(next("quarterly", "UTC", after), "2024-07-01T00:00:00+00:00");
    assert_eq!(next("semiannually", "UTC", after), "2024-07-01T00:00:00+00:00");
    assert_eq!(next("semiannually", "UTC", "2024-07-01T00:00:00Z"), "2025-01-01T00:00:00+00:00");
    assert_eq!(next("yearly", "UTC", after), "2025-01-01T00:00:00+00:00");
    assert_eq!(next("annually", "UTC", after), "2025-01-01T00:00:00+00:00");
    assert_eq!(next("Daily", "UTC", after), "2024-05-16T00:00:00+00:00");
}

#[test]
fn next_is_strictly_after() {
    assert_eq!(next("daily", "UTC", "2024-05-16T00:00:00Z"), "2024-05-17T00:00:00+00:00");
    assert_eq!(next("daily", "UTC", "2024-05-15T23:59:59.999Z"), "2024-05-16T00:00:00+00:00");
    assert_eq!(next("*:*:*", "UTC", "2024-05-15T23:59:59.5Z"), "2024-05-16T00:00:00+00:00");
}

#[test]
fn weekdays_dates_and_times() {
    let after = "2024-05-15T10:20:30Z"; // a Wednesday
    assert_eq!(
        times("Mon..Fri 04:30", "UTC", after, 3),
        ["2024-05-16T04:30:00+00:00", "2024-05-17T04:30:00+00:00", "2024-05-20T04:30:00+00:00"]
    );
    assert_eq!(
        times("Mon,Wed,Fri *-*-* 12:00", "UTC", after, 3),
        ["2024-05-15T12:00:00+00:00", "2024-05-17T12:00:00+00:00", "2024-05-20T12:00:00+00:00"]
    );
    assert_eq!(next("Sat-Sun 09:15:30", "UTC", after), "2024-05-18T09:15:30+00:00");
    assert_eq!(next("sunday", "UTC", after), "2024-05-19T00:00:00+00:00");
    // The first Monday of the month: weekday and date must both match.
    assert_eq!(
        times("Mon *-*-1..7 03:00", "UTC", after, 2),
        ["2024-06-03T03:00:00+00:00", "2024-07-01T03:00:00+00:00"]
    );
    assert_eq!(next("2024-*-01 06:00", "UTC", after), "2024-06-01T06:00:00+00:00");
    assert_eq!(next("12-25", "UTC", after), "2024-12-25T00:00:00+00:00");
    assert_eq!(next("*-01,07-15 08:30:15", "UTC", after), "2024-07-15T08:30:15+00:00");
    assert_eq!(
        times("*-*-* 10..12:00", "UTC", after, 3),
        ["2024-05-15T11:00:00+00:00", "2024-05-15T12:00:00+00:00", "2024-05-16T10:00:00+00:00"]
    );
    assert_eq!(next("2030-06-15 12:00", "UTC", after), "2030-06-15T12:00:00+00:00");
    assert_eq!(next("2024..2026-01-01", "UTC", "2025-06-01T00:00:00Z"), "2026-01-01T00:00:00+00:00");
    assert!(
        Schedule::parse("2024..2026-01-01", TimeZone::UTC).unwrap().next_after(at("2026-01-01T00:00:00Z")).is_none()
    );
}

#[test]
fn steps() {
    let after = "2024-05-15T10:20:30Z";
    assert_eq!(
        times("*-*-* *:00/15", "UTC", after, 3),
        ["2024-05-15T10:30:00+00:00", "2024-05-15T10:45:00+00:00", "2024-05-15T11:00:00+00:00"]
    );
    assert_eq!(times("*-*-* 00/6:00", "UTC", after, 2), ["2024-05-15T12:00:00+00:00", "2024-05-15T18:00:00+00:00"]);
    assert_eq!(
        times("*-*-* 08..18/4:00", "UTC", after, 3),
        ["2024-05-15T12:00:00+00:00", "2024-05-15T16:00:00+00:00", "2024-05-16T08:00:00+00:00"]
    );
    assert_eq!(next("*-*-1/10", "UTC", after), "2024-05-21T00:00:00+00:00");
    assert_eq!(next("2024/3-01-01", "UTC", after), "2027-01-01T00:00:00+00:00");
}

#[test]
fn second_level_schedules() {
    assert_eq!(
        times("*:*:0/5", "UTC", "2024-05-15T10:20:57Z", 3),
        ["2024-05-15T10:21:00+00:00", "2024-05-15T10:21:05+00:00", "2024-05-15T10:21:10+00:00"]
    );
    assert_eq!(
        times("*:*:*", "UTC", "2024-12-31T23:59:58Z", 2),
        ["2024-12-31T23:59:59+00:00", "2025-01-01T00:00:00+00:00"]
    );
}

#[test]
fn month_ends_and_leap_days() {
    // The 31st skips months of 30 days (and February).
    assert_eq!(
        times("*-*-31", "UTC", "2024-03-31T12:00:00Z", 3),
        ["2024-05-31T00:00:00+00:00", "2024-07-31T00:00:00+00:00", "2024-08-31T00:00:00+00:00"]
    );
    assert_eq!(next("*-*-30", "UTC", "2024-01-30T12:00:00Z"), "2024-03-30T00:00:00+00:00");
    assert_eq!(next("*-02-29", "UTC", "2024-03-01T00:00:00Z"), "2028-02-29T00:00:00+00:00");
    // 2100 is no leap year.
    assert_eq!(next("*-02-29", "UTC", "2097-01-01T00:00:00Z"), "2104-02-29T00:00:00+00:00");
    assert_eq!(next("Mon *-02-29", "UTC", "2024-03-01T00:00:00Z"), "2044-02-29T00:00:00+00:00");
}

#[test]
fn sparse_schedules_are_found_quickly() {
    let s = Schedule::parse("Mon *-02-29 12:00", TimeZone::UTC).unwrap();
    let yearly = Schedule::parse("yearly", TimeZone::UTC).unwrap();
    let started = std::time::Instant::now();
    let mut t = at("1970-01-01T00:00:00Z");
    let mut seen = 0;
    while let Some(n) = s.next_after(t) {
        assert!(n > t);
        t = n;
        seen += 1;
        if seen == 200 {
            break;
        }
    }
    assert_eq!(seen, 200);
    let mut y = at("2000-01-01T00:00:00Z");
    for _ in 0..1000 {
        y = yearly.next_after(y).unwrap();
    }
    assert_eq!(show(y, &TimeZone::UTC), "3000-01-01T00:00:00+00:00");
    // Second by second this would take hours.
    assert!(started.elapsed() < std::time::Duration::from_secs(20), "{:?}", started.elapsed());
}

#[test]
fn the_search_is_bounded() {
    let far = Schedule::parse("2500-01-01", TimeZone::UTC).unwrap();
    assert_eq!(far.next_after(at("2024-01-01T00:00:00Z")), None);
    assert_eq!(show(far.next_after(at("2200-01-01T00:00:00Z")).unwrap(), &TimeZone::UTC), "2500-01-01T00:00:00+00:00");
    let past = Schedule::parse("2020-01-01 12:00", TimeZone::UTC).unwrap();
    assert_eq!(past.next_after(at("2024-01-01T00:00:00Z")), None);
}

#[test]
fn cron_lines() {
    let after = "2024-05-15T10:20:30Z"; // a Wednesday
    assert_eq!(next("30 4 * * *", "UTC", after), "2024-05-16T04:30:00+00:00");
    assert_eq!(times("*/15 * * * *", "UTC", after, 2), ["2024-05-15T10:30:00+00:00", "2024-05-15T10:45:00+00:00"]);
    assert_eq!(
        times("0 9 * * mon-fri", "UTC", "2024-05-17T10:00:00Z", 2),
        ["2024-05-20T09:00:00+00:00", "2024-05-21T09:00:00+00:00"]
    );
    assert_eq!(next("0 0 1 jan *", "UTC", after), "2025-01-01T00:00:00+00:00");
    assert_eq!(next("0 0 1 JAN-MAR/2 *", "UTC", after), "2025-01-01T00:00:00+00:00");
    assert_eq!(next("5,10 1-3 * * *", "UTC", after), "2024-05-16T01:05:00+00:00");
    assert_eq!(next("0 12 */10 * *", "UTC", after), "2024-05-21T12:00:00+00:00");
    assert_eq!(next("0 0 * * 7", "UTC", after), "2024-05-19T00:00:00+00:00");
    assert_eq!(next("0 0 * * 0", "UTC", after), "2024-05-19T00:00:00+00:00");
    assert_eq!(next("0 0 * * sat-sun", "UTC", after), "2024-05-18T00:00:00+00:00");
    assert_eq!(next("@hourly", "UTC", after), "2024-05-15T11:00:00+00:00");
    assert_eq!(next("@daily", "UTC", after), "2024-05-16T00:00:00+00:00");
    assert_eq!(next("@weekly", "UTC", after), "2024-05-19T00:00:00+00:00");
    assert_eq!(next("@monthly", "UTC", after), "2024-06-01T00:00:00+00:00");
    assert_eq!(next("@yearly", "UTC", after), "2025-01-01T00:00:00+00:00");
    assert_eq!(next("@annually", "UTC", after), "2025-01-01T00:00:00+00:00");
    assert_eq!(Schedule::parse("@daily", TimeZone::UTC).unwrap().syntax(), Syntax::Cron);
    assert_eq!(Schedule::parse("daily", TimeZone::UTC).unwrap().syntax(), Syntax::Systemd);
}

#[test]
fn cron_with_both_day_fields_matches_either() {
    // The 13th or any Friday: 2024-05-17 is a Friday, then 2024-05-24, then 2024-05-31,
    // then 2024-06-07, and 2024-06-13 (a Thursday) by its date.
    assert_eq!(
        times("0 12 13 * fri", "UTC", "2024-05-14T00:00:00Z", 5),
        [
            "2024-05-17T12:00:00+00:00",
            "2024-05-24T12:00:00+00:00",
            "2024-05-31T12:00:00+00:00",
            "2024-06-07T12:00:00+00:00",
            "2024-06-13T12:00:00+00:00",
        ]
    );
    // A day field starting with `*` does not restrict: then both must match (odd days
    // that are Mondays).
    assert_eq!(next("0 0 */2 * 1", "UTC", "2024-05-15T00:00:00Z"), "2024-05-27T00:00:00+00:00");
    // Only one restricted: the other is every day.
    assert_eq!(next("0 0 13 * *", "UTC", "2024-05-14T00:00:00Z"), "2024-06-13T00:00:00+00:00");
}

#[test]
fn zone_names() {
    // Read in Paris whatever the default zone.
    assert_eq!(next("daily Europe/Paris", "UTC", "2024-05-15T10:00:00Z"), "2024-05-16T00:00:00+02:00");
    assert_eq!(next("0 3 * * * America/New_York", "UTC", "2024-05-15T10:00:00Z"), "2024-05-16T03:00:00-04:00");
    assert_eq!(next("*-*-* 06:00 UTC", "Europe/Paris", "2024-05-15T10:00:00Z"), "2024-05-16T06:00:00+00:00");
    // The default zone otherwise.
    assert_eq!(next("*-*-* 06:00", "Europe/Paris", "2024-05-15T10:00:00Z"), "2024-05-16T06:00:00+02:00");
}

#[test]
fn paris_spring_forward() {
    // 2024-03-31: 02:00 +01:00 becomes 03:00 +02:00; 02:30 does not exist and runs at
    // the first instant after the gap.
    assert_eq!(
        times("*-*-* 02:30", "Europe/Paris", "2024-03-30T12:00:00+01:00", 3),
        ["2024-03-31T03:00:00+02:00", "2024-04-01T02:30:00+02:00", "2024-04-02T02:30:00+02:00"]
    );
    // Hourly: 02:00 and 03:00 are the same instant and run once.
    assert_eq!(
        times("hourly", "Europe/Paris", "2024-03-31T00:30:00+01:00", 3),
        ["2024-03-31T01:00:00+01:00", "2024-03-31T03:00:00+02:00", "2024-03-31T04:00:00+02:00"]
    );
    assert_eq!(
        times("*:*:0/20", "Europe/Paris", "2024-03-31T01:59:30+01:00", 3),
        ["2024-03-31T01:59:40+01:00", "2024-03-31T03:00:00+02:00", "2024-03-31T03:00:20+02:00"]
    );
}

#[test]
fn paris_fall_back() {
    // 2024-10-27: 03:00 +02:00 becomes 02:00 +01:00; 02:00..03:00 happens twice and
    // its times run at their first occurrence only.
    assert_eq!(
        times("*-*-* 02:30", "Europe/Paris", "2024-10-26T12:00:00+02:00", 2),
        ["2024-10-27T02:30:00+02:00", "2024-10-28T02:30:00+01:00"]
    );
    assert_eq!(
        times("hourly", "Europe/Paris", "2024-10-27T00:30:00+02:00", 4),
        [
            "2024-10-27T01:00:00+02:00",
            "2024-10-27T02:00:00+02:00",
            "2024-10-27T03:00:00+01:00",
            "2024-10-27T04:00:00+01:00"
        ]
    );
    // From inside the second pass: the repeated quarter hours have run.
    assert_eq!(next("*:0/15", "Europe/Paris", "2024-10-27T02:10:00+01:00"), "2024-10-27T03:00:00+01:00");
    // From inside the first pass they have not.
    assert_eq!(next("*:0/15", "Europe/Paris", "2024-10-27T02:10:00+02:00"), "2024-10-27T02:15:00+02:00");
    assert_eq!(
        times("*:*:0/30", "Europe/Paris", "2024-10-27T02:59:00+02:00", 3),
        ["2024-10-27T02:59:30+02:00", "2024-10-27T03:00:00+01:00", "2024-10-27T03:00:30+01:00"]
    );
}

#[test]
fn new_york_both_ways() {
    // 2024-03-10: 02:00 -05:00 becomes 03:00 -04:00.
    assert_eq!(
        times("*-*-* 02:15", "America/New_York", "2024-03-09T12:00:00-05:00", 2),
        ["2024-03-10T03:00:00-04:00", "2024-03-11T02:15:00-04:00"]
    );
    // 2024-11-03: 02:00 -04:00 becomes 01:00 -05:00.
    assert_eq!(
        times("30 1 * * *", "America/New_York", "2024-11-02T12:00:00-04:00", 2),
        ["2024-11-03T01:30:00-04:00", "2024-11-04T01:30:00-05:00"]
    );
    assert_eq!(next("30 1 * * *", "America/New_York", "2024-11-03T01:10:00-05:00"), "2024-11-04T01:30:00-05:00");
}

#[test]
fn systemd_forms() {
    let form = |expr: &str, tz: TimeZone| Schedule::parse(expr, tz).unwrap().systemd_form();
    assert_eq!(form("daily", TimeZone::UTC).as_deref(), Some("*-*-* 00:00:00 UTC"));
    assert_eq!(form("Mon..Fri 04:30", TimeZone::UTC).as_deref(), Some("Mon,Tue,Wed,Thu,Fri *-*-* 04:30:00 UTC"));
    assert_eq!(
        form("30 4 * * 1-5", zone("Europe/Paris")).as_deref(),
        Some("Mon,Tue,Wed,Thu,Fri *-*-* 04:30:00 Europe/Paris")
    );
    assert_eq!(form("weekly America/New_York", TimeZone::UTC).as_deref(), Some("Mon *-*-* 00:00:00 America/New_York"));
    assert_eq!(form("*:*:0/20", TimeZone::fixed(jiff::tz::offset(2))).as_deref(), Some("*-*-* *:*:00,20,40"));
    assert_eq!(form("2024/2-*-01 12:00", TimeZone::UTC).as_deref(), Some("2024/2-*-01 12:00:00 UTC"));
    assert_eq!(form("2024..2026-01-01", TimeZone::UTC).as_deref(), Some("2024,2025,2026-01-01 00:00:00 UTC"));
    // Cron's either-day rule has no single systemd expression, nor do years past 2199.
    assert_eq!(form("0 12 13 * fri", TimeZone::UTC), None);
    assert_eq!(form("2300-01-01", TimeZone::UTC), None);
    // The form is read back as the same schedule.
    for expr in ["Mon..Fri 04:30", "0 */6 1,15 * *", "quarterly", "*-*-1/10 08..18/4:07", "Sat *-02-29 12:00"] {
        let a = Schedule::parse(expr, zone("Europe/Paris")).unwrap();
        let b = Schedule::parse(&a.systemd_form().unwrap(), TimeZone::UTC).unwrap();
        let mut t = at("2024-01-01T00:00:00Z");
        for _ in 0..50 {
            let n = a.next_after(t).unwrap();
            assert_eq!(Some(n), b.next_after(t), "{expr}");
            t = n;
        }
    }
}

#[test]
fn refusals_say_why() {
    let e = refused("dialy");
    assert!(e.starts_with("\"dialy\" is not a schedule: unknown word \"dialy\""), "{e}");
    assert!(e.contains("daily"), "{e}");
    for never in ["*-02-30", "*-04-31", "2023-02-29", "Mon 2024-01-02", "Feb 30"] {
        let e = refused(never);
        assert!(e.contains("matches no time at all") || e.contains("not a"), "{never}: {e}");
    }
    assert!(refused("*-02-30").contains("matches no time at all"));
    assert!(refused("Mon 2024-01-02").contains("matches no time at all"));
    assert!(refused("").contains("it is empty"));
    let e = refused("25:00");
    assert!(e.contains("hour \"25\": 25 is out of range: give 0 to 23"), "{e}");
    let e = refused("*-13-01");
    assert!(e.contains("month \"13\""), "{e}");
    let e = refused("*:*:0/0");
    assert!(e.contains("the step \"0\""), "{e}");
    let e = refused("*-*-* 10..05:00");
    assert!(e.contains("ends before it starts"), "{e}");
    let e = refused("Fri..Mon");
    assert!(e.contains("ends before it starts"), "{e}");
    let e = refused("Mon,Funday 10:00");
    assert!(e.contains("\"Funday\" is not a weekday"), "{e}");
    let e = refused("0 4 * *");
    assert!(e.contains("cron line five"), "{e}");
    let e = refused("0 4 * * * Mars/Olympus");
    assert!(e.contains("\"Mars/Olympus\" is not a time zone"), "{e}");
    let e = refused("@sometimes");
    assert!(e.contains("unknown cron shorthand") && e.contains("@daily"), "{e}");
    let e = refused("61 * * * *");
    assert!(e.contains("minute \"61\""), "{e}");
    let e = refused("0 0 * * funday");
    assert!(e.contains("day of week") && e.contains("sun"), "{e}");
    let e = refused("0 0 31 2 *");
    assert!(e.contains("matches no time at all"), "{e}");
    let e = refused("*-*-* 10:00:00.5");
    assert!(e.contains("fractions of a second"), "{e}");
    let e = refused("10:00 *-*-*");
    assert!(e.contains("before the time"), "{e}");
    let e = refused("1969-01-01");
    assert!(e.contains("year \"1969\""), "{e}");
}

#[test]
fn as_written() {
    let s = Schedule::parse("  Mon..Fri 04:30  Europe/Paris", TimeZone::UTC).unwrap();
    assert_eq!(s.as_str(), "  Mon..Fri 04:30  Europe/Paris");
    assert_eq!(s.zone().iana_name(), Some("Europe/Paris"));
}
