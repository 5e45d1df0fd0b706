//! Retention policies: which snapshots `coffer forget --keep-*` keeps.
//! See docs/design.md#retention.
//!
//! # Brief overview
//!
//! Snapshots are split into groups by a [`GroupKey`] (host and paths by default);
//! each group is walked newest first and every rule of the [`Policy`] looks at each
//! snapshot in turn. A snapshot is kept when any rule keeps it, and its
//! [`Decision`] records every rule that did. The rules are restic's:
//!
//! - `last`: the N newest snapshots;
//! - `hourly` ... `yearly`: the newest snapshot of each of the N most recent
//!   hours, days, ISO weeks (Monday to Sunday), months or years that have a snapshot,
//!   in UTC or, through [`apply_with_offset`], in the caller's local time;
//! - `within`: snapshots newer than the group's newest snapshot minus a calendar
//!   [`Span`];
//! - `within_hourly` ... `within_yearly`: the newest snapshot of each hour ... year
//!   among the snapshots newer than the group's newest minus a span;
//! - `tags`: snapshots carrying every tag of one of the given tag lists.
//!
//! Everything here is pure: nothing is read or written. The forgetting itself is
//! [`crate::ops::forget::forget`], called with the snapshots decided against.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::format::snapshot::Snapshot;
use crate::id::Id;

const SECS_PER_HOUR: i64 = 3600;
const SECS_PER_DAY: i64 = 86_400;
/// 1970-01-01 was a Thursday: adding 3 days counts from the Monday before it,
/// 1969-12-29, so that weeks run Monday to Sunday as ISO 8601 weeks do.
const DAYS_FROM_MONDAY_TO_EPOCH: i64 = 3;

/// What to keep. A policy whose counts are all 0, with no `within` and no `tags`,
/// keeps nothing (see [`Policy::has_keep_rule`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    /// Keep the N newest snapshots of each group.
    pub last: u32,
    /// Keep the newest snapshot of each of the N most recent hours with snapshots.
    pub hourly: u32,
    /// Likewise for days (UTC).
    pub daily: u32,
    /// Likewise for ISO weeks (Monday to Sunday, UTC).
    pub weekly: u32,
    /// Likewise for calendar months (UTC).
    pub monthly: u32,
    /// Likewise for calendar years (UTC).
    pub yearly: u32,
    /// Keep snapshots newer than the group's newest snapshot minus this span.
    pub within: Option<Span>,
    /// Keep the newest snapshot of each hour among those newer than the group's
    /// newest snapshot minus this span.
    pub within_hourly: Option<Span>,
    /// Likewise for days.
    pub within_daily: Option<Span>,
    /// Likewise for ISO weeks.
    pub within_weekly: Option<Span>,
    /// Likewise for calendar months.
    pub within_monthly: Option<Span>,
    /// Likewise for calendar years.
    pub within_yearly: Option<Span>,
    /// Keep snapshots that carry every tag of any one of these lists.
    pub tags: Vec<Vec<String>>,
    /// How snapshots are grouped before the rules apply.
    pub group_by: GroupBy,
}

impl Policy {
    /// Whether any rule can keep a snapshot. Applying a policy without one forgets
    /// every snapshot given, which callers should refuse.
    pub fn has_keep_rule(&self) -> bool {
        self.last > 0
            || self.hourly > 0
            || self.daily > 0
            || self.weekly > 0
            || self.monthly > 0
            || self.yearly > 0
            || self.within.is_some()
            || self.within_hourly.is_some()
            || self.within_daily.is_some()
            || self.within_weekly.is_some()
            || self.within_monthly.is_some()
            || self.within_yearly.is_some()
            || !self.tags.is_empty()
    }
}

/// A calendar span such as `1y5m7d2h`: years, months, days and hours. Years and
/// months are subtracted on the calendar (a day past the end of the month it lands
/// in becomes that month's last day), days and hours as 24 and 1 hours of UTC.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Span {
    /// Calendar years.
    pub years: u32,
    /// Calendar months.
    pub months: u32,
    /// Days of 24 hours.
    pub days: u32,
    /// Hours.
    pub hours: u32,
}

impl FromStr for Span {
    type Err = String;

