//! The agent's jobs as the UI shows them (docs/design.md#ui-pages): each job's
//! kinds with their last run, next time due and whether they are overdue, read
//! from the agent's state database; recent runs; and runs started from the UI,
//! through the agent's own run (its job lock, history, hooks and notifications).

use std::sync::Arc;

use coffer_agent::config::{Config, Kind};
use coffer_agent::live::LiveProgress;
use coffer_agent::run::{self, Request, RunContext};
use coffer_agent::state::{Db, Run, StateError, Trigger};
use coffer_agent::status::{self, KindStatus};
use jiff::Timestamp;

/// A progress file older than this is taken for one left behind.
pub const LIVE_FRESH: std::time::Duration = std::time::Duration::from_secs(300);

/// The jobs file and the context runs are made in.
pub struct Jobs {
    pub config: Config,
    pub ctx: Arc<RunContext>,
    /// Where a run that could not start is told.
    pub log: Arc<dyn Fn(String) + Send + Sync>,
}

/// Why a run was not started.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("no job {0:?}")]
    NoJob(String),
    #[error("job {0} is running already")]
    Busy(String),
    #[error("{0}")]
    State(#[from] StateError),
    #[error("cannot start a thread for the run: {0}")]
    Spawn(std::io::Error),
}

impl Jobs {
    fn db(&self) -> Result<Option<Db>, StateError> {
        match Db::open_read_only(&self.ctx.db_path) {
            Ok(db) => Ok(Some(db)),
            Err(StateError::NoState { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Every job's kinds, overdue ones first, then by job and kind. With no state
    /// database yet, every kind is shown with no run.
    pub fn status(&self, now: Timestamp) -> Result<Vec<KindStatus>, StateError> {
        let mut all = match self.db()? {
            Some(db) => status::all(&db, &self.config, now)?,
            None => Vec::new(),
        };
        if all.is_empty() {
            for job in self.config.jobs.values() {
                for kind in status::kinds(job) {
                    all.push(KindStatus {
                        job: job.name.clone(),
                        kind,
                        schedule: job.schedules.get(&kind).map(|s| s.as_str().to_string()),
                        last: None,
                        last_success: None,
                        running: None,
                        next: None,
                        overdue: false,
                        overdue_after: status::overdue_period(job, kind, now),
                    });
                }
            }
        }
        all.sort_by(|a, b| b.overdue.cmp(&a.overdue).then_with(|| (&a.job, a.kind).cmp(&(&b.job, b.kind))));
        Ok(all)
    }

    /// The newest runs of every job (or of `job`), newest first.
    pub fn runs(&self, job: Option<&str>, limit: usize) -> Result<Vec<Run>, StateError> {
        Ok(match self.db()? {
            Some(db) => db.runs(job, limit)?,
            None => Vec::new(),
        })
    }

    /// The newest runs of `job`'s `kind`, newest first.
    pub fn runs_of(&self, job: &str, kind: Kind, limit: usize) -> Result<Vec<Run>, StateError> {
        Ok(match self.db()? {
            Some(db) => db.runs_of(job, kind, limit)?,
            None => Vec::new(),
        })
    }

    /// The progress of `job`'s run going on, if its file was written in the
    /// last [`LIVE_FRESH`] (a file left by a process that was killed is not shown).
    pub fn live(&self, job: &str) -> Option<LiveProgress> {
        let path = coffer_agent::live::path(&self.ctx.lock_dir, job);
        let age = std::fs::metadata(&path).ok()?.modified().ok()?.elapsed().unwrap_or_default();
        if age > LIVE_FRESH {
            return None;
        }
        coffer_agent::live::read(&self.ctx.lock_dir, job)
    }

    /// The progress of every job's run going on.
    pub fn live_all(&self) -> Vec<LiveProgress> {
        self.config.jobs.keys().filter_map(|j| self.live(j)).collect()
    }

    /// Starts a run of `kind` of `job` on a thread of its own (a check or a
    /// prune whether or not the job schedules one); it is recorded in the state
    /// database as any run. Refused when the job is running.
    pub fn start(&self, job: &str, kind: Kind) -> Result<(), StartError> {
        let j = self.config.jobs.get(job).ok_or_else(|| StartError::NoJob(job.to_string()))?;
        if let Some(db) = self.db()?
            && !db.running(Some(job))?.is_empty()
        {
            return Err(StartError::Busy(job.to_string()));
        }
        let (ctx, j, notifiers, log) = (self.ctx.clone(), j.clone(), self.config.notifiers.clone(), self.log.clone());
        std::thread::Builder::new()
            .name(format!("coffer-ui-run-{job}"))
            .spawn(move || {
                let req =
                    Request { job: &j, notifiers: &notifiers, kind, trigger: Trigger::Manual, slot: None, wait: false };
                match run::run(&ctx, &req) {
                    Ok(report) => run::notify_end(&ctx, &req, &report, false),
                    Err(e) => log(format!("job {}: {} run not started: {e}", j.name, kind.as_str())),
                }
            })
            .map_err(StartError::Spawn)?;
        Ok(())
    }
}
