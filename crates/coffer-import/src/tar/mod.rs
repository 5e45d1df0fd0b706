//! A streaming reader of tar archives, for `coffer import-tar` and for `coffer import borg:`
//! (which reads `borg export-tar`'s output). It owns turning each member of an archive
//! into a neutral [`Entry`] holding all the metadata the archive records, with a reader of
//! its content; what becomes of the entries is the importer's business. See
//! docs/design.md#import.
//!
//! Formats read: ustar, GNU (long names and link names `L`/`K`, base-256 numbers, old
//! sparse files `S`, `atime`/`ctime` fields) and PAX (local `x` and global `g` headers,
//! fractional times, `uid`/`gid`/`uname`/`gname`/`path`/`linkpath`/`size`, extended
//! attributes as `SCHILY.xattr.*` and `LIBARCHIVE.xattr.*`, GNU tar's PAX sparse formats
//! 0.0, 0.1 and 1.0). Headers are parsed by the `tar` crate; this module adds what it lacks:
//! limits on what is held in memory, the PAX sparse formats, global headers, exact PAX
//! record parsing (values may hold newlines), signed times, and errors that say whether the
//! archive is truncated, damaged or unreadable.
//!
//! Names and link targets are handed on as the archive's bytes: nothing is normalised,
//! and the caller decides about `/`, `..`, leading `./` or `/`. Members of a type that is
//! no file, directory, link, device or fifo (GNU volume headers, multi-volume
//! continuations, unknown types) come as [`Kind::Unsupported`], for the caller to report
//! and skip; they do not end the read.

mod guard;
mod pax;
mod sparse;

use std::cell::RefCell;
use std::io::{self, Read};

use guard::Guard;
use pax::Records;

/// How much of an archive's metadata the reader holds in memory at most.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// The largest PAX header (local or global, and all global records together) and GNU
    /// long name or long link name accepted, in bytes.
    pub max_meta: u64,
    /// The most extended attributes one entry may have.
    pub max_xattrs: usize,
    /// The most data segments one sparse file's map may have.
    pub max_sparse_segments: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_meta: 1 << 20, max_xattrs: 4096, max_sparse_segments: 1 << 20 }
    }
}

/// What an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A regular file (types `0`, NUL, `7` and the sparse ones).
    File,
    /// A directory (`5`, GNU's `D`, and an old-style NUL-type entry whose name ends in `/`).
    Dir,
    Symlink,
    /// A hard link to an earlier entry, whose path is in [`Entry::link`].
    HardLink,
    CharDev,
    BlockDev,
    Fifo,
    /// A member of another type, with its type byte: not a file, to be reported and skipped.
    /// Its content reader yields its stored bytes.
    Unsupported(u8),
}

/// A point in time: seconds since the Unix epoch (negative before 1970) and nanoseconds
/// after them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Time {
    pub secs: i64,
    pub nanos: u32,
}

/// One member of an archive, with everything the archive records about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The name as the archive holds it (PAX `path`, GNU long name or the header's), raw.
    pub path: Vec<u8>,
    pub kind: Kind,
    /// The permission bits, with setuid, setgid and sticky (`0o7777`).
    pub mode: u32,
    pub uid: u64,
    pub gid: u64,
    pub user: Option<Vec<u8>>,
    pub group: Option<Vec<u8>>,
    pub mtime: Time,
    pub atime: Option<Time>,
    pub ctime: Option<Time>,
    /// A symlink's target, or the path of the entry a hard link links to.
    pub link: Option<Vec<u8>>,
    pub dev_major: u32,
    pub dev_minor: u32,
    /// The content's length: a sparse file's real size; 0 for kinds without content.
    pub size: u64,
    /// The file was stored sparse (its holes are read as zeros).
    pub sparse: bool,
    /// Extended attributes, name and value, in archive order.
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
    /// The offset in the stream of the entry's own header (after any extension headers),
    /// for messages.
    pub offset: u64,
}

impl Entry {
    /// The path, lossily as text, for messages.
    pub fn path_lossy(&self) -> String {
        lossy(&self.path)
    }

