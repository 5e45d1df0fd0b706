//! The backend over OpenDAL. The local directory is the default service; any
//! OpenDAL operator can be wrapped.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use opendal::{ErrorKind as OdErrorKind, Operator, blocking};

use super::{Backend, BackendError, BackendResult, ErrorKind, ObjectInfo};

/// A [`Backend`] over an OpenDAL operator, driven through OpenDAL's blocking API
/// on a small runtime that this value owns.
pub struct OpendalBackend {
    op: blocking::Operator,
    /// For the local service: the root directory, whose directories are synced
    /// after each write so that a renamed object survives a power cut.
    local_root: Option<PathBuf>,
    location: String,
    _runtime: Arc<tokio::runtime::Runtime>,
}

fn classify(e: &opendal::Error) -> ErrorKind {
    match e.kind() {
        OdErrorKind::NotFound => ErrorKind::NotFound,
        _ if e.is_temporary() => ErrorKind::Transient,
        _ => ErrorKind::Permanent,
    }
}

fn err(object: &str, e: opendal::Error) -> BackendError {
    BackendError::new(classify(&e), object, e.to_string())
}

impl OpendalBackend {
    /// A backend over a local directory. Writes go to `<root>/tmp/` first and are
    /// renamed into place after an fsync, so they are atomic.
    pub fn local(root: &Path) -> BackendResult<Self> {
        let root_s = root.to_string_lossy().to_string();
        let tmp = root.join("tmp").to_string_lossy().to_string();
        let builder = opendal::services::Fs::default().root(&root_s).atomic_write_dir(&tmp);
        let runtime = Arc::new(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("coffer-io")
                .enable_all()
                .build()
                .map_err(|e| BackendError::new(ErrorKind::Permanent, "runtime", e.to_string()))?,
        );
        let op = Operator::new(builder).map_err(|e| err(&root_s, e))?;
        let mut be = Self::from_operator(op, root_s, runtime)?;
        be.local_root = Some(root.to_path_buf());
        Ok(be)
    }

    /// Wraps any OpenDAL operator.
    pub fn from_operator(op: Operator, location: String, runtime: Arc<tokio::runtime::Runtime>) -> BackendResult<Self> {
        let _guard = runtime.enter();
        let op = blocking::Operator::new(op).map_err(|e| err(&location, e))?;
        Ok(OpendalBackend { op, location, local_root: None, _runtime: runtime })
    }
}

fn io_err(object: &str, e: std::io::Error) -> BackendError {
    let kind = match e.kind() {
        std::io::ErrorKind::NotFound => ErrorKind::NotFound,
        _ => ErrorKind::Permanent,
    };
    BackendError::new(kind, object, e.to_string())
}

/// Reads up to `len` bytes at `offset` of a local file, fewer if it ends first.
///
/// Objects of the local service are read with the standard library rather than
/// through OpenDAL: its positioned reader zero-fills a buffer of up to 2 MiB per
/// piece, keeps pieces in a pool, and hands each read to a runtime thread, and the
/// result is copied once more into the `Vec` the trait returns. Here the bytes are
/// read once, into a buffer of the right size. Writes still go through OpenDAL.
fn local_read(path: &Path, offset: u64, len: u64) -> std::io::Result<Vec<u8>> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = std::fs::File::open(path)?;
    let size = file.metadata()?.len();
    let want = len.min(size.saturating_sub(offset));
    let mut buf = Vec::with_capacity(usize::try_from(want).unwrap_or(usize::MAX));
    if want > 0 {
        file.seek(SeekFrom::Start(offset))?;
        // `read_to_end` fills the spare capacity without zeroing it first. An object
        // that grew since `metadata` (none should) is read to `len` all the same.
        file.take(len).read_to_end(&mut buf)?;
    }
    Ok(buf)
}

/// Gives an unnamed spool file the name of the object it holds, instead of copying
/// it: for the local service, whose spool directory is on the repository's file
/// system. The file is synced first (a name is given only to complete content) and
/// gets the permissions of the repository's `config`, like objects written by
/// OpenDAL. `Ok(false)` when it cannot be linked (it holds more than the object, it
/// has a name, `/proc` is missing, or the object exists already, as after a retry):
/// the caller copies it then.
fn link_spool(root: &Path, name: &str, file: &std::fs::File, len: u64) -> std::io::Result<bool> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::io::AsRawFd;
    if file.metadata()?.len() != len {
        return Ok(false);
    }
    let target = root.join(name);
    if let Some(dir) = target.parent() {
        std::fs::create_dir_all(dir)?;
    }
    file.sync_all()?;
    if let Ok(config) = std::fs::metadata(root.join("config")) {
        file.set_permissions(std::fs::Permissions::from_mode(config.permissions().mode() & 0o777))?;
    }
    let fd_path = std::ffi::CString::new(format!("/proc/self/fd/{}", file.as_raw_fd())).expect("no NUL");
    let Ok(target_c) = std::ffi::CString::new(target.as_os_str().as_bytes()) else {
        return Ok(false);
    };
    // SAFETY: both paths are NUL-terminated strings that outlive the call.
    let r = unsafe {
        libc::linkat(libc::AT_FDCWD, fd_path.as_ptr(), libc::AT_FDCWD, target_c.as_ptr(), libc::AT_SYMLINK_FOLLOW)
    };
    Ok(r == 0)
}

