//! Tests of the placement rules (docs/design.md#placement): seeded random
//! configurations for the invariants, worked examples for the figures.

use super::solve::mix;
use super::*;

fn specs(capacities: &[u64]) -> Vec<BackendSpec> {
    capacities.iter().enumerate().map(|(i, &c)| BackendSpec::new(format!("b{i}"), c)).collect()
}

/// A deterministic random configuration: 1 to 12 backends, capacities from 0
/// to 50 (a few 0), zones from a small set or none.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.0)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn backends(&mut self, n: usize, zones: u64) -> Vec<BackendSpec> {
        (0..n)
            .map(|i| {
                let capacity = if self.below(10) == 0 { 0 } else { 1 + self.below(50) };
                let b = BackendSpec::new(format!("b{i}"), capacity);
                if zones > 0 && self.below(4) != 0 { b.in_zone(format!("z{}", self.below(zones))) } else { b }
            })
            .collect()
    }
}

fn zones_with_capacity(backends: &[BackendSpec]) -> usize {
    let mut zones: Vec<&str> = backends.iter().filter(|b| b.capacity > 0).map(|b| b.zone_key()).collect();
    zones.sort_unstable();
    zones.dedup();
    zones.len()
}

/// The bound the rounding to whole partitions allows: at least
/// `optimum * R * P / (R * P + N)` (see `solve::bounds`).
fn assert_usable(table: &Table, backends: &[BackendSpec], replicas: u8) {
    let best = optimum(backends, replicas);
    let usable = table.usable(backends);
    let slots = f64::from(table.partitions) * f64::from(replicas);
    let live = backends.iter().filter(|b| b.capacity > 0).count() as f64;
    assert!(usable <= best * (1.0 + 1e-9), "usable {usable} above the optimum {best}");
    assert!(usable >= best * slots / (slots + live) - 1e-9, "usable {usable} too far below the optimum {best}");
}

#[test]
fn random_configurations_keep_every_rule() {
    let mut rng = Rng(1);
    let mut tables = 0;
    for _ in 0..400 {
        let n = 1 + rng.below(12) as usize;
        let zones = rng.below(5);
        let backends = rng.backends(n, zones);
        let replicas = 1 + rng.below(3) as u8;
        let partitions = [16, 64, 256, 1000][rng.below(4) as usize];
        match assign(&backends, replicas, partitions, None) {
            Ok(table) => {
                tables += 1;
                table.validate(&backends).unwrap();
                assert_eq!(table.owners.len(), partitions as usize * usize::from(replicas));
                for p in 0..partitions {
                    let mut owners = table.owners_of(p).to_vec();
                    owners.sort_unstable();
                    owners.dedup();
                    assert_eq!(owners.len(), usize::from(replicas), "partition {p} has repeated owners");
                }
                assert_usable(&table, &backends, replicas);
            }
            Err(PlacementError::TooFewZones { .. }) => assert!(zones_with_capacity(&backends) < usize::from(replicas)),
            Err(PlacementError::TooFewBackends { .. }) => assert!(n < usize::from(replicas)),
            Err(PlacementError::ZeroCapacity) => assert!(backends.iter().all(|b| b.capacity == 0)),
            Err(e) => panic!("unexpected error {e} for {backends:?}, R = {replicas}"),
        }
    }
    assert!(tables > 250, "only {tables} configurations were placeable");
}

#[test]
fn partition_counts_follow_capacity() {
    // 1, 2, 2, 4, 8 with R = 2: no zone is capped, so every backend holds its
    // share of the 2048 slots, rounded to whole partitions.
    let backends = specs(&[1, 2, 2, 4, 8]);
    let table = assign(&backends, 2, 1024, None).unwrap();
    let held = table.partitions_held(5);
    let share = |c: f64| c / 17.0 * 2048.0;
    for (b, &n) in backends.iter().zip(&held) {
        let ideal = share(b.capacity as f64);
        assert!((f64::from(n) - ideal).abs() <= 1.0, "{}: {n} partitions, ideal {ideal}", b.name);
    }
    // R = 3: the 8 TB backend can hold each partition once, so it holds all
    // 1024 and the others share the other 2048 slots by capacity.
    let table = assign(&backends, 3, 1024, None).unwrap();
    let held = table.partitions_held(5);
    assert_eq!(held[4], 1024);
    assert!((table.usable(&backends) / optimum(&backends, 3) - 1.0).abs() < 0.01);
}

