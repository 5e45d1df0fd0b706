//! The local backend: a repository in a directory of the local file system,
//! written and read with plain system calls (no runtime).
//!
//! The storage is untrusted (docs/design.md#threat-model), and a repository may sit
//! in a directory that other users can write to. So nothing planted inside it may
//! redirect coffer: every path is walked from a handle on the repository's root,
//! one component at a time, with `openat(…, O_NOFOLLOW | O_DIRECTORY)`; objects are
//! opened without following a final symbolic link, and files are created and renamed
//! relative to directory handles. A symbolic link (or any other non-regular file)
//! where an object or directory should be is refused, never followed.
//!
//! Writes are atomic: the bytes go to a new file in `tmp/`, which is synced and then
//! renamed into place, and every directory from the object's parent up to the root
//! is synced after it, so the object survives a power cut before anything refers to
//! it. `tmp/` is created on the first write only, so a read-only repository (a
//! mounted backup disk) serves every read.
//!
//! Files are created with the mode of `config` (directories with the matching
//! search bits), or, before `config` exists, with the mode given when the backend
//! was made: owner only by default.

use std::ffi::CStr;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use rustix::fs::{AtFlags, CWD, FileType, Mode, OFlags};
use rustix::io::Errno;

use super::{Backend, BackendError, BackendResult, ErrorKind, ObjectInfo};

/// The directory of temporary files and spool files, under the root.
const TMP_DIR: &str = "tmp";

/// How deep below a listed prefix objects may lie (`data/<fan-out>/<id>` is one
/// level below `data/`). Deeper entries are not coffer's and are not listed, so a
/// planted deep directory chain costs nothing.
const LIST_DEPTH: usize = 2;

/// A file copied into place (when a spool file cannot be linked) is copied in
/// pieces of this size.
const COPY_PIECE: u64 = 1 << 20;

/// The permissions of a repository's files and directories.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Modes {
    /// Mode of object files.
    pub file: u32,
    /// Mode of directories.
    pub dir: u32,
}

impl Modes {
    /// Readable and writable by the owner only: 0600 files, 0700 directories.
    pub const PRIVATE: Modes = Modes { file: 0o600, dir: 0o700 };
    /// Readable by the group too: 0640 files, 0750 directories.
    pub const GROUP_READABLE: Modes = Modes { file: 0o640, dir: 0o750 };

    /// The modes matching a file mode (that of `config`): its read and write
    /// bits, and for directories the search bit wherever it may read.
    pub fn from_file_mode(mode: u32) -> Modes {
        let file = mode & 0o666;
        Modes { file, dir: file | ((file & 0o444) >> 2) }
    }
}

/// A [`Backend`] over a local directory.
pub struct LocalBackend {
    root: PathBuf,
    root_fd: OwnedFd,
    /// Modes before `config` exists (while a repository is being created).
    initial: Modes,
    /// Modes taken from `config`, once it exists.
    modes: OnceLock<Modes>,
    /// Requests in flight when many objects are fetched.
    connections: usize,
    /// Whether writes are synced to the disk (always, except for a cache).
    sync: bool,
}

/// What an errno means for coffer, and what to do about it.
fn classify(e: Errno) -> (ErrorKind, String) {
    let os = std::io::Error::from(e);
    let (kind, text) = match e {
        Errno::NOENT => (ErrorKind::NotFound, String::new()),
        Errno::NOSPC | Errno::DQUOT => (
            ErrorKind::Permanent,
            "the file system holding the repository is full, or the user's quota is used up: \
             free space (or move the repository), then run the command again"
                .to_string(),
        ),
        Errno::ROFS => (
            ErrorKind::Permanent,
            "the repository is on a read-only file system: reading commands work, but to back up, \
             forget or prune, make it writable (remount it read-write)"
                .to_string(),
        ),
        Errno::ACCESS | Errno::PERM => (
            ErrorKind::Permanent,
            "permission denied: check the owner and mode of the repository's files, or run coffer \
             as a user who may use them"
                .to_string(),
        ),
        Errno::LOOP => (
            ErrorKind::Permanent,
            "a symbolic link inside the repository: coffer follows no links there; replace it with \
             the object or directory it points to"
                .to_string(),
        ),
        Errno::NOTDIR => (
            ErrorKind::Permanent,
            "a repository directory is not a directory (or is a symbolic link, which coffer does \
             not follow)"
                .to_string(),
        ),
        Errno::INTR | Errno::AGAIN | Errno::TIMEDOUT => (ErrorKind::Transient, String::new()),
        _ => (ErrorKind::Permanent, String::new()),
    };
    if text.is_empty() { (kind, os.to_string()) } else { (kind, format!("{text} ({os})")) }
}

