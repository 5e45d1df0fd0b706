//! How [`super::assign`] builds a table: the input checks, the bound on each
//! backend's partitions (apportionment), then kept pairs, forced drops, the fill
//! and augmenting paths. See docs/design.md#placement.

use super::{BackendSpec, MAX_BACKENDS, MAX_PARTITIONS, MAX_REPLICAS, Options, PlacementError, Table, previous_owners};
use std::cmp::Ordering;
use std::collections::{BTreeSet, BinaryHeap, VecDeque};

pub(super) fn assign(
    backends: &[BackendSpec],
    replicas: u8,
    partitions: u32,
    previous: Option<&Table>,
    options: &Options,
) -> Result<Table, PlacementError> {
    let zone = check(backends, replicas, partitions, previous)?;
    let capacity: Vec<u64> = backends.iter().map(|b| b.capacity).collect();
    let bound = bounds(&capacity, &zone, usize::from(replicas), partitions);
    let mut state = State::new(zone, bound, usize::from(replicas), partitions, options.seed);
    if let Some(previous) = previous {
        state.keep(previous);
    }
    state.drop_over_bounds();
    state.fill();
    state.augment()?;
    state.into_table()
}

/// Checks the inputs; returns each backend's zone as a small integer.
fn check(
    backends: &[BackendSpec],
    replicas: u8,
    partitions: u32,
    previous: Option<&Table>,
) -> Result<Vec<usize>, PlacementError> {
    if replicas == 0 || replicas > MAX_REPLICAS {
        return Err(PlacementError::InvalidReplicas { replicas });
    }
    if partitions == 0 || partitions > MAX_PARTITIONS {
        return Err(PlacementError::InvalidPartitions { partitions });
    }
    if backends.len() > MAX_BACKENDS {
        return Err(PlacementError::TooManyBackends {
            backends: backends.len(),
            partitions,
            replicas,
            needed: MAX_PARTITIONS,
        });
    }
    let mut names = BTreeSet::new();
    for b in backends {
        if !names.insert(b.name.as_str()) {
            return Err(PlacementError::DuplicateName { name: b.name.clone() });
        }
    }
    if backends.len() < usize::from(replicas) {
        return Err(PlacementError::TooFewBackends { replicas, backends: backends.len() });
    }
    if backends.iter().all(|b| b.capacity == 0) {
        return Err(PlacementError::ZeroCapacity);
    }
    let mut zone_names: Vec<&str> = Vec::new();
    let mut zone = Vec::with_capacity(backends.len());
    for b in backends {
        let z = match zone_names.iter().position(|z| *z == b.zone_key()) {
            Some(z) => z,
            None => {
                zone_names.push(b.zone_key());
                zone_names.len() - 1
            }
        };
        zone.push(z);
    }
    let live_zones: BTreeSet<usize> =
        backends.iter().zip(&zone).filter(|(b, _)| b.capacity > 0).map(|(_, z)| *z).collect();
    if live_zones.len() < usize::from(replicas) {
        return Err(PlacementError::TooFewZones { replicas, zones: live_zones.len() });
    }
    let live = backends.iter().filter(|b| b.capacity > 0).count();
    if live as u64 > u64::from(partitions) * u64::from(replicas) {
        let needed = (live.div_ceil(usize::from(replicas)).next_power_of_two() as u32).min(MAX_PARTITIONS);
        return Err(PlacementError::TooManyBackends { backends: live, partitions, replicas, needed });
    }
    if let Some(previous) = previous
        && let Some(&index) = previous.owners.iter().find(|&&v| usize::from(v) >= backends.len())
    {
        return Err(PlacementError::UnknownBackend { index, backends: backends.len() });
    }
    Ok(zone)
}

/// A backend's claim on its next partition: its capacity over the partition count
/// it would then hold. The heap pops the largest claim first.
struct Claim {
    capacity: u64,
    count: u32,
    backend: usize,
}

