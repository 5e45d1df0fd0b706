//! Command-line arguments. Option names follow restic's where one exists, so that
//! habits carry over.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use coffer_core::ops::check::DataSubset;

const EXIT_CODES: &str = "\
Exit codes (restic's numbers where restic gives one a meaning):
  0    success
  1    failure
  2    wrong usage
  3    snapshot made, but some source files could not be read (snapshot is incomplete)
  10   the repository does not exist
  12   wrong passphrase, or no usable key
  20   repository data is damaged (or check found errors)
  21   restore target is not empty (pass --overwrite)
  22   a proof or signature does not verify
  23   the storage failed or refused a write (after retries)
  24   a concurrent prune removed data this backup stored (run it again)
  25   the repository lost its config (see `coffer repair config`)
  26   not a coffer repository (e.g. a restic repository)
  27   coffer run --no-wait: the job is running already
  130  interrupted (Ctrl-C); the repository stays usable
  143  ended by SIGTERM; the repository stays usable
  141  the reader of the output went away (e.g. `coffer ls latest | head`)";

/// coffer: encrypted, deduplicated, compressed backups.
#[derive(Parser, Debug)]
#[command(name = "coffer", version, after_help = EXIT_CODES)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// Options every command takes.
#[derive(Args, Debug, Clone)]
pub struct GlobalArgs {
    /// Repository location: a directory (PATH or local:PATH), s3:https://HOST[:PORT]/BUCKET[/PREFIX],
    /// s3:HOST/BUCKET[/PREFIX], s3://BUCKET[/PREFIX] (AWS), sftp:[USER@]HOST:/PATH,
    /// sftp://[USER@]HOST[:PORT]/PATH, webdav:https://HOST/PATH, azure:, gs:, b2:, swift:CONTAINER[:/PREFIX].
    /// Credentials come from the service's usual variables (AWS_ACCESS_KEY_ID, ...).
    /// Default: $XDG_DATA_HOME/coffer/repo, else ~/.local/share/coffer/repo.
    #[arg(short = 'r', long, env = "COFFER_REPOSITORY", global = true)]
    pub repo: Option<String>,
    /// Read the repository location from this file (first line).
    #[arg(long, env = "COFFER_REPOSITORY_FILE", global = true, value_name = "FILE")]
    pub repository_file: Option<PathBuf>,
    /// Requests to keep in flight to the storage when fetching many objects
    /// (default: 32 for object stores, 4 for SFTP, the number of cores for a local disk).
    #[arg(long, env = "COFFER_CONNECTIONS", global = true, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub connections: Option<u16>,
    /// Trust the CA certificates in this PEM file too (besides the system's) for
    /// HTTPS storage.
    #[arg(long, env = "COFFER_CACERT", global = true, value_name = "FILE")]
    pub cacert: Option<PathBuf>,
    /// Keep the local cache of a remote repository under this directory (one
    /// subdirectory per repository); given, a local repository gets a cache too.
    /// Default: $XDG_CACHE_HOME/coffer, else ~/.cache/coffer.
    #[arg(long, env = "COFFER_CACHE_DIR", global = true, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Use no local cache: read everything from the repository.
    #[arg(long, env = "COFFER_NO_CACHE", global = true)]
    pub no_cache: bool,
    /// The command verifies the repository itself (`check`, `repair`): it reads
    /// every object from the storage, never from the local cache. The copy of
    /// the key file that opened the location still unlocks it (it opens only a
    /// key file the storage lists under its hash).
    #[arg(skip)]
    pub reads_storage_only: bool,
    /// The most the local cache of one repository may hold (e.g. 500M, 2G); the
    /// entries used least recently go first.
    #[arg(long, env = "COFFER_CACHE_SIZE", global = true, value_name = "SIZE", default_value = "1G",
          value_parser = parse_size)]
    pub cache_size: u64,
    /// Send at most this many KiB per second to the storage (e.g. 2048 for 2 MiB/s), over all
    /// of the command's connections and backends together.
    #[arg(long, env = "COFFER_LIMIT_UPLOAD", global = true, value_name = "KIB", value_parser = parse_limit)]
    pub limit_upload: Option<u32>,
    /// Read at most this many KiB per second from the storage, over all of the command's
    /// connections and backends together.
    #[arg(long, env = "COFFER_LIMIT_DOWNLOAD", global = true, value_name = "KIB", value_parser = parse_limit)]
    pub limit_download: Option<u32>,
    /// Storage credentials and settings from a profile's `[storage]` table, by
    /// environment variable name; the environment wins.
    #[arg(skip)]
    pub storage_vars: std::collections::BTreeMap<String, String>,
    /// Read the passphrase from this file (first line). COFFER_PASSWORD takes precedence.
    #[arg(long, env = "COFFER_PASSWORD_FILE", global = true)]
    pub password_file: Option<PathBuf>,
    /// Run this shell command and use the first line it prints as the passphrase
    /// (not with --password-file). COFFER_PASSWORD takes precedence.
    #[arg(long, env = "COFFER_PASSWORD_COMMAND", global = true, value_name = "COMMAND")]
    pub password_command: Option<String>,
    /// Say more (repeatable: -vv): `backup -v` lists the files it reads; every command ends
    /// with the storage requests and bytes it made.
    #[arg(short = 'v', long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// Show times in UTC instead of local time.
    #[arg(long, global = true)]
    pub utc: bool,
    /// Without a terminal (or with --json), print a status line this often during
    /// long commands (e.g. 30s; 0 for none).
    #[arg(long, env = "COFFER_PROGRESS_INTERVAL", global = true, value_name = "DURATION",
          default_value = "10s", value_parser = humantime::parse_duration)]
    pub progress_interval: std::time::Duration,
    /// Print machine-readable JSON (one document, or JSON lines for streams).
    #[arg(long, global = true)]
    pub json: bool,
    /// Print only errors and warnings; no progress bar.
    #[arg(short, long, global = true)]
    pub quiet: bool,
    /// Load defaults from profile NAME: $XDG_CONFIG_HOME/coffer/NAME.toml (else
    /// ~/.config/coffer/NAME.toml), or the file given if NAME holds a `/` or ends in
    /// `.toml`. Options on the command line win.
    #[arg(short = 'P', long, env = "COFFER_PROFILE", global = true, value_name = "NAME")]
    pub profile: Option<String>,
    /// A repository over several backends: accept a write once N copies of a pack
    /// are stored (default: all of them); what is short is reported and
    /// remembered for `coffer repair --replicas`.
    #[arg(long, env = "COFFER_MIN_COPIES", global = true, value_name = "N",
          value_parser = clap::value_parser!(u8).range(1..=16))]
    pub min_copies: Option<u8>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Create a repository.
    #[command(after_help = EXIT_CODES)]
    Init(InitArgs),
    /// Run a job of the jobs file (or of a profile's [job] table) now, exactly as the
    /// agent would: hooks, the steps, the run recorded, notifications sent.
    #[command(after_help = EXIT_CODES)]
    Run(crate::cmd::agent::RunArgs),
    /// The agent: run jobs when they are due (no subcommand), or see and install it.
    #[command(after_help = EXIT_CODES)]
    Agent(crate::cmd::agent::AgentArgs),
    /// Back up files and directories.
    #[command(after_help = EXIT_CODES)]
    Backup(BackupArgs),
    /// Copy snapshots, and the data they need, from another repository
    /// (--from-repo), sending only what this one lacks.
    #[command(after_help = EXIT_CODES)]
    Copy(CopyArgs),
    /// Import every snapshot of a restic repository (restic:LOCATION), every
    /// archive of a borg repository (borg:REPO[::ARCHIVE]) or every snapshot of
    /// a kopia repository (kopia:[CONFIG_FILE][::SNAPSHOT_ID]), oldest first;
    /// run again, only those not imported before.
    #[command(after_help = EXIT_CODES)]
    Import(ImportArgs),
    /// Store a tar archive (a file, or `-` for standard input) as a snapshot:
    /// what any program that exports tar hands over.
    #[command(name = "import-tar", after_help = EXIT_CODES)]
    ImportTar(ImportTarArgs),
    /// List snapshots.
    #[command(after_help = EXIT_CODES)]
    Snapshots(SnapshotsArgs),
    /// List the entries of a snapshot.
    #[command(after_help = EXIT_CODES)]
    Ls(LsArgs),
    /// Show what changed between two snapshots.
    #[command(after_help = EXIT_CODES)]
    Diff(DiffArgs),
    /// Restore a snapshot, or part of one, into a directory.
    #[command(after_help = EXIT_CODES)]
    Restore(RestoreArgs),
    /// Mount every snapshot read-only at a directory (FUSE) until Ctrl-C or unmount.
    #[cfg(all(feature = "mount", target_os = "linux"))]
    #[command(after_help = EXIT_CODES)]
    Mount(MountArgs),
    /// Print a decrypted repository object (for debugging).
    #[command(after_help = EXIT_CODES)]
    Cat(CatArgs),
    /// Verify the repository's structure and, with --read-data, all of its data
    /// (or with --read-data-subset, part of it).
    #[command(after_help = EXIT_CODES)]
    Check(CheckArgs),
    /// Remove snapshots, leaving a signed tombstone in the history.
    #[command(after_help = EXIT_CODES)]
    Forget(ForgetArgs),
    /// Print a proof that a file belongs to a signed snapshot.
    #[command(after_help = EXIT_CODES)]
    Prove(ProveArgs),
    /// Check a proof made by `coffer prove`, without the repository.
    #[command(name = "verify-proof", after_help = EXIT_CODES)]
    VerifyProof(VerifyProofArgs),
    /// List the writers (signing keys) registered in the repository, and which this client trusts.
    #[command(after_help = EXIT_CODES)]
    Writers(WritersArgs),
    /// Delete data no snapshot uses; safe while backups run (no lock).
    #[command(after_help = EXIT_CODES)]
    Prune(PruneArgs),
    /// Manage key files (passphrases), and rotate the data key.
    #[command(after_help = EXIT_CODES)]
    Key(KeyArgs),
    /// Rebuild what a damaged repository lost: its index from the packs, or a lost config.
    #[command(after_help = EXIT_CODES)]
    Repair(RepairArgs),
    /// Print coffer's version, and the system it was built for.
    Version,
    /// Write shell completions (bash, zsh, fish) and man pages.
    Generate(GenerateArgs),
    /// Sizes: what a restore would write, and the data stored for it after deduplication.
    #[command(after_help = EXIT_CODES)]
    Stats(StatsArgs),
    /// Measure which settings back up fastest on this machine and this data.
    #[command(after_help = EXIT_CODES)]
    Bench(crate::cmd::bench::BenchArgs),
    /// The backends of a repository over several backends: add, remove, list.
    #[command(after_help = EXIT_CODES)]
    Backend(crate::cmd::backend::BackendArgs),
    /// Move packs to the backends the current layout gives them, then finish the migration.
    #[command(after_help = EXIT_CODES)]
    Rebalance,
    /// Change snapshots' tags: each changed snapshot is replaced by a new signed one
    /// that links to it, and a tombstone records the replacement.
    #[command(after_help = EXIT_CODES)]
    Tag(TagArgs),
    /// Write a file of a snapshot to stdout, or a directory as a tar or zip archive.
    #[command(after_help = EXIT_CODES)]
    Dump(DumpArgs),
    /// Find files and directories by name across snapshots.
    #[command(after_help = EXIT_CODES)]
    Find(FindArgs),
    /// List the local caches of repositories (size, last use), or remove old ones.
    Cache(CacheArgs),
    /// Serve the repository at --repo to coffer clients (coffer:https://HOST:PORT), with
    /// access keys per client (append, append-nodata, read, prune, admin) and checked uploads.
    #[command(after_help = EXIT_CODES)]
    Serve(crate::cmd::serve::ServeArgs),
    /// The web interface on 127.0.0.1:8347: jobs and their runs, repositories,
    /// snapshots, browsing and downloads, and its JSON API (docs/api.md).
    #[command(after_help = EXIT_CODES)]
    Ui(crate::cmd::ui::UiArgs),
}

