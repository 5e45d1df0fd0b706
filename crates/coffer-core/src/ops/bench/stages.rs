//! Each backup stage measured alone, per core and on all cores: chunking,
//! content digest, blob id, AEAD, zstd (with the incompressible-data probe),
//! scrypt, Ed25519 and the Merkle tree, on the sample and on inputs chosen to
//! hurt. See docs/design.md#coffer-bench.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use rayon::prelude::*;

use super::data;
use super::stats::{Figure, measure_at_least, timed};
use super::{Ctx, StageRow};
use crate::chunker::{Chunker, ChunkerParams};
use crate::compress;
use crate::crypto::sign::{SIGNATURE_LEN, SigningKey};
use crate::crypto::{AeadKey, Cipher, Key, Nonce, ScryptParams, blob_id, scrypt_kdf};
use crate::merkle;

/// Unit of the byte stages.
pub const BYTES: &str = "B";

/// The chunker keys and parameters used throughout.
pub(crate) fn chunker_key() -> Key {
    Key([0x42; 32])
}

/// Every `k`-th of `pieces` from the first, `k` their bytes over `bytes`
/// rounded up (all of them when they fit), so about `bytes`: spread over all
/// the pieces, so that a run sees a mix like the whole sample's, and chosen
/// without any timing, so that every run, and every invocation on the same
/// data, times the same bytes.
fn every_kth<'a>(pieces: &[&'a [u8]], bytes: f64) -> Vec<&'a [u8]> {
    let all = total(pieces);
    let k = if all <= bytes { 1 } else { ((all / bytes.max(1.0)).ceil() as usize).max(1) };
    pieces.iter().copied().step_by(k).collect()
}

fn total(pieces: &[&[u8]]) -> f64 {
    pieces.iter().map(|p| p.len() as f64).sum()
}

impl Ctx<'_> {
    /// Times `f` over [`every_kth`] of `pieces` up to the byte stages' budget
    /// (64 MiB, 16 MiB with `--quick`: all of the default sample): on one core,
    /// then on all cores.
    pub(crate) fn bytes_stage(&self, pieces: &[&[u8]], f: &(dyn Fn(&[u8]) + Sync)) -> (Figure, Figure) {
        self.fixed_bytes_stage(&every_kth(pieces, self.stage_bytes), f)
    }

    /// Times `f` over all of `pieces` in every run (the same work each time):
    /// on one core, then on all cores (each thread covers all of `pieces`).
    pub(crate) fn fixed_bytes_stage(&self, pieces: &[&[u8]], f: &(dyn Fn(&[u8]) + Sync)) -> (Figure, Figure) {
        let per_core = self.one_core(&|| {
            pieces.iter().for_each(|p| f(p));
            total(pieces)
        });
        let all = self.all_cores(&|| {
            pieces.iter().for_each(|p| f(p));
            total(pieces)
        });
        (per_core, all)
    }

    /// Times `f(i)` called for many `i`: on one core, then on all cores.
    pub(crate) fn ops_stage(&self, f: &(dyn Fn(usize) + Sync)) -> (Figure, Figure) {
        // Sized from up to 4 calls, fewer when one takes a good part of a run.
        let start = Instant::now();
        let mut probed = 0;
        while probed < 4 && start.elapsed().as_secs_f64() < self.target_run / 4.0 {
            f(probed);
            probed += 1;
        }
        let secs = start.elapsed().as_secs_f64();
        let n = ((probed as f64 / secs.max(1e-9)) * self.target_run).clamp(1.0, 1e7) as usize;
        let per_core = self.one_core(&|| {
            (0..n).for_each(f);
            n as f64
        });
        let all = self.all_cores(&|| {
            (0..n).for_each(f);
            n as f64
        });
        (per_core, all)
    }

    /// The one-core figure of `work`, on the one-thread pool: runs of at
    /// least the target run time, after an untimed one in the first pass.
    fn one_core(&self, work: &(dyn Fn() -> f64 + Sync)) -> Figure {
        self.single.install(|| measure_at_least(self.runs, self.target_run, self.warm_up(), |_| work()))
    }

    /// The all-cores figure of `work`: every thread of the all-cores pool makes
    /// one untimed run (in the first pass) and then the timed runs, all within
    /// one call on the pool, a run calling `work` again and again until it has
    /// worked the target run time; run `r`'s rate is the sum of the threads'
    /// rates in their run `r` (each thread's units over its own time; the run's
    /// seconds are its units over that sum). A thread done with its runs goes on
    /// working, untimed, until every thread is done. So the figure is what the
    /// cores achieve together with all of them busy: not how evenly a few large
    /// pieces split between threads, nor how fast threads are woken, nor one
    /// thread's last call running on alone (each of these made the same figure
    /// of two invocations differ by 25% to 100%).
    fn all_cores(&self, work: &(dyn Fn() -> f64 + Sync)) -> Figure {
        let runs = self.runs.max(1);
        let done = AtomicUsize::new(0);
        let threads = self.pool.broadcast(|b| {
            let run = || -> (f64, f64) {
                let start = Instant::now();
                let mut units = work();
                // A bound on the calls, for work that does nothing.
                for _ in 0..1_000_000 {
                    if start.elapsed().as_secs_f64() >= self.target_run {
                        break;
                    }
                    units += work();
                }
                (units, start.elapsed().as_secs_f64().max(1e-9))
            };
            if self.warm_up() {
                run();
            }
            let timed: Vec<(f64, f64)> = (0..runs).map(|_| run()).collect();
            done.fetch_add(1, Ordering::AcqRel);
            for _ in 0..1_000_000 {
                if done.load(Ordering::Acquire) >= b.num_threads() {
                    break;
                }
                work();
            }
            timed
        });
        let runs: Vec<(f64, f64)> = (0..runs)
            .map(|r| {
                let units: f64 = threads.iter().map(|t| t[r].0).sum();
                let rate: f64 = threads.iter().map(|t| t[r].0 / t[r].1).sum();
                (units, units / rate.max(1e-12))
            })
            .collect();
        Figure::from_runs(&runs)
    }

    fn row(&self, stage: &str, choice: &str, input: &str, unit: &str, figs: (Figure, Figure)) -> StageRow {
        StageRow {
            stage: stage.into(),
            choice: choice.into(),
            input: input.into(),
            unit: unit.into(),
            per_core: figs.0,
            all_cores: figs.1,
            ratio: None,
            note: None,
        }
    }
}

