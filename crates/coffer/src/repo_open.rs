//! Finding and opening the repository named on the command line: the location
//! (docs/design.md#locations), and the one place where the storage stack is
//! composed: the backend for the location (local directory or an OpenDAL
//! service), the bandwidth limits (docs/design.md#limits), fault injection for
//! tests, request counting, retries that are reported as they happen
//! (docs/design.md#storage-contract), and the local
//! cache on top, attached once the repository id is known
//! (docs/design.md#local-cache).

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use anyhow::{Context, Result};
use coffer_backend::location::Location;
use coffer_backend::{
    Backend, CREDENTIAL_VARIABLES, Cache, CacheSlot, CachingBackend, CountingBackend, Counts, CountsHandle,
    DEFAULT_MEMORY_RANGES, Faults, FaultyBackend, LocalBackend, MemoryRanges, Modes, OpendalBackend, RemoteOptions,
    RetryBackend, RetryPolicy, Throttle, ThrottledBackend,
};
use coffer_core::Id;
use coffer_core::format::ObjectKind;
use coffer_core::format::snapshot::Snapshot;
use coffer_core::repo::history::{HEADS_FILE, History};
use coffer_core::repo::{INDEX_FILE_SKIPPED, InitOptions, Repository, SnapshotFilter};

use crate::args::GlobalArgs;
use crate::password::{self, Purpose};

/// The default repository: `$XDG_DATA_HOME/coffer/repo`, else `~/.local/share/coffer/repo`.
pub fn default_location() -> Result<PathBuf> {
    if let Some(d) = std::env::var_os("XDG_DATA_HOME").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(d).join("coffer/repo"));
    }
    let home = dirs::home_dir().context("cannot find the home directory for the default repository: pass --repo")?;
    Ok(home.join(".local/share/coffer/repo"))
}

/// What the storage stack needs from the command line, kept when the location
/// is first asked for (every command asks for it before opening storage).
#[derive(Clone, Debug, Default)]
struct StorageSettings {
    json: bool,
    connections: Option<usize>,
    /// The certificates of `--cacert` (PEM), read and checked.
    cacert: Option<Vec<u8>>,
    /// `--cache-dir`, `--no-cache`, `--cache-size`.
    cache_dir: Option<PathBuf>,
    no_cache: bool,
    cache_size: u64,
    /// A profile's `[storage]` variables.
    profile_vars: std::collections::BTreeMap<String, String>,
    /// `--limit-upload` and `--limit-download`, KiB per second.
    limit_upload: Option<u32>,
    limit_download: Option<u32>,
}

static SETTINGS: OnceLock<StorageSettings> = OnceLock::new();

/// Reads and checks `--cacert`, whatever the location (a mistaken file is
/// reported, not ignored until a remote location needs it).
fn read_cacert(path: &std::path::Path) -> Result<Vec<u8>> {
    use crate::local_input::{Kind, Limit};
    let pem = crate::local_input::read_all(path, "--cacert", Kind::File, Limit::CERTIFICATES)?;
    coffer_backend::check_cacert(&pem).map_err(|e| {
        anyhow::anyhow!(
            "--cacert {}: {e}; give a file of PEM certificates (the CA that signed the server's)",
            path.display()
        )
    })?;
    Ok(pem)
}

/// The request counts of the storage opened by this command (one per backend of
/// a repository over several), once it is open.
static COUNTS: std::sync::Mutex<Vec<CountsHandle>> = std::sync::Mutex::new(Vec::new());

/// The local cache attached to the repository this command opened.
static CACHE: OnceLock<Arc<Cache>> = OnceLock::new();

/// The bandwidth limits of this command: one bucket per direction, which every
/// storage stack it builds shares (the members of a repository over several
/// backends, and both repositories of `copy`), over all of its threads.
static THROTTLE: OnceLock<Throttle> = OnceLock::new();

/// The command's [`THROTTLE`], made from the settings on first use.
fn throttle(settings: &StorageSettings) -> Throttle {
    let bytes = |kib: Option<u32>| kib.and_then(|k| std::num::NonZeroU64::new(u64::from(k) * 1024));
    THROTTLE.get_or_init(|| Throttle::new(bytes(settings.limit_upload), bytes(settings.limit_download))).clone()
}

/// The cache slots of the members of a repository over several backends
/// ([`backend_stack_for`]), each with whether its location is remote: the local
/// cache attaches to them as to the location's own (docs/design.md#local-cache).
static MEMBER_SLOTS: Mutex<Vec<(bool, CacheSlot)>> = Mutex::new(Vec::new());

