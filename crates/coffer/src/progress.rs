//! Progress display: an indicatif bar on a terminal (bytes, files and errors so
//! far and the rate; once the totals are known, the percentage, the totals and
//! an ETA; and the end of the file being processed), one line cut to the
//! terminal's width; warnings
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

/// The end of `text`, at most `max` characters, `…` marking a cut.
fn tail(text: &str, max: usize) -> String {
    let n = text.chars().count();
    if n <= max {
        return text.to_string();
    }
    if max == 0 {
        return String::new();
    }
    let rest: String = text.chars().skip(n - (max - 1)).collect();
    format!("…{rest}")
}

/// Columns of the bar's progress gauge, when the terminal has room for it.
const GAUGE: usize = 20;

/// A current file's path is shown only with at least this many columns for it.
const PATH_LEAST: usize = 12;

/// Columns of the terminal on stderr, or 80 when it does not say.
fn terminal_width() -> usize {
    // SAFETY: TIOCGWINSZ fills the winsize given, on a descriptor the process has.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::ioctl(libc::STDERR_FILENO, libc::TIOCGWINSZ, &mut ws) } == 0;
    if ok && ws.ws_col > 0 { usize::from(ws.ws_col) } else { 80 }
}

/// What the bar's line shows, before it is fitted to the terminal.
struct Line<'a> {
    verb: &'a str,
    elapsed: Duration,
    done: u64,
    /// The total bytes, once known: then a gauge, the percentage and an ETA.
    total: Option<u64>,
    per_sec: f64,
    eta: Duration,
    /// "N/M files, E errors".
    files: &'a str,
    /// The file being processed.
    path: Option<&'a str>,
}

