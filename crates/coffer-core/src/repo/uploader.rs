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
use crate::format::pack::BlobType;
use crate::format::pack::FinishedPack;
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

/// A stored pack: its index record and its size.
pub(crate) type Stored = Result<(PackRecord, u64)>;

pub(crate) struct Uploader {
    tx: Mutex<Option<Sender<Job>>>,
    done: Receiver<Stored>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Uploader {
    pub(crate) fn new(backend: Arc<dyn Backend>, tree_cache: Option<Arc<dyn RangeCache>>) -> Uploader {
        let n = upload_threads(backend.as_ref());
        let (tx, rx) = bounded::<Job>(QUEUE.max(n));
        let (done_tx, done) = unbounded();
        let threads = (0..n)
            .map(|i| {
                let (rx, done_tx, backend) = (rx.clone(), done_tx.clone(), backend.clone());
                let tree_cache = tree_cache.clone();
                std::thread::Builder::new()
                    .name(format!("coffer-upload-{i}"))
                    .spawn(move || {
                        for job in rx {
                            let name = ObjectKind::Pack.path(&job.rec.id);
                            let r = backend.write_file(&name, &job.file, job.len).map_err(Error::from);
                            if let (Ok(()), Some(cache)) = (&r, &tree_cache) {
                                keep_trees(cache.as_ref(), &name, &job);
                            }
                            let r = r.map(|()| (job.rec, job.len));
                            if done_tx.send(r).is_err() {
                                break;
                            }
                        }
                    })
                    .expect("spawning an upload thread")
            })
            .collect();
        Uploader { tx: Mutex::new(Some(tx)), done, threads: Mutex::new(threads) }
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

    /// Closes the queue, waits for every upload, and returns the remaining results.
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
fn keep_trees(cache: &dyn RangeCache, name: &str, job: &Job) {
    use std::os::unix::fs::FileExt;
    for e in job.rec.entries.iter().filter(|e| e.blob_type == BlobType::Tree) {
        let mut sealed = vec![0; e.length as usize];
        if e.offset.saturating_add(e.length as u64) <= job.len && job.file.read_exact_at(&mut sealed, e.offset).is_ok()
        {
            cache.put_range(name, e.offset, &sealed);
        }
    }
}

impl Drop for Uploader {
    fn drop(&mut self) {
        self.finish();
    }
}