#[derive(Args, Debug)]
pub struct CacheArgs {
    /// Remove the caches not used for --max-age days.
    #[arg(long)]
    pub cleanup: bool,
    /// With --cleanup: the days a cache may go unused before it is removed.
    #[arg(long, default_value_t = 30, value_name = "DAYS", requires = "cleanup")]
    pub max_age: u64,
}

#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("change").required(true).multiple(true)))]
pub struct TagArgs {
    /// Snapshots to change (id prefixes or `latest`); default: every snapshot the
    /// --host/--tag/--path filters pass.
    pub snapshots: Vec<String>,
    /// Add this tag (repeat, or separate with commas).
    #[arg(long, value_delimiter = ',', group = "change")]
    pub add: Vec<String>,
    /// Remove this tag (repeat, or separate with commas).
    #[arg(long, value_delimiter = ',', group = "change")]
    pub remove: Vec<String>,
    /// Replace all tags with these (repeat, or separate with commas; `--set ''` removes all).
    #[arg(long, value_delimiter = ',', num_args = 1, group = "change")]
    pub set: Option<Vec<String>>,
    #[command(flatten)]
    pub filter: FilterArgs,
}

#[derive(Args, Debug)]
pub struct DumpArgs {
    /// Snapshot (id prefix or `latest`).
    pub snapshot: String,
    /// Path in the snapshot: a file is written as it is, a directory as an archive.
    pub path: std::ffi::OsString,
    /// The archive format for a directory.
    #[arg(long, value_enum, default_value_t = ArchiveFormat::Tar)]
    pub archive: ArchiveFormat,
    /// Write to this file instead of stdout.
    #[arg(long, short = 't', value_name = "FILE")]
    pub target: Option<PathBuf>,
    #[command(flatten)]
    pub filter: FilterArgs,
}

