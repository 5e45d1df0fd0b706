//! Byte layouts of every stored object. Each submodule mirrors one section of
//! docs/design.md, and every decoder returns an error (never panics) on any input.

pub mod bytes;
pub mod config;
pub mod envelope;
pub mod index;
pub mod keyfile;
pub mod pack;
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
