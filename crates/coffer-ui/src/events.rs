//! Live figures (docs/design.md#ui-live): what runs now (jobs' runs and the UI's
//! restores), as the pages show it and as `GET /api/v1/events` pushes it, one
//! server-sent event a second. The text shown is made here for both, so the
//! page drawn by the server and the one updated by `ui.js` say the same.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use coffer_agent::live::LiveProgress;
use serde_json::{Value, json};

use crate::pages::bytes;
use crate::restores::Task;

/// How often an event is sent.
pub const TICK: Duration = Duration::from_secs(1);
/// An event stream is ended after this long; the browser opens another.
pub const STREAM_LIFETIME: Duration = Duration::from_secs(300);

/// One thing going on: its key (`job:NAME` or `restore:N`), the page it is
/// shown on, its figures in words and done as a fraction, when known.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    pub key: String,
    pub page: String,
    pub text: String,
    pub fraction: Option<f64>,
    pub figures: Value,
}

impl Item {
    pub fn to_json(&self) -> Value {
        json!({"key": self.key, "page": self.page, "text": self.text, "fraction": self.fraction,
               "figures": self.figures})
    }
}

/// The figures in words: `1.0 MiB of 4.0 MiB (25%), 12 files, 512 KiB/s, about 6 s left`.
pub fn text(done: u64, total: Option<u64>, files: u64, elapsed: f64, step: Option<&str>) -> String {
    let mut t = step.map_or(String::new(), |s| format!("{s}: "));
    t.push_str(&bytes(done));
    if let Some(total) = total.filter(|t| *t > 0) {
        t.push_str(&format!(" of {} ({:.0}%)", bytes(total), (done as f64 * 100.0 / total as f64).min(100.0)));
    }
    t.push_str(&format!(", {files} files"));
    if elapsed >= 1.0 && done > 0 {
        let rate = done as f64 / elapsed;
        t.push_str(&format!(", {}/s", bytes(rate as u64)));
        if let Some(total) = total.filter(|t| *t > done) {
            let left = ((total - done) as f64 / rate).ceil() as u64;
            t.push_str(&format!(", about {} left", seconds(left)));
        }
    }
    t
}

fn seconds(s: u64) -> String {
    match s {
        0..=89 => format!("{s} s"),
        90..=5399 => format!("{} min", s.div_ceil(60)),
        _ => format!("{:.1} h", s as f64 / 3600.0),
    }
}

/// A job's run going on.
pub fn job_item(p: &LiveProgress) -> Item {
    let total = p.total_bytes.or(p.expected_bytes);
    let step = Some(p.step.as_str()).filter(|s| !s.is_empty());
    Item {
        key: format!("job:{}", p.job),
        page: "/".into(),
        text: text(p.bytes_done, total, p.files_done, p.seconds_elapsed as f64, step),
        fraction: p.fraction(),
        figures: json!({"job": p.job, "kind": p.kind, "step": p.step, "started": p.started,
                        "seconds_elapsed": p.seconds_elapsed, "bytes_done": p.bytes_done, "files_done": p.files_done,
                        "total_bytes": p.total_bytes, "expected_bytes": p.expected_bytes,
                        "eta_seconds": p.eta_seconds()}),
    }
}

/// A restore started from the UI.
pub fn restore_item(t: &Task) -> Item {
    let v = t.to_json();
    let (done, total) = (v["bytes_done"].as_u64().unwrap_or(0), v["total_bytes"].as_u64().unwrap_or(0));
    let elapsed = jiff::Timestamp::now().duration_since(t.started).as_secs_f64();
    Item {
        key: format!("restore:{}", t.id),
        page: format!("/restores/{}", t.id),
        text: text(done, Some(total), v["files_done"].as_u64().unwrap_or(0), elapsed, None),
        fraction: (total > 0).then(|| (done as f64 / total as f64).min(1.0)),
        figures: v,
    }
}

/// One server-sent event carrying `items`.
pub fn event(items: &[Item]) -> Bytes {
    let data = json!({"type": "progress", "live": items.iter().map(Item::to_json).collect::<Vec<_>>()});
    Bytes::from(format!("event: progress\ndata: {data}\n\n"))
}

/// The body of an event stream: `first` at once (with the reconnection delay),
/// then what `items` gives each [`TICK`], until the client goes, `alive` says
/// the session ended, or [`STREAM_LIFETIME`] passes.
pub fn stream(
    items: Arc<dyn Fn() -> Vec<Item> + Send + Sync>,
    alive: Arc<dyn Fn() -> bool + Send + Sync>,
) -> tokio::sync::mpsc::Receiver<Result<Bytes, std::io::Error>> {
    let (tx, rx) = tokio::sync::mpsc::channel(2);
    tokio::spawn(async move {
        let began = Instant::now();
        let mut first = true;
        while began.elapsed() < STREAM_LIFETIME && alive() {
            let get = items.clone();
            let Ok(now) = tokio::task::spawn_blocking(move || get()).await else { break };
            let mut chunk = if first { b"retry: 2000\n\n".to_vec() } else { Vec::new() };
            first = false;
            chunk.extend_from_slice(&event(&now));
            if tx.send(Ok(Bytes::from(chunk))).await.is_err() {
                break;
            }
            tokio::time::sleep(TICK).await;
        }
    });
    rx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_read_well() {
        assert_eq!(text(0, None, 0, 0.0, Some("backup")), "backup: 0 B, 0 files");
        assert_eq!(
            text(1 << 20, Some(4 << 20), 12, 2.0, None),
            "1.0 MiB of 4.0 MiB (25%), 12 files, 512.0 KiB/s, about 6 s left"
        );
        assert_eq!(text(4 << 20, Some(4 << 20), 3, 2.0, None), "4.0 MiB of 4.0 MiB (100%), 3 files, 2.0 MiB/s");
        assert_eq!(seconds(600), "10 min");
        assert_eq!(seconds(7200), "2.0 h");
        let e = String::from_utf8(event(&[]).to_vec()).unwrap();
        assert!(e.starts_with("event: progress\ndata: {") && e.ends_with("}\n\n"), "{e}");
    }
}
