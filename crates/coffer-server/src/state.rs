//! The server's state directory: access keys (`keys.json`), the writer
//! allow-list (`writers.json`), the TLS certificate, and spool files of uploads
//! in progress. Files are written atomically (a temporary file in the same
//! directory, synced, renamed) with mode 0600; the directory holds the access
//! keys' secrets, which SigV4 needs in the clear, so it is as secret as a
//! password file. A running server re-reads a file when its modification time
//! or size changes, so `coffer serve key add` takes effect without a restart.
//! See docs/design.md#server.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::ServerError;

/// Creates `dir` (mode 0700) if it does not exist.
pub fn ensure_dir(dir: &Path) -> Result<(), ServerError> {
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| ServerError::io(dir, "cannot create the state directory", e))?;
    }
    Ok(())
}

/// Writes `bytes` to `path` atomically with mode 0600.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), ServerError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    ensure_dir(dir)?;
    let mut tmp = tempfile::Builder::new()
        .prefix(".tmp-")
        .permissions(std::fs::Permissions::from_mode(0o600))
        .tempfile_in(dir)
        .map_err(|e| ServerError::io(dir, "cannot create a temporary file", e))?;
    tmp.write_all(bytes).map_err(|e| ServerError::io(path, "cannot write", e))?;
    tmp.as_file().sync_all().map_err(|e| ServerError::io(path, "cannot sync", e))?;
    tmp.persist(path).map_err(|e| ServerError::io(path, "cannot rename into place", e.error))?;
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Reads a JSON file, or `T::default()` if it does not exist.
pub fn read_json<T: DeserializeOwned + Default>(path: &Path) -> Result<T, ServerError> {
    match std::fs::read(path) {
        Ok(b) => serde_json::from_slice(&b).map_err(|e| ServerError::Corrupt {
            path: path.to_path_buf(),
            reason: format!("{e}; fix or remove the file"),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(T::default()),
        Err(e) => Err(ServerError::io(path, "cannot read", e)),
    }
}

/// Writes a JSON file atomically with mode 0600.
pub fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), ServerError> {
    let mut bytes = serde_json::to_vec_pretty(value)
        .map_err(|e| ServerError::Corrupt { path: path.to_path_buf(), reason: format!("cannot encode: {e}") })?;
    bytes.push(b'\n');
    write_atomic(path, &bytes)
}

/// A file's modification time and size, to notice changes.
type Stamp = Option<(SystemTime, u64)>;

/// A JSON file kept in memory and re-read when it changes on disk.
pub struct Watched<T> {
    path: PathBuf,
    cached: Mutex<(Stamp, Arc<T>)>,
}

impl<T: DeserializeOwned + Default> Watched<T> {
    /// Watches `path` (absent reads as the default).
    pub fn new(path: PathBuf) -> Self {
        Watched { path, cached: Mutex::new((None, Arc::new(T::default()))) }
    }

    /// The current content.
    pub fn get(&self) -> Result<Arc<T>, ServerError> {
        let stamp =
            std::fs::metadata(&self.path).ok().map(|m| (m.modified().unwrap_or(SystemTime::UNIX_EPOCH), m.len()));
        let mut c = self.cached.lock().unwrap_or_else(|e| e.into_inner());
        if c.0 != stamp || stamp.is_none() {
            c.1 = Arc::new(read_json(&self.path)?);
            c.0 = stamp;
        }
        Ok(c.1.clone())
    }
}
