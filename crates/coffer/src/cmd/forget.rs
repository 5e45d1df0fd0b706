//! `coffer forget`.

use anyhow::Result;
use coffer_core::forget::forget;
use coffer_core::format::ObjectKind;
use coffer_core::history::History;
use serde_json::json;

use crate::args::{ForgetArgs, GlobalArgs};
use crate::{exit, output, repo_open};

pub fn run(global: &GlobalArgs, a: &ForgetArgs) -> Result<u8> {
    let (path, _) = repo_open::location(global)?;
    let repo = repo_open::open_unindexed(global, &path)?;
    let state = repo_open::local_state(&repo)?;
    let ids =
        a.snapshots.iter().map(|s| repo.resolve_prefix(ObjectKind::Snapshot, s)).collect::<Result<Vec<_>, _>>()?;
    let history = History::load(&repo)?;
    let key = repo.writer_key(&state)?;
    let tombstone = forget(&repo, &history, &ids, &key)?;
    if global.json {
        output::json(&json!({"type": "summary", "forgotten": ids, "tombstone": tombstone}));
    } else if !global.quiet {
        for id in &ids {
            println!("forgot snapshot {}", id.short());
        }
        println!("tombstone {} records the removal", tombstone.short());
    }
    History::load(&repo)?.sync_remembered(&state)?;
    Ok(exit::OK)
}
