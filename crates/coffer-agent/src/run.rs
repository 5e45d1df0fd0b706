//! One run of one job's kind (docs/design.md#agent): the per-job lock, the
//! run's row in the state database, the hooks, the steps, and which events the
//! run makes notifiers send. `coffer run` and the daemon both come here, so that
//! a run by the agent is the run `coffer run` makes.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use jiff::Timestamp;
use serde_json::Value;

use crate::Clock;
use crate::config::{CheckData, Event, Job, Kind, NotifierConfig};
use crate::hooks::{HookEnv, HookRecord, run_hook};
use crate::live::Writer;
use crate::notify::{Dispatcher, Message};
use crate::state::{Db, Finish, Outcome, Run, RunId, StateError, Trigger};
use crate::steps::{StepResult, Steps, Stop};

/// Exit code of a backup that wrote its snapshot but could not read some entries.
pub const EXIT_WARNING: i32 = 3;

/// How many earlier runs are looked at to tell a recovery.
const HISTORY: usize = 64;

/// What every run of a process shares.
pub struct RunContext {
    /// The state database (each run opens its own connection).
    pub db_path: PathBuf,
    /// Where the per-job lock files are.
    pub lock_dir: PathBuf,
    pub steps: Arc<dyn Steps>,
    /// The environment hooks start from (the agent's).
    pub hook_env: Vec<(OsString, OsString)>,
    pub dispatcher: Arc<Dispatcher>,
    /// The machine's name, for messages.
    pub host: String,
    pub clock: Arc<dyn Clock>,
    pub stop: Stop,
    /// This process's id, recorded with each run.
    pub pid: i64,
}

/// What to run.
pub struct Request<'a> {
    pub job: &'a Job,
    pub notifiers: &'a BTreeMap<String, NotifierConfig>,
    pub kind: Kind,
    pub trigger: Trigger,
    pub slot: Option<Timestamp>,
    /// Wait for the job's lock (`coffer run`), or give [`RunError::Busy`] at once.
    pub wait: bool,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub id: RunId,
    pub outcome: Outcome,
    pub exit_code: Option<i32>,
    pub snapshot: Option<String>,
    pub summary: Option<Value>,
    pub error: Option<String>,
    pub started: Timestamp,
    pub ended: Timestamp,
}

/// Why a run did not happen.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("job {job} is running already (another coffer run, or the agent); wait for it, or leave out --no-wait")]
    Busy { job: String },
    #[error("{}: cannot take the lock of job {job}: {source}; check the state directory's permissions", path.display())]
    Lock {
        job: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    State(#[from] StateError),
}

/// The per-job lock, held while the run goes on (released when dropped).
pub struct JobLock {
    _file: File,
}

/// Takes `job`'s lock in `dir`: waits for it, or gives None when `wait` is false
/// and another process holds it.
pub fn lock_job(dir: &Path, job: &str, wait: bool) -> Result<Option<JobLock>, RunError> {
    let path = dir.join(format!("{job}.lock"));
    let err = |source| RunError::Lock { job: job.to_string(), path: path.clone(), source };
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(err)?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .map_err(err)?;
    if wait {
        file.lock().map_err(err)?;
    } else {
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => return Ok(None),
            Err(std::fs::TryLockError::Error(e)) => return Err(err(e)),
        }
    }
    Ok(Some(JobLock { _file: file }))
}

