//! Prune: deletes what no snapshot references and repacks mostly unused packs,
//! without locks, while backups run. See docs/design.md#prune.
//!
//! 1. Mark: every blob reachable from a live snapshot, as one bit per indexed blob
//!    (each distinct tree is visited once).
//! 2. Plan: a pack with no used blob is deleted; one whose unused share exceeds
//!    `max_unused` is repacked (its used blobs copied into new packs first).
//! 3. Announce: a sealed notice `prune/<id>` lists the packs to delete; prune then
//!    waits a grace period, watching the session markers of running backups.
//! 4. Re-check: snapshots written meanwhile are marked too, and packs they use are
//!    spared, as are packs of running backups. Index files that list deleted packs
//!    are replaced, then the packs are deleted.
//!
//! Memory: the index, one bit per blob, a few counters per pack, and one pack at a
//! time while repacking.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::format::envelope::SealedKind;
use crate::format::pack::BlobType;
use crate::format::tree::NodeKind;
use crate::format::{FORMAT_VERSION, ObjectKind, index as index_file};
use crate::id::Id;
use crate::lifecycle::session;
use crate::progress::Progress;
use crate::repo::history::History;
use crate::repo::{BlobSaver, MasterIndex, Repository};

/// What to prune and how.
#[derive(Clone, Debug)]
pub struct PruneOptions {
    /// Repack a pack when more than this percentage of its bytes is unused.
    pub max_unused: f64,
    /// Plan and report, change nothing.
    pub dry_run: bool,
    /// How long to wait between announcing deletions and doing them.
    pub grace: Duration,
}

impl Default for PruneOptions {
    fn default() -> Self {
        PruneOptions { max_unused: 5.0, dry_run: false, grace: session::grace() }
    }
}

/// What a prune did (or, for a dry run, would do).
#[derive(Clone, Debug, Default, Serialize)]
pub struct PruneReport {
    /// Packs in the repository at the start.
    pub packs: u64,
    /// Their total size.
    pub bytes_before: u64,
    /// Blobs referenced by live snapshots.
    pub blobs_used: u64,
    /// Indexed blobs no live snapshot references (duplicates included).
    pub blobs_unused: u64,
    /// Packs deleted.
    pub packs_deleted: u64,
    /// Packs repacked (their used blobs copied, then the pack deleted).
    pub packs_repacked: u64,
    /// Packs kept because a backup running meanwhile may need them.
    pub packs_spared: u64,
    /// Bytes of the packs deleted.
    pub bytes_deleted: u64,
    /// Bytes written by repacking.
    pub bytes_repacked: u64,
    /// Index files replaced.
    pub index_files_replaced: u64,
    /// Forgotten snapshots whose deletion was finished.
    pub snapshots_deleted: u64,
    /// Session markers of crashed backups removed.
    pub stale_sessions: u64,
    /// Wall time in milliseconds.
    pub duration_ms: u64,
    /// Nothing was changed.
    pub dry_run: bool,
}

impl PruneReport {
    /// Bytes freed: deleted minus added by repacking.
    pub fn bytes_freed(&self) -> i64 {
        self.bytes_deleted as i64 - self.bytes_repacked as i64
    }
}

/// The notice a prune stores before deleting anything.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PruneNotice {
    /// MUST equal 2.
    pub version: u32,
    /// When (informational).
    pub time: String,
    /// Host that ran the prune.
    pub hostname: String,
    /// Packs it is deleting.
    pub packs: Vec<Id>,
}

impl PruneNotice {
    /// Parses a notice's plaintext.
    pub fn decode(buf: &[u8]) -> std::result::Result<PruneNotice, String> {
        let n: PruneNotice = serde_json::from_slice(buf).map_err(|e| format!("prune notice does not parse: {e}"))?;
        if n.version != FORMAT_VERSION {
            return Err(format!("prune notice version {} is not supported", n.version));
        }
        Ok(n)
    }
}

