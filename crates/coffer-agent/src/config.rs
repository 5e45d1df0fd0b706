//! The jobs file and the profiles that hold a `[job]` table: what the agent and
//! `coffer run` read (docs/design.md#jobs). Loading validates everything; an
//! error names the file, the line and the key.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::calendar::Schedule;

/// The whole configuration: the `[agent]` table, every job and every notifier.
#[derive(Debug, Clone)]
pub struct Config {
    /// The files it was read from (the jobs file first, then profiles), for messages.
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
}

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
    pub fn as_str(self) -> &'static str {
        match self {
            Event::Failure => "failure",
            Event::Recovery => "recovery",
            Event::Overdue => "overdue",
            Event::Success => "success",
        }
    }
}

/// One job.
#[derive(Debug, Clone)]
pub struct Job {
    pub name: String,
    /// The file and line where the job is defined, for messages.
    pub defined_at: (PathBuf, usize),
    /// Options given to every coffer command of the job, before the command's name:
    /// `-P PROFILE`, `--repo …`, `--password-file …`, `--limit-upload …`, …
    pub global_args: Vec<String>,
    /// The storage variables of the job's `[job.NAME.storage]` table, given to the
    /// steps' environment (never to hooks).
    pub storage: BTreeMap<String, String>,
    /// The paths to back up.
    pub paths: Vec<String>,
    /// Options of `coffer backup` (excludes, tags, host…), before the paths.
    pub backup_args: Vec<String>,
    /// Options of the `coffer forget` that follows each successful backup (the keep
    /// rules), or None when the job has no retention policy.
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