fn settings() -> StorageSettings {
    SETTINGS.get().cloned().unwrap_or_default()
}

/// Where the repository is, and whether it is the embedded default. A location
/// that names no storage coffer knows is an error, never a local directory.
pub fn location(global: &GlobalArgs) -> Result<(Location, bool)> {
    let cacert = match (&global.cacert, SETTINGS.get()) {
        (_, Some(known)) => known.cacert.clone(),
        (Some(p), None) => Some(read_cacert(p)?),
        (None, None) => None,
    };
    let _ = SETTINGS.set(StorageSettings {
        json: global.json,
        connections: global.connections.map(usize::from),
        cacert,
        cache_dir: global.cache_dir.clone(),
        no_cache: global.no_cache || global.reads_storage_only,
        cache_size: global.cache_size,
        profile_vars: global.storage_vars.clone(),
        limit_upload: global.limit_upload,
        limit_download: global.limit_download,
    });
    match &global.repo {
        Some(r) => Ok((Location::parse(r)?, false)),
        None => Ok((Location::Local(default_location()?), true)),
    }
}

/// The requests and bytes this command sent to its storage so far; `None`
/// before any storage was opened.
pub fn storage_counts() -> Option<Counts> {
    let handles = COUNTS.lock().unwrap_or_else(|e| e.into_inner());
    handles.iter().map(CountsHandle::get).reduce(|a, b| Counts {
        put: a.put + b.put,
        get: a.get + b.get,
        head: a.head + b.head,
        list: a.list + b.list,
        delete: a.delete + b.delete,
        bytes_up: a.bytes_up + b.bytes_up,
        bytes_down: a.bytes_down + b.bytes_down,
        rounds: a.rounds + b.rounds,
        // Percentiles do not add up: the slower storage's, figure by figure.
        latency_us: coffer_backend::Latency {
            p50: a.latency_us.p50.max(b.latency_us.p50),
            p99: a.latency_us.p99.max(b.latency_us.p99),
            max: a.latency_us.max.max(b.latency_us.max),
        },
    })
}

/// The counts as a JSON object, for `--json` summaries (`null` before storage
/// was opened).
pub fn storage_counts_json() -> serde_json::Value {
    storage_counts().map_or(serde_json::Value::Null, |c| counts_json(&c))
}

/// Prints the storage counts on stderr (for `--verbose`): a text line, or a JSON
/// line of type `storage` with `--json`; and what the local cache did, if one
/// was used.
pub fn report_storage_counts(json: bool) {
    let Some(c) = storage_counts() else { return };
    let cache = CACHE.get().map(|c| c.stats());
    if json {
        let cache = cache.map(|s| {
            serde_json::json!({"hits": s.hits, "misses": s.misses, "hit_bytes": s.hit_bytes, "stored": s.stored,
                               "dropped": s.dropped, "evicted": s.evicted})
        });
        eprintln!("{}", serde_json::json!({"type": "storage", "requests": storage_counts_json(), "cache": cache}));
    } else {
        if let Some(s) = cache {
            eprintln!(
                "cache: {} hits ({}), {} misses, {} stored, {} dropped as damaged, {} evicted",
                s.hits,
                crate::output::bytes(s.hit_bytes),
                s.misses,
                s.stored,
                s.dropped,
                s.evicted
            );
        }
        eprintln!(
            "storage: {} PUT, {} GET, {} HEAD, {} LIST, {} DELETE; {} up, {} down; {} rounds; latency p50 {:.1} ms, \
             p99 {:.1} ms, max {:.1} ms",
            c.put,
            c.get,
            c.head,
            c.list,
            c.delete,
            crate::output::bytes(c.bytes_up),
            crate::output::bytes(c.bytes_down),
            c.rounds,
            c.latency_us.p50 as f64 / 1000.0,
            c.latency_us.p99 as f64 / 1000.0,
            c.latency_us.max as f64 / 1000.0
        );
    }
}

/// Opens the storage backend at `loc`, with transient errors retried.
///
/// Two variables exist for tests (read by debug builds only, see
/// `crate::test_knobs`): `COFFER_TEST_FAULTS` injects storage faults (see
/// `coffer_backend::Faults::parse`), and `COFFER_RETRY_BASE_MS` sets the first
/// retry delay.
pub fn backend(loc: &Location) -> Result<Arc<dyn Backend>> {
    Ok(backend_with_modes(loc, Modes::PRIVATE)?.0)
}

