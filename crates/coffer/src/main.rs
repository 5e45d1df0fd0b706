//! The `coffer` command line: parses arguments, opens the repository, runs one
//! command, prints its result (text or `--json`) and exits with a code that says
//! what happened (see `exit_code`). The only crate that prints.

#[global_allocator]
static ALLOCATOR: alloc::Allocator = alloc::Allocator;

mod alloc;
mod args;
mod cmd;
mod foreign;
mod import;
mod interrupt;
mod key_copy;
mod local_input;
mod output;
mod password;
mod profile;
mod progress;
mod replicas;
mod repo_open;
mod server_log;
mod table;
mod test_knobs;

use std::process::ExitCode;

use clap::Parser;

use args::{Cli, Command};
use coffer_core::Error;

/// Exit codes, documented in the README, in docs/design.md#exit-codes and in
/// `coffer --help`. Where restic gives a number a meaning, coffer uses that
/// number for that meaning (so scripts written for restic keep working);
/// coffer's own conditions take numbers restic does not use (20 and up).
pub mod exit {
    /// Success.
    pub const OK: u8 = 0;
    /// Any failure not listed below.
    pub const FAILURE: u8 = 1;
    /// Wrong usage (invalid arguments, as clap reports them; a repository
    /// location that does not parse; a profile that does not load).
    pub const USAGE: u8 = 2;
    /// The backup was made, but some source files could not be read (restic: 3).
    pub const INCOMPLETE: u8 = 3;
    /// The repository does not exist (restic: 10).
    pub const NO_REPOSITORY: u8 = 10;
    /// Wrong passphrase, or no usable key (restic: 12).
    pub const WRONG_PASSWORD: u8 = 12;
    /// Repository data is damaged (an object failed to verify) or check found errors.
    pub const DAMAGED: u8 = 20;
    /// The restore target is not empty and --overwrite was not given.
    pub const TARGET_NOT_EMPTY: u8 = 21;
    /// A proof or signature does not verify.
    pub const NOT_VERIFIED: u8 = 22;
    /// The storage failed (after retries) or refused a write, e.g. a full disk.
    pub const STORAGE: u8 = 23;
    /// A concurrent prune removed data this backup had stored; run it again.
    pub const PRUNE_CONFLICT: u8 = 24;
    /// The repository lost its config (its other objects are there).
    pub const CONFIG_LOST: u8 = 25;
    /// The location holds something else than a coffer repository (restic's, say).
    pub const NOT_COFFER: u8 = 26;
    /// `coffer run --no-wait`: the job is running already (the agent, or another `coffer run`).
    pub const BUSY: u8 = 27;
    /// Interrupted by Ctrl-C or SIGINT (restic: 130).
    pub const INTERRUPTED: u8 = 130;
    /// Ended by SIGTERM (the agent stopping, a service manager); nothing left half-written.
    pub const TERMINATED: u8 = 143;
    /// Standard output or error was closed by its reader (`coffer ls | head`).
    pub const BROKEN_PIPE: u8 = 141;
}

