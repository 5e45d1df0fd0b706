//! The state database: the run history, each job's slots and check rounds, and
//! when each notice was last sent (docs/design.md#agent-state).
//!
//! One SQLite file in WAL mode: the agent and `coffer run` write it at the same
//! time (each through its own [`Db`]), the web UI and `coffer agent status` read
//! it ([`Db::open_read_only`]). Instants are [`jiff::Timestamp`]s, stored as Unix
//! milliseconds (slots as Unix seconds: schedules have whole seconds).

use std::fmt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use jiff::Timestamp;
use rusqlite::{Connection, OpenFlags, OptionalExtension, Row, params};

use crate::config::{Event, Kind};

/// The schema's version, kept in `PRAGMA user_version`.
pub const SCHEMA_VERSION: i64 = 1;

/// How long a statement waits for another process's write to end.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS runs (
  id INTEGER PRIMARY KEY,
  job TEXT NOT NULL, kind TEXT NOT NULL,
  trigger TEXT NOT NULL,
  slot INTEGER,
  started INTEGER NOT NULL, ended INTEGER,
  outcome TEXT,
  exit_code INTEGER, snapshot TEXT, summary TEXT,
  error TEXT,
  pid INTEGER);
CREATE INDEX IF NOT EXISTS runs_job_kind ON runs (job, kind, started);
CREATE INDEX IF NOT EXISTS runs_outcome ON runs (outcome);
CREATE TABLE IF NOT EXISTS slots (job TEXT, kind TEXT, slot INTEGER, check_round INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (job, kind));
CREATE TABLE IF NOT EXISTS notices (job TEXT, event TEXT, notifier TEXT, sent INTEGER NOT NULL,
  PRIMARY KEY (job, event, notifier));
";

/// What went wrong with the state database. Every message names the file.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("cannot create the directory of the state database {}: {source}; check its permissions or set [agent] state to another file", path.display())]
    CreateDir { path: PathBuf, source: std::io::Error },
    #[error("cannot create the state database {}: {source}; check its permissions or set [agent] state to another file", path.display())]
    CreateFile { path: PathBuf, source: std::io::Error },
    #[error("cannot open the state database {}: {source}", path.display())]
    Open { path: PathBuf, source: rusqlite::Error },
    #[error(
        "the state database {} is of schema version {found}, later than this coffer's ({SCHEMA_VERSION}): it was \
         written by a newer coffer; run that one, or give this one another file ([agent] state)",
        path.display()
    )]
    TooNew { path: PathBuf, found: i64 },
    #[error("the state database {}: {what}: {source}", path.display())]
    Sql { path: PathBuf, what: String, source: rusqlite::Error },
    #[error("the state database {}: {what}", path.display())]
    Invalid { path: PathBuf, what: String },
    /// Opened for reading before any process wrote its schema (an agent may be
    /// creating it this moment).
    #[error(
        "the state database {}: it holds no coffer state yet (schema version {found}); start the agent or run a \
         job first",
        path.display()
    )]
    NoState { path: PathBuf, found: i64 },
    #[error("the state database {} holds a bad value in run {id}: {what}; the row was written by something other than coffer", path.display())]
    BadRow { path: PathBuf, id: i64, what: String },
}

/// Why a run started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Trigger {
    /// Its schedule's time came.
    Schedule,
    /// Slots missed while the agent was stopped, caught up once.
    CatchUp,
    /// A failed run tried again.
    Retry,
    /// `coffer run` or the web UI.
    Manual,
}

impl Trigger {
    pub const ALL: [Trigger; 4] = [Trigger::Schedule, Trigger::CatchUp, Trigger::Retry, Trigger::Manual];

    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Schedule => "schedule",
            Trigger::CatchUp => "catch-up",
            Trigger::Retry => "retry",
            Trigger::Manual => "manual",
        }
    }

    pub fn parse(s: &str) -> Option<Trigger> {
        Trigger::ALL.into_iter().find(|t| t.as_str() == s)
    }
}

impl fmt::Display for Trigger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a run ended (or that it has not).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Outcome {
    Running,
    Success,
    /// A backup that exited 3: its snapshot written, some entries unreadable.
    Warning,
    Failure,
    /// A failing `before` hook kept it from running.
    Skipped,
    /// Stopped by a signal, or its process was gone.
    Interrupted,
}