/// The options of a remote location: credentials from the environment (the
/// variables of `coffer_backend::opendal::CREDENTIAL_VARIABLES`), else from the
/// profile's `[storage]` table, `--connections` and `--cacert`.
fn remote_options(settings: &StorageSettings) -> Result<RemoteOptions> {
    let vars = CREDENTIAL_VARIABLES
        .iter()
        .filter_map(|k| {
            let v = std::env::var(k).ok().filter(|v| !v.is_empty()).or_else(|| settings.profile_vars.get(*k).cloned());
            v.map(|v| (k.to_string(), v))
        })
        .collect();
    Ok(RemoteOptions {
        vars,
        connections: settings.connections,
        cacert: settings.cacert.clone(),
        ..RemoteOptions::default()
    })
}

/// [`backend`], creating files with `modes` until the repository's `config`
/// exists (from then on, they take the mode of `config`). The stack, from the
/// storage up: the backend, the bandwidth limits (right on the storage, below
/// the retries: every attempt pays for its bytes), the fault injector (tests),
/// the request counter (below the retries, so that it counts every attempt), the retries, and the
/// local cache (above the counter, so that a hit is no request), which is
/// attached to the slot returned once the repository id is known.
fn backend_with_modes(loc: &Location, modes: Modes) -> Result<(Arc<dyn Backend>, CacheSlot)> {
    let (be, counts, slot) = storage_stack(loc, modes, test_faults())?;
    COUNTS.lock().unwrap_or_else(|e| e.into_inner()).push(counts);
    Ok((be, slot))
}

/// `COFFER_TEST_FAULTS` (tests): the faults to inject into the storage.
fn test_faults() -> Option<String> {
    crate::test_knobs::get("COFFER_TEST_FAULTS")
}

/// The storage stack for backend `name` of a repository over several, created
/// with `modes`; `COFFER_TEST_FAULTS_<NAME>` (tests) injects faults into it alone.
pub fn backend_stack_for(loc: &Location, modes: Modes, name: &str) -> Result<Arc<dyn Backend>> {
    let var = crate::replicas::env_var(name).replacen("COFFER_BACKEND_", "COFFER_TEST_FAULTS_", 1);
    let faults = crate::test_knobs::get(&var);
    let (be, counts, slot) = storage_stack(loc, modes, faults.or_else(test_faults))?;
    COUNTS.lock().unwrap_or_else(|e| e.into_inner()).push(counts);
    MEMBER_SLOTS.lock().unwrap_or_else(|e| e.into_inner()).push((loc.local_path().is_none(), slot));
    Ok(be)
}

/// The storage stack for `loc` (see [`backend_with_modes`]) with `faults`
/// injected, its own request counts (a command's counts add those of every
/// backend it opened; the source of `copy` keeps its own apart), and the slot
/// its cache attaches to.
fn storage_stack(
    loc: &Location,
    modes: Modes,
    faults: Option<String>,
) -> Result<(Arc<dyn Backend>, CountsHandle, CacheSlot)> {
    let settings = settings();
    let base: Arc<dyn Backend> = match loc {
        Location::Local(path) => {
            let mut be = LocalBackend::with_modes(path, modes)
                .with_context(|| format!("cannot open repository storage at {}", path.display()))?;
            if let Some(n) = settings.connections {
                be = be.with_connections(n);
            }
            Arc::new(be)
        }
        remote => Arc::new(
            OpendalBackend::open(remote, &remote_options(&settings)?)
                .map_err(coffer_core::Error::Backend)
                .with_context(|| format!("cannot open repository storage at {remote}"))?,
        ),
    };
    let limits = throttle(&settings);
    let base: Arc<dyn Backend> =
        if limits.is_unlimited() { base } else { Arc::new(ThrottledBackend::new(base, limits)) };
    let mut policy = RetryPolicy::default();
    if let Some(ms) = crate::test_knobs::get("COFFER_RETRY_BASE_MS").and_then(|v| v.parse().ok()) {
        policy.base_delay = std::time::Duration::from_millis(ms);
    }
    let inner: Arc<dyn Backend> = match faults {
        Some(spec) => {
            let faults = Faults::parse(&spec).map_err(|e| anyhow::anyhow!("COFFER_TEST_FAULTS: {e}"))?;
            Arc::new(FaultyBackend::new(base, faults))
        }
        None => base,
    };
    let counting = CountingBackend::new(inner);
    let counts = counting.handle();
    let json = settings.json;
    let lines = RetryLines::default();
    let retry = RetryBackend::new(counting, policy).on_retry(move |e| {
        if json {
            eprintln!(
                "{}",
                serde_json::json!({
                    "type": "retry", "object": e.object, "attempt": e.attempt, "attempts": e.attempts,
                    "delay_ms": e.delay.as_millis() as u64, "error": e.error.to_string(),
                })
            );
        } else if let Some(hidden) = lines.admit(e.attempt, std::time::Instant::now()) {
            let others = match hidden {
                0 => String::new(),
                n => format!(" ({n} more retried since the line before)"),
            };
            eprintln!(
                "storage: retrying {} in {:.1}s (attempt {} of {}){others}: {}",
                e.object,
                e.delay.as_secs_f64(),
                e.attempt,
                e.attempts,
                e.error
            );
        }
    });
    // The cache sits above the counter: a hit is no request to the storage.
    let slot = CacheSlot::new();
    Ok((Arc::new(CachingBackend::new(retry, slot.clone())), counts, slot))
}

