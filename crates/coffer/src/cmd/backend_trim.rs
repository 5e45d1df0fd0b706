//! Removing misplaced copies of packs, for `coffer rebalance` and `coffer repair
//! --replicas`: the prune protocol's notice and grace, applied to copies. A copy
//! leaves a backend that is not one of its pack's homes only after every home
//! holds a copy whose bytes hash to the pack's name, a copy notice announced the
//! removal, the grace period passed, the homes still list the pack, and the layout
//! is still the one the plan was made from. See
//! docs/design.md#removing-misplaced-copies.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant, SystemTime};

use anyhow::Result;
use coffer_core::Id;
use coffer_core::format::ObjectKind;
use coffer_core::format::envelope::SealedKind;
use coffer_core::format::notice::PruneNotice;
use coffer_core::lifecycle::{Timing, notices};
use coffer_core::repo::Repository;

use super::backend::{Scan, scan};
use crate::replicas::Opened;

/// What one removal pass did.
#[derive(Debug, Default)]
pub struct Trimmed {
    /// Copies removed, and their bytes.
    pub removed: usize,
    pub bytes: u64,
    /// Packs with a misplaced copy kept because a home lacks the pack or holds a
    /// copy that does not verify (copy it there first).
    pub unverified: Vec<String>,
    /// Planned removals dropped after the wait: a home no longer listed the
    /// pack, or another remover announced it meanwhile.
    pub spared: usize,
    /// Why the pass stopped before removing everything it planned.
    pub stopped: Option<String>,
    /// Misplaced copies kept because the newest layout signed by a trusted
    /// writer needs them and the layout followed does not keep as many copies
    /// (or no trusted writer signed any layout).
    pub kept_for_trusted: usize,
}

/// Whether backend `i`'s copy of pack `id` hashes to its name.
fn verified_on(o: &Opened, i: usize, id: &Id) -> bool {
    let Some(be) = o.backend.member(i) else { return false };
    be.read_max(&ObjectKind::Pack.path(id), ObjectKind::Pack.max_len()).is_ok_and(|data| Id::hash_of(&data) == *id)
}

/// The members listing each pack.
fn holders(o: &Opened, s: &Scan) -> BTreeMap<Id, Vec<usize>> {
    let mut out: BTreeMap<Id, Vec<usize>> = BTreeMap::new();
    for i in 0..o.layout.1.backends.len() {
        if let Ok(m) = &s.listed[i] {
            for id in m.keys() {
                out.entry(*id).or_default().push(i);
            }
        }
    }
    out
}

/// Whether the layout to follow is still `o`'s.
fn layout_unchanged(repo: &Repository, o: &Opened) -> Result<bool> {
    let trusted = crate::repo_open::trusted_writers(repo)?;
    Ok(repo.choose_layout(&trusted)?.followed.is_some_and(|(id, _)| id == o.layout.0))
}

/// Whether the copy of pack `id` on backend `i` may go as far as the newest
/// trusted layout is concerned (docs/design.md#trusted-layouts): always when the
/// layout followed is that one; never without one; else when `i` is not one of
/// the pack's homes there, or the homes followed (whose copies verified) keep
/// at least as many copies as it asks for.
fn trusted_allows(o: &Opened, i: usize, id: &Id, homes: usize) -> bool {
    let Some((tid, t)) = &o.trusted else { return false };
    if *tid == o.layout.0 {
        return true;
    }
    let name = &o.layout.1.backends[i].spec.name;
    let home_there = t
        .table
        .owners_of_id(&id.0)
        .iter()
        .any(|&x| t.backends.get(usize::from(x)).is_some_and(|b| &b.spec.name == name));
    !home_there || homes >= usize::from(t.table.replicas)
}

