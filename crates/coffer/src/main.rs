//! The `coffer` command line: parses arguments, opens the repository, runs one
//! command, prints its result (text or `--json`) and exits with a code that says
//! what happened (see `exit_code`). The only crate that prints.

mod args;
mod cmd;
mod output;
mod password;
mod progress;
mod repo_open;

use std::process::ExitCode;

use clap::Parser;

use args::{Cli, Command};
use coffer_core::Error;

/// Exit codes, documented in the README and in `coffer --help`.
pub mod exit {
    /// Success.
    pub const OK: u8 = 0;
    /// Any failure not listed below.
    pub const FAILURE: u8 = 1;
    /// Wrong passphrase, or no usable key.
    pub const WRONG_PASSWORD: u8 = 3;
    /// The repository does not exist.
    pub const NO_REPOSITORY: u8 = 10;
    /// The backup was made, but some files could not be read.
    pub const INCOMPLETE: u8 = 11;
    /// Repository data is damaged (an object failed to verify) or check found errors.
    pub const DAMAGED: u8 = 12;
    /// The restore target is not empty and --overwrite was not given.
    pub const TARGET_NOT_EMPTY: u8 = 13;
    /// A proof or signature does not verify.
    pub const NOT_VERIFIED: u8 = 14;
    /// The storage failed (after retries) or refused a write, e.g. a full disk.
    pub const STORAGE: u8 = 15;
}

fn exit_code(err: &anyhow::Error) -> u8 {
    for cause in err.chain() {
        if let Some(e) = cause.downcast_ref::<Error>() {
            return match e {
                Error::WrongPassword { .. } | Error::NoKey => exit::WRONG_PASSWORD,
                Error::RepoNotFound { .. } | Error::ConfigLost { .. } => exit::NO_REPOSITORY,
                Error::Corrupt { .. } => exit::DAMAGED,
                Error::TargetNotEmpty { .. } => exit::TARGET_NOT_EMPTY,
                Error::Backend(_) => exit::STORAGE,
                _ => exit::FAILURE,
            };
        }
    }
    exit::FAILURE
}

/// Fixes glibc's threshold for serving allocations by `mmap` at 1 MiB, for a
/// backup. By default glibc raises it to the size of the largest block freed (up
/// to 32 MiB), after which freed chunk-sized buffers stay in its heaps: a
/// backup's resident memory was measured 10-20% above its live heap that way
/// (docs/performance.md). Other commands keep the default: a restore, which
/// frees a blob-sized buffer per blob, spent three times the system time with
/// the fixed threshold.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn lean_allocator() {
    // SAFETY: mallopt only changes an allocator setting (glibc takes its lock).
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
    }
}

/// See the glibc version: other allocators need no tuning.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn lean_allocator() {}

/// Restores the default action of SIGPIPE (Rust ignores it), so that output piped
/// into a reader that stops early, as `coffer snapshots | head` does, ends the
/// program quietly like other command-line tools instead of with a panic.
#[cfg(unix)]
fn default_sigpipe() {
    // SAFETY: sets a signal disposition to its default before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

#[cfg(not(unix))]
fn default_sigpipe() {}

fn main() -> ExitCode {
    default_sigpipe();
    let cli = Cli::parse();
    let json = cli.global.json;
    let result = match &cli.command {
        Command::Init(a) => cmd::init::run(&cli.global, a),
        Command::Backup(a) => {
            lean_allocator();
            cmd::backup::run(&cli.global, a)
        }
        Command::Snapshots(a) => cmd::snapshots::run(&cli.global, a),
        Command::Ls(a) => cmd::ls::run(&cli.global, a),
        Command::Diff(a) => cmd::diff::run(&cli.global, a),
        Command::Restore(a) => cmd::restore::run(&cli.global, a),
        Command::Cat(a) => cmd::cat::run(&cli.global, a),
        Command::Check(a) => cmd::check::run(&cli.global, a),
        Command::Forget(a) => cmd::forget::run(&cli.global, a),
        Command::Prove(a) => cmd::prove::run(&cli.global, a),
        Command::VerifyProof(a) => cmd::prove::verify(&cli.global, a),
        Command::Writers => cmd::writers::run(&cli.global),
        Command::Prune(a) => cmd::prune::run(&cli.global, a),
        Command::Key(a) => cmd::key::run(&cli.global, a),
        Command::Repair(a) => cmd::repair::run(&cli.global, a),
    };
    if cli.global.verbose {
        repo_open::report_storage_counts(json);
    }
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            let code = exit_code(&e);
            output::error(json, &e, code);
            ExitCode::from(code)
        }
    }
}