/// Which retries a terminal is told of. Requests sent together fail together
/// (a storage that cannot be reached fails every request of a round), and a
/// line for each would bury the screen: within [`RetryLines::WITHIN`] of the
/// last line, only an attempt number higher than any told of gets a line (the
/// requests of a round need not keep in step: one may be at its fourth attempt
/// while another makes its second), the others counted on the next line.
/// `--json` has an event for every retry.
#[derive(Default)]
struct RetryLines {
    /// The attempt the last line told of, and when: within the window, the highest told of.
    last: Mutex<Option<(u32, std::time::Instant)>>,
    hidden: std::sync::atomic::AtomicU64,
}

impl RetryLines {
    const WITHIN: std::time::Duration = std::time::Duration::from_secs(2);

    /// Whether a retry that makes attempt `attempt` at `now` gets a line, and
    /// then how many were left out since the last line.
    fn admit(&self, attempt: u32, now: std::time::Instant) -> Option<u64> {
        use std::sync::atomic::Ordering::Relaxed;
        let mut last = self.last.lock().expect("poisoned");
        if last.is_some_and(|(a, at)| attempt <= a && now.duration_since(at) < Self::WITHIN) {
            self.hidden.fetch_add(1, Relaxed);
            return None;
        }
        *last = Some((attempt, now));
        Some(self.hidden.swap(0, Relaxed))
    }
}

/// Where the local caches are kept: `--cache-dir`, else `$XDG_CACHE_HOME/coffer`,
/// else `~/.cache/coffer`.
pub fn cache_base(global: &GlobalArgs) -> Result<PathBuf> {
    if let Some(d) = &global.cache_dir {
        return Ok(d.clone());
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(d).join("coffer"));
    }
    let home = dirs::home_dir().context("cannot find the home directory for the cache: pass --cache-dir")?;
    Ok(home.join(".cache/coffer"))
}

/// Attaches the local cache of `repo` (at `loc`) to its storage: a remote
/// repository gets one, a local one only with `--cache-dir`; none with
/// `--no-cache`. Over several backends, the same applies to each member: the
/// remote ones share the repository's cache. A cache that cannot be opened is
/// warned of, and the command goes on without it. A remote repository without
/// a cache keeps the tree blobs it reads in memory for the command
/// ([`MemoryRanges`]).
fn attach_cache(global: &GlobalArgs, loc: &Location, repo: &Repository, slot: &CacheSlot) {
    let settings = settings();
    let wanted = |remote: bool| remote || settings.cache_dir.is_some();
    let mut slots: Vec<CacheSlot> = Vec::new();
    let mut remote = loc.local_path().is_none();
    if wanted(remote) {
        slots.push(slot.clone());
    }
    if crate::replicas::opened().is_some() {
        let members = MEMBER_SLOTS.lock().unwrap_or_else(|e| e.into_inner());
        remote |= members.iter().any(|(r, _)| *r);
        slots.extend(members.iter().filter(|(remote, _)| wanted(*remote)).map(|(_, s)| s.clone()));
    }
    // Without a local cache, trees read from remote storage are still read a
    // run at a time, the run kept in memory for the command.
    let in_memory = || {
        if remote {
            repo.set_tree_cache(Arc::new(MemoryRanges::new(DEFAULT_MEMORY_RANGES)));
        }
    };
    if settings.no_cache || slots.is_empty() {
        return in_memory();
    }
    let opened = cache_base(global).and_then(|base| {
        let dir = base.join(repo.config().id.to_hex());
        Cache::open(&dir, settings.cache_size)
            .map_err(coffer_core::Error::Backend)
            .with_context(|| format!("cannot open the local cache {}", dir.display()))
    });
    match opened {
        Ok(cache) => {
            let cache = Arc::new(cache);
            // Every slot gets it (no short cut): the members share one cache.
            let attached = slots.iter().filter(|s| s.attach(cache.clone())).count() > 0;
            if attached {
                let _ = CACHE.set(cache.clone());
                repo.set_tree_cache(cache);
            }
        }
        Err(e) => {
            warn(global, &format!("{e:#}; going on without the cache (or pass --no-cache)"));
            in_memory();
        }
    }
}