/// Removes every copy of a pack on a backend that is not one of its homes in
/// `o`'s layout, following docs/design.md#removing-misplaced-copies. `waiting`
/// is told before the grace period is slept through.
pub fn remove_misplaced(
    repo: &Repository,
    o: &Opened,
    timing: Timing,
    waiting: &dyn Fn(usize, Duration),
) -> Result<Trimmed> {
    let mut out = Trimmed::default();
    let copy_notices = |all: Vec<(Id, PruneNotice)>| -> BTreeMap<Id, PruneNotice> {
        all.into_iter().filter(|(_, n)| !n.backends.is_empty()).collect()
    };
    // 1. The notices already there, then one listing per backend: the plan.
    let before: BTreeSet<Id> = copy_notices(notices::read_all(repo)?).into_keys().collect();
    let s = scan(o);
    let sizes = |i: usize, id: &Id| s.listed[i].as_ref().ok().and_then(|m| m.get(id).copied()).unwrap_or(0);
    let mut plan: BTreeMap<usize, Vec<Id>> = BTreeMap::new();
    for (id, held) in holders(o, &s) {
        let homes = o.backend.homes(&ObjectKind::Pack.path(&id));
        let extra: Vec<usize> =
            held.iter().copied().filter(|h| !homes.contains(h) && o.backend.member(*h).is_some()).collect();
        if extra.is_empty() {
            continue;
        }
        let complete = homes.iter().all(|h| held.contains(h)) && homes.iter().all(|&h| verified_on(o, h, &id));
        if !complete {
            out.unverified.push(id.to_hex());
            continue;
        }
        for e in extra {
            if trusted_allows(o, e, &id, homes.len()) {
                plan.entry(e).or_default().push(id);
            } else {
                out.kept_for_trusted += 1;
            }
        }
    }
    if plan.is_empty() {
        remove_notices(repo, &before);
        return Ok(out);
    }
    // 2. Announce: one notice per backend losing copies (and per 100,000 packs).
    let names: Vec<String> = o.layout.1.backends.iter().map(|b| b.spec.name.clone()).collect();
    let mut ours = BTreeSet::new();
    for (&i, ids) in &plan {
        for chunk in ids.chunks(PruneNotice::MAX_PACKS) {
            let notice = PruneNotice {
                version: coffer_core::format::FORMAT_VERSION,
                time: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
                hostname: coffer_core::fs::meta::hostname(),
                packs: chunk.to_vec(),
                backends: vec![names[i].clone()],
            };
            ours.insert(repo.save_sealed(SealedKind::PruneNotice, &notice.encode())?);
        }
    }
    // 3. The grace period, then the layout must be the same.
    let planned: usize = plan.values().map(Vec::len).sum();
    waiting(planned, timing.grace);
    std::thread::sleep(timing.grace);
    let mut checked = Instant::now();
    if !layout_unchanged(repo, o)? {
        out.stopped = Some("a newer layout was stored while waiting; run `coffer rebalance` again".into());
        remove_notices(repo, &ours);
        return Ok(out);
    }
    // 4. What changed during the wait: another remover's notices, and the homes' listings.
    let busy: BTreeSet<Id> = copy_notices(notices::read_all(repo)?)
        .into_iter()
        .filter(|(id, _)| !before.contains(id) && !ours.contains(id))
        .flat_map(|(_, n)| n.packs)
        .collect();
    let again = holders(o, &scan(o));
    // 5. Remove, re-reading the layout every quarter of the grace period.
    'backends: for (&i, ids) in &plan {
        let Some(be) = o.backend.member(i) else { continue };
        for id in ids {
            let homes = o.backend.homes(&ObjectKind::Pack.path(id));
            let still = again.get(id).is_some_and(|held| homes.iter().all(|h| held.contains(h)));
            if !still || busy.contains(id) {
                out.spared += 1;
                continue;
            }
            if checked.elapsed() > timing.check_window() {
                if !layout_unchanged(repo, o)? {
                    out.stopped = Some("a newer layout was stored meanwhile; run `coffer rebalance` again".into());
                    break 'backends;
                }
                checked = Instant::now();
            }
            be.delete(&ObjectKind::Pack.path(id)).map_err(|e| {
                anyhow::anyhow!("removing the misplaced copy of pack {} from backend {}: {e}", id.short(), names[i])
            })?;
            out.removed += 1;
            out.bytes += sizes(i, id);
        }
    }
    // 6. This pass's notices, and those interrupted passes left.
    remove_notices(repo, &ours.union(&before).copied().collect());
    Ok(out)
}

/// Deletes copy notices; one already gone, or a backend refusing, leaves it for
/// the next pass (a stale copy notice only makes a remover skip its packs once).
fn remove_notices(repo: &Repository, ids: &BTreeSet<Id>) {
    for id in ids {
        let _ = repo.backend().delete(&ObjectKind::PruneNotice.path(id));
    }
}
