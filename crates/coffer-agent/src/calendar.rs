//! Schedules: systemd calendar expressions and cron lines (docs/design.md#schedules).

/// A parsed schedule.
#[derive(Debug, Clone)]
pub struct Schedule {
    text: String,
}

impl Schedule {
    /// The expression as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}
