//! The blob saver: deduplicates, compresses, encrypts and packs blobs, uploads
//! full packs and writes index files. Safe to call from many threads at once:
//! threads take open packs from a pool of at most one per worker thread, each
//! worker keeping to its own, sealing blobs into them one at a time. An open
//! pack is written to a spool file as it fills (it holds only a small write
//! buffer in memory), so memory does not depend on the pack size. Tree blobs go
//! to packs of their own (at most one open at a time), so that a reader fetches
//! a snapshot's trees pack-wide in a few requests (docs/design.md#packs).
//!
//! Write order (docs/design.md#write-order): a pack is uploaded before any index
//! file lists it, and [`BlobSaver::finish`] returns only after every pack and
//! index file is stored, so a snapshot written after it references only stored blobs.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
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
    free: Mutex<Vec<OpenPack>>,
    open: Mutex<usize>,
    returned: Condvar,
    max_open: usize,
    /// Packs opened so far.
    opened: AtomicUsize,
    /// Sealing buffers of closed packs, for the next ones (each would fault in
    /// fresh pages at its first blob otherwise).
    scratch: Mutex<Vec<Vec<u8>>>,
}

impl PackPool {
    fn new(max_open: usize) -> Self {
        PackPool {
            free: Mutex::new(Vec::new()),
            open: Mutex::new(0),
            returned: Condvar::new(),
            max_open,
            opened: AtomicUsize::new(0),
            scratch: Mutex::new(Vec::new()),
        }
    }

    /// Keeps a closed pack's sealing buffer for the next pack opened.
    fn keep_scratch(&self, buffer: Vec<u8>) {
        let mut kept = self.scratch.lock().expect("poisoned");
        if buffer.capacity() > 0 && kept.len() < self.max_open {
            kept.push(buffer);
        }
    }
}

