//! `coffer check`.

use std::collections::BTreeMap;

use anyhow::Result;
use coffer_core::ops::check::{AffectedFile, AffectedKind, CheckOptions, CheckReport, check};
use serde_json::json;

use crate::args::{CheckArgs, GlobalArgs};
use crate::progress::Display;
use crate::{exit, output, repo_open};

pub fn run(global: &GlobalArgs, a: &CheckArgs) -> Result<u8> {
    let reads_data = a.read_data || a.read_data_subset.is_some();
    if a.replicas {
        let code = crate::cmd::backend::check(global)?;
        if !reads_data {
            return Ok(code);
        }
        // And the data check, which reads every copy of each pack.
        let data = check_data(global, a, reads_data)?;
        return Ok(code.max(data));
    }
    check_data(global, a, reads_data)
}

fn check_data(global: &GlobalArgs, a: &CheckArgs, reads_data: bool) -> Result<u8> {
    let (path, _) = repo_open::location(global)?;
    let ahead = if reads_data { repo_open::Ahead::Fetch } else { repo_open::Ahead::List };
    let repo = repo_open::open_ahead(global, &path, ahead(repo_open::READERS))?.0;
    // The local state holds the history heads seen last (rollback detection) and
    // the packs verified by partial data checks.
    let state = match Some(repo_open::local_state(&repo)) {
        Some(Ok(s)) => Some(s),
        Some(Err(e)) => {
            let message = format!("{e:#}; rollback cannot be detected and verified packs will not be remembered");
            if global.json {
                eprintln!("{}", json!({"type": "warning", "message": message}));
            } else {
                eprintln!("warning: {message}");
            }
            None
        }
        None => None,
    };
    let server_log = crate::server_log::follow(global, &repo_open::location(global)?.0, &repo)?;
    let opts = CheckOptions { read_data: a.read_data, read_data_subset: a.read_data_subset, state, server_log };
    let display = Display::new(global.json, global.quiet, "check");
    let report = check(&repo, &opts, &display);
    display.finish();
    let r = report?;
    // Where `repair --replicas` looks first.
    if let Some(state) = &opts.state
        && let Err(e) = crate::cmd::backend_copies::remember(state, &r.damaged_copies)
    {
        eprintln!("warning: could not remember the damaged copies: {e:#}");
    }
    let imported = imported_counts(&repo);
    if global.json {
        print_json(&r, &imported);
    } else {
        print_text(global, a, &r, reads_data, &imported);
    }
    Ok(if r.is_ok() { exit::OK } else { exit::DAMAGED })
}

/// How many of the snapshots each program's repository gave (`coffer import`),
/// by program; empty when the history does not load (the check says why).
fn imported_counts(repo: &coffer_core::repo::Repository) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    if let Ok(history) = coffer_core::repo::history::History::load(repo) {
        for (_, s) in history.live_snapshots() {
            if let Some(f) = &s.imported_from {
                *counts.entry(f.tool.clone()).or_insert(0) += 1;
            }
        }
    }
    counts
}

fn print_json(r: &CheckReport, imported: &BTreeMap<String, u64>) {
    let damaged: Vec<_> = r
        .damaged_blobs
        .iter()
        .map(|b| json!({"type": "damaged_blob", "id": b.id, "blob_type": b.blob_type.noun(), "pack": b.pack}))
        .collect();
    let affected: Vec<_> = r
        .affected
        .iter()
        .map(|f| {
            json!({
                "type": "affected", "snapshot": f.snapshot, "path": f.path.to_string_lossy(), "blobs": f.blobs,
                "kind": match f.kind { AffectedKind::File => "file", AffectedKind::Directory => "directory" },
            })
        })
        .collect();
    output::json(&json!({
        "type": "summary", "ok": r.is_ok(), "errors": r.errors, "warnings": r.warnings,
        "snapshots": r.snapshots, "imported": imported, "trees": r.trees, "data_blobs": r.data_blobs,
        "packs": r.packs, "packs_read": r.packs_read, "packs_read_ids": r.packs_read_ids,
        "packs_unverified": r.packs_unverified, "new_round": r.new_round,
        "damaged_blobs": damaged, "affected": affected, "damaged_copies": r.damaged_copies, "forgotten": r.forgotten, "replaced": r.replaced,
        "storage": crate::repo_open::storage_counts_json(),
    }));
}

