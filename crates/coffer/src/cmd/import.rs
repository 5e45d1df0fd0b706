//! `coffer import restic:LOCATION`: every snapshot of another program's
//! repository stored as a snapshot of this one, oldest first, each recording
//! where it came from (docs/design.md#import). Run again, it imports only what
//! it did not import before, found by those records.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use coffer_backend::Location;
use coffer_core::crypto::sign::SigningKey;
use coffer_core::format::snapshot::ImportedFrom;
use coffer_core::local_state::LocalState;
use coffer_core::ops::backup::BackupResult;
use coffer_core::ops::backup::{BackupOptions, ContentMemo, ForeignSource, ForeignTree, Payload, import_foreign};
use coffer_core::repo::history::History;
use coffer_core::repo::{InitOptions, Repository};
use coffer_import::restic::{ResticRepo, Snapshot as ResticSnapshot};
use serde_json::json;

use crate::args::{GlobalArgs, ImportArgs};
use crate::import::restic::{BackendSource, ResticTree};
use crate::progress::Display;
use crate::{exit, output, password, repo_open};

/// The program name recorded in imported snapshots.
const RESTIC: &str = "restic";

pub fn run(global: &GlobalArgs, a: &ImportArgs) -> Result<u8> {
    if let Some(spec) = a.source.strip_prefix("borg:") {
        return crate::cmd::import_borg::run(global, a, spec);
    }
    if let Some(spec) = a.source.strip_prefix("kopia:") {
        return crate::cmd::import_kopia::run(global, a, spec);
    }
    let Some(location) = a.source.strip_prefix("restic:") else {
        bail!(
            "{:?} does not say what to import: give restic:LOCATION (LOCATION is any location coffer reads: a \
             directory, s3:…, sftp:…), borg:REPO[::ARCHIVE] (as borg takes them; borg must be installed) or \
             kopia:[CONFIG_FILE][::SNAPSHOT_ID] (kopia's config file of the repository, else its default one; \
             kopia must be installed)",
            a.source
        );
    };
    let loc = Location::parse(location).with_context(|| format!("the restic repository's location {location:?}"))?;
    let pw = password::read_import_source(a.from_password_file.as_deref(), RESTIC)?;
    let be = repo_open::backend(&loc)?;
    let mut source = ResticRepo::open(Arc::new(BackendSource(be)), pw.as_bytes())
        .with_context(|| format!("cannot open the restic repository at {location}"))?;
    drop(pw);
    // Reading ahead (trees kept, contents fed with requests in flight) pays over a
    // network; from a local disk a read on open is faster and leaner (measured:
    // docs/performance.md, "Import from restic").
    let read_ahead = loc.local_path().is_none();
    if !read_ahead {
        source.set_tree_cache(0);
    }
    let listed = source.snapshots().context("cannot list the restic repository's snapshots")?;
    let mut incomplete = false;
    for d in &listed.damaged {
        incomplete = true;
        repo_open::warn(global, &format!("restic snapshot {}: {}; it is not imported", d.name, d.error));
    }

    let repo = target(global, a.dry_run)?;
    let done = imported(&repo, RESTIC, source.id())?;
    let todo: Vec<&(coffer_import::restic::SnapshotId, ResticSnapshot)> =
        listed.good.iter().filter(|(id, _)| !done.ids.contains(&id.to_hex())).collect();
    if !global.json && !global.quiet {
        println!(
            "restic repository {} (version {}): {} snapshots, {} imported before, {} to import",
            short(source.id()),
            source.version(),
            listed.good.len(),
            listed.good.len() - todo.len(),
            todo.len()
        );
    }
    if todo.is_empty() {
        return Ok(if incomplete { exit::INCOMPLETE } else { exit::OK });
    }
    let index = source.load_index().context("cannot read the restic repository's index")?;
    for d in &index.damaged {
        repo_open::warn(global, &format!("restic index file {}: {}", d.name, d.error));
    }
    let (state, key) = writer(&repo, a.dry_run)?;
    let memo = ContentMemo::default();
    // What the snapshot imported last holds is not read again.
    let last = done.last.and_then(|(tree, id)| Some((tree, listed.good.iter().find(|(s, _)| s.to_hex() == id)?)));
    if let Some((tree, (_, snap))) = last {
        seed(global, &repo, &memo, tree, &ResticTree::new(&source, snap.tree));
    }
    let mut seen = HashSet::new();
    let count = todo.len();
    let roots: Vec<_> = todo.iter().map(|(_, s)| s.tree).collect();
    for (i, (id, snap)) in todo.into_iter().enumerate() {
        // Each snapshot's first listing reads ahead the trees of those after it too.
        let tree = ResticTree::new(&source, snap.tree);
        let tree = if read_ahead { tree.with_trees_ahead(roots[i..].iter().copied()) } else { tree };
        let tree = if a.dry_run || !read_ahead { tree } else { tree.feeding(&memo) };
        if a.dry_run {
            let (files, bytes) = to_read(&tree, &memo, &mut seen)?;
            if global.json {
                output::json(
                    &json!({"type": "would_import", "restic_snapshot": id.to_hex(), "time": snap.time.rfc3339,
                    "files_to_read": files, "bytes_to_read": bytes}),
                );
            } else if !global.quiet {
                println!(
                    "would import restic snapshot {} of {}: {} files to read, {}",
                    id.short(),
                    snap.time.rfc3339,
                    files,
                    output::bytes(bytes)
                );
            }
            continue;
        }
        let opts = BackupOptions {
            time: Some(system_time(snap.time.secs, snap.time.nanos)),
            hostname: Some(snap.hostname.clone()),
            tags: snap.tags.iter().filter(|t| !t.is_empty()).cloned().collect(),
            excludes: snap.excludes.clone(),
            state: Some(state.clone()),
            timing: crate::protocol_timing(),
            server_log: crate::server_log::last_mark(),
            ..BackupOptions::default()
        };
        let from = ImportedFrom { tool: RESTIC.into(), repository: source.id().to_string(), snapshot: id.to_hex() };
        let foreign = ForeignSource {
            tree: &tree,
            paths: snap.paths.clone(),
            paths_from_tree: false,
            username: snap.username.clone(),
            memo: &memo,
            imported_from: from,
        };
        // Which snapshot of how many, in the progress line.
        let label = format!("restic snapshot {} of {}", id.short(), snap.time.rfc3339);
        let shown = Shown {
            label: &label,
            name: &format!("restic snapshot {}", id.short()),
            field: "restic_snapshot",
            id: &id.to_hex(),
        };
        incomplete |= store(global, &repo, &opts, foreign, &key, (i, count), shown)?;
    }
    repo_open::report_bad_copies(global, &repo);
    Ok(if incomplete { exit::INCOMPLETE } else { exit::OK })
}

