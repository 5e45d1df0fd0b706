//! How [`super::assign`] builds a table: the input checks, the bound on each
//! backend's partitions (apportionment), then kept pairs, forced drops, the fill,
//! augmenting paths, and the cancelling of negative cycles that makes the
//! movement the least possible. See docs/design.md#placement.

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
    let (zone, bound) = prepare(backends, replicas, partitions, previous, options)?;
    let capacity: Vec<u64> = backends.iter().map(|b| b.capacity).collect();
    let mut state = State::new(zone, capacity, bound, usize::from(replicas), partitions, options.seed);
    if let Some(previous) = previous {
        state.keep(previous);
    }
    state.shed_over_bounds();
    state.fill();
    state.augment()?;
    if previous.is_some() {
        state.improve();
    }
    state.into_table()
}

/// Checks the inputs and returns each backend's zone (a small integer) and the
/// most partitions it may hold (rule 1, loosened by the slack).
pub(super) fn prepare(
    backends: &[BackendSpec],
    replicas: u8,
    partitions: u32,
    previous: Option<&Table>,
    options: &Options,
) -> Result<(Vec<usize>, Vec<u32>), PlacementError> {
    let zone = check(backends, replicas, partitions, previous)?;
    let capacity: Vec<u64> = backends.iter().map(|b| b.capacity).collect();
    let mut bound = bounds(&capacity, &zone, usize::from(replicas), partitions);
    if options.slack_ppm > 0 {
        loosen(&mut bound, &capacity, partitions, options.slack_ppm);
    }
    Ok((zone, bound))
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
    if let Some(&index) = previous.and_then(|t| t.owners.iter().find(|&&v| usize::from(v) >= backends.len())) {
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

/// Raises the bounds to what a partition size `(1 - slack) * s*` allows. `s*` is
/// the largest `capacity / bound` among the bounded backends' next partition:
/// any backend's `capacity / bound` is at least `s*`, so the smallest of them
/// is `s*` itself (a backend at the binding claim).
fn loosen(bound: &mut [u32], capacity: &[u64], partitions: u32, slack_ppm: u32) {
    let s_star = capacity
        .iter()
        .zip(bound.iter())
        .filter(|(_, n)| **n > 0)
        .map(|(&c, &n)| c as f64 / f64::from(n))
        .fold(f64::INFINITY, f64::min);
    let keep = 1.0 - f64::from(slack_ppm.min(1_000_000)) / 1e6;
    for (n, &c) in bound.iter_mut().zip(capacity) {
        if c == 0 {
            continue;
        }
        let loose = if keep <= 0.0 { f64::from(partitions) } else { (c as f64 / (s_star * keep)).floor() };
        *n = (*n).max(loose.min(f64::from(partitions)) as u32);
    }
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
    capacity: Vec<u64>,
    bound: Vec<u32>,
    held: Vec<u32>,
    /// The owners of each partition, fewer than `replicas` while it has gaps.
    rows: Vec<Vec<u16>>,
    /// The owners of each partition in the previous table (projected onto this
    /// partition count), empty without one.
    previous: Vec<Vec<u16>>,
}

impl State {
    fn new(zone: Vec<usize>, capacity: Vec<u64>, bound: Vec<u32>, replicas: usize, partitions: u32, seed: u64) -> Self {
        let n = zone.len();
        State {
            replicas,
            partitions,
            seed,
            zone,
            capacity,
            bound,
            held: vec![0; n],
            rows: vec![Vec::with_capacity(replicas); partitions as usize],
            previous: vec![Vec::new(); partitions as usize],
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
            self.previous[p] = previous_owners(previous, self.partitions, p as u32).to_vec();
            for &v in previous_owners(previous, self.partitions, p as u32) {
                if self.rows[p].len() < self.replicas && self.fits(p, usize::from(v)) {
                    self.rows[p].push(v);
                    self.held[usize::from(v)] += 1;
                }
            }
        }
    }

    /// A backend holding more than its bound hands partitions straight to
    /// backends with room that may take them (the fewest partitions for their
    /// capacity first), so each such pair moves once and only to a backend that
    /// gains. What no backend can take directly is dropped from the partitions
    /// that have lost the fewest replicas so far, leaving gaps spread over many
    /// partitions for the fill and the augmenting paths.
    fn shed_over_bounds(&mut self) {
        for v in 0..self.zone.len() {
            let mut excess = self.held[v].saturating_sub(self.bound[v]) as usize;
            if excess == 0 {
                continue;
            }
            let mut holding: Vec<usize> =
                (0..self.rows.len()).filter(|&p| self.rows[p].contains(&(v as u16))).collect();
            holding.sort_by_key(|&p| tie(self.seed, p, v));
            let mut undecided = Vec::new();
            for p in holding {
                if excess == 0 {
                    break;
                }
                self.rows[p].retain(|&w| usize::from(w) != v);
                match self.best_for(p) {
                    Some(w) => {
                        self.rows[p].push(w as u16);
                        self.held[w] += 1;
                        excess -= 1;
                    }
                    None => {
                        self.rows[p].push(v as u16);
                        undecided.push(p);
                    }
                }
            }
            undecided.sort_by_key(|&p| (std::cmp::Reverse(self.rows[p].len()), tie(self.seed, p, v)));
            for &p in undecided.iter().take(excess) {
                self.rows[p].retain(|&w| usize::from(w) != v);
            }
            self.held[v] = self.bound[v];
        }
    }

    /// Fills every gap it can directly: the partitions with the most gaps first
    /// (ties in hash order), each gap with the allowed backend below its bound
    /// that holds the fewest partitions for its capacity (the largest claim
    /// `c / (held + 1)`, ties by hash), so that partitions follow capacity even
    /// when the bounds leave room. Gaps without a candidate are
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
                    // The larger claim c / (held + 1) wins, then the hash.
                    let lhs = u128::from(self.capacity[v]) * u128::from(self.held[b] + 1);
                    let rhs = u128::from(self.capacity[b]) * u128::from(self.held[v] + 1);
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
                    let found = self.cheapest_path(p, &parts_of).or_else(|| self.search(p, &parts_of));
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

    /// Whether backend `v` held partition `p` in the previous table.
    fn was(&self, p: usize, v: usize) -> bool {
        self.previous[p].contains(&(v as u16))
    }

    /// The augmenting path completing partition `p` that moves the fewest pairs
    /// of the previous table (Bellman-Ford over backends, queue-driven): a step
    /// that takes a pair away from its previous owner costs 1, one that returns
    /// a pair to its previous owner gains 1. `None` when the search gives up
    /// (it stops after a number of steps linear in the backends) or finds a path
    /// that uses a partition twice; the breadth-first [`State::search`] then
    /// decides.
    fn cheapest_path(&self, p: usize, parts_of: &[Vec<u32>]) -> Option<(usize, Vec<Parent>)> {
        let n = self.zone.len();
        let mut cost = vec![i64::MAX; n];
        let mut parent = vec![Parent::None; n];
        let mut queued = vec![false; n];
        let mut queue = VecDeque::new();
        for v in 0..n {
            if !self.rows[p].contains(&(v as u16)) && self.fits(p, v) {
                cost[v] = -i64::from(self.was(p, v));
                parent[v] = Parent::Start;
                queued[v] = true;
                queue.push_back(v);
            }
        }
        let mut steps = 0;
        while let Some(b) = queue.pop_front() {
            queued[b] = false;
            steps += 1;
            if steps > 4 * n + 16 {
                break;
            }
            if self.spare(b) > 0 {
                continue; // a path may end here; going on cannot be needed
            }
            for &q in &parts_of[b] {
                let qi = q as usize;
                if qi == p {
                    continue;
                }
                let out = i64::from(self.was(qi, b));
                for w in 0..n {
                    if w == b || self.bound[w] == 0 || self.rows[qi].contains(&(w as u16)) {
                        continue;
                    }
                    if self.zone[w] != self.zone[b] && !self.fits(qi, w) {
                        continue;
                    }
                    let c = cost[b] + out - i64::from(self.was(qi, w));
                    if c < cost[w] && !ancestor(&parent, b, w) && !on_path(&parent, b, q) {
                        cost[w] = c;
                        parent[w] = Parent::From { from: b, partition: q };
                        if !queued[w] {
                            queued[w] = true;
                            queue.push_back(w);
                        }
                    }
                }
            }
        }
        let end = (0..n).filter(|&v| self.spare(v) > 0 && cost[v] < i64::MAX).min_by_key(|&v| cost[v])?;
        // The parents may have changed after a node's children were labelled:
        // check that the path is a chain of distinct partitions.
        let mut seen = Vec::new();
        let mut w = end;
        while let Parent::From { from, partition } = parent[w] {
            if seen.contains(&partition) || seen.len() > n {
                return None;
            }
            seen.push(partition);
            w = from;
        }
        Some((end, parent))
    }

    /// Breadth-first search for an augmenting path completing partition `p`;
    /// returns the backend with room at its end and every backend's parent.
    fn search(&self, p: usize, parts_of: &[Vec<u32>]) -> Option<(usize, Vec<Parent>)> {
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
                if qi == p || on_path(&parent, b, q) {
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

    /// Makes the movement exact (rule 2): the complete table is a flow of
    /// `replicas * partitions` units from partitions through (partition, zone)
    /// slots to backends (at most `bound` each), where a unit costs 1 when its
    /// pair is not in the previous table. A flow is of least cost exactly when
    /// its residual graph has no cycle of negative cost. Every such cycle passes
    /// from backend to backend by moving one partition `q` from a backend `a` to
    /// a backend `b` (allowed when `b` is in `a`'s zone or `q` has no replica in
    /// `b`'s zone), at cost `was(q, a) - was(q, b)`, or through the sink: a path
    /// from any backend to one below its bound. So the residual graph is
    /// summarised by a graph over the backends and the sink whose edge `a -> b`
    /// weighs the cheapest such move, and any residual cycle costs at least the
    /// closed walk it maps to there: once that small graph has no negative cycle,
    /// no table meeting the bounds and the zone rule keeps more pairs. Each
    /// negative cycle found (Bellman-Ford) is applied with distinct partitions,
    /// which keeps every bound and zone, and keeps at least one more pair.
    ///
    /// The weights need no scan of every partition against every backend: a
    /// move costs -1 or 0 only for a partition that is new on `a` or has lost a
    /// previous owner that may hold it again (few of them, listed per backend);
    /// every other partition on `a` is a kept pair whose other previous owners
    /// all hold it, so moving it costs 1, and whether one of them may go to `b`
    /// is read from a count, per backend and zone, of those partitions with a
    /// replica in the zone.
    fn improve(&mut self) {
        let n = self.zone.len();
        let zones = self.zone.iter().max().map_or(0, |z| z + 1);
        loop {
            self.held = vec![0; n];
            for row in &self.rows {
                for &v in row {
                    self.held[usize::from(v)] += 1;
                }
            }
            // Partitions whose moves may cost less than 1, per backend; the
            // others counted, per backend and per zone they have a replica in.
            let mut cheap: Vec<Vec<u32>> = vec![Vec::new(); n];
            let mut firm = vec![0u32; n];
            let mut firm_in_zone = vec![0u32; n * zones];
            for (q, row) in self.rows.iter().enumerate() {
                let lost = self.previous[q].iter().any(|&v| self.bound[usize::from(v)] > 0 && !row.contains(&v));
                for &a in row {
                    let a = usize::from(a);
                    if lost || !self.was(q, a) {
                        cheap[a].push(q as u32);
                    } else {
                        firm[a] += 1;
                        for &c in row {
                            firm_in_zone[a * zones + self.zone[usize::from(c)]] += 1;
                        }
                    }
                }
            }
            let m = n + 1; // the backends, then the sink
            let mut weight = vec![NO_EDGE; m * m];
            for a in 0..n {
                if self.held[a] > 0 {
                    weight[n * m + a] = 0;
                }
                if self.spare(a) > 0 {
                    weight[a * m + n] = 0;
                }
                for b in 0..n {
                    if b == a || self.bound[b] == 0 {
                        continue;
                    }
                    let za = self.zone[a];
                    let zb = self.zone[b];
                    if firm[a] > 0 && (za == zb || firm_in_zone[a * zones + zb] < firm[a]) {
                        weight[a * m + b] = 1;
                    }
                }
                for &q in &cheap[a] {
                    let q = q as usize;
                    for b in 0..n {
                        if b == a || self.bound[b] == 0 || !self.movable(q, a, b) {
                            continue;
                        }
                        let w = i8::from(self.was(q, a)) - i8::from(self.was(q, b));
                        let slot = &mut weight[a * m + b];
                        if *slot == NO_EDGE || w < *slot {
                            *slot = w;
                        }
                    }
                }
            }
            let Some(cycle) = negative_cycle(&weight, m) else { return };
            if !self.apply_cycle(&cycle, &cheap) {
                return;
            }
        }
    }

    /// Whether partition `q` may move from backend `a` to backend `b`.
    fn movable(&self, q: usize, a: usize, b: usize) -> bool {
        let row = &self.rows[q];
        !row.contains(&(b as u16))
            && (self.zone[a] == self.zone[b] || row.iter().all(|&c| self.zone[usize::from(c)] != self.zone[b]))
    }

    /// Applies a negative cycle of the backend graph (the sink is index
    /// `zone.len()`): each edge `a -> b` moves the cheapest partition on `a`
    /// that may go to `b` and no other edge of the cycle moves (ties by hash).
    /// Returns false, changing nothing, when distinct partitions cannot make
    /// the cycle negative.
    fn apply_cycle(&mut self, cycle: &[usize], cheap: &[Vec<u32>]) -> bool {
        let n = self.zone.len();
        let mut moves: Vec<(usize, usize, usize)> = Vec::with_capacity(cycle.len());
        let mut total = 0i64;
        for (i, &a) in cycle.iter().enumerate() {
            let b = cycle[(i + 1) % cycle.len()];
            if a == n || b == n {
                continue;
            }
            let key = |q: usize| {
                let fresh = !moves.iter().any(|&(p, _, _)| p == q) && self.movable(q, a, b);
                fresh.then(|| (i64::from(self.was(q, a)) - i64::from(self.was(q, b)), tie(self.seed, q, b), q))
            };
            let mut best = cheap[a].iter().filter_map(|&q| key(q as usize)).min();
            if best.is_none_or(|(c, _, _)| c > 0) {
                let firm = (0..self.rows.len()).filter(|&q| self.rows[q].contains(&(a as u16))).filter_map(key).min();
                best = best.into_iter().chain(firm).min();
            }
            let Some((cost, _, q)) = best else { return false };
            total += cost;
            moves.push((q, a, b));
        }
        if total >= 0 {
            return false;
        }
        for &(q, a, b) in &moves {
            if let Some(slot) = self.rows[q].iter_mut().find(|v| usize::from(**v) == a) {
                *slot = b as u16;
            }
        }
        true
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

/// No edge in the backend graph of [`State::improve`].
const NO_EDGE: i8 = i8::MAX;

/// A cycle of negative weight in the dense graph `weight` (`m * m`, row `a`
/// holding the edges leaving `a`, [`NO_EDGE`] where there is none), as the
/// nodes in edge order; `None` when there is none. Bellman-Ford from a virtual
/// source joined to every node at weight 0, relaxing from the nodes that
/// improved in the last pass: when a pass improves anything, the predecessor
/// graph is searched for a cycle, which then has negative weight; a pass that
/// improves nothing proves there is none.
fn negative_cycle(weight: &[i8], m: usize) -> Option<Vec<usize>> {
    let mut dist = vec![0i64; m];
    let mut parent = vec![usize::MAX; m];
    let mut active = vec![true; m];
    for _ in 0..=m {
        let mut next = vec![false; m];
        let mut changed = false;
        for a in 0..m {
            if !active[a] {
                continue;
            }
            for b in 0..m {
                let w = weight[a * m + b];
                if w == NO_EDGE {
                    continue;
                }
                let d = dist[a] + i64::from(w);
                if d < dist[b] {
                    dist[b] = d;
                    parent[b] = a;
                    next[b] = true;
                    changed = true;
                }
            }
        }
        if !changed {
            return None;
        }
        if let Some(cycle) = parent_cycle(&parent, weight, m) {
            return Some(cycle);
        }
        active = next;
    }
    None
}

/// A cycle of negative weight in the predecessor graph `parent`, in edge order.
fn parent_cycle(parent: &[usize], weight: &[i8], m: usize) -> Option<Vec<usize>> {
    let mut mark = vec![usize::MAX; m];
    for start in 0..m {
        let mut v = start;
        while v != usize::MAX && mark[v] == usize::MAX {
            mark[v] = start;
            v = parent[v];
        }
        if v == usize::MAX || mark[v] != start {
            continue;
        }
        // v is on a cycle: walk it once.
        let mut cycle = vec![v];
        let mut u = parent[v];
        while u != v {
            cycle.push(u);
            u = parent[u];
        }
        cycle.reverse();
        let total: i64 = (0..cycle.len()).map(|i| i64::from(weight[cycle[i] * m + cycle[(i + 1) % cycle.len()]])).sum();
        if total < 0 {
            return Some(cycle);
        }
    }
    None
}

/// Whether backend `a` is on the path that reaches backend `b` (or is `b`).
fn ancestor(parent: &[Parent], mut b: usize, a: usize) -> bool {
    for _ in 0..parent.len() {
        if b == a {
            return true;
        }
        match parent[b] {
            Parent::From { from, .. } => b = from,
            _ => return false,
        }
    }
    true
}

/// Whether `partition` already moves on the path that reaches backend `b`.
fn on_path(parent: &[Parent], mut b: usize, partition: u32) -> bool {
    for _ in 0..parent.len() {
        match parent[b] {
            Parent::From { from, partition: q } => {
                if q == partition {
                    return true;
                }
                b = from;
            }
            _ => return false,
        }
    }
    true
}
