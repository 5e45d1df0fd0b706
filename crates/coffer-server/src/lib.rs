//! coffer-server: a repository server that holds no data keys.
//!
//! # Brief overview
//!
//! `coffer serve` puts this crate in front of any coffer storage (a local
//! directory, S3, several backends). Clients reach it with coffer's own S3
//! backend (`--repo coffer:https://HOST:PORT`), so the data plane is plain S3
//! (served by the `s3s` crate over hyper and rustls), and generic S3 tools can
//! read what it stores. What the server adds over a bucket:
//!
//! - **access levels per key** ([`keys::Level`]): `append` clients add objects
//!   and cannot delete or replace anything but their own session markers;
//!   `append-nodata` cannot read packs either; `read` only reads; `prune`
//!   deletes into a [`trash`] kept for a number of days; `admin` does anything;
//! - **verified uploads** ([`verify`]): names are checked against the layout
//!   ([`names`]) and the content hash, sizes against the design's limits before
//!   the body is read, and snapshots and tombstones must be signed by a writer
//!   on the server's allow-list ([`writers`]);
//! - **a transparency log** ([`log`]) of every snapshot and tombstone accepted,
//!   whose signed head, entries and consistency proofs clients read, so that a
//!   server that hides, forks or rolls back history is caught;
//! - **reconciliation sketches** ([`sync`]) of each directory, so that a copy
//!   to or from the server learns what one side lacks from a few kilobytes;
//! - **TLS** with a generated self-signed certificate ([`tls`]);
//! - **metrics** for Prometheus ([`metrics`]): each writer's last snapshot
//!   ([`activity`]), each key's bytes and quota, the requests answered.
//!
//! The crate never prints and never reads the environment: the binary passes
//! every option. Specification: docs/design.md#server.

#![deny(missing_docs)]

pub mod activity;
pub mod keys;
pub mod log;
pub mod metrics;
pub mod multipart;
pub mod names;
pub mod notices;
pub mod owners;
pub mod peers;
pub mod replay;
pub mod requests;
pub mod service;
pub mod spool;
pub mod state;
pub mod sync;
pub mod tls;
pub mod trash;
pub mod usage;
pub mod verify;
pub mod writers;

use std::net::SocketAddr;

use coffer_core::format::ObjectKind;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use coffer_backend::Backend;
use hyper_util::rt::{TokioIo, TokioTimer};

pub use keys::Level;

/// What can go wrong in the server's own files and setup.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// A local file or directory could not be used.
    #[error("{path}: {what}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What was being done.
        what: &'static str,
        /// The system's error.
        source: std::io::Error,
    },
    /// A state file does not parse.
    #[error("{path}: {reason}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Input that cannot be used (a key name, a public key).
    #[error("{0}")]
    Invalid(String),
    /// The certificate or key.
    #[error("TLS: {0}")]
    Tls(String),
    /// The listening socket.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// The system's error.
        source: std::io::Error,
    },
}

impl ServerError {
    pub(crate) fn io(path: &Path, what: &'static str, source: std::io::Error) -> Self {
        ServerError::Io { path: path.to_path_buf(), what, source }
    }
}

/// The default bucket name clients use (`coffer:https://HOST:PORT` with no name).
pub const DEFAULT_BUCKET: &str = "coffer";

/// How a server runs; the binary fills it from its options.
#[derive(Clone)]
pub struct ServeOptions {
    /// The address to listen on (port 0: any free port).
    pub listen: SocketAddr,
    /// The state directory (keys, allow-list, certificate, spool files).
    pub state_dir: PathBuf,
    /// TLS; `None` serves plain HTTP (behind a TLS-terminating proxy).
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// The bucket name the repository is served under.
    pub bucket: String,
    /// The longest a connection may take to send a request's headers (and to
    /// finish its TLS handshake).
    pub header_timeout: Duration,
    /// The longest wait for the next piece of a request body.
    pub body_timeout: Duration,
    /// The least average rate of a request body once `body_timeout` has
    /// passed, bytes per second ([`spool`]).
    pub min_rate: u64,
    /// How long a multipart upload may stay untouched before it is dropped.
    pub upload_expiry: Duration,
    /// Connections one peer address may have open before any of them
    /// authenticated ([`peers`]).
    pub max_pending_per_peer: usize,
    /// Days deleted objects stay in the trash.
    pub trash_days: u64,
    /// How long before a `prune` key deletes packs or index files a prune
    /// notice must have been stored ([`notices`]).
    pub prune_grace: Duration,
    /// Connections served at once; more wait in the kernel's backlog.
    pub max_connections: usize,
    /// Where to serve the metrics ([`metrics`]), if anywhere.
    pub metrics: Option<SocketAddr>,
    /// Whether the metrics may listen on an address other hosts can reach.
    pub metrics_remote: bool,
}

