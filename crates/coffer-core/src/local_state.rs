//! What a client remembers about a repository between runs, kept on the local
//! machine (never in the repository): the writer's signing key, the history heads
//! it last saw (to detect rollback), and which packs a partial data check has
//! verified. See docs/design.md#local-state.
//!
//! One directory per repository, named by the repository id, created 0700 (the
//! writer's key is there). Files are replaced atomically (written beside, synced,
//! renamed), so a crash leaves the old or the new version, never a mix. The
//! directory is opened without following a link, and refused when it is a link
//! or not owned by the user running coffer; its files are opened relative to it,
//! without following links either, so that nothing planted there sends coffer's
//! reads or writes elsewhere.

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};

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

    /// Reads state file `name`; `None` if it (or the directory) does not exist.
    pub fn read(&self, name: &str) -> Result<Option<Vec<u8>>> {
        let p = self.path(name);
        let Some(dir) = self.open_dir(false)? else { return Ok(None) };
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let fd = match rustix::fs::openat(&dir, name, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) => return Ok(None),
            Err(e) => return Err(self.refused(&p, e)),
        };
        let st = rustix::fs::fstat(&fd).map_err(|e| Error::io(&p, e.into()))?;
        if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
            return Err(Error::InvalidInput(format!(
                "local state file {} is not a regular file: coffer does not read it; remove it",
                p.display()
            )));
        }
        let mut bytes = Vec::new();
        std::fs::File::from(fd).read_to_end(&mut bytes).map_err(|e| Error::io(&p, e))?;
        Ok(Some(bytes))
    }

    /// Replaces state file `name` atomically, readable by its owner only.
    pub fn write(&self, name: &str, bytes: &[u8]) -> Result<()> {
        let dir = self.open_dir(true)?.expect("created");
        let p = self.path(name);
        let tmp = format!(".{name}.tmp-{}", std::process::id());
        let result = (|| {
            let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            let fd = rustix::fs::openat(&dir, &tmp, flags, Mode::from_raw_mode(0o600))?;
            let mut f = std::fs::File::from(fd);
            f.write_all(bytes)?;
            f.sync_all()?;
            rustix::fs::renameat(&dir, &tmp, &dir, name)?;
            std::io::Result::Ok(())
        })();
        if let Err(e) = result {
            let _ = rustix::fs::unlinkat(&dir, &tmp, rustix::fs::AtFlags::empty());
            return Err(Error::io(&p, e));
        }
        Ok(())
    }

    /// Opens the directory (creating it, 0700, with any missing parent, when
    /// `create`) with [`coffer_backend::open_private_dir`]: one that is a link,
    /// or not owned by this user, is refused. `None` when it does not exist and
    /// `create` is false.
    fn open_dir(&self, create: bool) -> Result<Option<OwnedFd>> {
        use std::os::unix::fs::DirBuilderExt;
        if create {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&self.dir)
                .map_err(|e| Error::io(&self.dir, e))?;
        } else if std::fs::symlink_metadata(&self.dir).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound) {
            return Ok(None);
        }
        coffer_backend::open_private_dir(&self.dir)
            .map(Some)
            .map_err(|e| Error::InvalidInput(format!("local state directory {} {}", e.object, e.message)))
    }

    /// The error for an open refused by the system: a link where none may be is
    /// named as such.
    fn refused(&self, path: &Path, e: rustix::io::Errno) -> Error {
        match e {
            rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR => Error::InvalidInput(format!(
                "local state file {} is a symbolic link: coffer does not follow it; remove it",
                path.display()
            )),
            e => Error::io(path, e.into()),
        }
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

    #[test]
    fn the_directory_is_private_and_links_are_not_followed() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let st = LocalState::new(&dir.path().join("state"), &Id([3; 32]));
        st.write("heads", b"x").unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(st.dir()), 0o700);
        assert_eq!(mode(&dir.path().join("state")), 0o700);
        assert_eq!(mode(&st.path("heads")), 0o600);
        // A directory made readable by others is made owner-only again.
        std::fs::set_permissions(st.dir(), std::fs::Permissions::from_mode(0o755)).unwrap();
        st.read("heads").unwrap();
        assert_eq!(mode(st.dir()), 0o700);

        // The repository's directory a link elsewhere: refused, nothing written there.
        let elsewhere = dir.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        let linked = LocalState::new(&dir.path().join("state"), &Id([4; 32]));
        std::os::unix::fs::symlink(&elsewhere, linked.dir()).unwrap();
        let e = linked.write("heads", b"x").unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert!(linked.read("heads").is_err());
        assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);

        // A file in it a link elsewhere: not read, and replaced (not followed) by a write.
        let target = dir.path().join("target");
        std::fs::write(&target, b"outside").unwrap();
        std::os::unix::fs::symlink(&target, st.path("verified")).unwrap();
        assert!(st.read("verified").is_err());
        std::os::unix::fs::symlink(&target, st.path(&format!(".verified.tmp-{}", std::process::id()))).unwrap();
        assert!(st.write("verified", b"new").is_err());
        assert_eq!(std::fs::read(&target).unwrap(), b"outside");
    }
}
