//! Progress display: an indicatif bar with rate and ETA on a terminal; warnings
//! as text lines, or JSON lines with --json. A deliberate wait (prune's grace
//! period) is a countdown on the bar, a line of text without a terminal, or a
//! `{"type":"status","action":"waiting",...}` line with --json, all on stderr.

use std::io::IsTerminal;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use coffer_core::progress::Progress;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::json;

/// Shows progress on stderr.
pub struct Display {
    bar: Option<ProgressBar>,
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
        Display { bar, json, quiet, verb: verb.to_string(), template, list_items: false }
    }

    /// Lists every item (file) processed on stderr when `verbose` is at least 1
    /// (`-v`), a JSON line each with --json.
    pub fn listing_items(mut self, verbose: u8) -> Display {
        self.list_items = verbose > 0 && !self.quiet;
        self
    }

    /// Removes the bar.
    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

impl Progress for Display {
    fn wants_totals(&self) -> bool {
        self.bar.is_some()
    }

    fn set_total(&self, bytes: u64, _items: u64) {
        if let Some(b) = &self.bar {
            b.set_length(bytes.max(b.position()));
        }
    }

    fn add_bytes(&self, n: u64) {
        if let Some(b) = &self.bar {
            b.inc(n);
        }
    }

    fn add_item(&self, path: &Path) {
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
