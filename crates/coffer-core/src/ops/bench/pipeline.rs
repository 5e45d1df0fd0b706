//! The whole backup pipeline on the sample, in memory, first pass (nothing
//! stored yet) and second pass (every blob already stored), in the
//! configurations that matter: deduplication only, with compression, with
//! encryption, both, and coffer's own blob saver into an in-memory repository.
//! See docs/design.md#coffer-bench.
//!
//! The first four are built from the primitives, because a repository always
//! encrypts: per file, the chunker cuts it while its content digest is computed
//! beside (as a backup does), and its chunks are, in parallel, hashed into blob
//! ids and looked up in a set of the ids stored; new ones are compressed with
//! coffer's policy and sealed into a pack in memory (one per thread, finished
//! and dropped at the pack size). The last row runs the real
//! [`BlobSaver`] on a [`MemBackend`]: pack spool files, the uploader thread and
//! index files included.

use std::cell::RefCell;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::Ctx;
use super::stats::{Figure, timed};
use crate::chunker::{Chunker, ChunkerParams};
use crate::compress;
use crate::crypto::{Cipher, Key, ScryptParams, blob_id};
use crate::error::Result;
use crate::format::config::DEFAULT_PACK_SIZE;
use crate::format::pack::{BlobType, COMPRESSION_NONE, COMPRESSION_ZSTD, PackBuilder};
use crate::id::Id;
use crate::repo::{BlobSaver, InitOptions, Repository};
use coffer_backend::{Backend, MemBackend};

/// One configuration of the pipeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Config {
    /// Chunk, digest, blob id, lookup.
    DedupOnly,
    /// And compress new blobs.
    Compress,
    /// And seal new blobs into packs, uncompressed.
    Encrypt,
    /// And compress, then seal.
    CompressEncrypt,
    /// coffer's blob saver into an in-memory repository.
    Coffer,
}

impl Config {
    /// The row's name.
    pub fn describe(self) -> &'static str {
        match self {
            Config::DedupOnly => "dedup only",
            Config::Compress => "dedup + compression",
            Config::Encrypt => "dedup + encryption",
            Config::CompressEncrypt => "dedup + compression + encryption",
            Config::Coffer => "coffer blob saver (all of it, in-memory repository)",
        }
    }
}

/// One measured row of the pipeline table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PipelineRow {
    /// What runs.
    pub config: Config,
    /// 1: nothing stored yet; 2: every blob already stored.
    pub pass: u8,
    /// `sample`, `tiny files` or `no-cut`.
    pub input: String,
    /// Chunker sizes, as `min/avg/max`.
    pub chunker: String,
    /// zstd level (0: none).
    pub level: i32,
    /// Files per run.
    pub files: u64,
    /// On all cores; units are bytes read.
    pub all_cores: Figure,
    /// On one core (a part of the input of about a core's share), where measured.
    pub per_core: Option<Figure>,
    /// Bytes the pass would store (packs and, for coffer's saver, index files).
    pub stored_bytes: u64,
    /// Blobs it stored.
    pub new_blobs: u64,
}

/// What one pass did.
#[derive(Clone, Copy, Debug, Default)]
struct PassOut {
    stored: u64,
    blobs: u64,
}

/// The settings of a pipeline.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Setup {
    pub chunker: ChunkerParams,
    pub level: i32,
}

thread_local! {
    /// This thread's open pack in the pipelines built from primitives.
    static PACK: RefCell<Option<PackBuilder>> = const { RefCell::new(None) };
}

