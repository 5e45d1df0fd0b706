//! GNU tar's PAX sparse formats, which the `tar` crate does not read: the map of a sparse
//! file's data segments and the reader that puts the holes back as zeros.
//!
//! - 0.0: repeated `GNU.sparse.offset` / `GNU.sparse.numbytes` records, in order.
//! - 0.1: one `GNU.sparse.map` record, `offset,length,offset,length,...`.
//! - 1.0 (`GNU.sparse.major=1`, `GNU.sparse.minor=0`): the map is at the start of the
//!   entry's data, as decimal numbers one a line (the count, then offset and length of each
//!   segment), padded with NULs to a 512-byte boundary.
//!
//! In each, the entry's stored data is the segments' bytes one after the other, and the
//! real size is a record (`GNU.sparse.size`, or `GNU.sparse.realsize` in 1.0).

use std::io::{self, Read};

use super::pax::parse_u64;

/// One data segment of a sparse file: its offset in the file and its length.
pub(super) type Segment = (u64, u64);

/// The segments of a 0.1 map, `offset,length,...`.
pub(super) fn parse_map_01(map: &[u8], max: usize) -> Result<Vec<Segment>, String> {
    let mut nums = map.split(|b| *b == b',');
    let mut out = Vec::new();
    if map.is_empty() {
        return Ok(out);
    }
    while let Some(off) = nums.next() {
        let Some(len) = nums.next() else {
            return Err("GNU.sparse.map holds an odd count of numbers".into());
        };
        let (Some(off), Some(len)) = (parse_u64(off), parse_u64(len)) else {
            return Err("GNU.sparse.map holds something other than decimal numbers".into());
        };
        if out.len() == max {
            return Err(format!("more than the {max} segments accepted"));
        }
        out.push((off, len));
    }
    Ok(out)
}

/// What reading a 1.0 map can fail with.
pub(super) enum MapError {
    /// The content reader failed (the archive is truncated, or the input failed).
    Io(io::Error),
    Bad(String),
}

/// Reads the map at the start of a 1.0 sparse entry's data (`stored` bytes in all); returns
/// the segments and the bytes the map took, a multiple of 512.
pub(super) fn read_map_10(r: &mut dyn Read, stored: u64, max: usize) -> Result<(Vec<Segment>, u64), MapError> {
    let mut block = [0u8; 512];
    let mut used: u64 = 0;
    let mut in_block = 512;
    let mut next_number = |r: &mut dyn Read| -> Result<u64, MapError> {
        let mut digits = 0;
        let mut n: u64 = 0;
        loop {
            if in_block == 512 {
                if used + 512 > stored {
                    return Err(MapError::Bad("the map runs past the entry's data".into()));
                }
                r.read_exact(&mut block).map_err(MapError::Io)?;
                used += 512;
                in_block = 0;
            }
            let b = block[in_block];
            in_block += 1;
            match b {
                b'0'..=b'9' if digits < 20 => {
                    digits += 1;
                    n = n
                        .checked_mul(10)
                        .and_then(|n| n.checked_add(u64::from(b - b'0')))
                        .ok_or_else(|| MapError::Bad("a number of the map is too large".into()))?;
                }
                b'\n' if digits > 0 => return Ok(n),
                _ => return Err(MapError::Bad("the map holds something other than decimal lines".into())),
            }
        }
    };
    let count = next_number(r)?;
    if count > max as u64 {
        return Err(MapError::Bad(format!("the map states {count} segments, more than the {max} accepted")));
    }
    let mut segs = Vec::new();
    for _ in 0..count {
        let off = next_number(r)?;
        let len = next_number(r)?;
        segs.push((off, len));
    }
    Ok((segs, used))
}

