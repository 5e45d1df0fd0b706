//! `coffer serve`: run a repository server in front of the storage of `--repo`,
//! and manage its access keys, writer allow-list and trash. The server itself
//! is the `coffer-server` crate; this file reads the options, prints what the
//! operator needs (the address, the certificate's fingerprint, a new key's
//! secret) and maps errors. See docs/design.md#server.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use coffer_server::{Level, ServeOptions, Server, keys, trash, writers};
use serde_json::json;

use crate::args::GlobalArgs;
use crate::table::Table;
use crate::{exit, output, repo_open};

#[derive(Args, Debug)]
pub struct ServeArgs {
    #[command(subcommand)]
    pub command: Option<ServeCommand>,
    /// Address to listen on; port 0 picks a free port (printed on start).
    #[arg(long, default_value = "127.0.0.1:8443")]
    pub listen: SocketAddr,
    /// The server's state directory: access keys (with their secrets: keep it private),
    /// the writer allow-list, the generated certificate, upload spool files.
    /// Default: $XDG_STATE_HOME/coffer/serve, else ~/.local/state/coffer/serve.
    #[arg(long, env = "COFFER_SERVE_STATE_DIR", global = true, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// TLS certificate chain (PEM); default: a self-signed one generated in the state directory.
    #[arg(long, requires = "key", value_name = "FILE")]
    pub cert: Option<PathBuf>,
    /// TLS private key (PEM) of --cert.
    #[arg(long, requires = "cert", value_name = "FILE")]
    pub key: Option<PathBuf>,
    /// Extra host names for the generated certificate (localhost and the loopback addresses are always in it).
    #[arg(long = "hostname", value_name = "NAME")]
    pub hostnames: Vec<String>,
    /// Serve plain HTTP, for use behind a reverse proxy that terminates TLS.
    #[arg(long)]
    pub insecure_http: bool,
    /// The repository's name in client locations (coffer:https://HOST:PORT/NAME).
    #[arg(long, default_value = coffer_server::DEFAULT_BUCKET)]
    pub name: String,
    /// Days objects deleted through the server stay in its trash.
    #[arg(long, default_value_t = 30)]
    pub trash_days: u64,
    /// Seconds a prune notice must have been stored before a `prune` key may
    /// delete packs or index files (the prune protocol's grace period; coffer
    /// prune waits 2 minutes by default).
    #[arg(long, default_value_t = 60, value_name = "SECONDS")]
    pub prune_grace: u64,
    /// Seconds a client may take to send a request's headers, or between pieces of a body.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    pub request_timeout: u64,
    /// Connections served at once.
    #[arg(long, default_value_t = 1024)]
    pub max_connections: usize,
    /// Connections one address may hold open before any of them authenticated.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_pending_per_peer: u64,
    /// The least average rate of a request body once --request-timeout has passed (e.g. 8K, per second).
    #[arg(long, default_value = "8K", value_parser = parse_size, value_name = "BYTES")]
    pub min_rate: u64,
    /// Seconds a multipart upload may stay untouched before it is dropped with its spooled parts.
    #[arg(long, default_value_t = 900, value_parser = clap::value_parser!(u64).range(1..), value_name = "SECONDS")]
    pub upload_expiry: u64,
    /// Serve Prometheus metrics (plain HTTP, GET /metrics) at this address, e.g. 127.0.0.1:9899;
    /// port 0 picks a free port (printed on start).
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<SocketAddr>,
    /// Allow --metrics on an address other hosts can reach (by default loopback only).
    #[arg(long, requires = "metrics")]
    pub metrics_remote: bool,
}

#[derive(Subcommand, Debug)]
pub enum ServeCommand {
    /// Manage access keys: add (prints the secret once), list, remove.
    #[command(subcommand)]
    Key(KeyCommand),
    /// Manage the writers whose snapshots and tombstones the server accepts.
    #[command(subcommand)]
    Writer(WriterCommand),
    /// What prune and admin keys deleted: list, restore, purge.
    #[command(subcommand)]
    Trash(TrashCommand),
    /// Print the request log: time, peer, access key id, method, object, status, bytes.
    Log,
}

#[derive(Subcommand, Debug)]
pub enum KeyCommand {
    /// Add an access key and print its id and secret (shown only now).
    Add {
        /// A name for the key (a host, a purpose).
        name: String,
        /// append, append-nodata, read, prune or admin (docs/design.md#server).
        #[arg(long, value_parser = parse_level)]
        level: Level,
        /// Bytes the key may upload while the server runs (e.g. 10G).
        #[arg(long, value_parser = parse_size)]
        quota: Option<u64>,
    },
    /// List the access keys (never their secrets).
    List,
    /// Remove an access key.
    Remove {
        /// The key's name.
        name: String,
    },
}

