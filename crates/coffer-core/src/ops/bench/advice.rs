//! The recommendation and the projection, from the figures measured.
//! See docs/design.md#coffer-bench.
//!
//! Each candidate (a chunk size set and a zstd level) gets a modelled repository
//! size, `distinct bytes x compression ratio + blobs x per-blob overhead` (scaled
//! so that the default's equals the size the blob saver measured), and a
//! modelled time, the CPU time per byte of its stages (chunking, digest, blob id,
//! and for the distinct bytes compression and sealing; each from its per-core
//! rate over all runs) shared by the cores, scaled so that the default's modelled time equals
//! the measured time of coffer's blob saver. The fastest candidate whose size is
//! no worse than the default's is then run through the blob saver itself, and
//! kept only if that measurement confirms it.

use serde::{Deserialize, Serialize};

use super::pipeline::{self, Config, PipelineRow, Setup};
use super::stages::{cipher_name, describe_chunker};
use super::storage::StorageReport;
use super::walk::WalkRow;
use super::{Ctx, DedupRow, Sample, StageRow};
use crate::chunker::ChunkerParams;
use crate::crypto::{Cipher, TAG_LEN};
use crate::error::Result;
use crate::format::pack::ENTRY_LEN;

/// Bytes a blob adds besides its payload: the compression byte, the tag, its
/// pack header entry and its index record (about an entry's size).
const PER_BLOB: f64 = (1 + TAG_LEN + 2 * ENTRY_LEN) as f64;

/// The least measured gain, as a fraction of the configured settings' time, for
/// which other settings are recommended: below it, the gain is within the noise
/// of a few runs.
const MARGIN: f64 = 0.05;

/// One candidate setting.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    /// Chunk sizes.
    pub chunker: ChunkerParams,
    /// zstd level (0: none).
    pub level: i32,
    /// Modelled repository bytes for the sample.
    pub stored_bytes: f64,
    /// Modelled seconds to back up the sample on all cores.
    pub seconds: f64,
}

/// The settings recommended, and how sure the measurement is of them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Recommendation {
    /// The `init` flags to give (empty when the defaults are best).
    pub flags: String,
    /// Chunk sizes recommended.
    pub chunker: ChunkerParams,
    /// zstd level recommended.
    pub level: i32,
    /// The cipher this machine uses; coffer picks it (it is not an `init` flag).
    pub cipher: String,
    /// Measured seconds of the blob saver on the sample with the configured settings (p50).
    pub default_seconds: f64,
    /// The same with the recommended settings (equal to the default's when they are the default).
    pub recommended_seconds: f64,
    /// Bytes stored with the configured settings (measured).
    pub default_stored_bytes: u64,
    /// Bytes stored with the recommended settings (measured).
    pub recommended_stored_bytes: u64,
    /// Why: one or two sentences.
    pub reason: String,
    /// Every candidate with its modelled size and time, fastest first.
    pub candidates: Vec<Candidate>,
}

/// How long a first backup of data like the sample would take here.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Projection {
    /// The data size projected, in bytes.
    pub bytes: u64,
    /// Seconds with the configured settings.
    pub seconds: f64,
    /// Seconds with the recommended settings.
    pub seconds_recommended: f64,
    /// Regular files in the data projected: the sample's files per byte times `bytes`.
    #[serde(default)]
    pub files: u64,
    /// Seconds a file costs on all cores besides storing and reading its bytes
    /// (its metadata, opening it, its place in the trees, its share of the
    /// snapshot), from the backup of the sample's whole directories; 0 when not
    /// measured.
    #[serde(default)]
    pub per_file_seconds: f64,
    /// What bounds the backup.
    pub bottleneck: String,
    /// Each part's share of the time per byte, largest first.
    pub shares: Vec<(String, f64)>,
    /// The sentence for the user.
    pub text: String,
}

