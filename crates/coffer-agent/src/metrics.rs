//! Metrics in Prometheus's text format 0.0.4 (docs/design.md#metrics): made
//! from the state database ([`from_db`]), written for node_exporter's textfile
//! collector ([`write_textfile`]) or served at `GET /metrics` ([`serve`]).

use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;
use std::fmt::Write as _;
use std::io::Write as _;
use std::net::SocketAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Request, Response, StatusCode, header};
use jiff::Timestamp;

use crate::config::Kind;
use crate::state::{Db, Outcome, Run, StateError};

/// The content type of the text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A request's head must arrive within this long.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// The most bytes of request head read (hyper's smallest read buffer).
pub const MAX_HEADER_BYTES: usize = 8192;

/// Connections served at once; more are closed at once.
pub const MAX_CONNECTIONS: usize = 16;

/// How long one connection may stay open at most.
const CONNECTION_LIFETIME: Duration = Duration::from_secs(60);

/// What a backup's summary says (the last backup's).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BackupCounts {
    pub bytes_read: u64,
    pub bytes_added: u64,
    /// Files new, changed and unchanged.
    pub files: u64,
    /// Entries that could not be read, and paths that were missing.
    pub errors: u64,
}

/// The metrics of one kind of run of one job.
#[derive(Debug, Clone, PartialEq)]
pub struct JobMetrics {
    pub job: String,
    pub kind: Kind,
    /// End of the last success (or warning).
    pub last_success: Option<Timestamp>,
    /// The last ended run's end and length (seconds).
    pub last_run_end: Option<Timestamp>,
    pub last_run_duration: Option<f64>,
    pub last_run_success: Option<bool>,
    /// Ended runs by outcome.
    pub runs_total: Vec<(Outcome, u64)>,
    pub overdue: bool,
    pub next_run: Option<Timestamp>,
    /// Backups only: what the last backup's summary counted.
    pub last_backup: Option<BackupCounts>,
}

/// The metrics of a job's repository.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RepositoryMetrics {
    pub job: String,
    /// The repository's location, as the backup's summary gives it.
    pub repository: String,
    pub snapshots: Option<u64>,
    pub size_bytes: Option<u64>,
    /// End of the last successful check.
    pub last_check: Option<Timestamp>,
    /// The share of the packs the last `read-all-every` successful checks read.
    pub verified_ratio: Option<f64>,
}

/// Everything [`render`] shows.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MetricsSnapshot {
    pub jobs: Vec<JobMetrics>,
    pub repositories: Vec<RepositoryMetrics>,
}

/// What [`from_db`] needs to know of a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobInput {
    pub name: String,
    pub kinds: Vec<Kind>,
    /// `read-all-every` of its check (1 when it has none): how many of the last
    /// successful checks the verified ratio adds up.
    pub check_window: u32,
}

fn ended(run: &Run) -> Option<Timestamp> {
    run.ended
}

fn u64_at(v: &serde_json::Value, path: &[&str]) -> Option<u64> {
    path.iter().try_fold(v, |v, k| v.get(k))?.as_u64()
}

/// The counts of a backup's summary record (`coffer --json backup`'s).
pub fn backup_counts(summary: &serde_json::Value) -> Option<BackupCounts> {
    let s = summary.get("summary")?;
    Some(BackupCounts {
        bytes_read: u64_at(s, &["bytes_read"])?,
        bytes_added: u64_at(s, &["bytes_added"])?,
        files: ["files_new", "files_changed", "files_unchanged"].iter().filter_map(|k| u64_at(s, &[k])).sum(),
        errors: u64_at(summary, &["skipped"]).unwrap_or(0) + u64_at(summary, &["missing_paths"]).unwrap_or(0),
    })
}

