//! A directory of a snapshot as a tar or zip archive (docs/design.md#dump),
//! written while the snapshot's trees are walked (`coffer_core::ops::dump`):
//! files are read one chunk at a time, each chunk verified as it is loaded, so
//! memory does not grow with what is archived. `coffer dump` and the UI's
//! directory downloads both write through here.

use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use coffer_core::format::tree::{Node, NodeKind};
use coffer_core::ops::dump::{ContentReader, Entry, entries, repo_error};
use coffer_core::repo::Repository;
use coffer_core::repo::tree_walk::TooLong;

/// The archive formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Exact names and every entry kind, hard links as links.
    Tar,
    /// Names as UTF-8, no hard links (each name gets the content), no special files.
    Zip,
}

/// Why an archive could not be written whole.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The repository: damage, a missing object, its storage.
    #[error(transparent)]
    Repo(#[from] coffer_core::Error),
    /// Writing the archive out.
    #[error("cannot write the archive: {0}")]
    Output(io::Error),
}

/// What an archive left out or changed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Written {
    /// zip: names not UTF-8, written with replacement characters.
    pub not_utf8: u64,
    /// zip: device nodes and FIFOs, which it cannot hold.
    pub skipped: u64,
}

/// An I/O error from writing: the repository's error when it carries one (a
/// file's content could not be read), else an error of the output.
fn from_io(e: io::Error) -> Error {
    if repo_error(&e).is_none() {
        return Error::Output(e);
    }
    match e.into_inner().map(|inner| inner.downcast::<coffer_core::Error>()) {
        Some(Ok(err)) => Error::Repo(*err),
        Some(Err(other)) => Error::Output(io::Error::other(other)),
        None => Error::Output(io::Error::other("an I/O error")),
    }
}

/// A core error from the walk: one wrapping an I/O error that carries a
/// repository error is that repository error, so that damage keeps its kind.
fn from_walk(e: coffer_core::Error) -> Error {
    match e {
        coffer_core::Error::Io { source, .. } if repo_error(&source).is_some() => from_io(source),
        e => Error::Repo(e),
    }
}

/// The name an entry has in the archive: its snapshot path without the leading `/`.
fn archive_name(p: &Path) -> PathBuf {
    p.strip_prefix("/").unwrap_or(p).to_path_buf()
}

/// Writes the directory tree `tree`, found at `prefix` in the snapshot (with
/// its own entry `dir`, none for the snapshot's root), to `out` as `format`.
/// An entry whose path is too long is given to `too_long`, and left out.
/// zip's times are in `zone`.
#[allow(clippy::too_many_arguments)]
pub fn write(
    repo: &Repository,
    tree: coffer_core::Id,
    prefix: &Path,
    dir: Option<&Node>,
    format: Format,
    zone: &jiff::tz::TimeZone,
    out: impl Write,
    too_long: &mut dyn FnMut(TooLong) -> coffer_core::Result<()>,
) -> Result<Written, Error> {
    match format {
        Format::Tar => write_tar(repo, tree, prefix, dir, out, too_long).map(|()| Written::default()),
        Format::Zip => write_zip(repo, tree, prefix, dir, zone, out, too_long),
    }
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
) -> Result<(), Error> {
    let mut b = tar::Builder::new(out);
    if let Some(d) = dir {
        let mut h = tar_header(d, tar::EntryType::Directory);
        b.append_data(&mut h, archive_name(prefix), io::empty()).map_err(from_io)?;
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
    .map_err(from_walk)?;
    b.into_inner().map_err(from_io)?.flush().map_err(Error::Output)
}

fn zip_time(node: &Node, zone: &jiff::tz::TimeZone) -> zip::DateTime {
    jiff::Timestamp::from_second(node.mtime.0)
        .ok()
        .map(|ts| ts.to_zoned(zone.clone()).datetime())
        .and_then(|dt| zip::DateTime::try_from(dt).ok())
        .unwrap_or_default()
}

fn write_zip(
    repo: &Repository,
    tree: coffer_core::Id,
    prefix: &Path,
    dir: Option<&Node>,
    zone: &jiff::tz::TimeZone,
    out: impl Write,
    too_long: &mut dyn FnMut(TooLong) -> coffer_core::Result<()>,
) -> Result<Written, Error> {
    use zip::write::SimpleFileOptions;
    let mut z = zip::ZipWriter::new_stream(out);
    let options = |node: &Node| {
        SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated)
            .unix_permissions(node.mode & 0o7777)
            .last_modified_time(zip_time(node, zone))
            .large_file(node.size >= u32::MAX as u64)
    };
    let mut w = Written::default();
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
        z.add_directory(format!("{name}/"), options(d)).map_err(|e| from_walk(zerr(prefix, e)))?;
    }
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
                    w.skipped += 1;
                    Ok(())
                }
            }
        },
        too_long,
    )
    .map_err(from_walk)?;
    let mut out = z.finish().map_err(|e| Error::Output(io::Error::other(e)))?.into_inner();
    out.flush().map_err(Error::Output)?;
    w.not_utf8 = not_utf8;
    Ok(w)
}
