//! Retries with exponential backoff: transient storage errors (timeouts,
//! throttling, resets) are retried; `NotFound` and permanent errors are returned at
//! once. Every write coffer makes is idempotent (see the storage contract), so a
//! write that failed after the storage kept it may be repeated safely. A range read
//! that comes back short is checked against the object's size and retried when the
//! object does not in fact end there.

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

/// A backend that retries the transient failures of another.
pub struct RetryBackend<B> {
    inner: B,
    policy: RetryPolicy,
}

impl<B: Backend> RetryBackend<B> {
    /// Wraps `inner` with `policy`.
    pub fn new(inner: B, policy: RetryPolicy) -> Self {
        RetryBackend { inner, policy }
    }

    fn run<T>(&self, mut op: impl FnMut() -> BackendResult<T>) -> BackendResult<T> {
        let mut n = 1;
        loop {
            match op() {
                Err(e) if e.kind == ErrorKind::Transient && n < self.policy.attempts => {
                    std::thread::sleep(self.policy.delay(n));
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

impl<B: Backend> Backend for RetryBackend<B> {
    fn location(&self) -> String {
        self.inner.location()
    }

    fn read_max(&self, name: &str, max: u64) -> BackendResult<Vec<u8>> {
        self.run(|| self.inner.read_max(name, max))
    }

    fn read_range(&self, name: &str, offset: u64, len: u64) -> BackendResult<Vec<u8>> {
        self.run(|| {
            let data = self.inner.read_range(name, offset, len)?;
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
        })
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
                    std::thread::sleep(self.policy.delay(n));
                    n += 1;
                }
                r => return r,
            }
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