/// Runs `req`: takes the job's lock, records the run, runs the `before` hook, the
/// steps and the other hooks, and records how it ended. Notifications are the
/// caller's ([`notify_end`]), who knows whether a retry follows.
pub fn run(ctx: &RunContext, req: &Request<'_>) -> Result<Report, RunError> {
    let job = req.job;
    let Some(_lock) = lock_job(&ctx.lock_dir, &job.name, req.wait)? else {
        return Err(RunError::Busy { job: job.name.clone() });
    };
    let db = Db::open(&ctx.db_path)?;
    let started = ctx.clock.now();
    let id = db.start_run(&job.name, req.kind, req.trigger, req.slot, started, ctx.pid)?;
    for name in &job.notify {
        if let Some(n) = req.notifiers.get(name) {
            ctx.dispatcher.dispatch_start(n, &message(ctx, job, req.kind, Event::Success, None, started, None, None));
        }
    }
    let mut env = HookEnv {
        base: ctx.hook_env.clone(),
        remove: job.storage.keys().map(OsString::from).collect(),
        job: job.name.clone(),
        kind: req.kind,
        repository: job.repository_label(),
        status: None,
        snapshot_id: None,
    };
    let mut hook_errors = Vec::new();
    let before = job.hooks.before.as_ref().map(|command| {
        let record = HookRecord::new(&job.name, req.kind, started);
        run_hook("before", command, &record.to_json(), &env, job.hooks.timeout)
    });
    let mut done = match before {
        Some(Err(e)) => Done {
            outcome: Outcome::Skipped,
            exit_code: None,
            snapshot: None,
            summary: None,
            error: Some(format!("skipped: {e}")),
        },
        _ => {
            let mut live = Writer::new(&ctx.lock_dir, &job.name, req.kind, started, expected_bytes(&db, job, req.kind));
            steps(ctx, &db, job, req.kind, &mut live)
        }
    };
    let ended = ctx.clock.now();
    env.status = Some(done.outcome);
    env.snapshot_id = done.snapshot.clone();
    let mut record = HookRecord::new(&job.name, req.kind, started);
    record.outcome = Some(done.outcome.as_str());
    record.ended = Some(ended.to_string());
    record.snapshot = done.snapshot.as_deref();
    record.summary = done.summary.as_ref();
    record.error = done.error.as_deref();
    let stdin = record.to_json();
    let after = if done.outcome.is_success() {
        ("after-success", &job.hooks.after_success)
    } else {
        ("after-failure", &job.hooks.after_failure)
    };
    for (name, command) in [after, ("finally", &job.hooks.finally)] {
        if let Some(command) = command
            && let Err(e) = run_hook(name, command, &stdin, &env, job.hooks.timeout)
        {
            hook_errors.push(e.to_string());
        }
    }
    if !hook_errors.is_empty() {
        let mut text = done.error.take().map(|e| vec![e]).unwrap_or_default();
        text.extend(hook_errors);
        done.error = Some(text.join("; "));
    }
    db.finish_run(
        id,
        Finish {
            ended,
            outcome: done.outcome,
            exit_code: done.exit_code,
            snapshot: done.snapshot.as_deref(),
            summary: done.summary.as_ref(),
            error: done.error.as_deref(),
        },
    )?;
    Ok(Report {
        id,
        outcome: done.outcome,
        exit_code: done.exit_code,
        snapshot: done.snapshot,
        summary: done.summary,
        error: done.error,
        started,
        ended,
    })
}

/// What the steps came to.
struct Done {
    outcome: Outcome,
    exit_code: Option<i32>,
    snapshot: Option<String>,
    summary: Option<Value>,
    error: Option<String>,
}

impl Done {
    fn of(step: StepResult, warning_code: bool) -> Done {
        let outcome = match step.exit_code {
            Some(0) => Outcome::Success,
            Some(EXIT_WARNING) if warning_code => Outcome::Warning,
            _ if step.interrupted() => Outcome::Interrupted,
            _ => Outcome::Failure,
        };
        let error = match outcome {
            Outcome::Interrupted => {
                Some(format!("interrupted: {}", step.error.unwrap_or_else(|| "the step was stopped".into())))
            }
            _ => step.error,
        };
        Done { outcome, exit_code: step.exit_code, snapshot: None, summary: step.document, error }
    }
}

/// The command of a step: the kind's name, then its options.
fn args(kind: &str, rest: impl IntoIterator<Item = String>) -> Vec<String> {
    std::iter::once(kind.to_string()).chain(rest).collect()
}

