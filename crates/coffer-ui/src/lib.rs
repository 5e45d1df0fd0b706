//! `coffer ui`: the web interface and its JSON API (docs/design.md#ui).
//!
//! The binary opens the repositories and the agent's jobs and hands them over;
//! this crate serves them: [`gate`] decides who comes in, [`app`] routes each
//! request, [`pages`] renders HTML (no script needed to use it), [`repos`] and
//! [`jobs`] read what is shown. It reads no environment and prints nothing:
//! what the user is to see (the login token) goes through [`UiOptions::on_token`].
//!
//! Refused by default: the server listens on a loopback address unless it is
//! given TLS and a password; every page and API call but the login needs a
//! session; every state-changing request needs the session's CSRF token.

pub mod app;
pub mod brief;
pub mod downloads;
pub mod events;
pub mod forgets;
pub mod gate;
pub mod health;
pub mod http;
pub mod jobs;
pub mod pages;
pub mod preview;
pub mod repos;
pub mod restores;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use zeroize::Zeroizing;

pub use forgets::Retention;
pub use gate::SessionLimits;
pub use health::{BackendCopies, ReplicaReport, ReplicaScan, ServerLog, UnderReplicated};
pub use jobs::Jobs;
pub use repos::RepoSource;

/// A client has this long to send a request's headers (and a TLS handshake).
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// How the UI is served.
pub struct UiOptions {
    pub listen: SocketAddr,
    /// TLS; required (with a password) on any address but a loopback one.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// The password that opens a session besides the one-time token.
    pub password: Option<Zeroizing<Vec<u8>>>,
    pub sessions: SessionLimits,
    /// Connections served at once; more wait to be accepted.
    pub max_connections: usize,
    /// Called with each new login token: the first at [`Ui::bind`], then each
    /// time one has been used.
    pub on_token: Arc<dyn Fn(&str) + Send + Sync>,
    /// Called after memory was let go (the decoded trees of an idle UI): the
    /// binary may hand it back to the system.
    pub on_released: Arc<dyn Fn() + Send + Sync>,
    /// Where `coffer bench` keeps its last report, shown on the health pages.
    pub bench_report: Option<std::path::PathBuf>,
}

/// Why the UI cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum UiError {
    #[error(
        "the UI would listen on {0}, which is not a loopback address, without {1}: anyone who can reach it could \
         try to log in; give --tls-cert/--tls-key (or --tls-generate) and --ui-password-file, or listen on 127.0.0.1"
    )]
    Exposed(SocketAddr, &'static str),
    #[error("cannot listen on {addr}: {source}")]
    Listen { addr: SocketAddr, source: std::io::Error },
    #[error("repository name {0:?}: names are letters, digits, '.', '_' and '-' (at most 64)")]
    BadName(String),
    #[error("two repositories are named {0:?}")]
    DuplicateName(String),
    #[error("cannot start the UI's runtime: {0}")]
    Runtime(std::io::Error),
}

/// A bound UI server.
pub struct Ui {
    listener: std::net::TcpListener,
    app: Arc<app::App>,
    tls: Option<Arc<rustls::ServerConfig>>,
    max_connections: usize,
    on_released: Arc<dyn Fn() + Send + Sync>,
}

impl Ui {
    /// Checks the options and binds the listening socket.
    pub fn bind(opts: UiOptions, repos: Vec<RepoSource>, jobs: Option<Jobs>) -> Result<Ui, UiError> {
        let addr = opts.listen;
        if !addr.ip().is_loopback() {
            if opts.tls.is_none() {
                return Err(UiError::Exposed(addr, "TLS"));
            }
            if opts.password.is_none() {
                return Err(UiError::Exposed(addr, "a password"));
            }
        }
        let mut names = std::collections::HashSet::new();
        for r in &repos {
            if !repos::valid_name(&r.name) {
                return Err(UiError::BadName(r.name.clone()));
            }
            if !names.insert(r.name.clone()) {
                return Err(UiError::DuplicateName(r.name.clone()));
            }
        }
        let listener = std::net::TcpListener::bind(addr).map_err(|source| UiError::Listen { addr, source })?;
        listener.set_nonblocking(true).map_err(|source| UiError::Listen { addr, source })?;
        let local = listener.local_addr().map_err(|source| UiError::Listen { addr, source })?;
        let gate = gate::Gate::new(opts.password.as_deref().map(|p| p.as_slice()), opts.sessions);
        (opts.on_token)(&gate.token());
        let app = Arc::new(app::App::new(app::AppParts {
            gate,
            repos: repos.into_iter().map(repos::RepoView::new).collect(),
            jobs,
            local,
            tls: opts.tls.is_some(),
            on_token: opts.on_token,
            bench_report: opts.bench_report,
        }));
        Ok(Ui {
            listener,
            app,
            tls: opts.tls,
            max_connections: opts.max_connections.max(1),
            on_released: opts.on_released,
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().expect("a bound socket has an address")
    }

    /// Serves until the process ends.
    pub fn run(self) -> Result<(), UiError> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .thread_name("coffer-ui")
            .build()
            .map_err(UiError::Runtime)?;
        rt.block_on(self.serve())
    }

    async fn serve(self) -> Result<(), UiError> {
        let addr = self.local_addr();
        let listener =
            tokio::net::TcpListener::from_std(self.listener).map_err(|source| UiError::Listen { addr, source })?;
        let (idle_app, released) = (self.app.clone(), self.on_released.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(15)).await;
                if idle_app.expire(std::time::Instant::now()) {
                    released();
                }
            }
        });
        let acceptor = self.tls.map(tokio_rustls::TlsAcceptor::from);
        let slots = Arc::new(tokio::sync::Semaphore::new(self.max_connections));
        loop {
            let permit = slots.clone().acquire_owned().await.expect("the semaphore is never closed");
            let (tcp, peer) = match listener.accept().await {
                Ok(c) => c,
                Err(_) => {
                    // Out of descriptors and the like: wait and go on serving.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            let (app, acceptor) = (self.app.clone(), acceptor.clone());
            tokio::spawn(async move {
                let _permit = permit;
                let mut http = hyper::server::conn::http1::Builder::new();
                http.timer(TokioTimer::new()).header_read_timeout(HEADER_TIMEOUT);
                let service = hyper::service::service_fn(move |req| {
                    let app = app.clone();
                    async move { Ok::<_, std::convert::Infallible>(app.handle(req, peer.ip()).await) }
                });
                match acceptor {
                    Some(a) => {
                        let Ok(Ok(tls)) = tokio::time::timeout(HEADER_TIMEOUT, a.accept(tcp)).await else { return };
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
