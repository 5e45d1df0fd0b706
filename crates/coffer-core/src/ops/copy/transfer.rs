//! Moving objects byte for byte between repositories that share their data keys:
//! every object read is checked against its name before it is written, so a
//! copy never spreads damage (docs/design.md#copy).

use crate::error::{Error, Result};
use crate::format::index::PackRecord;
use crate::format::{ObjectKind, pack};
use crate::id::Id;
use crate::repo::Repository;
use coffer_backend::ErrorKind;

/// At most this many packs are held in memory at once (one per worker), whatever
/// the storages' connection counts: a pack may be as large as 1 GiB.
pub(super) const PACK_WORKERS: usize = 8;

/// What happened to one pack to send.
pub(super) enum PackOutcome {
    /// Copied: its size, and its index record when asked for.
    Sent(u64, Option<PackRecord>),
    /// The source does not hold it (a prune removed it since its index file was
    /// listed, or it was lost): nothing was written.
    MissingInSource,
}

/// Copies pack `id` from `src` to `dst`: read whole, checked against its name
/// (BLAKE3 of its bytes), then written. With `want_record`, its index record is
/// read from its own trailer and header (authenticated with the shared keys).
pub(super) fn copy_pack(src: &Repository, dst: &Repository, id: &Id, want_record: bool) -> Result<PackOutcome> {
    let name = ObjectKind::Pack.path(id);
    let what = || ObjectKind::Pack.describe(id);
    let bytes = match src.backend().read_max(&name, ObjectKind::Pack.max_len()) {
        Ok(b) => b,
        Err(e) if e.kind == ErrorKind::NotFound => return Ok(PackOutcome::MissingInSource),
        Err(e) if e.kind == ErrorKind::TooLarge => {
            return Err(Error::corrupt(format!("source {}", what()), e.message));
        }
        Err(e) => return Err(e.into()),
    };
    if Id::hash_of(&bytes) != *id {
        return Err(Error::corrupt(
            format!("source {}", what()),
            "content does not match its name, so it was not copied; run `coffer check --read-data` on the source",
        ));
    }
    let record = if want_record { Some(record_of(dst, id, &bytes)?) } else { None };
    let len = bytes.len() as u64;
    dst.backend().write(&name, bytes)?;
    Ok(PackOutcome::Sent(len, record))
}

/// A pack's index record from its bytes in memory: trailer, then header.
fn record_of(repo: &Repository, id: &Id, bytes: &[u8]) -> Result<PackRecord> {
    let damaged = |e: String| Error::corrupt(format!("source {}", ObjectKind::Pack.describe(id)), e);
    let size = bytes.len() as u64;
    let start = bytes.len().checked_sub(pack::TRAILER_LEN).ok_or_else(|| damaged("too short for a pack".into()))?;
    let trailer = pack::decode_trailer(&bytes[start..], size).map_err(damaged)?;
    let hstart =
        start.checked_sub(trailer.header_len as usize).ok_or_else(|| damaged("its header starts before it".into()))?;
    let key = repo.pack_key(trailer.epoch, trailer.cipher, &trailer.salt).map_err(damaged)?;
    let entries = pack::open_header(&key, &trailer, &bytes[hstart..start], size).map_err(damaged)?;
    Ok(PackRecord { id: *id, salt: trailer.salt, cipher: trailer.cipher, epoch: trailer.epoch, entries })
}

/// Copies the object `kind`/`id` (an index file, writer record, snapshot or
/// tombstone) byte for byte, checked against its name; returns its size.
pub(super) fn copy_object(src: &Repository, dst: &Repository, kind: ObjectKind, id: &Id) -> Result<u64> {
    let bytes = src.read_object(kind, id).map_err(|e| match e {
        Error::Corrupt { object, detail } => Error::Corrupt { object: format!("source {object}"), detail },
        e => e,
    })?;
    let len = bytes.len() as u64;
    dst.backend().write(&kind.path(id), bytes)?;
    Ok(len)
}

/// Whether `dst` holds pack `id` already (an interrupted copy sent it).
pub(super) fn dst_has_pack(dst: &Repository, id: &Id) -> Result<bool> {
    match dst.backend().stat(&ObjectKind::Pack.path(id)) {
        Ok(_) => Ok(true),
        Err(e) if e.kind == ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// The size of pack `id` in the source, for a dry run; `None` when it is gone.
pub(super) fn src_pack_size(src: &Repository, id: &Id) -> Result<Option<u64>> {
    match src.backend().stat(&ObjectKind::Pack.path(id)) {
        Ok(n) => Ok(Some(n)),
        Err(e) if e.kind == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.into()),
    }
}
