//! `coffer copy`: copies snapshots, and the data they need, from one repository
//! into another, sending only what the destination lacks. See
//! docs/design.md#copy.
//!
//! # Brief overview
//!
//! What to send is decided from object names, never from a listing of `data/`
//! or a download of both whole indexes when little changed ([`plan`]): the
//! listings of `snapshots/`, `tombstones/`, `writers/` and `index/` on both
//! sides; the source snapshots the destination lacks; the source index files the
//! destination lacks, whose packs are the only candidates. A coffer server's
//! names are learnt from its reconciliation sketches instead ([`reconcile`]),
//! a few kilobytes whatever the repository's size. Between repositories
//! that share their data keys (made with `coffer init --from-repo`) every object
//! is copied byte for byte and checked against its name ([`transfer`]), so the
//! original signatures and history links stay valid in the destination. Objects
//! are written in the order of docs/design.md#write-order (packs, index files,
//! writer records, snapshots, tombstones), so the destination is a consistent
//! repository at every moment and an interrupted copy resumes where it stopped.
//!
//! Between repositories that share id and chunker keys but have their own data
//! keys, only the blobs the destination's index lacks are decrypted and stored
//! again, and each snapshot is written anew, signed by the destination's writer
//! and recording its origin ([`reencrypt`]). Into an unrelated repository
//! (`--rechunk`), every file is read, checked against its digest and cut again
//! by the destination's chunker, and new trees and snapshots are written that
//! keep the source's metadata and Merkle roots ([`rechunk`]).

mod plan;
mod rechunk;
mod reconcile;
mod reencrypt;
mod relation;
#[cfg(test)]
mod tests;
mod transfer;

use std::collections::HashSet;
use std::path::Path;

pub use relation::{Relation, relate, unsupported};

use crate::crypto::sign::{PublicKey, SigningKey};
use crate::error::{Error, Result};
use crate::format::envelope::SealedKind;
use crate::format::{ObjectKind, index as index_file};
use crate::id::Id;
use crate::lifecycle::Timing;
use crate::lifecycle::session::Session;
use crate::progress::Progress;
use crate::repo::{Repository, SaverEvent, SnapshotFilter};
use plan::{Names, Selection, missing};
use transfer::{PACK_WORKERS, PackOutcome};

/// What to copy.
#[derive(Clone, Debug, Default)]
pub struct CopyOptions {
    /// Snapshots to copy, by id, unique prefix or `latest`; empty for every
    /// snapshot the destination lacks.
    pub snapshots: Vec<String>,
    /// Only snapshots passing this filter (and `latest` is the newest passing it).
    pub filter: SnapshotFilter,
    /// Copy every source tombstone the destination lacks, and remove from the
    /// destination the snapshots they forget (a mirror).
    pub with_forgets: bool,
    /// Decide and count what would be sent, write nothing.
    pub dry_run: bool,
    /// Allow a copy into an unrelated repository, which reads every file of the
    /// snapshots copied and cuts it again (docs/design.md#copy).
    pub rechunk: bool,
    /// The destination's prune protocol timing (its session marker's heartbeat).
    pub timing: Timing,
    /// Into an unrelated repository without a writer key (a dry run): the writer
    /// whose earlier copies' file content may be reused by digest.
    pub trusted: Option<PublicKey>,
    /// The source is a coffer server: its names are learnt from its
    /// reconciliation sketches rather than listed.
    pub source_sketches: bool,
    /// The destination is a coffer server (likewise).
    pub destination_sketches: bool,
}

impl CopyOptions {
    /// Whether every snapshot is wanted: then whole index files are copied (the
    /// cheap path); otherwise the packs the chosen snapshots use are found by
    /// walking their trees.
    fn whole(&self) -> bool {
        self.snapshots.is_empty()
            && self.filter.host.is_none()
            && self.filter.tags.is_empty()
            && self.filter.paths.is_empty()
    }
}

/// Objects and bytes of one kind sent (or, in a dry run, to send).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Sent {
    /// Objects.
    pub objects: u64,
    /// Their bytes.
    pub bytes: u64,
}