/// The per-core rate of a stage row over all its runs, in units per second.
fn rate(rows: &[StageRow], stage: &str, choice: &str, input: &str) -> Option<f64> {
    rows.iter()
        .find(|r| r.stage == stage && r.choice == choice && r.input == input)
        .map(|r| r.per_core.rate.mean)
        .filter(|r| *r > 0.0)
}

fn ratio(rows: &[StageRow], level: i32) -> Option<f64> {
    if level == 0 {
        return Some(1.0);
    }
    rows.iter().find(|r| r.stage == "zstd" && r.choice == format!("level {level}") && r.input == "sample")?.ratio
}

/// CPU seconds per byte read of each part, on one core.
fn parts(rows: &[StageRow], d: &DedupRow, level: i32, total: f64) -> Option<Vec<(String, f64)>> {
    let distinct = d.unique_bytes as f64 / total.max(1.0);
    let seal = rate(rows, "aead", cipher_name(Cipher::preferred()), "sample")?;
    let mut v = vec![
        ("chunking".to_string(), 1.0 / rate(rows, "chunker", &d.chunker, "sample")?),
        ("file digest".to_string(), 1.0 / rate(rows, "file digest", "blake3", "sample")?),
        ("blob id".to_string(), 1.0 / rate(rows, "blob id", "keyed blake3", "sample")?),
        ("encryption".to_string(), distinct / seal),
    ];
    if level > 0 {
        v.push((
            format!("compression (zstd {level})"),
            distinct / rate(rows, "zstd", &format!("level {level}"), "sample")?,
        ));
    }
    Some(v)
}

fn flags(p: &ChunkerParams, level: i32, defaults: (&ChunkerParams, i32)) -> String {
    let mut f = Vec::new();
    if p != defaults.0 {
        let s = describe_chunker(p);
        let mut it = s.split('/');
        for name in ["--chunk-min", "--chunk-avg", "--chunk-max"] {
            f.push(format!("{name} {}", it.next().unwrap_or("")));
        }
    }
    if level != defaults.1 {
        f.push(format!("--compression {level}"));
    }
    f.join(" ")
}

fn human_seconds(s: f64) -> String {
    if s >= 3600.0 {
        format!("{:.1} h", s / 3600.0)
    } else if s >= 60.0 {
        format!("{:.0} min", s / 60.0)
    } else {
        format!("{s:.1} s")
    }
}

/// What the projection is computed from.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Measured {
    /// One key derivation (each backup opens the repository once).
    pub kdf_seconds: f64,
    /// Bytes of the sample.
    pub sample_bytes: f64,
    /// Seconds the blob saver took for the whole sample on all cores.
    pub saver_seconds: f64,
    /// Seconds one thread took to read a byte of the sample's files
    /// ([`super::data::SampleInfo::read_per_byte`]; 0 for generated data).
    pub read_per_byte: f64,
    /// Seconds one thread took to open a file, beyond its bytes.
    pub read_per_file: f64,
    /// Cores the reading is shared by (the effective cores).
    pub cores: f64,
    /// Regular files in the sample.
    pub sample_files: f64,
    /// Regular files and their bytes counted below the paths given
    /// ([`super::data::SampleInfo::census_files`]), when more than the sample.
    pub census: Option<(f64, f64)>,
    /// The backup of the sample's whole directories, when there was one.
    pub walk: Option<WalkMeasured>,
}

/// What the backup of the walk's directories took, and what the same files'
/// bytes took alone.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WalkMeasured {
    /// Seconds of one backup on all cores (p50).
    pub seconds: f64,
    /// Regular files it stored.
    pub files: f64,
    /// Seconds the blob saver took for their contents on all cores (p50).
    pub saver_seconds: f64,
    /// Seconds one thread took to read them again, warm.
    pub read_seconds: f64,
}

impl Measured {
    /// Seconds per byte on all cores of storing the bytes (the saver) and of
    /// reading them (one thread's, shared by the cores).
    fn per_byte(&self) -> f64 {
        self.saver_seconds / self.sample_bytes.max(1.0) + self.read_per_byte / self.cores.max(1e-9)
    }

