//! A run's steps: each one a coffer command, started as a process of its own
//! (docs/design.md#agent), whose JSON document the run reads.
//!
//! [`Steps`] is what a run calls; [`ProcessSteps`] starts the coffer binary the
//! caller names. A step that is told to stop ([`Stop`]) is sent SIGTERM, which
//! coffer answers by ending at once with every object it wrote complete.

use std::ffi::OsString;
use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::config::{Ionice, Job};

/// The most of a step's standard output read (its JSON document): 64 MiB.
pub const MAX_OUTPUT: u64 = 64 << 20;
/// How much of a step's standard error is kept for messages: its last 4 KiB.
pub const ERROR_TAIL: usize = 4096;
/// How often a step prints a progress status line (`--progress-interval`).
pub const STATUS_INTERVAL: &str = "1s";

/// Exit code of a coffer command ended by SIGINT.
pub const EXIT_INTERRUPTED: i32 = 130;
/// Exit code of a coffer command ended by SIGTERM.
pub const EXIT_TERMINATED: i32 = 143;

/// How a step ended.
#[derive(Debug, Clone, PartialEq)]
pub struct StepResult {
    /// Its exit code, or None when a signal ended it (`signal`) or it could not start.
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// Its JSON document (standard output), when it printed one.
    pub document: Option<serde_json::Value>,
    /// What went wrong, in words: the `message` of its `error` record, else the end
    /// of its standard error; None when it exited 0.
    pub error: Option<String>,
}

impl StepResult {
    /// A step that could not be started.
    pub fn not_started(why: String) -> StepResult {
        StepResult { exit_code: None, signal: None, document: None, error: Some(why) }
    }

    /// Whether SIGINT or SIGTERM ended it (by its exit code, or the signal itself).
    pub fn interrupted(&self) -> bool {
        matches!(self.exit_code, Some(EXIT_INTERRUPTED | EXIT_TERMINATED))
            || matches!(self.signal, Some(libc::SIGINT | libc::SIGTERM))
    }
}

/// Called with each progress status line a step prints (module [`crate::live`]).
pub type OnProgress<'a> = &'a mut (dyn FnMut(&serde_json::Value) + Send);

/// Carries out one step of a job: `coffer GLOBAL_ARGS --json ARGS`, telling
/// `progress` of its status lines as they come.
pub trait Steps: Send + Sync {
    fn run(&self, job: &Job, args: &[String], stop: &Stop, progress: OnProgress<'_>) -> StepResult;
}

/// The stop signal of the runs going on: set once, it makes every step going on
/// (and every one that would start) end.
#[derive(Debug, Clone, Default)]
pub struct Stop(Arc<StopInner>);

#[derive(Debug, Default)]
struct StopInner {
    stopped: AtomicBool,
    /// The steps' processes running now.
    children: Mutex<Vec<u32>>,
}

impl Stop {
    pub fn new() -> Stop {
        Stop::default()
    }

    /// Whether [`Stop::stop`] was called.
    pub fn stopped(&self) -> bool {
        self.0.stopped.load(Ordering::SeqCst)
    }

    /// Sends SIGTERM to every step going on; later steps are not started.
    pub fn stop(&self) {
        self.0.stopped.store(true, Ordering::SeqCst);
        for &pid in self.children().iter() {
            terminate(pid);
        }
    }

    fn children(&self) -> std::sync::MutexGuard<'_, Vec<u32>> {
        self.0.children.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a step's process; when stopped meanwhile, it is told at once.
    fn add(&self, pid: u32) {
        self.children().push(pid);
        if self.stopped() {
            terminate(pid);
        }
    }

