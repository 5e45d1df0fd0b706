//! Progress and event reporting, injected by the caller. Libraries never print;
//! the binary implements [`Progress`] with a progress bar or JSON lines.

use std::path::Path;

/// Receives progress of a long operation. Every method has a no-op default, and
/// all may be called from several threads at once.
pub trait Progress: Send + Sync {
    /// Whether totals are wanted. An operation may skip work that only serves
    /// [`Progress::set_total`] (such as a separate scan of the files to back up)
    /// when this is false.
    fn wants_totals(&self) -> bool {
        false
    }
    /// Totals became known (or grew): bytes and items the operation will process.
    fn set_total(&self, _bytes: u64, _items: u64) {}
    /// `n` more bytes were processed.
    fn add_bytes(&self, _n: u64) {}
    /// One more item (file) was processed.
    fn add_item(&self, _path: &Path) {}
    /// A non-fatal problem with `path`: the operation goes on without it.
    fn warn(&self, _path: &Path, _message: &str) {}
    /// The operation now waits `duration` on purpose, for the reason given (prune's
    /// grace period), so that a display can say so and count down.
    fn waiting(&self, _reason: &str, _duration: std::time::Duration) {}
}

/// A [`Progress`] that ignores everything.
pub struct NoProgress;

impl Progress for NoProgress {}
