//! What a client remembers about a repository between runs, kept on the local
//! machine (never in the repository): the writer's signing key, the history heads
//! it last saw (to detect rollback), and which packs a partial data check has
//! verified. See docs/design.md#local-state.
//!
//! One directory per repository, named by the repository id. Files are replaced
//! atomically (written beside, synced, renamed), so a crash leaves the old or the
//! new version, never a mix.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::id::Id;

/// The local state of one repository.
#[derive(Clone, Debug)]
pub struct LocalState {
    dir: PathBuf,
}

impl LocalState {
    /// The state of repository `repo_id` under `base` (for example
    /// `~/.local/state/coffer`). Nothing is created until something is written.
    pub fn new(base: &Path, repo_id: &Id) -> LocalState {
        LocalState { dir: base.join(repo_id.to_hex()) }
    }

    /// The directory holding this repository's state.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The path of state file `name`.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Reads state file `name`; `None` if it does not exist.
    pub fn read(&self, name: &str) -> Result<Option<Vec<u8>>> {
        let p = self.path(name);
        match std::fs::read(&p) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io(&p, e)),
        }
    }

    /// Replaces state file `name` atomically, readable by its owner only.
    pub fn write(&self, name: &str, bytes: &[u8]) -> Result<()> {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::create_dir_all(&self.dir).map_err(|e| Error::io(&self.dir, e))?;
        let p = self.path(name);
        let tmp = self.path(&format!(".{name}.tmp-{}", std::process::id()));
        let result = (|| {
            let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
            f.write_all(bytes)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &p)
        })();
        if let Err(e) = result {
            let _ = std::fs::remove_file(&tmp);
            return Err(Error::io(&p, e));
        }
        Ok(())
    }

    /// Reads a state file holding one id per line; missing reads as empty. A line
    /// that is not an id makes the file damaged.
    pub fn read_ids(&self, name: &str) -> Result<Vec<Id>> {
        let Some(bytes) = self.read(name)? else {
            return Ok(Vec::new());
        };
        let text = String::from_utf8_lossy(&bytes);
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                Id::from_hex(l.trim()).ok_or_else(|| {
                    Error::InvalidInput(format!(
                        "local state file {} is damaged (line {l:?} is not an id); delete it to start afresh",
                        self.path(name).display()
                    ))
                })
            })
            .collect()
    }

    /// Replaces a state file with one id per line.
    pub fn write_ids(&self, name: &str, ids: &[Id]) -> Result<()> {
        let mut text = String::with_capacity(ids.len() * 65);
        for id in ids {
            text.push_str(&id.to_hex());
            text.push('\n');
        }
        self.write(name, text.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_missing_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        let st = LocalState::new(dir.path(), &Id([3; 32]));
        assert!(st.read_ids("heads").unwrap().is_empty());
        let ids = vec![Id([1; 32]), Id([2; 32])];
        st.write_ids("heads", &ids).unwrap();
        assert_eq!(st.read_ids("heads").unwrap(), ids);
        std::fs::write(st.path("heads"), "zz\n").unwrap();
        assert!(st.read_ids("heads").is_err());
    }
}
