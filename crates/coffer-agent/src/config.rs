//! The jobs file and the profiles that hold a `[job]` table: what the agent and
//! `coffer run` read (docs/design.md#jobs). Loading validates everything; an
//! error names the file, the line and the key.

mod reader;
mod values;

use std::collections::BTreeMap;
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use jiff::tz::TimeZone;
use toml::de::DeTable;

use crate::calendar::Schedule;
use reader::{Item, Source, Table};

/// The whole configuration: the `[agent]` table, every job and every notifier.
#[derive(Debug, Clone)]
pub struct Config {
    /// The files it was read from (the jobs file first, then the profiles its jobs
    /// name and those holding a job), for messages.
    pub files: Vec<PathBuf>,
    pub agent: AgentSettings,
    pub jobs: BTreeMap<String, Job>,
    pub notifiers: BTreeMap<String, NotifierConfig>,
}

/// `[agent]`.
#[derive(Debug, Clone, Default)]
pub struct AgentSettings {
    /// `metrics = "ADDR:PORT"`: serve Prometheus text there.
    pub metrics: Option<std::net::SocketAddr>,
    /// `metrics-remote = true`: allow a non-loopback metrics address.
    pub metrics_remote: bool,
    /// `textfile = "FILE"`: write the metrics there after every run.
    pub textfile: Option<PathBuf>,
    /// `state = "FILE"`: the state database (None: the binary's default).
    pub state: Option<PathBuf>,
    /// `ui = true` (127.0.0.1:8347) or `ui = "ADDR:PORT"`: serve the web interface.
    pub ui: Option<std::net::SocketAddr>,
    /// `ui-password-file = "FILE"`: the UI's password (its first line).
    pub ui_password_file: Option<PathBuf>,
    /// `ui-tls = "generate"`, or `ui-tls-cert`/`ui-tls-key`: the UI's TLS.
    pub ui_tls: UiTls,
}

/// The web interface's TLS, as `[agent]` gives it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum UiTls {
    #[default]
    None,
    /// A self-signed certificate made once in the state directory.
    Generate,
    /// A certificate chain and its key (PEM files).
    Files { cert: PathBuf, key: PathBuf },
}

/// The UI's address when `ui = true`.
pub const DEFAULT_UI: &str = "127.0.0.1:8347";

/// The kinds of run a job has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Backup,
    Prune,
    Check,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Backup, Kind::Prune, Kind::Check];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Backup => "backup",
            Kind::Prune => "prune",
            Kind::Check => "check",
        }
    }

    pub fn parse(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// What a notifier can be told.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Event {
    Failure,
    Recovery,
    Overdue,
    Success,
}

impl Event {
    pub const ALL: [Event; 4] = [Event::Failure, Event::Recovery, Event::Overdue, Event::Success];

    /// What `notify-on` holds when a job gives none.
    pub const DEFAULT: [Event; 3] = [Event::Failure, Event::Recovery, Event::Overdue];

    pub fn as_str(self) -> &'static str {
        match self {
            Event::Failure => "failure",
            Event::Recovery => "recovery",
            Event::Overdue => "overdue",
            Event::Success => "success",
        }
    }

    pub fn parse(s: &str) -> Option<Event> {
        Event::ALL.into_iter().find(|e| e.as_str() == s)
    }
}

/// One job. It holds no secret: a passphrase only by its source (a file, a
/// command); the storage variables, which may hold credentials, are left out of
/// its `Debug` output.
#[derive(Clone)]
pub struct Job {
    pub name: String,
    /// The file and line where the job is defined, for messages.
    pub defined_at: (PathBuf, usize),
    /// The job's table as its file names it, for messages: `job.NAME` in the jobs
    /// file, `job` in a profile.
    pub table: String,
    /// Options given to every coffer command of the job, before the command's name:
    /// `-P PROFILE`, `--repo …`, `--password-file …`, `--limit-upload …`, …
    pub global_args: Vec<String>,
    /// The storage variables of the job's `[job.NAME.storage]` table, given to the
    /// steps' environment (never to hooks).
    pub storage: BTreeMap<String, String>,
    /// The line of each storage variable in the job's file, for
    /// [`Config::check_storage_names`].
    pub storage_lines: BTreeMap<String, usize>,
    /// The paths to back up, absolute (so that none reads as an option).
    pub paths: Vec<String>,
    /// Options of `coffer backup` (excludes, tags, host…), before the paths.
    pub backup_args: Vec<String>,
    /// Options of the `coffer forget` that follows each successful backup (the keep
    /// rules), or None when the job has no retention policy. Empty when the policy
    /// is the profile's, which `coffer -P PROFILE forget` applies itself.
    pub forget_args: Option<Vec<String>>,
    pub schedules: BTreeMap<Kind, Schedule>,
    /// `check`: a fixed `--read-data-subset`, or `read-all-every = N`.
    pub check_data: CheckData,
    pub randomized_delay: Duration,
    pub retries: u32,
    pub retry_delay: Duration,
    /// No success within this long: overdue (None: the default rule of
    /// docs/design.md#agent-state).
    pub overdue: Option<Duration>,
    pub nice: Option<i32>,
    pub ionice: Option<Ionice>,
    pub hooks: Hooks,
    pub notify: Vec<String>,
    pub notify_on: Vec<Event>,
}

