//! coffer's agent: jobs and their configuration, schedules, the run history in a
//! SQLite database, hooks, notifications, metrics and the daemon's loop
//! (docs/design.md#agent).
//!
//! The crate depends on no other coffer crate. It never runs a backup itself: the
//! command line hands the daemon a [`daemon::Runner`] that carries a job's steps
//! out (by starting the coffer binary), so that the dependencies point one way,
//! from the binary to this crate. Nothing here prints or reads the environment;
//! time comes from an injected [`Clock`].

pub mod calendar;
pub mod config;
pub mod daemon;
pub mod hooks;
pub mod live;
pub mod metrics;
pub mod notify;
pub mod run;
pub mod schedule;
pub mod state;
pub mod status;
pub mod steps;
pub mod units;

#[cfg(test)]
mod test_support;

/// Where the current time comes from: the system's, or a test's.
pub trait Clock: Send + Sync {
    fn now(&self) -> jiff::Timestamp;
}

/// The system clock.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> jiff::Timestamp {
        jiff::Timestamp::now()
    }
}
