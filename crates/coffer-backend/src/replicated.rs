//! One repository over several backends: a [`Backend`] that keeps each pack on
//! the backends a placement [`Table`] names for it and every other object on all
//! of them. See docs/design.md#many-backends.
//!
//! - **Writes.** A pack (`data/…`) goes to the owners of its partition,
//!   concurrently; any other object (`config`, `keys/`, `index/`, `snapshots/`,
//!   `tombstones/`, `writers/`, `sessions/`, `prune/`, `layout/`) goes to every
//!   backend, so that any one of them opens the repository. A write succeeds
//!   when it reached all its homes; with `min_copies` below the replica count
//!   (the degraded mode) it may miss up to `replicas − min_copies` of them, and
//!   the objects left short are remembered ([`ReplicatedBackend::take_short`]).
//! - **Reads** go to the healthiest holder first (fewest recent failures, then
//!   the lowest measured latency): for a pack, the owners in the current table,
//!   then (during a migration) the owners in the previous one, then any other
//!   backend; another copy answers when one fails. [`Backend::read_range_copy`]
//!   lets the repository ask for a given copy when a blob does not verify.
//! - **Listings** are the union by name of every backend's listing; a backend
//!   that does not answer is left out while at least one answers.
//! - **Deletes** go to every backend; all must succeed (all but
//!   `replicas − min_copies` in the degraded mode).
//!
//! A backend whose location this client does not know is a member without a
//! backend: it counts as failed for writes and is skipped by reads.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::time::Instant;

use super::placement::Table;
use super::{Backend, BackendError, BackendResult, ErrorKind, ObjectInfo, PlacedCopy};

/// Most requests in flight a replicated backend asks for.
const MAX_CONNECTIONS: usize = 64;

/// Weight of a new latency sample in the moving average, in 1/8ths.
const LATENCY_WEIGHT_EIGHTHS: u64 = 2;

/// One member backend and what its answers have shown so far.
struct Member {
    name: String,
    backend: Option<Arc<dyn Backend>>,
    /// Failures since the last success.
    failures: AtomicU32,
    /// Moving average of successful request times, in microseconds (0: none yet).
    latency_us: AtomicU64,
}

impl Member {
    fn record(&self, started: Instant, ok: bool) {
        if ok {
            self.failures.store(0, Relaxed);
            let sample = started.elapsed().as_micros() as u64;
            let old = self.latency_us.load(Relaxed);
            let new = if old == 0 {
                sample
            } else {
                (old * (8 - LATENCY_WEIGHT_EIGHTHS) + sample * LATENCY_WEIGHT_EIGHTHS) / 8
            };
            self.latency_us.store(new.max(1), Relaxed);
        } else {
            self.failures.fetch_add(1, Relaxed);
        }
    }

    fn unconfigured(&self, object: &str) -> BackendError {
        BackendError::new(
            ErrorKind::Permanent,
            object,
            format!("backend {} has no location configured on this client", self.name),
        )
    }
}

/// An object that was stored on fewer homes than it should have.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShortCopy {
    /// The object's name.
    pub object: String,
    /// The backends that should hold it and do not.
    pub missing: Vec<String>,
}

/// How one member stands, for listings such as `coffer backend list`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberHealth {
    /// The backend's name.
    pub name: String,
    /// Whether this client knows its location.
    pub configured: bool,
    /// Failures since its last success.
    pub failures: u32,
    /// Moving average of its request times in microseconds; 0 before any.
    pub latency_us: u64,
}

/// A backend spread over named member backends by a placement [`Table`].
pub struct ReplicatedBackend {
    members: Vec<Member>,
    table: Table,
    previous: Option<Table>,
    min_copies: usize,
    short: Mutex<BTreeMap<String, Vec<String>>>,
}

/// The 32 bytes of a pack id named by `name` (`data/<2 hex>/<64 hex>`); `None`
/// for every other object.
pub fn pack_id_of(name: &str) -> Option<[u8; 32]> {
    let rest = name.strip_prefix("data/")?;
    let last = rest.rsplit('/').next()?;
    let mut id = [0u8; 32];
    hex::decode_to_slice(last, &mut id).ok()?;
    Some(id)
}

