//! Placement benchmark: coffer's partition table (crates/coffer-backend/src/placement.rs,
//! docs/design.md#placement) against Chord consistent hashing with virtual nodes,
//! weighted rendezvous hashing (straw2), jump hash and an ideal random placement,
//! on simulated packs over backends of unequal capacity. Pure and deterministic:
//! no storage, a fixed seed.
//!
//! Run: `cargo run -p coffer-placement-bench` (about half a minute; the package is
//! built with optimisations in the dev profile). `--quick` runs 10^5 packs only;
//! `--scale` only times tables at the layout limits (1023-1024 backends, 65,536
//! partitions, R = 3 and 16).
//! Writes bench/results/placement/placement.csv and placement.svg, and prints a
//! Markdown summary. Results are described in docs/performance.md#placement.

mod chart;
mod methods;

use coffer_backend::placement::{self, BackendSpec};
use methods::{Chord, Coffer, Ideal, Jump, Placer, Straw2, mix};
use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

/// Builds a method's placement for one configuration (specs and universe ids).
type Build<'a> = dyn Fn(&[BackendSpec], &[usize]) -> Option<Box<dyn Placer>> + 'a;

/// One capacity vector with its add and remove cases.
pub struct Scenario {
    pub label: String,
    pub backends: Vec<BackendSpec>,
    /// The backend added in the "add" case (appended, so indices stay stable).
    pub added: BackendSpec,
    /// The backend removed in the "remove" case (jump hash removes the last instead).
    pub removed: usize,
}

/// One measured row.
pub struct Row {
    pub scenario: String,
    pub method: String,
    pub backends: usize,
    pub replicas: u8,
    pub packs: u64,
    /// max over backends of (load / capacity), over the mean (total load / total capacity).
    pub max_over_mean: f64,
    /// data stored when the first backend fills, over the water-filling optimum.
    pub usable: f64,
    /// copies moved on adding a backend, over the copies the new backend holds.
    pub moved_add: Option<f64>,
    /// copies moved on removing a backend, over the copies it held.
    pub moved_remove: Option<f64>,
    /// coffer only: (partition, backend) pairs the table added on adding a
    /// backend, over the least any table meeting rule 1 adds.
    pub least_add: Option<f64>,
    /// coffer only: the same on removing a backend.
    pub least_remove: Option<f64>,
    /// coffer only: the least pairs any table adds on removing a backend, over
    /// the pairs the removed backend held (what the new optimum forces).
    pub forced_remove: Option<f64>,
    pub usable_after_add: Option<f64>,
    pub usable_after_remove: Option<f64>,
    /// coffer only: the table's usable capacity with packs spread exactly evenly.
    pub usable_table: Option<f64>,
    pub partitions: Option<u32>,
    pub millis: f64,
}

fn tb(name: &str, capacity_gb: u64) -> BackendSpec {
    BackendSpec::new(name, capacity_gb)
}

fn scenarios() -> Vec<Scenario> {
    let mut out = Vec::new();
    let fixed = |label: &str, caps: &[u64], zones: Option<&[&str]>, added: u64, removed: usize| {
        let backends: Vec<BackendSpec> = caps
            .iter()
            .enumerate()
            .map(|(i, &c)| {
                let b = tb(&format!("b{i}"), c * 1000);
                match zones {
                    Some(z) => b.in_zone(z[i]),
                    None => b,
                }
            })
            .collect();
        Scenario { label: label.into(), backends, added: tb("new", added * 1000), removed }
    };
    // The worked examples of the design notes (capacities in TB).
    out.push(fixed("notes-5", &[1, 2, 2, 4, 8], None, 4, 1));
    out.push(fixed(
        "notes-10z5",
        &[1, 1, 2, 2, 3, 4, 4, 6, 8, 10],
        Some(&["z0", "z0", "z1", "z1", "z2", "z2", "z3", "z3", "z4", "z4"]),
        5,
        4,
    ));
    // Log-uniform capacities between 1 and 16 TB, one zone each.
    for n in [3usize, 5, 10, 30, 100] {
        let backends: Vec<BackendSpec> = (0..n)
            .map(|i| {
                let u = (mix(0xc0ff ^ (n as u64) << 32 ^ i as u64) >> 11) as f64 / (1u64 << 53) as f64;
                tb(&format!("b{i}"), (1000.0 * 16f64.powf(u)).round() as u64)
            })
            .collect();
        let mut sorted: Vec<u64> = backends.iter().map(|b| b.capacity).collect();
        sorted.sort_unstable();
        let median = sorted[n / 2];
        out.push(Scenario { label: format!("random-{n}"), backends, added: tb("new", median), removed: 1 });
    }
    out
}

