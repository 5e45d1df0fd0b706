//! Reading prune notices: the packs running prunes announced they delete, which a
//! writer must neither adopt nor rely on. Their encoding is
//! [`crate::format::notice`]. See docs/design.md#prune.
//!
//! A notice that does not decode (damaged, or bytes planted by anyone who can
//! write to the storage) announces packs nobody can name: it is returned apart,
//! never as an error, so that it cannot stop every backup. A writer then treats
//! it as naming any pack it cannot show is safe ([`Notices::unknown`]).

use std::collections::HashSet;

use crate::error::{Error, Result};
use crate::format::ObjectKind;
use crate::format::envelope::SealedKind;
use crate::format::notice::PruneNotice;
use crate::id::Id;
use crate::repo::Repository;

/// The notices stored now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Notices {
    /// The notices' ids, those that do not decode included.
    pub ids: Vec<Id>,
    /// The union of the packs they list for deletion (copy notices, which remove
    /// copies only, add none).
    pub packs: HashSet<Id>,
    /// The notices that do not decode, each with what is wrong with it.
    pub unknown: Vec<Undecodable>,
}

/// A notice that does not read: which packs it announces is unknown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Undecodable {
    /// The notice's id.
    pub id: Id,
    /// Why it does not decode.
    pub reason: String,
}

impl std::fmt::Display for Undecodable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", ObjectKind::PruneNotice.describe(&self.id), self.reason)
    }
}

/// Loads every prune notice. A notice deleted while it is read (its prune ended)
/// is left out; one that does not decode (or authenticate) is returned in
/// [`Notices::unknown`]. Only a storage failure is an error.
pub fn read(repo: &Repository) -> Result<Notices> {
    let mut out = Notices::default();
    for (id, n) in read_each(repo)? {
        match n {
            Ok(n) => {
                // A copy notice removes copies, never a pack: nothing for a writer to keep.
                if n.backends.is_empty() {
                    out.packs.extend(n.packs);
                }
            }
            Err(e) => out.unknown.push(Undecodable { id, reason: e.to_string() }),
        }
        out.ids.push(id);
    }
    Ok(out)
}

/// Every notice stored now, prune and copy notices alike, with its content. A
/// notice deleted while it is read is left out; one that does not decode is
/// damage, named.
pub fn read_all(repo: &Repository) -> Result<Vec<(Id, PruneNotice)>> {
    read_each(repo)?.into_iter().map(|(id, n)| Ok((id, n?))).collect()
}

/// Every notice stored now, each decoded or with the damage that stops it.
fn read_each(repo: &Repository) -> Result<Vec<(Id, Result<PruneNotice>)>> {
    let mut out = Vec::new();
    for id in repo.list_ids_ahead(ObjectKind::PruneNotice)? {
        let plain = match repo.load_sealed(ObjectKind::PruneNotice, SealedKind::PruneNotice, &id) {
            Ok(p) => p,
            Err(Error::Backend(e)) if e.kind == coffer_backend::ErrorKind::NotFound => continue,
            Err(Error::Backend(e)) => return Err(Error::Backend(e)),
            Err(e) => {
                out.push((id, Err(e)));
                continue;
            }
        };
        let n = PruneNotice::decode(&plain).map_err(|e| Error::corrupt(ObjectKind::PruneNotice.describe(&id), e));
        out.push((id, n));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::FORMAT_VERSION;
    use crate::testing::test_repo;
    use coffer_backend::Backend;

    fn notice(packs: &[u8]) -> Vec<u8> {
        PruneNotice {
            version: FORMAT_VERSION,
            time: "2026-11-24T00:00:00Z".into(),
            hostname: "h".into(),
            packs: packs.iter().map(|b| Id([*b; 32])).collect(),
            backends: Vec::new(),
        }
        .encode()
    }

    #[test]
    fn notices_are_read_as_the_union_of_their_packs() {
        let t = test_repo();
        assert_eq!(read(&t.repo).unwrap(), Notices::default());
        let a = t.repo.save_sealed(SealedKind::PruneNotice, &notice(&[1, 2])).unwrap();
        let b = t.repo.save_sealed(SealedKind::PruneNotice, &notice(&[2, 3])).unwrap();
        let n = read(&t.repo).unwrap();
        let mut ids = n.ids.clone();
        ids.sort();
        let mut want = vec![a, b];
        want.sort();
        assert_eq!(ids, want);
        assert_eq!(n.packs, [1u8, 2, 3].iter().map(|b| Id([*b; 32])).collect());
        // A copy notice is listed, but its packs stay: a writer keeps using them.
        let copies = PruneNotice { backends: vec!["b0".into()], ..PruneNotice::decode(&notice(&[9])).unwrap() };
        let c = t.repo.save_sealed(SealedKind::PruneNotice, &copies.encode()).unwrap();
        let n = read(&t.repo).unwrap();
        assert!(n.ids.contains(&c));
        assert!(!n.packs.contains(&Id([9; 32])), "{:?}", n.packs);
    }

    #[test]
    fn a_notice_that_does_not_decode_is_named_and_stops_nothing() {
        let t = test_repo();
        let good = t.repo.save_sealed(SealedKind::PruneNotice, &notice(&[4])).unwrap();
        let id = t.repo.save_sealed(SealedKind::PruneNotice, b"not json").unwrap();
        // A few bytes of garbage, as anyone who can write to the storage plants them.
        let garbage = b"\x01\x07garbage".to_vec();
        let planted = Id::hash_of(&garbage);
        t.backend.write(&ObjectKind::PruneNotice.path(&planted), garbage).unwrap();
        let n = read(&t.repo).unwrap();
        assert_eq!(n.packs, [Id([4; 32])].into_iter().collect());
        assert!(n.ids.contains(&good) && n.ids.contains(&id) && n.ids.contains(&planted), "{n:?}");
        let mut unknown: Vec<Id> = n.unknown.iter().map(|u| u.id).collect();
        unknown.sort();
        let mut want = vec![id, planted];
        want.sort();
        assert_eq!(unknown, want);
        assert!(n.unknown.iter().all(|u| u.to_string().contains(&ObjectKind::PruneNotice.describe(&u.id))));
        let e = read_all(&t.repo).unwrap_err();
        assert!(unknown.iter().any(|u| e.to_string().contains(&ObjectKind::PruneNotice.describe(u))), "{e}");
    }
}
