//! `coffer import-tar FILE`: a tar archive stored as one snapshot
//! (docs/design.md#import-from-a-tar-stream).

use std::io::Read;
use std::time::SystemTime;

use anyhow::{Context, Result};
use coffer_core::format::snapshot::ImportedFrom;
use coffer_core::fs::meta;
use coffer_core::ops::backup::{BackupOptions, ContentMemo, ForeignSource, import_foreign};

use crate::args::{GlobalArgs, ImportTarArgs};
use crate::cmd::import::{report, target, writer};
use crate::import::tar::TarTree;
use crate::progress::Display;
use crate::{exit, local_input, output};

/// The program name recorded in snapshots imported from a tar archive.
const TAR: &str = "tar";

pub fn run(global: &GlobalArgs, a: &ImportTarArgs) -> Result<u8> {
    let time = match &a.time {
        Some(t) => output::parse_time(t, "--time")?,
        None => SystemTime::now(),
    };
    for p in &a.paths {
        if !p.starts_with('/') {
            anyhow::bail!("--path {p:?} is not absolute: a snapshot's paths start with `/`");
        }
    }
    let (input, label): (Box<dyn Read + Send>, String) = if a.file.as_os_str() == "-" {
        crate::password::stdin_is_data();
        (Box::new(std::io::stdin()), "standard input".into())
    } else {
        let f = local_input::open(&a.file, "the archive", local_input::Kind::Stream)?;
        let shown = std::path::absolute(&a.file).unwrap_or_else(|_| a.file.clone());
        (Box::new(f), shown.display().to_string())
    };
    // Read in blocks: the archive's reader asks for 512 bytes at a time.
    let tree = TarTree::new(std::io::BufReader::with_capacity(1 << 20, input));
    let repo = target(global, a.dry_run)?;
    let (state, key) = writer(&repo, a.dry_run)?;
    let opts = BackupOptions {
        time: Some(time),
        hostname: a.host.clone(),
        tags: a.tags.clone(),
        state: Some(state),
        dry_run: a.dry_run,
        timing: crate::protocol_timing(),
        server_log: crate::server_log::last_mark(),
        ..BackupOptions::default()
    };
    let stamp = humantime::format_rfc3339_nanos(time).to_string();
    let from = ImportedFrom { tool: TAR.into(), repository: clip(&label), snapshot: stamp };
    let memo = ContentMemo::default();
    let foreign = ForeignSource {
        tree: &tree,
        paths: if a.paths.is_empty() { vec!["/".into()] } else { a.paths.clone() },
        paths_from_tree: a.paths.is_empty(),
        username: a.user.clone().unwrap_or_else(meta::username),
        memo: &memo,
        imported_from: from,
    };
    let display = Display::new(global.json, global.quiet, "import");
    let result = import_foreign(&repo, &opts, foreign, &key, &display);
    display.finish();
    let result = result.with_context(|| format!("the archive {label} was not imported"))?;
    let incomplete = report(global, &format!("the archive {label}"), ("archive", &label), &result);
    crate::repo_open::report_bad_copies(global, &repo);
    Ok(if incomplete { exit::INCOMPLETE } else { exit::OK })
}

/// `s` cut to the length a recorded source id may have, at a character's boundary.
fn clip(s: &str) -> String {
    let mut end = s.len().min(ImportedFrom::MAX_FIELD);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}