    /// Seconds a file costs on all cores besides its bytes: the walk's backup
    /// time less the saver's time on the same files' contents and their warm
    /// read (one thread's, shared by the cores), per file; never below 0, and 0
    /// without a walk.
    pub(crate) fn per_file_seconds(&self) -> f64 {
        let Some(w) = self.walk else { return 0.0 };
        if w.files < 1.0 {
            return 0.0;
        }
        ((w.seconds - w.saver_seconds - w.read_seconds / self.cores.max(1e-9)) / w.files).max(0.0)
    }

    /// Regular files in `bytes` of data like the sample: as many per byte as the
    /// count below the paths given found, else as the sample holds (generated
    /// data).
    pub(crate) fn files_in(&self, bytes: f64) -> f64 {
        match self.census {
            Some((files, counted)) if counted > 0.0 => bytes * files / counted,
            _ => bytes * self.sample_files / self.sample_bytes.max(1.0),
        }
    }
}

/// Seconds a backup of `bytes` like the sample takes: one key derivation, plus
/// per byte the saver's measured time and the sample's read time shared by the
/// cores, plus per file (as many per byte as counted) the time to open it,
/// shared likewise, and the work the walk's backup did besides storing and
/// reading its files (docs/design.md#coffer-bench, "Projection").
pub(crate) fn project_seconds(m: &Measured, bytes: f64) -> f64 {
    let per_file = m.per_file_seconds() + m.read_per_file / m.cores.max(1e-9);
    m.kdf_seconds + bytes * m.per_byte() + m.files_in(bytes) * per_file
}

/// What a backup pays besides the blob saver's work, as measured.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Beyond<'a> {
    /// Seconds of one key derivation at the configured cost.
    pub kdf_seconds: f64,
    /// The backup of the sample's whole directories, when there was one.
    pub walk: Option<&'a WalkRow>,
}

