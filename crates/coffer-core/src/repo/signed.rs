//! Signed objects (snapshots, tombstones) and the writers allowed to sign them.
//! See docs/design.md#signatures and docs/design.md#writers.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};

use super::Repository;
use crate::crypto::sign::{PublicKey, SigningKey};
use crate::error::{Error, Result};
use crate::format::ObjectKind;
use crate::format::envelope::SealedKind;
use crate::format::signed::{self, SignatureStatus};
use crate::format::snapshot::Snapshot;
use crate::format::tombstone::Tombstone;
use crate::format::writer::WriterRecord;
use crate::id::Id;
use crate::local_state::LocalState;

/// Name of the local state file holding this client's signing key.
pub const WRITER_KEY_FILE: &str = "writer.key";

/// The registered writers, by public key.
pub type Writers = HashMap<PublicKey, WriterRecord>;

/// Loads of the writer records by [`Repository::writer`]: one at a time, counted
/// as they begin.
#[derive(Default)]
pub(crate) struct WriterLoads {
    lock: Mutex<()>,
    started: AtomicU64,
}

/// Objects that loaded, by id, and the errors of those that did not.
pub type Loaded<T> = (Vec<(Id, T)>, Vec<Error>);

/// A signed object, opened: its plaintext and what its signature says so far
/// (before the writer is looked up).
struct Opened {
    /// The object as stored.
    stored: Vec<u8>,
    plaintext: Vec<u8>,
    block: Option<signed::SignatureBlock>,
    signature_ok: bool,
}

impl Repository {
    /// Seals `plaintext`, signs the sealed bytes with `key` and stores them.
    pub(crate) fn save_signed(
        &self,
        kind: SealedKind,
        plaintext: &[u8],
        commitment: &[u8; 32],
        key: &SigningKey,
    ) -> Result<Id> {
        let okind = match kind {
            SealedKind::Snapshot => ObjectKind::Snapshot,
            SealedKind::Tombstone => ObjectKind::Tombstone,
            SealedKind::Layout => ObjectKind::Layout,
            _ => return Err(Error::InvalidInput("only snapshots, tombstones and layouts are signed".into())),
        };
        let sealed = self.seal(kind, plaintext);
        let stored = signed::sign(sealed, commitment, key);
        let id = Id::hash_of(&stored);
        super::check_storable(okind, stored.len())?;
        self.backend().write(&okind.path(&id), stored)?;
        Ok(id)
    }

    pub(crate) fn open_signed_layout(&self, id: &Id) -> Result<(Vec<u8>, Option<PublicKey>, bool)> {
        let o = self.open_signed(ObjectKind::Layout, SealedKind::Layout, id)?;
        let key = o.block.as_ref().filter(|b| b.commitment == [0; 32]).map(|b| b.public_key);
        Ok((o.plaintext, key, o.signature_ok))
    }

    fn open_signed(&self, okind: ObjectKind, kind: SealedKind, id: &Id) -> Result<Opened> {
        let stored = self.read_object(okind, id)?;
        let (sealed, block) = signed::split(&stored).map_err(|e| Error::corrupt(okind.describe(id), e))?;
        let plaintext = self.open_sealed(kind, sealed).map_err(|e| Error::corrupt(okind.describe(id), e))?;
        let signature_ok = block.as_ref().is_some_and(|b| b.verify(sealed));
        Ok(Opened { stored, plaintext, block, signature_ok })
    }

    /// What the signature says, given the writer and commitment the plaintext names.
    fn signature_status(&self, o: &Opened, writer: &PublicKey, commitment: &[u8; 32]) -> Result<SignatureStatus> {
        let Some(block) = &o.block else {
            return Ok(SignatureStatus::Missing);
        };
        if !o.signature_ok {
            return Ok(SignatureStatus::Invalid("the signature does not verify".into()));
        }
        if block.public_key != *writer {
            return Ok(SignatureStatus::Invalid(format!(
                "signed by key {} but the content names writer {}",
                block.public_key.short(),
                writer.short()
            )));
        }
        if block.commitment != *commitment {
            return Ok(SignatureStatus::Invalid("the signed commitment differs from the content's".into()));
        }
        Ok(match self.writer(&block.public_key)? {
            Some(w) => SignatureStatus::Valid { writer: w.name(), key: block.public_key },
            None => SignatureStatus::UnknownWriter(block.public_key),
        })
    }

