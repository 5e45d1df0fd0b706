//! Opening and reading the entries being backed up so that a local user who
//! changes them meanwhile cannot fool the backup. See docs/design.md#backup.
//!
//! An entry is listed (its metadata taken) before it is opened, and whoever can
//! write to its directory can put something else in its place in between: a
//! symlink to a file only root may read, a FIFO that never delivers, a device
//! that never ends. So nothing here follows a symlink, and every open compares
//! the device, inode and type of what it opened with what was listed; anything
//! else is refused without being read. A regular file is first opened as a bare
//! path handle (`O_PATH`, which opens nothing), so a device put in its place is
//! not even opened. A directory's entries are examined relative to the handle of
//! the directory that was checked, not by path, so a directory above them swapped
//! for a symlink cannot redirect the backup either.
//!
//! A file that changes while it is read is read once more; see [`read_stable`].

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::fs::{File, Metadata};
use std::io::{self, Read, Seek, SeekFrom};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use rustix::fs::{CWD, FileType, Mode, OFlags};

use crate::error::{Error, Result};
use crate::format::tree::Timestamp;

/// Why an entry was not opened.
#[derive(Debug)]
pub enum Refused {
    /// It could not be opened or examined.
    Io(io::Error),
    /// Something other than the listed entry stands at its path now (described).
    Replaced(&'static str),
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refused::Io(e) => write!(f, "{e}"),
            Refused::Replaced(what) => write!(
                f,
                "it was replaced by {what} after it was listed, so it was not read; run the backup again to \
                 store what is there now"
            ),
        }
    }
}

impl From<rustix::io::Errno> for Refused {
    fn from(e: rustix::io::Errno) -> Self {
        Refused::Io(e.into())
    }
}

/// What an entry of type `ft` is, for messages.
fn describe(ft: FileType) -> &'static str {
    match ft {
        FileType::RegularFile => "another file",
        FileType::Directory => "a directory",
        FileType::Symlink => "a symlink",
        FileType::Fifo => "a FIFO",
        FileType::CharacterDevice => "a character device",
        FileType::BlockDevice => "a block device",
        FileType::Socket => "a socket",
        _ => "an entry of unknown type",
    }
}

/// The listed identity of an entry: what an opened handle must match.
#[derive(Clone, Copy, Debug)]
pub struct Listed {
    /// Device number.
    pub dev: u64,
    /// Inode number.
    pub ino: u64,
}

impl Listed {
    /// The identity recorded in `md`.
    pub fn of(md: &Metadata) -> Listed {
        Listed { dev: md.dev(), ino: md.ino() }
    }

    /// Checks that `fd` is this entry, of type `want`.
    fn check(&self, fd: impl AsFd, want: FileType) -> std::result::Result<(), Refused> {
        let st = rustix::fs::fstat(fd)?;
        let ft = FileType::from_raw_mode(st.st_mode);
        if ft != want {
            return Err(Refused::Replaced(describe(ft)));
        }
        if st.st_dev as u64 != self.dev || st.st_ino as u64 != self.ino {
            return Err(Refused::Replaced(if want == FileType::Directory {
                "another directory"
            } else {
                "another file"
            }));
        }
        Ok(())
    }
}

/// A handle on `path` itself (never a symlink's target) that opens nothing: on
/// Linux an `O_PATH` descriptor.
#[cfg(target_os = "linux")]
fn path_handle(dir: impl AsFd, path: impl rustix::path::Arg) -> rustix::io::Result<OwnedFd> {
    rustix::fs::openat(dir, path, OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())
}

/// The flags every file is opened for reading with: a FIFO or device must not
/// block the open nor become the controlling terminal.
fn read_flags() -> OFlags {
    OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC
}

/// Opens `path` with `flags`, adding `O_NOATIME` (reading a file for a backup
/// should not change it) where this process may use it: it is refused for files
/// of other users unless the process has `CAP_FOWNER`.
fn open_noatime(dir: impl AsFd, path: &Path, flags: OFlags) -> rustix::io::Result<OwnedFd> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    match rustix::fs::openat(dir.as_fd(), path, flags | OFlags::NOATIME, Mode::empty()) {
        Err(rustix::io::Errno::PERM) => {}
        r => return r,
    }
    rustix::fs::openat(dir, path, flags, Mode::empty())
}

/// Opens the regular file at `path` for reading if it is still the file listed
/// as `listed`; never follows a symlink and never opens anything else.
pub fn open_file(path: &Path, listed: Listed) -> std::result::Result<File, Refused> {
    let fd = open_file_fd(path, listed)?;
    listed.check(&fd, FileType::RegularFile)?;
    Ok(File::from(fd))
}