/// Opens the source repository of `copy` or `init --from-repo` at `location`
/// (index not loaded), with its passphrase from [`password::read_source`], on a
/// storage stack of its own whose request counts are returned with it.
pub fn open_source(location: &str, password_file: Option<&std::path::Path>) -> Result<(Repository, CountsHandle)> {
    let loc = Location::parse(location).with_context(|| format!("--from-repo {location}"))?;
    if loc.local_path().is_some_and(|p| !p.exists()) {
        return Err(anyhow::Error::new(coffer_core::Error::RepoNotFound { location: loc.to_string() })
            .context("the source repository (--from-repo)"));
    }
    let (be, counts, _) = storage_stack(&loc, Modes::PRIVATE, test_faults())?;
    let probe = Repository::probe(be.as_ref());
    if !probe.exists() {
        Repository::check_new_location(be.as_ref())?;
        return Err(anyhow::Error::new(coffer_core::Error::RepoNotFound { location: loc.to_string() })
            .context("the source repository (--from-repo)"));
    }
    crate::foreign::check_probed(be.as_ref(), &probe)?;
    if let Some(e) = probe.config_failure() {
        return Err(
            anyhow::Error::new(coffer_core::Error::Backend(e.clone())).context("the source repository (--from-repo)")
        );
    }
    let pw = password::read_source(password_file)?;
    let repo =
        Repository::open_probed(be, probe, pw.as_bytes(), None).context("the source repository (--from-repo)")?;
    Ok((repo, counts))
}

/// Request counts as a JSON object, for `--json` summaries.
pub fn counts_json(c: &Counts) -> serde_json::Value {
    serde_json::json!({
        "put": c.put, "get": c.get, "head": c.head, "list": c.list, "delete": c.delete,
        "bytes_up": c.bytes_up, "bytes_down": c.bytes_down, "rounds": c.rounds,
        "latency_ms": latency_json(&c.latency_us),
    })
}

/// Request latency percentiles in milliseconds.
fn latency_json(l: &coffer_backend::Latency) -> serde_json::Value {
    let ms = |us: u64| us as f64 / 1000.0;
    serde_json::json!({"p50": ms(l.p50), "p99": ms(l.p99), "max": ms(l.max)})
}

/// Opens the repository and loads its index. An index file that does not load is
/// skipped with a warning on stderr.
pub fn open(global: &GlobalArgs) -> Result<Repository> {
    Ok(open_finding(global, &[], &SnapshotFilter::default())?.0)
}

/// [`open`], finding the snapshots `names` (as [`find_snapshot`]) while the index
/// loads: neither needs the other, so over a remote storage their reads share
/// rounds. A snapshot not found is the error reported first.
pub fn open_finding(
    global: &GlobalArgs,
    names: &[&str],
    filter: &SnapshotFilter,
) -> Result<(Repository, Vec<(Id, Snapshot)>)> {
    open_finding_ahead(global, Ahead::List(READERS), names, filter)
}

/// [`open_finding`], doing `ahead` on the way (see [`open_ahead`]).
pub fn open_finding_ahead(
    global: &GlobalArgs,
    ahead: Ahead,
    names: &[&str],
    filter: &SnapshotFilter,
) -> Result<(Repository, Vec<(Id, Snapshot)>)> {
    let (path, _) = location(global)?;
    let repo = open_ahead(global, &path, ahead)?.0;
    let (indexed, found) = std::thread::scope(|s| {
        let indexed = s.spawn(|| load_index(global, &repo));
        let found: Result<Vec<_>> = names.iter().map(|n| find_snapshot(global, &repo, n, filter)).collect();
        (indexed.join().unwrap_or_else(|p| std::panic::resume_unwind(p)), found)
    });
    let found = found?;
    indexed?;
    Ok((repo, found))
}

/// [`open_finding`] for one snapshot name.
pub fn open_finding_one(
    global: &GlobalArgs,
    name: &str,
    filter: &SnapshotFilter,
) -> Result<(Repository, Id, Snapshot)> {
    open_finding_one_ahead(global, Ahead::List(READERS), name, filter)
}