    /// For a [`Kind::Unsupported`] entry, the message to report as it is skipped.
    pub fn unsupported(&self) -> Option<Error> {
        match self.kind {
            Kind::Unsupported(type_byte) => Some(Error::Unsupported { entry: self.path_lossy(), type_byte }),
            _ => None,
        }
    }
}

/// What can go wrong reading an archive. Every message names the entry or the byte offset
/// in the stream.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The input failed.
    #[error("reading the tar stream{}: {source}", at(*.offset))]
    Io { offset: Option<u64>, source: io::Error },

    /// A header is damaged: bad checksum, a field that is not a number, extension headers
    /// that describe no entry. Also garbage that is not a tar archive.
    #[error("tar header at byte {offset}: {reason}")]
    Header { offset: u64, reason: String },

    /// A metadata record is larger than [`Limits`] accept.
    #[error("tar entry `{entry}` at byte {offset}: {what} of {} is more than the {} accepted", size_text(*.size), size_text(*.limit))]
    TooLarge { entry: String, offset: u64, what: &'static str, size: u64, limit: u64 },

    /// An entry's metadata does not parse: a malformed PAX record, time or number.
    #[error("tar entry `{entry}`: {reason}")]
    Entry { entry: String, reason: String },

    /// A sparse file's map is malformed or does not fit the file.
    #[error("tar entry `{entry}`: bad sparse map: {reason}")]
    SparseMap { entry: String, reason: String },

    /// The stream ends before the archive does.
    #[error("the tar archive is truncated: the stream ends at byte {offset}, {context}")]
    Truncated { offset: u64, context: String },

    /// Not returned by [`read`]: the report of a [`Kind::Unsupported`] entry, from
    /// [`Entry::unsupported`].
    #[error("tar entry `{entry}`: type {} ({}) is not a file, directory, link, device or fifo; skipped", type_text(*.type_byte), type_name(*.type_byte))]
    Unsupported { entry: String, type_byte: u8 },
}

/// A content reader's errors are [`Error`]s inside an [`io::Error`]; this takes them out
/// again (any other I/O error becomes [`Error::Io`]).
impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        if e.get_ref().is_some_and(|inner| inner.is::<Error>()) {
            if let Ok(inner) = e.into_inner().unwrap().downcast::<Error>() {
                return *inner;
            }
            unreachable!("checked to be a tar error")
        }
        Error::Io { offset: None, source: e }
    }
}

fn at(offset: Option<u64>) -> String {
    offset.map(|o| format!(" at byte {o}")).unwrap_or_default()
}

fn size_text(n: u64) -> String {
    const UNITS: [(u64, &str); 4] = [(1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    for (unit, name) in UNITS {
        if n >= unit && n.is_multiple_of(unit) {
            return format!("{} {name}", n / unit);
        }
        if n >= unit {
            return format!("{:.1} {name}", n as f64 / unit as f64);
        }
    }
    format!("{n} bytes")
}

fn type_text(b: u8) -> String {
    if b.is_ascii_graphic() { format!("'{}'", b as char) } else { format!("0x{b:02x}") }
}

fn type_name(b: u8) -> &'static str {
    match b {
        b'V' => "a GNU volume header",
        b'M' => "a GNU multi-volume continuation",
        b'N' => "an old GNU long-names record",
        b'x' | b'g' | b'L' | b'K' => "an extension header in a pre-POSIX header",
        _ => "an unknown type",
    }
}

pub(crate) fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The input as the `tar` crate reads it: through the guard, shared with the reader so
/// that it can look at the guard between the crate's reads.
struct Shared<'a, R>(&'a RefCell<Guard<R>>);

impl<R: Read> Read for Shared<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.borrow_mut().read(buf)
    }
}