#[derive(Subcommand, Debug)]
pub enum WriterCommand {
    /// Accept snapshots and tombstones signed by this public key (`coffer writers` prints it).
    Allow {
        /// The writer's public key, 64 hex digits.
        public_key: String,
        /// A note (who it is).
        #[arg(long, default_value = "")]
        note: String,
    },
    /// List the allowed writers.
    List,
    /// Stop accepting a writer's new snapshots and tombstones.
    Remove {
        /// The writer's public key.
        public_key: String,
    },
}

#[derive(Subcommand, Debug)]
pub enum TrashCommand {
    /// List what is in the trash (needs --repo: the server's storage).
    List,
    /// Put objects back: one by name, or --all.
    Restore {
        /// The object's name (data/…, index/…, snapshots/…).
        name: Option<String>,
        /// Everything in the trash.
        #[arg(long, conflicts_with = "name")]
        all: bool,
    },
    /// Delete trash entries older than --older-than days (default: the trash period, 30).
    Purge {
        #[arg(long, default_value_t = 30)]
        older_than: u64,
    },
}

fn parse_level(s: &str) -> Result<Level, String> {
    Level::parse(s).ok_or_else(|| {
        format!("{s:?} is not a level: {}", Level::ALL.iter().map(|l| l.name()).collect::<Vec<_>>().join(", "))
    })
}

fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => (
            &s[..i],
            match s[i..].to_ascii_uppercase().trim_end_matches(['B', 'I']) {
                "" => 1u64,
                "K" => 1 << 10,
                "M" => 1 << 20,
                "G" => 1 << 30,
                "T" => 1 << 40,
                other => return Err(format!("unknown unit {other:?} (use K, M, G or T)")),
            },
        ),
        None => (s, 1),
    };
    num.trim().parse::<u64>().map_err(|e| format!("{s:?}: {e}"))?.checked_mul(mult).ok_or_else(|| "too large".into())
}

fn state_dir(args: &ServeArgs) -> Result<PathBuf> {
    match &args.state_dir {
        Some(d) => Ok(d.clone()),
        None => Ok(repo_open::state_base()?.join("serve")),
    }
}

pub fn run(global: &GlobalArgs, args: &ServeArgs) -> Result<u8> {
    let dir = state_dir(args)?;
    match &args.command {
        None => serve(global, args, dir),
        Some(ServeCommand::Key(k)) => key(global, &dir, k),
        Some(ServeCommand::Writer(w)) => writer(global, &dir, w),
        Some(ServeCommand::Trash(t)) => trash_cmd(global, &dir, t),
        Some(ServeCommand::Log) => request_log(global, &dir),
    }
}