/// [`open_finding_one`], doing `ahead` on the way (see [`open_ahead`]).
pub fn open_finding_one_ahead(
    global: &GlobalArgs,
    ahead: Ahead,
    name: &str,
    filter: &SnapshotFilter,
) -> Result<(Repository, Id, Snapshot)> {
    let (repo, mut found) = open_finding_ahead(global, ahead, &[name], filter)?;
    let (id, snap) = found.pop().expect("a snapshot per name");
    Ok((repo, id, snap))
}

/// Loads the index of `repo`, warning on stderr of each index file skipped.
pub fn load_index(global: &GlobalArgs, repo: &Repository) -> Result<()> {
    for e in repo.load_index()? {
        warn(global, &format!("{e}; {INDEX_FILE_SKIPPED}"));
    }
    Ok(())
}

/// Warns on stderr of every bad copy of a blob that `repo` read past.
pub fn report_bad_copies(global: &GlobalArgs, repo: &Repository) {
    for line in repo.take_bad_copies() {
        warn(global, &line);
    }
}

/// One warning on stderr: a line of JSON with `--json`.
pub fn warn(global: &GlobalArgs, message: &str) {
    if global.json {
        eprintln!("{}", serde_json::json!({"type": "warning", "message": message}));
    } else {
        eprintln!("warning: {message}");
    }
}

/// Opens the repository without loading the index.
pub fn open_unindexed(global: &GlobalArgs, loc: &Location) -> Result<Repository> {
    Ok(open_with_passphrase(global, loc)?.0)
}

/// Opens the repository without loading the index, and returns the passphrase that
/// opened it too (a key rotation wraps the new keys under it).
pub fn open_with_passphrase(global: &GlobalArgs, loc: &Location) -> Result<(Repository, password::Passphrase)> {
    open_ahead(global, loc, Ahead::Nothing)
}

/// What an open does beside its first round trip and the key derivation, for
/// the command that follows (docs/design.md#round-trips).
#[derive(Clone, Copy)]
pub enum Ahead {
    /// Nothing more.
    Nothing,
    /// Lists these prefixes in the first round: what a reading command reads next.
    List(&'static [ObjectKind]),
    /// As `List`, for a command that then fetches pack data many requests wide
    /// (a restore, `check --read-data`), whose memory over a remote store is
    /// larger than two lanes of the key derivation anyway: there the lanes run
    /// side by side (docs/design.md#key-derivation).
    Fetch(&'static [ObjectKind]),
    /// A backup: writes its opening marker once the location is known to hold a
    /// repository, then lists what it reads first
    /// ([`coffer_core::lifecycle::writer::announce`]).
    Backup,
}

/// What a restore, `check`, `ls`, `diff` and the like read first: the index
/// (and the packs beside it) and the snapshots.
pub const READERS: &[ObjectKind] = &[ObjectKind::Index, ObjectKind::Pack, ObjectKind::Snapshot, ObjectKind::Tombstone];

/// Opens the repository without loading the index, doing `ahead` on the way.
pub fn open_ahead(global: &GlobalArgs, loc: &Location, ahead: Ahead) -> Result<(Repository, password::Passphrase)> {
    if loc.local_path().is_some_and(|p| !p.exists()) {
        return Err(coffer_core::Error::RepoNotFound { location: loc.to_string() }.into());
    }
    // With a copy of the key file that opened this location last time and a
    // passphrase that needs no prompt, the key derivation starts first and runs
    // while the storage client is made and during the probe.
    let copy = crate::key_copy::place(global, loc);
    let kept = copy.as_ref().and_then(crate::key_copy::read);
    let early = match kept {
        Some(_) if password::given(global) => Some(password::read(global, Purpose::Open)?),
        _ => None,
    };
    let also = match ahead {
        Ahead::List(kinds) | Ahead::Fetch(kinds) => kinds,
        Ahead::Nothing | Ahead::Backup => &[],
    };
    let threads = match ahead {
        Ahead::Fetch(_) if loc.local_path().is_none() => std::thread::available_parallelism().map_or(1, |n| n.get()),
        _ => 1,
    };
    // One round trip: the config and the listings read next, together; a backup's
    // marker and listings follow while the keys are derived.
    let (repo, pw, be, slot) = std::thread::scope(|s| -> Result<_> {
        let unlocked = early
            .as_ref()
            .zip(kept.clone())
            .map(|(pw, bytes)| s.spawn(move || Repository::unlock_ahead(bytes, pw.as_bytes(), threads)));
        let (be, slot) = backend_with_modes(loc, Modes::PRIVATE)?;
        let probe = Repository::probe_with(be.as_ref(), also);
        if !probe.exists() {
            // What is there may be a repository whose config was lost: say so.
            Repository::check_new_location(be.as_ref())?;
            return Err(coffer_core::Error::RepoNotFound { location: loc.to_string() }.into());
        }
        crate::foreign::check_probed(be.as_ref(), &probe)?;
        // A config the storage would not give: said before asking for a passphrase.
        if let Some(e) = probe.config_failure() {
            return Err(coffer_core::Error::Backend(e.clone()).into());
        }
        // Over several backends the marker belongs on the composed storage: the
        // backup writes it once that is known. Nor while a passphrase is typed: a
        // marker left unchanged for the grace period is taken for a stopped writer's.
        let announcing =
            (matches!(ahead, Ahead::Backup) && probe.on_one_backend() && password::given(global)).then(|| {
                let be = be.clone();
                s.spawn(move || coffer_core::lifecycle::writer::announce(be))
            });
        let prompted = match early {
            Some(_) => None,
            None => Some(password::read(global, Purpose::Open)?),
        };
        let pw = early.as_ref().or(prompted.as_ref()).expect("a passphrase was read");
        let unlocked = unlocked.and_then(|h| h.join().ok().flatten());
        let repo = Repository::open_probed(be.clone(), probe, pw.as_bytes(), unlocked)?;
        // One that failed is left to the backup, which writes its marker the
        // usual way and reports what goes wrong.
        if let Some(Ok(announced)) = announcing.map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))) {
            announced.hand_to(&repo);
        }
        Ok((repo, prompted, be, slot))
    })?;
    let pw = early.or(pw).expect("a passphrase was read");
    if let Some(place) = &copy {
        crate::key_copy::keep(place, kept.as_deref(), repo.key_file());
    }
    // A repository over several backends: the same one over all of them.
    let repo = crate::replicas::compose(global, repo, be, &loc.to_string())?;
    attach_cache(global, loc, &repo, &slot);
    crate::server_log::follow(global, loc, &repo)?;
    Ok((repo, pw))
}

