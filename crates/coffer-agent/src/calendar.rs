//! Schedules: systemd calendar expressions and cron lines (docs/design.md#schedules).
//!
//! A [`Schedule`] is a set of civil times (each field a set of allowed values) read
//! in a time zone. [`Schedule::next_after`] finds the next matching civil time field
//! by field (a year that does not match is skipped whole, then a month, a day, an
//! hour, a minute), and maps it to an instant with the daylight saving rules of the
//! design: a civil time in a gap runs at the first instant after the gap, one that
//! occurs twice runs at its first occurrence only.

use jiff::Timestamp;
use jiff::civil::{Date, DateTime};
use jiff::tz::{AmbiguousOffset, TimeZone};

/// How many years past an instant [`Schedule::next_after`] looks before it decides
/// that the schedule matches no more times. The Gregorian calendar repeats every
/// 400 years, so a schedule without years that matches at all matches within them.
const SEARCH_YEARS: i32 = 400;
/// The first and last years a schedule may name.
const MIN_YEAR: i32 = 1970;
const MAX_YEAR: i32 = 9999;
/// The last year systemd's calendar expressions accept.
const SYSTEMD_MAX_YEAR: i32 = 2199;

const HINT: &str = "write a systemd calendar expression (daily, Mon..Fri 04:00, *-*-* *:00/15:00) or a cron line of \
                    five fields (30 4 * * *)";

const SHORTHANDS: [(&str, &str); 9] = [
    ("minutely", "*-*-* *:*:00"),
    ("hourly", "*-*-* *:00:00"),
    ("daily", "*-*-* 00:00:00"),
    ("weekly", "Mon *-*-* 00:00:00"),
    ("monthly", "*-*-01 00:00:00"),
    ("quarterly", "*-01,04,07,10-01 00:00:00"),
    ("semiannually", "*-01,07-01 00:00:00"),
    ("yearly", "*-01-01 00:00:00"),
    ("annually", "*-01-01 00:00:00"),
];

const CRON_MACROS: [(&str, &str); 7] = [
    ("@hourly", "0 * * * *"),
    ("@daily", "0 0 * * *"),
    ("@midnight", "0 0 * * *"),
    ("@weekly", "0 0 * * 0"),
    ("@monthly", "0 0 1 * *"),
    ("@yearly", "0 0 1 1 *"),
    ("@annually", "0 0 1 1 *"),
];

/// Weekday names, Monday first (index = Monday-based offset).
const WEEKDAYS: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];
const WEEKDAYS_LONG: [&str; 7] = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"];
const SYSTEMD_WEEKDAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
/// Cron's weekday names, Sunday first (index = cron's number).
const CRON_WEEKDAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];
const CRON_MONTHS: [&str; 12] = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"];

/// A schedule that does not parse, or that matches no time at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not a schedule: {reason}")]
pub struct ScheduleError {
    text: String,
    reason: String,
}

impl ScheduleError {
    /// The expression as written.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Why it was refused, and what to write instead.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

/// The syntax a schedule was written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Syntax {
    Systemd,
    Cron,
}

/// A parsed schedule.
#[derive(Debug, Clone)]
pub struct Schedule {
    text: String,
    zone: TimeZone,
    /// The zone's name when the expression ends with one.
    zone_name: Option<String>,
    syntax: Syntax,
    spec: Spec,
}