fn exit_code(err: &anyhow::Error) -> u8 {
    for cause in err.chain() {
        if cause.downcast_ref::<foreign::NotCoffer>().is_some() {
            return exit::NOT_COFFER;
        }
        if cause.downcast_ref::<coffer_agent::config::ConfigError>().is_some() {
            // The jobs file or a profile's job is refused: the configuration's fault.
            return exit::USAGE;
        }
        if let Some(coffer_agent::run::RunError::Busy { .. }) = cause.downcast_ref::<coffer_agent::run::RunError>() {
            return exit::BUSY;
        }
        if cause.downcast_ref::<coffer_backend::LocationError>().is_some() {
            // The location given does not parse: the command line's fault.
            return exit::USAGE;
        }
        if let Some(e) = cause.downcast_ref::<import::borg::BorgFailed>() {
            return match e.kind {
                import::borg::BorgFailure::WrongPassphrase => exit::WRONG_PASSWORD,
                import::borg::BorgFailure::NoRepository => exit::NO_REPOSITORY,
                import::borg::BorgFailure::Other => exit::FAILURE,
            };
        }
        if let Some(e) = cause.downcast_ref::<import::kopia::KopiaFailed>() {
            return match e.kind {
                import::kopia::KopiaFailure::WrongPassword => exit::WRONG_PASSWORD,
                import::kopia::KopiaFailure::NoRepository => exit::NO_REPOSITORY,
                import::kopia::KopiaFailure::Other => exit::FAILURE,
            };
        }
        if let Some(e) = cause.downcast_ref::<coffer_import::Error>() {
            // The repository being imported, by the same rules as this one.
            return match e {
                coffer_import::Error::WrongPassword { .. } => exit::WRONG_PASSWORD,
                coffer_import::Error::NoKeyFiles => exit::NO_REPOSITORY,
                coffer_import::Error::Source(_) => exit::STORAGE,
                _ => exit::FAILURE,
            };
        }
        if let Some(e) = cause.downcast_ref::<Error>() {
            return match e {
                Error::WrongPassword { .. } | Error::NoKey => exit::WRONG_PASSWORD,
                Error::RepoNotFound { .. } => exit::NO_REPOSITORY,
                Error::ConfigLost { .. } => exit::CONFIG_LOST,
                Error::Corrupt { .. } | Error::ServerLog(_) => exit::DAMAGED,
                Error::TargetNotEmpty { .. } => exit::TARGET_NOT_EMPTY,
                Error::Backend(_) => exit::STORAGE,
                Error::Conflict(_) | Error::SourceChanged(_) => exit::PRUNE_CONFLICT,
                _ => exit::FAILURE,
            };
        }
    }
    exit::FAILURE
}

/// The lock-free protocol's timing (how long prune waits, how often a backup
/// rewrites its session marker): the default, or (debug builds, for the tests)
/// a grace period of `COFFER_TEST_PRUNE_GRACE_MS` milliseconds with a quarter of
/// it as the heartbeat.
pub fn protocol_timing() -> coffer_core::lifecycle::Timing {
    test_knobs::get("COFFER_TEST_PRUNE_GRACE_MS")
        .and_then(|v| v.parse().ok())
        .map(|ms| coffer_core::lifecycle::Timing::with_grace(std::time::Duration::from_millis(ms)))
        .unwrap_or_default()
}

/// The heaps an import's allocations share (see [`few_arenas`]).
const IMPORT_ARENAS: i32 = 2;

/// Fixes glibc's threshold for serving allocations by `mmap` at `threshold`
/// bytes. By default glibc raises it to the size of the largest block freed (up
/// to 32 MiB), after which freed chunk-sized buffers stay in its heaps: a
/// backup's resident memory was measured 10-20% above its live heap that way,
/// and an import's 1.6 times a backup's (docs/performance.md). A backup fixes
/// it at 1 MiB; an import, which also frees a restic blob (about 1 MiB) per
/// blob read, at 4 MiB: at 1 MiB it took 1.2 times as long. Other commands keep
/// the default: a restore, which frees a blob-sized buffer per blob, spent three
/// times the system time with the fixed threshold.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn lean_allocator(threshold: i32) {
    // SAFETY: mallopt only changes an allocator setting (glibc takes its lock).
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, threshold);
    }
}

/// See the glibc version: other allocators need no tuning.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn lean_allocator(_threshold: i32) {}

/// Limits glibc to `n` heaps (arenas). By default each thread that meets a busy
/// heap gets one of its own, up to eight per core, and what each keeps of the
/// buffers freed in it adds up: an import's threads (the workers, the source's
/// readers, the pump) keep about a tenth of its peak memory that way
/// (docs/performance.md, "Import from restic").
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn few_arenas(n: i32) {
    // SAFETY: mallopt only changes an allocator setting (glibc takes its lock).
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, n);
    }
}

