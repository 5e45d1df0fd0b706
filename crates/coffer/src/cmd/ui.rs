//! `coffer ui`: the command line of the web interface (docs/design.md#ui).
//! Here the repositories are opened (the one of the global options, and each
//! job's, with the job's own options and storage variables), the TLS identity
//! and the password are read, and the login token is shown; `coffer-ui` serves.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, Parser};
use coffer_ui::{RepoSource, SessionLimits, Ui, UiOptions};
use zeroize::Zeroizing;

use crate::args::{Cli, GlobalArgs};
use crate::cmd::agent::{self, JobsArgs};
use crate::{exit, repo_open};

#[derive(Args, Debug)]
pub struct UiArgs {
    /// Address to listen on; port 0 picks a free port (printed on start). Any address
    /// but a loopback one needs TLS (--tls-cert/--tls-key or --tls-generate) and --password-file.
    #[arg(long, default_value = "127.0.0.1:8347")]
    pub listen: SocketAddr,
    /// TLS certificate chain (PEM).
    #[arg(long, requires = "tls_key", value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM) of --tls-cert.
    #[arg(long, requires = "tls_cert", value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// Serve TLS with a self-signed certificate, generated on first use into
    /// $XDG_STATE_HOME/coffer/ui (its SHA-256 fingerprint is printed).
    #[arg(long, conflicts_with = "tls_cert")]
    pub tls_generate: bool,
    /// Extra host names for the generated certificate.
    #[arg(long = "hostname", value_name = "NAME", requires = "tls_generate")]
    pub hostnames: Vec<String>,
    /// A file whose first line is the UI's password (besides the one-time login token).
    /// Not the repository's passphrase.
    #[arg(long = "ui-password-file", env = "COFFER_UI_PASSWORD_FILE", value_name = "FILE")]
    pub password_file: Option<PathBuf>,
    /// Without a request for this long, a session ends.
    #[arg(long, default_value = "30m", value_parser = humantime::parse_duration)]
    pub session_idle: Duration,
    /// A session ends this long after its login.
    #[arg(long, default_value = "12h", value_parser = humantime::parse_duration)]
    pub session_lifetime: Duration,
    /// Show the repository of the global options only: no jobs, no job's repository.
    #[arg(long)]
    pub no_jobs: bool,
    #[command(flatten)]
    pub jobs: JobsArgs,
}

/// A job's options as a command line: its global options, its profile and
/// repository file read, its storage variables added.
fn job_global(job: &coffer_agent::config::Job) -> Result<GlobalArgs> {
    let mut cli = Cli::try_parse_from(
        std::iter::once("coffer".to_string()).chain(job.global_args.iter().cloned()).chain(["snapshots".to_string()]),
    )
    .map_err(|e| anyhow!("job {}: its options do not parse: {}", job.name, e.to_string().trim()))?;
    crate::prepare(&mut cli).with_context(|| format!("job {}", job.name))?;
    cli.global.storage_vars.extend(job.storage.clone());
    cli.global.json = false;
    Ok(cli.global)
}

/// Opens the repository of `global` with its index, or says why it cannot be.
fn open(global: &GlobalArgs) -> Result<Arc<coffer_core::repo::Repository>, String> {
    repo_open::open(global).map(Arc::new).map_err(|e| format!("{e:#}"))
}

fn name_of(label: &str) -> String {
    let n: String = label
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '-' })
        .take(64)
        .collect();
    if n.is_empty() || n == "." || n == ".." { "repository".into() } else { n }
}

fn read_password(file: &std::path::Path) -> Result<Zeroizing<Vec<u8>>> {
    let text = Zeroizing::new(
        std::fs::read(file).with_context(|| format!("cannot read the UI password file {}", file.display()))?,
    );
    let line = text.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.is_empty() {
        bail!("the UI password file {} is empty: write the password on its first line", file.display());
    }
    Ok(Zeroizing::new(line.to_vec()))
}

/// How the UI is served, by `coffer ui` or by the agent (`[agent] ui`).
pub struct Serving {
    pub listen: SocketAddr,
    /// A certificate chain and its key (PEM).
    pub tls_files: Option<(PathBuf, PathBuf)>,
    /// A self-signed certificate, made once into the state directory.
    pub tls_generate: bool,
    pub hostnames: Vec<String>,
    pub password_file: Option<PathBuf>,
    pub sessions: SessionLimits,
    /// Print the first login token (`coffer ui` on a terminal); the agent, whose
    /// standard error is a log, only says where it is.
    pub show_token: bool,
}

