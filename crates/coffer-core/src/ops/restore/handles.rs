//! Directory handles in the target, and every file system step of a restore made
//! relative to one. See docs/design.md#restore.
//!
//! Nothing is ever looked up by a path from the target down: each step opens or
//! creates one name in a directory already open, without following symlinks
//! (`O_NOFOLLOW`, `O_DIRECTORY`, `AT_SYMLINK_NOFOLLOW`), and files are created
//! with `O_EXCL`. A symlink planted or swapped in anywhere below the target is
//! thus never followed: the step fails, or (with `--overwrite`) removes the
//! symlink itself and creates the entry anew.

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};
use rustix::io::Errno;

/// An open directory of the target, shared by the walk and the writer.
pub(super) type Handle = Arc<OwnedFd>;

/// The name of a directory in the target, for messages and to find a
/// directory again from the target: a chain of names up to the target.
pub(super) struct DirName {
    parent: Option<Arc<DirName>>,
    /// The last component (the target's own path for the target).
    name: Vec<u8>,
}

impl DirName {
    /// The target itself.
    pub fn root(target: &Path) -> Arc<DirName> {
        Arc::new(DirName { parent: None, name: target.as_os_str().as_bytes().to_vec() })
    }

    /// The directory `name` in this one.
    pub fn child(self: &Arc<DirName>, name: &[u8]) -> Arc<DirName> {
        Arc::new(DirName { parent: Some(self.clone()), name: name.to_vec() })
    }

    /// The last component.
    pub fn name(&self) -> &[u8] {
        &self.name
    }

    /// The names from the target down to this directory (empty for the target).
    pub fn components(&self) -> Vec<&[u8]> {
        let mut out = Vec::new();
        let mut d = self;
        while let Some(p) = &d.parent {
            out.push(d.name.as_slice());
            d = p;
        }
        out.reverse();
        out
    }

    /// The directory's path (built only for messages).
    pub fn path(&self) -> PathBuf {
        let mut root = self;
        while let Some(p) = &root.parent {
            root = p;
        }
        let mut path = PathBuf::from(OsStr::from_bytes(&root.name));
        for c in self.components() {
            path.push(OsStr::from_bytes(c));
        }
        path
    }

    /// The path of entry `name` in this directory (built only for messages).
    pub fn join(&self, name: &[u8]) -> PathBuf {
        self.path().join(OsStr::from_bytes(name))
    }
}

impl Drop for DirName {
    /// Frees a long chain of names one by one rather than recursively.
    fn drop(&mut self) {
        let mut next = self.parent.take();
        while let Some(p) = next {
            next = match Arc::try_unwrap(p) {
                Ok(mut d) => d.parent.take(),
                Err(_) => None,
            };
        }
    }
}

/// One entry of the target: a name in an open directory.
pub(super) struct Place {
    pub dir: Handle,
    pub dir_name: Arc<DirName>,
    pub name: Vec<u8>,
}

impl Place {
    /// The entry's path (built only for messages).
    pub fn path(&self) -> PathBuf {
        self.dir_name.join(&self.name)
    }
}

fn name(n: &[u8]) -> &OsStr {
    OsStr::from_bytes(n)
}

