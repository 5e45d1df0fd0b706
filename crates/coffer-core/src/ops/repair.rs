//! `coffer repair index`: rebuilds the index from the packs' own trailers and
//! headers. See docs/design.md#repair-index.
//!
//! New index files are stored before any old one is deleted, so an interruption
//! at any point leaves an index that covers every pack it covered before. Packs
//! are read 32 at a time and each batch is stored as one index file at once, so
//! memory stays bounded by a batch, whatever the repository's size.

use std::collections::{HashMap, HashSet};

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::format::envelope::SealedKind;
use crate::format::{ObjectKind, index as index_file};
use crate::id::Id;
use crate::lifecycle::session;
use crate::progress::Progress;
use crate::repo::Repository;
use coffer_backend::ErrorKind;

/// Packs per index file written, as a backup writes them.
const PACKS_PER_FILE: usize = 32;

/// What `repair index` did (or, with `dry_run`, would do).
#[derive(Debug, Default, serde::Serialize)]
pub struct RepairReport {
    /// Nothing was written or deleted.
    pub dry_run: bool,
    /// Packs in the storage.
    pub packs: u64,
    /// Packs indexed from their own trailer and header.
    pub packs_indexed: u64,
    /// Blobs those packs hold.
    pub blobs: u64,
    /// Packs whose trailer or header cannot be read, each with what is wrong. Their
    /// records from old index files, where one loads, are kept.
    pub packs_unreadable: Vec<String>,
    /// Of those, the packs kept in the index from an old index file's record.
    pub packs_kept_from_old_index: u64,
    /// Packs that old index files list but the storage does not hold, each with
    /// the number of blobs that were listed in it.
    pub packs_missing: Vec<String>,
    /// Old index files that do not load, each with what is wrong.
    pub index_files_damaged: Vec<String>,
    /// Index files written.
    pub index_files_written: Vec<Id>,
    /// Old index files deleted.
    pub index_files_deleted: u64,
    /// Old index files kept because a running backup lists them in its session
    /// marker (a later repair removes them).
    pub index_files_kept: u64,
}

/// Rebuilds the index: reads every pack's trailer and header, stores new index
/// files covering every pack that reads, carries over from old index files the
/// records of packs whose trailer or header does not read, and then deletes the
/// old index files (except those a running backup's marker lists). Packs that do
/// not read, packs old index files list that are gone, and old index files that
/// do not load are reported. A storage error stops the repair before any old
/// index file is deleted.
pub fn repair_index(repo: &Repository, dry_run: bool, progress: &dyn Progress) -> Result<RepairReport> {
    let mut report = RepairReport { dry_run, ..Default::default() };
    // The old index files are listed before the packs: every pack one of them lists
    // was stored before it (docs/design.md#write-order), so the new files cover it.
    let old_files = repo.list_ids(ObjectKind::Index)?;
    let mut packs: Vec<(Id, u64)> = repo
        .backend()
        .list(ObjectKind::Pack.prefix())?
        .into_iter()
        .filter_map(|o| Some((ObjectKind::Pack.id_from_path(&o.name)?, o.size)))
        .collect();
    packs.sort();
    report.packs = packs.len() as u64;
    progress.set_total(0, packs.len() as u64);

    let mut unreadable: HashMap<Id, String> = HashMap::new();
    for batch in packs.chunks(PACKS_PER_FILE) {
        let read: Vec<(Id, Result<index_file::PackRecord>)> =
            batch.par_iter().map(|(id, size)| (*id, repo.pack_record(id, *size))).collect();
        let mut records = Vec::new();
        for (id, r) in read {
            match r {
                Ok(rec) => records.push(rec),
                Err(Error::Backend(e)) if e.kind != ErrorKind::NotFound => return Err(Error::Backend(e)),
                // Deleted since the listing (a prune): nothing to index.
                Err(Error::Backend(_)) => {}
                Err(e) => {
                    unreadable.insert(id, e.to_string());
                }
            }
            progress.add_item(std::path::Path::new(&ObjectKind::Pack.path(&id)));
        }
        report.packs_indexed += records.len() as u64;
        report.blobs += records.iter().map(|r| r.entries.len() as u64).sum::<u64>();
        store(repo, &records, &mut report)?;
    }

    // The old files: what they say of packs that do not read, and of packs gone.
    let stored: HashSet<Id> = packs.iter().map(|(id, _)| *id).collect();
    let mut kept = Vec::new();
    let mut missing: HashMap<Id, u64> = HashMap::new();
    let mut carried: HashSet<Id> = HashSet::new();
    for fid in &old_files {
        match repo.load_index_file(fid) {
            Ok(recs) => {
                for rec in recs {
                    if !stored.contains(&rec.id) {
                        *missing.entry(rec.id).or_default() += rec.entries.len() as u64;
                    } else if unreadable.contains_key(&rec.id) && carried.insert(rec.id) {
                        kept.push(rec);
                    }
                }
            }
            Err(Error::Backend(e)) if e.kind != ErrorKind::NotFound => return Err(Error::Backend(e)),
            Err(Error::Backend(_)) => {}
            Err(e) => report.index_files_damaged.push(e.to_string()),
        }
    }
    report.packs_kept_from_old_index = kept.len() as u64;
    for chunk in kept.chunks(PACKS_PER_FILE) {
        store(repo, chunk, &mut report)?;
    }
    let mut unreadable: Vec<(Id, String)> = unreadable.into_iter().collect();
    unreadable.sort();
    report.packs_unreadable = unreadable
        .into_iter()
        .map(|(id, e)| {
            let fate = if carried.contains(&id) {
                "its record from an old index file is kept"
            } else {
                "no index lists it now; its blobs are not found"
            };
            format!("{e} ({fate})")
        })
        .collect();
    let mut missing: Vec<(Id, u64)> = missing.into_iter().collect();
    missing.sort();
    report.packs_missing = missing
        .into_iter()
        .map(|(id, n)| {
            format!(
                "{}: listed by an old index file with {n} blobs, but missing from the repository; dropped from the index",
                ObjectKind::Pack.describe(&id)
            )
        })
        .collect();

    // Every new file is stored: the old ones go, except those a running backup
    // relies on (its marker lists them; prune spares their packs through them).
    let in_use: HashSet<Id> =
        session::list(repo)?.into_iter().filter_map(|(_, rec)| rec).flat_map(|rec| rec.index_files).collect();
    let written: HashSet<Id> = report.index_files_written.iter().copied().collect();
    for fid in old_files.iter().filter(|f| !written.contains(f)) {
        if in_use.contains(fid) {
            report.index_files_kept += 1;
            continue;
        }
        if !dry_run {
            match repo.backend().delete(&ObjectKind::Index.path(fid)) {
                Ok(()) => {}
                Err(e) if e.kind == ErrorKind::NotFound => {}
                Err(e) => return Err(e.into()),
            }
        }
        report.index_files_deleted += 1;
    }
    Ok(report)
}

