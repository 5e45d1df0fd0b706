//! How writers and prune coexist without locks (docs/design.md#prune). Nobody
//! waits for anybody: each side announces what it does, and the other reacts.
//!
//! The writer's side ([`writer::WriterGuard`], used by backup):
//!
//! - (a) [`session`]: write a marker `sessions/<id>` before reading the index, and
//!   rewrite it every [`Timing::heartbeat`] with the index files and packs stored
//!   so far, so a prune spares them;
//! - (b) read every notice ([`notices`]), then (c) the index;
//! - (d) adopt packs no index lists, except those a notice names;
//! - (e) before committing a snapshot, read the notices again and store again
//!   every blob the snapshot uses that sits in a noticed pack (or fail if the pack
//!   is gone); if the writer's marker was removed meanwhile, check that its own
//!   packs still exist;
//! - (f) repeat (e) if more than a quarter of [`Timing::grace`] passed since, and
//!   refuse to commit if the last check is older than that; then delete the marker.
//!
//! The prune's side (`crate::ops::prune`): store a notice of the packs it will
//! delete, wait [`Timing::grace`] watching the markers (a marker unchanged across
//! the wait belongs to a writer that stopped), spare what markers protect and
//! what snapshots written meanwhile use, then delete.
//!
//! Timing is passed in ([`Timing`]), never read from the environment: the binary
//! decides it (and shortens it for its tests).

use std::collections::HashSet;
use std::time::Duration;

use crate::error::Result;
use crate::format::pack::BlobType;
use crate::id::Id;
use crate::repo::Repository;

pub mod notices;
pub mod session;
pub mod writer;

/// The protocol's two durations, measured by each process on its own monotonic clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// How long a prune waits between announcing deletions and making them; for a
    /// writer, the period its final checks must stay within a quarter of.
    pub grace: Duration,
    /// How often a running writer rewrites its marker: at most a quarter of the
    /// grace period, so a prune sees several rewrites while it waits.
    pub heartbeat: Duration,
}

impl Timing {
    /// The default grace period: four heartbeats.
    pub const GRACE: Duration = Duration::from_secs(120);
    /// The default heartbeat interval.
    pub const HEARTBEAT: Duration = Duration::from_secs(30);

    /// The timing for a grace period `grace`: the heartbeat is a quarter of it.
    pub fn with_grace(grace: Duration) -> Timing {
        Timing { grace, heartbeat: grace / 4 }
    }

    /// How old a writer's last check against the notices may be when it commits.
    pub fn check_window(&self) -> Duration {
        self.grace / 4
    }
}

impl Default for Timing {
    fn default() -> Timing {
        Timing { grace: Timing::GRACE, heartbeat: Timing::HEARTBEAT }
    }
}

/// Calls `visit` once for every blob the tree `root` uses (the tree, the parts of
/// split listings, the files' content and content parts), in walk order, skipping
/// ids in `seen` (which gains every id visited). Trees are read through the index,
/// so a blob the index lacks is an error.
pub(crate) fn each_used_blob(
    repo: &Repository,
    root: Id,
    seen: &mut HashSet<Id>,
    visit: &mut dyn FnMut(BlobType, Id) -> Result<()>,
) -> Result<()> {
    let mut stack = vec![root];
    while let Some(tid) = stack.pop() {
        if !seen.insert(tid) {
            continue;
        }
        visit(BlobType::Tree, tid)?;
        // Parts of split listings and content parts are used like the tree itself.
        let mut nodes = repo.tree_nodes(&tid)?;
        let mut parts = Vec::new();
        for node in nodes.by_ref() {
            let node = node?;
            stack.extend(node.subtree);
            for id in repo.resolve_content(&node, &mut |p| parts.push(p))? {
                if seen.insert(id) {
                    visit(BlobType::Data, id)?;
                }
            }
        }
        for p in nodes.loaded_blobs()[1..].iter().chain(&parts) {
            if seen.insert(*p) {
                visit(BlobType::Tree, *p)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_timing_is_two_minutes_and_four_beats() {
        let t = Timing::default();
        assert_eq!((t.grace, t.heartbeat), (Duration::from_secs(120), Duration::from_secs(30)));
        assert_eq!(Timing::with_grace(t.grace), t);
        assert_eq!(Timing::with_grace(Duration::from_millis(100)).heartbeat, Duration::from_millis(25));
        assert_eq!(t.check_window(), Duration::from_secs(30));
    }
}
