//! PAX extended header records, the numbers and times of tar headers, and extended
//! attributes.
//!
//! The records are parsed here by their length prefix, so that a value may hold any byte,
//! a newline included (GNU tar writes extended attributes' values and, with
//! `hdrcharset=BINARY`, names as raw bytes).

use base64::Engine;

use super::Time;

/// The records of one PAX header, in archive order.
pub(super) type Records = Vec<(Vec<u8>, Vec<u8>)>;

/// An extended attribute: name and value.
pub(super) type Xattr = (Vec<u8>, Vec<u8>);

/// Parses the records `<length> <key>=<value>\n` of a PAX header.
pub(super) fn parse_records(data: &[u8]) -> Result<Records, String> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < data.len() {
        let rest = &data[at..];
        // GNU tar and others pad nothing after the last record; a run of NULs is taken as
        // padding all the same.
        if rest.iter().all(|b| *b == 0) {
            break;
        }
        let Some(space) = rest.iter().take(21).position(|b| *b == b' ') else {
            return Err(format!("malformed PAX record at byte {at} of the header: no length"));
        };
        let len = std::str::from_utf8(&rest[..space])
            .ok()
            .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|s| s.parse::<usize>().ok())
            .ok_or_else(|| format!("malformed PAX record at byte {at} of the header: bad length"))?;
        if len <= space + 1 || len > rest.len() || rest[len - 1] != b'\n' {
            return Err(format!("malformed PAX record at byte {at} of the header: length {len} does not fit"));
        }
        let kv = &rest[space + 1..len - 1];
        let Some(eq) = kv.iter().position(|b| *b == b'=') else {
            return Err(format!("malformed PAX record at byte {at} of the header: no '='"));
        };
        out.push((kv[..eq].to_vec(), kv[eq + 1..].to_vec()));
        at += len;
    }
    Ok(out)
}

/// A decimal number of a PAX record.
pub(super) fn parse_u64(v: &[u8]) -> Option<u64> {
    if v.is_empty() || v.len() > 20 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(v).ok()?.parse().ok()
}

/// A PAX time: decimal seconds since the epoch, maybe negative, maybe with a fraction
/// (`-1.5` is half a second before `-1`, i.e. `secs: -2, nanos: 500_000_000`).
pub(super) fn parse_time(v: &[u8]) -> Option<Time> {
    let (neg, v) = match v.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, v),
    };
    let (int, frac) = match v.iter().position(|b| *b == b'.') {
        Some(dot) => (&v[..dot], Some(&v[dot + 1..])),
        None => (v, None),
    };
    let secs = parse_u64(int)?;
    let mut nanos: u32 = 0;
    if let Some(frac) = frac {
        if !frac.iter().all(u8::is_ascii_digit) {
            return None;
        }
        for i in 0..9 {
            nanos = nanos * 10 + frac.get(i).map_or(0, |d| u32::from(d - b'0'));
        }
    }
    let secs = i64::try_from(secs).ok()?;
    if !neg {
        return Some(Time { secs, nanos });
    }
    if nanos == 0 {
        Some(Time { secs: -secs, nanos })
    } else {
        Some(Time { secs: -secs - 1, nanos: 1_000_000_000 - nanos })
    }
}

/// A numeric header field: octal digits (space or NUL padded), or base-256 (the high bit
/// of the first byte set; `0xff` opens a negative number), as GNU tar writes numbers that
/// do not fit in octal. A field of only NULs and spaces, as some writers leave fields they
/// have no value for, is 0.
pub(super) fn header_number(field: &[u8]) -> Option<i64> {
    let first = *field.first()?;
    if field.iter().all(|b| *b == 0 || *b == b' ') {
        return Some(0);
    }
    if first & 0x80 != 0 {
        let mut acc: i128 = if first == 0xff { -1 } else { i128::from(first & 0x7f) };
        for b in &field[1..] {
            acc = acc.checked_mul(256)? + i128::from(*b);
        }
        return i64::try_from(acc).ok();
    }
    let s: Vec<u8> = field.iter().copied().skip_while(|b| *b == b' ').take_while(|b| *b != 0 && *b != b' ').collect();
    if s.is_empty() || !s.iter().all(|b| (b'0'..=b'7').contains(b)) {
        return None;
    }
    i64::from_str_radix(std::str::from_utf8(&s).ok()?, 8).ok()
}