    /// Loads and decodes one snapshot and checks its signature (the result is in
    /// `signature`; a bad signature is not an error here, callers flag it).
    pub fn load_snapshot(&self, id: &Id) -> Result<Snapshot> {
        self.load_snapshot_stored(id).map(|(s, _)| s)
    }

    /// [`Repository::load_snapshot`], with the bytes as stored (checked against
    /// the name), for a copy that writes them elsewhere unchanged.
    pub(crate) fn load_snapshot_stored(&self, id: &Id) -> Result<(Snapshot, Vec<u8>)> {
        let o = self.open_signed(ObjectKind::Snapshot, SealedKind::Snapshot, id)?;
        let mut s = Snapshot::decode(&o.plaintext).map_err(|e| Error::corrupt(ObjectKind::Snapshot.describe(id), e))?;
        s.signature = self.signature_status(&o, &s.writer, &s.commitment())?;
        Ok((s, o.stored))
    }

    /// Signs and stores a snapshot; returns its id.
    pub fn save_snapshot(&self, snap: &Snapshot, key: &SigningKey) -> Result<Id> {
        if snap.writer != key.public() {
            return Err(Error::InvalidInput("the snapshot names another writer than the signing key".into()));
        }
        self.save_signed(SealedKind::Snapshot, &snap.encode(), &snap.commitment(), key)
    }

    /// Loads one tombstone and checks its signature.
    pub fn load_tombstone(&self, id: &Id) -> Result<Tombstone> {
        let o = self.open_signed(ObjectKind::Tombstone, SealedKind::Tombstone, id)?;
        let mut t =
            Tombstone::decode(&o.plaintext).map_err(|e| Error::corrupt(ObjectKind::Tombstone.describe(id), e))?;
        t.signature = self.signature_status(&o, &t.writer, &[0; 32])?;
        Ok(t)
    }

    /// Signs and stores a tombstone; returns its id.
    pub fn save_tombstone(&self, t: &Tombstone, key: &SigningKey) -> Result<Id> {
        if t.writer != key.public() {
            return Err(Error::InvalidInput("the tombstone names another writer than the signing key".into()));
        }
        self.save_signed(SealedKind::Tombstone, &t.encode(), &[0; 32], key)
    }

    /// Loads every tombstone; damaged ones are returned apart.
    pub fn tombstones(&self) -> Result<Loaded<Tombstone>> {
        let ids = self.list_ids_ahead(ObjectKind::Tombstone)?;
        let loaded: Vec<(Id, Result<Tombstone>)> = self.fetch_many(&ids, |id| (*id, self.load_tombstone(id)));
        split_damaged(loaded)
    }

    /// Loads every writer record; damaged ones are returned apart.
    pub fn writer_records(&self) -> Result<Loaded<WriterRecord>> {
        let ids = self.list_ids_ahead(ObjectKind::Writer)?;
        // Fetched on the backend's I/O concurrency, not the CPU pool.
        let loaded: Vec<(Id, Result<WriterRecord>)> = self.fetch_many(&ids, |id| {
            let r = self
                .load_sealed(ObjectKind::Writer, SealedKind::Writer, id)
                .and_then(|p| WriterRecord::decode(&p).map_err(|e| Error::corrupt(ObjectKind::Writer.describe(id), e)));
            (*id, r)
        });
        split_damaged(loaded)
    }

    /// The registered writer with public key `key`. Writer records are loaded once
    /// and reloaded when a key is not found (another client may have registered it).
    /// Callers at once (the snapshots of a history, loaded side by side) share one
    /// load: a caller that waited for another's load takes the key from it, and
    /// its absence only from a load begun after its call.
    pub fn writer(&self, key: &PublicKey) -> Result<Option<WriterRecord>> {
        let cached = || self.writers_cache().as_ref().and_then(|m| m.get(key)).cloned();
        if let Some(w) = cached() {
            return Ok(Some(w));
        }
        let asked_at = self.writer_loads.started.load(SeqCst);
        let _one_load = self.writer_loads.lock.lock().unwrap_or_else(|e| e.into_inner());
        let found = cached();
        if found.is_some() || self.writer_loads.started.load(SeqCst) > asked_at {
            return Ok(found);
        }
        self.writer_loads.started.fetch_add(1, SeqCst);
        let (records, _damaged) = self.writer_records()?;
        let map: Writers = records.into_iter().map(|(_, w)| (w.public_key, w)).collect();
        let found = map.get(key).cloned();
        *self.writers_cache_mut() = Some(map);
        Ok(found)
    }

