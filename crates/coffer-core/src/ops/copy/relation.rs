//! How two repositories relate, which decides how a copy between them works:
//! byte for byte, blob by blob, or file by file, cut again. See docs/design.md#copy.

use crate::error::{Error, Result};
use crate::repo::Repository;

/// What two repositories share, from the keys themselves (the `related` field of
/// a config only records how one was made; keys are what decide).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Relation {
    /// The destination holds every data key of the source (same epochs, same
    /// keys) and the same id and chunker keys: every object copies byte for byte.
    SharedKeys,
    /// The same id and chunker keys, different data keys: blob ids agree, blobs
    /// must be decrypted and encrypted again.
    SharedIds,
    /// Nothing shared: file content must be chunked again by the destination.
    Unrelated,
}

impl Relation {
    /// A few words for messages.
    pub fn describe(self) -> &'static str {
        match self {
            Relation::SharedKeys => "related, sharing data keys (objects copy byte for byte)",
            Relation::SharedIds => "related, with their own data keys (blobs are encrypted again)",
            Relation::Unrelated => "unrelated (file content must be chunked again)",
        }
    }
}

/// How `src` relates to `dst`. Copying a repository into itself is refused.
pub fn relate(src: &Repository, dst: &Repository) -> Result<Relation> {
    if src.config().id == dst.config().id {
        return Err(Error::InvalidInput(format!(
            "the source and the destination are the same repository ({}): give --from-repo another repository \
             than --repo (two locations holding one repository are mirrored by copying their objects, not by \
             `coffer copy`)",
            src.config().id.short()
        )));
    }
    let (s, d) = (src.keys(), dst.keys());
    if s.id != d.id || s.chunker != d.chunker {
        return Ok(Relation::Unrelated);
    }
    let shared = s.data.as_slice().iter().enumerate().all(|(e, k)| d.data.get(e as u16) == Some(k));
    Ok(if shared { Relation::SharedKeys } else { Relation::SharedIds })
}

/// Why a copy of this relation cannot run as asked, and what to do instead;
/// `None` when it can. Into an unrelated repository, every file is read and cut
/// again, which the caller asks for with `rechunk`.
pub fn unsupported(relation: Relation, rechunk: bool) -> Option<String> {
    match relation {
        Relation::SharedKeys | Relation::SharedIds => None,
        Relation::Unrelated if rechunk => None,
        Relation::Unrelated => Some(
            "the repositories are unrelated (different id and chunker keys, so blob ids differ): copying between \
             them reads every file of the snapshots copied and cuts it again for the destination; pass --rechunk to \
             do that, or make the destination with `coffer init --from-repo SRC` so that copies send packs byte for \
             byte"
                .into(),
        ),
    }
}