/// The bytes the last successful run of `kind` processed (a backup's
/// `bytes_total`), for an ETA.
fn expected_bytes(db: &Db, job: &Job, kind: Kind) -> Option<u64> {
    let last = db.last_success(&job.name, kind).ok()??;
    last.summary?.get("summary")?.get("bytes_total")?.as_u64()
}

/// Runs one step, its progress written to `live`.
fn step(ctx: &RunContext, job: &Job, live: &mut Writer, args: &[String]) -> StepResult {
    let name = args.first().cloned().unwrap_or_default();
    live.step(&name);
    ctx.steps.run(job, args, &ctx.stop, &mut |v| live.update(&name, v))
}

fn steps(ctx: &RunContext, db: &Db, job: &Job, kind: Kind, live: &mut Writer) -> Done {
    match kind {
        Kind::Backup => backup(ctx, job, live),
        Kind::Prune => Done::of(step(ctx, job, live, &args("prune", [])), false),
        Kind::Check => {
            let subset = match &job.check_data {
                CheckData::None => None,
                CheckData::Subset(s) => Some(s.clone()),
                CheckData::Rotate(n) => match db.bump_check_round(&job.name) {
                    Ok(round) => Some(format!("{}/{n}", (round.max(1) - 1) % n + 1)),
                    Err(e) => {
                        return Done {
                            outcome: Outcome::Failure,
                            exit_code: None,
                            snapshot: None,
                            summary: None,
                            error: Some(e.to_string()),
                        };
                    }
                },
            };
            let rest = subset.into_iter().flat_map(|s| ["--read-data-subset".to_string(), s]);
            Done::of(step(ctx, job, live, &args("check", rest)), false)
        }
    }
}

/// `backup`, then `forget` with the job's policy; the summary gains `forget`
/// (its counts) and `stats` (for the metrics).
fn backup(ctx: &RunContext, job: &Job, live: &mut Writer) -> Done {
    let rest = job.backup_args.iter().cloned().chain(["--".to_string()]).chain(job.paths.iter().cloned());
    let mut done = Done::of(step(ctx, job, live, &args("backup", rest)), true);
    done.snapshot =
        done.summary.as_ref().and_then(|s| s.get("snapshot_id")).and_then(Value::as_str).map(str::to_string);
    if let Some(Value::Object(map)) = &mut done.summary {
        map.entry("repository").or_insert_with(|| Value::String(job.repository_label()));
    }
    if !done.outcome.is_success() {
        return done;
    }
    if let Some(forget) = &job.forget_args {
        let step = step(ctx, job, live, &args("forget", forget.iter().cloned()));
        if let Some(Value::Object(map)) = &mut done.summary
            && let Some(doc) = &step.document
        {
            let counts: serde_json::Map<String, Value> =
                ["kept", "forgotten"].into_iter().filter_map(|k| Some((k.to_string(), doc.get(k)?.clone()))).collect();
            map.insert("forget".into(), Value::Object(counts));
        }
        let forgot = Done::of(step, false);
        if !forgot.outcome.is_success() {
            done.outcome = forgot.outcome;
            done.exit_code = forgot.exit_code;
            done.error =
                Some(format!("the backup succeeded, then forget failed: {}", forgot.error.unwrap_or_default()));
            return done;
        }
    }
    stats(&mut done.summary);
    done
}

/// `stats`, for the metrics: the snapshots and stored bytes the backup's
/// `repository_stats` counted, less the snapshots its forget removed.
fn stats(summary: &mut Option<Value>) {
    let Some(Value::Object(map)) = summary else { return };
    let Some(repo) = map.get("repository_stats") else { return };
    let (Some(snapshots), Some(bytes)) = (repo["snapshots"].as_u64(), repo["stored_bytes"].as_u64()) else { return };
    let forgotten = map.get("forget").and_then(|f| f["forgotten"].as_array()).map_or(0, Vec::len) as u64;
    let stats = serde_json::json!({"snapshots_count": snapshots.saturating_sub(forgotten), "total_size": bytes});
    map.insert("stats".into(), stats);
}

