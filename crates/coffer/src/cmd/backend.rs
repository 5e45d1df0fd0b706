//! A repository over several backends: `init --replicas`, `backend add|remove|list`,
//! `check --replicas`, `repair --replicas` and `rebalance` (which removes
//! misplaced copies through `backend_trim`). See
//! docs/design.md#many-backends.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use coffer_backend::location::Location;
use coffer_backend::placement::{BackendSpec, Table};
use coffer_backend::{Backend, Modes, ReplicatedBackend, pack_id_of};
use coffer_core::Id;
use coffer_core::format::ObjectKind;
use coffer_core::format::layout::{BackendState, Layout, LayoutBackend};
use coffer_core::repo::{InitOptions, Repository};
use serde_json::json;

use super::backend_trim;
use crate::args::{GlobalArgs, parse_size};
use crate::password::{self, Purpose};
use crate::replicas;
use crate::{exit, output, repo_open};

/// `coffer backend`.
#[derive(Args, Debug)]
pub struct BackendArgs {
    #[command(subcommand)]
    pub command: BackendCommand,
}

#[derive(Subcommand, Debug)]
pub enum BackendCommand {
    /// Add a backend: a new layout version that gives it its share of the packs
    /// (moved there by `coffer rebalance`). Its location stays on this client.
    Add {
        /// Its name in the layout (letters, digits, '.', '_', '-').
        name: String,
        /// Where it is (a directory or a URL, as --repo takes).
        location: String,
        /// Its capacity (e.g. 2T); packs are spread in proportion to capacity.
        #[arg(long, value_parser = parse_size)]
        capacity: u64,
        /// Its failure zone: two copies of a pack never share a zone when avoidable.
        #[arg(long)]
        zone: Option<String>,
    },
    /// Remove a backend: a new layout version in which it owns nothing; `coffer
    /// rebalance` moves its packs away, then drops it from the layout.
    Remove {
        /// The backend's name.
        name: String,
    },
    /// List the backends: capacity, bytes and packs held, share, state.
    List,
}

/// Named members of a replicated storage; `None` where this client has no backend.
type Members = Vec<(String, Option<Arc<dyn Backend>>)>;

/// Objects other than packs, which every backend holds.
const SHARED_PREFIXES: [&str; 7] = ["keys/", "index/", "snapshots/", "tombstones/", "writers/", "layout/", "prune/"];

pub fn run(global: &GlobalArgs, a: &BackendArgs) -> Result<u8> {
    match &a.command {
        BackendCommand::Add { name, location, capacity, zone } => add(global, name, location, *capacity, zone.clone()),
        BackendCommand::Remove { name } => remove(global, name),
        BackendCommand::List => list(global),
    }
}

fn now() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

fn normal(location: &str) -> String {
    Location::parse(location).map(|l| l.to_string()).unwrap_or_else(|_| location.to_string())
}

/// Opens the repository and its replicated storage; an error for a repository on
/// one backend.
fn open(global: &GlobalArgs, indexed: bool) -> Result<(Repository, &'static replicas::Opened)> {
    let (loc, _) = repo_open::location(global)?;
    let repo = repo_open::open_unindexed(global, &loc)?;
    let opened = replicas::opened().with_context(|| {
        format!("the repository at {loc} is on one backend (it has no layout); create one with `coffer init --replicas R --backend …`")
    })?;
    if indexed {
        repo_open::load_index(global, &repo)?;
    }
    Ok((repo, opened))
}

/// `coffer init --replicas R --backend NAME:SIZE[:ZONE]=LOCATION …`.
pub fn init(
    global: &GlobalArgs,
    replicas_n: u8,
    specs: &[String],
    opts: &InitOptions,
    modes: Modes,
) -> Result<Repository> {
    let parsed: Vec<(BackendSpec, String)> = specs.iter().map(|s| replicas::parse_spec(s)).collect::<Result<_>>()?;
    let names: BTreeSet<&str> = parsed.iter().map(|(s, _)| s.name.as_str()).collect();
    if names.len() != parsed.len() {
        bail!("--backend: two backends have the same name");
    }
    if (replicas_n as usize) > parsed.len() {
        bail!("--replicas {replicas_n} needs at least {replicas_n} backends; {} were given", parsed.len());
    }
    if let Some(r) = &global.repo
        && !parsed.iter().any(|(_, l)| normal(l) == normal(r))
    {
        bail!("--repo {r} is not one of the --backend locations; leave it out, or give it as one of them");
    }
    let mut members: Members = Vec::new();
    for (spec, location) in &parsed {
        let loc = Location::parse(location).with_context(|| format!("backend {}", spec.name))?;
        if let Some(path) = loc.local_path() {
            std::fs::create_dir_all(path)
                .with_context(|| format!("backend {}: cannot create the directory {}", spec.name, path.display()))?;
        }
        let be = repo_open::backend_stack_for(&loc, modes, &spec.name)?;
        crate::foreign::check(be.as_ref())?;
        Repository::check_new_location(be.as_ref()).with_context(|| format!("backend {}", spec.name))?;
        members.push((spec.name.clone(), Some(be)));
    }
    let backends: Vec<BackendSpec> = parsed.iter().map(|(s, _)| s.clone()).collect();
    let partitions = coffer_backend::placement::recommended_partitions(backends.len(), replicas_n);
    let table = replicas::place(&backends, replicas_n, partitions, None)?;
    let replicated = Arc::new(ReplicatedBackend::new(members, table.clone())?);
    let pw = password::read(global, Purpose::Create)?;
    let repo = Repository::init(replicated, pw.as_bytes(), opts)?;
    let state = repo_open::local_state(&repo)?;
    let key = repo.writer_key(&state)?;
    let layout = Layout {
        version: 1,
        writer: key.public(),
        time: now(),
        backends: backends.into_iter().map(|spec| LayoutBackend { spec, state: BackendState::Active }).collect(),
        table,
        previous: None,
    };
    repo.save_layout(&layout, &key)?;
    let locations = parsed.iter().map(|(s, l)| (s.name.clone(), l.clone())).collect();
    replicas::write_locations(&state, &locations)?;
    Ok(repo)
}