/// `dump --archive`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ArchiveFormat {
    Tar,
    Zip,
}

#[derive(Args, Debug)]
pub struct FindArgs {
    /// Name patterns (glob: `*`, `?`, `[...]`); an entry matching any is printed.
    /// A pattern holding `/` is matched against the whole path.
    #[arg(required = true)]
    pub patterns: Vec<String>,
    /// Only in these snapshots (id prefixes or `latest`; repeatable). Default: all.
    #[arg(long = "snapshot", short = 's', value_name = "ID")]
    pub snapshots: Vec<String>,
    /// Only entries modified at or before this time (`YYYY-MM-DD[ HH:MM:SS]` in
    /// local time, or RFC 3339), as restic's `find --newest`.
    #[arg(long, short = 'N', value_name = "TIME")]
    pub newest: Option<String>,
    /// Only entries modified at or after this time.
    #[arg(long, short = 'O', value_name = "TIME")]
    pub oldest: Option<String>,
    /// Only regular files of at least this size (`500K`, `2M`, `1G`, bytes without a unit).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub min_size: Option<u64>,
    /// Only regular files of at most this size.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub max_size: Option<u64>,
    /// Match names without regard to case.
    #[arg(long, short = 'i')]
    pub ignore_case: bool,
    #[command(flatten)]
    pub filter: FilterArgs,
}

#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("what").required(true).multiple(true)))]
pub struct GenerateArgs {
    /// Write the bash completion script to FILE (`-` for standard output).
    #[arg(long, value_name = "FILE", group = "what")]
    pub bash_completion: Option<PathBuf>,
    /// Write the zsh completion script to FILE (`-` for standard output).
    #[arg(long, value_name = "FILE", group = "what")]
    pub zsh_completion: Option<PathBuf>,
    /// Write the fish completion script to FILE (`-` for standard output).
    #[arg(long, value_name = "FILE", group = "what")]
    pub fish_completion: Option<PathBuf>,
    /// Write man pages (coffer.1 and one per command) into DIR.
    #[arg(long, value_name = "DIR", group = "what")]
    pub man: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct StatsArgs {
    /// Snapshots to count (ids, unique prefixes or `latest`); default: every snapshot
    /// that passes the filters.
    pub snapshots: Vec<String>,
    /// `restore-size`: the files a restore writes (sizes and counts, each snapshot
    /// counted in full); `raw-data`: the stored blobs they use, each counted once.
    #[arg(long, value_enum, default_value_t = StatsMode::RestoreSize)]
    pub mode: StatsMode,
    #[command(flatten)]
    pub filter: FilterArgs,
}

/// `stats --mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum StatsMode {
    /// What restoring the snapshots would write.
    RestoreSize,
    /// The deduplicated data stored for them.
    RawData,
}

#[derive(Args, Debug)]
pub struct RepairConfigArgs {
    #[command(flatten)]
    pub settings: RepoSettings,
}

/// The settings a repository's config fixes for its life.
#[derive(Args, Debug)]
pub struct RepoSettings {
    /// Minimum chunk size (e.g. 512K).
    #[arg(long, default_value = "512K", value_parser = parse_size)]
    pub chunk_min: u64,
    /// Average chunk size, a power of two (e.g. 1M).
    #[arg(long, default_value = "1M", value_parser = parse_size)]
    pub chunk_avg: u64,
    /// Maximum chunk size (e.g. 4M).
    #[arg(long, default_value = "4M", value_parser = parse_size)]
    pub chunk_max: u64,
    /// zstd compression level, 0 to disable.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(i32).range(0..=22))]
    pub compression: i32,
    /// Target pack size (e.g. 16M).
    #[arg(long, default_value = "16M", value_parser = parse_size)]
    pub pack_size: u64,
}