impl ReplicatedBackend {
    /// Spreads objects over `members` (name, and the backend when this client
    /// knows its location) as `table` says; the table's indices are positions
    /// in `members`. Writes need every copy until [`Self::with_min_copies`].
    pub fn new(members: Vec<(String, Option<Arc<dyn Backend>>)>, table: Table) -> BackendResult<Self> {
        check_table(&table, members.len(), "the placement table")?;
        let members = members
            .into_iter()
            .map(|(name, backend)| Member { name, backend, failures: AtomicU32::new(0), latency_us: AtomicU64::new(0) })
            .collect();
        let min_copies = table.replicas as usize;
        Ok(ReplicatedBackend { members, table, previous: None, min_copies, short: Mutex::new(BTreeMap::new()) })
    }

    /// During a migration: the table being left, whose owners reads ask after
    /// the current owners.
    pub fn with_previous(mut self, previous: Table) -> BackendResult<Self> {
        check_table(&previous, self.members.len(), "the previous placement table")?;
        self.previous = Some(previous);
        Ok(self)
    }

    /// The degraded mode: a write succeeds once at least `min_copies` copies of a
    /// pack (and all but `replicas − min_copies` copies of any other object) are
    /// stored; what is short is remembered. `min_copies` is clamped to 1..=replicas.
    pub fn with_min_copies(mut self, min_copies: usize) -> Self {
        self.min_copies = min_copies.clamp(1, self.table.replicas as usize);
        self
    }

    /// The current table.
    pub fn table(&self) -> &Table {
        &self.table
    }

    /// The previous table, during a migration.
    pub fn previous(&self) -> Option<&Table> {
        self.previous.as_ref()
    }

    /// The members' names, in table order.
    pub fn names(&self) -> Vec<String> {
        self.members.iter().map(|m| m.name.clone()).collect()
    }

    /// Member `i`'s backend, when this client knows its location.
    pub fn member(&self, i: usize) -> Option<&Arc<dyn Backend>> {
        self.members.get(i)?.backend.as_ref()
    }

    /// How every member stands.
    pub fn health(&self) -> Vec<MemberHealth> {
        self.members
            .iter()
            .map(|m| MemberHealth {
                name: m.name.clone(),
                configured: m.backend.is_some(),
                failures: m.failures.load(Relaxed),
                latency_us: m.latency_us.load(Relaxed),
            })
            .collect()
    }

    /// The members that should hold object `name`: a pack's owners in the
    /// current table, every member for anything else.
    pub fn homes(&self, name: &str) -> Vec<usize> {
        match pack_id_of(name) {
            Some(id) => owners(&self.table, &id),
            None => (0..self.members.len()).collect(),
        }
    }

    /// The objects stored short of their homes since the last call, and which
    /// backends lack each (the degraded mode only; a strict write fails instead).
    pub fn take_short(&self) -> Vec<ShortCopy> {
        std::mem::take(&mut *self.short.lock().unwrap_or_else(|e| e.into_inner()))
            .into_iter()
            .map(|(object, missing)| ShortCopy { object, missing })
            .collect()
    }

    /// The members to read `name` from, in a fixed order: the homes, then (a
    /// pack during a migration) the previous owners, then every other member.
    fn copy_order(&self, name: &str) -> Vec<usize> {
        let mut order = self.homes(name);
        if let (Some(id), Some(prev)) = (pack_id_of(name), &self.previous) {
            for i in owners(prev, &id) {
                if !order.contains(&i) {
                    order.push(i);
                }
            }
        }
        for i in 0..self.members.len() {
            if !order.contains(&i) {
                order.push(i);
            }
        }
        order.retain(|&i| self.members[i].backend.is_some());
        order
    }

    /// [`Self::copy_order`], each group sorted healthiest first: fewer recent
    /// failures, then lower latency (a member not measured yet goes first among
    /// equals, so that it gets measured).
    fn read_order(&self, name: &str) -> Vec<usize> {
        let order = self.copy_order(name);
        let homes = self.homes(name).len();
        let prev = match (pack_id_of(name), &self.previous) {
            (Some(id), Some(p)) => owners(p, &id).iter().filter(|i| !self.homes(name).contains(i)).count(),
            _ => 0,
        };
        let key = |i: &usize| {
            let m = &self.members[*i];
            (m.failures.load(Relaxed).min(3), m.latency_us.load(Relaxed))
        };
        let mut out = Vec::with_capacity(order.len());
        let mut rest = order.as_slice();
        for group in [homes, prev, usize::MAX] {
            let n = group.min(rest.len());
            let mut g = rest[..n].to_vec();
            g.sort_by_key(key);
            out.extend(g);
            rest = &rest[n..];
        }
        out
    }

