//! `coffer backup`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use coffer_core::format::ObjectKind;
use coffer_core::ops::backup::{BackupOptions, backup};
use coffer_core::repo::InitOptions;
use serde_json::json;

use crate::args::{BackupArgs, GlobalArgs};
use crate::cmd::backup_stream::Stream;
use crate::local_input::{self, Kind, Limit};
use crate::progress::Display;
use crate::{exit, output, repo_open};

fn read_exclude_files(a: &BackupArgs) -> Result<Vec<String>> {
    patterns_from(&a.excludes, &a.exclude_files)
}

/// `patterns` followed by the patterns of each file, one a line (`#` comments).
pub(crate) fn patterns_from(patterns: &[String], files: &[PathBuf]) -> Result<Vec<String>> {
    let mut patterns = patterns.to_vec();
    for f in files {
        let text = local_input::read_text(f, "pattern file", Kind::File, Limit::PATTERNS)?;
        patterns.extend(
            text.lines().map(str::trim_end).filter(|l| !l.trim().is_empty() && !l.starts_with('#')).map(String::from),
        );
    }
    Ok(patterns)
}

/// How a file of paths to back up is read.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ListFormat {
    /// Lines; empty ones and `#` comments skipped; trailing blanks trimmed.
    Lines,
    /// Lines taken as written; only empty ones skipped.
    Verbatim,
    /// NUL-separated bytes.
    Raw,
}

/// The paths named on the command line and in the `--files-from*` files.
fn source_paths(a: &BackupArgs) -> Result<Vec<PathBuf>> {
    use std::os::unix::ffi::OsStrExt;
    let mut paths = a.paths.clone();
    let lists = a.files_from.iter().map(|f| (f, ListFormat::Lines));
    let lists = lists.chain(a.files_from_verbatim.iter().map(|f| (f, ListFormat::Verbatim)));
    for (file, format) in lists.chain(a.files_from_raw.iter().map(|f| (f, ListFormat::Raw))) {
        let bytes = if file.as_os_str() == "-" {
            local_input::stdin_all("the list of paths", Limit::PATHS)?
        } else {
            local_input::read_all(file, "the list of paths", Kind::Stream, Limit::PATHS)?
        };
        let sep = if format == ListFormat::Raw { b'\0' } else { b'\n' };
        for item in bytes.split(|b| *b == sep) {
            let item = match format {
                ListFormat::Raw => item,
                ListFormat::Verbatim => item.strip_suffix(b"\r").unwrap_or(item),
                ListFormat::Lines => item.trim_ascii_end(),
            };
            if item.is_empty() || (format == ListFormat::Lines && item.starts_with(b"#")) {
                continue;
            }
            let path = PathBuf::from(std::ffi::OsStr::from_bytes(item));
            match format {
                ListFormat::Lines => paths.extend(expand(path)?),
                _ => paths.push(path),
            }
        }
    }
    if paths.is_empty() {
        bail!("nothing to back up: the --files-from lists name no path; give at least one");
    }
    Ok(paths)
}

/// A `--files-from` line holding a pattern (`*`, `?`, `[...]`), expanded to the
/// paths it matches, sorted, as restic does; kept as written when it matches
/// nothing (it is then reported missing) or holds no pattern.
fn expand(line: PathBuf) -> Result<Vec<PathBuf>> {
    let Some(text) = line.to_str().filter(|t| t.contains(['*', '?', '['])) else { return Ok(vec![line]) };
    let found = glob::glob(text).with_context(|| format!("--files-from: {text:?} is not a valid pattern"))?;
    let mut matched: Vec<PathBuf> = found.filter_map(|p| p.ok()).collect();
    matched.sort();
    Ok(if matched.is_empty() { vec![line] } else { matched })
}

/// Drops the paths that do not exist, warning of each. None left is an error.
fn existing_paths(global: &GlobalArgs, paths: Vec<PathBuf>) -> Result<(Vec<PathBuf>, usize)> {
    let (kept, gone): (Vec<PathBuf>, Vec<PathBuf>) = paths
        .into_iter()
        .partition(|p| !matches!(std::fs::symlink_metadata(p), Err(e) if e.kind() == std::io::ErrorKind::NotFound));
    if kept.is_empty() {
        let names: Vec<String> = gone.iter().map(|p| p.display().to_string()).collect();
        bail!("none of the paths to back up exists ({}): nothing to back up; check the paths", names.join(", "));
    }
    for p in &gone {
        let message = "does not exist; backing up the rest (exit code 3)";
        if global.json {
            eprintln!("{}", json!({"type": "warning", "path": p.to_string_lossy(), "message": message}));
        } else {
            eprintln!("warning: {}: {message}", p.display());
        }
    }
    Ok((kept, gone.len()))
}