impl Job {
    /// The job's repository as the job gives it, for hooks, logs and metrics: its
    /// location (`--repo`), its repository file, or the profile that names it.
    pub fn repository_label(&self) -> String {
        let mut label = String::new();
        let mut args = self.global_args.iter();
        while let Some(a) = args.next() {
            match a.as_str() {
                "--repo" => return args.next().cloned().unwrap_or_default(),
                "--repository-file" => label = format!("file {}", args.next().map_or("", String::as_str)),
                "-P" if label.is_empty() => label = format!("profile {}", args.next().map_or("", String::as_str)),
                _ => {}
            }
        }
        label
    }
}

impl fmt::Debug for Job {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let storage: Vec<&String> = self.storage.keys().collect();
        f.debug_struct("Job")
            .field("name", &self.name)
            .field("defined_at", &self.defined_at)
            .field("table", &self.table)
            .field("global_args", &self.global_args)
            .field("storage (names only)", &storage)
            .field("paths", &self.paths)
            .field("backup_args", &self.backup_args)
            .field("forget_args", &self.forget_args)
            .field("schedules", &self.schedules.iter().map(|(k, s)| (*k, s.as_str())).collect::<Vec<_>>())
            .field("check_data", &self.check_data)
            .field("randomized_delay", &self.randomized_delay)
            .field("retries", &self.retries)
            .field("retry_delay", &self.retry_delay)
            .field("overdue", &self.overdue)
            .field("nice", &self.nice)
            .field("ionice", &self.ionice)
            .field("hooks", &self.hooks)
            .field("notify", &self.notify)
            .field("notify_on", &self.notify_on)
            .finish()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum CheckData {
    /// Metadata only.
    #[default]
    None,
    /// `read-data-subset = "SPEC"`, passed as is.
    Subset(String),
    /// `read-all-every = N`: group `k/N` at the k-th run.
    Rotate(u32),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ionice {
    Idle,
    BestEffort(u8),
}

/// `[job.NAME.hooks]`.
#[derive(Debug, Clone, Default)]
pub struct Hooks {
    pub before: Option<String>,
    pub after_success: Option<String>,
    pub after_failure: Option<String>,
    pub finally: Option<String>,
    pub timeout: Duration,
}

/// `[notify.NAME]`.
#[derive(Debug, Clone)]
pub struct NotifierConfig {
    pub name: String,
    pub target: Target,
    /// Extra CA certificates (PEM) to trust for this notifier's TLS.
    pub cacert: Option<PathBuf>,
    /// The same event of the same job is sent at most once per this long.
    pub rate_limit: Duration,
}

#[derive(Debug, Clone)]
pub enum Target {
    Webhook { url: String, preset: Preset },
    Mail(MailConfig),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preset {
    Json,
    Ntfy,
    Gotify,
    Slack,
    Discord,
    Healthchecks,
}

impl Preset {
    pub const ALL: [Preset; 6] =
        [Preset::Json, Preset::Ntfy, Preset::Gotify, Preset::Slack, Preset::Discord, Preset::Healthchecks];

    pub fn as_str(self) -> &'static str {
        match self {
            Preset::Json => "json",
            Preset::Ntfy => "ntfy",
            Preset::Gotify => "gotify",
            Preset::Slack => "slack",
            Preset::Discord => "discord",
            Preset::Healthchecks => "healthchecks",
        }
    }

    pub fn parse(s: &str) -> Option<Preset> {
        Preset::ALL.into_iter().find(|p| p.as_str() == s)
    }
}

#[derive(Debug, Clone)]
pub struct MailConfig {
    /// `smtp://HOST[:PORT]` (STARTTLS required), `smtps://HOST[:PORT]` (TLS), or
    /// `smtp+insecure://HOST[:PORT]` (plain text; loopback hosts only).
    pub smtp: String,
    pub from: String,
    pub to: Vec<String>,
    pub username: Option<String>,
    /// The SMTP password's file (first line); never the password itself.
    pub password_file: Option<PathBuf>,
}

/// The most a jobs file or a profile may hold (as for `-P`: docs/design.md#local-inputs).
pub const MAX_FILE_SIZE: u64 = 1 << 20;

/// The most retries a job may ask for (the last waits `retry-delay` × 2^29).
const MAX_RETRIES: i64 = 30;

/// The keys of a job's table.
/// (`password` is refused before, with its own message.)
const JOB_KEYS: &[&str] = &[
    "profile",
    "repository",
    "repository-file",
    "password-file",
    "password-command",
    "connections",
    "cacert",
    "cache-dir",
    "no-cache",
    "limit-upload",
    "limit-download",
    "storage",
    "paths",
    "exclude",
    "exclude-file",
    "iexclude",
    "iexclude-file",
    "exclude-if-present",
    "exclude-caches",
    "one-file-system",
    "exclude-larger-than",
    "tag",
    "host",
    "forget",
    "schedule",
    "prune",
    "check",
    "randomized-delay",
    "retries",
    "retry-delay",
    "overdue",
    "nice",
    "ionice",
    "hooks",
    "notify",
    "notify-on",
];
const FORGET_KEYS: &[&str] = &[
    "keep-last",
    "keep-hourly",
    "keep-daily",
    "keep-weekly",
    "keep-monthly",
    "keep-yearly",
    "keep-within",
    "keep-within-hourly",
    "keep-within-daily",
    "keep-within-weekly",
    "keep-within-monthly",
    "keep-within-yearly",
    "keep-tag",
    "group-by",
];
const HOOK_KEYS: &[&str] = &["before", "after-success", "after-failure", "finally", "timeout"];
const NOTIFY_KEYS: &[&str] =
    &["url", "preset", "smtp", "from", "to", "username", "password-file", "cacert", "rate-limit"];
const AGENT_KEYS: &[&str] = &[
    "metrics",
    "metrics-remote",
    "textfile",
    "state",
    "ui",
    "ui-password-file",
    "ui-tls",
    "ui-tls-cert",
    "ui-tls-key",
];

const HOOK_TIMEOUT: Duration = Duration::from_secs(600);
const RETRY_DELAY: Duration = Duration::from_secs(60);
const RATE_LIMIT: Duration = Duration::from_secs(600);

const NO_INLINE_PASSPHRASE: &str = "a passphrase is never written in a job: give password-file = \"FILE\" (its first \
                                    line) or password-command = \"COMMAND\" (the first line it prints)";

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{}: the jobs file does not exist: create it, or check the path given for it", path.display())]
    JobsFileMissing { path: PathBuf },
    #[error("{}: cannot read it: {source}; check the path and its permissions", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: cannot list the configuration directory: {source}; check its permissions", path.display())]
    ListDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: not a regular file ({what}): give a TOML file", path.display())]
    NotAFile { path: PathBuf, what: &'static str },
    #[error("{}: larger than {} bytes: a jobs file or profile is smaller; check that this is the right file", path.display(), MAX_FILE_SIZE)]
    TooLarge { path: PathBuf },
    #[error("{}: not UTF-8 text: a jobs file or profile is TOML, in UTF-8", path.display())]
    NotText { path: PathBuf },
    /// The file is not TOML.
    #[error("{}:{line}: {message}", path.display())]
    Syntax { path: PathBuf, line: usize, message: String },
    /// A key's value is refused, or a key is unknown or missing.
    #[error("{}:{line}: {key}: {message}", path.display())]
    Invalid { path: PathBuf, line: usize, key: String, message: String },
    #[error(
        "{}:{line}: job {name:?} is defined twice, here and at {}:{first_line} (a profile's [job] takes the \
         profile's name): rename one",
        path.display(),
        first_path.display()
    )]
    DuplicateJob { name: String, path: PathBuf, line: usize, first_path: PathBuf, first_line: usize },
}