    /// Runs `op` on the members in `order` until one answers; the answer of the
    /// last copy's error otherwise (a failure other than `NotFound` wins, so a
    /// backend that is down is not reported as a missing object).
    fn read_from<T>(
        &self,
        name: &str,
        order: &[usize],
        op: impl Fn(&dyn Backend) -> BackendResult<T>,
    ) -> BackendResult<T> {
        let mut error: Option<BackendError> = None;
        for &i in order {
            let m = &self.members[i];
            let Some(be) = &m.backend else { continue };
            let started = Instant::now();
            match op(be.as_ref()) {
                Ok(v) => {
                    m.record(started, true);
                    return Ok(v);
                }
                Err(e) => {
                    if e.kind != ErrorKind::NotFound {
                        m.record(started, e.kind == ErrorKind::TooLarge);
                    }
                    let worse = match &error {
                        None => true,
                        Some(prev) => prev.kind == ErrorKind::NotFound && e.kind != ErrorKind::NotFound,
                    };
                    if worse {
                        error = Some(e);
                    }
                }
            }
        }
        Err(error.unwrap_or_else(|| BackendError::new(ErrorKind::NotFound, name, "no backend holding it is reachable")))
    }

    /// Runs `op` on every member in `targets` (concurrently when more than one)
    /// and applies the write rule: all must succeed, or all but
    /// `replicas − min_copies` in the degraded mode (what is short is remembered).
    fn write_to<T: Send>(
        &self,
        name: &str,
        targets: &[usize],
        op: impl Fn(&dyn Backend) -> BackendResult<T> + Sync,
    ) -> BackendResult<Vec<T>> {
        let results = self.run_each(name, targets, op);
        self.settle(name, targets, results)
    }

    /// The write rule over the results of one write on `targets`.
    fn settle<T>(&self, name: &str, targets: &[usize], results: Vec<BackendResult<T>>) -> BackendResult<Vec<T>> {
        let slack = self.table.replicas as usize - self.min_copies;
        let required = targets.len().saturating_sub(slack).max(1);
        let mut ok = Vec::new();
        let mut failed: Vec<(usize, BackendError)> = Vec::new();
        for (&i, r) in targets.iter().zip(results) {
            match r {
                Ok(v) => ok.push(v),
                Err(e) => failed.push((i, e)),
            }
        }
        if failed.is_empty() {
            return Ok(ok);
        }
        let missing: Vec<String> = failed.iter().map(|(i, _)| self.members[*i].name.clone()).collect();
        if ok.len() >= required {
            self.short.lock().unwrap_or_else(|e| e.into_inner()).insert(name.to_string(), missing);
            return Ok(ok);
        }
        let kind = if failed.iter().all(|(_, e)| e.kind == ErrorKind::Transient) {
            ErrorKind::Transient
        } else {
            ErrorKind::Permanent
        };
        let detail: Vec<String> =
            failed.iter().map(|(i, e)| format!("backend {}: {}", self.members[*i].name, e.message)).collect();
        Err(BackendError::new(
            kind,
            name,
            format!(
                "stored on {} of {} backends, {} needed ({}); bring the failed backends back, or pass \
                 --min-copies to accept fewer copies and `coffer repair --replicas` later",
                ok.len(),
                targets.len(),
                required,
                detail.join("; ")
            ),
        ))
    }
}

/// Checks that every owner in `table` names one of `members` members.
fn check_table(table: &Table, members: usize, what: &str) -> BackendResult<()> {
    let bad = table.replicas == 0
        || table.partitions == 0
        || table.owners.len() != table.partitions as usize * table.replicas as usize
        || table.owners.iter().any(|&o| o as usize >= members);
    if bad {
        return Err(BackendError::new(
            ErrorKind::Permanent,
            "layout",
            format!("{what} does not fit its {members} backends; the layout is damaged or from a newer coffer"),
        ));
    }
    Ok(())
}

