//! Repeated timing and its percentiles: every figure `coffer bench` reports is a
//! set of runs summarised as p50, p90, p99 and the worst run. See
//! docs/design.md#coffer-bench.

use std::time::Instant;

use serde::{Deserialize, Serialize};

/// The value at quantile `q` (0 to 1) of `values` by the nearest-rank method:
/// the smallest value with at least `q` of all values at or below it. `None`
/// for no values. Monotone in `q`, so p50 <= p90 <= p99 <= max always holds.
pub fn percentile(values: &[f64], q: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v: Vec<f64> = values.to_vec();
    v.sort_by(f64::total_cmp);
    let q = if q.is_nan() { 1.0 } else { q.clamp(0.0, 1.0) };
    let rank = (q * v.len() as f64).ceil() as usize;
    Some(v[rank.clamp(1, v.len()) - 1])
}

/// Seconds per run: the median, the 90th and 99th percentiles and the slowest run.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// The slowest run.
    pub max: f64,
}

impl Spread {
    /// The spread of `values`; all zero for none.
    pub fn of(values: &[f64]) -> Spread {
        let p = |q| percentile(values, q).unwrap_or(0.0);
        Spread { p50: p(0.5), p90: p(0.9), p99: p(0.99), max: p(1.0) }
    }
}

/// Work done per second: the median run and the slow runs (`p90` is the rate
/// that 90% of runs reached or beat; `worst` is the slowest run's).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rates {
    /// Median rate.
    pub p50: f64,
    /// Rate reached by 90% of runs.
    pub p90: f64,
    /// Rate reached by 99% of runs.
    pub p99: f64,
    /// The slowest run's rate.
    pub worst: f64,
    /// All units over all seconds: the rate a long job would see.
    pub mean: f64,
}

/// One measured figure: what each run did and how long it took.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Figure {
    /// Timed runs.
    pub runs: usize,
    /// Work units per run (bytes, or operations; see the stage's `unit`), the median over runs.
    pub units_per_run: f64,
    /// Seconds per run.
    pub seconds: Spread,
    /// Units per second, per run.
    pub rate: Rates,
    /// The runs as (units, seconds), for [`Figure::merged`].
    #[serde(skip)]
    pub(crate) samples: Vec<(f64, f64)>,
}

impl Figure {
    /// Summarises runs given as (units done, seconds taken).
    pub fn from_runs(runs: &[(f64, f64)]) -> Figure {
        // A run too short for the clock still counts as one nanosecond, so rates stay finite.
        let secs: Vec<f64> = runs.iter().map(|r| r.1.max(1e-9)).collect();
        let rates: Vec<f64> = runs.iter().map(|r| r.0 / r.1.max(1e-9)).collect();
        let units: Vec<f64> = runs.iter().map(|r| r.0).collect();
        let low = |q: f64| percentile(&rates, 1.0 - q).unwrap_or(0.0);
        Figure {
            runs: runs.len(),
            units_per_run: percentile(&units, 0.5).unwrap_or(0.0),
            seconds: Spread::of(&secs),
            rate: Rates {
                p50: percentile(&rates, 0.5).unwrap_or(0.0),
                p90: low(0.9),
                p99: low(0.99),
                worst: low(1.0),
                mean: units.iter().sum::<f64>() / secs.iter().sum::<f64>().max(1e-9),
            },
            samples: runs.to_vec(),
        }
    }

    /// One figure of the runs of all of `figures`.
    pub fn merged<'a>(figures: impl IntoIterator<Item = &'a Figure>) -> Figure {
        let runs: Vec<(f64, f64)> = figures.into_iter().flat_map(|f| f.samples.iter().copied()).collect();
        Figure::from_runs(&runs)
    }
}

/// Runs `f(run)` once untimed (warm-up) and then `runs` times timed; `f` returns
/// the units of work it did.
pub fn measure(runs: usize, f: impl FnMut(usize) -> f64) -> Figure {
    measure_at_least(runs, 0.0, true, f)
}

