//! Bytes and times as borg prints them: the lone-surrogate pre-pass over borg's JSON, the
//! decoding of borg's byte strings, and borg's ISO 8601 times.
//!
//! borg (a Python program) holds file names, archive names and command lines as `str`
//! with "surrogate escapes": a byte that is not UTF-8 becomes the lone surrogate
//! U+DC80..U+DCFF, which Python's `json.dumps` writes as `\udcXX`. JSON parsers (serde_json
//! among them) refuse lone surrogates, so [`Prepass`] rewrites the byte stream before
//! serde_json sees it:
//!
//! * `\udcXX` (XX in 80..ff, not the second half of a surrogate pair) becomes
//!   `\u0000\u00XX`: NUL then the character U+00XX;
//! * `\u0000` (a real NUL: JSON cannot hold a raw one) becomes `\u0000\u0000`.
//!
//! In a string parsed from the rewritten stream NUL is therefore an escape character, and
//! [`text_bytes`] maps `NUL NUL` back to the byte 0 and `NUL U+00XX` to the raw byte XX.
//! Everything else in the stream passes unchanged.

use std::cell::Cell;
use std::io::{self, Read};
use std::rc::Rc;

/// How far the parser has read in the rewritten stream, and how far it may read: the
/// parsers move `limit` to bound what one item (or one piece of metadata) may take, before
/// serde_json allocates anything for it.
#[derive(Debug)]
pub(crate) struct Meter {
    pub(crate) pos: Cell<u64>,
    pub(crate) limit: Cell<u64>,
    /// Set when a read was refused because `limit` was reached.
    pub(crate) tripped: Cell<bool>,
}

impl Meter {
    pub(crate) fn new() -> Rc<Meter> {
        Rc::new(Meter { pos: Cell::new(0), limit: Cell::new(u64::MAX), tripped: Cell::new(false) })
    }

    /// Allow `bytes` more from the current position on.
    pub(crate) fn allow(&self, bytes: u64) {
        self.limit.set(self.pos.get().saturating_add(bytes));
    }
}

#[derive(Clone, Copy)]
enum Esc {
    Plain,
    Backslash,
    /// `\u` and `n` hex digits of value `v`.
    U {
        n: u8,
        v: u16,
    },
}

/// The rewriting reader (see the module doc), metered by a [`Meter`].
pub(crate) struct Prepass<R> {
    inner: R,
    inbuf: Box<[u8]>,
    out: Vec<u8>,
    out_pos: usize,
    state: Esc,
    prev_high: bool,
    eof: bool,
    meter: Rc<Meter>,
}

impl<R: Read> Prepass<R> {
    pub(crate) fn new(inner: R, meter: Rc<Meter>) -> Self {
        Prepass {
            inner,
            inbuf: vec![0; 64 * 1024].into_boxed_slice(),
            out: Vec::with_capacity(80 * 1024),
            out_pos: 0,
            state: Esc::Plain,
            prev_high: false,
            eof: false,
            meter,
        }
    }

    fn emit_escape(&mut self, v: u16) {
        let low = (0xdc00..=0xdfff).contains(&v);
        if self.prev_high && low {
            push_escape(&mut self.out, v);
            self.prev_high = false;
        } else if (0xdc80..=0xdcff).contains(&v) {
            push_escape(&mut self.out, 0);
            push_escape(&mut self.out, v & 0xff);
            self.prev_high = false;
        } else if v == 0 {
            push_escape(&mut self.out, 0);
            push_escape(&mut self.out, 0);
            self.prev_high = false;
        } else {
            push_escape(&mut self.out, v);
            self.prev_high = (0xd800..=0xdbff).contains(&v);
        }
    }

    /// Writes what an unfinished escape held, as it was (the JSON parser then refuses it).
    fn flush_partial(&mut self) {
        match self.state {
            Esc::Plain => {}
            Esc::Backslash => self.out.push(b'\\'),
            Esc::U { n, v } => {
                self.out.extend_from_slice(b"\\u");
                for i in (0..n).rev() {
                    let d = ((v >> (4 * i)) & 0xf) as u8;
                    self.out.push(HEX[d as usize]);
                }
            }
        }
        self.state = Esc::Plain;
        self.prev_high = false;
    }

    fn process(&mut self, b: u8) {
        match self.state {
            Esc::Plain => {
                if b == b'\\' {
                    self.state = Esc::Backslash;
                } else {
                    self.out.push(b);
                    self.prev_high = false;
                }
            }
            Esc::Backslash => {
                if b == b'u' {
                    self.state = Esc::U { n: 0, v: 0 };
                } else {
                    self.out.push(b'\\');
                    self.out.push(b);
                    self.state = Esc::Plain;
                    self.prev_high = false;
                }
            }
            Esc::U { n, v } => match (b as char).to_digit(16) {
                Some(d) => {
                    let v = (v << 4) | d as u16;
                    if n == 3 {
                        self.state = Esc::Plain;
                        self.emit_escape(v);
                    } else {
                        self.state = Esc::U { n: n + 1, v };
                    }
                }
                None => {
                    self.flush_partial();
                    self.process(b);
                }
            },
        }
    }

