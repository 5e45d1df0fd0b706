//! One module per command. Each `run` returns the exit code on success.

pub mod agent;
pub mod backend;
pub mod backend_copies;
pub mod backend_trim;
pub mod backup;
pub mod backup_stream;
pub mod bench;
pub mod cache;
pub mod cat;
pub mod check;
pub mod copy;
pub mod diff;
pub mod dump;
pub mod find;
pub mod forget;
pub mod generate;
pub mod import;
pub mod import_borg;
pub mod import_kopia;
pub mod import_tar;
pub mod init;
pub mod key;
pub mod ls;
#[cfg(all(feature = "mount", target_os = "linux"))]
pub mod mount;
pub mod prove;
pub mod prune;
pub mod repair;
pub mod restore;
pub mod serve;
pub mod snapshots;
pub mod stats;
pub mod tag;
pub mod ui;
pub mod writers;

use coffer_core::Id;
use coffer_core::format::snapshot::Snapshot;
use coffer_core::repo::SnapshotFilter;

use crate::args::{FilterArgs, ForgetFilterArgs};

/// Flags a snapshot whose signature is missing, bad or by an unknown writer.
pub fn flag_signature(id: &Id, s: &Snapshot) {
    if !s.signature.is_valid() {
        eprintln!(
            "warning: snapshot {}: {}; its author cannot be confirmed (run `coffer check`)",
            id.short(),
            s.signature.describe()
        );
    }
}

impl From<&FilterArgs> for SnapshotFilter {
    fn from(f: &FilterArgs) -> Self {
        SnapshotFilter { host: f.host.clone(), tags: f.tags.clone(), paths: f.paths.clone() }
    }
}

impl From<&ForgetFilterArgs> for SnapshotFilter {
    fn from(f: &ForgetFilterArgs) -> Self {
        SnapshotFilter { host: f.host.clone(), tags: f.tags.clone(), paths: f.paths.clone() }
    }
}
