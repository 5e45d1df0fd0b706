//! A job's hooks: shell commands run before and after its runs
//! (docs/design.md#hooks).
//!
//! A hook runs as `sh -c COMMAND` in a process group of its own, with the run's
//! JSON record on standard input and an environment the caller gives (the
//! agent's own, which this crate never reads) less `COFFER_PASSWORD` and the
//! storage's variables, plus the `COFFER_JOB…` variables. Past its timeout the
//! whole group is sent SIGTERM, then SIGKILL.

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use serde::Serialize;

use crate::config::Kind;
use crate::state::Outcome;

/// How much of a hook's output (standard output and error, interleaved) is kept
/// for messages: its last bytes.
pub const OUTPUT_TAIL: usize = 4096;

/// How long a hook has to end after SIGTERM before SIGKILL.
pub const KILL_GRACE: Duration = Duration::from_secs(5);

/// After a hook's shell ends, how long its output is still read (processes it
/// left behind may hold the pipe open).
const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// The variable that may hold a repository's passphrase: never passed to a hook.
pub const PASSWORD_VAR: &str = "COFFER_PASSWORD";

/// What a hook's environment is made of.
#[derive(Clone)]
pub struct HookEnv {
    /// The environment to start from (the agent's), which the caller reads.
    pub base: Vec<(OsString, OsString)>,
    /// Variables left out besides `COFFER_PASSWORD`: the storage's (`[storage]`
    /// keys, credentials).
    pub remove: Vec<OsString>,
    pub job: String,
    pub kind: Kind,
    /// The repository's location, as the job gives it.
    pub repository: String,
    /// `COFFER_STATUS`: the run's outcome; `None` (empty) for `before`.
    pub status: Option<Outcome>,
    /// `COFFER_SNAPSHOT_ID`: the snapshot the run wrote, if any.
    pub snapshot_id: Option<String>,
}

impl std::fmt::Debug for HookEnv {
    // The base environment may hold secrets: only its names are shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HookEnv")
            .field("base", &self.base.iter().map(|(k, _)| k).collect::<Vec<_>>())
            .field("remove", &self.remove)
            .field("job", &self.job)
            .field("kind", &self.kind)
            .field("repository", &self.repository)
            .field("status", &self.status)
            .field("snapshot_id", &self.snapshot_id)
            .finish()
    }
}

impl HookEnv {
    /// The environment the hook gets, in order.
    pub fn vars(&self) -> Vec<(OsString, OsString)> {
        let dropped = |k: &OsStr| k == PASSWORD_VAR || self.remove.iter().any(|r| r == k);
        let mut vars: Vec<(OsString, OsString)> = self.base.iter().filter(|(k, _)| !dropped(k)).cloned().collect();
        let status = self.status.map_or("", |s| s.as_str());
        for (k, v) in [
            ("COFFER_JOB", self.job.as_str()),
            ("COFFER_JOB_KIND", self.kind.as_str()),
            ("COFFER_REPOSITORY", self.repository.as_str()),
            ("COFFER_STATUS", status),
            ("COFFER_SNAPSHOT_ID", self.snapshot_id.as_deref().unwrap_or("")),
        ] {
            vars.retain(|(name, _)| name != k);
            vars.push((k.into(), v.into()));
        }
        vars
    }
}

/// The JSON record a hook reads on standard input.
#[derive(Debug, Clone, Serialize)]
pub struct HookRecord<'a> {
    pub job: &'a str,
    pub kind: &'a str,
    /// `None` (null) for `before`.
    pub outcome: Option<&'a str>,
    /// RFC 3339.
    pub started: String,
    pub ended: Option<String>,
    pub snapshot: Option<&'a str>,
    pub summary: Option<&'a serde_json::Value>,
    pub error: Option<&'a str>,
}

impl<'a> HookRecord<'a> {
    pub fn new(job: &'a str, kind: Kind, started: Timestamp) -> HookRecord<'a> {
        HookRecord {
            job,
            kind: kind.as_str(),
            outcome: None,
            started: started.to_string(),
            ended: None,
            snapshot: None,
            summary: None,
            error: None,
        }
    }

    /// The record as one line of JSON.
    pub fn to_json(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec(self).unwrap_or_else(|_| b"{}".to_vec());
        v.push(b'\n');
        v
    }
}

/// A hook that ran and exited 0.
#[derive(Debug, Clone)]
pub struct HookOutput {
    /// The end of what it wrote (standard output and error), at most [`OUTPUT_TAIL`] bytes.
    pub output: String,
    pub duration: Duration,
}

/// A hook that could not run, failed or ran too long. Each names the hook.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    #[error(
        "the {hook} hook of job {job} could not be started (sh -c {command:?}): {source}; check that sh is on the PATH"
    )]
    Spawn { hook: String, job: String, command: String, source: std::io::Error },
    #[error("the {hook} hook of job {job} ({command:?}) failed: {status}{}", tail(output))]
    Failed { hook: String, job: String, command: String, status: String, output: String },
    #[error(
        "the {hook} hook of job {job} ({command:?}) ran past its timeout of {}s and was killed with its process \
         group; make it faster or raise [job.{job}.hooks] timeout{}",
        timeout.as_secs_f64(), tail(output)
    )]
    Timeout { hook: String, job: String, command: String, timeout: Duration, output: String },
    #[error("the {hook} hook of job {job} ({command:?}): waiting for it failed: {source}")]
    Wait { hook: String, job: String, command: String, source: std::io::Error },
}