/// Reads `input` to its end, calling `f` for every entry in archive order with its record
/// and a reader of its content (files: the real content, with holes of sparse files read
/// as zeros, exactly `size` bytes or an error; other kinds: empty; [`Kind::Unsupported`]:
/// the stored bytes). `f` need not read the content to its end. An error returned by `f`
/// ends the read and is returned. Errors of the content reader are [`Error`]s inside
/// [`io::Error`]s (`Error::from` takes them out).
///
/// An empty input, or one of only the end-of-archive blocks, holds no entries. An archive
/// whose stream ends after an entry without the end-of-archive blocks is truncated.
/// Whatever follows the end-of-archive block is read and ignored.
pub fn read<R: Read, E: From<Error>>(
    input: R,
    limits: &Limits,
    f: &mut dyn FnMut(Entry, &mut dyn Read) -> Result<(), E>,
) -> Result<(), E> {
    let cell = RefCell::new(Guard::new(input, limits));
    {
        let mut archive = tar::Archive::new(Shared(&cell));
        let mut entries = archive.entries().map_err(|e| classify(&cell, e, "at its start"))?;
        let mut globals = Records::new();
        let mut last_path = String::new();
        loop {
            let next = entries.next();
            let mut member = match next {
                None => break,
                Some(Ok(m)) => m,
                Some(Err(e)) => {
                    let context = if last_path.is_empty() {
                        "in the first header".to_string()
                    } else {
                        format!("in a header after entry `{last_path}`")
                    };
                    return Err(classify(&cell, e, &context).into());
                }
            };
            let header_at = member.raw_header_position();
            {
                let g = cell.borrow();
                if g.last_member != header_at {
                    return Err(Error::Header {
                        offset: header_at,
                        reason: format!(
                            "the reader lost track of the archive's blocks (header at {} expected): damaged archive",
                            g.last_member
                        ),
                    }
                    .into());
                }
            }
            let ty = member.header().entry_type().as_byte();
            if ty == b'g' && (member.header().as_ustar().is_some() || member.header().as_gnu().is_some()) {
                let data = read_meta(&cell, &mut member, limits)?;
                let records = pax::parse_records(&data)
                    .map_err(|reason| Error::Entry { entry: lossy(&member.path_bytes()), reason })?;
                merge_globals(&mut globals, records, limits, header_at)?;
                continue;
            }
            let built = build(&cell, &mut member, &globals, limits)?;
            last_path = built.entry.path_lossy();
            let mut exact = Exact { inner: &mut member, left: built.stored, guard: &cell, path: &last_path };
            match built.plan {
                Plan::Plain => f(built.entry, &mut exact)?,
                Plan::Sparse10 { real_size } => {
                    let stored = built.stored;
                    let (segs, used) = match sparse::read_map_10(&mut exact, stored, limits.max_sparse_segments) {
                        Ok(x) => x,
                        Err(sparse::MapError::Io(e)) => return Err(Error::from(e).into()),
                        Err(sparse::MapError::Bad(reason)) => {
                            return Err(Error::SparseMap { entry: last_path.clone(), reason }.into());
                        }
                    };
                    sparse::validate(&segs, real_size, stored - used)
                        .map_err(|reason| Error::SparseMap { entry: last_path.clone(), reason })?;
                    let mut holes = sparse::Holes { inner: &mut exact, segs, next: 0, pos: 0, real_size };
                    f(built.entry, &mut holes)?;
                }
                Plan::Sparse { segs, real_size } => {
                    let mut holes = sparse::Holes { inner: &mut exact, segs, next: 0, pos: 0, real_size };
                    f(built.entry, &mut holes)?;
                }
            }
        }
    }
    let mut guard = cell.into_inner();
    if guard.pos > 0 && !guard.end_marker {
        return Err(Error::Truncated {
            offset: guard.pos,
            context: "without the end-of-archive blocks (a tar archive ends with two blocks of zeros)".into(),
        }
        .into());
    }
    if guard.pos > 0 {
        let at = guard.pos;
        io::copy(&mut guard.input, &mut io::sink()).map_err(|source| Error::Io { offset: Some(at), source })?;
    }
    Ok(())
}

/// Turns an error of the `tar` crate into ours: what the guard refused or saw fail, a
/// truncated stream, or else a malformed header.
fn classify<R>(cell: &RefCell<Guard<R>>, e: io::Error, context: &str) -> Error {
    let mut g = cell.borrow_mut();
    if let Some(fault) = g.fault.take() {
        return fault;
    }
    if let Some(end) = g.eof_at {
        return Error::Truncated { offset: end, context: context.to_string() };
    }
    Error::Header { offset: g.last_header, reason: e.to_string() }
}

