//! A snapshot as the UI lists it (docs/design.md#ui-memory): the fields its
//! lists, charts, filters and the retention policy read, with the strings that
//! snapshots repeat (host, user, path and tag lists) held once for all of them.
//! A page about one snapshot reads its whole record again ([`crate::repos::RepoView::snapshot`]).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::SystemTime;

use coffer_core::Id;
use coffer_core::format::snapshot::{Snapshot, Summary};
use coffer_core::ops::retention::Dated;

/// What the UI keeps of a snapshot between requests.
#[derive(Clone, Debug)]
pub struct Brief {
    /// When the backup started, as the snapshot records it (RFC 3339).
    pub time: Box<str>,
    pub hostname: Arc<str>,
    pub username: Arc<str>,
    pub paths: Arc<[String]>,
    pub tags: Arc<[String]>,
    /// The root tree.
    pub tree: Id,
    pub summary: Summary,
    /// Whether its signature checked out when it was loaded.
    pub signature_valid: bool,
}

/// The strings already held, so that an equal one is shared rather than copied.
#[derive(Default)]
pub struct Pool {
    strings: HashSet<Arc<str>>,
    lists: HashSet<Arc<[String]>>,
}

impl Pool {
    /// A pool holding the strings of `briefs`, for the ones made next to share.
    pub fn of<'a>(briefs: impl Iterator<Item = &'a Brief>) -> Pool {
        let mut p = Pool::default();
        for b in briefs {
            p.strings.insert(b.hostname.clone());
            p.strings.insert(b.username.clone());
            p.lists.insert(b.paths.clone());
            p.lists.insert(b.tags.clone());
        }
        p
    }

    fn string(&mut self, s: &str) -> Arc<str> {
        if let Some(a) = self.strings.get(s) {
            return a.clone();
        }
        let a: Arc<str> = Arc::from(s);
        self.strings.insert(a.clone());
        a
    }

    fn list(&mut self, v: &[String]) -> Arc<[String]> {
        if let Some(a) = self.lists.get(v) {
            return a.clone();
        }
        let a: Arc<[String]> = Arc::from(v);
        self.lists.insert(a.clone());
        a
    }
}

impl Brief {
    /// The brief of `s`, its repeated strings taken from `pool`.
    pub fn of(s: &Snapshot, pool: &mut Pool) -> Brief {
        Brief {
            time: s.time.as_str().into(),
            hostname: pool.string(&s.hostname),
            username: pool.string(&s.username),
            paths: pool.list(&s.paths),
            tags: pool.list(&s.tags),
            tree: s.tree,
            summary: s.summary.clone(),
            signature_valid: s.signature.is_valid(),
        }
    }
}

impl Dated for Brief {
    fn system_time(&self) -> SystemTime {
        humantime::parse_rfc3339(&self.time).unwrap_or(SystemTime::UNIX_EPOCH)
    }
    fn hostname(&self) -> &str {
        &self.hostname
    }
    fn paths(&self) -> &[String] {
        &self.paths
    }
    fn tags(&self) -> &[String] {
        &self.tags
    }
}

/// Sorts `briefs` oldest first (equal times by id), as the history is sorted.
pub fn sort(briefs: &mut [(Id, Brief)]) {
    briefs.sort_by_cached_key(|(id, b)| (b.system_time(), *id));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_strings_are_held_once_and_the_fields_kept() {
        let r = coffer_core::testing::test_repo();
        let (id, _) = r.snapshot(&coffer_core::testing::TestTree::new().file("a", &[b"x"]));
        let s = r.repo.load_snapshot(&id).unwrap();
        let mut pool = Pool::default();
        let (a, b) = (Brief::of(&s, &mut pool), Brief::of(&s.clone(), &mut pool));
        assert!(Arc::ptr_eq(&a.hostname, &b.hostname) && Arc::ptr_eq(&a.paths, &b.paths));
        assert!(Arc::ptr_eq(&a.tags, &b.tags) && Arc::ptr_eq(&a.username, &b.username));
        assert_eq!((&*a.time, &*a.hostname, &a.paths[..]), (s.time.as_str(), s.hostname.as_str(), &s.paths[..]));
        assert_eq!((a.tree, &a.summary, a.signature_valid), (s.tree, &s.summary, s.signature.is_valid()));
        assert_eq!(Dated::system_time(&a), s.system_time());
        // A pool made from briefs shares their strings with the next ones.
        let mut again = Pool::of([&a].into_iter());
        assert!(Arc::ptr_eq(&Brief::of(&s, &mut again).hostname, &a.hostname));
    }
}