/// Creates a repository at `loc`, readable by its owner only.
pub fn create(global: &GlobalArgs, loc: &Location, opts: &InitOptions) -> Result<Repository> {
    create_with_modes(global, loc, opts, Modes::PRIVATE)
}

/// Creates a repository at `loc` whose files and directories get `modes` (on a
/// local disk). A location that holds a repository already, or what is left of
/// one whose `config` was lost, is refused before the passphrase is asked for. A
/// remote bucket or server directory must exist; its prefix needs no creating.
pub fn create_with_modes(global: &GlobalArgs, loc: &Location, opts: &InitOptions, modes: Modes) -> Result<Repository> {
    create_as(global, loc, modes, |be, pw| Repository::init(be, pw, opts))
}

/// [`create_with_modes`] for a repository related to `source`
/// (docs/design.md#copy): it shares the source's chunker sizes and keys.
pub fn create_related(
    global: &GlobalArgs,
    loc: &Location,
    opts: &InitOptions,
    modes: Modes,
    source: &Repository,
    share_data_keys: bool,
) -> Result<Repository> {
    create_as(global, loc, modes, |be, pw| Repository::init_related(be, pw, opts, source, share_data_keys))
}

fn create_as(
    global: &GlobalArgs,
    loc: &Location,
    modes: Modes,
    init: impl FnOnce(Arc<dyn Backend>, &[u8]) -> coffer_core::Result<Repository>,
) -> Result<Repository> {
    if let Some(path) = loc.local_path() {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create the directory {} for the repository", parent.display()))?;
        }
        match std::fs::DirBuilder::new().mode(modes.dir).create(path) {
            Ok(()) => std::fs::set_permissions(path, std::fs::Permissions::from_mode(modes.dir)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && path.is_dir() => Ok(()),
            Err(e) => Err(e),
        }
        .with_context(|| format!("cannot create repository directory {}", path.display()))?;
    }
    let (be, _) = backend_with_modes(loc, modes)?;
    crate::foreign::check(be.as_ref())?;
    Repository::check_new_location(be.as_ref())?;
    if !global.quiet && std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        // The passphrase prompt comes next: say what it is for.
        eprintln!("creating a new coffer repository at {loc}");
    }
    let pw = password::read(global, Purpose::Create)?;
    let repo = init(be, pw.as_bytes())?;
    if let Some(place) = crate::key_copy::place(global, loc) {
        crate::key_copy::keep(&place, None, repo.key_file());
    }
    Ok(repo)
}