/// Parses `--time`: `YYYY-MM-DD HH:MM:SS` (or with a `T`) in the display time
/// zone, or an RFC 3339 time.
fn parse_time(s: &str) -> Result<std::time::SystemTime> {
    let ts = match s.parse::<jiff::Timestamp>() {
        Ok(ts) => ts,
        Err(_) => s
            .parse::<jiff::civil::DateTime>()
            .and_then(|dt| dt.to_zoned(output::time_zone()))
            .map(|z| z.timestamp())
            .map_err(|e| anyhow::anyhow!("--time {s:?} is not a time like \"2024-05-01 10:00:00\": {e}"))?,
    };
    Ok(std::time::SystemTime::from(ts))
}

/// coffer's own files, always left out of a backup: the repository (backing it up
/// would store every earlier backup again) and the local state directories, the
/// one in use and the default one, which hold this client's signing keys. Each is
/// given as written and with symlinks resolved, as the walk may meet either.
fn own_files(repo: Option<&Path>) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = repo.map(Path::to_path_buf).into_iter().collect();
    dirs.extend(repo_open::state_base().ok());
    dirs.extend(dirs::home_dir().map(|h| h.join(".local/state/coffer")));
    let mut out = Vec::new();
    for d in dirs {
        out.extend(std::fs::canonicalize(&d).ok());
        out.extend(coffer_core::fs::paths::clean_absolute(&d).ok());
    }
    out.sort();
    out.dedup();
    out
}

/// Adds `own` to the excludes, as patterns matching exactly those paths.
fn with_own_files_excluded(mut patterns: Vec<String>, own: &[PathBuf]) -> Vec<String> {
    for abs in own {
        let mut p = String::from("/");
        for c in abs.to_string_lossy().trim_start_matches('/').chars() {
            if matches!(c, '*' | '?' | '[' | ']' | '!' | '#' | '\\' | ' ') {
                p.push('\\');
            }
            p.push(c);
        }
        patterns.push(p);
    }
    patterns
}

/// Refuses a path to back up that lies inside coffer's own files.
fn refuse_own_files(paths: &[PathBuf], own: &[PathBuf]) -> Result<()> {
    for p in paths {
        let resolved = coffer_core::fs::paths::resolve_path(p)?;
        if let Some(o) = own.iter().find(|o| resolved.starts_with(o)) {
            bail!(
                "{} is inside {}, which holds coffer's repository or local state (signing keys): it is never \
                 backed up; give another path",
                p.display(),
                o.display()
            );
        }
    }
    Ok(())
}

/// A stream to back up instead of paths, as the command line asks.
fn stream_of(a: &BackupArgs) -> Option<Stream> {
    if a.stdin {
        crate::password::stdin_is_data();
        Some(Stream::Stdin)
    } else if a.stdin_from_command {
        Some(Stream::Command(a.paths.iter().map(|p| p.as_os_str().to_os_string()).collect()))
    } else {
        None
    }
}