impl Outcome {
    pub const ALL: [Outcome; 6] = [
        Outcome::Running,
        Outcome::Success,
        Outcome::Warning,
        Outcome::Failure,
        Outcome::Skipped,
        Outcome::Interrupted,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Running => "running",
            Outcome::Success => "success",
            Outcome::Warning => "warning",
            Outcome::Failure => "failure",
            Outcome::Skipped => "skipped",
            Outcome::Interrupted => "interrupted",
        }
    }

    pub fn parse(s: &str) -> Option<Outcome> {
        Outcome::ALL.into_iter().find(|o| o.as_str() == s)
    }

    /// Success or warning: what counts for `overdue` and `recovery`.
    pub fn is_success(self) -> bool {
        matches!(self, Outcome::Success | Outcome::Warning)
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A run's row id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RunId(pub i64);

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// One row of `runs`.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    pub id: RunId,
    pub job: String,
    pub kind: Kind,
    pub trigger: Trigger,
    pub slot: Option<Timestamp>,
    pub started: Timestamp,
    pub ended: Option<Timestamp>,
    pub outcome: Outcome,
    pub exit_code: Option<i32>,
    pub snapshot: Option<String>,
    pub summary: Option<serde_json::Value>,
    pub error: Option<String>,
    /// The process that started the run.
    pub pid: Option<i64>,
}

impl Run {
    /// How long it ran, once it has ended.
    pub fn duration(&self) -> Option<jiff::SignedDuration> {
        self.ended.map(|e| e.duration_since(self.started))
    }
}

/// What [`Db::finish_run`] records.
#[derive(Debug, Clone, Copy)]
pub struct Finish<'a> {
    pub ended: Timestamp,
    pub outcome: Outcome,
    pub exit_code: Option<i32>,
    pub snapshot: Option<&'a str>,
    pub summary: Option<&'a serde_json::Value>,
    pub error: Option<&'a str>,
}

/// A connection to the state database.
pub struct Db {
    conn: Connection,
    path: PathBuf,
}

impl fmt::Debug for Db {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Db").field("path", &self.path).finish_non_exhaustive()
    }
}

const RUN_COLUMNS: &str =
    "id, job, kind, trigger, slot, started, ended, outcome, exit_code, snapshot, summary, error, pid";