/// Where this client keeps what it remembers about repositories:
/// `$XDG_STATE_HOME/coffer`, else `~/.local/state/coffer`.
pub fn state_base() -> Result<PathBuf> {
    if let Some(d) = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(d).join("coffer"));
    }
    let home = dirs::home_dir().context("cannot find the home directory for coffer's local state")?;
    Ok(home.join(".local/state/coffer"))
}

/// The local state of an open repository.
pub fn local_state(repo: &Repository) -> Result<coffer_core::local_state::LocalState> {
    Ok(coffer_core::local_state::LocalState::new(&state_base()?, &repo.config().id))
}

/// The writers this client trusts for `repo`: its own writer key (if it has
/// one; never created here) and those `coffer writers trust` listed.
pub fn trusted_writers(repo: &Repository) -> Result<coffer_core::trust::TrustedWriters> {
    let state = local_state(repo)?;
    let own = repo.existing_writer_key(&state)?.map(|k| k.public());
    Ok(coffer_core::trust::TrustedWriters::load(&state, own)?)
}

/// Finds a snapshot by `latest` (the newest passing `filter`) or by id prefix.
/// `latest` is refused when this client saw history that is gone with nothing
/// recording its removal (a rollback): it would silently name an older snapshot
/// than the newest one. Naming the snapshot by id is the explicit way past it.
/// Snapshots dated too far ahead are passed over, each with a warning.
pub fn find_snapshot(
    global: &GlobalArgs,
    repo: &Repository,
    name: &str,
    filter: &SnapshotFilter,
) -> Result<(Id, Snapshot)> {
    if name != "latest" {
        return Ok(repo.find_snapshot(name, filter)?);
    }
    let latest = find_latest(repo, filter)?;
    for w in latest.warnings() {
        warn(global, &w);
    }
    latest.found.ok_or_else(|| coffer_core::Error::SnapshotNotFound(name.to_string()).into())
}

/// `latest` by `filter`, refused after a rollback ([`find_snapshot`]).
fn find_latest(repo: &Repository, filter: &SnapshotFilter) -> Result<coffer_core::repo::Latest> {
    if let Ok(state) = local_state(repo) {
        let remembered = state.read_ids(HEADS_FILE)?;
        let history = if remembered.is_empty() { None } else { Some(History::load(repo)?) };
        let missing = history.as_ref().map(|h| h.missing_heads(&remembered)).unwrap_or_default();
        if !missing.is_empty() {
            let ids: Vec<String> = missing.iter().map(|id| id.short()).collect();
            return Err(coffer_core::Error::corrupt(
                "latest",
                format!(
                    "the repository shows an older state than this client saw: history entries {} are gone and \
                     nothing records their removal (the storage rolled back or lost them), so `latest` would name an \
                     older snapshot than the newest one; name the snapshot by its id instead (`coffer snapshots` \
                     lists them), or, if the repository was restored from an older copy on purpose, delete the \
                     local file `{}` to accept it",
                    ids.join(", "),
                    state.path(HEADS_FILE).display()
                ),
            )
            .into());
        }
        // The history just loaded holds every snapshot stored, loaded and sorted
        // as `Repository::snapshots` does: `latest` is its newest that passes the
        // filter, without listing and reading them again.
        if let Some(h) = history {
            return Ok(coffer_core::repo::Latest::pick(h.snapshots, filter, std::time::SystemTime::now()));
        }
    }
    Ok(repo.find_latest(filter)?)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::RetryLines;

    #[test]
    fn retries_of_requests_that_fail_together_get_one_line_per_attempt() {
        let lines = RetryLines::default();
        let t = Instant::now();
        // The six requests of one round fail: one line, five left out.
        assert_eq!(lines.admit(2, t), Some(0));
        for _ in 0..5 {
            assert_eq!(lines.admit(2, t + Duration::from_millis(3)), None);
        }
        // Their next attempts: one line, which counts the five.
        assert_eq!(lines.admit(3, t + Duration::from_millis(200)), Some(5));
        assert_eq!(lines.admit(3, t + Duration::from_millis(210)), None);
        // Out of step: one at its fourth attempt, then another at its second.
        assert_eq!(lines.admit(4, t + Duration::from_millis(220)), Some(1));
        assert_eq!(lines.admit(2, t + Duration::from_millis(230)), None);
        assert_eq!(lines.admit(3, t + Duration::from_millis(240)), None);
        // The same attempt number seconds later is another failure: a line of its own.
        assert_eq!(lines.admit(3, t + Duration::from_secs(5)), Some(2));
    }
}