/// The repositories shown: the global options' (when given) as `default`, then
/// each job's, once per location.
fn sources(global: Option<&GlobalArgs>, config: Option<&coffer_agent::config::Config>) -> Result<Vec<RepoSource>> {
    let mut repos: Vec<RepoSource> = Vec::new();
    let mut seen_locations = std::collections::HashMap::new();
    if let Some(g) = global {
        let (loc, _) = repo_open::location(g)?;
        seen_locations.insert(loc.to_string(), 0);
        repos.push(source("default".into(), g, open(g), None));
    }
    for job in config.iter().flat_map(|c| c.jobs.values()) {
        let mut name = name_of(&job.name);
        while repos.iter().any(|r| r.name == name) {
            name.push('_');
        }
        let g = match job_global(job) {
            Ok(g) => g,
            Err(e) => {
                let repo = Err(format!("{e:#}"));
                repos.push(RepoSource {
                    name,
                    location: job.repository_label(),
                    repo,
                    writer: None,
                    retention: None,
                    jobs: vec![job.name.clone()],
                    server_log: None,
                    replicas: None,
                });
                continue;
            }
        };
        let location = match repo_open::location(&g) {
            Ok((l, _)) => l.to_string(),
            Err(e) => format!("({e})"),
        };
        let retention = retention(job);
        let i = match seen_locations.get(&location) {
            Some(&i) => i,
            None => {
                seen_locations.insert(location.clone(), repos.len());
                let mut s = source(name, &g, open(&g), None);
                s.location = location;
                repos.push(s);
                repos.len() - 1
            }
        };
        // The first job with a policy lends the repository its own.
        if repos[i].retention.is_none() {
            repos[i].retention = retention;
        }
        repos[i].jobs.push(job.name.clone());
    }
    Ok(repos)
}

/// A repository shown, opened with `global`: with this client's state of it
/// (its writer key, for forgetting) and, on a server, the log key expected.
fn source(
    name: String,
    global: &GlobalArgs,
    repo: Result<Arc<coffer_core::repo::Repository>, String>,
    retention: Option<coffer_ui::Retention>,
) -> RepoSource {
    let writer = repo.as_ref().ok().and_then(|r| repo_open::local_state(r).ok());
    let loc = repo_open::location(global).ok().map(|(l, _)| l);
    let location = loc.as_ref().map_or_else(String::new, |l| l.to_string());
    let server_log = match (&loc, crate::server_log::trusted_key(global)) {
        (Some(coffer_backend::Location::Server { .. }), Ok(trusted)) => Some(coffer_ui::ServerLog { trusted }),
        _ => None,
    };
    let replicas = match (&repo, loc.as_ref().and_then(|l| crate::replicas::opened_at(&l.to_string()))) {
        (Ok(repo), Some(opened)) => {
            let repo = repo.clone();
            let scan: coffer_ui::ReplicaScan =
                Arc::new(move || super::backend::report(&repo, &opened).map_err(|e| format!("{e:#}")));
            Some(scan)
        }
        _ => None,
    };
    RepoSource { name, location, repo, writer, retention, jobs: Vec::new(), server_log, replicas }
}

/// A job's retention policy (its `forget` table), which the UI can apply; a
/// profile's `[forget]` is the profile's business and not shown.
fn retention(job: &coffer_agent::config::Job) -> Option<coffer_ui::Retention> {
    let args = job.forget_args.as_ref()?;
    let cli = Cli::try_parse_from(["coffer".to_string(), "forget".to_string()].into_iter().chain(args.iter().cloned()))
        .ok()?;
    let crate::args::Command::Forget(a) = &cli.command else { return None };
    Some(coffer_ui::Retention {
        job: job.name.clone(),
        policy: super::forget::policy_of(a),
        offset: Arc::new(crate::output::utc_offset),
    })
}

