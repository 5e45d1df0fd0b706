//! `coffer import kopia:[CONFIG_FILE][::SNAPSHOT_ID]`: every snapshot of a kopia
//! repository (or the one named) stored as a snapshot, oldest first, through the
//! user's `kopia` (docs/design.md#import-from-kopia). Run again, it imports only the snapshots
//! not imported before, found by the manifest ids the snapshots record.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use coffer_core::format::snapshot::ImportedFrom;
use coffer_core::ops::backup::{BackupOptions, ContentMemo, ForeignSource};
use coffer_import::kopia::{Snapshot, parse_snapshots, parse_status};
use serde_json::json;

use crate::args::{GlobalArgs, ImportArgs};
use crate::cmd::import::{Shown, imported, seed, store, system_time, target, to_read, writer};
use crate::import::kopia::{Kopia, KopiaTree, WalkedDirs};
use crate::{exit, output, repo_open};

/// The program name recorded in snapshots imported from kopia.
pub const KOPIA: &str = "kopia";

/// The most `kopia repository status --json` may print.
const STATUS_LIMIT: usize = 1 << 20;

/// The most `kopia snapshot list --json` may print: about half a million snapshots.
const LIST_LIMIT: usize = 256 << 20;

/// The longest tag kept from a kopia tag or description, in bytes.
const MAX_TAG: usize = 1024;

/// The config file kopia uses when none is named: `KOPIA_CONFIG_PATH`, else
/// `~/.config/kopia/repository.config`.
fn default_config() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("KOPIA_CONFIG_PATH").filter(|p| !p.is_empty()) {
        return Ok(p.into());
    }
    let dir =
        dirs::config_dir().context("cannot tell the user's config directory: name kopia's config file, kopia:FILE")?;
    Ok(dir.join("kopia").join("repository.config"))
}