#[derive(Args, Debug)]
pub struct InitArgs {
    #[command(flatten)]
    pub settings: RepoSettings,
    /// scrypt cost: log2(N). Lower is faster to open and weaker against guessing;
    /// below 15 (the default) only with --insecure-kdf.
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u8).range(10..=22))]
    pub kdf_log_n: u8,
    /// Accept a --kdf-log-n below 15: a key file that is cheaper to guess (tests,
    /// throwaway repositories).
    #[arg(long)]
    pub insecure_kdf: bool,
    /// Let the repository directory's group read the repository (files 0640,
    /// directories 0750) instead of its owner only (0600, 0700).
    #[arg(long)]
    pub group_readable: bool,
    /// Make a repository related to this one: it shares its chunker sizes, id and
    /// chunker keys and data keys, so `coffer copy` between the two sends packs
    /// byte for byte (its --chunk-* settings are ignored).
    #[arg(long, value_name = "SRC")]
    pub from_repo: Option<String>,
    /// With --from-repo: new data keys of its own instead of the source's (a copy
    /// then decrypts and encrypts again the blobs it sends; deduplication still
    /// holds across the two).
    #[arg(long, requires = "from_repo")]
    pub own_data_keys: bool,
    /// Read the passphrase of --from-repo from this file (first line).
    /// COFFER_FROM_PASSWORD takes precedence.
    #[arg(long, env = "COFFER_FROM_PASSWORD_FILE", value_name = "FILE")]
    pub from_password_file: Option<PathBuf>,
    /// Keep R copies of every pack, on R different backends (given with --backend).
    #[arg(long, value_name = "R", requires = "backends", value_parser = clap::value_parser!(u8).range(1..=16))]
    pub replicas: Option<u8>,
    /// A backend of a repository over several backends: `NAME:SIZE[:ZONE]=LOCATION`
    /// (repeat; SIZE is its capacity, e.g. 2T).
    #[arg(long = "backend", value_name = "SPEC", requires = "replicas")]
    pub backends: Vec<String>,
}

/// `coffer copy` (docs/design.md#copy).
#[derive(Args, Debug)]
pub struct CopyArgs {
    /// The repository to copy from (same location syntax as --repo).
    #[arg(long, value_name = "SRC", env = "COFFER_FROM_REPOSITORY")]
    pub from_repo: String,
    /// Read the passphrase of --from-repo from this file (first line).
    /// COFFER_FROM_PASSWORD takes precedence.
    #[arg(long, env = "COFFER_FROM_PASSWORD_FILE", value_name = "FILE")]
    pub from_password_file: Option<PathBuf>,
    /// Snapshots to copy (ids, unique prefixes, or `latest`); default: every
    /// snapshot the destination lacks.
    pub snapshots: Vec<String>,
    #[command(flatten)]
    pub filter: FilterArgs,
    /// Also copy the source's tombstones and remove from the destination the
    /// snapshots they forget (a mirror).
    #[arg(long)]
    pub with_forgets: bool,
    /// Report what would be sent (objects and bytes); write nothing.
    #[arg(long, short = 'n')]
    pub dry_run: bool,
    /// Allow copying into an unrelated repository: every file of the snapshots
    /// copied is read and cut again by the destination's chunker.
    #[arg(long)]
    pub rechunk: bool,
}

/// `coffer import` (docs/design.md#import).
#[derive(Args, Debug)]
pub struct ImportArgs {
    /// The repository to import: restic:LOCATION, where LOCATION is any
    /// location coffer reads (a directory, s3:…, sftp:…), or
    /// borg:REPO[::ARCHIVE] as borg takes it (through the installed borg, or
    /// the one COFFER_BORG names), or kopia:[CONFIG_FILE][::SNAPSHOT_ID], a
    /// kopia repository by its kopia config file (kopia's default one when none
    /// is named; through the installed kopia, or the one COFFER_KOPIA names),
    /// or only the snapshot of that manifest id.
    #[arg(value_name = "SOURCE")]
    pub source: String,
    /// Read the source repository's passphrase from this file (first line).
    /// COFFER_FROM_PASSWORD takes precedence; without either, restic's
    /// RESTIC_PASSWORD and RESTIC_PASSWORD_FILE are read, then the terminal;
    /// borg's own BORG_PASSPHRASE and BORG_PASSCOMMAND apply, and kopia's own
    /// KOPIA_PASSWORD or the password it saved beside its config file.
    #[arg(long, env = "COFFER_FROM_PASSWORD_FILE", value_name = "FILE")]
    pub from_password_file: Option<PathBuf>,
    /// Say which snapshots would be imported and how many bytes read; write nothing.
    #[arg(long, short = 'n')]
    pub dry_run: bool,
}

#[derive(Args, Debug)]
pub struct ImportTarArgs {
    /// The archive: a file, or `-` for standard input. Compressed archives are
    /// read through their decompressor: `zstd -dc a.tar.zst | coffer import-tar -`.
    #[arg(value_name = "FILE", default_value = "-")]
    pub file: PathBuf,
    /// The snapshot's time instead of now: `YYYY-MM-DD HH:MM:SS` in local time
    /// (UTC with --utc), or RFC 3339.
    #[arg(long, value_name = "TIME")]
    pub time: Option<String>,
    /// Host name to record instead of this machine's.
    #[arg(long, short = 'H', env = "COFFER_HOST")]
    pub host: Option<String>,
    /// User name to record instead of the current user's.
    #[arg(long, value_name = "NAME")]
    pub user: Option<String>,
    /// The snapshot's paths (repeatable; absolute); the archive's entries are
    /// stored as it names them. Default: its top-level names, each after `/`.
    #[arg(long = "path", value_name = "PATH")]
    pub paths: Vec<String>,
    /// Tag the snapshot (repeat, or separate with commas).
    #[arg(long = "tag", value_delimiter = ',')]
    pub tags: Vec<String>,
    /// Read and chunk the archive, write nothing.
    #[arg(long, short = 'n')]
    pub dry_run: bool,
}

/// Which snapshots `latest` may pick.
#[derive(Args, Debug, Clone, Default)]
pub struct FilterArgs {
    /// Only snapshots of this host.
    #[arg(long = "host", short = 'H', env = "COFFER_HOST")]
    pub host: Option<String>,
    /// Only snapshots with this tag (repeat for several).
    #[arg(long = "tag")]
    pub tags: Vec<String>,
    /// Only snapshots that include this path (repeat for several).
    #[arg(long = "path")]
    pub paths: Vec<String>,
}

/// [`FilterArgs`] for `forget`, where `-H` means `--keep-hourly` (as in restic):
/// `--host` has no short form there.
#[derive(Args, Debug, Clone, Default)]
pub struct ForgetFilterArgs {
    /// Only snapshots of this host.
    #[arg(long = "host", env = "COFFER_HOST")]
    pub host: Option<String>,
    /// Only snapshots with this tag (repeat for several).
    #[arg(long = "tag")]
    pub tags: Vec<String>,
    /// Only snapshots that include this path (repeat for several).
    #[arg(long = "path")]
    pub paths: Vec<String>,
}

