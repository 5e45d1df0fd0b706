//! `coffer run JOB` and `coffer agent [status|install|uninstall]`: the command
//! line of the agent crate (docs/design.md#agent). What is decided lives in
//! `coffer-agent`; here are the paths, the environment, signals and output.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, Subcommand};
use coffer_agent::config::{Config, Kind};
use coffer_agent::daemon::{self, Control, DaemonOptions};
use coffer_agent::notify::{Dispatcher, DispatcherOptions, MemoryNotices, NoticeLog};
use coffer_agent::run::{self, Report, Request, RunContext};
use coffer_agent::state::{Db, Outcome, Run, StateError, Trigger};
use coffer_agent::steps::{ProcessSteps, Stop};
use coffer_agent::{SystemClock, metrics, status, units};
use serde_json::{Value, json};

use crate::args::GlobalArgs;
use crate::exit;

/// How long, at the end, queued notifications are given to go out.
const NOTIFY_DRAIN: Duration = Duration::from_secs(15);

#[derive(Args, Debug, Clone)]
pub struct JobsArgs {
    /// The jobs file. Default: $XDG_CONFIG_HOME/coffer/jobs.toml (~/.config/coffer/jobs.toml);
    /// profiles of that directory holding a [job] table are jobs too.
    #[arg(long, env = "COFFER_JOBS", value_name = "FILE", global = true)]
    pub jobs: Option<PathBuf>,
    /// The state database. Default: [agent] state, else $XDG_STATE_HOME/coffer/agent.sqlite.
    #[arg(long, env = "COFFER_AGENT_STATE", value_name = "FILE", global = true)]
    pub state: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// The job's name.
    pub job: String,
    /// Which of its runs: backup (then forget, with its policy), prune or check.
    #[arg(long, default_value = "backup", value_parser = parse_kind)]
    pub kind: Kind,
    /// When the job is running already (the agent, another `coffer run`), exit
    /// with code 27 instead of waiting for it.
    #[arg(long)]
    pub no_wait: bool,
    #[command(flatten)]
    pub jobs: JobsArgs,
}

#[derive(Args, Debug)]
pub struct AgentArgs {
    #[command(subcommand)]
    pub command: Option<AgentCommand>,
    #[command(flatten)]
    pub jobs: JobsArgs,
}

#[derive(Subcommand, Debug)]
pub enum AgentCommand {
    /// Each job's kinds: the last run, the next time due, overdue ones first.
    Status,
    /// Write and enable a systemd unit for the agent (or, with --timers, a timer per job).
    Install(InstallArgs),
    /// Disable and remove what `install` wrote.
    Uninstall(ScopeArgs),
}

#[derive(Args, Debug)]
pub struct ScopeArgs {
    /// The user's units (~/.config/systemd/user; the default).
    #[arg(long, conflicts_with = "system")]
    pub user: bool,
    /// The system's units (/etc/systemd/system).
    #[arg(long)]
    pub system: bool,
}

#[derive(Args, Debug)]
pub struct InstallArgs {
    #[command(flatten)]
    pub scope: ScopeArgs,
    /// One systemd timer and service per scheduled kind of each job, instead of the agent.
    #[arg(long)]
    pub timers: bool,
    /// Write the files only: no `systemctl daemon-reload` or `enable --now`.
    #[arg(long)]
    pub no_enable: bool,
}

fn parse_kind(s: &str) -> Result<Kind, String> {
    Kind::parse(s).ok_or_else(|| format!("{s:?} is not a kind of run: give backup, prune or check"))
}

/// `$XDG_CONFIG_HOME/coffer`.
fn config_dir() -> Result<PathBuf> {
    crate::profile::config_home()
        .map(|h| h.join("coffer"))
        .ok_or_else(|| anyhow!("cannot find the configuration directory: neither XDG_CONFIG_HOME nor HOME is set"))
}

/// Loads and checks the configuration.
fn load(a: &JobsArgs) -> Result<Config> {
    let zone = jiff::tz::TimeZone::system();
    let config = coffer_agent::config::load(a.jobs.as_deref(), &config_dir()?, zone)?;
    config.check_storage_names(coffer_backend::CREDENTIAL_VARIABLES)?;
    Ok(config)
}

fn state_path(a: &JobsArgs, config: &Config) -> Result<PathBuf> {
    match a.state.clone().or_else(|| config.agent.state.clone()) {
        Some(p) => Ok(p),
        None => Ok(crate::repo_open::state_base()?.join("agent.sqlite")),
    }
}

