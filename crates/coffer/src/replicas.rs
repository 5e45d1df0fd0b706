//! A repository over several backends, on the command line's side: where this
//! client finds each backend (its local file `backends` and the environment),
//! composing the replicated storage from them once the layout is read, and
//! reporting what a degraded write left short. See docs/design.md#many-backends.
//!
//! The layout (stored, signed, on every backend) names the backends; their
//! locations and credentials never enter the repository. This client keeps them
//! in `<local state>/<repository id>/backends`, one `NAME<TAB>LOCATION` line
//! each, written by `init --replicas` and `backend add`; `COFFER_BACKEND_<NAME>`
//! (the name upper-cased, `-` and `.` as `_`) overrides a line.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use anyhow::{Context, Result, bail};
use coffer_backend::location::Location;
use coffer_backend::placement::{BackendSpec, Table};
use coffer_backend::{Backend, ReplicatedBackend};
use coffer_core::Id;
use coffer_core::format::layout::Layout;
use coffer_core::local_state::LocalState;
use coffer_core::repo::Repository;

use crate::args::GlobalArgs;

/// The local state file holding backend locations.
pub const BACKENDS_FILE: &str = "backends";

/// The local state file listing objects a degraded write left short.
pub const SHORT_FILE: &str = "replicas-short";

/// The replicated storage this command opened, with its layout, for the
/// commands that look at backends one by one.
pub struct Opened {
    /// The replicated backend (also below the repository).
    pub backend: Arc<ReplicatedBackend>,
    /// The layout followed and its id: the current one, unless it lowers
    /// protection and no trusted writer signed it ([`Repository::choose_layout`]).
    pub layout: (Id, Layout),
    /// The newest layout signed by a writer this client trusts, if any: no copy
    /// it needs is removed while its protection is not met under `layout`.
    pub trusted: Option<(Id, Layout)>,
    /// The highest version of any valid layout: a new one must exceed it.
    pub newest_version: u64,
    /// The members' locations as this client knows them (`None`: unknown).
    pub locations: Vec<Option<String>>,
    /// Why a member has no backend here (unknown location, or it did not open).
    pub problems: Vec<Option<String>>,
}

static OPENED: OnceLock<Arc<Opened>> = OnceLock::new();

/// Every replicated storage this process opened, by the location it was
/// reached at (the UI opens several repositories).
static ALL_OPENED: Mutex<Vec<(String, Arc<Opened>)>> = Mutex::new(Vec::new());

/// The local state directory this command used, for [`report_short`].
static STATE: Mutex<Option<LocalState>> = Mutex::new(None);

/// The replicated storage opened by this command, if the repository has a layout.
pub fn opened() -> Option<&'static Opened> {
    OPENED.get().map(|o| &**o)
}

/// The replicated storage opened through `location`, if that repository has a layout.
pub fn opened_at(location: &str) -> Option<Arc<Opened>> {
    let all = ALL_OPENED.lock().unwrap_or_else(|e| e.into_inner());
    all.iter().rev().find(|(l, _)| l == location).map(|(_, o)| o.clone())
}

/// The environment variable that gives backend `name`'s location.
pub fn env_var(name: &str) -> String {
    let n: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_uppercase() } else { '_' }).collect();
    format!("COFFER_BACKEND_{n}")
}

/// The locations this client remembers, by backend name.
pub fn read_locations(state: &LocalState) -> Result<BTreeMap<String, String>> {
    let Some(bytes) = state.read(BACKENDS_FILE)? else { return Ok(BTreeMap::new()) };
    let text = String::from_utf8(bytes)
        .with_context(|| format!("{} is not UTF-8: fix or delete it", state.path(BACKENDS_FILE).display()))?;
    let mut out = BTreeMap::new();
    for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty() && !l.starts_with('#')) {
        let Some((name, loc)) = line.split_once('\t') else {
            bail!(
                "{} line {}: expected NAME<TAB>LOCATION; fix or delete the line",
                state.path(BACKENDS_FILE).display(),
                n + 1
            );
        };
        out.insert(name.trim().to_string(), loc.trim().to_string());
    }
    Ok(out)
}

/// Replaces the remembered locations.
pub fn write_locations(state: &LocalState, locations: &BTreeMap<String, String>) -> Result<()> {
    let mut text =
        String::from("# coffer: where this client finds each backend of the repository (NAME<TAB>LOCATION)\n");
    for (name, loc) in locations {
        text.push_str(&format!("{name}\t{loc}\n"));
    }
    state.write(BACKENDS_FILE, text.as_bytes())?;
    Ok(())
}

