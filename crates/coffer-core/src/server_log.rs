//! A client's side of a server's transparency log (docs/design.md#transparency-log,
//! "Following a server's log"): read the signed head, check that it extends
//! the last head this client saw, fetch the new entries and check that they
//! are what the head signs. What was seen is kept in the local state
//! ([`LocalState`]): `server-log` (the last signed head, 148 bytes) and
//! `server-log-entries` (its entries, 33 bytes each).

use coffer_backend::Backend;

use crate::crypto::sign::PublicKey;
use crate::error::{Error, Result};
use crate::format::envelope::SealedKind;
use crate::format::snapshot::LogMark;
use crate::id::Id;
use crate::local_state::LocalState;
use crate::merkle::Hash;
use crate::translog::{self, Head, Log, MAX_PROOF_LEN, SIGNED_HEAD_LEN, SignedHead};

/// The local state file holding the last signed head seen.
pub const HEAD_FILE: &str = "server-log";
/// The local state file holding that head's entries.
pub const ENTRIES_FILE: &str = "server-log-entries";
/// Bytes per entry: the kind, then the object's name.
pub const ENTRY_LEN: usize = 33;
/// Entries asked for per read (the server answers at most 65 536).
const ENTRIES_PER_READ: u64 = 65_536;

/// The log as this client now knows it, checked.
#[derive(Clone, Debug)]
pub struct Followed {
    /// The head read now.
    pub head: SignedHead,
    /// Every entry of that head, in order: kind byte and object name.
    pub entries: Vec<(u8, Hash)>,
    /// How many entries are new since the last head this client saw.
    pub new_entries: u64,
    /// Whether this was the first head this client saw of the repository's
    /// server (its key was pinned now).
    pub first_contact: bool,
}

impl Followed {
    /// Whether the log records the snapshot `id`.
    pub fn has_snapshot(&self, id: &Id) -> bool {
        self.entries.iter().any(|(k, n)| *k == SealedKind::Snapshot as u8 && *n == id.0)
    }

    /// The head as a snapshot records it.
    pub fn mark(&self) -> LogMark {
        LogMark { key: self.head.public, size: self.head.head.size, root: Id(self.head.head.root) }
    }

    /// Which of `marks`, heads other clients recorded in their snapshots (by
    /// snapshot id), disagree with this log: each must be of a size within
    /// this log's and have this log's root at that size. Marks of another log
    /// (a snapshot copied from another server) are not judged. One message per
    /// disagreement, saying what the server did. The roots are taken in one
    /// pass over the entries, however many snapshots there are.
    pub fn disagreements(&self, marks: &[(Id, LogMark)]) -> Vec<String> {
        let ours = self.head.head.size;
        let mut mine: Vec<&(Id, LogMark)> = marks.iter().filter(|(_, m)| m.key == self.head.public).collect();
        mine.sort_by_key(|(_, m)| m.size);
        let mut found = Vec::new();
        let mut tree = crate::merkle::Builder::new();
        let mut leaves = self.entries.iter().map(|(k, n)| translog::entry_leaf(*k, n));
        for (id, mark) in mine {
            if mark.size > ours {
                found.push(format!(
                    "snapshot {}: its writer was shown the server's transparency log at {} entries, but the server \
                     shows this client only {ours}: the server rolled back or forked the log it shows this client",
                    id.short(),
                    mark.size
                ));
                continue;
            }
            // `follow` checked that the entries are the head's; were they fewer,
            // the root would differ and be reported.
            while tree.count() < mark.size {
                let Some(leaf) = leaves.next() else { break };
                tree.push(leaf);
            }
            if tree.root() != mark.root.0 {
                found.push(format!(
                    "snapshot {}: its writer was shown a different transparency log than this client at {} \
                     entries: the server forked its log, showing clients different histories",
                    id.short(),
                    mark.size
                ));
            }
        }
        found
    }

    /// The snapshots the log records, in the order the server accepted them.
    pub fn snapshots(&self) -> impl Iterator<Item = Id> + '_ {
        self.entries.iter().filter(|(k, _)| *k == SealedKind::Snapshot as u8).map(|(_, n)| Id(*n))
    }
}

