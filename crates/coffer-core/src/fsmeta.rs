//! Reading metadata from the local file system into tree nodes, and applying it
//! back on restore. Unix only. See docs/design.md#trees for what is recorded.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::Metadata;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::Mutex;

use rustix::fs::{AtFlags, CWD, FileType, Mode, Timespec, Timestamps, UTIME_OMIT};

use crate::format::bytes::Bytes;
use crate::format::tree::{Node, NodeKind, Timestamp, Xattr};

/// The host name of this machine.
pub fn hostname() -> String {
    rustix::system::uname().nodename().to_string_lossy().into_owned()
}

/// The name of the user running this process (or its uid).
pub fn username() -> String {
    let uid = rustix::process::geteuid().as_raw();
    uzers::get_user_by_uid(uid).map(|u| u.name().to_string_lossy().into_owned()).unwrap_or_else(|| uid.to_string())
}

/// Whether this process may set owners and create device nodes.
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Caches user and group names by id; lookups go through NSS and are slow.
#[derive(Default)]
pub struct NameCache {
    users: Mutex<HashMap<u32, Option<String>>>,
    groups: Mutex<HashMap<u32, Option<String>>>,
}

impl NameCache {
    fn user(&self, uid: u32) -> Option<String> {
        self.users
            .lock()
            .expect("poisoned")
            .entry(uid)
            .or_insert_with(|| uzers::get_user_by_uid(uid).map(|u| u.name().to_string_lossy().into_owned()))
            .clone()
    }

    fn group(&self, gid: u32) -> Option<String> {
        self.groups
            .lock()
            .expect("poisoned")
            .entry(gid)
            .or_insert_with(|| uzers::get_group_by_gid(gid).map(|g| g.name().to_string_lossy().into_owned()))
            .clone()
    }
}

/// The kind of a directory entry from its metadata.
pub fn node_kind(md: &Metadata) -> NodeKind {
    let ft = md.file_type();
    if ft.is_dir() {
        NodeKind::Dir
    } else if ft.is_symlink() {
        NodeKind::Symlink
    } else if ft.is_fifo() {
        NodeKind::Fifo
    } else if ft.is_char_device() {
        NodeKind::Chardev
    } else if ft.is_block_device() {
        NodeKind::Blockdev
    } else if ft.is_socket() {
        NodeKind::Socket
    } else {
        NodeKind::File
    }
}

/// Builds the node for `path` from its `lstat` metadata: everything but content
/// and subtree. Extended attributes that cannot be read are left out and returned
/// as a warning; a symlink whose target cannot be read is an error (the entry
/// cannot be recorded).
pub fn read_node(name: &[u8], path: &Path, md: &Metadata, names: &NameCache) -> Result<(Node, Option<String>), String> {
    let kind = node_kind(md);
    let mut warning = None;
    let target = if kind == NodeKind::Symlink {
        let t = std::fs::read_link(path).map_err(|e| format!("cannot read symlink target: {e}"))?;
        Some(Bytes(t.as_os_str().as_bytes().to_vec()))
    } else {
        None
    };
    let xattrs = match read_xattrs(path) {
        Ok(x) => x,
        Err(e) => {
            warning = Some(format!("cannot read extended attributes: {e}"));
            Vec::new()
        }
    };
    let is_file = kind == NodeKind::File;
    let node = Node {
        name: Bytes(name.to_vec()),
        kind,
        mode: md.mode() & 0o7777,
        uid: md.uid(),
        gid: md.gid(),
        user: names.user(md.uid()),
        group: names.group(md.gid()),
        mtime: Timestamp(md.mtime(), md.mtime_nsec() as u32),
        ctime: Timestamp(md.ctime(), md.ctime_nsec() as u32),
        size: if is_file { md.size() } else { 0 },
        inode: md.ino(),
        device: md.dev(),
        links: md.nlink(),
        rdev: if matches!(kind, NodeKind::Chardev | NodeKind::Blockdev) { md.rdev() } else { 0 },
        target,
        xattrs,
        content: Vec::new(),
        content_parts: Vec::new(),
        digest: None,
        sparse: is_file && md.size() > 0 && md.blocks().saturating_mul(512) < md.size(),
        subtree: None,
    };
    Ok((node, warning))
}

fn unsupported(e: &io::Error) -> bool {
    e.raw_os_error() == Some(rustix::io::Errno::OPNOTSUPP.raw_os_error())
}

/// Reads every extended attribute of `path` (not following symlinks), sorted by name.
pub fn read_xattrs(path: &Path) -> io::Result<Vec<Xattr>> {
    let names = match xattr::list(path) {
        Ok(n) => n,
        Err(e) if unsupported(&e) => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for name in names {
        if let Some(value) = xattr::get(path, &name)? {
            out.push(Xattr { name: Bytes(name.as_bytes().to_vec()), value: Bytes(value) });
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

fn ts(t: Timestamp) -> Timespec {
    Timespec { tv_sec: t.0, tv_nsec: t.1 as _ }
}

/// Creates a special file (FIFO or device node) at `path`.
pub fn create_special(path: &Path, node: &Node) -> io::Result<()> {
    let ft = match node.kind {
        NodeKind::Fifo => FileType::Fifo,
        NodeKind::Chardev => FileType::CharacterDevice,
        NodeKind::Blockdev => FileType::BlockDevice,
        _ => return Err(io::Error::other("not a special file")),
    };
    rustix::fs::mknodat(CWD, path, ft, Mode::from_raw_mode(node.mode & 0o777), node.rdev as _)?;
    Ok(())
}

/// Applies owner (when root), extended attributes, permissions and mtime to the
/// entry at `path`, in the order that keeps each from undoing another: owner
/// first (a chown clears setuid/setgid bits and file capabilities), then xattrs
/// (including `security.capability`), then mode, then times. Symlinks get no mode.
pub fn apply_metadata(path: &Path, node: &Node, as_root: bool) -> io::Result<()> {
    let mut first_err = None;
    if as_root {
        let r = std::os::unix::fs::lchown(path, Some(node.uid), Some(node.gid));
        if let Err(e) = r {
            first_err.get_or_insert(e);
        }
    }
    for x in &node.xattrs {
        if let Err(e) = xattr::set(path, OsStr::from_bytes(&x.name.0), &x.value.0) {
            first_err.get_or_insert(e);
        }
    }
    if node.kind != NodeKind::Symlink {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(node.mode))?;
    }
    let times =
        Timestamps { last_access: Timespec { tv_sec: 0, tv_nsec: UTIME_OMIT }, last_modification: ts(node.mtime) };
    rustix::fs::utimensat(CWD, path, &times, AtFlags::SYMLINK_NOFOLLOW)?;
    match first_err {
        Some(e) => Err(e),
        None => Ok(()),
    }
}