#[cfg(target_os = "linux")]
fn open_file_fd(path: &Path, listed: Listed) -> std::result::Result<OwnedFd, Refused> {
    use std::os::fd::AsRawFd;
    let handle = path_handle(CWD, path)?;
    listed.check(&handle, FileType::RegularFile)?;
    // Reopening the handle through /proc opens the very inode checked above.
    let proc_path = format!("/proc/self/fd/{}", handle.as_raw_fd());
    match open_noatime(CWD, Path::new(&proc_path), read_flags()) {
        Err(rustix::io::Errno::NOENT) => {} // no /proc: open by path, checked after
        r => return Ok(r?),
    }
    open_noatime(CWD, path, read_flags() | OFlags::NOFOLLOW).map_err(no_follow_error)
}

#[cfg(not(target_os = "linux"))]
fn open_file_fd(path: &Path, _listed: Listed) -> std::result::Result<OwnedFd, Refused> {
    open_noatime(CWD, path, read_flags() | OFlags::NOFOLLOW).map_err(no_follow_error)
}

/// `ELOOP` from a no-follow open means a symlink stands at the path.
fn no_follow_error(e: rustix::io::Errno) -> Refused {
    if e == rustix::io::Errno::LOOP { Refused::Replaced("a symlink") } else { e.into() }
}

/// An opened directory that was checked against its listing.
pub struct Dir {
    fd: OwnedFd,
    /// What it was checked against.
    listed: Listed,
    /// `/proc/self/fd/N` for its descriptor, when that names it: a path through
    /// which its entries are reached in this very directory. Found when first
    /// needed: an unchanged entry needs none.
    by_fd: std::sync::OnceLock<Option<std::path::PathBuf>>,
}

impl Dir {
    /// Opens the directory at `path` if it is still the directory listed as
    /// `listed`; never follows a symlink.
    pub fn open(path: &Path, listed: Listed) -> std::result::Result<Dir, Refused> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        #[cfg(target_os = "linux")]
        let fd = {
            let handle = path_handle(CWD, path)?;
            listed.check(&handle, FileType::Directory)?;
            rustix::fs::openat(&handle, ".", flags, Mode::empty())?
        };
        #[cfg(not(target_os = "linux"))]
        let fd = rustix::fs::openat(CWD, path, flags | OFlags::NOFOLLOW, Mode::empty()).map_err(no_follow_error)?;
        listed.check(&fd, FileType::Directory)?;
        Ok(Dir { fd, listed, by_fd: Default::default() })
    }

    /// Opens the directory holding `path` (absolute, its directories' symlinks
    /// already resolved) one component at a time from `/`, following no symlink:
    /// a directory on the way swapped for a symlink since the path was resolved
    /// is refused. The directory is only for [`Dir::metadata`] and
    /// [`Dir::entry_path`], not for listing.
    pub fn open_parent_of(path: &Path) -> std::result::Result<Dir, Refused> {
        let parent = path.parent().unwrap_or(Path::new("/"));
        // Only searched, not listed: on Linux a path handle, which needs no read
        // permission (as `lstat` does not).
        #[cfg(target_os = "linux")]
        let access = OFlags::PATH;
        #[cfg(not(target_os = "linux"))]
        let access = OFlags::RDONLY;
        let flags = access | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let mut handle = rustix::fs::openat(CWD, "/", flags, Mode::empty())?;
        for c in parent.components() {
            if let std::path::Component::Normal(name) = c {
                let flags = flags | OFlags::NOFOLLOW;
                handle = rustix::fs::openat(&handle, name, flags, Mode::empty()).map_err(|e| match e {
                    rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR => {
                        Refused::Replaced("a symlink or other non-directory on the way to it")
                    }
                    e => e.into(),
                })?;
            }
        }
        let st = rustix::fs::fstat(&handle)?;
        let listed = Listed { dev: st.st_dev as u64, ino: st.st_ino as u64 };
        Ok(Dir { fd: handle, listed, by_fd: Default::default() })
    }

    /// `/proc/self/fd/N` for `fd` if it leads to the directory `listed` (there may
    /// be no `/proc`).
    fn path_by_fd(fd: &OwnedFd, listed: Listed) -> Option<std::path::PathBuf> {
        use std::os::fd::AsRawFd;
        let p = std::path::PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
        let st = rustix::fs::stat(&p).ok()?;
        (st.st_dev as u64 == listed.dev && st.st_ino as u64 == listed.ino).then_some(p)
    }

    /// A path that reaches its entry `name` in this very directory, whatever
    /// happens to the directory's own path (`/proc/self/fd/N/name`), for reads
    /// that take a path, such as a symlink's target or extended attributes
    /// (neither follows a symlink in the last component); `fallback` if there
    /// is none.
    pub fn entry_path(&self, name: &OsStr, fallback: &Path) -> std::path::PathBuf {
        match self.by_fd.get_or_init(|| Self::path_by_fd(&self.fd, self.listed)) {
            Some(p) => p.join(name),
            None => fallback.to_path_buf(),
        }
    }

    /// The names of its entries (without `.` and `..`), in the order read; an
    /// entry that cannot be read is an error in its place.
    pub fn names(&self) -> io::Result<Vec<io::Result<OsString>>> {
        let dir = rustix::fs::Dir::read_from(&self.fd)?;
        Ok(dir
            .filter_map(|e| match e {
                Ok(e) => {
                    let name = e.file_name().to_bytes();
                    (name != b"." && name != b"..").then(|| Ok(OsStr::from_bytes(name).to_os_string()))
                }
                Err(e) => Some(Err(e.into())),
            })
            .collect())
    }

    /// The metadata of its entry `name`, as `lstat` gives it (a symlink is not
    /// followed), looked up in this very directory.
    pub fn metadata(&self, name: &OsStr) -> io::Result<Metadata> {
        #[cfg(target_os = "linux")]
        {
            File::from(path_handle(&self.fd, name)?).metadata()
        }
        #[cfg(not(target_os = "linux"))]
        {
            use std::os::fd::AsRawFd;
            std::fs::symlink_metadata(Path::new(&format!("/dev/fd/{}", self.fd.as_raw_fd())).join(name))
        }
    }
}

