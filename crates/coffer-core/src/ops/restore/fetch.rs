//! The fetch stage of a restore: it takes the batches the walk plans, locates
//! their contents ([`Sources::locate`]) and has their reads fetched, wave by wave
//! and in order, by a pool of as many workers as the backend wants requests in
//! flight, without waiting for one wave to arrive before sending the next: the
//! reads of many small batches are in flight together, so that a restore over a
//! remote store costs about as many round trips as its bytes need, not one per
//! batch. What it holds ahead of the writer is bounded by a [`Budget`]: bytes
//! fetched or being fetched and not yet written, and the batches handed over and
//! not yet written, and their directory handles. See docs/design.md#restore.

use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Condvar, Mutex};

use super::content::{Bytes, Read, Sizing, Sources};
use super::plan::Batch;
use crate::repo::Repository;

/// What the writer is handed per batch: the batch, where its contents come
/// from, and its waves, in order, as their reads are sent.
pub(super) struct Fetching {
    pub batch: Batch,
    pub sources: Arc<Sources>,
    pub waves: Receiver<PendingWave>,
}

/// A wave whose reads are with the workers.
pub(super) struct PendingWave {
    reads: usize,
    bytes: u64,
    results: Receiver<Option<(usize, Bytes)>>,
}

impl PendingWave {
    /// What to give back to the [`Budget`] once the wave is written.
    pub fn held(&self) -> Ahead {
        Ahead { bytes: self.bytes, ..Ahead::default() }
    }

    /// The wave's reads as they arrive, each as soon as it has (not in the
    /// order they were sent), so that the first bytes are written while the
    /// rest are still coming; reads left out (see [`Read`]) are skipped.
    pub fn arrivals(&self) -> impl Iterator<Item = Read> + '_ {
        self.results.iter().take(self.reads).flatten()
    }
}

/// One read for a worker: span `span` of `sources`, its result sent to `reply`.
struct Job {
    sources: Arc<Sources>,
    span: usize,
    reply: Sender<Option<(usize, Bytes)>>,
}

/// What the fetch stage holds ahead of the writer (bytes fetched or being
/// fetched and not yet written; the directory handles and the number of the
/// batches handed over and not yet written), or may hold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Ahead {
    pub bytes: u64,
    pub handles: usize,
    pub batches: usize,
}

impl Ahead {
    /// The most a restore holds ahead of its writer: as many bytes as `sizing`
    /// says, half the directory handles the process may open beyond a reserve
    /// (see [`handle_budget`]), and eight batches (a batch of empty files costs
    /// neither bytes nor many handles, but its plan is memory).
    pub fn limit(sizing: Sizing) -> Ahead {
        Ahead { bytes: sizing.ahead, handles: handle_budget(), batches: 8 }
    }

    /// Whether `more` fits beside `self` within `limit`; what is held alone
    /// never blocks (a single wave or batch beyond the limit passes alone).
    fn fits(&self, more: &Ahead, limit: &Ahead) -> bool {
        (self.bytes == 0 || self.bytes + more.bytes <= limit.bytes)
            && (self.handles == 0 || self.handles + more.handles <= limit.handles)
            && (self.batches == 0 || self.batches + more.batches <= limit.batches)
    }
}

/// How far the fetch stage may run ahead of the writer. Taking blocks until
/// what is held leaves room; the writer gives back what it has written. Once
/// closed (the writer is gone) nothing blocks.
pub(super) struct Budget {
    limit: Ahead,
    held: Mutex<(Ahead, bool)>,
    freed: Condvar,
}

impl Budget {
    pub fn new(limit: Ahead) -> Budget {
        Budget { limit, held: Mutex::new((Ahead::default(), false)), freed: Condvar::new() }
    }

    /// Takes `more` once it fits; false if the budget was closed.
    fn take(&self, more: Ahead) -> bool {
        let mut held = self.held.lock().expect("poisoned");
        while !held.1 && !held.0.fits(&more, &self.limit) {
            held = self.freed.wait(held).expect("poisoned");
        }
        held.0.bytes += more.bytes;
        held.0.handles += more.handles;
        held.0.batches += more.batches;
        !held.1
    }

    /// Gives back what the writer has written.
    pub fn give_back(&self, done: Ahead) {
        let mut held = self.held.lock().expect("poisoned");
        held.0.bytes -= done.bytes;
        held.0.handles -= done.handles;
        held.0.batches -= done.batches;
        self.freed.notify_all();
    }

    /// Says the writer is gone: nothing waits any more.
    pub fn close(&self) {
        self.held.lock().expect("poisoned").1 = true;
        self.freed.notify_all();
    }
}

/// Closes the budget when dropped: the writer holds one, so that however it
/// ends, the fetch stage does not wait for it.
pub(super) struct Closing<'a>(pub &'a Budget);

impl Drop for Closing<'_> {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// Open files kept for the batch being planned (at most 256 handles), the
/// walk's stack (at most 80), the storage's connections and the like.
const RESERVE: u64 = 384;