/// Simulated packs: each a uniformly random 32-byte id (as the random salt in
/// every pack makes them); only the first 16 bytes are set.
fn packs(count: u64) -> Vec<[u8; 32]> {
    (0..count)
        .map(|i| {
            let mut id = [0u8; 32];
            id[..8].copy_from_slice(&mix(i ^ 0x5eed).to_be_bytes());
            id[8..16].copy_from_slice(&mix(i ^ 0xfeed_0000).to_be_bytes());
            id
        })
        .collect()
}

/// Loads per universe index, and the owners of each pack (flattened) when kept.
fn place_all(placer: &dyn Placer, ids: &[[u8; 32]], universe: usize) -> (Vec<u64>, Vec<u16>) {
    let mut loads = vec![0u64; universe];
    let mut owners = Vec::with_capacity(ids.len() * 3);
    let mut buf = Vec::new();
    for id in ids {
        buf.clear();
        placer.place(id, &mut buf);
        for &v in &buf {
            loads[usize::from(v)] += 1;
        }
        owners.push(buf.len() as u16);
        owners.extend_from_slice(&buf);
    }
    (loads, owners)
}

/// Copies in `after` that `before` did not have.
fn added_copies(before: &[u16], after: &[u16]) -> u64 {
    let (mut i, mut j, mut added) = (0usize, 0usize, 0u64);
    while i < before.len() && j < after.len() {
        let (nb, na) = (usize::from(before[i]), usize::from(after[j]));
        let b = &before[i + 1..i + 1 + nb];
        let a = &after[j + 1..j + 1 + na];
        added += a.iter().filter(|v| !b.contains(v)).count() as u64;
        i += 1 + nb;
        j += 1 + na;
    }
    added
}

fn usable(backends: &[BackendSpec], ids: &[usize], loads: &[u64], packs: u64, optimum: f64) -> f64 {
    let scale = ids
        .iter()
        .zip(backends)
        .filter(|(id, _)| loads[**id] > 0)
        .map(|(id, b)| b.capacity as f64 / loads[*id] as f64)
        .fold(f64::INFINITY, f64::min);
    scale * packs as f64 / optimum
}

fn max_over_mean(backends: &[BackendSpec], ids: &[usize], loads: &[u64]) -> f64 {
    let total_load: u64 = ids.iter().map(|&i| loads[i]).sum();
    let total_cap: u64 = backends.iter().map(|b| b.capacity).sum();
    let mean = total_load as f64 / total_cap as f64;
    ids.iter().zip(backends).map(|(&i, b)| loads[i] as f64 / b.capacity as f64).fold(0.0, f64::max) / mean
}

/// The three configurations of a scenario: base, with the added backend, without
/// the removed one; each as (specs, universe ids).
struct Configs {
    base: (Vec<BackendSpec>, Vec<usize>),
    add: (Vec<BackendSpec>, Vec<usize>),
    remove: (Vec<BackendSpec>, Vec<usize>),
}

fn configs(s: &Scenario, removed: usize) -> Configs {
    let n = s.backends.len();
    let base = (s.backends.clone(), (0..n).collect());
    let mut add_specs = s.backends.clone();
    add_specs.push(s.added.clone());
    let add = (add_specs, (0..=n).collect());
    let remove_ids: Vec<usize> = (0..n).filter(|&i| i != removed).collect();
    let remove = (remove_ids.iter().map(|&i| s.backends[i].clone()).collect(), remove_ids);
    Configs { base, add, remove }
}