/// Pieces of at most `max` bytes covering `files`.
pub(crate) fn segments(files: &[Vec<u8>], max: usize) -> Vec<&[u8]> {
    files.iter().flat_map(|f| f.chunks(max.max(1))).collect()
}

/// The chunk candidates the command compares: smaller, the configured ones, larger.
pub fn chunker_sets(configured: ChunkerParams) -> Vec<ChunkerParams> {
    let mut sets = vec![
        ChunkerParams { min_size: 256 << 10, avg_size: 512 << 10, max_size: 2 << 20 },
        ChunkerParams::default(),
        ChunkerParams { min_size: 1 << 20, avg_size: 2 << 20, max_size: 8 << 20 },
    ];
    if !sets.contains(&configured) && configured.validate().is_ok() {
        sets.push(configured);
    }
    sets
}

/// Describes chunker parameters: `512K/1M/4M`.
pub fn describe_chunker(p: &ChunkerParams) -> String {
    format!("{}/{}/{}", size_label(p.min_size), size_label(p.avg_size), size_label(p.max_size))
}

/// A chunk size as the chunker sets name it: `512K`, `1M`.
fn size_label(v: u32) -> String {
    if v >= 1 << 20 && v.is_multiple_of(1 << 20) {
        format!("{}M", v >> 20)
    } else if v >= 1 << 10 && v.is_multiple_of(1 << 10) {
        format!("{}K", v >> 10)
    } else {
        v.to_string()
    }
}

/// The zstd levels compared.
pub fn zstd_levels(quick: bool) -> Vec<i32> {
    if quick { vec![1, 3, 19] } else { vec![1, 3, 6, 9, 19] }
}