/// See the glibc version.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn few_arenas(_n: i32) {}

/// Raises the soft limit of open files to the hard one (at most 2^20), for a
/// restore: it keeps the directory handles of the batches it has planned but not
/// yet written open, as many as half the limit allows (docs/design.md#restore),
/// and with the usual soft limit of 1,024 over a remote store it waits a round
/// trip for about every batch. The hard limit is the system's word; a failure
/// leaves the limit as it was.
#[cfg(unix)]
fn raise_open_files_limit() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    let wanted = limit.maximum.unwrap_or(u64::MAX).min(1 << 20);
    if limit.current.is_some_and(|current| current < wanted) {
        limit.current = Some(wanted);
        let _ = setrlimit(Resource::Nofile, limit);
    }
}

#[cfg(not(unix))]
fn raise_open_files_limit() {}

/// SIGPIPE stays ignored (Rust's default): a storage peer that closes a
/// connection in the middle of an upload then fails that write with EPIPE,
/// which is retried or reported, instead of killing the process without a
/// word (vectored socket writes raise SIGPIPE). Output into a reader that stops
/// early (`coffer snapshots | head`) still ends quietly: a failed print panics
/// in std, and this hook ends the process with 141 (128 + SIGPIPE, what a shell
/// shows for a program ended by it) instead of reporting a panic.
fn quiet_broken_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let msg = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("");
        if msg.starts_with("failed printing to std") && msg.contains("Broken pipe") {
            std::process::exit(i32::from(exit::BROKEN_PIPE));
        }
        default(info);
    }));
}

/// `--repository-file`: the repository location is the file's first line. Given
/// with `--repo` (or COFFER_REPOSITORY) as well, it is a usage error, as in restic.
fn repository_from_file(global: &mut args::GlobalArgs) -> anyhow::Result<()> {
    let Some(file) = &global.repository_file else {
        return Ok(());
    };
    if global.repo.is_some() {
        anyhow::bail!(
            "--repository-file {} and --repo (or COFFER_REPOSITORY) both name a repository: give one",
            file.display()
        );
    }
    let line = local_input::first_line(file, "repository file", local_input::Kind::Stream)?;
    let location = line.trim();
    if location.is_empty() {
        anyhow::bail!(
            "the repository file {} is empty: write the repository location on its first line",
            file.display()
        );
    }
    global.repo = Some(location.to_string());
    Ok(())
}

/// With `-v`: the storage service's own report behind an error that coffer
/// put in its own words (OpenDAL's context, the HTTP response).
fn storage_details(json: bool, err: &anyhow::Error) {
    let details = err.chain().filter_map(|c| {
        let backend = c.downcast_ref::<coffer_backend::BackendError>().or_else(|| match c.downcast_ref::<Error>() {
            Some(Error::Backend(b)) => Some(b),
            _ => None,
        })?;
        backend.detail.as_deref()
    });
    if let Some(detail) = details.into_iter().next() {
        if json {
            eprintln!("{}", serde_json::json!({"type": "error_detail", "detail": detail}));
        } else {
            eprintln!("detail: {detail}");
        }
    }
}

/// What the command line leaves to be read: the profile given with `-P`, and
/// the location in the repository file.
pub fn prepare(cli: &mut Cli) -> anyhow::Result<()> {
    if let Some(name) = cli.global.profile.clone() {
        let p = profile::path_of(&name, profile::config_home()).and_then(|path| profile::load(&path))?;
        profile::apply(p, cli)?;
    }
    repository_from_file(&mut cli.global)
}