/// A new layout version over `repo`'s replicated storage, with `members` as
/// the backends (`None`: keep the current ones) and written to all of them.
fn store_layout(repo: Repository, layout: &Layout, members: Option<Members>) -> Result<Id> {
    let repo = match members {
        Some(m) => repo.with_backend(Arc::new(ReplicatedBackend::new(m, layout.table.clone())?)),
        None => repo,
    };
    let state = repo_open::local_state(&repo)?;
    let key = repo.writer_key(&state)?;
    // Above every valid version, also one this client does not follow.
    let newest = replicas::opened().map_or(0, |o| o.newest_version);
    let layout = Layout { writer: key.public(), version: layout.version.max(newest + 1), ..layout.clone() };
    Ok(repo.save_layout(&layout, &key)?)
}

/// The version after `layout`'s, above every valid version (one by a writer
/// this client does not follow included), so that the new one is current.
fn next_version(layout: &Layout) -> u64 {
    layout.version.max(replicas::opened().map_or(0, |o| o.newest_version)) + 1
}

fn refuse_during_migration(layout: &Layout) -> Result<()> {
    if layout.previous.is_some() {
        bail!(
            "layout version {} is still being applied; run `coffer rebalance` to finish it before changing the backends",
            layout.version
        );
    }
    Ok(())
}

/// Pack copies that change backend between two tables, as a share of all copies.
fn moved_share(before: &Table, after: &Table) -> f64 {
    coffer_backend::placement::moved(before, after) as f64 / after.owners.len().max(1) as f64
}

fn add(global: &GlobalArgs, name: &str, location: &str, capacity: u64, zone: Option<String>) -> Result<u8> {
    replicas::check_name(name)?;
    let (repo, o) = open(global, false)?;
    let (_, layout) = &o.layout;
    refuse_during_migration(layout)?;
    if layout.position(name).is_some() {
        bail!("the layout has a backend named {name} already; choose another name");
    }
    let loc = Location::parse(location)?;
    let state = repo_open::local_state(&repo)?;
    let mut locations = replicas::read_locations(&state)?;
    let mut named: Vec<(String, String)> = locations.iter().map(|(n, l)| (n.clone(), l.clone())).collect();
    named.push((name.to_string(), location.to_string()));
    replicas::refuse_overlapping(&named, 1)?;
    if let Some(path) = loc.local_path() {
        std::fs::create_dir_all(path).with_context(|| format!("backend {name}: cannot create {}", path.display()))?;
    }
    let new = repo_open::backend_stack_for(&loc, Modes::PRIVATE, name)?;
    crate::foreign::check(new.as_ref())?;
    Repository::check_new_location(new.as_ref()).with_context(|| format!("backend {name}"))?;
    // Every backend holds every object but packs: copy them over, verified.
    let copied = copy_shared(o.backend.as_ref(), new.as_ref())?;
    let mut backends = layout.backends.clone();
    backends
        .push(LayoutBackend { spec: BackendSpec { name: name.into(), capacity, zone }, state: BackendState::Active });
    let specs: Vec<BackendSpec> = backends.iter().map(|b| b.spec.clone()).collect();
    let table = replicas::place(&specs, layout.table.replicas, layout.table.partitions, Some(&layout.table))?;
    let share = moved_share(&layout.table, &table);
    let next = migration(layout, backends, table);
    let mut members: Vec<(String, Option<Arc<dyn Backend>>)> = (0..layout.backends.len())
        .map(|i| (layout.backends[i].spec.name.clone(), o.backend.member(i).cloned()))
        .collect();
    members.push((name.to_string(), Some(new)));
    let id = store_layout(repo, &next, Some(members))?;
    locations.insert(name.to_string(), location.to_string());
    replicas::write_locations(&state, &locations)?;
    if global.json {
        output::json(
            &json!({"added": name, "layout": id, "version": next.version, "objects_copied": copied, "moving_share": share}),
        );
    } else if !global.quiet {
        println!(
            "added backend {name} (layout version {}, {}); {copied} shared objects copied to it; {:.1}% of the pack copies \
             change backend: run `coffer rebalance` to move them",
            next.version,
            id.short(),
            share * 100.0
        );
    }
    Ok(exit::OK)
}