fn serve(global: &GlobalArgs, args: &ServeArgs, dir: PathBuf) -> Result<u8> {
    // The limits are a client's, on its own link to the storage: the server
    // would slow every client at once.
    let limits = [
        (global.limit_upload, "--limit-upload", "COFFER_LIMIT_UPLOAD"),
        (global.limit_download, "--limit-download", "COFFER_LIMIT_DOWNLOAD"),
    ];
    if let Some((_, flag, var)) = limits.iter().find(|(limit, _, _)| limit.is_some()) {
        let e = anyhow::anyhow!(
            "coffer serve does not take {flag} ({var}): a bandwidth limit is a client's, on its own link to the \
             storage; give it to the clients (`coffer {flag} KIB backup …`), or unset {var} for the server"
        );
        output::error(global.json, &e, exit::USAGE);
        return Ok(exit::USAGE);
    }
    if let Some(addr) = args.metrics
        && let Err(e) = coffer_server::metrics::check_address(addr, args.metrics_remote)
    {
        output::error(global.json, &anyhow::Error::new(e), exit::USAGE);
        return Ok(exit::USAGE);
    }
    let (loc, _) = repo_open::location(global)?;
    let backend = repo_open::backend(&loc)?;
    coffer_server::state::ensure_dir(&dir)?;
    let identity = if args.insecure_http {
        None
    } else {
        let given = args.cert.as_deref().zip(args.key.as_deref());
        Some(coffer_server::tls::identity(&dir, given, &args.hostnames)?)
    };
    let timeout = Duration::from_secs(args.request_timeout);
    let opts = ServeOptions {
        listen: args.listen,
        state_dir: dir.clone(),
        tls: identity.as_ref().map(|i| i.config.clone()),
        bucket: args.name.clone(),
        header_timeout: timeout,
        body_timeout: timeout,
        min_rate: args.min_rate.max(1),
        upload_expiry: Duration::from_secs(args.upload_expiry),
        max_pending_per_peer: args.max_pending_per_peer as usize,
        trash_days: args.trash_days,
        prune_grace: Duration::from_secs(args.prune_grace),
        max_connections: args.max_connections,
        metrics: args.metrics,
        metrics_remote: args.metrics_remote,
    };
    let server = Server::bind(opts, backend)?;
    let addr = server.local_addr();
    let scheme = if identity.is_some() { "https" } else { "http" };
    let (log_key, log_size) = server.log_key();
    let metrics = server.metrics_addr().map(|a| format!("http://{a}{}", coffer_server::metrics::PATH));
    if keys::list(&dir)?.is_empty() {
        eprintln!(
            "warning: no access keys yet: add one with `coffer serve --state-dir {} key add NAME --level append`",
            dir.display()
        );
    }
    if global.json {
        output::json(&json!({
            "type": "listening", "address": addr.to_string(), "url": format!("{scheme}://{addr}"),
            "location": format!("coffer:{scheme}://{addr}/{}", args.name), "storage": loc.to_string(),
            "certificate": identity.as_ref().map(|i| i.cert_path.display().to_string()),
            "sha256": identity.as_ref().map(|i| i.fingerprint.clone()),
            "log_key": log_key, "log_entries": log_size, "metrics": metrics,
        }));
    } else {
        println!(
            "coffer serve: listening on {scheme}://{addr} (clients: --repo coffer:{scheme}://{addr}/{})",
            args.name
        );
        println!("storage: {loc}");
        if let Some(i) = &identity {
            let new = if i.generated { " (generated now)" } else { "" };
            println!("certificate: {}{new} sha256 {}", i.cert_path.display(), i.fingerprint);
        } else {
            println!("plain HTTP: only behind a reverse proxy that terminates TLS");
        }
        println!("transparency log: {log_size} entries, heads signed by key {log_key}");
        if let Some(m) = &metrics {
            println!("metrics: {m}");
        }
    }
    use std::io::Write;
    let _ = std::io::stdout().flush();
    server.run()?;
    Ok(exit::OK)
}

fn key(global: &GlobalArgs, dir: &std::path::Path, cmd: &KeyCommand) -> Result<u8> {
    match cmd {
        KeyCommand::Add { name, level, quota } => {
            let k = keys::add(dir, name, *level, *quota)?;
            if global.json {
                output::json(
                    &json!({"type": "access_key", "name": k.name, "id": k.id, "secret": k.secret, "level": k.level.name(), "quota": k.quota}),
                );
            } else {
                println!("access key {:?} added, level {}; the secret is shown only now:", k.name, k.level.name());
                println!("COFFER_SERVER_KEY_ID={}", k.id);
                println!("COFFER_SERVER_SECRET={}", k.secret);
            }
        }
        KeyCommand::List => {
            let all = keys::list(dir)?;
            let usage = coffer_server::usage::read(dir)?;
            let used = |id: &str| usage.get(id).copied().unwrap_or(0);
            if global.json {
                let list: Vec<_> = all
                    .iter()
                    .map(|k| json!({"type": "access_key", "name": k.name, "id": k.id, "level": k.level.name(), "quota": k.quota, "used": used(&k.id), "created": output::rfc3339(k.created as i64, 0)}))
                    .collect();
                output::json(&serde_json::Value::Array(list));
            } else {
                let mut t = Table::new(&["name", "id", "level", "used", "quota"]).right([3, 4]);
                for k in &all {
                    let q = k.quota.map(|q| q.to_string()).unwrap_or_else(|| "-".into());
                    t.row([k.name.clone(), k.id.clone(), k.level.name().to_string(), used(&k.id).to_string(), q]);
                }
                t.print();
            }
        }
        KeyCommand::Remove { name } => {
            if !keys::remove(dir, name)? {
                bail!("no access key named {name:?}: `coffer serve key list` shows them");
            }
            if !global.quiet {
                println!("access key {name:?} removed");
            }
        }
    }
    Ok(exit::OK)
}

fn writer(global: &GlobalArgs, dir: &std::path::Path, cmd: &WriterCommand) -> Result<u8> {
    match cmd {
        WriterCommand::Allow { public_key, note } => {
            let added = writers::allow(dir, public_key, note)?;
            if !global.quiet {
                println!("writer {} {}", public_key.trim(), if added { "allowed" } else { "was already allowed" });
            }
        }
        WriterCommand::List => {
            let all = writers::list(dir)?;
            if global.json {
                let list: Vec<_> = all
                    .iter()
                    .map(|w| json!({"type": "allowed_writer", "public_key": w.public_key, "note": w.note}))
                    .collect();
                output::json(&serde_json::Value::Array(list));
            } else {
                for w in &all {
                    println!("{}  {}", w.public_key, w.note);
                }
            }
        }
        WriterCommand::Remove { public_key } => {
            if !writers::remove(dir, public_key)? {
                bail!("writer {public_key} is not on the allow-list");
            }
        }
    }
    Ok(exit::OK)
}

