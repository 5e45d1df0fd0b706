//! `coffer import borg:REPO[::ARCHIVE]`: every archive of a borg repository
//! (or the one named) stored as a snapshot, oldest first, through the user's
//! `borg` (docs/design.md#import-from-borg). Run again, it imports only the
//! archives not imported before, found by the ids the snapshots record.

use std::ffi::OsStr;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use coffer_core::format::snapshot::ImportedFrom;
use coffer_core::ops::backup::{BackupOptions, ContentMemo, ForeignSource};
use coffer_import::borg::parse_list;
use serde_json::json;

use crate::args::{GlobalArgs, ImportArgs};
use crate::cmd::import::{Shown, imported, seed, store, system_time, target, writer};
use crate::import::borg::{Borg, BorgArchive, archive_arg};
use crate::{exit, output, repo_open};

/// The program name recorded in snapshots imported from borg.
pub const BORG: &str = "borg";

/// The most `borg list --json` may print: about a million archives.
const LIST_LIMIT: usize = 256 << 20;

pub fn run(global: &GlobalArgs, a: &ImportArgs, spec: &str) -> Result<u8> {
    let (location, only) = match spec.split_once("::") {
        Some((l, n)) if !n.is_empty() => (l, Some(n)),
        Some((l, _)) => (l, None),
        None => (spec, None),
    };
    if location.is_empty() {
        bail!("borg: names no repository: give borg:REPO or borg:REPO::ARCHIVE, as borg takes them");
    }
    let program = std::env::var_os("COFFER_BORG").map(PathBuf::from).unwrap_or_else(|| "borg".into());
    let passphrase = crate::password::read_import_source_if_given(a.from_password_file.as_deref())?;
    let borg = Borg::new(program, passphrase);
    let listed = borg.output(&[OsStr::new("list"), OsStr::new("--json"), OsStr::new(location)], LIST_LIMIT)?;
    let listed = parse_list(listed.as_slice()).context("cannot read the archive list borg printed")?;
    let repo_id = listed.repository_id.to_string();
    let mut archives = listed.archives;
    if let Some(name) = only {
        archives.retain(|s| s.name == name.as_bytes());
        if archives.is_empty() {
            bail!("the borg repository {location} holds no archive named {name:?}; `borg list {location}` lists them");
        }
    }
    let repo = target(global, a.dry_run)?;
    let done = imported(&repo, BORG, &repo_id)?;
    let total = archives.len();
    let last = done
        .last
        .as_ref()
        .and_then(|(tree, id)| Some((*tree, archives.iter().find(|s| s.id.to_string() == *id)?.name.clone())));
    archives.retain(|s| !done.ids.contains(&s.id.to_string()));
    if !global.json && !global.quiet {
        println!(
            "borg repository {}: {} archives, {} imported before, {} to import",
            &repo_id[..repo_id.len().min(8)],
            total,
            total - archives.len(),
            archives.len()
        );
    }
    let (state, key) = writer(&repo, a.dry_run)?;
    let memo = ContentMemo::default();
    // What the archive imported last holds is not read again.
    if let Some((tree, name)) = last {
        match BorgArchive::stage(&borg, archive_arg(location, &name), &ContentMemo::default()) {
            Ok(arch) => seed(global, &repo, &memo, tree, &arch),
            Err(e) => repo_open::warn(
                global,
                &format!("cannot read the archive imported last ({e:#}): files it holds are read from borg again"),
            ),
        }
    }
    let mut incomplete = false;
    let count = archives.len();
    for (i, summary) in archives.into_iter().enumerate() {
        let name = String::from_utf8_lossy(&summary.name).into_owned();
        let arch = BorgArchive::stage(&borg, archive_arg(location, &summary.name), &memo)
            .with_context(|| format!("cannot read borg archive {name:?}"))?;
        let (files, bytes) = arch.to_read();
        if arch.acls > 0 {
            repo_open::warn(
                global,
                &format!(
                    "borg archive {name:?}: {} entries have ACLs that are not imported (macOS or NFSv4 ACLs, or \
                     text that is no ACL; their other metadata is)",
                    arch.acls
                ),
            );
        }
        if a.dry_run {
            if global.json {
                output::json(&json!({"type": "would_import", "borg_archive": summary.id.to_string(), "name": name,
                    "files_to_read": files, "bytes_to_read": bytes}));
            } else if !global.quiet {
                println!("would import borg archive {name}: {files} files to read, {}", output::bytes(bytes));
            }
            continue;
        }
        let meta = &arch.meta;
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        let opts = BackupOptions {
            time: Some(system_time(meta.time.secs, meta.time.nanos)),
            hostname: Some(text(&meta.hostname)),
            tags: vec![name.clone()],
            state: Some(state.clone()),
            timing: crate::protocol_timing(),
            server_log: crate::server_log::last_mark(),
            ..BackupOptions::default()
        };
        let from = ImportedFrom { tool: BORG.into(), repository: repo_id.clone(), snapshot: summary.id.to_string() };
        let foreign = ForeignSource {
            tree: &arch,
            paths: arch.top_paths(),
            paths_from_tree: false,
            username: text(&meta.username),
            memo: &memo,
            imported_from: from,
        };
        let (label, id) = (format!("borg archive {name}"), summary.id.to_string());
        let shown = Shown { label: &label, name: &format!("borg archive {name:?}"), field: "borg_archive", id: &id };
        incomplete |= store(global, &repo, &opts, foreign, &key, (i, count), shown)?;
    }
    repo_open::report_bad_copies(global, &repo);
    Ok(if incomplete { exit::INCOMPLETE } else { exit::OK })
}
