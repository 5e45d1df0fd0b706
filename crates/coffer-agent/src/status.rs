//! What `coffer agent status`, the metrics and the daemon say of each job's kinds:
//! the last run, the next time due, and whether the job is overdue
//! (docs/design.md#agent-state), read from the state database and the schedules.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::Timestamp;

use crate::config::{CheckData, Config, Job, Kind};
use crate::metrics::{self, JobInput};
use crate::schedule;
use crate::state::{Db, Run, StateError};

/// One kind of run of one job.
#[derive(Debug, Clone, PartialEq)]
pub struct KindStatus {
    pub job: String,
    pub kind: Kind,
    /// The schedule as written, if the kind has one.
    pub schedule: Option<String>,
    /// The newest run that ended.
    pub last: Option<Run>,
    pub last_success: Option<Run>,
    /// A run going on.
    pub running: Option<Run>,
    /// The next time due (at or before now: due now).
    pub next: Option<Timestamp>,
    /// No success within [`KindStatus::overdue_after`].
    pub overdue: bool,
    pub overdue_after: Option<Duration>,
}

/// The kinds a job has: backup, and those with a schedule.
pub fn kinds(job: &Job) -> Vec<Kind> {
    Kind::ALL.into_iter().filter(|k| *k == Kind::Backup || job.schedules.contains_key(k)).collect()
}

/// How long `job`'s `kind` may go without a success: the job's `overdue` (for
/// its backups), else twice its schedule's gap (at least an hour); None when it
/// is never overdue (no schedule, or fewer than two times left).
pub fn overdue_period(job: &Job, kind: Kind, now: Timestamp) -> Option<Duration> {
    if kind == Kind::Backup
        && let Some(d) = job.overdue
    {
        return Some(d);
    }
    let d = schedule::default_overdue(job.schedules.get(&kind)?, now);
    (d != Duration::MAX).then_some(d)
}

/// The status of `job`'s `kind` at `now`.
pub fn kind_status(db: &Db, job: &Job, kind: Kind, now: Timestamp) -> Result<KindStatus, StateError> {
    let last = db.last_run(&job.name, kind)?;
    let last_success = db.last_success(&job.name, kind)?;
    let running = db.running(Some(&job.name))?.into_iter().find(|r| r.kind == kind);
    let slot = db.slot(&job.name, kind)?;
    let schedule = job.schedules.get(&kind);
    let next = schedule.and_then(|s| match slot {
        Some(slot) => schedule::next_run(s, slot, now),
        None => s.next_after(now),
    });
    let overdue_after = overdue_period(job, kind, now);
    // Counted from the last success; before any, from the first run, or from
    // when the agent first saw the job.
    let since = match &last_success {
        Some(r) => r.ended,
        None => match db.first_started(&job.name, kind)? {
            Some(t) => Some(t),
            None => slot,
        },
    };
    let overdue = match (overdue_after, since) {
        (Some(period), Some(since)) => now.duration_since(since).unsigned_abs() > period && since < now,
        _ => false,
    };
    Ok(KindStatus {
        job: job.name.clone(),
        kind,
        schedule: schedule.map(|s| s.as_str().to_string()),
        last,
        last_success,
        running,
        next,
        overdue,
        overdue_after,
    })
}

/// Every job's kinds, overdue ones first, then by job and kind.
pub fn all(db: &Db, config: &Config, now: Timestamp) -> Result<Vec<KindStatus>, StateError> {
    let mut out = Vec::new();
    for job in config.jobs.values() {
        for kind in kinds(job) {
            out.push(kind_status(db, job, kind, now)?);
        }
    }
    out.sort_by(|a, b| (!a.overdue, &a.job, a.kind).cmp(&(!b.overdue, &b.job, b.kind)));
    Ok(out)
}

/// The metrics text of every job (docs/design.md#metrics).
pub fn metrics_text(db: &Db, config: &Config, now: Timestamp) -> Result<String, StateError> {
    let inputs: Vec<JobInput> = config
        .jobs
        .values()
        .map(|job| JobInput {
            name: job.name.clone(),
            kinds: kinds(job),
            check_window: match job.check_data {
                CheckData::Rotate(n) => n,
                _ => 1,
            },
        })
        .collect();
    let mut next_runs = BTreeMap::new();
    let mut overdue = BTreeSet::new();
    for s in all(db, config, now)? {
        if let Some(t) = s.next {
            next_runs.insert((s.job.clone(), s.kind), t);
        }
        if s.overdue {
            overdue.insert((s.job, s.kind));
        }
    }
    Ok(metrics::render(&metrics::from_db(db, &inputs, &next_runs, &overdue)?))
}
