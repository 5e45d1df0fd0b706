//! Layout versions stored in a repository: signing and storing one, loading and
//! verifying them, and choosing the current one. See docs/design.md#many-backends.

use super::Repository;
use super::signed::split_damaged;
use crate::crypto::sign::SigningKey;
use crate::error::{Error, Result};
use crate::format::ObjectKind;
use crate::format::envelope::SealedKind;
use crate::format::layout::Layout;
use crate::id::Id;

/// The current layout, its id, and the layout objects that were refused.
pub type CurrentLayout = (Option<(Id, Layout)>, Vec<Error>);

impl Repository {
    /// Signs and stores a layout version; returns its id.
    pub fn save_layout(&self, layout: &Layout, key: &SigningKey) -> Result<Id> {
        if layout.writer != key.public() {
            return Err(Error::InvalidInput("the layout names another writer than the signing key".into()));
        }
        self.save_signed(SealedKind::Layout, &layout.encode(), &[0; 32], key)
    }

    /// Loads one layout and checks it: it decodes, its signature verifies, is by
    /// the writer its content names and that writer is registered. A layout that
    /// fails any of these is damage, never used.
    pub fn load_layout(&self, id: &Id) -> Result<Layout> {
        let what = || ObjectKind::Layout.describe(id);
        let (plain, key, signature_ok) = self.open_signed_layout(id)?;
        let layout = Layout::decode(&plain).map_err(|e| Error::corrupt(what(), e))?;
        let refuse = |why: &str| {
            Err(Error::corrupt(
                what(),
                format!("{why}; it is not used (a layout changes where data is kept, so only a signed one counts)"),
            ))
        };
        match key {
            None => return refuse("it is not signed"),
            Some(_) if !signature_ok => return refuse("its signature does not verify"),
            Some(k) if k != layout.writer => return refuse("it is signed by another key than its writer's"),
            Some(_) => {}
        }
        if self.writer(&layout.writer)?.is_none() {
            return refuse(&format!("its writer {} is not registered", layout.writer.short()));
        }
        Ok(layout)
    }

    /// The current layout: the valid one with the highest version (of two with
    /// the same version, the one with the higher id, so every client agrees).
    /// `None` for a repository on one backend. Refused layout objects are
    /// returned apart, for the caller to report.
    pub fn current_layout(&self) -> Result<CurrentLayout> {
        let ids = self.list_ids_ahead(ObjectKind::Layout)?;
        let loaded: Vec<(Id, Result<Layout>)> = ids.iter().map(|id| (*id, self.load_layout(id))).collect();
        let (ok, damaged) = split_damaged(loaded)?;
        let best = ok.into_iter().max_by(|(ia, a), (ib, b)| a.version.cmp(&b.version).then(ia.cmp(ib)));
        Ok((best, damaged))
    }
}

#[cfg(test)]
mod tests {
    use coffer_backend::placement::{BackendSpec, Table};

    use crate::format::layout::{BackendState, Layout, LayoutBackend};
    use crate::testing::test_repo;

    fn layout(version: u64, writer: crate::crypto::sign::PublicKey) -> Layout {
        let b = |name: &str| LayoutBackend {
            spec: BackendSpec { name: name.into(), capacity: 100, zone: None },
            state: BackendState::Active,
        };
        Layout {
            version,
            writer,
            time: "2026-11-24T10:00:00Z".into(),
            backends: vec![b("a"), b("b")],
            table: Table { partitions: 2, replicas: 1, owners: vec![0, 1] },
            previous: None,
        }
    }

    #[test]
    fn the_highest_signed_version_is_current_and_others_are_refused() {
        let t = test_repo();
        let (repo, key) = (&t.repo, &t.key);
        assert!(repo.current_layout().unwrap().0.is_none());
        repo.save_layout(&layout(1, key.public()), key).unwrap();
        let v2 = repo.save_layout(&layout(2, key.public()), key).unwrap();
        let (current, damaged) = repo.current_layout().unwrap();
        assert_eq!(current.unwrap().0, v2);
        assert!(damaged.is_empty());
        // A key nobody registered signs version 3: refused, version 2 stays current.
        let stranger = crate::crypto::sign::SigningKey::generate();
        repo.save_layout(&layout(3, stranger.public()), &stranger).unwrap();
        let (current, damaged) = repo.current_layout().unwrap();
        assert_eq!(current.unwrap().1.version, 2);
        assert_eq!(damaged.len(), 1);
        assert!(damaged[0].to_string().contains("not registered"), "{}", damaged[0]);
        assert!(repo.save_layout(&layout(4, stranger.public()), key).is_err());
    }
}