    /// Parses one or more `<number><unit>` pairs, units `y`, `m` (months), `d` and
    /// `h`, each at most once, in any order: `30d`, `1y5m7d2h`. The span must not be 0.
    fn from_str(s: &str) -> Result<Span, String> {
        let bad = |why: &str| format!("{s:?} is not a duration like 30d or 1y5m7d2h: {why}");
        let mut span = Span::default();
        let mut seen = String::new();
        let mut digits = String::new();
        for c in s.trim().chars() {
            if c.is_ascii_digit() {
                digits.push(c);
                continue;
            }
            if digits.is_empty() {
                return Err(bad(&format!("a number must come before {c:?}")));
            }
            let n: u32 = digits.parse().map_err(|_| bad(&format!("{digits} is too large")))?;
            let field = match c {
                'y' => &mut span.years,
                'm' => &mut span.months,
                'd' => &mut span.days,
                'h' => &mut span.hours,
                _ => return Err(bad(&format!("unknown unit {c:?} (use y, m, d or h)"))),
            };
            if seen.contains(c) {
                return Err(bad(&format!("unit {c:?} given twice")));
            }
            seen.push(c);
            *field = n;
            digits.clear();
        }
        if !digits.is_empty() {
            return Err(bad(&format!("{digits} has no unit (use y, m, d or h)")));
        }
        if span == Span::default() {
            return Err(bad("it must be longer than zero"));
        }
        Ok(span)
    }
}

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (n, unit) in [(self.years, 'y'), (self.months, 'm'), (self.days, 'd'), (self.hours, 'h')] {
            if n > 0 {
                write!(f, "{n}{unit}")?;
            }
        }
        Ok(())
    }
}

impl Span {
    /// The instant this span before `t` (UTC calendar).
    fn before(&self, t: Instant) -> Instant {
        let day = t.secs.div_euclid(SECS_PER_DAY);
        let second_of_day = t.secs.rem_euclid(SECS_PER_DAY);
        let (y, m, d) = civil_from_days(day);
        let month_index = y * 12 + i64::from(m) - 1 - (i64::from(self.years) * 12 + i64::from(self.months));
        let (ny, nm) = (month_index.div_euclid(12), month_index.rem_euclid(12) as u32 + 1);
        let nd = d.min(days_in_month(ny, nm));
        let secs = days_from_civil(ny, nm, nd) * SECS_PER_DAY + second_of_day
            - i64::from(self.days) * SECS_PER_DAY
            - i64::from(self.hours) * SECS_PER_HOUR;
        Instant { secs, nanos: t.nanos }
    }
}

/// Which snapshot fields split snapshots into groups. None of them: one group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupBy {
    /// Group by host name.
    pub host: bool,
    /// Group by the set of paths backed up.
    pub paths: bool,
    /// Group by the set of tags.
    pub tags: bool,
}

impl Default for GroupBy {
    /// Host and paths, as restic does.
    fn default() -> Self {
        GroupBy { host: true, paths: true, tags: false }
    }
}

impl FromStr for GroupBy {
    type Err = String;

    /// Parses a comma-separated subset of `host`, `paths`, `tags`; the empty string
    /// puts all snapshots in one group.
    fn from_str(s: &str) -> Result<GroupBy, String> {
        let mut g = GroupBy { host: false, paths: false, tags: false };
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part {
                "host" => g.host = true,
                "paths" => g.paths = true,
                "tags" => g.tags = true,
                _ => {
                    return Err(format!(
                        "cannot group by {part:?}: use a comma-separated subset of host, paths, tags, or \"\" for one \
                         group"
                    ));
                }
            }
        }
        Ok(g)
    }
}

impl fmt::Display for GroupBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<&str> = [(self.host, "host"), (self.paths, "paths"), (self.tags, "tags")]
            .into_iter()
            .filter_map(|(on, name)| on.then_some(name))
            .collect();
        f.write_str(&parts.join(","))
    }
}

/// What a policy reads of a snapshot: when it was taken, and what groups it.
pub trait Dated {
    /// When the snapshot was taken.
    fn system_time(&self) -> SystemTime;
    /// The host it was taken on.
    fn hostname(&self) -> &str;
    /// The paths it holds.
    fn paths(&self) -> &[String];
    /// Its tags.
    fn tags(&self) -> &[String];
}

impl Dated for Snapshot {
    fn system_time(&self) -> SystemTime {
        Snapshot::system_time(self)
    }
    fn hostname(&self) -> &str {
        &self.hostname
    }
    fn paths(&self) -> &[String] {
        &self.paths
    }
    fn tags(&self) -> &[String] {
        &self.tags
    }
}

impl GroupBy {
    /// The group `s` belongs to.
    pub fn key<S: Dated + ?Sized>(&self, s: &S) -> GroupKey {
        let sorted = |v: &[String]| {
            let mut v = v.to_vec();
            v.sort();
            v.dedup();
            v
        };
        GroupKey {
            host: self.host.then(|| s.hostname().to_string()),
            paths: self.paths.then(|| sorted(s.paths())),
            tags: self.tags.then(|| sorted(s.tags())),
        }
    }
}

