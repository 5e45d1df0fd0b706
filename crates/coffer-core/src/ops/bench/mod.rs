//! `coffer bench`: measures, on this machine and on a sample of the user's data,
//! what each backup stage costs per core and on all cores, the whole pipeline in
//! the configurations that matter, the worst cases (percentiles over repeated
//! runs, and inputs chosen to hurt each stage), and from them recommends the
//! `init` settings and projects the time of a backup. The library measures and
//! returns typed results; the binary prints them. See docs/design.md#coffer-bench.
//!
//! - [`stats`]: percentiles and timing.
//! - [`data`]: the sample's type, generated data and the adversarial inputs.
//! - [`sample`]: which of the user's files the sample and the walk hold.
//! - [`stages`]: each stage alone.
//! - [`pipeline`]: the whole pipeline.
//! - [`advice`]: the recommendation and the projection.
//! - [`storage`]: storage latency and throughput through the backend trait.
//! - [`walk`]: a real backup of whole directories across the data, for the per-file work.

pub mod advice;
pub mod data;
pub mod pipeline;
pub mod sample;
pub mod stages;
pub mod stats;
pub mod storage;
pub mod walk;

use std::collections::HashSet;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::chunker::{Chunker, ChunkerParams};
use crate::crypto::{Cipher, ScryptParams};
use crate::error::{Error, Result};
use crate::format::config::DEFAULT_COMPRESSION_LEVEL;
pub use advice::{Candidate, Projection, Recommendation};
pub use data::{Sample, SampleInfo};
pub use pipeline::{Config, PipelineRow};
pub use stats::{Figure, Rates, Spread, percentile};
pub use storage::{StorageReport, StorageRow, measure_storage};
pub use walk::WalkRow;

/// What to measure and how long.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    /// Timed runs per stage figure (after one untimed warm-up).
    pub runs: usize,
    /// Timed runs per pipeline figure (no warm-up: the first run pays for
    /// starting, as a backup does).
    pub pipeline_runs: usize,
    /// Fewer levels and smaller inputs, for a run of a few seconds.
    pub quick: bool,
    /// Threads for the all-cores figures.
    pub threads: usize,
    /// The key derivation cost to time.
    pub kdf: ScryptParams,
    /// The configured chunker sizes (the default's unless a repository says otherwise).
    pub chunker: ChunkerParams,
    /// The configured zstd level.
    pub compression_level: i32,
    /// The data size the projection is for, in bytes.
    pub projected_bytes: u64,
    /// About how long one timed run of a stage takes, in seconds.
    pub target_run_seconds: f64,
    /// Also time reading the sample's files with a cold page cache.
    pub cold: bool,
}

impl BenchOptions {
    /// The standard run on `threads` threads (a default run takes about 30 s on 2 cores).
    pub fn standard(threads: usize) -> BenchOptions {
        BenchOptions {
            runs: 5,
            pipeline_runs: 5,
            quick: false,
            threads: threads.max(1),
            kdf: ScryptParams::DEFAULT,
            chunker: ChunkerParams::default(),
            compression_level: DEFAULT_COMPRESSION_LEVEL,
            projected_bytes: 100 << 30,
            target_run_seconds: 0.015,
            cold: false,
        }
    }

    /// The quick run: a few seconds.
    pub fn quick(threads: usize) -> BenchOptions {
        BenchOptions { runs: 3, pipeline_runs: 2, quick: true, target_run_seconds: 0.004, ..Self::standard(threads) }
    }
}

/// One stage and choice, measured on one input.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StageRow {
    /// The stage: `chunker`, `file digest`, `blob id`, `aead`, `zstd`, `zstd probe`,
    /// `scrypt`, `ed25519`, `merkle`, `read files`.
    pub stage: String,
    /// The choice within the stage (parameters, cipher, level, operation).
    pub choice: String,
    /// The input: `sample`, or an input chosen to hurt (`no-cut`, `zeros`,
    /// `incompressible`, `repetitive`), or what an operation works on (`files`:
    /// the sample's files read again from the file system).
    pub input: String,
    /// The unit of work: `B` (bytes) or the operation counted.
    pub unit: String,
    /// On one core.
    pub per_core: Figure,
    /// On all cores.
    pub all_cores: Figure,
    /// For compression: stored bytes over bytes read.
    pub ratio: Option<f64>,
    /// What to know about the figure.
    pub note: Option<String>,
}