/// Chunker stage: each parameter set on the sample, on data that never yields
/// a boundary, and on zeros.
pub(crate) fn chunkers(ctx: &Ctx<'_>, files: &[Vec<u8>], out: &mut Vec<StageRow>) {
    let key = chunker_key();
    for params in chunker_sets(ctx.opts.chunker) {
        let choice = describe_chunker(&params);
        ctx.say(&format!("chunker {choice}"));
        let chunker = Chunker::new(&key, params);
        let f = |p: &[u8]| {
            std::hint::black_box(chunker.chunk_lengths(p).len());
        };
        let seg = (params.max_size as usize * 2).max(8 << 20);
        let pieces = every_kth(&segments(files, seg), ctx.stage_bytes);
        let mut r = ctx.row("chunker", &choice, "sample", BYTES, ctx.fixed_bytes_stage(&pieces, &f));
        r.note = unscanned_note(&pieces, params.min_size);
        out.push(r);
        let adv_len = ctx.adversarial_len.max(2 * params.max_size as usize);
        let nocut = [data::no_cut(&key, params, adv_len)];
        let pieces = segments(&nocut, seg);
        let mut r = ctx.row("chunker", &choice, "no-cut", BYTES, ctx.bytes_stage(&pieces, &f));
        r.note = Some("every chunk reaches the maximum size".into());
        out.push(r);
        let zeros = [vec![0u8; adv_len]];
        let pieces = segments(&zeros, seg);
        out.push(ctx.row("chunker", &choice, "zeros", BYTES, ctx.bytes_stage(&pieces, &f)));
    }
}

/// What a chunker figure on the sample must say when files at or below the
/// minimum chunk size hold some of its bytes: each such file is one chunk, and
/// the chunker reads none of it, so the rate counts bytes it did not scan.
fn unscanned_note(pieces: &[&[u8]], min_size: u32) -> Option<String> {
    let unscanned: f64 = pieces.iter().filter(|p| p.len() <= min_size as usize).map(|p| p.len() as f64).sum();
    let min = size_label(min_size);
    match unscanned / total(pieces).max(1.0) {
        0.0 => None,
        share if share >= 1.0 => {
            Some(format!("every file is at or below the {min} minimum: one chunk each, none scanned"))
        }
        share => Some(format!(
            "{:.0}% of the bytes are in files at or below the {min} minimum: one chunk each, not scanned",
            100.0 * share
        )),
    }
}

/// Hash stages: the file content digest (BLAKE3) and the blob id (keyed BLAKE3).
pub(crate) fn hashes(ctx: &Ctx<'_>, chunks: &[&[u8]], out: &mut Vec<StageRow>) {
    ctx.say("hashes");
    let f = |p: &[u8]| {
        std::hint::black_box(blake3::hash(p));
    };
    out.push(ctx.row("file digest", "blake3", "sample", BYTES, ctx.bytes_stage(chunks, &f)));
    let key = Key([5; 32]);
    let f = |p: &[u8]| {
        std::hint::black_box(blob_id(&key, p));
    };
    out.push(ctx.row("blob id", "keyed blake3", "sample", BYTES, ctx.bytes_stage(chunks, &f)));
}

/// The AEAD stage: both ciphers sealing the sample's chunks.
pub(crate) fn aead(ctx: &Ctx<'_>, chunks: &[&[u8]], out: &mut Vec<StageRow>) {
    for cipher in [Cipher::Aes256Gcm, Cipher::ChaCha20Poly1305] {
        let name = cipher_name(cipher);
        ctx.say(&format!("aead {name}"));
        let k = AeadKey::new(cipher, &Key([9; 32]));
        let n = std::sync::atomic::AtomicU64::new(0);
        let f = |p: &[u8]| {
            let c = n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            std::hint::black_box(k.seal(Nonce::new(0, c), b"", p));
        };
        let mut r = ctx.row("aead", name, "sample", BYTES, ctx.bytes_stage(chunks, &f));
        if cipher == Cipher::preferred() {
            r.note = Some("what this machine's repositories use".into());
        }
        out.push(r);
    }
}

/// The cipher's name as `init` and the design document write it.
pub fn cipher_name(c: Cipher) -> &'static str {
    match c {
        Cipher::Aes256Gcm => "aes-256-gcm",
        Cipher::ChaCha20Poly1305 => "chacha20-poly1305",
    }
}