/// The values a group shares; a field is `None` when snapshots are not grouped by it.
/// Paths and tags are sorted, so their order in a snapshot does not matter.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupKey {
    /// The host name.
    pub host: Option<String>,
    /// The paths backed up.
    pub paths: Option<Vec<String>>,
    /// The tags.
    pub tags: Option<Vec<String>>,
}

impl fmt::Display for GroupKey {
    /// `host laptop, paths /etc /home, tags (none)`; `all snapshots` for one group.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |v: &[String], sep: &str| if v.is_empty() { "(none)".to_string() } else { v.join(sep) };
        let mut parts = Vec::new();
        if let Some(h) = &self.host {
            parts.push(format!("host {h}"));
        }
        if let Some(p) = &self.paths {
            parts.push(format!("paths {}", list(p, " ")));
        }
        if let Some(t) = &self.tags {
            parts.push(format!("tags {}", list(t, ",")));
        }
        if parts.is_empty() { f.write_str("all snapshots") } else { f.write_str(&parts.join(", ")) }
    }
}

/// Why a snapshot is kept: the rule that keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reason {
    /// Among the `last` newest.
    Last,
    /// Newest of its hour.
    Hourly,
    /// Newest of its day.
    Daily,
    /// Newest of its ISO week.
    Weekly,
    /// Newest of its month.
    Monthly,
    /// Newest of its year.
    Yearly,
    /// Newer than the group's newest snapshot minus this span.
    Within(Span),
    /// Newest of its hour, within this span of the group's newest snapshot.
    WithinHourly(Span),
    /// Newest of its day, within the span.
    WithinDaily(Span),
    /// Newest of its ISO week, within the span.
    WithinWeekly(Span),
    /// Newest of its month, within the span.
    WithinMonthly(Span),
    /// Newest of its year, within the span.
    WithinYearly(Span),
    /// Carries every tag of this list.
    Tag(Vec<String>),
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Last => f.write_str("last"),
            Reason::Hourly => f.write_str("hourly"),
            Reason::Daily => f.write_str("daily"),
            Reason::Weekly => f.write_str("weekly"),
            Reason::Monthly => f.write_str("monthly"),
            Reason::Yearly => f.write_str("yearly"),
            Reason::Within(span) => write!(f, "within {span}"),
            Reason::WithinHourly(span) => write!(f, "hourly within {span}"),
            Reason::WithinDaily(span) => write!(f, "daily within {span}"),
            Reason::WithinWeekly(span) => write!(f, "weekly within {span}"),
            Reason::WithinMonthly(span) => write!(f, "monthly within {span}"),
            Reason::WithinYearly(span) => write!(f, "yearly within {span}"),
            Reason::Tag(tags) => write!(f, "tag {}", tags.join(",")),
        }
    }
}

/// What the policy decided for one snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The snapshot.
    pub id: Id,
    /// The group it was judged in.
    pub group: GroupKey,
    /// Kept (true) or to be forgotten (false); true exactly when `reasons` is not empty.
    pub keep: bool,
    /// Every rule that keeps it, in the order of [`Reason`].
    pub reasons: Vec<Reason>,
}

/// A time split into whole seconds since the Unix epoch (negative before it) and
/// nanoseconds, which orders like the time itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Instant {
    secs: i64,
    nanos: u32,
}

impl Instant {
    fn of(t: SystemTime) -> Instant {
        match t.duration_since(UNIX_EPOCH) {
            Ok(d) => Instant { secs: d.as_secs() as i64, nanos: d.subsec_nanos() },
            Err(e) => {
                let d = e.duration();
                match d.subsec_nanos() {
                    0 => Instant { secs: -(d.as_secs() as i64), nanos: 0 },
                    n => Instant { secs: -(d.as_secs() as i64) - 1, nanos: 1_000_000_000 - n },
                }
            }
        }
    }
}

/// The calendar periods of the bucket rules.
#[derive(Clone, Copy)]
enum Period {
    Hour,
    Day,
    Week,
    Month,
    Year,
}

impl Period {
    /// A number that is equal for two instants exactly when they fall in the same
    /// period, and smaller for earlier periods.
    fn bucket(self, t: Instant) -> i64 {
        let day = t.secs.div_euclid(SECS_PER_DAY);
        match self {
            Period::Hour => t.secs.div_euclid(SECS_PER_HOUR),
            Period::Day => day,
            Period::Week => (day + DAYS_FROM_MONDAY_TO_EPOCH).div_euclid(7),
            Period::Month => {
                let (y, m, _) = civil_from_days(day);
                y * 12 + i64::from(m) - 1
            }
            Period::Year => civil_from_days(day).0,
        }
    }
}