/// The run context of this process; notices are kept in the state database.
fn context(state: &Path, log: Arc<dyn Fn(String) + Send + Sync>) -> Result<RunContext> {
    let exe = std::env::current_exe().context("cannot find the coffer binary to run the job's steps")?;
    let env: Vec<_> = std::env::vars_os().collect();
    let notices: Box<dyn NoticeLog> = match Db::open(state) {
        Ok(db) => Box::new(db),
        Err(e) => {
            log(format!("notifications: {e}; their rate limit is kept in memory only"));
            Box::new(MemoryNotices::default())
        }
    };
    let dlog = Arc::clone(&log);
    let dispatcher = Dispatcher::new(DispatcherOptions::default(), notices, Box::new(move |l| dlog(l)));
    let lock_dir = state.parent().unwrap_or(Path::new(".")).join("locks");
    Ok(RunContext {
        db_path: state.to_path_buf(),
        lock_dir,
        steps: Arc::new(ProcessSteps { exe, env: env.clone() }),
        hook_env: env,
        dispatcher: Arc::new(dispatcher),
        host: coffer_core::fs::meta::hostname(),
        clock: Arc::new(SystemClock),
        stop: Stop::new(),
        pid: i64::from(std::process::id()),
    })
}

/// The jobs and the context runs started by `coffer ui` are made in.
pub fn load_for_ui(a: &JobsArgs) -> Result<(Config, RunContext)> {
    let config = load(a)?;
    let state = state_path(a, &config)?;
    let ctx = context(&state, logger())?;
    Ok((config, ctx))
}

/// Lines for the log: standard error, each with its time.
fn logger() -> Arc<dyn Fn(String) + Send + Sync> {
    Arc::new(|line| {
        eprintln!("{} coffer agent: {line}", jiff::Timestamp::now().round(jiff::Unit::Second).unwrap_or_default())
    })
}

/// SIGTERM, SIGINT and SIGHUP, turned into calls of `on` on a thread of their own.
fn on_signals(on: impl Fn(i32) + Send + 'static) -> Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals =
        signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP]).context("cannot set up signals")?;
    std::thread::Builder::new()
        .name("coffer-signals".into())
        .spawn(move || {
            for s in signals.forever() {
                on(s);
            }
        })
        .context("cannot start the signal thread")?;
    Ok(())
}

fn write_textfile(config: &Config, state: &Path, log: &dyn Fn(String)) {
    let Some(file) = &config.agent.textfile else { return };
    let text = Db::open_read_only(state)
        .and_then(|db| status::metrics_text(&db, config, jiff::Timestamp::now()))
        .map_err(|e| e.to_string())
        .and_then(|t| metrics::write_textfile(file, &t).map_err(|e| e.to_string()));
    if let Err(e) = text {
        log(format!("metrics textfile {}: {e}", file.display()));
    }
}

/// `coffer run JOB`.
pub fn run_job(global: &GlobalArgs, a: &RunArgs) -> Result<u8> {
    let config = load(&a.jobs)?;
    let job = config.jobs.get(&a.job).ok_or_else(|| {
        let names: Vec<&str> = config.jobs.keys().map(String::as_str).collect();
        anyhow!(coffer_agent::config::ConfigError::Invalid {
            path: config.files.first().cloned().unwrap_or_else(|| PathBuf::from("jobs.toml")),
            line: 0,
            key: "job".into(),
            message: if names.is_empty() {
                format!("no job {:?}: no job is defined", a.job)
            } else {
                format!("no job {:?}; the jobs are {}", a.job, names.join(", "))
            },
        })
    })?;
    let state = state_path(&a.jobs, &config)?;
    let log = logger();
    let ctx = context(&state, Arc::clone(&log))?;
    let stop = ctx.stop.clone();
    on_signals(move |_| stop.stop())?;
    let req = Request {
        job,
        notifiers: &config.notifiers,
        kind: a.kind,
        trigger: Trigger::Manual,
        slot: None,
        wait: !a.no_wait,
    };
    let report = run::run(&ctx, &req)?;
    run::notify_end(&ctx, &req, &report, false);
    write_textfile(&config, &state, &*log);
    if let Ok(d) = Arc::try_unwrap(ctx.dispatcher) {
        d.shutdown(NOTIFY_DRAIN);
    }
    print_report(global.json, &a.job, a.kind, &report);
    Ok(match report.outcome {
        Outcome::Success => exit::OK,
        Outcome::Warning => exit::INCOMPLETE,
        Outcome::Interrupted => report
            .exit_code
            .and_then(|c| u8::try_from(c).ok())
            .filter(|c| *c == exit::INTERRUPTED)
            .unwrap_or(exit::TERMINATED),
        Outcome::Failure | Outcome::Skipped | Outcome::Running => {
            report.exit_code.and_then(|c| u8::try_from(c).ok()).filter(|c| *c != 0).unwrap_or(exit::FAILURE)
        }
    })
}