fn err(object: &str, e: Errno) -> BackendError {
    let (kind, message) = classify(e);
    BackendError::new(kind, object, message)
}

/// A local I/O error about `object`, classified and explained like the local
/// backend's own (a full disk or read-only file system is permanent, with what
/// to do about it).
pub fn io_err(object: &str, e: std::io::Error) -> BackendError {
    match e.raw_os_error() {
        Some(n) => err(object, Errno::from_raw_os_error(n)),
        None => BackendError::new(ErrorKind::Permanent, object, e.to_string()),
    }
}

/// An object that is there but is no regular file (a directory, a device, a FIFO).
fn not_a_file(object: &str) -> BackendError {
    BackendError::new(
        ErrorKind::Permanent,
        object,
        "not a regular file: coffer reads only regular files inside the repository; remove it",
    )
}

/// The components of an object name, checked: relative, no empty, `.` or `..`
/// component.
fn components(name: &str) -> BackendResult<Vec<&str>> {
    let parts: Vec<&str> = name.trim_end_matches('/').split('/').collect();
    if name.is_empty() || parts.iter().any(|p| p.is_empty() || *p == "." || *p == ".." || p.contains('\0')) {
        return Err(BackendError::new(ErrorKind::Permanent, name, "not a valid object name"));
    }
    Ok(parts)
}

/// Opens the object at `path` (a valid object name: see [`components`]) below
/// `root` in one call where the kernel offers
/// one that follows no link at any step and never leaves `root` (Linux's
/// `openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`): a link anywhere on the
/// way fails it with `ELOOP`, as the walk one component at a time would. `None`
/// where that call is not available (a kernel before 5.6, or a sandbox that
/// refuses it): the caller walks.
#[cfg(target_os = "linux")]
fn open_beneath(root: &OwnedFd, path: &str, flags: OFlags) -> Option<rustix::io::Result<OwnedFd>> {
    use rustix::fs::ResolveFlags;
    use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
    static UNAVAILABLE: AtomicBool = AtomicBool::new(false);
    if UNAVAILABLE.load(Relaxed) {
        return None;
    }
    let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
    match rustix::fs::openat2(root, path, flags, Mode::empty(), resolve) {
        Err(Errno::NOSYS) => {
            UNAVAILABLE.store(true, Relaxed);
            None
        }
        // Refused by a sandbox's filter, or a rename racing the lookup: walk.
        Err(Errno::PERM | Errno::AGAIN) => None,
        r => Some(r),
    }
}

#[cfg(not(target_os = "linux"))]
fn open_beneath(_: &OwnedFd, _: &str, _: OFlags) -> Option<rustix::io::Result<OwnedFd>> {
    None
}

/// How objects are opened for reading: a final link is refused, and a FIFO or
/// device does not block the open.
const READ_FLAGS: OFlags = OFlags::RDONLY.union(OFlags::NOFOLLOW).union(OFlags::NONBLOCK).union(OFlags::CLOEXEC);

fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

/// Reads all of object `name` through `file`, `size` bytes as it was opened,
/// refusing more than `max`. The size is only a hint for the buffer: the file is
/// read through the open handle, and never past `max`, however it changes meanwhile.
fn read_all(file: impl Read, name: &str, size: u64, max: u64) -> BackendResult<Vec<u8>> {
    if size > max {
        return Err(BackendError::too_large(name, size, max));
    }
    let mut buf = Vec::with_capacity(size as usize);
    file.take(max.saturating_add(1)).read_to_end(&mut buf).map_err(|e| io_err(name, e))?;
    if buf.len() as u64 > max {
        return Err(BackendError::too_large(name, buf.len() as u64, max));
    }
    Ok(buf)
}

