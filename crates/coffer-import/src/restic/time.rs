//! Timestamps as restic's JSON holds them: RFC 3339 with up to nine digits of fraction
//! and a `Z` or `±HH:MM` offset (Go's `time.Time` in JSON), kept as written and as
//! seconds and nanoseconds since the Unix epoch.

use std::fmt;

/// A point in time: the text as stored, and the instant it names.
#[derive(Clone, PartialEq, Eq)]
pub struct Timestamp {
    /// The RFC 3339 text as stored (its offset says the writer's time zone).
    pub rfc3339: String,
    /// Seconds since 1970-01-01T00:00:00Z (negative before).
    pub secs: i64,
    /// Nanoseconds after `secs`, below 10^9.
    pub nanos: u32,
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}.{:09})", self.rfc3339, self.secs, self.nanos)
    }
}

impl Timestamp {
    /// Parses RFC 3339 text; `None` when it is not.
    pub fn parse(s: &str) -> Option<Timestamp> {
        let (secs, nanos) = parse_rfc3339(s)?;
        Some(Timestamp { rfc3339: s.to_string(), secs, nanos })
    }
}

fn digits(b: &[u8]) -> Option<i64> {
    if b.is_empty() || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(b.iter().fold(0i64, |n, &d| n * 10 + i64::from(d - b'0')))
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        _ => 28,
    }
}

fn parse_rfc3339(s: &str) -> Option<(i64, u32)> {
    let b = s.as_bytes();
    if b.len() < 20 || b.len() > 64 {
        return None;
    }
    if b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't') || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let year = digits(&b[0..4])?;
    let month = digits(&b[5..7])?;
    let day = digits(&b[8..10])?;
    let hour = digits(&b[11..13])?;
    let min = digits(&b[14..16])?;
    let sec = digits(&b[17..19])?;
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    // Go accepts no leap second in its parser either: 60 is refused.
    if hour > 23 || min > 59 || sec > 59 {
        return None;
    }
    let mut rest = &b[19..];
    let mut nanos = 0u32;
    if rest.first() == Some(&b'.') {
        let n = rest[1..].iter().take_while(|c| c.is_ascii_digit()).count();
        if n == 0 || n > 9 {
            return None;
        }
        let frac = digits(&rest[1..1 + n])? as u32;
        nanos = frac * 10u32.pow(9 - n as u32);
        rest = &rest[1 + n..];
    }
    let offset = match rest {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let h = digits(&[*h1, *h2])?;
            let m = digits(&[*m1, *m2])?;
            if h > 23 || m > 59 {
                return None;
            }
            let o = h * 3600 + m * 60;
            if *sign == b'-' { -o } else { o }
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + min * 60 + sec - offset;
    Some((secs, nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses() {
        let t = Timestamp::parse("1970-01-01T00:00:00Z").unwrap();
        assert_eq!((t.secs, t.nanos), (0, 0));
        let t = Timestamp::parse("2026-12-02T01:49:30.123456789+01:00").unwrap();
        assert_eq!((t.secs, t.nanos), (1_796_172_570, 123_456_789));
        let t = Timestamp::parse("2000-02-29T12:00:00.5-02:30").unwrap();
        assert_eq!((t.secs, t.nanos), (951_834_600, 500_000_000));
        // Go's zero time, which restic writes for times it does not know.
        let t = Timestamp::parse("0001-01-01T00:00:00Z").unwrap();
        assert_eq!(t.secs, -62_135_596_800);
        for bad in [
            "",
            "2026-13-01T00:00:00Z",
            "2026-02-30T00:00:00Z",
            "2026-01-01 00:00:00Z",
            "2026-01-01T00:00:00",
            "2026-01-01T00:00:00.Z",
            "2026-01-01T00:00:00.1234567890Z",
            "2026-01-01T24:00:00Z",
            "2026-01-01T00:00:00+1:00",
        ] {
            assert!(Timestamp::parse(bad).is_none(), "{bad}");
        }
    }
}
