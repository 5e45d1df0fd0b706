//! The stream between the input and the `tar` crate's parser. It follows the archive's
//! 512-byte block structure as the parser will see it, and checks each header before the
//! parser gets it: the size of PAX (`x`, `g`) and GNU long-name/long-link (`L`, `K`)
//! records against [`Limits::max_meta`] (the parser reads those whole into memory), and the
//! number of segments of an old GNU sparse header (`S`) with its extension blocks against
//! [`Limits::max_sparse_segments`] (the parser keeps one reader per segment). It also
//! remembers where the input ended or failed, so that the parser's errors can be told
//! apart: truncated archive, read error, malformed header.
//!
//! Where a header is malformed (bad checksum, a size that is not a number) the parser
//! refuses it too; the guard then stops checking and only passes bytes through.

use std::io::{self, Read};

use super::{Error, Limits, lossy};

const BLOCK: usize = 512;

/// Where the next byte handed to the parser lies.
enum Phase {
    /// At the start of a header block.
    Header,
    /// At an extension block of an old GNU sparse header; `data` bytes of content follow
    /// the last one.
    SparseExt { data: u64 },
    /// In an entry's content and its padding; `capture` bytes at its start are a PAX
    /// extended header the guard keeps, to learn a `size` record from it.
    Data { left: u64, capture: u64 },
    /// Out of step (the parser refuses what came): bytes pass through unchecked.
    Lost,
}

pub(super) struct Guard<R> {
    pub(super) input: R,
    limits: Limits,
    phase: Phase,
    block: [u8; BLOCK],
    block_len: usize,
    block_served: usize,
    /// Bytes handed to the parser so far.
    pub(super) pos: u64,
    /// Bytes read from the input so far.
    read_total: u64,
    /// The name in the last header seen, for messages.
    last_name: String,
    /// Offset of the last header seen (of an entry or of an extension record).
    pub(super) last_header: u64,
    /// Offset of the header of the last entry the parser will return (not an extension
    /// record), to check the guard keeps in step with it.
    pub(super) last_member: u64,
    /// The size a PAX `size` record of the preceding `x` header gives the next entry.
    pending_size: Option<u64>,
    pax: Vec<u8>,
    /// The records of the preceding `x` header, for the next entry.
    pending_pax: Option<Vec<u8>>,
    /// The records of the `x` header of the entry at `last_member`, as the parser reads
    /// them (the reader parses them again itself).
    pub(super) member_pax: Option<Vec<u8>>,
    /// The input ended inside an entry's content (or its padding), not in a header.
    pub(super) eof_in_data: bool,
    sparse_segments: usize,
    /// Set when the input ended: its length.
    pub(super) eof_at: Option<u64>,
    /// An all-zero block was read where a header belongs: the end-of-archive marker.
    pub(super) end_marker: bool,
    /// What the guard refused or the input's read error, for the caller to report in place
    /// of the parser's message.
    pub(super) fault: Option<Error>,
}

impl<R: Read> Guard<R> {
    pub(super) fn new(input: R, limits: &Limits) -> Self {
        Guard {
            input,
            limits: limits.clone(),
            phase: Phase::Header,
            block: [0; BLOCK],
            block_len: 0,
            block_served: 0,
            pos: 0,
            read_total: 0,
            last_name: String::new(),
            last_header: 0,
            last_member: 0,
            pending_size: None,
            pax: Vec::new(),
            pending_pax: None,
            member_pax: None,
            eof_in_data: false,
            sparse_segments: 0,
            eof_at: None,
            end_marker: false,
            fault: None,
        }
    }

    fn fail(&mut self, e: Error) -> io::Error {
        let msg = e.to_string();
        self.fault = Some(e);
        self.phase = Phase::Lost;
        io::Error::other(msg)
    }

