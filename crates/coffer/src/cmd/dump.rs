//! `coffer dump SNAPSHOT PATH`: a file's content, or a directory as a tar or zip
//! archive, streamed to stdout (docs/design.md#dump). Entries come from the
//! streamed walk of `coffer_core::ops::dump`; files are read one chunk at a
//! time, so memory does not grow with the size of what is dumped.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use anyhow::{Context, Result, anyhow};
use coffer_core::format::tree::NodeKind;
use coffer_core::ops::dump::{ContentReader, locate_path, repo_error};
use coffer_core::repo::SnapshotFilter;
use coffer_core::repo::tree_walk::{Located, TooLong};

use crate::args::{ArchiveFormat, DumpArgs, GlobalArgs};
use crate::{exit, output, repo_open};

pub fn run(global: &GlobalArgs, a: &DumpArgs) -> Result<u8> {
    let (repo, id, snap) = repo_open::open_finding_one(global, &a.snapshot, &SnapshotFilter::from(&a.filter))?;
    super::flag_signature(&id, &snap);
    let path = Path::new("/").join(&a.path);
    let located = locate_path(&repo, snap.tree, &path)?;
    let out: Box<dyn Write> = match &a.target {
        Some(t) => Box::new(File::create(t).with_context(|| format!("cannot create {}", t.display()))?),
        None => Box::new(io::stdout().lock()),
    };
    let mut out = BufWriter::with_capacity(1 << 20, out);
    let (tree, dir_node) = match located {
        Located::Root(tree) => (tree, None),
        Located::Entry(node) => match (node.kind, node.subtree) {
            (NodeKind::Dir, Some(tree)) => (tree, Some(node)),
            (NodeKind::File, _) => {
                let mut r = ContentReader::new(&repo, &node, &path)?;
                io::copy(&mut r, &mut out).map_err(|e| io_error(e, "the file"))?;
                out.flush()?;
                return Ok(exit::OK);
            }
            (kind, _) => {
                return Err(anyhow!(
                    "{} is a {kind:?} entry, not a file or directory: `coffer ls` shows it; dump its directory instead",
                    path.display()
                ));
            }
        },
    };
    let mut left_out = 0u64;
    let mut too_long = |t: TooLong| {
        left_out += 1;
        repo_open::warn(global, &t.to_string());
        Ok(())
    };
    let format = match a.archive {
        ArchiveFormat::Tar => coffer_archive::Format::Tar,
        ArchiveFormat::Zip => coffer_archive::Format::Zip,
    };
    let zone = output::time_zone();
    let written = coffer_archive::write(&repo, tree, &path, dir_node.as_deref(), format, &zone, out, &mut too_long)
        .map_err(|e| match e {
            coffer_archive::Error::Repo(e) => anyhow::Error::from(e).context("cannot dump the directory"),
            coffer_archive::Error::Output(e) => anyhow!("cannot write the archive to the output: {e}"),
        })?;
    if written.not_utf8 > 0 {
        let n = written.not_utf8;
        eprintln!(
            "warning: {} {} not UTF-8 and {} written with replacement characters; use --archive tar to keep them exact",
            crate::output::plural(n, "name"),
            if n == 1 { "is" } else { "are" },
            if n == 1 { "was" } else { "were" }
        );
    }
    if written.skipped > 0 {
        eprintln!(
            "warning: {} device nodes and FIFOs were left out: zip cannot hold them; use --archive tar",
            written.skipped
        );
    }
    repo_open::report_bad_copies(global, &repo);
    // The archive lacks what was left out.
    Ok(if left_out > 0 { exit::INCOMPLETE } else { exit::OK })
}

/// An I/O error while dumping: the repository's own error when it carries one
/// (so that damage keeps its exit code), else the I/O error on the output.
fn io_error(e: io::Error, what: &str) -> anyhow::Error {
    if repo_error(&e).is_none() {
        return anyhow!("cannot write {what} to the output: {e}");
    }
    match e.into_inner().map(|inner| inner.downcast::<coffer_core::Error>()) {
        Some(Ok(err)) => anyhow::Error::from(*err).context(format!("cannot dump {what}")),
        Some(Err(other)) => anyhow!("cannot dump {what}: {other}"),
        None => anyhow!("cannot dump {what}"),
    }
}
