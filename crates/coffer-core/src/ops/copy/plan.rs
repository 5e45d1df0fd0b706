//! Deciding what a copy sends, from object names: the listings of `snapshots/`,
//! `tombstones/`, `writers/` and `index/` on both sides, and only the source
//! objects the destination lacks are read (docs/design.md#copy, "Protocol").

use std::collections::{HashMap, HashSet};

use crate::error::{Error, Result};
use crate::format::ObjectKind;
use crate::format::snapshot::Snapshot;
use crate::format::tombstone::Tombstone;
use crate::id::Id;
use crate::repo::Repository;

use super::CopyOptions;

/// The names (and sizes) of one repository's small objects, listed once.
#[derive(Debug, Default)]
pub(super) struct Names {
    pub snapshots: HashMap<Id, u64>,
    pub tombstones: HashMap<Id, u64>,
    pub writers: HashMap<Id, u64>,
    pub index: HashMap<Id, u64>,
}

impl Names {
    /// Lists `repo`: snapshots and tombstones first, then writers, then index files,
    /// so that every snapshot listed has its index files in the index listing (a
    /// snapshot is stored after them, docs/design.md#write-order).
    pub fn list(repo: &Repository) -> Result<Names> {
        let list = |kind: ObjectKind| -> Result<HashMap<Id, u64>> {
            Ok(repo
                .backend()
                .list(kind.prefix())?
                .into_iter()
                .filter_map(|o| Some((kind.id_from_path(&o.name)?, o.size)))
                .collect())
        };
        Ok(Names {
            snapshots: list(ObjectKind::Snapshot)?,
            tombstones: list(ObjectKind::Tombstone)?,
            writers: list(ObjectKind::Writer)?,
            index: list(ObjectKind::Index)?,
        })
    }

    /// The names of `repo`, a coffer server, learnt from its reconciliation
    /// sketches against `other`'s ([`super::reconcile`]), each kind listed
    /// instead when its sketch does not serve. With `in_order` (`repo` is the
    /// source) the sketches of index files are asked for after the others, as
    /// [`Names::list`] lists them; else all at once.
    pub fn learn(repo: &Repository, other: &Names, in_order: bool) -> Result<Names> {
        let learn = |kind: &ObjectKind| -> Result<HashMap<Id, u64>> {
            let known = other.of(*kind);
            match super::reconcile::names(repo.backend(), *kind, known)? {
                Some(names) => Ok(names),
                None => Ok(repo
                    .backend()
                    .list(kind.prefix())?
                    .into_iter()
                    .filter_map(|o| Some((kind.id_from_path(&o.name)?, o.size)))
                    .collect()),
            }
        };
        let kinds = [ObjectKind::Snapshot, ObjectKind::Tombstone, ObjectKind::Writer, ObjectKind::Index];
        let rounds: Vec<&[ObjectKind]> = if in_order { vec![&kinds[..3], &kinds[3..]] } else { vec![&kinds[..]] };
        let mut got = Vec::new();
        for round in rounds {
            got.extend(coffer_backend::fan_out(round.len(), round, learn));
        }
        let mut got = got.into_iter();
        let mut next = || got.next().expect("one answer per kind");
        Ok(Names { snapshots: next()?, tombstones: next()?, writers: next()?, index: next()? })
    }

    fn of(&self, kind: ObjectKind) -> &HashMap<Id, u64> {
        match kind {
            ObjectKind::Snapshot => &self.snapshots,
            ObjectKind::Tombstone => &self.tombstones,
            ObjectKind::Writer => &self.writers,
            _ => &self.index,
        }
    }
}

/// The ids in `a` that `b` lacks, sorted.
pub(super) fn missing(a: &HashMap<Id, u64>, b: &HashMap<Id, u64>) -> Vec<Id> {
    let mut v: Vec<Id> = a.keys().filter(|k| !b.contains_key(k)).copied().collect();
    v.sort();
    v
}

/// The snapshots to copy, oldest first, and the problems met choosing them.
pub(super) struct Selection {
    pub snapshots: Vec<(Id, Snapshot)>,
    /// The chosen snapshots as stored (read once, written unchanged by a copy
    /// between repositories sharing their keys).
    pub stored: HashMap<Id, Vec<u8>>,
    /// Source tombstones loaded (only when some snapshot is new), by id.
    pub src_tombstones: Vec<(Id, Tombstone)>,
    /// Destination tombstones loaded (likewise).
    pub dst_tombstones: Vec<(Id, Tombstone)>,
    /// Named snapshots the destination holds already.
    pub already: usize,
    /// Snapshots not copied because their signature is not valid in the source,
    /// with what is wrong with it.
    pub refused: Vec<(Id, String)>,
    pub warnings: Vec<String>,
}