fn time(t: jiff::Timestamp) -> String {
    t.round(jiff::Unit::Millisecond).unwrap_or(t).to_string()
}

fn print_report(json: bool, job: &str, kind: Kind, r: &Report) {
    if json {
        crate::output::json(&json!({
            "type": "run",
            "id": r.id.0,
            "job": job,
            "kind": kind.as_str(),
            "trigger": Trigger::Manual.as_str(),
            "outcome": r.outcome.as_str(),
            "exit_code": r.exit_code,
            "snapshot": r.snapshot,
            "started": time(r.started),
            "ended": time(r.ended),
            "error": r.error,
            "summary": r.summary,
        }));
        return;
    }
    let secs = r.ended.duration_since(r.started).as_secs_f64();
    let mut line = format!("job {job} {}: {} in {secs:.1} s", kind.as_str(), r.outcome);
    if let Some(s) = &r.snapshot {
        line.push_str(&format!(", snapshot {}", &s[..s.len().min(8)]));
    }
    if r.outcome.is_success() {
        println!("{line}");
    }
    if let Some(e) = &r.error {
        if r.outcome.is_success() {
            eprintln!("warning: {e}");
        } else {
            eprintln!("{line}: {e}");
        }
    }
}

/// `coffer agent …`.
pub fn run(global: &GlobalArgs, a: &AgentArgs) -> Result<u8> {
    match &a.command {
        None => agent(&a.jobs),
        Some(AgentCommand::Status) => status_cmd(global, &a.jobs),
        Some(AgentCommand::Install(i)) => install(global, &a.jobs, i),
        Some(AgentCommand::Uninstall(s)) => uninstall(global, s),
    }
}

/// The daemon.
fn agent(a: &JobsArgs) -> Result<u8> {
    let config = load(a)?;
    if config.agent.ui.is_some() {
        // The UI's one heap, as for `coffer ui` (see main), set before the
        // first thread; the jobs' steps run in processes of their own.
        crate::few_arenas(1);
    }
    let state = state_path(a, &config)?;
    let log = logger();
    let ctx = Arc::new(context(&state, Arc::clone(&log))?);
    let shared = Arc::new(Mutex::new(Arc::new(config)));
    let (tx, rx) = std::sync::mpsc::channel();
    let signal_tx = tx.clone();
    on_signals(move |s| {
        let _ = signal_tx.send(if s == signal_hook::consts::SIGHUP { Control::Reload } else { Control::Stop });
    })?;
    let first = Arc::clone(&shared.lock().unwrap_or_else(|p| p.into_inner()));
    let server = match first.agent.metrics {
        Some(addr) => {
            let (cfg, st) = (Arc::clone(&shared), state.clone());
            let source: metrics::Source = Arc::new(move || {
                let config = Arc::clone(&cfg.lock().unwrap_or_else(|p| p.into_inner()));
                Db::open_read_only(&st)
                    .and_then(|db| status::metrics_text(&db, &config, jiff::Timestamp::now()))
                    .unwrap_or_else(|e| format!("# coffer: the state database cannot be read: {e}\n"))
            });
            let server = metrics::serve(addr, first.agent.metrics_remote, source)?;
            log(format!("metrics at http://{}/metrics", server.addr()));
            Some(server)
        }
        None => None,
    };
    if let Some(listen) = first.agent.ui {
        let settings = &first.agent;
        let serving = crate::cmd::ui::Serving {
            listen,
            tls_files: match &settings.ui_tls {
                coffer_agent::config::UiTls::Files { cert, key } => Some((cert.clone(), key.clone())),
                _ => None,
            },
            tls_generate: settings.ui_tls == coffer_agent::config::UiTls::Generate,
            hostnames: Vec::new(),
            password_file: settings.ui_password_file.clone(),
            sessions: coffer_ui::SessionLimits::default(),
            show_token: false,
        };
        let l = Arc::clone(&log);
        let ui_log: Arc<dyn Fn(String) + Send + Sync> = Arc::new(move |line| l(format!("ui: {line}")));
        // The UI shows the jobs as they were at start; a reload (SIGHUP) does not reach it.
        let ui = crate::cmd::ui::bind(None, &serving, Some(((*first).clone(), Arc::clone(&ctx))), Arc::clone(&ui_log))?;
        log(format!("ui at {}", crate::cmd::ui::url(&ui, settings.ui_tls != coffer_agent::config::UiTls::None)));
        std::thread::Builder::new()
            .name("coffer-agent-ui".into())
            .spawn(move || {
                if let Err(e) = ui.run() {
                    ui_log(format!("stopped: {e}"));
                }
            })
            .context("cannot start the UI's thread")?;
    }
    let jobs_args = a.jobs.clone();
    let (cfg, st, l) = (Arc::clone(&shared), state.clone(), Arc::clone(&log));
    let options = DaemonOptions {
        ctx: Arc::clone(&ctx),
        config: Arc::clone(&shared),
        reload: Box::new(move || {
            load(&JobsArgs { jobs: jobs_args.clone(), state: None }).map_err(|e| format!("{e:#}"))
        }),
        log: Arc::clone(&log),
        random: Box::new(|| getrandom::u64().unwrap_or(0)),
        after_run: Box::new(move || {
            let config = Arc::clone(&cfg.lock().unwrap_or_else(|p| p.into_inner()));
            write_textfile(&config, &st, &*l);
        }),
    };
    write_textfile(&first, &state, &*log);
    daemon::run(options, tx, rx)?;
    if let Some(s) = server {
        s.shutdown();
    }
    if let Ok(ctx) = Arc::try_unwrap(ctx)
        && let Ok(d) = Arc::try_unwrap(ctx.dispatcher)
    {
        d.shutdown(NOTIFY_DRAIN);
    }
    Ok(exit::OK)
}