#[test]
fn optimum_is_water_filling() {
    let backends = specs(&[1, 2, 2, 4, 8]);
    assert!((optimum(&backends, 1) - 17.0).abs() < 1e-9);
    assert!((optimum(&backends, 2) - 8.5).abs() < 1e-9);
    assert!((optimum(&backends, 3) - 4.5).abs() < 1e-9);
    assert_eq!(optimum(&backends[..2], 3), 0.0);
    // Zones add up: two backends of 4 in one zone act as one of 8.
    let zoned = vec![
        BackendSpec::new("a", 4).in_zone("z"),
        BackendSpec::new("b", 4).in_zone("z"),
        BackendSpec::new("c", 2),
        BackendSpec::new("d", 2),
    ];
    assert!((optimum(&zoned, 2) - 4.0).abs() < 1e-9);
}

#[test]
fn zones_never_hold_two_replicas() {
    // 3 zones of very unequal size: the big zone must take every partition once.
    let backends = vec![
        BackendSpec::new("a1", 10).in_zone("a"),
        BackendSpec::new("a2", 10).in_zone("a"),
        BackendSpec::new("a3", 10).in_zone("a"),
        BackendSpec::new("b1", 3).in_zone("b"),
        BackendSpec::new("c1", 2).in_zone("c"),
        BackendSpec::new("c2", 2).in_zone("c"),
    ];
    let table = assign(&backends, 3, 256, None).unwrap();
    table.validate(&backends).unwrap();
    for p in 0..256 {
        let mut zones: Vec<&str> = table.owners_of(p).iter().map(|&v| backends[usize::from(v)].zone_key()).collect();
        zones.sort_unstable();
        assert_eq!(zones, ["a", "b", "c"], "partition {p}");
    }
}

#[test]
fn same_input_same_table_and_seeds_vary_pairs() {
    let backends = specs(&[5, 5, 5, 5, 5, 5]);
    let a = assign(&backends, 2, 512, None).unwrap();
    let b = assign(&backends, 2, 512, None).unwrap();
    assert_eq!(a, b);
    let c = assign_with(&backends, 2, 512, None, &Options { seed: 7, ..Options::default() }).unwrap();
    c.validate(&backends).unwrap();
    assert_ne!(a, c, "another seed gives another table");
    // Replica pairs vary: with 6 equal backends, all 15 pairs occur.
    let mut pairs: Vec<(u16, u16)> = (0..512)
        .map(|p| {
            let o = a.owners_of(p);
            (o[0].min(o[1]), o[0].max(o[1]))
        })
        .collect();
    pairs.sort_unstable();
    pairs.dedup();
    assert_eq!(pairs.len(), 15);
}

#[test]
fn losing_any_r_minus_one_backends_loses_nothing() {
    // Exhaustively, for small configurations: every set of R - 1 backends leaves
    // every partition at least one owner.
    let mut rng = Rng(2);
    for _ in 0..40 {
        let n = 3 + rng.below(5) as usize;
        let backends = rng.backends(n, 0);
        let replicas = 2 + rng.below(2) as u8;
        let Ok(table) = assign(&backends, replicas, 64, None) else { continue };
        for lost in 0u32..(1 << n) {
            if lost.count_ones() != u32::from(replicas) - 1 {
                continue;
            }
            for p in 0..64 {
                assert!(
                    table.owners_of(p).iter().any(|&v| lost & (1 << v) == 0),
                    "partition {p} lost with backends {lost:b}"
                );
            }
        }
    }
}

/// Copies the new table must write for a change, against the least any table
/// reaching the optimum could: the pairs on backends that gained.
fn gained(previous: &Table, next: &Table, n: usize) -> u64 {
    let before = previous.partitions_held(n);
    let after = next.partitions_held(n);
    before.iter().zip(&after).map(|(b, a)| u64::from(a.saturating_sub(*b))).sum()
}