/// Stored bytes over read bytes of `chunks` compressed at `level` under
/// coffer's policy (probe, and kept only when smaller), on all cores; measured
/// in the first pass only (later passes' rows are merged into the first's).
fn ratio(ctx: &Ctx<'_>, chunks: &[&[u8]], level: i32) -> Option<f64> {
    if !ctx.warm_up() {
        return None;
    }
    let stored: f64 = ctx.pool.install(|| {
        chunks.par_iter().map(|c| compress::with_compressed(c, level, |z| z.map_or(c.len(), <[u8]>::len) as f64)).sum()
    });
    Some(stored / total(chunks).max(1.0))
}

/// Slices of the chunks, about `bytes` in all: the middle of every chunk, at
/// least 64 KiB (so the probe runs on it as on a whole chunk) and at most the
/// chunk, so the compression ratio measured on the slices follows the sample's
/// mix even when the chunks are few and large; when the chunks are too many for
/// 64 KiB of each, the [`fixed_slices`] of every `k`-th chunk instead (a sample
/// of small files would otherwise be compressed nearly whole at every level).
pub(crate) fn spread<'a>(chunks: &[&'a [u8]], bytes: f64) -> Vec<&'a [u8]> {
    let all = total(chunks);
    if all <= bytes || chunks.is_empty() {
        return chunks.to_vec();
    }
    if bytes / (chunks.len() as f64) < (64 << 10) as f64 {
        return fixed_slices(chunks, bytes);
    }
    let each = (bytes / chunks.len() as f64) as usize;
    chunks
        .iter()
        .map(|c| {
            let n = each.min(c.len());
            let start = (c.len() - n) / 2;
            &c[start..start + n]
        })
        .collect()
}

/// Bytes of [`fixed_slices`] per run for `level`: about 10 to 250 ms on one core
/// of a machine of 2026, whatever the timing of this run.
fn fixed_bytes(level: i32, quick: bool) -> f64 {
    let kib = match level {
        ..=5 => 4096.0,
        6..=9 => 1024.0,
        10..=15 => 512.0,
        _ => 256.0,
    };
    kib * 1024.0 / if quick { 2.0 } else { 1.0 }
}

/// About `bytes` of slices of the chunks, the same on every call with the same
/// chunks: the middle 64 KiB (at most) of each chunk, then every `k`-th of
/// those slices, `k` chosen so that they add up to about `bytes`. Spread over
/// the whole sample, and independent of any timing, so that two runs of the
/// command on the same data compress the same bytes.
pub(crate) fn fixed_slices<'a>(chunks: &[&'a [u8]], bytes: f64) -> Vec<&'a [u8]> {
    const SLICE: usize = 64 << 10;
    let slices: Vec<&[u8]> = chunks
        .iter()
        .filter(|c| !c.is_empty())
        .map(|c| {
            let n = SLICE.min(c.len());
            let start = (c.len() - n) / 2;
            &c[start..start + n]
        })
        .collect();
    let all = total(&slices);
    if all <= bytes {
        return slices;
    }
    let k = ((all / bytes.max(1.0)).floor() as usize).max(1);
    slices.into_iter().step_by(k).collect()
}