impl Db {
    /// Opens the database for writing, creating it (and its directories, mode
    /// 0700; the file 0600) when missing. Runs left `running` are not touched:
    /// see [`Db::mark_abandoned`].
    pub fn open(path: &Path) -> Result<Db, StateError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
            && !dir.exists()
        {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|source| StateError::CreateDir { path: dir.to_path_buf(), source })?;
        }
        // Created here so that its mode is 0600 (SQLite gives its -wal and -shm
        // files the database file's mode).
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(path)
            .map_err(|source| StateError::CreateFile { path: path.to_path_buf(), source })?;
        // Opening is done by one connection at a time (an flock on the file,
        // apart from SQLite's own locks, let go at the end of `open`): switching
        // a new file to WAL takes an exclusive lock SQLite does not wait for,
        // and two processes creating the file at once lost one's writes.
        file.lock().map_err(|source| StateError::CreateFile { path: path.to_path_buf(), source })?;
        let conn =
            Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX)
                .map_err(|source| StateError::Open { path: path.to_path_buf(), source })?;
        let mut db = Db { conn, path: path.to_path_buf() };
        db.conn.busy_timeout(BUSY_TIMEOUT).map_err(|e| db.sql("cannot set the busy timeout", e))?;
        let mode: String = db
            .conn
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            .map_err(|e| db.sql("cannot switch to the WAL journal", e))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(db.invalid(format!(
                "cannot switch to the WAL journal (the journal mode stayed {mode}); put the file on a local file system"
            )));
        }
        db.migrate()?;
        drop(file);
        Ok(db)
    }

    /// Opens an existing database for reading only (status, the web UI). A
    /// missing file is an error; a database of a later schema is refused.
    pub fn open_read_only(path: &Path) -> Result<Db, StateError> {
        let conn =
            Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
                .map_err(|source| StateError::Open { path: path.to_path_buf(), source })?;
        let db = Db { conn, path: path.to_path_buf() };
        db.conn.busy_timeout(BUSY_TIMEOUT).map_err(|e| db.sql("cannot set the busy timeout", e))?;
        let version = db.user_version()?;
        if version > SCHEMA_VERSION {
            return Err(StateError::TooNew { path: db.path.clone(), found: version });
        }
        if version < SCHEMA_VERSION {
            return Err(StateError::NoState { path: db.path.clone(), found: version });
        }
        Ok(db)
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn sql(&self, what: &str, source: rusqlite::Error) -> StateError {
        StateError::Sql { path: self.path.clone(), what: what.to_string(), source }
    }

    fn invalid(&self, what: String) -> StateError {
        StateError::Invalid { path: self.path.clone(), what }
    }

    fn user_version(&self) -> Result<i64, StateError> {
        self.conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(|e| self.sql("cannot read the schema version", e))
    }

    /// Creates the schema in a fresh database; refuses a later one. Done in
    /// one immediate transaction, so that two processes opening a new file at
    /// once create it once.
    fn migrate(&mut self) -> Result<(), StateError> {
        let path = self.path.clone();
        let sql = |what: &str, source| StateError::Sql { path: path.clone(), what: what.to_string(), source };
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(|e| sql("cannot begin a transaction", e))?;
        let version: i64 = tx
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(|e| sql("cannot read the schema version", e))?;
        if version > SCHEMA_VERSION {
            return Err(StateError::TooNew { path: path.clone(), found: version });
        }
        if version < SCHEMA_VERSION {
            tx.execute_batch(SCHEMA).map_err(|e| sql("cannot create the schema", e))?;
            tx.pragma_update(None, "user_version", SCHEMA_VERSION)
                .map_err(|e| sql("cannot set the schema version", e))?;
        }
        tx.commit().map_err(|e| sql("cannot commit the schema", e))
    }

    /// Records a run that starts now, `running`, and returns its id.
    pub fn start_run(
        &self,
        job: &str,
        kind: Kind,
        trigger: Trigger,
        slot: Option<Timestamp>,
        started: Timestamp,
        pid: i64,
    ) -> Result<RunId, StateError> {
        self.conn
            .prepare_cached(
                "INSERT INTO runs (job, kind, trigger, slot, started, outcome, pid) VALUES (?1, ?2, ?3, ?4, ?5, 'running', ?6)",
            )
            .and_then(|mut st| {
                st.execute(params![job, kind.as_str(), trigger.as_str(), slot.map(|s| s.as_second()), started.as_millisecond(), pid])
            })
            .map_err(|e| self.sql(&format!("cannot record the start of a {} run of job {job}", kind.as_str()), e))?;
        Ok(RunId(self.conn.last_insert_rowid()))
    }

    /// Records how run `id` ended.
    pub fn finish_run(&self, id: RunId, finish: Finish<'_>) -> Result<(), StateError> {
        let summary = finish.summary.map(|s| s.to_string());
        let n = self
            .conn
            .prepare_cached(
                "UPDATE runs SET ended = ?2, outcome = ?3, exit_code = ?4, snapshot = ?5, summary = ?6, error = ?7 WHERE id = ?1",
            )
            .and_then(|mut st| {
                st.execute(params![
                    id.0,
                    finish.ended.as_millisecond(),
                    finish.outcome.as_str(),
                    finish.exit_code,
                    finish.snapshot,
                    summary,
                    finish.error
                ])
            })
            .map_err(|e| self.sql(&format!("cannot record the end of run {id}"), e))?;
        if n == 0 {
            return Err(self.sql(&format!("cannot record the end of run {id}"), rusqlite::Error::QueryReturnedNoRows));
        }
        Ok(())
    }

    /// Marks as `interrupted` every `running` run whose process `alive` says is
    /// gone (or that has no pid), ended at `now`; returns them. The agent calls
    /// it at start, with a test of whether a pid still runs ([`pid_alive`]).
    pub fn mark_abandoned(&self, now: Timestamp, alive: impl Fn(i64) -> bool) -> Result<Vec<RunId>, StateError> {
        let running = self.running(None)?;
        let mut marked = Vec::new();
        for run in running {
            if run.pid.is_some_and(&alive) {
                continue;
            }
            let error = match run.pid {
                Some(pid) => format!("the process that ran it (pid {pid}) ended before recording how the run ended"),
                None => "no process is recorded as running it".to_string(),
            };
            let n = self
                .conn
                .prepare_cached(
                    "UPDATE runs SET outcome = 'interrupted', ended = ?2, error = ?3 WHERE id = ?1 AND outcome = 'running'",
                )
                .and_then(|mut st| st.execute(params![run.id.0, now.as_millisecond(), error]))
                .map_err(|e| self.sql(&format!("cannot mark run {} interrupted", run.id), e))?;
            if n == 1 {
                marked.push(run.id);
            }
        }
        Ok(marked)
    }

    /// The slot of the last run of `job`'s `kind` (or the time the job was first seen).
    pub fn slot(&self, job: &str, kind: Kind) -> Result<Option<Timestamp>, StateError> {
        let secs: Option<Option<i64>> = self
            .conn
            .prepare_cached("SELECT slot FROM slots WHERE job = ?1 AND kind = ?2")
            .and_then(|mut st| st.query_row(params![job, kind.as_str()], |r| r.get(0)).optional())
            .map_err(|e| self.sql(&format!("cannot read the slot of job {job}"), e))?;
        match secs.flatten() {
            None => Ok(None),
            Some(s) => Timestamp::from_second(s).map(Some).map_err(|e| {
                self.invalid(format!("the {} slot of job {job}, {s}, is out of range: {e}", kind.as_str()))
            }),
        }
    }

    /// Sets the slot of `job`'s `kind` (whole seconds; a fraction is dropped).
    pub fn set_slot(&self, job: &str, kind: Kind, slot: Timestamp) -> Result<(), StateError> {
        self.conn
            .prepare_cached(
                "INSERT INTO slots (job, kind, slot) VALUES (?1, ?2, ?3) ON CONFLICT (job, kind) DO UPDATE SET slot = excluded.slot",
            )
            .and_then(|mut st| st.execute(params![job, kind.as_str(), slot.as_second()]))
            .map_err(|e| self.sql(&format!("cannot set the slot of job {job}"), e))?;
        Ok(())
    }

    /// How many check runs of `job` have counted a round (`read-all-every`).
    pub fn check_round(&self, job: &str) -> Result<u32, StateError> {
        let round: Option<i64> = self
            .conn
            .prepare_cached("SELECT check_round FROM slots WHERE job = ?1 AND kind = 'check'")
            .and_then(|mut st| st.query_row(params![job], |r| r.get(0)).optional())
            .map_err(|e| self.sql(&format!("cannot read the check round of job {job}"), e))?;
        Ok(round.map_or(0, |r| u32::try_from(r).unwrap_or(0)))
    }

    /// Counts one more check round of `job` and returns the new count, in one
    /// statement (two processes bumping at once both count).
    pub fn bump_check_round(&self, job: &str) -> Result<u32, StateError> {
        let round: i64 = self
            .conn
            .prepare_cached(
                "INSERT INTO slots (job, kind, check_round) VALUES (?1, 'check', 1) \
                 ON CONFLICT (job, kind) DO UPDATE SET check_round = check_round + 1 RETURNING check_round",
            )
            .and_then(|mut st| st.query_row(params![job], |r| r.get(0)))
            .map_err(|e| self.sql(&format!("cannot count a check round of job {job}"), e))?;
        Ok(u32::try_from(round).unwrap_or(u32::MAX))
    }

    fn query_runs(&self, sql: &str, args: impl rusqlite::Params, what: &str) -> Result<Vec<Run>, StateError> {
        let mut st = self.conn.prepare_cached(sql).map_err(|e| self.sql(what, e))?;
        let rows = st.query_map(args, raw_run).map_err(|e| self.sql(what, e))?;
        let mut out = Vec::new();
        for row in rows {
            let raw = row.map_err(|e| self.sql(what, e))?;
            out.push(raw.parse(&self.path)?);
        }
        Ok(out)
    }

    /// The newest run of `job`'s `kind` that has ended (whatever its outcome).
    pub fn last_run(&self, job: &str, kind: Kind) -> Result<Option<Run>, StateError> {
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE job = ?1 AND kind = ?2 AND outcome <> 'running' \
             ORDER BY started DESC, id DESC LIMIT 1"
        );
        Ok(self.query_runs(&sql, params![job, kind.as_str()], &format!("cannot read the last run of job {job}"))?.pop())
    }

    /// The newest run of `job`'s `kind` that succeeded (success or warning).
    pub fn last_success(&self, job: &str, kind: Kind) -> Result<Option<Run>, StateError> {
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE job = ?1 AND kind = ?2 AND outcome IN ('success', 'warning') \
             ORDER BY started DESC, id DESC LIMIT 1"
        );
        Ok(self
            .query_runs(&sql, params![job, kind.as_str()], &format!("cannot read the last success of job {job}"))?
            .pop())
    }

    /// When the oldest recorded run of `job`'s `kind` started.
    pub fn first_started(&self, job: &str, kind: Kind) -> Result<Option<Timestamp>, StateError> {
        let what = format!("cannot read the first run of job {job}");
        let ms: Option<i64> = self
            .conn
            .prepare_cached("SELECT MIN(started) FROM runs WHERE job = ?1 AND kind = ?2")
            .and_then(|mut st| st.query_row(params![job, kind.as_str()], |r| r.get(0)))
            .map_err(|e| self.sql(&what, e))?;
        ms.map(|ms| Timestamp::from_millisecond(ms).map_err(|e| self.invalid(format!("{what}: {ms}: {e}")))).transpose()
    }

    /// The last `limit` runs, of `job` or of every job, newest first.
    pub fn runs(&self, job: Option<&str>, limit: usize) -> Result<Vec<Run>, StateError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        match job {
            Some(job) => self.query_runs(
                &format!("SELECT {RUN_COLUMNS} FROM runs WHERE job = ?1 ORDER BY started DESC, id DESC LIMIT ?2"),
                params![job, limit],
                &format!("cannot list the runs of job {job}"),
            ),
            None => self.query_runs(
                &format!("SELECT {RUN_COLUMNS} FROM runs ORDER BY started DESC, id DESC LIMIT ?1"),
                params![limit],
                "cannot list the runs",
            ),
        }
    }

    /// The last `limit` runs of `job`'s `kind`, newest first.
    pub fn runs_of(&self, job: &str, kind: Kind, limit: usize) -> Result<Vec<Run>, StateError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.query_runs(
            &format!(
                "SELECT {RUN_COLUMNS} FROM runs WHERE job = ?1 AND kind = ?2 ORDER BY started DESC, id DESC LIMIT ?3"
            ),
            params![job, kind.as_str(), limit],
            &format!("cannot list the {} runs of job {job}", kind.as_str()),
        )
    }

    /// How many runs of `job`'s `kind` ended each way (outcomes with none left out).
    pub fn outcome_counts(&self, job: &str, kind: Kind) -> Result<Vec<(Outcome, u64)>, StateError> {
        let what = format!("cannot count the runs of job {job}");
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT outcome, COUNT(*) FROM runs WHERE job = ?1 AND kind = ?2 GROUP BY outcome ORDER BY outcome",
            )
            .map_err(|e| self.sql(&what, e))?;
        let rows = st
            .query_map(params![job, kind.as_str()], |r| Ok((r.get::<_, Option<String>>(0)?, r.get::<_, i64>(1)?)))
            .map_err(|e| self.sql(&what, e))?;
        let mut out = Vec::new();
        for row in rows {
            let (outcome, n) = row.map_err(|e| self.sql(&what, e))?;
            let outcome = outcome.as_deref().and_then(Outcome::parse).ok_or_else(|| StateError::BadRow {
                path: self.path.clone(),
                id: 0,
                what: format!("job {job} has runs of unknown outcome {outcome:?}"),
            })?;
            out.push((outcome, u64::try_from(n).unwrap_or(0)));
        }
        out.sort_by_key(|(o, _)| *o);
        Ok(out)
    }

    /// The runs going on, of `job` or of every job, oldest first.
    pub fn running(&self, job: Option<&str>) -> Result<Vec<Run>, StateError> {
        match job {
            Some(job) => self.query_runs(
                &format!("SELECT {RUN_COLUMNS} FROM runs WHERE outcome = 'running' AND job = ?1 ORDER BY started, id"),
                params![job],
                &format!("cannot list the running runs of job {job}"),
            ),
            None => self.query_runs(
                &format!("SELECT {RUN_COLUMNS} FROM runs WHERE outcome = 'running' ORDER BY started, id"),
                [],
                "cannot list the running runs",
            ),
        }
    }

    /// When `notifier` last sent `event` of `job`.
    pub fn notice_sent(&self, job: &str, event: Event, notifier: &str) -> Result<Option<Timestamp>, StateError> {
        let what = format!("cannot read when notifier {notifier} last sent {} of job {job}", event.as_str());
        let ms: Option<i64> = self
            .conn
            .prepare_cached("SELECT sent FROM notices WHERE job = ?1 AND event = ?2 AND notifier = ?3")
            .and_then(|mut st| st.query_row(params![job, event.as_str(), notifier], |r| r.get(0)).optional())
            .map_err(|e| self.sql(&what, e))?;
        ms.map(|ms| {
            Timestamp::from_millisecond(ms).map_err(|e| self.invalid(format!("{what}: {ms} is out of range: {e}")))
        })
        .transpose()
    }

    /// Records that `notifier` sent `event` of `job` at `sent`.
    pub fn set_notice_sent(&self, job: &str, event: Event, notifier: &str, sent: Timestamp) -> Result<(), StateError> {
        self.conn
            .prepare_cached(
                "INSERT INTO notices (job, event, notifier, sent) VALUES (?1, ?2, ?3, ?4) \
                 ON CONFLICT (job, event, notifier) DO UPDATE SET sent = excluded.sent",
            )
            .and_then(|mut st| st.execute(params![job, event.as_str(), notifier, sent.as_millisecond()]))
            .map_err(|e| {
                self.sql(&format!("cannot record that notifier {notifier} sent {} of job {job}", event.as_str()), e)
            })?;
        Ok(())
    }
}

