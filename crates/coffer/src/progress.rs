//! Progress display: an indicatif bar on a terminal (bytes, files and errors so
//! far and the rate; once the totals are known, the percentage, the totals and
//! an ETA; and the file being processed); warnings
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

use coffer_core::progress::{FileChange, Progress};
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
    items_total: AtomicU64,
    warnings: AtomicU64,
}

/// How often the bar's text (files, errors, the current file) is redrawn at most.
const LINE_REFRESH: Duration = Duration::from_millis(100);

/// Characters of the current file's path shown on the bar: its end, so that
/// the line fits a terminal.
const PATH_SHOWN: usize = 48;

/// The end of `path`, at most [`PATH_SHOWN`] characters, `…` marking a cut.
fn tail(path: &Path) -> String {
    let s = path.display().to_string();
    let n = s.chars().count();
    if n <= PATH_SHOWN {
        return s;
    }
    let rest: String = s.chars().skip(n - (PATH_SHOWN - 1)).collect();
    format!("…{rest}")
}

/// The bar's layout before the totals are known: what was done, and the rate.
fn template_counting(verb: &str) -> String {
    format!("{verb} [{{elapsed_precise}}] {{bytes}} {{binary_bytes_per_sec}} {{prefix}} {{msg}}")
}

/// The bar's layout once the totals are known: percent, bytes and files done of
/// the totals, errors, rate, ETA and the current file.
fn template_total(verb: &str) -> String {
    format!(
        "{verb} [{{elapsed_precise}}] {{bar:25}} {{percent:>3}}% {{bytes}}/{{total_bytes}} \
         {{binary_bytes_per_sec}} ETA {{eta}} {{prefix}} {{msg}}"
    )
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
    /// Print each file a backup saved with how it changed: new and changed
    /// ones at 1 (`-v`), unchanged ones too at 2 (`-vv`); 0 for none.
    list_changes: u8,
    /// When the display was made, and when (milliseconds after) its text was last redrawn.
    start: Instant,
    drawn_ms: AtomicU64,
    /// The file being processed, named on the bar.
    current: Mutex<Option<std::path::PathBuf>>,
}

