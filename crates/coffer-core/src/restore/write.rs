//! Executing one batch of a restore: file contents and their metadata, then hard
//! links, then the metadata of the directories the batch completes.
//! See docs/design.md#restore.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use rayon::prelude::*;

use super::RestoreSummary;
use super::content;
use super::plan::{Batch, Link};
use crate::error::Error;
use crate::format::tree::Node;
use crate::fsmeta;
use crate::progress::Progress;
use crate::repo::Repository;

/// Writes batches one after the other; see the module documentation.
pub(super) struct Writer<'a> {
    repo: &'a Repository,
    progress: &'a dyn Progress,
    as_root: bool,
    /// Files with several names that could not be restored, so that their other
    /// names, in this batch or a later one, are reported rather than linked.
    failed_firsts: HashSet<PathBuf>,
    summary: RestoreSummary,
}

impl<'a> Writer<'a> {
    pub fn new(repo: &'a Repository, progress: &'a dyn Progress, as_root: bool) -> Writer<'a> {
        Writer { repo, progress, as_root, failed_firsts: HashSet::new(), summary: RestoreSummary::default() }
    }

    /// Restores everything `batch` holds.
    pub fn write(&mut self, batch: Batch) {
        self.write_files(&batch.files);
        self.make_links(batch.links);
        self.finish_dirs(batch.dirs);
    }

    /// What the batches written so far restored.
    pub fn into_summary(self) -> RestoreSummary {
        self.summary
    }

    /// Writes the files' contents, then their metadata; removes those that failed.
    fn write_files(&mut self, files: &[(PathBuf, Node)]) {
        if files.is_empty() {
            return;
        }
        let results = content::write_contents(self.repo, files, self.progress);
        let (progress, as_root) = (self.progress, self.as_root);
        let warnings = AtomicU64::new(0);
        let bytes = AtomicU64::new(0);
        let failures = Mutex::new(Vec::new());
        files.par_iter().zip(results).for_each(|((path, node), r)| match r {
            Ok(n) => {
                bytes.fetch_add(n, Ordering::Relaxed);
                if let Err(e) = fsmeta::apply_metadata(path, node, as_root) {
                    warnings.fetch_add(1, Ordering::Relaxed);
                    progress.warn(path, &format!("cannot restore all metadata: {e}"));
                }
                progress.add_item(path);
            }
            Err(e) => {
                // Never leave a half-written file that looks restored.
                let _ = std::fs::remove_file(path);
                failures.lock().expect("poisoned").push((path.clone(), node.links > 1, e));
            }
        });
        let failures = failures.into_inner().expect("poisoned");
        self.summary.files += (files.len() - failures.len()) as u64;
        self.summary.bytes += bytes.into_inner();
        self.summary.warnings += warnings.into_inner();
        for (path, linked, e) in failures {
            if linked {
                self.failed_firsts.insert(path.clone());
            }
            self.summary.failures.push((path, e));
        }
    }

    /// Links further names to files already written.
    fn make_links(&mut self, links: Vec<Link>) {
        for Link { first, path } in links {
            if self.failed_firsts.contains(&first) {
                let why = format!("hard link to {} not created: that file could not be restored", first.display());
                self.summary.failures.push((path, Error::InvalidInput(why)));
                continue;
            }
            match std::fs::hard_link(&first, &path) {
                Ok(()) => self.summary.others += 1,
                Err(e) => self.summary.failures.push((path.clone(), Error::io(&path, e))),
            }
        }
    }

    /// Applies directory metadata, children before their parents.
    fn finish_dirs(&mut self, dirs: Vec<(PathBuf, Node)>) {
        for (path, node) in dirs {
            if std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir()) {
                self.apply(&path, &node);
            }
        }
    }

    fn apply(&mut self, path: &Path, node: &Node) {
        if let Err(e) = fsmeta::apply_metadata(path, node, self.as_root) {
            self.summary.warnings += 1;
            self.progress.warn(path, &format!("cannot restore all metadata: {e}"));
        }
    }
}
