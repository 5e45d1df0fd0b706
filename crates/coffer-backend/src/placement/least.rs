//! The least movement rule 1 allows: [`super::least_moved`], an exact min-cost
//! flow computed independently of the table's construction. See
//! docs/design.md#placement.
//!
//! # The flow
//!
//! A table meeting rule 1 is an integral flow of `R * P` units: every partition
//! sends `R` units, at most one into each zone, and every backend takes at most
//! its bound. A unit costs 1 when its (partition, backend) pair is not in the
//! previous table, so the least cost is the least `moved(previous, next)` over
//! all such tables. Partitions with the same previous owners (those that may
//! still hold data) are interchangeable, so they are merged into one class of
//! `m` partitions:
//!
//! ```text
//! source --R·m--> class --m--> zone pool z ------------------> backend v in z --bound--> sink
//!                       \--m--> (class, z) --m, cost 0--> previous owner v in z
//!                                          \--m, cost 1--> zone pool z
//! ```
//!
//! The class sends `m` at most into each zone: through the (class, zone) node
//! when some previous owner is in the zone (keeping the pair costs 0, any other
//! backend of the zone costs 1), straight into the zone's pool otherwise (cost
//! 1). Every integral flow of the merged graph splits back into one per
//! partition: deal each class's `R·m` units to its `m` partitions round-robin,
//! zone after zone, so no partition gets two units of one zone (a zone sends at
//! most `m`), then give the pairs kept in a zone to any of the partitions that
//! zone was dealt (all of them had that owner). So the merged optimum is the
//! table optimum, and merging only makes the graph small.
//!
//! The flow is computed by the primal-dual method: shortest paths under reduced
//! costs (Dijkstra with potentials; all costs are 0 or 1, so there are few
//! distinct path lengths), then a maximum flow (Dinic) over the edges of
//! reduced cost 0, until `R * P` units flow.

use super::solve::prepare;
use super::{BackendSpec, Options, PlacementError, Table, previous_owners};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};

pub(super) fn least_moved(
    backends: &[BackendSpec],
    replicas: u8,
    partitions: u32,
    previous: &Table,
    options: &Options,
) -> Result<u64, PlacementError> {
    let (zone, bound) = prepare(backends, replicas, partitions, Some(previous), options)?;
    let r = i64::from(replicas);
    let n = zone.len();
    let zones = zone.iter().max().map_or(0, |z| z + 1);
    let live_zone: Vec<bool> = (0..zones).map(|z| (0..n).any(|v| zone[v] == z && bound[v] > 0)).collect();

    // Classes: partitions with the same previous owners that may hold data.
    let mut classes: HashMap<Vec<u16>, i64> = HashMap::new();
    for p in 0..partitions {
        let mut key: Vec<u16> =
            previous_owners(previous, partitions, p).iter().copied().filter(|&v| bound[usize::from(v)] > 0).collect();
        key.sort_unstable();
        key.dedup();
        *classes.entry(key).or_insert(0) += 1;
    }
    let mut classes: Vec<(Vec<u16>, i64)> = classes.into_iter().collect();
    classes.sort_unstable();

    let mut g = Graph::default();
    let source = g.node();
    let sink = g.node();
    let pool: Vec<usize> = (0..zones).map(|_| g.node()).collect();
    let backend: Vec<usize> = (0..n).map(|_| g.node()).collect();
    for v in 0..n {
        if bound[v] > 0 {
            g.edge(pool[zone[v]], backend[v], i64::from(bound[v]), 0);
            g.edge(backend[v], sink, i64::from(bound[v]), 0);
        }
    }
    for (owners, m) in &classes {
        let c = g.node();
        g.edge(source, c, r * m, 0);
        for z in (0..zones).filter(|&z| live_zone[z]) {
            let here: Vec<usize> = owners.iter().map(|&v| usize::from(v)).filter(|&v| zone[v] == z).collect();
            if here.is_empty() {
                g.edge(c, pool[z], *m, 1);
            } else {
                let slot = g.node();
                g.edge(c, slot, *m, 0);
                g.edge(slot, pool[z], *m, 1);
                for v in here {
                    g.edge(slot, backend[v], *m, 0);
                }
            }
        }
    }
    let need = r * i64::from(partitions);
    let (flow, cost) = g.min_cost_flow(source, sink, need);
    if flow < need {
        return Err(PlacementError::InvalidTable {
            reason: format!("only {flow} of {need} replicas can be placed within the bounds (a placement defect)"),
        });
    }
    Ok(cost as u64)
}