/// What a file's metadata said when it was read: what the node records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    /// Size in bytes.
    pub size: u64,
    /// Modification time.
    pub mtime: Timestamp,
    /// Status change time.
    pub ctime: Timestamp,
}

impl Stamp {
    fn of(file: &File) -> io::Result<Stamp> {
        let md = file.metadata()?;
        Ok(Stamp {
            size: md.size(),
            mtime: Timestamp(md.mtime(), md.mtime_nsec() as u32),
            ctime: Timestamp(md.ctime(), md.ctime_nsec() as u32),
        })
    }
}

/// The outcome of [`read_stable`].
#[derive(Debug)]
pub enum Reading<T> {
    /// Read while the file did not change: the content is the file's.
    Stable(T),
    /// The file changed during both reads: the content is the second read's,
    /// consistent with the stamp returned but perhaps not with any state the
    /// file was in.
    Changed(T),
}

/// Reads `file` from its start with `read`, which gets it limited to the size
/// `fstat` gives before the read, so that a file growing without end (or a file
/// whose size says nothing of its content, as in `/proc`) is never read past
/// that size. A read is *stable* when it returned exactly that many bytes and
/// size, mtime and ctime are the same after it as before; otherwise the file is
/// read once more, and if that read is not stable either, it is kept and
/// reported as [`Reading::Changed`].
///
/// Returns what the last read made of the file, and the stamp to record with
/// it: after a stable read, the file's; after a changed one, the size actually
/// read with the times from before that read, so that the file does not look
/// unchanged to the next backup.
pub fn read_stable<T>(
    file: &File,
    path: &Path,
    mut read: impl FnMut(&mut io::Take<&File>) -> Result<T>,
) -> Result<(Reading<T>, Stamp)> {
    let io_err = |e| Error::io(path, e);
    let mut before = Stamp::of(file).map_err(io_err)?;
    let mut attempt = 0;
    loop {
        let mut limited = file.take(before.size);
        let out = read(&mut limited)?;
        let len = before.size - limited.limit();
        let after = Stamp::of(file).map_err(io_err)?;
        if len == before.size && after == before {
            return Ok((Reading::Stable(out), after));
        }
        attempt += 1;
        if attempt == 2 {
            return Ok((Reading::Changed(out), Stamp { size: len, ..before }));
        }
        before = after;
        (&mut &*file).seek(SeekFrom::Start(0)).map_err(io_err)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::symlink;

    fn listed(p: &Path) -> Listed {
        Listed::of(&std::fs::symlink_metadata(p).unwrap())
    }

    fn replaced(r: std::result::Result<impl fmt::Debug, Refused>) -> &'static str {
        match r {
            Err(Refused::Replaced(what)) => what,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    /// Runs `f` on another thread and fails if it takes more than 20 seconds
    /// (a FIFO or device that was opened and read would block or never end).
    fn within_time<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(f()).unwrap());
        rx.recv_timeout(std::time::Duration::from_secs(20)).expect("hung")
    }

    #[test]
    fn a_listed_file_opens_and_reads() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"content").unwrap();
        let mut s = String::new();
        open_file(&p, listed(&p)).unwrap().read_to_string(&mut s).unwrap();
        assert_eq!(s, "content");
    }

    #[test]
    fn a_symlink_where_a_file_was_listed_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (p, secret) = (dir.path().join("f"), dir.path().join("secret"));
        std::fs::write(&p, b"mine").unwrap();
        std::fs::write(&secret, b"root only").unwrap();
        let l = listed(&p);
        std::fs::remove_file(&p).unwrap();
        symlink(&secret, &p).unwrap();
        assert_eq!(replaced(open_file(&p, l)), "a symlink");
        // Even a symlink to the very file listed is not followed.
        assert_eq!(replaced(open_file(&p, listed(&secret))), "a symlink");
    }

    #[test]
    fn a_fifo_where_a_file_was_listed_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"x").unwrap();
        let l = listed(&p);
        std::fs::remove_file(&p).unwrap();
        rustix::fs::mknodat(CWD, &p, FileType::Fifo, Mode::from_raw_mode(0o644), 0).unwrap();
        assert_eq!(within_time(move || replaced(open_file(&p, l))), "a FIFO");
    }

    #[test]
    fn a_device_where_a_file_was_listed_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"x").unwrap();
        let l = listed(&p);
        std::fs::remove_file(&p).unwrap();
        if rustix::process::geteuid().is_root() {
            // /dev/zero: an endless read.
            let zero = std::fs::metadata("/dev/zero").unwrap().rdev();
            rustix::fs::mknodat(CWD, &p, FileType::CharacterDevice, Mode::from_raw_mode(0o666), zero).unwrap();
            let q = p.clone();
            assert_eq!(within_time(move || replaced(open_file(&q, l))), "a character device");
        } else {
            eprintln!("not root: a device node cannot be created; checking a symlink to /dev/zero only");
        }
        std::fs::remove_file(&p).ok();
        symlink("/dev/zero", &p).unwrap();
        assert_eq!(within_time(move || replaced(open_file(&p, l))), "a symlink");
    }

    #[test]
    fn another_file_where_a_file_was_listed_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"x").unwrap();
        let l = listed(&p);
        std::fs::rename(dir.path().join("f"), dir.path().join("g")).unwrap();
        std::fs::write(&p, b"y").unwrap();
        assert_eq!(replaced(open_file(&p, l)), "another file");
    }

    #[test]
    fn a_directory_swapped_for_a_symlink_is_not_listed() {
        let dir = tempfile::tempdir().unwrap();
        let (d, elsewhere) = (dir.path().join("d"), dir.path().join("elsewhere"));
        std::fs::create_dir(&d).unwrap();
        std::fs::create_dir(&elsewhere).unwrap();
        std::fs::write(elsewhere.join("secret"), b"s").unwrap();
        let l = listed(&d);
        std::fs::remove_dir(&d).unwrap();
        symlink(&elsewhere, &d).unwrap();
        assert_eq!(replaced(Dir::open(&d, l).map(|_| ())), "a symlink");
        // Nor is a symlink to the very directory listed followed.
        assert_eq!(replaced(Dir::open(&d, listed(&elsewhere)).map(|_| ())), "a symlink");
    }

    #[test]
    fn entries_are_examined_in_the_directory_that_was_checked() {
        let dir = tempfile::tempdir().unwrap();
        let (d, elsewhere) = (dir.path().join("d"), dir.path().join("elsewhere"));
        std::fs::create_dir(&d).unwrap();
        std::fs::write(d.join("f"), b"mine").unwrap();
        std::fs::create_dir(&elsewhere).unwrap();
        std::fs::write(elsewhere.join("f"), b"root only, longer").unwrap();
        let opened = Dir::open(&d, listed(&d)).unwrap();
        let names: Vec<_> = opened.names().unwrap().into_iter().map(|n| n.unwrap()).collect();
        assert_eq!(names, vec![OsString::from("f")]);
        // The directory is swapped for a symlink after it was opened.
        std::fs::rename(&d, dir.path().join("moved")).unwrap();
        symlink(&elsewhere, &d).unwrap();
        let md = opened.metadata(OsStr::new("f")).unwrap();
        assert_eq!(md.len(), 4, "looked up through the symlink");
        // And what stands at the path now is not that file.
        assert_eq!(replaced(open_file(&d.join("f"), Listed::of(&md))), "another file");
    }

    #[test]
    fn entry_paths_read_in_the_directory_that_was_checked() {
        let dir = tempfile::tempdir().unwrap();
        let (d, elsewhere) = (dir.path().join("d"), dir.path().join("elsewhere"));
        std::fs::create_dir(&d).unwrap();
        symlink("mine", d.join("l")).unwrap();
        std::fs::create_dir(&elsewhere).unwrap();
        symlink("root's", elsewhere.join("l")).unwrap();
        let opened = Dir::open(&d, listed(&d)).unwrap();
        std::fs::rename(&d, dir.path().join("moved")).unwrap();
        symlink(&elsewhere, &d).unwrap();
        let p = opened.entry_path(OsStr::new("l"), &d.join("l"));
        assert_eq!(std::fs::read_link(p).unwrap(), Path::new("mine"));
    }

    #[test]
    fn a_given_path_is_reached_without_following_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let (d, elsewhere) = (root.join("d"), root.join("elsewhere"));
        std::fs::create_dir(&d).unwrap();
        std::fs::write(d.join("f"), b"mine").unwrap();
        std::fs::create_dir(&elsewhere).unwrap();
        std::fs::write(elsewhere.join("f"), b"root only, longer").unwrap();
        let parent = Dir::open_parent_of(&d.join("f")).unwrap();
        assert_eq!(parent.metadata(OsStr::new("f")).unwrap().len(), 4);
        // A directory on the way swapped for a symlink after the path was resolved.
        std::fs::rename(&d, root.join("moved")).unwrap();
        symlink(&elsewhere, &d).unwrap();
        assert!(matches!(Dir::open_parent_of(&d.join("f")), Err(Refused::Replaced(_))));
    }

    /// Reads everything `read_stable` allows, calling `during` after each read.
    fn read_all(p: &Path, mut during: impl FnMut(usize)) -> (Reading<Vec<u8>>, Stamp) {
        let f = open_file(p, listed(p)).unwrap();
        let mut calls = 0;
        read_stable(&f, p, |r| {
            let mut v = Vec::new();
            r.read_to_end(&mut v).unwrap();
            during(calls);
            calls += 1;
            Ok(v)
        })
        .unwrap()
    }

    fn append(p: &Path, data: &[u8]) {
        std::fs::OpenOptions::new().append(true).open(p).unwrap().write_all(data).unwrap();
    }

    #[test]
    fn a_stable_file_is_read_once() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"0123456789").unwrap();
        let mut calls = 0;
        let (r, stamp) = read_all(&p, |_| calls += 1);
        assert!(matches!(r, Reading::Stable(ref v) if v == b"0123456789"), "{r:?}");
        assert_eq!((calls, stamp.size), (1, 10));
    }

    #[test]
    fn a_file_growing_once_is_read_again() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"0123456789").unwrap();
        let q = p.clone();
        let (r, stamp) = read_all(&p, |n| {
            if n == 0 {
                append(&q, b"more");
            }
        });
        assert!(matches!(r, Reading::Stable(ref v) if v == b"0123456789more"), "{r:?}");
        assert_eq!(stamp.size, 14);
    }

    #[test]
    fn a_file_that_keeps_growing_is_kept_as_read_and_reported() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"0123456789").unwrap();
        let before = Stamp::of(&File::open(&p).unwrap()).unwrap();
        let q = p.clone();
        let (r, stamp) = read_all(&p, |_| append(&q, b"more"));
        // The second read stops at the size seen before it: never past it.
        let Reading::Changed(v) = r else { panic!("not reported: {r:?}") };
        assert_eq!(v, b"0123456789more");
        assert_eq!(stamp.size, v.len() as u64, "the size recorded is the content's");
        assert_ne!(stamp, before);
    }

    #[test]
    fn a_file_that_shrinks_is_kept_as_read_and_reported() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"0123456789").unwrap();
        let f = open_file(&p, listed(&p)).unwrap();
        let mut calls = 0;
        let (r, stamp) = read_stable(&f, &p, |r| {
            // Truncated before each read.
            calls += 1;
            std::fs::OpenOptions::new().write(true).open(&p).unwrap().set_len(10 - 3 * calls).unwrap();
            let mut v = Vec::new();
            r.read_to_end(&mut v).unwrap();
            Ok(v)
        })
        .unwrap();
        let Reading::Changed(v) = r else { panic!("not reported: {r:?}") };
        assert_eq!((v.as_slice(), stamp.size), (&b"0123"[..], 4));
    }
}
