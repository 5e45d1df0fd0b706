//! The server's transparency log: every snapshot and tombstone it accepts is
//! appended to an append-only log whose head it signs, and clients read the
//! head, consistency proofs and entries through three read-only names. See
//! docs/design.md#transparency-log and docs/design.md#server.
//!
//! On disk, in the state directory: `log/key` (the 32-byte Ed25519 seed the
//! heads are signed with, mode 0600) and `log/entries` (33 bytes per entry:
//! kind, then the object's 32-byte name, appended and synced before the
//! upload is answered). A torn last entry (a crash while appending) is cut off
//! at start; objects the storage holds that the log lacks (written before the
//! server kept a log, or stored just before a crash) are appended at start, in
//! name order.

use std::collections::HashSet;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use coffer_backend::{Backend, BackendError, ErrorKind};
use coffer_core::crypto::sign::SigningKey;
use coffer_core::format::ObjectKind;
use coffer_core::format::envelope::SealedKind;
use coffer_core::merkle::Hash;
use coffer_core::translog::{Log, MAX_PROOF_LEN};

use crate::ServerError;
use crate::state;

/// Bytes per entry on disk and in `log/entries/…` answers.
pub const ENTRY_LEN: usize = 33;
/// The most entries one `log/entries/A-B` answer holds.
pub const MAX_ENTRIES_PER_READ: u64 = 65_536;

/// What a client may read of the log: the names are not objects of the
/// repository, and nothing can be written under them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogRead {
    /// `log/head`: the current signed head (148 bytes).
    Head,
    /// `log/entries/A-B`: entries `A..B`, 33 bytes each.
    Entries(u64, u64),
    /// `log/consistency/M-N`: the consistency proof from size `M` to size `N`,
    /// 32 bytes per hash.
    Consistency(u64, u64),
}

impl LogRead {
    /// The read a name asks for, if it is one of the log's names; `Err` for a
    /// name under `log/` that is malformed.
    pub fn parse(name: &str) -> Option<Result<LogRead, String>> {
        let rest = name.strip_prefix("log/")?;
        let range = |s: &str| -> Result<(u64, u64), String> {
            let (a, b) = s.split_once('-').ok_or_else(|| format!("{name}: expected A-B"))?;
            let num = |x: &str| {
                if x.is_empty() || x.len() > 20 || !x.bytes().all(|c| c.is_ascii_digit()) {
                    return Err(format!("{name}: {x:?} is not a decimal number"));
                }
                x.parse::<u64>().map_err(|_| format!("{name}: {x:?} is too large"))
            };
            let (a, b) = (num(a)?, num(b)?);
            if a > b {
                return Err(format!("{name}: the range runs backwards"));
            }
            Ok((a, b))
        };
        Some(match rest.split_once('/') {
            None if rest == "head" => Ok(LogRead::Head),
            Some(("entries", r)) => range(r).map(|(a, b)| LogRead::Entries(a, b)),
            Some(("consistency", r)) => range(r).map(|(a, b)| LogRead::Consistency(a, b)),
            _ => Err(format!("{name}: the log's names are log/head, log/entries/A-B and log/consistency/M-N")),
        })
    }
}

struct Inner {
    log: Log,
    seen: HashSet<(u8, Hash)>,
    file: std::fs::File,
}

/// The log, its signing key and its file.
pub struct TransparencyLog {
    key: SigningKey,
    path: PathBuf,
    inner: Mutex<Inner>,
}

fn key_path(state_dir: &Path) -> PathBuf {
    state_dir.join("log").join("key")
}

/// The kind byte a log entry carries for objects of `kind`, if they are logged.
pub fn logged_kind(kind: ObjectKind) -> Option<u8> {
    match kind {
        ObjectKind::Snapshot => Some(SealedKind::Snapshot as u8),
        ObjectKind::Tombstone => Some(SealedKind::Tombstone as u8),
        _ => None,
    }
}

fn parse_name(name: &str) -> Option<Hash> {
    let id = name.rsplit('/').next()?;
    let bytes = hex::decode(id).ok()?;
    bytes.try_into().ok()
}

