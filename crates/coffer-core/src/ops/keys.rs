//! Managing the key files of an open repository: listing, adding and removing them,
//! changing a passphrase, and rotating the data key. See docs/design.md#key-files
//! and docs/design.md#key-rotation.
//!
//! Every key file wraps the same id and chunker keys and the data keys of every
//! epoch. Adding or removing a key file touches no other object. A rotation adds a
//! data key for a new epoch: objects written from then on are sealed under it,
//! objects already stored keep their epoch and are not rewritten. Only the key file
//! that opened the repository can be given the new key (the others' passphrases are
//! unknown), so a rotation rewrites that one and deletes the others.
//!
//! Each operation writes before it deletes, so an interruption leaves an extra key
//! file, never a repository that no key file opens.

use crate::crypto::{Epoch, ScryptParams};
use crate::error::{Error, Result};
use crate::format::envelope::{self, HEADER_LEN};
use crate::format::keyfile::KeyFile;
use crate::format::{ObjectKind, keyfile::MasterKeys};
use crate::id::Id;
use crate::repo::Repository;

/// The key files of a repository.
#[derive(Debug, Default)]
pub struct KeyFiles {
    /// Those that decode, by id.
    pub files: Vec<(Id, KeyFile)>,
    /// The errors of those that do not.
    pub damaged: Vec<Error>,
}

/// Every key file: those that decode, and the errors of those that do not.
pub fn list(repo: &Repository) -> Result<KeyFiles> {
    let mut ok = Vec::new();
    let mut damaged = Vec::new();
    for id in repo.list_ids(ObjectKind::Key)? {
        let decoded = repo
            .read_object(ObjectKind::Key, &id)
            .and_then(|bytes| KeyFile::decode(&bytes).map_err(|e| Error::corrupt(ObjectKind::Key.describe(&id), e)));
        match decoded {
            Ok(kf) => ok.push((id, kf)),
            Err(Error::Backend(e)) if e.kind == coffer_backend::ErrorKind::NotFound => {} // removed meanwhile
            Err(Error::Backend(e)) => return Err(Error::Backend(e)),
            Err(e) => damaged.push(e),
        }
    }
    Ok(KeyFiles { files: ok, damaged })
}

/// The key file whose id starts with `prefix` (hex, any case); it must be unique.
pub fn resolve(repo: &Repository, prefix: &str) -> Result<Id> {
    let p = prefix.to_ascii_lowercase();
    let ids = repo.list_ids(ObjectKind::Key)?;
    let matches: Vec<Id> =
        if p.is_empty() { vec![] } else { ids.into_iter().filter(|id| id.to_hex().starts_with(&p)).collect() };
    match matches.as_slice() {
        [one] => Ok(*one),
        [] => Err(Error::InvalidInput(format!("no key file matches '{prefix}'; 'coffer key list' shows them"))),
        _ => Err(Error::AmbiguousId(prefix.to_string())),
    }
}

fn store(repo: &Repository, keys: &MasterKeys, passphrase: &[u8], kdf: ScryptParams) -> Result<Id> {
    if passphrase.is_empty() {
        return Err(Error::InvalidInput(crate::repo::EMPTY_PASSPHRASE.into()));
    }
    let kf =
        KeyFile::create(keys, passphrase, kdf, repo.cipher(), crate::fs::meta::hostname(), crate::fs::meta::username())
            .map_err(Error::InvalidInput)?;
    let bytes = kf.encode();
    let id = Id::hash_of(&bytes);
    repo.backend().write(&ObjectKind::Key.path(&id), bytes)?;
    Ok(id)
}

/// Adds a key file for `passphrase` wrapping the secrets of the key file that opened
/// the repository; returns its id.
pub fn add(repo: &Repository, passphrase: &[u8], kdf: ScryptParams) -> Result<Id> {
    store(repo, repo.keys(), passphrase, kdf)
}

