//! Reading metadata from the local file system into tree nodes, and applying it
//! back on restore. Unix only. See docs/design.md#trees for what is recorded.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::Metadata;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rustix::fs::{AtFlags, CWD, FileType, Gid, Mode, OFlags, Timespec, Timestamps, UTIME_OMIT, Uid, XattrFlags};

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

/// Builds the node for the entry at `path()` from its `lstat` metadata:
/// everything but content and subtree. Extended attributes that cannot be read are left out and returned
/// as a warning; a symlink whose target cannot be read is an error (the entry
/// cannot be recorded).
///
/// `previous` is the entry's node in the parent snapshot, if any. When it is
/// the same inode with the same change time ([`same_inode_since`]), its
/// extended attributes and symlink target are taken instead of read again:
/// changing either changes the ctime (docs/design.md#change-detection).
pub fn read_node(
    name: &[u8],
    path: impl FnOnce() -> PathBuf,
    md: &Metadata,
    names: &NameCache,
    previous: Option<&Node>,
) -> Result<(Node, Option<String>), String> {
    let kind = node_kind(md);
    let mut warning = None;
    let same = previous.filter(|p| p.kind == kind && same_inode_since(md, p));
    let path = std::cell::LazyCell::new(path);
    let target = match (kind, same) {
        (NodeKind::Symlink, Some(p)) if p.target.is_some() => p.target.clone(),
        (NodeKind::Symlink, _) => {
            let t = std::fs::read_link(&*path).map_err(|e| format!("cannot read symlink target: {e}"))?;
            Some(Bytes(t.as_os_str().as_bytes().to_vec()))
        }
        _ => None,
    };
    let xattrs = match same {
        Some(p) => p.xattrs.clone(),
        None => match read_xattrs(&path) {
            Ok(x) => x,
            Err(e) => {
                warning = Some(format!("cannot read extended attributes: {e}"));
                Vec::new()
            }
        },
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

/// Whether the entry `md` describes is the inode `previous` recorded (same
/// device and inode number) and has not changed since: same change time, which
/// the kernel sets on every change to the inode's metadata, extended attributes
/// included, and same modification time.
pub fn same_inode_since(md: &Metadata, previous: &Node) -> bool {
    previous.device == md.dev()
        && previous.inode == md.ino()
        && previous.ctime == Timestamp(md.ctime(), md.ctime_nsec() as u32)
        && previous.mtime == Timestamp(md.mtime(), md.mtime_nsec() as u32)
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

/// The permission bits a mode can hold: rwx for all three classes, setuid,
/// setgid and sticky. A tree node with any other bit set is damaged.
pub const MODE_BITS: u32 = 0o7777;

/// The setuid and setgid bits.
const SETID_BITS: u32 = 0o6000;

/// Which of the things only root can create a restore recreates; see
/// docs/design.md#restore. A restore that is not run as root never sets owners
/// or makes device nodes whatever this says (it cannot).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RestorePolicy {
    /// Set each entry's owner and group.
    pub owners: bool,
    /// Keep setuid and setgid bits.
    pub setid: bool,
    /// Set `security.` and `trusted.` extended attributes (file capabilities among them).
    pub privileged_xattrs: bool,
}

impl RestorePolicy {
    /// The policy of a restore run as root or not (`as_root`) that restores
    /// privileged things or not (`privileged`).
    pub fn new(as_root: bool, privileged: bool) -> RestorePolicy {
        // Someone who is not root can only create files they own: setuid bits and
        // their own attributes give them nothing they did not have.
        RestorePolicy {
            owners: as_root && privileged,
            setid: !as_root || privileged,
            privileged_xattrs: !as_root || privileged,
        }
    }
}

/// How many privileged things a restore left out on purpose (see [`RestorePolicy`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Withheld {
    /// Entries whose owner or group (other than root) was not set.
    pub owners: u64,
    /// Entries restored without their setuid or setgid bits.
    pub setid: u64,
    /// `security.` and `trusted.` extended attributes not set.
    pub xattrs: u64,
    /// Device nodes not created.
    pub devices: u64,
}

impl Withheld {
    /// Whether nothing was withheld.
    pub fn is_empty(&self) -> bool {
        *self == Withheld::default()
    }

    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &Withheld) {
        self.owners += other.owners;
        self.setid += other.setid;
        self.xattrs += other.xattrs;
        self.devices += other.devices;
    }
}

/// Whether an extended attribute lies in a namespace only root may set.
fn privileged_xattr(name: &[u8]) -> bool {
    name.starts_with(b"security.") || name.starts_with(b"trusted.")
}

/// Keeps the first of several errors.
fn keep_first(first: &mut Option<io::Error>, r: io::Result<()>) {
    if let Err(e) = r {
        first.get_or_insert(e);
    }
}