fn clock(d: Duration) -> String {
    let s = d.as_secs();
    format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

/// The line in at most `width - 1` columns (the last column is left free, so
/// that no terminal wraps it): the verb, the time elapsed and the bytes done
/// always; then, as room allows, the files, the percentage, the rate, the ETA,
/// the gauge, and the end of the current file's path in what is left.
fn fit(line: &Line, width: usize) -> String {
    let room = width.saturating_sub(1);
    let bytes = match line.total {
        Some(t) => format!("{}/{}", crate::output::bytes(line.done), crate::output::bytes(t)),
        None => crate::output::bytes(line.done),
    };
    let mut parts: Vec<(u8, String)> = vec![(0, line.verb.to_string()), (0, format!("[{}]", clock(line.elapsed)))];
    if let Some(t) = line.total {
        let fraction = if t == 0 { 1.0 } else { (line.done as f64 / t as f64).min(1.0) };
        let filled = (fraction * GAUGE as f64).round() as usize;
        parts.push((5, format!("{}{}", "#".repeat(filled), "-".repeat(GAUGE - filled))));
        parts.push((2, format!("{:>3}%", (fraction * 100.0).floor() as u32)));
    }
    parts.push((0, bytes));
    parts.push((3, format!("{}/s", crate::output::bytes(line.per_sec as u64))));
    if line.total.is_some() {
        parts.push((4, format!("ETA {}", humantime::format_duration(Duration::from_secs(line.eta.as_secs())))));
    }
    parts.push((1, line.files.to_string()));
    let text = |parts: &[(u8, String)]| parts.iter().map(|(_, p)| p.as_str()).collect::<Vec<_>>().join(" ");
    // Drop the least needed parts (highest rank first) until the line fits.
    for rank in (1..=5).rev() {
        if text(&parts).chars().count() <= room {
            break;
        }
        parts.retain(|(r, _)| *r != rank);
    }
    let mut out = text(&parts);
    if out.chars().count() > room {
        out = out.chars().take(room).collect();
    }
    let left = room.saturating_sub(out.chars().count() + 1);
    if let Some(path) = line.path.filter(|_| left >= PATH_LEAST) {
        out.push(' ');
        out.push_str(&tail(path, left));
    }
    out
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
    /// Whether the command says which file it starts (else the bar names the
    /// last one finished).
    starts_items: std::sync::atomic::AtomicBool,
}

impl Display {
    /// A display for a command; the bar appears only on a terminal and not with
    /// --json or --quiet.
    pub fn new(json: bool, quiet: bool, verb: &str) -> Display {
        crate::interrupt::install();
        let bar = (!json && !quiet && std::io::stderr().is_terminal()).then(|| {
            let b = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
            // The whole line is made here, fitted to the terminal's width ([`fit`]).
            b.set_style(ProgressStyle::with_template("{msg}").expect("valid template"));
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
            starts_items: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Lists each file a backup saved on stderr as restic does: `new PATH` and
    /// `modified PATH` at `-v`, `unchanged PATH` too at `-vv`; with --json a
    /// `verbose_status` line each (docs/json.md).
    pub fn listing_changes(mut self, verbose: u8) -> Display {
        self.list_changes = if self.quiet { 0 } else { verbose };
        self
    }

    /// Redraws the bar's line (bytes, files, errors, the current file), at most
    /// every [`LINE_REFRESH`] unless `now`, so that millions of small files cost
    /// no redraws.
    fn refresh_line(&self, bar: &ProgressBar, now: bool) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        let drawn = self.drawn_ms.load(Ordering::Relaxed);
        if !now
            && (ms < drawn + LINE_REFRESH.as_millis() as u64
                || self.drawn_ms.compare_exchange(drawn, ms, Ordering::Relaxed, Ordering::Relaxed).is_err())
        {
            return;
        }
        let total = self.counts.total.load(Ordering::Relaxed);
        let files = self.files_text();
        let path = self.current.lock().ok().and_then(|c| c.as_ref().map(|p| p.display().to_string()));
        let line = Line {
            verb: &self.verb,
            elapsed: bar.elapsed(),
            done: bar.position(),
            total: (total > 0).then_some(total),
            per_sec: bar.per_sec(),
            eta: bar.eta(),
            files: &files,
            path: path.as_deref(),
        };
        bar.set_message(fit(&line, terminal_width()));
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
            b.set_length(bytes.max(b.position()));
            self.refresh_line(b, first);
        }
    }

    fn add_bytes(&self, n: u64) {
        self.counts.bytes.fetch_add(n, Ordering::Relaxed);
        if let Some(b) = &self.bar {
            b.inc(n);
            self.refresh_line(b, false);
        }
    }

    fn start_item(&self, path: &Path) {
        if let Some(b) = &self.bar {
            self.starts_items.store(true, Ordering::Relaxed);
            if let Ok(mut c) = self.current.lock() {
                *c = Some(path.to_path_buf());
            }
            self.refresh_line(b, false);
        }
    }

    fn add_item(&self, path: &Path) {
        self.counts.items.fetch_add(1, Ordering::Relaxed);
        if let Some(b) = &self.bar {
            // A command that does not say what it starts (restore) names what it finished.
            if let Ok(mut c) = self.current.lock()
                && !self.starts_items.load(Ordering::Relaxed)
            {
                *c = Some(path.to_path_buf());
            }
            self.refresh_line(b, false);
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
        let (bar, verb, reason) = (bar.clone(), self.verb.clone(), reason.to_string());
        let end = Instant::now() + duration;
        std::thread::spawn(move || {
            loop {
                let left = end.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                let secs = Duration::from_secs(left.as_secs() + u64::from(left.subsec_nanos() > 0));
                let text = format!("{verb}: waiting for {reason}: {} left", humantime::format_duration(secs));
                bar.set_message(text.chars().take(terminal_width().saturating_sub(1)).collect::<String>());
                std::thread::sleep(left.min(Duration::from_millis(250)));
            }
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

    fn line<'a>(total: Option<u64>, files: &'a str, path: Option<&'a str>) -> Line<'a> {
        Line {
            verb: "backup",
            elapsed: Duration::from_secs(3725),
            done: 3 << 30,
            total,
            per_sec: 120.0 * (1 << 20) as f64,
            eta: Duration::from_secs(42),
            files,
            path,
        }
    }

    #[test]
    fn the_line_shows_percent_eta_and_the_current_file_once_the_totals_are_known() {
        let wide = fit(&line(Some(6 << 30), "10/20 files", Some("/home/a/file.txt")), 200);
        for part in
            ["backup [01:02:05]", " 50% ", "3.00 GiB/6.00 GiB", "/s", "ETA 42s", "10/20 files", "/home/a/file.txt"]
        {
            assert!(wide.contains(part), "{wide:?} lacks {part:?}");
        }
        let counting = fit(&line(None, "10 files", None), 200);
        assert!(!counting.contains("ETA") && !counting.contains('%'), "{counting}");
    }

    /// Regression: a long path made the line wrap on the terminal.
    #[test]
    fn the_line_fits_the_terminal_whatever_the_path() {
        let long = format!("/{}/file.txt", "d".repeat(300));
        for width in [20, 40, 60, 80, 100, 132, 250] {
            for total in [None, Some(6 << 30)] {
                let shown = fit(&line(total, "123456/234567 files, 3 errors", Some(&long)), width);
                assert!(shown.chars().count() < width, "{width}: {} columns: {shown:?}", shown.chars().count());
            }
        }
        // The path is shown by its end, when there is room for it.
        let shown = fit(&line(Some(6 << 30), "1 file", Some(&long)), 132);
        assert!(shown.contains("…") && shown.ends_with("d/file.txt"), "{shown}");
        // On a narrow terminal the verb, the time and the bytes remain.
        let narrow = fit(&line(Some(6 << 30), "1 file", Some(&long)), 40);
        assert!(narrow.starts_with("backup [01:02:05]") && narrow.contains("3.00 GiB/6.00 GiB"), "{narrow}");
    }

    #[test]
    fn long_paths_are_shown_by_their_end() {
        assert_eq!(tail("/a/b", 48), "/a/b");
        let long = format!("/{}/file.txt", "d".repeat(100));
        let shown = tail(&long, 48);
        assert_eq!(shown.chars().count(), 48);
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
        d.finish();
    }
}
