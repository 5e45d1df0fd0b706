//! `coffer dump SNAPSHOT PATH`: a file's content, or a directory as a tar or zip
//! archive, streamed to stdout (docs/design.md#dump). Entries come from the
//! streamed walk of `coffer_core::ops::dump`; files are read one chunk at a
//! time, so memory does not grow with the size of what is dumped.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow};
use coffer_core::format::tree::{Node, NodeKind};
use coffer_core::ops::dump::{ContentReader, Entry, entries, locate_path, repo_error};
use coffer_core::repo::tree_walk::{Located, TooLong};
use coffer_core::repo::{Repository, SnapshotFilter};

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
    match a.archive {
        ArchiveFormat::Tar => write_tar(&repo, tree, &path, dir_node.as_deref(), out, &mut too_long)?,
        ArchiveFormat::Zip => write_zip(&repo, tree, &path, dir_node.as_deref(), out, &mut too_long)?,
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

/// The name an entry has in the archive: its snapshot path without the leading `/`.
fn archive_name(p: &Path) -> PathBuf {
    p.strip_prefix("/").unwrap_or(p).to_path_buf()
}

fn tar_header(node: &Node, kind: tar::EntryType) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_mode(node.mode & 0o7777);
    h.set_mtime(node.mtime.0.max(0) as u64);
    h.set_uid(u64::from(node.uid));
    h.set_gid(u64::from(node.gid));
    if let Some(u) = &node.user {
        let _ = h.set_username(u);
    }
    if let Some(g) = &node.group {
        let _ = h.set_groupname(g);
    }
    h.set_size(0);
    h
}

fn write_tar(
    repo: &Repository,
    tree: coffer_core::Id,
    prefix: &Path,
    dir: Option<&Node>,
    out: impl Write,
    too_long: &mut dyn FnMut(TooLong) -> coffer_core::Result<()>,
) -> Result<()> {
    let mut b = tar::Builder::new(out);
    if let Some(d) = dir {
        let mut h = tar_header(d, tar::EntryType::Directory);
        b.append_data(&mut h, archive_name(prefix), io::empty()).map_err(|e| io_error(e, "a directory"))?;
    }
    entries(
        repo,
        tree,
        prefix,
        &mut |path, entry| {
            let name = archive_name(path);
            let r = match entry {
                Entry::HardLink { node, first } => {
                    let mut h = tar_header(node, tar::EntryType::Link);
                    b.append_link(&mut h, &name, archive_name(first))
                }
                Entry::Node(node) => match node.kind {
                    NodeKind::Dir => {
                        b.append_data(&mut tar_header(node, tar::EntryType::Directory), &name, io::empty())
                    }
                    NodeKind::File => {
                        let mut h = tar_header(node, tar::EntryType::Regular);
                        h.set_size(node.size);
                        let reader = ContentReader::new(repo, node, path)?;
                        b.append_data(&mut h, &name, reader)
                    }
                    NodeKind::Symlink => {
                        let target = node.target.as_ref().map(|t| t.0.clone()).unwrap_or_default();
                        let mut h = tar_header(node, tar::EntryType::Symlink);
                        b.append_link(&mut h, &name, Path::new(std::ffi::OsStr::from_bytes(&target)))
                    }
                    NodeKind::Fifo | NodeKind::Chardev | NodeKind::Blockdev => {
                        let kind = match node.kind {
                            NodeKind::Fifo => tar::EntryType::Fifo,
                            NodeKind::Chardev => tar::EntryType::Char,
                            _ => tar::EntryType::Block,
                        };
                        let mut h = tar_header(node, kind);
                        let (major, minor) =
                            (libc::major(node.rdev as libc::dev_t), libc::minor(node.rdev as libc::dev_t));
                        let _ = h.set_device_major(major);
                        let _ = h.set_device_minor(minor);
                        b.append_data(&mut h, &name, io::empty())
                    }
                    NodeKind::Socket => Ok(()),
                },
            };
            r.map_err(|e| coffer_core::Error::io(path, e))
        },
        too_long,
    )
    .map_err(unwrap_io)?;
    b.into_inner().map_err(|e| io_error(e, "the archive"))?.flush()?;
    Ok(())
}

