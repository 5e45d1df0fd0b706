//! The agent's loop (docs/design.md#schedules): it runs each job's kinds when
//! they are due, one run per job at a time, retries failures with backoff,
//! tells notifiers when a job is overdue, reloads its configuration when told,
//! and on stop ends the runs going on and waits for them.
//!
//! The loop sleeps until the next thing it has to do (at most a minute, so that
//! a clock that jumps, after a suspend, is noticed) or until a run ends or the
//! binary sends a [`Control`].

use std::collections::BTreeMap;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::Timestamp;

use crate::config::{Config, Kind};
use crate::run::{self, Report, Request, RunContext, RunError};
use crate::schedule;
use crate::state::{Db, Outcome, StateError, Trigger, pid_alive};
use crate::status;

/// The longest the loop sleeps.
const MAX_SLEEP: Duration = Duration::from_secs(60);
/// When a job's lock is held by another process (a `coffer run`), the run is
/// tried again this much later, for the same slot.
const BUSY_RETRY: Duration = Duration::from_secs(30);

/// What the binary tells the loop.
#[derive(Debug)]
pub enum Control {
    /// SIGTERM or SIGINT: stop.
    Stop,
    /// SIGHUP: read the configuration again.
    Reload,
    /// A run ended (sent by the run's thread).
    Ended(Box<Ended>),
}

/// A run's end, as its thread reports it.
#[derive(Debug)]
pub struct Ended {
    pub job: String,
    pub kind: Kind,
    pub slot: Option<Timestamp>,
    pub attempt: u32,
    pub trigger: Trigger,
    pub result: Result<Report, String>,
    /// Busy: another process held the job's lock; nothing ran.
    pub busy: bool,
    /// When the failed run is tried again.
    pub retry_at: Option<Timestamp>,
}

/// A run the loop will start.
#[derive(Debug, Clone, PartialEq)]
struct Plan {
    slot: Option<Timestamp>,
    start_at: Timestamp,
    trigger: Trigger,
    /// Retries made so far for this slot.
    attempt: u32,
}

/// What the loop is given.
pub struct DaemonOptions {
    pub ctx: Arc<RunContext>,
    /// The configuration in force, shared with the metrics (replaced on reload).
    pub config: Arc<Mutex<Arc<Config>>>,
    /// Reads the configuration again (SIGHUP); an error keeps the one in force.
    pub reload: Box<dyn Fn() -> Result<Config, String>>,
    /// Where lines for the log go.
    pub log: Arc<dyn Fn(String) + Send + Sync>,
    /// A random number for each randomised delay.
    pub random: Box<dyn FnMut() -> u64>,
    /// Called after every run (to write the textfile metrics).
    pub after_run: Box<dyn Fn()>,
}