fn main() -> ExitCode {
    quiet_broken_pipe();
    let mut cli = Cli::parse();
    let json = cli.global.json;
    if let Err(e) = prepare(&mut cli) {
        output::error(json, &e, exit::USAGE);
        return ExitCode::from(exit::USAGE);
    }
    output::set_utc(cli.global.utc);
    progress::set_interval(Some(cli.global.progress_interval).filter(|d| !d.is_zero()));
    if matches!(cli.command, Command::Check(_) | Command::Repair(_)) {
        // They verify the repository itself: what it holds, not a copy of it.
        cli.global.reads_storage_only = true;
    }
    let result = match &cli.command {
        Command::Init(a) => cmd::init::run(&cli.global, a),
        Command::Run(a) => cmd::agent::run_job(&cli.global, a),
        Command::Agent(a) => cmd::agent::run(&cli.global, a),
        Command::Backup(a) => {
            lean_allocator(1 << 20);
            cmd::backup::run(&cli.global, a)
        }
        Command::Copy(a) => cmd::copy::run(&cli.global, a),
        Command::Import(a) => {
            // An import stores what it reads as a backup does.
            lean_allocator(4 << 20);
            few_arenas(IMPORT_ARENAS);
            cmd::import::run(&cli.global, a)
        }
        Command::ImportTar(a) => {
            lean_allocator(4 << 20);
            few_arenas(IMPORT_ARENAS);
            cmd::import_tar::run(&cli.global, a)
        }
        Command::Snapshots(a) => cmd::snapshots::run(&cli.global, a),
        Command::Ls(a) => cmd::ls::run(&cli.global, a),
        Command::Diff(a) => cmd::diff::run(&cli.global, a),
        Command::Restore(a) => {
            raise_open_files_limit();
            cmd::restore::run(&cli.global, a)
        }
        #[cfg(all(feature = "mount", target_os = "linux"))]
        Command::Mount(a) => cmd::mount::run(&cli.global, a),
        Command::Cat(a) => cmd::cat::run(&cli.global, a),
        Command::Check(a) => cmd::check::run(&cli.global, a),
        Command::Forget(a) => cmd::forget::run(&cli.global, a),
        Command::Prove(a) => cmd::prove::run(&cli.global, a),
        Command::VerifyProof(a) => cmd::prove::verify(&cli.global, a),
        Command::Writers(a) => cmd::writers::run(&cli.global, a),
        Command::Prune(a) => cmd::prune::run(&cli.global, a),
        Command::Key(a) => cmd::key::run(&cli.global, a),
        Command::Repair(a) => cmd::repair::run(&cli.global, a),
        Command::Version => cmd::generate::version(&cli.global),
        Command::Generate(a) => cmd::generate::run(&cli.global, a),
        Command::Stats(a) => cmd::stats::run(&cli.global, a),
        Command::Bench(a) => cmd::bench::run(&cli.global, a),
        Command::Tag(a) => cmd::tag::run(&cli.global, a),
        Command::Dump(a) => cmd::dump::run(&cli.global, a),
        Command::Find(a) => cmd::find::run(&cli.global, a),
        Command::Cache(a) => cmd::cache::run(&cli.global, a),
        Command::Backend(a) => cmd::backend::run(&cli.global, a),
        Command::Rebalance => cmd::backend::rebalance(&cli.global),
        Command::Serve(a) => cmd::serve::run(&cli.global, a),
        Command::Ui(a) => {
            // One heap, set before any thread asks for one. What an idle UI lets
            // go (its decoded trees, tens of MiB) is then handed back whole by
            // `malloc_trim`; glibc's trim leaves the top free block of any other
            // heap in place, and one run in three kept 13-15 MiB that way
            // (docs/performance.md, "UI").
            few_arenas(1);
            cmd::ui::run(&cli.global, a)
        }
    };
    replicas::report_short(&cli.global);
    if cli.global.verbose > 0 {
        repo_open::report_storage_counts(json);
    }
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            let code = exit_code(&e);
            output::error(json, &e, code);
            if cli.global.verbose > 0 {
                storage_details(json, &e);
            }
            ExitCode::from(code)
        }
    }
}