#[test]
fn adding_a_backend_moves_only_what_lands_on_it() {
    let mut rng = Rng(3);
    for round in 0..60 {
        let n = 3 + rng.below(8) as usize;
        let mut backends = rng.backends(n, 0);
        let replicas = 1 + rng.below(3) as u8;
        let Ok(before) = assign(&backends, replicas, 256, None) else { continue };
        backends.push(BackendSpec::new("new", 1 + rng.below(50)));
        let after = assign(&backends, replicas, 256, Some(&before)).unwrap();
        after.validate(&backends).unwrap();
        assert_usable(&after, &backends, replicas);
        let landed = u64::from(after.partitions_held(n + 1)[n]);
        let moved = moved(&before, &after);
        assert!(moved >= landed);
        assert!(moved as f64 <= 1.02 * landed as f64 + 2.0, "round {round}: moved {moved}, new backend holds {landed}");
        assert_eq!(moved, gained(&before, &after, n + 1), "round {round}: a pair moved between old backends");
    }
}

#[test]
fn removing_a_backend_moves_little_more_than_it_held() {
    let mut rng = Rng(4);
    for round in 0..60 {
        let n = 3 + rng.below(8) as usize;
        let mut backends = rng.backends(n, 0);
        let replicas = 1 + rng.below(2) as u8;
        let Ok(before) = assign(&backends, replicas, 256, None) else { continue };
        let gone = rng.below(n as u64) as usize;
        let held = u64::from(before.partitions_held(n)[gone]);
        backends[gone].capacity = 0;
        let Ok(after) = assign(&backends, replicas, 256, Some(&before)) else { continue };
        after.validate(&backends).unwrap();
        assert_eq!(after.partitions_held(n)[gone], 0);
        let moved = moved(&before, &after);
        assert!(moved >= held);
        assert!(moved as f64 <= 1.15 * held as f64 + 4.0, "round {round}: moved {moved}, removed backend held {held}");
    }
}

#[test]
fn unchanged_layout_moves_nothing_and_capacity_changes_move_the_difference() {
    let backends = specs(&[3, 5, 7, 11, 13]);
    let before = assign(&backends, 2, 1024, None).unwrap();
    let again = assign(&backends, 2, 1024, Some(&before)).unwrap();
    assert_eq!(moved(&before, &again), 0);
    assert_eq!(again, before);
    let mut grown = backends.clone();
    grown[0].capacity = 6;
    let after = assign(&grown, 2, 1024, Some(&before)).unwrap();
    assert_eq!(moved(&before, &after), gained(&before, &after, 5));
    let held = after.partitions_held(5);
    assert!(held[0] > before.partitions_held(5)[0]);
    assert_usable(&after, &grown, 2);
}

#[test]
fn doubling_the_partitions_moves_almost_nothing() {
    // Each partition splits in two with its owners; the finer rounding may let
    // a few pairs move to reach a better table, never more than 1 % of them.
    let backends = specs(&[3, 5, 7, 11]);
    let before = assign(&backends, 2, 512, None).unwrap();
    let after = assign(&backends, 2, 1024, Some(&before)).unwrap();
    let moved = moved(&before, &after);
    assert!(moved <= 20, "{moved} of 2048 pairs moved");
    assert!(after.usable(&backends) >= before.usable(&backends));
    let same = (0..1024).filter(|&p| after.owners_of(p) == before.owners_of(p % 512)).count();
    assert!(same >= 1004, "{same} partitions kept their owners");
}

#[test]
fn partition_of_takes_the_first_two_bytes() {
    let mut id = [0u8; 32];
    id[0] = 0x12;
    id[1] = 0x34;
    id[2] = 0xff;
    assert_eq!(partition_of(&id, 65536), 0x1234);
    assert_eq!(partition_of(&id, 1024), 0x1234 % 1024);
    assert_eq!(partition_of(&id, 0), 0);
    let table = Table { partitions: 1000, replicas: 1, owners: vec![0; 1000] };
    assert_eq!(table.partition_of(&id), 0x1234 % 1000);
    assert_eq!(table.owners_of(1000), &[] as &[u16]);
    assert_eq!(recommended_partitions(5, 2), 1024);
    assert_eq!(recommended_partitions(100, 1), 16384);
}