/// Opens a directory coffer keeps for this user (a cache, the local state)
/// without following a link: `dir` must be a directory owned by the user running
/// coffer, else it is refused (a link planted there would send coffer's writes
/// elsewhere, a directory of another user would let that user read or change
/// what coffer keeps). One others may read or enter is made owner-only (0700).
/// Directories above `dir` may be links.
pub fn open_private_dir(dir: &Path) -> BackendResult<OwnedFd> {
    let location = dir.display().to_string();
    let fd = rustix::fs::open(dir, dir_flags(), Mode::empty()).map_err(|e| match e {
        Errno::LOOP | Errno::NOTDIR => BackendError::new(
            ErrorKind::Permanent,
            &location,
            "is a symbolic link or not a directory: coffer does not follow it there; remove it (coffer creates \
             the directory again)",
        ),
        e => err(&location, e),
    })?;
    let st = rustix::fs::fstat(&fd).map_err(|e| err(&location, e))?;
    let me = rustix::process::geteuid().as_raw();
    if st.st_uid != me {
        return Err(BackendError::new(
            ErrorKind::Permanent,
            &location,
            format!(
                "is owned by user {} and coffer runs as user {me}: another user could read or change what coffer \
                 keeps there; remove it, or give a directory of your own",
                st.st_uid
            ),
        ));
    }
    if st.st_mode & 0o077 != 0 {
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o700)).map_err(|e| err(&location, e))?;
    }
    Ok(fd)
}

/// A random name for a temporary file in `tmp/`.
fn temp_name() -> String {
    format!(".{}.tmp", hex::encode(crate::random_array::<12>()))
}

impl LocalBackend {
    /// The backend over the directory `root`, which must exist. Files written
    /// before the repository's `config` exists get owner-only modes.
    pub fn open(root: &Path) -> BackendResult<Self> {
        Self::with_modes(root, Modes::PRIVATE)
    }