/// Copies every shared object (not packs) `from` has and `to` lacks, each
/// verified against its name; returns how many were copied.
fn copy_shared(from: &dyn Backend, to: &dyn Backend) -> Result<usize> {
    let mut copied = 0;
    let config = from.read_max("config", ObjectKind::Config.max_len())?;
    if to.write_new("config", config)? {
        copied += 1;
    }
    for prefix in SHARED_PREFIXES {
        let have: BTreeSet<String> = to.list(prefix)?.into_iter().map(|o| o.name).collect();
        for obj in from.list(prefix)? {
            if have.contains(&obj.name) {
                continue;
            }
            let data = from.read_max(&obj.name, 64 << 20)?;
            if ObjectKind::Index.id_from_path(&obj.name).is_some_and(|id| Id::hash_of(&data) != id) {
                bail!("{}: its content does not match its name; run `coffer check`", obj.name);
            }
            to.write(&obj.name, data)?;
            copied += 1;
        }
    }
    Ok(copied)
}

fn remove(global: &GlobalArgs, name: &str) -> Result<u8> {
    let (repo, o) = open(global, false)?;
    let (_, layout) = &o.layout;
    refuse_during_migration(layout)?;
    let Some(pos) = layout.position(name) else {
        bail!("the layout has no backend named {name}; `coffer backend list` shows them");
    };
    let mut backends = layout.backends.clone();
    backends[pos].state = BackendState::Removing;
    let specs: Vec<BackendSpec> = backends
        .iter()
        .map(|b| BackendSpec {
            capacity: if b.state == BackendState::Active { b.spec.capacity } else { 0 },
            ..b.spec.clone()
        })
        .collect();
    let table = replicas::place(&specs, layout.table.replicas, layout.table.partitions, Some(&layout.table))
        .with_context(|| format!("cannot remove backend {name}"))?;
    if table.owners.contains(&(pos as u16)) {
        bail!("cannot remove backend {name}: the others cannot hold {} copies of every pack", layout.table.replicas);
    }
    let share = moved_share(&layout.table, &table);
    let next = migration(layout, backends, table);
    let id = store_layout(repo, &next, None)?;
    if global.json {
        output::json(&json!({"removing": name, "layout": id, "version": next.version, "moving_share": share}));
    } else if !global.quiet {
        println!(
            "backend {name} is being removed (layout version {}): it owns nothing now; run `coffer rebalance` to move \
             its packs ({:.1}% of the pack copies), after which it leaves the layout",
            next.version,
            share * 100.0
        );
    }
    Ok(exit::OK)
}

/// What one LIST of `data/` per backend shows.
pub(crate) struct Scan {
    /// Per member: its packs and their sizes, or why it did not list.
    pub(crate) listed: Vec<Result<BTreeMap<Id, u64>, String>>,
}

pub(crate) fn scan(o: &replicas::Opened) -> Scan {
    let n = o.layout.1.backends.len();
    let listed = (0..n)
        .map(|i| match o.backend.member(i) {
            None => Err(o.problems[i].clone().unwrap_or_else(|| "not opened".to_string())),
            Some(be) => be
                .list("data/")
                .map(|l| {
                    l.into_iter()
                        .filter_map(|obj| pack_id_of(&obj.name).map(|id| (Id(id), obj.size)))
                        .collect::<BTreeMap<Id, u64>>()
                })
                .map_err(|e| e.to_string()),
        })
        .collect();
    Scan { listed }
}

/// Member `i`'s state as `backend list` shows it.
fn state_of(o: &replicas::Opened, s: &Scan, i: usize) -> &'static str {
    match (&s.listed[i], o.layout.1.backends[i].state) {
        (_, BackendState::Removing) => "removing",
        (Err(_), _) if o.locations[i].is_none() => "no location",
        (Err(_), _) => "unreachable",
        (Ok(_), BackendState::Active) => "active",
    }
}

pub(crate) fn holds(scan: &Scan, i: usize, id: &Id) -> bool {
    scan.listed[i].as_ref().is_ok_and(|m| m.contains_key(id))
}

