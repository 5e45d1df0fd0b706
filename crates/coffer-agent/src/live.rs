//! The progress of a run going on (docs/design.md#agent-live-progress): the
//! figures of the last status line its step printed, kept in a file beside the
//! job's lock (`JOB.progress`, replaced whole at each line, removed when the
//! run ends), so that another process (the UI) can show them while the run
//! goes on.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::config::Kind;

/// A progress file larger than this is not read.
const MAX_FILE: u64 = 64 << 10;

/// What a run going on has done so far.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LiveProgress {
    pub job: String,
    pub kind: String,
    /// The step running: `backup`, `forget`, `prune` or `check`.
    pub step: String,
    /// When the run started (RFC 3339).
    pub started: String,
    pub seconds_elapsed: u64,
    pub bytes_done: u64,
    pub files_done: u64,
    /// The bytes the step will process, when it said.
    pub total_bytes: Option<u64>,
    /// The bytes the last successful run of this kind processed: what an ETA
    /// may go by when the step gives no total.
    pub expected_bytes: Option<u64>,
}

impl LiveProgress {
    /// Bytes per second so far.
    pub fn rate(&self) -> Option<f64> {
        (self.seconds_elapsed > 0).then(|| self.bytes_done as f64 / self.seconds_elapsed as f64)
    }

    /// Seconds left, from the total (or the bytes expected) and the rate so far;
    /// None when neither is known or nothing was done yet.
    pub fn eta_seconds(&self) -> Option<u64> {
        let total = self.total_bytes.or(self.expected_bytes)?;
        let rate = self.rate().filter(|r| *r > 0.0)?;
        Some((total.saturating_sub(self.bytes_done) as f64 / rate).ceil() as u64)
    }

    /// Done as a fraction of the total (or of the bytes expected), at most 1.
    pub fn fraction(&self) -> Option<f64> {
        let total = self.total_bytes.or(self.expected_bytes).filter(|t| *t > 0)?;
        Some((self.bytes_done as f64 / total as f64).min(1.0))
    }
}

/// The progress file of `job` in the lock directory `dir`.
pub fn path(dir: &Path, job: &str) -> PathBuf {
    dir.join(format!("{job}.progress"))
}

/// The progress of `job`'s run going on, as last written; None when there is
/// none (or it cannot be read: a run between two writes shows no figures).
pub fn read(dir: &Path, job: &str) -> Option<LiveProgress> {
    use std::io::Read;
    let f = std::fs::File::open(path(dir, job)).ok()?;
    let mut text = Vec::new();
    f.take(MAX_FILE).read_to_end(&mut text).ok()?;
    serde_json::from_slice(&text).ok()
}

/// Writes the progress of one run as its step reports it; the file is removed
/// when this is dropped.
pub struct Writer {
    path: PathBuf,
    tmp: PathBuf,
    base: LiveProgress,
}

impl Writer {
    pub fn new(dir: &Path, job: &str, kind: Kind, started: jiff::Timestamp, expected_bytes: Option<u64>) -> Writer {
        Writer {
            path: path(dir, job),
            tmp: dir.join(format!("{job}.progress.tmp")),
            base: LiveProgress {
                job: job.to_string(),
                kind: kind.as_str().to_string(),
                step: String::new(),
                started: started.to_string(),
                seconds_elapsed: 0,
                bytes_done: 0,
                files_done: 0,
                total_bytes: None,
                expected_bytes,
            },
        }
    }

    /// Records a `{"type":"status","action":"progress",…}` line of `step`. The
    /// elapsed time counts from the run's start, not the step's.
    pub fn update(&mut self, step: &str, line: &serde_json::Value) {
        let n = |k: &str| line.get(k).and_then(serde_json::Value::as_u64);
        let p = &mut self.base;
        p.step = step.to_string();
        p.bytes_done = n("bytes_done").unwrap_or(0);
        p.files_done = n("files_done").unwrap_or(0);
        p.total_bytes = n("total_bytes");
        p.seconds_elapsed = jiff::Timestamp::now()
            .duration_since(p.started.parse().unwrap_or_else(|_| jiff::Timestamp::now()))
            .as_secs()
            .max(0) as u64;
        self.write();
    }

    /// Says that `step` starts, its figures not known yet.
    pub fn step(&mut self, step: &str) {
        self.update(step, &serde_json::Value::Null);
    }

    fn write(&self) {
        // Written aside and renamed, so that a reader sees a whole file or none.
        let Ok(text) = serde_json::to_vec(&self.base) else { return };
        if std::fs::write(&self.tmp, text).is_ok() {
            let _ = std::fs::rename(&self.tmp, &self.path);
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        let _ = std::fs::remove_file(&self.tmp);
    }
}

/// Whether `line` (a line of a step's standard error) is a progress status
/// line; then its JSON.
pub fn status_line(line: &str) -> Option<serde_json::Value> {
    let line = line.trim();
    if !line.starts_with('{') || !line.contains("\"progress\"") {
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    (v.get("type")?.as_str()? == "status" && v.get("action")?.as_str()? == "progress").then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_is_written_whole_and_removed_at_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let started = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(10);
        let mut w = Writer::new(dir.path(), "home", Kind::Backup, started, Some(4000));
        assert_eq!(read(dir.path(), "home"), None, "nothing before the first line");
        w.step("backup");
        assert_eq!(read(dir.path(), "home").unwrap().bytes_done, 0);
        let line = status_line(
            r#"{"type":"status","action":"progress","command":"backup","seconds_elapsed":3,"bytes_done":1000,"total_bytes":null,"files_done":7,"percent_done":null}"#,
        )
        .unwrap();
        w.update("backup", &line);
        let p = read(dir.path(), "home").unwrap();
        assert_eq!((p.job.as_str(), p.kind.as_str(), p.step.as_str()), ("home", "backup", "backup"));
        assert_eq!((p.bytes_done, p.files_done, p.total_bytes, p.expected_bytes), (1000, 7, None, Some(4000)));
        assert!((10..=12).contains(&p.seconds_elapsed), "{}", p.seconds_elapsed);
        // 1000 bytes in 10 s: the 3000 left of the 4000 expected take 30 s.
        let p = LiveProgress { seconds_elapsed: 10, ..p };
        assert_eq!((p.eta_seconds(), p.fraction()), (Some(30), Some(0.25)));
        drop(w);
        assert_eq!(read(dir.path(), "home"), None);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "no file is left behind");
    }

    #[test]
    fn only_progress_status_lines_are_taken() {
        assert!(status_line(r#"{"type":"status","action":"progress","bytes_done":1}"#).is_some());
        for other in [
            r#"{"type":"status","action":"waiting","seconds":3}"#,
            r#"{"type":"error","message":"progress"}"#,
            "backup: 1 MiB, progress",
            r#"{"type":"status","action":"progress""#,
        ] {
            assert!(status_line(other).is_none(), "{other}");
        }
    }

    #[test]
    fn a_damaged_or_huge_file_reads_as_none() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(path(dir.path(), "j"), b"{not json").unwrap();
        assert_eq!(read(dir.path(), "j"), None);
        std::fs::write(path(dir.path(), "j"), vec![b' '; (MAX_FILE + 10) as usize]).unwrap();
        assert_eq!(read(dir.path(), "j"), None);
    }
}
