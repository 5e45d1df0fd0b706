//! Which writers this client trusts: its own writer key, and the keys the user
//! named with `coffer writers trust`, kept in the client's local state (file
//! `trusted-writers`), never in the repository. See docs/design.md#trusted-writers.
//!
//! # Brief overview
//!
//! Anyone holding the passphrase can register a writer and sign with it, so a
//! valid signature says who wrote an object, not that the writer is one to
//! follow. What only trusted writers may decide: a restore as root recreating
//! owners, setuid bits, device nodes and privileged attributes
//! ([`TrustedWriters::snapshot`]), and a layout that lowers the repository's
//! protection (docs/design.md#many-backends). A snapshot that `coffer copy` wrote
//! anew is trusted only when its signer, the source snapshot's writer and the
//! original backup's writer all are.

use std::collections::BTreeMap;

use crate::crypto::sign::PublicKey;
use crate::error::{Error, Result};
use crate::format::signed::SignatureStatus;
use crate::format::snapshot::Snapshot;
use crate::local_state::LocalState;

/// The local state file listing the keys the user trusts besides this client's
/// own: one `<64 hex public key> <note>` per line (the note is the writer's name
/// when it was trusted); `#` starts a comment.
pub const TRUSTED_WRITERS_FILE: &str = "trusted-writers";

/// The most keys the file may list (a bound on a damaged or planted file).
const MAX_TRUSTED: usize = 10_000;

/// The writers this client trusts for one repository.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrustedWriters {
    own: Option<PublicKey>,
    listed: BTreeMap<PublicKey, String>,
}

/// Whether a snapshot's author is one this client trusts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SnapshotTrust {
    /// Signed validly, and every writer it depends on is trusted.
    Trusted,
    /// Signed validly, but these writers (its signer, or for a copy written
    /// anew the source's or the original's writer) are not trusted.
    Untrusted(Vec<PublicKey>),
    /// The signature is not valid: who wrote it is not known.
    Unverified(String),
}

