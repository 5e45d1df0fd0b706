//! What the unit tests of the runs and the loop share: a clock the test moves,
//! steps that record what they were asked, a configuration from text and a run
//! context in a directory.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use jiff::Timestamp;

use crate::Clock;
use crate::config::{Config, Job};
use crate::notify::{Dispatcher, DispatcherOptions, MemoryNotices};
use crate::run::RunContext;
use crate::steps::{OnProgress, StepResult, Steps, Stop};

/// A clock the test moves.
pub struct TestClock(pub AtomicI64);
impl Clock for TestClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_millisecond(self.0.load(Ordering::SeqCst)).unwrap()
    }
}

/// Steps that record what they were asked and answer with `code`.
pub struct FakeSteps {
    pub calls: Mutex<Vec<Vec<String>>>,
    pub code: Mutex<i32>,
}
impl Steps for FakeSteps {
    fn run(&self, _job: &Job, args: &[String], _stop: &Stop, progress: OnProgress<'_>) -> StepResult {
        progress(&serde_json::json!({"type": "status", "action": "progress", "bytes_done": 1}));
        self.calls.lock().unwrap().push(args.to_vec());
        let code = *self.code.lock().unwrap();
        let doc = serde_json::json!({"type": "summary", "snapshot_id": "abc", "summary": {}});
        StepResult {
            exit_code: Some(code),
            signal: None,
            document: Some(doc),
            error: (code != 0).then(|| "failed".into()),
        }
    }
}

pub fn config(dir: &std::path::Path, jobs: &str) -> Config {
    let file = dir.join("jobs.toml");
    std::fs::write(&file, jobs).unwrap();
    crate::config::load(Some(&file), dir, jiff::tz::TimeZone::UTC).unwrap()
}

pub fn context(dir: &std::path::Path, steps: Arc<FakeSteps>, clock: Arc<TestClock>) -> Arc<RunContext> {
    Arc::new(RunContext {
        db_path: dir.join("state/agent.sqlite"),
        lock_dir: dir.join("state/locks"),
        steps,
        hook_env: Vec::new(),
        dispatcher: Arc::new(Dispatcher::new(
            DispatcherOptions::default(),
            Box::new(MemoryNotices::default()),
            Box::new(|_| {}),
        )),
        host: "test".into(),
        clock,
        stop: Stop::new(),
        pid: i64::from(std::process::id()),
    })
}
