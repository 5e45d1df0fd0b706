//! The blob saver: deduplicates, compresses, encrypts and packs blobs, uploads
//! full packs and writes index files. Safe to call from many threads at once:
//! threads take open packs from a pool of at most one per worker thread, sealing
//! blobs into them one at a time. An open pack is written to a spool file as it
//! fills (it holds only a small write buffer in memory), so memory does not
//! depend on the pack size. Tree blobs go to packs of their own (at most one
//! open at a time), so that a reader fetches a snapshot's trees pack-wide in a
//! few requests (docs/design.md#packs).
//!
//! Write order (docs/design.md#write-order): a pack is uploaded before any index
//! file lists it, and [`BlobSaver::finish`] returns only after every pack and
//! index file is stored, so a snapshot written after it references only stored blobs.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};

use super::uploader::Uploader;
use super::{Repository, Spool, spool_error};
use crate::error::{Error, Result};
use crate::format::ObjectKind;
use crate::format::envelope::SealedKind;
use crate::format::index::{self as index_file, PackRecord};
use crate::format::pack::{BlobType, COMPRESSION_NONE, COMPRESSION_ZSTD, FinishedPack, PackBuilder};
use crate::id::Id;

/// Counters of what a saver added.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SaverStats {
    /// Blobs added.
    pub blobs: u64,
    /// Plaintext bytes of the blobs added.
    pub bytes_new: u64,
    /// Of those, the bytes of tree blobs (metadata, not file content).
    pub tree_bytes_new: u64,
    /// Bytes uploaded (packs and index files).
    pub bytes_stored: u64,
    /// Packs uploaded.
    pub packs: u64,
}

/// The open packs of one stream (data or trees): each is either in `free` or
/// held by one thread while it adds a blob.
struct PackPool {
    free: Mutex<Vec<PackBuilder<Spool>>>,
    open: Mutex<usize>,
    returned: Condvar,
    max_open: usize,
}

impl PackPool {
    fn new(max_open: usize) -> Self {
        PackPool { free: Mutex::new(Vec::new()), open: Mutex::new(0), returned: Condvar::new(), max_open }
    }
}

/// Open tree packs at most: tree blobs are small and sealed in microseconds, so
/// one pack serves every worker, and trees fill as few packs as they can.
const TREE_PACKS_OPEN: usize = 1;

/// Saves blobs into packs. See the module documentation.
pub struct BlobSaver<'r> {
    repo: &'r Repository,
    dry_run: bool,
    /// Data blobs' packs.
    packs: PackPool,
    /// Tree blobs' packs.
    tree_packs: PackPool,
    pending: Mutex<HashSet<Id>>,
    unindexed: Mutex<Vec<PackRecord>>,
    uploader: Option<Uploader>,
    blobs: AtomicU64,
    bytes_new: AtomicU64,
    tree_bytes_new: AtomicU64,
    bytes_stored: AtomicU64,
    packs_done: AtomicU64,
    observer: Option<Box<dyn Fn(SaverEvent) + Send + Sync + 'r>>,
}

/// What a saver stored, for a [`BlobSaver::with_observer`] callback.
#[derive(Clone, Debug)]
pub enum SaverEvent {
    /// A pack was uploaded (no index file lists it yet).
    Pack(Id),
    /// An index file listing these packs was stored.
    IndexFile(Id, Vec<Id>),
}

impl<'r> BlobSaver<'r> {
    /// A saver writing into `repo`.
    pub fn new(repo: &'r Repository) -> Self {
        BlobSaver { uploader: Some(Uploader::new(repo.backend_arc(), repo.tree_cache())), ..Self::unstarted(repo) }
    }

    fn unstarted(repo: &'r Repository) -> Self {
        BlobSaver {
            repo,
            dry_run: false,
            packs: PackPool::new(rayon::current_num_threads().max(1)),
            tree_packs: PackPool::new(TREE_PACKS_OPEN),
            pending: Mutex::new(HashSet::new()),
            unindexed: Mutex::new(Vec::new()),
            uploader: None,
            blobs: AtomicU64::new(0),
            bytes_new: AtomicU64::new(0),
            tree_bytes_new: AtomicU64::new(0),
            bytes_stored: AtomicU64::new(0),
            packs_done: AtomicU64::new(0),
            observer: None,
        }
    }

    /// Calls `f` for every pack and index file this saver stores.
    pub fn with_observer(mut self, f: impl Fn(SaverEvent) + Send + Sync + 'r) -> Self {
        self.observer = Some(Box::new(f));
        self
    }

