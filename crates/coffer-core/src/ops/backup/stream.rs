//! Backup of a stream (standard input, a command's output) as the one file of a
//! snapshot. See docs/design.md#backup-from-a-stream.
//!
//! The stream is read in blocks and chunked like any file ([`Archiver`]'s
//! `read_content`), so memory stays flat whatever its length; the file's node
//! is made up, since there is no file to `lstat`: mode 0644, the current user
//! and group, modified now.

use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::SystemTime;

use super::{Archiver, Leaves};
use crate::error::{Error, Result};
use crate::format::bytes::Bytes;
use crate::format::tree::{self, Node, NodeKind, Timestamp};
use crate::id::Id;
use crate::merkle;
use crate::progress::FileChange;

/// Permission bits of the file a stream is stored as (restic stores 0644 too).
const STREAM_MODE: u32 = 0o644;

/// A stream to back up as one file.
pub struct StreamSource<'a> {
    /// The file's name in the snapshot: one path component (`--stdin-filename`).
    pub name: String,
    /// Where the bytes come from, read to its end. An error, even at the end,
    /// fails the backup: no snapshot is written.
    pub reader: &'a mut (dyn Read + Send),
    /// What the stream is, for error messages ("standard input").
    pub label: String,
}

impl StreamSource<'_> {
    /// The path the file has in the snapshot: `/NAME` ([`stream_path`]).
    pub fn path(&self) -> Result<PathBuf> {
        stream_path(&self.name)
    }
}

/// The path a stream's file named `n` has in the snapshot: `/NAME`. A name that
/// is not one path component is refused.
pub fn stream_path(n: &str) -> Result<PathBuf> {
    if n.is_empty() || n == "." || n == ".." || n.contains('/') || n.contains('\0') {
        return Err(Error::InvalidInput(format!(
            "{n:?} cannot name the file of a stream backup: give --stdin-filename a name without '/', \
             not empty, '.' or '..'"
        )));
    }
    Ok(Path::new("/").join(n))
}

impl Archiver<'_> {
    /// Reads the stream to its end and saves the root tree holding it as the
    /// file `path` (`/NAME`). The file is new, changed or unchanged as its
    /// content compares with the parent snapshot's file of that name.
    pub(super) fn save_stream(
        &self,
        stream: StreamSource<'_>,
        path: &Path,
        parent: Option<Id>,
        time: SystemTime,
    ) -> Result<(Id, Leaves)> {
        let name = stream.name.as_bytes();
        let mut pdir = self.parent_dir(parent);
        let pnodes = pdir.take(std::iter::once(name));
        let pnode = pnodes.first().cloned().flatten().filter(|n| n.kind == NodeKind::File);
        self.progress.start_item(path);
        let mut counted = Counted { inner: stream.reader, bytes: 0 };
        let (content, digest) = match self.read_content(&mut counted, u64::MAX, path) {
            Ok(c) => c,
            Err(Error::Io { source, .. }) => return Err(Error::io(&stream.label, source)),
            Err(e) => return Err(e),
        };
        let size = counted.bytes;
        self.bytes_total.fetch_add(size, Ordering::Relaxed);
        let change = match &pnode {
            None => FileChange::New,
            Some(p) if p.digest == Some(digest) && p.size == size => FileChange::Unchanged,
            Some(_) => FileChange::Changed,
        };
        self.count_file(change);
        let mut node = stream_node(name, size, time);
        node.content_parts = tree::content_parts(&content, &self.limits, &mut |b| self.save_tree_blob(b))?;
        if node.content_parts.is_empty() {
            node.content = content;
        }
        node.digest = Some(digest);
        let p = path.as_os_str().as_bytes();
        let leaves = Leaves::one(merkle::file_leaf(&merkle::leaf_salt(&self.merkle_key, p), &digest.0, p));
        self.progress.file_saved(path, change);
        self.progress.add_item(path);
        let mut dir = self.dir_writer();
        dir.add_batch(self, vec![Ok(Some((node, leaves)))], pnodes, &mut pdir)?;
        dir.finish(self, pdir)
    }
}

/// Counts the bytes read through it.
pub(super) struct Counted<'a> {
    pub(super) inner: &'a mut (dyn Read + Send),
    pub(super) bytes: u64,
}

impl Read for Counted<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }
}

/// The node of a stream's file: a regular file of `size` bytes owned by the
/// user and group running the backup, mode 0644, modified at `time`.
fn stream_node(name: &[u8], size: u64, time: SystemTime) -> Node {
    let (uid, gid) = (rustix::process::geteuid().as_raw(), rustix::process::getegid().as_raw());
    let since = time.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let stamp = Timestamp(i64::try_from(since.as_secs()).unwrap_or(i64::MAX), since.subsec_nanos());
    let mut node = Node::new(Bytes(name.to_vec()), NodeKind::File, STREAM_MODE, stamp);
    node.uid = uid;
    node.gid = gid;
    node.user = uzers::get_user_by_uid(uid).map(|u| u.name().to_string_lossy().into_owned());
    node.group = uzers::get_group_by_gid(gid).map(|g| g.name().to_string_lossy().into_owned());
    node.size = size;
    node
}