#[allow(clippy::too_many_arguments)]
fn measure(
    s: &Scenario,
    method: &str,
    replicas: u8,
    ids: &[[u8; 32]],
    build: &Build,
    removed: usize,
    consistent: bool,
) -> Option<Row> {
    let started = Instant::now();
    let c = configs(s, removed);
    let universe = s.backends.len() + 1;
    let packs = ids.len() as u64;
    let base = build(&c.base.0, &c.base.1)?;
    let (loads, before) = place_all(base.as_ref(), ids, universe);
    let opt = |specs: &[BackendSpec]| placement::optimum(specs, replicas);
    let mut row = Row {
        scenario: s.label.clone(),
        method: method.into(),
        backends: s.backends.len(),
        replicas,
        packs,
        max_over_mean: max_over_mean(&c.base.0, &c.base.1, &loads),
        usable: usable(&c.base.0, &c.base.1, &loads, packs, opt(&c.base.0)),
        moved_add: None,
        moved_remove: None,
        least_add: None,
        least_remove: None,
        forced_remove: None,
        usable_after_add: None,
        usable_after_remove: None,
        usable_table: base.usable_table().map(|u| u / opt(&c.base.0)),
        partitions: base.partitions(),
        millis: 0.0,
    };
    let mut after_add = None;
    let mut after_remove = None;
    if consistent {
        if let Some(add) = base.next(&c.add.0, &c.add.1).or_else(|| build(&c.add.0, &c.add.1)) {
            let (loads_add, after) = place_all(add.as_ref(), ids, universe);
            let landed = loads_add[s.backends.len()];
            row.moved_add = (landed > 0).then(|| added_copies(&before, &after) as f64 / landed as f64);
            row.usable_after_add = Some(usable(&c.add.0, &c.add.1, &loads_add, packs, opt(&c.add.0)));
            after_add = Some(add);
        }
        if let Some(rm) = base.next(&c.remove.0, &c.remove.1).or_else(|| build(&c.remove.0, &c.remove.1)) {
            let (loads_rm, after) = place_all(rm.as_ref(), ids, universe);
            row.moved_remove = Some(added_copies(&before, &after) as f64 / loads[removed] as f64);
            row.usable_after_remove = Some(usable(&c.remove.0, &c.remove.1, &loads_rm, packs, opt(&c.remove.0)));
            after_remove = Some(rm);
        }
    }
    // The least movement is computed after the clock stops: it is a check of
    // the table, not part of computing it.
    row.millis = started.elapsed().as_secs_f64() * 1e3;
    let ratio = |moved: u64, least: u64| if least > 0 { moved as f64 / least as f64 } else { 1.0 };
    if let Some((moved, least)) = after_add.and_then(|p| p.movement()) {
        row.least_add = Some(ratio(moved, least));
    }
    if let Some((moved, least)) = after_remove.and_then(|p| p.movement()) {
        row.least_remove = Some(ratio(moved, least));
        let held = base.held(removed).unwrap_or(0);
        row.forced_remove = (held > 0).then(|| least as f64 / held as f64);
    }
    Some(row)
}