    /// The backend over the directory `root`; files written before `config`
    /// exists (while creating a repository) get `initial`. The root itself may be
    /// reached through symbolic links: it is what the user named.
    pub fn with_modes(root: &Path, initial: Modes) -> BackendResult<Self> {
        let location = root.display().to_string();
        let root_fd = rustix::fs::open(root, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
            .map_err(|e| err(&location, e))?;
        Ok(LocalBackend {
            root: root.to_path_buf(),
            root_fd,
            initial,
            modes: OnceLock::new(),
            connections: super::local_connections(),
            sync: true,
        })
    }

    /// The backend over a directory coffer keeps for this user (a cache), which
    /// must exist and is opened by [`open_private_dir`]. Files get `modes`.
    pub fn private_dir(root: &Path, modes: Modes) -> BackendResult<Self> {
        Ok(LocalBackend {
            root: root.to_path_buf(),
            root_fd: open_private_dir(root)?,
            initial: modes,
            modes: OnceLock::new(),
            connections: super::local_connections(),
            sync: true,
        })
    }

    /// The same backend fetching with `n` requests in flight (at least one)
    /// instead of one per core.
    pub fn with_connections(mut self, n: usize) -> Self {
        self.connections = n.max(1);
        self
    }

    /// The same backend writing without syncing files and directories: a write
    /// is still atomic for every reader, but may be lost, or left as an empty or
    /// partial file, by a power cut. Only for a cache whose entries are verified
    /// on every read (docs/design.md#local-cache).
    pub fn without_sync(mut self) -> Self {
        self.sync = false;
        self
    }

    /// Sets the modification time of object `name` to now (reached without
    /// following links): the local cache's record of last use.
    pub fn touch(&self, name: &str) -> BackendResult<()> {
        let (file, _) = self.open_object(name)?;
        file.set_modified(SystemTime::now()).map_err(|e| io_err(name, e))
    }

    /// [`Backend::read_max`], also setting the object's modification time to
    /// now (through the handle read) unless it is more recent than `fresh`: the
    /// local cache's record of last use, kept to within `fresh`. A time that
    /// cannot be set is left as it was.
    pub fn read_max_used(&self, name: &str, max: u64, fresh: Duration) -> BackendResult<Vec<u8>> {
        let (file, st) = self.open_stat(name)?;
        let bytes = read_all(&file, name, st.st_size.max(0) as u64, max)?;
        let now = SystemTime::now();
        let used = u64::try_from(st.st_mtime)
            .ok()
            .map(|secs| SystemTime::UNIX_EPOCH + Duration::new(secs, st.st_mtime_nsec as u32));
        if !used.is_some_and(|t| now.duration_since(t).is_ok_and(|age| age <= fresh)) {
            // Only a record for eviction: a read it fails to update still served.
            let _ = file.set_modified(now);
        }
        Ok(bytes)
    }

    /// Like [`Backend::list`], each object with its modification time in
    /// nanoseconds since the Unix epoch.
    pub fn list_with_mtime(&self, prefix: &str) -> BackendResult<Vec<(ObjectInfo, i64)>> {
        self.list_entries(prefix)
    }

    /// The modes for new files and directories: those of `config` once it exists.
    fn modes(&self) -> Modes {
        if let Some(m) = self.modes.get() {
            return *m;
        }
        match rustix::fs::statat(&self.root_fd, "config", AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::RegularFile => {
                *self.modes.get_or_init(|| Modes::from_file_mode(st.st_mode))
            }
            _ => self.initial,
        }
    }

    /// Opens the directories `dirs` below the root one by one, never following a
    /// link; with `create`, makes those that are missing. Returns their handles,
    /// outermost first.
    fn walk(&self, object: &str, dirs: &[&str], create: bool) -> BackendResult<Vec<OwnedFd>> {
        let mut fds: Vec<OwnedFd> = Vec::with_capacity(dirs.len());
        for d in dirs {
            let parent = fds.last().map_or(self.root_fd.as_fd(), |f| f.as_fd());
            let fd = match rustix::fs::openat(parent, *d, dir_flags(), Mode::empty()) {
                Ok(fd) => fd,
                Err(Errno::NOENT) if create => {
                    let mode = self.modes().dir;
                    match rustix::fs::mkdirat(parent, *d, Mode::from_raw_mode(mode)) {
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(e) => return Err(err(object, e)),
                    }
                    let fd = rustix::fs::openat(parent, *d, dir_flags(), Mode::empty()).map_err(|e| err(object, e))?;
                    // The mode given to mkdir is masked by the umask; set it exactly.
                    rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode)).map_err(|e| err(object, e))?;
                    fd
                }
                Err(e) => return Err(err(object, e)),
            };
            fds.push(fd);
        }
        Ok(fds)
    }

    /// Opens object `name` for reading: a regular file reached without following
    /// any link. FIFOs and devices are refused without blocking on them.
    fn open_object(&self, name: &str) -> BackendResult<(File, u64)> {
        let (file, st) = self.open_stat(name)?;
        Ok((file, st.st_size.max(0) as u64))
    }

    /// [`LocalBackend::open_object`], with the status the check was made on.
    fn open_stat(&self, name: &str) -> BackendResult<(File, rustix::fs::Stat)> {
        let parts = components(name)?;
        let fd = match open_beneath(&self.root_fd, name.trim_end_matches('/'), READ_FLAGS) {
            Some(opened) => opened.map_err(|e| err(name, e))?,
            None => self.open_walking(name, &parts)?,
        };
        let st = rustix::fs::fstat(&fd).map_err(|e| err(name, e))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(not_a_file(name));
        }
        Ok((File::from(fd), st))
    }

    /// Opens object `name` (its `parts`) for reading by walking to it one
    /// directory at a time, following no link.
    fn open_walking(&self, name: &str, parts: &[&str]) -> BackendResult<OwnedFd> {
        let (last, dirs) = parts.split_last().expect("at least one component");
        let fds = self.walk(name, dirs, false)?;
        let parent = fds.last().map_or(self.root_fd.as_fd(), |f| f.as_fd());
        rustix::fs::openat(parent, *last, READ_FLAGS, Mode::empty()).map_err(|e| err(name, e))
    }

    /// Syncs the directories of a write: `fds` (outermost first) and the root.
    fn sync_dirs(&self, name: &str, fds: &[OwnedFd]) -> BackendResult<()> {
        for fd in fds.iter().rev().map(|f| f.as_fd()).chain([self.root_fd.as_fd()]) {
            rustix::fs::fsync(fd).map_err(|e| {
                let (kind, m) = classify(e);
                BackendError::new(kind, name, format!("cannot sync directory: {m}"))
            })?;
        }
        Ok(())
    }

    /// Writes an object by filling a new file in `tmp/` with `fill`, syncing it,
    /// and renaming it into place.
    fn write_with(&self, name: &str, fill: impl FnOnce(&mut File) -> std::io::Result<()>) -> BackendResult<()> {
        self.put(name, fill, true).map(|_| ())
    }

    /// Fills a new file in `tmp/` with `fill`, syncs it, and puts it in place:
    /// with `replace`, by a rename over whatever is there; without, by a link,
    /// which fails if the name exists (then `Ok(false)`, nothing changed).
    fn put(
        &self,
        name: &str,
        fill: impl FnOnce(&mut File) -> std::io::Result<()>,
        replace: bool,
    ) -> BackendResult<bool> {
        let parts = components(name)?;
        let (last, dirs) = parts.split_last().expect("at least one component");
        let fds = self.walk(name, dirs, true)?;
        let parent = fds.last().map_or(self.root_fd.as_fd(), |f| f.as_fd());
        let tmp = self.walk(name, &[TMP_DIR], true)?.pop().expect("one directory");
        let tname = temp_name();
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let mode = Mode::from_raw_mode(self.modes().file);
        let fd = rustix::fs::openat(&tmp, tname.as_str(), flags, mode).map_err(|e| err(name, e))?;
        let mut file = File::from(fd);
        let filled = rustix::fs::fchmod(&file, mode)
            .map_err(std::io::Error::from)
            .and_then(|()| fill(&mut file))
            .and_then(|()| if self.sync { file.sync_all() } else { Ok(()) })
            .map_err(|e| io_err(name, e));
        let placed = filled.and_then(|()| {
            if replace {
                return rustix::fs::renameat(&tmp, tname.as_str(), parent, *last)
                    .map(|()| true)
                    .map_err(|e| err(name, e));
            }
            let linked = match rustix::fs::linkat(&tmp, tname.as_str(), parent, *last, AtFlags::empty()) {
                Ok(()) => Ok(true),
                Err(Errno::EXIST) => Ok(false),
                Err(e) => Err(err(name, e)),
            };
            let _ = rustix::fs::unlinkat(&tmp, tname.as_str(), AtFlags::empty());
            linked
        });
        if placed.is_err() {
            let _ = rustix::fs::unlinkat(&tmp, tname.as_str(), AtFlags::empty());
        }
        let created = placed?;
        if created && self.sync {
            self.sync_dirs(name, &fds)?;
        }
        Ok(created)
    }

    /// A new unnamed file in `tmp/` (reached without following links), readable
    /// and writable by the owner only: `O_TMPFILE` where the file system has it,
    /// else a new file whose name is removed at once.
    fn unnamed_spool_file(&self) -> BackendResult<File> {
        let tmp = self.walk(TMP_DIR, &[TMP_DIR], true)?.pop().expect("one directory");
        let mode = Mode::from_raw_mode(0o600);
        match rustix::fs::openat(&tmp, ".", OFlags::RDWR | OFlags::TMPFILE | OFlags::CLOEXEC, mode) {
            Ok(fd) => return Ok(File::from(fd)),
            Err(Errno::OPNOTSUPP | Errno::ISDIR | Errno::INVAL) => {}
            Err(e) => return Err(err(TMP_DIR, e)),
        }
        let name = temp_name();
        let flags = OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&tmp, name.as_str(), flags, mode).map_err(|e| err(TMP_DIR, e))?;
        rustix::fs::unlinkat(&tmp, name.as_str(), AtFlags::empty()).map_err(|e| err(TMP_DIR, e))?;
        Ok(File::from(fd))
    }

    /// Gives an unnamed spool file the name of the object it holds, instead of
    /// copying it (the spool directory is on the repository's file system). The
    /// file is synced first (a name is given only to complete content) and gets the
    /// repository's file mode. `Ok(false)` when it cannot be linked (it holds more
    /// than the object, it has a name, `/proc` is missing, or the object exists
    /// already, as after a retry): the caller copies it then.
    fn link_spool(&self, name: &str, file: &File, len: u64) -> BackendResult<bool> {
        let st = rustix::fs::fstat(file).map_err(|e| err(name, e))?;
        if st.st_size.max(0) as u64 != len || st.st_nlink != 0 {
            return Ok(false);
        }
        let parts = components(name)?;
        let (last, dirs) = parts.split_last().expect("at least one component");
        let fds = self.walk(name, dirs, true)?;
        let parent: BorrowedFd<'_> = fds.last().map_or(self.root_fd.as_fd(), |f| f.as_fd());
        file.sync_all().map_err(|e| io_err(name, e))?;
        rustix::fs::fchmod(file, Mode::from_raw_mode(self.modes().file)).map_err(|e| err(name, e))?;
        let proc_path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(file));
        match rustix::fs::linkat(CWD, proc_path.as_str(), parent, *last, AtFlags::SYMLINK_FOLLOW) {
            Ok(()) => {
                self.sync_dirs(name, &fds)?;
                Ok(true)
            }
            Err(e @ (Errno::NOSPC | Errno::DQUOT | Errno::ROFS)) => Err(err(name, e)),
            Err(_) => Ok(false),
        }
    }
}

