//! Background upload of finished packs, so that the workers that compress and
//! encrypt never wait for the storage (a local write ends with fsyncs; a remote
//! one with a round trip). A bounded queue holds at most [`QUEUE`] packs waiting,
//! which bounds memory; results come back to the saver, which alone updates the
//! index, so index files still only list packs already stored.

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender, bounded, unbounded};

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::format::ObjectKind;
use crate::format::index::PackRecord;
use crate::format::pack::FinishedPack;

/// Packs that may wait for an upload thread (each holds about 16 MiB).
const QUEUE: usize = 1;
/// Upload threads. One keeps memory low (each in-flight pack holds ~16 MiB) and,
/// measured on a local disk, is as fast as two; remote backends will want more.
const THREADS: usize = 1;

struct Job {
    bytes: Vec<u8>,
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
    pub(crate) fn new(backend: Arc<dyn Backend>) -> Uploader {
        let (tx, rx) = bounded::<Job>(QUEUE);
        let (done_tx, done) = unbounded();
        let threads = (0..THREADS)
            .map(|i| {
                let (rx, done_tx, backend) = (rx.clone(), done_tx.clone(), backend.clone());
                std::thread::Builder::new()
                    .name(format!("coffer-upload-{i}"))
                    .spawn(move || {
                        for job in rx {
                            let size = job.bytes.len() as u64;
                            let r = backend
                                .write(&ObjectKind::Pack.path(&job.rec.id), job.bytes)
                                .map(|()| (job.rec, size))
                                .map_err(Error::from);
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
    pub(crate) fn send(&self, pack: FinishedPack) -> Result<()> {
        let tx = self.tx.lock().expect("poisoned").clone();
        let rec =
            PackRecord { id: pack.id, salt: pack.salt, cipher: pack.cipher, epoch: pack.epoch, entries: pack.entries };
        let tx = tx.ok_or_else(|| Error::InvalidInput("pack queued after the saver finished".into()))?;
        tx.send(Job { bytes: pack.bytes, rec })
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

impl Drop for Uploader {
    fn drop(&mut self) {
        self.finish();
    }
}