impl Sent {
    fn add(&mut self, bytes: u64) {
        self.objects += 1;
        self.bytes += bytes;
    }
}

/// What a copy did (or, in a dry run, would do).
#[derive(Clone, Debug, serde::Serialize)]
pub struct CopySummary {
    /// How the repositories relate.
    pub relation: Relation,
    /// Nothing was written.
    pub dry_run: bool,
    /// The snapshots copied, oldest first.
    pub snapshots: Vec<Id>,
    /// Snapshots asked for that the destination held already: named ones present
    /// by id, and (own data keys) those an earlier copy wrote anew.
    pub snapshots_present: usize,
    /// Packs sent (between repositories with their own data keys: the packs and
    /// index files the destination's saver stored).
    pub packs: Sent,
    /// Blobs stored again, encrypted for the destination, and their plaintext
    /// bytes (only between repositories with their own data keys).
    pub blobs: Sent,
    /// Packs to send that the destination held already (sent by an interrupted
    /// copy), so not sent again.
    pub packs_present: u64,
    /// Index files sent (byte for byte, or written anew for a subset).
    pub index_files: Sent,
    /// Writer records sent.
    pub writers: Sent,
    /// Snapshot objects sent.
    pub snapshot_objects: Sent,
    /// Tombstones sent.
    pub tombstones: Sent,
    /// Destination snapshots removed because a copied tombstone forgets them
    /// (`with_forgets`).
    pub snapshots_removed: Vec<Id>,
    /// History entries the copied snapshots link to that the destination lacks
    /// afterwards (not chosen, or forgotten by a tombstone not copied).
    pub unlinked: Vec<Id>,
    /// Files read from the source and cut again (unrelated repositories only).
    pub files_read: u64,
    /// Files whose content the destination held already, found by digest, so
    /// not read (unrelated repositories only).
    pub files_reused: u64,
    /// Plaintext bytes of file content read from the source (unrelated
    /// repositories only).
    pub bytes_read: u64,
    /// Source snapshots not copied because their signature is not valid there
    /// (an unknown writer, a bad signature, none), with what is wrong: a copy
    /// cannot keep who wrote them. The copy of the others goes on; the command
    /// line ends with the damage code.
    pub refused: Vec<(Id, String)>,
    /// Problems that did not stop the copy.
    pub warnings: Vec<String>,
}

impl CopySummary {
    /// Everything sent.
    pub fn total(&self) -> Sent {
        [self.packs, self.index_files, self.writers, self.snapshot_objects, self.tombstones]
            .iter()
            .fold(Sent::default(), |a, s| Sent { objects: a.objects + s.objects, bytes: a.bytes + s.bytes })
    }
}