impl Schedule {
    /// Parses a systemd calendar expression or a cron line, optionally ending with
    /// a time zone name of the tz database (`… UTC`, `… Europe/Paris`); `zone` is
    /// the zone when it names none. A schedule that can never match (`*-02-30`) is
    /// refused.
    pub fn parse(text: &str, zone: TimeZone) -> Result<Schedule, ScheduleError> {
        let fail = |reason: String| ScheduleError { text: text.to_string(), reason };
        let mut words: Vec<&str> = text.split_whitespace().collect();
        if words.is_empty() {
            return Err(fail(format!("it is empty: {HINT}")));
        }
        let mut zone = zone;
        let mut zone_name = None;
        if words.len() >= 2 {
            let last = words[words.len() - 1];
            if let Ok(tz) = jiff::tz::db().get(last) {
                zone = tz;
                zone_name = Some(last.to_string());
                words.pop();
            }
        }
        let parsed = if words[0].starts_with('@') || words.len() == 5 {
            parse_cron(&words).map(|spec| (Syntax::Cron, spec))
        } else {
            parse_systemd(&words).map(|spec| (Syntax::Systemd, spec))
        };
        let (syntax, spec) = match parsed {
            Ok(p) => p,
            Err(reason) => {
                let last = words[words.len() - 1];
                if zone_name.is_none() && words.len() >= 2 && looks_like_zone(last) {
                    return Err(fail(format!(
                        "{last:?} is not a time zone of the tz database: give one such as UTC or Europe/Paris"
                    )));
                }
                return Err(fail(reason));
            }
        };
        if !spec.matches_ever() {
            return Err(fail(
                "it matches no time at all: check the days against the months (February has at most 29 days; \
                 April, June, September and November 30), the years, and the weekdays against the dates"
                    .to_string(),
            ));
        }
        Ok(Schedule { text: text.to_string(), zone, zone_name, syntax, spec })
    }

    /// The expression as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The zone the schedule is read in.
    pub fn zone(&self) -> &TimeZone {
        &self.zone
    }

    /// The syntax it was written in.
    pub fn syntax(&self) -> Syntax {
        self.syntax
    }

    /// The first instant strictly after `t` that the schedule matches, or None when
    /// it matches none within 400 years.
    pub fn next_after(&self, t: Timestamp) -> Option<Timestamp> {
        let dt = self.zone.to_datetime(t);
        let limit = (i32::from(dt.year()) + SEARCH_YEARS).min(MAX_YEAR);
        let mut start = Civil::of(dt).plus_second();
        // Each round after the first passes the second occurrence of a repeated hour,
        // whose times ran at their first occurrence; a few rounds at most.
        loop {
            let c = self.spec.next_civil(start, limit)?;
            let (at, fold_end) = self.instant(c.to_datetime()?)?;
            if at > t {
                return Some(at);
            }
            start = match fold_end.map(Civil::of) {
                Some(end) if end > c => end,
                _ => c.plus_second(),
            };
        }
    }

    /// The instant a matching civil time runs at, and when it falls in a repeated
    /// hour, the civil time that hour ends at.
    fn instant(&self, dt: DateTime) -> Option<(Timestamp, Option<DateTime>)> {
        match self.zone.to_ambiguous_timestamp(dt).offset() {
            AmbiguousOffset::Unambiguous { offset } => Some((offset.to_timestamp(dt).ok()?, None)),
            AmbiguousOffset::Gap { after, .. } => {
                // `dt` does not exist: the first instant after the gap is the transition
                // that follows `dt` read with the later offset.
                let probe = after.to_timestamp(dt).ok()?;
                Some((self.zone.following(probe).next()?.timestamp(), None))
            }
            AmbiguousOffset::Fold { before, .. } => {
                let first = before.to_timestamp(dt).ok()?;
                let transition = self.zone.following(first).next()?.timestamp();
                Some((first, Some(before.to_datetime(transition))))
            }
        }
    }

    /// The schedule as an `OnCalendar=` value systemd reads, or None when systemd
    /// cannot express it (a cron line restricting both day fields, years past 2199).
    pub fn systemd_form(&self) -> Option<String> {
        let s = &self.spec;
        if s.either_day {
            return None;
        }
        let mut out = String::new();
        if s.weekdays != ALL_WEEKDAYS {
            let names: Vec<&str> = (0..7).filter(|i| s.weekdays & (1 << i) != 0).map(|i| SYSTEMD_WEEKDAYS[i]).collect();
            out.push_str(&names.join(","));
            out.push(' ');
        }
        out.push_str(&s.years.systemd_form()?);
        for (bits, first, last, sep) in [
            (u64::from(s.months), 1, 12, '-'),
            (u64::from(s.days), 1, 31, '-'),
            (u64::from(s.hours), 0, 23, ' '),
            (s.minutes, 0, 59, ':'),
            (s.seconds, 0, 59, ':'),
        ] {
            out.push(sep);
            out.push_str(&list_form(bits, first, last));
        }
        let zone = self.zone_name.as_deref().or_else(|| self.zone.iana_name());
        if let Some(name) = zone {
            out.push(' ');
            out.push_str(name);
        }
        Some(out)
    }
}