impl TransparencyLog {
    /// Opens (or starts) the log in `state_dir`, and appends what `backend`
    /// holds that the log lacks.
    pub fn open(state_dir: &Path, backend: &dyn Backend) -> Result<TransparencyLog, ServerError> {
        let dir = state_dir.join("log");
        state::ensure_dir(&dir)?;
        let kp = key_path(state_dir);
        let key = match std::fs::read(&kp) {
            Ok(seed) => {
                let seed: [u8; 32] = seed.as_slice().try_into().map_err(|_| ServerError::Corrupt {
                    path: kp.clone(),
                    reason: "the log key is not 32 bytes; restore it from a backup of the state directory".into(),
                })?;
                SigningKey::from_seed(&seed)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let key = SigningKey::generate();
                state::write_atomic(&kp, key.seed())?;
                key
            }
            Err(e) => return Err(ServerError::io(&kp, "cannot read the log key", e)),
        };
        let path = dir.join("entries");
        let mut bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(ServerError::io(&path, "cannot read", e)),
        };
        let whole = bytes.len() - bytes.len() % ENTRY_LEN;
        let torn = whole != bytes.len();
        bytes.truncate(whole);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .read(true)
            .write(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(|e| ServerError::io(&path, "cannot open", e))?;
        if torn {
            file.set_len(whole as u64).map_err(|e| ServerError::io(&path, "cannot cut the torn last entry", e))?;
        }
        let mut log = Log::new();
        let mut seen = HashSet::new();
        for e in bytes.chunks_exact(ENTRY_LEN) {
            let name: Hash = e[1..].try_into().expect("32 bytes");
            log.append(e[0], &name);
            seen.insert((e[0], name));
        }
        let this = TransparencyLog { key, path, inner: Mutex::new(Inner { log, seen, file }) };
        this.catch_up(backend)?;
        Ok(this)
    }

    /// Appends the stored snapshots and tombstones the log lacks.
    fn catch_up(&self, backend: &dyn Backend) -> Result<(), ServerError> {
        let storage = |e: BackendError| ServerError::Invalid(format!("cannot list the repository for the log: {e}"));
        for kind in [ObjectKind::Snapshot, ObjectKind::Tombstone] {
            let mut names: Vec<String> = match backend.list(kind.prefix()) {
                Ok(l) => l.into_iter().map(|o| o.name).collect(),
                Err(e) if e.kind == ErrorKind::NotFound => Vec::new(),
                Err(e) => return Err(storage(e)),
            };
            names.sort();
            for n in names {
                if crate::names::classify(&n).ok() == Some(kind) {
                    self.append(kind, &n)?;
                }
            }
        }
        Ok(())
    }

    /// Records that the object `name` of `kind` was stored; a name already in
    /// the log, or of a kind the log does not keep, changes nothing.
    pub fn append(&self, kind: ObjectKind, name: &str) -> Result<(), ServerError> {
        let (Some(k), Some(hash)) = (logged_kind(kind), parse_name(name)) else { return Ok(()) };
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if inner.seen.contains(&(k, hash)) {
            return Ok(());
        }
        let mut entry = [0u8; ENTRY_LEN];
        entry[0] = k;
        entry[1..].copy_from_slice(&hash);
        let at = inner.log.size() * ENTRY_LEN as u64;
        let file = &mut inner.file;
        let written = std::os::unix::fs::FileExt::write_all_at(&*file, &entry, at).and_then(|()| file.sync_data());
        if let Err(e) = written {
            // Whatever reached the file past the last whole entry is cut at the next start.
            let _ = file.set_len(at);
            return Err(ServerError::io(&self.path, "cannot append to the log", e));
        }
        inner.log.append(k, &hash);
        inner.seen.insert((k, hash));
        Ok(())
    }