/// What deduplication finds in the sample with one set of chunk sizes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DedupRow {
    /// Chunk sizes, `min/avg/max`.
    pub chunker: String,
    /// The sizes.
    pub params: ChunkerParams,
    /// Chunks cut.
    pub chunks: u64,
    /// Distinct chunks.
    pub unique_chunks: u64,
    /// Bytes of the distinct chunks.
    pub unique_bytes: u64,
}

/// The machine measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// Threads used for the all-cores figures.
    pub threads: usize,
    /// Whether the CPU has AES instructions (and carry-less multiplication).
    pub aes_instructions: bool,
    /// The cipher coffer picks on this machine (not an `init` setting).
    pub cipher: String,
    /// Cores the all-cores runs actually got: the median, over the byte stages on
    /// the sample, of their all-cores rate over their one-core rate. Below
    /// `threads` when other programs share the machine.
    pub effective_cores: f64,
}

/// Everything one `coffer bench` run measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BenchReport {
    /// The machine.
    pub machine: Machine,
    /// The sample.
    pub sample: SampleInfo,
    /// Timed runs per stage figure.
    pub runs: usize,
    /// Timed runs per pipeline figure.
    pub pipeline_runs: usize,
    /// Whether this was a quick run.
    pub quick: bool,
    /// The key derivation cost timed.
    pub kdf: ScryptParams,
    /// Each stage alone.
    pub stages: Vec<StageRow>,
    /// Deduplication in the sample, per chunk size set.
    pub dedup: Vec<DedupRow>,
    /// The whole pipeline.
    pub pipeline: Vec<PipelineRow>,
    /// A real backup of the sample's whole directories (none for generated
    /// data, or when no directory was read whole).
    #[serde(default)]
    pub walk: Option<WalkRow>,
    /// The settings recommended.
    pub recommendation: Recommendation,
    /// How long a backup of data like the sample would take.
    pub projection: Projection,
    /// Storage, when measured.
    pub storage: Option<StorageReport>,
    /// Seconds the measurement took.
    pub seconds: f64,
}

/// What the measuring functions share.
#[derive(Clone, Copy)]
pub(crate) struct Ctx<'a> {
    pub opts: &'a BenchOptions,
    pub pool: &'a rayon::ThreadPool,
    pub single: &'a rayon::ThreadPool,
    pub threads: usize,
    pub runs: usize,
    pub pipeline_runs: usize,
    pub target_run: f64,
    pub ratio_bytes: f64,
    /// Most bytes a byte stage's run covers (see `Ctx::bytes_stage`).
    pub stage_bytes: f64,
    pub adversarial_len: usize,
    /// Which pass over the measurements this is (see [`run`]).
    pub pass: usize,
    pub progress: &'a (dyn Fn(&str) + Sync),
}

impl Ctx<'_> {
    pub(crate) fn say(&self, what: &str) {
        (self.progress)(what)
    }

    /// Whether figures start with an untimed warm-up run, and one-off
    /// measurements (compression ratios) are made: in the first pass.
    pub(crate) fn warm_up(&self) -> bool {
        self.pass == 0
    }
}

/// What the module's tests need to build a [`Ctx`]: the options and the pools.
#[cfg(test)]
pub(crate) struct TestCtx {
    opts: BenchOptions,
    pool: rayon::ThreadPool,
    single: rayon::ThreadPool,
    threads: usize,
}

#[cfg(test)]
impl TestCtx {
    /// Quick options on `threads` threads.
    pub(crate) fn new(threads: usize) -> TestCtx {
        TestCtx { opts: BenchOptions::quick(threads), pool: pool(threads).unwrap(), single: pool(1).unwrap(), threads }
    }

