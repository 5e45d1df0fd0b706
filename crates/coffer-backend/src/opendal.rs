//! The backend over OpenDAL: any OpenDAL operator can be wrapped (the basis for
//! remote services). Local repositories use [`super::LocalBackend`], which needs no
//! runtime and follows no links inside the repository; [`OpendalBackend::local`]
//! remains for comparing the two.

use std::path::Path;
use std::sync::Arc;

use opendal::{ErrorKind as OdErrorKind, Operator, blocking};

use super::{Backend, BackendError, BackendResult, ErrorKind, ObjectInfo};

/// A [`Backend`] over an OpenDAL operator, driven through OpenDAL's blocking API
/// on a small runtime that this value owns.
pub struct OpendalBackend {
    op: blocking::Operator,
    location: String,
    _runtime: Arc<tokio::runtime::Runtime>,
}

fn classify(e: &opendal::Error) -> ErrorKind {
    match e.kind() {
        OdErrorKind::NotFound => ErrorKind::NotFound,
        _ if local_cause_is_permanent(e) => ErrorKind::Permanent,
        _ if e.is_temporary() => ErrorKind::Transient,
        _ => ErrorKind::Permanent,
    }
}

/// Whether a local system error under `e` is one that no retry mends: a full
/// disk or quota, a read-only file system, a permission denied. OpenDAL marks
/// most local I/O errors temporary.
fn local_cause_is_permanent(e: &opendal::Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            return matches!(
                io.raw_os_error(),
                Some(libc::ENOSPC | libc::EDQUOT | libc::EROFS | libc::EACCES | libc::EPERM)
            );
        }
        cause = c.source();
    }
    false
}

fn err(object: &str, e: opendal::Error) -> BackendError {
    BackendError::new(classify(&e), object, e.to_string())
}

impl OpendalBackend {
    /// A backend over a local directory through OpenDAL's file system service.
    /// Writes go to `<root>/tmp/` first and are renamed into place, so they are
    /// atomic; directories are not synced and links are followed: coffer itself
    /// uses [`super::LocalBackend`].
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
        Self::from_operator(op, root_s, runtime)
    }

    /// Wraps any OpenDAL operator.
    pub fn from_operator(op: Operator, location: String, runtime: Arc<tokio::runtime::Runtime>) -> BackendResult<Self> {
        let _guard = runtime.enter();
        let op = blocking::Operator::new(op).map_err(|e| err(&location, e))?;
        Ok(OpendalBackend { op, location, _runtime: runtime })
    }
}

/// [`Backend::write_file`] hands a file to OpenDAL in pieces of this size.
const UPLOAD_PIECE: u64 = 1 << 20;

impl Backend for OpendalBackend {
    fn location(&self) -> String {
        self.location.clone()
    }

    fn read_max(&self, name: &str, max: u64) -> BackendResult<Vec<u8>> {
        let size = self.stat(name)?;
        if size > max {
            return Err(BackendError::too_large(name, size, max));
        }
        // Never more than `max + 1` bytes, whatever the object became since `stat`.
        let data = self.read_range(name, 0, max.saturating_add(1).min(size.saturating_add(1)))?;
        if data.len() as u64 > max {
            return Err(BackendError::too_large(name, data.len() as u64, max));
        }
        Ok(data)
    }

    fn read_range(&self, name: &str, offset: u64, len: u64) -> BackendResult<Vec<u8>> {
        if len == 0 {
            return Ok(Vec::new());
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
        Ok(())
    }

    fn write_file(&self, name: &str, file: &std::fs::File, len: u64) -> BackendResult<()> {
        let mut w = self.op.writer(name).map_err(|e| err(name, e))?;
        let mut offset = 0;
        while offset < len {
            let n = (len - offset).min(UPLOAD_PIECE);
            w.write(super::read_spool(name, file, offset, n)?).map_err(|e| err(name, e))?;
            offset += n;
        }
        w.close().map_err(|e| err(name, e))?;
        Ok(())
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
    fn a_full_disk_is_permanent_not_temporary() {
        if !rustix::process::geteuid().is_root() {
            eprintln!("skipped: mounting a small tmpfs needs root");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            eprintln!("skipped: cannot mount a tmpfs here");
            return;
        }
        let be = OpendalBackend::local(dir.path()).unwrap();
        let r = be.write("data/ab/big", vec![1; 1 << 20]);
        let _ = std::process::Command::new("umount").arg(dir.path()).status();
        assert_eq!(r.unwrap_err().kind, ErrorKind::Permanent);
    }
}