/// One bucket rule while a group is walked: how many periods it may still keep,
/// the last period it kept a snapshot of, and for a `within_*` rule the instant
/// a snapshot must be newer than.
struct BucketRule {
    period: Period,
    reason: Reason,
    left: u32,
    last: Option<i64>,
    after: Option<Instant>,
}

/// Decides, for every snapshot given, whether `policy` keeps it. The result holds
/// one decision per snapshot, grouped (groups in [`GroupKey`] order) and newest
/// first within a group; snapshots with equal times are ordered by id, the larger
/// id counting as newer. Callers filter the snapshots (host, tags, paths) first:
/// only those given are considered.
pub fn apply<S: Dated>(snapshots: &[(Id, S)], policy: &Policy) -> Vec<Decision> {
    apply_with_offset(snapshots, policy, &|_| 0)
}

/// [`apply`] with the bucket rules' hours, days, weeks, months and years taken in
/// a local time: `offset(t)` gives the seconds east of UTC in effect at `t`
/// (the caller knows the time zone; this library reads no environment).
pub fn apply_with_offset<S: Dated>(
    snapshots: &[(Id, S)],
    policy: &Policy,
    offset: &dyn Fn(SystemTime) -> i64,
) -> Vec<Decision> {
    let mut groups: BTreeMap<GroupKey, Vec<(Id, &S, Instant, Instant)>> = BTreeMap::new();
    for (id, s) in snapshots {
        let time = s.system_time();
        let t = Instant::of(time);
        let local = Instant { secs: t.secs.saturating_add(offset(time)), nanos: t.nanos };
        groups.entry(policy.group_by.key(s)).or_default().push((*id, s, t, local));
    }
    let mut out = Vec::with_capacity(snapshots.len());
    for (key, mut members) in groups {
        members.sort_by(|a, b| b.2.cmp(&a.2).then(b.0.cmp(&a.0)));
        let mut last_left = policy.last;
        let mut rules: Vec<BucketRule> = [
            (Period::Hour, Reason::Hourly, policy.hourly),
            (Period::Day, Reason::Daily, policy.daily),
            (Period::Week, Reason::Weekly, policy.weekly),
            (Period::Month, Reason::Monthly, policy.monthly),
            (Period::Year, Reason::Yearly, policy.yearly),
        ]
        .into_iter()
        .map(|(period, reason, left)| BucketRule { period, reason, left, last: None, after: None })
        .collect();
        let newest = members[0].2;
        for (period, span, reason) in [
            (Period::Hour, policy.within_hourly, Reason::WithinHourly as fn(Span) -> Reason),
            (Period::Day, policy.within_daily, Reason::WithinDaily),
            (Period::Week, policy.within_weekly, Reason::WithinWeekly),
            (Period::Month, policy.within_monthly, Reason::WithinMonthly),
            (Period::Year, policy.within_yearly, Reason::WithinYearly),
        ] {
            if let Some(span) = span {
                let after = Some(span.before(newest));
                rules.push(BucketRule { period, reason: reason(span), left: u32::MAX, last: None, after });
            }
        }
        let threshold = policy.within.map(|span| (span, span.before(newest)));
        for (id, s, t, local) in members {
            let mut reasons = Vec::new();
            if last_left > 0 {
                last_left -= 1;
                reasons.push(Reason::Last);
            }
            for rule in &mut rules {
                if rule.left == 0 || rule.after.is_some_and(|after| t <= after) {
                    continue;
                }
                // Newest first: the first snapshot met in a period is its newest.
                let bucket = rule.period.bucket(local);
                if rule.last != Some(bucket) {
                    rule.last = Some(bucket);
                    rule.left -= 1;
                    reasons.push(rule.reason.clone());
                }
            }
            if let Some((span, limit)) = threshold
                && t > limit
            {
                reasons.push(Reason::Within(span));
            }
            for list in &policy.tags {
                if list.iter().all(|tag| s.tags().contains(tag)) {
                    reasons.push(Reason::Tag(list.clone()));
                }
            }
            out.push(Decision { id, group: key.clone(), keep: !reasons.is_empty(), reasons });
        }
    }
    out
}

