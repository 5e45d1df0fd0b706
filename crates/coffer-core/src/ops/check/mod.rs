//! The checker: verifies that the repository is complete and undamaged.
//! See docs/design.md#check.
//!
//! Structure (always): every key file and index file decodes and matches its name;
//! every indexed pack exists; every snapshot loads; every tree of every snapshot
//! loads and verifies; every data blob a tree references is indexed. The same walk
//! of the trees recomputes each snapshot's Merkle root ([`snapshots`]).
//! Data (`read_data`): every pack is read whole, its hash checked against its
//! name, its header decrypted and compared with the index, and every blob
//! decrypted, decompressed and checked against its id. `read_data_subset` reads
//! part of the packs the same way ([`subset`]).
//!
//! Problems are collected, not returned as the first error, so one run reports
//! all the damage; each message names the object. Damaged and missing blobs are
//! also collected by id and traced to the files they affect ([`locate`]).

mod copies;
mod locate;
mod snapshots;
mod subset;
mod trees;

pub use copies::{CopyProblem, DamagedCopy};
pub use locate::{AffectedFile, AffectedKind, DamagedBlob, TreeSource, locate_damage};
pub use subset::{DataSubset, VERIFIED_PACKS};

use std::collections::{HashMap, HashSet};

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::format::ObjectKind;
use crate::format::keyfile::KeyFile;
use crate::format::pack::{self, PackEntry, TRAILER_LEN};
use crate::id::Id;
use crate::local_state::LocalState;
use crate::progress::Progress;
use crate::repo::Repository;
use crate::repo::roots::RootCheck;
use coffer_backend::BackendError;

/// What to check.
#[derive(Clone, Debug, Default)]
pub struct CheckOptions {
    /// Also read and verify every pack's content.
    pub read_data: bool,
    /// Read and verify only this part of the packs; takes precedence over `read_data`.
    pub read_data_subset: Option<DataSubset>,
    /// This client's local state: the history heads it saw last (to detect
    /// rollback) and the packs it has verified ([`VERIFIED_PACKS`]). Without it
    /// neither is remembered, and a share is drawn from all packs.
    pub state: Option<LocalState>,
    /// A server's transparency log, followed just before the check
    /// ([`crate::server_log::follow`]): every snapshot it records must be
    /// stored or forgotten by a tombstone.
    pub server_log: Option<crate::server_log::Followed>,
}

/// The findings of a check.
#[derive(Debug, Default)]
pub struct CheckReport {
    /// Damage or missing data: the repository is not intact.
    pub errors: Vec<String>,
    /// Harmless findings (for example packs left by an interrupted backup).
    pub warnings: Vec<String>,
    /// Snapshots checked.
    pub snapshots: u64,
    /// Distinct trees checked.
    pub trees: u64,
    /// Distinct data blobs referenced.
    pub data_blobs: u64,
    /// Packs present.
    pub packs: u64,
    /// Packs read and verified.
    pub packs_read: u64,
    /// Snapshots removed on purpose, each recorded by a tombstone: by `forget`,
    /// or replaced by a retagged snapshot (`tag`).
    pub forgotten: u64,
    /// Of `forgotten`, the snapshots `tag` replaced.
    pub replaced: u64,
    /// The ids of the packs read, sorted.
    pub packs_read_ids: Vec<Id>,
    /// After a data read with local state: packs not yet verified in this round.
    pub packs_unverified: Option<u64>,
    /// Whether this run began a new round of partial checks, every pack having
    /// been verified in the last one.
    pub new_round: bool,
    /// Blobs found damaged or missing, each once, sorted by pack then id.
    pub damaged_blobs: Vec<DamagedBlob>,
    /// The entries of every snapshot that the damaged blobs affect.
    pub affected: Vec<AffectedFile>,
    /// Over several backends: the copies of packs found damaged or missing by a
    /// data read, each naming its backend and where an intact copy lies (also
    /// among `errors`).
    pub damaged_copies: Vec<DamagedCopy>,
}

impl CheckReport {
    /// Whether no error was found.
    pub fn is_ok(&self) -> bool {
        self.errors.is_empty()
    }
}

