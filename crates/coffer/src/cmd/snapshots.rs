//! `coffer snapshots`.

use std::collections::BTreeMap;

use anyhow::Result;
use coffer_core::Id;
use coffer_core::format::ObjectKind;
use coffer_core::format::snapshot::Snapshot;
use coffer_core::ops::retention::{GroupBy, GroupKey};
use coffer_core::repo::SnapshotFilter;
use coffer_core::repo::history::History;
use serde_json::json;

use crate::args::{GlobalArgs, SnapshotsArgs};
use crate::table::Table;
use crate::{exit, output, repo_open};

pub fn run(global: &GlobalArgs, a: &SnapshotsArgs) -> Result<u8> {
    let (path, _) = repo_open::location(global)?;
    let repo =
        repo_open::open_ahead(global, &path, repo_open::Ahead::List(&[ObjectKind::Snapshot, ObjectKind::Tombstone]))?.0;
    let filter = SnapshotFilter::from(&a.filter);
    let mut history = History::load(&repo)?;
    let findings = history.sync_remembered(&repo, &repo_open::local_state(&repo)?)?;
    let snaps: Vec<_> = history.live_snapshots().into_iter().filter(|(_, s)| filter.matches(s)).collect();
    // Groups in key order, each oldest first (the order of the history).
    let group_by = a.group_by.or(a.latest.map(|_| GroupBy::default()));
    let mut groups: BTreeMap<Option<GroupKey>, Vec<_>> = BTreeMap::new();
    for (id, s) in snaps {
        groups.entry(group_by.map(|g| g.key(&s))).or_default().push((id, s));
    }
    if let Some(n) = a.latest {
        for members in groups.values_mut() {
            let drop = members.len().saturating_sub(n);
            members.drain(..drop);
        }
    }
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
        let entry = |(id, s): &(Id, Snapshot)| {
            json!({"type": "snapshot", "id": id, "snapshot": s, "signed_by": s.signature.describe(),
                   "signature_valid": s.signature.is_valid()})
        };
        let doc = if group_by.is_some() && a.group_by.is_some() {
            let list: Vec<_> = groups
                .iter()
                .map(|(key, members)| {
                    let key = key.as_ref().map(|k| json!({"host": k.host, "paths": k.paths, "tags": k.tags}));
                    json!({"type": "group", "group_key": key, "snapshots": members.iter().map(entry).collect::<Vec<_>>()})
                })
                .collect();
            serde_json::Value::Array(list)
        } else {
            serde_json::Value::Array(groups.values().flatten().map(entry).collect())
        };
        output::json(&doc);
        return Ok(code);
    }
    let time_header = if output::is_utc() { "time (UTC)" } else { "time" };
    let new_table = || {
        if a.compact {
            Table::new(&["id", time_header, "host", "tags"])
        } else {
            Table::new(&["id", time_header, "host", "tags", "size", "signed by", "paths"]).right([4])
        }
    };
    let mut total = 0;
    for (key, members) in &groups {
        if let (Some(key), Some(_)) = (key, a.group_by) {
            println!("snapshots of {key}:");
        }
        let mut t = new_table();
        for (id, s) in members {
            let mut mark = if s.is_incomplete() { " (incomplete)".to_string() } else { String::new() };
            if let Some(f) = &s.imported_from {
                // A tar archive has no id of its own (its record holds the time given).
                if f.tool == "tar" {
                    mark.push_str(" (imported from a tar archive)");
                } else {
                    mark.push_str(&format!(
                        " (imported from {} {})",
                        f.tool,
                        f.snapshot.get(..8).unwrap_or(&f.snapshot)
                    ));
                }
            }
            let (id, time, tags) = (id.short(), output::time(&s.time), s.tags.join(","));
            if a.compact {
                t.row([id, time, s.hostname.clone(), format!("{tags}{mark}")]);
            } else {
                let size = output::bytes(s.summary.bytes_total);
                let paths = format!("{}{mark}", s.paths.join(" "));
                t.row([id, time, s.hostname.clone(), tags, size, s.signature.describe(), paths]);
            }
        }
        t.print();
        total += members.len();
        if a.group_by.is_some() {
            println!();
        }
    }
    if groups.is_empty() && !a.compact {
        new_table().print();
    }
    println!("{}", output::plural(total, "snapshot"));
    if !problems.is_empty() {
        eprintln!("{} found; run 'coffer check' for the full report", output::plural(problems.len(), "problem"));
    }
    Ok(code)
}