fn list(global: &GlobalArgs) -> Result<u8> {
    let (_repo, o) = open(global, false)?;
    let (id, layout) = &o.layout;
    let s = scan(o);
    let all: BTreeSet<Id> = s.listed.iter().flatten().flat_map(|m| m.keys().copied()).collect();
    let slots = f64::from(layout.table.partitions.max(1));
    let mut rows = Vec::new();
    for (i, b) in layout.backends.iter().enumerate() {
        let (packs, bytes) = match &s.listed[i] {
            Ok(m) => (Some(m.len() as u64), Some(m.values().sum::<u64>())),
            Err(_) => (None, None),
        };
        let state = state_of(o, &s, i);
        let owned = layout.table.owners.iter().filter(|&&x| x as usize == i).count() as f64 / slots;
        let share = packs.map(|p| if all.is_empty() { 0.0 } else { p as f64 / all.len() as f64 });
        rows.push(json!({
            "name": b.spec.name,
            "location": o.locations[i],
            "zone": b.spec.zone,
            "capacity": b.spec.capacity,
            "state": state,
            "packs": packs,
            "bytes": bytes,
            "share_of_packs": share,
            "share_of_partitions": owned,
            "error": s.listed[i].as_ref().err(),
        }));
    }
    if global.json {
        output::json(&json!({
            "type": "backend_list", "layout": id, "version": layout.version, "replicas": layout.table.replicas,
            "partitions": layout.table.partitions, "migrating": layout.previous.is_some(),
            "packs": all.len(), "backends": rows,
        }));
        return Ok(exit::OK);
    }
    println!(
        "layout version {} ({}): {} copies of every pack, {} partitions{}; {} packs",
        layout.version,
        id.short(),
        layout.table.replicas,
        layout.table.partitions,
        if layout.previous.is_some() { ", migrating (run `coffer rebalance`)" } else { "" },
        all.len()
    );
    let mut t = crate::table::Table::new(&["name", "capacity", "held", "packs", "share", "target", "state", "zone"])
        .right(1..=5);
    for r in &rows {
        let pct = |v: &serde_json::Value| v.as_f64().map_or("-".to_string(), |f| format!("{:.1}%", f * 100.0));
        t.row([
            r["name"].as_str().unwrap_or("").to_string(),
            output::bytes(r["capacity"].as_u64().unwrap_or(0)),
            r["bytes"].as_u64().map_or("-".to_string(), output::bytes),
            r["packs"].as_u64().map_or("-".to_string(), |p| p.to_string()),
            pct(&r["share_of_packs"]),
            pct(&r["share_of_partitions"]),
            r["state"].as_str().unwrap_or("").to_string(),
            r["zone"].as_str().unwrap_or("-").to_string(),
        ]);
    }
    t.print();
    Ok(exit::OK)
}

/// One finding of `check --replicas`, per pack.
struct Findings {
    /// Indexed packs no reachable backend holds.
    missing: Vec<Id>,
    /// Packs with fewer copies on their homes than the layout asks: (pack, homes lacking it).
    under: Vec<(Id, Vec<usize>)>,
    /// Copies on a backend that is not a home: (pack, backend).
    misplaced: Vec<(Id, usize)>,
    /// Shared objects a backend lacks: (object, backend).
    shared_missing: Vec<(String, usize)>,
}

/// The findings over the indexed packs, and with `listed_too` over every pack
/// some backend lists (a running backup's packs are not indexed yet).
fn find(repo: &Repository, o: &replicas::Opened, s: &Scan, listed_too: bool) -> Result<Findings> {
    let layout = &o.layout.1;
    let mut indexed: BTreeSet<Id> = repo.index().packs().iter().map(|p| p.id).collect();
    if listed_too {
        indexed.extend(s.listed.iter().flatten().flat_map(|m| m.keys().copied()));
    }
    let mut f = Findings { missing: Vec::new(), under: Vec::new(), misplaced: Vec::new(), shared_missing: Vec::new() };
    for id in &indexed {
        let homes = o.backend.homes(&ObjectKind::Pack.path(id));
        let holders: Vec<usize> = (0..layout.backends.len()).filter(|&i| holds(s, i, id)).collect();
        if holders.is_empty() {
            f.missing.push(*id);
            continue;
        }
        let lacking: Vec<usize> = homes.iter().copied().filter(|h| !holders.contains(h)).collect();
        if !lacking.is_empty() {
            f.under.push((*id, lacking));
        }
        for h in holders.into_iter().filter(|h| !homes.contains(h)) {
            f.misplaced.push((*id, h));
        }
    }
    // The shared objects: one listing per prefix and backend.
    for prefix in SHARED_PREFIXES.iter().copied().chain(["config"]) {
        let per: Vec<Option<BTreeSet<String>>> = (0..layout.backends.len())
            .map(|i| {
                let be = o.backend.member(i)?;
                if prefix == "config" {
                    return Some(be.stat("config").ok().map(|_| "config".to_string()).into_iter().collect());
                }
                be.list(prefix).ok().map(|l| l.into_iter().map(|x| x.name).collect())
            })
            .collect();
        let union: BTreeSet<&String> = per.iter().flatten().flatten().collect();
        for (i, have) in per.iter().enumerate() {
            let active = layout.backends[i].state == BackendState::Active;
            match have {
                Some(have) if active => {
                    for name in union.iter().filter(|n| !have.contains(**n)) {
                        f.shared_missing.push(((*name).clone(), i));
                    }
                }
                _ => {}
            }
        }
    }
    Ok(f)
}

