//! Finding and opening the repository named on the command line.

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use coffer_backend::{Backend, Faults, FaultyBackend, LocalBackend, Modes, RetryBackend, RetryPolicy};
use coffer_core::Id;
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

/// Where the repository is, and whether it is the embedded default.
pub fn location(global: &GlobalArgs) -> Result<(PathBuf, bool)> {
    match &global.repo {
        Some(r) => {
            let path = r.strip_prefix("local:").unwrap_or(r);
            if let Some((scheme, _)) = path.split_once("://") {
                bail!("repository location {r:?}: the {scheme:?} backend is not supported yet; use a local directory");
            }
            Ok((PathBuf::from(path), false))
        }
        None => Ok((default_location()?, true)),
    }
}

/// Opens the storage backend at `path`, with transient errors retried.
///
/// Two variables exist for tests: `COFFER_TEST_FAULTS` injects storage faults
/// (see `coffer_backend::Faults::parse`), and `COFFER_RETRY_BASE_MS` sets
/// the first retry delay.
pub fn backend(path: &Path) -> Result<Arc<dyn Backend>> {
    backend_with_modes(path, Modes::PRIVATE)
}

/// [`backend`], creating files with `modes` until the repository's `config`
/// exists (from then on, they take the mode of `config`).
fn backend_with_modes(path: &Path, modes: Modes) -> Result<Arc<dyn Backend>> {
    let be = LocalBackend::with_modes(path, modes)
        .with_context(|| format!("cannot open repository storage at {}", path.display()))?;
    let mut policy = RetryPolicy::default();
    if let Some(ms) = std::env::var("COFFER_RETRY_BASE_MS").ok().and_then(|v| v.parse().ok()) {
        policy.base_delay = std::time::Duration::from_millis(ms);
    }
    let inner: Arc<dyn Backend> = match std::env::var("COFFER_TEST_FAULTS") {
        Ok(spec) if !spec.is_empty() => {
            let faults = Faults::parse(&spec).map_err(|e| anyhow::anyhow!("COFFER_TEST_FAULTS: {e}"))?;
            Arc::new(FaultyBackend::new(be, faults))
        }
        _ => Arc::new(be),
    };
    Ok(Arc::new(RetryBackend::new(inner, policy)))
}

/// Opens the repository and loads its index. An index file that does not load is
/// skipped with a warning on stderr.
pub fn open(global: &GlobalArgs) -> Result<Repository> {
    let (path, _) = location(global)?;
    let repo = open_unindexed(global, &path)?;
    load_index(global, &repo)?;
    Ok(repo)
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
fn warn(global: &GlobalArgs, message: &str) {
    if global.json {
        eprintln!("{}", serde_json::json!({"type": "warning", "message": message}));
    } else {
        eprintln!("warning: {message}");
    }
}

/// Opens the repository without loading the index.
pub fn open_unindexed(global: &GlobalArgs, path: &Path) -> Result<Repository> {
    Ok(open_with_passphrase(global, path)?.0)
}

/// Opens the repository without loading the index, and returns the passphrase that
/// opened it too (a key rotation wraps the new keys under it).
pub fn open_with_passphrase(global: &GlobalArgs, path: &Path) -> Result<(Repository, password::Passphrase)> {
    if !path.exists() {
        return Err(coffer_core::Error::RepoNotFound { location: path.display().to_string() }.into());
    }
    let be = backend(path)?;
    if !Repository::exists(be.as_ref())? {
        // What is there may be a repository whose config was lost: say so.
        Repository::check_new_location(be.as_ref())?;
        return Err(coffer_core::Error::RepoNotFound { location: path.display().to_string() }.into());
    }
    crate::foreign::check(path)?;
    let pw = password::read(global, Purpose::Open)?;
    let repo = Repository::open(be, pw.as_bytes())?;
    Ok((repo, pw))
}

/// Creates a repository at `path`, readable by its owner only.
pub fn create(global: &GlobalArgs, path: &Path, opts: &InitOptions) -> Result<Repository> {
    create_with_modes(global, path, opts, Modes::PRIVATE)
}

/// Creates a repository at `path` whose files and directories get `modes`. A
/// location that holds a repository already, or what is left of one whose
/// `config` was lost, is refused before the passphrase is asked for.
pub fn create_with_modes(global: &GlobalArgs, path: &Path, opts: &InitOptions, modes: Modes) -> Result<Repository> {
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
    let be = backend_with_modes(path, modes)?;
    crate::foreign::check(path)?;
    Repository::check_new_location(be.as_ref())?;
    let pw = password::read(global, Purpose::Create)?;
    Ok(Repository::init(be, pw.as_bytes(), opts)?)
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

/// Finds a snapshot by `latest` (the newest passing `filter`) or by id prefix.
/// `latest` is refused when this client saw history that is gone with nothing
/// recording its removal (a rollback): it would silently name an older snapshot
/// than the newest one. Naming the snapshot by id is the explicit way past it.
pub fn find_snapshot(repo: &Repository, name: &str, filter: &SnapshotFilter) -> Result<(Id, Snapshot)> {
    if name == "latest"
        && let Ok(state) = local_state(repo)
    {
        let remembered = state.read_ids(HEADS_FILE)?;
        let missing = if remembered.is_empty() { Vec::new() } else { History::load(repo)?.missing_heads(&remembered) };
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
    }
    Ok(repo.find_snapshot(name, filter)?)
}