/// The compression stage: each level on the sample (with the ratio it reaches on
/// a common spread of the sample's chunks), the probe, and the hard cases.
pub(crate) fn compression(ctx: &Ctx<'_>, chunks: &[&[u8]], out: &mut Vec<StageRow>) {
    let subset = spread(chunks, ctx.ratio_bytes);
    let subset_len = total(&subset);
    let mut levels = zstd_levels(ctx.opts.quick);
    if ctx.opts.compression_level > 0 && !levels.contains(&ctx.opts.compression_level) {
        levels.push(ctx.opts.compression_level);
        levels.sort_unstable();
    }
    for level in levels {
        ctx.say(&format!("zstd level {level}"));
        let f = |p: &[u8]| {
            std::hint::black_box(compress::with_compressed(p, level, |z| z.map(<[u8]>::len)));
        };
        let slices = fixed_slices(chunks, fixed_bytes(level, ctx.opts.quick));
        let timed_on = format!("; timed on the same {:.2} MiB of slices every run", total(&slices) / 1048576.0);
        let figs = ctx.fixed_bytes_stage(&slices, &f);
        let mut r = ctx.row("zstd", &format!("level {level}"), "sample", BYTES, figs);
        r.ratio = ratio(ctx, &subset, level);
        r.note = Some(format!(
            "ratio (stored/read) on {:.1} MiB taken from across the sample{timed_on}",
            subset_len / 1048576.0
        ));
        out.push(r);
    }
    ctx.say("zstd hard cases");
    let n = ctx.adversarial_len;
    let noise = [data::incompressible(n, 11)];
    let noise = segments(&noise, 1 << 20);
    let rep = [data::repetitive(n)];
    let rep = segments(&rep, 1 << 20);
    let probe = |p: &[u8]| {
        std::hint::black_box(compress::worth_compressing(p));
    };
    let mut r = ctx.row("zstd probe", "4 x 4 KiB at level 1", "sample", BYTES, ctx.bytes_stage(chunks, &probe));
    let skipped = chunks.iter().filter(|c| !compress::worth_compressing(c)).map(|c| c.len() as f64).sum::<f64>();
    r.note = Some(format!("skips {:.0}% of the sample's bytes", 100.0 * skipped / total(chunks).max(1.0)));
    out.push(r);
    for level in [3, 19] {
        let f = |p: &[u8]| {
            std::hint::black_box(compress::with_compressed(p, level, |z| z.map(<[u8]>::len)));
        };
        let mut r = ctx.row("zstd", &format!("level {level}"), "incompressible", BYTES, ctx.bytes_stage(&noise, &f));
        r.ratio = ratio(ctx, &noise, level);
        r.note = Some("the probe skips it".into());
        out.push(r);
        let mut r = ctx.row("zstd", &format!("level {level}"), "repetitive", BYTES, ctx.bytes_stage(&rep, &f));
        r.ratio = ratio(ctx, &rep, level);
        out.push(r);
    }
    let raw = |p: &[u8]| {
        std::hint::black_box(zstd::bulk::compress(p, 3).map(|z| z.len()).unwrap_or(0));
    };
    let mut r = ctx.row("zstd", "level 3, no probe", "incompressible", BYTES, ctx.bytes_stage(&noise, &raw));
    r.note = Some("what the probe saves".into());
    out.push(r);
}

/// scrypt at the configured cost: one derivation per run on one core, one per
/// core at once on all cores.
pub(crate) fn kdf(ctx: &Ctx<'_>, params: ScryptParams, out: &mut Vec<StageRow>) -> f64 {
    ctx.say("scrypt");
    let runs = if ctx.opts.quick { 1 } else { ctx.runs.min(2) };
    let derive = || {
        std::hint::black_box(scrypt_kdf(b"coffer bench passphrase", &[7; 32], params).is_ok());
    };
    let mut one = Vec::new();
    for _ in 0..runs {
        let (_, s) = timed(derive);
        one.push((1.0, s));
    }
    let mut all = Vec::new();
    for _ in 0..runs {
        let (_, s) = timed(|| ctx.pool.install(|| (0..ctx.threads).into_par_iter().for_each(|_| derive())));
        all.push((ctx.threads as f64, s));
    }
    let per_core = Figure::from_runs(&one);
    let seconds = per_core.seconds.p50;
    let mut r = ctx.row(
        "scrypt",
        &format!("log_n {} r {} p {}", params.log_n, params.r, params.p),
        "passphrase",
        "derivations",
        (per_core, Figure::from_runs(&all)),
    );
    r.note = Some(format!("{:.0} ms per repository opened", seconds * 1000.0));
    out.push(r);
    seconds
}

/// The group order L, little-endian.
const L: [u8; 32] = [
    0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9, 0xde, 0x14, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10,
];