/// The owners of pack `id` in `table`, without repeats.
fn owners(table: &Table, id: &[u8; 32]) -> Vec<usize> {
    let mut out: Vec<usize> = Vec::new();
    for &o in table.owners_of(table.partition_of(id)) {
        if !out.contains(&(o as usize)) {
            out.push(o as usize);
        }
    }
    out
}

impl Backend for ReplicatedBackend {
    fn location(&self) -> String {
        let names: Vec<&str> = self.members.iter().map(|m| m.name.as_str()).collect();
        format!("replicated({})", names.join(", "))
    }

    fn connections(&self) -> usize {
        let sum: usize = self.members.iter().filter_map(|m| m.backend.as_ref()).map(|b| b.connections()).sum();
        sum.clamp(1, MAX_CONNECTIONS)
    }

    fn read_max(&self, name: &str, max: u64) -> BackendResult<Vec<u8>> {
        self.read_from(name, &self.read_order(name), |b| b.read_max(name, max))
    }

    fn read_range(&self, name: &str, offset: u64, len: u64) -> BackendResult<Vec<u8>> {
        self.read_from(name, &self.read_order(name), |b| b.read_range(name, offset, len))
    }

    fn read_ranges(&self, name: &str, ranges: &[(u64, u64)]) -> Vec<BackendResult<Vec<u8>>> {
        let order = self.read_order(name);
        let Some((&first, rest)) = order.split_first() else {
            return ranges.iter().map(|&(o, l)| self.read_range(name, o, l)).collect();
        };
        let m = &self.members[first];
        let be = m.backend.as_ref().expect("read order holds configured members only");
        let started = Instant::now();
        let mut out = be.read_ranges(name, ranges);
        m.record(started, out.iter().all(|r| r.as_ref().is_ok_or_not_found()));
        for (r, &(offset, len)) in out.iter_mut().zip(ranges) {
            if r.is_err() && !rest.is_empty() {
                *r = self.read_from(name, rest, |b| b.read_range(name, offset, len));
            }
        }
        out
    }

    fn copies(&self, name: &str) -> usize {
        self.copy_order(name).len().max(1)
    }

    fn read_range_copy(&self, name: &str, offset: u64, len: u64, copy: usize) -> BackendResult<Vec<u8>> {
        let order = self.copy_order(name);
        match order.get(copy) {
            Some(&i) => self.read_from(name, &[i], |b| b.read_range(name, offset, len)),
            None => Err(BackendError::new(ErrorKind::NotFound, name, format!("there is no copy {copy}"))),
        }
    }

    fn placed_copies(&self, name: &str) -> Vec<PlacedCopy> {
        let homes = self.homes(name);
        let previous = match (pack_id_of(name), &self.previous) {
            (Some(id), Some(prev)) => owners(prev, &id),
            _ => Vec::new(),
        };
        self.copy_order(name)
            .into_iter()
            .enumerate()
            .filter(|(_, i)| homes.contains(i) || previous.contains(i))
            .map(|(copy, i)| PlacedCopy {
                copy,
                backend: self.members[i].name.clone(),
                required: homes.contains(&i) && self.previous.is_none(),
            })
            .collect()
    }

    fn read_max_copy(&self, name: &str, max: u64, copy: usize) -> BackendResult<Vec<u8>> {
        match self.copy_order(name).get(copy) {
            Some(&i) => self.read_from(name, &[i], |b| b.read_max(name, max)),
            None => Err(BackendError::new(ErrorKind::NotFound, name, format!("there is no copy {copy}"))),
        }
    }

    fn write(&self, name: &str, data: Vec<u8>) -> BackendResult<()> {
        self.write_to(name, &self.homes(name), |b| b.write(name, data.clone())).map(drop)
    }

    fn write_new(&self, name: &str, data: Vec<u8>) -> BackendResult<bool> {
        let created = self.write_to(name, &self.homes(name), |b| b.write_new(name, data.clone()))?;
        Ok(created.iter().all(|&c| c))
    }

