//! Copying between repositories that share id and chunker keys but not data
//! keys (`init --from-repo SRC --own-data-keys`): blob ids agree, so only the
//! blobs the destination's index lacks are read, decrypted and stored again
//! through the destination's saver; each snapshot is written anew, signed by the
//! destination's writer, recording where it comes from (docs/design.md#copy).

use std::collections::{HashMap, HashSet};
use std::path::Path;

use crate::crypto::sign::SigningKey;
use crate::error::Result;
use crate::format::snapshot::{CopiedFrom, Snapshot};
use crate::format::{ObjectKind, signed};
use crate::id::Id;
use crate::progress::Progress;
use crate::repo::history::History;
use crate::repo::{BlobSaver, Repository, SaverEvent};

use super::{CopySummary, Sent};

/// The source snapshots in `snaps` that an earlier copy wrote into `dst`
/// already (by the `copied_from` of the destination's snapshots).
pub(super) fn already_copied(src: &Repository, dst: &Repository) -> Result<HashSet<Id>> {
    let (snaps, _) = dst.snapshots()?;
    Ok(snaps
        .into_iter()
        .filter_map(|(_, s)| s.copied_from.filter(|c| c.repository == src.config().id).map(|c| c.snapshot))
        .collect())
}

/// What each copy written anew records of its source snapshot (`stored`: the
/// snapshots as stored in `src`, by id): the source, its writer and signature,
/// and the writer of the original backup when the source was itself a copy
/// written anew, so that a reader trusts the copy only as far as it trusts
/// every writer behind it (docs/design.md#copy).
pub(super) fn origins(
    src: &Repository,
    snaps: &[(Id, Snapshot)],
    stored: &HashMap<Id, Vec<u8>>,
) -> HashMap<Id, CopiedFrom> {
    snaps
        .iter()
        .map(|(id, snap)| {
            let signature = stored
                .get(id)
                .and_then(|b| signed::split(b).ok())
                .and_then(|(_, block)| block)
                .map(|b| b.signature.iter().map(|x| format!("{x:02x}")).collect::<String>());
            let origin = snap.copied_from.as_ref().map(|c| c.origin.unwrap_or(c.writer));
            (*id, CopiedFrom { repository: src.config().id, snapshot: *id, writer: snap.writer, signature, origin })
        })
        .collect()
}

/// Stores in `dst` the blobs of `snaps` its index lacks (read from `src`,
/// encrypted again), then a new snapshot for each, signed by `key`, oldest
/// first, each linking to the heads before it. A dry run (`key` is `None`)
/// counts the blobs and stores nothing.
#[allow(clippy::too_many_arguments)] // the copy's parts, as rechunk::copy_snapshots takes them
pub(super) fn copy_snapshots(
    src: &Repository,
    dst: &Repository,
    snaps: &[(Id, Snapshot)],
    origins: &HashMap<Id, CopiedFrom>,
    key: Option<&SigningKey>,
    report: &(dyn Fn(SaverEvent) + Sync),
    progress: &dyn Progress,
    sum: &mut CopySummary,
) -> Result<()> {
    for e in src.load_index()? {
        sum.warnings.push(format!("source {e}; the blobs only it lists are not found"));
    }
    for e in dst.load_index()? {
        sum.warnings.push(format!("destination {e}; the blobs only it lists are copied again"));
    }
    let saver = match key {
        Some(_) => BlobSaver::new(dst).with_observer(report),
        None => BlobSaver::dry_run(dst),
    };
    let mut seen = HashSet::new();
    for (_, snap) in snaps {
        crate::lifecycle::each_used_blob(src, snap.tree, &mut seen, &mut |t, id| {
            if !dst.index().contains(&id, t) {
                let data = src.load_blob(t, &id)?;
                if saver.save_with_id(t, id, &data)? {
                    progress.add_bytes(data.len() as u64);
                }
            }
            Ok(())
        })?;
    }
    let stats = saver.finish()?;
    sum.blobs = Sent { objects: stats.blobs, bytes: stats.bytes_new };
    sum.packs = Sent { objects: stats.packs, bytes: stats.bytes_stored };
    let Some(key) = key else {
        return Ok(());
    };
    write_snapshots(dst, key, origins, snaps.iter().map(|(id, snap)| (*id, snap.clone())), progress, sum)
}

/// Writes `copies` (source snapshot id, snapshot to store) into `dst`, each signed
/// by `key`, linked to the destination's history and recording its source
/// (`origins`, by source snapshot id).
pub(super) fn write_snapshots(
    dst: &Repository,
    key: &SigningKey,
    origins: &HashMap<Id, CopiedFrom>,
    copies: impl IntoIterator<Item = (Id, Snapshot)>,
    progress: &dyn Progress,
    sum: &mut CopySummary,
) -> Result<()> {
    let mut heads = History::load(dst)?.heads();
    for (id, snap) in copies {
        let copy = Snapshot {
            writer: key.public(),
            history: heads.clone(),
            // The parent named a snapshot of the source.
            parent: None,
            copied_from: Some(origins.get(&id).cloned().map(Box::new).ok_or_else(|| {
                crate::error::Error::InvalidInput(format!("snapshot {}: no record of its source", id.short()))
            })?),
            // Its links are the destination's heads, taken now.
            written: Some(humantime::format_rfc3339_nanos(std::time::SystemTime::now()).to_string()),
            signature: Default::default(),
            ..snap
        };
        let new = dst.save_snapshot(&copy, key)?;
        let size = dst.backend().stat(&ObjectKind::Snapshot.path(&new))?;
        sum.snapshot_objects.add(size);
        progress.add_item(Path::new(&ObjectKind::Snapshot.path(&new)));
        heads = vec![new];
    }
    Ok(())
}