impl Backend for LocalBackend {
    fn location(&self) -> String {
        self.root.display().to_string()
    }

    fn connections(&self) -> usize {
        self.connections
    }

    fn read_max(&self, name: &str, max: u64) -> BackendResult<Vec<u8>> {
        let (file, size) = self.open_object(name)?;
        read_all(file, name, size, max)
    }

    fn read_range(&self, name: &str, offset: u64, len: u64) -> BackendResult<Vec<u8>> {
        if len == 0 {
            return Ok(Vec::new());
        }
        let (mut file, size) = self.open_object(name)?;
        let want = len.min(size.saturating_sub(offset));
        let mut buf = Vec::with_capacity(usize::try_from(want).unwrap_or(usize::MAX));
        if want > 0 {
            file.seek(SeekFrom::Start(offset)).map_err(|e| io_err(name, e))?;
            // `read_to_end` fills the spare capacity without zeroing it first. An
            // object that grew since `fstat` (none should) is read to `len` all the same.
            file.take(len).read_to_end(&mut buf).map_err(|e| io_err(name, e))?;
        }
        Ok(buf)
    }

    fn write(&self, name: &str, data: Vec<u8>) -> BackendResult<()> {
        self.write_with(name, |f| f.write_all(&data))
    }

    fn write_new(&self, name: &str, data: Vec<u8>) -> BackendResult<bool> {
        self.put(name, |f| f.write_all(&data), false)
    }

