//! Storage measured through the [`Backend`] trait, apart from the CPU stages:
//! PUT, GET and LIST latency and throughput at several concurrency levels, on a
//! scratch prefix that is deleted afterwards. See docs/design.md#coffer-bench.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::data::incompressible;
use super::stats::Spread;
use crate::error::Result;
use coffer_backend::Backend;

/// One operation at one concurrency level.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StorageRow {
    /// `put`, `get` or `list`.
    pub op: String,
    /// Requests in flight at once.
    pub concurrency: usize,
    /// Requests made.
    pub requests: usize,
    /// Bytes per object (for `list`, the objects listed).
    pub object_bytes: u64,
    /// Milliseconds per request.
    pub latency_ms: Spread,
    /// Requests per second over the whole level.
    pub requests_per_s: f64,
    /// Bytes per second over the whole level (0 for `list`).
    pub bytes_per_s: f64,
}

/// What the storage measurement found.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StorageReport {
    /// The storage measured.
    pub location: String,
    /// The scratch prefix used.
    pub prefix: String,
    /// The rows, by operation and concurrency.
    pub rows: Vec<StorageRow>,
    /// Scratch objects that could not be deleted afterwards (0 when all were).
    pub left_behind: usize,
}

impl StorageReport {
    /// The best PUT throughput measured, in bytes per second.
    pub fn best_put(&self) -> f64 {
        self.rows.iter().filter(|r| r.op == "put").map(|r| r.bytes_per_s).fold(0.0, f64::max)
    }
}

/// Runs `count` requests `f(i)` with `concurrency` threads; latencies in ms and
/// the wall time.
fn run_level(concurrency: usize, count: usize, f: &(dyn Fn(usize) -> Result<()> + Sync)) -> Result<(Vec<f64>, f64)> {
    let next = AtomicUsize::new(0);
    let lat = Mutex::new(Vec::with_capacity(count));
    let first_err = Mutex::new(None);
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..concurrency {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= count {
                        break;
                    }
                    let t = Instant::now();
                    if let Err(e) = f(i) {
                        first_err.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(e);
                        next.store(count, Ordering::Relaxed);
                        break;
                    }
                    lat.lock().unwrap_or_else(|e| e.into_inner()).push(t.elapsed().as_secs_f64() * 1000.0);
                }
            });
        }
    });
    let wall = start.elapsed().as_secs_f64();
    if let Some(e) = first_err.into_inner().unwrap_or_else(|e| e.into_inner()) {
        return Err(e);
    }
    Ok((lat.into_inner().unwrap_or_else(|e| e.into_inner()), wall))
}

/// Measures `backend` with objects of `object_bytes` at each concurrency level,
/// `requests` requests per level and operation (at least two per thread), under
/// `prefix` (which should be new: everything written there is deleted at the end,
/// also after an error).
pub fn measure_storage(
    backend: &dyn Backend,
    prefix: &str,
    object_bytes: usize,
    levels: &[usize],
    requests: usize,
) -> Result<StorageReport> {
    let written = Mutex::new(Vec::new());
    let result = measure_inner(backend, prefix, object_bytes, levels, requests, &written);
    let names = written.into_inner().unwrap_or_else(|e| e.into_inner());
    let left_behind = names.iter().filter(|n| backend.delete(n).is_err()).count();
    let rows = result?;
    Ok(StorageReport { location: backend.location(), prefix: prefix.into(), rows, left_behind })
}

fn measure_inner(
    backend: &dyn Backend,
    prefix: &str,
    object_bytes: usize,
    levels: &[usize],
    requests: usize,
    written: &Mutex<Vec<String>>,
) -> Result<Vec<StorageRow>> {
    let body = incompressible(object_bytes, 99);
    let mut rows = Vec::new();
    for &c in levels {
        let c = c.max(1);
        let n = requests.max(2 * c);
        let names: Vec<String> = (0..n).map(|i| format!("{prefix}c{c}/obj-{i:05}")).collect();
        let row = |op: &str, lat: Vec<f64>, wall: f64, bytes: u64| StorageRow {
            op: op.into(),
            concurrency: c,
            requests: lat.len(),
            object_bytes: bytes,
            latency_ms: Spread::of(&lat),
            requests_per_s: lat.len() as f64 / wall.max(1e-9),
            bytes_per_s: if op == "list" { 0.0 } else { (lat.len() as u64 * bytes) as f64 / wall.max(1e-9) },
        };
        let (lat, wall) = run_level(c, n, &|i| {
            written.lock().unwrap_or_else(|e| e.into_inner()).push(names[i].clone());
            backend.write(&names[i], body.clone()).map_err(Into::into)
        })?;
        rows.push(row("put", lat, wall, object_bytes as u64));
        let (lat, wall) = run_level(c, n, &|i| backend.read(&names[i]).map(|_| ()).map_err(Into::into))?;
        rows.push(row("get", lat, wall, object_bytes as u64));
        let listed = format!("{prefix}c{c}/");
        let (lat, wall) = run_level(c, (2 * c).max(8), &|_| backend.list(&listed).map(|_| ()).map_err(Into::into))?;
        rows.push(row("list", lat, wall, n as u64));
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use coffer_backend::MemBackend;

    #[test]
    fn measures_and_cleans_up() {
        let be = MemBackend::new();
        be.write("config", b"x".to_vec()).unwrap();
        let r = measure_storage(&be, "bench/abc/", 1000, &[1, 4], 6).unwrap();
        assert_eq!(r.rows.len(), 6);
        assert_eq!(r.left_behind, 0);
        assert_eq!(be.names(), vec!["config".to_string()]);
        for row in &r.rows {
            assert!(row.requests > 0 && row.requests_per_s > 0.0, "{row:?}");
            let l = row.latency_ms;
            assert!(l.p50 <= l.p90 && l.p90 <= l.p99 && l.p99 <= l.max);
        }
        assert_eq!(r.rows[0].requests, 6);
        assert_eq!(r.rows[3].requests, 8, "at least two requests per thread");
        assert!(r.best_put() > 0.0);
    }
}