/// Opens the target directory itself (the path the user gave, symlinks in it
/// included: that is the user's choice).
pub(super) fn open_target(target: &Path) -> io::Result<OwnedFd> {
    Ok(rustix::fs::open(target, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?)
}

/// Opens directory `n` in `dir`, never following a symlink.
pub(super) fn open_dir(dir: BorrowedFd<'_>, n: &[u8]) -> io::Result<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    Ok(rustix::fs::openat(dir, name(n), flags, Mode::empty())?)
}

/// Opens the directory `dir_name` by walking down from the target's handle
/// `root`, one name at a time, never following a symlink.
pub(super) fn open_from_root(root: &Handle, dir_name: &DirName) -> io::Result<Handle> {
    let mut h = root.clone();
    for c in dir_name.components() {
        h = Arc::new(open_dir(h.as_fd(), c)?);
    }
    Ok(h)
}

/// Whether something already stands at the name (`EEXIST`).
pub(super) fn exists(e: &io::Error) -> bool {
    e.raw_os_error() == Some(Errno::EXIST.raw_os_error())
}

/// Makes directory `n` in `dir` (mode 0700 until its own mode is applied, so
/// nobody else can add to it meanwhile) and opens it. A directory already there
/// is used as it is when `existing`; anything else there is an error, or with
/// `replace` is removed first.
pub(super) fn make_dir(dir: BorrowedFd<'_>, n: &[u8], existing: bool, replace: bool) -> io::Result<OwnedFd> {
    match rustix::fs::mkdirat(dir, name(n), Mode::from_raw_mode(0o700)) {
        Ok(()) => return open_dir(dir, n),
        Err(Errno::EXIST) => {}
        Err(e) => return Err(e.into()),
    }
    if !existing {
        return Err(Errno::EXIST.into());
    }
    match open_dir(dir, n) {
        Ok(fd) => Ok(fd),
        Err(e) if replace && matches!(Errno::from_io_error(&e), Some(Errno::NOTDIR | Errno::LOOP)) => {
            remove(dir, n)?;
            rustix::fs::mkdirat(dir, name(n), Mode::from_raw_mode(0o700))?;
            open_dir(dir, n)
        }
        Err(e) => Err(e),
    }
}

/// Creates regular file `n` in `dir` with `O_EXCL` (mode 0600 until its own
/// mode is applied); with `overwrite`, whatever stands there is removed first.
pub(super) fn create_file(dir: BorrowedFd<'_>, n: &[u8], overwrite: bool) -> io::Result<OwnedFd> {
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let open = || rustix::fs::openat(dir, name(n), flags, Mode::from_raw_mode(0o600));
    match open() {
        Ok(fd) => Ok(fd),
        Err(Errno::EXIST) if overwrite => {
            remove(dir, n)?;
            Ok(open()?)
        }
        Err(e) => Err(e.into()),
    }
}

/// Opens regular file `n` in `dir` for writing, never following a symlink, and
/// checks that it is still the file created as `(dev, ino)`.
pub(super) fn reopen_file(dir: BorrowedFd<'_>, n: &[u8], created: (u64, u64)) -> io::Result<OwnedFd> {
    let flags = OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(dir, name(n), flags, Mode::empty())?;
    if identity(fd.as_fd())? != created {
        return Err(replaced());
    }
    Ok(fd)
}

/// The error of a file found swapped for another while it was restored.
pub(super) fn replaced() -> io::Error {
    io::Error::other("replaced by another file while it was being restored")
}

/// What stands at name `n` in `dir` (never following a symlink), if anything.
pub(super) fn stat_at(dir: BorrowedFd<'_>, n: &[u8]) -> io::Result<Option<rustix::fs::Stat>> {
    match rustix::fs::statat(dir, name(n), AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(st)),
        Err(Errno::NOENT) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The names in directory `dir` (without `.` and `..`).
pub(super) fn list(dir: BorrowedFd<'_>) -> io::Result<Vec<Vec<u8>>> {
    let mut d = Dir::new(open_dir(dir, b".")?)?;
    let mut names = Vec::new();
    while let Some(e) = d.read() {
        let n = e?.file_name().to_bytes().to_vec();
        if n != b"." && n != b".." {
            names.push(n);
        }
    }
    Ok(names)
}

/// The device and inode of an open file.
pub(super) fn identity(fd: BorrowedFd<'_>) -> io::Result<(u64, u64)> {
    let st = rustix::fs::fstat(fd)?;
    Ok((st.st_dev, st.st_ino))
}

/// Runs `make` to create an entry at `n`; if something already stands there
/// and `overwrite`, removes it and runs `make` once more.
pub(super) fn make_entry(
    dir: BorrowedFd<'_>,
    n: &[u8],
    overwrite: bool,
    mut make: impl FnMut() -> io::Result<()>,
) -> io::Result<()> {
    match make() {
        Err(e) if overwrite && exists(&e) => {
            remove(dir, n)?;
            make()
        }
        r => r,
    }
}

/// Creates symlink `n` in `dir` pointing at `target`.
pub(super) fn symlink(dir: BorrowedFd<'_>, n: &[u8], target: &[u8]) -> io::Result<()> {
    Ok(rustix::fs::symlinkat(name(target), dir, name(n))?)
}

/// Links `n` in `dir` to file `first_name` in `first_dir` (never following a symlink).
pub(super) fn link(first_dir: BorrowedFd<'_>, first_name: &[u8], dir: BorrowedFd<'_>, n: &[u8]) -> io::Result<()> {
    Ok(rustix::fs::linkat(first_dir, name(first_name), dir, name(n), AtFlags::empty())?)
}

/// Removes `n` from `dir` if it is still the file created as `created`.
pub(super) fn remove_created(dir: BorrowedFd<'_>, n: &[u8], created: (u64, u64)) {
    if let Ok(st) = rustix::fs::statat(dir, name(n), AtFlags::SYMLINK_NOFOLLOW)
        && (st.st_dev, st.st_ino) == created
    {
        let _ = rustix::fs::unlinkat(dir, name(n), AtFlags::empty());
    }
}

/// How deep a directory in the way of an `--overwrite` restore may be: its
/// removal keeps one handle per level.
const MAX_REMOVE_DEPTH: usize = 4096;

/// Removes entry `n` of `dir`, and everything below it if it is a directory,
/// without following symlinks: every step is relative to a handle.
pub(super) fn remove(dir: BorrowedFd<'_>, n: &[u8]) -> io::Result<()> {
    let st = rustix::fs::statat(dir, name(n), AtFlags::SYMLINK_NOFOLLOW)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
        return Ok(rustix::fs::unlinkat(dir, name(n), AtFlags::empty())?);
    }
    // A stack of open directories, each with the name it has in the one below.
    let mut stack: Vec<(Dir, Vec<u8>)> = vec![(Dir::new(open_dir(dir, n)?)?, n.to_vec())];
    while !stack.is_empty() {
        let depth = stack.len();
        let entry = match stack.last_mut().expect("not empty").0.read() {
            Some(e) => e?,
            None => {
                let (done, done_name) = stack.pop().expect("not empty");
                drop(done);
                let parent = match stack.last() {
                    Some((p, _)) => p.fd()?,
                    None => dir,
                };
                rustix::fs::unlinkat(parent, name(&done_name), AtFlags::REMOVEDIR)?;
                continue;
            }
        };
        let child = entry.file_name().to_bytes().to_vec();
        if child == b"." || child == b".." {
            continue;
        }
        let top = &mut stack.last_mut().expect("not empty").0;
        let fd = top.fd()?;
        let is_dir = match entry.file_type() {
            FileType::Unknown => {
                let st = rustix::fs::statat(fd, name(&child), AtFlags::SYMLINK_NOFOLLOW)?;
                FileType::from_raw_mode(st.st_mode) == FileType::Directory
            }
            t => t == FileType::Directory,
        };
        if !is_dir {
            rustix::fs::unlinkat(fd, name(&child), AtFlags::empty())?;
            continue;
        }
        if depth >= MAX_REMOVE_DEPTH {
            return Err(io::Error::other(format!(
                "a directory more than {MAX_REMOVE_DEPTH} levels deep is in the way: remove it, then restore again"
            )));
        }
        let sub = Dir::new(open_dir(fd, &child)?)?;
        stack.push((sub, child));
    }
    Ok(())
}