/// How the indexed packs' copies stand, for the UI's health page: one listing
/// of every backend, the findings of `check --replicas` without its reads.
pub(crate) fn report(repo: &Repository, o: &replicas::Opened) -> Result<coffer_ui::ReplicaReport> {
    let layout = &o.layout.1;
    let s = scan(o);
    let f = find(repo, o, &s, false)?;
    let name = |i: usize| layout.backends[i].spec.name.clone();
    let copies = |id: &Id| (0..layout.backends.len()).filter(|&i| holds(&s, i, id)).count() as u64;
    let packs: Vec<Id> = repo.index().packs().iter().map(|p| p.id).collect();
    let backends = layout
        .backends
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let state = state_of(o, &s, i);
            let listed = s.listed[i].as_ref().ok();
            coffer_ui::BackendCopies {
                name: b.spec.name.clone(),
                state: state.to_string(),
                packs: listed.map(|m| m.len() as u64),
                bytes: listed.map(|m| m.values().sum()),
                error: s.listed[i].as_ref().err().cloned(),
            }
        })
        .collect();
    let named = coffer_ui::health::NAMED_PACKS;
    Ok(coffer_ui::ReplicaReport {
        layout_version: layout.version,
        replicas: layout.table.replicas,
        migrating: layout.previous.is_some(),
        packs: packs.len() as u64,
        backends,
        missing_count: f.missing.len() as u64,
        missing: f.missing.iter().take(named).map(Id::to_hex).collect(),
        under_count: f.under.len() as u64,
        under: f
            .under
            .iter()
            .take(named)
            .map(|(id, lacking)| coffer_ui::UnderReplicated {
                pack: id.to_hex(),
                copies: copies(id),
                lacking: lacking.iter().map(|&i| name(i)).collect(),
            })
            .collect(),
        misplaced: f.misplaced.len() as u64,
        shared_missing: f.shared_missing.len() as u64,
        can_lose: packs.iter().map(copies).min().unwrap_or(u64::from(layout.table.replicas)).checked_sub(1),
    })
}

/// `coffer check --replicas`.
pub fn check(global: &GlobalArgs) -> Result<u8> {
    let (repo, o) = open(global, true)?;
    let layout = &o.layout.1;
    let s = scan(o);
    let f = find(&repo, o, &s, false)?;
    let names: Vec<&str> = layout.backends.iter().map(|b| b.spec.name.as_str()).collect();
    let mut per = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let lacking: Vec<String> = f.under.iter().filter(|(_, l)| l.contains(&i)).map(|(id, _)| id.to_hex()).collect();
        let misplaced: Vec<String> = f.misplaced.iter().filter(|(_, b)| *b == i).map(|(id, _)| id.to_hex()).collect();
        let shared: Vec<&str> = f.shared_missing.iter().filter(|(_, b)| *b == i).map(|(n, _)| n.as_str()).collect();
        per.push(json!({
            "name": name,
            "reachable": s.listed[i].is_ok(),
            "error": s.listed[i].as_ref().err(),
            "packs": s.listed[i].as_ref().map(|m| m.len()).ok(),
            "missing_packs": lacking,
            "misplaced_packs": misplaced,
            "missing_objects": shared,
        }));
    }
    // Copies of one pack differ in size: at least one is damaged.
    let indexed: BTreeSet<Id> = repo.index().packs().iter().map(|p| p.id).collect();
    let differ: Vec<_> =
        super::backend_copies::size_mismatches(&s).into_iter().filter(|(id, _)| indexed.contains(id)).collect();
    let differ_text: Vec<String> = differ
        .iter()
        .map(|(id, sizes)| {
            let each: Vec<String> = sizes.iter().map(|(i, n)| format!("{n} bytes on {}", names[*i])).collect();
            format!("pack {}: its copies differ in size ({}): at least one is damaged", id.to_hex(), each.join(", "))
        })
        .collect();
    let healthy = f.missing.is_empty() && f.under.is_empty() && f.shared_missing.is_empty() && differ.is_empty();
    let under: Vec<String> = f.under.iter().map(|(id, _)| id.to_hex()).collect();
    let missing: Vec<String> = f.missing.iter().map(Id::to_hex).collect();
    if global.json {
        output::json(&json!({
            "type": "replicas_check",
            "ok": healthy,
            "packs": repo.index().packs().len(),
            "replicas": layout.table.replicas,
            "under_replicated": under,
            "missing": missing,
            "misplaced": f.misplaced.len(),
            "sizes_differ": differ.iter().map(|(id, _)| id.to_hex()).collect::<Vec<_>>(),
            "backends": per,
            "storage": repo_open::storage_counts_json(),
        }));
    } else if !global.quiet || !healthy {
        println!(
            "{} indexed, {} each: {} under-replicated, {} missing from every backend, {}",
            output::plural(repo.index().packs().len(), "pack"),
            output::plural(layout.table.replicas, "copy"),
            under.len(),
            missing.len(),
            output::plural(f.misplaced.len(), "misplaced copy")
        );
        for p in &per {
            let n = |k: &str| p[k].as_array().map_or(0, Vec::len);
            match p["error"].as_str() {
                Some(e) => println!("  backend {}: UNREACHABLE: {e}", p["name"].as_str().unwrap_or("")),
                None => println!(
                    "  backend {}: {} packs; lacks {} packs it should hold, holds {} misplaced, lacks {} other objects",
                    p["name"].as_str().unwrap_or(""),
                    p["packs"],
                    n("missing_packs"),
                    n("misplaced_packs"),
                    n("missing_objects")
                ),
            }
            for id in p["missing_packs"].as_array().into_iter().flatten().take(20) {
                println!("    under-replicated pack {}", id.as_str().unwrap_or(""));
            }
        }
        for id in &missing {
            println!("  pack {id}: no backend holds it (data lost unless a backend comes back)");
        }
        for d in &differ_text {
            println!("  {d}");
        }
        if !healthy {
            println!("run `coffer repair --replicas` to restore every copy the layout asks for");
        }
    }
    Ok(if healthy { exit::OK } else { exit::DAMAGED })
}