impl Claim {
    fn value_cmp(&self, other: &Claim) -> Ordering {
        // capacity / count against other.capacity / other.count, exactly.
        (u128::from(self.capacity) * u128::from(other.count))
            .cmp(&(u128::from(other.capacity) * u128::from(self.count)))
    }
}

impl PartialEq for Claim {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Claim {}
impl PartialOrd for Claim {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Claim {
    fn cmp(&self, other: &Self) -> Ordering {
        self.value_cmp(other).then_with(|| other.backend.cmp(&self.backend))
    }
}

/// The most partitions each backend may hold: `floor(c / s*)` (at most
/// `partitions`), where `s*` is the largest partition size for which the zones
/// can hold `replicas` copies of every partition. A zone can hold each partition
/// once, so it offers `min(partitions, sum of its backends' counts)` slots, and
/// the counts are feasible exactly when the zones offer `replicas * partitions`
/// slots in all (fill the zones round-robin over the partitions). Lowering `s`
/// from infinity, each backend's count `floor(c / s)` steps up at `s = c / k`:
/// the claims are taken largest first (D'Hondt apportionment), all claims of the
/// same value together, until the zones offer enough slots. The result bounds
/// the counts; the table's usable capacity is `partitions * s*`, the best any
/// table of equal partitions can reach.
pub(super) fn bounds(capacity: &[u64], zone: &[usize], replicas: usize, partitions: u32) -> Vec<u32> {
    let need = replicas as u64 * u64::from(partitions);
    let zones = zone.iter().max().map_or(0, |z| z + 1);
    let mut count = vec![0u32; capacity.len()];
    let mut zone_slots = vec![0u64; zones];
    let mut offered = 0u64;
    let mut heap: BinaryHeap<Claim> = capacity
        .iter()
        .enumerate()
        .filter(|(_, c)| **c > 0)
        .map(|(backend, &capacity)| Claim { capacity, count: 1, backend })
        .collect();
    while offered < need {
        let Some(first) = heap.pop() else { break };
        let mut group = vec![first];
        while heap.peek().is_some_and(|c| c.value_cmp(&group[0]) == Ordering::Equal) {
            group.extend(heap.pop());
        }
        for claim in group {
            let v = claim.backend;
            count[v] += 1;
            if zone_slots[zone[v]] < u64::from(partitions) {
                offered += 1;
            }
            zone_slots[zone[v]] += 1;
            if count[v] < partitions {
                heap.push(Claim { count: count[v] + 1, ..claim });
            }
        }
    }
    count
}

/// A well-mixed 64-bit hash (the SplitMix64 finaliser).
pub(super) fn mix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The tie-breaker of backend `v` for partition `p`.
fn tie(seed: u64, p: usize, v: usize) -> u64 {
    mix(seed ^ mix(((p as u64) << 20) ^ v as u64 ^ 0x9e37_79b9_7f4a_7c15))
}

/// Where a backend reached by the augmenting search gets its new partition from.
#[derive(Clone, Copy)]
enum Parent {
    /// Not reached.
    None,
    /// It takes the partition being completed.
    Start,
    /// It takes `partition` from backend `from`.
    From { from: usize, partition: u32 },
}

/// A table under construction.
struct State {
    replicas: usize,
    partitions: u32,
    seed: u64,
    zone: Vec<usize>,
    bound: Vec<u32>,
    held: Vec<u32>,
    /// The owners of each partition, fewer than `replicas` while it has gaps.
    rows: Vec<Vec<u16>>,
    /// The pairs carried over from the previous table, as (partition, backend).
    kept: BTreeSet<(u32, u16)>,
}

impl State {
    fn new(zone: Vec<usize>, bound: Vec<u32>, replicas: usize, partitions: u32, seed: u64) -> Self {
        let n = zone.len();
        State {
            replicas,
            partitions,
            seed,
            zone,
            bound,
            held: vec![0; n],
            rows: vec![Vec::with_capacity(replicas); partitions as usize],
            kept: BTreeSet::new(),
        }
    }