/// The mode to apply, or `None` if the node's mode holds bits outside
/// [`MODE_BITS`] (damage, reported by the caller).
fn mode_to_apply(node: &Node, policy: &RestorePolicy, withheld: &mut Withheld) -> Option<u32> {
    if node.mode & !MODE_BITS != 0 {
        return None;
    }
    if !policy.setid && node.mode & SETID_BITS != 0 {
        withheld.setid += 1;
        return Some(node.mode & !SETID_BITS);
    }
    Some(node.mode)
}

fn owner_to_apply(node: &Node, policy: &RestorePolicy, as_root: bool, withheld: &mut Withheld) -> bool {
    if policy.owners {
        return true;
    }
    if as_root && (node.uid != 0 || node.gid != 0) {
        withheld.owners += 1;
    }
    false
}

/// Applies owner (when the policy allows), extended attributes, permissions and
/// mtime to the open file or directory `fd`, never by name, in the order that
/// keeps each from undoing another: owner first (a chown clears setuid/setgid
/// bits and file capabilities), then xattrs (including `security.capability`),
/// then mode, then times. Applies what it can and returns the first error.
pub fn apply_to_fd(fd: BorrowedFd<'_>, node: &Node, policy: &RestorePolicy, withheld: &mut Withheld) -> io::Result<()> {
    let mut first = None;
    if owner_to_apply(node, policy, is_root(), withheld) {
        let r = rustix::fs::fchown(fd, Some(Uid::from_raw(node.uid)), Some(Gid::from_raw(node.gid)));
        keep_first(&mut first, r.map_err(io::Error::from));
    }
    for x in &node.xattrs {
        if !policy.privileged_xattrs && privileged_xattr(&x.name.0) {
            withheld.xattrs += 1;
            continue;
        }
        let r = rustix::fs::fsetxattr(fd, OsStr::from_bytes(&x.name.0), &x.value.0, XattrFlags::empty());
        keep_first(&mut first, r.map_err(io::Error::from));
    }
    if let Some(mode) = mode_to_apply(node, policy, withheld) {
        keep_first(&mut first, rustix::fs::fchmod(fd, Mode::from_raw_mode(mode)).map_err(io::Error::from));
    }
    keep_first(&mut first, rustix::fs::futimens(fd, &times(node)).map_err(io::Error::from));
    first.map_or(Ok(()), Err)
}

fn times(node: &Node) -> Timestamps {
    Timestamps { last_access: Timespec { tv_sec: 0, tv_nsec: UTIME_OMIT }, last_modification: ts(node.mtime) }
}

/// Applies owner and mtime to the symlink `name` in directory `dir`, never
/// following it (symlinks have no mode of their own). Extended attributes of
/// symlinks are not restored: they cannot be set through a descriptor.
pub fn apply_to_symlink(
    dir: BorrowedFd<'_>,
    name: &[u8],
    node: &Node,
    policy: &RestorePolicy,
    withheld: &mut Withheld,
) -> io::Result<()> {
    let name = OsStr::from_bytes(name);
    let mut first = None;
    if owner_to_apply(node, policy, is_root(), withheld) {
        let (uid, gid) = (Some(Uid::from_raw(node.uid)), Some(Gid::from_raw(node.gid)));
        keep_first(&mut first, rustix::fs::chownat(dir, name, uid, gid, AtFlags::SYMLINK_NOFOLLOW).map_err(Into::into));
    }
    if !node.xattrs.is_empty() {
        first.get_or_insert(io::Error::other("extended attributes of symlinks are not restored"));
    }
    let r = rustix::fs::utimensat(dir, name, &times(node), AtFlags::SYMLINK_NOFOLLOW);
    keep_first(&mut first, r.map_err(Into::into));
    first.map_or(Ok(()), Err)
}

