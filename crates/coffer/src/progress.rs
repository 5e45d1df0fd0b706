//! Progress display: an indicatif bar with rate and ETA on a terminal; warnings
//! as text lines, or JSON lines with --json.

use std::io::IsTerminal;
use std::path::Path;

use coffer_core::progress::Progress;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::json;

/// Shows progress on stderr.
pub struct Display {
    bar: Option<ProgressBar>,
    json: bool,
}

impl Display {
    /// A display for a command; the bar appears only on a terminal and not with
    /// --json or --quiet.
    pub fn new(json: bool, quiet: bool, verb: &str) -> Display {
        let bar = (!json && !quiet && std::io::stderr().is_terminal()).then(|| {
            let b = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
            b.set_style(
                ProgressStyle::with_template(&format!(
                    "{verb} [{{elapsed_precise}}] {{wide_bar}} {{bytes}}/{{total_bytes}} {{binary_bytes_per_sec}} ETA {{eta}}"
                ))
                .expect("valid template"),
            );
            b
        });
        Display { bar, json }
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
