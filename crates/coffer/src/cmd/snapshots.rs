//! `coffer snapshots`.

use anyhow::Result;
use coffer_core::repo::SnapshotFilter;
use coffer_core::repo::history::History;
use serde_json::json;

use crate::args::{GlobalArgs, SnapshotsArgs};
use crate::{exit, output, repo_open};

pub fn run(global: &GlobalArgs, a: &SnapshotsArgs) -> Result<u8> {
    let (path, _) = repo_open::location(global)?;
    let repo = repo_open::open_unindexed(global, &path)?;
    let filter = SnapshotFilter::from(&a.filter);
    let history = History::load(&repo)?;
    let findings = history.sync_remembered(&repo_open::local_state(&repo)?)?;
    let snaps: Vec<_> = history.live_snapshots().into_iter().filter(|(_, s)| filter.matches(s)).collect();
    let problems: Vec<String> =
        history.damaged.iter().map(|e| e.to_string()).chain(findings.errors.iter().cloned()).collect();
    let code = if problems.is_empty() { exit::OK } else { exit::DAMAGED };
    for p in &problems {
        if global.json {
            eprintln!("{}", json!({"type": "error", "message": p, "exit_code": code}));
        } else {
            eprintln!("error: {p}");
        }
    }
    if global.json {
        let list: Vec<_> = snaps
            .iter()
            .map(|(id, s)| {
                json!({"id": id, "snapshot": s, "signed_by": s.signature.describe(),
                       "signature_valid": s.signature.is_valid()})
            })
            .collect();
        output::json(&serde_json::Value::Array(list));
        return Ok(code);
    }
    println!(
        "{:<10} {:<19} {:<16} {:<12} {:>10}  {:<20} paths",
        "id", "time (UTC)", "host", "tags", "size", "signed by"
    );
    for (id, s) in &snaps {
        let mark = if s.is_incomplete() { " (incomplete)" } else { "" };
        println!(
            "{:<10} {:<19} {:<16} {:<12} {:>10}  {:<20} {}{mark}",
            id.short(),
            output::time(&s.time),
            s.hostname,
            s.tags.join(","),
            output::bytes(s.summary.bytes_total),
            s.signature.describe(),
            s.paths.join(" ")
        );
    }
    println!("{} snapshots", snaps.len());
    if !problems.is_empty() {
        eprintln!("{} problems found; run 'coffer check' for the full report", problems.len());
    }
    Ok(code)
}