    fn fits(&self, p: usize, v: usize) -> bool {
        self.bound[v] > 0 && self.rows[p].iter().all(|&w| self.zone[usize::from(w)] != self.zone[v])
    }

    fn spare(&self, v: usize) -> u32 {
        self.bound[v] - self.held[v].min(self.bound[v])
    }

    /// Carries over every pair of `previous` that is still allowed: the backend
    /// has capacity, the partition has no replica in its zone yet, and the
    /// partition has fewer than `replicas` owners.
    fn keep(&mut self, previous: &Table) {
        for p in 0..self.partitions as usize {
            for &v in previous_owners(previous, self.partitions, p as u32) {
                if self.rows[p].len() < self.replicas && self.fits(p, usize::from(v)) {
                    self.rows[p].push(v);
                    self.held[usize::from(v)] += 1;
                    self.kept.insert((p as u32, v));
                }
            }
        }
    }

    /// A backend holding more than its bound gives up the partitions that have
    /// lost the fewest replicas so far, so the gaps spread over many partitions
    /// and any zone can fill them.
    fn drop_over_bounds(&mut self) {
        for v in 0..self.zone.len() {
            let excess = self.held[v].saturating_sub(self.bound[v]) as usize;
            if excess == 0 {
                continue;
            }
            let mut holding: Vec<usize> =
                (0..self.rows.len()).filter(|&p| self.rows[p].contains(&(v as u16))).collect();
            holding.sort_by_key(|&p| (std::cmp::Reverse(self.rows[p].len()), tie(self.seed, p, v)));
            for &p in &holding[..excess] {
                self.rows[p].retain(|&w| usize::from(w) != v);
            }
            self.held[v] -= excess as u32;
        }
    }

    /// Fills every gap it can directly: the partitions with the most gaps first
    /// (ties in hash order), each gap with the allowed backend that has the most
    /// room relative to its bound (ties by hash). Gaps without a candidate are
    /// left to [`State::augment`].
    fn fill(&mut self) {
        let mut order: Vec<usize> = (0..self.rows.len()).filter(|&p| self.rows[p].len() < self.replicas).collect();
        order.sort_by_key(|&p| (self.rows[p].len(), tie(self.seed, p, usize::MAX)));
        for p in order {
            while self.rows[p].len() < self.replicas {
                let Some(v) = self.best_for(p) else { break };
                self.rows[p].push(v as u16);
                self.held[v] += 1;
            }
        }
    }

    fn best_for(&self, p: usize) -> Option<usize> {
        let mut best: Option<usize> = None;
        for v in 0..self.zone.len() {
            if self.spare(v) == 0 || !self.fits(p, v) {
                continue;
            }
            best = Some(match best {
                None => v,
                Some(b) => {
                    // spare(v) / bound(v) against spare(b) / bound(b), then the hash.
                    let lhs = u64::from(self.spare(v)) * u64::from(self.bound[b]);
                    let rhs = u64::from(self.spare(b)) * u64::from(self.bound[v]);
                    match lhs.cmp(&rhs).then_with(|| tie(self.seed, p, v).cmp(&tie(self.seed, p, b))) {
                        Ordering::Greater => v,
                        _ => b,
                    }
                }
            });
        }
        best
    }

