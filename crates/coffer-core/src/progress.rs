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
    /// Work on the item `path` starts (a file about to be read), so that a display
    /// can name the file being processed. An operation that must build the path
    /// for this alone may skip the call when [`Progress::wants_totals`] is false.
    fn start_item(&self, _path: &Path) {}
    /// A backup saved the file `path`; `change` says how it compares with the
    /// parent snapshot. Called before [`Progress::add_item`] for the same file.
    fn file_saved(&self, _path: &Path, _change: FileChange) {}
    /// A non-fatal problem with `path`: the operation goes on without it.
    fn warn(&self, _path: &Path, _message: &str) {}
    /// The operation now waits `duration` on purpose, for the reason given (prune's
    /// grace period), so that a display can say so and count down.
    fn waiting(&self, _reason: &str, _duration: std::time::Duration) {}
}

/// How a backed-up file compares with its entry in the parent snapshot
/// (docs/design.md#backup; restic's "new", "modified", "unchanged").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileChange {
    /// No parent snapshot, or no file of that name in it.
    New,
    /// The parent has the file, and it was read again (its metadata, or its
    /// content, differs).
    Changed,
    /// The parent's content was reused, or read again and found equal.
    Unchanged,
}

impl FileChange {
    /// The lowercase word for it: `new`, `changed`, `unchanged`.
    pub fn as_str(self) -> &'static str {
        match self {
            FileChange::New => "new",
            FileChange::Changed => "changed",
            FileChange::Unchanged => "unchanged",
        }
    }
}

/// A [`Progress`] that ignores everything.
pub struct NoProgress;

impl Progress for NoProgress {}
