//! Placement: which backends hold the replicas of each pack when one repository
//! spans several backends of unequal size. See docs/design.md#placement.
//!
//! # Brief overview
//!
//! A pack id's first two bytes, taken mod `partitions`, name its partition
//! ([`partition_of`]). A [`Table`] lists, for every partition, the `replicas`
//! backends that hold it. [`assign`] computes the table from the backends'
//! capacities and zones, and from the previous table when there is one:
//!
//! 1. **Capacity.** Every partition holds the same share of the data, so a backend
//!    holding `n` partitions fills when the repository reaches `c / n · partitions`.
//!    The table maximises the smallest `c / n` (Garage's utilisation rule). The
//!    largest partition size `s*` that the zones allow is found exactly, by
//!    apportionment ([`solve`]); every backend may then hold at most
//!    `floor(c / s*)` partitions.
//! 2. **Zones.** No two replicas of a partition are in the same zone (a backend
//!    without a zone is its own zone).
//! 3. **Movement.** Among the tables that reach `s*`, one that keeps as many
//!    (partition, backend) pairs of the previous table as any can: pairs stay
//!    unless a bound forces them out, a backend over its bound hands partitions
//!    straight to backends with room, and the gaps are filled by the backend
//!    with the largest claim `c / (held + 1)`, then by augmenting paths that move
//!    the fewest previous pairs; finally negative cycles of moves between
//!    backends are cancelled until none is left, which makes the table a
//!    min-cost flow: it adds exactly [`least_moved`] pairs.
//!    [`Options::slack_ppm`] trades usable capacity for less movement.
//!
//! Everything is deterministic: the same backends, replica count, partition
//! count, previous table and [`Options::seed`] give the same table. Ties are
//! broken by a hash of the seed, the partition and the backend, so replica sets
//! vary between partitions instead of repeating.
//!
//! Backend indices in a table are positions in the `backends` slice. They must
//! stay stable between versions: a removed backend keeps its entry with capacity
//! 0 (it is then drained: it holds nothing in the new table) until no table
//! names it.

mod least;
mod solve;
#[cfg(test)]
mod tests;

use thiserror::Error;

/// The largest partition count: the partition is taken from two bytes of the id.
pub const MAX_PARTITIONS: u32 = 1 << 16;

/// The largest replica count [`assign`] accepts.
pub const MAX_REPLICAS: u8 = 16;

/// The largest number of backends: a table stores backend indices as `u16`.
pub const MAX_BACKENDS: usize = u16::MAX as usize;

/// One backend as placement sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendSpec {
    /// Unique name of the backend.
    pub name: String,
    /// Capacity in any unit shared by all backends (bytes, say). 0 means the
    /// backend takes no data: it is being drained.
    pub capacity: u64,
    /// Failure zone; two replicas of a partition are never in the same zone.
    /// `None` puts the backend in a zone of its own (named after it).
    pub zone: Option<String>,
}

impl BackendSpec {
    /// A backend in a zone of its own.
    pub fn new(name: impl Into<String>, capacity: u64) -> Self {
        BackendSpec { name: name.into(), capacity, zone: None }
    }

    /// The same backend in zone `zone`.
    pub fn in_zone(mut self, zone: impl Into<String>) -> Self {
        self.zone = Some(zone.into());
        self
    }

    /// The zone this backend is in: its zone, or its name when it has none.
    pub fn zone_key(&self) -> &str {
        self.zone.as_deref().unwrap_or(&self.name)
    }
}

/// Which backends hold each partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Table {
    /// Number of partitions, 1 to [`MAX_PARTITIONS`].
    pub partitions: u32,
    /// Replicas of every partition.
    pub replicas: u8,
    /// Row-major: `partitions * replicas` backend indices; row `p` lists the
    /// owners of partition `p`, all in distinct zones.
    pub owners: Vec<u16>,
}