/// [`Backend::write_file`] hands a file to OpenDAL in pieces of this size.
const UPLOAD_PIECE: u64 = 1 << 20;

impl OpendalBackend {
    /// For the local service: after a write was fsynced and renamed into place,
    /// makes the rename (and a newly created fan-out directory) durable too,
    /// before anything that refers to the object is written.
    fn sync_dirs(&self, name: &str) -> BackendResult<()> {
        let Some(root) = &self.local_root else {
            return Ok(());
        };
        let mut dir = Path::new(name).parent();
        while let Some(d) = dir {
            let full = root.join(d);
            std::fs::File::open(&full)
                .and_then(|f| f.sync_all())
                .map_err(|e| BackendError::new(ErrorKind::Permanent, name, format!("cannot sync directory: {e}")))?;
            if d.as_os_str().is_empty() {
                break;
            }
            dir = d.parent();
        }
        Ok(())
    }
}

impl Backend for OpendalBackend {
    fn location(&self) -> String {
        self.location.clone()
    }

    fn read(&self, name: &str) -> BackendResult<Vec<u8>> {
        if let Some(root) = &self.local_root {
            return local_read(&root.join(name), 0, u64::MAX).map_err(|e| io_err(name, e));
        }
        Ok(self.op.read(name).map_err(|e| err(name, e))?.to_vec())
    }

    fn read_range(&self, name: &str, offset: u64, len: u64) -> BackendResult<Vec<u8>> {
        if len == 0 {
            return Ok(Vec::new());
        }
        if let Some(root) = &self.local_root {
            return local_read(&root.join(name), offset, len).map_err(|e| io_err(name, e));
        }
        let opts = opendal::options::ReadOptions { range: (offset..offset + len).into(), ..Default::default() };
        match self.op.read_options(name, opts) {
            Ok(b) => Ok(b.to_vec()),
            // The object ends before the range does: return what there is, a short read.
            Err(e) if e.kind() == OdErrorKind::RangeNotSatisfied => {
                let size = self.stat(name)?;
                if offset >= size {
                    return Ok(Vec::new());
                }
                let opts = opendal::options::ReadOptions { range: (offset..size).into(), ..Default::default() };
                Ok(self.op.read_options(name, opts).map_err(|e| err(name, e))?.to_vec())
            }
            Err(e) => Err(err(name, e)),
        }
    }

    fn write(&self, name: &str, data: Vec<u8>) -> BackendResult<()> {
        self.op.write(name, data).map_err(|e| err(name, e))?;
        self.sync_dirs(name)
    }

    fn write_file(&self, name: &str, file: &std::fs::File, len: u64) -> BackendResult<()> {
        if let Some(root) = &self.local_root
            && link_spool(root, name, file, len).map_err(|e| io_err(name, e))?
        {
            return self.sync_dirs(name);
        }
        let mut w = self.op.writer(name).map_err(|e| err(name, e))?;
        let mut offset = 0;
        while offset < len {
            let n = (len - offset).min(UPLOAD_PIECE);
            w.write(super::read_spool(name, file, offset, n)?).map_err(|e| err(name, e))?;
            offset += n;
        }
        w.close().map_err(|e| err(name, e))?;
        self.sync_dirs(name)
    }

    fn spool_dir(&self) -> Option<PathBuf> {
        self.local_root.as_ref().map(|r| r.join("tmp"))
    }

    fn stat(&self, name: &str) -> BackendResult<u64> {
        Ok(self.op.stat(name).map_err(|e| err(name, e))?.content_length())
    }

