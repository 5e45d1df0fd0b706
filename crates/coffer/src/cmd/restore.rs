//! `coffer restore`.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use anyhow::{Result, anyhow};
use coffer_core::crypto::sign::PublicKey;
use coffer_core::format::snapshot::Snapshot;
use coffer_core::ops::restore::{BatchLimits, Overwrite, RestoreOptions, RestoreSummary, restore};
use coffer_core::repo::{Repository, SnapshotFilter};
use coffer_core::trust::SnapshotTrust;
use coffer_core::{Error, Id};
use serde_json::json;

use crate::args::{GlobalArgs, OverwriteArg, Privileged, RestoreArgs};
use crate::progress::Display;
use crate::{exit, output, repo_open};

pub fn run(global: &GlobalArgs, a: &RestoreArgs) -> Result<u8> {
    let raw = a.snapshot.as_bytes();
    let (name, subpath) = match raw.iter().position(|&b| b == b':') {
        Some(i) => (&raw[..i], Some(PathBuf::from(OsStr::from_bytes(&raw[i + 1..])))),
        None => (raw, None),
    };
    let name = std::str::from_utf8(name).map_err(|_| anyhow!("snapshot name {:?} is not valid UTF-8", a.snapshot))?;
    let (repo, id, snap) = repo_open::open_finding_one_ahead(
        global,
        repo_open::Ahead::Fetch(repo_open::READERS),
        name,
        &SnapshotFilter::from(&a.filter),
    )?;
    super::flag_signature(&id, &snap);
    let trust = privileged(&repo, &snap, a.privileged)?;
    let opts = RestoreOptions {
        target: a.target.clone(),
        subpath,
        includes: super::backup::patterns_from(&a.includes, &a.include_files)?,
        excludes: super::backup::patterns_from(&a.excludes, &a.exclude_files)?,
        iincludes: a.iincludes.clone(),
        iexcludes: a.iexcludes.clone(),
        overwrite: match a.overwrite {
            None => Overwrite::Refuse,
            Some(OverwriteArg::Always) => Overwrite::Always,
            Some(OverwriteArg::IfChanged) => Overwrite::IfChanged,
            Some(OverwriteArg::IfNewer) => Overwrite::IfNewer,
            Some(OverwriteArg::Never) => Overwrite::Never,
        },
        delete: a.delete,
        dry_run: a.dry_run,
        privileged: trust.0,
        batch: batch_limits()?,
    };
    if a.dry_run {
        let s = restore(&repo, &snap, &opts, &coffer_core::progress::NoProgress)?;
        if global.json {
            output::json(&json!({
                "type": "dry_run", "snapshot_id": id, "target": a.target,
                "files": s.files, "dirs": s.dirs, "others": s.others, "bytes": s.bytes,
                "skipped": s.skipped, "deleted": s.deleted,
            }));
        } else if !global.quiet {
            println!(
                "would restore snapshot {} to {}: {}, {}, {}, {} (nothing written)",
                id.short(),
                a.target.display(),
                output::plural(s.files, "file"),
                output::plural(s.dirs, "directory"),
                output::plural(s.others, "other entry"),
                output::bytes(s.bytes)
            );
            if s.skipped > 0 || s.deleted > 0 {
                println!("would keep {} entries already in the target, delete {}", s.skipped, s.deleted);
            }
        }
        return Ok(exit::OK);
    }
    let display = Display::new(global.json, global.quiet, "restore");
    let summary = restore(&repo, &snap, &opts, &display);
    display.finish();
    repo_open::report_bad_copies(global, &repo);
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
            "skipped": summary.skipped, "deleted": summary.deleted,
            "storage": repo_open::storage_counts_json(),
        }));
    } else if !global.quiet {
        println!(
            "restored snapshot {} to {}: {}, {}, {}, {}",
            id.short(),
            a.target.display(),
            output::plural(summary.files, "file"),
            output::plural(summary.dirs, "directory"),
            output::plural(summary.others, "other entry"),
            output::bytes(summary.bytes)
        );
        if summary.skipped > 0 || summary.deleted > 0 {
            println!(
                "kept {} already in the target, deleted {}",
                output::plural(summary.skipped, "entry"),
                summary.deleted
            );
        }
    }
    report_withheld(global, &repo, &id, &trust.1, &summary);
    let n = summary.failures.len();
    // The exit code is the damage code if any entry was lost to damage.
    let damaged = summary.damaged();
    let first = summary.failures.into_iter().find(|(_, e)| !damaged || matches!(e, Error::Corrupt { .. }));
    if let Some((path, err)) = first {
        let what = if damaged { "first damaged" } else { "first" };
        return Err(anyhow!(err).context(format!(
            "{} could not be restored ({what}: {}); everything else was restored",
            output::plural(n, "entry"),
            path.display()
        )));
    }
    if a.verify {
        return verify(global, &repo, &id, &snap, &opts);
    }
    Ok(exit::OK)
}