/// Stores one index file for `records` (unless a dry run).
fn store(repo: &Repository, records: &[index_file::PackRecord], report: &mut RepairReport) -> Result<()> {
    if records.is_empty() {
        return Ok(());
    }
    let plain = index_file::encode(records);
    let id = if report.dry_run { Id::hash_of(&plain) } else { repo.save_sealed(SealedKind::Index, &plain)? };
    report.index_files_written.push(id);
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::crypto::ScryptParams;
    use crate::crypto::sign::SigningKey;
    use crate::ops::backup::{BackupOptions, backup};
    use crate::progress::NoProgress;
    use crate::repo::{InitOptions, SaverEvent};
    use coffer_backend::{Backend, OpendalBackend};

    /// A repository with one backup, and its backend.
    fn backed_up(dir: &std::path::Path) -> Arc<dyn Backend> {
        let src = dir.join("src");
        std::fs::create_dir(&src).unwrap();
        std::fs::write(src.join("f"), crate::testing::noise(50_000, 3)).unwrap();
        let be: Arc<dyn Backend> = Arc::new(OpendalBackend::local(&dir.join("repo")).unwrap());
        let opts = InitOptions { kdf: ScryptParams { log_n: 4, r: 8, p: 1 }, ..InitOptions::default() };
        let repo = Repository::init(be.clone(), b"pw", &opts).unwrap();
        let key = SigningKey::generate();
        repo.register_writer(&key.public(), "host".into(), "user".into()).unwrap();
        backup(&repo, &BackupOptions { paths: vec![src], ..BackupOptions::default() }, &key, &NoProgress).unwrap();
        be
    }

    /// An index file a running backup's marker lists is kept: a prune spares that
    /// backup's packs through it. A repair run later, the backup gone, removes it.
    #[test]
    fn index_files_of_a_running_backup_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let be = backed_up(dir.path());
        let repo = Repository::open(be.clone(), b"pw").unwrap();
        let old = repo.list_ids(ObjectKind::Index).unwrap();
        let session = session::Session::start(&repo, Duration::from_millis(10)).unwrap();
        session.sink()(SaverEvent::IndexFile(old[0], Vec::new()));
        std::thread::sleep(Duration::from_millis(100)); // a heartbeat records it
        let r = repair_index(&repo, false, &NoProgress).unwrap();
        assert_eq!((r.index_files_kept, r.index_files_deleted), (1, old.len() as u64 - 1), "{r:?}");
        assert!(be.stat(&ObjectKind::Index.path(&old[0])).is_ok());
        session.finish().unwrap();
        let r = repair_index(&repo, false, &NoProgress).unwrap();
        assert_eq!(r.index_files_kept, 0);
        assert!(be.stat(&ObjectKind::Index.path(&old[0])).is_err());
        // The repaired index covers every pack.
        let repo = Repository::open(be, b"pw").unwrap();
        assert!(repo.load_index().unwrap().is_empty());
        assert_eq!(repo.index().packs().len() as u64, r.packs);
    }

    /// Interrupted after its new files are stored (the old ones still there), the
    /// index is whole: every blob is found, in duplicate at worst.
    #[test]
    fn an_interrupted_repair_leaves_a_whole_index() {
        let dir = tempfile::tempdir().unwrap();
        let be = backed_up(dir.path());
        let repo = Repository::open(be.clone(), b"pw").unwrap();
        assert!(repo.load_index().unwrap().is_empty());
        let before: Vec<Id> = repo.index().iter().map(|e| e.entry.id).collect();
        let old = repo.list_ids(ObjectKind::Index).unwrap();
        // The new files of a repair, without its deletions.
        let saved: Vec<(Id, Vec<u8>)> =
            old.iter().map(|id| (*id, be.read(&ObjectKind::Index.path(id)).unwrap())).collect();
        repair_index(&repo, false, &NoProgress).unwrap();
        for (id, bytes) in saved {
            be.write(&ObjectKind::Index.path(&id), bytes).unwrap();
        }
        let repo = Repository::open(be.clone(), b"pw").unwrap();
        assert!(repo.load_index().unwrap().is_empty());
        for id in &before {
            assert!(repo.index().get(id).is_some());
        }
        assert_eq!(repo.index().len(), before.len());
        // Repairing again leaves one copy of each.
        repair_index(&repo, false, &NoProgress).unwrap();
        let repo = Repository::open(be, b"pw").unwrap();
        assert!(repo.load_index().unwrap().is_empty());
        assert_eq!(repo.index().blobs_with_copies(), 0);
        assert_eq!(repo.index().len(), before.len());
    }
}