    fn remove(&self, pid: u32) {
        self.children().retain(|&p| p != pid);
    }
}

fn terminate(pid: u32) {
    if let Ok(pid) = i32::try_from(pid) {
        // SAFETY: kill(2) with a pid this process started and has not reaped yet
        // (it is removed from the list before it is waited for).
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
    }
}

/// Starts the coffer binary `exe` for each step, with the environment `env`
/// (the agent's) without `COFFER_PASSWORD`, plus the job's storage variables.
#[derive(Debug, Clone)]
pub struct ProcessSteps {
    pub exe: PathBuf,
    pub env: Vec<(OsString, OsString)>,
}

impl Steps for ProcessSteps {
    fn run(&self, job: &Job, args: &[String], stop: &Stop, progress: OnProgress<'_>) -> StepResult {
        if stop.stopped() {
            return StepResult {
                exit_code: None,
                signal: Some(libc::SIGTERM),
                document: None,
                error: Some("not started: the agent is stopping".into()),
            };
        }
        let mut cmd = Command::new(&self.exe);
        cmd.args(&job.global_args)
            .arg("--json")
            .args(["--progress-interval", STATUS_INTERVAL])
            .args(args)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            // The job's passphrase comes from its own source, never from the agent's
            // environment (which would win over it).
            .env_remove(crate::hooks::PASSWORD_VAR)
            .envs(&job.storage)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        priority(&mut cmd, job.nice, job.ionice);
        let what = || format!("coffer {}", args.first().map_or("", String::as_str));
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                return StepResult::not_started(format!("cannot start {} ({}): {e}", what(), self.exe.display()));
            }
        };
        let pid = child.id();
        stop.add(pid);
        let stderr = child.stderr.take();
        let (status, read, err_text) = std::thread::scope(|scope| {
            let tail = scope.spawn(move || stderr.map(|e| read_stderr(e, progress)).unwrap_or_default());
            let mut out = Vec::new();
            let read = child.stdout.take().map(|s| s.take(MAX_OUTPUT).read_to_end(&mut out).map(|_| out));
            let status = child.wait();
            stop.remove(pid);
            (status, read, tail.join().unwrap_or_default())
        });
        let status = match status {
            Ok(s) => s,
            Err(e) => return StepResult::not_started(format!("cannot wait for {}: {e}", what())),
        };
        use std::os::unix::process::ExitStatusExt;
        let document = match read {
            Some(Ok(out)) => serde_json::from_slice(&out).ok(),
            _ => None,
        };
        let error = if status.success() {
            None
        } else {
            Some(error_message(&err_text).unwrap_or_else(|| {
                let tail = err_text.trim();
                match (status.code(), status.signal()) {
                    (_, Some(sig)) => format!("{} was ended by signal {sig}{}", what(), colon(tail)),
                    (Some(code), _) => format!("{} exited with code {code}{}", what(), colon(tail)),
                    _ => format!("{} failed{}", what(), colon(tail)),
                }
            }))
        };
        StepResult { exit_code: status.code(), signal: status.signal(), document, error }
    }
}

fn colon(tail: &str) -> String {
    if tail.is_empty() { String::new() } else { format!(": {tail}") }
}

/// The `message` of the last `error` record in a step's standard error.
fn error_message(stderr: &str) -> Option<String> {
    stderr.lines().rev().find_map(|line| {
        let v: serde_json::Value = serde_json::from_str(line.trim()).ok()?;
        if v.get("type")?.as_str()? != "error" {
            return None;
        }
        let mut msg = v.get("message")?.as_str()?.to_string();
        for cause in v.get("causes").and_then(|c| c.as_array()).into_iter().flatten() {
            if let Some(c) = cause.as_str()
                && !msg.contains(c)
            {
                msg.push_str(": ");
                msg.push_str(c);
            }
        }
        Some(msg)
    })
}