/// Parses `NAME:SIZE[:ZONE]=LOCATION` (`init --backend`).
pub fn parse_spec(s: &str) -> Result<(BackendSpec, String)> {
    let (left, location) =
        s.split_once('=').with_context(|| format!("--backend {s:?}: expected NAME:SIZE[:ZONE]=LOCATION"))?;
    let mut parts = left.split(':');
    let name = parts.next().unwrap_or("").to_string();
    let size = parts.next().with_context(|| format!("--backend {s:?}: give its capacity, as in {name}:2T=…"))?;
    let zone = parts.next().filter(|z| !z.is_empty()).map(str::to_string);
    if parts.next().is_some() {
        bail!("--backend {s:?}: expected NAME:SIZE[:ZONE]=LOCATION");
    }
    let capacity = crate::args::parse_size(size).map_err(|e| anyhow::anyhow!("--backend {s:?}: {e}"))?;
    check_name(&name)?;
    Ok((BackendSpec { name, capacity, zone }, location.to_string()))
}

/// Refuses a name a layout cannot hold.
pub fn check_name(name: &str) -> Result<()> {
    if !coffer_core::format::layout::valid_name(name) {
        bail!("backend name {name:?}: use 1 to 64 letters, digits, '.', '_' or '-', not starting with '.' or '-'");
    }
    Ok(())
}

/// The storage stack of one member: the stack of [`crate::repo_open::backend`]
/// for its location, with `COFFER_TEST_FAULTS_<NAME>` (tests) injecting faults
/// into this member alone.
pub fn member_backend(name: &str, location: &str) -> Result<Arc<dyn Backend>> {
    let loc = Location::parse(location).with_context(|| format!("backend {name}"))?;
    if loc.local_path().is_some_and(|p| !p.is_dir()) {
        bail!("backend {name}: the directory {location} does not exist");
    }
    crate::repo_open::backend_stack_for(&loc, coffer_backend::Modes::PRIVATE, name)
        .with_context(|| format!("backend {name}"))
}

/// After the repository at `bootstrap_location` (opened over `bootstrap`) is
/// unlocked: if it has a layout, the same repository over all its backends.
/// A backend whose location is unknown or does not open is left out with a
/// warning; reads go to the others.
pub fn compose(
    global: &GlobalArgs,
    repo: Repository,
    bootstrap: Arc<dyn Backend>,
    bootstrap_location: &str,
) -> Result<Repository> {
    let trusted = crate::repo_open::trusted_writers(&repo)?;
    let choice = repo.choose_layout(&trusted)?;
    for e in &choice.refused {
        crate::repo_open::warn(global, &e.to_string());
    }
    for n in &choice.notes {
        crate::repo_open::warn(global, n);
    }
    let (trusted_layout, newest_version) = (choice.trusted.clone(), choice.newest_version);
    let Some((id, layout)) = choice.followed else { return Ok(repo) };
    let state = crate::repo_open::local_state(&repo)?;
    *STATE.lock().unwrap_or_else(|e| e.into_inner()) = Some(state.clone());
    let remembered = read_locations(&state)?;
    let mut locations = Vec::new();
    let mut members = Vec::new();
    let mut problems = Vec::new();
    for b in &layout.backends {
        let name = &b.spec.name;
        let location = std::env::var(env_var(name)).ok().filter(|v| !v.is_empty()).or(remembered.get(name).cloned());
        let backend = match &location {
            Some(l) if Location::parse(l).is_ok_and(|x| x.to_string() == bootstrap_location) => Some(bootstrap.clone()),
            Some(l) => match member_backend(name, l) {
                Ok(be) => Some(be),
                Err(e) => {
                    problems.push(Some(format!("{e:#}")));
                    None
                }
            },
            None => {
                problems.push(Some(format!(
                    "backend {name}: this client does not know its location; set {} (or add its line to {})",
                    env_var(name),
                    state.path(BACKENDS_FILE).display()
                )));
                None
            }
        };
        if backend.is_some() {
            problems.push(None);
        }
        if let Some(Some(p)) = problems.last().filter(|_| backend.is_none()) {
            crate::repo_open::warn(global, &format!("{p}; reading from the other backends"));
        }
        locations.push(location);
        members.push((name.clone(), backend));
    }
    let mut replicated = ReplicatedBackend::new(members, layout.table.clone())?;
    if let Some(prev) = &layout.previous {
        replicated = replicated.with_previous(prev.clone())?;
    }
    if let Some(n) = global.min_copies {
        replicated = replicated.with_min_copies(n as usize);
    }
    let replicated = Arc::new(replicated);
    let repo = repo.with_backend(replicated.clone());
    let opened = Arc::new(Opened {
        backend: replicated,
        layout: (id, layout),
        trusted: trusted_layout,
        newest_version,
        locations,
        problems,
    });
    let _ = OPENED.set(opened.clone());
    ALL_OPENED.lock().unwrap_or_else(|e| e.into_inner()).push((bootstrap_location.to_string(), opened));
    Ok(repo)
}