/// `text` cut to [`MAX_TAG`] bytes at a character boundary.
fn cut(mut text: String) -> String {
    if text.len() > MAX_TAG {
        let mut end = MAX_TAG;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

/// The snapshot's tags: kopia's (`tag:KEY` = VALUE) as `KEY:VALUE`, and its
/// description as `description:TEXT`.
fn tags(s: &Snapshot) -> Vec<String> {
    let mut out: Vec<String> = s
        .tags
        .iter()
        .map(|(k, v)| cut(format!("{}:{v}", k.strip_prefix("tag:").unwrap_or(k))))
        .filter(|t| !t.is_empty())
        .collect();
    let d = s.description.trim();
    if !d.is_empty() {
        out.push(cut(format!("description:{d}")));
    }
    out
}

/// `CONFIG_FILE[::SNAPSHOT_ID]`: the config file (empty for kopia's default one) and
/// the one snapshot named, if one is.
fn split_spec(spec: &str) -> (&str, Option<&str>) {
    match spec.rsplit_once("::") {
        Some((c, id)) if !id.is_empty() => (c, Some(id)),
        Some((c, _)) => (c, None),
        None => (spec, None),
    }
}

pub fn run(global: &GlobalArgs, a: &ImportArgs, spec: &str) -> Result<u8> {
    let (spec, only) = split_spec(spec);
    let config = if spec.is_empty() { default_config()? } else { PathBuf::from(spec) };
    let program = std::env::var_os("COFFER_KOPIA").map(PathBuf::from).unwrap_or_else(|| "kopia".into());
    let password = crate::password::read_import_source_if_given(a.from_password_file.as_deref())?;
    let kopia = Kopia::new(program, &config, password)?;
    let status = kopia.output(&["repository", "status", "--json"], STATUS_LIMIT)?;
    let status = parse_status(&status).context("cannot read what `kopia repository status --json` printed")?;
    let listed = kopia.output(&["snapshot", "list", "--all", "--json"], LIST_LIMIT)?;
    let mut listed = parse_snapshots(&listed).context("cannot read the snapshot list kopia printed")?;
    // Every snapshot stays known for what the one imported last holds; only the one
    // named is imported.
    let all = std::mem::take(&mut listed.good);
    if let Some(id) = only {
        listed.damaged.retain(|(d, _)| d == id);
        listed.good = all.iter().filter(|s| s.id == id).cloned().collect();
        if listed.good.is_empty() && listed.damaged.is_empty() {
            bail!(
                "the kopia repository holds no snapshot {id:?}; `kopia snapshot list --all --manifest-id` lists \
                 them (the id is the manifest's, the first column)"
            );
        }
    } else {
        listed.good = all.clone();
    }
    let mut incomplete = false;
    for (id, why) in &listed.damaged {
        incomplete = true;
        repo_open::warn(global, &format!("kopia snapshot {id}: its manifest has {why}; it is not imported"));
    }
    let repo_id = status.unique_id;
    let repo = target(global, a.dry_run)?;
    let done = imported(&repo, KOPIA, &repo_id)?;
    let total = listed.good.len();
    let todo: Vec<&Snapshot> = listed.good.iter().filter(|s| !done.ids.contains(&s.id)).collect();
    if !global.json && !global.quiet {
        println!(
            "kopia repository {}: {} snapshots, {} imported before, {} to import",
            &repo_id[..repo_id.len().min(8)],
            total,
            total - todo.len(),
            todo.len()
        );
    }
    if todo.is_empty() {
        return Ok(if incomplete { exit::INCOMPLETE } else { exit::OK });
    }
    let server = kopia.serve()?;
    let (state, key) = writer(&repo, a.dry_run)?;
    let memo = ContentMemo::default();
    let walked = WalkedDirs::default();
    // What the snapshot imported last holds is not read again.
    let last = done.last.as_ref().and_then(|(tree, id)| Some((*tree, all.iter().find(|s| s.id == *id)?)));
    if let Some((tree, snap)) = last {
        seed(global, &repo, &memo, tree, &KopiaTree::new(&server, snap));
    }
    let mut seen = std::collections::HashSet::new();
    let count = todo.len();
    for (i, snap) in todo.into_iter().enumerate() {
        let tree = KopiaTree::new(&server, snap);
        // The files to read are read ahead, several requests in flight; a dry run reads none.
        let tree = if a.dry_run { tree } else { tree.feeding(&memo, &walked) };
        let label = format!("kopia snapshot {} of {} ({})", snap.id, snap.start.rfc3339, snap.path);
        if a.dry_run {
            let (files, bytes) = to_read(&tree, &memo, &mut seen)?;
            if global.json {
                output::json(&json!({"type": "would_import", "kopia_snapshot": snap.id, "time": snap.start.rfc3339,
                    "files_to_read": files, "bytes_to_read": bytes}));
            } else if !global.quiet {
                println!("would import {label}: {files} files to read, {}", output::bytes(bytes));
            }
            continue;
        }
        let opts = BackupOptions {
            time: Some(system_time(snap.start.secs, snap.start.nanos)),
            hostname: Some(snap.host.clone()),
            tags: tags(snap),
            state: Some(state.clone()),
            timing: crate::protocol_timing(),
            server_log: crate::server_log::last_mark(),
            ..BackupOptions::default()
        };
        let from = ImportedFrom { tool: KOPIA.into(), repository: repo_id.clone(), snapshot: snap.id.clone() };
        let foreign = ForeignSource {
            tree: &tree,
            paths: tree.paths(),
            paths_from_tree: false,
            username: snap.user.clone(),
            memo: &memo,
            imported_from: from,
        };
        let shown = Shown {
            label: &label,
            name: &format!("kopia snapshot {}", snap.id),
            field: "kopia_snapshot",
            id: &snap.id,
        };
        incomplete |= store(global, &repo, &opts, foreign, &key, (i, count), shown)?;
    }
    drop(server);
    repo_open::report_bad_copies(global, &repo);
    Ok(if incomplete { exit::INCOMPLETE } else { exit::OK })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_is_named_after_two_colons() {
        assert_eq!(split_spec(""), ("", None));
        assert_eq!(split_spec("/a/repository.config"), ("/a/repository.config", None));
        assert_eq!(split_spec("/a/repository.config::"), ("/a/repository.config", None));
        assert_eq!(split_spec("/a/repository.config::f00d"), ("/a/repository.config", Some("f00d")));
        assert_eq!(split_spec("::f00d"), ("", Some("f00d")));
        assert_eq!(split_spec("/odd::name/repository.config::f00d"), ("/odd::name/repository.config", Some("f00d")));
    }
}
