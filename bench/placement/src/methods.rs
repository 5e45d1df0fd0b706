//! The placement methods compared: coffer's table and the alternatives. Each
//! places a pack on `replicas` backends in distinct zones and reports them by
//! universe index (the position in the scenario's backends, the added one last),
//! so that placements before and after a change can be compared pack by pack.

use coffer_backend::placement::{self, BackendSpec, Options, Table};

/// A placement function over one configuration of backends.
pub trait Placer {
    /// Appends the owners of pack `id` to `out`, as universe indices.
    fn place(&self, id: &[u8; 32], out: &mut Vec<u16>);
    /// The table's own usable capacity (packs spread exactly evenly), if any.
    fn usable_table(&self) -> Option<f64> {
        None
    }
    fn partitions(&self) -> Option<u32> {
        None
    }
    /// The placement after a change, derived from this one (coffer passes its
    /// table as the previous one); `None` to build afresh.
    fn next(&self, _specs: &[BackendSpec], _uids: &[usize]) -> Option<Box<dyn Placer>> {
        None
    }
    /// For a placement made by [`Placer::next`] from a table: the (partition,
    /// backend) pairs it added to the previous table, and the least any table
    /// meeting the same bounds must add ([`placement::least_moved`]).
    fn movement(&self) -> Option<(u64, u64)> {
        None
    }
    /// The partitions a table gives the backend of universe index `uid`.
    fn held(&self, _uid: usize) -> Option<u64> {
        None
    }
}

/// The SplitMix64 finaliser.
pub fn mix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn hash_str(s: &str) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for b in s.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    mix(h)
}

/// The hash a hashing method uses for a pack: bytes 8..16 of its id.
fn key(id: &[u8; 32]) -> u64 {
    u64::from_be_bytes(id[8..16].try_into().unwrap_or_default())
}

/// A uniform number in (0, 1].
fn unit(x: u64) -> f64 {
    ((x >> 11) + 1) as f64 / (1u64 << 53) as f64
}

fn zone_ids(specs: &[BackendSpec]) -> Vec<u16> {
    let mut names: Vec<&str> = Vec::new();
    specs
        .iter()
        .map(|b| match names.iter().position(|z| *z == b.zone_key()) {
            Some(z) => z as u16,
            None => {
                names.push(b.zone_key());
                (names.len() - 1) as u16
            }
        })
        .collect()
}

/// coffer: the partition table of [`placement::assign`].
pub struct Coffer {
    specs: Vec<BackendSpec>,
    uids: Vec<usize>,
    replicas: u8,
    options: Options,
    table: Table,
    /// The table this one was computed from, by [`Placer::next`].
    previous: Option<Table>,
}

impl Coffer {
    pub fn build(
        specs: &[BackendSpec],
        uids: &[usize],
        replicas: u8,
        partitions: u32,
        slack_ppm: u32,
    ) -> Option<Box<dyn Placer>> {
        let options = Options { slack_ppm, ..Options::default() };
        match placement::assign_with(specs, replicas, partitions, None, &options) {
            Ok(table) => Some(Box::new(Coffer {
                specs: specs.to_vec(),
                uids: uids.to_vec(),
                replicas,
                options,
                table,
                previous: None,
            })),
            Err(e) => {
                eprintln!("coffer: {e}");
                None
            }
        }
    }
}

impl Placer for Coffer {
    fn place(&self, id: &[u8; 32], out: &mut Vec<u16>) {
        out.extend(self.table.owners_of_id(id).iter().map(|&v| self.uids[usize::from(v)] as u16));
    }
    fn usable_table(&self) -> Option<f64> {
        Some(self.table.usable(&self.specs))
    }
    fn partitions(&self) -> Option<u32> {
        Some(self.table.partitions)
    }
    fn held(&self, uid: usize) -> Option<u64> {
        let index = self.uids.iter().position(|&u| u == uid)?;
        Some(u64::from(self.table.partitions_held(self.specs.len())[index]))
    }
    fn movement(&self) -> Option<(u64, u64)> {
        let previous = self.previous.as_ref()?;
        let least = placement::least_moved(&self.specs, self.replicas, self.table.partitions, previous, &self.options);
        match least {
            Ok(least) => Some((placement::moved(previous, &self.table), least)),
            Err(e) => {
                eprintln!("coffer: {e}");
                None
            }
        }
    }
    /// Keeps every backend at its position: a removed one stays with capacity
    /// 0, an added one is appended.
    fn next(&self, specs: &[BackendSpec], uids: &[usize]) -> Option<Box<dyn Placer>> {
        let mut list = Vec::new();
        let mut list_uids = Vec::new();
        for (spec, &uid) in self.specs.iter().zip(&self.uids) {
            match uids.iter().position(|&u| u == uid) {
                Some(i) => list.push(specs[i].clone()),
                None => list.push(BackendSpec { capacity: 0, ..spec.clone() }),
            }
            list_uids.push(uid);
        }
        for (spec, &uid) in specs.iter().zip(uids) {
            if !self.uids.contains(&uid) {
                list.push(spec.clone());
                list_uids.push(uid);
            }
        }
        match placement::assign_with(&list, self.replicas, self.table.partitions, Some(&self.table), &self.options) {
            Ok(table) => Some(Box::new(Coffer {
                specs: list,
                uids: list_uids,
                replicas: self.replicas,
                options: self.options,
                table,
                previous: Some(self.table.clone()),
            })),
            Err(e) => {
                eprintln!("coffer: {e}");
                None
            }
        }
    }
}

/// Chord consistent hashing: `k` virtual nodes per `unit` of capacity (the
/// scenario's mean capacity before any change, so that a change does not alter
/// the other backends' nodes), at least one; a pack goes to the first virtual
/// node clockwise from its hash, replicas to the next ones in new zones.
pub struct Chord {
    ring: Vec<(u64, u16, u16)>,
    replicas: usize,
}