/// Reads pack `id` from the first holder in `holders` whose bytes hash to its name.
fn verified_pack(o: &replicas::Opened, id: &Id, holders: &[usize]) -> Option<Vec<u8>> {
    let name = ObjectKind::Pack.path(id);
    holders.iter().find_map(|&i| {
        let data = o.backend.member(i)?.read_max(&name, ObjectKind::Pack.max_len()).ok()?;
        (Id::hash_of(&data) == *id).then_some(data)
    })
}

/// Copies every pack to the homes that lack it, and every shared object to the
/// backends that lack it, from copies that verify. Returns (packs, bytes,
/// objects copied, failures).
fn restore_copies(
    repo: &Repository,
    o: &replicas::Opened,
    listed_too: bool,
) -> Result<(usize, u64, usize, Vec<String>)> {
    let s = scan(o);
    let f = find(repo, o, &s, listed_too)?;
    let n = o.layout.1.backends.len();
    let (mut packs, mut bytes, mut objects, mut failures) = (0, 0u64, 0, Vec::new());
    for (id, lacking) in &f.under {
        let holders: Vec<usize> = (0..n).filter(|&i| holds(&s, i, id)).collect();
        let Some(data) = verified_pack(o, id, &holders) else {
            // A pack only listed that is gone now was deleted by a prune meanwhile.
            let gone = || {
                holders.iter().all(|&i| {
                    o.backend.member(i).is_some_and(|b| {
                        b.stat(&ObjectKind::Pack.path(id)).is_err_and(|e| e.kind == coffer_backend::ErrorKind::NotFound)
                    })
                })
            };
            if listed_too && gone() {
                continue;
            }
            failures.push(format!("pack {}: no copy whose bytes hash to its name", id.short()));
            continue;
        };
        for &h in lacking {
            let Some(be) = o.backend.member(h) else {
                failures.push(format!(
                    "pack {}: backend {} has no location here",
                    id.short(),
                    o.layout.1.backends[h].spec.name
                ));
                continue;
            };
            match be.write(&ObjectKind::Pack.path(id), data.clone()) {
                Ok(()) => {
                    packs += 1;
                    bytes += data.len() as u64;
                }
                Err(e) => {
                    failures.push(format!("pack {} to backend {}: {e}", id.short(), o.layout.1.backends[h].spec.name))
                }
            }
        }
    }
    for id in &f.missing {
        failures.push(format!(
            "pack {}: no backend holds it; `coffer repair index` and a new backup store what it held",
            id.short()
        ));
    }
    for (name, i) in &f.shared_missing {
        let Some(to) = o.backend.member(*i) else { continue };
        let source = (0..n).filter(|&j| j != *i).find_map(|j| {
            let data = o.backend.member(j)?.read_max(name, 64 << 20).ok()?;
            let ok = name == "config" || ObjectKind::Index.id_from_path(name).is_none_or(|id| Id::hash_of(&data) == id);
            ok.then_some(data)
        });
        let Some(data) = source else {
            failures.push(format!("{name}: no copy that verifies"));
            continue;
        };
        let r = if name == "config" { to.write_new(name, data).map(drop) } else { to.write(name, data) };
        match r {
            Ok(()) => objects += 1,
            Err(e) => failures.push(format!("{name} to backend {}: {e}", o.layout.1.backends[*i].spec.name)),
        }
    }
    Ok((packs, bytes, objects, failures))
}