/// Reads a step's standard error to its end: each progress status line goes to
/// `progress`; of the other lines the last [`ERROR_TAIL`] bytes are kept.
fn read_stderr(mut r: impl Read, progress: OnProgress<'_>) -> String {
    let mut kept: Vec<u8> = Vec::new();
    let mut line: Vec<u8> = Vec::new();
    let mut buf = [0u8; 8192];
    let mut take = |line: &mut Vec<u8>, kept: &mut Vec<u8>| {
        match std::str::from_utf8(line).ok().and_then(crate::live::status_line) {
            Some(v) => progress(&v),
            None => {
                kept.extend_from_slice(line);
                if kept.len() > 2 * ERROR_TAIL {
                    kept.drain(..kept.len() - ERROR_TAIL);
                }
            }
        }
        line.clear();
    };
    loop {
        match r.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                for part in buf[..n].split_inclusive(|b| *b == b'\n') {
                    line.extend_from_slice(part);
                    // A line longer than the tail is no status line: kept as text.
                    if part.ends_with(b"\n") || line.len() > ERROR_TAIL {
                        take(&mut line, &mut kept);
                    }
                }
            }
        }
    }
    take(&mut line, &mut kept);
    if kept.len() > ERROR_TAIL {
        kept.drain(..kept.len() - ERROR_TAIL);
    }
    String::from_utf8_lossy(&kept).into_owned()
}

/// `nice` and `ionice` for the step's process, set in the child before exec.
fn priority(cmd: &mut Command, nice: Option<i32>, ionice: Option<Ionice>) {
    if nice.is_none() && ionice.is_none() {
        return;
    }
    use std::os::unix::process::CommandExt;
    // ioprio_set(2): IOPRIO_WHO_PROCESS, the class in the top 3 of 16 bits.
    const WHO_PROCESS: libc::c_long = 1;
    const CLASS_SHIFT: libc::c_long = 13;
    let ioprio = ionice.map(|io| match io {
        Ionice::Idle => 3 << CLASS_SHIFT,
        Ionice::BestEffort(level) => (2 << CLASS_SHIFT) | libc::c_long::from(level),
    });
    // SAFETY: the closure runs between fork and exec and calls only setpriority(2)
    // and ioprio_set(2) through syscall(2), both async-signal-safe; it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if let Some(n) = nice
                && libc::setpriority(libc::PRIO_PROCESS, 0, n) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            if let Some(p) = ioprio
                && libc::syscall(libc::SYS_ioprio_set, WHO_PROCESS, 0 as libc::c_long, p) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_error_record_is_the_message() {
        let err = "progress\n{\"type\":\"error\",\"message\":\"cannot open repository /r\",\"causes\":[\"not found\"],\"exit_code\":10}\n";
        assert_eq!(error_message(err).as_deref(), Some("cannot open repository /r: not found"));
        assert_eq!(error_message("plain text\n"), None);
    }

    #[test]
    fn the_tail_keeps_the_end_and_progress_lines_go_to_the_callback() {
        let text = "x".repeat(10_000) + "END";
        let t = read_stderr(text.as_bytes(), &mut |_| panic!("no status line"));
        assert_eq!(t.len(), ERROR_TAIL);
        assert!(t.ends_with("END"));
        let mut text = String::from("starting\n");
        for i in 0..2000 {
            text.push_str(&format!("{{\"type\":\"status\",\"action\":\"progress\",\"bytes_done\":{i}}}\n"));
        }
        text.push_str("{\"type\":\"error\",\"message\":\"boom\"}\n");
        let mut seen = Vec::new();
        let t = read_stderr(text.as_bytes(), &mut |v| seen.push(v["bytes_done"].as_u64().unwrap()));
        assert_eq!(seen, (0..2000).collect::<Vec<_>>());
        // The status lines do not push the error out of the tail.
        assert_eq!(t, "starting\n{\"type\":\"error\",\"message\":\"boom\"}\n");
        assert_eq!(error_message(&t).as_deref(), Some("boom"));
    }

    #[test]
    fn interruption_is_told_by_code_or_signal() {
        let r = |code, signal| StepResult { exit_code: code, signal, document: None, error: None };
        assert!(r(Some(143), None).interrupted());
        assert!(r(Some(130), None).interrupted());
        assert!(r(None, Some(libc::SIGTERM)).interrupted());
        assert!(!r(None, Some(libc::SIGKILL)).interrupted());
        assert!(!r(Some(1), None).interrupted());
    }
}