/// A field's values as systemd lists them: `*` for all, else `01,04,07`.
fn list_form(bits: u64, first: u32, last: u32) -> String {
    if (first..=last).all(|v| bits & (1 << v) != 0) {
        return "*".to_string();
    }
    let values: Vec<String> = (first..=last).filter(|v| bits & (1 << v) != 0).map(|v| format!("{v:02}")).collect();
    values.join(",")
}

fn looks_like_zone(word: &str) -> bool {
    word.starts_with(|c: char| c.is_ascii_uppercase())
        && word.contains('/')
        && word.chars().all(|c| c.is_ascii_alphanumeric() || "/_-+".contains(c))
}

const ALL_WEEKDAYS: u8 = 0x7f;

/// The civil times a schedule matches, each field a set of values (bit v for value v).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Spec {
    years: Years,
    months: u16,
    days: u32,
    /// Bit i: Monday + i days.
    weekdays: u8,
    hours: u32,
    minutes: u64,
    seconds: u64,
    /// Cron with both day fields restricted: a day matching either is a match
    /// (else a day must match both).
    either_day: bool,
}

impl Spec {
    fn day_matches(&self, y: i32, m: i32, d: i32) -> bool {
        let in_days = self.days & (1 << d) != 0;
        let Some(weekday) = weekday(y, m, d) else { return false };
        let in_weekdays = self.weekdays & (1 << weekday) != 0;
        if self.either_day { in_days || in_weekdays } else { in_days && in_weekdays }
    }

    /// Whether any civil time matches: searched from the first year allowed.
    fn matches_ever(&self) -> bool {
        let first = self.years.next_ge(MIN_YEAR).unwrap_or(MAX_YEAR + 1);
        if first > MAX_YEAR {
            return false;
        }
        let start = Civil { y: first, mo: 1, d: 1, h: 0, mi: 0, s: 0 };
        self.next_civil(start, (first + SEARCH_YEARS).min(MAX_YEAR)).is_some()
    }

    /// The first matching civil time at or after `c`, in a year up to `limit`.
    fn next_civil(&self, mut c: Civil, limit: i32) -> Option<Civil> {
        loop {
            if c.y > limit {
                return None;
            }
            let y = self.years.next_ge(c.y)?;
            if y != c.y {
                c = Civil::year_start(y);
                continue;
            }
            match next_bit(u64::from(self.months), c.mo, 12) {
                None => {
                    c = Civil::year_start(c.y + 1);
                    continue;
                }
                Some(m) if m != c.mo => c = Civil { mo: m, d: 1, h: 0, mi: 0, s: 0, ..c },
                Some(_) => {}
            }
            match (c.d..=days_in_month(c.y, c.mo)).find(|&d| self.day_matches(c.y, c.mo, d)) {
                None => {
                    c = c.next_month();
                    continue;
                }
                Some(d) if d != c.d => c = Civil { d, h: 0, mi: 0, s: 0, ..c },
                Some(_) => {}
            }
            match next_bit(u64::from(self.hours), c.h, 23) {
                None => {
                    c = c.next_day();
                    continue;
                }
                Some(h) if h != c.h => c = Civil { h, mi: 0, s: 0, ..c },
                Some(_) => {}
            }
            match next_bit(self.minutes, c.mi, 59) {
                None => {
                    c = c.next_hour();
                    continue;
                }
                Some(mi) if mi != c.mi => c = Civil { mi, s: 0, ..c },
                Some(_) => {}
            }
            match next_bit(self.seconds, c.s, 59) {
                None => c = c.next_minute(),
                Some(s) => return Some(Civil { s, ..c }),
            }
        }
    }
}

