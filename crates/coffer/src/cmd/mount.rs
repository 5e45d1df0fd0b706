//! `coffer mount`: serves the read-only snapshot file system of
//! `coffer_core::vfs` through FUSE (the `fuser` crate) until Ctrl-C, SIGTERM or
//! an unmount from outside (`fusermount3 -u`, `umount`). See
//! docs/design.md#mount.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use coffer_core::vfs::access::{self, Access, Caller};
use coffer_core::vfs::{Attr, Kind, Listing, Vfs, VfsError, VfsOptions};
use fuser::{
    Config, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, MountOption, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyXattr, Request, Session, SessionACL,
};

use crate::args::{GlobalArgs, MountArgs};
use crate::{exit, repo_open};

/// How long the kernel may keep what a snapshot holds: it never changes.
const SNAPSHOT_TTL: Duration = Duration::from_secs(24 * 3600);
/// How long the kernel may keep the made-up directories, which change as
/// snapshots are added and removed.
const LAYOUT_TTL: Duration = Duration::from_secs(1);
/// The kernel's read-ahead window.
const READAHEAD: u32 = 1 << 20;

struct Fs {
    vfs: Vfs,
    /// Whether other users reach the mount (`--allow-other`): their access is
    /// then checked here as well as by the kernel (`default_permissions`).
    shared: bool,
}

/// The caller of a request: its ids, and its supplementary groups as
/// `/proc/PID/status` lists them (none when that cannot be read, which can
/// only refuse more).
fn caller(req: &Request) -> Caller {
    let groups = std::fs::read_to_string(format!("/proc/{}/status", req.pid()))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Groups:"))
                .map(|g| g.split_whitespace().filter_map(|n| n.parse().ok()).collect())
        })
        .unwrap_or_default();
    Caller { uid: req.uid(), gid: req.gid(), groups }
}

impl Fs {
    /// Whether the caller of `req` may `want` inode `ino` (always, on a mount
    /// only its owner reaches: FUSE refuses other users' requests there).
    fn allowed(&self, req: &Request, ino: u64, want: Access) -> Result<(), Errno> {
        if !self.shared {
            return Ok(());
        }
        let attr = self.vfs.getattr(ino).map_err(|e| errno(&e))?;
        if access::permits(&attr, &caller(req), want) { Ok(()) } else { Err(Errno::EACCES) }
    }
}

/// The mount options: read-only, named coffer, and with `allow_other` the
/// kernel's own permission check on every access by the recorded owners and
/// modes (`default_permissions`), without which any user could read any file.
fn mount_options(allow_other: bool) -> Vec<MountOption> {
    let mut options =
        vec![MountOption::RO, MountOption::FSName("coffer".into()), MountOption::Subtype("coffer".into())];
    if allow_other {
        options.push(MountOption::DefaultPermissions);
    }
    options
}

fn errno(e: &VfsError) -> Errno {
    match e {
        VfsError::NotFound => Errno::ENOENT,
        VfsError::NotDir => Errno::ENOTDIR,
        VfsError::Invalid => Errno::EINVAL,
        VfsError::NoXattr => Errno::ENODATA,
        VfsError::Io(_) => Errno::EIO,
    }
}

fn file_type(k: Kind) -> FileType {
    match k {
        Kind::Dir => FileType::Directory,
        Kind::File => FileType::RegularFile,
        Kind::Symlink => FileType::Symlink,
        Kind::Fifo => FileType::NamedPipe,
        Kind::Chardev => FileType::CharDevice,
        Kind::Blockdev => FileType::BlockDevice,
        Kind::Socket => FileType::Socket,
    }
}

impl Fs {
    fn ttl(&self, ino: u64) -> Duration {
        if self.vfs.is_layout(ino) { LAYOUT_TTL } else { SNAPSHOT_TTL }
    }
}

fn file_attr(a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.size.div_ceil(512),
        atime: a.mtime,
        mtime: a.mtime,
        ctime: a.ctime,
        crtime: a.mtime,
        kind: file_type(a.kind),
        perm: a.perm,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: 4096,
        flags: 0,
    }
}

fn xattr_reply(data: Result<Vec<u8>, VfsError>, size: u32, reply: ReplyXattr) {
    match data {
        Err(e) => reply.error(errno(&e)),
        Ok(d) if size == 0 => reply.size(d.len() as u32),
        Ok(d) if d.len() > size as usize => reply.error(Errno::ERANGE),
        Ok(d) => reply.data(&d),
    }
}