/// Reads a global header's records, at most `max_meta` bytes (the guard refused larger).
fn read_meta<R: Read>(cell: &RefCell<Guard<R>>, member: &mut dyn Read, limits: &Limits) -> Result<Vec<u8>, Error> {
    let mut data = Vec::new();
    member.take(limits.max_meta).read_to_end(&mut data).map_err(|e| classify(cell, e, "in a PAX global header"))?;
    let eof = cell.borrow().eof_at;
    if let Some(end) = eof {
        return Err(Error::Truncated { offset: end, context: "in a PAX global header".into() });
    }
    Ok(data)
}

/// Keywords of a global header that are not applied to the entries that follow: they
/// describe one member, not many.
fn entry_only(key: &[u8]) -> bool {
    matches!(key, b"path" | b"linkpath" | b"size") || key.starts_with(b"GNU.sparse.")
}

fn merge_globals(globals: &mut Records, records: Records, limits: &Limits, offset: u64) -> Result<(), Error> {
    for (k, v) in records {
        if entry_only(&k) {
            continue;
        }
        globals.retain(|(gk, _)| *gk != k);
        if !v.is_empty() {
            globals.push((k, v));
        }
    }
    let total: u64 = globals.iter().map(|(k, v)| (k.len() + v.len()) as u64).sum();
    if total > limits.max_meta {
        return Err(Error::TooLarge {
            entry: "(global headers)".into(),
            offset,
            what: "the records of PAX global headers together",
            size: total,
            limit: limits.max_meta,
        });
    }
    Ok(())
}

/// The PAX records in force for one entry: its own, then the global ones.
struct Pax<'a> {
    local: &'a Records,
    globals: &'a Records,
}

impl Pax<'_> {
    /// The value of `key`; an empty local value removes it.
    fn get(&self, key: &[u8]) -> Option<&[u8]> {
        if let Some((_, v)) = self.local.iter().rev().find(|(k, _)| k == key) {
            return if v.is_empty() { None } else { Some(v) };
        }
        if entry_only(key) {
            return None;
        }
        self.globals.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v.as_slice())
    }
}

enum Plan {
    Plain,
    Sparse10 { real_size: u64 },
    Sparse { segs: Vec<sparse::Segment>, real_size: u64 },
}

struct Built {
    entry: Entry,
    plan: Plan,
    /// The bytes the content reader reads from the archive.
    stored: u64,
}

