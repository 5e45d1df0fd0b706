//! `coffer stats`: what a restore of the chosen snapshots would write
//! (`restore-size`), or the stored data they use, each blob counted once
//! (`raw-data`), with the deduplication ratio between the two (docs/design.md#cli).

use std::collections::HashSet;

use anyhow::Result;
use coffer_core::Id;
use coffer_core::format::pack::BlobType;
use coffer_core::format::snapshot::Snapshot;
use coffer_core::format::tree::NodeKind;
use coffer_core::repo::history::History;
use coffer_core::repo::{Repository, SnapshotFilter};
use serde_json::json;

use crate::args::{GlobalArgs, StatsArgs, StatsMode};
use crate::{exit, output, repo_open};

/// Totals over the snapshots walked.
#[derive(Default)]
struct Totals {
    /// Regular files, each snapshot counted in full.
    files: u64,
    /// Their sizes.
    restore_bytes: u64,
    /// Distinct blobs used (trees, tree parts and data).
    blobs: u64,
    /// Their stored (compressed, encrypted) sizes.
    stored_bytes: u64,
    /// Their plaintext sizes before compression.
    raw_bytes: u64,
}

pub fn run(global: &GlobalArgs, a: &StatsArgs) -> Result<u8> {
    let repo = repo_open::open(global)?;
    let filter = SnapshotFilter::from(&a.filter);
    let snaps: Vec<(Id, Snapshot)> = if a.snapshots.is_empty() {
        History::load(&repo)?.live_snapshots().into_iter().filter(|(_, s)| filter.matches(s)).collect()
    } else {
        a.snapshots.iter().map(|n| repo_open::find_snapshot(global, &repo, n, &filter)).collect::<Result<_>>()?
    };
    let mut t = Totals::default();
    let mut seen = HashSet::new();
    for (_, s) in &snaps {
        walk(&repo, s.tree, a.mode == StatsMode::RawData, &mut seen, &mut t)?;
    }
    repo_open::report_bad_copies(global, &repo);
    let ratio = (t.stored_bytes > 0).then(|| t.restore_bytes as f64 / t.stored_bytes as f64);
    if global.json {
        let mut v = json!({
            "type": "stats",
            "mode": match a.mode { StatsMode::RestoreSize => "restore-size", StatsMode::RawData => "raw-data" },
            "snapshots_count": snaps.len(),
            "total_file_count": t.files,
            "total_size": if a.mode == StatsMode::RawData { t.stored_bytes } else { t.restore_bytes },
        });
        if a.mode == StatsMode::RawData {
            v["total_blob_count"] = t.blobs.into();
            v["total_uncompressed_size"] = t.raw_bytes.into();
            v["restore_size"] = t.restore_bytes.into();
            v["dedup_ratio"] = json!(ratio);
        }
        output::json(&v);
        return Ok(exit::OK);
    }
    println!("Snapshots:          {}", snaps.len());
    println!("Files:              {}", t.files);
    println!("Restore size:       {}", output::bytes(t.restore_bytes));
    if a.mode == StatsMode::RawData {
        println!("Blobs:              {}", t.blobs);
        println!(
            "Stored size:        {} ({} before compression)",
            output::bytes(t.stored_bytes),
            output::bytes(t.raw_bytes)
        );
        if let Some(r) = ratio {
            println!("Restore/stored:     {r:.2}x");
        }
    }
    Ok(exit::OK)
}

/// Adds the files below tree `root` to `t`; with `blobs`, also every blob not in `seen`.
fn walk(repo: &Repository, root: Id, blobs: bool, seen: &mut HashSet<Id>, t: &mut Totals) -> Result<()> {
    let mut count = |repo: &Repository, blob_type: BlobType, id: Id, t: &mut Totals| -> Result<()> {
        if blobs && seen.insert(id) {
            let (entry, _) = repo.locate_blob(blob_type, &id)?;
            t.blobs += 1;
            t.stored_bytes += u64::from(entry.length);
            t.raw_bytes += u64::from(entry.raw_length);
        }
        Ok(())
    };
    let mut stack = vec![root];
    while let Some(tid) = stack.pop() {
        count(repo, BlobType::Tree, tid, t)?;
        let mut nodes = repo.tree_nodes(&tid)?;
        let mut parts = Vec::new();
        for node in nodes.by_ref() {
            let node = node?;
            stack.extend(node.subtree);
            if node.kind == NodeKind::File {
                t.files += 1;
                t.restore_bytes += node.size;
                if blobs {
                    for id in repo.resolve_content(&node, &mut |p| parts.push(p))? {
                        count(repo, BlobType::Data, id, t)?;
                    }
                }
            }
        }
        for p in nodes.loaded_blobs().get(1..).unwrap_or_default().iter().chain(&parts) {
            count(repo, BlobType::Tree, *p, t)?;
        }
    }
    Ok(())
}
