//! The restorer: recreates a snapshot (or part of it) in a local directory.
//! See docs/design.md#restore.
//!
//! The trees are walked once, in order, to create directories, symlinks and
//! special files and to plan the regular files, a bounded batch at a time
//! ([`BatchLimits`]): while the walk plans the next batch, the contents of the
//! batches before it are fetched (module `fetch`, running ahead as far as a
//! budget of bytes, batches and directory handles allows) and written in
//! parallel, each blob verified against its id before it is written
//! ([`content`]). Hard links are linked to the first restored path
//! of their inode once that file is written; a directory's metadata is applied in
//! the batch that completes it, after everything below it is written, so that
//! writing into it does not change its mtime afterwards. A file whose content
//! cannot be restored is removed, never left half-written, and reported in
//! [`RestoreSummary::failures`]; so is every other entry that cannot be restored
//! (a tree that cannot be loaded fails that directory's contents only), and the
//! restore goes on with the rest.
//!
//! Every step in the target goes through directory handles opened without
//! following symlinks (module `handles`), so nothing planted or swapped in the target
//! can redirect a write, chmod, chown or xattr outside it. As root, what only
//! root can create is restored only when [`RestoreOptions::privileged`] says so.
//!
//! Memory is thus bounded by the batch limits, not by the number of files: what
//! grows besides (apart from the index every command loads) is the trees and
//! names on the path from the root to the directory being walked (a bounded
//! number of them with an open handle), the first name of each inode
//! with several names until all its names are planned, and the failures reported.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ignore::gitignore::Gitignore;

mod content;
mod fetch;
mod handles;
mod plan;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_hostile;
mod totals;
mod verify;
mod write;

pub use verify::{VerifySummary, verify};

use crate::error::{Error, Result};
use crate::format::snapshot::Snapshot;
use crate::fs::meta::RestorePolicy;
pub use crate::fs::meta::Withheld;
use crate::fs::select::build_matcher;
use crate::progress::Progress;
use crate::repo::Repository;
use crate::repo::tree_walk::locate;

/// What to restore and where.
#[derive(Clone, Debug, Default)]
pub struct RestoreOptions {
    /// Directory to restore into; created if missing.
    pub target: PathBuf,
    /// Path inside the snapshot to restore (default: everything). A directory's
    /// contents land directly in the target; a file lands as `target/<name>`.
    pub subpath: Option<PathBuf>,
    /// gitignore-style patterns: only matching entries (and what is below them) are restored.
    pub includes: Vec<String>,
    /// gitignore-style patterns of entries not to restore.
    pub excludes: Vec<String>,
    /// [`RestoreOptions::includes`] matched without regard to case (`--iinclude`).
    pub iincludes: Vec<String>,
    /// [`RestoreOptions::excludes`] matched without regard to case (`--iexclude`).
    pub iexcludes: Vec<String>,
    /// What to do with what is already in the target.
    pub overwrite: Overwrite,
    /// Remove what a restored directory of the target holds that the
    /// snapshot's directory does not (`--delete`); needs an overwrite mode
    /// other than [`Overwrite::Refuse`].
    pub delete: bool,
    /// Only count what would be restored; the target is not touched (`--dry-run`).
    pub dry_run: bool,
    /// When run as root: also restore what only root can create (owners, device
    /// nodes, setuid/setgid bits, `security.` and `trusted.` extended
    /// attributes). Only for snapshots whose author is trusted with root's
    /// powers; see docs/design.md#restore.
    pub privileged: bool,
    /// How much is planned before it is written (the default suits every use;
    /// tests set tiny limits to exercise many batches).
    pub batch: BatchLimits,
}

/// What a restore does with entries already in the target
/// (docs/design.md#restore-options).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Overwrite {
    /// A target that is not empty is refused ([`Error::TargetNotEmpty`]).
    #[default]
    Refuse,
    /// Whatever stands at a name the snapshot restores is replaced.
    Always,
    /// A regular file whose size and modification time equal the snapshot's is
    /// kept; anything else is replaced.
    IfChanged,
    /// A regular file at least as new as the snapshot's is kept; anything else is replaced.
    IfNewer,
    /// Whatever already stands at a name is kept; only missing entries are restored.
    Never,
}