/// An open pack: the worker thread that added to it last (none until it is
/// given back), and the length at which it is closed.
struct OpenPack {
    user: Option<usize>,
    close_at: u64,
    builder: PackBuilder<Spool>,
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
        let me = rayon::current_thread_index();
        let (mut pack, added) =
            crate::compress::with_compressed(data, self.repo.config().compression_level, |compressed| {
                let (compression, payload) = match compressed {
                    Some(c) => (COMPRESSION_ZSTD, c),
                    None => (COMPRESSION_NONE, data),
                };
                let mut pack = self.take_pack(pool, me)?;
                let added = pack.builder.add(blob_type, id, compression, payload, raw_length);
                Ok::<_, Error>((pack, added))
            })?;
        if let Err(e) = added {
            close_slot(pool);
            return Err(spool_error(&self.repo.spool_dir(), e));
        }
        self.count_new(blob_type, data.len());
        // A pack is closed at its length, or at the number of blobs that keeps
        // its header and index record bounded (many tiny blobs).
        if pack.builder.len() >= pack.close_at || pack.builder.count() >= crate::format::limits::PACK_BLOBS {
            close_slot(pool);
            pool.keep_scratch(pack.builder.take_scratch());
            self.upload(pack.builder)?;
        } else {
            pack.user = me;
            pool.free.lock().expect("poisoned").push(pack);
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

    /// Takes an open pack for worker thread `me`: the one it added to last if
    /// that is free, else a new one while fewer than `max_open` are open, else
    /// the fullest free one, or else waits for one to be returned (a thread
    /// outside the pool of workers takes the fullest free one first). Holders never
    /// block while they hold a pack (adding a blob only seals it and writes it
    /// to the spool file), so the wait is short. A worker keeping to its own
    /// pack keeps the files it walks together, where a restore of them reads
    /// few ranges. The first packs of a pool close early, the `k`-th of `n` at
    /// `k/n` of the pack size, so that packs filled side by side close one
    /// after the other, each uploaded while the others fill
    /// (docs/design.md#backup).
    fn take_pack(&self, pool: &PackPool, me: Option<usize>) -> Result<OpenPack> {
        let mut open = pool.open.lock().expect("poisoned");
        loop {
            {
                let mut free = pool.free.lock().expect("poisoned");
                let fullest = (0..free.len()).max_by_key(|&i| free[i].builder.len());
                let pick = match me {
                    Some(_) => free.iter().position(|p| p.user == me).or(fullest.filter(|_| *open >= pool.max_open)),
                    None => fullest,
                };
                if let Some(i) = pick {
                    return Ok(free.swap_remove(i));
                }
            }
            if *open < pool.max_open {
                *open += 1;
                drop(open);
                let mut builder = self.repo.new_pack().inspect_err(|_| close_slot(pool))?;
                if let Some(b) = pool.scratch.lock().expect("poisoned").pop() {
                    builder.reuse_scratch(b);
                }
                let k = pool.opened.fetch_add(1, Ordering::Relaxed) as u64 + 1;
                let (n, size) = (pool.max_open as u64, u64::from(self.repo.config().pack_size));
                return Ok(OpenPack { user: None, close_at: size * k.min(n) / n, builder });
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

    /// Uploads every partly filled pack, the data packs filled side by side
    /// first gathered into as few as the pack size (and the most blobs a pack
    /// holds) allows, waits for all uploads, writes the remaining index
    /// records, and returns what was added.
    pub fn finish(self) -> Result<SaverStats> {
        let take = |pool: &PackPool| std::mem::take(&mut *pool.free.lock().expect("poisoned"));
        let mut partial: Vec<_> = take(&self.packs).into_iter().map(|p| p.builder).filter(|b| !b.is_empty()).collect();
        partial.sort_by_key(|b| std::cmp::Reverse(b.len()));
        let pack_size = u64::from(self.repo.config().pack_size);
        let mut gathered: Option<PackBuilder<Spool>> = None;
        for b in partial {
            match &mut gathered {
                Some(g)
                    if g.len() + b.len() <= pack_size && g.count() + b.count() <= crate::format::limits::PACK_BLOBS =>
                {
                    g.absorb(b).map_err(|e| spool_error(&self.repo.spool_dir(), e))?
                }
                _ => {
                    if let Some(full) = gathered.replace(b) {
                        self.upload(full)?;
                    }
                }
            }
        }
        let trees = take(&self.tree_packs).into_iter().map(|p| p.builder);
        for builder in gathered.into_iter().chain(trees) {
            if !builder.is_empty() {
                self.upload(builder)?;
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

    /// A repository in `dir` that stores blobs uncompressed, so that their
    /// sizes in packs are known.
    fn uncompressed_repo(dir: &std::path::Path) -> Repository {
        let be: Arc<dyn Backend> = Arc::new(LocalBackend::open(dir).unwrap());
        let kdf = crate::crypto::ScryptParams { log_n: 4, r: 8, p: 1 };
        let opts = InitOptions { kdf, compression_level: 0, ..InitOptions::default() };
        Repository::init(be, b"pw", &opts).unwrap()
    }

    #[test]
    fn a_pack_of_tiny_blobs_closes_at_its_blob_limit() {
        let dir = tempfile::tempdir().unwrap();
        let repo = uncompressed_repo(dir.path());
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
    fn a_worker_keeps_to_its_own_pack_and_the_first_packs_close_early() {
        let t = crate::testing::test_repo();
        let saver = BlobSaver::new(&t.repo);
        let pool = PackPool::new(2);
        let give_back = |mut p: OpenPack, me| {
            p.user = me;
            pool.free.lock().unwrap().push(p);
        };
        let mut a = saver.take_pack(&pool, Some(0)).unwrap();
        a.builder.add(BlobType::Data, Id([1; 32]), COMPRESSION_NONE, &[1; 5000], 5000).unwrap();
        let (a_len, a_close) = (a.builder.len(), a.close_at);
        give_back(a, Some(0));
        // Worker 1 opens a pack of its own rather than add to worker 0's.
        let mut b = saver.take_pack(&pool, Some(1)).unwrap();
        assert!(b.builder.is_empty(), "a new pack");
        b.builder.add(BlobType::Data, Id([2; 32]), COMPRESSION_NONE, &[2; 100], 100).unwrap();
        let (b_len, b_close) = (b.builder.len(), b.close_at);
        give_back(b, Some(1));
        let pack_size = u64::from(t.repo.config().pack_size);
        assert_eq!((a_close, b_close), (pack_size / 2, pack_size), "the first of two closes at half the size");
        for (me, len) in [(0, a_len), (1, b_len), (1, b_len), (0, a_len)] {
            let p = saver.take_pack(&pool, Some(me)).unwrap();
            assert_eq!(p.builder.len(), len, "worker {me} gets its own pack back");
            give_back(p, Some(me));
        }
        // With every pack open, a worker without one of its own takes the fullest.
        let p = saver.take_pack(&pool, Some(2)).unwrap();
        assert_eq!(p.builder.len(), a_len);
        give_back(p, Some(2));
        // A thread outside the workers takes the fullest free pack, even with
        // room for another.
        let p = saver.take_pack(&pool, Some(2)).unwrap();
        close_slot(&pool);
        assert_eq!(saver.take_pack(&pool, None).unwrap().builder.len(), b_len);
        drop(p);
    }

    #[test]
    fn packs_filled_side_by_side_are_gathered_into_one_at_the_end() {
        let t = crate::testing::test_repo();
        let workers = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        let stored = workers.install(|| {
            let saver = BlobSaver::new(&t.repo);
            // Each worker opens a pack of its own.
            workers.broadcast(|ctx| {
                for i in 0..10u8 {
                    saver.save(BlobType::Data, &[ctx.index() as u8, i].repeat(500)).unwrap();
                }
            });
            assert_eq!(*saver.packs.open.lock().unwrap(), 2, "a pack per worker");
            saver.finish().unwrap()
        });
        assert_eq!(stored.packs, 1, "one pack uploaded for the two partly filled");
        t.repo.load_index().unwrap();
        for worker in 0..2u8 {
            for i in 0..10u8 {
                let data = [worker, i].repeat(500);
                assert_eq!(t.repo.load_blob(BlobType::Data, &t.repo.blob_id(BlobType::Data, &data)).unwrap(), data);
            }
        }
    }

    #[test]
    fn partly_filled_packs_are_not_gathered_past_the_most_blobs_a_pack_holds() {
        let dir = tempfile::tempdir().unwrap();
        let repo = uncompressed_repo(dir.path());
        let workers = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        // Far below half the pack size in bytes each, but more than half the blobs.
        let each = limits::PACK_BLOBS as u64 / 2 + 1;
        let stored = workers.install(|| {
            let saver = BlobSaver::new(&repo);
            workers.broadcast(|ctx| {
                for i in 0..each {
                    saver.save(BlobType::Data, &(ctx.index() as u64 * each + i).to_le_bytes()).unwrap();
                }
            });
            saver.finish().unwrap()
        });
        assert_eq!(stored.packs, 2, "together they would hold more blobs than a pack may");
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
