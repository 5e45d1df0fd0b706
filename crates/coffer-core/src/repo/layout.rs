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
use crate::trust::TrustedWriters;

/// The current layout, its id, and the layout objects that were refused.
pub type CurrentLayout = (Option<(Id, Layout)>, Vec<Error>);

/// The layout a client follows, chosen with the writers it trusts
/// ([`Repository::choose_layout`]).
#[derive(Debug, Default)]
pub struct LayoutChoice {
    /// The layout to follow: the current one, unless it lowers protection and
    /// no trusted writer signed it (then the newest trusted one).
    pub followed: Option<(Id, Layout)>,
    /// The newest layout signed by a writer this client trusts.
    pub trusted: Option<(Id, Layout)>,
    /// The highest version of any valid layout (a new one must exceed it).
    pub newest_version: u64,
    /// Layout objects refused (damage, or not signed by a registered writer).
    pub refused: Vec<Error>,
    /// What to tell the user: a current layout set aside, or followed although
    /// no trusted writer signed it.
    pub notes: Vec<String>,
}

impl LayoutChoice {
    /// Whether the followed layout is signed by a trusted writer.
    pub fn followed_is_trusted(&self) -> bool {
        matches!((&self.followed, &self.trusted), (Some((a, _)), Some((b, _))) if a == b)
    }
}

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

    /// The layout to follow (docs/design.md#trusted-layouts): the current one
    /// ([`Repository::current_layout`]) if a writer in `trusted` signed it, or if
    /// it keeps at least the protection of the newest layout such a writer signed
    /// (or there is none); otherwise that trusted layout, and the current one is
    /// reported, not acted on.
    pub fn choose_layout(&self, trusted: &TrustedWriters) -> Result<LayoutChoice> {
        let ids = self.list_ids_ahead(ObjectKind::Layout)?;
        let loaded: Vec<(Id, Result<Layout>)> = ids.iter().map(|id| (*id, self.load_layout(id))).collect();
        let (ok, refused) = split_damaged(loaded)?;
        let order = |(ia, a): &&(Id, Layout), (ib, b): &&(Id, Layout)| a.version.cmp(&b.version).then(ia.cmp(ib));
        let current = ok.iter().max_by(order).cloned();
        let newest_trusted = ok.iter().filter(|(_, l)| trusted.trusts(&l.writer)).max_by(order).cloned();
        let newest_version = ok.iter().map(|(_, l)| l.version).max().unwrap_or(0);
        let mut choice = LayoutChoice { newest_version, refused, ..LayoutChoice::default() };
        let Some((cid, cur)) = current else { return Ok(choice) };
        if trusted.trusts(&cur.writer) {
            choice.followed = Some((cid, cur));
            choice.trusted = newest_trusted;
            return Ok(choice);
        }
        let signer = match self.writer(&cur.writer)? {
            Some(w) => format!("writer {} (key {})", w.name(), cur.writer.short()),
            None => format!("key {}", cur.writer.short()),
        };
        let trust = format!("`coffer writers trust {}`", cur.writer.to_hex());
        match &newest_trusted {
            Some((_, t)) if cur.lowers_protection(t).is_some() => {
                let why = cur.lowers_protection(t).unwrap_or_default();
                choice.notes.push(format!(
                    "layout version {} ({}) by {signer}, which this client does not trust, lowers protection ({why}):                      it is not followed, version {} is; if you trust that writer, {trust}",
                    cur.version,
                    cid.short(),
                    t.version
                ));
                choice.followed = newest_trusted.clone();
            }
            _ => {
                choice.notes.push(format!(
                    "layout version {} ({}) is signed by {signer}, which this client does not trust: it is followed,                      but no copy a trusted layout needs is removed under it; if you trust that writer, {trust}",
                    cur.version,
                    cid.short()
                ));
                choice.followed = Some((cid, cur));
            }
        }
        choice.trusted = newest_trusted;
        Ok(choice)
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