impl HookError {
    /// What the hook wrote, its last bytes (empty when it did not run).
    pub fn output(&self) -> &str {
        match self {
            HookError::Failed { output, .. } | HookError::Timeout { output, .. } => output,
            HookError::Spawn { .. } | HookError::Wait { .. } => "",
        }
    }
}

fn tail(output: &str) -> String {
    let t = output.trim_end();
    if t.is_empty() { "; it wrote nothing".to_string() } else { format!("; the end of its output:\n{t}") }
}

fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        _ => status.to_string(),
    }
}

/// The last [`OUTPUT_TAIL`] bytes read.
#[derive(Default)]
struct Tail {
    buf: VecDeque<u8>,
    cut: bool,
}

impl Tail {
    fn push(&mut self, bytes: &[u8]) {
        self.buf.extend(bytes);
        if self.buf.len() > OUTPUT_TAIL {
            let extra = self.buf.len() - OUTPUT_TAIL;
            self.buf.drain(..extra);
            self.cut = true;
        }
    }

    fn text(&self) -> String {
        let (a, b) = self.buf.as_slices();
        let bytes = [a, b].concat();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        if self.cut { format!("…{text}") } else { text }
    }
}

/// Runs the hook `hook` (its name: `before`, `after-success`…, for messages) of
/// the job in `env`: `sh -c command`, with `stdin` on its standard input (written
/// by a thread of its own, so that a hook that does not read it still runs), the
/// environment of [`HookEnv::vars`], killed with its process group past
/// `timeout`. Exit code 0 is success; anything else an error carrying the end
/// of its output.
pub fn run_hook(
    hook: &str,
    command: &str,
    stdin: &[u8],
    env: &HookEnv,
    timeout: Duration,
) -> Result<HookOutput, HookError> {
    let started = Instant::now();
    let who = || (hook.to_string(), env.job.clone(), command.to_string());
    let (reader, writer) = std::io::pipe().map_err(|source| {
        let (hook, job, command) = who();
        HookError::Spawn { hook, job, command, source }
    })?;
    let writer2 = writer.try_clone().map_err(|source| {
        let (hook, job, command) = who();
        HookError::Spawn { hook, job, command, source }
    })?;
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(command)
        .env_clear()
        .envs(env.vars())
        .stdin(Stdio::piped())
        .stdout(writer)
        .stderr(writer2)
        .process_group(0);
    let mut child = cmd.spawn().map_err(|source| {
        let (hook, job, command) = who();
        HookError::Spawn { hook, job, command, source }
    })?;
    // The Command holds the pipe's write ends: closed here, so that the reader
    // sees the end once the hook's processes are gone.
    drop(cmd);

    let input = child.stdin.take();
    let data = stdin.to_vec();
    std::thread::spawn(move || {
        if let Some(mut w) = input {
            // A hook that exits without reading breaks the pipe: nothing to report.
            let _ = w.write_all(&data);
        }
    });

    let tail = Arc::new(Mutex::new(Tail::default()));
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    {
        let tail = Arc::clone(&tail);
        let mut reader = reader;
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            loop {
                match reader.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => tail.lock().unwrap_or_else(|p| p.into_inner()).push(&buf[..n]),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                }
            }
            let _ = done_tx.send(());
        });
    }
    let output = |grace: Duration| {
        let _ = done_rx.recv_timeout(grace);
        tail.lock().unwrap_or_else(|p| p.into_inner()).text()
    };

    let pgid = rustix::process::Pid::from_child(&child);
    let deadline = started + timeout;
    let status = match wait_until(&mut child, deadline) {
        Ok(Some(status)) => status,
        Ok(None) => {
            // Past the timeout: the group (the shell and all it started) is asked
            // to end, then killed. The leader is not reaped yet, so the group id
            // is still its own.
            let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::TERM);
            let ended = wait_until(&mut child, Instant::now() + KILL_GRACE).ok().flatten();
            // Whatever of the group outlived the shell goes too.
            let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
            if ended.is_none() {
                let _ = child.wait();
            }
            let (hook, job, command) = who();
            return Err(HookError::Timeout { hook, job, command, timeout, output: output(DRAIN_GRACE) });
        }
        Err(source) => {
            let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
            let _ = child.wait();
            let (hook, job, command) = who();
            return Err(HookError::Wait { hook, job, command, source });
        }
    };
    let output = output(DRAIN_GRACE);
    if status.success() {
        Ok(HookOutput { output, duration: started.elapsed() })
    } else {
        let (hook, job, command) = who();
        Err(HookError::Failed { hook, job, command, status: describe(status), output })
    }
}

/// Waits for `child` until `deadline`: its status, or `None` when it still runs.
fn wait_until(child: &mut std::process::Child, deadline: Instant) -> std::io::Result<Option<ExitStatus>> {
    let mut pause = Duration::from_millis(1);
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        let now = Instant::now();
        if now >= deadline {
            return Ok(None);
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}
