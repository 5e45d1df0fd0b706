//! The checker: verifies that the repository is complete and undamaged.
//! See docs/design.md#check.
//!
//! Structure (always): every key file and index file decodes and matches its name;
//! every indexed pack exists; every snapshot loads; every tree of every snapshot
//! loads and verifies; every data blob a tree references is indexed.
//! Data (`read_data`): every pack is read whole, its hash checked against its
//! name, its header decrypted and compared with the index, and every blob
//! decrypted, decompressed and checked against its id.
//!
//! Problems are collected, not returned as the first error, so one run reports
//! all the damage; each message names the object.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Mutex;

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::format::ObjectKind;
use crate::format::keyfile::KeyFile;
use crate::format::pack::{self, BlobType, PackEntry, TRAILER_LEN};
use crate::format::tree::NodeKind;
use crate::id::Id;
use crate::progress::Progress;
use crate::repo::Repository;

/// What to check.
#[derive(Clone, Debug, Default)]
pub struct CheckOptions {
    /// Also read and verify every pack's content.
    pub read_data: bool,
    /// This client's local state: the history heads it saw last, to detect rollback.
    pub state: Option<crate::state::LocalState>,
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
    /// Snapshots removed on purpose, each recorded by a tombstone.
    pub forgotten: u64,
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
    check_keys(repo, &mut r)?;
    check_index(repo, &mut r)?;
    let packs: HashMap<Id, u64> = repo
        .backend()
        .list(ObjectKind::Pack.prefix())?
        .into_iter()
        .filter_map(|o| Some((ObjectKind::Pack.id_from_path(&o.name)?, o.size)))
        .collect();
    r.packs = packs.len() as u64;
    let indexed: HashSet<Id> = repo.index().packs().iter().map(|p| p.id).collect();
    for id in &indexed {
        if !packs.contains_key(id) {
            r.errors.push(format!("pack {}: listed in the index but missing from the repository", id.short()));
        }
    }
    for id in packs.keys() {
        if !indexed.contains(id) {
            r.warnings.push(format!(
                "pack {}: not in any index (left by an interrupted backup); harmless, its data is not used",
                id.short()
            ));
        }
    }
    check_snapshots(repo, &mut r)?;
    let history = crate::history::check(repo, opts.state.as_ref())?;
    r.errors.extend(history.errors);
    r.warnings.extend(history.warnings);
    r.forgotten = history.forgotten as u64;
    if opts.read_data {
        read_data(repo, &packs, &mut r, progress);
    }
    Ok(r)
}

fn check_keys(repo: &Repository, r: &mut CheckReport) -> Result<()> {
    for id in repo.list_ids(ObjectKind::Key)? {
        match repo.read_object(ObjectKind::Key, &id) {
            Ok(bytes) => {
                if let Err(e) = KeyFile::decode(&bytes) {
                    r.errors.push(format!("{}: {e}", ObjectKind::Key.describe(&id)));
                }
            }
            Err(e) => r.errors.push(e.to_string()),
        }
    }
    Ok(())
}

fn check_index(repo: &Repository, r: &mut CheckReport) -> Result<()> {
    let ids = repo.list_ids(ObjectKind::Index)?;
    let loaded: Vec<_> = ids.par_iter().map(|id| repo.load_index_file(id)).collect();
    let mut good = Vec::new();
    for (id, res) in ids.iter().zip(loaded) {
        match res {
            Ok(recs) if recs.iter().flat_map(|p| &p.entries).any(|e| e.offset > u32::MAX as u64) => {
                r.errors.push(format!("{}: lists a blob at an offset beyond 4 GiB", ObjectKind::Index.describe(id)))
            }
            Ok(recs) => good.extend(recs),
            Err(Error::Backend(e)) => return Err(Error::Backend(e)),
            Err(e) => r.errors.push(e.to_string()),
        }
    }
    if let Err(e) = repo.index_mut().add_packs(&good) {
        r.errors.push(format!("index: {e}"));
    }
    Ok(())
}