#[derive(Args, Debug)]
pub struct BackupArgs {
    /// Files and directories to back up. One that does not exist is warned about
    /// and the rest is backed up (exit code 3).
    /// With --stdin-from-command: the command and its arguments (after `--`).
    #[arg(required_unless_present_any = ["files_from", "files_from_verbatim", "files_from_raw", "stdin"])]
    pub paths: Vec<PathBuf>,
    /// Back up standard input as one file (named by --stdin-filename); the
    /// passphrase must then come from elsewhere than standard input.
    #[arg(long, conflicts_with_all = ["paths", "files_from", "files_from_verbatim", "files_from_raw", "stdin_from_command"])]
    pub stdin: bool,
    /// The name of the file --stdin or --stdin-from-command stores.
    #[arg(long, value_name = "NAME", default_value = "stdin")]
    pub stdin_filename: String,
    /// Run the command given after `--` and back up its standard output as one
    /// file; if it exits with a failure, no snapshot is written.
    #[arg(long, conflicts_with_all = ["files_from", "files_from_verbatim", "files_from_raw"])]
    pub stdin_from_command: bool,
    /// Read paths to back up from this file (`-` for standard input), one per line;
    /// empty lines and lines starting with `#` are ignored, and a line holding `*`,
    /// `?` or `[...]` is expanded to the paths it matches (repeatable).
    #[arg(long, value_name = "FILE")]
    pub files_from: Vec<PathBuf>,
    /// Read paths from this file, one per line, every non-empty line verbatim (repeatable).
    #[arg(long, value_name = "FILE")]
    pub files_from_verbatim: Vec<PathBuf>,
    /// Read paths from this file, separated by NUL bytes, as `find -print0` writes
    /// them (repeatable).
    #[arg(long, value_name = "FILE")]
    pub files_from_raw: Vec<PathBuf>,
    /// Tag the snapshot (repeat, or separate with commas).
    #[arg(long = "tag", value_delimiter = ',')]
    pub tags: Vec<String>,
    /// Host name to record instead of this machine's.
    #[arg(long, short = 'H', env = "COFFER_HOST")]
    pub host: Option<String>,
    /// Leave out entries matching this gitignore-style pattern (repeatable).
    #[arg(long = "exclude", short = 'e')]
    pub excludes: Vec<String>,
    /// Read exclude patterns from a file, one per line (repeatable).
    #[arg(long = "exclude-file")]
    pub exclude_files: Vec<PathBuf>,
    /// Like --exclude, ignoring case (repeatable).
    #[arg(long = "iexclude", value_name = "PATTERN")]
    pub iexcludes: Vec<String>,
    /// Like --exclude-file, ignoring case (repeatable).
    #[arg(long = "iexclude-file", value_name = "FILE")]
    pub iexclude_files: Vec<PathBuf>,
    /// Leave out directories holding a CACHEDIR.TAG file with the standard signature.
    #[arg(long)]
    pub exclude_caches: bool,
    /// Leave out directories that hold an entry of this name (repeatable).
    #[arg(long, value_name = "NAME")]
    pub exclude_if_present: Vec<String>,
    /// Leave out files larger than this size (e.g. 512K, 2G).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub exclude_larger_than: Option<u64>,
    /// The snapshot's time instead of now: `YYYY-MM-DD HH:MM:SS` in local time
    /// (UTC with --utc), or RFC 3339.
    #[arg(long, value_name = "TIME")]
    pub time: Option<String>,
    /// Write no snapshot when nothing changed since the parent snapshot.
    #[arg(long)]
    pub skip_if_unchanged: bool,
    /// Do not cross file system boundaries.
    #[arg(long, short = 'x')]
    pub one_file_system: bool,
    /// Read and chunk everything, write nothing.
    #[arg(long, short = 'n')]
    pub dry_run: bool,
    /// Snapshot to compare against for change detection (default: the latest with
    /// the same host and paths that this client signed). Files that look unchanged
    /// since it get its content without being read: name only a snapshot you trust.
    #[arg(long)]
    pub parent: Option<String>,
    /// Read every file, even those unchanged since the parent snapshot.
    #[arg(long)]
    pub force: bool,
    /// Also reread this percentage of unchanged files, picked at random, to catch
    /// content that changed without its metadata.
    #[arg(long, default_value_t = 0.0, value_parser = parse_percent)]
    pub reread_share: f64,
}

#[derive(Args, Debug)]
pub struct SnapshotsArgs {
    #[command(flatten)]
    pub filter: FilterArgs,
    /// Only the N newest snapshots of each group (see --group-by; default: host and paths).
    #[arg(long, value_name = "N")]
    pub latest: Option<usize>,
    /// Fewer columns: id, time, host, tags.
    #[arg(long, short = 'c')]
    pub compact: bool,
    /// List snapshots in groups sharing these fields: a comma-separated subset of
    /// host, paths, tags.
    #[arg(long, short = 'g', value_name = "FIELDS")]
    pub group_by: Option<coffer_core::ops::retention::GroupBy>,
}

#[derive(Args, Debug)]
pub struct LsArgs {
    /// Snapshot id (a unique prefix works) or `latest`.
    pub snapshot: String,
    /// Only entries at and below this path.
    pub path: Option<PathBuf>,
    /// Show mode, owner, size and time.
    #[arg(long, short = 'l')]
    pub long: bool,
    #[command(flatten)]
    pub filter: FilterArgs,
}

/// `coffer mount` (docs/design.md#mount).
#[cfg(all(feature = "mount", target_os = "linux"))]
#[derive(Args, Debug)]
pub struct MountArgs {
    /// Empty directory to mount the repository at.
    pub mountpoint: PathBuf,
    /// Memory for cached trees and data blobs.
    #[arg(long, default_value = "256M", value_parser = parse_size)]
    pub cache_size: u64,
    /// Let other users than the one mounting reach the mount, each file as its
    /// recorded owner, group and mode allow (needs `user_allow_other` in
    /// /etc/fuse.conf unless root).
    #[arg(long)]
    pub allow_other: bool,
}