/// Whether process `pid` still runs (a zombie counts as gone): for
/// [`Db::mark_abandoned`]. A pid reused by another process since counts as
/// running, which leaves the run `running` rather than mark it wrongly.
pub fn pid_alive(pid: i64) -> bool {
    let Ok(raw) = i32::try_from(pid) else { return false };
    let Some(p) = rustix::process::Pid::from_raw(raw) else { return false };
    if rustix::process::test_kill_process(p).is_err() {
        // ESRCH: gone. EPERM: another user's process holds the pid, so the
        // process that recorded the run (ours) is gone too.
        return false;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat.rsplit_once(") ").is_none_or(|(_, rest)| !rest.starts_with('Z')),
        Err(_) => true,
    }
}

/// A row as stored, before its text columns are checked.
struct RawRun {
    id: i64,
    job: String,
    kind: String,
    trigger: String,
    slot: Option<i64>,
    started: i64,
    ended: Option<i64>,
    outcome: Option<String>,
    exit_code: Option<i64>,
    snapshot: Option<String>,
    summary: Option<String>,
    error: Option<String>,
    pid: Option<i64>,
}

fn raw_run(r: &Row<'_>) -> rusqlite::Result<RawRun> {
    Ok(RawRun {
        id: r.get(0)?,
        job: r.get(1)?,
        kind: r.get(2)?,
        trigger: r.get(3)?,
        slot: r.get(4)?,
        started: r.get(5)?,
        ended: r.get(6)?,
        outcome: r.get(7)?,
        exit_code: r.get(8)?,
        snapshot: r.get(9)?,
        summary: r.get(10)?,
        error: r.get(11)?,
        pid: r.get(12)?,
    })
}