/// `coffer repair --replicas`.
pub fn repair(global: &GlobalArgs, read_data: bool) -> Result<u8> {
    let (repo, o) = open(global, true)?;
    let (packs, bytes, objects, mut failures) = restore_copies(&repo, o, false)?;
    // Copies that are there but damaged: those a data check named, those whose
    // sizes differ, and with --read-data every one, each read and hashed.
    let state = repo_open::local_state(&repo).ok();
    let s = scan(o);
    let suspects = super::backend_copies::suspects(&repo, state.as_ref(), &s, read_data)?;
    let replaced = super::backend_copies::replace_damaged(o, &s, &suspects);
    failures.extend(replaced.failures.iter().cloned());
    // Misplaced copies go once every home holds a verified copy; during a
    // migration they are `rebalance`'s to remove.
    let migrating = o.layout.1.previous.is_some();
    let trimmed = if failures.is_empty() && !migrating {
        let t = backend_trim::remove_misplaced(&repo, o, crate::protocol_timing(), &waiting(global))?;
        failures.extend(t.stopped.clone());
        t
    } else {
        backend_trim::Trimmed::default()
    };
    if failures.is_empty()
        && let Ok(state) = repo_open::local_state(&repo)
    {
        let _ = std::fs::remove_file(state.path(replicas::SHORT_FILE));
        let _ = std::fs::remove_file(state.path(super::backend_copies::DAMAGED_FILE));
    }
    if global.json {
        output::json(&json!({
            "packs_copied": packs, "bytes_copied": bytes, "objects_copied": objects,
            "copies_verified": replaced.verified,
            "damaged_replaced": replaced.replaced.iter().map(|(id, b)| json!({"pack": id, "backend": b})).collect::<Vec<_>>(),
            "misplaced_removed": trimmed.removed, "bytes_removed": trimmed.bytes,
            "misplaced_kept": trimmed.unverified.len(), "kept_for_trusted": trimmed.kept_for_trusted,
            "migrating": migrating, "failures": failures,
        }));
    } else if !global.quiet || !failures.is_empty() {
        let (copies, others) = (output::plural(packs, "pack copy"), output::plural(objects, "other object"));
        println!("copied {copies} ({}) and {others}", output::bytes(bytes));
        if !replaced.replaced.is_empty() || read_data {
            println!(
                "replaced {} with verified copies ({}; {} read and hashed)",
                output::plural(replaced.replaced.len(), "damaged pack copy"),
                output::bytes(replaced.bytes),
                output::plural(replaced.verified, "copy")
            );
            for (id, b) in &replaced.replaced {
                println!("  pack {}: the copy on backend {b} was damaged and is replaced", id.short());
            }
        }
        println!("removed {} ({})", output::plural(trimmed.removed, "misplaced copy"), output::bytes(trimmed.bytes));
        if migrating {
            println!(
                "  misplaced copies stay while layout version {} is applied: `coffer rebalance` removes them",
                o.layout.1.version
            );
        }
        if trimmed.kept_for_trusted > 0 {
            println!(
                "  {} misplaced copies stay: layout version {} is not signed by a writer this client trusts, and the \
                 newest trusted layout needs them",
                trimmed.kept_for_trusted, o.layout.1.version
            );
        }
        if !trimmed.unverified.is_empty() {
            println!(
                "  {} packs keep a misplaced copy: a home lacks them or holds a copy that does not verify; run `coffer check --read-data`",
                trimmed.unverified.len()
            );
        }
        for f in &failures {
            println!("  failed: {f}");
        }
    }
    Ok(if failures.is_empty() { exit::OK } else { exit::DAMAGED })
}

/// Tells the user about the grace period before misplaced copies are removed.
fn waiting(global: &GlobalArgs) -> impl Fn(usize, std::time::Duration) + '_ {
    move |n, grace| {
        if !global.quiet && !global.json {
            eprintln!(
                "announced the removal of {n} misplaced pack copies; waiting {} so that running commands see it",
                humantime::format_duration(grace)
            );
        }
    }
}

/// Rounds of copying and removing before `rebalance` gives up (backups writing
/// by an older table may keep adding packs to place).
const REBALANCE_ROUNDS: usize = 3;

