//! The dispatcher: notifications sent on a thread of their own.

use std::collections::HashMap;
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use jiff::Timestamp;

use super::{Message, Notifier};
use crate::config::{Event, NotifierConfig};
use crate::state::Db;

/// Where the dispatcher keeps when each notifier last sent each event of each
/// job, for the rate limit: the state database, or memory.
pub trait NoticeLog: Send {
    fn last_sent(&mut self, job: &str, event: Event, notifier: &str) -> Result<Option<Timestamp>, String>;
    fn record_sent(&mut self, job: &str, event: Event, notifier: &str, at: Timestamp) -> Result<(), String>;
}

impl NoticeLog for Db {
    fn last_sent(&mut self, job: &str, event: Event, notifier: &str) -> Result<Option<Timestamp>, String> {
        self.notice_sent(job, event, notifier).map_err(|e| e.to_string())
    }

    fn record_sent(&mut self, job: &str, event: Event, notifier: &str, at: Timestamp) -> Result<(), String> {
        self.set_notice_sent(job, event, notifier, at).map_err(|e| e.to_string())
    }
}

/// A [`NoticeLog`] in memory (lost when the process ends).
#[derive(Debug, Default)]
pub struct MemoryNotices(HashMap<(String, Event, String), Timestamp>);

impl NoticeLog for MemoryNotices {
    fn last_sent(&mut self, job: &str, event: Event, notifier: &str) -> Result<Option<Timestamp>, String> {
        Ok(self.0.get(&(job.to_string(), event, notifier.to_string())).copied())
    }

    fn record_sent(&mut self, job: &str, event: Event, notifier: &str, at: Timestamp) -> Result<(), String> {
        self.0.insert((job.to_string(), event, notifier.to_string()), at);
        Ok(())
    }
}

/// How a [`Dispatcher`] works.
#[derive(Debug, Clone)]
pub struct DispatcherOptions {
    /// Messages waiting at most; past it, new ones are dropped (and logged).
    pub queue: usize,
    /// The pause before each new try of a failed send: as many tries again as
    /// pauses.
    pub backoff: Vec<Duration>,
    pub notifier: Notifier,
}

impl Default for DispatcherOptions {
    fn default() -> Self {
        DispatcherOptions {
            queue: 256,
            backoff: vec![Duration::from_secs(1), Duration::from_secs(5), Duration::from_secs(25)],
            notifier: Notifier::new(),
        }
    }
}

/// Where the dispatcher says what happened, one line at a time.
pub type LogFn = Box<dyn Fn(String) + Send>;

type Log = Arc<Mutex<LogFn>>;

fn say(log: &Log, line: String) {
    (log.lock().unwrap_or_else(|p| p.into_inner()))(line);
}

/// One send (or start ping) to make.
struct Item {
    notifier: NotifierConfig,
    msg: Message,
    start: bool,
    /// Tries made so far.
    tries: usize,
    due: Instant,
}

impl Item {
    fn what(&self) -> String {
        if self.start {
            format!(
                "notifier {}: the start of the {} run of job {}",
                self.notifier.name,
                self.msg.kind.as_str(),
                self.msg.job
            )
        } else {
            format!("notifier {}: {} of job {}", self.notifier.name, self.msg.event.as_str(), self.msg.job)
        }
    }
}

/// Sends notifications on a thread of its own: [`Dispatcher::dispatch`] never
/// blocks. Everything the thread has to say (failures, retries, messages left
/// out by the rate limit or a full queue) goes to the `log` callback, one line
/// each, never with a secret.
pub struct Dispatcher {
    tx: Option<SyncSender<Item>>,
    thread: Option<JoinHandle<()>>,
    log: Log,
    /// Set by [`Dispatcher::shutdown`]: messages still queued past it are dropped.
    deadline: Arc<Mutex<Option<Instant>>>,
}

impl Dispatcher {
    /// Starts the thread.
    pub fn new(options: DispatcherOptions, notices: Box<dyn NoticeLog>, log: LogFn) -> Dispatcher {
        let (tx, rx) = std::sync::mpsc::sync_channel(options.queue.max(1));
        let log: Log = Arc::new(Mutex::new(log));
        let deadline = Arc::new(Mutex::new(None));
        let worker = Worker {
            rx,
            options,
            notices,
            log: Arc::clone(&log),
            deadline: Arc::clone(&deadline),
            pending: Vec::new(),
        };
        let thread = std::thread::Builder::new()
            .name("coffer-notify".into())
            .spawn(move || worker.run())
            .map_err(|e| say(&log, format!("notifications: cannot start their thread: {e}; none will be sent")))
            .ok();
        Dispatcher { tx: thread.as_ref().map(|_| tx), thread, log, deadline }
    }

