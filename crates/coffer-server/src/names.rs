//! Object names a client may use: the repository layout, strictly. Every name
//! a request carries is classified here before anything else happens; names
//! outside the layout (unknown prefixes, `..`, extra slashes, upper-case hex,
//! the server's own `trash/` and `tmp/`) are refused. See
//! docs/design.md#layout and docs/design.md#server.

use coffer_core::format::ObjectKind;

/// Why a name is not one the server stores.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("object name {name:?} is not part of a coffer repository's layout: {reason}")]
pub struct NameError {
    /// The name given.
    pub name: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// The object kinds by their prefix, `config` excepted.
const PREFIXED: [ObjectKind; 8] = [
    ObjectKind::Key,
    ObjectKind::Index,
    ObjectKind::Snapshot,
    ObjectKind::Tombstone,
    ObjectKind::Writer,
    ObjectKind::Session,
    ObjectKind::PruneNotice,
    ObjectKind::Layout,
];

/// Every directory of the layout, for listing the whole bucket.
pub const DIRECTORIES: [&str; 9] =
    ["keys/", "data/", "index/", "snapshots/", "tombstones/", "writers/", "sessions/", "prune/", "layout/"];

fn is_id(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The kind of object `name` is, if it is a name of the layout.
pub fn classify(name: &str) -> Result<ObjectKind, NameError> {
    let bad = |reason| Err(NameError { name: name.to_string(), reason });
    if name == "config" {
        return Ok(ObjectKind::Config);
    }
    if name.len() > 256 {
        return bad("it is longer than any name of the layout");
    }
    let parts: Vec<&str> = name.split('/').collect();
    match parts.as_slice() {
        ["data", dir, id] => {
            if !is_id(id) {
                return bad("a pack's name must be 64 lowercase hex digits");
            }
            if *dir != &id[..2] {
                return bad("a pack's directory must be the first two hex digits of its id");
            }
            Ok(ObjectKind::Pack)
        }
        [prefix, id] => {
            let Some(kind) = PREFIXED.iter().find(|k| k.prefix() == format!("{prefix}/")) else {
                return bad("unknown prefix");
            };
            if !is_id(id) {
                return bad("the last component must be 64 lowercase hex digits");
            }
            Ok(*kind)
        }
        _ => bad("unknown prefix or wrong number of components"),
    }
}

/// The id part of a name, for content-named kinds (everything but `config` and
/// session markers, which are the objects coffer rewrites).
pub fn content_id(kind: ObjectKind, name: &str) -> Option<&str> {
    match kind {
        ObjectKind::Config | ObjectKind::Session => None,
        _ => name.rsplit('/').next(),
    }
}

/// Whether `prefix` may be listed: empty, or the start of some name of the
/// layout. Listing never shows names outside the layout either way.
pub fn listable_prefix(prefix: &str) -> bool {
    if prefix.is_empty() || "config".starts_with(prefix) {
        return true;
    }
    if prefix.contains("..") || prefix.contains("//") || prefix.starts_with('/') {
        return false;
    }
    let mut dirs: Vec<&str> = PREFIXED.iter().map(|k| k.prefix()).collect();
    dirs.push("data/");
    dirs.iter().any(|d| d.starts_with(prefix) || prefix.starts_with(d))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn layout_names_are_classified() {
        assert_eq!(classify("config"), Ok(ObjectKind::Config));
        assert_eq!(classify(&format!("data/01/{ID}")), Ok(ObjectKind::Pack));
        assert_eq!(classify(&format!("snapshots/{ID}")), Ok(ObjectKind::Snapshot));
        assert_eq!(classify(&format!("sessions/{ID}")), Ok(ObjectKind::Session));
        assert_eq!(classify(&format!("keys/{ID}")), Ok(ObjectKind::Key));
    }

    #[test]
    fn everything_else_is_refused() {
        for bad in [
            String::new(),
            "configx".into(),
            format!("data/02/{ID}"),
            format!("data/01/{}", ID.to_uppercase()),
            format!("../snapshots/{ID}"),
            format!("snapshots/../{ID}"),
            format!("snapshots/{ID}/x"),
            format!("snapshots//{ID}"),
            format!("trash/{ID}"),
            format!("tmp/{ID}"),
            format!("snapshots/{}", &ID[1..]),
            format!("/snapshots/{ID}"),
        ] {
            assert!(classify(&bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn listing_prefixes() {
        assert!(listable_prefix(""));
        assert!(listable_prefix("snapshots/"));
        assert!(listable_prefix("data/ab/"));
        assert!(listable_prefix("con"));
        assert!(!listable_prefix("trash/"));
        assert!(!listable_prefix("../"));
        assert!(!listable_prefix("tmp/"));
    }
}
