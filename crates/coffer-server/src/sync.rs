//! Reconciliation sketches (docs/design.md#server, "Reconciliation"): a GET of
//! `sync/<directory>/<cells>` answers an invertible Bloom lookup table of the
//! ids the storage holds in that directory, so that `coffer copy` learns which
//! names one side lacks from a few kilobytes, whatever the repository's size.

use coffer_backend::Backend;
use coffer_core::format::ObjectKind;
use coffer_core::recon::Sketch;

use crate::names;

/// The encoded sketch of `cells` cells of every `kind` name the storage lists
/// (names outside the layout are left out, as a listing leaves them out).
pub fn sketch(backend: &dyn Backend, kind: ObjectKind, cells: usize) -> coffer_backend::BackendResult<Vec<u8>> {
    let mut s = Sketch::new(cells);
    for o in backend.list(kind.prefix())? {
        if names::classify(&o.name) == Ok(kind)
            && let Some(id) = kind.id_from_path(&o.name)
        {
            s.insert(&id);
        }
    }
    Ok(s.encode())
}

#[cfg(test)]
mod tests {
    use super::*;
    use coffer_backend::MemBackend;
    use coffer_core::id::Id;
    use coffer_core::recon::{self, CELL_LEN};

    #[test]
    fn the_sketch_holds_the_listed_ids_of_its_kind_only() {
        let be = MemBackend::new();
        let ids: Vec<Id> = (0u8..5).map(|i| Id(*blake3::hash(&[i]).as_bytes())).collect();
        for id in &ids[..3] {
            be.write(&ObjectKind::Pack.path(id), vec![1]).unwrap();
        }
        be.write(&ObjectKind::Index.path(&ids[3]), vec![1]).unwrap();
        // Not of the layout: a pack in the wrong directory.
        be.write(&format!("data/zz/{}", ids[4].to_hex()), vec![1]).unwrap();
        let (kind, cells) = recon::parse_request("sync/data/30").unwrap().unwrap();
        let got = sketch(&be, kind, cells).unwrap();
        assert_eq!(got.len(), 30 * CELL_LEN);
        let theirs = Sketch::decode(&got, 30).unwrap();
        let d = theirs.difference(&Sketch::of(30, &ids[..1])).unwrap();
        let mut want = ids[1..3].to_vec();
        want.sort();
        assert_eq!((d.only_first, d.only_second), (want, vec![]));
    }
}