    /// A context timing `runs` runs per stage figure, `pipeline_runs` per
    /// pipeline figure, each stage run lasting at least `target_run` seconds.
    pub(crate) fn ctx(&self, runs: usize, pipeline_runs: usize, target_run: f64) -> Ctx<'_> {
        fn quiet(_: &str) {}
        Ctx {
            opts: &self.opts,
            pool: &self.pool,
            single: &self.single,
            threads: self.threads,
            runs,
            pipeline_runs,
            target_run,
            ratio_bytes: 1e5,
            stage_bytes: 1e6,
            adversarial_len: 1 << 16,
            pass: 0,
            progress: &quiet,
        }
    }
}

fn pool(threads: usize) -> Result<rayon::ThreadPool> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| Error::InvalidInput(format!("cannot start {threads} measuring threads: {e}")))
}

/// Chunks of `files` cut with `params`.
pub(crate) fn chunk_all(files: &[Vec<u8>], params: ChunkerParams) -> Vec<&[u8]> {
    let chunker = Chunker::new(&stages::chunker_key(), params);
    files
        .iter()
        .flat_map(|f| {
            let mut start = 0;
            chunker
                .chunk_lengths(f)
                .into_iter()
                .map(|n| {
                    let c = &f[start..start + n];
                    start += n;
                    c
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Deduplication of `files` with `params` (on all cores).
fn dedup_row(ctx: &Ctx<'_>, files: &[Vec<u8>], params: ChunkerParams) -> DedupRow {
    let chunks = ctx.pool.install(|| {
        let chunker = Chunker::new(&stages::chunker_key(), params);
        files
            .par_iter()
            .flat_map_iter(|f| {
                let mut start = 0;
                chunker
                    .chunk_lengths(f)
                    .into_iter()
                    .map(|n| {
                        let h = blake3::hash(&f[start..start + n]);
                        start += n;
                        (*h.as_bytes(), n as u64)
                    })
                    .collect::<Vec<_>>()
            })
            .collect::<Vec<_>>()
    });
    let mut seen = HashSet::new();
    let (mut unique_chunks, mut unique_bytes) = (0, 0);
    for (h, n) in &chunks {
        if seen.insert(*h) {
            unique_chunks += 1;
            unique_bytes += n;
        }
    }
    DedupRow {
        chunker: stages::describe_chunker(&params),
        params,
        chunks: chunks.len() as u64,
        unique_chunks,
        unique_bytes,
    }
}

/// The cores the all-cores runs actually got: the median, over the byte stages
/// on the sample, of all-cores rate over one-core rate.
pub(crate) fn effective_cores(rows: &[StageRow], threads: usize) -> f64 {
    let speedups: Vec<f64> = rows
        .iter()
        .filter(|r| r.unit == stages::BYTES && r.input == "sample" && r.per_core.rate.mean > 0.0)
        .map(|r| r.all_cores.rate.mean / r.per_core.rate.mean)
        .collect();
    percentile(&speedups, 0.5).unwrap_or(1.0).clamp(0.5, threads as f64)
}

/// One pass over the stage measurements.
fn measure_stages(ctx: &Ctx<'_>, sample: &Sample, chunks: &[&[u8]]) -> Vec<StageRow> {
    let mut rows = Vec::new();
    stages::chunkers(ctx, &sample.files, &mut rows);
    stages::hashes(ctx, chunks, &mut rows);
    stages::aead(ctx, chunks, &mut rows);
    stages::compression(ctx, chunks, &mut rows);
    stages::signatures(ctx, &mut rows);
    stages::merkle_tree(ctx, &mut rows);
    stages::file_reads(ctx, sample, ctx.opts.cold, &mut rows);
    rows
}

/// One pass over the pipeline measurements.
fn measure_pipelines(ctx: &Ctx<'_>, setup: pipeline::Setup, files: &[Vec<u8>]) -> Result<Vec<PipelineRow>> {
    let refs: Vec<&[u8]> = files.iter().map(Vec::as_slice).collect();
    let mut pipe = Vec::new();
    for config in [Config::DedupOnly, Config::Compress, Config::Encrypt, Config::CompressEncrypt, Config::Coffer] {
        let per_core = matches!(config, Config::CompressEncrypt | Config::Coffer);
        // A second pass stores nothing, so it is the same work whatever is
        // switched on: measured for dedup only and for coffer's saver.
        let second = matches!(config, Config::DedupOnly | Config::Coffer);
        pipe.extend(pipeline::measure_config(ctx, config, setup, "sample", &refs, per_core, second)?);
    }
    let tiny = data::tiny_files(if ctx.opts.quick { 512 } else { 4096 }, 1024);
    let tiny: Vec<&[u8]> = tiny.iter().map(Vec::as_slice).collect();
    for config in [Config::CompressEncrypt, Config::Coffer] {
        pipe.extend(pipeline::measure_config(ctx, config, setup, "tiny files", &tiny, false, true)?);
    }
    let nocut = data::no_cut(&stages::chunker_key(), ctx.opts.chunker, ctx.adversarial_len);
    pipe.extend(pipeline::measure_config(ctx, Config::Coffer, setup, "no-cut", &[&nocut], false, true)?);
    Ok(pipe)
}

/// The rows of the first pass, each figure with the runs of every pass.
fn merge_passes(passes: Vec<(Vec<StageRow>, Vec<PipelineRow>)>) -> (Vec<StageRow>, Vec<PipelineRow>) {
    let mut passes = passes.into_iter();
    let Some((mut rows, mut pipe)) = passes.next() else {
        return (Vec::new(), Vec::new());
    };
    for (more_rows, more_pipe) in passes {
        for (r, m) in rows.iter_mut().zip(more_rows) {
            r.per_core = Figure::merged([&r.per_core, &m.per_core]);
            r.all_cores = Figure::merged([&r.all_cores, &m.all_cores]);
        }
        for (r, m) in pipe.iter_mut().zip(more_pipe) {
            r.all_cores = Figure::merged([&r.all_cores, &m.all_cores]);
            if let (Some(a), Some(b)) = (&r.per_core, &m.per_core) {
                r.per_core = Some(Figure::merged([a, b]));
            }
        }
    }
    (rows, pipe)
}

/// Measures everything on `sample`. `storage` is a storage measurement made
/// before (see [`measure_storage`]), for the projection to weigh; `progress` is
/// told which measurement starts.
pub fn run(
    sample: &Sample,
    opts: &BenchOptions,
    storage: Option<StorageReport>,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<BenchReport> {
    if sample.is_empty() {
        return Err(Error::InvalidInput(
            "the sample holds no data: give files or directories with regular files in them, or no path \
             for generated data"
                .into(),
        ));
    }
    opts.chunker.validate().map_err(Error::InvalidInput)?;
    let start = std::time::Instant::now();
    let threads = opts.threads.max(1);
    let (all, single) = (pool(threads)?, pool(1)?);
    let ctx = Ctx {
        opts,
        pool: &all,
        single: &single,
        threads,
        runs: opts.runs.max(1),
        pipeline_runs: opts.pipeline_runs.max(1),
        target_run: opts.target_run_seconds.max(1e-4),
        ratio_bytes: if opts.quick { 1.0 * 1048576.0 } else { 4.0 * 1048576.0 },
        stage_bytes: if opts.quick { 16.0 * 1048576.0 } else { 64.0 * 1048576.0 },
        adversarial_len: if opts.quick { 4 << 20 } else { 16 << 20 },
        pass: 0,
        progress,
    };
    let files = &sample.files;
    let chunks = chunk_all(files, opts.chunker);

    let setup = pipeline::Setup { chunker: opts.chunker, level: opts.compression_level };
    let kdf_row = {
        let mut v = Vec::new();
        let seconds = stages::kdf(&ctx, opts.kdf, &mut v);
        (v, seconds)
    };
    // Every figure gets one timed run per pass over all of them (the pipeline
    // in the first `pipeline_runs` passes only), so that a figure's runs are
    // spread over the whole measurement: a moment when the machine is busy
    // elsewhere slows one run of many figures, not all runs of one.
    let mut passes: Vec<(Vec<StageRow>, Vec<PipelineRow>)> = Vec::new();
    for pass in 0..ctx.runs.max(ctx.pipeline_runs) {
        let c = Ctx { pass, runs: 1, pipeline_runs: 1, ..ctx };
        let rows = if pass < ctx.runs { measure_stages(&c, sample, &chunks) } else { Vec::new() };
        let pipe = if pass < ctx.pipeline_runs { measure_pipelines(&c, setup, files)? } else { Vec::new() };
        passes.push((rows, pipe));
    }
    let (mut rows, mut pipe) = merge_passes(passes);
    let at = rows.iter().position(|r| r.stage == "ed25519").unwrap_or(rows.len());
    rows.splice(at..at, kdf_row.0);
    let kdf_seconds = kdf_row.1;
    stages::name_slowest_signature(&mut rows);

    ctx.say("deduplication per chunk size set");
    let dedup: Vec<DedupRow> =
        stages::chunker_sets(opts.chunker).into_iter().map(|p| dedup_row(&ctx, files, p)).collect();

    let walk = walk::measure_walk(&ctx, sample, setup)?;

    let effective_cores = effective_cores(&rows, threads);
    let beyond = advice::Beyond { kdf_seconds, walk: walk.as_ref() };
    let (recommendation, projection) =
        advice::advise(&ctx, sample, &rows, &dedup, &mut pipe, beyond, storage.as_ref())?;
    Ok(BenchReport {
        machine: Machine {
            threads,
            aes_instructions: Cipher::preferred() == Cipher::Aes256Gcm,
            cipher: stages::cipher_name(Cipher::preferred()).into(),
            effective_cores,
        },
        sample: sample.info.clone(),
        runs: ctx.runs,
        pipeline_runs: ctx.pipeline_runs,
        quick: opts.quick,
        kdf: opts.kdf,
        stages: rows,
        dedup,
        pipeline: pipe,
        walk,
        recommendation,
        projection,
        storage,
        seconds: start.elapsed().as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stage_row(choice: &str, secs: f64, note: Option<&str>) -> StageRow {
        StageRow {
            stage: "s".into(),
            choice: choice.into(),
            input: "sample".into(),
            unit: "B".into(),
            per_core: Figure::from_runs(&[(100.0, secs)]),
            all_cores: Figure::from_runs(&[(200.0, secs)]),
            ratio: None,
            note: note.map(Into::into),
        }
    }

    #[test]
    fn passes_merge_into_the_first_pass_rows_with_every_run() {
        let pass = |secs: f64| (vec![stage_row("a", secs, Some("first")), stage_row("b", 2.0 * secs, None)], vec![]);
        let mut second = pass(2.0);
        second.0[0].note = Some("later".into());
        let (rows, pipe) = merge_passes(vec![pass(1.0), second, pass(4.0)]);
        assert!(pipe.is_empty());
        assert_eq!(rows.len(), 2);
        // Each figure holds the runs of all three passes; the rest is the first pass's.
        assert_eq!(rows[0].per_core.runs, 3);
        assert_eq!(rows[0].per_core.seconds.p50, 2.0);
        assert_eq!(rows[0].per_core.seconds.max, 4.0);
        assert_eq!(rows[0].all_cores.rate.p50, 100.0);
        assert_eq!(rows[1].per_core.seconds.p50, 4.0);
        assert_eq!(rows[0].note.as_deref(), Some("first"));
        // Passes without rows (beyond `--runs`, pipeline only) add nothing.
        let (rows, _) = merge_passes(vec![pass(1.0), (vec![], vec![])]);
        assert_eq!(rows[0].per_core.runs, 1);
        assert!(merge_passes(vec![]).0.is_empty());
    }
}