impl Filesystem for Fs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let _ = config.set_max_readahead(READAHEAD);
        // Listings carry attributes (one request per buffer of entries rather
        // than a lookup per entry), when the kernel finds them used; lookups in
        // one directory run in parallel; symlink targets are cached. A kernel
        // without one of these simply does without it.
        for flag in [
            InitFlags::FUSE_DO_READDIRPLUS,
            InitFlags::FUSE_READDIRPLUS_AUTO,
            InitFlags::FUSE_PARALLEL_DIROPS,
            InitFlags::FUSE_CACHE_SYMLINKS,
        ] {
            let _ = config.add_capabilities(flag);
        }
        Ok(())
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if let Err(e) = self.allowed(req, parent.0, Access::Search) {
            return reply.error(e);
        }
        match self.vfs.lookup(parent.0, name.as_bytes()) {
            Ok(a) => reply.entry(&self.ttl(a.ino), &file_attr(&a), Generation(0)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.vfs.forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.vfs.getattr(ino.0) {
            Ok(a) => reply.attr(&self.ttl(a.ino), &file_attr(&a)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.vfs.readlink(ino.0) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if flags.0 & libc::O_ACCMODE != libc::O_RDONLY {
            return reply.error(Errno::EROFS);
        }
        if let Err(e) = self.allowed(req, ino.0, Access::Read) {
            return reply.error(e);
        }
        match self.vfs.open(ino.0) {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::FOPEN_KEEP_CACHE),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyData,
    ) {
        match self.vfs.read(fh.0, offset, size) {
            Ok(d) => reply.data(&d),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.vfs.release(fh.0);
        reply.ok();
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        if let Err(e) = self.allowed(req, ino.0, Access::Read) {
            return reply.error(e);
        }
        match self.vfs.opendir(ino.0) {
            Ok(fh) => {
                let flags = if self.vfs.is_layout(ino.0) { FopenFlags::empty() } else { FopenFlags::FOPEN_CACHE_DIR };
                reply.opened(FileHandle(fh), flags)
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        // Offsets 1 and 2 are `.` and `..`; the listing's own follow.
        if offset == 0 && reply.add(ino, 1, FileType::Directory, ".") {
            return reply.ok();
        }
        if offset <= 1 && reply.add(ino, 2, FileType::Directory, "..") {
            return reply.ok();
        }
        let r = self.vfs.readdir(fh.0, offset.saturating_sub(2), Listing::Names, &mut |e, _, off| {
            !reply.add(INodeNo(e.ino), off + 2, file_type(e.kind), OsStr::from_bytes(&e.name))
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readdirplus(&self, _req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectoryPlus) {
        // `.` and `..` carry no attributes and count as no lookup; the kernel
        // skips them.
        let dir = match self.vfs.getattr(ino.0) {
            Ok(a) => file_attr(&a),
            Err(e) => return reply.error(errno(&e)),
        };
        let none = Duration::ZERO;
        if offset == 0 && reply.add(ino, 1, ".", &none, &dir, Generation(0)) {
            return reply.ok();
        }
        if offset <= 1 && reply.add(ino, 2, "..", &none, &dir, Generation(0)) {
            return reply.ok();
        }
        let r = self.vfs.readdir(fh.0, offset.saturating_sub(2), Listing::Plus, &mut |e, a, off| {
            let Some(a) = a else { return false };
            !reply.add(
                INodeNo(e.ino),
                off + 2,
                OsStr::from_bytes(&e.name),
                &self.ttl(e.ino),
                &file_attr(a),
                Generation(0),
            )
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn releasedir(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        self.vfs.releasedir(fh.0);
        reply.ok();
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        xattr_reply(self.vfs.getxattr(ino.0, name.as_bytes()), size, reply);
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        xattr_reply(self.vfs.listxattr(ino.0), size, reply);
    }
}

/// Blocks SIGINT, SIGTERM and SIGHUP in this thread and the threads it starts
/// later, so that one thread can wait for them.
fn block_signals() -> libc::sigset_t {
    // SAFETY: plain libc calls on a local signal set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, s);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

pub fn run(global: &GlobalArgs, a: &MountArgs) -> Result<u8> {
    // Before any thread starts, so that every thread leaves them to the waiter below.
    let set = block_signals();
    let repo = Arc::new(repo_open::open(global)?);
    let json = global.json;
    let on_damage = Box::new(move |line: &str| {
        if json {
            eprintln!("{}", serde_json::json!({"type": "error", "message": line}));
        } else {
            eprintln!("error: {line}");
        }
    });
    // SAFETY: getuid and getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let opts = VfsOptions {
        cache_bytes: usize::try_from(a.cache_size).unwrap_or(usize::MAX),
        uid,
        gid,
        ..VfsOptions::default()
    };
    let vfs = Vfs::new(repo, opts, on_damage).context("reading the list of snapshots")?;
    let mut config = Config::default();
    config.mount_options = mount_options(a.allow_other);
    if a.allow_other {
        config.acl = SessionACL::All;
    }
    config.n_threads = Some(4);
    let mut session = Session::new(Fs { vfs, shared: a.allow_other }, &a.mountpoint, &config).with_context(|| {
        format!(
            "mounting at {}: it must be an empty directory, and FUSE must be available (/dev/fuse; \
             fusermount3 when not root)",
            a.mountpoint.display()
        )
    })?;
    // Shares the mount with the session (which unmounts when it ends): the
    // signal waiter unmounts through it, and the session then returns.
    let mut unmounter = session.unmount_callable();
    if !global.quiet {
        eprintln!("mounted at {}; Ctrl-C or `fusermount3 -u` unmounts", a.mountpoint.display());
    }
    let mountpoint = a.mountpoint.clone();
    std::thread::spawn(move || {
        let mut sig = 0;
        // SAFETY: waits on the signal set blocked above.
        unsafe { libc::sigwait(&set, &mut sig) };
        if let Err(e) = unmounter.unmount() {
            eprintln!("error: unmounting {}: {e}; run `fusermount3 -u {0}`", mountpoint.display());
        }
    });
    session.run().context("serving the file system")?;
    Ok(exit::OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_mount_has_the_kernel_check_permissions() {
        let shared = mount_options(true);
        assert!(shared.contains(&MountOption::DefaultPermissions), "{shared:?}");
        assert!(shared.contains(&MountOption::RO));
        assert!(!mount_options(false).contains(&MountOption::DefaultPermissions));
    }
}