impl TrustedWriters {
    /// The trusted writers of `state`: `own` (this client's writer key, if it
    /// has one) and those its `trusted-writers` file lists. A line that does not
    /// hold a key makes the file damaged (an error naming it).
    pub fn load(state: &LocalState, own: Option<PublicKey>) -> Result<TrustedWriters> {
        let mut t = TrustedWriters { own, listed: BTreeMap::new() };
        let Some(bytes) = state.read(TRUSTED_WRITERS_FILE)? else {
            return Ok(t);
        };
        let damaged = |why: String| {
            Error::InvalidInput(format!(
                "local state file {} is damaged ({why}); fix or delete it, then trust the writers again with \
                 `coffer writers trust KEY`",
                state.path(TRUSTED_WRITERS_FILE).display()
            ))
        };
        let text = std::str::from_utf8(&bytes).map_err(|_| damaged("not UTF-8".into()))?;
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (key, note) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
            let key = PublicKey::from_hex(key).ok_or_else(|| damaged(format!("{key:?} is not a public key")))?;
            if t.listed.len() >= MAX_TRUSTED {
                return Err(damaged(format!("more than {MAX_TRUSTED} keys")));
            }
            t.listed.insert(key, note.trim().to_string());
        }
        Ok(t)
    }

    /// A set of exactly these keys (tests, and callers that hold the keys).
    pub fn of(own: Option<PublicKey>, listed: impl IntoIterator<Item = PublicKey>) -> TrustedWriters {
        TrustedWriters { own, listed: listed.into_iter().map(|k| (k, String::new())).collect() }
    }

    /// This client's own writer key, if it has one.
    pub fn own(&self) -> Option<PublicKey> {
        self.own
    }

    /// The keys trusted explicitly, with their notes.
    pub fn listed(&self) -> impl Iterator<Item = (&PublicKey, &str)> {
        self.listed.iter().map(|(k, n)| (k, n.as_str()))
    }

    /// Whether `key` is trusted.
    pub fn trusts(&self, key: &PublicKey) -> bool {
        self.own.as_ref() == Some(key) || self.listed.contains_key(key)
    }

    /// Whether a snapshot may be followed as its writer's: its signature is
    /// valid, its signer is trusted and, for a copy written anew, so are the
    /// writers its `copied_from` names.
    pub fn snapshot(&self, snap: &Snapshot) -> SnapshotTrust {
        let SignatureStatus::Valid { key, .. } = &snap.signature else {
            return SnapshotTrust::Unverified(snap.signature.describe());
        };
        let mut needed = vec![*key];
        if let Some(c) = &snap.copied_from {
            needed.extend(c.writers());
        }
        let mut untrusted: Vec<PublicKey> = Vec::new();
        for k in needed {
            if !self.trusts(&k) && !untrusted.contains(&k) {
                untrusted.push(k);
            }
        }
        if untrusted.is_empty() { SnapshotTrust::Trusted } else { SnapshotTrust::Untrusted(untrusted) }
    }

    /// Adds `key` to the state's list with `note`; `false` if it was trusted
    /// already.
    pub fn add(&mut self, state: &LocalState, key: PublicKey, note: &str) -> Result<bool> {
        if self.trusts(&key) {
            return Ok(false);
        }
        self.listed.insert(key, note.replace(['\n', '\r'], " "));
        self.store(state)?;
        Ok(true)
    }

    /// Removes `key` from the state's list; `false` if it was not listed (this
    /// client's own key is always trusted and is never listed).
    pub fn remove(&mut self, state: &LocalState, key: &PublicKey) -> Result<bool> {
        if self.listed.remove(key).is_none() {
            return Ok(false);
        }
        self.store(state)?;
        Ok(true)
    }

    fn store(&self, state: &LocalState) -> Result<()> {
        let mut text = String::from("# writers this client trusts (coffer writers trust KEY); one key per line\n");
        for (k, note) in &self.listed {
            text.push_str(&k.to_hex());
            if !note.is_empty() {
                text.push(' ');
                text.push_str(note);
            }
            text.push('\n');
        }
        state.write(TRUSTED_WRITERS_FILE, text.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::sign::SigningKey;
    use crate::format::snapshot::CopiedFrom;
    use crate::id::Id;

    fn signed_by(key: PublicKey) -> Snapshot {
        let mut s = crate::testing::snapshot_of(Id([0; 32]), &SigningKey::generate());
        s.writer = key;
        s.signature = SignatureStatus::Valid { writer: "u@h".into(), key };
        s
    }

    #[test]
    fn the_list_survives_a_round_trip_and_a_damaged_line_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let state = LocalState::new(dir.path(), &Id([1; 32]));
        let (own, other) = (SigningKey::generate().public(), SigningKey::generate().public());
        let mut t = TrustedWriters::load(&state, Some(own)).unwrap();
        assert!(t.trusts(&own) && !t.trusts(&other));
        assert!(!t.add(&state, own, "me").unwrap());
        assert!(t.add(&state, other, "old@laptop").unwrap());
        let again = TrustedWriters::load(&state, None).unwrap();
        assert!(again.trusts(&other) && !again.trusts(&own));
        assert_eq!(again.listed().next().unwrap().1, "old@laptop");
        let mut again = again;
        assert!(again.remove(&state, &other).unwrap());
        assert!(!TrustedWriters::load(&state, None).unwrap().trusts(&other));
        std::fs::write(state.path(TRUSTED_WRITERS_FILE), "zz\n").unwrap();
        let e = TrustedWriters::load(&state, None).unwrap_err().to_string();
        assert!(e.contains("trusted-writers") && e.contains("damaged"), "{e}");
    }

    #[test]
    fn a_copy_is_trusted_only_when_every_writer_behind_it_is() {
        let (own, co, first) =
            (SigningKey::generate().public(), SigningKey::generate().public(), SigningKey::generate().public());
        let t = TrustedWriters::of(Some(own), []);
        assert_eq!(t.snapshot(&signed_by(own)), SnapshotTrust::Trusted);
        assert_eq!(t.snapshot(&signed_by(co)), SnapshotTrust::Untrusted(vec![co]));
        let mut copy = signed_by(own);
        copy.copied_from = Some(Box::new(CopiedFrom {
            repository: Id([2; 32]),
            snapshot: Id([3; 32]),
            writer: co,
            signature: None,
            origin: None,
        }));
        assert_eq!(t.snapshot(&copy), SnapshotTrust::Untrusted(vec![co]));
        let t = TrustedWriters::of(Some(own), [co]);
        assert_eq!(t.snapshot(&copy), SnapshotTrust::Trusted);
        copy.copied_from.as_mut().unwrap().origin = Some(first);
        assert_eq!(t.snapshot(&copy), SnapshotTrust::Untrusted(vec![first]));
        let mut unsigned = signed_by(own);
        unsigned.signature = SignatureStatus::Missing;
        assert!(matches!(t.snapshot(&unsigned), SnapshotTrust::Unverified(_)));
    }
}