/// The events a run that ended as `report` makes: `failure` when it failed (a
/// skipped run too) and no retry follows, `recovery` when it succeeded and the
/// job's last run before it that ended for good had failed, `success` otherwise.
pub fn events(report: &Report, trigger: Trigger, earlier: &[Run], will_retry: bool) -> Vec<Event> {
    match report.outcome {
        Outcome::Failure | Outcome::Skipped if !will_retry => vec![Event::Failure],
        Outcome::Success | Outcome::Warning => {
            if previous_outcome(report.id, trigger, earlier).is_some_and(|o| !o.is_success()) {
                vec![Event::Recovery]
            } else {
                vec![Event::Success]
            }
        }
        _ => Vec::new(),
    }
}

/// The outcome of the last run before `id` that ended for good: interrupted
/// runs are passed over, and so is the chain of failures a retry tried again.
fn previous_outcome(id: RunId, trigger: Trigger, earlier: &[Run]) -> Option<Outcome> {
    let mut retrying = trigger == Trigger::Retry;
    for run in earlier.iter().filter(|r| r.id != id) {
        match run.outcome {
            Outcome::Running | Outcome::Interrupted => continue,
            o if retrying && !o.is_success() => {
                retrying = run.trigger == Trigger::Retry;
                continue;
            }
            o => return Some(o),
        }
    }
    None
}

/// Sends what the run's end calls for to the job's notifiers (those whose
/// `notify-on` lists the event).
pub fn notify_end(ctx: &RunContext, req: &Request<'_>, report: &Report, will_retry: bool) {
    let job = req.job;
    let earlier = Db::open(&ctx.db_path).and_then(|db| db.runs_of(&job.name, req.kind, HISTORY)).unwrap_or_default();
    for event in events(report, req.trigger, &earlier, will_retry) {
        if !job.notify_on.contains(&event) {
            continue;
        }
        let msg = message(
            ctx,
            job,
            req.kind,
            event,
            Some(report.outcome),
            report.ended,
            report.snapshot.clone(),
            report.error.clone(),
        );
        let msg = Message { summary: report.summary.clone(), ..msg };
        for name in &job.notify {
            if let Some(n) = req.notifiers.get(name) {
                ctx.dispatcher.dispatch(n, &msg);
            }
        }
    }
}