    fn fill(&mut self) -> io::Result<()> {
        self.out.clear();
        self.out_pos = 0;
        while self.out.is_empty() && !self.eof {
            let n = match self.inner.read(&mut self.inbuf) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if n == 0 {
                self.eof = true;
                self.flush_partial();
                break;
            }
            for i in 0..n {
                let b = self.inbuf[i];
                // The common case: plain bytes outside an escape.
                if matches!(self.state, Esc::Plain) && b != b'\\' {
                    self.out.push(b);
                    self.prev_high = false;
                } else {
                    self.process(b);
                }
            }
        }
        Ok(())
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

fn push_escape(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(b"\\u");
    for i in (0..4).rev() {
        out.push(HEX[((v >> (4 * i)) & 0xf) as usize]);
    }
}

/// The message of the I/O error a metered read gives when its limit is reached.
pub(crate) const OVER_LIMIT: &str = "coffer-import: borg reader size limit reached";

impl<R: Read> Read for Prepass<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if self.out_pos == self.out.len() {
            self.fill()?;
            if self.out.is_empty() {
                return Ok(0);
            }
        }
        let pos = self.meter.pos.get();
        let limit = self.meter.limit.get();
        if pos >= limit {
            self.meter.tripped.set(true);
            return Err(io::Error::other(OVER_LIMIT));
        }
        let avail = self.out.len() - self.out_pos;
        let n = buf.len().min(avail).min(usize::try_from(limit - pos).unwrap_or(usize::MAX));
        buf[..n].copy_from_slice(&self.out[self.out_pos..self.out_pos + n]);
        self.out_pos += n;
        self.meter.pos.set(pos + n as u64);
        Ok(n)
    }
}

/// The bytes of a string parsed from the rewritten stream (see the module doc).
pub(crate) fn text_bytes(s: &str) -> Result<Vec<u8>, &'static str> {
    if !s.contains('\0') {
        return Ok(s.as_bytes().to_vec());
    }
    let mut out = Vec::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\0' {
            match chars.next() {
                Some('\0') => out.push(0),
                Some(e) if ('\u{80}'..='\u{ff}').contains(&e) => out.push(e as u32 as u8),
                _ => return Err("a NUL character that is not part of borg's text"),
            }
        } else {
            let mut b = [0; 4];
            out.extend_from_slice(c.encode_utf8(&mut b).as_bytes());
        }
    }
    Ok(out)
}

/// A byte string as borg's dump writes it: the text itself when the bytes are UTF-8 and do
/// not start with 0x7f, else U+007F followed by the bytes in hex.
pub(crate) fn borg_bytes(s: &str) -> Result<Vec<u8>, String> {
    match s.strip_prefix('\u{7f}') {
        Some(h) => hex::decode(h).map_err(|e| format!("bad hex after the 0x7f marker: {e}")),
        None => text_bytes(s).map_err(str::to_string),
    }
}

/// A point in time: seconds since 1970-01-01 00:00:00 UTC and nanoseconds within it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct BorgTime {
    /// Whole seconds since the epoch (negative before 1970).
    pub secs: i64,
    /// 0..1_000_000_000.
    pub nanos: u32,
}

impl BorgTime {
    /// Integer nanoseconds since the epoch, as borg keeps file times.
    pub fn from_nanos(ns: i64) -> BorgTime {
        BorgTime { secs: ns.div_euclid(1_000_000_000), nanos: ns.rem_euclid(1_000_000_000) as u32 }
    }

    /// Nanoseconds since the epoch; `None` outside the years 1678..2262.
    pub fn as_nanos(&self) -> Option<i64> {
        self.secs.checked_mul(1_000_000_000)?.checked_add(self.nanos as i64)
    }
}

fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn digits(s: &[u8]) -> Option<i64> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(s).ok()?.parse().ok()
}