/// Opens what the UI shows and binds it. `log` tells what the user is to know.
pub fn bind(
    global: Option<&GlobalArgs>,
    s: &Serving,
    jobs: Option<(coffer_agent::config::Config, Arc<coffer_agent::run::RunContext>)>,
    log: Arc<dyn Fn(String) + Send + Sync>,
) -> Result<Ui> {
    let repos = sources(global, jobs.as_ref().map(|j| &j.0))?;
    for r in &repos {
        if let Err(e) = &r.repo {
            log(format!("warning: repository {} ({}): {e}", r.name, r.location));
        }
    }
    let jobs = jobs.map(|(config, ctx)| coffer_ui::Jobs { config, ctx, log: log.clone() });
    let tls = if s.tls_generate || s.tls_files.is_some() {
        let dir = repo_open::state_base()?.join("ui");
        coffer_server::state::ensure_dir(&dir)?;
        let given = s.tls_files.as_ref().map(|(c, k)| (c.as_path(), k.as_path()));
        let id = coffer_server::tls::identity(&dir, given, &s.hostnames)?;
        log(format!("TLS certificate {} (SHA-256 fingerprint {})", id.cert_path.display(), id.fingerprint));
        Some(id.config)
    } else {
        None
    };
    let password = s.password_file.as_deref().map(read_password).transpose()?;
    let shown = repo_open::state_base()?.join("ui").join("login-token");
    let first = std::sync::atomic::AtomicBool::new(s.show_token);
    let opts = UiOptions {
        listen: s.listen,
        tls,
        password,
        sessions: s.sessions,
        max_connections: 64,
        bench_report: super::bench::last_report_path().ok(),
        // SAFETY: malloc_trim only hands free memory back to the system.
        on_released: Arc::new(|| unsafe {
            libc::malloc_trim(0);
        }),
        on_token: Arc::new(move |token: &str| {
            // The token is shown once, at start, on the terminal; later ones only
            // go to the file (mode 0600), never to a log.
            let written = write_private(&shown, token.as_bytes());
            if first.swap(false, std::sync::atomic::Ordering::Relaxed) {
                log(format!("login token {token}"));
            }
            match written {
                Ok(()) => log(format!("the login token in force is in {}", shown.display())),
                Err(e) => log(format!("cannot write the login token to {}: {e}", shown.display())),
            }
        }),
    };
    Ok(Ui::bind(opts, repos, jobs)?)
}

/// The URL a bound UI is reached at.
pub fn url(ui: &Ui, tls: bool) -> String {
    let addr = ui.local_addr();
    let host =
        if addr.ip().is_loopback() && addr.is_ipv4() { format!("127.0.0.1:{}", addr.port()) } else { addr.to_string() };
    format!("{}://{host}/", if tls { "https" } else { "http" })
}

pub fn run(global: &GlobalArgs, a: &UiArgs) -> Result<u8> {
    let serving = Serving {
        listen: a.listen,
        tls_files: a.tls_cert.clone().zip(a.tls_key.clone()),
        tls_generate: a.tls_generate,
        hostnames: a.hostnames.clone(),
        password_file: a.password_file.clone(),
        sessions: SessionLimits { idle: a.session_idle, lifetime: a.session_lifetime },
        show_token: true,
    };
    let jobs = if a.no_jobs {
        None
    } else {
        let (config, ctx) = agent::load_for_ui(&a.jobs)?;
        Some((config, Arc::new(ctx)))
    };
    let log: Arc<dyn Fn(String) + Send + Sync> = Arc::new(|line| eprintln!("coffer ui: {line}"));
    let ui = match bind(Some(global), &serving, jobs, log) {
        Ok(ui) => ui,
        Err(e)
            if matches!(e.downcast_ref(), Some(coffer_ui::UiError::Exposed(..) | coffer_ui::UiError::BadName(_))) =>
        {
            crate::output::error(global.json, &e, exit::USAGE);
            return Ok(exit::USAGE);
        }
        Err(e) => return Err(e),
    };
    eprintln!("coffer ui: serving {}", url(&ui, serving.tls_generate || serving.tls_files.is_some()));
    ui.run()?;
    Ok(exit::OK)
}

/// Writes `data` to `path` readable by its owner only, replacing it.
fn write_private(path: &std::path::Path, data: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
    f.write_all(data)?;
    f.write_all(b"\n")?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}