/// Warns of every object a degraded write left short, and adds them to the local
/// state file [`SHORT_FILE`] for `coffer repair --replicas`.
pub fn report_short(global: &GlobalArgs) {
    let Some(o) = opened() else { return };
    let short = o.backend.take_short();
    if short.is_empty() {
        return;
    }
    let packs = short.iter().filter(|s| s.object.starts_with("data/")).count();
    let mut by_backend: BTreeMap<&str, usize> = BTreeMap::new();
    for s in &short {
        for m in &s.missing {
            *by_backend.entry(m.as_str()).or_default() += 1;
        }
    }
    let per: Vec<String> = by_backend.iter().map(|(b, n)| format!("{n} on {b}")).collect();
    let mut message = format!(
        "{} ({}) {} stored with fewer copies than the layout asks ({} missing); run \
         `coffer repair --replicas` once the backends are back",
        crate::output::plural(short.len(), "object"),
        crate::output::plural(packs, "pack"),
        if short.len() == 1 { "was" } else { "were" },
        per.join(", ")
    );
    if let Some(state) = STATE.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
        let mut text = state.read(SHORT_FILE).ok().flatten().unwrap_or_default();
        for s in &short {
            text.extend_from_slice(format!("{}\t{}\n", s.object, s.missing.join(",")).as_bytes());
        }
        match state.write(SHORT_FILE, &text) {
            Ok(()) => message.push_str(&format!(" (listed in {})", state.path(SHORT_FILE).display())),
            Err(e) => message.push_str(&format!(" (could not remember them: {e})")),
        }
    }
    if global.json {
        let objects: Vec<_> =
            short.iter().map(|s| serde_json::json!({"object": s.object, "missing": s.missing})).collect();
        eprintln!("{}", serde_json::json!({"type": "under_replicated", "message": message, "objects": objects}));
    } else {
        eprintln!("warning: {message}");
    }
}

/// The placement table for `backends` (capacity 0: owns nothing) keeping
/// `replicas` copies over `partitions`, moving as little as it can from
/// `previous` (docs/design.md#placement).
pub fn place(backends: &[BackendSpec], replicas: u8, partitions: u32, previous: Option<&Table>) -> Result<Table> {
    Ok(coffer_backend::placement::assign(backends, replicas, partitions, previous)?)
}

/// Where a backend's objects lie, to compare backends: a local directory by its
/// real path (links resolved as far as it exists), any other location by its
/// normal form.
fn place_of(location: &str) -> Result<PathBuf> {
    let loc = Location::parse(location)?;
    let Some(path) = loc.local_path() else { return Ok(PathBuf::from(loc.to_string())) };
    let absolute = std::path::absolute(path).with_context(|| format!("cannot resolve the directory {location}"))?;
    let mut existing = absolute.as_path();
    let mut rest = Vec::new();
    let real = loop {
        match existing.canonicalize() {
            Ok(real) => break real,
            // The last component, `..` included, is taken off and kept for later.
            Err(_) => match (existing.parent(), existing.components().next_back()) {
                (Some(parent), Some(last)) => {
                    rest.push(last.as_os_str().to_owned());
                    existing = parent;
                }
                _ => break existing.to_path_buf(),
            },
        }
    };
    // What does not exist yet holds no link: `..` there is read as written.
    Ok(rest.iter().rev().fold(real, |mut p, name| {
        if name == ".." {
            p.pop();
        } else if name != "." {
            p.push(name);
        }
        p
    }))
}