    /// Queues `msg` for `notifier`, subject to its rate limit.
    pub fn dispatch(&self, notifier: &NotifierConfig, msg: &Message) {
        self.queue(notifier, msg, false);
    }

    /// Queues the start ping of a run (a `healthchecks` webhook's `URL/start`;
    /// nothing for the others). Not rate limited.
    pub fn dispatch_start(&self, notifier: &NotifierConfig, msg: &Message) {
        self.queue(notifier, msg, true);
    }

    fn queue(&self, notifier: &NotifierConfig, msg: &Message, start: bool) {
        let item = Item { notifier: notifier.clone(), msg: msg.clone(), start, tries: 0, due: Instant::now() };
        let Some(tx) = &self.tx else {
            say(&self.log, format!("{}: not sent: the notification thread is not running", item.what()));
            return;
        };
        match tx.try_send(item) {
            Ok(()) => {}
            Err(TrySendError::Full(item)) => say(
                &self.log,
                format!("{}: dropped: too many notifications are waiting (a notifier is slow or down)", item.what()),
            ),
            Err(TrySendError::Disconnected(item)) => {
                say(&self.log, format!("{}: not sent: the notification thread has stopped", item.what()))
            }
        }
    }

    /// Sends what is queued (one try each, no retries) for at most `within`,
    /// then stops the thread; what is left is dropped and logged.
    pub fn shutdown(mut self, within: Duration) {
        self.stop(within);
    }

    fn stop(&mut self, within: Duration) {
        *self.deadline.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now() + within);
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Dispatcher {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.stop(Duration::ZERO);
        }
    }
}

struct Worker {
    rx: Receiver<Item>,
    options: DispatcherOptions,
    notices: Box<dyn NoticeLog>,
    log: Log,
    deadline: Arc<Mutex<Option<Instant>>>,
    /// Failed sends waiting for their next try.
    pending: Vec<Item>,
}

impl Worker {
    fn run(mut self) {
        loop {
            let next = self.pending.iter().map(|i| i.due).min();
            let got = match next {
                None => self.rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
                Some(due) => self.rx.recv_timeout(due.saturating_duration_since(Instant::now())),
            };
            match got {
                Ok(item) => self.attempt(item),
                Err(RecvTimeoutError::Timeout) => {
                    let now = Instant::now();
                    let (due, later): (Vec<Item>, Vec<Item>) = self.pending.drain(..).partition(|i| i.due <= now);
                    self.pending = later;
                    for item in due {
                        self.attempt(item);
                    }
                }
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        for item in self.pending.drain(..) {
            say(&self.log, format!("{}: given up after {} tries: the agent is stopping", item.what(), item.tries));
        }
    }

    fn stopping(&self) -> Option<Instant> {
        *self.deadline.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn attempt(&mut self, mut item: Item) {
        if let Some(deadline) = self.stopping()
            && Instant::now() >= deadline
        {
            say(&self.log, format!("{}: not sent: the agent is stopping", item.what()));
            return;
        }
        let (job, event, name) = (item.msg.job.clone(), item.msg.event, item.notifier.name.clone());
        if !item.start {
            match self.notices.last_sent(&job, event, &name) {
                Ok(Some(sent)) => {
                    let limit = item.notifier.rate_limit;
                    let since = item.msg.time.duration_since(sent);
                    if since >= jiff::SignedDuration::ZERO && since.unsigned_abs() < limit {
                        say(
                            &self.log,
                            format!(
                                "{}: not sent: it was sent at {sent}, less than its rate-limit of {}s before",
                                item.what(),
                                limit.as_secs()
                            ),
                        );
                        return;
                    }
                }
                Ok(None) => {}
                // The rate limit is not known: sending once too often beats not sending.
                Err(e) => say(&self.log, format!("{}: the rate limit is not known: {e}", item.what())),
            }
        }
        let notifier = &self.options.notifier;
        let result = if item.start {
            notifier.start(&item.notifier, &item.msg)
        } else {
            notifier.send(&item.notifier, &item.msg)
        };
        item.tries += 1;
        match result {
            Ok(()) => {
                if !item.start
                    && let Err(e) = self.notices.record_sent(&job, event, &name, item.msg.time)
                {
                    say(&self.log, format!("{}: sent, but not recorded for the rate limit: {e}", item.what()));
                }
            }
            Err(e) => {
                let retries = self.options.backoff.len();
                match self.options.backoff.get(item.tries - 1) {
                    Some(pause) if self.stopping().is_none() => {
                        say(
                            &self.log,
                            format!(
                                "{e} (try {} of {}); trying again in {}s",
                                item.tries,
                                retries + 1,
                                pause.as_secs_f64()
                            ),
                        );
                        item.due = Instant::now() + *pause;
                        self.pending.push(item);
                    }
                    _ => say(&self.log, format!("{e}; given up after {} tries", item.tries)),
                }
            }
        }
    }
}
