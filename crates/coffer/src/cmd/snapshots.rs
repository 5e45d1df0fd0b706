//! `coffer snapshots`.

use anyhow::Result;
use coffer_core::repo::SnapshotFilter;
use serde_json::json;

use crate::args::{GlobalArgs, SnapshotsArgs};
use crate::{exit, output, repo_open};

pub fn run(global: &GlobalArgs, a: &SnapshotsArgs) -> Result<u8> {
    let (path, _) = repo_open::location(global)?;
    let repo = repo_open::open_unindexed(global, &path)?;
    let filter = SnapshotFilter::from(&a.filter);
    let snaps: Vec<_> = repo.snapshots()?.into_iter().filter(|(_, s)| filter.matches(s)).collect();
    if global.json {
        let list: Vec<_> = snaps.iter().map(|(id, s)| json!({"id": id, "snapshot": s})).collect();
        output::json(&serde_json::Value::Array(list));
        return Ok(exit::OK);
    }
    println!("{:<10} {:<19} {:<16} {:<16} {:>10}  paths", "id", "time (UTC)", "host", "tags", "size");
    for (id, s) in &snaps {
        let mark = if s.is_incomplete() { " (incomplete)" } else { "" };
        println!(
            "{:<10} {:<19} {:<16} {:<16} {:>10}  {}{mark}",
            id.short(),
            output::time(&s.time),
            s.hostname,
            s.tags.join(","),
            output::bytes(s.summary.bytes_total),
            s.paths.join(" ")
        );
    }
    println!("{} snapshots", snaps.len());
    Ok(exit::OK)
}