impl Config {
    /// Refuses a storage variable whose name is not in `known` (the variables
    /// coffer's storages read), naming its file and line.
    pub fn check_storage_names(&self, known: &[&str]) -> Result<(), ConfigError> {
        for job in self.jobs.values() {
            if let Some(name) = job.storage.keys().find(|k| !known.contains(&k.as_str())) {
                return Err(ConfigError::Invalid {
                    path: job.defined_at.0.clone(),
                    line: job.storage_lines.get(name).copied().unwrap_or(job.defined_at.1),
                    key: format!("{}.storage.{name}", job.table),
                    message: format!("not a storage variable coffer reads; it reads {}", known.join(", ")),
                });
            }
        }
        Ok(())
    }
}

/// Reads the jobs file (`jobs_file`, or `config_dir/jobs.toml` when it exists) and
/// every profile `config_dir/*.toml` holding a `[job]` table. Schedules naming no
/// zone are read in `zone`. Relative paths in a file are taken from its directory.
/// A missing jobs file with no profile jobs is an empty configuration.
pub fn load(jobs_file: Option<&Path>, config_dir: &Path, zone: TimeZone) -> Result<Config, ConfigError> {
    let mut loader = Loader {
        zone,
        config_dir: config_dir.to_path_buf(),
        config: Config {
            files: Vec::new(),
            agent: AgentSettings::default(),
            jobs: BTreeMap::new(),
            notifiers: BTreeMap::new(),
        },
        notify_refs: Vec::new(),
    };
    let jobs_path = match jobs_file {
        Some(p) => {
            if std::fs::symlink_metadata(p).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound) {
                return Err(ConfigError::JobsFileMissing { path: p.to_path_buf() });
            }
            Some(p.to_path_buf())
        }
        None => {
            let p = config_dir.join("jobs.toml");
            match std::fs::symlink_metadata(&p) {
                Ok(_) => Some(p),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(e) => return Err(ConfigError::Read { path: p, source: e }),
            }
        }
    };
    if let Some(p) = &jobs_path {
        loader.read_jobs_file(p)?;
    }
    for profile in profiles(config_dir, jobs_path.as_deref())? {
        loader.read_profile(&profile)?;
    }
    loader.check_notify_refs()?;
    Ok(loader.config)
}

/// The profiles of the configuration directory, by name: `*.toml` files other than
/// `jobs.toml` and the jobs file, hidden files and directories left out.
fn profiles(config_dir: &Path, jobs_file: Option<&Path>) -> Result<Vec<PathBuf>, ConfigError> {
    let entries = match std::fs::read_dir(config_dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(ConfigError::ListDir { path: config_dir.to_path_buf(), source: e }),
    };
    let jobs_file = jobs_file.map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf()));
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| ConfigError::ListDir { path: config_dir.to_path_buf(), source: e })?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !name.ends_with(".toml") || name.starts_with('.') || name == "jobs.toml" {
            continue;
        }
        let path = entry.path();
        // Directories and dangling links are no profiles.
        if !std::fs::metadata(&path).is_ok_and(|m| m.is_file()) {
            continue;
        }
        let same = jobs_file.as_ref().is_some_and(|j| std::fs::canonicalize(&path).is_ok_and(|p| &p == j));
        if !same {
            out.push(path);
        }
    }
    out.sort();
    Ok(out)
}