/// Sends `overdue` for `job`'s `kind` to its notifiers.
pub fn notify_overdue(ctx: &RunContext, job: &Job, notifiers: &BTreeMap<String, NotifierConfig>, kind: Kind) {
    if !job.notify_on.contains(&Event::Overdue) {
        return;
    }
    let msg = message(ctx, job, kind, Event::Overdue, None, ctx.clock.now(), None, None);
    for name in &job.notify {
        if let Some(n) = notifiers.get(name) {
            ctx.dispatcher.dispatch(n, &msg);
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn message(
    ctx: &RunContext,
    job: &Job,
    kind: Kind,
    event: Event,
    outcome: Option<Outcome>,
    time: Timestamp,
    snapshot: Option<String>,
    error: Option<String>,
) -> Message {
    Message {
        job: job.name.clone(),
        kind,
        event,
        outcome,
        host: ctx.host.clone(),
        time,
        snapshot,
        error,
        summary: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(id: i64, outcome: Outcome, trigger: Trigger) -> Run {
        Run {
            id: RunId(id),
            job: "j".into(),
            kind: Kind::Backup,
            trigger,
            slot: None,
            started: Timestamp::UNIX_EPOCH,
            ended: Some(Timestamp::UNIX_EPOCH),
            outcome,
            exit_code: None,
            snapshot: None,
            summary: None,
            error: None,
            pid: None,
        }
    }

    fn report(id: i64, outcome: Outcome) -> Report {
        Report {
            id: RunId(id),
            outcome,
            exit_code: None,
            snapshot: None,
            summary: None,
            error: None,
            started: Timestamp::UNIX_EPOCH,
            ended: Timestamp::UNIX_EPOCH,
        }
    }

    #[test]
    fn read_all_every_reads_the_next_group_at_each_check() {
        use crate::test_support::{FakeSteps, TestClock, config, context};
        let dir = tempfile::tempdir().unwrap();
        let cfg = config(
            dir.path(),
            "[job.a]\nrepository = \"/r\"\npassword-file = \"/p\"\npaths = [\"/data\"]\n\
             check = { schedule = \"daily\", read-all-every = 3 }\n",
        );
        let clock = Arc::new(TestClock(std::sync::atomic::AtomicI64::new(1_700_000_000_000)));
        let steps = Arc::new(FakeSteps { calls: Default::default(), code: std::sync::Mutex::new(0) });
        let ctx = context(dir.path(), Arc::clone(&steps), clock);
        let job = &cfg.jobs["a"];
        for _ in 0..4 {
            let req = Request {
                job,
                notifiers: &cfg.notifiers,
                kind: Kind::Check,
                trigger: Trigger::Manual,
                slot: None,
                wait: true,
            };
            assert_eq!(super::run(&ctx, &req).unwrap().outcome, Outcome::Success);
        }
        let groups: Vec<String> = steps.calls.lock().unwrap().iter().map(|c| c.join(" ")).collect();
        assert_eq!(
            groups,
            [
                "check --read-data-subset 1/3",
                "check --read-data-subset 2/3",
                "check --read-data-subset 3/3",
                "check --read-data-subset 1/3"
            ]
        );
    }

    #[test]
    fn a_failure_is_told_once_its_retries_are_spent() {
        let r = report(2, Outcome::Failure);
        assert_eq!(events(&r, Trigger::Schedule, &[], true), vec![]);
        assert_eq!(events(&r, Trigger::Schedule, &[], false), vec![Event::Failure]);
        assert_eq!(events(&report(2, Outcome::Skipped), Trigger::Manual, &[], false), vec![Event::Failure]);
        assert_eq!(events(&report(2, Outcome::Interrupted), Trigger::Manual, &[], false), vec![]);
    }

    #[test]
    fn recovery_follows_a_failure_passing_over_interruptions() {
        let newest_first = [
            run(3, Outcome::Success, Trigger::Schedule),
            run(2, Outcome::Interrupted, Trigger::Schedule),
            run(1, Outcome::Failure, Trigger::Schedule),
        ];
        assert_eq!(
            events(&report(3, Outcome::Success), Trigger::Schedule, &newest_first, false),
            vec![Event::Recovery]
        );
        let ok = [run(2, Outcome::Warning, Trigger::Schedule), run(1, Outcome::Failure, Trigger::Schedule)];
        assert_eq!(events(&report(3, Outcome::Success), Trigger::Schedule, &ok, false), vec![Event::Success]);
    }

    #[test]
    fn a_retry_that_succeeds_is_no_recovery_when_the_run_before_the_chain_succeeded() {
        // Run 1 succeeded; run 2 failed (scheduled), run 3 (its retry) failed, run 4
        // (the second retry) succeeds: no failure was told, so no recovery either.
        let earlier = [
            run(3, Outcome::Failure, Trigger::Retry),
            run(2, Outcome::Failure, Trigger::Schedule),
            run(1, Outcome::Success, Trigger::Schedule),
        ];
        assert_eq!(events(&report(4, Outcome::Success), Trigger::Retry, &earlier, false), vec![Event::Success]);
        // Had run 1 failed for good (its failure told), run 4 is a recovery.
        let earlier = [
            run(3, Outcome::Failure, Trigger::Retry),
            run(2, Outcome::Failure, Trigger::Schedule),
            run(1, Outcome::Failure, Trigger::Schedule),
        ];
        assert_eq!(events(&report(4, Outcome::Success), Trigger::Retry, &earlier, false), vec![Event::Recovery]);
    }
}