/// Removes key file `id`. Refuses to remove the only key file, and the key file that
/// opened the repository (so that a passphrase cannot remove itself by mistake: it
/// must be done with another one, or by [`passwd`]).
pub fn remove(repo: &Repository, id: &Id) -> Result<()> {
    let ids = repo.list_ids(ObjectKind::Key)?;
    if !ids.contains(id) {
        return Err(Error::InvalidInput(format!("no key file {}; 'coffer key list' shows them", id.short())));
    }
    if ids.len() == 1 {
        return Err(Error::InvalidInput(format!(
            "key file {} is the only one: without it no passphrase would open the repository; add another \
             with 'coffer key add' first",
            id.short()
        )));
    }
    if *id == repo.key_id() {
        return Err(Error::InvalidInput(format!(
            "key file {} opened the repository and cannot remove itself: open the repository with another \
             passphrase to remove it, or change its passphrase with 'coffer key passwd'",
            id.short()
        )));
    }
    repo.backend().delete(&ObjectKind::Key.path(id))?;
    Ok(())
}

/// Replaces the key file that opened the repository by one for `new_passphrase`:
/// adds the new one, then deletes the old one. Returns (added, removed).
pub fn passwd(repo: &Repository, new_passphrase: &[u8], kdf: ScryptParams) -> Result<(Id, Id)> {
    let added = add(repo, new_passphrase, kdf)?;
    let old = repo.key_id();
    repo.backend().delete(&ObjectKind::Key.path(&old))?;
    Ok((added, old))
}

/// What a rotation did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rotation {
    /// The new current epoch.
    pub epoch: Epoch,
    /// The key file now wrapping every data key.
    pub key: Id,
    /// The key files deleted: first the one that opened the repository, then the others.
    pub removed: Vec<Id>,
}

/// The highest data key epoch among the headers of stored index files, snapshots,
/// tombstones and writer records (read without keys: the epoch is in the clear).
pub fn newest_epoch_in_use(repo: &Repository) -> Result<Epoch> {
    let mut newest = 0;
    for kind in [ObjectKind::Index, ObjectKind::Snapshot, ObjectKind::Tombstone, ObjectKind::Writer] {
        for id in repo.list_ids(kind)? {
            let header = match repo.backend().read_range(&kind.path(&id), 0, HEADER_LEN as u64) {
                Ok(h) => h,
                Err(e) if e.kind == coffer_backend::ErrorKind::NotFound => continue,
                Err(e) => return Err(e.into()),
            };
            newest = newest.max(envelope::epoch(&header).unwrap_or(0));
        }
    }
    Ok(newest)
}