/// A bound server, ready to run.
pub struct Server {
    listener: std::net::TcpListener,
    opts: ServeOptions,
    backend: Arc<dyn Backend>,
    log: Arc<log::TransparencyLog>,
    notices: Arc<notices::Notices>,
    owners: Arc<owners::Owners>,
    activity: Arc<activity::Activity>,
    metrics: Option<std::net::TcpListener>,
}

impl Server {
    /// Binds the listening socket and prepares the state directory.
    pub fn bind(opts: ServeOptions, backend: Arc<dyn Backend>) -> Result<Server, ServerError> {
        state::ensure_dir(&opts.state_dir)?;
        let spool = opts.state_dir.join("spool");
        state::ensure_dir(&spool)?;
        // Spool files of uploads a stopped server was receiving.
        if let Ok(entries) = std::fs::read_dir(&spool) {
            for e in entries.flatten() {
                let _ = std::fs::remove_file(e.path());
            }
        }
        let listener = std::net::TcpListener::bind(opts.listen)
            .map_err(|source| ServerError::Listen { addr: opts.listen, source })?;
        listener.set_nonblocking(true).map_err(|source| ServerError::Listen { addr: opts.listen, source })?;
        let metrics = match opts.metrics {
            Some(addr) => {
                metrics::check_address(addr, opts.metrics_remote)?;
                let l = std::net::TcpListener::bind(addr).map_err(|source| ServerError::Listen { addr, source })?;
                l.set_nonblocking(true).map_err(|source| ServerError::Listen { addr, source })?;
                Some(l)
            }
            None => None,
        };
        let activity = Arc::new(activity::Activity::load(&opts.state_dir)?);
        let log = Arc::new(log::TransparencyLog::open(&opts.state_dir, backend.as_ref())?);
        // Before the runtime starts: the backend's calls block.
        let stored_notices: Vec<String> = match backend.list(ObjectKind::PruneNotice.prefix()) {
            Ok(l) => l.into_iter().map(|o| o.name).collect(),
            Err(e) if e.kind == coffer_backend::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(ServerError::Invalid(format!("cannot list the repository's prune notices: {e}"))),
        };
        let notices = Arc::new(notices::Notices::load(&opts.state_dir, &stored_notices, trash::now())?);
        let mut markers: Vec<String> = match backend.list(ObjectKind::Session.prefix()) {
            Ok(l) => l.into_iter().map(|o| o.name).collect(),
            Err(e) if e.kind == coffer_backend::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(ServerError::Invalid(format!("cannot list the repository's session markers: {e}"))),
        };
        markers.sort();
        let owners = Arc::new(owners::Owners::load(&opts.state_dir, &markers)?);
        Ok(Server { listener, opts, backend, log, notices, owners, activity, metrics })
    }

    /// The public key the transparency log's heads are signed with (hex), and
    /// the log's size.
    pub fn log_key(&self) -> (String, u64) {
        (self.log.public_key(), self.log.size())
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().unwrap_or(self.opts.listen)
    }

