//! Changing a snapshot's tags (`coffer tag`): a new signed snapshot replaces the
//! old one, which is forgotten with a tombstone naming its replacement.
//! See docs/design.md#tag.
//!
//! Snapshots are signed and named by the hash of their bytes, so a tag cannot be
//! changed in place. The replacement is the old snapshot with the new tags,
//! signed by this client's writer key, with the same time, tree and Merkle root;
//! its `history` lists only the snapshot it replaces (its links then predate its
//! end, as the history check wants). Then one tombstone forgets every replaced
//! snapshot, each record naming its replacement in `replaced_by`, and lists the
//! heads, so the history stays whole and `check` can confirm each replacement
//! links to what it replaced.

use std::collections::HashMap;

use crate::crypto::sign::SigningKey;
use crate::error::{Error, Result};
use crate::format::snapshot::check_lists;
use crate::id::Id;
use crate::ops::forget::forget_replaced;
use crate::repo::Repository;
use crate::repo::history::History;

/// How the tags change: `set` (if given) replaces them, then `add` and `remove` apply.
#[derive(Clone, Debug, Default)]
pub struct TagChange {
    /// The tags that replace the old ones (`--set`).
    pub set: Option<Vec<String>>,
    /// Tags added (`--add`).
    pub add: Vec<String>,
    /// Tags removed (`--remove`).
    pub remove: Vec<String>,
}

impl TagChange {
    /// Whether the change does anything at all.
    pub fn is_empty(&self) -> bool {
        self.set.is_none() && self.add.is_empty() && self.remove.is_empty()
    }

    /// The tags `old` becomes: without duplicates, in the order first given.
    pub fn apply(&self, old: &[String]) -> Vec<String> {
        let mut tags: Vec<String> = Vec::new();
        for t in self.set.as_deref().unwrap_or(old).iter().chain(&self.add) {
            if !t.is_empty() && !tags.contains(t) && !self.remove.contains(t) {
                tags.push(t.clone());
            }
        }
        tags
    }
}

/// One snapshot whose tags changed.
#[derive(Clone, Debug)]
pub struct Retagged {
    /// The snapshot replaced (now forgotten).
    pub old: Id,
    /// Its replacement.
    pub new: Id,
    /// The replacement's tags.
    pub tags: Vec<String>,
}

/// Changes the tags of the live snapshots `ids`. Snapshots whose tags would not
/// change are left alone. Returns what changed and the tombstone's id (none when
/// nothing changed).
pub fn tag(
    repo: &Repository,
    history: &History,
    ids: &[Id],
    change: &TagChange,
    key: &SigningKey,
) -> Result<(Vec<Retagged>, Option<Id>)> {
    if change.is_empty() {
        return Err(Error::InvalidInput("no tag change: give --add, --remove or --set".into()));
    }
    let live = history.live_snapshots();
    let mut done = Vec::new();
    for id in ids {
        let (_, old) = live
            .iter()
            .find(|(i, _)| i == id)
            .ok_or_else(|| Error::SnapshotNotFound(format!("{} (or it was forgotten)", id.to_hex())))?;
        let tags = change.apply(&old.tags);
        if tags == old.tags {
            continue;
        }
        check_lists(&old.paths, &tags, &old.excludes, &old.hostname).map_err(Error::InvalidInput)?;
        let mut snap = old.clone();
        snap.tags = tags.clone();
        snap.writer = key.public();
        snap.history = vec![*id];
        snap.program = format!("coffer {}", env!("CARGO_PKG_VERSION"));
        snap.signature = Default::default();
        let new = repo.save_snapshot(&snap, key)?;
        done.push(Retagged { old: *id, new, tags });
    }
    if done.is_empty() {
        return Ok((done, None));
    }
    // The tombstone lists the heads as they are now, replacements included.
    let now = History::load(repo)?;
    let olds: Vec<Id> = done.iter().map(|r| r.old).collect();
    let by: HashMap<Id, Id> = done.iter().map(|r| (r.old, r.new)).collect();
    let tombstone = forget_replaced(repo, &now, &olds, &by, key)?;
    Ok((done, Some(tombstone)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(x: &[&str]) -> Vec<String> {
        x.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn changes_apply_set_then_add_then_remove() {
        let old = v(&["a", "b"]);
        let add = TagChange { add: v(&["c", "a"]), ..Default::default() };
        assert_eq!(add.apply(&old), v(&["a", "b", "c"]));
        let remove = TagChange { remove: v(&["a", "x"]), ..Default::default() };
        assert_eq!(remove.apply(&old), v(&["b"]));
        let set = TagChange { set: Some(v(&["z", "z"])), add: v(&["y"]), remove: v(&["y"]) };
        assert_eq!(set.apply(&old), v(&["z"]));
        assert!(TagChange::default().is_empty());
    }
}
