//! Retries with exponential backoff: transient storage errors (timeouts,
//! throttling, resets) are retried; `NotFound` and permanent errors are returned at
//! once. Every write coffer makes is idempotent (see the storage contract), so a
//! write that failed after the storage kept it may be repeated safely. A range read
//! that comes back short is checked against the object's size and retried when the
//! object does not in fact end there. Each retry is announced to an optional
//! hook ([`RetryBackend::on_retry`]) before its wait, so that the command line can
//! show it: a retry is never a silent pause.

use std::sync::Arc;
use std::time::Duration;

use super::{Backend, BackendError, BackendResult, ErrorKind, ObjectInfo};

/// How persistent [`RetryBackend`] is.
#[derive(Clone, Copy, Debug)]
pub struct RetryPolicy {
    /// Attempts in all, the first included.
    pub attempts: u32,
    /// Delay before the first retry; doubled for each further one.
    pub base_delay: Duration,
    /// Longest delay between two attempts.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    /// Ten attempts over about a minute: 0.1 s, 0.2 s, ... capped at 15 s.
    fn default() -> Self {
        RetryPolicy { attempts: 10, base_delay: Duration::from_millis(100), max_delay: Duration::from_secs(15) }
    }
}

impl RetryPolicy {
    /// The delay before retry number `n` (1-based), with up to 25% random jitter
    /// so that many clients do not retry in step.
    fn delay(&self, n: u32) -> Duration {
        let exp = self.base_delay.saturating_mul(1u32 << (n - 1).min(20)).min(self.max_delay);
        let jitter = u16::from_le_bytes(crate::random_array()) as u32;
        exp + exp.mul_f64(jitter as f64 / u16::MAX as f64 / 4.0)
    }
}

/// One retry about to happen, as told to the [`RetryBackend::on_retry`] hook.
#[derive(Debug)]
pub struct RetryEvent<'a> {
    /// The object (or operation) concerned.
    pub object: &'a str,
    /// The attempt about to be made: 2 for the first retry.
    pub attempt: u32,
    /// Attempts in all that will be made at most.
    pub attempts: u32,
    /// The wait before it.
    pub delay: Duration,
    /// The transient error that failed the previous attempt.
    pub error: &'a BackendError,
}