/// `--verify`: reads back what was restored and compares it with the snapshot.
fn verify(global: &GlobalArgs, repo: &Repository, id: &Id, snap: &Snapshot, opts: &RestoreOptions) -> Result<u8> {
    let v = coffer_core::ops::restore::verify(repo, snap, opts)?;
    for (path, why) in &v.mismatches {
        if global.json {
            eprintln!("{}", json!({"type": "verify_mismatch", "path": path, "message": why}));
        } else {
            eprintln!("error: {}: {why}", path.display());
        }
    }
    if global.json {
        output::json(&json!({
            "type": "verify_summary", "snapshot_id": id, "files": v.files, "bytes": v.bytes,
            "mismatches": v.mismatches.len(),
        }));
    } else if !global.quiet {
        let differ = v.mismatches.len();
        let verb = if differ == 1 { "differs" } else { "differ" };
        println!("verified {}, {}: {differ} {verb}", output::plural(v.files, "file"), output::bytes(v.bytes));
    }
    if let Some((path, why)) = v.mismatches.first() {
        return Err(anyhow!(Error::corrupt(format!("restored file {}", path.display()), why.clone())).context(
            format!(
                "{} from snapshot {}: restore {} again with --overwrite",
                match v.mismatches.len() {
                    1 => "1 restored file differs".to_string(),
                    n => format!("{n} restored files differ"),
                },
                id.short(),
                if v.mismatches.len() == 1 { "it" } else { "them" }
            ),
        ));
    }
    Ok(exit::OK)
}

/// Whether to restore what only root can create, and if not, why (with `auto`:
/// the writers behind the snapshot that this client does not trust). With
/// `auto`, only a snapshot whose every writer is trusted ([`coffer_core::trust::TrustedWriters`]:
/// this client's own key and those `coffer writers trust` named) is restored
/// exactly, since anyone holding the passphrase can write a snapshot. Not
/// running as root, it makes no difference.
fn privileged(repo: &Repository, snap: &Snapshot, choice: Privileged) -> Result<(bool, Withheld)> {
    Ok(match choice {
        Privileged::All => (true, Withheld::Chosen),
        Privileged::None => (false, Withheld::Chosen),
        Privileged::Auto => match repo_open::trusted_writers(repo)?.snapshot(snap) {
            SnapshotTrust::Trusted => (true, Withheld::Chosen),
            SnapshotTrust::Untrusted(keys) => (false, Withheld::Untrusted(keys)),
            SnapshotTrust::Unverified(why) => (false, Withheld::Unverified(why)),
        },
    })
}

/// Why privileged things may be withheld.
enum Withheld {
    /// `--privileged` said so (or they are not withheld).
    Chosen,
    /// These writers behind the snapshot are not trusted.
    Untrusted(Vec<PublicKey>),
    /// Its signature is not valid.
    Unverified(String),
}

/// Says prominently what only root can create was left out, why, and how to
/// get it: the command that trusts the writers, or `--privileged all`.
fn report_withheld(global: &GlobalArgs, repo: &Repository, id: &Id, why: &Withheld, summary: &RestoreSummary) {
    let w = &summary.withheld;
    if w.is_empty() {
        return;
    }
    let names = |k: &PublicKey| match repo.writer(k) {
        Ok(Some(r)) => format!("{} (key {})", r.name(), k.short()),
        _ => format!("key {} (not registered here)", k.short()),
    };
    let (reason, fix, commands): (String, String, Vec<String>) = match why {
        Withheld::Chosen => ("--privileged none was given".into(), "restore again without it".into(), vec![]),
        Withheld::Untrusted(keys) => {
            let who: Vec<String> = keys.iter().map(names).collect();
            let commands: Vec<String> = keys.iter().map(|k| format!("coffer writers trust {}", k.to_hex())).collect();
            (
                format!(
                    "snapshot {} was written by {}, which this client does not trust",
                    id.short(),
                    if who.len() == 1 { format!("writer {}", who[0]) } else { format!("writers {}", who.join(", ")) }
                ),
                format!(
                    "if that is you (an earlier machine, or the source of a copy), trust it with `{}` and restore \
                     again; or restore again with --privileged all",
                    commands.join("` and `")
                ),
                commands,
            )
        }
        Withheld::Unverified(s) => (
            format!("the signature of snapshot {} is not valid ({s})", id.short()),
            "if you trust its author anyway, restore again with --privileged all".into(),
            vec![],
        ),
    };
    let counts = format!(
        "{} owners, {} setuid/setgid bits, {} security./trusted. attributes, {} device nodes",
        w.owners, w.setid, w.xattrs, w.devices
    );
    let message = format!("NOT RESTORED: {counts}. Why: {reason}. To restore them: {fix}.");
    if global.json {
        eprintln!(
            "{}",
            json!({"type": "withheld", "snapshot_id": id, "owners": w.owners, "setid_bits": w.setid,
                   "xattrs": w.xattrs, "device_nodes": w.devices, "reason": reason, "trust_commands": commands,
                   "message": message})
        );
    } else {
        eprintln!("warning: what only root can create was withheld from this restore");
        eprintln!("  not restored: {counts} (entries are owned by root, without setuid/setgid bits)");
        eprintln!("  why: {reason}");
        eprintln!("  to restore them: {fix}");
    }
}

/// The batch limits of the restore: the default, or for tests (debug builds)
/// `COFFER_TEST_RESTORE_BATCH=N`, which closes a batch at N entries or N chunks
/// so that small trees are restored in many batches.
fn batch_limits() -> Result<BatchLimits> {
    match crate::test_knobs::get("COFFER_TEST_RESTORE_BATCH") {
        Some(v) => {
            let n: usize = v.parse().map_err(|_| anyhow!("COFFER_TEST_RESTORE_BATCH: {v:?} is not a count"))?;
            Ok(BatchLimits { entries: n, chunks: n, ..BatchLimits::DEFAULT })
        }
        _ => Ok(BatchLimits::default()),
    }
}