/// Copies from `src` into `dst` what `opts` asks for. See the module doc. A copy
/// into an unrelated repository needs `opts.rechunk` (else it is refused with
/// [`unsupported`]'s text as [`Error::InvalidInput`]); it and a copy between
/// repositories with their own data keys write new snapshots, signed by
/// `writer` (the destination's writer key of this client, needed unless it is a
/// dry run).
pub fn copy(
    src: &Repository,
    dst: &Repository,
    opts: &CopyOptions,
    writer: Option<&SigningKey>,
    progress: &dyn Progress,
) -> Result<CopySummary> {
    let relation = relate(src, dst)?;
    if let Some(why) = unsupported(relation, opts.rechunk) {
        return Err(Error::InvalidInput(why));
    }
    let rewrites = relation != Relation::SharedKeys;
    if rewrites && opts.with_forgets {
        return Err(Error::InvalidInput(
            "--with-forgets copies the source's tombstones byte for byte, which needs the destination to share the \
             source's data keys (`coffer init --from-repo SRC`); copy without it, and forget in the destination \
             what you want gone"
                .into(),
        ));
    }
    if rewrites && writer.is_none() && !opts.dry_run {
        return Err(Error::InvalidInput("a copy that writes new snapshots needs the destination's writer key".into()));
    }
    // Source first: a source snapshot listed has its index files listed. A
    // server side is learnt from its sketches against the other side's names.
    let (s, d) = if opts.destination_sketches {
        let s = Names::list(src)?;
        let d = Names::learn(dst, &s, false)?;
        (s, d)
    } else if opts.source_sketches {
        let d = Names::list(dst)?;
        (Names::learn(src, &d, true)?, d)
    } else {
        (Names::list(src)?, Names::list(dst)?)
    };
    let mut sel = plan::select(src, dst, &s, &d, opts)?;
    let new_tombstones = missing(&s.tombstones, &d.tombstones);
    // Copying everything byte for byte, every new source tombstone is looked at:
    // one that forgets only snapshots the destination never had completes the
    // history of snapshots copied by an earlier run (their writer linked to a
    // snapshot forgotten before it could be copied).
    let every_tombstone = opts.with_forgets || (!rewrites && opts.whole());
    if every_tombstone && !new_tombstones.is_empty() && sel.src_tombstones.is_empty() {
        sel.src_tombstones = src.tombstones()?.0;
        sel.dst_tombstones = dst.tombstones()?.0;
    }
    let (tombstones, unlinked) = plan::history_closure(&sel, &s, &d, opts.with_forgets, every_tombstone);
    let mut sum = CopySummary {
        relation,
        dry_run: opts.dry_run,
        snapshots: sel.snapshots.iter().map(|(i, _)| *i).collect(),
        snapshots_present: sel.already,
        packs: Sent::default(),
        blobs: Sent::default(),
        packs_present: 0,
        index_files: Sent::default(),
        writers: Sent::default(),
        snapshot_objects: Sent::default(),
        tombstones: Sent::default(),
        snapshots_removed: Vec::new(),
        unlinked,
        files_read: 0,
        files_reused: 0,
        bytes_read: 0,
        refused: std::mem::take(&mut sel.refused),
        warnings: std::mem::take(&mut sel.warnings),
    };
    let origins = if rewrites { reencrypt::origins(src, &sel.snapshots, &sel.stored) } else { Default::default() };
    if relation == Relation::Unrelated {
        let trusted = writer.map(|k| k.public()).or(opts.trusted);
        let (done, reuse) = rechunk::copied(src, dst, trusted.as_ref())?;
        sum.snapshots_present += sel.snapshots.iter().filter(|(i, _)| done.contains(i)).count();
        sel.snapshots.retain(|(i, _)| !done.contains(i));
        sum.snapshots = sel.snapshots.iter().map(|(i, _)| *i).collect();
        sum.unlinked.clear();
        if sel.snapshots.is_empty() {
            return Ok(sum);
        }
        // A writer into the destination like a backup: its marker first, then
        // the index, then the packs an interrupted copy left unindexed are
        // adopted, so that a resumed copy does not store their blobs again.
        let guard = crate::lifecycle::writer::WriterGuard::begin(dst, opts.timing, opts.dry_run)?;
        for e in dst.load_index()? {
            sum.warnings.push(format!("destination {e}; the blobs only it lists are stored again"));
        }
        guard.adopt_orphan_packs()?;
        let sink = guard.observer();
        let report = |ev: SaverEvent| {
            if let Some(f) = &sink {
                f(ev)
            }
        };
        let key = if opts.dry_run { None } else { writer };
        rechunk::copy_snapshots(src, dst, &sel.snapshots, &origins, &reuse, key, &report, progress, &mut sum)?;
        guard.finish()?;
        return Ok(sum);
    }
    if relation == Relation::SharedIds {
        let done = reencrypt::already_copied(src, dst)?;
        sum.snapshots_present += sel.snapshots.iter().filter(|(i, _)| done.contains(i)).count();
        sel.snapshots.retain(|(i, _)| !done.contains(i));
        sum.snapshots = sel.snapshots.iter().map(|(i, _)| *i).collect();
        sum.unlinked.clear();
        if sel.snapshots.is_empty() {
            return Ok(sum);
        }
        let session = if opts.dry_run { None } else { Some(Session::start(dst, opts.timing.heartbeat)?) };
        let sink = session.as_ref().map(|s| s.sink());
        let report = |ev: SaverEvent| {
            if let Some(f) = &sink {
                f(ev)
            }
        };
        let key = if opts.dry_run { None } else { writer };
        reencrypt::copy_snapshots(src, dst, &sel.snapshots, &origins, key, &report, progress, &mut sum)?;
        if let Some(session) = session {
            session.finish()?;
        }
        return Ok(sum);
    }
    let new_index = missing(&s.index, &d.index);
    let writes_data = if opts.whole() { !new_index.is_empty() } else { !sel.snapshots.is_empty() };
    // A concurrent prune of the destination spares what this marker lists (the
    // packs copied before an index file lists them, the index files stored).
    let session = if writes_data && !opts.dry_run { Some(Session::start(dst, opts.timing.heartbeat)?) } else { None };
    let sink = session.as_ref().map(|s| s.sink());
    let report = |ev: SaverEvent| {
        if let Some(f) = &sink {
            f(ev)
        }
    };
    let ctx = Ctx { src, dst, dry_run: opts.dry_run, progress, report: &report };
    if opts.whole() {
        ctx.whole_index(&new_index, &missing(&d.index, &s.index), &mut sum)?;
    } else if !sel.snapshots.is_empty() {
        ctx.subset(&sel, &mut sum)?;
    }
    // Writer records before the snapshots they sign.
    for id in missing(&s.writers, &d.writers) {
        sum.writers.add(ctx.object(ObjectKind::Writer, &id, s.writers[&id])?);
    }
    for (id, _) in &sel.snapshots {
        let sent = match sel.stored.remove(id) {
            Some(bytes) => ctx.stored(ObjectKind::Snapshot, id, bytes)?,
            None => ctx.object(ObjectKind::Snapshot, id, s.snapshots[id])?,
        };
        sum.snapshot_objects.add(sent);
        progress.add_item(Path::new(&ObjectKind::Snapshot.path(id)));
    }
    // Tombstones before the deletions they record (docs/design.md#write-order).
    for id in &tombstones {
        sum.tombstones.add(ctx.object(ObjectKind::Tombstone, id, s.tombstones[id])?);
    }
    if opts.with_forgets {
        let copied: HashSet<Id> = tombstones.iter().copied().collect();
        for (tid, t) in &sel.src_tombstones {
            if !copied.contains(tid) {
                continue;
            }
            for f in &t.forgotten {
                if d.snapshots.contains_key(&f.id) && !sum.snapshots_removed.contains(&f.id) {
                    if !opts.dry_run {
                        dst.backend().delete(&ObjectKind::Snapshot.path(&f.id))?;
                    }
                    sum.snapshots_removed.push(f.id);
                }
            }
        }
    }
    if let Some(session) = session {
        session.finish()?;
    }
    if !sum.unlinked.is_empty() {
        let ids: Vec<String> = sum.unlinked.iter().map(|i| i.short()).collect();
        sum.warnings.push(format!(
            "the copied snapshots link to history entries the destination does not hold ({}): `coffer check` of the \
             destination reports them missing; copy every snapshot (no filter), with --with-forgets if the source \
             forgot some, to keep the whole history",
            ids.join(", ")
        ));
    }
    Ok(sum)
}

