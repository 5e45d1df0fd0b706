//! A backend that fails on purpose, for tests: transient errors, slow answers
//! that end in a timeout, short range reads, writes that fail after the storage
//! kept them, refused writes (a full disk), and a crash of the whole process
//! after a number of operations. Decisions come from a seeded
//! generator, so a failing run can be replayed.

use std::sync::Mutex;
use std::time::Duration;

use super::{Backend, BackendError, BackendResult, ErrorKind, ObjectInfo};

/// Which faults to inject, each a probability per operation.
#[derive(Clone, Debug, Default)]
pub struct Faults {
    /// Seed of the generator.
    pub seed: u64,
    /// An operation fails with a transient error before doing anything.
    pub transient: f64,
    /// An operation waits `delay`, then fails with a transient timeout.
    pub timeout: f64,
    /// How long a timeout takes.
    pub delay: Duration,
    /// A range read returns only part of what exists.
    pub short_read: f64,
    /// A write is stored, but the caller is told it failed (transiently).
    pub lost_ack: f64,
    /// Every write fails with a permanent "no space left" error.
    pub refuse_writes: bool,
    /// Faults strike only objects whose names start with this (all when empty).
    pub only: String,
    /// After this many operations, every operation fails permanently (a
    /// backend that goes away in the middle of a command).
    pub fail_after: Option<u64>,
    /// After this many operations, the whole process is killed with SIGKILL:
    /// a crash at a chosen moment, for tests that a command survives one.
    pub kill_after: Option<u64>,
}

impl Faults {
    /// Parses `seed=1,transient=0.5,timeout=0.1,delay_ms=5,short_read=0.2,lost_ack=0.1,refuse_writes,only=data/,fail_after=N,kill_after=N`.
    pub fn parse(spec: &str) -> Result<Faults, String> {
        let mut f = Faults::default();
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part.split_once('=').unwrap_or((part, ""));
            let num = || v.parse::<f64>().map_err(|_| format!("fault {k}: {v:?} is not a number"));
            match k {
                "seed" => f.seed = v.parse().map_err(|_| format!("fault seed: {v:?} is not an integer"))?,
                "transient" => f.transient = num()?,
                "timeout" => f.timeout = num()?,
                "delay_ms" => f.delay = Duration::from_millis(num()? as u64),
                "short_read" => f.short_read = num()?,
                "lost_ack" => f.lost_ack = num()?,
                "refuse_writes" => f.refuse_writes = true,
                "only" => f.only = v.to_string(),
                "fail_after" => {
                    f.fail_after = Some(v.parse().map_err(|_| format!("fault fail_after: {v:?} is not an integer"))?)
                }
                "kill_after" => {
                    f.kill_after = Some(v.parse().map_err(|_| format!("fault kill_after: {v:?} is not an integer"))?)
                }
                _ => return Err(format!("unknown fault {k:?}")),
            }
        }
        Ok(f)
    }
}

/// Wraps a backend and injects [`Faults`].
pub struct FaultyBackend<B> {
    inner: B,
    faults: Faults,
    rng: Mutex<u64>,
    operations: std::sync::atomic::AtomicU64,
}

impl<B: Backend> FaultyBackend<B> {
    /// Wraps `inner`.
    pub fn new(inner: B, faults: Faults) -> Self {
        let seed = faults.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        FaultyBackend { inner, faults, rng: Mutex::new(seed), operations: Default::default() }
    }

    /// A uniform number in [0, 1) (xorshift64*).
    fn roll(&self) -> f64 {
        let mut x = self.rng.lock().expect("poisoned");
        *x ^= *x >> 12;
        *x ^= *x << 25;
        *x ^= *x >> 27;
        (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A write that may be refused, fail before it is made, or be made and then
    /// reported as failed.
    fn faulty_write(&self, name: &str, write: impl FnOnce() -> BackendResult<()>) -> BackendResult<()> {
        if !self.strikes(name) {
            return write();
        }
        if self.faults.refuse_writes {
            return Err(BackendError::new(ErrorKind::Permanent, name, "injected: No space left on device"));
        }
        self.before(name)?;
        let lost = self.roll() < self.faults.lost_ack;
        write()?;
        if lost {
            return Err(BackendError::new(ErrorKind::Transient, name, "injected: connection lost after the write"));
        }
        Ok(())
    }

    /// Whether faults may strike `name`.
    fn strikes(&self, name: &str) -> bool {
        name.starts_with(&self.faults.only)
    }

    /// Injects the faults that precede an operation.
    fn before(&self, name: &str) -> BackendResult<()> {
        let done = self.operations.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if self.faults.kill_after.is_some_and(|n| done >= n) {
            // Nothing after this runs: no destructor, no flush, as in a crash.
            let _ = rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
        }
        if self.faults.fail_after.is_some_and(|n| done >= n) {
            return Err(BackendError::new(ErrorKind::Permanent, name, "injected: the storage went away"));
        }
        if !self.strikes(name) {
            return Ok(());
        }
        if self.roll() < self.faults.transient {
            return Err(BackendError::new(ErrorKind::Transient, name, "injected: connection reset"));
        }
        if self.roll() < self.faults.timeout {
            std::thread::sleep(self.faults.delay);
            return Err(BackendError::new(ErrorKind::Transient, name, "injected: operation timed out"));
        }
        Ok(())
    }
}

impl<B: Backend> Backend for FaultyBackend<B> {
    fn location(&self) -> String {
        self.inner.location()
    }

    fn connections(&self) -> usize {
        self.inner.connections()
    }

    fn read_max(&self, name: &str, max: u64) -> BackendResult<Vec<u8>> {
        self.before(name)?;
        self.inner.read_max(name, max)
    }

    fn read_range(&self, name: &str, offset: u64, len: u64) -> BackendResult<Vec<u8>> {
        self.before(name)?;
        let mut data = self.inner.read_range(name, offset, len)?;
        if !data.is_empty() && self.strikes(name) && self.roll() < self.faults.short_read {
            let keep = (self.roll() * data.len() as f64) as usize;
            data.truncate(keep);
        }
        Ok(data)
    }

    fn write(&self, name: &str, data: Vec<u8>) -> BackendResult<()> {
        self.faulty_write(name, || self.inner.write(name, data))
    }

    fn write_new(&self, name: &str, data: Vec<u8>) -> BackendResult<bool> {
        let mut created = false;
        self.faulty_write(name, || {
            created = self.inner.write_new(name, data)?;
            Ok(())
        })?;
        Ok(created)
    }

    fn write_file(&self, name: &str, file: &std::fs::File, len: u64) -> BackendResult<()> {
        self.faulty_write(name, || self.inner.write_file(name, file, len))
    }

    fn spool_dir(&self) -> Option<std::path::PathBuf> {
        self.inner.spool_dir()
    }

    fn spool_file(&self) -> Option<BackendResult<std::fs::File>> {
        self.inner.spool_file()
    }

    fn stat(&self, name: &str) -> BackendResult<u64> {
        self.before(name)?;
        self.inner.stat(name)
    }

    fn list(&self, prefix: &str) -> BackendResult<Vec<ObjectInfo>> {
        self.before(prefix)?;
        self.inner.list(prefix)
    }

    fn delete(&self, name: &str) -> BackendResult<()> {
        self.before(name)?;
        self.inner.delete(name)
    }
}