/// Like [`measure`] (with the warm-up only when `warm_up`), but a timed run
/// calls `f(run)` again until it has taken at least `min_seconds`, and counts
/// the units of all its calls: a run sized too small (from a probe the clock
/// could hardly time) still lasts long enough to be timed.
pub fn measure_at_least(runs: usize, min_seconds: f64, warm_up: bool, mut f: impl FnMut(usize) -> f64) -> Figure {
    if warm_up {
        f(usize::MAX);
    }
    let mut out = Vec::with_capacity(runs);
    for r in 0..runs.max(1) {
        let t = Instant::now();
        let mut units = f(r);
        // A bound on the calls, for an `f` that does nothing.
        for _ in 0..1_000_000 {
            if t.elapsed().as_secs_f64() >= min_seconds {
                break;
            }
            units += f(r);
        }
        out.push((units, t.elapsed().as_secs_f64()));
    }
    Figure::from_runs(&out)
}

/// Seconds taken by `f`, with its result.
pub fn timed<T>(f: impl FnOnce() -> T) -> (T, f64) {
    let t = Instant::now();
    let r = f();
    (r, t.elapsed().as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), Some(50.0));
        assert_eq!(percentile(&v, 0.9), Some(90.0));
        assert_eq!(percentile(&v, 0.99), Some(99.0));
        assert_eq!(percentile(&v, 1.0), Some(100.0));
        assert_eq!(percentile(&v, 0.0), Some(1.0));
        assert_eq!(percentile(&[], 0.5), None);
        assert_eq!(percentile(&[7.0], 0.99), Some(7.0));
        // Five runs: the median is the third, p90 and p99 the slowest.
        let five = [5.0, 1.0, 4.0, 2.0, 3.0];
        assert_eq!(percentile(&five, 0.5), Some(3.0));
        assert_eq!(percentile(&five, 0.9), Some(5.0));
        assert_eq!(percentile(&five, 0.79), Some(4.0));
        // NaN quantile is the maximum; out-of-range quantiles are clamped.
        assert_eq!(percentile(&five, f64::NAN), Some(5.0));
        assert_eq!(percentile(&five, 7.0), Some(5.0));
    }

    #[test]
    fn figure_orders_times_and_rates() {
        let f = Figure::from_runs(&[(100.0, 1.0), (100.0, 2.0), (100.0, 4.0), (100.0, 0.5)]);
        assert_eq!(f.runs, 4);
        assert_eq!(f.seconds.max, 4.0);
        assert!(f.seconds.p50 <= f.seconds.p90 && f.seconds.p90 <= f.seconds.p99 && f.seconds.p99 <= f.seconds.max);
        assert_eq!(f.rate.worst, 25.0);
        assert!(f.rate.p50 >= f.rate.p90 && f.rate.p90 >= f.rate.p99 && f.rate.p99 >= f.rate.worst);
        assert_eq!(f.units_per_run, 100.0);
        assert_eq!(f.rate.mean, 400.0 / 7.5);
        // Merging figures summarises all their runs together.
        let a = Figure::from_runs(&[(100.0, 1.0), (100.0, 2.0)]);
        let b = Figure::from_runs(&[(100.0, 4.0), (100.0, 0.5)]);
        assert_eq!(Figure::merged([&a, &b]), f);
    }

    #[test]
    fn runs_last_at_least_the_minimum() {
        let mut calls = Vec::new();
        let f = measure_at_least(3, 0.002, true, |r| {
            calls.push(r);
            std::thread::sleep(std::time::Duration::from_micros(300));
            10.0
        });
        assert_eq!(f.runs, 3);
        assert!(f.seconds.p50 >= 0.002 && f.seconds.max < 0.5, "{:?}", f.seconds);
        // Each run repeats its own call, and counts the units of all its calls.
        assert_eq!(calls[0], usize::MAX);
        assert!(calls[1..].windows(2).all(|w| w[0] <= w[1]), "{calls:?}");
        let per_run: Vec<f64> = (0..3).map(|r| 10.0 * calls.iter().filter(|&&c| c == r).count() as f64).collect();
        assert_eq!(f.units_per_run, percentile(&per_run, 0.5).unwrap());
        assert!(per_run.iter().all(|&u| u >= 10.0));
        // No minimum: one call per run.
        let mut n = 0;
        measure(4, |_| {
            n += 1;
            1.0
        });
        assert_eq!(n, 5);
    }
}