    fn list(&self, prefix: &str) -> BackendResult<Vec<ObjectInfo>> {
        let opts = opendal::options::ListOptions { recursive: true, ..Default::default() };
        let entries = match self.op.list_options(prefix, opts) {
            Ok(e) => e,
            Err(e) if e.kind() == OdErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(err(prefix, e)),
        };
        let mut out = Vec::with_capacity(entries.len());
        for e in entries {
            if e.metadata().is_dir() {
                continue;
            }
            let size = match e.metadata().content_length() {
                0 => self.stat(e.path()).unwrap_or(0),
                n => n,
            };
            out.push(ObjectInfo { name: e.path().to_string(), size });
        }
        Ok(out)
    }

    fn delete(&self, name: &str) -> BackendResult<()> {
        match self.op.delete(name) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == OdErrorKind::NotFound => Ok(()),
            Err(e) => Err(err(name, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn range_reads_past_the_end_are_short_not_errors() {
        let dir = tempfile::tempdir().unwrap();
        let be = OpendalBackend::local(dir.path()).unwrap();
        be.write("data/ab/obj", (0..100u8).collect()).unwrap();
        assert_eq!(be.read_range("data/ab/obj", 10, 20).unwrap(), (10..30u8).collect::<Vec<_>>());
        assert_eq!(be.read_range("data/ab/obj", 50, 100).unwrap(), (50..100u8).collect::<Vec<_>>());
        assert!(be.read_range("data/ab/obj", 100, 10).unwrap().is_empty());
        assert!(be.read_range("data/ab/obj", 500, 10).unwrap().is_empty());
        assert_eq!(be.read_range("data/ab/missing", 0, 10).unwrap_err().kind, ErrorKind::NotFound);
        assert_eq!(be.read("data/ab/obj").unwrap(), (0..100u8).collect::<Vec<_>>());
        assert_eq!(be.read("data/ab/missing").unwrap_err().kind, ErrorKind::NotFound);
        be.write("data/ab/empty", Vec::new()).unwrap();
        assert!(be.read("data/ab/empty").unwrap().is_empty());
        assert!(be.read_range("data/ab/empty", 0, 10).unwrap().is_empty());
    }

    #[test]
    fn write_file_links_an_unnamed_spool_file_into_place() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let dir = tempfile::tempdir().unwrap();
        let be = OpendalBackend::local(dir.path()).unwrap();
        be.write("config", b"c".to_vec()).unwrap();
        let config_mode = std::fs::metadata(dir.path().join("config")).unwrap().permissions().mode() & 0o777;
        let spool = be.spool_dir().unwrap();
        std::fs::create_dir_all(&spool).unwrap();
        let mut file = tempfile::tempfile_in(&spool).unwrap();
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 253) as u8).collect();
        file.write_all(&data).unwrap();
        be.write_file("data/ef/obj", &file, data.len() as u64).unwrap();
        assert_eq!(be.read("data/ef/obj").unwrap(), data);
        let object = std::fs::metadata(dir.path().join("data/ef/obj")).unwrap();
        // The same inode: linked, not copied; with the repository's permissions.
        assert_eq!(object.ino(), file.metadata().unwrap().ino());
        assert_eq!(object.permissions().mode() & 0o777, config_mode);
        // Again, as a retry would: the object exists, so it is written over by a copy.
        be.write_file("data/ef/obj", &file, data.len() as u64).unwrap();
        assert_eq!(be.read("data/ef/obj").unwrap(), data);
        drop(file);
        assert_eq!(be.read("data/ef/obj").unwrap(), data);
        assert_eq!(std::fs::read_dir(&spool).unwrap().count(), 0);
    }

    #[test]
    fn write_file_streams_a_spool_file_in_pieces() {
        let dir = tempfile::tempdir().unwrap();
        let be = OpendalBackend::local(dir.path()).unwrap();
        let spool = be.spool_dir().unwrap();
        assert_eq!(spool, dir.path().join("tmp"));
        std::fs::create_dir_all(&spool).unwrap();
        let mut file = tempfile::tempfile_in(&spool).unwrap();
        let data: Vec<u8> = (0..(UPLOAD_PIECE * 2 + 12_345)).map(|i| (i * 7 % 251) as u8).collect();
        file.write_all(&data).unwrap();
        file.write_all(b"not part of the object").unwrap();
        be.write_file("data/cd/obj", &file, data.len() as u64).unwrap();
        assert_eq!(be.read("data/cd/obj").unwrap(), data);
        // Again, as a retry would: the same object.
        be.write_file("data/cd/obj", &file, data.len() as u64).unwrap();
        assert_eq!(be.read("data/cd/obj").unwrap(), data);
        // The unnamed spool file leaves nothing behind in the spool directory.
        drop(file);
        assert_eq!(std::fs::read_dir(&spool).unwrap().count(), 0);
    }
}