impl RawRun {
    fn parse(self, path: &Path) -> Result<Run, StateError> {
        let id = self.id;
        let bad = |what: String| StateError::BadRow { path: path.to_path_buf(), id, what };
        let ms = |v: i64, col: &str| Timestamp::from_millisecond(v).map_err(|e| bad(format!("{col} {v}: {e}")));
        Ok(Run {
            id: RunId(id),
            kind: Kind::parse(&self.kind).ok_or_else(|| bad(format!("unknown kind {:?}", self.kind)))?,
            trigger: Trigger::parse(&self.trigger).ok_or_else(|| bad(format!("unknown trigger {:?}", self.trigger)))?,
            slot: self
                .slot
                .map(|s| Timestamp::from_second(s).map_err(|e| bad(format!("slot {s}: {e}"))))
                .transpose()?,
            started: ms(self.started, "started")?,
            ended: self.ended.map(|v| ms(v, "ended")).transpose()?,
            outcome: self
                .outcome
                .as_deref()
                .and_then(Outcome::parse)
                .ok_or_else(|| bad(format!("unknown outcome {:?}", self.outcome)))?,
            exit_code: self
                .exit_code
                .map(|c| i32::try_from(c).map_err(|_| bad(format!("exit code {c} out of range"))))
                .transpose()?,
            snapshot: self.snapshot,
            summary: self
                .summary
                .map(|s| serde_json::from_str(&s).map_err(|e| bad(format!("summary is not JSON ({e})"))))
                .transpose()?,
            error: self.error,
            pid: self.pid,
            job: self.job,
        })
    }
}