#[test]
fn bad_inputs_are_refused_with_guidance() {
    let three = specs(&[1, 1, 1]);
    let err = |r: Result<Table, PlacementError>| r.unwrap_err();
    assert_eq!(err(assign(&three, 0, 64, None)), PlacementError::InvalidReplicas { replicas: 0 });
    assert_eq!(err(assign(&three, 2, 0, None)), PlacementError::InvalidPartitions { partitions: 0 });
    assert_eq!(
        err(assign(&three, 2, MAX_PARTITIONS + 1, None)),
        PlacementError::InvalidPartitions { partitions: MAX_PARTITIONS + 1 }
    );
    assert_eq!(err(assign(&three, 4, 64, None)), PlacementError::TooFewBackends { replicas: 4, backends: 3 });
    assert_eq!(err(assign(&specs(&[0, 0, 0]), 1, 64, None)), PlacementError::ZeroCapacity);
    let zoned: Vec<BackendSpec> = three.iter().cloned().map(|b| b.in_zone("one")).collect();
    let e = err(assign(&zoned, 2, 64, None));
    assert_eq!(e, PlacementError::TooFewZones { replicas: 2, zones: 1 });
    assert!(e.to_string().contains("add backends in other zones"), "{e}");
    let e = err(assign(&specs(&[1, 0, 1]), 3, 64, None));
    assert_eq!(e, PlacementError::TooFewZones { replicas: 3, zones: 2 });
    let many = specs(&[1; 40]);
    let e = err(assign(&many, 1, 32, None));
    assert_eq!(e, PlacementError::TooManyBackends { backends: 40, partitions: 32, replicas: 1, needed: 64 });
    assert!(e.to_string().contains("raise the partition count to at least 64"), "{e}");
    let mut twice = three.clone();
    twice[2].name = "b0".into();
    assert_eq!(err(assign(&twice, 1, 64, None)), PlacementError::DuplicateName { name: "b0".into() });
    let previous = assign(&three, 2, 64, None).unwrap();
    let e = err(assign(&three[..2], 2, 64, Some(&previous)));
    assert_eq!(e, PlacementError::UnknownBackend { index: 2, backends: 2 });
    assert!(e.to_string().contains("capacity 0"), "{e}");
}

#[test]
fn validate_names_what_is_wrong() {
    let backends = specs(&[1, 1, 1]);
    let mut table = assign(&backends, 2, 8, None).unwrap();
    table.validate(&backends).unwrap();
    table.owners[1] = table.owners[0];
    let e = table.validate(&backends).unwrap_err();
    assert!(e.to_string().contains("partition 0 has two replicas in zone"), "{e}");
    table.owners.pop();
    assert!(table.validate(&backends).unwrap_err().to_string().contains("owner entries"));
}

#[test]
fn full_slack_moves_only_the_removed_backends_pairs() {
    let mut rng = Rng(5);
    let all = Options { slack_ppm: 1_000_000, ..Options::default() };
    for round in 0..30 {
        let n = 3 + rng.below(8) as usize;
        let mut backends = rng.backends(n, 0);
        let replicas = 1 + rng.below(3) as u8;
        let Ok(before) = assign(&backends, replicas, 256, None) else { continue };
        let gone = rng.below(n as u64) as usize;
        let held = u64::from(before.partitions_held(n)[gone]);
        backends[gone].capacity = 0;
        let Ok(after) = assign_with(&backends, replicas, 256, Some(&before), &all) else { continue };
        after.validate(&backends).unwrap();
        assert_eq!(moved(&before, &after), held, "round {round}");
    }
}

#[test]
fn changed_zones_and_replica_counts_keep_what_they_can() {
    let backends = specs(&[4, 4, 4, 4, 4, 4]);
    let before = assign(&backends, 2, 256, None).unwrap();
    // b0 and b1 now share a zone: partitions they both held keep one of them.
    let mut zoned = backends.clone();
    zoned[0].zone = Some("rack".into());
    zoned[1].zone = Some("rack".into());
    let after = assign(&zoned, 2, 256, Some(&before)).unwrap();
    after.validate(&zoned).unwrap();
    let both = (0..256).filter(|&p| before.owners_of(p).contains(&0) && before.owners_of(p).contains(&1)).count();
    assert!(moved(&before, &after) as usize >= both);
    // One more replica: every previous pair stays, one pair per partition is added.
    let three = assign(&backends, 3, 256, Some(&before)).unwrap();
    three.validate(&backends).unwrap();
    assert_eq!(moved(&before, &three), 256);
    for p in 0..256 {
        assert!(before.owners_of(p).iter().all(|v| three.owners_of(p).contains(v)));
    }
}