#[derive(Args, Debug)]
pub struct DiffArgs {
    /// The older snapshot: id (a unique prefix works) or `latest`.
    pub snapshot1: String,
    /// The newer snapshot: id (a unique prefix works) or `latest`.
    pub snapshot2: String,
    #[command(flatten)]
    pub filter: FilterArgs,
}

#[derive(Args, Debug)]
pub struct RestoreArgs {
    /// SNAPSHOT or SNAPSHOT:SUBPATH (id prefix or `latest`); SUBPATH may be any bytes.
    pub snapshot: std::ffi::OsString,
    /// Directory to restore into.
    #[arg(long, short = 't')]
    pub target: PathBuf,
    /// Restore only entries matching this gitignore-style pattern (repeatable).
    #[arg(long = "include", short = 'i')]
    pub includes: Vec<String>,
    /// Do not restore entries matching this gitignore-style pattern (repeatable).
    #[arg(long = "exclude", short = 'e')]
    pub excludes: Vec<String>,
    /// Like --include, ignoring case (repeatable).
    #[arg(long = "iinclude", value_name = "PATTERN")]
    pub iincludes: Vec<String>,
    /// Like --exclude, ignoring case (repeatable).
    #[arg(long = "iexclude", value_name = "PATTERN")]
    pub iexcludes: Vec<String>,
    /// Read include patterns from a file, one per line (repeatable).
    #[arg(long = "include-file", value_name = "FILE")]
    pub include_files: Vec<PathBuf>,
    /// Read exclude patterns from a file, one per line (repeatable).
    #[arg(long = "exclude-file", value_name = "FILE")]
    pub exclude_files: Vec<PathBuf>,
    /// Restore into a target that is not empty: `always` replaces what is there
    /// (the value when none is given), `if-changed` keeps files of the same size
    /// and modification time, `if-newer` keeps files at least as new, `never`
    /// keeps everything there. Without it a non-empty target is refused (exit 21).
    #[arg(long, value_enum, num_args = 0..=1, default_missing_value = "always", value_name = "WHEN")]
    pub overwrite: Option<OverwriteArg>,
    /// Remove what the target's restored directories hold that the snapshot does
    /// not (never following symlinks); needs --overwrite.
    #[arg(long, requires = "overwrite")]
    pub delete: bool,
    /// Show what would be restored (counts and bytes); touch nothing.
    #[arg(long, short = 'n')]
    pub dry_run: bool,
    /// After restoring, read every restored file back and compare it with the
    /// snapshot; a difference ends with exit code 20.
    #[arg(long)]
    pub verify: bool,
    /// As root, whether to restore what only root can create (owners, device nodes,
    /// setuid/setgid bits, `security.`/`trusted.` extended attributes such as file
    /// capabilities): `auto` only from a snapshot signed by this client's own writer
    /// key, `all` always, `none` never.
    #[arg(long, value_enum, default_value_t = Privileged::Auto)]
    pub privileged: Privileged,
    #[command(flatten)]
    pub filter: FilterArgs,
}

/// `restore --overwrite`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OverwriteArg {
    Always,
    IfChanged,
    IfNewer,
    Never,
}

/// `restore --privileged`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Privileged {
    /// Only from a snapshot signed by this client's own writer key.
    Auto,
    /// Always.
    All,
    /// Never.
    None,
}

#[derive(Args, Debug)]
pub struct CatArgs {
    /// One of: config, key, snapshot, index, tree.
    pub kind: String,
    /// The object: an id or unique prefix (key, snapshot, index); for tree, a blob
    /// id or SNAPSHOT:PATH.
    pub id: Option<String>,
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// Also read and verify every pack.
    #[arg(long)]
    pub read_data: bool,
    /// Read and verify only part of the packs: `n/t` reads group n of t (the t groups
    /// together cover every pack); `N%` reads N percent of them, preferring packs this
    /// machine has not verified yet, so that repeated runs cover the whole repository.
    #[arg(long, value_name = "SPEC", conflicts_with = "read_data", value_parser = parse_subset)]
    pub read_data_subset: Option<DataSubset>,
    /// A repository over several backends: list `data/` on each backend and report
    /// packs missing, under-replicated or misplaced, copies whose sizes differ, and
    /// other objects a backend lacks. With --read-data, also read every copy.
    #[arg(long)]
    pub replicas: bool,
}

/// Parses a `--read-data-subset` value: `n/t` or `N%`.
pub fn parse_subset(s: &str) -> Result<DataSubset, String> {
    s.parse()
}