/// Checks that the segments lie in order, without overlap, within `real_size`, and that
/// their lengths add up to `stored`, the data bytes the archive holds for them.
pub(super) fn validate(segs: &[Segment], real_size: u64, stored: u64) -> Result<(), String> {
    let mut end: u64 = 0;
    let mut sum: u64 = 0;
    for (i, &(off, len)) in segs.iter().enumerate() {
        if off < end {
            return Err(format!("segment {i} at offset {off} starts before the previous one ends ({end})"));
        }
        end = off.checked_add(len).filter(|e| *e <= real_size).ok_or_else(|| {
            format!("segment {i} (offset {off}, {len} bytes) ends past the file's real size {real_size}")
        })?;
        sum = sum.checked_add(len).ok_or_else(|| "the segments' lengths overflow".to_string())?;
    }
    if sum != stored {
        return Err(format!("the segments hold {sum} bytes but the archive stores {stored}"));
    }
    Ok(())
}

/// A sparse file's content: zeros where the map has holes, the stored bytes (read from
/// `inner`, which yields exactly the segments' bytes or an error) where it has segments.
pub(super) struct Holes<'a> {
    pub(super) inner: &'a mut dyn Read,
    pub(super) segs: Vec<Segment>,
    pub(super) next: usize,
    pub(super) pos: u64,
    pub(super) real_size: u64,
}

impl Read for Holes<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while let Some(&(off, len)) = self.segs.get(self.next) {
            if self.pos >= off + len {
                self.next += 1;
                continue;
            }
            if self.pos < off {
                let n = (buf.len() as u64).min(off - self.pos) as usize;
                buf[..n].fill(0);
                self.pos += n as u64;
                return Ok(n);
            }
            let want = (buf.len() as u64).min(off + len - self.pos) as usize;
            let n = self.inner.read(&mut buf[..want])?;
            if n == 0 && want > 0 {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "sparse file's data ends early"));
            }
            self.pos += n as u64;
            return Ok(n);
        }
        let n = (buf.len() as u64).min(self.real_size - self.pos) as usize;
        buf[..n].fill(0);
        self.pos += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_01() {
        assert_eq!(parse_map_01(b"0,5,100,7", 10).unwrap(), vec![(0, 5), (100, 7)]);
        assert!(parse_map_01(b"0,5,100", 10).is_err());
        assert!(parse_map_01(b"0,5,1,1", 1).is_err());
        assert!(parse_map_01(b"0,x", 10).is_err());
        assert_eq!(parse_map_01(b"", 10).unwrap(), vec![]);
    }

    #[test]
    fn map_10() {
        let mut data = b"2\n0\n3\n10\n2\n".to_vec();
        data.resize(512, 0);
        data.extend_from_slice(b"abcde");
        let (segs, used) = match read_map_10(&mut &data[..], data.len() as u64, 10) {
            Ok(x) => x,
            Err(_) => panic!("map refused"),
        };
        assert_eq!((segs, used), (vec![(0, 3), (10, 2)], 512));
        let mut many = b"99999\n".to_vec();
        many.resize(512, 0);
        assert!(matches!(read_map_10(&mut &many[..], 512, 10), Err(MapError::Bad(_))));
        let mut junk = b"1\n0\nx\n".to_vec();
        junk.resize(512, 0);
        assert!(matches!(read_map_10(&mut &junk[..], 512, 10), Err(MapError::Bad(_))));
        assert!(matches!(read_map_10(&mut &data[..], 100, 10), Err(MapError::Bad(_))));
        assert!(matches!(read_map_10(&mut &data[..20], 512, 10), Err(MapError::Io(_))));
    }

    #[test]
    fn validation() {
        assert!(validate(&[(0, 3), (10, 2)], 12, 5).is_ok());
        assert!(validate(&[(0, 3), (2, 2)], 12, 5).is_err());
        assert!(validate(&[(0, 3), (10, 2)], 11, 5).is_err());
        assert!(validate(&[(0, 3), (10, 2)], 12, 6).is_err());
        assert!(validate(&[(u64::MAX, 2)], u64::MAX, 2).is_err());
    }

    #[test]
    fn holes_read_as_zeros() {
        let data = b"abcde";
        let mut inner = &data[..];
        let mut h = Holes { inner: &mut inner, segs: vec![(2, 3), (7, 2)], next: 0, pos: 0, real_size: 12 };
        let mut out = Vec::new();
        h.read_to_end(&mut out).unwrap();
        assert_eq!(out, b"\0\0abc\0\0de\0\0\0");
    }
}