/// Reads a whole configuration file: a regular file of at most [`MAX_FILE_SIZE`]
/// bytes of UTF-8.
fn read_text(path: &Path) -> Result<String, ConfigError> {
    let meta = std::fs::metadata(path).map_err(|e| ConfigError::Read { path: path.to_path_buf(), source: e })?;
    if !meta.is_file() {
        let what = if meta.is_dir() { "a directory" } else { "a device, pipe or socket" };
        return Err(ConfigError::NotAFile { path: path.to_path_buf(), what });
    }
    let file = std::fs::File::open(path).map_err(|e| ConfigError::Read { path: path.to_path_buf(), source: e })?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_SIZE + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| ConfigError::Read { path: path.to_path_buf(), source: e })?;
    if bytes.len() as u64 > MAX_FILE_SIZE {
        return Err(ConfigError::TooLarge { path: path.to_path_buf() });
    }
    String::from_utf8(bytes).map_err(|_| ConfigError::NotText { path: path.to_path_buf() })
}

fn parse<'a>(src: &Source<'a>) -> Result<DeTable<'a>, ConfigError> {
    match DeTable::parse(src.text) {
        Ok(t) => Ok(t.into_inner()),
        Err(e) => Err(ConfigError::Syntax {
            path: src.path.to_path_buf(),
            line: e.span().map_or(1, |s| src.line(s)),
            message: format!("not valid TOML: {}", e.message().trim_end()),
        }),
    }
}

/// Where a job is defined.
enum Origin {
    JobsFile,
    /// A profile's `[job]`: the profile's path, and whether it has a `[forget]` policy.
    Profile {
        path: PathBuf,
        policy: bool,
    },
}

/// A notifier a job names, to check once all are read.
struct NotifyRef {
    path: PathBuf,
    line: usize,
    key: String,
    name: String,
}

struct Loader {
    zone: TimeZone,
    config_dir: PathBuf,
    config: Config,
    notify_refs: Vec<NotifyRef>,
}

impl Loader {
    fn read_jobs_file(&mut self, path: &Path) -> Result<(), ConfigError> {
        let text = read_text(path)?;
        let src = Source { path, text: &text };
        let doc = parse(&src)?;
        let mut root = Table::root(&src, &doc);
        root.known(&["agent", "job", "notify"])?;
        self.config.files.push(path.to_path_buf());
        if let Some(item) = root.get("agent") {
            self.config.agent = read_agent(item.table()?)?;
        }
        if let Some(item) = root.get("notify") {
            for (name, n) in item.table()?.entries() {
                values::name(&name).map_err(|m| n.error(m))?;
                let notifier = read_notifier(&name, n.table()?)?;
                self.config.notifiers.insert(name, notifier);
            }
        }
        if let Some(item) = root.get("job") {
            for (name, j) in item.table()?.entries() {
                if !j.is_table() {
                    return Err(j.error("expected a table: each job is a table [job.NAME] holding its keys"));
                }
                values::name(&name).map_err(|m| j.error(m))?;
                let job = self.read_job(j.table()?, &name, &Origin::JobsFile)?;
                self.add_job(job)?;
            }
        }
        root.finish()
    }

    /// Reads the job of a profile, if it has a `[job]` table; the profile's other
    /// tables are the command line's business, except whether it has a `[forget]`
    /// policy.
    fn read_profile(&mut self, path: &Path) -> Result<(), ConfigError> {
        let text = read_text(path)?;
        let src = Source { path, text: &text };
        let doc = parse(&src)?;
        let mut root = Table::root(&src, &doc);
        let Some(item) = root.get("job") else { return Ok(()) };
        let table = item.table()?;
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
        values::name(stem)
            .map_err(|m| item.error(format!("the job takes the profile's name, and {m}: rename the profile's file")))?;
        let policy = has_policy(&mut root)?;
        let job = self.read_job(table, stem, &Origin::Profile { path: path.to_path_buf(), policy })?;
        if !self.config.files.iter().any(|f| f == path) {
            self.config.files.push(path.to_path_buf());
        }
        self.add_job(job)
    }

    fn add_job(&mut self, job: Job) -> Result<(), ConfigError> {
        if let Some(first) = self.config.jobs.get(&job.name) {
            return Err(ConfigError::DuplicateJob {
                name: job.name.clone(),
                path: job.defined_at.0.clone(),
                line: job.defined_at.1,
                first_path: first.defined_at.0.clone(),
                first_line: first.defined_at.1,
            });
        }
        self.config.jobs.insert(job.name.clone(), job);
        Ok(())
    }

    fn check_notify_refs(&self) -> Result<(), ConfigError> {
        for r in &self.notify_refs {
            if !self.config.notifiers.contains_key(&r.name) {
                let defined: Vec<&str> = self.config.notifiers.keys().map(String::as_str).collect();
                let known = if defined.is_empty() {
                    "none is defined".to_string()
                } else {
                    format!("those defined are {}", defined.join(", "))
                };
                return Err(ConfigError::Invalid {
                    path: r.path.clone(),
                    line: r.line,
                    key: r.key.clone(),
                    message: format!(
                        "no notifier {:?}: define it as [notify.{}] in the jobs file ({known})",
                        r.name, r.name
                    ),
                });
            }
        }
        Ok(())
    }