/// Reads the metrics of `jobs` from `db`. `next_runs` and `overdue` are what the
/// schedules say (the daemon's, computed elsewhere), by job and kind.
pub fn from_db(
    db: &Db,
    jobs: &[JobInput],
    next_runs: &BTreeMap<(String, Kind), Timestamp>,
    overdue: &BTreeSet<(String, Kind)>,
) -> Result<MetricsSnapshot, StateError> {
    let mut snap = MetricsSnapshot::default();
    for job in jobs {
        for &kind in &job.kinds {
            let last = db.last_run(&job.name, kind)?;
            let success = db.last_success(&job.name, kind)?;
            let mut counts: BTreeMap<Outcome, u64> =
                Outcome::ALL.into_iter().filter(|o| *o != Outcome::Running).map(|o| (o, 0)).collect();
            for (o, n) in db.outcome_counts(&job.name, kind)? {
                if o != Outcome::Running {
                    counts.insert(o, n);
                }
            }
            let key = (job.name.clone(), kind);
            snap.jobs.push(JobMetrics {
                job: job.name.clone(),
                kind,
                last_success: success.as_ref().and_then(ended),
                last_run_end: last.as_ref().and_then(ended),
                last_run_duration: last.as_ref().and_then(|r| r.duration()).map(|d| d.as_secs_f64()),
                last_run_success: last.as_ref().map(|r| r.outcome.is_success()),
                runs_total: counts.into_iter().collect(),
                overdue: overdue.contains(&key),
                next_run: next_runs.get(&key).copied(),
                last_backup: match kind {
                    Kind::Backup => success.as_ref().and_then(|r| r.summary.as_ref()).and_then(backup_counts),
                    _ => None,
                },
            });
        }
        snap.repositories.push(repository(db, job)?);
    }
    Ok(snap)
}

fn repository(db: &Db, job: &JobInput) -> Result<RepositoryMetrics, StateError> {
    let backup = if job.kinds.contains(&Kind::Backup) { db.last_success(&job.name, Kind::Backup)? } else { None };
    let summary = backup.as_ref().and_then(|r| r.summary.as_ref());
    let stats = summary.and_then(|s| s.get("stats"));
    let mut repo = RepositoryMetrics {
        job: job.name.clone(),
        repository: summary.and_then(|s| s.get("repository")).and_then(|r| r.as_str()).unwrap_or_default().to_string(),
        snapshots: stats.and_then(|s| u64_at(s, &["snapshots_count"])),
        size_bytes: stats.and_then(|s| u64_at(s, &["total_size"])),
        ..Default::default()
    };
    if job.kinds.contains(&Kind::Check) {
        let window = job.check_window.max(1) as usize;
        // Runs of other outcomes may sit between the successes: look further back.
        let checks: Vec<Run> = db
            .runs_of(&job.name, Kind::Check, window.saturating_mul(8).max(32))?
            .into_iter()
            .filter(|r| r.outcome.is_success())
            .take(window)
            .collect();
        repo.last_check = checks.first().and_then(ended);
        repo.verified_ratio = verified_ratio(&checks);
    }
    Ok(repo)
}

/// The packs the `checks` read over the packs the newest of them counted, at most 1.
fn verified_ratio(checks: &[Run]) -> Option<f64> {
    let newest = checks.first()?.summary.as_ref()?;
    let packs = u64_at(newest, &["packs"])?;
    let read: u64 = checks.iter().filter_map(|r| r.summary.as_ref()).filter_map(|s| u64_at(s, &["packs_read"])).sum();
    if packs == 0 {
        return Some(1.0);
    }
    Some((read as f64 / packs as f64).min(1.0))
}

/// A label value as the text format writes it.
fn escape_label(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf".into() } else { "-Inf".into() }
    } else {
        format!("{v}")
    }
}

fn seconds(t: Timestamp) -> f64 {
    t.as_millisecond() as f64 / 1000.0
}

/// One metric family being written.
struct Family<'a> {
    out: &'a mut String,
    name: &'static str,
    started: bool,
    help: &'static str,
    kind: &'static str,
}

impl Family<'_> {
    fn sample(&mut self, labels: &[(&str, &str)], value: f64) {
        if !self.started {
            let _ = writeln!(self.out, "# HELP {} {}", self.name, self.help);
            let _ = writeln!(self.out, "# TYPE {} {}", self.name, self.kind);
            self.started = true;
        }
        self.out.push_str(self.name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{k}=\"{}\"", escape_label(v));
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {}", number(value));
    }
}

type JobSample = fn(&JobMetrics) -> Option<f64>;
type RepoSample = fn(&RepositoryMetrics) -> Option<f64>;

