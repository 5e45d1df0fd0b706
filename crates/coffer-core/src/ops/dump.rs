//! Reading a snapshot's entries out as a stream (`coffer dump`): the content of
//! one file, one chunk at a time, and the entries below a directory in the
//! order an archive wants them. The archive formats themselves are the
//! binary's. See docs/design.md#dump.
//!
//! Memory is bounded: a file's content is read one chunk at a time (each chunk
//! verified against its id when loaded), and the walk streams trees
//! ([`crate::repo::tree_walk::walk`]). What grows is the first archive name of
//! each inode with several names, until all its names are written.

use std::collections::HashMap;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::format::pack::BlobType;
use crate::format::tree::{Node, NodeKind};
use crate::id::Id;
use crate::repo::Repository;
use crate::repo::tree_walk::{Located, TooLong, locate, walk_bounded};

/// A file's content as a reader: each chunk is loaded (and verified) when reached.
/// A content that does not add up to the node's size is an error at its end.
pub struct ContentReader<'a> {
    repo: &'a Repository,
    path: PathBuf,
    content: Vec<Id>,
    next: usize,
    buf: Vec<u8>,
    pos: usize,
    read: u64,
    size: u64,
}

impl<'a> ContentReader<'a> {
    /// A reader of `node`'s content; `path` names it in errors.
    pub fn new(repo: &'a Repository, node: &Node, path: &Path) -> Result<ContentReader<'a>> {
        let content = repo.resolve_content(node, &mut |_| {})?;
        Ok(ContentReader {
            repo,
            path: path.to_path_buf(),
            content,
            next: 0,
            buf: Vec::new(),
            pos: 0,
            read: 0,
            size: node.size,
        })
    }
}

impl Read for ContentReader<'_> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        while self.pos == self.buf.len() {
            if self.next == self.content.len() {
                if self.read != self.size {
                    let e = Error::corrupt(
                        format!("file {}", self.path.display()),
                        format!("its chunks hold {} bytes, its entry says {}", self.read, self.size),
                    );
                    return Err(io::Error::other(e));
                }
                return Ok(0);
            }
            self.buf = self.repo.load_blob(BlobType::Data, &self.content[self.next]).map_err(io::Error::other)?;
            self.next += 1;
            self.pos = 0;
        }
        let n = out.len().min(self.buf.len() - self.pos);
        out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
        self.pos += n;
        self.read += n as u64;
        Ok(n)
    }
}

/// The repository error inside an I/O error from [`ContentReader`], if it holds one.
pub fn repo_error(e: &io::Error) -> Option<&Error> {
    e.get_ref().and_then(|inner| inner.downcast_ref::<Error>())
}

/// One entry to put in an archive.
pub enum Entry<'n> {
    /// A directory, a file's first name, a symlink or a special file.
    Node(&'n Node),
    /// A further name of a file already written as `first` (a hard link).
    HardLink {
        /// The entry.
        node: &'n Node,
        /// The snapshot path the file was first written under.
        first: &'n Path,
    },
}

/// What `path` names in the snapshot with root tree `root`.
pub fn locate_path(repo: &Repository, root: Id, path: &Path) -> Result<Located> {
    locate(repo, root, &Path::new("/").join(path))
}

/// Calls `visit` with every entry below the directory tree `dir` (found at
/// `prefix` in the snapshot), directories before their contents, each with its
/// snapshot path. Sockets are left out (no archive holds them), and so is an
/// entry whose path would be longer than
/// [`crate::repo::tree_walk::MAX_PATH_LEN`], with what is below it: it is given
/// to `too_long` instead.
pub fn entries(
    repo: &Repository,
    dir: Id,
    prefix: &Path,
    visit: &mut dyn FnMut(&Path, Entry<'_>) -> Result<()>,
    too_long: &mut dyn FnMut(TooLong) -> Result<()>,
) -> Result<()> {
    // First names of inodes with several names, and how many names are still to come.
    let mut first: HashMap<(u64, u64), (PathBuf, u64)> = HashMap::new();
    let mut each = |path: &Path, node: &Node| {
        if node.kind == NodeKind::Socket {
            return Ok(());
        }
        if node.kind == NodeKind::File && node.links > 1 {
            let key = (node.device, node.inode);
            if let Some((first_path, left)) = first.get_mut(&key) {
                visit(path, Entry::HardLink { node, first: first_path })?;
                *left = left.saturating_sub(1);
                if *left == 0 {
                    first.remove(&key);
                }
                return Ok(());
            }
            first.insert(key, (path.to_path_buf(), node.links - 1));
        }
        visit(path, Entry::Node(node))
    };
    walk_bounded(repo, dir, prefix, &mut each, too_long)
}