impl Overwrite {
    /// Whether a non-empty target is accepted.
    pub fn allows_existing(self) -> bool {
        self != Overwrite::Refuse
    }

    /// Whether an entry in the way of a directory may be removed.
    fn replaces(self) -> bool {
        matches!(self, Overwrite::Always | Overwrite::IfChanged | Overwrite::IfNewer)
    }
}

/// How much one batch of a restore may hold before it is written. A batch is
/// closed as soon as it reaches either limit, so only its last file can take it
/// past `chunks` (a file with more chunks than that closes the batch it joins).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchLimits {
    /// Entries: regular files, hard links and completed directories.
    pub entries: usize,
    /// Chunk references of the batch's regular files.
    pub chunks: usize,
    /// The most files of a batch that keep the handle they were created with
    /// until they are written and finished (fewer if the limit of open files
    /// says so); the others are opened again by name for each write.
    pub kept_files: usize,
}

impl BatchLimits {
    /// The limits a restore uses unless told otherwise: well under a few MiB of
    /// plan (chunk ids are 32 bytes), and few enough files that creating them
    /// does not hold up the writes for long.
    pub const DEFAULT: BatchLimits = BatchLimits { entries: 1024, chunks: 16_384, kept_files: usize::MAX };
}

impl Default for BatchLimits {
    fn default() -> BatchLimits {
        BatchLimits::DEFAULT
    }
}

/// What a restore did.
#[derive(Debug, Default)]
pub struct RestoreSummary {
    /// Regular files written.
    pub files: u64,
    /// Directories restored.
    pub dirs: u64,
    /// Symlinks, FIFOs, devices and hard links created.
    pub others: u64,
    /// Bytes of file content written.
    pub bytes: u64,
    /// Non-fatal problems (metadata that could not be applied, entries not recreated).
    pub warnings: u64,
    /// Entries that could not be restored, with the reason.
    pub failures: Vec<(PathBuf, Error)>,
    /// What only root can create and was left out ([`RestoreOptions::privileged`]).
    pub withheld: Withheld,
    /// Entries kept as they were in the target ([`RestoreOptions::overwrite`]).
    pub skipped: u64,
    /// Entries removed from the target ([`RestoreOptions::delete`]).
    pub deleted: u64,
}

impl RestoreSummary {
    /// Adds the counts and failures of `other` to these.
    fn absorb(&mut self, other: RestoreSummary) {
        self.files += other.files;
        self.dirs += other.dirs;
        self.others += other.others;
        self.bytes += other.bytes;
        self.warnings += other.warnings;
        self.failures.extend(other.failures);
        self.withheld.add(&other.withheld);
        self.skipped += other.skipped;
        self.deleted += other.deleted;
    }

    /// Whether any entry was not restored because repository data is damaged.
    pub fn damaged(&self) -> bool {
        self.failures.iter().any(|(_, e)| matches!(e, Error::Corrupt { .. }))
    }
}

/// Which entries of the snapshot a restore takes, from `--include`,
/// `--exclude` and their case-insensitive forms.
struct Selector {
    /// Case-sensitive and case-insensitive include patterns; none when neither was given.
    includes: Option<(Gitignore, Gitignore)>,
    excludes: Gitignore,
    iexcludes: Gitignore,
}

impl Selector {
    fn new(opts: &RestoreOptions) -> Result<Selector> {
        let includes = if opts.includes.is_empty() && opts.iincludes.is_empty() {
            None
        } else {
            Some((build_matcher(&opts.includes, false, "include")?, build_matcher(&opts.iincludes, true, "include")?))
        };
        Ok(Selector {
            includes,
            excludes: build_matcher(&opts.excludes, false, "exclude")?,
            iexcludes: build_matcher(&opts.iexcludes, true, "exclude")?,
        })
    }

    /// Whether every entry is taken unless excluded (no include pattern).
    fn takes_all(&self) -> bool {
        self.includes.is_none()
    }

