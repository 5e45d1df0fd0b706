//! One module per command. Each `run` returns the exit code on success.

pub mod backup;
pub mod cat;
pub mod check;
pub mod diff;
pub mod init;
pub mod ls;
pub mod restore;
pub mod snapshots;

use coffer_core::repo::SnapshotFilter;

use crate::args::FilterArgs;

impl From<&FilterArgs> for SnapshotFilter {
    fn from(f: &FilterArgs) -> Self {
        SnapshotFilter { host: f.host.clone(), tags: f.tags.clone(), paths: f.paths.clone() }
    }
}
