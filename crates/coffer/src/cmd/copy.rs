//! `coffer copy --from-repo SRC [SNAPSHOT...]`: copies snapshots and the data
//! they need into `--repo` (docs/design.md#copy); the summary's JSON schema is in
//! docs/json.md.

use anyhow::Result;
use coffer_backend::Location;
use coffer_core::ops::copy::{CopyOptions, Relation, Sent, copy, relate, unsupported};
use coffer_core::repo::{Repository, SnapshotFilter};
use serde_json::json;

use crate::args::{CopyArgs, GlobalArgs};
use crate::progress::Display;
use crate::{exit, output, repo_open};

pub fn run(global: &GlobalArgs, a: &CopyArgs) -> Result<u8> {
    let (path, _) = repo_open::location(global)?;
    let (src, src_counts) = repo_open::open_source(&a.from_repo, a.from_password_file.as_deref())?;
    let dst = repo_open::open_unindexed(global, &path)?;
    let relation = relate(&src, &dst)?;
    if let Some(why) = unsupported(relation, a.rechunk) {
        // Not a failure of the storage or the data: a copy this version cannot make.
        output::error(
            global.json,
            &anyhow::anyhow!("cannot copy from {} into {path}: {why}", a.from_repo),
            exit::USAGE,
        );
        return Ok(exit::USAGE);
    }
    let opts = CopyOptions {
        snapshots: a.snapshots.clone(),
        filter: SnapshotFilter::from(&a.filter),
        with_forgets: a.with_forgets,
        dry_run: a.dry_run,
        rechunk: a.rechunk,
        timing: crate::protocol_timing(),
        trusted: None,
        source_sketches: is_server(&a.from_repo),
        destination_sketches: matches!(path, Location::Server { .. }),
    };
    // New snapshots are signed by this client's writer key for the destination.
    let key = match relation {
        Relation::SharedIds | Relation::Unrelated if !a.dry_run => {
            Some(dst.writer_key(&repo_open::local_state(&dst)?)?)
        }
        _ => None,
    };
    // A dry run reuses the content of earlier copies this client signed, as the
    // real copy would, without creating a writer key.
    let opts = match relation {
        Relation::Unrelated if a.dry_run => CopyOptions {
            trusted: dst.existing_writer_key(&repo_open::local_state(&dst)?)?.map(|k| k.public()),
            ..opts
        },
        _ => opts,
    };
    let display = Display::new(global.json, global.quiet, "copy");
    let r = copy(&src, &dst, &opts, key.as_ref(), &display);
    display.finish();
    let r = r?;
    if !r.dry_run {
        trust_own_source_key(&src, &dst)?;
    }
    for w in &r.warnings {
        if global.json {
            eprintln!("{}", json!({"type": "warning", "message": w}));
        } else {
            eprintln!("warning: {w}");
        }
    }
    for (id, why) in &r.refused {
        let message = format!(
            "snapshot {} of the source was not copied: its signature is not valid there ({why}), so a copy could not \
             keep who wrote it; run `coffer check` on the source, and forget the snapshot there if nobody you trust \
             wrote it",
            id.short()
        );
        if global.json {
            eprintln!("{}", json!({"type": "refused", "snapshot_id": id, "reason": why, "message": message}));
        } else {
            eprintln!("error: {message}");
        }
    }
    let total = r.total();
    if global.json {
        let sent = |s: Sent| json!({"objects": s.objects, "bytes": s.bytes});
        output::json(&json!({
            "type": "summary",
            "dry_run": r.dry_run,
            "relation": r.relation,
            "snapshots": r.snapshots,
            "snapshots_present": r.snapshots_present,
            "sent": {
                "total": sent(total), "packs": sent(r.packs), "index_files": sent(r.index_files),
                "writers": sent(r.writers), "snapshots": sent(r.snapshot_objects), "tombstones": sent(r.tombstones),
            },
            "blobs": sent(r.blobs),
            "files_read": r.files_read,
            "files_reused": r.files_reused,
            "bytes_read": r.bytes_read,
            "packs_present": r.packs_present,
            "snapshots_removed": r.snapshots_removed,
            "unlinked": r.unlinked,
            "refused": r.refused.iter().map(|(id, _)| id).collect::<Vec<_>>(),
            "requests": {
                "source": repo_open::counts_json(&src_counts.get()),
                "destination": repo_open::storage_counts_json(),
            },
        }));
    } else if !global.quiet {
        let verb = if r.dry_run { "would be copied" } else { "copied" };
        println!(
            "{} {verb} ({}, {}): {} ({}), {}, {}, {}",
            output::plural(r.snapshots.len(), "snapshot"),
            output::plural(total.objects, "object"),
            output::bytes(total.bytes),
            output::plural(r.packs.objects, "pack"),
            output::bytes(r.packs.bytes),
            output::plural(r.index_files.objects, "index file"),
            output::plural(r.writers.objects, "writer record"),
            output::plural(r.tombstones.objects, "tombstone")
        );
        if r.blobs.objects > 0 {
            let verb = match (r.dry_run, r.blobs.objects) {
                (true, _) => "would be",
                (false, 1) => "was",
                (false, _) => "were",
            };
            println!(
                "{} ({}) {verb} encrypted again for the destination",
                output::plural(r.blobs.objects, "blob"),
                output::bytes(r.blobs.bytes)
            );
        }
        if r.files_read + r.files_reused > 0 {
            println!(
                "{} read and cut again ({}), {} found in the destination already",
                output::plural(r.files_read, "file"),
                output::bytes(r.bytes_read),
                r.files_reused
            );
        }
        if r.packs_present > 0 {
            let was = if r.packs_present == 1 { "was" } else { "were" };
            println!("{} {was} there already (an earlier copy sent them)", output::plural(r.packs_present, "pack"));
        }
        if !r.snapshots_removed.is_empty() {
            let verb = if r.dry_run { "would be removed" } else { "removed" };
            let them = if r.snapshots_removed.len() == 1 { "it" } else { "them" };
            println!("{} {verb}: the source forgot {them}", output::plural(r.snapshots_removed.len(), "snapshot"));
        }
    }
    if global.verbose > 0 {
        let c = src_counts.get();
        eprintln!(
            "source storage: {} PUT, {} GET, {} HEAD, {} LIST, {} DELETE; {} up, {} down",
            c.put,
            c.get,
            c.head,
            c.list,
            c.delete,
            output::bytes(c.bytes_up),
            output::bytes(c.bytes_down)
        );
    }
    // What the source's `check` calls errors was left behind: not a success.
    Ok(if r.refused.is_empty() { exit::OK } else { exit::DAMAGED })
}

/// This client's own writer key of the source, if it has one, is trusted in the
/// destination: the snapshots it wrote there keep coming back exactly from the
/// copy (docs/design.md#trusted-writers).
fn trust_own_source_key(src: &Repository, dst: &Repository) -> Result<()> {
    let Some(own) = src.existing_writer_key(&repo_open::local_state(src)?)? else { return Ok(()) };
    let mut trusted = repo_open::trusted_writers(dst)?;
    let note = format!("this client's writer key of repository {}", src.config().id.short());
    trusted.add(&repo_open::local_state(dst)?, own.public(), &note)?;
    Ok(())
}

/// Whether a location is a coffer server's, which answers reconciliation
/// sketches (an unparsable one fails where the source is opened).
fn is_server(location: &str) -> bool {
    matches!(Location::parse(location), Ok(Location::Server { .. }))
}