fn mismatch(msg: impl Into<String>) -> Error {
    Error::ServerLog(msg.into())
}

fn hex_of(public: &PublicKey) -> String {
    public.to_hex()
}

/// Reads and checks the server's log through `backend`, against what `state`
/// remembers; `trusted` is a log key the user gave (else the key seen first is
/// pinned). Remembers the new head only when every check passed.
pub fn follow(backend: &dyn Backend, state: &LocalState, trusted: Option<&PublicKey>) -> Result<Followed> {
    let bytes = backend.read_max("log/head", SIGNED_HEAD_LEN as u64)?;
    let head = SignedHead::decode(&bytes).map_err(|e| mismatch(format!("the server's log head: {e}")))?;
    let fix = format!(
        "if the server's state directory was replaced on purpose, delete {} to trust its new log",
        state.path(HEAD_FILE).display()
    );
    if let Some(t) = trusted
        && *t != head.public
    {
        return Err(mismatch(format!(
            "the server signs its log with key {}, not with the key {} given: this is not the server you trust",
            hex_of(&head.public),
            hex_of(t)
        )));
    }
    let pinned = match state.read(HEAD_FILE)? {
        None => None,
        Some(b) => Some(SignedHead::decode(&b).map_err(|e| {
            mismatch(format!(
                "{}: {e}; delete it to start following the server's log again",
                state.path(HEAD_FILE).display()
            ))
        })?),
    };
    let (old, mut entries) = match &pinned {
        None => (Head { size: 0, root: [0; 32], time: 0 }, Vec::new()),
        Some(p) => {
            if p.public != head.public {
                return Err(mismatch(format!(
                    "the server's log key changed from {} to {}: a different server, or one that lost its state, answers for this repository; {fix}",
                    hex_of(&p.public),
                    hex_of(&head.public)
                )));
            }
            let kept = state.read(ENTRIES_FILE)?.unwrap_or_default();
            let entries = if kept.len() as u64 == p.head.size * ENTRY_LEN as u64 {
                kept.chunks_exact(ENTRY_LEN).map(|e| (e[0], e[1..].try_into().expect("32 bytes"))).collect()
            } else {
                // The kept entries are lost or damaged: fetched again below, and
                // checked against the pinned head's root.
                Vec::new()
            };
            (p.head, entries)
        }
    };
    if pinned.is_some() {
        let proof = if head.head.size == old.size {
            Vec::new()
        } else if head.head.size < old.size {
            return Err(mismatch(format!(
                "the server's {}; {fix}",
                translog::ForkError::Shrank { old: old.size, new: head.head.size }
            )));
        } else {
            read_proof(backend, old.size, head.head.size)?
        };
        translog::check_extends(&old, &head.head, &proof).map_err(|e| {
            mismatch(format!("the server's {e}: it showed this client a different history before; {fix}"))
        })?;
    }
    let known = entries.len() as u64;
    let mut at = known;
    while at < head.head.size {
        let end = head.head.size.min(at + ENTRIES_PER_READ);
        let name = format!("log/entries/{at}-{end}");
        let want = (end - at) * ENTRY_LEN as u64;
        let got = backend.read_max(&name, want)?;
        if got.len() as u64 != want {
            return Err(mismatch(format!("{name}: {} bytes, not the {want} asked for", got.len())));
        }
        entries.extend(got.chunks_exact(ENTRY_LEN).map(|e| (e[0], e[1..].try_into().expect("32 bytes"))));
        at = end;
    }
    let log = Log::from_leaves(entries.iter().map(|(k, n)| translog::entry_leaf(*k, n)).collect());
    if log.root_at(head.head.size) != Some(head.head.root) {
        return Err(mismatch(format!(
            "the server's log entries do not match its signed head of {} entries",
            head.head.size
        )));
    }
    let new_entries = head.head.size - old.size.min(head.head.size);
    if new_entries > 0 || pinned.is_none() || known != head.head.size {
        let flat: Vec<u8> = entries.iter().flat_map(|(k, n)| std::iter::once(*k).chain(n.iter().copied())).collect();
        state.write(ENTRIES_FILE, &flat)?;
        state.write(HEAD_FILE, &head.encode())?;
    }
    Ok(Followed { head, entries, new_entries, first_contact: pinned.is_none() })
}