fn check_snapshots(repo: &Repository, r: &mut CheckReport) -> Result<()> {
    let mut seen_trees: HashSet<Id> = HashSet::new();
    let mut seen_blobs: HashSet<Id> = HashSet::new();
    for sid in repo.list_ids(ObjectKind::Snapshot)? {
        let snap = match repo.load_snapshot(&sid) {
            Ok(s) => s,
            Err(e) => {
                r.errors.push(e.to_string());
                continue;
            }
        };
        r.snapshots += 1;
        let mut stack = vec![(snap.tree, "/".to_string())];
        while let Some((tid, path)) = stack.pop() {
            if !seen_trees.insert(tid) {
                continue;
            }
            let tree = match repo.load_tree(&tid) {
                Ok(t) => t,
                Err(e) => {
                    r.errors.push(format!("snapshot {}, directory {path}: {e}", sid.short()));
                    continue;
                }
            };
            r.trees += 1;
            let idx = repo.index();
            for node in &tree.nodes {
                let child = Path::new(&path).join(node.name.display()).to_string_lossy().into_owned();
                match (node.kind, node.subtree) {
                    (NodeKind::Dir, Some(sub)) => stack.push((sub, child)),
                    _ => {
                        for b in &node.content {
                            if seen_blobs.insert(*b) && !idx.contains(b, BlobType::Data) {
                                r.errors.push(format!(
                                    "snapshot {}, file {child}: data blob {} is not in any index",
                                    sid.short(),
                                    b.short()
                                ));
                            }
                        }
                    }
                }
            }
        }
    }
    r.data_blobs = seen_blobs.len() as u64;
    Ok(())
}

/// Verifies one pack completely; returns its problems.
pub fn verify_pack(repo: &Repository, id: &Id, indexed: &[PackEntry]) -> Vec<String> {
    let name = ObjectKind::Pack.describe(id);
    let bytes = match repo.backend().read(&ObjectKind::Pack.path(id)) {
        Ok(b) => b,
        Err(e) => return vec![e.to_string()],
    };
    if Id::hash_of(&bytes) != *id {
        return vec![format!("{name}: content does not match its name (altered or truncated)")];
    }
    let len = bytes.len() as u64;
    if bytes.len() < TRAILER_LEN {
        return vec![format!("{name}: {len} bytes is too short for a pack")];
    }
    let trailer = match pack::decode_trailer(&bytes[bytes.len() - TRAILER_LEN..], len) {
        Ok(t) => t,
        Err(e) => return vec![format!("{name}: {e}")],
    };
    let hstart = bytes.len() - TRAILER_LEN - trailer.header_len as usize;
    let key = match repo.pack_key(trailer.epoch, trailer.cipher, &trailer.salt) {
        Ok(k) => k,
        Err(e) => return vec![format!("{name}: {e}")],
    };
    let entries = match pack::open_header(&key, &trailer, &bytes[hstart..bytes.len() - TRAILER_LEN], len) {
        Ok(e) => e,
        Err(e) => return vec![format!("{name}: {e}")],
    };
    let mut problems = Vec::new();
    for e in &entries {
        let sealed = &bytes[e.offset as usize..(e.offset + e.length as u64) as usize];
        match pack::open_blob(&key, e, sealed) {
            Ok(data) if repo.blob_id(e.blob_type, &data) == e.id => {}
            Ok(_) => problems.push(format!("{name}: {} {} does not match its id", e.blob_type.noun(), e.id.short())),
            Err(err) => problems.push(format!("{name}: {} {}: {err}", e.blob_type.noun(), e.id.short())),
        }
    }
    let in_header: HashSet<(Id, u64)> = entries.iter().map(|e| (e.id, e.offset)).collect();
    for e in indexed {
        if !in_header.contains(&(e.id, e.offset)) {
            problems.push(format!(
                "{name}: the index places {} {} here, the pack header does not",
                e.blob_type.noun(),
                e.id.short()
            ));
        }
    }
    problems
}

fn read_data(repo: &Repository, packs: &HashMap<Id, u64>, r: &mut CheckReport, progress: &dyn Progress) {
    let mut by_pack: HashMap<Id, Vec<PackEntry>> = HashMap::new();
    {
        let idx = repo.index();
        for e in idx.iter() {
            by_pack.entry(idx.packs()[e.pack as usize].id).or_default().push(e.entry);
        }
    }
    let mut ids: Vec<(Id, u64)> = packs.iter().map(|(k, v)| (*k, *v)).collect();
    ids.sort();
    progress.set_total(ids.iter().map(|(_, s)| s).sum(), ids.len() as u64);
    let problems = Mutex::new(Vec::new());
    ids.par_iter().for_each(|(id, size)| {
        let p = verify_pack(repo, id, by_pack.get(id).map(Vec::as_slice).unwrap_or(&[]));
        progress.add_bytes(*size);
        problems.lock().expect("poisoned").extend(p);
    });
    r.packs_read = ids.len() as u64;
    let mut p = problems.into_inner().expect("poisoned");
    p.sort();
    r.errors.extend(p);
}