const JOB_FAMILIES: [(&str, &str, JobSample); 10] = [
    ("coffer_job_last_success_timestamp_seconds", "End of the last successful run (or one with warnings).", |j| {
        j.last_success.map(seconds)
    }),
    ("coffer_job_last_run_timestamp_seconds", "End of the last run.", |j| j.last_run_end.map(seconds)),
    ("coffer_job_last_run_duration_seconds", "Length of the last run.", |j| j.last_run_duration),
    ("coffer_job_last_run_success", "1 if the last run succeeded, 0 otherwise.", |j| {
        j.last_run_success.map(|s| if s { 1.0 } else { 0.0 })
    }),
    ("coffer_job_overdue", "1 if the job has had no success for longer than its overdue period.", |j| {
        Some(if j.overdue { 1.0 } else { 0.0 })
    }),
    ("coffer_job_next_run_timestamp_seconds", "The next time the job is due.", |j| j.next_run.map(seconds)),
    ("coffer_job_last_bytes_read", "Bytes of file content the last backup read.", |j| {
        j.last_backup.map(|b| b.bytes_read as f64)
    }),
    ("coffer_job_last_bytes_added", "Bytes the last backup added to the repository.", |j| {
        j.last_backup.map(|b| b.bytes_added as f64)
    }),
    ("coffer_job_last_files", "Files in the last backup.", |j| j.last_backup.map(|b| b.files as f64)),
    ("coffer_job_last_errors", "Entries the last backup could not read.", |j| j.last_backup.map(|b| b.errors as f64)),
];

const REPO_FAMILIES: [(&str, &str, RepoSample); 4] = [
    ("coffer_repository_snapshots", "Snapshots in the repository after the last backup.", |r| {
        r.snapshots.map(|n| n as f64)
    }),
    ("coffer_repository_size_bytes", "Bytes the repository stores after the last backup.", |r| {
        r.size_bytes.map(|n| n as f64)
    }),
    ("coffer_repository_last_check_timestamp_seconds", "End of the last successful check.", |r| {
        r.last_check.map(seconds)
    }),
    (
        "coffer_repository_verified_ratio",
        "Share of the packs read by the checks of the last read-all-every rounds.",
        |r| r.verified_ratio,
    ),
];

/// The snapshot in Prometheus's text exposition format 0.0.4: for each metric
/// with samples, its HELP and TYPE lines, then its samples.
pub fn render(snapshot: &MetricsSnapshot) -> String {
    let mut out = String::new();
    for (name, help, get) in &JOB_FAMILIES {
        let mut f = Family { out: &mut out, name, started: false, help, kind: "gauge" };
        for j in &snapshot.jobs {
            if let Some(v) = get(j) {
                f.sample(&[("job", &j.job), ("kind", j.kind.as_str())], v);
            }
        }
    }
    let mut f = Family {
        out: &mut out,
        name: "coffer_job_runs_total",
        started: false,
        help: "Runs by outcome since the state database began.",
        kind: "counter",
    };
    for j in &snapshot.jobs {
        for (o, n) in &j.runs_total {
            f.sample(&[("job", &j.job), ("kind", j.kind.as_str()), ("outcome", o.as_str())], *n as f64);
        }
    }
    for (name, help, get) in &REPO_FAMILIES {
        let mut f = Family { out: &mut out, name, started: false, help, kind: "gauge" };
        for r in &snapshot.repositories {
            if let Some(v) = get(r) {
                f.sample(&[("job", &r.job), ("repository", &r.repository)], v);
            }
        }
    }
    out
}

/// What went wrong with the metrics.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error(
        "metrics address {addr} is not a loopback address: the metrics would be open to the network; set \
         [agent] metrics-remote = true to allow it, or use 127.0.0.1"
    )]
    NotLoopback { addr: SocketAddr },
    #[error("cannot serve metrics on {addr}: {source}; pick another [agent] metrics address")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("cannot start the metrics server on {addr}: {source}")]
    Start { addr: SocketAddr, source: std::io::Error },
    #[error("cannot write the metrics textfile {}: {source}; check [agent] textfile and its directory's permissions", path.display())]
    Textfile { path: PathBuf, source: std::io::Error },
}