fn main() {
    if std::env::args().any(|a| a == "--scale") {
        scale();
        return;
    }
    let quick = std::env::args().any(|a| a == "--quick");
    let out_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../results/placement");
    let pack_counts: &[u64] = if quick { &[100_000] } else { &[100_000, 1_000_000] };
    let mut rows = Vec::new();
    let started = Instant::now();
    for &count in pack_counts {
        let ids = packs(count);
        for s in scenarios() {
            for replicas in 1..=3u8 {
                if s.label == "notes-10z5" && replicas == 1 {
                    continue;
                }
                let n = s.backends.len();
                let r = replicas;
                let mut add = |row: Option<Row>| rows.extend(row);
                let recommended = placement::recommended_partitions(n + 1, r);
                let unit = s.backends.iter().map(|b| b.capacity as f64).sum::<f64>() / n as f64;
                for (name, partitions, slack_ppm) in [
                    ("coffer", recommended, 0),
                    ("coffer P=1024", 1024, 0),
                    ("coffer slack 1%", recommended, 10_000),
                    ("coffer move-min", recommended, 1_000_000),
                ] {
                    add(measure(
                        &s,
                        name,
                        r,
                        &ids,
                        &|specs, uids| Coffer::build(specs, uids, r, partitions, slack_ppm),
                        s.removed,
                        true,
                    ));
                }
                for k in [1u32, 16, 64, 256] {
                    add(measure(
                        &s,
                        &format!("chord k={k}"),
                        r,
                        &ids,
                        &|specs, uids| Some(Box::new(Chord::new(specs, uids, r, k, unit))),
                        s.removed,
                        true,
                    ));
                }
                // Straw2 hashes every pack against every backend three times (base,
                // add, remove): at 10^6 packs and 100 backends that alone takes
                // over a minute, so that one combination is measured at 10^5.
                let slow = count > 100_000 && n >= 100;
                if !slow {
                    add(measure(
                        &s,
                        "straw2",
                        r,
                        &ids,
                        &|specs, uids| Some(Box::new(Straw2::new(specs, uids, r))),
                        s.removed,
                        true,
                    ));
                }
                if r == 1 {
                    add(measure(&s, "jump", r, &ids, &|_, uids| Some(Box::new(Jump::new(uids))), n - 1, true));
                }
                if !slow {
                    add(measure(
                        &s,
                        "ideal random",
                        r,
                        &ids,
                        &|specs, uids| Ideal::new(specs, uids, r).map(|p| Box::new(p) as Box<dyn Placer>),
                        s.removed,
                        false,
                    ));
                }
            }
        }
    }
    let csv = to_csv(&rows);
    std::fs::create_dir_all(&out_dir).expect("create bench/results/placement");
    std::fs::write(out_dir.join("placement.csv"), csv).expect("write placement.csv");
    std::fs::write(out_dir.join("placement.svg"), chart::svg(&rows)).expect("write placement.svg");
    print!("{}", summary(&rows));
    eprintln!(
        "{} rows in {:.1} s; wrote {}",
        rows.len(),
        started.elapsed().as_secs_f64(),
        out_dir.join("placement.{csv,svg}").display()
    );
}

fn opt(x: Option<f64>) -> String {
    x.map_or(String::new(), |v| format!("{v:.4}"))
}

fn to_csv(rows: &[Row]) -> String {
    let mut s = String::from(
        "scenario,method,backends,replicas,packs,partitions,max_over_mean,usable,usable_table,moved_add,moved_remove,least_add,least_remove,forced_remove,usable_after_add,usable_after_remove,millis\n",
    );
    for r in rows {
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{:.4},{:.4},{},{},{},{},{},{},{},{},{:.1}",
            r.scenario,
            r.method,
            r.backends,
            r.replicas,
            r.packs,
            r.partitions.map_or(String::new(), |p| p.to_string()),
            r.max_over_mean,
            r.usable,
            opt(r.usable_table),
            opt(r.moved_add),
            opt(r.moved_remove),
            opt(r.least_add),
            opt(r.least_remove),
            opt(r.forced_remove),
            opt(r.usable_after_add),
            opt(r.usable_after_remove),
            r.millis
        );
    }
    s
}

