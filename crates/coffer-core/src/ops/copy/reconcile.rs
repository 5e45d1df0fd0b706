//! Learning a coffer server's names from reconciliation sketches instead of
//! listings (docs/design.md#copy, "Through a server"): the other side's names
//! are sketched here, the server's sketch of the same size is read, and the
//! difference of the two decodes to the names only one side holds. A request
//! of a few kilobytes replaces the pages of a listing when little differs.

use std::collections::HashMap;

use coffer_backend::{Backend, ErrorKind};

use crate::error::Result;
use crate::format::ObjectKind;
use crate::id::Id;
use crate::recon::{self, CELL_LEN, MAX_CELLS, Sketch};

/// The first sketch asked for: 96 cells (4.6 kB) decode about 64 differences.
const FIRST_CELLS: usize = 96;
/// How much larger each further sketch is.
const GROWTH: usize = 16;

/// The names of `kind` that `backend` (a coffer server) holds, learnt against
/// `known`, the other side's names of that kind; `None` when the server
/// answers no sketch or the difference does not decode from the largest one
/// (the caller lists instead). Names only the server holds come with size 0:
/// their size is not known.
pub(super) fn names(
    backend: &dyn Backend,
    kind: ObjectKind,
    known: &HashMap<Id, u64>,
) -> Result<Option<HashMap<Id, u64>>> {
    let largest = Sketch::new(MAX_CELLS).cells();
    let mut cells = Sketch::new(FIRST_CELLS).cells();
    loop {
        let bytes = match backend.read_max(&recon::request_name(kind, cells), (cells * CELL_LEN) as u64) {
            Ok(b) => b,
            Err(e) if e.kind == ErrorKind::Transient => return Err(e.into()),
            // A server that keeps no sketches (or refuses this one): list.
            Err(_) => return Ok(None),
        };
        let Ok(theirs) = Sketch::decode(&bytes, cells) else { return Ok(None) };
        let ours = Sketch::of(cells, known.keys());
        let excess = theirs.count().wrapping_sub(ours.count());
        if let Some(d) = theirs.difference(&ours)
            // What decodes must agree with the counts and with what is known.
            && d.only_first.len() as i64 - d.only_second.len() as i64 == excess
            && d.only_second.iter().all(|id| known.contains_key(id))
        {
            let mut out = known.clone();
            d.only_second.iter().for_each(|id| {
                out.remove(id);
            });
            out.extend(d.only_first.into_iter().map(|id| (id, 0)));
            return Ok(Some(out));
        }
        if cells >= largest {
            return Ok(None);
        }
        // At least the excess differs; a sketch decodes about cells / 1.5.
        cells = Sketch::new((cells * GROWTH).max(excess.unsigned_abs() as usize * 2)).cells();
    }
}
