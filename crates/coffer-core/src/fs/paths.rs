//! Paths given by the user, made absolute and clean without following the link
//! a path may end in.

use std::path::{Component, Path, PathBuf};

use crate::error::{Error, Result};

/// Makes `p` absolute and lexically clean (no `.`, `..` resolved against the
/// components before it), without following symlinks.
pub fn clean_absolute(p: &Path) -> Result<PathBuf> {
    let abs = std::path::absolute(p).map_err(|e| Error::io(p, e))?;
    let mut out = PathBuf::from("/");
    for c in abs.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            _ => {}
        }
    }
    Ok(out)
}

/// Makes a path given by the user absolute and resolves symlinks in the
/// directories above it (not in the path's last component, which is backed up
/// as what it is), so the snapshot mirrors real directories. Fails if the path
/// does not exist.
pub fn resolve_path(p: &Path) -> Result<PathBuf> {
    let clean = clean_absolute(p)?;
    let resolved = match (clean.parent(), clean.file_name()) {
        (Some(parent), Some(name)) => std::fs::canonicalize(parent).map_err(|e| Error::io(parent, e))?.join(name),
        _ => clean,
    };
    std::fs::symlink_metadata(&resolved).map_err(|e| Error::io(&resolved, e))?;
    Ok(resolved)
}
