//! Which paths an operation takes: gitignore-style patterns rooted at `/`, as
//! backup's excludes and restore's includes and excludes use them.
//! See docs/design.md#backup.

use ignore::gitignore::{Gitignore, GitignoreBuilder};

use crate::error::{Error, Result};

/// Builds the exclude matcher for gitignore-style `patterns`, rooted at `/`.
pub fn build_excludes(patterns: &[String]) -> Result<Gitignore> {
    build_matcher(patterns, false, "exclude")
}

/// [`build_excludes`], matching without regard to case when `ignore_case`;
/// `what` names the patterns in errors (`exclude`, `include`).
pub fn build_matcher(patterns: &[String], ignore_case: bool, what: &str) -> Result<Gitignore> {
    let mut b = GitignoreBuilder::new("/");
    b.case_insensitive(ignore_case).map_err(|e| Error::InvalidInput(format!("bad {what} patterns: {e}")))?;
    for p in patterns {
        let bad = |e: String| Error::InvalidInput(format!("bad {what} pattern {p:?}: {e}"));
        unclosed_class(p).map_err(bad)?;
        b.add_line(None, p).map_err(|e| bad(e.to_string()))?;
    }
    b.build().map_err(|e| Error::InvalidInput(format!("bad {what} patterns: {e}")))
}

/// Refuses a `[` that opens a character class no `]` closes (gitignore would
/// take it literally, which is almost always a typo); `\\[` is a literal `[`.
fn unclosed_class(p: &str) -> std::result::Result<(), String> {
    let b = p.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'[' => {
                let mut j = i + 1;
                // A `]` first in the class (after an optional `!` or `^`) is a member.
                if matches!(b.get(j), Some(b'!' | b'^')) {
                    j += 1;
                }
                if b.get(j) == Some(&b']') {
                    j += 1;
                }
                match b[j.min(b.len())..].iter().position(|&c| c == b']') {
                    Some(k) => i = j + k + 1,
                    None => {
                        return Err("a character class `[` is not closed by `]` (write `\\[` for a literal `[`)".into());
                    }
                }
            }
            _ => i += 1,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unclosed_classes_are_refused_and_closed_ones_kept() {
        for bad in ["[abc", "[", "[]", "[!]", "a/[x", "*.[ch"] {
            let e = build_excludes(&[bad.to_string()]).unwrap_err().to_string();
            assert!(e.contains("bad exclude pattern") && e.contains("not closed"), "{bad}: {e}");
        }
        for good in ["[abc]", "[]a]", "[!]]", "\\[abc", "*.[ch]", "a[b]c/[!x]"] {
            build_excludes(&[good.to_string()]).unwrap_or_else(|e| panic!("{good}: {e}"));
        }
        let e = build_matcher(&["[x".into()], true, "include").unwrap_err().to_string();
        assert!(e.contains("bad include pattern"), "{e}");
    }
}
