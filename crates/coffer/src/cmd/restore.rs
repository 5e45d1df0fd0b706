//! `coffer restore`.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use anyhow::{Result, anyhow};
use coffer_core::repo::SnapshotFilter;
use coffer_core::restore::{BatchLimits, RestoreOptions, restore};
use serde_json::json;

use crate::args::{GlobalArgs, RestoreArgs};
use crate::progress::Display;
use crate::{exit, output, repo_open};

pub fn run(global: &GlobalArgs, a: &RestoreArgs) -> Result<u8> {
    let raw = a.snapshot.as_bytes();
    let (name, subpath) = match raw.iter().position(|&b| b == b':') {
        Some(i) => (&raw[..i], Some(PathBuf::from(OsStr::from_bytes(&raw[i + 1..])))),
        None => (raw, None),
    };
    let name = std::str::from_utf8(name).map_err(|_| anyhow!("snapshot name {:?} is not valid UTF-8", a.snapshot))?;
    let repo = repo_open::open(global)?;
    let (id, snap) = repo.find_snapshot(name, &SnapshotFilter::from(&a.filter))?;
    super::flag_signature(&id, &snap);
    let opts = RestoreOptions {
        target: a.target.clone(),
        subpath,
        includes: a.includes.clone(),
        excludes: a.excludes.clone(),
        overwrite: a.overwrite,
        privileged: true,
        batch: batch_limits()?,
    };
    let display = Display::new(global.json, global.quiet, "restore");
    let summary = restore(&repo, &snap, &opts, &display);
    display.finish();
    let summary = summary?;
    for (path, err) in &summary.failures {
        if global.json {
            eprintln!("{}", json!({"type": "failure", "path": path, "message": err.to_string()}));
        } else {
            eprintln!("error: {}: {err}", path.display());
        }
    }
    if global.json {
        output::json(&json!({
            "type": "summary", "snapshot_id": id, "target": a.target,
            "files": summary.files, "dirs": summary.dirs, "others": summary.others,
            "bytes": summary.bytes, "warnings": summary.warnings, "failures": summary.failures.len(),
        }));
    } else if !global.quiet {
        println!(
            "restored snapshot {} to {}: {} files, {} directories, {} other entries, {}",
            id.short(),
            a.target.display(),
            summary.files,
            summary.dirs,
            summary.others,
            output::bytes(summary.bytes)
        );
    }
    let n = summary.failures.len();
    if let Some((path, err)) = summary.failures.into_iter().next() {
        return Err(anyhow!(err).context(format!("{n} entries could not be restored (first: {})", path.display())));
    }
    Ok(exit::OK)
}

/// The batch limits of the restore: the default, or for tests
/// `COFFER_TEST_RESTORE_BATCH=N`, which closes a batch at N entries or N chunks
/// so that small trees are restored in many batches.
fn batch_limits() -> Result<BatchLimits> {
    match std::env::var("COFFER_TEST_RESTORE_BATCH") {
        Ok(v) if !v.is_empty() => {
            let n: usize = v.parse().map_err(|_| anyhow!("COFFER_TEST_RESTORE_BATCH: {v:?} is not a count"))?;
            Ok(BatchLimits { entries: n, chunks: n })
        }
        _ => Ok(BatchLimits::default()),
    }
}