    fn write_file(&self, name: &str, file: &File, len: u64) -> BackendResult<()> {
        let targets = self.homes(name);
        // An unnamed spool file may be linked into place by a local member; two
        // members linking it at once would share one inode, so the first home
        // takes it alone and the others copy it.
        let unnamed = file.metadata().map(|m| m.nlink() == 0).unwrap_or(false);
        if unnamed && targets.len() > 1 {
            let (first, rest) = targets.split_at(1);
            let first_result = self.write_to_one(name, first[0], |b| b.write_file(name, file, len));
            let rest_results = self.run_each(name, rest, |b| b.write_file(name, file, len));
            let results = std::iter::once(first_result).chain(rest_results).collect();
            return self.settle(name, &targets, results).map(drop);
        }
        self.write_to(name, &targets, |b| b.write_file(name, file, len)).map(drop)
    }

    fn stat(&self, name: &str) -> BackendResult<u64> {
        self.read_from(name, &self.read_order(name), |b| b.stat(name))
    }

    fn list(&self, prefix: &str) -> BackendResult<Vec<ObjectInfo>> {
        let all: Vec<usize> = (0..self.members.len()).filter(|&i| self.members[i].backend.is_some()).collect();
        let results = self.run_each(prefix, &all, |b| b.list(prefix));
        let mut merged: BTreeMap<String, u64> = BTreeMap::new();
        let mut error = None;
        let mut answered = false;
        for r in results {
            match r {
                Ok(list) => {
                    answered = true;
                    for o in list {
                        merged.entry(o.name).or_insert(o.size);
                    }
                }
                Err(e) => error = error.or(Some(e)),
            }
        }
        match (answered, error) {
            (false, Some(e)) => Err(e),
            _ => Ok(merged.into_iter().map(|(name, size)| ObjectInfo { name, size }).collect()),
        }
    }

    fn delete(&self, name: &str) -> BackendResult<()> {
        let all: Vec<usize> = (0..self.members.len()).collect();
        let results = self.run_each(name, &all, |b| b.delete(name));
        let failed: Vec<(usize, BackendError)> =
            all.iter().zip(results).filter_map(|(&i, r)| r.err().map(|e| (i, e))).collect();
        // The degraded mode tolerates as many failures as a write does; a copy
        // left behind is what `check --replicas` reports as misplaced.
        let slack = self.table.replicas as usize - self.min_copies;
        match failed.into_iter().nth(slack) {
            None => Ok(()),
            Some((i, e)) => Err(BackendError::new(
                e.kind,
                name,
                format!("cannot delete it from backend {}: {}", self.members[i].name, e.message),
            )),
        }
    }
}

impl ReplicatedBackend {
    /// `op` on one member, its health recorded.
    fn write_to_one<T>(&self, name: &str, i: usize, op: impl Fn(&dyn Backend) -> BackendResult<T>) -> BackendResult<T> {
        let m = &self.members[i];
        let Some(be) = &m.backend else { return Err(m.unconfigured(name)) };
        let started = Instant::now();
        let r = op(be.as_ref());
        m.record(started, r.is_ok() || r.as_ref().is_err_and(|e| e.kind == ErrorKind::NotFound));
        r
    }

    /// `op` on every member of `targets`, concurrently, results in their order.
    fn run_each<T: Send>(
        &self,
        name: &str,
        targets: &[usize],
        op: impl Fn(&dyn Backend) -> BackendResult<T> + Sync,
    ) -> Vec<BackendResult<T>> {
        if targets.len() <= 1 {
            return targets.iter().map(|&i| self.write_to_one(name, i, &op)).collect();
        }
        std::thread::scope(|s| {
            let handles: Vec<_> = targets
                .iter()
                .map(|&i| {
                    let op = &op;
                    s.spawn(move || self.write_to_one(name, i, op))
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect()
        })
    }
}

/// Whether a result is a success or a plain absence (neither says the backend is unwell).
trait OkOrNotFound {
    fn is_ok_or_not_found(&self) -> bool;
}

impl<T> OkOrNotFound for Result<&T, &BackendError> {
    fn is_ok_or_not_found(&self) -> bool {
        match self {
            Ok(_) => true,
            Err(e) => e.kind == ErrorKind::NotFound,
        }
    }
}

#[cfg(test)]
#[path = "replicated_tests.rs"]
mod tests;
