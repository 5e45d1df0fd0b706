//! The trash: where deletions made through the server go. An object deleted
//! by a `prune` or `admin` key is copied to
//! `trash/<seconds since the epoch>/<name>~<16 hex>` (the name's slashes
//! written as `+`, so that every entry is two levels below `trash/`, and a
//! random suffix, so that no entry ever overwrites another, even when one name
//! is deleted twice in the same second) in the same storage, then deleted;
//! `trash/` is outside the namespace clients see (no request may name or list
//! it). Entries older than the trash period are purged by the running server
//! and by `coffer serve trash purge`; `coffer serve trash restore` puts back
//! the oldest entry of a name, the one deleted first. See
//! docs/design.md#server.

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
    /// Where the entry is stored.
    #[serde(skip)]
    pub stored: String,
}

impl Entry {
    /// Where the entry is stored.
    pub fn stored_name(&self) -> String {
        self.stored.clone()
    }
}

/// A new entry's stored name: unique whatever else the trash holds, and in
/// the order of deletion among the entries of one second (the suffix starts
/// with the time in nanoseconds, fixed-width hex, then random bytes).
fn new_stored_name(name: &str, deleted: u64) -> String {
    let mut b = [0u8; 6];
    getrandom::fill(&mut b).expect("the system's random generator");
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    format!("{PREFIX}{deleted}/{}~{nanos:016x}{}", name.replace('/', "+"), hex::encode(b))
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
    match copy(be, name, &new_stored_name(name, deleted), spool) {
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
            // Entries made before names had a suffix have none.
            let name = name.split_once('~').map_or(name, |(n, _)| n);
            Some(Entry { name: name.replace('+', "/"), deleted: stamp.parse().ok()?, size: o.size, stored: o.name })
        })
        .collect();
    out.sort_by(|a, b| (a.deleted, &a.name, &a.stored).cmp(&(b.deleted, &b.name, &b.stored)));
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

/// Of `entries` (oldest first, as [`list`] gives them), the oldest of each
/// name, with how many entries that name has: what a restore puts back.
pub fn oldest_per_name(entries: &[Entry]) -> Vec<(&Entry, usize)> {
    let mut out: Vec<(&Entry, usize)> = Vec::new();
    let mut at: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for e in entries {
        match at.get(e.name.as_str()) {
            Some(&i) => out[i].1 += 1,
            None => {
                at.insert(e.name.as_str(), out.len());
                out.push((e, 1));
            }
        }
    }
    out
}

/// Whether the trash holds an entry of `name` whose bytes are not those
/// whose BLAKE3 hash is `hash`, and when it was deleted: a name deleted
/// within the trash period is re-created by non-admin keys only with the bytes
/// it had. For small objects (`config`).
pub fn deleted_with_other_bytes(be: &dyn Backend, name: &str, hash: &blake3::Hash) -> BackendResult<Option<u64>> {
    for e in list(be)?.into_iter().filter(|e| e.name == name) {
        if blake3::hash(&be.read_max(&e.stored, coffer_core::format::limits::CONFIG)?) != *hash {
            return Ok(Some(e.deleted));
        }
    }
    Ok(None)
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
        assert!(be.list(PREFIX).unwrap()[0].name.starts_with("trash/999/data+aa+aa~"));
        assert_eq!(list(&be).unwrap()[0].name, "data/aa/aa");
        assert_eq!(purge(&be, 1000).unwrap(), 1);
        be.write("index/aa", vec![7; 100]).unwrap();
        move_to_trash(&be, "index/aa", 1000, spool.path()).unwrap();
        assert!(be.stat("index/aa").is_err());
        let l = list(&be).unwrap();
        assert_eq!((l.len(), l[0].name.as_str(), l[0].deleted, l[0].size), (1, "index/aa", 1000, 100));
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

    #[test]
    fn one_name_deleted_twice_in_a_second_keeps_both_and_restores_the_first() {
        // Random suffixes alone put the two in either order; done 16 times,
        // the first one deleted must come first every time.
        for _ in 0..16 {
            let be = MemBackend::new();
            let spool = tempfile::tempdir().unwrap();
            be.write("config", b"original".to_vec()).unwrap();
            move_to_trash(&be, "config", 5, spool.path()).unwrap();
            be.write("config", b"planted".to_vec()).unwrap();
            move_to_trash(&be, "config", 5, spool.path()).unwrap();
            let l = list(&be).unwrap();
            assert_eq!(l.len(), 2);
            let oldest = oldest_per_name(&l);
            assert_eq!(oldest.len(), 1);
            assert_eq!(oldest[0].1, 2);
            assert_eq!(be.read(&oldest[0].0.stored).unwrap(), b"original");
        }
        let be = MemBackend::new();
        let spool = tempfile::tempdir().unwrap();
        be.write("config", b"original".to_vec()).unwrap();
        move_to_trash(&be, "config", 5, spool.path()).unwrap();
        assert_eq!(deleted_with_other_bytes(&be, "config", &blake3::hash(b"x")).unwrap(), Some(5));
        // Old-style names (no suffix) still list.
        be.write("trash/3/index+cc", vec![1]).unwrap();
        assert_eq!(list(&be).unwrap()[0].name, "index/cc");
    }
}
