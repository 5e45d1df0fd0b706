//! Byte layouts of every stored object. Each submodule mirrors one section of
//! docs/design.md, and every decoder returns an error (never panics) on any input.

pub mod bytes;
pub mod config;
pub mod envelope;
pub mod index;
pub mod keyfile;
pub mod layout;
pub mod notice;
pub mod pack;
pub mod proof;
pub mod session;
pub mod signed;
pub mod snapshot;
pub mod tombstone;
pub mod tree;
pub mod writer;

use crate::id::{ID_LEN, Id};

/// The version of the repository format this library writes and reads.
pub const FORMAT_VERSION: u32 = 2;

/// The kinds of stored object, each under its own prefix (docs/design.md#layout).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectKind {
    /// `config`: the repository's settings, sealed.
    Config,
    /// `keys/<id>`: a key file.
    Key,
    /// `data/<first two hex digits>/<id>`: a pack.
    Pack,
    /// `index/<id>`: an index file, sealed.
    Index,
    /// `snapshots/<id>`: a snapshot, sealed and signed.
    Snapshot,
    /// `writers/<id>`: a writer's registered public key, sealed.
    Writer,
    /// `tombstones/<id>`: a record of forgotten snapshots, sealed and signed.
    Tombstone,
    /// `sessions/<id>`: a running writer's marker, sealed and rewritten as it runs.
    Session,
    /// `prune/<id>`: what a prune is about to delete, sealed.
    PruneNotice,
    /// `layout/<id>`: the backends a repository spans, sealed and signed.
    Layout,
}

impl ObjectKind {
    /// The prefix under which objects of this kind are listed.
    pub fn prefix(self) -> &'static str {
        match self {
            ObjectKind::Config => "config",
            ObjectKind::Key => "keys/",
            ObjectKind::Pack => "data/",
            ObjectKind::Index => "index/",
            ObjectKind::Snapshot => "snapshots/",
            ObjectKind::Writer => "writers/",
            ObjectKind::Tombstone => "tombstones/",
            ObjectKind::Session => "sessions/",
            ObjectKind::PruneNotice => "prune/",
            ObjectKind::Layout => "layout/",
        }
    }

    /// A lowercase noun for messages.
    pub fn noun(self) -> &'static str {
        match self {
            ObjectKind::Config => "config",
            ObjectKind::Key => "key file",
            ObjectKind::Pack => "pack",
            ObjectKind::Index => "index file",
            ObjectKind::Snapshot => "snapshot",
            ObjectKind::Writer => "writer record",
            ObjectKind::Tombstone => "tombstone",
            ObjectKind::Session => "session marker",
            ObjectKind::PruneNotice => "prune notice",
            ObjectKind::Layout => "layout",
        }
    }

    /// The object name of `id` in this kind.
    pub fn path(self, id: &Id) -> String {
        match self {
            ObjectKind::Config => "config".to_string(),
            ObjectKind::Pack => {
                let h = id.to_hex();
                format!("data/{}/{}", &h[..2], h)
            }
            _ => format!("{}{}", self.prefix(), id.to_hex()),
        }
    }

    /// The id named by an object path of this kind, if the path is well-formed.
    pub fn id_from_path(self, path: &str) -> Option<Id> {
        Id::from_hex(path.rsplit('/').next()?)
    }

    /// `"<noun> <short id>"`, the way messages name an object.
    pub fn describe(self, id: &Id) -> String {
        format!("{} {}", self.noun(), id.short())
    }

    /// The largest object of this kind, in stored bytes, that a reader accepts
    /// (docs/design.md#size-limits). Larger ones are damage and are refused
    /// before anything is allocated for them; every writer stays below.
    pub fn max_len(self) -> u64 {
        match self {
            ObjectKind::Config => limits::CONFIG,
            ObjectKind::Key => limits::KEY_FILE,
            ObjectKind::Pack => limits::PACK,
            ObjectKind::Index => limits::INDEX_FILE,
            ObjectKind::Snapshot => limits::SNAPSHOT,
            ObjectKind::Writer => limits::WRITER,
            ObjectKind::Tombstone => limits::TOMBSTONE,
            ObjectKind::Session => limits::SESSION,
            ObjectKind::PruneNotice => limits::PRUNE_NOTICE,
            ObjectKind::Layout => limits::LAYOUT,
        }
    }
}

/// Size limits, one per object kind (stored bytes, sealing and signature
/// included), and what each writer does to stay below them. See
/// docs/design.md#size-limits.
pub mod limits {
    use super::pack;

    const MIB: u64 = 1 << 20;