/// Ed25519: signing, and verifying valid and invalid signatures of each kind,
/// the slowest invalid one named.
pub(crate) fn signatures(ctx: &Ctx<'_>, out: &mut Vec<StageRow>) {
    ctx.say("ed25519");
    let key = SigningKey::from_seed(&[0x42; 32]);
    let public = key.public();
    let msg = data::incompressible(256, 1);
    let sig = key.sign(&msg);
    out.push(ctx.row(
        "ed25519",
        "sign",
        "256-byte message",
        "signatures",
        ctx.ops_stage(&|_| {
            std::hint::black_box(key.sign(&msg));
        }),
    ));
    let mut flipped = sig;
    flipped[32] ^= 1;
    let mut random: [u8; SIGNATURE_LEN] = data::incompressible(SIGNATURE_LEN, 2).try_into().unwrap_or([0; 64]);
    random[63] &= 0x0f;
    let mut s_plus_l = sig;
    let mut carry = 0u16;
    for i in 0..32 {
        let s = u16::from(sig[32 + i]) + u16::from(L[i]) + carry;
        s_plus_l[32 + i] = s as u8;
        carry = s >> 8;
    }
    let other = SigningKey::from_seed(&[0x43; 32]).public();
    let cases: [(&str, &crate::crypto::sign::PublicKey, [u8; 64], bool); 5] = [
        ("valid", &public, sig, true),
        ("invalid: one bit of S flipped", &public, flipped, false),
        ("invalid: random R, S below L", &public, random, false),
        ("invalid: S + L (S out of range)", &public, s_plus_l, false),
        ("invalid: another key's signature", &other, sig, false),
    ];
    for (name, pk, s, expected) in cases {
        let ok = pk.verify(&msg, &s);
        let mut r = ctx.row(
            "ed25519",
            &format!("verify {name}"),
            "256-byte message",
            "verifications",
            ctx.ops_stage(&|_| {
                std::hint::black_box(pk.verify(&msg, &s));
            }),
        );
        if ok != expected {
            r.note = Some(format!("unexpected verdict: {ok}"));
        }
        out.push(r);
    }
}

/// Names the slowest invalid Ed25519 signature in `rows` against the valid one
/// (once the figures are final).
pub(crate) fn name_slowest_signature(rows: &mut [StageRow]) {
    let verify = |r: &StageRow| r.stage == "ed25519" && r.choice.starts_with("verify");
    let Some(valid) = rows.iter().find(|r| verify(r) && r.choice == "verify valid").map(|r| r.per_core.rate.p50) else {
        return;
    };
    let slow = rows
        .iter_mut()
        .filter(|r| verify(r) && r.choice.starts_with("verify invalid"))
        .min_by(|a, b| a.per_core.rate.p50.total_cmp(&b.per_core.rate.p50));
    if let Some(slow) = slow {
        let rel = valid / slow.per_core.rate.p50.max(1e-9);
        slow.note = Some(format!("slowest invalid input: {rel:.2} x the time of a valid one"));
    }
}

/// The Merkle tree: the root of a snapshot of many files, an inclusion proof, and its check.
pub(crate) fn merkle_tree(ctx: &Ctx<'_>, out: &mut Vec<StageRow>) {
    ctx.say("merkle");
    let n = if ctx.opts.quick { 10_000 } else { 100_000 };
    let leaves: Vec<merkle::Hash> = (0..n as u64).map(|i| merkle::leaf_hash(&i.to_le_bytes())).collect();
    let root = merkle::root(&leaves);
    let tree = format!("{n} leaves");
    out.push(ctx.row(
        "merkle",
        "root",
        &tree,
        "leaves",
        ctx.ops_stage_units(n as f64, &|_| {
            std::hint::black_box(merkle::root(&leaves));
        }),
    ));
    out.push(ctx.row(
        "merkle",
        "inclusion proof",
        &tree,
        "proofs",
        ctx.ops_stage(&|i| {
            std::hint::black_box(merkle::inclusion_proof(&leaves, (i * 7919) % n));
        }),
    ));
    // A few proofs (each costs a pass over the tree to make), verified in turn.
    const PROOFS: usize = 4;
    let proofs: Vec<Vec<merkle::Hash>> =
        (0..PROOFS).map(|i| merkle::inclusion_proof(&leaves, (i * 7919) % n).unwrap_or_default()).collect();
    out.push(ctx.row(
        "merkle",
        "verify proof",
        &tree,
        "verifications",
        ctx.ops_stage(&|i| {
            let j = i % PROOFS;
            let idx = (j * 7919) % n;
            std::hint::black_box(merkle::verify_inclusion(&leaves[idx], idx as u64, n as u64, &proofs[j], &root));
        }),
    ));
}