/// Creates the special file (FIFO or device node) `name` in directory `dir` and
/// applies its metadata. The new entry is opened without following symlinks and
/// without opening the device (`O_PATH`), checked to be what was created, and
/// every change goes through that handle, so that a name swapped in between is
/// never followed.
pub fn create_special(
    dir: BorrowedFd<'_>,
    name: &[u8],
    node: &Node,
    policy: &RestorePolicy,
    withheld: &mut Withheld,
) -> io::Result<()> {
    let ft = match node.kind {
        NodeKind::Fifo => FileType::Fifo,
        NodeKind::Chardev => FileType::CharacterDevice,
        NodeKind::Blockdev => FileType::BlockDevice,
        _ => return Err(io::Error::other("not a special file")),
    };
    let name = OsStr::from_bytes(name);
    rustix::fs::mknodat(dir, name, ft, Mode::from_raw_mode(0o600), node.rdev as _)?;
    let fd = rustix::fs::openat(dir, name, OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())?;
    if FileType::from_raw_mode(rustix::fs::fstat(&fd)?.st_mode) != ft {
        return Err(io::Error::other("replaced by another kind of entry while it was being restored"));
    }
    // An O_PATH handle serves chown directly; mode, xattrs and times go through
    // its /proc name, which resolves to the handle's own inode.
    let proc = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
    let mut first = None;
    if owner_to_apply(node, policy, is_root(), withheld) {
        let (uid, gid) = (Some(Uid::from_raw(node.uid)), Some(Gid::from_raw(node.gid)));
        keep_first(&mut first, rustix::fs::chownat(&fd, "", uid, gid, AtFlags::EMPTY_PATH).map_err(Into::into));
    }
    for x in &node.xattrs {
        if !policy.privileged_xattrs && privileged_xattr(&x.name.0) {
            withheld.xattrs += 1;
            continue;
        }
        keep_first(&mut first, xattr::set(&proc, OsStr::from_bytes(&x.name.0), &x.value.0));
    }
    if let Some(mode) = mode_to_apply(node, policy, withheld) {
        let r = rustix::fs::chmod(&proc, Mode::from_raw_mode(mode));
        keep_first(&mut first, r.map_err(Into::into));
    }
    keep_first(&mut first, rustix::fs::utimensat(CWD, &proc, &times(node), AtFlags::empty()).map_err(Into::into));
    first.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    fn read(path: &Path, previous: Option<&Node>) -> Node {
        let md = std::fs::symlink_metadata(path).unwrap();
        let name = path.file_name().unwrap().as_bytes();
        read_node(name, || path.to_path_buf(), &md, &NameCache::default(), previous).unwrap().0
    }

    fn marked(node: &Node) -> Node {
        let mut node = node.clone();
        node.xattrs = vec![Xattr { name: Bytes(b"user.from-the-parent".to_vec()), value: Bytes(b"1".to_vec()) }];
        node
    }

    #[test]
    fn an_entry_unchanged_since_its_parent_node_takes_its_attributes_and_target_without_reading() {
        let dir = tempfile::tempdir().unwrap();
        let (file, link) = (dir.path().join("file"), dir.path().join("link"));
        std::fs::write(&file, b"x").unwrap();
        symlink("file", &link).unwrap();
        let md = std::fs::symlink_metadata(&file).unwrap();
        let previous = marked(&read(&file, None));
        let never = || -> PathBuf { panic!("the entry was read again") };
        let (node, _) = read_node(b"file", never, &md, &NameCache::default(), Some(&previous)).unwrap();
        assert_eq!(node.xattrs, previous.xattrs);

        let mut previous_link = marked(&read(&link, None));
        previous_link.target = Some(Bytes(b"the parent's target".to_vec()));
        let md = std::fs::symlink_metadata(&link).unwrap();
        let (node, _) = read_node(b"link", never, &md, &NameCache::default(), Some(&previous_link)).unwrap();
        assert_eq!(node.target, previous_link.target);
        assert_eq!(node.xattrs, previous_link.xattrs);
    }

    #[test]
    fn an_entry_changed_since_its_parent_node_is_read_again() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, b"x").unwrap();
        let previous = marked(&read(&file, None));
        type Change = fn(&mut Node);
        let changes: [(&str, Change); 5] = [
            ("ctime", |n| n.ctime.1 ^= 1),
            ("mtime", |n| n.mtime.0 -= 1),
            ("inode", |n| n.inode += 1),
            ("device", |n| n.device ^= 1),
            ("type", |n| n.kind = NodeKind::Symlink),
        ];
        for (what, change) in changes {
            let mut other = previous.clone();
            change(&mut other);
            assert!(read(&file, Some(&other)).xattrs.is_empty(), "another {what}: the attributes are read");
        }
        let link = dir.path().join("link");
        symlink("file", &link).unwrap();
        let mut previous_link = read(&link, None);
        previous_link.target = Some(Bytes(b"elsewhere".to_vec()));
        previous_link.ctime.1 ^= 1;
        assert_eq!(read(&link, Some(&previous_link)).target, Some(Bytes(b"file".to_vec())));
    }

    #[test]
    fn an_attribute_set_after_the_parent_was_read_is_seen() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, b"x").unwrap();
        let previous = read(&file, None);
        // The kernel's timestamps may be as coarse as a clock tick (up to 10 ms):
        // the change below must come in a later one, as it does between backups.
        std::thread::sleep(std::time::Duration::from_millis(50));
        match xattr::set(&file, "user.added", b"later") {
            Err(e) if unsupported(&e) => {
                // No user attributes on this file system: changing the mode sets
                // the ctime all the same.
                std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
                assert!(!same_inode_since(&std::fs::symlink_metadata(&file).unwrap(), &previous));
            }
            r => {
                r.unwrap();
                let node = read(&file, Some(&previous));
                assert_eq!(node.xattrs.len(), 1, "the attribute set since is read");
                assert_eq!(node.xattrs[0].value.0, b"later");
            }
        }
    }
}