impl Table {
    /// The backends holding `partition`, or an empty slice when the table has
    /// no such partition.
    pub fn owners_of(&self, partition: u32) -> &[u16] {
        let r = usize::from(self.replicas);
        let start = partition as usize * r;
        self.owners.get(start..start + r).unwrap_or(&[])
    }

    /// The partition of object `id`: its first two bytes (big-endian), mod the
    /// partition count.
    pub fn partition_of(&self, id: &[u8; 32]) -> u32 {
        partition_of(id, self.partitions)
    }

    /// The backends holding object `id`.
    pub fn owners_of_id(&self, id: &[u8; 32]) -> &[u16] {
        self.owners_of(self.partition_of(id))
    }

    /// How many partitions each of `backends` backends holds.
    pub fn partitions_held(&self, backends: usize) -> Vec<u32> {
        let mut held = vec![0u32; backends];
        for &v in &self.owners {
            if let Some(n) = held.get_mut(usize::from(v)) {
                *n += 1;
            }
        }
        held
    }

    /// The data the repository can hold before the first backend fills, in the
    /// capacity unit, if packs spread exactly evenly over partitions: the
    /// partition count times the smallest `capacity / partitions held`.
    pub fn usable(&self, backends: &[BackendSpec]) -> f64 {
        let held = self.partitions_held(backends.len());
        let smallest = backends
            .iter()
            .zip(&held)
            .filter(|(_, n)| **n > 0)
            .map(|(b, n)| b.capacity as f64 / f64::from(*n))
            .fold(f64::INFINITY, f64::min);
        if smallest.is_finite() { smallest * f64::from(self.partitions) } else { 0.0 }
    }

