//! Progress display: an indicatif bar with rate and ETA on a terminal; warnings
//! as text lines, or JSON lines with --json. A deliberate wait (prune's grace
//! period) is a countdown on the bar, a line of text without a terminal, or a
//! `{"type":"status","action":"waiting",...}` line with --json, all on stderr.
//! Without a terminal (a cron job's log), or with --json, a status line is
//! printed every `--progress-interval` (default 10s) instead of the bar, so a long
//! command is not silent (docs/design.md#cli).

use std::io::IsTerminal;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use coffer_core::progress::Progress;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::json;

/// `--progress-interval` in milliseconds; 0 turns status lines off.
static INTERVAL_MS: AtomicU64 = AtomicU64::new(10_000);

/// Sets how often status lines are printed without a terminal (`None`: never).
pub fn set_interval(interval: Option<Duration>) {
    let ms = interval.map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1));
    INTERVAL_MS.store(ms, Ordering::Relaxed);
}

/// Counters the status lines report.
#[derive(Default)]
struct Counts {
    bytes: AtomicU64,
    total: AtomicU64,
    items: AtomicU64,
}

/// Shows progress on stderr.
pub struct Display {
    bar: Option<ProgressBar>,
    counts: Arc<Counts>,
    /// Dropped by `finish`, which ends the status-line thread.
    ticker: Mutex<Option<Sender<()>>>,
    json: bool,
    quiet: bool,
    verb: String,
    template: String,
    /// Print each item processed (`-v`).
    list_items: bool,
}

impl Display {
    /// A display for a command; the bar appears only on a terminal and not with
    /// --json or --quiet.
    pub fn new(json: bool, quiet: bool, verb: &str) -> Display {
        crate::interrupt::install();
        let template = format!(
            "{verb} [{{elapsed_precise}}] {{wide_bar}} {{bytes}}/{{total_bytes}} {{binary_bytes_per_sec}} ETA {{eta}}"
        );
        let bar = (!json && !quiet && std::io::stderr().is_terminal()).then(|| {
            let b = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
            b.set_style(ProgressStyle::with_template(&template).expect("valid template"));
            b
        });
        let counts = Arc::new(Counts::default());
        let interval = INTERVAL_MS.load(Ordering::Relaxed);
        let ticker = (bar.is_none() && (json || !quiet) && interval > 0)
            .then(|| status_lines(verb.to_string(), json, Duration::from_millis(interval), counts.clone()));
        Display {
            bar,
            counts,
            ticker: Mutex::new(ticker),
            json,
            quiet,
            verb: verb.to_string(),
            template,
            list_items: false,
        }
    }

    /// Lists every item (file) processed on stderr when `verbose` is at least 1
    /// (`-v`), a JSON line each with --json.
    pub fn listing_items(mut self, verbose: u8) -> Display {
        self.list_items = verbose > 0 && !self.quiet;
        self
    }

    /// Removes the bar, and stops the status lines.
    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
        if let Ok(mut t) = self.ticker.lock() {
            t.take();
        }
    }
}

/// Starts a thread printing a status line every `interval` until the returned
/// sender is dropped.
fn status_lines(verb: String, json: bool, interval: Duration, counts: Arc<Counts>) -> Sender<()> {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let start = Instant::now();
    std::thread::spawn(move || {
        while let Err(RecvTimeoutError::Timeout) = rx.recv_timeout(interval) {
            let (bytes, total, items) = (
                counts.bytes.load(Ordering::Relaxed),
                counts.total.load(Ordering::Relaxed),
                counts.items.load(Ordering::Relaxed),
            );
            let elapsed = start.elapsed().as_secs();
            let percent = (total > 0).then(|| (bytes as f64 * 100.0 / total as f64).min(100.0));
            if json {
                let line = json!({
                    "type": "status", "action": "progress", "command": verb, "seconds_elapsed": elapsed,
                    "bytes_done": bytes, "total_bytes": total, "files_done": items, "percent_done": percent,
                });
                eprintln!("{line}");
            } else {
                let of = match percent {
                    Some(p) => format!(" of {} ({p:.1}%)", crate::output::bytes(total)),
                    None => String::new(),
                };
                eprintln!(
                    "{verb}: {}{of}, {items} files, {} elapsed",
                    crate::output::bytes(bytes),
                    humantime::format_duration(Duration::from_secs(elapsed))
                );
            }
        }
    });
    tx
}

impl Progress for Display {
    fn wants_totals(&self) -> bool {
        // Not for status lines: the extra walk would slow every unattended backup.
        self.bar.is_some()
    }

    fn set_total(&self, bytes: u64, _items: u64) {
        self.counts.total.fetch_max(bytes, Ordering::Relaxed);
        if let Some(b) = &self.bar {
            b.set_length(bytes.max(b.position()));
        }
    }

    fn add_bytes(&self, n: u64) {
        self.counts.bytes.fetch_add(n, Ordering::Relaxed);
        if let Some(b) = &self.bar {
            b.inc(n);
        }
    }

    fn add_item(&self, path: &Path) {
        self.counts.items.fetch_add(1, Ordering::Relaxed);
        if !self.list_items {
            return;
        }
        let line = if self.json {
            json!({"type": "verbose_status", "action": self.verb, "item": path.to_string_lossy()}).to_string()
        } else {
            format!("{} {}", self.verb, path.display())
        };
        match &self.bar {
            Some(b) => b.suspend(|| eprintln!("{line}")),
            None => eprintln!("{line}"),
        }
    }

    fn waiting(&self, reason: &str, duration: Duration) {
        let until = SystemTime::now() + duration;
        let until_text = crate::output::time(&humantime::format_rfc3339_seconds(until).to_string());
        if self.json {
            let line = json!({
                "type": "status",
                "action": "waiting",
                "command": self.verb,
                "reason": reason,
                "seconds": duration.as_secs_f64(),
                "until": humantime::format_rfc3339_seconds(until).to_string(),
            });
            eprintln!("{line}");
            return;
        }
        if self.quiet {
            return;
        }
        let Some(bar) = &self.bar else {
            eprintln!(
                "{}: waiting {} (until {until_text}) for {reason}",
                self.verb,
                humantime::format_duration(Duration::from_secs(duration.as_secs()))
            );
            return;
        };
        // A countdown on the bar's line until the wait is over, then the bar again.
        bar.set_style(ProgressStyle::with_template("{msg}").expect("valid template"));
        let (bar, verb, reason, template) = (bar.clone(), self.verb.clone(), reason.to_string(), self.template.clone());
        let end = Instant::now() + duration;
        std::thread::spawn(move || {
            loop {
                let left = end.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                let secs = Duration::from_secs(left.as_secs() + u64::from(left.subsec_nanos() > 0));
                bar.set_message(format!("{verb}: waiting for {reason}: {} left", humantime::format_duration(secs)));
                std::thread::sleep(left.min(Duration::from_millis(250)));
            }
            bar.set_style(ProgressStyle::with_template(&template).expect("valid template"));
        });
    }

    fn warn(&self, path: &Path, message: &str) {
        let line = if self.json {
            json!({"type": "warning", "path": path.to_string_lossy(), "message": message}).to_string()
        } else {
            format!("warning: {}: {message}", path.display())
        };
        match &self.bar {
            Some(b) => b.suspend(|| eprintln!("{line}")),
            None => eprintln!("{line}"),
        }
    }
}
