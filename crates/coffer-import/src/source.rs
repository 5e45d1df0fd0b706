//! The storage a reader reads from: a narrow trait owned by this crate, so that coffer can
//! adapt any of its backends to it, and [`LocalDir`], a plain directory.

use std::fmt;
use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Component, Path, PathBuf};

/// Read-only access to the objects of a repository.
///
/// Object names are relative to the repository's root and use `/` between parts, e.g.
/// `config`, `keys/5f2a...`, `index/ab12...`, `data/ab/ab12...`.
pub trait Source: Send + Sync {
    /// Names (relative to the repository root, e.g. "index/ab12...", "data/ab/ab12...")
    /// and sizes of the objects under `dir` ("keys", "snapshots", "index", "data"),
    /// recursively.
    fn list(&self, dir: &str) -> Result<Vec<(String, u64)>, SourceError>;
    /// `len` bytes of `name` from `offset` (fewer only at the end of the object).
    fn read_range(&self, name: &str, offset: u64, len: u64) -> Result<Vec<u8>, SourceError>;
    /// The size of `name`.
    fn size(&self, name: &str) -> Result<u64, SourceError>;
    /// How many requests the storage takes at once: readers that read ahead keep up to
    /// this many in flight. One unless the storage says more.
    fn connections(&self) -> usize {
        1
    }
}

/// What kind of failure a [`SourceError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceErrorKind {
    /// The object (or directory) does not exist.
    NotFound,
    /// Anything else: permissions, I/O, network, a refused name.
    Other,
}

/// A failure of the storage, naming the object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceError {
    pub kind: SourceErrorKind,
    /// The object's name, relative to the repository root.
    pub object: String,
    pub message: String,
}

impl SourceError {
    pub fn new(kind: SourceErrorKind, object: impl Into<String>, message: impl Into<String>) -> Self {
        SourceError { kind, object: object.into(), message: message.into() }
    }

    pub fn not_found(object: impl Into<String>) -> Self {
        SourceError::new(SourceErrorKind::NotFound, object, "not found")
    }

    fn io(object: &str, e: std::io::Error) -> Self {
        let kind =
            if e.kind() == std::io::ErrorKind::NotFound { SourceErrorKind::NotFound } else { SourceErrorKind::Other };
        SourceError::new(kind, object, e.to_string())
    }
}

impl fmt::Display for SourceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.object, self.message)
    }
}

impl std::error::Error for SourceError {}

/// A repository in a local directory.
///
/// Symbolic links inside the repository are never followed: each part of a name is
/// checked with `symlink_metadata`, the final open uses `O_NOFOLLOW`, and listings skip
/// links. Names with empty, `.` or `..` parts, or absolute names, are refused.
#[derive(Debug, Clone)]
pub struct LocalDir {
    root: PathBuf,
}

impl LocalDir {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        LocalDir { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The path of `name`, every part checked to be a plain name and no part a link.
    fn path(&self, name: &str, want_dir: bool) -> Result<PathBuf, SourceError> {
        let refused = |why: &str| SourceError::new(SourceErrorKind::Other, name, why.to_string());
        if name.is_empty() || name.starts_with('/') || name.contains('\0') {
            return Err(refused("refused object name"));
        }
        let mut path = self.root.clone();
        let parts: Vec<&str> = name.split('/').collect();
        for (i, part) in parts.iter().enumerate() {
            let mut comps = Path::new(part).components();
            match (comps.next(), comps.next()) {
                (Some(Component::Normal(_)), None) => {}
                _ => return Err(refused("refused object name (empty, '.' or '..' part)")),
            }
            path.push(part);
            let meta = fs::symlink_metadata(&path).map_err(|e| SourceError::io(name, e))?;
            if meta.file_type().is_symlink() {
                return Err(refused("is a symbolic link inside the repository; not followed"));
            }
            let last = i + 1 == parts.len();
            if (!last || want_dir) && !meta.is_dir() {
                return Err(SourceError::new(SourceErrorKind::NotFound, name, "not a directory"));
            }
            if last && !want_dir && !meta.is_file() {
                return Err(refused("not a regular file"));
            }
        }
        Ok(path)
    }

    fn open(&self, name: &str) -> Result<File, SourceError> {
        let path = self.path(name, false)?;
        let mut opts = fs::OpenOptions::new();
        opts.read(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.custom_flags(libc::O_NOFOLLOW);
        }
        opts.open(&path).map_err(|e| SourceError::io(name, e))
    }

    fn walk(&self, rel: &str, path: &Path, out: &mut Vec<(String, u64)>) -> Result<(), SourceError> {
        let entries = fs::read_dir(path).map_err(|e| SourceError::io(rel, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| SourceError::io(rel, e))?;
            let Some(file_name) = entry.file_name().to_str().map(str::to_owned) else {
                // restic's object names are hex: a name that is not UTF-8 is not one of them.
                continue;
            };
            let child = format!("{rel}/{file_name}");
            let meta = entry.metadata().map_err(|e| SourceError::io(&child, e))?;
            let ft = meta.file_type();
            if ft.is_symlink() {
                continue;
            } else if ft.is_dir() {
                self.walk(&child, &entry.path(), out)?;
            } else if ft.is_file() {
                out.push((child, meta.len()));
            }
        }
        Ok(())
    }
}

impl Source for LocalDir {
    fn list(&self, dir: &str) -> Result<Vec<(String, u64)>, SourceError> {
        let path = self.path(dir, true)?;
        let mut out = Vec::new();
        self.walk(dir, &path, &mut out)?;
        out.sort();
        Ok(out)
    }

    fn read_range(&self, name: &str, offset: u64, len: u64) -> Result<Vec<u8>, SourceError> {
        let mut f = self.open(name)?;
        let size = f.metadata().map_err(|e| SourceError::io(name, e))?.len();
        let avail = size.saturating_sub(offset).min(len);
        let cap =
            usize::try_from(avail).map_err(|_| SourceError::new(SourceErrorKind::Other, name, "range too large"))?;
        f.seek(SeekFrom::Start(offset)).map_err(|e| SourceError::io(name, e))?;
        let mut buf = Vec::with_capacity(cap);
        f.take(avail).read_to_end(&mut buf).map_err(|e| SourceError::io(name, e))?;
        Ok(buf)
    }

    fn connections(&self) -> usize {
        // A local disk: as many reads as cores, as coffer's own local storage does.
        std::thread::available_parallelism().map_or(4, |n| n.get()).clamp(2, 8)
    }

    fn size(&self, name: &str) -> Result<u64, SourceError> {
        let f = self.open(name)?;
        Ok(f.metadata().map_err(|e| SourceError::io(name, e))?.len())
    }
}