/// `coffer rebalance` (docs/design.md#changing-the-backends): in rounds, copies
/// every listed pack to the homes that lack it (verified against its name),
/// removes the misplaced copies through a copy notice and the grace period
/// ([`backend_trim`]), and once a fresh listing shows every pack on exactly its
/// homes, stores a layout version without the previous table and without the
/// backends being removed. Safe to kill at any moment and run again: a copy is
/// idempotent, a removal needs verified copies on every home, and the layout
/// changes last.
pub fn rebalance(global: &GlobalArgs) -> Result<u8> {
    let (repo, o) = open(global, true)?;
    let layout = o.layout.1.clone();
    let removing = layout.backends.iter().any(|b| b.state == BackendState::Removing);
    let applied = layout.previous.is_none() && !removing;
    let (mut packs, mut bytes, mut objects, mut removed, mut removed_bytes) = (0, 0u64, 0, 0, 0u64);
    let mut placed = false;
    for _ in 0..REBALANCE_ROUNDS {
        let (p, b, obj, failures) = restore_copies(&repo, o, true)?;
        (packs, bytes, objects) = (packs + p, bytes + b, objects + obj);
        if !failures.is_empty() {
            for f in &failures {
                eprintln!("rebalance: {f}");
            }
            bail!(
                "rebalance copied {packs} pack copies but {} copies failed; run it again once the backends answer",
                failures.len()
            );
        }
        let t = backend_trim::remove_misplaced(&repo, o, crate::protocol_timing(), &waiting(global))?;
        (removed, removed_bytes) = (removed + t.removed, removed_bytes + t.bytes);
        if let Some(why) = t.stopped {
            bail!("rebalance stopped after removing {removed} misplaced copies: {why}");
        }
        if t.kept_for_trusted > 0 {
            bail!(
                "rebalance kept {} misplaced copies: layout version {} is not signed by a writer this client trusts, \
                 and the newest layout a trusted writer signed needs them (it keeps more copies); `coffer writers` \
                 lists the writers, `coffer writers trust KEY` trusts one",
                t.kept_for_trusted,
                layout.version
            );
        }
        // A pack a running backup is still writing to its homes may lack one for
        // now (that backup completes it); any other must be at all its homes.
        let s = scan(o);
        let f = find(&repo, o, &s, true)?;
        let indexed: BTreeSet<Id> = repo.index().packs().iter().map(|p| p.id).collect();
        if f.misplaced.is_empty() && f.under.iter().all(|(id, _)| !indexed.contains(id)) {
            placed = true;
            break;
        }
    }
    if !placed {
        bail!(
            "after {REBALANCE_ROUNDS} rounds some packs are still not on exactly their homes (backups writing by an \
             older layout, or a home whose copy does not verify): run `coffer check --replicas`, then `coffer rebalance` again"
        );
    }
    let summary = |g: &GlobalArgs, version: u64, id: Option<Id>| {
        if g.json {
            output::json(&json!({
                "packs_copied": packs, "bytes_copied": bytes, "objects_copied": objects,
                "misplaced_removed": removed, "bytes_removed": removed_bytes, "layout": id, "version": version,
            }));
        } else if !g.quiet {
            println!(
                "copied {packs} pack copies ({}) and {objects} other objects; removed {removed} misplaced copies ({})",
                output::bytes(bytes),
                output::bytes(removed_bytes)
            );
            match id {
                Some(id) => println!("layout version {version} ({}) is now in force", id.short()),
                None => println!("layout version {version} was already applied"),
            }
        }
    };
    if applied {
        summary(global, layout.version, None);
        return Ok(exit::OK);
    }
    // Every pack is at its homes, and only there: the migration is over.
    let keep: Vec<usize> =
        (0..layout.backends.len()).filter(|&i| layout.backends[i].state == BackendState::Active).collect();
    let remap = |t: &Table| Table {
        owners: t.owners.iter().map(|&x| keep.iter().position(|&k| k == x as usize).unwrap_or(0) as u16).collect(),
        ..t.clone()
    };
    let next = Layout {
        version: next_version(&layout),
        time: now(),
        backends: keep.iter().map(|&i| layout.backends[i].clone()).collect(),
        table: remap(&layout.table),
        previous: None,
        ..layout.clone()
    };
    let members = keep.iter().map(|&i| (layout.backends[i].spec.name.clone(), o.backend.member(i).cloned())).collect();
    let id = store_layout(repo, &next, Some(members))?;
    summary(global, next.version, Some(id));
    Ok(exit::OK)
}

/// The layout version after `layout` that moves to `table` over `backends`,
/// keeping `layout`'s table as the one being migrated from.
fn migration(layout: &Layout, backends: Vec<LayoutBackend>, table: Table) -> Layout {
    Layout {
        version: next_version(layout),
        time: now(),
        backends,
        previous: Some(layout.table.clone()),
        table,
        ..layout.clone()
    }
}