/// The smallest value v >= from, v <= last, whose bit is set.
fn next_bit(bits: u64, from: i32, last: i32) -> Option<i32> {
    if !(0..64).contains(&from) {
        return None;
    }
    let rest = bits & (u64::MAX << from);
    let v = rest.trailing_zeros() as i32;
    (rest != 0 && v <= last).then_some(v)
}

fn is_leap(y: i32) -> bool {
    y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)
}

fn days_in_month(y: i32, m: i32) -> i32 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// The weekday of a date, 0 for Monday.
fn weekday(y: i32, m: i32, d: i32) -> Option<i32> {
    let date = Date::new(i16::try_from(y).ok()?, m as i8, d as i8).ok()?;
    Some(i32::from(date.weekday().to_monday_zero_offset()))
}

/// A civil time to the second, ordered as time goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Civil {
    y: i32,
    mo: i32,
    d: i32,
    h: i32,
    mi: i32,
    s: i32,
}

impl Civil {
    fn of(dt: DateTime) -> Civil {
        Civil {
            y: i32::from(dt.year()),
            mo: i32::from(dt.month()),
            d: i32::from(dt.day()),
            h: i32::from(dt.hour()),
            mi: i32::from(dt.minute()),
            s: i32::from(dt.second()),
        }
    }

    fn to_datetime(self) -> Option<DateTime> {
        DateTime::new(
            i16::try_from(self.y).ok()?,
            self.mo as i8,
            self.d as i8,
            self.h as i8,
            self.mi as i8,
            self.s as i8,
            0,
        )
        .ok()
    }

    fn year_start(y: i32) -> Civil {
        Civil { y, mo: 1, d: 1, h: 0, mi: 0, s: 0 }
    }

    fn next_month(self) -> Civil {
        if self.mo >= 12 {
            Civil::year_start(self.y + 1)
        } else {
            Civil { mo: self.mo + 1, d: 1, h: 0, mi: 0, s: 0, ..self }
        }
    }

    fn next_day(self) -> Civil {
        if self.d >= days_in_month(self.y, self.mo) {
            self.next_month()
        } else {
            Civil { d: self.d + 1, h: 0, mi: 0, s: 0, ..self }
        }
    }

    fn next_hour(self) -> Civil {
        if self.h >= 23 { self.next_day() } else { Civil { h: self.h + 1, mi: 0, s: 0, ..self } }
    }

    fn next_minute(self) -> Civil {
        if self.mi >= 59 { self.next_hour() } else { Civil { mi: self.mi + 1, s: 0, ..self } }
    }

    fn plus_second(self) -> Civil {
        if self.s >= 59 { self.next_minute() } else { Civil { s: self.s + 1, ..self } }
    }
}

