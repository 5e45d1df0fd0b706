//! Reading prune notices: the packs running prunes announced they delete, which a
//! writer must neither adopt nor rely on. Their encoding is
//! [`crate::format::notice`]. See docs/design.md#prune.

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
    /// The notices' ids.
    pub ids: Vec<Id>,
    /// The union of the packs they list for deletion (copy notices, which remove
    /// copies only, add none).
    pub packs: HashSet<Id>,
}

/// Loads every prune notice. A notice deleted while it is read (its prune ended)
/// is left out; one that does not decode is damage, named.
pub fn read(repo: &Repository) -> Result<Notices> {
    let mut out = Notices::default();
    for (id, n) in read_all(repo)? {
        // A copy notice removes copies, never a pack: nothing for a writer to keep.
        if n.backends.is_empty() {
            out.packs.extend(n.packs);
        }
        out.ids.push(id);
    }
    Ok(out)
}

/// Every notice stored now, prune and copy notices alike, with its content. A
/// notice deleted while it is read is left out; one that does not decode is
/// damage, named.
pub fn read_all(repo: &Repository) -> Result<Vec<(Id, PruneNotice)>> {
    let mut out = Vec::new();
    for id in repo.list_ids_ahead(ObjectKind::PruneNotice)? {
        let plain = match repo.load_sealed(ObjectKind::PruneNotice, SealedKind::PruneNotice, &id) {
            Ok(p) => p,
            Err(Error::Backend(e)) if e.kind == coffer_backend::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        let n = PruneNotice::decode(&plain).map_err(|e| Error::corrupt(ObjectKind::PruneNotice.describe(&id), e))?;
        out.push((id, n));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::FORMAT_VERSION;
    use crate::testing::test_repo;

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
    fn a_notice_that_does_not_decode_is_named() {
        let t = test_repo();
        let id = t.repo.save_sealed(SealedKind::PruneNotice, b"not json").unwrap();
        let e = read(&t.repo).unwrap_err();
        assert!(matches!(e, Error::Corrupt { .. }), "{e}");
        assert!(e.to_string().contains(&ObjectKind::PruneNotice.describe(&id)), "{e}");
    }
}