    /// The path of the profile a jobs-file job names: `config_dir/NAME.toml`, or
    /// the file itself when the name holds a `/` or ends in `.toml` (from the jobs
    /// file's directory when relative). It must exist.
    fn profile_path(&self, item: &Item) -> Result<PathBuf, ConfigError> {
        let name = item.text()?;
        let path = if name.contains('/') || name.ends_with(".toml") {
            item.src.resolve(&name)
        } else {
            self.config_dir.join(format!("{name}.toml"))
        };
        if std::fs::symlink_metadata(&path).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound) {
            return Err(item.error(format!(
                "profile {} does not exist: create it, or fix the name (a name NAME is {}/NAME.toml)",
                path.display(),
                self.config_dir.display()
            )));
        }
        Ok(path)
    }

    fn read_job(&mut self, mut t: Table, name: &str, origin: &Origin) -> Result<Job, ConfigError> {
        if let Some(item) = t.get("password") {
            return Err(item.error(NO_INLINE_PASSPHRASE));
        }
        t.known(JOB_KEYS)?;
        let mut global = Vec::new();
        let mut policy = false;
        match origin {
            Origin::Profile { path, policy: p } => {
                if let Some(item) = t.get("profile") {
                    return Err(item.error("a profile's job uses that profile: leave profile out"));
                }
                global.push("-P".to_string());
                global.push(utf8(&t, path)?);
                policy = *p;
            }
            Origin::JobsFile => {
                if let Some(item) = t.get("profile") {
                    let path = self.profile_path(&item)?;
                    policy = profile_has_policy(&path)?;
                    if !self.config.files.contains(&path) {
                        self.config.files.push(path.clone());
                    }
                    global.push("-P".to_string());
                    global.push(utf8(&t, &path)?);
                }
            }
        }
        read_sources(&mut t, &mut global)?;
        let (storage, storage_lines) = match t.get("storage") {
            Some(item) => read_storage(item.table()?)?,
            None => Default::default(),
        };
        let paths = read_paths(&mut t)?;
        let backup_args = read_backup_args(&mut t)?;
        let forget_args = match t.get("forget") {
            Some(item) => Some(read_forget(item.table()?)?),
            None => policy.then(Vec::new),
        };
        let mut schedules = BTreeMap::new();
        let mut check_data = CheckData::None;
        if let Some(item) = t.get("schedule") {
            schedules.insert(Kind::Backup, self.schedule(&item)?);
        }
        if let Some(item) = t.get("prune") {
            let mut p = item.table()?;
            p.known(&["schedule"])?;
            let s = p.require("schedule", "give when to prune, such as schedule = \"Sun 03:00\"")?;
            schedules.insert(Kind::Prune, self.schedule(&s)?);
            p.finish()?;
        }
        if let Some(item) = t.get("check") {
            let mut c = item.table()?;
            c.known(&["schedule", "read-data-subset", "read-all-every"])?;
            let s = c.require("schedule", "give when to check, such as schedule = \"*-*-* 04:30\"")?;
            schedules.insert(Kind::Check, self.schedule(&s)?);
            check_data = read_check_data(&mut c)?;
            c.finish()?;
        }
        let randomized_delay = t.get("randomized-delay").map(|i| i.duration()).transpose()?.unwrap_or_default();
        let retries = t.get("retries").map(|i| i.int(0..=MAX_RETRIES)).transpose()?.unwrap_or(0) as u32;
        let retry_delay = t.get("retry-delay").map(|i| i.positive_duration()).transpose()?.unwrap_or(RETRY_DELAY);
        let overdue = t.get("overdue").map(|i| i.positive_duration()).transpose()?;
        let nice = t.get("nice").map(|i| i.int(-20..=19)).transpose()?.map(|n| n as i32);
        let ionice = t.get("ionice").map(|i| read_ionice(&i)).transpose()?;
        let hooks = match t.get("hooks") {
            Some(item) => read_hooks(item.table()?)?,
            None => Hooks { timeout: HOOK_TIMEOUT, ..Hooks::default() },
        };
        let mut notify = Vec::new();
        if let Some(item) = t.get("notify") {
            for n in item.texts()? {
                if !notify.contains(&n) {
                    self.notify_refs.push(NotifyRef {
                        path: t.src.path.to_path_buf(),
                        line: item.line,
                        key: item.key.clone(),
                        name: n.clone(),
                    });
                    notify.push(n);
                }
            }
        }
        let notify_on = match t.get("notify-on") {
            Some(item) => read_events(&item)?,
            None => Event::DEFAULT.to_vec(),
        };
        let defined_at = (t.src.path.to_path_buf(), t.line);
        let table = t.name.clone();
        t.finish()?;
        Ok(Job {
            name: name.to_string(),
            defined_at,
            table,
            global_args: global,
            storage,
            storage_lines,
            paths,
            backup_args,
            forget_args,
            schedules,
            check_data,
            randomized_delay,
            retries,
            retry_delay,
            overdue,
            nice,
            ionice,
            hooks,
            notify,
            notify_on,
        })
    }

    fn schedule(&self, item: &Item) -> Result<Schedule, ConfigError> {
        let text = item.str()?;
        Schedule::parse(text, self.zone.clone()).map_err(|e| item.error(e.to_string()))
    }
}

