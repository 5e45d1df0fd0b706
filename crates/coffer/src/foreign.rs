//! Recognising a location that holds something other than a coffer repository
//! (restic's, borg's, or unrelated files with a `config`), so that it is reported
//! as "not a coffer repository" with its own exit code rather than as damage
//! (docs/design.md#exit-codes).

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The first bytes of every sealed object, `config` included (docs/design.md#sealed-objects).
const MAGIC: &[u8] = b"coffer";

/// The location's `config` is not a coffer object.
#[derive(Debug)]
pub struct NotCoffer {
    /// The repository location.
    pub location: PathBuf,
    /// What it looks like, e.g. "a restic repository".
    pub looks_like: &'static str,
}

impl fmt::Display for NotCoffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} is not a coffer repository (it looks like {}): its config does not start with coffer's \
             header; check --repo, or use the program that made it",
            self.location.display(),
            self.looks_like
        )
    }
}

impl std::error::Error for NotCoffer {}

/// Fails with [`NotCoffer`] when `path/config` exists but is not a coffer object.
/// A missing or unreadable config is left to the repository code to report.
pub fn check(path: &Path) -> Result<(), NotCoffer> {
    let Ok(mut f) = std::fs::File::open(path.join("config")) else {
        return Ok(());
    };
    let mut head = [0u8; 16];
    let mut n = 0;
    while n < head.len() {
        match f.read(&mut head[n..]) {
            Ok(0) | Err(_) => break,
            Ok(k) => n += k,
        }
    }
    if head[..n].starts_with(MAGIC) {
        return Ok(());
    }
    let looks_like = if head[..n].starts_with(b"[repository]") {
        "a borg repository"
    } else if path.join("keys").is_dir() && path.join("data").is_dir() {
        "a restic repository"
    } else {
        "files of another program"
    };
    Err(NotCoffer { location: path.to_path_buf(), looks_like })
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_coffer_config_passes_and_others_are_named() {
        let d = tempfile::tempdir().unwrap();
        assert!(super::check(d.path()).is_ok(), "no config: left to the repository code");
        std::fs::write(d.path().join("config"), b"coffer\x02\x01rest").unwrap();
        assert!(super::check(d.path()).is_ok());
        std::fs::write(d.path().join("config"), b"\x8a\x13random bytes of restic").unwrap();
        std::fs::create_dir(d.path().join("keys")).unwrap();
        std::fs::create_dir(d.path().join("data")).unwrap();
        let e = super::check(d.path()).unwrap_err();
        assert_eq!(e.looks_like, "a restic repository");
        assert!(e.to_string().contains("not a coffer repository"), "{e}");
    }
}