/// `coffer forget`: either snapshots named by id, or a retention policy (the
/// `--keep-*` options) applied to every snapshot that passes the filters.
#[derive(Args, Debug)]
pub struct ForgetArgs {
    /// Snapshots to forget (ids or unique prefixes). Not with a policy.
    #[arg(conflicts_with_all = [
        "keep_last", "keep_hourly", "keep_daily", "keep_weekly", "keep_monthly", "keep_yearly",
        "keep_within", "keep_within_hourly", "keep_within_daily", "keep_within_weekly",
        "keep_within_monthly", "keep_within_yearly", "keep_tags", "group_by", "host", "tags", "paths",
    ])]
    pub snapshots: Vec<String>,
    /// Keep the N newest snapshots of each group ('unlimited' for all).
    #[arg(long, short = 'l', value_name = "N", default_value = "0", value_parser = parse_keep_count)]
    pub keep_last: u32,
    /// Keep the newest snapshot of each of the last N hours that have snapshots
    /// (hours, days, weeks, months and years in local time; --utc for UTC).
    #[arg(long, short = 'H', value_name = "N", default_value = "0", value_parser = parse_keep_count)]
    pub keep_hourly: u32,
    /// Keep the newest snapshot of each of the last N days that have snapshots.
    #[arg(long, short = 'd', value_name = "N", default_value = "0", value_parser = parse_keep_count)]
    pub keep_daily: u32,
    /// Keep the newest snapshot of each of the last N ISO weeks that have snapshots.
    #[arg(long, short = 'w', value_name = "N", default_value = "0", value_parser = parse_keep_count)]
    pub keep_weekly: u32,
    /// Keep the newest snapshot of each of the last N months that have snapshots.
    #[arg(long, short = 'm', value_name = "N", default_value = "0", value_parser = parse_keep_count)]
    pub keep_monthly: u32,
    /// Keep the newest snapshot of each of the last N years that have snapshots.
    #[arg(long, short = 'y', value_name = "N", default_value = "0", value_parser = parse_keep_count)]
    pub keep_yearly: u32,
    /// Keep snapshots newer than the group's newest minus this span: years, months,
    /// days, hours, e.g. 30d or 1y5m7d2h.
    #[arg(long, value_name = "DURATION")]
    pub keep_within: Option<coffer_core::ops::retention::Span>,
    /// Keep the newest snapshot of each hour within this span of the group's newest.
    #[arg(long, value_name = "DURATION")]
    pub keep_within_hourly: Option<coffer_core::ops::retention::Span>,
    /// Keep the newest snapshot of each day within this span of the group's newest.
    #[arg(long, value_name = "DURATION")]
    pub keep_within_daily: Option<coffer_core::ops::retention::Span>,
    /// Keep the newest snapshot of each week within this span of the group's newest.
    #[arg(long, value_name = "DURATION")]
    pub keep_within_weekly: Option<coffer_core::ops::retention::Span>,
    /// Keep the newest snapshot of each month within this span of the group's newest.
    #[arg(long, value_name = "DURATION")]
    pub keep_within_monthly: Option<coffer_core::ops::retention::Span>,
    /// Keep the newest snapshot of each year within this span of the group's newest.
    #[arg(long, value_name = "DURATION")]
    pub keep_within_yearly: Option<coffer_core::ops::retention::Span>,
    /// Keep snapshots carrying this tag; TAG,TAG... means all of them (repeatable:
    /// any of the lists).
    #[arg(long = "keep-tag", value_name = "TAG[,TAG...]", value_parser = parse_tag_list)]
    pub keep_tags: Vec<String>,
    /// Apply the policy to each group of snapshots sharing these fields: a
    /// comma-separated subset of host, paths, tags; "" for one group.
    #[arg(long, value_name = "FIELDS", default_value = "host,paths")]
    pub group_by: coffer_core::ops::retention::GroupBy,
    /// Only consider snapshots that pass these filters.
    #[command(flatten)]
    pub filter: ForgetFilterArgs,
    /// Show what would be kept and forgotten; change nothing.
    #[arg(long, short = 'n')]
    pub dry_run: bool,
    /// Allow a policy to forget every snapshot of a group (refused otherwise), or,
    /// without any keep rule, every snapshot.
    #[arg(long)]
    pub unsafe_allow_remove_all: bool,
    /// Run `coffer prune` afterwards (not with --dry-run).
    #[arg(long)]
    pub prune: bool,
    /// With --prune: how long prune waits between announcing deletions and making them.
    #[arg(long, value_parser = humantime::parse_duration, requires = "prune")]
    pub grace: Option<std::time::Duration>,
}

#[derive(Args, Debug)]
pub struct PruneArgs {
    /// Repack a pack when more than this percentage of it is unused.
    #[arg(long, default_value_t = 5.0, value_parser = parse_percent)]
    pub max_unused: f64,
    /// Show what would be deleted and repacked; change nothing.
    #[arg(long, short = 'n')]
    pub dry_run: bool,
    /// How long to wait between announcing deletions and making them, so running
    /// backups can react (at least 2m).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub grace: Option<std::time::Duration>,
}

#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct RepairArgs {
    #[command(subcommand)]
    pub command: Option<RepairCommand>,
    /// A repository over several backends: copy what each backend lacks from a
    /// copy whose bytes hash to its name, and replace copies found damaged (by
    /// `check --read-data`, or whose sizes differ) with verified ones.
    #[arg(long)]
    pub replicas: bool,
    /// With --replicas: read and hash every copy of every pack, and replace each
    /// damaged one.
    #[arg(long, requires = "replicas")]
    pub read_data: bool,
}

#[derive(Subcommand, Debug)]
pub enum RepairCommand {
    /// Rebuild the index from the packs' own trailers and headers: new index files
    /// for every pack that reads, then the old index files deleted. Safe to
    /// interrupt, and while backups run.
    Index(RepairIndexArgs),
    /// Write a new config for a repository whose config was lost, sealed under its
    /// existing keys (the passphrase must open a key file). Settings the lost config
    /// held are reset and listed; pass the ones used at init if they were not the
    /// defaults.
    Config(RepairConfigArgs),
    /// Delete the key files, index files, writer records, layouts and prune
    /// notices that do not decode (damaged, or planted by anyone who can write to
    /// the storage), never one that decodes. Packs only a removed index file may
    /// list are indexed first, from their own headers.
    Planted(RepairIndexArgs),
}

#[derive(Args, Debug)]
pub struct RepairIndexArgs {
    /// Show what would be written and deleted; change nothing.
    #[arg(long, short = 'n')]
    pub dry_run: bool,
}

#[derive(Args, Debug)]
pub struct KeyArgs {
    #[command(subcommand)]
    pub command: KeyCommand,
}

#[derive(Subcommand, Debug)]
pub enum KeyCommand {
    /// List the key files; `*` marks the one that opened the repository.
    List,
    /// Add a key file for a new passphrase.
    Add(NewKeyArgs),
    /// Remove a key file (neither the last one nor the one that opened the repository).
    Remove(KeyRemoveArgs),
    /// Change the passphrase: add a key file for a new one, then remove the one that opened the repository.
    Passwd(NewKeyArgs),
    /// Encrypt everything written from now on with a new data key. Existing data is
    /// not rewritten. Removes the key files of other passphrases (add them again with
    /// `coffer key add`).
    Rotate(KeyRotateArgs),
}

#[derive(Args, Debug)]
pub struct NewKeyArgs {
    /// Read the new passphrase from this file (first line). COFFER_NEW_PASSWORD takes precedence.
    #[arg(long, env = "COFFER_NEW_PASSWORD_FILE")]
    pub new_password_file: Option<PathBuf>,
    /// scrypt cost of the new key file: log2(N). Lower is faster to open and weaker against guessing;
    /// below 15 (the default) only with --insecure-kdf.
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u8).range(10..=22))]
    pub kdf_log_n: u8,
    /// Accept a --kdf-log-n below 15: a key file that is cheaper to guess (tests,
    /// throwaway repositories).
    #[arg(long)]
    pub insecure_kdf: bool,
}

