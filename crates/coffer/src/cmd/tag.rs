//! `coffer tag`: changes snapshots' tags by replacing each with a new signed
//! snapshot that links to it (docs/design.md#tag).

use anyhow::{Result, bail};
use coffer_core::Id;
use coffer_core::ops::tag::{TagChange, tag};
use coffer_core::repo::SnapshotFilter;
use coffer_core::repo::history::History;
use serde_json::json;

use crate::args::{GlobalArgs, TagArgs};
use crate::{exit, output, repo_open};

pub fn run(global: &GlobalArgs, a: &TagArgs) -> Result<u8> {
    let (path, _) = repo_open::location(global)?;
    let repo = repo_open::open_unindexed(global, &path)?;
    let filter = SnapshotFilter::from(&a.filter);
    let history = History::load(&repo)?;
    let ids: Vec<Id> = if a.snapshots.is_empty() {
        history.live_snapshots().into_iter().filter(|(_, s)| filter.matches(s)).map(|(id, _)| id).collect()
    } else {
        let mut ids = Vec::new();
        for name in &a.snapshots {
            let (id, _) = repo_open::find_snapshot(global, &repo, name, &filter)?;
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        ids
    };
    if ids.is_empty() {
        bail!("no snapshot passes the --host/--tag/--path filters given; `coffer snapshots` lists them");
    }
    let change = TagChange {
        set: a.set.as_ref().map(|s| s.iter().filter(|t| !t.is_empty()).cloned().collect()),
        add: a.add.clone(),
        remove: a.remove.clone(),
    };
    let state = repo_open::local_state(&repo)?;
    let key = repo.writer_key(&state)?;
    let (done, tombstone) = tag(&repo, &history, &ids, &change, &key)?;
    History::load(&repo)?.sync_remembered(&repo, &state)?;
    if global.json {
        let changed: Vec<_> = done
            .iter()
            .map(|r| json!({"type": "retagged", "old_snapshot_id": r.old, "snapshot_id": r.new, "tags": r.tags}))
            .collect();
        output::json(&json!({
            "type": "tag_summary", "changed": changed, "unchanged": ids.len() - done.len(), "tombstone_id": tombstone,
        }));
    } else if !global.quiet {
        for r in &done {
            println!("snapshot {} is now {} (tags: {})", r.old.short(), r.new.short(), r.tags.join(","));
        }
        let n = done.len();
        let unchanged = ids.len() - n;
        println!("{} changed, {unchanged} already had these tags", output::plural(n, "snapshot"));
    }
    Ok(exit::OK)
}