/// Parses borg's `YYYY-MM-DDTHH:MM:SS[.ffffff]`, read as UTC; a trailing `Z` or `±HH:MM`
/// offset (which borg 1.2 does not print) is applied when present.
pub fn parse_time(s: &str) -> Option<BorgTime> {
    let b = s.as_bytes();
    if b.len() < 19 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (y, mo, d) = (digits(&b[0..4])?, digits(&b[5..7])?, digits(&b[8..10])?);
    let (h, mi, se) = (digits(&b[11..13])?, digits(&b[14..16])?, digits(&b[17..19])?);
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let mdays = [31, if leap { 29 } else { 28 }, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    if !(1..=12).contains(&mo) || d < 1 || d > mdays[(mo - 1) as usize] {
        return None;
    }
    if h > 23 || mi > 59 || se > 60 {
        return None;
    }
    let mut rest = &b[19..];
    let mut nanos: u32 = 0;
    if let Some(frac) = rest.strip_prefix(b".") {
        let n = frac.iter().take_while(|c| c.is_ascii_digit()).count();
        if n == 0 || n > 9 {
            return None;
        }
        let mut v = digits(&frac[..n])? as u32;
        for _ in n..9 {
            v *= 10;
        }
        nanos = v;
        rest = &frac[n..];
    }
    let offset = match rest {
        b"" | b"Z" => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let oh = digits(&[*h1, *h2])?;
            let om = digits(&[*m1, *m2])?;
            if oh > 23 || om > 59 {
                return None;
            }
            let o = oh * 3600 + om * 60;
            if *sign == b'-' { -o } else { o }
        }
        _ => return None,
    };
    let secs = days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + se - offset;
    Some(BorgTime { secs, nanos })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewrite(input: &[u8]) -> Vec<u8> {
        // Read in awkward pieces so escapes straddle the buffer's edges.
        struct Dribble<'a>(&'a [u8]);
        impl Read for Dribble<'_> {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                let n = buf.len().min(self.0.len()).min(3);
                buf[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let mut out = Vec::new();
        Prepass::new(Dribble(input), Meter::new()).read_to_end(&mut out).unwrap();
        out
    }

    #[test]
    fn lone_surrogates_become_markers() {
        let out = rewrite(br#"["caf\udce9", "\u0000x", "\ud83d\udc80", "\\udcff", "a\"b"]"#);
        let v: Vec<String> = serde_json::from_slice(&out).unwrap();
        assert_eq!(text_bytes(&v[0]).unwrap(), b"caf\xe9");
        assert_eq!(text_bytes(&v[1]).unwrap(), b"\0x");
        assert_eq!(v[2], "\u{1f480}");
        assert_eq!(text_bytes(&v[2]).unwrap(), "\u{1f480}".as_bytes());
        assert_eq!(v[3], "\\udcff");
        assert_eq!(v[4], "a\"b");
    }

    #[test]
    fn unfinished_escapes_pass_through() {
        assert_eq!(rewrite(b"\"\\u12"), b"\"\\u12");
        assert_eq!(rewrite(b"\"\\"), b"\"\\");
        assert_eq!(rewrite(b"\"\\u12x\""), b"\"\\u12x\"");
    }

    #[test]
    fn meter_refuses_past_its_limit() {
        let meter = Meter::new();
        meter.allow(4);
        let mut p = Prepass::new(&b"0123456789"[..], meter.clone());
        let mut out = Vec::new();
        assert!(p.read_to_end(&mut out).is_err());
        assert_eq!(out, b"0123");
        assert!(meter.tripped.get());
    }

    #[test]
    fn borg_bytes_decodes_both_forms() {
        assert_eq!(borg_bytes("hi").unwrap(), b"hi");
        assert_eq!(borg_bytes("\u{7f}ff007f").unwrap(), b"\xff\x00\x7f");
        assert_eq!(borg_bytes("\u{7f}").unwrap(), b"");
        assert!(borg_bytes("\u{7f}abc").is_err());
        assert!(borg_bytes("\u{7f}zz").is_err());
        assert!(borg_bytes("a\0b").is_err());
    }

    #[test]
    fn times() {
        let t = parse_time("2026-12-02T04:17:03.000000").unwrap();
        assert_eq!(t, BorgTime { secs: 1_796_185_023, nanos: 0 });
        let t = parse_time("1970-01-01T00:00:00.5").unwrap();
        assert_eq!(t, BorgTime { secs: 0, nanos: 500_000_000 });
        let t = parse_time("1969-12-31T23:59:59.123456789").unwrap();
        assert_eq!(t, BorgTime { secs: -1, nanos: 123_456_789 });
        let t = parse_time("2000-02-29T01:00:00+01:00").unwrap();
        assert_eq!(t.secs, 951_782_400);
        assert_eq!(parse_time("2024-02-29T00:00:00Z").unwrap().secs, 1_709_164_800);
        for bad in [
            "",
            "2023-02-29T00:00:00",
            "2023-13-01T00:00:00",
            "2023-01-01T24:00:00",
            "2023-01-01T00:00:00.",
            "2023-01-01T00:00:00.1234567890",
            "2023-01-01T00:00:00+1",
            "+023-01-01T00:00:00",
            "2023-01-01T00:00:00 junk",
        ] {
            assert_eq!(parse_time(bad), None, "{bad}");
        }
        assert_eq!(BorgTime::from_nanos(-1), BorgTime { secs: -1, nanos: 999_999_999 });
        assert_eq!(BorgTime::from_nanos(-1).as_nanos(), Some(-1));
    }
}