    /// `config`: a few hundred bytes of settings.
    pub const CONFIG: u64 = 64 << 10;
    /// A key file: about 100 bytes per data key epoch, and epochs are a u16 (at
    /// most 65,536 of them: under 7 MiB).
    pub const KEY_FILE: u64 = 16 * MIB;
    /// A writer record: a name and a public key.
    pub const WRITER: u64 = 64 << 10;
    /// A snapshot: its paths, tags and exclude patterns are bounded by
    /// [`SNAPSHOT_LISTS`], skipped entries by
    /// [`super::snapshot::MAX_SKIPPED_LISTED`], history heads by the writers.
    pub const SNAPSHOT: u64 = 16 * MIB;
    /// What a snapshot's `paths`, `tags` and `excludes` may hold together, in
    /// bytes of their strings: more is a usage error at the start of a backup.
    pub const SNAPSHOT_LISTS: u64 = 4 * MIB;
    /// A tombstone: `forget` records at most [`TOMBSTONE_SNAPSHOTS`] snapshots,
    /// and their paths, per tombstone, and writes several when it forgets more.
    pub const TOMBSTONE: u64 = 64 * MIB;
    /// Snapshots one tombstone records at most.
    pub const TOMBSTONE_SNAPSHOTS: usize = 10_000;
    /// A session marker: about 70 bytes per index file a backup has written (a
    /// backup writes one per [`INDEX_FILE_PACKS`] packs), so 16 MiB is above
    /// 200,000 index files, over 100 TiB of new data at the default pack size.
    pub const SESSION: u64 = 16 * MIB;
    /// A prune notice: about 70 bytes per pack; a prune announces at most
    /// [`PRUNE_NOTICE_PACKS`] packs per notice and writes several when it deletes more.
    pub const PRUNE_NOTICE: u64 = 16 * MIB;
    /// A layout: at most 1024 backends of under 150 bytes each and two tables
    /// of at most 65,536 partitions × 16 copies × 2 bytes (2 MiB each).
    pub const LAYOUT: u64 = 8 * MIB;
    /// Packs one prune notice lists at most.
    pub const PRUNE_NOTICE_PACKS: usize = 100_000;
    /// Blobs one pack holds at most: a pack is closed when it has this many, so
    /// its header, and its record in an index file, stay under 13 MiB.
    pub const PACK_BLOBS: usize = 256 << 10;
    /// An index file: a writer closes one at [`INDEX_FILE_PACKS`] packs or
    /// [`INDEX_FILE_TARGET`] bytes, and one pack's record is at most
    /// [`PACK_BLOBS`] entries.
    pub const INDEX_FILE: u64 = 64 * MIB;
    /// Packs an index file lists at most.
    pub const INDEX_FILE_PACKS: usize = 32;
    /// An index file is closed once its records reach this size.
    pub const INDEX_FILE_TARGET: u64 = 16 * MIB;
    /// A blob's plaintext: data blobs are chunks (at most
    /// `ChunkerParams::MAX_MAX_SIZE`), tree blobs are capped at the same.
    pub const BLOB_PLAINTEXT: u64 = crate::chunker::ChunkerParams::MAX_MAX_SIZE as u64;
    /// A blob as stored in its pack: the plaintext (kept uncompressed when
    /// compression does not pay), a compression byte and the AEAD tag. A longer
    /// entry in a pack header or index file is damage.
    pub const BLOB: u64 = BLOB_PLAINTEXT + 1 + crate::crypto::TAG_LEN as u64;
    /// A pack: packs are closed at the configured size (at most
    /// [`super::config::MAX_PACK_SIZE`]), which the last blob may overshoot, plus
    /// a header of at most [`PACK_BLOBS`] entries and the trailer.
    pub const PACK: u64 = super::config::MAX_PACK_SIZE as u64
        + BLOB
        + (4 + PACK_BLOBS as u64 * pack::ENTRY_LEN as u64 + crate::crypto::TAG_LEN as u64)
        + pack::TRAILER_LEN as u64;
}

/// A cursor over untrusted bytes whose reads fail instead of panicking.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }
    pub(crate) fn remaining(&self) -> usize {
        self.buf.len()
    }
    pub(crate) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.buf.len() {
            return None;
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Some(head)
    }
    pub(crate) fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    pub(crate) fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.take(2)?.try_into().ok()?))
    }
    pub(crate) fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    pub(crate) fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    pub(crate) fn id(&mut self) -> Option<Id> {
        Id::from_slice(self.take(ID_LEN)?)
    }
    pub(crate) fn array32(&mut self) -> Option<[u8; 32]> {
        self.take(32)?.try_into().ok()
    }
}

#[cfg(test)]
mod limits_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        let id = Id([0xab; 32]);
        assert_eq!(ObjectKind::Pack.path(&id), format!("data/ab/{}", id.to_hex()));
        assert_eq!(ObjectKind::Index.path(&id), format!("index/{}", id.to_hex()));
        assert_eq!(ObjectKind::Pack.id_from_path(&ObjectKind::Pack.path(&id)), Some(id));
    }

    #[test]
    fn reader_never_overreads() {
        let mut r = Reader::new(&[1, 2, 3]);
        assert_eq!(r.u8(), Some(1));
        assert_eq!(r.u32(), None);
        assert_eq!(r.remaining(), 2);
        assert!(r.take(3).is_none());
    }
}