/// The progress line's verb for the `i`th snapshot of `count` (JSON status
/// lines keep the command's name).
fn progress_verb(global: &GlobalArgs, i: usize, count: usize) -> String {
    if global.json { "import".into() } else { format!("import {}/{count}", i + 1) }
}

/// The repository to import into (`--repo`): the default one is created if it
/// is not there yet, unless `dry_run`.
pub fn target(global: &GlobalArgs, dry_run: bool) -> Result<Repository> {
    let (path, is_default) = repo_open::location(global)?;
    if is_default && !path.local_path().is_some_and(|p| p.join("config").exists()) && !dry_run {
        let repo = repo_open::create(global, &path, &InitOptions::default())?;
        if !global.json && !global.quiet {
            println!("created the default repository at {}", path.display());
        }
        Ok(repo)
    } else {
        Ok(repo_open::open_ahead(global, &path, repo_open::Ahead::Backup)?.0)
    }
}

/// This client's local state for `repo` and its writer key (a throwaway one
/// for a dry run when it has none).
pub fn writer(repo: &Repository, dry_run: bool) -> Result<(LocalState, SigningKey)> {
    let state = repo_open::local_state(repo)?;
    let key = if dry_run {
        repo.existing_writer_key(&state)?.unwrap_or_else(SigningKey::generate)
    } else {
        repo.own_writer_key(&state)?
    };
    Ok((state, key))
}

/// How one source snapshot is named in what an import says.
pub struct Shown<'a> {
    /// In the line that reports it ("restic snapshot 1a2b3c4d of TIME").
    pub label: &'a str,
    /// In the error when it fails ("restic snapshot 1a2b3c4d").
    pub name: &'a str,
    /// Its id's JSON field, and the id.
    pub field: &'a str,
    pub id: &'a str,
}

/// Stores one source snapshot, the `i`th of `count`, with its progress line,
/// and says what it stored; whether the snapshot is incomplete.
pub fn store(
    global: &GlobalArgs,
    repo: &Repository,
    opts: &BackupOptions,
    foreign: ForeignSource<'_>,
    key: &SigningKey,
    (i, count): (usize, usize),
    shown: Shown<'_>,
) -> Result<bool> {
    let display = Display::new(global.json, global.quiet, &progress_verb(global, i, count));
    let result = import_foreign(repo, opts, foreign, key, &display);
    display.finish();
    let result = result.with_context(|| {
        format!("{} was not imported; fix the cause and run the import again (what was imported is kept)", shown.name)
    })?;
    Ok(report(global, shown.label, (shown.field, shown.id), &result))
}

