//! Recognising a location that holds something other than a coffer repository
//! (restic's, borg's, or unrelated files with a `config`), so that it is reported
//! as "not a coffer repository" with its own exit code rather than as damage
//! (docs/design.md#exit-codes).

use std::fmt;

use coffer_backend::Backend;

/// The first bytes of every sealed object, `config` included (docs/design.md#sealed-objects).
const MAGIC: &[u8] = b"coffer";

/// The location's `config` is not a coffer object.
#[derive(Debug)]
pub struct NotCoffer {
    /// The repository location.
    pub location: String,
    /// What it looks like, e.g. "a restic repository".
    pub looks_like: &'static str,
}

impl fmt::Display for NotCoffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} is not a coffer repository (it looks like {}): its config does not start with coffer's \
             header; check --repo, or use the program that made it",
            self.location, self.looks_like
        )?;
        if self.looks_like == "a restic repository" {
            write!(f, "; to bring its snapshots into coffer: coffer import restic:{}", self.location)?;
        }
        Ok(())
    }
}

impl std::error::Error for NotCoffer {}

/// Fails with [`NotCoffer`] when the storage holds a `config` that is not a
/// coffer object. A missing or unreadable config is left to the repository code
/// to report.
pub fn check(be: &dyn Backend) -> Result<(), NotCoffer> {
    let Ok(head) = be.read_range("config", 0, 16) else {
        return Ok(());
    };
    check_head(be, &head)
}

/// [`check`] on what [`coffer_core::repo::Repository::probe`] read already: no
/// request unless the config is foreign (or was not read whole: too large).
pub fn check_probed(be: &dyn Backend, probe: &coffer_core::repo::Probe) -> Result<(), NotCoffer> {
    match probe.config() {
        Some(config) => check_head(be, config),
        // A read that failed is reported by the open, as the storage gave it.
        None if probe.config_failure().is_some() => Ok(()),
        None if probe.exists() => check(be),
        None => Ok(()),
    }
}

/// [`check`] on the first bytes of `config`.
fn check_head(be: &dyn Backend, head: &[u8]) -> Result<(), NotCoffer> {
    if head.starts_with(MAGIC) {
        return Ok(());
    }
    // restic keeps its key files in `keys/` (a coffer repository's are in `keys/`
    // too, but its config has the coffer header checked above).
    let looks_like = if head.starts_with(b"[repository]") {
        "a borg repository"
    } else if be.list("keys/").is_ok_and(|l| !l.is_empty()) {
        "a restic repository"
    } else {
        "files of another program"
    };
    Err(NotCoffer { location: be.location(), looks_like })
}

#[cfg(test)]
mod tests {
    use coffer_backend::{Backend, MemBackend};

    #[test]
    fn a_coffer_config_passes_and_others_are_named() {
        let be = MemBackend::new();
        assert!(super::check(&be).is_ok(), "no config: left to the repository code");
        be.write("config", b"coffer\x02\x01rest".to_vec()).unwrap();
        assert!(super::check(&be).is_ok());
        be.write("config", b"\x8a\x13random bytes of restic".to_vec()).unwrap();
        assert_eq!(super::check(&be).unwrap_err().looks_like, "files of another program");
        be.write("keys/0123", b"k".to_vec()).unwrap();
        let e = super::check(&be).unwrap_err();
        assert_eq!(e.looks_like, "a restic repository");
        assert!(e.to_string().contains("not a coffer repository"), "{e}");
    }
}