/// The unit sample-file reads are in; their input is `files`, not `sample`, so
/// that [`super::effective_cores`] weighs only the CPU stages.
const FILES: &str = "files";

/// Reading the sample's files again from the file system: with the page cache
/// warm, and with `cold` also after evicting every file from it before each
/// run (the eviction is not timed). At most 32 MiB (8 MiB when quick) of the
/// files, taken in the order they were read; generated samples have no files.
pub(crate) fn file_reads(ctx: &Ctx<'_>, sample: &data::Sample, cold: bool, out: &mut Vec<StageRow>) {
    let budget: u64 = if ctx.opts.quick { 8 << 20 } else { 32 << 20 };
    let mut picked: Vec<(&std::path::Path, u64)> = Vec::new();
    let mut bytes = 0;
    for (path, file) in sample.paths.iter().zip(&sample.files) {
        if bytes >= budget {
            break;
        }
        picked.push((path, file.len() as u64));
        bytes += file.len() as u64;
    }
    if picked.is_empty() {
        return;
    }
    let read = |(p, len): &(&std::path::Path, u64)| data::read_again(p, *len, &mut Vec::with_capacity(*len as usize));
    let read_all = || picked.iter().map(read).sum::<u64>() as f64;
    ctx.say("reading the files (warm page cache)");
    // Warm: on all cores, each thread reads all the files (as the byte stages do).
    let warm = (ctx.one_core(&read_all), ctx.all_cores(&read_all));
    out.push(ctx.row("read files", "warm page cache", FILES, BYTES, warm));
    if !cold {
        return;
    }
    // Cold: each run reads the files just dropped from the cache, on all cores
    // the threads sharing them out.
    ctx.say("reading the files (cold page cache)");
    let cold_runs = |parallel: bool| -> Figure {
        let runs: Vec<(f64, f64)> = (0..ctx.runs)
            .map(|_| {
                picked.iter().for_each(|(p, _)| drop(data::evict(p)));
                timed(|| {
                    if parallel {
                        ctx.pool.install(|| picked.par_iter().map(read).sum::<u64>() as f64)
                    } else {
                        read_all()
                    }
                })
            })
            .collect();
        Figure::from_runs(&runs)
    };
    let mut row = ctx.row("read files", "cold page cache", FILES, BYTES, (cold_runs(false), cold_runs(true)));
    row.note = Some("each file dropped from the page cache (posix_fadvise DONTNEED) before each run".into());
    out.push(row);
}