    /// The address the metrics are served at, if they are.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        let bound = self.metrics.as_ref()?;
        bound.local_addr().ok().or(self.opts.metrics)
    }

    /// Serves until the process ends. Runs its own Tokio runtime; the backend's
    /// blocking calls run on its blocking pool.
    pub fn run(self) -> Result<(), ServerError> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .thread_name("coffer-serve")
            .build()
            .map_err(|e| ServerError::io(&self.opts.state_dir, "cannot start the runtime", e))?;
        rt.block_on(self.serve())
    }

    async fn serve(self) -> Result<(), ServerError> {
        let Server { listener, opts, backend, log, notices, owners, activity, metrics } = self;
        let addr = opts.listen;
        let listener =
            tokio::net::TcpListener::from_std(listener).map_err(|source| ServerError::Listen { addr, source })?;
        let usage = Arc::new(usage::Usage::load(&opts.state_dir)?);
        let flushed = usage.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(2)).await;
                let u = flushed.clone();
                // A failed write is retried at the next turn.
                let _ = tokio::task::spawn_blocking(move || u.flush()).await;
            }
        });
        let records =
            service::Records { log: log.clone(), usage: usage.clone(), notices, owners, activity: activity.clone() };
        let s3 = service::CofferS3::new(
            backend.clone(),
            records,
            &opts.state_dir,
            service::ServiceOptions {
                bucket: opts.bucket.clone(),
                spool: opts.state_dir.join("spool"),
                body_timeout: opts.body_timeout,
                min_rate: opts.min_rate,
                upload_expiry: opts.upload_expiry,
                prune_grace: opts.prune_grace,
            },
        );
        let keys = s3.keys();
        let answered = Arc::new(metrics::Requests::default());
        if let Some(l) = metrics {
            let addr = l.local_addr().unwrap_or(addr);
            let l = tokio::net::TcpListener::from_std(l).map_err(|source| ServerError::Listen { addr, source })?;
            let figures =
                metrics::Metrics::new(&opts.state_dir, answered.clone(), keys.clone(), usage, activity, log.clone());
            tokio::spawn(metrics::serve(l, Arc::new(figures)));
        }
        // Drop multipart uploads left untouched, with their spool files.
        let uploads = s3.uploads();
        let every = (opts.upload_expiry / 4).clamp(Duration::from_millis(200), Duration::from_secs(60));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                uploads.expire(std::time::Instant::now());
            }
        });
        let mut builder = s3s::service::S3ServiceBuilder::new(s3);
        builder.set_auth(service::KeyAuth(keys));
        let svc = builder.build();
        // Purge the trash at start and then hourly.
        let be = backend.clone();
        let days = opts.trash_days;
        tokio::spawn(async move {
            loop {
                let be = be.clone();
                let _ = tokio::task::spawn_blocking(move || {
                    trash::purge(be.as_ref(), trash::now().saturating_sub(days.saturating_mul(86_400)))
                })
                .await;
                tokio::time::sleep(Duration::from_secs(3600)).await;
            }
        });
        let acceptor = opts.tls.clone().map(tokio_rustls::TlsAcceptor::from);
        let slots = Arc::new(tokio::sync::Semaphore::new(opts.max_connections.max(1)));
        let pending = peers::Pending::new(opts.max_pending_per_peer);
        let requests = Arc::new(requests::RequestLog::open(&opts.state_dir)?);
        loop {
            let permit = slots.clone().acquire_owned().await.expect("the semaphore is never closed");
            let (tcp, peer) = match listener.accept().await {
                Ok(c) => c,
                // Out of descriptors and the like: wait and go on serving.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            // A peer holding too many connections that never authenticated.
            let Some(slot) = pending.admit(peer.ip()) else { continue };
            let _ = tcp.set_nodelay(true);
            let svc = svc.clone();
            let acceptor = acceptor.clone();
            let header_timeout = opts.header_timeout;
            let (requests, bucket, answered) = (requests.clone(), opts.bucket.clone(), answered.clone());
            tokio::spawn(async move {
                let _permit = permit;
                let http = {
                    let mut b = hyper::server::conn::http1::Builder::new();
                    b.timer(TokioTimer::new()).header_read_timeout(header_timeout);
                    b
                };
                let service = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                    let (svc, slot, requests, answered) =
                        (svc.clone(), slot.clone(), requests.clone(), answered.clone());
                    let asked = requests::Request::of(&req, peer.ip(), &bucket);
                    let method = req.method().clone();
                    async move {
                        let r = hyper::service::Service::call(&svc, req).await;
                        if r.as_ref().is_ok_and(|resp| resp.status() != http::StatusCode::FORBIDDEN) {
                            slot.release();
                        }
                        let (status, bytes) = match &r {
                            Ok(resp) => (
                                resp.status().as_u16(),
                                resp.headers()
                                    .get(http::header::CONTENT_LENGTH)
                                    .and_then(|v| v.to_str().ok())
                                    .and_then(|v| v.parse().ok())
                                    .unwrap_or(0),
                            ),
                            Err(_) => (500, 0),
                        };
                        // A request answered is logged; a failure to log stops no client.
                        let _ = requests.record(&asked.answered(status, bytes));
                        answered.record(&method, status);
                        r
                    }
                });
                match acceptor {
                    Some(a) => {
                        let Ok(Ok(tls)) = tokio::time::timeout(header_timeout, a.accept(tcp)).await else { return };
                        let _ = http.serve_connection(TokioIo::new(tls), service).await;
                    }
                    None => {
                        let _ = http.serve_connection(TokioIo::new(tcp), service).await;
                    }
                }
            });
        }
    }
}