    /// Checks the table against `backends`: its shape, that every index names a
    /// backend with capacity, and that no partition has two replicas in one zone.
    pub fn validate(&self, backends: &[BackendSpec]) -> Result<(), PlacementError> {
        let invalid = |reason: String| Err(PlacementError::InvalidTable { reason });
        if self.partitions == 0 || self.partitions > MAX_PARTITIONS {
            return invalid(format!("{} partitions, outside 1..={MAX_PARTITIONS}", self.partitions));
        }
        if self.replicas == 0 {
            return invalid("0 replicas".into());
        }
        let expected = self.partitions as usize * usize::from(self.replicas);
        if self.owners.len() != expected {
            return invalid(format!("{} owner entries where {expected} were expected", self.owners.len()));
        }
        for p in 0..self.partitions {
            let owners = self.owners_of(p);
            for (i, &v) in owners.iter().enumerate() {
                let Some(spec) = backends.get(usize::from(v)) else {
                    return invalid(format!("partition {p} names backend {v}, but there are {}", backends.len()));
                };
                if spec.capacity == 0 {
                    return invalid(format!("partition {p} is on backend {}, which has no capacity", spec.name));
                }
                for &w in &owners[..i] {
                    if backends[usize::from(w)].zone_key() == spec.zone_key() {
                        return invalid(format!(
                            "partition {p} has two replicas in zone {} ({} and {})",
                            spec.zone_key(),
                            backends[usize::from(w)].name,
                            spec.name
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

/// The partition of object `id` among `partitions`: its first two bytes
/// (big-endian) mod `partitions`; 0 when `partitions` is 0.
pub fn partition_of(id: &[u8; 32], partitions: u32) -> u32 {
    let prefix = u32::from(u16::from_be_bytes([id[0], id[1]]));
    prefix.checked_rem(partitions).unwrap_or(0)
}

/// A partition count for `backends` backends and `replicas` replicas: the
/// smallest power of two, at least 1024, that gives every backend about 128
/// replica slots on average, so rounding to whole partitions costs under 1 % of
/// the usable capacity. A power of two divides 65536, so every partition covers
/// the same number of id prefixes; it also lets a later table double the count
/// without moving data (each partition splits in two with the same owners).
pub fn recommended_partitions(backends: usize, replicas: u8) -> u32 {
    let slots = 128 * backends.max(1) / usize::from(replicas.max(1));
    (slots.max(1024).next_power_of_two() as u32).min(MAX_PARTITIONS)
}

/// What [`assign_with`] may be told besides the layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// Breaks ties between equally good backends; a different seed gives a
    /// different, equally good table.
    pub seed: u64,
    /// How much usable capacity, in parts per million of the best table's, the
    /// table may give up to move less: each backend may then hold up to
    /// `floor(c / (s* * (1 - slack)))` partitions instead of `floor(c / s*)`.
    /// 0 (the default) insists on the best table; 10,000 (1 %) lets a removal
    /// keep pairs an exact optimum would shuffle; 1,000,000 moves only what
    /// must move (the pairs of backends that are gone or have shrunk below
    /// what they hold), whatever the balance.
    pub slack_ppm: u32,
}

impl Default for Options {
    fn default() -> Self {
        Options { seed: 0x636f_6666_6572, slack_ppm: 0 } // seed: "coffer"
    }
}

/// Why no table could be computed. Every message says what to change.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum PlacementError {
    /// The replica count is 0 or above [`MAX_REPLICAS`].
    #[error("placement: {replicas} replicas is not supported; use 1 to {MAX_REPLICAS}")]
    InvalidReplicas {
        /// The replica count asked for.
        replicas: u8,
    },
    /// The partition count is 0 or above [`MAX_PARTITIONS`].
    #[error(
        "placement: {partitions} partitions is not supported; use 1 to {MAX_PARTITIONS} (a power of two such as 1024)"
    )]
    InvalidPartitions {
        /// The partition count asked for.
        partitions: u32,
    },
    /// Fewer backends than replicas.
    #[error(
        "placement: {replicas} replicas need at least {replicas} backends, but {backends} are given; add backends or lower the replica count"
    )]
    TooFewBackends {
        /// The replica count.
        replicas: u8,
        /// The number of backends given.
        backends: usize,
    },
    /// Fewer zones with capacity than replicas.
    #[error(
        "placement: {replicas} replicas need backends with capacity in at least {replicas} zones, but only {zones} zones have any; add backends in other zones or lower the replica count"
    )]
    TooFewZones {
        /// The replica count.
        replicas: u8,
        /// Zones holding at least one backend with capacity.
        zones: usize,
    },
    /// Every backend has capacity 0.
    #[error("placement: every backend has capacity 0; give at least one backend a capacity")]
    ZeroCapacity,
    /// More backends than the table can address or give a partition.
    #[error(
        "placement: {backends} backends with capacity cannot each hold a partition among {partitions} partitions of {replicas} replicas (at most {MAX_BACKENDS} backends); raise the partition count to at least {needed} or remove backends"
    )]
    TooManyBackends {
        /// Backends with capacity (or all backends, beyond [`MAX_BACKENDS`]).
        backends: usize,
        /// The partition count.
        partitions: u32,
        /// The replica count.
        replicas: u8,
        /// A partition count that would do.
        needed: u32,
    },
    /// Two backends share a name.
    #[error("placement: two backends are named {name:?}; give every backend its own name")]
    DuplicateName {
        /// The repeated name.
        name: String,
    },
    /// The previous table names a backend that is not in the list.
    #[error(
        "placement: the previous table names backend index {index}, but only {backends} backends are given; keep a removed backend in the list with capacity 0 until no table names it"
    )]
    UnknownBackend {
        /// The index the previous table names.
        index: u16,
        /// The number of backends given.
        backends: usize,
    },
    /// A table is malformed or breaks a placement rule ([`Table::validate`]).
    #[error("placement table: {reason}; compute the table again with assign")]
    InvalidTable {
        /// What is wrong.
        reason: String,
    },
}

/// Computes the table for `backends` with `replicas` copies of every partition
/// among `partitions`, moving as little as it can from `previous`, with the
/// default [`Options`]. See the module documentation for the rules.
pub fn assign(
    backends: &[BackendSpec],
    replicas: u8,
    partitions: u32,
    previous: Option<&Table>,
) -> Result<Table, PlacementError> {
    assign_with(backends, replicas, partitions, previous, &Options::default())
}