#[test]
fn large_layouts_are_computed() {
    // 100 backends, R = 3, 8192 partitions, then one more backend.
    let mut rng = Rng(6);
    let mut backends: Vec<BackendSpec> =
        (0..100).map(|i| BackendSpec::new(format!("b{i}"), 1000 + rng.below(15_000))).collect();
    let before = assign(&backends, 3, 8192, None).unwrap();
    before.validate(&backends).unwrap();
    assert_usable(&before, &backends, 3);
    backends.push(BackendSpec::new("new", 8000));
    let after = assign(&backends, 3, 8192, Some(&before)).unwrap();
    assert_eq!(moved(&before, &after), u64::from(after.partitions_held(101)[100]));
}

/// The design notes' 10 backends in 5 zones (TB).
fn ten_in_five_zones() -> Vec<BackendSpec> {
    let caps = [1, 1, 2, 2, 3, 4, 4, 6, 8, 10];
    caps.iter()
        .enumerate()
        .map(|(i, &c)| BackendSpec::new(format!("b{i}"), c * 1000).in_zone(format!("z{}", i / 2)))
        .collect()
}

#[test]
fn removal_in_five_zones_moves_the_least_any_table_can() {
    for replicas in [2u8, 3] {
        for seed in 0..3u64 {
            let options = Options { seed, ..Options::default() };
            let mut backends = ten_in_five_zones();
            let before = assign_with(&backends, replicas, 1024, None, &options).unwrap();
            let held = u64::from(before.partitions_held(10)[4]);
            backends[4].capacity = 0;
            let after = assign_with(&backends, replicas, 1024, Some(&before), &options).unwrap();
            after.validate(&backends).unwrap();
            assert_usable(&after, &backends, replicas);
            let least = least_moved(&backends, replicas, 1024, &before, &options).unwrap();
            // The new optimum forces more than the removed backend held: the
            // largest zone must cover partitions it did not.
            assert!(least > held, "R = {replicas}, seed {seed}: least {least}, held {held}");
            assert_eq!(moved(&before, &after), least, "R = {replicas}, seed {seed}: held {held}");
        }
    }
}

#[test]
fn random_changes_move_the_least_any_table_can() {
    // Removals, additions, new capacities and new zones, up to three at once,
    // with and without slack: the table moves exactly the least any table
    // meeting the bounds can (computed by the independent flow of least.rs).
    let mut rng = Rng(11);
    let mut checked = 0;
    for round in 0..1500 {
        let n = 3 + rng.below(12) as usize;
        let zones = rng.below(6);
        let mut backends = rng.backends(n, zones);
        let replicas = 1 + rng.below(4) as u8;
        let partitions = [16, 64, 256, 1024][rng.below(4) as usize];
        let options = Options { seed: rng.next(), slack_ppm: [0, 0, 10_000, 50_000][rng.below(4) as usize] };
        let Ok(before) = assign_with(&backends, replicas, partitions, None, &options) else { continue };
        for _ in 0..1 + rng.below(3) {
            let v = rng.below(n as u64) as usize;
            match rng.below(5) {
                0 => backends[v].capacity = 0,
                1 => backends.push(BackendSpec::new(format!("new{}", backends.len()), 1 + rng.below(50))),
                2 => backends[v].zone = Some(format!("z{}", rng.below(4))),
                _ => backends[v].capacity = 1 + rng.below(50),
            }
        }
        let Ok(after) = assign_with(&backends, replicas, partitions, Some(&before), &options) else { continue };
        after.validate(&backends).unwrap();
        let least = least_moved(&backends, replicas, partitions, &before, &options).unwrap();
        assert_eq!(moved(&before, &after), least, "round {round}: {backends:?}, R = {replicas}, P = {partitions}");
        checked += 1;
    }
    assert!(checked > 1000, "only {checked} changes were placeable");
}