/// Seals `payload` into this thread's pack, finishing it (header sealed, hashed)
/// and dropping it at the pack size. Returns the bytes it added.
fn seal_into_pack(data_key: &Key, id: Id, compression: u8, payload: &[u8], raw: usize) -> u64 {
    PACK.with(|cell| {
        let mut slot = cell.borrow_mut();
        let pack = slot.get_or_insert_with(|| {
            PackBuilder::new(data_key, 0, Cipher::preferred(), DEFAULT_PACK_SIZE as usize + (1 << 20))
        });
        let before = pack.len();
        let _ = pack.add(BlobType::Data, id, compression, payload, raw as u32);
        let added = pack.len() - before;
        if pack.len() >= u64::from(DEFAULT_PACK_SIZE) {
            let finished = slot.take().map(|p| p.finish().map(|f| f.len).unwrap_or(0));
            return added + finished.unwrap_or(0).saturating_sub(before + added);
        }
        added
    })
}

/// Finishes every thread's open pack; returns the bytes the pack trailers added.
fn finish_packs(pool: &rayon::ThreadPool) -> u64 {
    pool.broadcast(|_| {
        PACK.with(|cell| {
            cell.borrow_mut()
                .take()
                .map(|p| {
                    let before = p.len();
                    p.finish().map(|f| f.len - before).unwrap_or(0)
                })
                .unwrap_or(0)
        })
    })
    .into_iter()
    .sum()
}

/// One pass of a pipeline built from primitives over `files`, with the ids
/// already stored in `seen`.
fn primitive_pass(config: Config, setup: Setup, files: &[&[u8]], seen: &Mutex<HashSet<Id>>) -> PassOut {
    let chunker = Chunker::new(&super::stages::chunker_key(), setup.chunker);
    let id_key = Key([5; 32]);
    let data_key = Key([11; 32]);
    let compressing = matches!(config, Config::Compress | Config::CompressEncrypt) && setup.level > 0;
    let sealing = matches!(config, Config::Encrypt | Config::CompressEncrypt);
    let outs: Vec<PassOut> = files
        .par_iter()
        .map(|f| {
            let (_, out) = rayon::join(
                || blake3::hash(f),
                || {
                    let mut chunks = Vec::new();
                    let mut rest: &[u8] = f;
                    while !rest.is_empty() {
                        let n = chunker.cut(rest);
                        chunks.push(&rest[..n]);
                        rest = &rest[n..];
                    }
                    chunks
                        .par_iter()
                        .map(|c| {
                            let id = blob_id(&id_key, c);
                            if !seen.lock().unwrap_or_else(|e| e.into_inner()).insert(id) {
                                return PassOut::default();
                            }
                            let stored = |payload: Option<&[u8]>| match (payload, sealing) {
                                (Some(z), true) => seal_into_pack(&data_key, id, COMPRESSION_ZSTD, z, c.len()),
                                (None, true) => seal_into_pack(&data_key, id, COMPRESSION_NONE, c, c.len()),
                                (Some(z), false) => z.len() as u64,
                                (None, false) => c.len() as u64,
                            };
                            let stored = if compressing {
                                compress::with_compressed(c, setup.level, stored)
                            } else {
                                stored(None)
                            };
                            PassOut { stored, blobs: 1 }
                        })
                        .reduce(PassOut::default, add)
                },
            );
            out
        })
        .collect();
    outs.into_iter().fold(PassOut::default(), add)
}

fn add(a: PassOut, b: PassOut) -> PassOut {
    PassOut { stored: a.stored + b.stored, blobs: a.blobs + b.blobs }
}

/// A new in-memory repository with `setup`'s settings and a cheap key derivation.
pub(crate) fn mem_repo(setup: Setup) -> Result<Repository> {
    let be: Arc<dyn Backend> = Arc::new(MemBackend::new());
    let opts = InitOptions {
        chunker: setup.chunker,
        compression_level: setup.level,
        kdf: ScryptParams { log_n: 10, r: 8, p: 1 },
        ..InitOptions::default()
    };
    Repository::init(be, b"coffer bench", &opts)
}

