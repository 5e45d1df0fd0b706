//! `coffer prune`.

use anyhow::{Result, bail};
use coffer_core::lifecycle::Timing;
use coffer_core::ops::prune::{PruneOptions, prune};
use serde_json::json;

use crate::args::{GlobalArgs, PruneArgs};
use crate::progress::Display;
use crate::{exit, output, repo_open};

pub fn run(global: &GlobalArgs, a: &PruneArgs) -> Result<u8> {
    // Backups rely on the grace period they were started with: a prune waits at least that.
    let floor = crate::protocol_timing().grace;
    let grace = a.grace.unwrap_or(floor);
    if grace < floor {
        bail!(
            "--grace {} is shorter than {}, the least running backups are guaranteed to need",
            humantime::format_duration(grace),
            humantime::format_duration(floor)
        );
    }
    let (path, _) = repo_open::location(global)?;
    // Prune reads the index itself, after listing the snapshots.
    let repo = repo_open::open_unindexed(global, &path)?;
    let display = Display::new(global.json, global.quiet, "prune");
    let opts = PruneOptions { max_unused: a.max_unused, dry_run: a.dry_run, timing: Timing::with_grace(grace) };
    let r = prune(&repo, &opts, &display);
    display.finish();
    let r = r?;
    if global.json {
        output::json(&json!({"type": "summary", "bytes_freed": r.bytes_freed(), "report": r}));
    } else if !global.quiet {
        let verb = if r.dry_run { "would be" } else { "were" };
        println!(
            "{} packs ({}): {} blobs in use, {} unused",
            r.packs,
            output::bytes(r.bytes_before),
            r.blobs_used,
            r.blobs_unused
        );
        if r.dry_run {
            // Repacking writes the blobs counted and, beyond them, headers and index files.
            println!(
                "{} packs {verb} deleted and {} repacked ({} {verb} removed, about {} written by repacking, {} \
                 index files replaced)",
                r.packs_deleted,
                r.packs_repacked,
                output::bytes(r.bytes_deleted),
                output::bytes(r.bytes_repacked),
                r.index_files_replaced
            );
        } else {
            println!(
                "{} packs {verb} deleted and {} repacked ({} {verb} removed, {} written by repacking, {} index \
                 files replaced)",
                r.packs_deleted,
                r.packs_repacked,
                output::bytes(r.bytes_deleted),
                output::bytes(r.bytes_repacked),
                r.index_files_replaced
            );
        }
        if r.packs_spared > 0 {
            println!("{} packs were kept because backups were running; a later prune removes them", r.packs_spared);
        }
        if r.snapshots_deleted > 0 {
            println!("{} forgotten snapshots were deleted (their forget had been interrupted)", r.snapshots_deleted);
        }
        if r.stale_sessions > 0 {
            println!("{} markers of backups that stopped without finishing were removed", r.stale_sessions);
        }
        println!("Duration: {:.2}s", r.duration_ms as f64 / 1000.0);
    }
    Ok(exit::OK)
}