    /// A saver that deduplicates and counts but stores nothing (for `--dry-run`).
    pub fn dry_run(repo: &'r Repository) -> Self {
        BlobSaver { dry_run: true, ..Self::unstarted(repo) }
    }

    /// Saves `data` unless a blob with its id is already stored or being stored.
    /// Returns the id and whether this call added it.
    pub fn save(&self, blob_type: BlobType, data: &[u8]) -> Result<(Id, bool)> {
        let id = self.repo.blob_id(blob_type, data);
        Ok((id, self.save_with_id(blob_type, id, data)?))
    }

    /// Like [`BlobSaver::save`] with the id already computed by the caller.
    pub fn save_with_id(&self, blob_type: BlobType, id: Id, data: &[u8]) -> Result<bool> {
        if self.repo.index().contains(&id, blob_type) {
            return Ok(false);
        }
        self.store(blob_type, id, data)
    }

    /// Stores a blob again even though the index knows it: prune uses this to move
    /// blobs out of packs it is about to delete, and a backup to keep blobs it
    /// relies on that a concurrent prune is deleting. `data` must be the blob's
    /// verified plaintext.
    pub fn store_copy(&self, blob_type: BlobType, id: Id, data: &[u8]) -> Result<bool> {
        self.store(blob_type, id, data)
    }

    fn count_new(&self, blob_type: BlobType, len: usize) {
        self.blobs.fetch_add(1, Ordering::Relaxed);
        self.bytes_new.fetch_add(len as u64, Ordering::Relaxed);
        if blob_type == BlobType::Tree {
            self.tree_bytes_new.fetch_add(len as u64, Ordering::Relaxed);
        }
    }

    fn store(&self, blob_type: BlobType, id: Id, data: &[u8]) -> Result<bool> {
        if !self.pending.lock().expect("poisoned").insert(id) {
            return Ok(false);
        }
        let raw_length = u32::try_from(data.len())
            .map_err(|_| Error::InvalidInput(format!("blob of {} bytes exceeds the 4 GiB limit", data.len())))?;
        if self.dry_run {
            self.count_new(blob_type, data.len());
            return Ok(true);
        }
        // The pack is taken once the blob is compressed, so that it is held only
        // while the blob is sealed into it; trees and data go to packs apart.
        let pool = self.pool(blob_type);
        let (builder, added) =
            crate::compress::with_compressed(data, self.repo.config().compression_level, |compressed| {
                let (compression, payload) = match compressed {
                    Some(c) => (COMPRESSION_ZSTD, c),
                    None => (COMPRESSION_NONE, data),
                };
                let mut builder = self.take_pack(pool)?;
                let added = builder.add(blob_type, id, compression, payload, raw_length);
                Ok::<_, Error>((builder, added))
            })?;
        if let Err(e) = added {
            close_slot(pool);
            return Err(spool_error(&self.repo.spool_dir(), e));
        }
        let pack_size = u64::from(self.repo.config().pack_size);
        self.count_new(blob_type, data.len());
        // A pack is closed at its size, or at the number of blobs that keeps its
        // header and index record bounded (many tiny blobs).
        if builder.len() >= pack_size || builder.count() >= crate::format::limits::PACK_BLOBS {
            close_slot(pool);
            self.upload(builder)?;
        } else {
            pool.free.lock().expect("poisoned").push(builder);
            // Under the count's lock, so that a waiter cannot miss it.
            let _open = pool.open.lock().expect("poisoned");
            pool.returned.notify_one();
        }
        Ok(true)
    }

    /// The packs blobs of `blob_type` go to.
    fn pool(&self, blob_type: BlobType) -> &PackPool {
        match blob_type {
            BlobType::Data => &self.packs,
            BlobType::Tree => &self.tree_packs,
        }
    }

    /// Takes an open pack: the fullest free one, a new one while fewer than
    /// `max_open` are open, or else waits for one to be returned. Holders never
    /// block while they hold a pack (adding a blob only seals it and writes it to
    /// the spool file), so the wait is short. Filling the fullest first closes
    /// packs one after the other, each uploaded while the next fills, rather than
    /// all at once at the end (docs/design.md#backup).
    fn take_pack(&self, pool: &PackPool) -> Result<PackBuilder<Spool>> {
        let mut open = pool.open.lock().expect("poisoned");
        loop {
            {
                let mut free = pool.free.lock().expect("poisoned");
                if let Some(i) = (0..free.len()).max_by_key(|&i| free[i].len()) {
                    return Ok(free.swap_remove(i));
                }
            }
            if *open < pool.max_open {
                *open += 1;
                drop(open);
                return self.repo.new_pack().inspect_err(|_| close_slot(pool));
            }
            open = pool.returned.wait(open).expect("poisoned");
        }
    }

