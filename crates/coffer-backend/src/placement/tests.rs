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
    // share of the 2048 slots to within one partition of floor(c / s*).
    let backends = specs(&[1, 2, 2, 4, 8]);
    let table = assign(&backends, 2, 1024, None).unwrap();
    let held = table.partitions_held(5);
    let share = |c: f64| c / 17.0 * 2048.0;
    for (b, &n) in backends.iter().zip(&held) {
        let ideal = share(b.capacity as f64);
        assert!(
            f64::from(n) <= ideal + 1e-9 && f64::from(n) >= ideal - 2.0,
            "{}: {n} partitions, ideal {ideal}",
            b.name
        );
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
    let c = assign_with(&backends, 2, 512, None, &Options { seed: 7 }).unwrap();
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
fn doubling_the_partitions_moves_nothing() {
    let backends = specs(&[3, 5, 7, 11]);
    let before = assign(&backends, 2, 512, None).unwrap();
    let after = assign(&backends, 2, 1024, Some(&before)).unwrap();
    assert_eq!(moved(&before, &after), 0);
    for p in 0..1024 {
        assert_eq!(after.owners_of(p), before.owners_of(p % 512));
    }
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
