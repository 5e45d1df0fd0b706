//! `coffer check`.

use anyhow::Result;
use coffer_core::check::{CheckOptions, check};
use serde_json::json;

use crate::args::{CheckArgs, GlobalArgs};
use crate::progress::Display;
use crate::{exit, output, repo_open};

pub fn run(global: &GlobalArgs, a: &CheckArgs) -> Result<u8> {
    let (path, _) = repo_open::location(global)?;
    let repo = repo_open::open_unindexed(global, &path)?;
    let display = Display::new(global.json, global.quiet, "check");
    let opts = CheckOptions { read_data: a.read_data, state: Some(repo_open::local_state(&repo)?) };
    let report = check(&repo, &opts, &display);
    display.finish();
    let r = report?;
    if global.json {
        output::json(&json!({
            "type": "summary", "ok": r.is_ok(), "errors": r.errors, "warnings": r.warnings,
            "snapshots": r.snapshots, "trees": r.trees, "data_blobs": r.data_blobs,
            "packs": r.packs, "packs_read": r.packs_read, "forgotten": r.forgotten,
        }));
    } else {
        for w in &r.warnings {
            eprintln!("warning: {w}");
        }
        for e in &r.errors {
            eprintln!("error: {e}");
        }
        if !global.quiet {
            println!(
                "checked {} snapshots, {} trees, {} data blobs, {} packs{}",
                r.snapshots,
                r.trees,
                r.data_blobs,
                r.packs,
                if a.read_data { format!(" ({} read in full)", r.packs_read) } else { String::new() }
            );
        }
        if r.forgotten > 0 && !global.quiet {
            println!("{} snapshots were removed on purpose by forget (recorded by signed tombstones)", r.forgotten);
        }
        if r.is_ok() {
            if !global.quiet {
                println!("no errors were found");
            }
        } else {
            eprintln!("{} errors found: the repository is damaged", r.errors.len());
        }
    }
    Ok(if r.is_ok() { exit::OK } else { exit::DAMAGED })
}