/// Replaces `path` with `text` atomically: written to a new file in the same
/// directory, synced, renamed over it (readable by all: node_exporter reads it).
pub fn write_textfile(path: &Path, text: &str) -> Result<(), MetricsError> {
    let err = |source| MetricsError::Textfile { path: path.to_path_buf(), source };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path.file_name().ok_or_else(|| err(std::io::Error::other("it names no file")))?;
    let mut rnd = [0u8; 8];
    getrandom::fill(&mut rnd).map_err(|e| err(std::io::Error::other(e.to_string())))?;
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        name.to_string_lossy(),
        rnd.iter().map(|b| format!("{b:02x}")).collect::<String>()
    ));
    let result = (|| {
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o644).open(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(err)
}

/// A running metrics server; [`MetricsServer::shutdown`] (or dropping it) stops it.
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// The address it listens on (with the port chosen when 0 was asked).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops taking connections, ends those open, and waits for its thread.
    pub fn shutdown(mut self) {
        self.stop_now();
    }

    fn stop_now(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop_now();
    }
}

/// The text to serve, made afresh for each request (it may read the database).
pub type Source = Arc<dyn Fn() -> String + Send + Sync>;

/// Serves `source()` at `GET /metrics` on `addr`, on a thread of its own. Any
/// other path is 404, any other method 405; a request's head is read within
/// [`HEADER_TIMEOUT`] and [`MAX_HEADER_BYTES`]; at most [`MAX_CONNECTIONS`] at
/// once. An address that is not loopback is refused unless `allow_remote`.
pub fn serve(addr: SocketAddr, allow_remote: bool, source: Source) -> Result<MetricsServer, MetricsError> {
    if !allow_remote && !addr.ip().is_loopback() {
        return Err(MetricsError::NotLoopback { addr });
    }
    let listener = std::net::TcpListener::bind(addr).map_err(|source| MetricsError::Bind { addr, source })?;
    let start = |source| MetricsError::Start { addr, source };
    listener.set_nonblocking(true).map_err(start)?;
    let local = listener.local_addr().map_err(start)?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(start)?;
    let listener = {
        let _guard = rt.enter();
        tokio::net::TcpListener::from_std(listener).map_err(start)?
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
    let thread = std::thread::Builder::new()
        .name("coffer-metrics".into())
        .spawn(move || rt.block_on(accept_loop(listener, source, stop_rx)))
        .map_err(start)?;
    Ok(MetricsServer { addr: local, stop: Some(stop_tx), thread: Some(thread) })
}

async fn accept_loop(listener: tokio::net::TcpListener, source: Source, mut stop: tokio::sync::oneshot::Receiver<()>) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let accepted = tokio::select! {
            _ = &mut stop => return,
            a = listener.accept() => a,
        };
        let Ok((stream, _)) = accepted else {
            // Out of file descriptors and the like: pause rather than spin.
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let Ok(permit) = Arc::clone(&slots).try_acquire_owned() else {
            drop(stream);
            continue;
        };
        let source = Arc::clone(&source);
        tokio::spawn(async move {
            let _permit = permit;
            let service = hyper::service::service_fn(move |req| {
                let source = Arc::clone(&source);
                async move { Ok::<_, Infallible>(respond(req, source).await) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .max_buf_size(MAX_HEADER_BYTES)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            let _ = tokio::time::timeout(CONNECTION_LIFETIME, conn).await;
        });
    }
}

fn plain(status: StatusCode, text: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}

async fn respond(req: Request<hyper::body::Incoming>, source: Source) -> Response<Full<Bytes>> {
    if req.uri().path() != "/metrics" {
        return plain(StatusCode::NOT_FOUND, "not found: coffer serves its metrics at /metrics only\n");
    }
    if req.method() != Method::GET {
        let mut r = plain(StatusCode::METHOD_NOT_ALLOWED, "method not allowed: GET /metrics only\n");
        r.headers_mut().insert(header::ALLOW, header::HeaderValue::from_static("GET"));
        return r;
    }
    // The source may read the database: off the thread that serves connections.
    let text = match tokio::task::spawn_blocking(move || source()).await {
        Ok(t) => t,
        Err(_) => return plain(StatusCode::INTERNAL_SERVER_ERROR, "the metrics could not be made\n"),
    };
    let mut r = Response::new(Full::new(Bytes::from(text)));
    r.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static(CONTENT_TYPE));
    r
}
