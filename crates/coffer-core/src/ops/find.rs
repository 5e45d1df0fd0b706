//! Finding entries by name across snapshots (`coffer find`).
//! See docs/design.md#find.
//!
//! Names are matched with glob patterns (`*`, `?`, `[…]`, `**`); a pattern
//! holding `/` is matched against the entry's whole snapshot path instead. The
//! trees are streamed ([`crate::repo::tree_walk::walk`]): nothing is collected,
//! each match is handed on as it is found.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

use crate::error::{Error, Result};
use crate::format::tree::Node;
use crate::id::Id;
use crate::repo::Repository;
use crate::repo::tree_walk::{TooLong, walk_bounded};

/// The patterns `find` looks for.
pub struct NamePatterns {
    names: GlobSet,
    paths: GlobSet,
}

impl NamePatterns {
    /// Builds the patterns; `ignore_case` matches without regard to case. An
    /// invalid pattern is an error naming it.
    pub fn new(patterns: &[String], ignore_case: bool) -> Result<NamePatterns> {
        let mut names = GlobSetBuilder::new();
        let mut paths = GlobSetBuilder::new();
        for p in patterns {
            let glob = GlobBuilder::new(p)
                .case_insensitive(ignore_case)
                .literal_separator(true)
                .build()
                .map_err(|e| Error::InvalidInput(format!("bad pattern {p:?}: {e}")))?;
            if p.contains('/') {
                paths.add(glob)
            } else {
                names.add(glob)
            };
        }
        let build = |b: GlobSetBuilder| b.build().map_err(|e| Error::InvalidInput(format!("bad patterns: {e}")));
        Ok(NamePatterns { names: build(names)?, paths: build(paths)? })
    }

    /// Whether the entry at snapshot path `path` is a match.
    pub fn matches(&self, path: &Path) -> bool {
        let name = path.file_name().unwrap_or(OsStr::from_bytes(b""));
        self.names.is_match(Path::new(name)) || self.paths.is_match(path)
    }
}

/// Calls `found` with every entry below the root tree `root` whose name (or path)
/// matches `patterns`, in tree order. An entry whose path would be longer than
/// [`MAX_PATH_LEN`](crate::repo::tree_walk::MAX_PATH_LEN) is not searched, nor
/// what is below it, but given to `too_long` (a crafted chain would otherwise
/// cost time and output growing with the square of its depth). Returns the
/// number of entries walked.
pub fn find(
    repo: &Repository,
    root: Id,
    patterns: &NamePatterns,
    found: &mut dyn FnMut(&Path, &Node) -> Result<()>,
    too_long: &mut dyn FnMut(TooLong) -> Result<()>,
) -> Result<u64> {
    let mut walked = 0u64;
    let mut visit = |path: &Path, node: &Node| {
        walked += 1;
        if patterns.matches(path) { found(path, node) } else { Ok(()) }
    };
    walk_bounded(repo, root, Path::new("/"), &mut visit, too_long)?;
    Ok(walked)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_paths() {
        let p = NamePatterns::new(&["*.TXT".into(), "/home/*/notes".into()], true).unwrap();
        assert!(p.matches(Path::new("/a/b/readme.txt")));
        assert!(!p.matches(Path::new("/a/b.txt/readme")));
        assert!(p.matches(Path::new("/home/ann/notes")));
        assert!(!p.matches(Path::new("/home/ann/x/notes")));
        let exact = NamePatterns::new(&["*.TXT".into()], false).unwrap();
        assert!(!exact.matches(Path::new("/a/readme.txt")));
        assert!(NamePatterns::new(&["[".into()], false).is_err());
    }
}