/// A flow network: edges in pairs (forward `2i`, residual `2i + 1`).
#[derive(Default)]
struct Graph {
    adjacent: Vec<Vec<usize>>,
    to: Vec<usize>,
    capacity: Vec<i64>,
    cost: Vec<i64>,
}

impl Graph {
    fn node(&mut self) -> usize {
        self.adjacent.push(Vec::new());
        self.adjacent.len() - 1
    }

    fn edge(&mut self, from: usize, to: usize, capacity: i64, cost: i64) {
        self.adjacent[from].push(self.to.len());
        self.to.push(to);
        self.capacity.push(capacity);
        self.cost.push(cost);
        self.adjacent[to].push(self.to.len());
        self.to.push(from);
        self.capacity.push(0);
        self.cost.push(-cost);
    }

    /// Sends up to `limit` units from `s` to `t` at least cost; returns the flow
    /// and its cost. All costs are non-negative at the start, so the potentials
    /// start at 0.
    fn min_cost_flow(&mut self, s: usize, t: usize, limit: i64) -> (i64, i64) {
        let nodes = self.adjacent.len();
        let mut potential = vec![0i64; nodes];
        let (mut flow, mut cost) = (0i64, 0i64);
        while flow < limit {
            // Dijkstra under reduced costs.
            let mut dist = vec![i64::MAX; nodes];
            dist[s] = 0;
            let mut heap = BinaryHeap::new();
            heap.push(Reverse((0i64, s)));
            while let Some(Reverse((d, u))) = heap.pop() {
                if d > dist[u] {
                    continue;
                }
                for &e in &self.adjacent[u] {
                    if self.capacity[e] == 0 {
                        continue;
                    }
                    let v = self.to[e];
                    let nd = d + self.cost[e] + potential[u] - potential[v];
                    if nd < dist[v] {
                        dist[v] = nd;
                        heap.push(Reverse((nd, v)));
                    }
                }
            }
            if dist[t] == i64::MAX {
                break;
            }
            let cap = dist[t];
            for (p, d) in potential.iter_mut().zip(&dist) {
                *p += (*d).min(cap);
            }
            let pushed = self.admissible_max_flow(s, t, limit - flow, &potential);
            if pushed == 0 {
                break;
            }
            flow += pushed;
            cost += pushed * (potential[t] - potential[s]);
        }
        (flow, cost)
    }

    /// Dinic's maximum flow, up to `limit`, over the edges with capacity left
    /// and reduced cost 0.
    fn admissible_max_flow(&mut self, s: usize, t: usize, limit: i64, potential: &[i64]) -> i64 {
        let nodes = self.adjacent.len();
        let admissible =
            |g: &Graph, e: usize, u: usize| g.capacity[e] > 0 && g.cost[e] + potential[u] - potential[g.to[e]] == 0;
        let mut total = 0i64;
        loop {
            let mut level = vec![usize::MAX; nodes];
            level[s] = 0;
            let mut queue = VecDeque::from([s]);
            while let Some(u) = queue.pop_front() {
                for &e in &self.adjacent[u] {
                    let v = self.to[e];
                    if level[v] == usize::MAX && admissible(self, e, u) {
                        level[v] = level[u] + 1;
                        queue.push_back(v);
                    }
                }
            }
            if level[t] == usize::MAX {
                return total;
            }
            let mut next = vec![0usize; nodes];
            // Depth-first search for paths along increasing levels, iterative.
            loop {
                if total >= limit {
                    return total;
                }
                let mut path: Vec<usize> = Vec::new(); // edges
                let mut u = s;
                let found = loop {
                    if u == t {
                        break true;
                    }
                    let mut advanced = false;
                    while next[u] < self.adjacent[u].len() {
                        let e = self.adjacent[u][next[u]];
                        let v = self.to[e];
                        if level[v] == level[u] + 1 && admissible(self, e, u) {
                            path.push(e);
                            u = v;
                            advanced = true;
                            break;
                        }
                        next[u] += 1;
                    }
                    if advanced {
                        continue;
                    }
                    // Dead end: retreat.
                    level[u] = usize::MAX;
                    match path.pop() {
                        Some(e) => {
                            u = self.to[e ^ 1];
                            next[u] += 1;
                        }
                        None => break false,
                    }
                };
                if !found {
                    break;
                }
                let push = path.iter().map(|&e| self.capacity[e]).min().unwrap_or(0).min(limit - total);
                for &e in &path {
                    self.capacity[e] -= push;
                    self.capacity[e ^ 1] += push;
                }
                total += push;
            }
        }
    }
}
