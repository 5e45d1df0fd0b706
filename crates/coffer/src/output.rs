//! Printing: human text or JSON, and the formatting helpers both use. Times are
//! shown in local time, or in UTC with `--utc` (docs/design.md#exit-codes,
//! "Command line").

use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::json;

/// Whether `--utc` was given.
static UTC: AtomicBool = AtomicBool::new(false);

/// Makes [`time`] show UTC (`--utc`) instead of local time.
pub fn set_utc(utc: bool) {
    UTC.store(utc, Ordering::Relaxed);
}

/// The time zone times are shown and bucketed in: UTC with `--utc`, else the
/// system's (`TZ`, else /etc/localtime; UTC when neither is usable).
pub fn time_zone() -> jiff::tz::TimeZone {
    if UTC.load(Ordering::Relaxed) { jiff::tz::TimeZone::UTC } else { jiff::tz::TimeZone::system() }
}

/// Whether times are shown in UTC (`--utc`).
pub fn is_utc() -> bool {
    UTC.load(Ordering::Relaxed)
}

/// Formats a file time (seconds since the epoch) as `YYYY-MM-DD HH:MM:SS` in the
/// display time zone; one out of range is shown as the number of seconds.
pub fn file_time(secs: i64) -> String {
    match jiff::Timestamp::from_second(secs) {
        Ok(ts) => ts.to_zoned(time_zone()).strftime("%Y-%m-%d %H:%M:%S").to_string(),
        Err(_) => secs.to_string(),
    }
}

/// Seconds east of UTC in [`time_zone`] at `t`.
pub fn utc_offset(t: std::time::SystemTime) -> i64 {
    match jiff::Timestamp::try_from(t) {
        Ok(ts) => i64::from(time_zone().to_offset(ts).seconds()),
        Err(_) => 0,
    }
}

/// Prints an error to stderr: one line of text, or a JSON object with the exit code.
pub fn error(json: bool, err: &anyhow::Error, code: u8) {
    if json {
        let causes: Vec<String> = err.chain().skip(1).map(|c| c.to_string()).collect();
        eprintln!("{}", json!({"type": "error", "message": err.to_string(), "causes": causes, "exit_code": code}));
    } else {
        eprintln!("error: {}", chain_text(err));
    }
}

/// The error and its causes, `a: b: c`, leaving out a cause whose text an
/// earlier message already holds (an error that prints its source, as I/O
/// errors naming their path do, would otherwise say it twice).
fn chain_text(err: &anyhow::Error) -> String {
    let mut text = err.to_string();
    for cause in err.chain().skip(1) {
        let c = cause.to_string();
        if !text.contains(&c) {
            text.push_str(": ");
            text.push_str(&c);
        }
    }
    text
}

/// Prints one JSON document (or line) to stdout.
pub fn json(value: &serde_json::Value) {
    println!("{value}");
}

/// Formats a byte count with binary units: `1.5 MiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 { format!("{n} B") } else { format!("{v:.2} {}", UNITS[u]) }
}

/// A count and its noun, singular for 1: `1 file`, `2 files`, `3 entries`,
/// `0 keys`. In a noun of several words the last one changes (`2 index files`).
pub fn plural<N: Copy + std::fmt::Display + TryInto<u64>>(n: N, noun: &str) -> String {
    if n.try_into().ok() == Some(1) {
        return format!("{n} {noun}");
    }
    let consonant_y = noun.strip_suffix('y').filter(|stem| !stem.ends_with(['a', 'e', 'o', 'u']));
    match consonant_y {
        Some(stem) => format!("{n} {stem}ies"),
        None => format!("{n} {noun}s"),
    }
}

/// Formats a snapshot time (RFC 3339) as `YYYY-MM-DD HH:MM:SS` in local time (UTC
/// with `--utc`). A time that does not parse is shown as stored.
pub fn time(rfc3339: &str) -> String {
    match rfc3339.parse::<jiff::Timestamp>() {
        Ok(ts) => ts.to_zoned(time_zone()).strftime("%Y-%m-%d %H:%M:%S").to_string(),
        Err(_) => rfc3339.to_string(),
    }
}

/// Parses a time given on the command line (`flag` names it in the error):
/// `YYYY-MM-DD`, `YYYY-MM-DD HH:MM[:SS]` (or with a `T`) in the display time
/// zone, or an RFC 3339 time.
pub fn parse_time(s: &str, flag: &str) -> anyhow::Result<std::time::SystemTime> {
    let ts = match s.parse::<jiff::Timestamp>() {
        Ok(ts) => ts,
        Err(_) => s
            .parse::<jiff::civil::DateTime>()
            .or_else(|e| {
                s.parse::<jiff::civil::Date>().map(|d| d.to_datetime(jiff::civil::Time::midnight())).map_err(|_| e)
            })
            .and_then(|dt| dt.to_zoned(time_zone()))
            .map(|z| z.timestamp())
            .map_err(|e| anyhow::anyhow!("{flag} {s:?} is not a time like \"2024-05-01 10:00:00\": {e}"))?,
    };
    Ok(std::time::SystemTime::from(ts))
}

/// An RFC 3339 time in UTC for JSON output, from seconds and nanoseconds since the epoch.
pub fn rfc3339(secs: i64, nanos: u32) -> String {
    match jiff::Timestamp::new(secs, nanos as i32) {
        Ok(ts) => ts.to_string(),
        Err(_) => secs.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_error_chain_says_each_cause_once() {
        let io = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        let inner = coffer_core::Error::io(std::path::Path::new("/x/f"), io);
        let err = anyhow::Error::new(inner).context("cannot back up /x");
        let text = super::chain_text(&err);
        assert_eq!(text.matches("permission denied").count() + text.matches("Permission denied").count(), 1, "{text}");
        assert!(text.starts_with("cannot back up /x: ") && text.contains("/x/f"), "{text}");
    }

    #[test]
    fn byte_units() {
        assert_eq!(super::bytes(10), "10 B");
        assert_eq!(super::bytes(1536), "1.50 KiB");
        assert_eq!(super::bytes(3 << 30), "3.00 GiB");
    }

    #[test]
    fn plurals_are_singular_for_one() {
        assert_eq!(super::plural(1usize, "file"), "1 file");
        assert_eq!(super::plural(0u64, "file"), "0 files");
        assert_eq!(super::plural(2, "index file"), "2 index files");
        assert_eq!(super::plural(3, "entry"), "3 entries");
        assert_eq!(super::plural(1, "entry"), "1 entry");
        assert_eq!(super::plural(2, "key"), "2 keys");
    }

    #[test]
    fn times_in_utc_and_unparsable_ones_as_stored() {
        super::set_utc(true);
        assert_eq!(super::time("2024-05-06T23:30:00.123456789Z"), "2024-05-06 23:30:00");
        assert_eq!(super::time("not a time"), "not a time");
    }
}