/// Checks `repo`. Opens its own view of the index, so `repo` need not have it loaded.
pub fn check(repo: &Repository, opts: &CheckOptions, progress: &dyn Progress) -> Result<CheckReport> {
    let mut r = CheckReport::default();
    // A backup of this client may commit while the check runs. The heads it
    // remembers are read first, then the snapshots and tombstones listed, then
    // the index files, then the packs: a head is remembered after its entry is
    // stored, a snapshot is stored after its index files, and an index file after
    // its packs, so every head remembered is listed, every snapshot listed has
    // its index files listed, and every pack they list is listed
    // (docs/design.md#check, "A backup committing meanwhile").
    let remembered = opts.state.as_ref().map(|s| s.read_ids(crate::repo::history::HEADS_FILE)).transpose()?;
    let listed = crate::repo::history::list(repo)?;
    // The key files and index files are listed at once (docs/design.md#round-trips);
    // the packs after the index files, which list only packs stored before them.
    repo.prefetch_listings(&[ObjectKind::Key, ObjectKind::Index]);
    // The key files are read while the index is.
    let mut keys = CheckReport::default();
    std::thread::scope(|s| {
        let reading = s.spawn(|| check_keys(repo, &mut keys));
        let index = check_index(repo, &mut r);
        reading.join().unwrap_or_else(|p| std::panic::resume_unwind(p)).and(index)
    })?;
    r.errors.extend(keys.errors);
    check_notices(repo, &mut r)?;
    check_layouts(repo, &mut r)?;
    let packs: HashMap<Id, u64> = repo
        .list_objects(ObjectKind::Pack)?
        .into_iter()
        .filter_map(|o| Some((ObjectKind::Pack.id_from_path(&o.name)?, o.size)))
        .collect();
    r.packs = packs.len() as u64;
    // A blob with a copy in a stored pack is served from it, so only blobs with no
    // copy left count as lost with a missing pack.
    repo.index_mut().set_stored_packs(&packs.keys().copied().collect());
    let indexed: HashSet<Id> = repo.index().packs().iter().map(|p| p.id).collect();
    for id in &indexed {
        if !packs.contains_key(id) {
            r.errors.push(format!("pack {}: listed in the index but missing from the repository", id.short()));
        }
    }
    let missing: HashSet<Id> = indexed.iter().filter(|id| !packs.contains_key(id)).copied().collect();
    r.damaged_blobs.extend(locate::served_from(repo, &missing));
    for id in packs.keys() {
        if !indexed.contains(id) {
            r.warnings.push(format!(
                "pack {}: not in any index (left by an interrupted backup); harmless, its data is not used",
                id.short()
            ));
        }
    }
    let scope = match (opts.read_data_subset, opts.read_data) {
        (Some(s), _) => Some(subset::Scope::Subset(s)),
        (None, true) => Some(subset::Scope::All),
        (None, false) => None,
    };
    let plan = scope.map(|s| subset::plan(s, &packs, opts.state.as_ref())).transpose()?;
    // The packs are read while the trees are walked, which waits on storage more
    // than it computes; the data findings follow the others.
    let (walked, data) = std::thread::scope(|s| {
        let reading = plan.as_ref().map(|plan| {
            s.spawn(|| {
                let mut d = CheckReport::default();
                let good = read_data(repo, &plan.read, &mut d, progress);
                (d, good)
            })
        });
        let state = opts.state.as_ref().zip(remembered.as_deref());
        let walked = check_trees_and_history(repo, opts, state, &listed, &mut r);
        (walked, reading.map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))))
    });
    walked?;
    let data = data.map(|(d, good)| good.map(|g| (d, g))).transpose()?;
    // Copies that failed while another served: damage in their packs.
    r.errors.extend(repo.take_bad_copies());
    if let (Some(plan), Some((d, good))) = (plan, data) {
        r.errors.extend(d.errors);
        r.warnings.extend(d.warnings);
        r.damaged_blobs.extend(d.damaged_blobs);
        r.damaged_copies.extend(d.damaged_copies);
        (r.packs_read, r.packs_read_ids) = (d.packs_read, d.packs_read_ids);
        r.new_round = plan.new_round;
        match plan.record(&good, packs.len(), opts.state.as_ref()) {
            Ok(left) => r.packs_unverified = opts.state.as_ref().map(|_| left),
            Err(e) => r.warnings.push(format!("could not record the verified packs: {e}")),
        }
    }
    locate::report(repo, &mut r)?;
    Ok(r)
}

/// Whether a backend error says only that the storage failed (after retries),
/// nothing about the object: the check then stops with it (exit code 23)
/// instead of reporting damage it cannot know of.
pub(crate) fn is_storage_failure(e: &BackendError) -> bool {
    matches!(e.kind, coffer_backend::ErrorKind::Transient | coffer_backend::ErrorKind::Permanent)
}

/// `r` gets `e` as a finding, unless it is a storage failure, which is returned.
fn finding(r: &mut CheckReport, e: Error) -> Result<()> {
    match e {
        Error::Backend(b) if is_storage_failure(&b) => Err(Error::Backend(b)),
        e => {
            r.errors.push(e.to_string());
            Ok(())
        }
    }
}