/// Picks the source snapshots the destination lacks that `opts` asks for: those
/// named (ids, prefixes, `latest`) or all, passing the filter; never one the
/// source forgot, nor one the destination forgot (on purpose, by its tombstone).
/// Reads only the snapshots the destination lacks, and the tombstones of both
/// sides only when there is any.
pub(super) fn select(
    src: &Repository,
    dst: &Repository,
    s: &Names,
    d: &Names,
    opts: &CopyOptions,
) -> Result<Selection> {
    let mut sel = Selection {
        snapshots: Vec::new(),
        stored: HashMap::new(),
        src_tombstones: Vec::new(),
        dst_tombstones: Vec::new(),
        already: 0,
        refused: Vec::new(),
        warnings: Vec::new(),
    };
    let wanted: Vec<Id> = if opts.snapshots.is_empty() {
        missing(&s.snapshots, &d.snapshots)
    } else {
        let mut ids = Vec::new();
        for name in &opts.snapshots {
            let id = if name == "latest" {
                src.find_snapshot(name, &opts.filter)?.0
            } else {
                src.resolve_prefix(ObjectKind::Snapshot, name)?
            };
            if !s.snapshots.contains_key(&id) {
                return Err(Error::SnapshotNotFound(format!("{name} (in the source repository)")));
            }
            if d.snapshots.contains_key(&id) {
                sel.already += 1;
            } else if !ids.contains(&id) {
                ids.push(id);
            }
        }
        ids
    };
    if wanted.is_empty() {
        return Ok(sel);
    }
    let loaded = src.fetch_many(&wanted, |id| (*id, src.load_snapshot_stored(id)));
    let mut snaps = Vec::new();
    for (id, r) in loaded {
        match r {
            Ok((s, bytes)) => {
                snaps.push((id, s));
                sel.stored.insert(id, bytes);
            }
            Err(Error::Backend(e)) if e.kind == coffer_backend::ErrorKind::NotFound => {}
            Err(Error::Backend(e)) => return Err(Error::Backend(e)),
            Err(e) => sel.warnings.push(format!("{e}; it was not copied")),
        }
    }
    snaps.retain(|(_, s)| opts.filter.matches(s));
    if snaps.is_empty() {
        return Ok(sel);
    }
    let (st, bad) = src.tombstones()?;
    sel.warnings.extend(bad.iter().map(|e| format!("source {e}")));
    let (dt, _) = dst.tombstones()?;
    let forgotten: HashSet<Id> = st.iter().chain(&dt).flat_map(|(_, t)| t.forgotten.iter().map(|f| f.id)).collect();
    snaps.retain(|(id, _)| !forgotten.contains(id));
    sel.src_tombstones = st;
    sel.dst_tombstones = dt;
    snaps.sort_by(|a, b| a.1.system_time().cmp(&b.1.system_time()).then(a.0.cmp(&b.0)));
    // Who wrote a snapshot travels with it: a byte copy keeps the signature,
    // and needs the writer's record, which the source lacks for an unknown
    // writer; a copy written anew would be signed by this client. Neither can
    // vouch for a snapshot whose author the source cannot confirm.
    let (ok, bad): (Vec<_>, Vec<_>) = snaps.into_iter().partition(|(_, s)| s.signature.is_valid());
    sel.refused = bad.into_iter().map(|(id, s)| (id, s.signature.describe())).collect();
    sel.snapshots = ok;
    Ok(sel)
}

/// The source tombstones to copy so that the copied snapshots' history links
/// resolve in the destination, and the entries they link to that stay absent.
///
/// A link resolves when the destination holds its target, the target is copied
/// too, or a tombstone there records it as forgotten (whose record's own links
/// must then resolve). Without `with_forgets`, a source tombstone is copied for
/// this only if it forgets no snapshot the destination holds: it then removes
/// nothing there and only completes the history. With `with_forgets`, every
/// source tombstone the destination lacks is copied (a mirror). With `every`,
/// every source tombstone the destination lacks is looked at, reached by a link
/// or not (and copied on the same terms).
pub(super) fn history_closure(
    sel: &Selection,
    s: &Names,
    d: &Names,
    with_forgets: bool,
    every: bool,
) -> (Vec<Id>, Vec<Id>) {
    let tombs: HashMap<Id, &Tombstone> = sel.src_tombstones.iter().map(|(i, t)| (*i, t)).collect();
    // Forgotten snapshots, with the links their tombstone's record keeps.
    let mut records: HashMap<Id, &[Id]> = HashMap::new();
    for (_, t) in &sel.dst_tombstones {
        for f in &t.forgotten {
            records.entry(f.id).or_insert(&f.history);
        }
    }
    let mut present: HashSet<Id> = d.snapshots.keys().chain(d.tombstones.keys()).copied().collect();
    present.extend(sel.snapshots.iter().map(|(i, _)| *i));
    // What to look at: entries the copied snapshots link to (and, with `every`,
    // tombstones no link names, marked `false`: not "unlinked" when left).
    let mut work: Vec<(Id, bool)> =
        sel.snapshots.iter().flat_map(|(_, s)| s.history.iter().map(|l| (*l, true))).collect();
    let mut forced: HashSet<Id> = HashSet::new();
    if with_forgets || every {
        for id in missing(&s.tombstones, &d.tombstones) {
            if tombs.contains_key(&id) {
                if with_forgets {
                    forced.insert(id);
                }
                // Below the links, so that a link to it is followed first.
                work.insert(0, (id, false));
            }
        }
    }
    let (mut copy, mut unlinked, mut seen) = (Vec::new(), Vec::new(), HashSet::new());
    while let Some((l, linked)) = work.pop() {
        if !seen.insert(l) || (present.contains(&l) && !forced.contains(&l)) {
            continue;
        }
        if let Some(h) = records.get(&l) {
            work.extend(h.iter().map(|l| (*l, true)));
            continue;
        }
        match tombs.get(&l) {
            Some(t)
                if !d.tombstones.contains_key(&l)
                    && (forced.contains(&l) || t.forgotten.iter().all(|f| !d.snapshots.contains_key(&f.id))) =>
            {
                present.insert(l);
                copy.push(l);
                work.extend(t.history.iter().map(|l| (*l, true)));
                for f in &t.forgotten {
                    records.entry(f.id).or_insert(&f.history);
                    work.extend(f.history.iter().map(|l| (*l, true)));
                }
            }
            _ if linked => unlinked.push(l),
            _ => {}
        }
    }
    // A link that resolved later through a tombstone copied afterwards is fine.
    unlinked.retain(|l| !present.contains(l) && !records.contains_key(l));
    copy.sort();
    unlinked.sort();
    (copy, unlinked)
}