    /// Reads from the input, noting its end and its errors.
    fn read_input(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.input.read(buf) {
                Ok(0) if !buf.is_empty() => {
                    self.eof_at.get_or_insert(self.read_total);
                    return Ok(0);
                }
                Ok(n) => {
                    self.read_total += n as u64;
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    let offset = self.read_total;
                    return Err(self.fail(Error::Io { offset: Some(offset), source: e }));
                }
            }
        }
    }

    /// Fills `block` with the next block of the input; false at the input's end.
    fn fill_block(&mut self) -> io::Result<bool> {
        self.block_len = 0;
        self.block_served = 0;
        while self.block_len < BLOCK {
            let mut tmp = [0u8; BLOCK];
            let want = BLOCK - self.block_len;
            let n = self.read_input(&mut tmp[..want])?;
            if n == 0 {
                break;
            }
            self.block[self.block_len..self.block_len + n].copy_from_slice(&tmp[..n]);
            self.block_len += n;
        }
        Ok(self.block_len == BLOCK)
    }

    /// Checks a complete header block and sets what follows it.
    fn inspect_header(&mut self) -> io::Result<()> {
        let at = self.pos;
        self.last_header = at;
        if self.block.iter().all(|b| *b == 0) {
            self.end_marker = true;
            self.phase = Phase::Header;
            return Ok(());
        }
        let mut header = tar::Header::new_old();
        header.as_mut_bytes().copy_from_slice(&self.block);
        let name = lossy(&header.path_bytes());
        self.last_name = name.clone();
        let computed: u32 =
            self.block[..148].iter().chain(&self.block[156..]).map(|b| u32::from(*b)).sum::<u32>() + 8 * 32;
        match header.cksum() {
            Ok(stored) if stored == computed => {}
            Ok(stored) => {
                let reason =
                    format!("checksum mismatch (stored {stored}, computed {computed}): damaged, or not a tar archive");
                return Err(self.fail(Error::Header { offset: at, reason }));
            }
            Err(_) => {
                let reason = "the checksum field is not a number: damaged, or not a tar archive".to_string();
                return Err(self.fail(Error::Header { offset: at, reason }));
            }
        }
        let Ok(header_size) = header.entry_size() else {
            let reason = format!("entry `{name}`: the size field is not a number");
            return Err(self.fail(Error::Header { offset: at, reason }));
        };
        let ty = self.block[156];
        let recognized = header.as_gnu().is_some() || header.as_ustar().is_some();
        let extension = matches!(ty, b'x' | b'g' | b'L' | b'K');
        if extension && header_size > self.limits.max_meta {
            let what = match ty {
                b'x' => "PAX extended header",
                b'g' => "PAX global header",
                b'L' => "GNU long name",
                _ => "GNU long link name",
            };
            return Err(self.fail(Error::TooLarge {
                entry: name,
                offset: at,
                what,
                size: header_size,
                limit: self.limits.max_meta,
            }));
        }
        let consumed = recognized && matches!(ty, b'x' | b'L' | b'K');
        let size = if extension { header_size } else { self.pending_size.unwrap_or(header_size) };
        if !consumed {
            // The parser returns this header as an entry, with any preceding PAX header.
            self.pending_size = None;
            self.member_pax = self.pending_pax.take();
            self.last_member = at;
        }
        let capture = if recognized && ty == b'x' {
            self.pax.clear();
            header_size
        } else {
            0
        };
        let Some(padded) = size.checked_add(BLOCK as u64 - 1).map(|s| s & !(BLOCK as u64 - 1)) else {
            self.phase = Phase::Lost;
            return Ok(());
        };
        if !extension && ty == b'S' {
            if header.as_gnu().is_none() {
                self.phase = Phase::Lost;
                return Ok(());
            }
            self.sparse_segments = 0;
            self.count_sparse(386, 4)?;
            if self.block[482] == 1 {
                self.phase = Phase::SparseExt { data: padded };
                return Ok(());
            }
        }
        self.phase = Phase::Data { left: padded, capture };
        Ok(())
    }

    /// Counts the segments of `n` sparse descriptors from `start` in `block`.
    fn count_sparse(&mut self, start: usize, n: usize) -> io::Result<()> {
        for i in 0..n {
            let d = start + i * 24;
            // As the parser reads them: a descriptor whose offset or length field opens
            // with a NUL is unused.
            if self.block[d] != 0 && self.block[d + 12] != 0 {
                self.sparse_segments += 1;
            }
        }
        if self.sparse_segments > self.limits.max_sparse_segments {
            return Err(self.fail(Error::SparseMap {
                entry: self.last_name.clone(),
                reason: format!(
                    "more than the {} segments accepted in an old GNU sparse header",
                    self.limits.max_sparse_segments
                ),
            }));
        }
        Ok(())
    }

    /// Called when the captured PAX header is complete: its `size` record, read the way
    /// the parser reads it (the first `size` record; none past a malformed record).
    fn end_capture(&mut self) {
        let mut size = None;
        for rec in tar::PaxExtensions::new(&self.pax) {
            let Ok(rec) = rec else { break };
            if rec.key_bytes() == b"size" {
                size = rec.value().ok().and_then(|v| v.parse::<u64>().ok());
                break;
            }
        }
        self.pending_size = size;
        self.pending_pax = Some(std::mem::take(&mut self.pax));
    }
}

impl<R: Read> Read for Guard<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            if self.block_served < self.block_len {
                let n = buf.len().min(self.block_len - self.block_served);
                buf[..n].copy_from_slice(&self.block[self.block_served..self.block_served + n]);
                self.block_served += n;
                self.pos += n as u64;
                return Ok(n);
            }
            match self.phase {
                Phase::Header | Phase::SparseExt { .. } => {
                    let full = self.fill_block()?;
                    if self.block_len == 0 {
                        return Ok(0);
                    }
                    if !full {
                        // A partial block: hand it on; the parser reports it short.
                        self.phase = Phase::Lost;
                        continue;
                    }
                    if let Phase::SparseExt { data } = self.phase {
                        self.count_sparse(0, 21)?;
                        self.phase = if self.block[504] == 1 {
                            Phase::SparseExt { data }
                        } else {
                            Phase::Data { left: data, capture: 0 }
                        };
                    } else {
                        self.inspect_header()?;
                    }
                }
                Phase::Data { left: 0, .. } => self.phase = Phase::Header,
                Phase::Data { left, capture } => {
                    let want = (buf.len() as u64).min(left) as usize;
                    let n = self.read_input(&mut buf[..want])?;
                    if n == 0 {
                        self.eof_in_data = true;
                        return Ok(0);
                    }
                    self.pos += n as u64;
                    let keep = (n as u64).min(capture);
                    if keep > 0 {
                        self.pax.extend_from_slice(&buf[..keep as usize]);
                        if keep == capture {
                            self.end_capture();
                        }
                    }
                    self.phase = Phase::Data { left: left - n as u64, capture: capture - keep };
                    return Ok(n);
                }
                Phase::Lost => {
                    let n = self.read_input(buf)?;
                    self.pos += n as u64;
                    return Ok(n);
                }
            }
        }
    }
}