/// A path as an argument: coffer's arguments are strings.
fn utf8(t: &Table, path: &Path) -> Result<String, ConfigError> {
    path.to_str()
        .map(str::to_string)
        .ok_or_else(|| t.error(format!("the path {} is not UTF-8: move the file to a UTF-8 path", path.display())))
}

/// `--flag VALUE`, or `--flag=VALUE` when the value starts with `-` (which would
/// read as an option) or is empty.
fn push_opt(args: &mut Vec<String>, flag: &str, value: &str) {
    if value.is_empty() || value.starts_with('-') {
        args.push(format!("{flag}={value}"));
    } else {
        args.push(flag.to_string());
        args.push(value.to_string());
    }
}

/// Whether a profile has a retention policy: a `[forget]` table with keys.
fn has_policy(root: &mut Table) -> Result<bool, ConfigError> {
    match root.get("forget") {
        None => Ok(false),
        Some(item) => {
            if !item.is_table() {
                return Err(item.error("expected a table [forget] holding keep rules"));
            }
            Ok(!item.table()?.entries().is_empty())
        }
    }
}

fn profile_has_policy(path: &Path) -> Result<bool, ConfigError> {
    let text = read_text(path)?;
    let src = Source { path, text: &text };
    let doc = parse(&src)?;
    has_policy(&mut Table::root(&src, &doc))
}

/// The repository, the passphrase's source and the other global options.
fn read_sources(t: &mut Table, global: &mut Vec<String>) -> Result<(), ConfigError> {
    for (a, b) in [("repository", "repository-file"), ("password-file", "password-command")] {
        let (first, second) = (t.get(a), t.get(b));
        if let (Some(_), Some(s)) = (&first, &second) {
            return Err(s.error(format!("give {a} or {b}, not both")));
        }
        if let Some(i) = first.or(second) {
            let value = if i.key.ends_with("-file") { utf8(t, &i.path()?)? } else { i.text()? };
            let flag =
                if i.key.ends_with(".repository") { "--repo".to_string() } else { format!("--{}", last(&i.key)) };
            push_opt(global, &flag, &value);
        }
    }
    if let Some(i) = t.get("connections") {
        push_opt(global, "--connections", &i.int(1..=1024)?.to_string());
    }
    for key in ["cacert", "cache-dir"] {
        if let Some(i) = t.get(key) {
            push_opt(global, &format!("--{key}"), &utf8(t, &i.path()?)?);
        }
    }
    if let Some(i) = t.get("no-cache")
        && i.bool()?
    {
        global.push("--no-cache".to_string());
    }
    for key in ["limit-upload", "limit-download"] {
        if let Some(i) = t.get(key) {
            let kib = i.int(1..=i64::from(u32::MAX)).map_err(|_| i.error("give KiB/s as a whole number above 0"))?;
            push_opt(global, &format!("--{key}"), &kib.to_string());
        }
    }
    Ok(())
}

/// The last part of a dotted key.
fn last(key: &str) -> &str {
    key.rsplit('.').next().unwrap_or(key)
}

/// The storage variables, and the line of each.
type Storage = (BTreeMap<String, String>, BTreeMap<String, usize>);

fn read_storage(mut t: Table) -> Result<Storage, ConfigError> {
    let (mut vars, mut lines) = (BTreeMap::new(), BTreeMap::new());
    for (name, item) in t.entries() {
        values::variable(&name).map_err(|m| item.error(m))?;
        vars.insert(name.clone(), item.str()?.to_string());
        lines.insert(name, item.line);
    }
    Ok((vars, lines))
}

fn read_paths(t: &mut Table) -> Result<Vec<String>, ConfigError> {
    let item = t.require("paths", "give the paths to back up, such as paths = [\"/home\", \"/etc\"]")?;
    let paths = item.texts()?;
    if paths.is_empty() {
        return Err(item.error("no paths: give the paths to back up, such as paths = [\"/home\", \"/etc\"]"));
    }
    if let Some(p) = paths.iter().find(|p| !Path::new(p).is_absolute()) {
        return Err(item.error(format!(
            "{p:?} is not an absolute path: a job runs from no particular directory (and ~ is not expanded), so \
             give paths from /"
        )));
    }
    Ok(paths)
}

/// The `[backup]` keys of a profile, given in the job.
fn read_backup_args(t: &mut Table) -> Result<Vec<String>, ConfigError> {
    let mut args = Vec::new();
    for key in ["exclude", "exclude-file", "iexclude", "iexclude-file", "exclude-if-present"] {
        let Some(item) = t.get(key) else { continue };
        let values = if key.ends_with("-file") {
            item.paths()?.iter().map(|p| utf8(t, p)).collect::<Result<Vec<_>, _>>()?
        } else {
            item.texts()?
        };
        for v in values {
            push_opt(&mut args, &format!("--{key}"), &v);
        }
    }
    for key in ["exclude-caches", "one-file-system"] {
        if let Some(item) = t.get(key)
            && item.bool()?
        {
            args.push(format!("--{key}"));
        }
    }
    if let Some(item) = t.get("exclude-larger-than") {
        let size = match item.int(1..=i64::MAX) {
            Ok(n) => n.to_string(),
            Err(_) => item.str().map_err(|_| item.error("expected a size such as \"2G\""))?.to_string(),
        };
        values::size(&size).map_err(|m| item.error(m))?;
        push_opt(&mut args, "--exclude-larger-than", size.trim());
    }
    if let Some(item) = t.get("tag") {
        for tag in item.texts()? {
            values::tag(&tag).map_err(|m| item.error(m))?;
            push_opt(&mut args, "--tag", &tag);
        }
    }
    if let Some(item) = t.get("host") {
        push_opt(&mut args, "--host", &item.text()?);
    }
    Ok(args)
}