impl Chord {
    pub fn new(specs: &[BackendSpec], uids: &[usize], replicas: u8, k: u32, unit: f64) -> Self {
        let zones = zone_ids(specs);
        let mean = unit;
        let mut ring = Vec::new();
        for ((spec, &uid), &zone) in specs.iter().zip(uids).zip(&zones) {
            let nodes = ((f64::from(k) * spec.capacity as f64 / mean).round() as u64).max(1);
            let base = hash_str(&spec.name);
            for j in 0..nodes {
                ring.push((mix(base ^ mix(j + 1)), uid as u16, zone));
            }
        }
        ring.sort_unstable();
        Chord { ring, replicas: usize::from(replicas) }
    }
}

impl Placer for Chord {
    fn place(&self, id: &[u8; 32], out: &mut Vec<u16>) {
        let h = key(id);
        let start = self.ring.partition_point(|n| n.0 < h);
        let mut zones: Vec<u16> = Vec::with_capacity(self.replicas);
        for step in 0..self.ring.len() {
            let (_, uid, zone) = self.ring[(start + step) % self.ring.len()];
            if !zones.contains(&zone) {
                zones.push(zone);
                out.push(uid);
                if out.len() == self.replicas {
                    return;
                }
            }
        }
    }
}

/// Weighted rendezvous hashing, i.e. CRUSH straw2: each backend draws
/// ln(u) / capacity; the highest draws in distinct zones win.
pub struct Straw2 {
    backends: Vec<(u64, f64, u16, u16)>,
    replicas: usize,
}

impl Straw2 {
    pub fn new(specs: &[BackendSpec], uids: &[usize], replicas: u8) -> Self {
        let zones = zone_ids(specs);
        let backends = specs
            .iter()
            .zip(uids)
            .zip(&zones)
            .map(|((b, &uid), &zone)| (hash_str(&b.name), b.capacity as f64, uid as u16, zone))
            .collect();
        Straw2 { backends, replicas: usize::from(replicas) }
    }
}

impl Placer for Straw2 {
    fn place(&self, id: &[u8; 32], out: &mut Vec<u16>) {
        let h = key(id);
        let draws: Vec<f64> = self.backends.iter().map(|&(k, w, _, _)| unit(mix(h ^ k)).ln() / w).collect();
        let mut zones: Vec<u16> = Vec::with_capacity(self.replicas);
        while out.len() < self.replicas {
            let best = (0..self.backends.len())
                .filter(|&i| !zones.contains(&self.backends[i].3))
                .max_by(|&a, &b| draws[a].total_cmp(&draws[b]));
            let Some(i) = best else { return };
            zones.push(self.backends[i].3);
            out.push(self.backends[i].2);
        }
    }
}

/// Jump consistent hash (Lamping and Veach): unweighted, one replica; backends
/// can only be added or removed at the end.
pub struct Jump {
    uids: Vec<usize>,
}

impl Jump {
    pub fn new(uids: &[usize]) -> Self {
        Jump { uids: uids.to_vec() }
    }
}

impl Placer for Jump {
    fn place(&self, id: &[u8; 32], out: &mut Vec<u16>) {
        let mut k = key(id);
        let (mut b, mut j) = (-1i64, 0i64);
        while j < self.uids.len() as i64 {
            b = j;
            k = k.wrapping_mul(2_862_933_555_777_941_757).wrapping_add(1);
            j = ((b + 1) as f64 * ((1u64 << 31) as f64 / ((k >> 33) + 1) as f64)) as i64;
        }
        out.push(self.uids[b as usize] as u16);
    }
}

/// Not a placement function (nothing is consistent across changes): every pack
/// independently on zones drawn with exactly the optimal shares (systematic
/// sampling), then on a backend of the zone in proportion to capacity. Its
/// figures are the noise floor that pack counts alone impose.
pub struct Ideal {
    /// Per zone: its optimal share (at most 1) and its backends (uid, capacity).
    zones: Vec<(f64, Vec<(u16, f64)>)>,
}

impl Ideal {
    pub fn new(specs: &[BackendSpec], uids: &[usize], replicas: u8) -> Option<Self> {
        let d = placement::optimum(specs, replicas);
        if d <= 0.0 {
            return None;
        }
        let ids = zone_ids(specs);
        let mut zones: Vec<(f64, Vec<(u16, f64)>)> = Vec::new();
        for ((b, &uid), &z) in specs.iter().zip(uids).zip(&ids) {
            if usize::from(z) == zones.len() {
                zones.push((0.0, Vec::new()));
            }
            zones[usize::from(z)].0 += b.capacity as f64;
            zones[usize::from(z)].1.push((uid as u16, b.capacity as f64));
        }
        for z in &mut zones {
            z.0 = z.0.min(d) / d;
        }
        Some(Ideal { zones })
    }
}

impl Placer for Ideal {
    fn place(&self, id: &[u8; 32], out: &mut Vec<u16>) {
        let h = key(id);
        let u = unit(mix(h ^ 1)) - f64::EPSILON;
        let mut cum = 0.0;
        for (i, (share, members)) in self.zones.iter().enumerate() {
            let (lo, hi) = (cum, cum + share);
            cum = hi;
            // Zone i is drawn when some u + k (k integer) falls in [lo, hi).
            if (hi - u).ceil() > (lo - u).ceil() {
                let total: f64 = members.iter().map(|m| m.1).sum();
                let mut pick = unit(mix(h ^ (i as u64 + 2) << 32)) * total;
                for &(uid, c) in members {
                    pick -= c;
                    if pick <= 0.0 {
                        out.push(uid);
                        break;
                    }
                }
            }
        }
    }
}
