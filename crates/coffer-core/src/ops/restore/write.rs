//! Executing one batch of a restore: file contents (as the fetch stage hands
//! over their waves) and their metadata, then hard links, then the metadata of
//! the directories the batch completes. Every step goes through the handle of
//! the entry's directory, or of the entry itself.
//! See docs/design.md#restore.

use std::collections::HashSet;
use std::os::fd::AsFd;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::Receiver;

use rayon::prelude::*;

use super::RestoreSummary;
use super::content::{self, Sources, Written};
use super::fetch::{self, Ahead, Budget, Fetching, PendingWave};
use super::handles::{self, Handle};
use super::plan::{DirJob, FileJob, Link};
use crate::error::Error;
use crate::fs::meta::{self, RestorePolicy, Withheld};
use crate::progress::Progress;
use crate::repo::Repository;

/// Writes batches one after the other; see the module documentation.
pub(super) struct Writer<'a> {
    repo: &'a Repository,
    progress: &'a dyn Progress,
    policy: RestorePolicy,
    overwrite: bool,
    /// The target, from which the first name of a hard-linked file is found again.
    root: Handle,
    /// Inodes with several names whose first name could not be restored, so that
    /// their other names, in this batch or a later one, are reported rather than linked.
    failed_firsts: HashSet<(u64, u64)>,
    /// How many files of a batch keep the handle they were created with
    /// ([`BatchLimits::kept_files`](super::BatchLimits), at most
    /// [`fetch::file_handles`]).
    keep: usize,
    summary: RestoreSummary,
}

impl<'a> Writer<'a> {
    pub fn new(
        repo: &'a Repository,
        progress: &'a dyn Progress,
        policy: RestorePolicy,
        overwrite: bool,
        root: Handle,
        keep: usize,
    ) -> Writer<'a> {
        Writer {
            repo,
            progress,
            policy,
            overwrite,
            root,
            failed_firsts: HashSet::new(),
            keep: keep.min(fetch::file_handles()),
            summary: RestoreSummary::default(),
        }
    }

    /// Restores everything the batch holds, its files' contents as their waves
    /// arrive; gives back to `budget` each wave once written, and the batch's
    /// handles once done.
    pub fn write(&mut self, fetching: Fetching, budget: &Budget) {
        let Fetching { batch, sources, waves } = fetching;
        let held = Ahead { handles: batch.handles(), batches: 1, bytes: 0 };
        self.write_files(&batch.files, &sources, waves, budget);
        self.make_links(batch.links);
        self.finish_dirs(batch.dirs);
        drop(batch.files);
        budget.give_back(held);
    }

    /// What the batches written so far restored.
    pub fn into_summary(self) -> RestoreSummary {
        self.summary
    }

    /// Writes the files' contents, then their metadata; removes those that failed.
    fn write_files(&mut self, files: &[FileJob], sources: &Sources, waves: Receiver<PendingWave>, budget: &Budget) {
        if files.is_empty() {
            return;
        }
        let created = content::create_files(files, sources, self.overwrite, self.keep);
        let (repo, progress, made) = (self.repo, self.progress, &created);
        for pending in waves {
            // Each read is written as soon as it arrives, beside the others.
            rayon::in_place_scope(|scope| {
                for read in pending.arrivals() {
                    scope.spawn(move |_| content::write_read(repo, files, sources, made, read, progress));
                }
            });
            budget.give_back(pending.held());
        }
        let results = sources.results(created);
        let (progress, policy) = (self.progress, &self.policy);
        let warnings = AtomicU64::new(0);
        let bytes = AtomicU64::new(0);
        let withheld = Mutex::new(Withheld::default());
        let failures = Mutex::new(Vec::new());
        files.par_iter().zip(results).for_each(|(FileJob { place, node }, Written { result, created })| {
            let dir = place.dir.as_fd();
            let result = result.and_then(|n| {
                let made = created.as_ref().expect("a file written was created");
                let mut held = Withheld::default();
                let applied = made
                    .with(dir, &place.name, |file| Ok(meta::apply_to_fd(file.as_fd(), node, policy, &mut held)))
                    .and_then(|applied| made.still_there(dir, &place.name).map(|()| applied))
                    .map_err(|e| Error::io(place.path(), e))?;
                if let Err(e) = applied {
                    warnings.fetch_add(1, Ordering::Relaxed);
                    progress.warn(&place.path(), &format!("cannot restore all metadata: {e}"));
                }
                withheld.lock().expect("poisoned").add(&held);
                Ok(n)
            });
            match result {
                Ok(n) => {
                    bytes.fetch_add(n, Ordering::Relaxed);
                    progress.add_item(&place.path());
                }
                Err(e) => {
                    // Never leave a half-written file that looks restored.
                    if let Some(made) = created {
                        handles::remove_created(dir, &place.name, made.id);
                    }
                    let key = (node.links > 1).then_some((node.device, node.inode));
                    failures.lock().expect("poisoned").push((place.path(), key, e));
                }
            }
        });
        let failures = failures.into_inner().expect("poisoned");
        self.summary.files += (files.len() - failures.len()) as u64;
        self.summary.bytes += bytes.into_inner();
        self.summary.warnings += warnings.into_inner();
        self.summary.withheld.add(&withheld.into_inner().expect("poisoned"));
        for (path, key, e) in failures {
            if let Some(key) = key {
                self.failed_firsts.insert(key);
            }
            self.summary.failures.push((path, e));
        }
    }

    /// Links further names to files already written.
    fn make_links(&mut self, links: Vec<Link>) {
        for Link { key, first_dir, first_name, place } in links {
            let path = place.path();
            if self.failed_firsts.contains(&key) {
                let why = format!(
                    "hard link to {} not created: that file could not be restored",
                    first_dir.join(&first_name).display()
                );
                self.summary.failures.push((path, Error::InvalidInput(why)));
                continue;
            }
            let dir = place.dir.as_fd();
            let made = handles::open_from_root(&self.root, &first_dir).and_then(|first| {
                handles::make_entry(dir, &place.name, self.overwrite, || {
                    handles::link(first.as_fd(), &first_name, dir, &place.name)
                })
            });
            match made {
                Ok(()) => self.summary.others += 1,
                Err(e) if handles::exists(&e) => {
                    self.summary.failures.push((path.clone(), Error::TargetNotEmpty { path }))
                }
                Err(e) => self.summary.failures.push((path.clone(), Error::io(path, e))),
            }
        }
    }

    /// Applies directory metadata, children before their parents.
    fn finish_dirs(&mut self, dirs: Vec<DirJob>) {
        for DirJob { handle, name, node } in dirs {
            if let Err(e) = meta::apply_to_fd(handle.as_fd(), &node, &self.policy, &mut self.summary.withheld) {
                self.summary.warnings += 1;
                self.progress.warn(&name.path(), &format!("cannot restore all metadata: {e}"));
            }
        }
    }
}