/// `forget = { keep-daily = 7, … }`: the options of `coffer forget`.
fn read_forget(mut t: Table) -> Result<Vec<String>, ConfigError> {
    t.known(FORGET_KEYS)?;
    let mut args = Vec::new();
    // FORGET_KEYS lists the six counts first, then the six spans.
    for &key in &FORGET_KEYS[..6] {
        if let Some(item) = t.get(key) {
            push_opt(&mut args, &format!("--{key}"), &item.int(0..=i64::from(u32::MAX))?.to_string());
        }
    }
    for &key in &FORGET_KEYS[6..12] {
        if let Some(item) = t.get(key) {
            let span = item.text()?;
            values::span(&span).map_err(|m| item.error(m))?;
            push_opt(&mut args, &format!("--{key}"), span.trim());
        }
    }
    if let Some(item) = t.get("keep-tag") {
        for tags in item.texts()? {
            if tags.split(',').any(|t| t.trim().is_empty()) {
                return Err(item.error(format!("{tags:?} has an empty tag")));
            }
            push_opt(&mut args, "--keep-tag", &tags);
        }
    }
    if args.is_empty() {
        return Err(t.error(
            "no keep rule: give at least one (keep-last, keep-daily = 7, keep-within = \"30d\", …), or leave forget \
             out",
        ));
    }
    if let Some(item) = t.get("group-by") {
        let g = item.str()?;
        values::group_by(g).map_err(|m| item.error(m))?;
        args.push(format!("--group-by={g}"));
    }
    t.finish()?;
    Ok(args)
}

fn read_check_data(c: &mut Table) -> Result<CheckData, ConfigError> {
    let subset = c.get("read-data-subset");
    let every = c.get("read-all-every");
    match (subset, every) {
        (Some(_), Some(e)) => Err(e.error("give read-data-subset or read-all-every, not both")),
        (Some(s), None) => {
            let spec = s.text()?;
            values::subset(&spec).map_err(|m| s.error(m))?;
            Ok(CheckData::Subset(spec.trim().to_string()))
        }
        (None, Some(e)) => Ok(CheckData::Rotate(e.int(1..=10_000)? as u32)),
        (None, None) => Ok(CheckData::None),
    }
}

fn read_ionice(item: &Item) -> Result<Ionice, ConfigError> {
    let s = item.str()?;
    let bad = || item.error(format!("{s:?}: give \"idle\", or \"best-effort:N\" with N from 0 (first) to 7 (last)"));
    if s == "idle" {
        return Ok(Ionice::Idle);
    }
    let level = s.strip_prefix("best-effort:").ok_or_else(bad)?;
    let n: u8 = level.parse().ok().filter(|n| *n <= 7).ok_or_else(bad)?;
    Ok(Ionice::BestEffort(n))
}

fn read_hooks(mut t: Table) -> Result<Hooks, ConfigError> {
    t.known(HOOK_KEYS)?;
    let mut command = |key| t.get(key).map(|i| i.text()).transpose();
    let (before, after_success, after_failure, finally) =
        (command("before")?, command("after-success")?, command("after-failure")?, command("finally")?);
    let timeout = t.get("timeout").map(|i| i.positive_duration()).transpose()?.unwrap_or(HOOK_TIMEOUT);
    let hooks = Hooks { before, after_success, after_failure, finally, timeout };
    t.finish()?;
    Ok(hooks)
}

fn read_events(item: &Item) -> Result<Vec<Event>, ConfigError> {
    let mut events = Vec::new();
    for e in item.texts()? {
        let event = Event::parse(&e).ok_or_else(|| {
            let names: Vec<&str> = Event::ALL.iter().map(|e| e.as_str()).collect();
            item.error(format!("{e:?} is not an event: give some of {}", names.join(", ")))
        })?;
        if !events.contains(&event) {
            events.push(event);
        }
    }
    Ok(events)
}

