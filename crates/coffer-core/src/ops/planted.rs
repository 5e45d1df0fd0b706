//! Objects that do not decode: key files, index files, writer records, layouts
//! and prune notices whose bytes are damaged or were planted by anyone who can
//! write to the storage (an `append` key through a server can). Finding them
//! (`coffer check` reports each), and removing them (`coffer repair planted`).
//! See docs/design.md#repair-planted.
//!
//! Only what fails to decode or authenticate is removed, never an object that
//! decodes, whatever else is wrong with it (an unsigned layout, an index file
//! listing a missing pack): those are judged by `check` and repaired by the
//! commands that own them.

use serde::Serialize;

use crate::error::{Error, Result};
use crate::format::ObjectKind;
use crate::format::envelope::SealedKind;
use crate::format::keyfile::KeyFile;
use crate::format::layout::Layout;
use crate::format::writer::WriterRecord;
use crate::id::Id;
use crate::lifecycle::notices;
use crate::repo::Repository;

/// The kinds of object [`find`] looks through.
pub const KINDS: [ObjectKind; 5] =
    [ObjectKind::Key, ObjectKind::Index, ObjectKind::Writer, ObjectKind::Layout, ObjectKind::PruneNotice];

/// An object that does not decode.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Planted {
    /// Its kind.
    #[serde(serialize_with = "kind_noun")]
    pub kind: ObjectKind,
    /// Its name's id.
    pub id: Id,
    /// Why it does not decode.
    pub reason: String,
}

fn kind_noun<S: serde::Serializer>(k: &ObjectKind, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(k.noun())
}

impl std::fmt::Display for Planted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The reason names the object already when it comes from a decoder.
        let name = self.kind.describe(&self.id);
        match self.reason.starts_with(&name) {
            true => write!(f, "{}", self.reason),
            false => write!(f, "{name}: {}", self.reason),
        }
    }
}

/// What [`remove`] did.
#[derive(Debug, Default, Serialize)]
pub struct PlantedReport {
    /// The objects that do not decode, by kind then id.
    pub found: Vec<Planted>,
    /// How many were deleted (none for a dry run).
    pub removed: usize,
    /// The index file written for packs only removed index files may have
    /// listed, read from their own headers.
    pub index_file_written: Option<Id>,
    /// Whether nothing was written or deleted.
    pub dry_run: bool,
}

/// Every object of [`KINDS`] that does not decode, by kind then id. An object
/// deleted while it is read is left out; a storage failure is an error.
pub fn find(repo: &Repository) -> Result<Vec<Planted>> {
    let mut out = Vec::new();
    for kind in KINDS {
        if kind == ObjectKind::PruneNotice {
            let mut unknown = notices::read(repo)?.unknown;
            unknown.sort_by_key(|u| u.id);
            out.extend(unknown.into_iter().map(|u| Planted { kind, id: u.id, reason: u.reason }));
            continue;
        }
        for id in repo.list_ids(kind)? {
            match decodes(repo, kind, &id) {
                Ok(()) => {}
                Err(Error::Backend(e)) if e.kind == coffer_backend::ErrorKind::NotFound => {}
                Err(Error::Backend(e)) if e.kind != coffer_backend::ErrorKind::TooLarge => {
                    return Err(Error::Backend(e));
                }
                Err(e) => out.push(Planted { kind, id, reason: e.to_string() }),
            }
        }
    }
    Ok(out)
}

/// Whether the object `id` of `kind` reads, matches its name and decodes.
pub(crate) fn decodes(repo: &Repository, kind: ObjectKind, id: &Id) -> Result<()> {
    let corrupt = |e: String| Error::corrupt(kind.describe(id), e);
    match kind {
        ObjectKind::Key => {
            KeyFile::decode(&repo.read_object(kind, id)?).map(|_| ()).map_err(|e| corrupt(e.to_string()))
        }
        ObjectKind::Index => repo.load_index_file(id).map(|_| ()),
        ObjectKind::Writer => {
            let plain = repo.load_sealed(kind, SealedKind::Writer, id)?;
            WriterRecord::decode(&plain).map(|_| ()).map_err(|e| corrupt(e.to_string()))
        }
        ObjectKind::Layout => {
            let (plain, _, _) = repo.open_signed_layout(id)?;
            Layout::decode(&plain).map(|_| ()).map_err(corrupt)
        }
        _ => Ok(()),
    }
}