    /// The answer to a read of the log, or why it cannot be given.
    pub fn read(&self, r: LogRead, now: u64) -> Result<Vec<u8>, String> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let size = inner.log.size();
        match r {
            LogRead::Head => Ok(inner.log.head(now).sign(&self.key).encode().to_vec()),
            LogRead::Entries(a, b) => {
                if b > size {
                    return Err(format!("the log holds {size} entries, fewer than {b}"));
                }
                if b - a > MAX_ENTRIES_PER_READ {
                    return Err(format!("at most {MAX_ENTRIES_PER_READ} entries per read"));
                }
                let mut out = vec![0u8; (b - a) as usize * ENTRY_LEN];
                std::os::unix::fs::FileExt::read_exact_at(&inner.file, &mut out, a * ENTRY_LEN as u64)
                    .map_err(|e| format!("the log cannot be read: {e}"))?;
                Ok(out)
            }
            LogRead::Consistency(m, n) => {
                if n > size {
                    return Err(format!("the log holds {size} entries, fewer than {n}"));
                }
                let proof = inner.log.consistency_proof(m, n).ok_or("no such proof")?;
                debug_assert!(proof.len() <= MAX_PROOF_LEN);
                Ok(proof.concat())
            }
        }
    }

    /// The key heads are signed with, as clients pin it (hex).
    pub fn public_key(&self) -> String {
        self.key.public().to_hex()
    }

    /// The number of entries.
    pub fn size(&self) -> u64 {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).log.size()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    use coffer_backend::MemBackend;
    use coffer_core::translog::{SignedHead, verify_consistency};

    const A: &str = "snapshots/0101010101010101010101010101010101010101010101010101010101010101";
    const B: &str = "tombstones/0202020202020202020202020202020202020202020202020202020202020202";

    #[test]
    fn names_parse() {
        assert_eq!(LogRead::parse("log/head"), Some(Ok(LogRead::Head)));
        assert_eq!(LogRead::parse("log/entries/0-10"), Some(Ok(LogRead::Entries(0, 10))));
        assert_eq!(LogRead::parse("log/consistency/3-7"), Some(Ok(LogRead::Consistency(3, 7))));
        for bad in ["log/", "log/heads", "log/entries/5-1", "log/entries/1", "log/entries/+1-2", "log/x/1-2"] {
            assert!(matches!(LogRead::parse(bad), Some(Err(_))), "{bad}");
        }
        assert_eq!(LogRead::parse("snapshots/x"), None);
    }

    #[test]
    fn appends_survive_a_restart_and_a_torn_entry() {
        let dir = tempfile::tempdir().unwrap();
        let be = MemBackend::new();
        be.write(A, vec![1]).unwrap();
        let log = TransparencyLog::open(dir.path(), &be).unwrap();
        assert_eq!(log.size(), 1, "the stored snapshot is logged at start");
        log.append(ObjectKind::Tombstone, B).unwrap();
        log.append(ObjectKind::Tombstone, B).unwrap();
        log.append(ObjectKind::Pack, "data/01/0101010101010101010101010101010101010101010101010101010101010101")
            .unwrap();
        assert_eq!(log.size(), 2);
        let head = SignedHead::decode(&log.read(LogRead::Head, 5).unwrap()).unwrap();
        assert_eq!(head.head.size, 2);
        assert_eq!(head.public.to_hex(), log.public_key());
        let public = log.public_key();
        drop(log);
        // A crash in the middle of an append.
        let entries = dir.path().join("log/entries");
        let mut f = std::fs::OpenOptions::new().append(true).open(&entries).unwrap();
        f.write_all(&[3, 9, 9]).unwrap();
        drop(f);
        let log = TransparencyLog::open(dir.path(), &be).unwrap();
        assert_eq!(log.size(), 2);
        assert_eq!(log.public_key(), public, "the key is kept");
        assert_eq!(std::fs::metadata(&entries).unwrap().len(), 66);
        let again = SignedHead::decode(&log.read(LogRead::Head, 6).unwrap()).unwrap();
        assert_eq!(again.head.root, head.head.root);
        let e = log.read(LogRead::Entries(1, 2), 0).unwrap();
        assert_eq!(e[0], SealedKind::Tombstone as u8);
        assert!(log.read(LogRead::Entries(0, 3), 0).is_err());
    }

    #[test]
    fn consistency_proofs_verify() {
        let dir = tempfile::tempdir().unwrap();
        let be = MemBackend::new();
        let log = TransparencyLog::open(dir.path(), &be).unwrap();
        let mut heads = Vec::new();
        for i in 0..9u8 {
            log.append(ObjectKind::Snapshot, &format!("snapshots/{}", hex::encode([i; 32]))).unwrap();
            heads.push(SignedHead::decode(&log.read(LogRead::Head, 0).unwrap()).unwrap().head);
        }
        for old in &heads {
            let new = heads.last().unwrap();
            let p = log.read(LogRead::Consistency(old.size, new.size), 0).unwrap();
            let proof: Vec<Hash> = p.chunks_exact(32).map(|c| c.try_into().unwrap()).collect();
            assert!(verify_consistency(old.size, new.size, &old.root, &new.root, &proof));
        }
    }
}