fn request_log(global: &GlobalArgs, dir: &std::path::Path) -> Result<u8> {
    let entries = coffer_server::requests::read(dir)?;
    if global.json {
        let list: Vec<_> = entries
            .iter()
            .map(|e| {
                json!({"type": "request", "time": output::rfc3339((e.time / 1000) as i64, ((e.time % 1000) * 1_000_000) as u32),
                    "peer": e.peer, "key": e.key, "method": e.method, "name": e.name, "status": e.status, "bytes": e.bytes})
            })
            .collect();
        output::json(&serde_json::Value::Array(list));
    } else {
        let mut t = Table::new(&["time", "peer", "key", "method", "name", "status", "bytes"]).right([5, 6]);
        for e in &entries {
            let time = jiff::Timestamp::from_millisecond(e.time as i64).map(|t| t.to_string()).unwrap_or_default();
            t.row([
                output::time(&time),
                e.peer.clone(),
                e.key.clone(),
                e.method.clone(),
                e.name.clone(),
                e.status.to_string(),
                e.bytes.to_string(),
            ]);
        }
        t.print();
    }
    Ok(exit::OK)
}

fn trash_cmd(global: &GlobalArgs, dir: &std::path::Path, cmd: &TrashCommand) -> Result<u8> {
    let (loc, _) = repo_open::location(global)?;
    let be = repo_open::backend(&loc)?;
    let storage = |e| anyhow::Error::new(coffer_core::Error::Backend(e));
    match cmd {
        TrashCommand::List => {
            let all = trash::list(be.as_ref()).map_err(storage)?;
            if global.json {
                let list: Vec<_> = all
                    .iter()
                    .map(|e| json!({"type": "trash_entry", "name": e.name, "deleted": output::rfc3339(e.deleted as i64, 0), "size": e.size}))
                    .collect();
                output::json(&serde_json::Value::Array(list));
            } else {
                for e in &all {
                    println!(
                        "{} {:>12}  {}",
                        output::time(
                            &jiff::Timestamp::from_second(e.deleted as i64).map(|t| t.to_string()).unwrap_or_default()
                        ),
                        e.size,
                        e.name
                    );
                }
            }
        }
        TrashCommand::Restore { name, all } => {
            if name.is_none() && !all {
                bail!("name an object to restore, or give --all");
            }
            let spool = dir.join("spool");
            coffer_server::state::ensure_dir(&spool)?;
            let entries = trash::list(be.as_ref()).map_err(storage)?;
            let chosen: Vec<_> = trash::oldest_per_name(&entries)
                .into_iter()
                .filter(|(e, _)| *all || name.as_deref() == Some(e.name.as_str()))
                .collect();
            if chosen.is_empty() {
                bail!(
                    "{} is not in the trash: `coffer serve trash list` shows what is",
                    name.as_deref().unwrap_or("nothing")
                );
            }
            let mut restored = 0;
            let mut report = Vec::new();
            for (e, copies) in chosen {
                let when = output::rfc3339(e.deleted as i64, 0);
                let put_back = trash::restore(be.as_ref(), e, &spool).map_err(storage)?;
                if put_back {
                    restored += 1;
                }
                let what = match (put_back, copies) {
                    (false, _) => format!("{}: not restored, an object of that name is stored", e.name),
                    (true, 1) => format!("{}: restored (deleted {when})", e.name),
                    (true, n) => format!(
                        "{}: restored the oldest of {n} entries (deleted {when}, the object first deleted); the \
                         {} newer stay in the trash",
                        e.name,
                        n - 1
                    ),
                };
                report.push(json!({"type": "trash_restore", "name": e.name, "deleted": when, "restored": put_back, "entries": copies}));
                if !global.quiet && !global.json {
                    println!("{what}");
                }
            }
            if global.json {
                output::json(&serde_json::Value::Array(report));
            } else if !global.quiet {
                println!("{restored} object(s) restored");
            }
        }
        TrashCommand::Purge { older_than } => {
            let n = trash::purge(be.as_ref(), trash::now().saturating_sub(older_than.saturating_mul(86_400)))
                .map_err(storage)
                .context("purging the trash")?;
            if !global.quiet {
                println!("{} purged", output::plural(n, "object"));
            }
        }
    }
    Ok(exit::OK)
}
