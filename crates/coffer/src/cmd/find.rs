//! `coffer find`: entries whose name matches a pattern, across snapshots
//! (docs/design.md#find). Trees are streamed; each match is printed as found.

use std::os::unix::ffi::OsStrExt;

use anyhow::Result;
use coffer_core::Id;
use coffer_core::format::bytes::Bytes;
use coffer_core::format::snapshot::Snapshot;
use coffer_core::format::tree::NodeKind;
use coffer_core::ops::find::{NamePatterns, find};
use coffer_core::repo::SnapshotFilter;
use coffer_core::repo::history::History;
use serde_json::json;

use crate::args::{FindArgs, GlobalArgs};
use crate::{exit, output, repo_open};

pub fn run(global: &GlobalArgs, a: &FindArgs) -> Result<u8> {
    let patterns = NamePatterns::new(&a.patterns, a.ignore_case)?;
    let newest = a.newest.as_deref().map(|t| output::parse_time(t, "--newest")).transpose()?;
    let oldest = a.oldest.as_deref().map(|t| output::parse_time(t, "--oldest")).transpose()?;
    let repo = repo_open::open(global)?;
    let filter = SnapshotFilter::from(&a.filter);
    let snaps: Vec<(Id, Snapshot)> = if a.snapshots.is_empty() {
        History::load(&repo)?.live_snapshots().into_iter().filter(|(_, s)| filter.matches(s)).collect()
    } else {
        let mut v: Vec<(Id, Snapshot)> = Vec::new();
        for name in &a.snapshots {
            let found = repo_open::find_snapshot(global, &repo, name, &filter)?;
            if !v.iter().any(|(id, _)| *id == found.0) {
                v.push(found);
            }
        }
        v
    };
    let mut matches = 0u64;
    let mut searched = 0u64;
    let mut left_out = 0u64;
    let sized = a.min_size.is_some() || a.max_size.is_some();
    let wanted = |node: &coffer_core::format::tree::Node| {
        let mtime = std::time::UNIX_EPOCH
            .checked_add(std::time::Duration::new(node.mtime.0.max(0) as u64, node.mtime.1))
            .unwrap_or(std::time::UNIX_EPOCH);
        let file = node.kind == NodeKind::File;
        newest.is_none_or(|n| mtime <= n)
            && oldest.is_none_or(|o| mtime >= o)
            && (!sized || file)
            && a.min_size.is_none_or(|m| node.size >= m)
            && a.max_size.is_none_or(|m| node.size <= m)
    };
    for (id, snap) in &snaps {
        super::flag_signature(id, snap);
        searched += 1;
        let mut header = false;
        let mut found = |path: &std::path::Path, node: &coffer_core::format::tree::Node| {
            if !wanted(node) {
                return Ok(());
            }
            matches += 1;
            if global.json {
                output::json(&json!({
                    "type": "match", "snapshot_id": id, "snapshot_time": snap.time,
                    "path": Bytes(path.as_os_str().as_bytes().to_vec()), "kind": node.kind,
                    "size": node.size, "mtime": output::rfc3339(node.mtime.0, node.mtime.1),
                }));
            } else {
                if !header {
                    println!("snapshot {} of {}:", id.short(), output::time(&snap.time));
                    header = true;
                }
                let size = if node.kind == NodeKind::File { node.size.to_string() } else { "-".into() };
                println!("  {}  {:>12}  {}", output::file_time(node.mtime.0), size, path.display());
            }
            Ok(())
        };
        find(&repo, snap.tree, &patterns, &mut found, &mut |t| {
            left_out += 1;
            repo_open::warn(global, &format!("snapshot {}: {t}", id.short()));
            Ok(())
        })?;
    }
    repo_open::report_bad_copies(global, &repo);
    if global.json {
        output::json(&json!({"type": "find_summary", "snapshots": searched, "matches": matches}));
    } else if !global.quiet {
        let found = if matches == 1 { "1 match".to_string() } else { format!("{matches} matches") };
        println!("{found} in {}", output::plural(searched, "snapshot"));
    }
    // The search did not see what was left out.
    Ok(if left_out > 0 { exit::INCOMPLETE } else { exit::OK })
}