fn read_agent(mut t: Table) -> Result<AgentSettings, ConfigError> {
    t.known(AGENT_KEYS)?;
    let mut agent = AgentSettings::default();
    let metrics = t.get("metrics");
    if let Some(item) = t.get("metrics-remote") {
        agent.metrics_remote = item.bool()?;
    }
    if let Some(item) = metrics {
        let s = item.str()?;
        let addr: std::net::SocketAddr = s.trim().parse().map_err(|_| {
            item.error(format!("{s:?} is not an address and port: give one such as 127.0.0.1:9898 or [::1]:9898"))
        })?;
        if !addr.ip().is_loopback() && !agent.metrics_remote {
            return Err(item.error(format!(
                "{addr} is not a loopback address, and the metrics would be served to the network: set \
                 metrics-remote = true to allow it, or use 127.0.0.1"
            )));
        }
        agent.metrics = Some(addr);
    }
    agent.textfile = t.get("textfile").map(|i| i.path()).transpose()?;
    agent.state = t.get("state").map(|i| i.path()).transpose()?;
    if let Some(item) = t.get("ui") {
        let given = match item.as_bool() {
            Some(false) => None,
            Some(true) => Some(DEFAULT_UI),
            None => {
                Some(item.str().map_err(|_| item.error("expected true, false or an address such as 127.0.0.1:8347"))?)
            }
        };
        if let Some(s) = given {
            let addr: std::net::SocketAddr = s.trim().parse().map_err(|_| {
                item.error(format!("{s:?} is not an address and port: give one such as 127.0.0.1:8347, or true"))
            })?;
            agent.ui = Some(addr);
        }
    }
    agent.ui_password_file = t.get("ui-password-file").map(|i| i.path()).transpose()?;
    let cert = t.get("ui-tls-cert");
    let key = t.get("ui-tls-key");
    if let Some(item) = t.get("ui-tls") {
        if item.str()? != "generate" {
            return Err(item.error("the only value is \"generate\"; or give ui-tls-cert and ui-tls-key"));
        }
        if let Some(c) = &cert {
            return Err(c.error("ui-tls = \"generate\" and ui-tls-cert both given: keep one"));
        }
        agent.ui_tls = UiTls::Generate;
    }
    match (cert, key) {
        (Some(c), Some(k)) => agent.ui_tls = UiTls::Files { cert: c.path()?, key: k.path()? },
        (Some(c), None) => return Err(c.error("ui-tls-cert needs ui-tls-key, the certificate's private key")),
        (None, Some(k)) => return Err(k.error("ui-tls-key needs ui-tls-cert, the certificate it is the key of")),
        (None, None) => {}
    }
    t.finish()?;
    Ok(agent)
}

fn read_notifier(name: &str, mut t: Table) -> Result<NotifierConfig, ConfigError> {
    if let Some(item) = t.get("password") {
        return Err(item.error("a password is never written here: give password-file = \"FILE\" (its first line)"));
    }
    t.known(NOTIFY_KEYS)?;
    let url = t.get("url");
    let smtp = t.get("smtp");
    let cacert = t.get("cacert").map(|i| i.path()).transpose()?;
    let rate_limit = t.get("rate-limit").map(|i| i.duration()).transpose()?.unwrap_or(RATE_LIMIT);
    let preset = t.get("preset");
    let mail_keys: Vec<Item> =
        ["from", "to", "username", "password-file"].into_iter().filter_map(|k| t.get(k)).collect();
    let target = match (url, smtp) {
        (Some(_), Some(s)) => return Err(s.error("give url (a webhook) or smtp (e-mail), not both")),
        (None, None) => {
            return Err(t.error(
                "give url = \"https://…\" for a webhook, or smtp = \"smtp://…\" (with from and to) for e-mail",
            ));
        }
        (Some(u), None) => {
            let url = u.text()?;
            values::webhook_url(&url).map_err(|m| u.error(m))?;
            if let Some(k) = mail_keys.first() {
                return Err(k.error("only e-mail notifiers (smtp = …) take it"));
            }
            let preset = match preset {
                None => Preset::Json,
                Some(p) => {
                    let s = p.str()?;
                    Preset::parse(s).ok_or_else(|| {
                        let names: Vec<&str> = Preset::ALL.iter().map(|p| p.as_str()).collect();
                        p.error(format!("{s:?} is not a preset: give one of {}", names.join(", ")))
                    })?
                }
            };
            Target::Webhook { url: url.trim().to_string(), preset }
        }
        (None, Some(s)) => {
            if let Some(p) = preset {
                return Err(p.error("only webhooks (url = …) take a preset"));
            }
            let smtp = s.text()?;
            values::smtp_url(&smtp).map_err(|m| s.error(m))?;
            let mut mail = MailConfig {
                smtp: smtp.trim().to_string(),
                from: String::new(),
                to: Vec::new(),
                username: None,
                password_file: None,
            };
            let mut from = None;
            let mut to = None;
            for item in &mail_keys {
                match last(&item.key) {
                    "from" => {
                        let a = item.text()?;
                        values::mail_address(&a).map_err(|m| item.error(m))?;
                        from = Some(a);
                    }
                    "to" => {
                        let list = item.texts()?;
                        if list.is_empty() {
                            return Err(item.error("no recipient: give to = \"admin@example.net\" or a list"));
                        }
                        for a in &list {
                            values::mail_address(a).map_err(|m| item.error(m))?;
                        }
                        to = Some(list);
                    }
                    "username" => mail.username = Some(item.text()?),
                    _ => mail.password_file = Some(item.path()?),
                }
            }
            mail.from =
                from.ok_or_else(|| t.error("from is missing: give the sender, such as from = \"coffer@example.net\""))?;
            mail.to =
                to.ok_or_else(|| t.error("to is missing: give the recipients, such as to = [\"admin@example.net\"]"))?;
            if mail.username.is_some() != mail.password_file.is_some() {
                return Err(t.error("username and password-file go together: give both, or neither"));
            }
            Target::Mail(mail)
        }
    };
    t.finish()?;
    Ok(NotifierConfig { name: name.to_string(), target, cacert, rate_limit })
}