    fn upload(&self, pack: PackBuilder<Spool>) -> Result<()> {
        let spooled = |e| spool_error(&self.repo.spool_dir(), e);
        let p = pack.finish().map_err(spooled)?;
        let file = p.bytes.into_inner().map_err(|e| spooled(e.into_error()))?;
        let pack = FinishedPack {
            id: p.id,
            len: p.len,
            bytes: file,
            salt: p.salt,
            cipher: p.cipher,
            epoch: p.epoch,
            entries: p.entries,
        };
        let uploader = self.uploader.as_ref().expect("a saver that stores has an uploader");
        uploader.send(pack)?;
        self.absorb(uploader.completed())
    }

    /// Records packs that are now stored: into the index, and into an index file
    /// whenever one is full ([`index_file::is_full`]: so many packs or bytes), so
    /// an interrupted backup leaves most of its uploaded packs indexed and reusable.
    fn absorb(&self, stored: Vec<super::uploader::Stored>) -> Result<()> {
        for r in stored {
            let (rec, size) = r?;
            if let Some(f) = &self.observer {
                f(SaverEvent::Pack(rec.id));
            }
            self.bytes_stored.fetch_add(size, Ordering::Relaxed);
            self.packs_done.fetch_add(1, Ordering::Relaxed);
            self.repo.index_mut().add_pack(&rec).map_err(|e| Error::corrupt(ObjectKind::Pack.describe(&rec.id), e))?;
            let batch = {
                let mut u = self.unindexed.lock().expect("poisoned");
                u.push(rec);
                let bytes = u.iter().map(PackRecord::encoded_len).sum();
                if index_file::is_full(u.len(), bytes) { std::mem::take(&mut *u) } else { Vec::new() }
            };
            self.write_index(batch)?;
        }
        Ok(())
    }

    fn write_index(&self, batch: Vec<PackRecord>) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let plain = index_file::encode(&batch);
        let id = self.repo.save_sealed(SealedKind::Index, &plain)?;
        if let Some(f) = &self.observer {
            f(SaverEvent::IndexFile(id, batch.iter().map(|r| r.id).collect()));
        }
        self.bytes_stored.fetch_add((plain.len() + crate::format::envelope::OVERHEAD) as u64, Ordering::Relaxed);
        let mut pending = self.pending.lock().expect("poisoned");
        for rec in &batch {
            for e in &rec.entries {
                pending.remove(&e.id);
            }
        }
        Ok(())
    }

    /// Uploads every partly filled pack, waits for all uploads, writes the
    /// remaining index records, and returns what was added.
    pub fn finish(self) -> Result<SaverStats> {
        let mut builders = std::mem::take(&mut *self.packs.free.lock().expect("poisoned"));
        builders.append(&mut self.tree_packs.free.lock().expect("poisoned"));
        for b in builders {
            if !b.is_empty() {
                self.upload(b)?;
            }
        }
        if let Some(u) = &self.uploader {
            self.absorb(u.finish())?;
        }
        let rest = std::mem::take(&mut *self.unindexed.lock().expect("poisoned"));
        self.write_index(rest)?;
        Ok(self.stats())
    }

    /// What was added so far.
    pub fn stats(&self) -> SaverStats {
        SaverStats {
            blobs: self.blobs.load(Ordering::Relaxed),
            bytes_new: self.bytes_new.load(Ordering::Relaxed),
            tree_bytes_new: self.tree_bytes_new.load(Ordering::Relaxed),
            bytes_stored: self.bytes_stored.load(Ordering::Relaxed),
            packs: self.packs_done.load(Ordering::Relaxed),
        }
    }
}