/// Key files that do not decode: warnings, since opening skips them and they
/// hold no key anyone can use (docs/design.md#repair-planted).
fn check_keys(repo: &Repository, r: &mut CheckReport) -> Result<()> {
    let ids = repo.list_ids_ahead(ObjectKind::Key)?;
    for (id, read) in repo.fetch_many(&ids, |id| (*id, repo.read_object(ObjectKind::Key, id))) {
        let e = match read {
            Ok(bytes) => match KeyFile::decode(&bytes) {
                Ok(_) => continue,
                Err(e) => Error::corrupt(ObjectKind::Key.describe(&id), e.to_string()),
            },
            Err(Error::Backend(b)) if is_storage_failure(&b) => return Err(Error::Backend(b)),
            // Removed since it was listed (`key remove` meanwhile).
            Err(Error::Backend(b)) if b.kind == coffer_backend::ErrorKind::NotFound => continue,
            Err(e) => e,
        };
        r.warnings.push(format!("{e}; {}", planted_hint("no passphrase opens it: opening skips it")));
    }
    Ok(())
}

/// What a warning about an object that does not decode adds: that it may have
/// been planted, why it is harmless (`harmless`), and how to remove it.
pub(crate) fn planted_hint(harmless: &str) -> String {
    format!(
        "damaged, or planted by anyone who can write to the storage; harmless to the data ({harmless}); \
         `coffer repair planted` removes it"
    )
}

/// Layouts that do not decode: warnings, since only a signed layout that
/// decodes is ever used (docs/design.md#repair-planted).
fn check_layouts(repo: &Repository, r: &mut CheckReport) -> Result<()> {
    for id in repo.list_ids_ahead(ObjectKind::Layout)? {
        match crate::ops::planted::decodes(repo, ObjectKind::Layout, &id) {
            Ok(()) => {}
            Err(Error::Backend(b)) if is_storage_failure(&b) => return Err(Error::Backend(b)),
            Err(Error::Backend(b)) if b.kind == coffer_backend::ErrorKind::NotFound => {}
            Err(e) => r.warnings.push(format!("{e}; {}", planted_hint("a layout that does not decode is never used"))),
        }
    }
    Ok(())
}

/// Prune notices that do not decode: warnings, since backups treat such a notice
/// as naming any pack they cannot show is safe (docs/design.md#prune).
fn check_notices(repo: &Repository, r: &mut CheckReport) -> Result<()> {
    for u in crate::lifecycle::notices::read(repo)?.unknown {
        let hint = planted_hint(
            "while it is stored, backups adopt no orphan pack and store again the blobs their parent snapshot does \
             not use; a `coffer prune` that ends with no backup running removes it too",
        );
        r.warnings.push(format!("{u}; {hint}"));
    }
    Ok(())
}

fn check_index(repo: &Repository, r: &mut CheckReport) -> Result<()> {
    let ids = repo.list_ids_ahead(ObjectKind::Index)?;
    let loaded: Vec<_> = repo.fetch_many(&ids, |id| repo.load_index_file(id));
    let mut good = Vec::new();
    for (id, res) in ids.iter().zip(loaded) {
        match res {
            Ok(recs) if recs.iter().flat_map(|p| &p.entries).any(|e| e.offset > u32::MAX as u64) => {
                r.errors.push(format!("{}: lists a blob at an offset beyond 4 GiB", ObjectKind::Index.describe(id)))
            }
            Ok(recs) => good.extend(recs),
            Err(Error::Backend(e)) => return Err(Error::Backend(e)),
            // Not harmless: a prune refuses to run while it is stored.
            Err(e) => r.errors.push(format!(
                "{e}; damaged, or planted by anyone who can write to the storage: `coffer repair index` replaces it, \
                 or `coffer repair planted` removes it (indexing first the packs only it may list)"
            )),
        }
    }
    if let Err(e) = repo.index_mut().add_packs(&good) {
        r.errors.push(format!("index: {e}"));
    }
    Ok(())
}