impl Display {
    /// A display for a command; the bar appears only on a terminal and not with
    /// --json or --quiet.
    pub fn new(json: bool, quiet: bool, verb: &str) -> Display {
        crate::interrupt::install();
        let bar = (!json && !quiet && std::io::stderr().is_terminal()).then(|| {
            let b = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
            b.set_style(ProgressStyle::with_template(&template_counting(verb)).expect("valid template"));
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
            list_changes: 0,
            start: Instant::now(),
            drawn_ms: AtomicU64::new(0),
            current: Mutex::new(None),
        }
    }

    /// Lists each file a backup saved on stderr as restic does: `new PATH` and
    /// `modified PATH` at `-v`, `unchanged PATH` too at `-vv`; with --json a
    /// `verbose_status` line each (docs/json.md).
    pub fn listing_changes(mut self, verbose: u8) -> Display {
        self.list_changes = if self.quiet { 0 } else { verbose };
        self
    }

    /// The bar's layout for what is known now.
    fn template(&self) -> String {
        if self.counts.total.load(Ordering::Relaxed) > 0 {
            template_total(&self.verb)
        } else {
            template_counting(&self.verb)
        }
    }

    /// Redraws the bar's text (files done, errors, the current file), at most
    /// every [`LINE_REFRESH`], so that millions of small files cost no redraws.
    fn refresh_line(&self, bar: &ProgressBar) {
        let now = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        let drawn = self.drawn_ms.load(Ordering::Relaxed);
        if now < drawn + LINE_REFRESH.as_millis() as u64
            || self.drawn_ms.compare_exchange(drawn, now, Ordering::Relaxed, Ordering::Relaxed).is_err()
        {
            return;
        }
        bar.set_prefix(self.files_text());
        if let Some(p) = self.current.lock().ok().and_then(|c| c.clone()) {
            bar.set_message(tail(&p));
        }
    }

    /// "N of M files, E errors", or "N files" while the total is unknown.
    fn files_text(&self) -> String {
        let c = &self.counts;
        let (done, total, warnings) = (
            c.items.load(Ordering::Relaxed),
            c.items_total.load(Ordering::Relaxed),
            c.warnings.load(Ordering::Relaxed),
        );
        let files = if total > 0 {
            format!("{done}/{}", crate::output::plural(total, "file"))
        } else {
            crate::output::plural(done, "file")
        };
        match warnings {
            0 => files,
            n => format!("{files}, {}", crate::output::plural(n, "error")),
        }
    }

    /// Prints a line on stderr without tearing the bar.
    fn print(&self, line: &str) {
        match &self.bar {
            Some(b) => b.suspend(|| eprintln!("{line}")),
            None => eprintln!("{line}"),
        }
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
                    "bytes_done": bytes, "total_bytes": (total > 0).then_some(total), "files_done": items,
                    "percent_done": percent,
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

    fn set_total(&self, bytes: u64, items: u64) {
        let first = self.counts.total.fetch_max(bytes, Ordering::Relaxed) == 0 && bytes > 0;
        self.counts.items_total.fetch_max(items, Ordering::Relaxed);
        if let Some(b) = &self.bar {
            if first {
                b.set_style(ProgressStyle::with_template(&template_total(&self.verb)).expect("valid template"));
            }
            b.set_length(bytes.max(b.position()));
            b.set_prefix(self.files_text());
        }
    }

    fn add_bytes(&self, n: u64) {
        self.counts.bytes.fetch_add(n, Ordering::Relaxed);
        if let Some(b) = &self.bar {
            b.inc(n);
            self.refresh_line(b);
        }
    }

    fn start_item(&self, path: &Path) {
        if let Some(b) = &self.bar {
            if let Ok(mut c) = self.current.lock() {
                *c = Some(path.to_path_buf());
            }
            self.refresh_line(b);
        }
    }

    fn add_item(&self, path: &Path) {
        self.counts.items.fetch_add(1, Ordering::Relaxed);
        if let Some(b) = &self.bar {
            // A command that does not say what it starts (restore) names what it finished.
            if let Ok(c) = self.current.lock()
                && c.is_none()
            {
                b.set_message(tail(path));
            }
            self.refresh_line(b);
        }
    }

    fn file_saved(&self, path: &Path, change: FileChange) {
        let wanted = match change {
            FileChange::New | FileChange::Changed => 1,
            FileChange::Unchanged => 2,
        };
        if self.list_changes < wanted {
            return;
        }
        let line = if self.json {
            json!({"type": "verbose_status", "action": change.as_str(), "item": path.to_string_lossy()}).to_string()
        } else {
            // restic's words: "modified" for a changed file.
            let word = if change == FileChange::Changed { "modified" } else { change.as_str() };
            format!("{word} {}", path.display())
        };
        self.print(&line);
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
        let (bar, verb, reason, template) = (bar.clone(), self.verb.clone(), reason.to_string(), self.template());
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
        self.counts.warnings.fetch_add(1, Ordering::Relaxed);
        let line = if self.json {
            json!({"type": "warning", "path": path.to_string_lossy(), "message": message}).to_string()
        } else {
            format!("warning: {}: {message}", path.display())
        };
        self.print(&line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bar_shows_percent_eta_and_the_current_file_once_the_totals_are_known() {
        let counting = template_counting("backup");
        assert!(!counting.contains("{eta}") && !counting.contains("{percent"), "{counting}");
        let total = template_total("backup");
        for part in ["{percent", "{eta}", "{total_bytes}", "{prefix}", "{msg}", "{binary_bytes_per_sec}"] {
            assert!(total.contains(part), "{total} lacks {part}");
        }
        // Both parse as indicatif templates.
        ProgressStyle::with_template(&counting).unwrap();
        ProgressStyle::with_template(&total).unwrap();
    }

    #[test]
    fn long_paths_are_shown_by_their_end() {
        assert_eq!(tail(Path::new("/a/b")), "/a/b");
        let long = format!("/{}/file.txt", "d".repeat(100));
        let shown = tail(Path::new(&long));
        assert_eq!(shown.chars().count(), PATH_SHOWN);
        assert!(shown.starts_with('…') && shown.ends_with("d/file.txt"), "{shown}");
    }

    #[test]
    fn files_done_of_the_total_and_errors_so_far() {
        let d = Display::new(true, true, "restore");
        assert_eq!(d.files_text(), "0 files");
        d.set_total(1000, 3);
        d.add_item(Path::new("/a"));
        d.add_item(Path::new("/b"));
        assert_eq!(d.files_text(), "2/3 files");
        d.warn(Path::new("/c"), "cannot read");
        assert_eq!(d.files_text(), "2/3 files, 1 error");
        d.warn(Path::new("/d"), "cannot read");
        assert_eq!(d.files_text(), "2/3 files, 2 errors");
        assert_eq!(d.template(), template_total("restore"));
        d.finish();
    }
}