/// A pack taken with [`BlobSaver::take_pack`] from `pool` will not be returned:
/// another may be opened.
fn close_slot(pool: &PackPool) {
    *pool.open.lock().expect("poisoned") -= 1;
    pool.returned.notify_one();
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::format::limits;
    use crate::repo::InitOptions;
    use coffer_backend::testing::{Hook, Intercepted, Request};
    use coffer_backend::{Backend, LocalBackend};

    #[test]
    fn a_pack_of_tiny_blobs_closes_at_its_blob_limit() {
        let dir = tempfile::tempdir().unwrap();
        let be: Arc<dyn Backend> = Arc::new(LocalBackend::open(dir.path()).unwrap());
        let kdf = crate::crypto::ScryptParams { log_n: 4, r: 8, p: 1 };
        let opts = InitOptions { kdf, compression_level: 0, ..InitOptions::default() };
        let repo = Repository::init(be, b"pw", &opts).unwrap();
        let saver = BlobSaver::new(&repo);
        // Far below the pack size in bytes, but more blobs than one pack may hold.
        let n = limits::PACK_BLOBS as u64 + 1000;
        for i in 0..n {
            saver.save(BlobType::Data, &i.to_le_bytes()).unwrap();
        }
        saver.finish().unwrap();
        let index_files = repo.list_ids(ObjectKind::Index).unwrap();
        let mut blobs = 0;
        let mut packs = 0;
        for id in &index_files {
            assert!(repo.backend().stat(&ObjectKind::Index.path(id)).unwrap() <= limits::INDEX_FILE);
            for rec in repo.load_index_file(id).unwrap() {
                assert!(rec.entries.len() <= limits::PACK_BLOBS, "{} blobs in one pack", rec.entries.len());
                blobs += rec.entries.len() as u64;
                packs += 1;
            }
        }
        assert_eq!(blobs, n);
        assert!(packs >= 2);
    }

    #[test]
    fn the_fullest_free_pack_is_taken_first() {
        let t = crate::testing::test_repo();
        let saver = BlobSaver::new(&t.repo);
        let pool = PackPool::new(2);
        let mut small = saver.take_pack(&pool).unwrap();
        let mut full = saver.take_pack(&pool).unwrap();
        small.add(BlobType::Data, Id([1; 32]), COMPRESSION_NONE, &[1; 100], 100).unwrap();
        full.add(BlobType::Data, Id([2; 32]), COMPRESSION_NONE, &[2; 5000], 5000).unwrap();
        let full_len = full.len();
        // Returned in the order that taking the last returned would get the small one.
        pool.free.lock().unwrap().push(full);
        pool.free.lock().unwrap().push(small);
        assert_eq!(saver.take_pack(&pool).unwrap().len(), full_len);
        assert!(saver.take_pack(&pool).unwrap().len() < full_len);
    }

    /// Takes 100 ms per pack written, counting how many pack writes overlap.
    #[derive(Default)]
    struct SlowPackWrites {
        in_flight: std::sync::atomic::AtomicUsize,
        most: std::sync::atomic::AtomicUsize,
    }

    impl Hook for SlowPackWrites {
        fn before(&self, request: Request<'_>) -> coffer_backend::BackendResult<()> {
            if let Request::Write(name) = request
                && name.starts_with(ObjectKind::Pack.prefix())
            {
                let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                self.most.fetch_max(now, Ordering::SeqCst);
                std::thread::sleep(std::time::Duration::from_millis(100));
                self.in_flight.fetch_sub(1, Ordering::SeqCst);
            }
            Ok(())
        }
    }

    #[test]
    fn a_store_that_wants_many_requests_gets_packs_uploaded_side_by_side_and_all_indexed() {
        // A store that wants 32 requests in flight.
        let store = Arc::new(Intercepted::new(coffer_backend::MemBackend::new(), 32, SlowPackWrites::default()));
        let opts = InitOptions { kdf: crate::testing::FAST_KDF, pack_size: 1 << 20, ..InitOptions::default() };
        let repo = Repository::init(store.clone(), b"pw", &opts).unwrap();
        let saver = BlobSaver::new(&repo);
        let blobs: Vec<Id> =
            (0..12u64).map(|i| saver.save(BlobType::Data, &crate::testing::noise(1 << 20, i + 1)).unwrap().0).collect();
        saver.finish().unwrap();
        assert!(
            store.hook().most.load(Ordering::SeqCst) >= 2,
            "pack uploads overlap on a store that wants many requests"
        );
        let stored = repo.list_ids(ObjectKind::Pack).unwrap();
        let mut indexed = Vec::new();
        for f in repo.list_ids(ObjectKind::Index).unwrap() {
            indexed.extend(repo.load_index_file(&f).unwrap().into_iter().map(|r| r.id));
        }
        indexed.sort();
        let mut stored_sorted = stored.clone();
        stored_sorted.sort();
        assert_eq!(indexed, stored_sorted, "every stored pack is indexed once, and only stored packs");
        let reader = Repository::open(store, b"pw").unwrap();
        reader.load_index().unwrap();
        for (i, id) in blobs.iter().enumerate() {
            assert_eq!(reader.load_blob(BlobType::Data, id).unwrap(), crate::testing::noise(1 << 20, i as u64 + 1));
        }
    }
}
