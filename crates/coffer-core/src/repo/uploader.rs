//! Background upload of finished packs, so that the workers that compress and
//! encrypt never wait for the storage (a local write ends with fsyncs; a remote
//! one with a round trip). The backend's wanted concurrency sizes the upload
//! threads. Finished packs wait in their spool files, a few at most, which bounds
//! the spool space; results come back to the saver, which alone updates the
//! index, so index files still only list packs already stored. With a local
//! cache, the sealed tree blobs of each stored pack are kept there from its
//! spool file (docs/design.md#local-cache), so that the next backup reads its
//! parent's trees without a request.

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender, bounded, unbounded};

use crate::error::{Error, Result};
use crate::format::ObjectKind;
use crate::format::index::PackRecord;
use crate::format::pack::FinishedPack;
use crate::format::pack::{BlobType, PackEntry};
use coffer_backend::{Backend, RangeCache};

/// Packs that may wait for an upload thread, at least. Packs wait in their
/// spool files, so the queue costs no memory; it bounds the spool space.
const QUEUE: usize = 2;

/// Upload threads for `backend`: a quarter of the requests it wants in flight,
/// from 1 to 8. A local disk gets one (measured: one is as fast as two there);
/// an object store (32 connections) gets 8, so that several packs travel at
/// once while the workers go on compressing.
fn upload_threads(backend: &dyn Backend) -> usize {
    (backend.connections() / 4).clamp(1, 8)
}

struct Job {
    file: std::fs::File,
    len: u64,
    rec: PackRecord,
}

/// A stored pack whose tree blobs are to be kept in the cache, from its spool file.
struct Keep {
    name: String,
    file: std::fs::File,
    len: u64,
    trees: Vec<PackEntry>,
}

/// A stored pack: its index record and its size.
pub(crate) type Stored = Result<(PackRecord, u64)>;

pub(crate) struct Uploader {
    tx: Mutex<Option<Sender<Job>>>,
    done: Receiver<Stored>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// The thread that keeps tree blobs in the cache, after their pack is
    /// reported stored: the index file is written meanwhile.
    keeper: Mutex<Option<(Sender<Keep>, JoinHandle<()>)>>,
}

impl Uploader {
    pub(crate) fn new(backend: Arc<dyn Backend>, tree_cache: Option<Arc<dyn RangeCache>>) -> Uploader {
        let n = upload_threads(backend.as_ref());
        let (tx, rx) = bounded::<Job>(QUEUE.max(n));
        let (done_tx, done) = unbounded();
        let keeper = tree_cache.map(|cache| {
            let (keep_tx, keep_rx) = bounded::<Keep>(QUEUE);
            let thread = std::thread::Builder::new()
                .name("coffer-keep-trees".into())
                .spawn(move || keep_rx.into_iter().for_each(|k| keep_trees(cache.as_ref(), &k)))
                .expect("spawning the tree keeper thread");
            (keep_tx, thread)
        });
        let keep_tx = keeper.as_ref().map(|(tx, _)| tx.clone());
        let threads = (0..n)
            .map(|i| {
                let (rx, done_tx, backend) = (rx.clone(), done_tx.clone(), backend.clone());
                let keep_tx = keep_tx.clone();
                std::thread::Builder::new()
                    .name(format!("coffer-upload-{i}"))
                    .spawn(move || {
                        for job in rx {
                            let name = ObjectKind::Pack.path(&job.rec.id);
                            let r = backend.write_file(&name, &job.file, job.len).map_err(Error::from);
                            let trees: Vec<PackEntry> =
                                job.rec.entries.iter().filter(|e| e.blob_type == BlobType::Tree).copied().collect();
                            let stored = r.is_ok();
                            if done_tx.send(r.map(|()| (job.rec, job.len))).is_err() {
                                break;
                            }
                            if let Some(keep) = keep_tx.as_ref().filter(|_| stored && !trees.is_empty()) {
                                let _ = keep.send(Keep { name, file: job.file, len: job.len, trees });
                            }
                        }
                    })
                    .expect("spawning an upload thread")
            })
            .collect();
        Uploader { tx: Mutex::new(Some(tx)), done, threads: Mutex::new(threads), keeper: Mutex::new(keeper) }
    }

    /// Queues a pack; blocks while the queue is full.
    pub(crate) fn send(&self, pack: FinishedPack<std::fs::File>) -> Result<()> {
        let tx = self.tx.lock().expect("poisoned").clone();
        let rec =
            PackRecord { id: pack.id, salt: pack.salt, cipher: pack.cipher, epoch: pack.epoch, entries: pack.entries };
        let tx = tx.ok_or_else(|| Error::InvalidInput("pack queued after the saver finished".into()))?;
        tx.send(Job { file: pack.bytes, len: pack.len, rec })
            .map_err(|_| Error::InvalidInput("the upload threads stopped unexpectedly".into()))
    }

    /// Uploads that have finished since the last call.
    pub(crate) fn completed(&self) -> Vec<Stored> {
        self.done.try_iter().collect()
    }

    /// Closes the queue, waits for every upload, and returns the remaining
    /// results. The tree blobs of the last packs may still be going into the
    /// cache: that ends when the uploader is dropped.
    pub(crate) fn finish(&self) -> Vec<Stored> {
        drop(self.tx.lock().expect("poisoned").take());
        for t in std::mem::take(&mut *self.threads.lock().expect("poisoned")) {
            let _ = t.join();
        }
        self.completed()
    }
}

/// Keeps the sealed tree blobs of a stored pack in the cache, read from its
/// spool file; one that does not read is simply not kept.
fn keep_trees(cache: &dyn RangeCache, k: &Keep) {
    use std::os::unix::fs::FileExt;
    for e in &k.trees {
        let mut sealed = vec![0; e.length as usize];
        if e.offset.saturating_add(e.length as u64) <= k.len && k.file.read_exact_at(&mut sealed, e.offset).is_ok() {
            cache.put_range(&k.name, e.offset, &sealed);
        }
    }
}

impl Drop for Uploader {
    fn drop(&mut self) {
        self.finish();
        if let Some((tx, thread)) = self.keeper.lock().expect("poisoned").take() {
            drop(tx);
            let _ = thread.join();
        }
    }
}
