//! The trash: where deletions made through the server go. An object deleted
//! by a `prune` or `admin` key is copied to `trash/<seconds since the epoch>/<name>`
//! (the name's slashes written as `+`, so that every entry is two levels
//! below `trash/`, as far as a local listing looks) in the same storage, then deleted; `trash/` is outside the namespace clients
//! see (no request may name or list it). Entries older than the trash period
//! are purged by the running server and by `coffer serve trash purge`;
//! `coffer serve trash restore` puts entries back. See docs/design.md#server.

use std::io::{Seek, SeekFrom, Write};
use std::time::{SystemTime, UNIX_EPOCH};

use coffer_backend::{Backend, BackendError, BackendResult};

/// The prefix of the trash in the storage.
pub const PREFIX: &str = "trash/";

/// Bytes copied per range read when moving an object.
const PIECE: u64 = 8 << 20;

/// One object in the trash.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Entry {
    /// Its original name.
    pub name: String,
    /// When it was deleted (seconds since the Unix epoch).
    pub deleted: u64,
    /// Its size in bytes.
    pub size: u64,
}

impl Entry {
    /// Where the entry is stored.
    pub fn stored_name(&self) -> String {
        format!("{PREFIX}{}/{}", self.deleted, self.name.replace('/', "+"))
    }
}

/// Seconds since the Unix epoch.
pub fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// Copies `from` to `to` through a spool file in `spool` (objects may be as
/// large as a pack, so they are never held in memory whole).
pub fn copy(be: &dyn Backend, from: &str, to: &str, spool: &std::path::Path) -> BackendResult<u64> {
    let size = be.stat(from)?;
    let io =
        |e: std::io::Error| BackendError::new(coffer_backend::ErrorKind::Permanent, to, format!("spool file: {e}"));
    let mut file = tempfile::tempfile_in(spool).map_err(io)?;
    let mut offset = 0;
    while offset < size {
        let piece = be.read_range(from, offset, PIECE.min(size - offset))?;
        if piece.is_empty() {
            return Err(BackendError::new(coffer_backend::ErrorKind::Transient, from, "the object ended early"));
        }
        file.write_all(&piece).map_err(io)?;
        offset += piece.len() as u64;
    }
    file.seek(SeekFrom::Start(0)).map_err(io)?;
    be.write_file(to, &file, size)?;
    Ok(size)
}

/// Moves `name` to the trash, stamped `deleted`.
pub fn move_to_trash(be: &dyn Backend, name: &str, deleted: u64, spool: &std::path::Path) -> BackendResult<()> {
    let entry = Entry { name: name.to_string(), deleted, size: 0 };
    match copy(be, name, &entry.stored_name(), spool) {
        Ok(_) => be.delete(name),
        // Deleting what is not there succeeds (storage contract point 6).
        Err(e) if e.kind == coffer_backend::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Every entry in the trash, oldest first.
pub fn list(be: &dyn Backend) -> BackendResult<Vec<Entry>> {
    let mut out: Vec<Entry> = be
        .list(PREFIX)?
        .into_iter()
        .filter_map(|o| {
            let rest = o.name.strip_prefix(PREFIX)?;
            let (stamp, name) = rest.split_once('/')?;
            Some(Entry { name: name.replace('+', "/"), deleted: stamp.parse().ok()?, size: o.size })
        })
        .collect();
    out.sort_by(|a, b| (a.deleted, &a.name).cmp(&(b.deleted, &b.name)));
    Ok(out)
}

/// Puts `entry` back under its name (an object there already is left alone
/// and the entry stays), then removes it from the trash. Returns whether it
/// was restored.
pub fn restore(be: &dyn Backend, entry: &Entry, spool: &std::path::Path) -> BackendResult<bool> {
    match be.stat(&entry.name) {
        Ok(_) => return Ok(false),
        Err(e) if e.kind == coffer_backend::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    copy(be, &entry.stored_name(), &entry.name, spool)?;
    be.delete(&entry.stored_name())?;
    Ok(true)
}

/// Deletes the entries deleted at or before `before` (seconds since the epoch);
/// returns how many.
pub fn purge(be: &dyn Backend, before: u64) -> BackendResult<usize> {
    let mut n = 0;
    for e in list(be)?.into_iter().filter(|e| e.deleted <= before) {
        be.delete(&e.stored_name())?;
        n += 1;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use coffer_backend::MemBackend;

    #[test]
    fn move_restore_purge() {
        let be = MemBackend::new();
        let spool = tempfile::tempdir().unwrap();
        be.write("index/aa", vec![7; 100]).unwrap();
        be.write("data/aa/aa", vec![8; 10]).unwrap();
        move_to_trash(&be, "data/aa/aa", 999, spool.path()).unwrap();
        assert_eq!(be.list(PREFIX).unwrap()[0].name, "trash/999/data+aa+aa");
        assert_eq!(list(&be).unwrap()[0].name, "data/aa/aa");
        assert_eq!(purge(&be, 1000).unwrap(), 1);
        be.write("index/aa", vec![7; 100]).unwrap();
        move_to_trash(&be, "index/aa", 1000, spool.path()).unwrap();
        assert!(be.stat("index/aa").is_err());
        let l = list(&be).unwrap();
        assert_eq!(l, vec![Entry { name: "index/aa".into(), deleted: 1000, size: 100 }]);
        assert!(restore(&be, &l[0], spool.path()).unwrap());
        assert_eq!(be.read("index/aa").unwrap(), vec![7; 100]);
        assert!(list(&be).unwrap().is_empty());
        move_to_trash(&be, "index/aa", 1000, spool.path()).unwrap();
        assert_eq!(purge(&be, 999).unwrap(), 0);
        assert_eq!(purge(&be, 1000).unwrap(), 1);
        be.write("index/aa", vec![7; 100]).unwrap();
        move_to_trash(&be, "index/aa", 1000, spool.path()).unwrap();
        assert_eq!(purge(&be, 1001).unwrap(), 1);
        assert!(list(&be).unwrap().is_empty());
        // Moving what is not there is no error.
        move_to_trash(&be, "index/bb", 1000, spool.path()).unwrap();
    }
}