/// Refuses backends of one repository that share storage: two on the same
/// directory (or prefix of a bucket), or one inside another, would hold each
/// other's objects, and one of them would find a repository already there.
/// `backends` are (name, location); only pairs with one of the last `new` of
/// them are compared (`init` compares all, `backend add` the one it adds with
/// the others). Checked before anything is created.
pub fn refuse_overlapping(backends: &[(String, String)], new: usize) -> Result<()> {
    let mut places = Vec::new();
    for (name, location) in backends {
        let place = place_of(location).with_context(|| format!("backend {name}"))?;
        places.push((name, location, place));
    }
    let first_new = places.len().saturating_sub(new);
    for (i, (name_a, loc_a, a)) in places.iter().enumerate() {
        for (name_b, loc_b, b) in places[i + 1..].iter().skip(first_new.saturating_sub(i + 1)) {
            if name_a == name_b {
                // Two backends of one name: refused as such with the other checks.
                continue;
            }
            let relation = if a == b {
                "is the same place as"
            } else if b.starts_with(a) {
                "holds"
            } else if a.starts_with(b) {
                "is inside"
            } else {
                continue;
            };
            bail!(
                "backend {name_a} ({loc_a}) {relation} backend {name_b} ({loc_b}): the backends of a repository must \
                 not share storage, or one copy would overwrite another; give each its own directory or bucket"
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backends_sharing_storage_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display();
        std::fs::create_dir(dir.path().join("real")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("real"), dir.path().join("link")).unwrap();
        let spec = |name: &str, loc: String| (name.to_string(), loc);
        let refused = [
            (spec("a", format!("{d}/x")), spec("b", format!("{d}/x/"))),
            (spec("a", format!("{d}/x")), spec("b", format!("{d}/y/../x"))),
            (spec("a", format!("{d}/x")), spec("b", format!("{d}/x/inner"))),
            (spec("a", format!("{d}/real/r")), spec("b", format!("{d}/link/r"))),
            (spec("a", "s3:http://h:1/b/p".into()), spec("b", "s3:http://h:1/b/p/q".into())),
        ];
        for (x, y) in refused {
            let e = refuse_overlapping(&[x.clone(), y.clone()], 2).unwrap_err().to_string();
            assert!(e.contains("backend a") && e.contains("backend b"), "{x:?} {y:?}: {e}");
            // Added to a repository that has the other.
            refuse_overlapping(&[x.clone(), y.clone()], 1).unwrap_err();
        }
        let apart = [spec("a", format!("{d}/x")), spec("b", format!("{d}/xy")), spec("c", "s3:http://h:1/b/p2".into())];
        refuse_overlapping(&apart, 3).unwrap();
        // Backends already in a layout are not compared with each other.
        let both = [spec("a", format!("{d}/x")), spec("b", format!("{d}/x")), spec("c", format!("{d}/z"))];
        refuse_overlapping(&both, 1).unwrap();
        refuse_overlapping(&both, 2).unwrap_err();
        assert!(!dir.path().join("x").exists(), "nothing is created");
    }

    fn spec(name: &str, capacity: u64, zone: Option<&str>) -> BackendSpec {
        BackendSpec { name: name.into(), capacity, zone: zone.map(Into::into) }
    }

    #[test]
    fn specs_parse_and_bad_ones_say_why() {
        let (s, loc) = parse_spec("a:2G:eu=s3://bucket/x").unwrap();
        assert_eq!(s, spec("a", 2 << 30, Some("eu")));
        assert_eq!(loc, "s3://bucket/x");
        assert!(parse_spec("a=/x").unwrap_err().to_string().contains("capacity"));
        assert!(parse_spec("a/b:1G=/x").is_err());
        assert!(parse_spec("a:1G").is_err());
        assert_eq!(env_var("disk-2.eu"), "COFFER_BACKEND_DISK_2_EU");
    }

    #[test]
    fn a_removed_backend_owns_nothing_and_adding_one_moves_little() {
        let b = vec![spec("a", 1, None), spec("b", 1, None), spec("c", 2, None)];
        let t = place(&b, 2, 1024, None).unwrap();
        let count = |t: &Table, i: u16| t.owners.iter().filter(|&&o| o == i).count();
        assert_eq!(count(&t, 2), 1024, "the largest backend holds one copy of everything");
        let mut grown = b.clone();
        grown.push(spec("d", 2, None));
        let t2 = place(&grown, 2, 1024, Some(&t)).unwrap();
        assert!(coffer_backend::placement::moved(&t, &t2) as usize <= count(&t2, 3) + 20);
        let removed = vec![spec("a", 1, None), spec("b", 0, None), spec("c", 1, None)];
        assert_eq!(count(&place(&removed, 2, 1024, Some(&t)).unwrap(), 1), 0);
        assert!(place(&removed, 3, 64, None).is_err());
    }
}