/// The two repositories and how to report, for the steps of one copy.
struct Ctx<'a> {
    src: &'a Repository,
    dst: &'a Repository,
    dry_run: bool,
    progress: &'a dyn Progress,
    report: &'a (dyn Fn(SaverEvent) + Sync),
}

impl Ctx<'_> {
    fn workers(&self) -> usize {
        PACK_WORKERS.min(self.src.backend().connections()).min(self.dst.backend().connections()).max(1)
    }

    /// Copies one small object byte for byte (a dry run only counts `size`, or
    /// asks for it when it is not known: 0, a name learnt from a sketch).
    fn object(&self, kind: ObjectKind, id: &Id, size: u64) -> Result<u64> {
        match (self.dry_run, size) {
            (false, _) => transfer::copy_object(self.src, self.dst, kind, id),
            (true, 0) => Ok(self.src.backend().stat(&kind.path(id))?),
            (true, n) => Ok(n),
        }
    }

    /// Writes an object read already (checked against its name) unchanged; a
    /// dry run only counts it. Returns its size.
    fn stored(&self, kind: ObjectKind, id: &Id, bytes: Vec<u8>) -> Result<u64> {
        let len = bytes.len() as u64;
        if !self.dry_run {
            self.dst.backend().write(&kind.path(id), bytes)?;
        }
        Ok(len)
    }

    /// Sends the packs in `ids` that the destination does not hold; returns the
    /// records of those sent (with `records`) and the packs the source lacks.
    fn packs(
        &self,
        ids: &[Id],
        records: bool,
        sum: &mut CopySummary,
    ) -> Result<(Vec<index_file::PackRecord>, HashSet<Id>)> {
        let workers = self.workers();
        let held = coffer_backend::fan_out(workers, ids, |p| transfer::dst_has_pack(self.dst, p));
        let mut to_send = Vec::new();
        let mut present = Vec::new();
        for (id, h) in ids.iter().zip(held) {
            if h? { present.push(*id) } else { to_send.push(*id) }
        }
        sum.packs_present += present.len() as u64;
        let mut recs = Vec::new();
        let mut gone = HashSet::new();
        if records {
            // Packs an interrupted copy sent but did not index yet: indexed from
            // their own trailers and headers.
            for id in &present {
                let size = self.dst.backend().stat(&ObjectKind::Pack.path(id))?;
                recs.push(self.dst.pack_record(id, size)?);
            }
        }
        if self.dry_run {
            for (id, size) in
                to_send.iter().zip(coffer_backend::fan_out(workers, &to_send, |p| transfer::src_pack_size(self.src, p)))
            {
                match size? {
                    Some(n) => sum.packs.add(n),
                    None => {
                        gone.insert(*id);
                    }
                }
            }
            return Ok((recs, gone));
        }
        let outcomes = coffer_backend::fan_out(workers, &to_send, |p| {
            let r = transfer::copy_pack(self.src, self.dst, p, records);
            if let Ok(PackOutcome::Sent(n, _)) = &r {
                (self.report)(SaverEvent::Pack(*p));
                self.progress.add_bytes(*n);
            }
            r
        });
        for (id, o) in to_send.iter().zip(outcomes) {
            match o? {
                PackOutcome::Sent(n, rec) => {
                    sum.packs.add(n);
                    recs.extend(rec);
                }
                PackOutcome::MissingInSource => {
                    gone.insert(*id);
                }
            }
        }
        Ok((recs, gone))
    }

    /// Every snapshot wanted: the source index files the destination lacks are
    /// copied byte for byte, each after its packs. A pack some destination index
    /// file already names is not sent; the destination's index files that the
    /// source lacks are the only ones read to know them.
    fn whole_index(&self, new_index: &[Id], dst_only: &[Id], sum: &mut CopySummary) -> Result<()> {
        if new_index.is_empty() {
            return Ok(());
        }
        let mut known: HashSet<Id> = HashSet::new();
        for r in self.dst.fetch_many(dst_only, |id| self.dst.load_index_file(id)) {
            match r {
                Ok(recs) => known.extend(recs.iter().map(|r| r.id)),
                Err(Error::Backend(e)) if e.kind != coffer_backend::ErrorKind::NotFound => return Err(e.into()),
                // A damaged or vanished destination index file names nothing:
                // its packs are sent again if the source lists them.
                Err(_) => {}
            }
        }
        self.progress.set_total(0, new_index.len() as u64);
        for batch in new_index.chunks(index_file_batch()) {
            let mut files = Vec::new();
            // Each index file is read once: decoded here, written below as read.
            let read = |id: &Id| -> Result<(Vec<index_file::PackRecord>, Vec<u8>)> {
                let bytes = self.src.read_object(ObjectKind::Index, id)?;
                let plain = self
                    .src
                    .open_sealed(SealedKind::Index, &bytes)
                    .map_err(|e| Error::corrupt(ObjectKind::Index.describe(id), e))?;
                let recs = index_file::decode(&plain).map_err(|e| Error::corrupt(ObjectKind::Index.describe(id), e))?;
                Ok((recs, bytes))
            };
            for (id, r) in self.src.fetch_many(batch, |id| (*id, read(id))) {
                match r {
                    Ok((recs, bytes)) => files.push((id, recs, bytes)),
                    // Replaced by a prune of the source since it was listed: the
                    // replacement is copied by the next run.
                    Err(Error::Backend(e)) if e.kind == coffer_backend::ErrorKind::NotFound => {}
                    Err(Error::Backend(e)) => return Err(e.into()),
                    Err(e) => sum.warnings.push(format!("source {e}; it was not copied")),
                }
            }
            let mut candidates: Vec<Id> = files
                .iter()
                .flat_map(|(_, recs, _)| recs.iter().map(|r| r.id))
                .filter(|p| !known.contains(p))
                .collect();
            candidates.sort();
            candidates.dedup();
            let (_, gone) = self.packs(&candidates, false, sum)?;
            for (id, recs, bytes) in files {
                let packs: Vec<Id> = recs.iter().map(|r| r.id).collect();
                if let Some(p) = packs.iter().find(|p| gone.contains(p)) {
                    sum.warnings.push(format!(
                        "source index file {} lists pack {}, which the source does not hold (a prune removed it \
                         meanwhile, or it was lost): the index file was not copied; run `coffer copy` again, and \
                         `coffer check` on the source if this repeats",
                        id.short(),
                        p.short()
                    ));
                    continue;
                }
                sum.index_files.add(self.stored(ObjectKind::Index, &id, bytes)?);
                (self.report)(SaverEvent::IndexFile(id, packs.clone()));
                known.extend(packs);
                self.progress.add_item(Path::new(&ObjectKind::Index.path(&id)));
            }
        }
        Ok(())
    }

    /// Some snapshots wanted: their trees are walked in the source, and the packs
    /// serving the blobs the destination index lacks are sent, then new index
    /// files listing them are written in the destination (a source index file may
    /// list packs that are not sent).
    fn subset(&self, sel: &Selection, sum: &mut CopySummary) -> Result<()> {
        for e in self.src.load_index()? {
            sum.warnings.push(format!("source {e}; the blobs only it lists are not found"));
        }
        for e in self.dst.load_index()? {
            sum.warnings.push(format!("destination {e}; the blobs only it lists are copied again"));
        }
        let mut needed: HashSet<Id> = HashSet::new();
        let mut seen = HashSet::new();
        for (_, snap) in &sel.snapshots {
            crate::lifecycle::each_used_blob(self.src, snap.tree, &mut seen, &mut |t, id| {
                if !self.dst.index().contains(&id, t) {
                    needed.insert(self.src.locate_blob(t, &id)?.1.id);
                }
                Ok(())
            })?;
        }
        let mut needed: Vec<Id> = needed.into_iter().collect();
        needed.sort();
        self.progress.set_total(0, needed.len() as u64);
        for batch in needed.chunks(crate::format::limits::INDEX_FILE_PACKS) {
            let (recs, gone) = self.packs(batch, true, sum)?;
            if let Some(p) = gone.iter().next() {
                return Err(Error::corrupt(
                    format!("source {}", ObjectKind::Pack.describe(p)),
                    "indexed and used by a snapshot to copy, but missing; run `coffer check` on the source",
                ));
            }
            if self.dry_run {
                // One index file per batch; its size is not known without the
                // records: the envelope and record headers are counted.
                let bytes = 59 + 8 + batch.len() as u64 * 71;
                sum.index_files.add(bytes);
                continue;
            }
            for chunk in index_file::batches(&recs) {
                let id = self.dst.save_sealed(SealedKind::Index, &index_file::encode(chunk))?;
                let size = self.dst.backend().stat(&ObjectKind::Index.path(&id))?;
                sum.index_files.add(size);
                (self.report)(SaverEvent::IndexFile(id, chunk.iter().map(|r| r.id).collect()));
            }
        }
        Ok(())
    }
}

/// Source index files read, and their packs sent, per round: bounds memory and
/// the work an interruption loses.
fn index_file_batch() -> usize {
    32
}