#[test]
fn least_moved_counts_what_is_forced() {
    let backends = specs(&[3, 5, 7, 11, 13]);
    let before = assign(&backends, 2, 1024, None).unwrap();
    assert_eq!(least_moved(&backends, 2, 1024, &before, &Options::default()).unwrap(), 0);
    // Without bounds (full slack) only the removed backend's pairs must move.
    let mut removed = backends.clone();
    removed[2].capacity = 0;
    let all = Options { slack_ppm: 1_000_000, ..Options::default() };
    let held = u64::from(before.partitions_held(5)[2]);
    assert_eq!(least_moved(&removed, 2, 1024, &before, &all).unwrap(), held);
    // A table that ignores the previous one moves more than the least.
    let fresh = assign_with(&removed, 2, 1024, None, &Options { seed: 99, ..Options::default() }).unwrap();
    let least = least_moved(&removed, 2, 1024, &before, &Options::default()).unwrap();
    assert!(moved(&before, &fresh) > least);
    assert!(least >= held);
}

/// The least movement by trying every table: for each partition every set of
/// R backends in distinct zones, within the bounds.
fn least_by_search(backends: &[BackendSpec], replicas: u8, partitions: u32, previous: &Table) -> u64 {
    let (zone, bound) =
        super::solve::prepare(backends, replicas, partitions, Some(previous), &Options::default()).unwrap();
    let live: Vec<usize> = (0..backends.len()).filter(|&v| bound[v] > 0).collect();
    let mut rows: Vec<Vec<usize>> = Vec::new();
    for mask in 0u32..(1 << live.len()) {
        if mask.count_ones() != u32::from(replicas) {
            continue;
        }
        let row: Vec<usize> = (0..live.len()).filter(|i| mask & (1 << i) != 0).map(|i| live[i]).collect();
        let mut zones: Vec<usize> = row.iter().map(|&v| zone[v]).collect();
        zones.sort_unstable();
        zones.dedup();
        if zones.len() == row.len() {
            rows.push(row);
        }
    }
    fn search(
        p: u32,
        held: &mut [u32],
        rows: &[Vec<usize>],
        bound: &[u32],
        previous: &Table,
        cost: u64,
        best: &mut u64,
    ) {
        if cost >= *best {
            return;
        }
        if p == previous.partitions {
            *best = cost;
            return;
        }
        for row in rows {
            if row.iter().any(|&v| held[v] >= bound[v]) {
                continue;
            }
            let added = row.iter().filter(|&&v| !previous.owners_of(p).contains(&(v as u16))).count() as u64;
            row.iter().for_each(|&v| held[v] += 1);
            search(p + 1, held, rows, bound, previous, cost + added, best);
            row.iter().for_each(|&v| held[v] -= 1);
        }
    }
    let mut best = u64::MAX;
    search(0, &mut vec![0; backends.len()], &rows, &bound, previous, 0, &mut best);
    best
}

#[test]
fn least_moved_is_the_least_of_every_table() {
    let mut rng = Rng(8);
    let mut checked = 0;
    for round in 0..200 {
        let n = 2 + rng.below(5) as usize;
        let mut backends = rng.backends(n, 3);
        let replicas = 1 + rng.below(3) as u8;
        let partitions = 3 + rng.below(4) as u32;
        let Ok(before) = assign(&backends, replicas, partitions, None) else { continue };
        match rng.below(3) {
            0 => backends[rng.below(n as u64) as usize].capacity = 0,
            1 => backends.push(BackendSpec::new("new", 1 + rng.below(50))),
            _ => {
                let v = rng.below(n as u64) as usize;
                backends[v].capacity = 1 + rng.below(50);
                backends[v].zone = Some(format!("z{}", rng.below(3)));
            }
        }
        let Ok(after) = assign(&backends, replicas, partitions, Some(&before)) else { continue };
        let least = least_moved(&backends, replicas, partitions, &before, &Options::default()).unwrap();
        assert_eq!(least, least_by_search(&backends, replicas, partitions, &before), "round {round}: {backends:?}");
        assert_eq!(moved(&before, &after), least, "round {round}");
        checked += 1;
    }
    assert!(checked > 100, "only {checked} changes were placeable");
}