impl Ctx<'_> {
    /// Like [`Ctx::ops_stage`] where each call of `f` does `units` units of work.
    fn ops_stage_units(&self, units: f64, f: &(dyn Fn(usize) + Sync)) -> (Figure, Figure) {
        let (mut a, mut b) = self.ops_stage(f);
        for fig in [&mut a, &mut b] {
            fig.units_per_run *= units;
            for r in [&mut fig.rate.p50, &mut fig.rate.p90, &mut fig.rate.p99, &mut fig.rate.worst, &mut fig.rate.mean]
            {
                *r *= units;
            }
        }
        (a, b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_all_cores_every_thread_does_a_whole_one_core_run() {
        let t = crate::ops::bench::TestCtx::new(3);
        let ctx = t.ctx(2, 1, 0.0);
        // Two pieces of 1 MiB: one run covers both on each of the 3 threads,
        // each thread its own call of `f` per piece, none split between threads.
        let data = data::incompressible(2 << 20, 9);
        let pieces: Vec<&[u8]> = data.chunks(1 << 20).collect();
        let threads_seen = std::sync::Mutex::new(std::collections::HashSet::new());
        let calls = std::sync::atomic::AtomicUsize::new(0);
        let f = |p: &[u8]| {
            assert_eq!(p.len(), 1 << 20);
            threads_seen.lock().unwrap().insert(std::thread::current().id());
            calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        };
        let (one, all) = ctx.fixed_bytes_stage(&pieces, &f);
        assert_eq!(one.units_per_run, (2 << 20) as f64);
        assert_eq!(all.units_per_run, 3.0 * (2 << 20) as f64);
        // The warm-up and two timed runs, on one core then on 3: (1 + 2) x 2 + (1 + 2) x 6,
        // and the untimed work of threads waiting for the others: whole runs of 2 pieces.
        let calls = calls.into_inner();
        assert!(calls >= 24 && calls.is_multiple_of(2), "{calls}");
        assert_eq!(threads_seen.into_inner().unwrap().len(), 4, "the caller's thread and the pool's 3");
        let (one, all) = ctx.ops_stage(&|_| {});
        assert_eq!(all.units_per_run, 3.0 * one.units_per_run);
    }

    #[test]
    fn a_chunker_figure_says_what_share_of_the_sample_it_did_not_scan() {
        let small = vec![1u8; 256 << 10];
        let large = vec![2u8; 3 << 20];
        // No file at or below the minimum: nothing to say.
        assert_eq!(unscanned_note(&[&large], 1 << 20), None);
        // A quarter of the bytes in a file of the minimum's size or less.
        let quarter = vec![3u8; 1 << 20];
        assert_eq!(
            unscanned_note(&[&large, &quarter], 1 << 20).as_deref(),
            Some("25% of the bytes are in files at or below the 1M minimum: one chunk each, not scanned")
        );
        // All of them: the chunker read nothing, and the figure says so.
        assert_eq!(
            unscanned_note(&[&small, &small], 512 << 10).as_deref(),
            Some("every file is at or below the 512K minimum: one chunk each, none scanned")
        );
        // And the chunker indeed reads none of such a file: one chunk, whatever its bytes.
        let chunker = Chunker::new(&chunker_key(), ChunkerParams::default());
        assert_eq!(chunker.chunk_lengths(&small), vec![small.len()]);
    }

    #[test]
    fn byte_stages_take_every_kth_piece_up_to_their_budget() {
        let data = data::incompressible(100 << 10, 3);
        let pieces: Vec<&[u8]> = data.chunks(10 << 10).collect();
        // All of them when they fit.
        assert_eq!(every_kth(&pieces, 1e9), pieces);
        assert_eq!(every_kth(&pieces, (100 << 10) as f64), pieces);
        // Else every k-th from the first, about the budget: the same every time.
        let some = every_kth(&pieces, (35 << 10) as f64);
        assert_eq!(some, vec![pieces[0], pieces[3], pieces[6], pieces[9]]);
        assert_eq!(every_kth(&pieces, (35 << 10) as f64), some);
        assert_eq!(total(&every_kth(&pieces, (30 << 10) as f64)), (30 << 10) as f64);
        assert_eq!(every_kth(&pieces, 1.0), vec![pieces[0]]);
        assert!(every_kth(&[], 1e6).is_empty());
    }

    #[test]
    fn fixed_slices_are_the_same_bytes_every_time() {
        let a = data::text_like(3 << 20, 1);
        let b = data::incompressible(5000, 2);
        let chunks: Vec<&[u8]> = a.chunks(300_000).chain([&b[..], &[][..]]).collect();
        let s1 = fixed_slices(&chunks, 256.0 * 1024.0);
        let s2 = fixed_slices(&chunks, 256.0 * 1024.0);
        assert_eq!(s1, s2);
        // Slices of at most 64 KiB, from the middle of chunks, about the bytes asked.
        assert!(s1.iter().all(|s| s.len() <= 64 << 10 && !s.is_empty()));
        let got = total(&s1);
        assert!((256.0 * 1024.0..=3.0 * 256.0 * 1024.0).contains(&got), "{got}");
        assert_eq!(s1[0], &chunks[0][(300_000 - 65536) / 2..][..65536]);
        // Asking for more than the slices hold gives them all.
        assert_eq!(fixed_slices(&chunks, 1e9).len(), chunks.len() - 1);
        // The ratio's slices: the middle of every chunk while 64 KiB of each fit
        // in the bytes asked, else every k-th chunk's.
        let every = spread(&chunks, 1.5 * 1048576.0);
        assert_eq!(every.len(), chunks.len());
        assert!(every.iter().zip(&chunks).all(|(s, c)| s.len() == c.len().min((1.5 * 1048576.0 / 13.0) as usize)));
        assert_eq!(spread(&chunks, 256.0 * 1024.0), s1);
        assert_eq!(spread(&chunks, 1e9), chunks);
    }
}
