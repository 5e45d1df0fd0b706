//! Which paths an operation takes: gitignore-style patterns rooted at `/`, as
//! backup's excludes and restore's includes and excludes use them.
//! See docs/design.md#backup.

use ignore::gitignore::{Gitignore, GitignoreBuilder};

use crate::error::{Error, Result};

/// Builds the exclude matcher for gitignore-style `patterns`, rooted at `/`.
pub fn build_excludes(patterns: &[String]) -> Result<Gitignore> {
    build_matcher(patterns, false)
}

/// [`build_excludes`], matching without regard to case when `ignore_case`.
pub fn build_matcher(patterns: &[String], ignore_case: bool) -> Result<Gitignore> {
    let mut b = GitignoreBuilder::new("/");
    b.case_insensitive(ignore_case).map_err(|e| Error::InvalidInput(format!("bad exclude patterns: {e}")))?;
    for p in patterns {
        b.add_line(None, p).map_err(|e| Error::InvalidInput(format!("bad exclude pattern {p:?}: {e}")))?;
    }
    b.build().map_err(|e| Error::InvalidInput(format!("bad exclude patterns: {e}")))
}