/// The (year, month 1..=12, day 1..=31) of a day counted from 1970-01-01, in the
/// proleptic Gregorian calendar (H. Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = (if mp < 10 { mp + 3 } else { mp - 9 }) as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// The inverse of [`civil_from_days`].
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::sign::PublicKey;

    /// A snapshot at `time` (RFC 3339), with the host, paths and tags given.
    fn snap(time: &str, host: &str, paths: &[&str], tags: &[&str]) -> Snapshot {
        Snapshot {
            version: crate::format::FORMAT_VERSION,
            time: time.to_string(),
            hostname: host.to_string(),
            username: "u".into(),
            paths: paths.iter().map(|p| p.to_string()).collect(),
            tags: tags.iter().map(|t| t.to_string()).collect(),
            tree: Id::default(),
            parent: None,
            excludes: vec![],
            skipped_count: 0,
            skipped: vec![],
            summary: Default::default(),
            program: "test".into(),
            writer: PublicKey([0; 32]),
            history: vec![],
            merkle_root: Id::default(),
            merkle_leaves: 0,
            merkle_key: Id::default(),
            copied_from: None,
            imported_from: None,
            written: None,
            server_log: None,
            signature: Default::default(),
        }
    }

    fn id(n: u8) -> Id {
        Id([n; 32])
    }

    /// Snapshots of one host and path at these times, with ids 1, 2, ...
    fn at(times: &[&str]) -> Vec<(Id, Snapshot)> {
        times.iter().enumerate().map(|(i, t)| (id(i as u8 + 1), snap(t, "h", &["/d"], &[]))).collect()
    }

    /// The ids kept, in decision order (newest first).
    fn kept(snaps: &[(Id, Snapshot)], policy: &Policy) -> Vec<u8> {
        apply(snaps, policy).iter().filter(|d| d.keep).map(|d| d.id.0[0]).collect()
    }

    fn reasons_of(ds: &[Decision], n: u8) -> Vec<Reason> {
        ds.iter().find(|d| d.id == id(n)).expect("decided").reasons.clone()
    }

    #[test]
    fn daily_buckets_follow_the_offset_given() {
        // 23:30 UTC on May 6 is May 7 at UTC+1: there it shares a day with 10:00 UTC on May 7.
        let s = at(&["2024-05-06T23:30:00Z", "2024-05-07T10:00:00Z", "2024-05-05T12:00:00Z"]);
        let p = Policy { daily: 10, ..Default::default() };
        assert_eq!(kept(&s, &p), [2, 1, 3], "UTC: three days");
        let plus_one = |_: SystemTime| 3600;
        let local: Vec<u8> =
            apply_with_offset(&s, &p, &plus_one).iter().filter(|d| d.keep).map(|d| d.id.0[0]).collect();
        assert_eq!(local, [2, 3], "UTC+1: May 7 holds two snapshots, only the newest is kept");
    }

    #[test]
    fn within_daily_keeps_one_per_day_inside_the_span_only() {
        let s = at(&[
            "2024-05-01T10:00:00Z",
            "2024-05-08T09:00:00Z",
            "2024-05-08T18:00:00Z",
            "2024-05-09T08:00:00Z",
            "2024-05-10T07:00:00Z",
            "2024-05-10T20:00:00Z",
        ]);
        let span: Span = "3d".parse().unwrap();
        let p = Policy { within_daily: Some(span), ..Default::default() };
        assert!(p.has_keep_rule());
        // Newest is May 10 20:00; the span reaches back to May 7 20:00.
        assert_eq!(kept(&s, &p), [6, 4, 3]);
        assert_eq!(reasons_of(&apply(&s, &p), 6), [Reason::WithinDaily(span)]);
        assert_eq!(Reason::WithinDaily(span).to_string(), "daily within 3d");
    }

    #[test]
    fn keep_last_keeps_the_newest_whatever_the_input_order() {
        let mut s = at(&[
            "2024-05-01T10:00:00Z",
            "2024-05-02T10:00:00Z",
            "2024-05-03T10:00:00Z",
            "2024-05-04T10:00:00Z",
            "2024-05-05T10:00:00Z",
        ]);
        s.reverse();
        let p = Policy { last: 2, ..Default::default() };
        let ds = apply(&s, &p);
        assert_eq!(ds.iter().map(|d| d.id.0[0]).collect::<Vec<_>>(), [5, 4, 3, 2, 1], "newest first");
        assert_eq!(kept(&s, &p), [5, 4]);
        assert_eq!(reasons_of(&ds, 5), [Reason::Last]);
        assert!(ds.iter().all(|d| d.keep != d.reasons.is_empty()), "kept exactly when a reason is given");
        let all = Policy { last: 10, ..Default::default() };
        assert_eq!(kept(&s, &all), [5, 4, 3, 2, 1], "more than there are keeps all");
    }

    #[test]
    fn hourly_keeps_the_newest_of_each_recent_hour_with_snapshots() {
        let s = at(&[
            "2024-05-01T10:05:00Z",
            "2024-05-01T10:40:00Z",
            "2024-05-01T11:10:00Z",
            // No snapshot at 12:xx: the hour is skipped, not counted.
            "2024-05-01T13:00:00Z",
            "2024-05-01T13:59:59.999999999Z",
            "2024-05-01T14:00:00Z",
        ]);
        let p = Policy { hourly: 3, ..Default::default() };
        assert_eq!(kept(&s, &p), [6, 5, 3]);
        let p = Policy { hourly: 4, ..Default::default() };
        assert_eq!(kept(&s, &p), [6, 5, 3, 2]);
        assert_eq!(reasons_of(&apply(&s, &p), 2), [Reason::Hourly]);
    }

    #[test]
    fn daily_buckets_are_utc_days() {
        let s = at(&[
            "2024-05-01T00:00:00Z",
            "2024-05-01T23:59:59Z",
            "2024-05-03T12:00:00Z",
            // 23:30 UTC on May 6 is May 7 in UTC+1, but counts as May 6.
            "2024-05-06T23:30:00Z",
            "2024-05-07T00:30:00Z",
            "2024-05-07T08:00:00Z",
        ]);
        let p = Policy { daily: 3, ..Default::default() };
        assert_eq!(kept(&s, &p), [6, 4, 3]);
        let p = Policy { daily: 10, ..Default::default() };
        assert_eq!(kept(&s, &p), [6, 4, 3, 2]);
    }

    #[test]
    fn weekly_buckets_are_iso_weeks() {
        let s = at(&[
            "2024-12-22T12:00:00Z", // Sunday, 2024-W51
            "2024-12-23T12:00:00Z", // Monday, 2024-W52
            "2024-12-29T23:59:59Z", // Sunday, 2024-W52
            "2024-12-30T00:00:00Z", // Monday, 2025-W01
            "2025-01-02T12:00:00Z", // Thursday, 2025-W01
            "2025-01-05T12:00:00Z", // Sunday, 2025-W01
        ]);
        let p = Policy { weekly: 2, ..Default::default() };
        assert_eq!(kept(&s, &p), [6, 3]);
        let p = Policy { weekly: 3, ..Default::default() };
        assert_eq!(kept(&s, &p), [6, 3, 1]);
        // The epoch fell on a Thursday: its week runs to Sunday, January 4.
        let s = at(&["1970-01-01T00:00:00Z", "1970-01-04T23:00:00Z", "1970-01-05T00:00:00Z"]);
        let p = Policy { weekly: 5, ..Default::default() };
        assert_eq!(kept(&s, &p), [3, 2]);
    }

    #[test]
    fn monthly_and_yearly_buckets_follow_the_calendar() {
        let s = at(&[
            "2023-02-28T12:00:00Z",
            "2023-12-31T23:59:59.999Z",
            "2024-01-01T00:00:00Z",
            "2024-01-31T10:00:00Z",
            "2024-02-29T10:00:00Z",
            "2024-03-01T00:00:00Z",
        ]);
        let p = Policy { monthly: 3, ..Default::default() };
        assert_eq!(kept(&s, &p), [6, 5, 4]);
        let p = Policy { monthly: 5, ..Default::default() };
        assert_eq!(kept(&s, &p), [6, 5, 4, 2, 1]);
        let p = Policy { yearly: 5, ..Default::default() };
        assert_eq!(kept(&s, &p), [6, 2]);
    }

    #[test]
    fn rules_count_independently_and_all_reasons_are_recorded() {
        let s = at(&["2023-06-01T10:00:00Z", "2024-05-01T10:00:00Z", "2024-05-02T10:00:00Z", "2024-05-02T11:00:00Z"]);
        let p = Policy { last: 1, daily: 2, monthly: 1, yearly: 2, ..Default::default() };
        let ds = apply(&s, &p);
        assert_eq!(reasons_of(&ds, 4), [Reason::Last, Reason::Daily, Reason::Monthly, Reason::Yearly]);
        assert_eq!(reasons_of(&ds, 3), []);
        assert_eq!(reasons_of(&ds, 2), [Reason::Daily]);
        assert_eq!(reasons_of(&ds, 1), [Reason::Yearly]);
    }

    #[test]
    fn equal_times_are_ordered_by_id() {
        let t = "2024-05-01T10:00:00.123456789Z";
        let s = vec![(id(7), snap(t, "h", &["/d"], &[])), (id(9), snap(t, "h", &["/d"], &[]))];
        assert_eq!(kept(&s, &Policy { last: 1, ..Default::default() }), [9]);
        assert_eq!(kept(&s, &Policy { daily: 1, ..Default::default() }), [9]);
        assert_eq!(kept(&s, &Policy { hourly: 2, ..Default::default() }), [9], "one hour, one snapshot");
    }

    #[test]
    fn keep_within_counts_back_from_the_newest_snapshot_of_the_group() {
        let s = at(&[
            "2024-02-29T12:00:00Z", // exactly one month before the newest: not newer, forgotten
            "2024-02-29T12:00:00.000000001Z",
            "2024-03-15T00:00:00Z",
            "2024-03-31T12:00:00Z",
        ]);
        let span: Span = "1m".parse().unwrap();
        let p = Policy { within: Some(span), ..Default::default() };
        let ds = apply(&s, &p);
        assert_eq!(kept(&s, &p), [4, 3, 2]);
        assert_eq!(reasons_of(&ds, 2), [Reason::Within(span)]);

        // Years, months, days and hours together: 2025-03-31T12:00 minus 1y1m is
        // 2024-02-29T12:00 (March 31 has no February counterpart), minus 2d5h is
        // 2024-02-27T07:00.
        let s = at(&["2024-02-27T07:00:00Z", "2024-02-27T07:00:01Z", "2025-03-31T12:00:00Z"]);
        let p = Policy { within: Some("1y1m2d5h".parse().unwrap()), ..Default::default() };
        assert_eq!(kept(&s, &p), [3, 2]);

        // The group's newest, not the current time, is the reference.
        let s = at(&["2001-01-01T00:00:00Z", "2001-01-05T00:00:00Z", "2001-01-10T00:00:00Z"]);
        let p = Policy { within: Some("7d".parse().unwrap()), ..Default::default() };
        assert_eq!(kept(&s, &p), [3, 2]);
    }

    #[test]
    fn keep_tag_needs_every_tag_of_a_list() {
        let s = vec![
            (id(1), snap("2024-01-01T00:00:00Z", "h", &["/d"], &["a"])),
            (id(2), snap("2024-01-02T00:00:00Z", "h", &["/d"], &["a", "b"])),
            (id(3), snap("2024-01-03T00:00:00Z", "h", &["/d"], &["b"])),
            (id(4), snap("2024-01-04T00:00:00Z", "h", &["/d"], &[])),
        ];
        let p = Policy { tags: vec![vec!["a".into()]], ..Default::default() };
        assert_eq!(kept(&s, &p), [2, 1]);
        let p = Policy { tags: vec![vec!["a".into(), "b".into()]], ..Default::default() };
        assert_eq!(kept(&s, &p), [2]);
        let p = Policy { tags: vec![vec!["a".into()], vec!["b".into()]], last: 1, ..Default::default() };
        let ds = apply(&s, &p);
        assert_eq!(kept(&s, &p), [4, 3, 2, 1]);
        assert_eq!(reasons_of(&ds, 2), [Reason::Tag(vec!["a".into()]), Reason::Tag(vec!["b".into()])]);
        assert_eq!(reasons_of(&ds, 4), [Reason::Last]);
    }

    #[test]
    fn rules_apply_to_each_group_on_its_own() {
        let s = vec![
            (id(1), snap("2024-01-01T00:00:00Z", "a", &["/x"], &[])),
            (id(2), snap("2024-01-02T00:00:00Z", "b", &["/x"], &["t"])),
            (id(3), snap("2024-01-03T00:00:00Z", "a", &["/x"], &[])),
            (id(4), snap("2024-01-04T00:00:00Z", "a", &["/y", "/x"], &[])),
            (id(5), snap("2024-01-05T00:00:00Z", "b", &["/x"], &[])),
            (id(6), snap("2024-01-06T00:00:00Z", "a", &["/x", "/y"], &["t"])),
        ];
        let last1 = |group_by: &str| Policy { last: 1, group_by: group_by.parse().unwrap(), ..Default::default() };

        // host,paths: (a,/x) (a,/x /y) (b,/x); path order does not matter.
        let ds = apply(&s, &last1("host,paths"));
        assert_eq!(kept(&s, &last1("host,paths")), [3, 6, 5]);
        assert_eq!(ds[0].group, GroupKey { host: Some("a".into()), paths: Some(vec!["/x".into()]), tags: None });
        assert_eq!(ds[0].group.to_string(), "host a, paths /x");
        assert_eq!(ds.iter().map(|d| d.id.0[0]).collect::<Vec<_>>(), [3, 1, 6, 4, 5, 2], "by group, newest first");

        assert_eq!(kept(&s, &last1("host")), [6, 5]);
        assert_eq!(kept(&s, &last1("paths")), [5, 6]);
        assert_eq!(kept(&s, &last1("tags")), [5, 6]);
        assert_eq!(kept(&s, &last1("host,tags")), [4, 6, 5, 2]);
        let one = apply(&s, &last1(""));
        assert_eq!(one.iter().filter(|d| d.keep).map(|d| d.id.0[0]).collect::<Vec<_>>(), [6]);
        assert_eq!(one[0].group.to_string(), "all snapshots");

        // keep-within is measured from each group's own newest snapshot.
        let p = Policy { within: Some("1d".parse().unwrap()), group_by: "host".parse().unwrap(), ..Default::default() };
        assert_eq!(kept(&s, &p), [6, 5]);
        let p =
            Policy { within: Some("2d1h".parse().unwrap()), group_by: "host".parse().unwrap(), ..Default::default() };
        assert_eq!(kept(&s, &p), [6, 4, 5]);
    }

    #[test]
    fn a_policy_without_rules_keeps_nothing() {
        let s = at(&["2024-01-01T00:00:00Z", "2024-01-02T00:00:00Z"]);
        let p = Policy::default();
        assert!(!p.has_keep_rule());
        assert!(apply(&s, &p).iter().all(|d| !d.keep && d.reasons.is_empty()));
        assert!(Policy { tags: vec![vec!["x".into()]], ..Default::default() }.has_keep_rule());
        assert!(Policy { within: Some("1h".parse().unwrap()), ..Default::default() }.has_keep_rule());
        assert!(Policy { yearly: 1, ..Default::default() }.has_keep_rule());
        assert!(apply::<Snapshot>(&[], &Policy { last: 1, ..Default::default() }).is_empty());
    }

    #[test]
    fn spans_parse_and_print() {
        let s: Span = "1y5m7d2h".parse().unwrap();
        assert_eq!(s, Span { years: 1, months: 5, days: 7, hours: 2 });
        assert_eq!(s.to_string(), "1y5m7d2h");
        assert_eq!("30d".parse::<Span>().unwrap(), Span { days: 30, ..Default::default() });
        assert_eq!("2h1y".parse::<Span>().unwrap().to_string(), "1y2h");
        assert_eq!(" 12m ".parse::<Span>().unwrap().months, 12);
        for bad in ["", "5", "d", "1x", "1d1d", "0d", "0y0h", "-1d", "1.5d", "99999999999d", "1 d"] {
            assert!(bad.parse::<Span>().is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn group_by_parses_and_prints() {
        assert_eq!("".parse::<GroupBy>().unwrap(), GroupBy { host: false, paths: false, tags: false });
        assert_eq!("host,paths".parse::<GroupBy>().unwrap(), GroupBy::default());
        assert_eq!("tags, host".parse::<GroupBy>().unwrap().to_string(), "host,tags");
        assert_eq!("host,paths,tags".parse::<GroupBy>().unwrap(), GroupBy { host: true, paths: true, tags: true });
        assert!("hosts".parse::<GroupBy>().is_err());
        assert!("host,time".parse::<GroupBy>().is_err());
    }

    #[test]
    fn reasons_print() {
        let r = [
            Reason::Last,
            Reason::Weekly,
            Reason::Within("30d".parse().unwrap()),
            Reason::Tag(vec!["a".into(), "b".into()]),
        ];
        let text: Vec<String> = r.iter().map(|r| r.to_string()).collect();
        assert_eq!(text, ["last", "weekly", "within 30d", "tag a,b"]);
    }

    #[test]
    fn calendar_conversions_round_trip() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(days_from_civil(2024, 2, 29), 19_782);
        for day in -800_000..800_000 {
            let (y, m, d) = civil_from_days(day);
            assert!((1..=days_in_month(y, m)).contains(&d));
            assert_eq!(days_from_civil(y, m, d), day);
        }
        assert_eq!(days_in_month(1900, 2), 28);
        assert_eq!(days_in_month(2000, 2), 29);
        assert_eq!(
            Instant::of(UNIX_EPOCH - std::time::Duration::from_millis(1500)),
            Instant { secs: -2, nanos: 500_000_000 }
        );
    }
}