fn build<R: Read>(
    cell: &RefCell<Guard<R>>,
    member: &mut tar::Entry<'_, Shared<'_, R>>,
    globals: &Records,
    limits: &Limits,
) -> Result<Built, Error> {
    // The crate's path: GNU long name, else PAX `path` as it reads it, else the header's.
    let mut path = member.path_bytes().into_owned();
    let header = member.header().clone();
    // The raw type byte: the crate reads NUL as '0'.
    let ty = header.as_old().linkflag[0];
    let raw_pax = cell.borrow_mut().member_pax.take();
    let local = match raw_pax {
        Some(raw) => pax::parse_records(&raw).map_err(|reason| Error::Entry { entry: lossy(&path), reason })?,
        None => Records::new(),
    };
    let p = Pax { local: &local, globals };
    if let Some(v) = p.get(b"path") {
        path = v.to_vec();
    }
    let err = |path: &[u8], reason: String| Error::Entry { entry: lossy(path), reason };
    if let Some(v) = p.get(b"size")
        && ty != b'S'
        && pax::parse_u64(v) != Some(member.size())
    {
        return Err(err(&path, "its PAX size record is malformed or placed where it cannot be followed".into()));
    }
    let old = header.as_old();
    let gnu = header.as_gnu();
    let kind = match ty {
        b'0' | b'7' | b'S' => Kind::File,
        b'\0' if path.ends_with(b"/") => Kind::Dir,
        b'\0' => Kind::File,
        b'1' => Kind::HardLink,
        b'2' => Kind::Symlink,
        b'3' => Kind::CharDev,
        b'4' => Kind::BlockDev,
        b'5' | b'D' => Kind::Dir,
        b'6' => Kind::Fifo,
        other => Kind::Unsupported(other),
    };
    let mode = pax::header_number(&old.mode)
        .and_then(|m| u32::try_from(m & 0o7777).ok())
        .ok_or_else(|| err(&path, "the mode field is not a number".into()))?;
    let id = |key: &[u8], field: &[u8], what: &str| -> Result<u64, Error> {
        match p.get(key) {
            Some(v) => pax::parse_u64(v).ok_or_else(|| err(&path, format!("its PAX {what} record is not a number"))),
            None => pax::header_number(field)
                .and_then(|n| u64::try_from(n).ok())
                .ok_or_else(|| err(&path, format!("the {what} field is not a number"))),
        }
    };
    let uid = id(b"uid", &old.uid, "uid")?;
    let gid = id(b"gid", &old.gid, "gid")?;
    let name = |key: &[u8], field: Option<&[u8]>| -> Option<Vec<u8>> {
        p.get(key).or(field).filter(|v| !v.is_empty()).map(<[u8]>::to_vec)
    };
    let user = name(b"uname", header.username_bytes());
    let group = name(b"gname", header.groupname_bytes());
    let time = |key: &[u8]| -> Result<Option<Time>, Error> {
        match p.get(key) {
            Some(v) => pax::parse_time(v)
                .map(Some)
                .ok_or_else(|| err(&path, format!("its PAX {} record is not a time", lossy(key)))),
            None => Ok(None),
        }
    };
    let mtime = match time(b"mtime")? {
        Some(t) => t,
        None => pax::header_number(&old.mtime)
            .map(|secs| Time { secs, nanos: 0 })
            .ok_or_else(|| err(&path, "the mtime field is not a number".into()))?,
    };
    let gnu_time =
        |field: &[u8]| if field[0] == 0 { None } else { pax::header_number(field).map(|secs| Time { secs, nanos: 0 }) };
    let atime = time(b"atime")?.or_else(|| gnu.and_then(|g| gnu_time(&g.atime)));
    let ctime = time(b"ctime")?.or_else(|| gnu.and_then(|g| gnu_time(&g.ctime)));
    let link = match kind {
        Kind::Symlink | Kind::HardLink => {
            let l = p.get(b"linkpath").map(<[u8]>::to_vec).or_else(|| member.link_name_bytes().map(|l| l.into_owned()));
            Some(l.ok_or_else(|| err(&path, "a link without a target".into()))?)
        }
        _ => None,
    };
    let (mut dev_major, mut dev_minor) = (0, 0);
    if matches!(kind, Kind::CharDev | Kind::BlockDev) {
        let dev = |key: &[u8], field: Option<&[u8; 8]>| -> Result<u32, Error> {
            let n = match p.get(key) {
                Some(v) => pax::parse_u64(v),
                None => field.and_then(|f| pax::header_number(f)).and_then(|n| u64::try_from(n).ok()),
            };
            n.and_then(|n| u32::try_from(n).ok()).ok_or_else(|| err(&path, "a device without a valid number".into()))
        };
        let fields =
            header.as_ustar().map(|u| (&u.dev_major, &u.dev_minor)).or(gnu.map(|g| (&g.dev_major, &g.dev_minor)));
        dev_major = dev(b"SCHILY.devmajor", fields.map(|f| f.0))?;
        dev_minor = dev(b"SCHILY.devminor", fields.map(|f| f.1))?;
    }
    let mut xattrs: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    for (k, v) in globals.iter().filter(|(k, _)| !local.iter().any(|(lk, _)| lk == k)).chain(local.iter()) {
        let Some(x) = pax::xattr(k, v) else { continue };
        let (name, value) = x.map_err(|reason| err(&path, reason))?;
        if let Some(slot) = xattrs.iter_mut().find(|(n, _)| *n == name) {
            slot.1 = value;
        } else if xattrs.len() == limits.max_xattrs {
            return Err(err(&path, format!("more than the {} extended attributes accepted", limits.max_xattrs)));
        } else {
            xattrs.push((name, value));
        }
    }

    let mut plan = Plan::Plain;
    let mut sparse = ty == b'S';
    let mut size = member.size();
    let mut stored = size;
    if kind == Kind::File && ty != b'S' && local.iter().any(|(k, _)| k.starts_with(b"GNU.sparse.")) {
        sparse = true;
        if let Some(n) = p.get(b"GNU.sparse.name") {
            path = n.to_vec();
        }
        let map_err = |path: &[u8], reason: String| Error::SparseMap { entry: lossy(path), reason };
        let number = |key: &[u8]| -> Result<u64, Error> {
            let v = p.get(key).ok_or_else(|| map_err(&path, format!("no {} record", lossy(key))))?;
            pax::parse_u64(v).ok_or_else(|| map_err(&path, format!("{} is not a number", lossy(key))))
        };
        let max = limits.max_sparse_segments;
        if p.get(b"GNU.sparse.major").is_some() {
            let version = (number(b"GNU.sparse.major")?, number(b"GNU.sparse.minor")?);
            if version != (1, 0) {
                return Err(map_err(&path, format!("sparse format {}.{} is not known", version.0, version.1)));
            }
            size = number(b"GNU.sparse.realsize")?;
            plan = Plan::Sparse10 { real_size: size };
        } else {
            size = number(b"GNU.sparse.size")?;
            let segs = if let Some(map) = p.get(b"GNU.sparse.map") {
                sparse::parse_map_01(map, max).map_err(|r| map_err(&path, r))?
            } else {
                let mut segs = Vec::new();
                let mut offset = None;
                for (k, v) in &local {
                    let n = || pax::parse_u64(v).ok_or_else(|| map_err(&path, format!("{} is not a number", lossy(k))));
                    match k.as_slice() {
                        b"GNU.sparse.offset" if offset.is_none() => offset = Some(n()?),
                        b"GNU.sparse.numbytes" if offset.is_some() => {
                            if segs.len() == max {
                                return Err(map_err(&path, format!("more than the {max} segments accepted")));
                            }
                            segs.push((offset.take().unwrap_or(0), n()?));
                        }
                        b"GNU.sparse.offset" | b"GNU.sparse.numbytes" => {
                            return Err(map_err(&path, "GNU.sparse.offset and numbytes records out of pairs".into()));
                        }
                        _ => {}
                    }
                }
                if offset.is_some() {
                    return Err(map_err(&path, "a GNU.sparse.offset record without its numbytes".into()));
                }
                segs
            };
            if p.get(b"GNU.sparse.numblocks").is_some() && number(b"GNU.sparse.numblocks")? != segs.len() as u64 {
                return Err(map_err(&path, format!("GNU.sparse.numblocks does not match the {} segments", segs.len())));
            }
            sparse::validate(&segs, size, stored).map_err(|r| map_err(&path, r))?;
            plan = Plan::Sparse { segs, real_size: size };
        }
    }
    if !matches!(kind, Kind::File | Kind::Unsupported(_)) {
        size = 0;
        stored = 0;
    }
    if matches!(plan, Plan::Plain) {
        stored = size;
    }
    let offset = cell.borrow().last_member;
    let entry = Entry {
        path,
        kind,
        mode,
        uid,
        gid,
        user,
        group,
        mtime,
        atime,
        ctime,
        link,
        dev_major,
        dev_minor,
        size,
        sparse,
        xattrs,
        offset,
    };
    Ok(Built { entry, plan, stored })
}

/// A content reader that yields exactly `left` more bytes of `inner`, or an error saying
/// why not.
struct Exact<'a, 'g, R> {
    inner: &'a mut dyn Read,
    left: u64,
    guard: &'g RefCell<Guard<R>>,
    path: &'a str,
}

impl<R> Read for Exact<'_, '_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 || buf.is_empty() {
            return Ok(0);
        }
        let want = (buf.len() as u64).min(self.left) as usize;
        match self.inner.read(&mut buf[..want]) {
            Ok(0) => {
                let g = self.guard.borrow();
                let offset = g.eof_at.unwrap_or(g.pos);
                let e = Error::Truncated {
                    offset,
                    context: format!("in the content of `{}` ({} bytes short)", self.path, self.left),
                };
                Err(io::Error::new(io::ErrorKind::UnexpectedEof, e))
            }
            Ok(n) => {
                self.left -= n as u64;
                Ok(n)
            }
            Err(e) => {
                let context = format!("in the content of `{}`", self.path);
                let kind = e.kind();
                Err(io::Error::new(kind, classify(self.guard, e, &context)))
            }
        }
    }
}