/// One pass of coffer's blob saver over `files` into `repo`.
fn saver_pass(repo: &Repository, files: &[&[u8]]) -> Result<PassOut> {
    let saver = BlobSaver::new(repo);
    let chunker = repo.chunker().clone();
    files.par_iter().try_for_each(|f| {
        let (_, r) = rayon::join(
            || blake3::hash(f),
            || {
                let lens = chunker.chunk_lengths(f);
                let mut start = 0;
                let chunks: Vec<&[u8]> = lens
                    .iter()
                    .map(|&n| {
                        let c = &f[start..start + n];
                        start += n;
                        c
                    })
                    .collect();
                chunks.par_iter().try_for_each(|c| saver.save(BlobType::Data, c).map(|_| ()))
            },
        );
        r
    })?;
    let stats = saver.finish()?;
    Ok(PassOut { stored: stats.bytes_stored, blobs: stats.blobs })
}

/// First and second pass of `config` over `files` on `pool`, `runs` times each;
/// a run of the second pass (which stores nothing, so may be repeated) goes
/// over the files again until it has taken at least the seconds `second_pass`
/// gives (`None`: no second pass).
fn passes(
    config: Config,
    setup: Setup,
    files: &[&[u8]],
    pool: &rayon::ThreadPool,
    runs: usize,
    second_pass: Option<f64>,
) -> Result<(Figure, Figure, PassOut, PassOut)> {
    let bytes: f64 = files.iter().map(|f| f.len() as f64).sum();
    let (mut first, mut second) = (Vec::new(), Vec::new());
    let (mut out1, mut out2) = (PassOut::default(), PassOut::default());
    for _ in 0..runs.max(1) {
        let ((o1, s1), (o2, times, s2)) = if config == Config::Coffer {
            let repo = mem_repo(setup)?;
            let a = timed(|| pool.install(|| saver_pass(&repo, files)));
            let a = (a.0?, a.1);
            let b = match second_pass {
                Some(min) => repeated(min, || pool.install(|| saver_pass(&repo, files)))?,
                None => (PassOut::default(), 0, 0.0),
            };
            (a, b)
        } else {
            let seen = Mutex::new(HashSet::new());
            let a = timed(|| {
                let mut o = pool.install(|| primitive_pass(config, setup, files, &seen));
                o.stored += finish_packs(pool);
                o
            });
            let b = match second_pass {
                Some(min) => repeated(min, || Ok(pool.install(|| primitive_pass(config, setup, files, &seen))))?,
                None => (PassOut::default(), 0, 0.0),
            };
            (a, b)
        };
        first.push((bytes, s1));
        second.push((bytes * times as f64, s2));
        (out1, out2) = (o1, o2);
    }
    Ok((Figure::from_runs(&first), Figure::from_runs(&second), out1, out2))
}

/// Calls `pass` until at least `min_seconds` have gone by; returns what the
/// last call did, the calls made and the seconds taken.
fn repeated(min_seconds: f64, pass: impl Fn() -> Result<PassOut>) -> Result<(PassOut, u32, f64)> {
    let start = std::time::Instant::now();
    let mut calls = 0;
    loop {
        let out = pass()?;
        calls += 1;
        let secs = start.elapsed().as_secs_f64();
        if secs >= min_seconds || calls >= 1000 {
            return Ok((out, calls, secs));
        }
    }
}

/// Files from the start of `files` holding about `share` of their bytes.
fn share<'a>(files: &[&'a [u8]], share: f64) -> Vec<&'a [u8]> {
    let total: f64 = files.iter().map(|f| f.len() as f64).sum();
    let mut got = 0.0;
    let mut out = Vec::new();
    for f in files {
        if got >= total * share && !out.is_empty() {
            break;
        }
        got += f.len() as f64;
        out.push(*f);
    }
    out
}

