//! Notifications: webhooks and e-mail (docs/design.md#notifications).
//!
//! [`Notifier::send`] sends one message now, blocking, within a timeout (30 s).
//! The agent sends through a [`Dispatcher`] instead: a thread of its own with a
//! bounded queue, so that a notifier that fails or hangs never delays a run;
//! a failed send is tried again after 1 s, 5 s and 25 s, and the same event of
//! the same job goes through one notifier at most once per its `rate-limit`.

mod dispatch;
pub mod mail;
pub mod webhook;

use std::path::PathBuf;
use std::time::Duration;

use jiff::Timestamp;

use crate::config::{Event, Kind, NotifierConfig, Target};
use crate::state::Outcome;

pub use dispatch::{Dispatcher, DispatcherOptions, LogFn, MemoryNotices, NoticeLog};

/// How long one send may take, connection included.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// What a notifier is told.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub job: String,
    pub kind: Kind,
    pub event: Event,
    /// The run's outcome (`None` for `overdue`, which no run caused).
    pub outcome: Option<Outcome>,
    /// The machine's name, which the caller gives.
    pub host: String,
    pub time: Timestamp,
    pub snapshot: Option<String>,
    pub error: Option<String>,
    pub summary: Option<serde_json::Value>,
}

impl Message {
    /// `coffer: JOB EVENT`: a mail's subject, a push message's title.
    pub fn title(&self) -> String {
        format!("coffer: {} {}", self.job, self.event.as_str())
    }

    /// The message as text: a title line, then one line per field.
    pub fn text(&self) -> String {
        let mut t = format!("{}\n\n", self.headline());
        let mut line = |k: &str, v: &str| {
            t.push_str(k);
            t.push_str(": ");
            t.push_str(v);
            t.push('\n');
        };
        line("job", &self.job);
        line("kind", self.kind.as_str());
        line("event", self.event.as_str());
        if let Some(o) = self.outcome {
            line("outcome", o.as_str());
        }
        line("host", &self.host);
        line("time", &self.time.to_string());
        if let Some(s) = &self.snapshot {
            line("snapshot", s);
        }
        if let Some(e) = &self.error {
            line("error", e);
        }
        if let Some(s) = &self.summary {
            line("summary", &s.to_string());
        }
        t
    }

    /// One sentence that says what happened.
    pub fn headline(&self) -> String {
        let what = match self.event {
            Event::Failure => "failed",
            Event::Recovery => "succeeded again",
            Event::Overdue => "is overdue",
            Event::Success => "succeeded",
        };
        format!("The {} of job {} on {} {what}.", self.kind.as_str(), self.job, self.host)
    }

    /// The `json` preset's body.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "job": self.job,
            "kind": self.kind.as_str(),
            "event": self.event.as_str(),
            "outcome": self.outcome.map(|o| o.as_str()),
            "host": self.host,
            "time": self.time.to_string(),
            "snapshot": self.snapshot,
            "error": self.error,
            "summary": self.summary,
        })
    }
}

/// Why a notification was not sent. Every message names the notifier; a URL
/// is shown as `scheme://host/…` only (its path and query may hold a token).
#[derive(Debug, thiserror::Error)]
pub enum NotifyError {
    #[error("notifier {notifier}: {what}")]
    Config { notifier: String, what: String },
    #[error("notifier {notifier}: cannot read its cacert {}: {what}; give a PEM file of CA certificates", path.display())]
    Cacert { notifier: String, path: PathBuf, what: String },
    #[error("notifier {notifier}: cannot read its password-file {}: {what}", path.display())]
    PasswordFile { notifier: String, path: PathBuf, what: String },
    #[error("notifier {notifier}: {url}: {what}")]
    Http { notifier: String, url: String, what: String },
    #[error("notifier {notifier}: {url} answered HTTP {status}{}", if body.is_empty() { String::new() } else { format!(": {body}") })]
    Status { notifier: String, url: String, status: u16, body: String },
    #[error("notifier {notifier}: cannot send mail through {server}: {what}")]
    Mail { notifier: String, server: String, what: String },
}

/// Sends notifications, blocking.
#[derive(Debug, Clone)]
pub struct Notifier {
    timeout: Duration,
    user_agent: String,
}

impl Default for Notifier {
    fn default() -> Self {
        Notifier::new()
    }
}

impl Notifier {
    /// A notifier with the 30 s timeout.
    pub fn new() -> Notifier {
        Notifier::with_timeout(DEFAULT_TIMEOUT)
    }

    /// A notifier whose sends each end within `timeout`.
    pub fn with_timeout(timeout: Duration) -> Notifier {
        Notifier { timeout, user_agent: format!("coffer/{}", env!("CARGO_PKG_VERSION")) }
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Sends `msg` through `cfg`.
    pub fn send(&self, cfg: &NotifierConfig, msg: &Message) -> Result<(), NotifyError> {
        match &cfg.target {
            Target::Webhook { url, preset } => webhook::send(self, cfg, url, *preset, msg),
            Target::Mail(mail) => mail::send(self, cfg, mail, msg),
        }
    }

    /// Tells `cfg` that a run starts: a `healthchecks` webhook pings `URL/start`;
    /// the others are told nothing.
    pub fn start(&self, cfg: &NotifierConfig, msg: &Message) -> Result<(), NotifyError> {
        match &cfg.target {
            Target::Webhook { url, preset: crate::config::Preset::Healthchecks } => webhook::start(self, cfg, url, msg),
            _ => Ok(()),
        }
    }
}

/// The PEM text of `cfg`'s `cacert`, checked to hold at least one certificate.
fn read_cacert(cfg: &NotifierConfig) -> Result<Option<Vec<u8>>, NotifyError> {
    let Some(path) = &cfg.cacert else { return Ok(None) };
    let bad = |what: String| NotifyError::Cacert { notifier: cfg.name.clone(), path: path.clone(), what };
    let pem = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut n = 0;
    for cert in CertificateDer::pem_slice_iter(&pem) {
        cert.map_err(|e| bad(format!("not a PEM certificate bundle ({e})")))?;
        n += 1;
    }
    if n == 0 {
        return Err(bad("it holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into()));
    }
    Ok(Some(pem))
}

/// An error and its causes, one after the other.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(cause) = src {
        let c = cause.to_string();
        if !s.contains(&c) {
            s.push_str(": ");
            s.push_str(&c);
        }
        src = cause.source();
    }
    s
}

/// Makes sure a crypto provider is there for rustls (ring, the one coffer
/// links); does nothing when the process installed one.
fn tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