/// The extended attribute a record holds, if it holds one: `SCHILY.xattr.NAME` with the
/// raw value, or `LIBARCHIVE.xattr.NAME` with the name URL-encoded and the value base64.
pub(super) fn xattr(key: &[u8], value: &[u8]) -> Option<Result<Xattr, String>> {
    if let Some(name) = key.strip_prefix(b"SCHILY.xattr.") {
        return Some(Ok((name.to_vec(), value.to_vec())));
    }
    let name = key.strip_prefix(b"LIBARCHIVE.xattr.")?;
    let Some(name) = percent_decode(name) else {
        return Some(Err(format!("record {} has a malformed %-escape", lossy_key(key))));
    };
    let engine = base64::engine::GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
    );
    match engine.decode(value) {
        Ok(v) => Some(Ok((name, v))),
        Err(e) => Some(Err(format!("record {}: the value is not base64 ({e})", lossy_key(key)))),
    }
}

fn lossy_key(key: &[u8]) -> String {
    String::from_utf8_lossy(key).into_owned()
}

fn percent_decode(s: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(s[i]);
            i += 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_hold_newlines() {
        let r = parse_records(b"20 SCHILY.xattr.a=\n\n12 path=a b\n").unwrap();
        assert_eq!(r, vec![(b"SCHILY.xattr.a".to_vec(), b"\n".to_vec()), (b"path".to_vec(), b"a b".to_vec())]);
        assert!(parse_records(b"99 path=a\n").is_err());
        assert!(parse_records(b"x path=a\n").is_err());
        assert!(parse_records(b"5 a=\n").is_ok());
        assert!(parse_records(b"4 a\n").is_err());
    }

    #[test]
    fn times() {
        assert_eq!(parse_time(b"12.5"), Some(Time { secs: 12, nanos: 500_000_000 }));
        assert_eq!(parse_time(b"-1.5"), Some(Time { secs: -2, nanos: 500_000_000 }));
        assert_eq!(parse_time(b"-3"), Some(Time { secs: -3, nanos: 0 }));
        assert_eq!(parse_time(b"1.1234567891"), Some(Time { secs: 1, nanos: 123_456_789 }));
        assert_eq!(parse_time(b"1.x"), None);
        assert_eq!(parse_time(b""), None);
        assert_eq!(parse_time(b"99999999999999999999"), None);
    }

    #[test]
    fn numbers() {
        assert_eq!(header_number(b"0000644\0"), Some(0o644));
        assert_eq!(header_number(b"  1234 \0"), Some(0o1234));
        assert_eq!(header_number(&[0x80, 0, 0, 0, 0, 0, 1, 0]), Some(256));
        assert_eq!(header_number(&[0xff; 12]), Some(-1));
        assert_eq!(header_number(b"\0\0\0"), Some(0));
        assert_eq!(header_number(b"1\08"), Some(1));
        assert_eq!(header_number(b" 9"), None);
        assert_eq!(header_number(b"12x"), None);
    }

    #[test]
    fn libarchive_xattr() {
        let (n, v) = xattr(b"LIBARCHIVE.xattr.user.a%3Db", b"AAE=").unwrap().unwrap();
        assert_eq!((n, v), (b"user.a=b".to_vec(), vec![0, 1]));
        assert!(xattr(b"LIBARCHIVE.xattr.user.%zz", b"").unwrap().is_err());
        assert!(xattr(b"path", b"").is_none());
    }
}