    /// Registers `key` as a writer of this repository.
    pub fn register_writer(&self, key: &PublicKey, hostname: String, username: String) -> Result<Id> {
        let record = WriterRecord {
            version: crate::format::FORMAT_VERSION,
            public_key: *key,
            hostname,
            username,
            created: humantime::format_rfc3339_nanos(std::time::SystemTime::now()).to_string(),
        };
        let sealed = self.seal(SealedKind::Writer, &record.encode());
        let id = Id::hash_of(&sealed);
        super::check_storable(ObjectKind::Writer, sealed.len())?;
        self.backend().write(&ObjectKind::Writer.path(&id), sealed)?;
        self.writers_cache_mut().get_or_insert_with(HashMap::new).insert(*key, record);
        Ok(id)
    }

    /// This client's signing key for the repository if its local state holds one;
    /// nothing is created or registered (for a dry run).
    pub fn existing_writer_key(&self, state: &LocalState) -> Result<Option<SigningKey>> {
        let Some(bytes) = state.read(WRITER_KEY_FILE)? else {
            return Ok(None);
        };
        parse_writer_key(&bytes).map(Some).ok_or_else(|| {
            Error::InvalidInput(format!(
                "the signing key file {} is damaged; move it away to create a new writer key",
                state.path(WRITER_KEY_FILE).display()
            ))
        })
    }

    /// This client's signing key for the repository, from the local state; created
    /// and registered on first use, and registered again if its record is gone.
    pub fn writer_key(&self, state: &LocalState) -> Result<SigningKey> {
        let key = self.own_writer_key(state)?;
        self.ensure_registered(&key)?;
        Ok(key)
    }

    /// This client's signing key for the repository, from the local state, created
    /// on first use but not registered: a backup registers it
    /// ([`Repository::ensure_registered`]) beside its last uploads.
    pub fn own_writer_key(&self, state: &LocalState) -> Result<SigningKey> {
        Ok(match state.read(WRITER_KEY_FILE)? {
            Some(bytes) => parse_writer_key(&bytes).ok_or_else(|| {
                Error::InvalidInput(format!(
                    "the signing key file {} is damaged; move it away to create a new writer key",
                    state.path(WRITER_KEY_FILE).display()
                ))
            })?,
            None => {
                let key = SigningKey::generate();
                let text = format!(
                    "{{\"version\":1,\"seed\":\"{}\",\"public_key\":\"{}\"}}\n",
                    hex::encode(key.seed()),
                    key.public().to_hex()
                );
                state.write(WRITER_KEY_FILE, text.as_bytes())?;
                key
            }
        })
    }

    /// Registers `key` as this client's, unless a record of it is stored.
    pub fn ensure_registered(&self, key: &SigningKey) -> Result<()> {
        if self.writer(&key.public())?.is_none() {
            self.register_writer(&key.public(), crate::fs::meta::hostname(), crate::fs::meta::username())?;
        }
        Ok(())
    }
}

fn parse_writer_key(bytes: &[u8]) -> Option<SigningKey> {
    let v: serde_json::Value = serde_json::from_slice(bytes).ok()?;
    let mut seed = [0u8; 32];
    hex::decode_to_slice(v.get("seed")?.as_str()?, &mut seed).ok()?;
    let key = SigningKey::from_seed(&seed);
    seed.iter_mut().for_each(|b| *b = 0);
    (v.get("public_key")?.as_str()? == key.public().to_hex()).then_some(key)
}

/// Separates loaded objects from damaged ones; an object deleted between listing
/// and reading is left out; any other storage error fails the whole call.
pub(crate) fn split_damaged<T>(loaded: Vec<(Id, Result<T>)>) -> Result<Loaded<T>> {
    let (mut ok, mut damaged) = (Vec::new(), Vec::new());
    for (id, r) in loaded {
        match r {
            Ok(t) => ok.push((id, t)),
            Err(Error::Backend(e)) if e.kind == coffer_backend::ErrorKind::NotFound => {}
            Err(Error::Backend(e)) => return Err(Error::Backend(e)),
            Err(e) => damaged.push(e),
        }
    }
    Ok((ok, damaged))
}