#[derive(Args, Debug)]
pub struct WritersArgs {
    #[command(subcommand)]
    pub command: Option<WritersCommand>,
}

#[derive(Subcommand, Debug)]
pub enum WritersCommand {
    /// List the registered writers (the default).
    List,
    /// Trust a writer: a restore as root then recreates owners, setuid bits and device nodes from its
    /// snapshots, and a layout it signs is followed. Kept on this machine only.
    Trust(WritersTrustArgs),
    /// Stop trusting a writer trusted with `coffer writers trust`.
    Untrust(WritersKeyArgs),
}

#[derive(Args, Debug)]
pub struct WritersTrustArgs {
    /// The writer's public key (64 hex digits), or a unique prefix of a registered writer's key.
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    pub key: Option<String>,
    /// Trust every writer registered in the repository now (for a repository only you write to).
    #[arg(long)]
    pub all: bool,
}

#[derive(Args, Debug)]
pub struct WritersKeyArgs {
    /// The writer's public key (64 hex digits), or a unique prefix of a trusted key.
    pub key: String,
}

#[derive(Args, Debug)]
pub struct KeyRemoveArgs {
    /// The key file's id (a unique prefix works; see `coffer key list`).
    pub id: String,
}

#[derive(Args, Debug)]
pub struct KeyRotateArgs {
    /// Remove the key files of other passphrases (required when there are any).
    #[arg(long)]
    pub yes: bool,
}

#[derive(Args, Debug)]
pub struct ProveArgs {
    /// Snapshot id (a unique prefix works) or `latest`.
    pub snapshot: String,
    /// Absolute path of a regular file in the snapshot.
    pub path: std::ffi::OsString,
    /// Write the proof to this file instead of standard output.
    #[arg(long, short = 'o')]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub filter: FilterArgs,
}

#[derive(Args, Debug)]
pub struct VerifyProofArgs {
    /// The proof (a file written by `coffer prove`; `-` for standard input).
    pub proof: PathBuf,
    /// Also check that this file's content is the content proven.
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// Require the snapshot to be signed by this public key (hex, repeatable; see
    /// `coffer writers`).
    #[arg(long = "public-key")]
    pub public_keys: Vec<String>,
}

/// Parses a `--keep-*` count: a number, or `unlimited`.
pub fn parse_keep_count(s: &str) -> Result<u32, String> {
    if s.trim() == "unlimited" {
        return Ok(u32::MAX);
    }
    s.trim().parse().map_err(|_| format!("{s:?} is not a count: give a number or 'unlimited'"))
}

/// Checks `--keep-tag`: one tag, or several separated by commas, none empty.
pub fn parse_tag_list(s: &str) -> Result<String, String> {
    if s.split(',').any(|t| t.trim().is_empty()) {
        return Err(format!("{s:?} has an empty tag"));
    }
    Ok(s.to_string())
}

/// Parses a percentage from 0 to 100 (a trailing `%` is allowed).
pub fn parse_percent(s: &str) -> Result<f64, String> {
    let v: f64 = s.trim().trim_end_matches('%').parse().map_err(|_| format!("{s:?} is not a percentage"))?;
    if (0.0..=100.0).contains(&v) { Ok(v) } else { Err(format!("{s:?} is not between 0 and 100")) }
}

/// Parses a bandwidth limit: a whole number of KiB per second, at least 1.
pub fn parse_limit(s: &str) -> Result<u32, String> {
    const HOW: &str = "give a whole number of KiB per second from 1 to 4294967295 (e.g. 2048 for 2 MiB/s)";
    match s.trim().parse::<u32>() {
        Ok(0) => Err(format!("0 KiB/s would stop every transfer: {HOW}, or leave the option out for no limit")),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("{s:?} is not a number of KiB per second: {HOW}")),
    }
}

/// Parses sizes such as `4096`, `512K`, `1M`, `2G`, `4T` (binary units).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m = match c.to_ascii_uppercase() {
                'K' => 1u64 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                'T' => 1 << 40,
                'B' => 1,
                _ => return Err(format!("unknown size unit in {s:?}: use K, M, G or T")),
            };
            (&s[..i], m)
        }
        _ => (s, 1),
    };
    let n: u64 = num.trim().parse().map_err(|_| format!("{s:?} is not a size like 512K or 8M"))?;
    n.checked_mul(mult).ok_or_else(|| format!("{s:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("512K"), Ok(512 << 10));
        assert_eq!(parse_size("8m"), Ok(8 << 20));
        assert!(parse_size("3X").is_err());
        assert!(parse_size("M").is_err());
    }

    #[test]
    fn limits() {
        assert_eq!(parse_limit("2048"), Ok(2048));
        assert_eq!(parse_limit(" 1 "), Ok(1));
        assert!(parse_limit("0").unwrap_err().contains("stop every transfer"));
        for bad in ["", "-5", "2M", "1.5", "4294967296"] {
            assert!(parse_limit(bad).unwrap_err().contains("KiB per second"), "{bad}");
        }
    }

    #[test]
    fn keep_counts_and_tag_lists() {
        assert_eq!(parse_keep_count("7"), Ok(7));
        assert_eq!(parse_keep_count("unlimited"), Ok(u32::MAX));
        assert!(parse_keep_count("-1").is_err());
        assert_eq!(parse_tag_list("a,b"), Ok("a,b".to_string()));
        assert!(parse_tag_list("a,").is_err());
        assert!(parse_tag_list("").is_err());
    }

    #[test]
    fn init_defaults_are_the_library_defaults() {
        use clap::Parser;
        let Command::Init(a) = Cli::try_parse_from(["coffer", "init"]).unwrap().command else {
            panic!("not init");
        };
        let d = coffer_core::chunker::ChunkerParams::default();
        let s = &a.settings;
        assert_eq!((s.chunk_min, s.chunk_avg, s.chunk_max), (d.min_size.into(), d.avg_size.into(), d.max_size.into()));
        let lib = coffer_core::repo::InitOptions::default();
        assert_eq!((s.compression, s.pack_size), (lib.compression_level, lib.pack_size.into()));
    }

    #[test]
    fn cli_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