/// [`assign`] with explicit [`Options`].
pub fn assign_with(
    backends: &[BackendSpec],
    replicas: u8,
    partitions: u32,
    previous: Option<&Table>,
    options: &Options,
) -> Result<Table, PlacementError> {
    solve::assign(backends, replicas, partitions, previous, options)
}

/// The number of (partition, backend) pairs of `next` that `previous` did not
/// have: the replica copies a migration from `previous` to `next` must write, in
/// units of one partition. When the partition counts differ and one divides the
/// other, partitions are compared over the id prefixes they cover; otherwise every
/// pair of `next` counts as added.
pub fn moved(previous: &Table, next: &Table) -> u64 {
    let mut added = 0u64;
    for q in 0..next.partitions {
        let before = previous_owners(previous, next.partitions, q);
        added += next.owners_of(q).iter().filter(|v| !before.contains(v)).count() as u64;
    }
    added
}

/// The least [`moved`] any table can reach from `previous`: the fewest
/// (partition, backend) pairs that a table meeting rule 1 for these inputs
/// (every backend within the bound [`assign_with`] gives it under `options`, R
/// owners in distinct zones for every partition) must have that `previous` did
/// not. It is exact, computed by a min-cost flow over the partitions grouped by
/// their previous owners, independently of how [`assign_with`] builds its
/// table, which reaches it (docs/design.md#placement). Errors as
/// [`assign_with`] does for the same inputs.
pub fn least_moved(
    backends: &[BackendSpec],
    replicas: u8,
    partitions: u32,
    previous: &Table,
    options: &Options,
) -> Result<u64, PlacementError> {
    least::least_moved(backends, replicas, partitions, previous, options)
}

/// The owners `previous` gives to the id prefixes of partition `q` of a table
/// with `partitions` partitions; empty when the counts are not multiples of each
/// other. When `previous` has more partitions, those of its first partition that
/// covers `q` (the smallest index).
pub(crate) fn previous_owners(previous: &Table, partitions: u32, q: u32) -> &[u16] {
    let old = previous.partitions;
    if old == 0 {
        return &[];
    }
    if partitions.is_multiple_of(old) {
        previous.owners_of(q % old)
    } else if old.is_multiple_of(partitions) {
        previous.owners_of(q)
    } else {
        &[]
    }
}

/// The water-filling optimum: the most data `replicas` copies can take on
/// `backends` when no zone holds two copies of anything, in the capacity unit.
/// It is the largest `D` with `sum over zones of min(zone capacity, D) >= replicas * D`;
/// 0 when fewer than `replicas` zones have capacity.
pub fn optimum(backends: &[BackendSpec], replicas: u8) -> f64 {
    let r = usize::from(replicas);
    let mut zones: Vec<(&str, f64)> = Vec::new();
    for b in backends.iter().filter(|b| b.capacity > 0) {
        match zones.iter_mut().find(|(z, _)| *z == b.zone_key()) {
            Some((_, c)) => *c += b.capacity as f64,
            None => zones.push((b.zone_key(), b.capacity as f64)),
        }
    }
    if r == 0 || zones.len() < r {
        return 0.0;
    }
    let mut caps: Vec<f64> = zones.into_iter().map(|(_, c)| c).collect();
    caps.sort_by(|a, b| b.total_cmp(a));
    // With the k largest zones full (holding one copy of everything), the rest
    // share (r - k) copies: D = rest / (r - k), valid when zone k-1 >= D.
    let mut rest: f64 = caps.iter().sum();
    let mut d = 0.0;
    for k in 0..r {
        d = rest / (r - k) as f64;
        if (k == 0 || caps[k - 1] >= d) && caps[k] <= d {
            break;
        }
        rest -= caps[k];
    }
    d
}