    /// `None` if the entry at `snap_path` is excluded (with everything below it);
    /// otherwise whether it is selected itself, rather than only walked for
    /// selected entries below it.
    fn judge(&self, snap_path: &Path, is_dir: bool, ancestor_selected: bool) -> Option<bool> {
        if self.excludes.matched(snap_path, is_dir).is_ignore() || self.iexcludes.matched(snap_path, is_dir).is_ignore()
        {
            return None;
        }
        let included = self.includes.as_ref().is_none_or(|(inc, iinc)| {
            inc.matched(snap_path, is_dir).is_ignore() || iinc.matched(snap_path, is_dir).is_ignore()
        });
        Some(ancestor_selected || included)
    }
}

/// Restores `snapshot` according to `opts`.
pub fn restore(
    repo: &Repository,
    snapshot: &Snapshot,
    opts: &RestoreOptions,
    progress: &dyn Progress,
) -> Result<RestoreSummary> {
    restore_observed(repo, snapshot, opts, progress, &|_| {})
}

/// [`restore`], calling `observe` with each batch before it is written.
fn restore_observed(
    repo: &Repository,
    snapshot: &Snapshot,
    opts: &RestoreOptions,
    progress: &dyn Progress,
    observe: &(dyn Fn(&plan::Batch) + Sync),
) -> Result<RestoreSummary> {
    // Find what to restore before touching the target, so a wrong path leaves nothing behind.
    let subpath = opts.subpath.clone().unwrap_or_else(|| PathBuf::from("/"));
    let snap_root = Path::new("/").join(&subpath);
    let located = locate(repo, snapshot.tree, &snap_root)?;
    let select = Selector::new(opts)?;
    if opts.delete && !opts.overwrite.allows_existing() {
        return Err(Error::InvalidInput(
            "--delete removes what is already in the target: give --overwrite too (always, if-changed, if-newer or never)"
                .into(),
        ));
    }
    if opts.dry_run {
        return totals::dry_run(repo, &select, &located, &snap_root, opts);
    }
    if progress.wants_totals() {
        let t = totals::count(repo, &select, &located, &snap_root)?;
        progress.set_total(t.bytes, t.files);
    }
    prepare_target(&opts.target, opts.overwrite)?;
    let root: handles::Handle = Arc::new(handles::open_target(&opts.target).map_err(|e| Error::io(&opts.target, e))?);
    let policy = RestorePolicy::new(crate::fs::meta::is_root(), opts.privileged);
    let overwrite = opts.overwrite.allows_existing();
    let mut writer = write::Writer::new(repo, progress, policy, overwrite, root.clone(), opts.batch.kept_files);
    let sizing = content::Sizing::for_connections(repo.backend().connections());
    let budget = fetch::Budget::new(fetch::Ahead::limit(sizing));
    std::thread::scope(|s| {
        // Three stages, each on its own thread: the walk plans batches, the fetch
        // stage locates their contents and has them fetched, the writer writes
        // them. The walk meets the fetch stage at a rendezvous; the fetch stage
        // runs ahead of the writer as far as `budget` allows.
        let (tx, batches) = std::sync::mpsc::sync_channel::<plan::Batch>(0);
        let (to_writer, fetched) = std::sync::mpsc::channel();
        let budget = &budget;
        let fetcher = s.spawn(move || fetch::run(repo, batches, to_writer, budget, sizing, observe));
        let writing = s.spawn(move || {
            // However the writer ends, the fetch stage must not wait for it.
            let _closing = fetch::Closing(budget);
            for f in fetched {
                writer.write(f, budget);
            }
            writer.into_summary()
        });
        let mut planner = plan::Planner::new(repo, &select, opts, policy, progress, tx);
        let planned = planner.run(located, &snap_root, &opts.target, root);
        drop(planner);
        let fetched = fetcher.join();
        let written = writing.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        fetched.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        planned.map(|mut summary| {
            summary.absorb(written);
            summary
        })
    })
}

/// Checks that the target is empty (unless `overwrite` accepts what is there) or creates it.
fn prepare_target(target: &Path, overwrite: Overwrite) -> Result<()> {
    match std::fs::read_dir(target) {
        Ok(mut rd) => {
            if rd.next().is_some() && !overwrite.allows_existing() {
                return Err(Error::TargetNotEmpty { path: target.to_path_buf() });
            }
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            std::fs::create_dir_all(target).map_err(|e| Error::io(target, e))
        }
        Err(e) => Err(Error::io(target, e)),
    }
}