fn read_proof(backend: &dyn Backend, old: u64, new: u64) -> Result<Vec<Hash>> {
    let name = format!("log/consistency/{old}-{new}");
    let bytes = backend.read_max(&name, (MAX_PROOF_LEN * 32) as u64)?;
    if bytes.len() % 32 != 0 {
        return Err(mismatch(format!("{name}: {} bytes is not a list of hashes", bytes.len())));
    }
    Ok(bytes.chunks_exact(32).map(|c| c.try_into().expect("32 bytes")).collect())
}

/// What the log records and the server no longer serves: snapshots that no
/// tombstone forgot, and tombstones (which coffer never deletes). `stored` are
/// the snapshots and tombstones listed, `forgotten` the snapshots the
/// tombstones record. Each as its kind's noun and id.
pub fn hidden(followed: &Followed, stored: &[Id], forgotten: &[Id]) -> Vec<(&'static str, Id)> {
    let snapshot = SealedKind::Snapshot as u8;
    let tombstone = SealedKind::Tombstone as u8;
    let stored: std::collections::HashSet<&Id> = stored.iter().collect();
    let forgotten: std::collections::HashSet<&Id> = forgotten.iter().collect();
    followed
        .entries
        .iter()
        .map(|(k, n)| (*k, Id(*n)))
        .filter(|(_, id)| !stored.contains(id))
        .filter_map(|(k, id)| match k {
            _ if k == snapshot && !forgotten.contains(&id) => Some(("snapshot", id)),
            _ if k == tombstone => Some(("tombstone", id)),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use coffer_backend::MemBackend;

    use super::*;
    use crate::crypto::sign::SigningKey;

    /// A keeper's answers for a log of `names` (kind 3), stored in `be`.
    fn serve(be: &MemBackend, key: &SigningKey, names: &[u8]) -> Log {
        let mut log = Log::new();
        let mut flat = Vec::new();
        for n in names {
            log.append(3, &[*n; 32]);
            flat.push(3);
            flat.extend_from_slice(&[*n; 32]);
        }
        let size = log.size();
        be.write("log/head", log.head(9).sign(key).encode().to_vec()).unwrap();
        be.write(&format!("log/entries/0-{size}"), flat.clone()).unwrap();
        for old in 0..=size {
            let proof = log.consistency_proof(old, size).unwrap();
            be.write(&format!("log/consistency/{old}-{size}"), proof.concat()).unwrap();
            let from = old as usize * ENTRY_LEN;
            be.write(&format!("log/entries/{old}-{size}"), flat[from..].to_vec()).unwrap();
        }
        log
    }

    #[test]
    fn follows_a_growing_log_and_refuses_rollback_forks_and_bad_entries() {
        let dir = tempfile::tempdir().unwrap();
        let state = LocalState::new(dir.path(), &Id([1; 32]));
        let key = SigningKey::from_seed(&[5; 32]);
        let be = MemBackend::new();
        // A server whose log is still empty, then holds two entries.
        serve(&be, &key, &[]);
        let f = follow(&be, &state, None).unwrap();
        assert!(f.first_contact && f.entries.is_empty());
        serve(&be, &key, &[1, 2]);
        let f = follow(&be, &state, None).unwrap();
        assert!(!f.first_contact && f.has_snapshot(&Id([2; 32])) && f.new_entries == 2);
        serve(&be, &key, &[1, 2, 3, 4, 5]);
        let f = follow(&be, &state, Some(&key.public())).unwrap();
        assert!(!f.first_contact && f.new_entries == 3 && f.entries.len() == 5);
        // The kept entries lost: fetched again, and checked.
        std::fs::remove_file(state.path(ENTRIES_FILE)).unwrap();
        assert_eq!(follow(&be, &state, None).unwrap().entries.len(), 5);

        serve(&be, &key, &[1, 2, 3]);
        let e = follow(&be, &state, None).unwrap_err().to_string();
        assert!(e.contains("shrank"), "{e}");
        serve(&be, &key, &[1, 2, 3, 9, 5, 6]);
        let e = follow(&be, &state, None).unwrap_err().to_string();
        assert!(e.contains("different history"), "{e}");
        // Entries that are not what the head signs.
        serve(&be, &key, &[1, 2, 3, 4, 5, 6]);
        be.write("log/entries/5-6", [[3u8].as_slice(), &[7; 32]].concat()).unwrap();
        let e = follow(&be, &state, None).unwrap_err().to_string();
        assert!(e.contains("do not match its signed head"), "{e}");
        // Another key.
        serve(&be, &SigningKey::from_seed(&[6; 32]), &[1, 2, 3, 4, 5, 6]);
        let e = follow(&be, &state, None).unwrap_err().to_string();
        assert!(e.contains("log key changed"), "{e}");
        // Nothing refused was remembered: the honest log is followed still.
        serve(&be, &key, &[1, 2, 3, 4, 5, 6]);
        assert_eq!(follow(&be, &state, None).unwrap().new_entries, 1);
    }

    #[test]
    fn heads_other_writers_recorded_agree_only_with_the_same_history() {
        let dir = tempfile::tempdir().unwrap();
        let key = SigningKey::from_seed(&[5; 32]);
        let be = MemBackend::new();
        let log = serve(&be, &key, &[1, 2, 3]);
        let f = follow(&be, &LocalState::new(dir.path(), &Id([1; 32])), None).unwrap();
        let mark = |size: u64, log: &Log| LogMark { key: key.public(), size, root: Id(log.root_at(size).unwrap()) };
        let id = Id([9; 32]);
        let judged = |m: LogMark| f.disagreements(&[(id, m)]);
        // Every prefix of the same log agrees, the whole head too.
        let all: Vec<(Id, LogMark)> = (0..=3).map(|size| (Id([size as u8; 32]), mark(size, &log))).rev().collect();
        assert!(f.disagreements(&all).is_empty());
        assert_eq!(f.mark(), mark(3, &log));
        // A writer shown more than this client: rolled back or forked here.
        let longer = serve(&MemBackend::new(), &key, &[1, 2, 3, 4]);
        assert!(judged(mark(4, &longer))[0].contains("rolled back or forked"));
        // A writer shown other entries at the same size: forked.
        let other = serve(&MemBackend::new(), &key, &[1, 7]);
        assert!(judged(mark(2, &other))[0].contains("forked its log"));
        assert!(judged(mark(1, &other)).is_empty(), "the shared prefix agrees");
        // Several at once: only the forked one is named.
        let found =
            f.disagreements(&[(Id([1; 32]), mark(1, &log)), (id, mark(2, &other)), (Id([3; 32]), mark(3, &log))]);
        assert_eq!(found.len(), 1);
        assert!(found[0].contains(&id.short()));
        // Another server's log (a snapshot copied from it): not this log's to judge.
        let elsewhere = LogMark { key: SigningKey::from_seed(&[6; 32]).public(), ..mark(2, &other) };
        assert!(judged(elsewhere).is_empty());
    }

    #[test]
    fn hidden_are_snapshots_neither_stored_nor_forgotten_and_tombstones_not_stored() {
        let dir = tempfile::tempdir().unwrap();
        let state = LocalState::new(dir.path(), &Id([1; 32]));
        let be = MemBackend::new();
        serve(&be, &SigningKey::from_seed(&[5; 32]), &[1, 2, 3]);
        let mut f = follow(&be, &state, None).unwrap();
        assert_eq!(hidden(&f, &[Id([1; 32])], &[Id([2; 32])]), vec![("snapshot", Id([3; 32]))]);
        f.entries.push((SealedKind::Tombstone as u8, [8; 32]));
        f.entries.push((SealedKind::Tombstone as u8, [9; 32]));
        let got = hidden(&f, &[Id([1; 32]), Id([3; 32]), Id([8; 32])], &[Id([2; 32]), Id([9; 32])]);
        assert_eq!(got, vec![("tombstone", Id([9; 32]))]);
    }
}