/// Deletes every object [`find`] reports (or, with `dry_run`, only reports
/// them). Before an index file is deleted, the packs no other index file lists
/// are indexed from their own headers (as a backup adopts them), except those a
/// prune notice names, so that no blob they hold goes unindexed.
pub fn remove(repo: &Repository, dry_run: bool) -> Result<PlantedReport> {
    let found = find(repo)?;
    let mut report = PlantedReport { dry_run, ..PlantedReport::default() };
    if !dry_run {
        if found.iter().any(|p| p.kind == ObjectKind::Index) {
            repo.load_index()?;
            let noticed = notices::read(repo)?;
            report.index_file_written = repo.adopt_orphan_packs(&noticed.packs)?;
        }
        for p in &found {
            match repo.backend().delete(&p.kind.path(&p.id)) {
                Ok(()) => report.removed += 1,
                Err(e) if e.kind == coffer_backend::ErrorKind::NotFound => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    report.found = found;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{TestTree, noise, test_repo};
    use coffer_backend::Backend;

    /// Stores `bytes` under their hash as an object of `kind`, as anyone who
    /// can write to the storage can.
    fn plant(t: &crate::testing::TestRepo, kind: ObjectKind, bytes: &[u8]) -> Id {
        let id = Id::hash_of(bytes);
        t.backend.write(&kind.path(&id), bytes.to_vec()).unwrap();
        id
    }

    #[test]
    fn what_does_not_decode_is_found_and_removed_and_nothing_else() {
        let t = test_repo();
        t.snapshot(&TestTree::new().file("a", &[&noise(3000, 1)]));
        let before: Vec<(ObjectKind, Vec<Id>)> = KINDS.iter().map(|k| (*k, t.repo.list_ids(*k).unwrap())).collect();
        let checked =
            || crate::ops::check::check(&t.reopen(), &Default::default(), &crate::progress::NoProgress).unwrap();
        let errors_before = checked().errors;
        assert!(find(&t.repo).unwrap().is_empty());
        let planted: Vec<(&str, Id)> =
            KINDS.iter().map(|k| (k.noun(), plant(&t, *k, format!("garbage {}", k.noun()).as_bytes()))).collect();
        let found: Vec<(&str, Id)> = find(&t.repo).unwrap().iter().map(|p| (p.kind.noun(), p.id)).collect();
        assert_eq!(found, planted, "in the order of KINDS");
        let r = remove(&t.repo, true).unwrap();
        assert_eq!((r.found.len(), r.removed), (5, 0));
        assert_eq!(find(&t.repo).unwrap().len(), 5, "a dry run removes nothing");
        let r = remove(&t.repo, false).unwrap();
        assert_eq!((r.found.len(), r.removed, r.index_file_written), (5, 5, None));
        assert!(find(&t.repo).unwrap().is_empty());
        let after: Vec<(ObjectKind, Vec<Id>)> = KINDS.iter().map(|k| (*k, t.repo.list_ids(*k).unwrap())).collect();
        assert_eq!(after, before, "only the planted objects are gone");
        assert_eq!(checked().errors, errors_before);
    }

    #[test]
    fn packs_only_a_removed_index_file_listed_are_indexed_again() {
        let t = test_repo();
        t.snapshot(&TestTree::new().file("a", &[&noise(3000, 1)]));
        // A real index file damaged: its packs are listed by no other.
        let victim = t.repo.list_ids(ObjectKind::Index).unwrap()[0];
        t.backend.write(&ObjectKind::Index.path(&victim), b"damaged".to_vec()).unwrap();
        // As `coffer repair planted` opens it: the index not yet loaded.
        let r = remove(&t.reopen(), false).unwrap();
        assert_eq!(r.removed, 1);
        assert!(r.index_file_written.is_some(), "{r:?}");
        let c = crate::ops::check::check(&t.reopen(), &Default::default(), &crate::progress::NoProgress).unwrap();
        assert!(
            c.errors.iter().all(|e| !e.contains("not in any index") && !e.contains("index file")),
            "{:?}",
            c.errors
        );
        assert!(c.warnings.iter().all(|w| !w.contains("not in any index")), "{:?}", c.warnings);
    }
}