fn run_json(r: &Run) -> Value {
    json!({
        "id": r.id.0,
        "trigger": r.trigger.as_str(),
        "started": time(r.started),
        "ended": r.ended.map(time),
        "outcome": r.outcome.as_str(),
        "exit_code": r.exit_code,
        "snapshot": r.snapshot,
        "error": r.error,
    })
}

fn status_cmd(global: &GlobalArgs, a: &JobsArgs) -> Result<u8> {
    let config = load(a)?;
    let state = state_path(a, &config)?;
    let now = jiff::Timestamp::now();
    let opened = match Db::open_read_only(&state) {
        Ok(db) => Some(db),
        // No state yet (no run, or an agent creating the database now).
        Err(StateError::NoState { .. }) => None,
        Err(_) if !state.exists() => None,
        Err(e) => return Err(e.into()),
    };
    let rows = match opened {
        Some(db) => status::all(&db, &config, now)?,
        None => {
            // An empty database, of this process only.
            let dir = tempfile::tempdir().context("cannot make a temporary directory")?;
            let db = Db::open(&dir.path().join("empty.sqlite"))?;
            status::all(&db, &config, now)?
        }
    };
    if global.json {
        let jobs: Vec<Value> = rows
            .iter()
            .map(|s| {
                json!({
                    "job": s.job,
                    "kind": s.kind.as_str(),
                    "schedule": s.schedule,
                    "last": s.last.as_ref().map(run_json),
                    "last_success": s.last_success.as_ref().map(run_json),
                    "running": s.running.as_ref().map(run_json),
                    "next": s.next.map(time),
                    "overdue": s.overdue,
                    "overdue_after_seconds": s.overdue_after.map(|d| d.as_secs()),
                })
            })
            .collect();
        crate::output::json(&json!({"type": "agent_status", "state": state, "jobs": jobs}));
        return Ok(exit::OK);
    }
    if rows.is_empty() {
        println!("no jobs: define them in {}", config_dir()?.join("jobs.toml").display());
        return Ok(exit::OK);
    }
    let local = |t: jiff::Timestamp| t.to_zoned(crate::output::time_zone()).strftime("%Y-%m-%d %H:%M").to_string();
    let mut table = vec![vec![
        "job".to_string(),
        "kind".into(),
        "last run".into(),
        "outcome".into(),
        "snapshot".into(),
        "next".into(),
        "".into(),
    ]];
    for s in &rows {
        let last = s.last.as_ref();
        let next = if s.running.is_some() {
            "running now".to_string()
        } else {
            s.next.map_or("-".into(), |t| if t <= now { "due now".into() } else { local(t) })
        };
        table.push(vec![
            s.job.clone(),
            s.kind.as_str().into(),
            last.and_then(|r| r.ended).map_or("never".into(), local),
            last.map_or("-".into(), |r| r.outcome.as_str().to_string()),
            last.and_then(|r| r.snapshot.as_deref()).map_or("-".into(), |id| id[..id.len().min(8)].to_string()),
            next,
            if s.overdue { "OVERDUE".into() } else { String::new() },
        ]);
    }
    let widths: Vec<usize> =
        (0..table[0].len()).map(|c| table.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
    for row in table {
        let line: Vec<String> = row.iter().zip(&widths).map(|(cell, w)| format!("{cell:<w$}")).collect();
        println!("{}", line.join("  ").trim_end());
    }
    Ok(exit::OK)
}

fn unit_dir(s: &ScopeArgs) -> Result<(units::Scope, PathBuf)> {
    if s.system {
        return Ok((units::Scope::System, PathBuf::from("/etc/systemd/system")));
    }
    let base = crate::profile::config_home().ok_or_else(|| {
        anyhow!("cannot find the user's configuration directory: neither XDG_CONFIG_HOME nor HOME is set")
    })?;
    Ok((units::Scope::User, base.join("systemd/user")))
}

fn systemctl(scope: units::Scope, args: &[&str]) -> Result<()> {
    let mut cmd = std::process::Command::new("systemctl");
    if scope == units::Scope::User {
        cmd.arg("--user");
    }
    let out = cmd.args(args).output().with_context(|| {
        format!("cannot run systemctl {}: is systemd installed? (--no-enable writes the files only)", args.join(" "))
    })?;
    if !out.status.success() {
        bail!("systemctl {} failed ({}): {}", args.join(" "), out.status, String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

fn install(global: &GlobalArgs, a: &JobsArgs, i: &InstallArgs) -> Result<u8> {
    let config = load(a)?;
    let (scope, dir) = unit_dir(&i.scope)?;
    let exe = std::env::current_exe().context("cannot find the coffer binary")?;
    let mut jobs_args = Vec::new();
    if let Some(f) = &a.jobs {
        let abs = std::path::absolute(f).with_context(|| format!("{}: cannot make the path absolute", f.display()))?;
        jobs_args.extend(["--jobs".to_string(), abs.to_string_lossy().into_owned()]);
    }
    if let Some(s) = &a.state {
        let abs = std::path::absolute(s).with_context(|| format!("{}: cannot make the path absolute", s.display()))?;
        jobs_args.extend(["--state".to_string(), abs.to_string_lossy().into_owned()]);
    }
    let (list, left_out) = if i.timers {
        units::timer_units(&config, &exe, &jobs_args)
    } else {
        (vec![units::agent_unit(&exe, &jobs_args, scope)], Vec::new())
    };
    for l in &left_out {
        eprintln!("left out: {l}");
    }
    let written = units::write(&dir, &list)?;
    let enable: Vec<&str> =
        list.iter().map(|u| u.name.as_str()).filter(|n| n.ends_with(".timer") || *n == units::AGENT_UNIT).collect();
    if !i.no_enable {
        systemctl(scope, &["daemon-reload"])?;
        let mut args = vec!["enable", "--now"];
        args.extend(&enable);
        systemctl(scope, &args)?;
    }
    if global.json {
        crate::output::json(&json!({
            "type": "agent_install",
            "written": written,
            "enabled": if i.no_enable { Vec::new() } else { enable.clone() },
            "left_out": left_out,
        }));
    } else {
        for w in &written {
            println!("wrote {}", w.display());
        }
        if !i.no_enable {
            println!("enabled and started: {}", enable.join(", "));
        }
    }
    Ok(exit::OK)
}

fn uninstall(global: &GlobalArgs, s: &ScopeArgs) -> Result<u8> {
    let (scope, dir) = unit_dir(s)?;
    let found = units::installed(&dir)?;
    let names: Vec<String> =
        found.iter().filter_map(|p| p.file_name()).map(|n| n.to_string_lossy().into_owned()).collect();
    let active: Vec<&str> =
        names.iter().map(String::as_str).filter(|n| n.ends_with(".timer") || *n == units::AGENT_UNIT).collect();
    let mut warnings = Vec::new();
    if !active.is_empty() {
        let mut args = vec!["disable", "--now"];
        args.extend(&active);
        if let Err(e) = systemctl(scope, &args) {
            warnings.push(format!("{e:#}"));
        }
    }
    units::remove(&found)?;
    if !found.is_empty()
        && let Err(e) = systemctl(scope, &["daemon-reload"])
    {
        warnings.push(format!("{e:#}"));
    }
    if global.json {
        crate::output::json(&json!({"type": "agent_uninstall", "removed": found, "warnings": warnings}));
    } else {
        for w in &warnings {
            eprintln!("warning: {w}");
        }
        if found.is_empty() {
            println!("nothing to remove in {}", dir.display());
        }
        for p in &found {
            println!("removed {}", p.display());
        }
    }
    Ok(exit::OK)
}