    fn write_file(&self, name: &str, file: &File, len: u64) -> BackendResult<()> {
        if self.link_spool(name, file, len)? {
            return Ok(());
        }
        self.write_with(name, |out| {
            let mut offset = 0;
            let mut buf = vec![0; COPY_PIECE.min(len) as usize];
            while offset < len {
                let n = (len - offset).min(COPY_PIECE) as usize;
                file.read_exact_at(&mut buf[..n], offset)?;
                out.write_all(&buf[..n])?;
                offset += n as u64;
            }
            Ok(())
        })
    }

    fn spool_dir(&self) -> Option<PathBuf> {
        Some(self.root.join(TMP_DIR))
    }

    fn spool_file(&self) -> Option<BackendResult<File>> {
        Some(self.unnamed_spool_file())
    }

    fn stat(&self, name: &str) -> BackendResult<u64> {
        let parts = components(name)?;
        let (last, dirs) = parts.split_last().expect("at least one component");
        let fds = self.walk(name, dirs, false)?;
        let parent = fds.last().map_or(self.root_fd.as_fd(), |f| f.as_fd());
        let st = rustix::fs::statat(parent, *last, AtFlags::SYMLINK_NOFOLLOW).map_err(|e| err(name, e))?;
        match FileType::from_raw_mode(st.st_mode) {
            FileType::RegularFile => Ok(st.st_size.max(0) as u64),
            FileType::Symlink => Err(err(name, Errno::LOOP)),
            _ => Err(not_a_file(name)),
        }
    }