/// Measures one configuration on `files`, the first pass and, when `second`,
/// the second, on all cores and, when `per_core`, on one core over a core's
/// share of the files.
pub(crate) fn measure_config(
    ctx: &Ctx<'_>,
    config: Config,
    setup: Setup,
    input: &str,
    files: &[&[u8]],
    per_core: bool,
    second: bool,
) -> Result<Vec<PipelineRow>> {
    ctx.say(&format!("pipeline: {}, {input}", config.describe()));
    // A second pass lasts a few milliseconds on small inputs: each run repeats it
    // for at least four target run times.
    let second = second.then_some(4.0 * ctx.target_run);
    let (all1, all2, o1, o2) = passes(config, setup, files, ctx.pool, ctx.pipeline_runs, second)?;
    let (mut pc1, mut pc2) = (None, None);
    if per_core {
        let part = share(files, 1.0 / ctx.threads as f64);
        let (a, b, _, _) = passes(config, setup, &part, ctx.single, ctx.pipeline_runs, second)?;
        (pc1, pc2) = (Some(a), Some(b));
    }
    let row = |pass, all_cores, per_core, o: PassOut| PipelineRow {
        config,
        pass,
        input: input.into(),
        chunker: super::stages::describe_chunker(&setup.chunker),
        level: if matches!(config, Config::DedupOnly | Config::Encrypt) { 0 } else { setup.level },
        files: files.len() as u64,
        all_cores,
        per_core,
        stored_bytes: o.stored,
        new_blobs: o.blobs,
    };
    let mut rows = vec![row(1, all1, pc1, o1)];
    if second.is_some() {
        rows.push(row(2, all2, pc2, o2));
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> Setup {
        Setup { chunker: ChunkerParams { min_size: 2 << 10, avg_size: 8 << 10, max_size: 32 << 10 }, level: 3 }
    }

    #[test]
    fn a_repeated_pass_lasts_at_least_its_minimum_and_counts_its_calls() {
        let calls = std::sync::atomic::AtomicU32::new(0);
        let pass = || {
            calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            std::thread::sleep(std::time::Duration::from_millis(2));
            Ok(PassOut { stored: 0, blobs: 0 })
        };
        let (_, n, secs) = repeated(0.01, pass).unwrap();
        assert!(n >= 2 && secs >= 0.01, "{n} calls in {secs} s");
        assert_eq!(n, calls.load(std::sync::atomic::Ordering::Relaxed));
        // No minimum: one call.
        assert_eq!(repeated(0.0, pass).unwrap().1, 1);
        // A failing pass stops the run with its error.
        assert!(repeated(1.0, || Err(crate::error::Error::InvalidInput("no".into()))).is_err());
    }

    #[test]
    fn passes_store_once_and_find_everything_the_second_time() {
        let text = super::super::data::text_like(300_000, 1);
        let noise = super::super::data::incompressible(200_000, 2);
        let files: Vec<&[u8]> = vec![&text, &noise, &text];
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        let mut stored = Vec::new();
        for config in [Config::DedupOnly, Config::Compress, Config::Encrypt, Config::CompressEncrypt, Config::Coffer] {
            let (a, b, o1, o2) = passes(config, setup(), &files, &pool, 1, Some(0.0)).unwrap();
            assert!(a.rate.p50 > 0.0 && b.rate.p50 > 0.0);
            assert!(o1.blobs > 0, "{config:?}");
            assert_eq!(o2.blobs, 0, "{config:?}: second pass stored blobs");
            stored.push(o1.stored);
        }
        // Deduplication: the second copy of the text costs nothing.
        assert_eq!(stored[0], 500_000);
        // Compression shrinks the text; encryption adds tags and pack headers.
        assert!(stored[1] < 400_000);
        assert!(stored[2] > 500_000 && stored[2] < 520_000);
        assert!(stored[3] > stored[1] && stored[3] < 420_000);
        // coffer's saver stores about what the primitives do, plus its index file.
        assert!(stored[4] >= stored[3] && stored[4] < stored[3] + 20_000, "{} against {}", stored[4], stored[3]);
    }
}