/// What is called before each retry's wait.
pub type RetryHook = Arc<dyn Fn(&RetryEvent<'_>) + Send + Sync>;

/// A backend that retries the transient failures of another.
pub struct RetryBackend<B> {
    inner: B,
    policy: RetryPolicy,
    hook: Option<RetryHook>,
}

impl<B: Backend> RetryBackend<B> {
    /// Wraps `inner` with `policy`.
    pub fn new(inner: B, policy: RetryPolicy) -> Self {
        RetryBackend { inner, policy, hook: None }
    }

    /// Calls `hook` before each retry (from the thread that retries), with the
    /// object, the attempt about to be made, the wait and the error.
    pub fn on_retry(mut self, hook: impl Fn(&RetryEvent<'_>) + Send + Sync + 'static) -> Self {
        self.hook = Some(Arc::new(hook));
        self
    }

    /// Tells the hook of retry `n` (1-based) after `error`, then waits.
    fn wait(&self, n: u32, error: &BackendError) {
        let delay = self.policy.delay(n);
        if let Some(hook) = &self.hook {
            hook(&RetryEvent { object: &error.object, attempt: n + 1, attempts: self.policy.attempts, delay, error });
        }
        std::thread::sleep(delay);
    }

    fn run<T>(&self, mut op: impl FnMut() -> BackendResult<T>) -> BackendResult<T> {
        let mut n = 1;
        loop {
            match op() {
                Err(e) if e.kind == ErrorKind::Transient && n < self.policy.attempts => {
                    self.wait(n, &e);
                    n += 1;
                }
                Err(e) if e.kind == ErrorKind::Transient => {
                    return Err(BackendError::new(
                        ErrorKind::Transient,
                        e.object,
                        format!("{} (gave up after {n} attempts)", e.message),
                    ));
                }
                r => return r,
            }
        }
    }
}

impl<B: Backend> RetryBackend<B> {
    /// `read`, the result of reading `len` bytes at `offset`, as a transient error
    /// when it came back short but the object does not end there.
    fn checked_range(&self, name: &str, offset: u64, len: u64, read: BackendResult<Vec<u8>>) -> BackendResult<Vec<u8>> {
        let data = read?;
        if (data.len() as u64) < len {
            let size = self.inner.stat(name)?;
            if size.saturating_sub(offset) > data.len() as u64 {
                return Err(BackendError::new(
                    ErrorKind::Transient,
                    name,
                    format!("short read: {} of {len} bytes at offset {offset}", data.len()),
                ));
            }
        }
        Ok(data)
    }
}

impl<B: Backend> Backend for RetryBackend<B> {
    fn location(&self) -> String {
        self.inner.location()
    }

    fn read_max(&self, name: &str, max: u64) -> BackendResult<Vec<u8>> {
        self.run(|| self.inner.read_max(name, max))
    }

    fn connections(&self) -> usize {
        self.inner.connections()
    }

    fn read_range(&self, name: &str, offset: u64, len: u64) -> BackendResult<Vec<u8>> {
        self.run(|| self.checked_range(name, offset, len, self.inner.read_range(name, offset, len)))
    }

    fn read_ranges(&self, name: &str, ranges: &[(u64, u64)]) -> Vec<BackendResult<Vec<u8>>> {
        // One batch to the backend (which may send it concurrently); the ranges
        // that failed transiently are then retried one by one.
        self.inner
            .read_ranges(name, ranges)
            .into_iter()
            .zip(ranges)
            .map(|(r, &(offset, len))| match self.checked_range(name, offset, len, r) {
                Err(e) if e.kind == ErrorKind::Transient && self.policy.attempts > 1 => {
                    self.wait(1, &e);
                    self.read_range(name, offset, len)
                }
                r => r,
            })
            .collect()
    }

    fn write(&self, name: &str, data: Vec<u8>) -> BackendResult<()> {
        // Only the last attempt may hand the buffer on; earlier ones need a copy.
        let mut n = 1;
        loop {
            if n == self.policy.attempts {
                return self.inner.write(name, data);
            }
            match self.inner.write(name, data.clone()) {
                Err(e) if e.kind == ErrorKind::Transient => {
                    self.wait(n, &e);
                    n += 1;
                }
                r => return r,
            }
        }
    }

    fn write_new(&self, name: &str, data: Vec<u8>) -> BackendResult<bool> {
        let mut failed_before = false;
        let created = self.run(|| {
            let r = self.inner.write_new(name, data.clone());
            failed_before |= r.is_err();
            r
        })?;
        if created || !failed_before {
            return Ok(created);
        }
        // An attempt failed, then the object was found there: it may be the one
        // that attempt wrote before its answer was lost. It is ours if it holds
        // exactly these bytes.
        let max = data.len() as u64;
        match self.run(|| self.inner.read_max(name, max)) {
            Ok(stored) => Ok(stored == data),
            Err(e) if e.kind == ErrorKind::TooLarge => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn write_file(&self, name: &str, file: &std::fs::File, len: u64) -> BackendResult<()> {
        self.run(|| self.inner.write_file(name, file, len))
    }

    fn spool_dir(&self) -> Option<std::path::PathBuf> {
        self.inner.spool_dir()
    }

    fn spool_file(&self) -> Option<BackendResult<std::fs::File>> {
        self.inner.spool_file()
    }

    fn stat(&self, name: &str) -> BackendResult<u64> {
        self.run(|| self.inner.stat(name))
    }

    fn list(&self, prefix: &str) -> BackendResult<Vec<ObjectInfo>> {
        self.run(|| self.inner.list(prefix))
    }

    fn delete(&self, name: &str) -> BackendResult<()> {
        self.run(|| self.inner.delete(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Faults, FaultyBackend, MemBackend};
    use std::sync::Mutex;

    #[test]
    fn every_retry_is_announced_with_its_object_attempt_and_error() {
        let faults = Faults { seed: 7, transient: 0.5, ..Faults::default() };
        let policy =
            RetryPolicy { attempts: 20, base_delay: Duration::from_micros(10), max_delay: Duration::from_millis(1) };
        let seen: Arc<Mutex<Vec<(String, u32, String)>>> = Default::default();
        let log = seen.clone();
        let be = RetryBackend::new(FaultyBackend::new(MemBackend::new(), faults), policy)
            .on_retry(move |e| log.lock().unwrap().push((e.object.to_string(), e.attempt, e.error.message.clone())));
        for i in 0..20 {
            be.write(&format!("index/{i}"), vec![i as u8; 10]).unwrap();
            assert_eq!(be.read(&format!("index/{i}")).unwrap(), vec![i as u8; 10]);
        }
        let seen = seen.lock().unwrap();
        assert!(seen.len() >= 10, "half the requests fail at first, so many retries: {}", seen.len());
        for (object, attempt, message) in seen.iter() {
            assert!(object.starts_with("index/"), "{object}");
            assert!((2..=20).contains(attempt));
            assert!(message.contains("injected"), "{message}");
        }
    }

    #[test]
    fn batched_ranges_retry_the_failed_ones_alone() {
        let faults = Faults { seed: 3, transient: 0.3, short_read: 0.3, ..Faults::default() };
        let policy =
            RetryPolicy { attempts: 30, base_delay: Duration::from_micros(10), max_delay: Duration::from_millis(1) };
        let mem = Arc::new(MemBackend::new());
        mem.write("data/aa/p", (0..=255u8).cycle().take(10_000).collect()).unwrap();
        let be = RetryBackend::new(FaultyBackend::new(mem, faults), policy);
        let ranges: Vec<(u64, u64)> = (0..50).map(|i| (i * 200, 150)).chain([(9_990, 100)]).collect();
        for (r, &(offset, len)) in be.read_ranges("data/aa/p", &ranges).into_iter().zip(&ranges) {
            let want: Vec<u8> = (0..=255u8).cycle().take(10_000).skip(offset as usize).take(len as usize).collect();
            assert_eq!(r.unwrap(), want, "range at {offset}");
        }
    }
}