    /// Completes the partitions the fill could not, by augmenting paths: a backend
    /// that may take the partition but is full hands one of its partitions to
    /// another backend that may take that one, and so on until a backend with room.
    /// Paths that move no carried-over pair are preferred. The bounds guarantee a
    /// complete table exists, so a partition with no path at all means an error
    /// in this module.
    fn augment(&mut self) -> Result<(), PlacementError> {
        let mut pending: Vec<usize> = (0..self.rows.len()).filter(|&p| self.rows[p].len() < self.replicas).collect();
        if pending.is_empty() {
            return Ok(());
        }
        let mut parts_of: Vec<Vec<u32>> = vec![Vec::new(); self.zone.len()];
        for (p, row) in self.rows.iter().enumerate() {
            for &v in row {
                parts_of[usize::from(v)].push(p as u32);
            }
        }
        while !pending.is_empty() {
            let before = pending.len();
            let mut still = Vec::new();
            for p in pending {
                while self.rows[p].len() < self.replicas {
                    let found = self.search(p, &parts_of, false).or_else(|| self.search(p, &parts_of, true));
                    match found {
                        Some((end, parent)) => self.apply(p, end, &parent, &mut parts_of),
                        None => break,
                    }
                }
                if self.rows[p].len() < self.replicas {
                    still.push(p);
                }
            }
            if still.len() == before {
                return Err(PlacementError::InvalidTable {
                    reason: format!("no complete assignment found for partition {} (a placement defect)", still[0]),
                });
            }
            pending = still;
        }
        Ok(())
    }

    /// Breadth-first search for an augmenting path completing partition `p`;
    /// returns the backend with room at its end and every backend's parent.
    fn search(&self, p: usize, parts_of: &[Vec<u32>], move_kept: bool) -> Option<(usize, Vec<Parent>)> {
        let n = self.zone.len();
        let mut parent = vec![Parent::None; n];
        let mut queue = VecDeque::new();
        for v in 0..n {
            if !self.rows[p].contains(&(v as u16)) && self.fits(p, v) {
                parent[v] = Parent::Start;
                if self.spare(v) > 0 {
                    return Some((v, parent));
                }
                queue.push_back(v);
            }
        }
        while let Some(b) = queue.pop_front() {
            for &q in &parts_of[b] {
                let qi = q as usize;
                if qi == p || (!move_kept && self.kept.contains(&(q, b as u16))) || on_path(&parent, b, q) {
                    continue;
                }
                for w in 0..n {
                    if !matches!(parent[w], Parent::None) || self.bound[w] == 0 {
                        continue;
                    }
                    let zone_ok = self.zone[w] == self.zone[b] || self.fits(qi, w);
                    if !zone_ok || self.rows[qi].contains(&(w as u16)) {
                        continue;
                    }
                    parent[w] = Parent::From { from: b, partition: q };
                    if self.spare(w) > 0 {
                        return Some((w, parent));
                    }
                    queue.push_back(w);
                }
            }
        }
        None
    }

    fn apply(&mut self, p: usize, end: usize, parent: &[Parent], parts_of: &mut [Vec<u32>]) {
        let mut w = end;
        self.held[end] += 1;
        loop {
            match parent[w] {
                Parent::Start | Parent::None => {
                    self.rows[p].push(w as u16);
                    parts_of[w].push(p as u32);
                    return;
                }
                Parent::From { from, partition } => {
                    let row = &mut self.rows[partition as usize];
                    if let Some(slot) = row.iter_mut().find(|v| usize::from(**v) == from) {
                        *slot = w as u16;
                    }
                    parts_of[w].push(partition);
                    parts_of[from].retain(|&q| q != partition);
                    w = from;
                }
            }
        }
    }

    fn into_table(self) -> Result<Table, PlacementError> {
        let mut owners = Vec::with_capacity(self.rows.len() * self.replicas);
        for (p, row) in self.rows.iter().enumerate() {
            if row.len() != self.replicas {
                return Err(PlacementError::InvalidTable {
                    reason: format!(
                        "partition {p} has {} of {} replicas (a placement defect)",
                        row.len(),
                        self.replicas
                    ),
                });
            }
            owners.extend_from_slice(row);
        }
        Ok(Table { partitions: self.partitions, replicas: self.replicas as u8, owners })
    }
}

/// Whether `partition` already moves on the path that reaches backend `b`.
fn on_path(parent: &[Parent], mut b: usize, partition: u32) -> bool {
    while let Parent::From { from, partition: q } = parent[b] {
        if q == partition {
            return true;
        }
        b = from;
    }
    false
}
