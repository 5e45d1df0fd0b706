//! `coffer prove`: builds the inclusion proof that a file belongs to a signed
//! snapshot (the proof itself is in [`crate::format::proof`]). See
//! docs/design.md#proofs.

use std::os::unix::ffi::OsStrExt;

use crate::error::{Error, Result};
use crate::format::ObjectKind;
use crate::format::bytes::Bytes;
use crate::format::proof::{MAGIC, Proof, VERSION};
use crate::id::Id;
use crate::merkle;
use crate::repo::Repository;
use crate::repo::roots::for_each_leaf;

/// Builds the proof that the file at `path` belongs to snapshot `id`.
pub fn prove(repo: &Repository, id: &Id, path: &[u8]) -> Result<Proof> {
    let snap = repo.load_snapshot(id)?;
    let mut leaves = Vec::with_capacity(snap.merkle_leaves.min(1 << 24) as usize);
    let mut found = None;
    for_each_leaf(repo, &snap, &mut |p, node, leaf| {
        if p.as_os_str().as_bytes() == path {
            found = Some((leaves.len(), node.digest.expect("checked by for_each_leaf")));
        }
        leaves.push(leaf);
        Ok(())
    })?;
    let Some((index, digest)) = found else {
        return Err(Error::PathNotInSnapshot(format!(
            "{} (no regular file at this path in snapshot {})",
            String::from_utf8_lossy(path),
            id.short()
        )));
    };
    if merkle::root(&leaves) != snap.merkle_root.0 || leaves.len() as u64 != snap.merkle_leaves {
        return Err(Error::corrupt(
            ObjectKind::Snapshot.describe(id),
            "its Merkle root does not match its trees; run `coffer check`",
        ));
    }
    let siblings = merkle::inclusion_proof(&leaves, index).expect("index is in range").into_iter().map(Id).collect();
    Ok(Proof {
        magic: MAGIC.into(),
        version: VERSION,
        snapshot_id: *id,
        snapshot: hex::encode(repo.read_object(ObjectKind::Snapshot, id)?),
        path: Bytes(path.to_vec()),
        digest,
        salt: Id(merkle::leaf_salt(&snap.merkle_key.0, path)),
        index: index as u64,
        leaves: leaves.len() as u64,
        siblings,
    })
}