/// Recommends settings and projects the backup time; may add the measured rows
/// of the recommended settings to `pipe`.
pub(crate) fn advise(
    ctx: &Ctx<'_>,
    sample: &Sample,
    rows: &[StageRow],
    dedup: &[DedupRow],
    pipe: &mut Vec<PipelineRow>,
    beyond: Beyond<'_>,
    storage: Option<&StorageReport>,
) -> Result<(Recommendation, Projection)> {
    let opts = ctx.opts;
    let Beyond { kdf_seconds, walk } = beyond;
    let total = sample.len() as f64;
    // CPU time is shared by the cores the runs actually got.
    let threads = super::effective_cores(rows, ctx.threads);
    let default = (&opts.chunker, opts.compression_level);
    let measured = |p: &[PipelineRow], chunker: &ChunkerParams, level: i32| {
        p.iter()
            .find(|r| {
                r.config == Config::Coffer
                    && r.pass == 1
                    && r.input == "sample"
                    && r.chunker == describe_chunker(chunker)
                    && r.level == level
            })
            .map(|r| (r.all_cores.seconds.p50, r.stored_bytes))
    };
    let (default_secs, default_stored) = measured(pipe, &opts.chunker, opts.compression_level).unwrap_or((0.0, 0));
    let default_dedup = dedup.iter().find(|d| d.params == opts.chunker);
    let model_default = default_dedup.and_then(|d| parts(rows, d, opts.compression_level, total));
    let cpu = |v: &[(String, f64)]| v.iter().map(|p| p.1).sum::<f64>();
    // Measured over modelled: packing, spooling, the uploader and the threads' coordination.
    let scale = match &model_default {
        Some(m) if cpu(m) > 0.0 && default_secs > 0.0 => default_secs / (total * cpu(m) / threads),
        _ => 1.0,
    };
    let mut levels: Vec<i32> = rows
        .iter()
        .filter(|r| r.stage == "zstd" && r.input == "sample")
        .filter_map(|r| r.choice.strip_prefix("level ")?.parse().ok())
        .collect();
    levels.push(0);
    let mut candidates = Vec::new();
    for d in dedup {
        for &level in &levels {
            let (Some(p), Some(r)) = (parts(rows, d, level, total), ratio(rows, level)) else { continue };
            candidates.push(Candidate {
                chunker: d.params,
                level,
                stored_bytes: d.unique_bytes as f64 * r + d.unique_chunks as f64 * PER_BLOB,
                seconds: total * cpu(&p) / threads * scale,
            });
        }
    }
    // Sizes relative to the configured settings' measured size: the ratio comes
    // from slices of the chunks, which compress a little worse than whole chunks.
    if let Some(dm) = candidates.iter().find(|c| &c.chunker == default.0 && c.level == default.1).cloned()
        && dm.stored_bytes > 0.0
        && default_stored > 0
    {
        let k = default_stored as f64 / dm.stored_bytes;
        candidates.iter_mut().for_each(|c| c.stored_bytes *= k);
    }
    candidates.sort_by(|a, b| a.seconds.total_cmp(&b.seconds));
    let default_model = candidates.iter().find(|c| &c.chunker == default.0 && c.level == default.1).cloned();
    let pick = default_model.as_ref().and_then(|dm| {
        candidates.iter().find(|c| c.stored_bytes <= dm.stored_bytes * 1.0005 && c.seconds < dm.seconds).cloned()
    });
    let mut rec = Recommendation {
        flags: String::new(),
        chunker: opts.chunker,
        level: opts.compression_level,
        cipher: cipher_name(Cipher::preferred()).into(),
        default_seconds: default_secs,
        recommended_seconds: default_secs,
        default_stored_bytes: default_stored,
        recommended_stored_bytes: default_stored,
        reason: String::new(),
        candidates: candidates.clone(),
    };
    match pick {
        Some(c) => {
            // Confirm with the blob saver itself.
            let setup = Setup { chunker: c.chunker, level: c.level };
            let refs: Vec<&[u8]> = sample.files.iter().map(Vec::as_slice).collect();
            let measured_rows = pipeline::measure_config(ctx, Config::Coffer, setup, "sample", &refs, false, false)?;
            let (secs, stored) = (measured_rows[0].all_cores.seconds.p50, measured_rows[0].stored_bytes);
            pipe.extend(measured_rows);
            let what = flags(&c.chunker, c.level, default);
            if secs < default_secs * (1.0 - MARGIN) && stored as f64 <= default_stored as f64 * 1.001 {
                rec.flags = what;
                rec.chunker = c.chunker;
                rec.level = c.level;
                rec.recommended_seconds = secs;
                rec.recommended_stored_bytes = stored;
                rec.reason = format!(
                    "measured {:.0}% faster than the configured settings on this sample, storing {:+.2}% bytes",
                    100.0 * (1.0 - secs / default_secs.max(1e-9)),
                    100.0 * (stored as f64 / default_stored.max(1) as f64 - 1.0)
                );
            } else {
                rec.reason = format!(
                    "the model favoured `{what}`, but measured it took {secs:.3} s and stored {stored} bytes against \
                     {default_secs:.3} s and {default_stored} bytes for the configured settings (a recommendation \
                     needs a gain of {:.0}% at no larger size): keep them",
                    MARGIN * 100.0
                );
            }
        }
        None => {
            rec.reason =
                "no other candidate is faster at no larger repository size on this sample: keep the configured settings"
                    .into();
        }
    }

    // The projection.
    let bytes = opts.projected_bytes as f64;
    let (read_per_byte, read_per_file) =
        (sample.info.read_per_byte.unwrap_or(0.0), sample.info.read_per_file.unwrap_or(0.0));
    let walk = walk.filter(|w| w.files > 0 && w.all_cores.seconds.p50 > 0.0).and_then(|w| {
        Some(WalkMeasured {
            seconds: w.all_cores.seconds.p50,
            files: w.files as f64,
            saver_seconds: w.saver.as_ref()?.seconds.p50,
            read_seconds: w.read_seconds,
        })
    });
    let measured = |saver_seconds: f64| Measured {
        kdf_seconds,
        sample_bytes: total,
        saver_seconds,
        read_per_byte,
        read_per_file,
        cores: threads,
        sample_files: sample.info.files as f64,
        census: (sample.info.census_bytes > sample.info.bytes)
            .then_some((sample.info.census_files as f64, sample.info.census_bytes as f64)),
        walk,
    };
    let configured = measured(default_secs);
    let per_file_seconds = configured.per_file_seconds();
    let files = configured.files_in(bytes);
    let mut seconds = project_seconds(&configured, bytes);
    let mut seconds_recommended = project_seconds(&measured(rec.recommended_seconds), bytes);
    let mut shares: Vec<(String, f64)> = Vec::new();
    if let Some(m) = &model_default {
        let modelled = cpu(m) / threads;
        let measured_pb = default_secs / total.max(1.0);
        for (name, c) in m {
            shares.push((name.clone(), c / threads));
        }
        if measured_pb > modelled {
            shares
                .push(("the rest (packing, spooling, upload, waiting between threads)".into(), measured_pb - modelled));
        }
        if read_per_byte + read_per_file > 0.0 {
            let read = read_per_byte + read_per_file * configured.files_in(1.0);
            shares.push(("opening and reading the files".into(), read / threads));
        }
        if per_file_seconds > 0.0 {
            shares.push((
                "per-file work of the walk (metadata, opening, trees, snapshot)".into(),
                per_file_seconds * configured.files_in(1.0),
            ));
        }
        let sum = shares.iter().map(|s| s.1).sum::<f64>().max(1e-18);
        shares.iter_mut().for_each(|s| s.1 /= sum);
    }
    shares.sort_by(|a, b| b.1.total_cmp(&a.1));
    let mut bottleneck =
        shares.first().map_or("unknown".to_string(), |s| format!("{} ({:.0}% of the time)", s.0, s.1 * 100.0));
    if let Some(st) = storage {
        let stored_fraction = default_stored as f64 / total.max(1.0);
        let storage_seconds = kdf_seconds + bytes * stored_fraction / st.best_put().max(1e-9);
        if storage_seconds > seconds {
            bottleneck = format!(
                "storage: it takes {:.0} MiB/s at best, the CPU stages would produce {:.0} MiB/s",
                st.best_put() / 1048576.0,
                bytes * stored_fraction / (seconds - kdf_seconds).max(1e-9) / 1048576.0
            );
            seconds = storage_seconds;
        }
        seconds_recommended = seconds_recommended.max(storage_seconds);
    }
    let text = format!(
        "backing up {:.1} GiB of data like this sample takes about {} on this machine ({} with the recommended \
         settings); the bottleneck is {bottleneck}",
        bytes / (1u64 << 30) as f64,
        human_seconds(seconds),
        human_seconds(seconds_recommended),
    );
    Ok((
        rec,
        Projection {
            bytes: opts.projected_bytes,
            seconds,
            seconds_recommended,
            files: files.round() as u64,
            per_file_seconds,
            bottleneck,
            shares,
            text,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_projection_scales_the_measured_sample_to_the_size_asked() {
        // 64 MiB saved in 1 s and read in 0.5 s on one thread, 2 cores, a key
        // derivation of 0.4 s: 100 GiB take 0.4 + 1600 x (1 + 0.25) s.
        let m = Measured {
            kdf_seconds: 0.4,
            sample_bytes: (64u64 << 20) as f64,
            saver_seconds: 1.0,
            read_per_byte: 0.5 / (64u64 << 20) as f64,
            read_per_file: 0.0,
            cores: 2.0,
            sample_files: 1000.0,
            census: None,
            walk: None,
        };
        let s = project_seconds(&m, (100u64 << 30) as f64);
        assert!((s - (0.4 + 1600.0 * 1.25)).abs() < 1e-6, "{s}");
        // The sample itself projects to what was measured for it.
        let own = project_seconds(&m, m.sample_bytes);
        assert!((own - (0.4 + 1.0 + 0.25)).abs() < 1e-9, "{own}");
        // Generated data has no read term; no data costs the key derivation only.
        let generated = Measured { read_per_byte: 0.0, ..m };
        assert!((project_seconds(&generated, m.sample_bytes) - 1.4).abs() < 1e-9);
        assert_eq!(project_seconds(&m, 0.0), 0.4);
    }

    #[test]
    fn the_walk_adds_what_a_file_costs_beyond_its_bytes() {
        // The walk backed up 2000 files in 1.15 s; the saver alone stored their
        // contents in 0.5 s, one core read them warm in 0.1 s (0.05 s on 2
        // cores): 0.6 s for the files, 0.3 ms each.
        let sample_bytes = (64u64 << 20) as f64;
        let m = Measured {
            kdf_seconds: 0.5,
            sample_bytes,
            saver_seconds: 1.0,
            read_per_byte: 0.8 / sample_bytes,
            read_per_file: 0.0,
            cores: 2.0,
            sample_files: 4000.0,
            census: None,
            walk: Some(WalkMeasured { seconds: 1.15, files: 2000.0, saver_seconds: 0.5, read_seconds: 0.1 }),
        };
        assert!((m.per_file_seconds() - 0.0003).abs() < 1e-12, "{}", m.per_file_seconds());
        // 10 x the sample: 40,000 files; the sample's own read time (0.8 s, cold)
        // counts, not the walk's warm one.
        assert!((m.files_in(10.0 * sample_bytes) - 40_000.0).abs() < 1e-6);
        let s = project_seconds(&m, 10.0 * sample_bytes);
        assert!((s - (0.5 + 10.0 * (1.0 + 0.4) + 40_000.0 * 0.0003)).abs() < 1e-9, "{s}");
        // A walk faster than its bytes (noise) adds nothing rather than taking away.
        let fast = Measured { walk: Some(WalkMeasured { seconds: 0.3, ..m.walk.unwrap() }), ..m };
        assert_eq!(fast.per_file_seconds(), 0.0);
        assert!((project_seconds(&fast, sample_bytes) - (0.5 + 1.0 + 0.4)).abs() < 1e-9);
        // A walk that stored no file adds nothing either.
        let empty = Measured { walk: Some(WalkMeasured { files: 0.0, ..m.walk.unwrap() }), ..m };
        assert_eq!(empty.per_file_seconds(), 0.0);
        // The bytes' cost comes from the walk's own files, not the sample's: a
        // saver twice as slow per byte on the sample changes nothing.
        let dear_sample = Measured { saver_seconds: 2.0, ..m };
        assert!((dear_sample.per_file_seconds() - 0.0003).abs() < 1e-12);
        // Files counted below the paths given (half as many per byte as in the
        // sample) set the files per byte, and with them the per-file term.
        let counted = Measured { census: Some((10_000.0, 5.0 * sample_bytes)), ..m };
        assert!((counted.files_in(10.0 * sample_bytes) - 20_000.0).abs() < 1e-6);
        let s = project_seconds(&counted, 10.0 * sample_bytes);
        assert!((s - (0.5 + 10.0 * (1.0 + 0.4) + 20_000.0 * 0.0003)).abs() < 1e-9, "{s}");
        // Opening a file (20 µs on one thread beyond its bytes, 10 µs on 2
        // cores) counts per file counted, not per piece of the sample.
        let opens = Measured { read_per_file: 20e-6, ..counted };
        let s = project_seconds(&opens, 10.0 * sample_bytes);
        assert!((s - (0.5 + 10.0 * (1.0 + 0.4) + 20_000.0 * (0.0003 + 10e-6))).abs() < 1e-9, "{s}");
    }
}