/// The structure of every snapshot and the history, Merkle roots included, into `r`.
fn check_trees_and_history(
    repo: &Repository,
    opts: &CheckOptions,
    state: Option<(&LocalState, &[Id])>,
    listed: &crate::repo::history::Listed,
    r: &mut CheckReport,
) -> Result<()> {
    // The history is read while the trees are walked: both wait on the storage.
    let (roots, loaded) = std::thread::scope(|s| {
        let loading = s.spawn(|| crate::repo::history::load_for_check(repo, listed));
        let roots = check_snapshots(repo, &listed.snapshots, r);
        (roots, loading.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
    });
    let history = crate::repo::history::check(repo, loaded?, state, &roots?, opts.server_log.as_ref())?;
    r.errors.extend(history.errors);
    r.warnings.extend(history.warnings);
    r.forgotten = history.forgotten as u64;
    r.replaced = history.replaced as u64;
    Ok(())
}

/// Walks every snapshot's trees once ([`snapshots`]): checks their structure into
/// `r` and returns, by snapshot, whether its Merkle root matches its files.
fn check_snapshots(repo: &Repository, ids: &[Id], r: &mut CheckReport) -> Result<HashMap<Id, RootCheck>> {
    let store = snapshots::Ahead { repo, packs: trees::TreePacks::read(repo) };
    let mut walker = snapshots::Walker::new(&store, snapshots::LISTING_BUDGET);
    for (sid, loaded) in repo.fetch_many(ids, |id| (*id, repo.load_snapshot(id))) {
        match loaded {
            Ok(snap) => walker.snapshot(sid, &snap, r),
            Err(e) => finding(r, e)?,
        }
    }
    Ok(walker.finish(r)?)
}

/// What reading one pack whole found.
#[derive(Debug, Default)]
pub struct PackVerdict {
    /// Problems, each naming the pack.
    pub problems: Vec<String>,
    /// The blobs the index serves from this pack that cannot be read intact.
    pub damaged: Vec<PackEntry>,
    /// The storage failed to serve the pack (after retries): not damage, and
    /// nothing is known of its content.
    pub storage: Option<BackendError>,
}

/// The pack bytes `--read-data` may have read ahead of the verifier over a
/// remote store: each reader holds the pack it read until the verifier takes it.
const REMOTE_READ_AHEAD: u64 = 32 << 20;

/// How many packs are read at once while one is verified: one on a local disk
/// (reading overlaps verifying; the disk gains nothing from more), and on a
/// remote store as many as [`REMOTE_READ_AHEAD`] holds (at least one, at most the
/// backend's connections), so that the round trips of consecutive packs overlap.
fn pack_readers(connections: usize, pack_size: u64) -> usize {
    if connections < 8 {
        return 1;
    }
    ((REMOTE_READ_AHEAD / pack_size.max(1)) as usize).clamp(1, connections)
}

/// Verifies one pack completely. `indexed` lists the blobs the index serves from
/// it; each is judged as a restore would read it, so that even a pack whose hash,
/// trailer or header is damaged names exactly the blobs that are lost.
pub fn verify_pack(repo: &Repository, id: &Id, indexed: &[PackEntry]) -> PackVerdict {
    verify_read_pack(repo, id, indexed, read_pack(repo, id))
}

/// Reads a whole pack.
fn read_pack(repo: &Repository, id: &Id) -> std::result::Result<Vec<u8>, BackendError> {
    repo.backend().read_max(&ObjectKind::Pack.path(id), ObjectKind::Pack.max_len())
}

/// [`verify_pack`] on the outcome of reading the pack. Its hash and its blobs are
/// verified in parallel.
fn verify_read_pack(
    repo: &Repository,
    id: &Id,
    indexed: &[PackEntry],
    read: std::result::Result<Vec<u8>, BackendError>,
) -> PackVerdict {
    let name = ObjectKind::Pack.describe(id);
    let mut v = PackVerdict::default();
    let info = indexed.first().and_then(|e| repo.index().get(&e.id).map(|(_, p)| p.clone()));
    let bytes = match read {
        Ok(b) => b,
        Err(e) => {
            use coffer_backend::ErrorKind;
            match e.kind {
                ErrorKind::NotFound => v.damaged = indexed.to_vec(),
                ErrorKind::TooLarge => {}
                // A refused permission or a storage that keeps failing says nothing
                // about the pack's content.
                ErrorKind::Transient | ErrorKind::Permanent => {
                    v.storage = Some(e);
                    return v;
                }
            }
            v.problems.push(e.to_string());
            return v;
        }
    };
    // The pack's hash is computed while its blobs are verified.
    let (hash, opened) = rayon::join(
        || Id::hash_of(&bytes),
        || {
            open_pack(repo, &bytes).map(|(trailer, key, entries)| {
                let problems = verify_blobs(repo, &key, &entries, &bytes);
                (trailer, entries, problems)
            })
        },
    );
    if hash != *id {
        v.problems.push(format!("{name}: content does not match its name (altered or truncated)"));
    }
    // Header entries whose blob verified in place, by (id, offset).
    let mut intact: HashMap<(Id, u64), PackEntry> = HashMap::new();
    match opened {
        Err(e) => v.problems.push(format!("{name}: {e}")),
        Ok((trailer, entries, problems)) => {
            for (e, problem) in entries.iter().zip(problems) {
                match problem {
                    None => {
                        intact.insert((e.id, e.offset), *e);
                    }
                    Some(p) => v.problems.push(format!("{name}: {p}")),
                }
            }
            let in_header: HashSet<(Id, u64)> = entries.iter().map(|e| (e.id, e.offset)).collect();
            for e in indexed {
                if !in_header.contains(&(e.id, e.offset)) {
                    v.problems.push(format!(
                        "{name}: the index places {} {} here, the pack header does not",
                        e.blob_type.noun(),
                        e.id.short()
                    ));
                }
            }
            if !info
                .as_ref()
                .is_some_and(|p| p.salt == trailer.salt && p.cipher == trailer.cipher && p.epoch == trailer.epoch)
            {
                intact.clear();
            }
        }
    }
    // Blobs the header vouched for need no second look; the rest are opened with
    // the index's own placement and key material.
    v.damaged = indexed
        .par_iter()
        .filter(|e| intact.get(&(e.id, e.offset)) != Some(*e))
        .filter(|e| {
            let end = e.offset.checked_add(e.length as u64).map(|end| end as usize);
            match (&info, end.and_then(|end| bytes.get(e.offset as usize..end))) {
                (Some(info), Some(sealed)) => repo.decode_blob(info, e, sealed).is_err(),
                _ => true,
            }
        })
        .copied()
        .collect();
    v
}

/// Opens every blob the pack header lists, in parallel: for each, `None` if it
/// decrypts, decompresses and matches its id, else what is wrong.
fn verify_blobs(
    repo: &Repository,
    key: &crate::crypto::AeadKey,
    entries: &[PackEntry],
    bytes: &[u8],
) -> Vec<Option<String>> {
    entries
        .par_iter()
        .map(|e| {
            let sealed = &bytes[e.offset as usize..(e.offset + e.length as u64) as usize];
            match pack::open_blob(key, e, sealed) {
                Ok(data) if repo.blob_id(e.blob_type, &data) == e.id => None,
                Ok(_) => Some(format!("{} {} does not match its id", e.blob_type.noun(), e.id.short())),
                Err(err) => Some(format!("{} {}: {err}", e.blob_type.noun(), e.id.short())),
            }
        })
        .collect()
}

/// Decodes a whole pack's trailer and header.
type OpenedPack = (pack::Trailer, crate::crypto::AeadKey, Vec<PackEntry>);

fn open_pack(repo: &Repository, bytes: &[u8]) -> std::result::Result<OpenedPack, String> {
    let len = bytes.len() as u64;
    if bytes.len() < TRAILER_LEN {
        return Err(format!("{len} bytes is too short for a pack"));
    }
    let trailer = pack::decode_trailer(&bytes[bytes.len() - TRAILER_LEN..], len)?;
    let hstart = bytes.len() - TRAILER_LEN - trailer.header_len as usize;
    let key = repo.pack_key(trailer.epoch, trailer.cipher, &trailer.salt)?;
    let entries = pack::open_header(&key, &trailer, &bytes[hstart..bytes.len() - TRAILER_LEN], len)?;
    Ok((trailer, key, entries))
}

/// Reads and verifies `packs` (id, size); returns the packs found intact.
/// [`pack_readers`] threads read the packs in order, each holding the pack it
/// read until the verifier takes it, while each read pack is verified using
/// every core.
fn read_data(
    repo: &Repository,
    packs: &[(Id, u64)],
    r: &mut CheckReport,
    progress: &dyn Progress,
) -> Result<HashSet<Id>> {
    let mut by_pack: HashMap<Id, Vec<PackEntry>> = HashMap::new();
    {
        let idx = repo.index();
        for e in idx.iter() {
            by_pack.entry(idx.packs()[e.pack as usize].id).or_default().push(e.entry);
        }
    }
    progress.set_total(packs.iter().map(|(_, s)| s).sum(), packs.len() as u64);
    let readers = pack_readers(repo.backend().connections(), u64::from(repo.config().pack_size));
    let next = std::sync::atomic::AtomicUsize::new(0);
    type Verdict = (usize, Id, PackVerdict, Vec<DamagedCopy>, Vec<String>);
    let mut verdicts: Vec<Verdict> = std::thread::scope(|s| {
        let (tx, rx) = crossbeam_channel::bounded(0);
        for _ in 0..readers {
            let (tx, next) = (tx.clone(), &next);
            s.spawn(move || {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some((id, _)) = packs.get(i) else { break };
                    // Over several backends every copy is read and hashed; the
                    // content is verified from an intact one.
                    let placed = repo.backend().placed_copies(&ObjectKind::Pack.path(id));
                    let read = if placed.len() > 1 {
                        copies::read_copies(repo, id, &placed)
                    } else {
                        copies::CopiesRead { read: read_pack(repo, id), bad: Vec::new(), unread: Vec::new() }
                    };
                    if tx.send((i, read)).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        rx.iter()
            .map(|(i, copies)| {
                let (id, size) = &packs[i];
                let copies::CopiesRead { read, bad, unread } = copies;
                let v = verify_read_pack(repo, id, by_pack.get(id).map(Vec::as_slice).unwrap_or(&[]), read);
                progress.add_bytes(*size);
                (i, *id, v, bad, unread)
            })
            .collect()
    });
    // In the order of `packs`, whichever reader finished first.
    verdicts.sort_by_key(|(i, ..)| *i);
    r.packs_read = packs.len() as u64;
    r.packs_read_ids = packs.iter().map(|(id, _)| *id).collect();
    let mut good = HashSet::new();
    let mut problems = Vec::new();
    for (_, id, v, bad, unread) in verdicts {
        if let Some(e) = v.storage {
            return Err(e.into());
        }
        r.warnings.extend(unread);
        let copies_ok = bad.is_empty();
        if by_pack.contains_key(&id) {
            problems.extend(bad.iter().map(DamagedCopy::describe));
            r.damaged_copies.extend(bad);
        }
        if v.problems.is_empty() && v.damaged.is_empty() && copies_ok {
            good.insert(id);
        }
        if !by_pack.contains_key(&id) {
            // A pack no index lists (an interrupted upload may leave one cut
            // short): no snapshot uses its data, so what is wrong with it is no
            // damage to the repository.
            let why = "in a pack no index lists, left by an interrupted backup: no snapshot uses its data";
            r.warnings.extend(v.problems.into_iter().map(|p| format!("{p} ({why})")));
            continue;
        }
        problems.extend(v.problems);
        // A blob with a good copy elsewhere is not lost: its bad copy is among the
        // pack's problems.
        let lost = v.damaged.iter().filter(|e| !repo.has_good_copy_elsewhere(e.blob_type, &e.id, &id));
        r.damaged_blobs.extend(lost.map(|e| DamagedBlob { id: e.id, blob_type: e.blob_type, pack: Some(id) }));
    }
    problems.sort();
    r.errors.extend(problems);
    Ok(good)
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};
    use std::sync::Arc;

    use super::*;
    use crate::crypto::sign::SigningKey;
    use crate::format::pack::BlobType;
    use crate::ops::backup::{BackupOptions, backup};
    use crate::progress::NoProgress;
    use crate::repo::InitOptions;
    use crate::testing::noise;
    use coffer_backend::testing::{Intercepted, Request};
    use coffer_backend::{Backend, OpendalBackend};

    use crate::testing::FAST_KDF as FAST;

    /// A repository in `dir` with one backup of twelve incompressible files of
    /// one blob each, in packs of about 1 MiB. Returns its backend, the writer's
    /// key, the snapshot id and the source directory.
    fn backed_up(dir: &Path) -> (Arc<dyn Backend>, SigningKey, Id, PathBuf) {
        let be: Arc<dyn Backend> = Arc::new(OpendalBackend::local(&dir.join("repo")).unwrap());
        let opts = InitOptions { kdf: FAST, pack_size: 1 << 20, ..InitOptions::default() };
        let repo = Repository::init(be.clone(), b"pw", &opts).unwrap();
        let src = dir.join("src");
        std::fs::create_dir_all(src.join("sub")).unwrap();
        for i in 0..12u64 {
            let parent = if i % 2 == 0 { src.join("sub") } else { src.clone() };
            std::fs::write(parent.join(format!("f{i}")), noise(200_000, i + 1)).unwrap();
        }
        let key = SigningKey::generate();
        repo.register_writer(&key.public(), "host".into(), "user".into()).unwrap();
        let opts = BackupOptions { paths: vec![src.clone()], ..BackupOptions::default() };
        let id = backup(&repo, &opts, &key, &NoProgress).unwrap().id.unwrap();
        (be, key, id, src)
    }

    #[test]
    fn packs_are_read_one_at_a_time_locally_and_several_over_a_remote_store() {
        assert_eq!(pack_readers(2, 16 << 20), 1, "a local disk");
        assert_eq!(pack_readers(32, 16 << 20), 2, "32 MiB ahead");
        assert_eq!(pack_readers(32, 1 << 20), 32, "at most the connections");
        assert_eq!(pack_readers(8, 64 << 20), 1, "at least one");
    }

    #[test]
    fn a_pack_no_index_lists_cut_short_is_a_warning_not_damage() {
        let dir = tempfile::tempdir().unwrap();
        let (be, _, _, _) = backed_up(dir.path());
        // What a killed upload can leave on a store that shows objects being written.
        let id = Id::hash_of(b"a whole pack");
        be.write(&ObjectKind::Pack.path(&id), b"the first bytes of a pa".to_vec()).unwrap();
        let r = run(&be, true);
        assert!(r.is_ok(), "{:?}", r.errors);
        let about: Vec<&String> = r.warnings.iter().filter(|w| w.contains(&id.short())).collect();
        assert!(about.iter().any(|w| w.contains("not in any index")), "{:?}", r.warnings);
        assert!(
            about.iter().any(|w| w.contains("does not match its name") && w.contains("no snapshot uses")),
            "{about:?}"
        );
        assert!(!r.packs_read_ids.is_empty());
        // An indexed pack cut short stays damage.
        let indexed = be.list("data/").unwrap().into_iter().find(|o| !o.name.ends_with(&id.to_hex())).unwrap();
        let bytes = be.read(&indexed.name).unwrap();
        be.write(&indexed.name, bytes[..bytes.len() / 2].to_vec()).unwrap();
        assert!(!run(&be, true).is_ok());
    }

    #[test]
    fn a_pack_the_storage_refuses_is_a_storage_error_not_damage() {
        let dir = tempfile::tempdir().unwrap();
        let (be, _, _, _) = backed_up(dir.path());
        // Every read of a pack refused, as a storage that denies permission does.
        let refuse = |r: Request<'_>| match r {
            Request::Read(name) if name.starts_with("data/") => {
                Err(BackendError::new(coffer_backend::ErrorKind::Permanent, name, "permission denied"))
            }
            _ => Ok(()),
        };
        let refused: Arc<dyn Backend> = Arc::new(Intercepted::new(be, coffer_backend::local_connections(), refuse));
        let repo = Repository::open(refused, b"pw").unwrap();
        let r = check(&repo, &CheckOptions { read_data: true, ..CheckOptions::default() }, &NoProgress);
        match r {
            Err(Error::Backend(e)) => assert!(e.to_string().contains("permission denied"), "{e}"),
            other => panic!("expected a storage error, got {other:?}"),
        }
    }

    fn run(be: &Arc<dyn Backend>, read_data: bool) -> CheckReport {
        let repo = Repository::open(be.clone(), b"pw").unwrap();
        check(&repo, &CheckOptions { read_data, ..CheckOptions::default() }, &NoProgress).unwrap()
    }

    fn merkle_errors(r: &CheckReport) -> Vec<&String> {
        r.errors.iter().filter(|e| e.contains("Merkle root")).collect()
    }

    /// Asserts that loading `ids` together gives what loading each alone gives;
    /// returns how many loaded.
    fn same_as_one_by_one(repo: &Repository, ids: &[Id]) -> usize {
        let together = trees::load_trees(repo, ids, &trees::TreePacks::default());
        assert_eq!(together.len(), ids.len());
        // Read ahead, the same results.
        let ahead = trees::load_trees(repo, ids, &trees::TreePacks::read(repo));
        for (a, b) in together.iter().zip(&ahead) {
            assert_eq!(format!("{a:?}"), format!("{b:?}"));
        }
        let mut ok = 0;
        for (id, got) in ids.iter().zip(together) {
            match (got, repo.load_tree(id)) {
                (Ok(a), Ok(b)) => {
                    assert_eq!(a, b);
                    ok += 1;
                }
                (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
                (a, b) => panic!("tree {}: {a:?} together, {b:?} alone", id.short()),
            }
        }
        ok
    }

    #[test]
    fn trees_loaded_together_are_those_loaded_one_by_one() {
        let dir = tempfile::tempdir().unwrap();
        let be: Arc<dyn Backend> = Arc::new(OpendalBackend::local(&dir.path().join("repo")).unwrap());
        let opts = InitOptions { kdf: FAST, ..InitOptions::default() };
        let repo = Repository::init(be.clone(), b"pw", &opts).unwrap();
        let src = dir.path().join("src");
        for i in 0..60 {
            std::fs::create_dir_all(src.join(format!("d{i}/e"))).unwrap();
            std::fs::write(src.join(format!("d{i}/e/f")), format!("file {i}\n")).unwrap();
        }
        let key = SigningKey::generate();
        backup(&repo, &BackupOptions { paths: vec![src], ..BackupOptions::default() }, &key, &NoProgress).unwrap();

        let repo = Repository::open(be, b"pw").unwrap();
        assert!(repo.load_index().unwrap().is_empty());
        let mut trees: Vec<(Id, PackEntry, Id)> = {
            let idx = repo.index();
            idx.iter()
                .filter(|e| e.entry.blob_type == BlobType::Tree)
                .map(|e| (e.entry.id, e.entry, idx.packs()[e.pack as usize].id))
                .collect()
        };
        assert!(trees.len() > 120, "{}", trees.len());
        trees.sort_by_key(|(_, e, p)| (*p, e.offset));
        // Unknown ids, and ids twice, in any order.
        let mut ids: Vec<Id> = trees.iter().rev().map(|t| t.0).collect();
        ids.extend([Id([7; 32]), trees[3].0, trees[0].0]);
        assert_eq!(same_as_one_by_one(&repo, &ids), ids.len() - 1);
        // Neighbouring tree blobs are read together.
        let (runs, placed) = trees::plan(&repo, &ids);
        assert_eq!(placed.iter().filter(|p| p.is_some()).count(), ids.len() - 1);
        assert!(runs.len() * 10 < ids.len(), "{} requests for {} trees", runs.len(), ids.len());
        // Read ahead, each pack's trees are read once, whatever the runs.
        let counted =
            Arc::new(coffer_backend::CountingBackend::new(OpendalBackend::local(&dir.path().join("repo")).unwrap()));
        let counts = counted.handle();
        let crepo = Repository::open(counted as Arc<dyn Backend>, b"pw").unwrap();
        crepo.load_index().unwrap();
        let before = counts.get().get;
        let ahead = trees::TreePacks::read(&crepo);
        let got = trees::load_trees(&crepo, &ids, &ahead);
        let tree_packs: HashSet<Id> = trees.iter().map(|t| t.2).collect();
        assert_eq!(counts.get().get - before, tree_packs.len() as u64);
        assert_eq!(got.iter().filter(|r| r.is_ok()).count(), ids.len() - 1);

        // One tree blob altered, then its pack cut short, then gone.
        let (_, altered, pack) = trees[trees.len() / 2];
        let path = dir.path().join("repo").join(ObjectKind::Pack.path(&pack));
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[(altered.offset + altered.length as u64 / 2) as usize] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(same_as_one_by_one(&repo, &ids), ids.len() - 2);
        let cut = trees[trees.len() * 3 / 4].1.offset as usize + 5;
        std::fs::write(&path, &bytes[..cut]).unwrap();
        let loaded = same_as_one_by_one(&repo, &ids);
        assert!(loaded > 2 && loaded < ids.len() - 2, "{loaded}");
        std::fs::remove_file(&path).unwrap();
        let in_pack = ids.iter().filter(|id| trees.iter().any(|t| t.0 == **id && t.2 == pack)).count();
        assert_eq!(same_as_one_by_one(&repo, &ids), ids.len() - 1 - in_pack);
    }

    #[test]
    fn read_data_names_every_damaged_blob_of_a_pack() {
        let dir = tempfile::tempdir().unwrap();
        let (be, _, _, src) = backed_up(dir.path());
        let clean = run(&be, true);
        assert!(clean.is_ok(), "{:?}", clean.errors);
        assert!(clean.packs > 2 && clean.packs_read == clean.packs, "{clean:?}");

        // Two blobs of one data pack altered in place.
        let repo = Repository::open(be.clone(), b"pw").unwrap();
        assert!(repo.load_index().unwrap().is_empty());
        let mut by_pack: HashMap<Id, Vec<PackEntry>> = HashMap::new();
        for e in repo.index().iter().filter(|e| e.entry.blob_type == BlobType::Data) {
            by_pack.entry(repo.index().packs()[e.pack as usize].id).or_default().push(e.entry);
        }
        let (pack, entries) = by_pack.into_iter().find(|(_, e)| e.len() >= 2).expect("a pack of two blobs");
        let path = dir.path().join("repo").join(ObjectKind::Pack.path(&pack));
        let mut bytes = std::fs::read(&path).unwrap();
        for e in &entries[..2] {
            bytes[(e.offset + e.length as u64 / 2) as usize] ^= 1;
        }
        std::fs::write(&path, bytes).unwrap();

        let r = run(&be, true);
        assert_eq!(r.packs_read, clean.packs);
        let mut damaged: Vec<Id> = r.damaged_blobs.iter().map(|b| b.id).collect();
        damaged.sort();
        let mut expected: Vec<Id> = entries[..2].iter().map(|e| e.id).collect();
        expected.sort();
        assert_eq!(damaged, expected);
        assert!(r.damaged_blobs.iter().all(|b| b.pack == Some(pack)));
        let name = ObjectKind::Pack.describe(&pack);
        assert!(r.errors.contains(&format!("{name}: content does not match its name (altered or truncated)")));
        for e in &entries[..2] {
            assert!(r.errors.iter().any(|x| x.starts_with(&format!("{name}: data blob {}: ", e.id.short()))), "{r:?}");
        }
        assert_eq!(r.errors.len(), 3, "{:?}", r.errors);
        // Each damaged blob is one file of the snapshot.
        assert_eq!(r.affected.len(), 2);
        assert!(r.affected.iter().all(|f| f.path.starts_with(&src)), "{:?}", r.affected);
        // Without reading data, nothing is wrong.
        assert!(run(&be, false).is_ok());
    }

    #[test]
    fn a_snapshot_signed_with_a_wrong_merkle_root_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let (be, key, id, _) = backed_up(dir.path());
        let r = run(&be, false);
        assert!(r.is_ok(), "{:?}", r.errors);
        assert_eq!((r.snapshots, r.data_blobs), (1, 12));

        // A key holder signs the same trees with another root, then another count.
        let repo = Repository::open(be.clone(), b"pw").unwrap();
        let snap = repo.load_snapshot(&id).unwrap();
        let mut wrong_root = snap.clone();
        wrong_root.merkle_root.0[0] ^= 1;
        let mut wrong_count = snap.clone();
        wrong_count.merkle_leaves -= 1;
        let forged = [repo.save_snapshot(&wrong_root, &key).unwrap(), repo.save_snapshot(&wrong_count, &key).unwrap()];

        let r = run(&be, false);
        assert_eq!(r.snapshots, 3);
        let mut named: Vec<String> =
            merkle_errors(&r).iter().map(|e| e.split(':').next().unwrap().to_string()).collect();
        named.sort();
        let mut expected: Vec<String> = forged.iter().map(|f| format!("snapshot {}", f.short())).collect();
        expected.sort();
        assert_eq!(named, expected, "{:?}", r.errors);
    }
}

#[cfg(test)]
#[path = "race_tests.rs"]
mod race_tests;
