//! `coffer repair`: the index from the packs, or a lost config.

use anyhow::{Result, bail};
use coffer_core::ops::repair::repair_index;
use coffer_core::repo::Repository;
use serde_json::json;

use crate::args::{GlobalArgs, RepairArgs, RepairCommand, RepairConfigArgs};
use crate::password::{self, Purpose};
use crate::progress::Display;
use crate::{exit, output, repo_open};

pub fn run(global: &GlobalArgs, a: &RepairArgs) -> Result<u8> {
    match &a.command {
        Some(RepairCommand::Index(a)) => index(global, a.dry_run),
        Some(RepairCommand::Config(c)) => config(global, c),
        Some(RepairCommand::Planted(a)) => planted(global, a.dry_run),
        None if a.replicas => crate::cmd::backend::repair(global, a.read_data),
        None => anyhow::bail!(
            "name what to repair: `coffer repair index`, `coffer repair planted`, `coffer repair config` or `coffer \
             repair --replicas`"
        ),
    }
}

fn index(global: &GlobalArgs, dry_run: bool) -> Result<u8> {
    let (path, _) = repo_open::location(global)?;
    // The old index is not needed: the packs are read themselves.
    let repo = repo_open::open_unindexed(global, &path)?;
    let display = Display::new(global.json, global.quiet, "repair");
    let r = repair_index(&repo, dry_run, &display);
    display.finish();
    let r = r?;
    // Unreadable or missing packs are damage the repair could only report.
    let code = if r.packs_unreadable.is_empty() && r.packs_missing.is_empty() { exit::OK } else { exit::DAMAGED };
    if global.json {
        output::json(&json!({"type": "summary", "ok": code == exit::OK, "report": r}));
        return Ok(code);
    }
    for line in r.packs_unreadable.iter().chain(&r.packs_missing) {
        eprintln!("error: {line}");
    }
    for line in &r.index_files_damaged {
        eprintln!("warning: {line}; replaced");
    }
    if !global.quiet {
        let would = if r.dry_run { "would be " } else { "" };
        println!(
            "{} of {} indexed from their own headers ({}): {} {would}written, {} {would}deleted",
            r.packs_indexed,
            output::plural(r.packs, "pack"),
            output::plural(r.blobs, "blob"),
            output::plural(r.index_files_written.len(), "index file"),
            output::plural(r.index_files_deleted, "old one")
        );
        if r.packs_kept_from_old_index > 0 {
            println!(
                "{} packs whose header does not read keep their entries from the old index files",
                r.packs_kept_from_old_index
            );
        }
        if r.index_files_kept > 0 {
            println!(
                "{} old index files were kept because a backup running now relies on them; run the repair again \
                 later to remove them",
                r.index_files_kept
            );
        }
        if code != exit::OK {
            println!("some packs are damaged or missing (above); run `coffer check --read-data` for what is lost");
        }
    }
    Ok(code)
}

/// Removes the objects that do not decode.
fn planted(global: &GlobalArgs, dry_run: bool) -> Result<u8> {
    let (path, _) = repo_open::location(global)?;
    let repo = repo_open::open_unindexed(global, &path)?;
    let r = coffer_core::ops::planted::remove(&repo, dry_run)?;
    if global.json {
        output::json(&json!({"type": "summary", "ok": true, "report": r}));
        return Ok(exit::OK);
    }
    let would = if r.dry_run { "would be " } else { "" };
    for p in &r.found {
        eprintln!("{p}: {would}deleted");
    }
    if !global.quiet {
        if let Some(id) = r.index_file_written {
            println!(
                "the packs no other index file lists were indexed from their headers, in index file {}",
                id.short()
            );
        }
        let done = if r.dry_run { r.found.len() } else { r.removed };
        println!("{} that do not decode {would}deleted", output::plural(done, "object"));
    }
    Ok(exit::OK)
}

/// Writes a new config sealed under the existing keys.
fn config(global: &GlobalArgs, a: &RepairConfigArgs) -> Result<u8> {
    let opts = crate::cmd::init::settings(&a.settings)?;
    let (path, _) = repo_open::location(global)?;
    if path.local_path().is_some_and(|p| !p.is_dir()) {
        return Err(coffer_core::Error::RepoNotFound { location: path.display().to_string() }.into());
    }
    let be = repo_open::backend(&path)?;
    if Repository::exists(be.as_ref())? {
        bail!("{} has a config: there is nothing to repair (run 'coffer check' to verify it)", path.display());
    }
    let pw = password::read(global, Purpose::Open)?;
    let (repo, reset) = Repository::repair_config(be, pw.as_bytes(), &opts)?;
    if global.json {
        output::json(&json!({"type": "repaired", "repaired": "config", "id": repo.config().id, "reset": reset}));
    } else if !global.quiet {
        println!("wrote a new config for the repository at {}, sealed under its existing keys", path.display());
        println!("reset, as the lost config could not be read back:");
        for r in &reset {
            println!("  {r}");
        }
        println!("run 'coffer check' to verify the repository");
    }
    Ok(exit::OK)
}
