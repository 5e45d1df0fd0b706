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
    let (all, damaged) = repo.snapshots()?;
    let snaps: Vec<_> = all.into_iter().filter(|(_, s)| filter.matches(s)).collect();
    let code = if damaged.is_empty() { exit::OK } else { exit::DAMAGED };
    for e in &damaged {
        if global.json {
            eprintln!("{}", json!({"type": "error", "message": e.to_string(), "exit_code": code}));
        } else {
            eprintln!("error: {e}");
        }
    }
    if global.json {
        let list: Vec<_> = snaps.iter().map(|(id, s)| json!({"id": id, "snapshot": s})).collect();
        output::json(&serde_json::Value::Array(list));
        return Ok(code);
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
    if !damaged.is_empty() {
        eprintln!("{} damaged snapshots could not be read; run 'coffer check' to locate the damage", damaged.len());
    }
    Ok(code)
}
