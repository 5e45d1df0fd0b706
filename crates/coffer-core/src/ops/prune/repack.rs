//! Prune step 4, repack: read each pack chosen for repacking whole, verify it
//! against its name, and store its used blobs again in new packs with new index
//! files, so that the pack can be deleted with the others. One pack is in memory
//! at a time. See docs/design.md#prune.

use super::mark::Marks;
use super::plan::Plan;
use crate::error::{Error, Result};
use crate::format::ObjectKind;
use crate::id::Id;
use crate::progress::Progress;
use crate::repo::{BlobSaver, PackInfo, Repository};

/// Copies the used blobs of `plan.repack`'s packs into new packs; returns the
/// bytes stored.
pub(super) fn repack(repo: &Repository, plan: &Plan, marks: &Marks, progress: &dyn Progress) -> Result<u64> {
    if plan.repack.is_empty() {
        return Ok(0);
    }
    let saver = BlobSaver::new(repo);
    for pid in &plan.repack {
        let bytes = repo.backend().read_max(&ObjectKind::Pack.path(pid), ObjectKind::Pack.max_len())?;
        if Id::hash_of(&bytes) != *pid {
            return Err(Error::corrupt(ObjectKind::Pack.describe(pid), "content does not match its name"));
        }
        let fid = plan.usage[pid].index_files[0];
        let rec = repo.load_index_file(&fid)?.into_iter().find(|r| r.id == *pid).ok_or_else(|| {
            Error::corrupt(
                ObjectKind::Index.describe(&fid),
                format!("it no longer lists {}; run the prune again", ObjectKind::Pack.describe(pid)),
            )
        })?;
        let info = PackInfo::from(&rec);
        for e in rec.entries {
            if !marks.used_in(&repo.index(), &e.id, pid) {
                continue;
            }
            let sealed = bytes
                .get(e.offset as usize..e.offset as usize + e.length as usize)
                .ok_or_else(|| Error::corrupt(ObjectKind::Pack.describe(pid), "a blob lies beyond its end"))?;
            let data = repo.decode_blob(&info, &e, sealed)?;
            saver.store_copy(e.blob_type, e.id, &data)?;
        }
        progress.add_bytes(bytes.len() as u64);
    }
    Ok(saver.finish()?.bytes_stored)
}
