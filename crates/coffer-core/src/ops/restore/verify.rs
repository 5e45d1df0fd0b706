//! `restore --verify`: reads back what a restore wrote and compares it with the
//! snapshot. See docs/design.md#restore-options.
//!
//! The snapshot is walked again with the restore's own selection; every regular
//! file taken is opened in the target (never following a symlink at its name)
//! and read chunk by chunk, in the lengths the index records for the file's
//! chunks: each piece's keyed id must be the chunk id the snapshot names, and
//! the file must end where the last chunk ends. Memory is one chunk and the
//! walk's stack; nothing is fetched from the storage but trees.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::{RestoreOptions, Selector, totals};
use crate::error::Result;
use crate::format::pack::BlobType;
use crate::format::snapshot::Snapshot;
use crate::format::tree::{Node, NodeKind};
use crate::repo::Repository;
use crate::repo::tree_walk::locate;

/// What `verify` found.
#[derive(Debug, Default)]
pub struct VerifySummary {
    /// Regular files read back.
    pub files: u64,
    /// Bytes read back.
    pub bytes: u64,
    /// Files whose content differs from the snapshot, or that could not be read, with why.
    pub mismatches: Vec<(PathBuf, String)>,
}

/// Reads back the regular files a restore with `opts` wrote into `opts.target`
/// and compares them with `snapshot`. Files the restore kept as they were
/// ([`super::Overwrite`]) are compared too, so they show up if they differ.
pub fn verify(repo: &Repository, snapshot: &Snapshot, opts: &RestoreOptions) -> Result<VerifySummary> {
    let subpath = opts.subpath.clone().unwrap_or_else(|| PathBuf::from("/"));
    let snap_root = Path::new("/").join(&subpath);
    let located = locate(repo, snapshot.tree, &snap_root)?;
    let select = Selector::new(opts)?;
    let mut summary = VerifySummary::default();
    let mut first_error = None;
    totals::walk(repo, &select, &located, &snap_root, &mut |t| {
        if t.node.kind != NodeKind::File || first_error.is_some() {
            return;
        }
        let path = opts.target.join(t.rel);
        match compare(repo, t.node, &path) {
            Ok(Ok(n)) => {
                summary.files += 1;
                summary.bytes += n;
            }
            Ok(Err(why)) => summary.mismatches.push((path, why)),
            Err(e) => first_error = Some(e),
        }
    })?;
    match first_error {
        Some(e) => Err(e),
        None => Ok(summary),
    }
}

/// Compares the file at `path` with `node`: the bytes read, or why they differ.
/// An error is a problem with the repository (a content list that does not resolve).
fn compare(repo: &Repository, node: &Node, path: &Path) -> Result<std::result::Result<u64, String>> {
    let content = repo.resolve_content(node, &mut |_| {})?;
    let mut file = match File::options().read(true).custom_flags(libc::O_NOFOLLOW).open(path) {
        Ok(f) => f,
        Err(e) => return Ok(Err(format!("cannot be opened: {e}"))),
    };
    let mut buf = Vec::new();
    let mut total = 0u64;
    for (i, id) in content.iter().enumerate() {
        let len = match repo.locate_blob(BlobType::Data, id) {
            Ok((entry, _)) => entry.raw_length as usize,
            Err(e) => return Err(e),
        };
        buf.resize(len, 0);
        if let Err(e) = file.read_exact(&mut buf) {
            return Ok(Err(format!("ends early, in chunk {i} at byte {total}: {e}")));
        }
        if repo.blob_id(BlobType::Data, &buf) != *id {
            return Ok(Err(format!("chunk {i} (bytes {total}..{}) differs from the snapshot", total + len as u64)));
        }
        total += len as u64;
    }
    let mut extra = [0u8; 1];
    match file.read(&mut extra) {
        Ok(0) => Ok(Ok(total)),
        Ok(_) => Ok(Err(format!("is longer than the snapshot's {total} bytes"))),
        Err(e) => Ok(Err(format!("cannot be read after byte {total}: {e}"))),
    }
}