/// Rotates the data key: a new key file for `passphrase` (which MUST be the one
/// that opened the repository; it is checked) wraps the id and chunker keys, every
/// data key so far, and a new one for the next epoch. Then the key file that opened
/// the repository is deleted, and every other key file after it: they cannot be
/// given the new key without their passphrases. Their holders add theirs again.
///
/// Refuses when stored objects use an epoch the opening key file does not hold: it
/// predates an earlier rotation, and rotating with it would reuse that epoch for
/// another key and delete the only key files that read the newer data.
pub fn rotate(repo: &Repository, passphrase: &[u8]) -> Result<Rotation> {
    let opener = repo.key_id();
    let in_use = newest_epoch_in_use(repo)?;
    if in_use > repo.epoch() {
        return Err(Error::InvalidInput(format!(
            "the repository holds objects sealed under data key epoch {in_use}, but key file {} holds epochs 0 \
             to {} only: it predates an earlier rotation. Open the repository with a passphrase added after it",
            opener.short(),
            repo.epoch()
        )));
    }
    let bytes = repo.read_object(ObjectKind::Key, &opener)?;
    let kf = KeyFile::decode(&bytes).map_err(|e| Error::corrupt(ObjectKind::Key.describe(&opener), e))?;
    match kf.open(passphrase).map_err(|e| Error::corrupt(ObjectKind::Key.describe(&opener), e))? {
        Some(keys) if keys.data == repo.keys().data => {}
        _ => return Err(Error::InvalidInput("the passphrase given is not the one that opened the repository".into())),
    }
    let rotated = repo.keys().rotated().map_err(Error::InvalidInput)?;
    let epoch = rotated.data.current().0;
    let key = store(repo, &rotated, passphrase, kf.scrypt)?;
    let mut removed = vec![opener];
    removed.extend(repo.list_ids(ObjectKind::Key)?.into_iter().filter(|id| *id != key && *id != opener));
    for id in &removed {
        repo.backend().delete(&ObjectKind::Key.path(id))?;
    }
    Ok(Rotation { epoch, key, removed })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::format::envelope::SealedKind;
    use crate::repo::InitOptions;
    use coffer_backend::{Backend, OpendalBackend};

    use crate::testing::FAST_KDF as FAST;

    fn init(dir: &std::path::Path) -> Arc<dyn Backend> {
        let be: Arc<dyn Backend> = Arc::new(OpendalBackend::local(dir).unwrap());
        Repository::init(be.clone(), b"pw", &InitOptions { kdf: FAST, ..InitOptions::default() }).unwrap();
        be
    }

    /// No key file is ever made for an empty passphrase.
    #[test]
    fn an_empty_passphrase_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let be: Arc<dyn Backend> = Arc::new(OpendalBackend::local(dir.path()).unwrap());
        let opts = InitOptions { kdf: FAST, ..InitOptions::default() };
        let err = Repository::init(be.clone(), b"", &opts).err().expect("refused");
        assert!(err.to_string().contains("empty passphrase"), "{err}");
        assert!(!Repository::exists(be.as_ref()).unwrap());
        let be = init(dir.path());
        let repo = Repository::open(be.clone(), b"pw").unwrap();
        assert!(add(&repo, b"", FAST).unwrap_err().to_string().contains("empty passphrase"));
        assert!(passwd(&repo, b"", FAST).unwrap_err().to_string().contains("empty passphrase"));
        assert_eq!(repo.list_ids(ObjectKind::Key).unwrap().len(), 1);
    }

    #[test]
    fn add_remove_passwd() {
        let dir = tempfile::tempdir().unwrap();
        let be = init(dir.path());
        let repo = Repository::open(be.clone(), b"pw").unwrap();
        let first = repo.key_id();
        assert!(remove(&repo, &first).unwrap_err().to_string().contains("only one"));
        let second = add(&repo, b"two", FAST).unwrap();
        assert!(remove(&repo, &first).unwrap_err().to_string().contains("opened the repository"));
        assert_eq!(resolve(&repo, &second.to_hex()[..6]).unwrap(), second);
        let two = Repository::open(be.clone(), b"two").unwrap();
        assert_eq!(two.key_id(), second);
        remove(&two, &first).unwrap();
        assert!(matches!(Repository::open(be.clone(), b"pw"), Err(Error::WrongPassword { .. })));
        let (added, removed) = passwd(&two, b"three", FAST).unwrap();
        assert_eq!(removed, second);
        assert_eq!(list(&two).unwrap().files.iter().map(|(id, _)| *id).collect::<Vec<_>>(), vec![added]);
        assert!(Repository::open(be.clone(), b"two").is_err());
        Repository::open(be, b"three").unwrap();
    }

    #[test]
    fn rotate_adds_an_epoch_and_keeps_the_old_ones() {
        let dir = tempfile::tempdir().unwrap();
        let be = init(dir.path());
        let repo = Repository::open(be.clone(), b"pw").unwrap();
        let old = repo.save_sealed(SealedKind::Index, &crate::format::index::encode(&[])).unwrap();
        add(&repo, b"other", FAST).unwrap();
        assert!(rotate(&repo, b"wrong").is_err());
        let r = rotate(&repo, b"pw").unwrap();
        assert_eq!(r.epoch, 1);
        assert_eq!(r.removed.len(), 2);
        assert_eq!(repo.list_ids(ObjectKind::Key).unwrap(), vec![r.key]);
        let rotated = Repository::open(be.clone(), b"pw").unwrap();
        assert_eq!(rotated.epoch(), 1);
        assert_eq!(rotated.keys().id, repo.keys().id);
        assert_eq!(rotated.keys().chunker, repo.keys().chunker);
        let new = rotated.save_sealed(SealedKind::Index, &crate::format::index::encode(&[])).unwrap();
        assert_eq!(envelope::epoch(&be.read(&ObjectKind::Index.path(&new)).unwrap()), Some(1));
        rotated.load_index_file(&old).unwrap();
        rotated.load_index_file(&new).unwrap();
        // The repository object opened before the rotation still holds epoch 0 only.
        let err = repo.load_index_file(&new).unwrap_err();
        assert!(matches!(err, Error::Corrupt { .. }) && err.to_string().contains("epoch 1"), "{err}");
        // And it may not rotate again: epoch 1 is taken.
        assert!(rotate(&repo, b"pw").unwrap_err().to_string().contains("predates an earlier rotation"));
        assert_eq!(newest_epoch_in_use(&rotated).unwrap(), 1);
    }
}