pub fn run(global: &GlobalArgs, a: &BackupArgs) -> Result<u8> {
    // Everything the command line says is checked before the repository is opened.
    let stream = stream_of(a);
    let (paths, missing) = match stream {
        Some(_) => {
            coffer_core::ops::backup::stream_path(&a.stdin_filename)?;
            (Vec::new(), 0)
        }
        None => existing_paths(global, source_paths(a)?)?,
    };
    let time = a.time.as_deref().map(parse_time).transpose()?;
    coffer_core::fs::select::build_excludes(&read_exclude_files(a)?)?;
    let (path, is_default) = repo_open::location(global)?;
    let mut created = false;
    let repo = if is_default && !path.local_path().is_some_and(|p| p.join("config").exists()) {
        created = true;
        let repo = repo_open::create(global, &path, &InitOptions::default())?;
        if !global.json && !global.quiet {
            println!("created the default repository at {}", path.display());
        }
        repo
    } else {
        // The backup loads the index itself, after announcing its session (while
        // the keys are derived, unless this is a dry run, which announces nothing).
        let ahead = if a.dry_run { repo_open::Ahead::Nothing } else { repo_open::Ahead::Backup };
        repo_open::open_ahead(global, &path, ahead)?.0
    };
    let parent = match &a.parent {
        Some(p) => Some(repo.resolve_prefix(ObjectKind::Snapshot, p)?),
        None => None,
    };
    let state = repo_open::local_state(&repo)?;
    let key = if a.dry_run {
        // A dry run writes nothing, not even a writer registration; this client's
        // key, if it has one, still finds the parent it signed.
        repo.existing_writer_key(&state)?.unwrap_or_else(coffer_core::crypto::sign::SigningKey::generate)
    } else {
        // Registered by the backup, beside its last uploads.
        repo.own_writer_key(&state)?
    };
    // Found once the state directory exists, so that its real path is known.
    let own = own_files(path.local_path());
    refuse_own_files(&paths, &own)?;
    let excludes = if stream.is_some() { Vec::new() } else { with_own_files_excluded(read_exclude_files(a)?, &own) };
    let opts = BackupOptions {
        paths,
        iexcludes: patterns_from(&a.iexcludes, &a.iexclude_files)?,
        exclude_if_present: a.exclude_if_present.clone(),
        exclude_caches: a.exclude_caches,
        exclude_larger_than: a.exclude_larger_than,
        time,
        skip_if_unchanged: a.skip_if_unchanged,
        excludes,
        one_file_system: a.one_file_system,
        dry_run: a.dry_run,
        tags: a.tags.iter().filter(|t| !t.is_empty()).cloned().collect(),
        hostname: a.host.clone(),
        parent,
        force: a.force,
        reread_share: a.reread_share,
        state: Some(state),
        timing: crate::protocol_timing(),
        server_log: crate::server_log::last_mark(),
    };
    let display = Display::new(global.json, global.quiet, "backup").listing_changes(global.verbose);
    let result = match &stream {
        None => backup(&repo, &opts, &key, &display).map_err(anyhow::Error::from),
        Some(s) => s.backup(&a.stdin_filename, &repo, &opts, &key, &display),
    };
    display.finish();
    let result = result.context(
        "the backup did not complete and no snapshot was written; fix the cause and run it again (what was \
         already uploaded is reused)",
    )?;
    // A server must have logged the snapshot it accepted.
    if let Some(id) = result.id.filter(|_| !a.dry_run && !result.unchanged)
        && let Some(log) = crate::server_log::follow(global, &path, &repo)?
        && !log.has_snapshot(&id)
    {
        return Err(coffer_core::Error::ServerLog(format!(
            "snapshot {id} was stored, but the server's transparency log of {} entries does not record it: the \
             server may show it to this client only",
            log.head.head.size
        ))
        .into());
    }
    let s = &result.snapshot;
    let m = &s.summary;
    if global.json {
        let repository_stats = if a.dry_run { None } else { Some(repository_stats(&repo)?) };
        output::json(&json!({
            "type": "summary",
            "created_repository": created,
            "repository": path.to_string(),
            "snapshot_id": result.id,
            "dry_run": a.dry_run,
            "incomplete": s.is_incomplete() || missing > 0,
            "missing_paths": missing,
            "unchanged": result.unchanged,
            "skipped": s.skipped_count,
            "parent": s.parent,
            "summary": m,
            "repository_stats": repository_stats,
            "storage": repo_open::storage_counts_json(),
        }));
    } else if !global.quiet {
        println!("Files:    {} new, {} changed, {} unchanged", m.files_new, m.files_changed, m.files_unchanged);
        println!("Dirs:     {}   Other entries: {}", m.dirs, m.others);
        println!(
            "Data:     {} read of {}, {} new after deduplication (and {} of metadata), {} added to the repository",
            output::bytes(m.bytes_read),
            output::bytes(m.bytes_total),
            output::bytes(m.bytes_new),
            output::bytes(m.bytes_new_trees),
            output::bytes(m.bytes_added)
        );
        println!("Duration: {:.2}s", m.duration_ms as f64 / 1000.0);
        if s.is_incomplete() {
            let n = output::plural(s.skipped_count, "entry");
            println!("{n} could not be read or changed while read: the snapshot is incomplete");
        }
        if missing > 0 {
            let (does, was) = if missing == 1 { ("does", "was") } else { ("do", "were") };
            println!("{missing} of the paths given {does} not exist and {was} not backed up");
        }
        match result.id {
            Some(id) => println!("snapshot {} saved", id.short()),
            None if result.unchanged => println!("nothing changed since the parent snapshot: no snapshot written"),
            None => println!("dry run: nothing was written"),
        }
    }
    Ok(if s.is_incomplete() || missing > 0 { exit::INCOMPLETE } else { exit::OK })
}

/// What the repository holds after the backup, from its index and one listing
/// of its snapshots (cheap: no tree is read), for `--json` (the agent's metrics).
fn repository_stats(repo: &coffer_core::repo::Repository) -> Result<serde_json::Value> {
    let snapshots = repo.list_ids(ObjectKind::Snapshot)?.len();
    let index = repo.index();
    let (blobs, stored) = index.iter().fold((0u64, 0u64), |(n, b), e| (n + 1, b + u64::from(e.entry.length)));
    Ok(json!({"snapshots": snapshots, "blobs": blobs, "stored_bytes": stored}))
}
