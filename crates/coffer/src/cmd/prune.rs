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
            "{} ({}): {} in use, {} unused",
            output::plural(r.packs, "pack"),
            output::bytes(r.bytes_before),
            output::plural(r.blobs_used, "blob"),
            r.blobs_unused
        );
        // A dry run counts the blobs repacking copies; the new headers and index files add a little.
        let about = if r.dry_run { "about " } else { "" };
        println!(
            "{} {verb} deleted and {} repacked ({} {verb} removed, {about}{} written by repacking, {} replaced)",
            output::plural(r.packs_deleted, "pack"),
            r.packs_repacked,
            output::bytes(r.bytes_deleted),
            output::bytes(r.bytes_repacked),
            output::plural(r.index_files_replaced, "index file")
        );
        if r.packs_spared > 0 {
            let n = output::plural(r.packs_spared, "pack");
            let was = if r.packs_spared == 1 { "was" } else { "were" };
            println!("{n} {was} kept because backups were running; a later prune removes them");
        }
        if r.snapshots_deleted > 0 {
            let n = output::plural(r.snapshots_deleted, "forgotten snapshot");
            let was = if r.snapshots_deleted == 1 { "was" } else { "were" };
            println!("{n} {was} deleted (their forget had been interrupted)");
        }
        if r.stale_sessions > 0 {
            let n = output::plural(r.stale_sessions, "marker");
            let was = if r.stale_sessions == 1 { "was" } else { "were" };
            println!("{n} of backups that stopped without finishing {was} removed");
        }
        println!("Duration: {:.2}s", r.duration_ms as f64 / 1000.0);
    }
    Ok(exit::OK)
}