/// A Markdown table per pack count: for every method, the worst and the median
/// of each figure over the scenarios, by replica count.
fn summary(rows: &[Row]) -> String {
    let mut s = String::new();
    let mut packs: Vec<u64> = rows.iter().map(|r| r.packs).collect();
    packs.dedup();
    let mut methods: Vec<&str> = Vec::new();
    for r in rows {
        if !methods.contains(&r.method.as_str()) {
            methods.push(&r.method);
        }
    }
    for &count in &packs {
        let _ = writeln!(s, "\n{count} packs: worst (median) over the scenarios\n");
        let _ = writeln!(
            s,
            "| method | R | max/mean | usable | moved on add | moved on remove | remove: moved / least | remove: least / held | usable after remove |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|");
        for m in &methods {
            for r in 1..=3u8 {
                let sel: Vec<&Row> =
                    rows.iter().filter(|x| x.packs == count && x.method == *m && x.replicas == r).collect();
                if sel.is_empty() {
                    continue;
                }
                let stat = |f: &dyn Fn(&Row) -> Option<f64>, worst_is_max: bool| {
                    let mut v: Vec<f64> = sel.iter().filter_map(|x| f(x)).collect();
                    if v.is_empty() {
                        return "–".to_string();
                    }
                    v.sort_by(f64::total_cmp);
                    let worst = if worst_is_max { v[v.len() - 1] } else { v[0] };
                    format!("{worst:.3} ({:.3})", v[v.len() / 2])
                };
                let _ = writeln!(
                    s,
                    "| {m} | {r} | {} | {} | {} | {} | {} | {} | {} |",
                    stat(&|x| Some(x.max_over_mean), true),
                    stat(&|x| Some(x.usable), false),
                    stat(&|x| x.moved_add, true),
                    stat(&|x| x.moved_remove, true),
                    stat(&|x| x.least_remove, true),
                    stat(&|x| x.forced_remove, true),
                    stat(&|x| x.usable_after_remove, false),
                );
            }
        }
    }
    let largest = packs.iter().copied().max().unwrap_or(0);
    let _ = writeln!(
        s,
        "\ncoffer (recommended P) per scenario, {largest} packs: copies moved / copies received or held; pairs moved / least any table moves; least / pairs held\n"
    );
    let _ = writeln!(
        s,
        "| scenario | R | P | moved on add | moved on remove | add: moved / least | remove: moved / least | remove: least / held |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|");
    for x in rows.iter().filter(|x| x.packs == largest && x.method == "coffer") {
        let f = |v: Option<f64>| v.map_or("–".to_string(), |v| format!("{v:.3}"));
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            x.scenario,
            x.replicas,
            x.partitions.unwrap_or(0),
            f(x.moved_add),
            f(x.moved_remove),
            f(x.least_add),
            f(x.least_remove),
            f(x.forced_remove),
        );
    }
    s
}

/// `--scale`: the time to compute tables at the layout limits (1023 backends
/// of log-uniform capacity in 64 zones, 65,536 partitions), fresh, then with
/// one backend removed and with a 1024th added, and the least movement of each
/// change.
fn scale() {
    let n = 1023usize;
    let backends: Vec<BackendSpec> = (0..n)
        .map(|i| {
            let u = (mix(0x5ca1e ^ i as u64) >> 11) as f64 / (1u64 << 53) as f64;
            tb(&format!("b{i}"), (1000.0 * 16f64.powf(u)).round() as u64).in_zone(format!("z{}", i % 64))
        })
        .collect();
    let partitions = placement::MAX_PARTITIONS;
    println!("| R | fresh table (s) | remove: table (s) | moved | least | add: table (s) | moved | least |");
    println!("|---|---|---|---|---|---|---|---|");
    for replicas in [3u8, 16] {
        let timed = |specs: &[BackendSpec], previous: Option<&placement::Table>| {
            let started = Instant::now();
            let table = placement::assign(specs, replicas, partitions, previous).expect("table");
            (table, started.elapsed().as_secs_f64())
        };
        let (base, fresh) = timed(&backends, None);
        let mut removed = backends.clone();
        removed[1].capacity = 0;
        let (rm, rm_time) = timed(&removed, Some(&base));
        let mut added = backends.clone();
        added.push(tb("new", 8000).in_zone("z0"));
        let (add, add_time) = timed(&added, Some(&base));
        let least = |specs: &[BackendSpec]| {
            placement::least_moved(specs, replicas, partitions, &base, &placement::Options::default())
                .map_or_else(|e| e.to_string(), |v| v.to_string())
        };
        println!(
            "| {replicas} | {fresh:.2} | {rm_time:.2} | {} | {} | {add_time:.2} | {} | {} |",
            placement::moved(&base, &rm),
            least(&removed),
            placement::moved(&base, &add),
            least(&added),
        );
    }
}