/// Runs the loop until [`Control::Stop`]; `tx` is the sender of `rx`, given to
/// the runs' threads.
pub fn run(mut o: DaemonOptions, tx: Sender<Control>, rx: Receiver<Control>) -> Result<(), StateError> {
    let ctx = Arc::clone(&o.ctx);
    let started = ctx.clock.now();
    let log = Arc::clone(&o.log);
    {
        let db = Db::open(&ctx.db_path)?;
        for id in db.mark_abandoned(started, pid_alive)? {
            log(format!("run {id} was left running by a process that is gone: recorded as interrupted"));
        }
    }
    let mut config = current(&o.config);
    first_seen(&ctx, &config, started)?;
    let mut plans: BTreeMap<(String, Kind), Plan> = BTreeMap::new();
    let mut running: BTreeMap<String, Kind> = BTreeMap::new();
    let mut overdue_told: BTreeMap<(String, Kind), Timestamp> = BTreeMap::new();
    let mut stopping = false;
    log(format!("agent started: {} job(s), state in {}", config.jobs.len(), ctx.db_path.display()));
    loop {
        let now = ctx.clock.now();
        if !stopping {
            plan(&ctx, &config, now, started, &mut plans, &running, &mut o.random)?;
            // Start what is due, one run per job.
            let due: Vec<(String, Kind)> = plans
                .iter()
                .filter(|((job, _), p)| p.start_at <= now && !running.contains_key(job))
                .map(|(k, _)| k.clone())
                .collect();
            for (job_name, kind) in due {
                if running.contains_key(&job_name) {
                    continue;
                }
                let Some(p) = plans.remove(&(job_name.clone(), kind)) else { continue };
                if let Some(slot) = p.slot {
                    Db::open(&ctx.db_path)?.set_slot(&job_name, kind, slot)?;
                }
                running.insert(job_name.clone(), kind);
                start(&ctx, &config, &job_name, kind, p, tx.clone());
            }
            overdue(&ctx, &config, now, &mut overdue_told, &log)?;
        } else if running.is_empty() {
            log("agent stopped".into());
            return Ok(());
        }
        let wake = if stopping { MAX_SLEEP } else { next_wake(&config, &plans, &running, now).min(MAX_SLEEP) };
        match rx.recv_timeout(wake) {
            Ok(Control::Stop) => {
                if !stopping {
                    stopping = true;
                    plans.clear();
                    log(format!("stopping: {} run(s) going on are being ended", running.len()));
                    ctx.stop.stop();
                }
            }
            Ok(Control::Reload) => match (o.reload)() {
                Ok(c) => {
                    let c = Arc::new(c);
                    *o.config.lock().unwrap_or_else(|p| p.into_inner()) = Arc::clone(&c);
                    config = c;
                    first_seen(&ctx, &config, ctx.clock.now())?;
                    // Plans are made again from the new schedules; retries of jobs
                    // still there are kept.
                    plans.retain(|(job, _), p| p.trigger == Trigger::Retry && config.jobs.contains_key(job));
                    log(format!("configuration reloaded: {} job(s)", config.jobs.len()));
                }
                Err(e) => log(format!("configuration not reloaded, the one in force is kept: {e}")),
            },
            Ok(Control::Ended(e)) => {
                running.remove(&e.job);
                (o.after_run)();
                ended(&config, *e, &mut plans, &log, ctx.clock.now(), stopping);
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return Ok(()),
        }
    }
}

fn current(config: &Arc<Mutex<Arc<Config>>>) -> Arc<Config> {
    Arc::clone(&config.lock().unwrap_or_else(|p| p.into_inner()))
}

/// Records, for each scheduled kind the database has no slot of, that it was
/// first seen at `now`: its runs are due from then on.
fn first_seen(ctx: &RunContext, config: &Config, now: Timestamp) -> Result<(), StateError> {
    let db = Db::open(&ctx.db_path)?;
    for job in config.jobs.values() {
        for kind in job.schedules.keys() {
            if db.slot(&job.name, *kind)?.is_none() {
                db.set_slot(&job.name, *kind, now)?;
            }
        }
    }
    Ok(())
}

/// Makes a plan for each scheduled kind that is due and has none. A scheduled
/// run that comes due replaces a retry of the same kind (its slot takes over).
fn plan(
    ctx: &RunContext,
    config: &Config,
    now: Timestamp,
    agent_started: Timestamp,
    plans: &mut BTreeMap<(String, Kind), Plan>,
    running: &BTreeMap<String, Kind>,
    random: &mut Box<dyn FnMut() -> u64>,
) -> Result<(), StateError> {
    let db = Db::open(&ctx.db_path)?;
    for job in config.jobs.values() {
        for (kind, sched) in &job.schedules {
            let key = (job.name.clone(), *kind);
            if plans.get(&key).is_some_and(|p| p.trigger != Trigger::Retry) {
                continue;
            }
            // The run going on holds the slot it ran for: not due again.
            if running.get(&job.name) == Some(kind) {
                continue;
            }
            let Some(last) = db.slot(&job.name, *kind)? else { continue };
            let Some(slot) = schedule::due(sched, last, now) else { continue };
            let delay = schedule::random_delay(job.randomized_delay, random());
            let start_at = slot.checked_add(delay).unwrap_or(slot);
            let trigger = if slot < agent_started { Trigger::CatchUp } else { Trigger::Schedule };
            plans.insert(key, Plan { slot: Some(slot), start_at, trigger, attempt: 0 });
        }
    }
    Ok(())
}

/// Starts the planned run on a thread of its own.
fn start(ctx: &Arc<RunContext>, config: &Arc<Config>, job: &str, kind: Kind, p: Plan, tx: Sender<Control>) {
    let ctx = Arc::clone(ctx);
    let config = Arc::clone(config);
    let job_name = job.to_string();
    let job = job.to_string();
    let trigger = p.trigger;
    let name = format!("coffer-run-{job}");
    let thread_tx = tx.clone();
    let spawned = std::thread::Builder::new().name(name).spawn(move || {
        let Some(j) = config.jobs.get(&job) else { return };
        let req = Request { job: j, notifiers: &config.notifiers, kind, trigger: p.trigger, slot: p.slot, wait: false };
        let (result, busy, retry_at) = match run::run(&ctx, &req) {
            Ok(report) => {
                let retry_at = (report.outcome == Outcome::Failure && !ctx.stop.stopped())
                    .then(|| {
                        let after = p.slot.unwrap_or(report.started);
                        let next_slot = j.schedules.get(&kind).and_then(|s| s.next_after(after));
                        schedule::retry_at(report.ended, p.attempt, j.retries, j.retry_delay, next_slot)
                    })
                    .flatten();
                run::notify_end(&ctx, &req, &report, retry_at.is_some());
                (Ok(report), false, retry_at)
            }
            Err(RunError::Busy { .. }) => (Err("another process is running the job".into()), true, None),
            Err(e) => (Err(e.to_string()), false, None),
        };
        let _ = thread_tx.send(Control::Ended(Box::new(Ended {
            job,
            kind,
            slot: p.slot,
            attempt: p.attempt,
            trigger: p.trigger,
            result,
            busy,
            retry_at,
        })));
    });
    if let Err(e) = spawned {
        // Nothing ran: said as a run that could not start.
        let _ = tx.send(Control::Ended(Box::new(Ended {
            job: job_name,
            kind,
            slot: None,
            attempt: 0,
            trigger,
            result: Err(format!("cannot start a thread for the run: {e}")),
            busy: false,
            retry_at: None,
        })));
    }
}

/// Logs a run's end and plans what follows it: a retry, or the same slot again
/// when the job was busy.
fn ended(
    config: &Config,
    e: Ended,
    plans: &mut BTreeMap<(String, Kind), Plan>,
    log: &Arc<dyn Fn(String) + Send + Sync>,
    now: Timestamp,
    stopping: bool,
) {
    let key = (e.job.clone(), e.kind);
    match &e.result {
        Ok(r) => {
            let mut line = format!("job {:?} {} ({}): {}", e.job, e.kind.as_str(), e.trigger.as_str(), r.outcome);
            if let Some(s) = &r.snapshot {
                line.push_str(&format!(", snapshot {s}"));
            }
            if let Some(err) = &r.error {
                line.push_str(&format!(": {err}"));
            }
            log(line);
        }
        Err(err) => log(format!("job {:?} {}: not run: {err}", e.job, e.kind.as_str())),
    }
    if stopping || !config.jobs.contains_key(&e.job) {
        return;
    }
    if e.busy {
        let start_at = now.checked_add(BUSY_RETRY).unwrap_or(now);
        plans.entry(key).or_insert(Plan { slot: e.slot, start_at, trigger: Trigger::Schedule, attempt: e.attempt });
    } else if let Some(at) = e.retry_at {
        log(format!("job {:?} {}: tried again at {at}", e.job, e.kind.as_str()));
        plans.entry(key).or_insert(Plan { slot: None, start_at: at, trigger: Trigger::Retry, attempt: e.attempt + 1 });
    }
}

/// Tells notifiers of each kind that became overdue, and again each overdue
/// period it stays so.
fn overdue(
    ctx: &RunContext,
    config: &Config,
    now: Timestamp,
    told: &mut BTreeMap<(String, Kind), Timestamp>,
    log: &Arc<dyn Fn(String) + Send + Sync>,
) -> Result<(), StateError> {
    let db = Db::open(&ctx.db_path)?;
    for job in config.jobs.values() {
        for kind in job.schedules.keys() {
            let s = status::kind_status(&db, job, *kind, now)?;
            let key = (job.name.clone(), *kind);
            if !s.overdue {
                told.remove(&key);
                continue;
            }
            let period = s.overdue_after.unwrap_or(Duration::MAX);
            let again = told.get(&key).is_none_or(|t| now.duration_since(*t).unsigned_abs() >= period);
            if again {
                told.insert(key, now);
                log(format!("job {:?} {} is overdue: no success within {}", job.name, kind.as_str(), human(period)));
                run::notify_overdue(ctx, job, &config.notifiers, *kind);
            }
        }
    }
    Ok(())
}

fn human(d: Duration) -> String {
    humantime::format_duration(Duration::from_secs(d.as_secs())).to_string()
}

/// How long until the loop has something to do.
fn next_wake(
    config: &Config,
    plans: &BTreeMap<(String, Kind), Plan>,
    running: &BTreeMap<String, Kind>,
    now: Timestamp,
) -> Duration {
    let mut at: Option<Timestamp> = None;
    let mut consider = |t: Timestamp| at = Some(at.map_or(t, |a| a.min(t)));
    for ((job, _), p) in plans {
        if !running.contains_key(job) {
            consider(p.start_at);
        }
    }
    for job in config.jobs.values() {
        for s in job.schedules.values() {
            if let Some(t) = s.next_after(now) {
                consider(t);
            }
        }
    }
    match at {
        Some(t) if t > now => t.duration_since(now).unsigned_abs(),
        Some(_) => Duration::ZERO,
        None => MAX_SLEEP,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{FakeSteps, TestClock, config, context};
    use std::sync::atomic::{AtomicI64, Ordering};

    #[test]
    fn a_missed_week_is_caught_up_once_and_failures_are_retried() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = config(
            dir.path(),
            "[job.a]\nrepository = \"/r\"\npassword-file = \"/p\"\npaths = [\"/data\"]\nschedule = \"hourly\"\nretries = 2\nretry-delay = \"10m\"\n",
        );
        let t0 = Timestamp::from_second(1_700_000_000).unwrap();
        let clock = Arc::new(TestClock(AtomicI64::new(t0.as_millisecond())));
        let steps = Arc::new(FakeSteps { calls: Mutex::new(Vec::new()), code: Mutex::new(0) });
        let ctx = context(dir.path(), Arc::clone(&steps), Arc::clone(&clock));
        let config = Arc::new(cfg);
        first_seen(&ctx, &config, t0).unwrap();
        // A week later: one catch-up plan, for the latest hour.
        let week = t0.checked_add(jiff::SignedDuration::from_hours(24 * 7)).unwrap();
        let mut plans = BTreeMap::new();
        let mut random: Box<dyn FnMut() -> u64> = Box::new(|| 0);
        plan(&ctx, &config, week, week, &mut plans, &BTreeMap::new(), &mut random).unwrap();
        assert_eq!(plans.len(), 1);
        let p = plans.values().next().unwrap().clone();
        let latest_hour = Timestamp::from_second(week.as_second() - week.as_second() % 3600).unwrap();
        assert_eq!(p.slot, Some(latest_hour));
        assert_eq!(p.trigger, Trigger::CatchUp);
        // Run it (failing) on this thread's behalf, as the loop would.
        *steps.code.lock().unwrap() = 1;
        clock.0.store(week.as_millisecond(), Ordering::SeqCst);
        let (tx, rx) = std::sync::mpsc::channel();
        Db::open(&ctx.db_path).unwrap().set_slot("a", Kind::Backup, latest_hour).unwrap();
        plans.clear();
        start(&ctx, &config, "a", Kind::Backup, p, tx);
        let Control::Ended(e) = rx.recv().unwrap() else { panic!("not an end") };
        let report = e.result.as_ref().unwrap();
        assert_eq!(report.outcome, Outcome::Failure);
        // retried 10 minutes after it failed
        assert_eq!(e.retry_at, Some(week.checked_add(Duration::from_secs(600)).unwrap()));
        let log: Arc<dyn Fn(String) + Send + Sync> = Arc::new(|_| {});
        ended(&config, *e, &mut plans, &log, week, false);
        assert_eq!(plans.values().next().unwrap().trigger, Trigger::Retry);
        // Nothing else is due before the next hour.
        plan(&ctx, &config, week, week, &mut plans, &BTreeMap::new(), &mut random).unwrap();
        assert_eq!(plans.len(), 1);
        assert_eq!(steps.calls.lock().unwrap()[0][0], "backup");
    }

    #[test]
    fn an_overdue_job_is_told_once_per_overdue_period() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = config(
            dir.path(),
            "[job.a]\nrepository = \"/r\"\npassword-file = \"/p\"\npaths = [\"/data\"]\nschedule = \"hourly\"\noverdue = \"1h\"\n",
        );
        let t0 = Timestamp::from_second(1_700_000_000).unwrap();
        let clock = Arc::new(TestClock(AtomicI64::new(t0.as_millisecond())));
        let steps = Arc::new(FakeSteps { calls: Mutex::new(Vec::new()), code: Mutex::new(0) });
        let ctx = context(dir.path(), steps, clock);
        first_seen(&ctx, &cfg, t0).unwrap();
        let lines = Arc::new(Mutex::new(Vec::<String>::new()));
        let l2 = Arc::clone(&lines);
        let log: Arc<dyn Fn(String) + Send + Sync> = Arc::new(move |l| l2.lock().unwrap().push(l));
        let mut told = BTreeMap::new();
        let at = |secs: i64| t0.checked_add(jiff::SignedDuration::from_secs(secs)).unwrap();
        for (secs, expected) in [(1800, 0), (3601, 1), (3700, 1), (7300, 2)] {
            overdue(&ctx, &cfg, at(secs), &mut told, &log).unwrap();
            let n = lines.lock().unwrap().iter().filter(|l| l.contains("is overdue")).count();
            assert_eq!(n, expected, "at t0 + {secs} s: {:?}", lines.lock().unwrap());
        }
        // A success ends it; the next overdue period counts from the success.
        let db = Db::open(&ctx.db_path).unwrap();
        let id = db.start_run("a", Kind::Backup, Trigger::Manual, None, at(7400), 1).unwrap();
        let finish = crate::state::Finish {
            ended: at(7410),
            outcome: Outcome::Success,
            exit_code: Some(0),
            snapshot: None,
            summary: None,
            error: None,
        };
        db.finish_run(id, finish).unwrap();
        overdue(&ctx, &cfg, at(7500), &mut told, &log).unwrap();
        assert!(told.is_empty());
        overdue(&ctx, &cfg, at(7410 + 3601), &mut told, &log).unwrap();
        assert_eq!(lines.lock().unwrap().iter().filter(|l| l.contains("is overdue")).count(), 3);
    }

    #[test]
    fn the_loop_runs_a_due_job_and_stops() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = config(
            dir.path(),
            "[job.a]\nrepository = \"/r\"\npassword-file = \"/p\"\npaths = [\"/data\"]\nschedule = \"*:*:0/1\"\n",
        );
        let clock = Arc::new(TestClock(AtomicI64::new(Timestamp::now().as_millisecond())));
        let steps = Arc::new(FakeSteps { calls: Mutex::new(Vec::new()), code: Mutex::new(0) });
        let ctx = context(dir.path(), Arc::clone(&steps), Arc::clone(&clock));
        let (tx, rx) = std::sync::mpsc::channel();
        let lines = Arc::new(Mutex::new(Vec::<String>::new()));
        let l2 = Arc::clone(&lines);
        let options = DaemonOptions {
            ctx: Arc::clone(&ctx),
            config: Arc::new(Mutex::new(Arc::new(cfg))),
            reload: Box::new(|| Err("no".into())),
            log: Arc::new(move |l| l2.lock().unwrap().push(l)),
            random: Box::new(|| 0),
            after_run: Box::new(|| {}),
        };
        let tx2 = tx.clone();
        let c2 = Arc::clone(&clock);
        let mover = std::thread::spawn(move || {
            // Two seconds of the test clock pass, then the loop is told to reload and stop.
            for _ in 0..4 {
                std::thread::sleep(Duration::from_millis(300));
                c2.0.fetch_add(1000, Ordering::SeqCst);
                let _ = tx2.send(Control::Reload);
            }
            let _ = tx2.send(Control::Stop);
        });
        run(options, tx, rx).unwrap();
        mover.join().unwrap();
        let lines = lines.lock().unwrap();
        assert!(lines.iter().any(|l| l.contains("job \"a\" backup (schedule): success")), "{lines:?}");
        assert!(lines.iter().any(|l| l.contains("configuration not reloaded")), "{lines:?}");
        let db = Db::open(&ctx.db_path).unwrap();
        assert!(!db.runs_of("a", Kind::Backup, 10).unwrap().is_empty());
    }
}