/// Loads every prune notice: the ids and the union of the packs they list.
pub fn notices(repo: &Repository) -> Result<(Vec<Id>, HashSet<Id>)> {
    let ids = repo.list_ids(ObjectKind::PruneNotice)?;
    let mut packs = HashSet::new();
    let mut found = Vec::new();
    for id in ids {
        let plain = match repo.load_sealed(ObjectKind::PruneNotice, SealedKind::PruneNotice, &id) {
            Ok(p) => p,
            Err(Error::Backend(e)) if e.kind == coffer_backend::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        let n = PruneNotice::decode(&plain).map_err(|e| Error::corrupt(ObjectKind::PruneNotice.describe(&id), e))?;
        packs.extend(n.packs);
        found.push(id);
    }
    Ok((found, packs))
}

/// One bit per indexed blob.
struct Marks {
    bits: Vec<u64>,
}

impl Marks {
    fn new(n: usize) -> Marks {
        Marks { bits: vec![0; n.div_ceil(64)] }
    }

    /// Sets bit `i`; returns whether it was clear.
    fn set(&mut self, i: usize) -> bool {
        let (w, b) = (i / 64, 1u64 << (i % 64));
        let was_clear = self.bits[w] & b == 0;
        self.bits[w] |= b;
        was_clear
    }

    fn get(&self, i: usize) -> bool {
        self.bits[i / 64] & (1u64 << (i % 64)) != 0
    }
}

/// Marks every blob reachable from `root`. Blobs the index does not know are
/// passed to `unknown`.
fn mark_tree(
    repo: &Repository,
    index: &MasterIndex,
    marks: &mut Marks,
    root: Id,
    unknown: &mut dyn FnMut(Id, BlobType) -> Result<()>,
) -> Result<()> {
    let mut stack = vec![root];
    while let Some(tid) = stack.pop() {
        match index.slot(&tid) {
            Some(slot) => {
                if !marks.set(slot) {
                    continue; // this tree was marked through another snapshot or directory
                }
            }
            None => {
                unknown(tid, BlobType::Tree)?;
                continue;
            }
        }
        // The listing is streamed part by part; its parts and the content parts
        // of its files are blobs this tree uses, marked like the others.
        let mut nodes = repo.tree_nodes(&tid)?;
        let mut parts = Vec::new();
        for node in nodes.by_ref() {
            let node = node?;
            match node.kind {
                NodeKind::Dir => stack.extend(node.subtree),
                NodeKind::File => {
                    for id in &repo.resolve_content(&node, &mut |p| parts.push(p))? {
                        match index.slot(id) {
                            Some(slot) => {
                                marks.set(slot);
                            }
                            None => unknown(*id, BlobType::Data)?,
                        }
                    }
                }
                _ => {}
            }
        }
        for p in nodes.loaded_blobs()[1..].iter().chain(&parts) {
            match index.slot(p) {
                Some(slot) => {
                    marks.set(slot);
                }
                None => unknown(*p, BlobType::Tree)?,
            }
        }
    }
    Ok(())
}

/// Per-pack usage.
#[derive(Clone, Debug, Default)]
struct Usage {
    size: u64,
    used_blobs: u64,
    unused_blobs: u64,
    used_bytes: u64,
    /// Every index file that lists the pack (several writers may have).
    index_files: Vec<Id>,
}

/// Prunes `repo`, which must not have its index loaded yet: the snapshots are
/// listed first and the index read after, so that every snapshot seen has its
/// blobs in the index read (a snapshot is written after its index files).
pub fn prune(repo: &Repository, opts: &PruneOptions, progress: &dyn Progress) -> Result<PruneReport> {
    let start = Instant::now();
    let mut report = PruneReport { dry_run: opts.dry_run, ..Default::default() };
    let mut history = History::load(repo)?;
    // One listing of the index files serves the whole run: the index read now, the
    // usage counted below, and the files replaced at the end.
    let index_files = repo.list_ids(ObjectKind::Index)?;
    repo.load_index_files(&index_files)?;
    repo.index_mut().merge();
    if let Some(e) = history.damaged.first() {
        return Err(Error::InvalidInput(format!(
            "prune refuses to run while a snapshot is damaged ({e}): what it references is unknown; run \
             `coffer check` and forget the damaged snapshot first"
        )));
    }
    // Finish forgets that were interrupted.
    let forgotten = history.forgotten();
    for (id, _) in history.snapshots.iter().filter(|(id, _)| forgotten.contains_key(id)) {
        if !opts.dry_run {
            repo.backend().delete(&ObjectKind::Snapshot.path(id))?;
        }
        report.snapshots_deleted += 1;
    }
    let live: Vec<Id> = history.live_snapshots().iter().map(|(id, _)| *id).collect();

    // 1. Mark.
    let index_len = repo.index().len();
    let mut marks = Marks::new(index_len);
    {
        let index = repo.index();
        for (id, snap) in history.live_snapshots() {
            mark_tree(repo, &index, &mut marks, snap.tree, &mut |blob, t| {
                Err(Error::corrupt(
                    format!("{} {}", t.noun(), blob.short()),
                    format!("snapshot {} references it but no index lists it; run `coffer check`", id.short()),
                ))
            })?;
        }
    }

    // 2. Usage per pack, streaming the index files.
    let stored: HashMap<Id, u64> = repo
        .backend()
        .list(ObjectKind::Pack.prefix())?
        .into_iter()
        .filter_map(|o| Some((ObjectKind::Pack.id_from_path(&o.name)?, o.size)))
        .collect();
    report.packs = stored.len() as u64;
    report.bytes_before = stored.values().sum();
    // A blob indexed in a pack that is gone (an index file the storage replayed)
    // is served, and so counted used, from a copy in a stored pack.
    repo.index_mut().set_stored_packs(&stored.keys().copied().collect());
    let mut usage: HashMap<Id, Usage> = HashMap::new();
    {
        let index = repo.index();
        for fid in &index_files {
            for rec in repo.load_index_file(fid)? {
                let u = usage.entry(rec.id).or_default();
                u.index_files.push(*fid);
                if u.index_files.len() > 1 {
                    continue; // listed twice; counted once
                }
                u.size = stored.get(&rec.id).copied().unwrap_or(0);
                for e in &rec.entries {
                    let used = index.slot(&e.id).is_some_and(|s| marks.get(s))
                        && index.get(&e.id).is_some_and(|(_, p)| p.id == rec.id);
                    if used {
                        u.used_blobs += 1;
                        u.used_bytes += e.length as u64;
                    } else {
                        u.unused_blobs += 1;
                    }
                }
            }
        }
    }
    report.blobs_used = usage.values().map(|u| u.used_blobs).sum();
    report.blobs_unused = usage.values().map(|u| u.unused_blobs).sum();

    // 3. Plan, sparing what running backups are writing.
    let sessions_before = session::list(repo)?;
    let mut delete: HashSet<Id> = HashSet::new();
    let mut repack: Vec<Id> = Vec::new();
    for (pid, u) in &usage {
        if !stored.contains_key(pid) {
            continue; // missing: `check` reports it
        }
        if u.used_blobs == 0 {
            delete.insert(*pid);
        } else if u.size > 0 && (u.size - u.used_bytes.min(u.size)) as f64 * 100.0 / u.size as f64 > opts.max_unused {
            repack.push(*pid);
        }
    }
    // Packs no index lists: left by crashed backups, or a running backup's latest.
    let unindexed: HashSet<Id> = stored.keys().filter(|p| !usage.contains_key(p)).copied().collect();
    delete.extend(&unindexed);
    let spare = |delete: &mut HashSet<Id>, repack: &mut Vec<Id>, sessions: &[(Id, Option<session::SessionRecord>)]| {
        let mut spared = 0;
        if sessions.is_empty() {
            return spared;
        }
        let records: Vec<&session::SessionRecord> = sessions.iter().filter_map(|(_, r)| r.as_ref()).collect();
        let their_files: HashSet<Id> = records.iter().flat_map(|r| r.index_files.iter().copied()).collect();
        let their_packs: HashSet<Id> = records.iter().flat_map(|r| r.packs.iter().copied()).collect();
        let keep = |p: &Id| {
            unindexed.contains(p)
                || their_packs.contains(p)
                || usage.get(p).is_some_and(|u| u.index_files.iter().any(|f| their_files.contains(f)))
        };
        delete.retain(|p| {
            let k = keep(p);
            spared += k as u64;
            !k
        });
        repack.retain(|p| {
            let k = keep(p);
            spared += k as u64;
            !k
        });
        spared
    };
    report.packs_spared += spare(&mut delete, &mut repack, &sessions_before);
    if opts.dry_run {
        let doomed: HashSet<&Id> = delete.iter().chain(&repack).collect();
        let files: HashSet<&Id> =
            doomed.iter().filter_map(|p| usage.get(*p)).flat_map(|u| u.index_files.iter()).collect();
        report.index_files_replaced = files.len() as u64;
        report.packs_deleted = delete.len() as u64;
        report.packs_repacked = repack.len() as u64;
        report.bytes_deleted = delete.iter().chain(&repack).map(|p| stored[p]).sum();
        report.duration_ms = start.elapsed().as_millis() as u64;
        return Ok(report);
    }

    // 4. Repack: copy the used blobs of mostly unused packs into new packs.
    if !repack.is_empty() {
        let saver = BlobSaver::new(repo);
        for pid in &repack {
            let bytes = repo.backend().read_max(&ObjectKind::Pack.path(pid), ObjectKind::Pack.max_len())?;
            if Id::hash_of(&bytes) != *pid {
                return Err(Error::corrupt(ObjectKind::Pack.describe(pid), "content does not match its name"));
            }
            let fid = usage[pid].index_files[0];
            let rec = repo.load_index_file(&fid)?.into_iter().find(|r| r.id == *pid).expect("listed in its index file");
            let info = crate::repo::PackInfo::from(&rec);
            for e in rec.entries {
                let used = {
                    let index = repo.index();
                    index.slot(&e.id).is_some_and(|s| marks.get(s))
                        && index.get(&e.id).is_some_and(|(_, p)| p.id == *pid)
                };
                if !used {
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
        report.bytes_repacked = saver.finish()?.bytes_stored;
    }
    delete.extend(repack.iter().copied());

    // 5. Announce, then wait, watching the running backups' markers.
    // Several notices when the packs are too many for one (limits::PRUNE_NOTICE_PACKS).
    let mut doomed: Vec<Id> = delete.iter().copied().collect();
    doomed.sort();
    let mut notice_ids = Vec::new();
    let mut batches: Vec<&[Id]> = doomed.chunks(crate::format::limits::PRUNE_NOTICE_PACKS).collect();
    if batches.is_empty() {
        batches.push(&[]);
    }
    for packs in batches {
        let notice = PruneNotice {
            version: FORMAT_VERSION,
            time: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
            hostname: crate::fs::meta::hostname(),
            packs: packs.to_vec(),
        };
        notice_ids.push(repo.save_sealed(SealedKind::PruneNotice, &serde_json::to_vec(&notice).expect("serializes"))?);
    }
    let (old_notices, _) = notices(repo)?;
    let watched = session::list(repo)?;
    progress.waiting("running backups to see the prune notice and keep what they need", opts.grace);
    std::thread::sleep(opts.grace);
    let now = session::list(repo)?;
    // A marker unchanged across the grace period belongs to a backup that stopped.
    // It is removed, but what it protected is still spared this time: a backup that
    // was only paused re-creates its marker, and a later prune frees the rest.
    let mut no_repack = Vec::new();
    report.packs_spared += spare(&mut delete, &mut no_repack, &now);
    let mut active = Vec::new();
    for (id, rec) in now {
        let stale = watched.iter().any(|(w, wrec)| *w == id && wrec.is_some() && *wrec == rec);
        if stale {
            repo.backend().delete(&ObjectKind::Session.path(&id))?;
            report.stale_sessions += 1;
        } else {
            active.push((id, rec));
        }
    }

    // 6. Re-check: snapshots written meanwhile keep what they use.
    // Their blobs may be in packs indexed only since the index was read, so the
    // index files stored meanwhile are read first; every pack such a snapshot uses
    // is kept, whatever the plan said.
    history.refresh(repo)?;
    let late: Vec<_> = history.live_snapshots().into_iter().filter(|(id, _)| !live.contains(id)).collect();
    if !late.is_empty() {
        let known: HashSet<&Id> = index_files.iter().collect();
        let mut added = Vec::new();
        for fid in repo.list_ids(ObjectKind::Index)?.iter().filter(|f| !known.contains(f)) {
            added.extend(repo.load_index_file(fid)?);
        }
        repo.index_mut().add_packs(&added).map_err(|e| Error::corrupt("index", e))?;
        let mut seen: HashSet<Id> = HashSet::new();
        let mut uses = |blob_type: BlobType, id: &Id, delete: &mut HashSet<Id>| -> Result<()> {
            let (_, pack) = repo.locate_blob(blob_type, id)?;
            if delete.remove(&pack.id) {
                report.packs_spared += 1;
            }
            Ok(())
        };
        for (_, snap) in &late {
            let mut stack = vec![snap.tree];
            while let Some(tid) = stack.pop() {
                if !seen.insert(tid) {
                    continue;
                }
                uses(BlobType::Tree, &tid, &mut delete)?;
                let mut nodes = repo.tree_nodes(&tid)?;
                let mut parts = Vec::new();
                for node in nodes.by_ref() {
                    let node = node?;
                    stack.extend(node.subtree);
                    for id in &repo.resolve_content(&node, &mut |p| parts.push(p))? {
                        if seen.insert(*id) {
                            uses(BlobType::Data, id, &mut delete)?;
                        }
                    }
                }
                for p in nodes.loaded_blobs()[1..].iter().chain(&parts) {
                    if seen.insert(*p) {
                        uses(BlobType::Tree, p, &mut delete)?;
                    }
                }
            }
        }
    }

    // 7. Replace the index files that list deleted packs, then delete the packs.
    for fid in &index_files {
        let recs = repo.load_index_file(fid)?;
        if !recs.iter().any(|r| delete.contains(&r.id)) {
            continue;
        }
        let kept: Vec<_> = recs.into_iter().filter(|r| !delete.contains(&r.id)).collect();
        if !kept.is_empty() {
            repo.save_sealed(SealedKind::Index, &index_file::encode(&kept))?;
        }
        repo.backend().delete(&ObjectKind::Index.path(fid))?;
        report.index_files_replaced += 1;
    }
    for p in &delete {
        repo.backend().delete(&ObjectKind::Pack.path(p))?;
        report.bytes_deleted += stored.get(p).copied().unwrap_or(0);
        if repack.contains(p) {
            report.packs_repacked += 1;
        } else {
            report.packs_deleted += 1;
        }
    }
    // Earlier notices are removed once no backup is running that may have seen them;
    // this one stays until then too.
    if active.is_empty() && session::list(repo)?.is_empty() {
        for n in old_notices.iter().chain(&notice_ids) {
            repo.backend().delete(&ObjectKind::PruneNotice.path(n))?;
        }
    }
    report.duration_ms = start.elapsed().as_millis() as u64;
    Ok(report)
}