/// The years a schedule allows.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Years {
    Any,
    /// Values `first, first + step, …` up to `last`, for each rule.
    Rules(Vec<YearRule>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct YearRule {
    first: i32,
    last: i32,
    step: i32,
    /// Written `A/S` (no end).
    open: bool,
}

impl Years {
    fn next_ge(&self, y: i32) -> Option<i32> {
        let rules = match self {
            Years::Any => return (y <= MAX_YEAR).then_some(y),
            Years::Rules(r) => r,
        };
        rules
            .iter()
            .filter_map(|r| {
                if y <= r.first {
                    return Some(r.first);
                }
                let v = r.first + (y - r.first + r.step - 1) / r.step * r.step;
                (v <= r.last).then_some(v)
            })
            .min()
    }

    fn systemd_form(&self) -> Option<String> {
        let rules = match self {
            Years::Any => return Some("*".to_string()),
            Years::Rules(r) => r,
        };
        let mut parts = Vec::new();
        for r in rules {
            if r.first > SYSTEMD_MAX_YEAR {
                return None;
            }
            if r.open {
                parts.push(format!("{}/{}", r.first, r.step));
                continue;
            }
            if r.last > SYSTEMD_MAX_YEAR {
                return None;
            }
            parts.extend((r.first..=r.last).step_by(r.step as usize).map(|y| y.to_string()));
        }
        Some(parts.join(","))
    }
}

/// One field of an expression: its name (for messages), its values' bounds, the
/// names its values may have (`names[i]` is value `first_name + i`), and how a
/// range is written.
struct Field {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
    first_name: u32,
    range: &'static str,
    /// Cron's day of week: 0 and 7 are both Sunday.
    sunday_is_seven: bool,
}

impl Field {
    fn value(&self, item: &str, v: &str) -> Result<u32, String> {
        let lower = v.to_ascii_lowercase();
        if let Some(i) = self.names.iter().position(|n| *n == lower) {
            return Ok(self.first_name + i as u32);
        }
        let n: u32 = v.parse().map_err(|_| {
            let names =
                if self.names.is_empty() { String::new() } else { format!(" or a name ({})", self.names.join(", ")) };
            format!("{} {item:?}: {v:?} is not a number{names}", self.name)
        })?;
        if !(self.min..=self.max).contains(&n) {
            return Err(format!("{} {item:?}: {n} is out of range: give {} to {}", self.name, self.min, self.max));
        }
        Ok(n)
    }

    /// Parses a comma-separated list of `*`, `V`, `A<range>B`, each optionally with
    /// a step `/S` (`V/S` runs from V to the field's end).
    fn parse(&self, text: &str) -> Result<u64, String> {
        let mut bits = 0u64;
        for item in text.split(',') {
            if item.is_empty() {
                return Err(format!("{} {text:?}: an empty value in the list", self.name));
            }
            let (body, step) = match item.split_once('/') {
                Some((body, step)) => {
                    let s: u32 = step.parse().ok().filter(|s| (1..=self.max.max(1)).contains(s)).ok_or_else(|| {
                        format!(
                            "{} {item:?}: the step {step:?} is not a number from 1 to {}",
                            self.name,
                            self.max.max(1)
                        )
                    })?;
                    (body, Some(s))
                }
                None => (item, None),
            };
            let (lo, hi) = if body == "*" {
                (self.min, self.max)
            } else if let Some((a, b)) = body.split_once(self.range) {
                let (lo, hi) = (self.value(item, a)?, self.value(item, b)?);
                // Cron's Sunday is 0 and 7: `sat-sun` ends on the 7.
                if self.sunday_is_seven && hi == 0 && lo > 0 { (lo, 7) } else { (lo, hi) }
            } else {
                let v = self.value(item, body)?;
                (v, if step.is_some() { self.max } else { v })
            };
            if lo > hi {
                return Err(format!("{} {item:?}: the range ends before it starts", self.name));
            }
            for v in (lo..=hi).step_by(step.unwrap_or(1) as usize) {
                bits |= 1 << v;
            }
        }
        Ok(bits)
    }
}

fn parse_systemd(words: &[&str]) -> Result<Spec, String> {
    if words.len() == 1 {
        let lower = words[0].to_ascii_lowercase();
        if let Some((_, expanded)) = SHORTHANDS.iter().find(|(name, _)| *name == lower) {
            let expanded: Vec<&str> = expanded.split_whitespace().collect();
            return parse_systemd(&expanded);
        }
    }
    if words.len() > 3 {
        return Err(format!(
            "{} parts: a systemd expression has at most three ([WEEKDAYS] [DATE] [TIME]), a cron line five (minute \
             hour day-of-month month day-of-week)",
            words.len()
        ));
    }
    let mut rest = words;
    let mut weekdays = ALL_WEEKDAYS;
    if rest[0].starts_with(|c: char| c.is_ascii_alphabetic()) {
        weekdays = parse_weekdays(rest[0]).map_err(|e| {
            if words.len() == 1 && rest[0].chars().all(|c| c.is_ascii_alphabetic()) {
                let names: Vec<&str> = SHORTHANDS.iter().map(|(n, _)| *n).collect();
                format!("unknown word {:?}: the shorthands are {}; {HINT}", rest[0], names.join(", "))
            } else {
                e
            }
        })?;
        rest = &rest[1..];
    }
    let (mut date, mut time) = (None, None);
    for w in rest {
        if w.contains(':') {
            if time.is_some() {
                return Err(format!("two times ({w:?} is the second): give one HH:MM[:SS]"));
            }
            time = Some(*w);
        } else if w.contains('-') {
            if date.is_some() || time.is_some() {
                return Err(format!("{w:?}: the date comes once, before the time"));
            }
            date = Some(*w);
        } else {
            return Err(format!("{w:?} is neither a date (YYYY-MM-DD) nor a time (HH:MM[:SS]); {HINT}"));
        }
    }
    let (years, months, days) = parse_date(date.unwrap_or("*-*-*"))?;
    let (hours, minutes, seconds) = parse_time(time.unwrap_or("00:00:00"))?;
    Ok(Spec {
        years,
        months: months as u16,
        days: days as u32,
        weekdays,
        hours: hours as u32,
        minutes,
        seconds,
        either_day: false,
    })
}

fn parse_weekdays(text: &str) -> Result<u8, String> {
    let day = |item: &str, w: &str| -> Result<u32, String> {
        let lower = w.to_ascii_lowercase();
        WEEKDAYS
            .iter()
            .chain(WEEKDAYS_LONG.iter())
            .position(|n| *n == lower)
            .map(|i| (i % 7) as u32)
            .ok_or_else(|| format!("weekday {item:?}: {w:?} is not a weekday (Mon, Tue, Wed, Thu, Fri, Sat, Sun)"))
    };
    let mut bits = 0u8;
    for item in text.split(',') {
        let range = item.split_once("..").or_else(|| item.split_once('-'));
        let (a, b) = match range {
            Some((a, b)) => (day(item, a)?, day(item, b)?),
            None => {
                let d = day(item, item)?;
                (d, d)
            }
        };
        if a > b {
            return Err(format!("weekday {item:?}: the range ends before it starts (weeks run Mon..Sun)"));
        }
        for d in a..=b {
            bits |= 1 << d;
        }
    }
    Ok(bits)
}

fn parse_date(text: &str) -> Result<(Years, u64, u64), String> {
    if text.contains('~') {
        return Err(format!("date {text:?}: days counted from the month's end (~) are not supported"));
    }
    let parts: Vec<&str> = text.split('-').collect();
    let (year, month, day) = match parts[..] {
        [y, m, d] => (Some(y), m, d),
        [m, d] => (None, m, d),
        _ => return Err(format!("date {text:?}: give YYYY-MM-DD (each field a value, *, a list, A..B or A/S)")),
    };
    let years = match year {
        None | Some("*") => Years::Any,
        Some(y) => parse_years(y)?,
    };
    let months =
        Field { name: "month", min: 1, max: 12, names: &[], first_name: 0, range: "..", sunday_is_seven: false }
            .parse(month)?;
    let days = Field { name: "day", min: 1, max: 31, names: &[], first_name: 0, range: "..", sunday_is_seven: false }
        .parse(day)?;
    Ok((years, months, days))
}

fn parse_years(text: &str) -> Result<Years, String> {
    let value = |item: &str, v: &str| -> Result<i32, String> {
        v.parse::<i32>()
            .ok()
            .filter(|y| (MIN_YEAR..=MAX_YEAR).contains(y))
            .ok_or_else(|| format!("year {item:?}: {v:?} is not a year from {MIN_YEAR} to {MAX_YEAR}"))
    };
    let mut rules = Vec::new();
    for item in text.split(',') {
        let (body, step) = match item.split_once('/') {
            Some((body, step)) => {
                let s = step
                    .parse::<i32>()
                    .ok()
                    .filter(|s| *s >= 1)
                    .ok_or_else(|| format!("year {item:?}: the step {step:?} is not a number of at least 1"))?;
                (body, Some(s))
            }
            None => (item, None),
        };
        let rule = if body == "*" {
            YearRule { first: MIN_YEAR, last: MAX_YEAR, step: step.unwrap_or(1), open: true }
        } else if let Some((a, b)) = body.split_once("..") {
            YearRule { first: value(item, a)?, last: value(item, b)?, step: step.unwrap_or(1), open: false }
        } else {
            let v = value(item, body)?;
            match step {
                Some(s) => YearRule { first: v, last: MAX_YEAR, step: s, open: true },
                None => YearRule { first: v, last: v, step: 1, open: false },
            }
        };
        if rule.first > rule.last {
            return Err(format!("year {item:?}: the range ends before it starts"));
        }
        rules.push(rule);
    }
    Ok(Years::Rules(rules))
}

fn parse_time(text: &str) -> Result<(u64, u64, u64), String> {
    if text.replace("..", "").contains('.') {
        return Err(format!("time {text:?}: fractions of a second are not supported"));
    }
    let parts: Vec<&str> = text.split(':').collect();
    let (h, m, s) = match parts[..] {
        [h, m] => (h, m, "00"),
        [h, m, s] => (h, m, s),
        _ => return Err(format!("time {text:?}: give HH:MM or HH:MM:SS (each field a value, *, a list, A..B or A/S)")),
    };
    let field = |name, max| Field { name, min: 0, max, names: &[], first_name: 0, range: "..", sunday_is_seven: false };
    Ok((field("hour", 23).parse(h)?, field("minute", 59).parse(m)?, field("second", 59).parse(s)?))
}

fn parse_cron(words: &[&str]) -> Result<Spec, String> {
    if words.len() == 1 && words[0].starts_with('@') {
        let lower = words[0].to_ascii_lowercase();
        return match CRON_MACROS.iter().find(|(name, _)| *name == lower) {
            Some((_, expanded)) => parse_cron(&expanded.split_whitespace().collect::<Vec<_>>()),
            None => {
                let names: Vec<&str> = CRON_MACROS.iter().map(|(n, _)| *n).collect();
                Err(format!("unknown cron shorthand {:?}: use {}", words[0], names.join(", ")))
            }
        };
    }
    let [minute, hour, dom, month, dow] = words else {
        return Err(format!(
            "a cron line has five fields (minute hour day-of-month month day-of-week), not {}",
            words.len()
        ));
    };
    let minutes =
        Field { name: "minute", min: 0, max: 59, names: &[], first_name: 0, range: "-", sunday_is_seven: false }
            .parse(minute)?;
    let hours = Field { name: "hour", min: 0, max: 23, names: &[], first_name: 0, range: "-", sunday_is_seven: false }
        .parse(hour)?;
    let days =
        Field { name: "day of month", min: 1, max: 31, names: &[], first_name: 0, range: "-", sunday_is_seven: false }
            .parse(dom)?;
    let months = Field {
        name: "month",
        min: 1,
        max: 12,
        names: &CRON_MONTHS,
        first_name: 1,
        range: "-",
        sunday_is_seven: false,
    }
    .parse(month)?;
    let cron_days = Field {
        name: "day of week",
        min: 0,
        max: 7,
        names: &CRON_WEEKDAYS,
        first_name: 0,
        range: "-",
        sunday_is_seven: true,
    }
    .parse(dow)?;
    // Cron counts from Sunday (0, and 7 again); bit i here is Monday + i.
    let mut weekdays = 0u8;
    for v in 0..=7 {
        if cron_days & (1 << v) != 0 {
            weekdays |= 1 << ((v + 6) % 7);
        }
    }
    // As in cron, a day field starting with `*` does not restrict: when both are
    // restricted a day matching either is a match.
    let either_day = !dom.starts_with('*') && !dow.starts_with('*');
    Ok(Spec {
        years: Years::Any,
        months: months as u16,
        days: days as u32,
        weekdays,
        hours: hours as u32,
        minutes,
        seconds: 1,
        either_day,
    })
}