/// Says what one import stored (`label` names the source's snapshot; `source`
/// is its id's JSON field and value); whether the snapshot is incomplete.
pub fn report(global: &GlobalArgs, label: &str, source: (&str, &str), result: &BackupResult) -> bool {
    let s = &result.snapshot;
    if global.json {
        let mut v = json!({"type": "imported", "snapshot_id": result.id, "incomplete": s.is_incomplete(),
            "skipped": s.skipped_count, "summary": s.summary, "dry_run": result.id.is_none()});
        v[source.0] = json!(source.1);
        output::json(&v);
    } else if !global.quiet {
        let m = &s.summary;
        println!(
            "{} {label} as {}: {} files read ({}), {} known; {} added{}",
            if result.id.is_some() { "imported" } else { "would import" },
            result.id.map(|i| i.short()).unwrap_or_else(|| "nothing (dry run)".into()),
            m.files_new,
            output::bytes(m.bytes_read),
            m.files_unchanged,
            output::bytes(m.bytes_added),
            if s.is_incomplete() {
                format!("; {} left out: the snapshot is incomplete", output::plural(s.skipped_count, "entry"))
            } else {
                String::new()
            }
        );
    }
    s.is_incomplete()
}

/// What was imported before from one repository of another program.
pub struct Imported {
    /// The ids there of the snapshots imported.
    pub ids: HashSet<String>,
    /// The newest of them still in this repository: its tree here and its id there.
    pub last: Option<(coffer_core::Id, String)>,
}

/// The snapshots of `tool`'s repository `repository_id` imported before.
pub fn imported(repo: &Repository, tool: &str, repository_id: &str) -> Result<Imported> {
    let history = History::load(repo)?;
    let ids = history
        .snapshots
        .iter()
        .filter_map(|(_, s)| s.imported_from.as_ref())
        .filter(|f| f.tool == tool && f.repository == repository_id)
        .map(|f| f.snapshot.clone())
        .collect();
    let last = history
        .live_snapshots()
        .into_iter()
        .filter_map(|(_, s)| {
            let f = s.imported_from.as_ref()?;
            (f.tool == tool && f.repository == repository_id).then(|| (s.time.clone(), s.tree, f.snapshot.clone()))
        })
        .max_by(|a, b| a.0.cmp(&b.0))
        .map(|(_, tree, id)| (tree, id));
    Ok(Imported { ids, last })
}

/// Seeds `memo` with the contents of the snapshot imported last from `foreign`
/// (`tree` here), warning when it cannot: the import then only reads more.
pub fn seed(
    global: &GlobalArgs,
    repo: &Repository,
    memo: &ContentMemo,
    tree: coffer_core::Id,
    foreign: &dyn ForeignTree,
) {
    // The index tells where the trees are; what it cannot read the backup says.
    let r = repo.load_index().and_then(|_| memo.seed(repo, tree, foreign));
    if let Err(e) = r {
        repo_open::warn(
            global,
            &format!("cannot read the snapshot imported last ({e}): files it holds are read from the source again"),
        );
    }
}

/// The files, and their bytes, an import of `tree` reads: those whose content
/// neither `memo` (what was imported before) nor `seen` (the contents of the
/// snapshots before it in this run) holds.
pub fn to_read(tree: &dyn ForeignTree, memo: &ContentMemo, seen: &mut HashSet<[u8; 32]>) -> Result<(u64, u64)> {
    let (mut files, mut bytes) = (0u64, 0u64);
    let mut stack = vec![(tree.root(), 0usize)];
    while let Some((dir, depth)) = stack.pop() {
        let listing = match tree.list(&dir) {
            Ok(l) => l,
            Err(_) => continue,
        };
        for e in listing.entries {
            match e.payload {
                Payload::Dir(sub) if depth < coffer_core::ops::backup::FOREIGN_MAX_DEPTH => {
                    stack.push((sub, depth + 1))
                }
                Payload::File { key, .. } if !memo.knows(&key) && seen.insert(key) => {
                    files += 1;
                    bytes += e.node.size;
                }
                _ => {}
            }
        }
    }
    Ok((files, bytes))
}

pub fn system_time(secs: i64, nanos: u32) -> SystemTime {
    if secs >= 0 {
        UNIX_EPOCH + Duration::new(secs as u64, nanos)
    } else {
        UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs()) + Duration::from_nanos(nanos.into())
    }
}

fn short(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
}