    fn list(&self, prefix: &str) -> BackendResult<Vec<ObjectInfo>> {
        Ok(self.list_entries(prefix)?.into_iter().map(|(o, _)| o).collect())
    }

    fn delete(&self, name: &str) -> BackendResult<()> {
        let parts = components(name)?;
        let (last, dirs) = parts.split_last().expect("at least one component");
        let fds = match self.walk(name, dirs, false) {
            Ok(fds) => fds,
            Err(e) if e.kind == ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        let parent = fds.last().map_or(self.root_fd.as_fd(), |f| f.as_fd());
        match rustix::fs::unlinkat(parent, *last, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => Ok(()),
            Err(e) => Err(err(name, e)),
        }
    }
}

impl LocalBackend {
    /// The objects below `prefix` with their modification times (nanoseconds
    /// since the Unix epoch): links, devices and directories deeper than
    /// [`LIST_DEPTH`] are skipped.
    fn list_entries(&self, prefix: &str) -> BackendResult<Vec<(ObjectInfo, i64)>> {
        let base = prefix.trim_end_matches('/');
        let parts = components(base)?;
        let start = match self.walk(prefix, &parts, false) {
            Ok(mut fds) => fds.pop().expect("at least one component"),
            Err(e) if e.kind == ErrorKind::NotFound => return Ok(Vec::new()),
            // The prefix names a file, not a directory: nothing below it.
            Err(_) if self.stat(base).is_ok() => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut out = Vec::new();
        // Directories still to list, with their names and depths; iterative, and
        // bounded in depth by LIST_DEPTH.
        let mut pending = vec![(start, base.to_string(), 0)];
        while let Some((fd, path, depth)) = pending.pop() {
            let dir = rustix::fs::Dir::read_from(&fd).map_err(|e| err(&path, e))?;
            for entry in dir {
                let entry = entry.map_err(|e| err(&path, e))?;
                let fname: &CStr = entry.file_name();
                let Ok(fname) = fname.to_str() else { continue };
                if fname == "." || fname == ".." {
                    continue;
                }
                let full = format!("{path}/{fname}");
                let st = match rustix::fs::statat(&fd, fname, AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(st) => st,
                    Err(Errno::NOENT) => continue,
                    Err(e) => return Err(err(&full, e)),
                };
                match FileType::from_raw_mode(st.st_mode) {
                    FileType::RegularFile => {
                        let mtime = (st.st_mtime as i64).saturating_mul(1_000_000_000) + st.st_mtime_nsec as i64;
                        out.push((ObjectInfo { name: full, size: st.st_size.max(0) as u64 }, mtime))
                    }
                    FileType::Directory if depth < LIST_DEPTH => {
                        match rustix::fs::openat(&fd, fname, dir_flags(), Mode::empty()) {
                            Ok(sub) => pending.push((sub, full, depth + 1)),
                            Err(Errno::NOENT) => {}
                            Err(e) => return Err(err(&full, e)),
                        }
                    }
                    // Links, devices and deeper directories are not coffer's.
                    _ => {}
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