/// The process's limit of open files.
fn open_file_limit() -> u64 {
    rustix::process::getrlimit(rustix::process::Resource::Nofile).current.unwrap_or(u64::MAX)
}

/// The directory handles the batches between the walk and the writer may hold
/// together: half of the open files the process may have beyond [`RESERVE`];
/// at least one batch.
fn handle_budget() -> usize {
    (open_file_limit().saturating_sub(RESERVE) / 2).clamp(256, 16_384) as usize
}

/// How many files of the batch being written keep the handle they were
/// created with: the open files left beside [`RESERVE`] and [`handle_budget`]
/// (at most 16,384).
pub(super) fn file_handles() -> usize {
    (open_file_limit().saturating_sub(RESERVE + handle_budget() as u64)).min(16_384) as usize
}

/// Runs the stage until `batches` ends or the writer is gone (`to_writer`
/// refuses, or `budget` is closed); calls `observe` with each batch first.
pub(super) fn run(
    repo: &Repository,
    batches: Receiver<Batch>,
    to_writer: Sender<Fetching>,
    budget: &Budget,
    sizing: Sizing,
    observe: &(dyn Fn(&Batch) + Sync),
) {
    let (jobs, queue) = crossbeam_channel::unbounded::<Job>();
    std::thread::scope(|s| {
        for _ in 0..repo.backend().connections().max(1) {
            let queue = queue.clone();
            s.spawn(move || {
                for Job { sources, span, reply } in queue {
                    let _ = reply.send(sources.fetch(repo, span).map(|bytes| (span, bytes)));
                }
            });
        }
        'batches: for batch in batches {
            observe(&batch);
            if !budget.take(Ahead { handles: batch.handles(), batches: 1, bytes: 0 }) {
                break;
            }
            let sources = Arc::new(Sources::locate(repo, &batch.files, sizing));
            let (waves_tx, waves) = channel();
            if to_writer.send(Fetching { batch, sources: sources.clone(), waves }).is_err() {
                break;
            }
            for wave in sources.waves(sizing) {
                let bytes = sources.bytes(&wave);
                if !budget.take(Ahead { bytes, ..Ahead::default() }) {
                    break 'batches;
                }
                let (reply, results) = channel();
                for &span in &wave {
                    let job = Job { sources: sources.clone(), span, reply: reply.clone() };
                    jobs.send(job).expect("the workers outlive the stage");
                }
                if waves_tx.send(PendingWave { reads: wave.len(), bytes, results }).is_err() {
                    break 'batches;
                }
            }
        }
        drop(jobs);
    });
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use super::{Ahead, Budget};

    fn bytes(n: u64) -> Ahead {
        Ahead { bytes: n, ..Ahead::default() }
    }

    fn batch(handles: usize) -> Ahead {
        Ahead { handles, batches: 1, bytes: 0 }
    }

    #[test]
    fn what_fits_passes_and_what_is_held_alone_never_blocks() {
        let limit = Ahead { bytes: 100, handles: 10, batches: 2 };
        let held = Ahead { bytes: 60, handles: 4, batches: 1 };
        assert!(held.fits(&bytes(40), &limit));
        assert!(!held.fits(&bytes(41), &limit));
        assert!(held.fits(&batch(6), &limit));
        assert!(!held.fits(&batch(7), &limit), "handles");
        assert!(!Ahead { batches: 2, ..held }.fits(&batch(0), &limit), "batches");
        assert!(Ahead::default().fits(&Ahead { bytes: 1000, handles: 100, batches: 5 }, &limit), "alone");
    }

    #[test]
    fn taking_waits_for_what_the_writer_gives_back() {
        let budget = Budget::new(Ahead { bytes: 100, handles: 10, batches: 8 });
        assert!(budget.take(bytes(70)));
        let taken = AtomicBool::new(false);
        std::thread::scope(|s| {
            let waiter = s.spawn(|| {
                let ok = budget.take(bytes(50));
                taken.store(true, Ordering::SeqCst);
                ok
            });
            std::thread::sleep(Duration::from_millis(50));
            assert!(!taken.load(Ordering::SeqCst), "70 + 50 bytes exceed the limit");
            budget.give_back(bytes(70));
            assert!(waiter.join().unwrap());
        });
        assert_eq!(budget.held.lock().unwrap().0, bytes(50));
    }

    #[test]
    fn a_closed_budget_lets_the_fetch_stage_go() {
        let budget = Budget::new(Ahead { bytes: 100, handles: 10, batches: 8 });
        assert!(budget.take(batch(10)));
        std::thread::scope(|s| {
            let waiter = s.spawn(|| budget.take(batch(1)));
            std::thread::sleep(Duration::from_millis(50));
            budget.close();
            assert!(!waiter.join().unwrap(), "a closed budget says so");
        });
        assert!(!budget.take(bytes(1000)));
    }
}