fn print_text(global: &GlobalArgs, a: &CheckArgs, r: &CheckReport, reads_data: bool, imported: &BTreeMap<String, u64>) {
    for w in &r.warnings {
        eprintln!("warning: {w}");
    }
    for e in &r.errors {
        eprintln!("error: {e}");
    }
    for b in &r.damaged_blobs {
        let place = match b.pack {
            Some(p) => format!("in pack {}", p.short()),
            None => "(not in any index)".to_string(),
        };
        eprintln!("damaged: {} {} {place}", b.blob_type.noun(), b.id.short());
    }
    for f in &r.affected {
        eprintln!("affected: snapshot {}: {}", f.snapshot.short(), describe(f));
    }
    if !r.damaged_blobs.is_empty() {
        let mut snapshots: Vec<_> = r.affected.iter().map(|f| f.snapshot).collect();
        snapshots.sort();
        snapshots.dedup();
        eprintln!(
            "{} damaged or missing: {} affected in {}",
            output::plural(r.damaged_blobs.len(), "blob"),
            output::plural(r.affected.len(), "entry"),
            output::plural(snapshots.len(), "snapshot")
        );
    }
    if !global.quiet {
        let read = match (&a.read_data_subset, reads_data) {
            (Some(s), _) => format!(" ({} read in full: subset {s})", r.packs_read),
            (None, true) => format!(" ({} read in full)", r.packs_read),
            (None, false) => String::new(),
        };
        let of_them = if imported.is_empty() {
            String::new()
        } else {
            let by: Vec<String> = imported.iter().map(|(tool, n)| format!("{n} from {tool}")).collect();
            format!(" ({} imported: {})", imported.values().sum::<u64>(), by.join(", "))
        };
        println!(
            "checked {}{of_them}, {}, {}, {}{read}",
            output::plural(r.snapshots, "snapshot"),
            output::plural(r.trees, "tree"),
            output::plural(r.data_blobs, "data blob"),
            output::plural(r.packs, "pack")
        );
        if r.forgotten > 0 {
            let by_forget = r.forgotten - r.replaced;
            let how: Vec<String> = [(by_forget, "by forget"), (r.replaced, "replaced by tag")]
                .iter()
                .filter(|(n, _)| *n > 0)
                .map(|(n, how)| format!("{n} {how}"))
                .collect();
            let was = if r.forgotten == 1 { "was" } else { "were" };
            println!(
                "{} {was} removed on purpose ({}), recorded by signed tombstones",
                output::plural(r.forgotten, "snapshot"),
                how.join(", ")
            );
        }
        if let Some(left) = r.packs_unverified {
            let round = if r.new_round { " (this run began a new round)" } else { "" };
            println!(
                "{left} of {} not yet verified by this machine in this round{round}",
                output::plural(r.packs, "pack")
            );
        }
    }
    if r.is_ok() {
        if !global.quiet {
            println!("no errors were found");
        }
    } else if r.errors.len() == r.damaged_copies.len() && r.damaged_copies.iter().all(|c| !c.intact_on.is_empty()) {
        eprintln!(
            "{} found: every pack has an intact copy on another backend, so no data is lost, but redundancy is \
             reduced; run `coffer repair --replicas`",
            output::plural(r.damaged_copies.len(), "damaged or missing pack copy")
        );
    } else {
        eprintln!("{} found: the repository is damaged", output::plural(r.errors.len(), "error"));
    }
}

/// `/path (data blobs 1a2b3c4d, 5e6f7a8b)`, or a directory whose listing is lost.
fn describe(f: &AffectedFile) -> String {
    let ids: Vec<String> = f.blobs.iter().map(|b| b.short()).collect();
    match f.kind {
        AffectedKind::File => {
            let noun = if ids.len() == 1 { "data blob" } else { "data blobs" };
            format!("{} ({noun} {})", f.path.display(), ids.join(", "))
        }
        AffectedKind::Directory => format!(
            "{} (directory: its listing, tree blob {}, is damaged; nothing below it can be restored)",
            f.path.display(),
            ids.join(", ")
        ),
    }
}