/// A core error wrapping an I/O error that carries a repository error: the
/// repository error, so that damage keeps its exit code.
fn unwrap_io(e: coffer_core::Error) -> anyhow::Error {
    match e {
        coffer_core::Error::Io { path, source } if repo_error(&source).is_some() => {
            io_error(source, &path.display().to_string())
        }
        e => e.into(),
    }
}

fn zip_time(node: &Node) -> zip::DateTime {
    jiff::Timestamp::from_second(node.mtime.0)
        .ok()
        .map(|ts| ts.to_zoned(output::time_zone()).datetime())
        .and_then(|dt| zip::DateTime::try_from(dt).ok())
        .unwrap_or_default()
}

fn write_zip(
    repo: &Repository,
    tree: coffer_core::Id,
    prefix: &Path,
    dir: Option<&Node>,
    out: impl Write,
    too_long: &mut dyn FnMut(TooLong) -> coffer_core::Result<()>,
) -> Result<()> {
    use zip::write::SimpleFileOptions;
    let mut z = zip::ZipWriter::new_stream(out);
    let options = |node: &Node| {
        SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated)
            .unix_permissions(node.mode & 0o7777)
            .last_modified_time(zip_time(node))
            .large_file(node.size >= u32::MAX as u64)
    };
    let mut not_utf8 = 0u64;
    let mut name_of = |p: &Path| {
        let n = archive_name(p);
        match n.to_str() {
            Some(s) => s.to_string(),
            None => {
                not_utf8 += 1;
                n.to_string_lossy().into_owned()
            }
        }
    };
    let zerr = |p: &Path, e: zip::result::ZipError| coffer_core::Error::io(p, io::Error::other(e));
    if let Some(d) = dir {
        let name = name_of(prefix);
        z.add_directory(format!("{name}/"), options(d)).map_err(|e| zerr(prefix, e))?;
    }
    let mut skipped = 0u64;
    entries(
        repo,
        tree,
        prefix,
        &mut |path, entry| {
            let name = name_of(path);
            // zip has no hard links: every name gets the content.
            let node = match entry {
                Entry::Node(n) | Entry::HardLink { node: n, .. } => n,
            };
            match node.kind {
                NodeKind::Dir => z.add_directory(format!("{name}/"), options(node)).map_err(|e| zerr(path, e)),
                NodeKind::File => {
                    z.start_file(name, options(node)).map_err(|e| zerr(path, e))?;
                    let mut r = ContentReader::new(repo, node, path)?;
                    io::copy(&mut r, &mut z).map_err(|e| coffer_core::Error::io(path, e))?;
                    Ok(())
                }
                NodeKind::Symlink => {
                    let target =
                        node.target.as_ref().map(|t| String::from_utf8_lossy(&t.0).into_owned()).unwrap_or_default();
                    z.add_symlink(name, target, options(node)).map_err(|e| zerr(path, e))
                }
                _ => {
                    skipped += 1;
                    Ok(())
                }
            }
        },
        too_long,
    )
    .map_err(unwrap_io)?;
    let mut w = z.finish().map_err(|e| anyhow!("cannot finish the zip archive: {e}"))?.into_inner();
    w.flush()?;
    if not_utf8 > 0 {
        eprintln!(
            "warning: {} {} not UTF-8 and {} written with replacement characters; use --archive tar to keep them exact",
            crate::output::plural(not_utf8, "name"),
            if not_utf8 == 1 { "is" } else { "are" },
            if not_utf8 == 1 { "was" } else { "were" }
        );
    }
    if skipped > 0 {
        eprintln!("warning: {skipped} device nodes and FIFOs were left out: zip cannot hold them; use --archive tar");
    }
    Ok(())
}
