//! Every copy of a pack, over a storage of several backends
//! (docs/design.md#check-and-repair): a data check reads each copy the layout
//! places, hashes it against the pack's name, and names the backend of each
//! copy that is damaged or missing, and where an intact copy lies. The pack's
//! content is then verified from an intact copy, so a damaged copy with an
//! intact one elsewhere loses no data (but lowers its redundancy).

use coffer_backend::{BackendError, ErrorKind, PlacedCopy};

use crate::format::ObjectKind;
use crate::id::Id;
use crate::repo::Repository;

/// What is wrong with one copy of a pack.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CopyProblem {
    /// Its bytes do not hash to the pack's name (altered or truncated).
    Damaged,
    /// The backend should hold it and does not.
    Missing,
}

/// A copy of a pack on one backend that is not as it should be.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct DamagedCopy {
    /// The pack.
    pub pack: Id,
    /// The backend holding (or lacking) the copy.
    pub backend: String,
    /// What is wrong.
    pub problem: CopyProblem,
    /// The backends whose copy hashed to the pack's name; empty if none did.
    pub intact_on: Vec<String>,
}

impl DamagedCopy {
    /// A message naming the pack, the backend, and what to do.
    pub fn describe(&self) -> String {
        let what = match self.problem {
            CopyProblem::Damaged => "is damaged (its bytes do not hash to the pack's name)",
            CopyProblem::Missing => "is missing",
        };
        let elsewhere = if self.intact_on.is_empty() {
            "no other copy is intact".to_string()
        } else {
            format!("an intact copy is on {}, so no data is lost, but redundancy is", self.intact_on.join(", "))
        };
        format!(
            "pack {}: the copy on backend {} {what}; {elsewhere}: run `coffer repair --replicas`",
            self.pack.short(),
            self.backend
        )
    }
}

/// The copies of one pack as read.
pub(super) struct CopiesRead {
    /// What to verify the pack's content from: an intact copy if there is one,
    /// else the first copy read, else the worst error.
    pub read: Result<Vec<u8>, BackendError>,
    /// The copies that are damaged or missing.
    pub bad: Vec<DamagedCopy>,
    /// Copies that could not be read (the storage failed): not verified.
    pub unread: Vec<String>,
}

/// Reads every copy of pack `id` that `placed` names, one at a time, keeping
/// at most one copy's bytes beside the one being read.
pub(super) fn read_copies(repo: &Repository, id: &Id, placed: &[PlacedCopy]) -> CopiesRead {
    let name = ObjectKind::Pack.path(id);
    let (mut intact, mut first): (Option<Vec<u8>>, Option<Vec<u8>>) = (None, None);
    let mut error: Option<BackendError> = None;
    let mut good_on = Vec::new();
    let mut bad = Vec::new();
    let mut unread = Vec::new();
    for c in placed {
        match repo.backend().read_max_copy(&name, ObjectKind::Pack.max_len(), c.copy) {
            Ok(bytes) if Id::hash_of(&bytes) == *id => {
                good_on.push(c.backend.clone());
                if intact.is_none() {
                    intact = Some(bytes);
                    first = None;
                }
            }
            Ok(bytes) => {
                bad.push((c.backend.clone(), CopyProblem::Damaged));
                if intact.is_none() && first.is_none() {
                    first = Some(bytes);
                }
            }
            Err(e) if e.kind == ErrorKind::NotFound => {
                if c.required {
                    bad.push((c.backend.clone(), CopyProblem::Missing));
                }
                error.get_or_insert(e);
            }
            Err(e) => {
                unread.push(format!("pack {}: the copy on backend {} could not be read: {e}", id.short(), c.backend));
                if error.as_ref().is_none_or(|prev| prev.kind == ErrorKind::NotFound) {
                    error = Some(e);
                }
            }
        }
    }
    let read = match (intact, first, error) {
        (Some(b), _, _) | (None, Some(b), _) => Ok(b),
        (None, None, Some(e)) => Err(e),
        (None, None, None) => Err(BackendError::new(ErrorKind::NotFound, name, "no backend holds a copy")),
    };
    let bad = bad
        .into_iter()
        .map(|(backend, problem)| DamagedCopy { pack: *id, backend, problem, intact_on: good_on.clone() })
        .collect();
    CopiesRead { read, bad, unread }
}
