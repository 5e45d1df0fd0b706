//! A real backup of whole directories picked across the data
//! ([`Sample::whole_dirs`]): coffer's backup operation walks them (metadata and
//! the link-safe open of every entry, reading, trees, the snapshot and the
//! history) into an in-memory repository. Then the same files' contents go
//! through the blob saver alone, and are read once more: what the backup took
//! beyond those two is the per-file work a backup does besides storing and
//! reading bytes, which the pipeline leaves out. See
//! docs/design.md#coffer-bench, "Walk" and "Projection".

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::pipeline::{self, Config, Setup, mem_repo};
use super::stats::{Figure, timed};
use super::{Ctx, Sample, data};
use crate::crypto::sign::SigningKey;
use crate::error::Result;
use crate::ops::backup::{BackupOptions, backup};
use crate::progress::NoProgress;

/// What the backup of the walk's directories found and how long it took.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WalkRow {
    /// Directories given to the backup as its paths ([`Sample::whole_dirs`]).
    pub directories: u64,
    /// Regular files it stored.
    pub files: u64,
    /// Its other entries: directories (the ones given included), symbolic links, special files.
    pub other_entries: u64,
    /// Bytes of the regular files it read.
    pub bytes: u64,
    /// Each backup on all cores, from the start of the walk to the snapshot
    /// written (the repository opened before, with a cheap key derivation);
    /// units are bytes read.
    pub all_cores: Figure,
    /// The blob saver alone on the contents of the same regular files, in
    /// memory, on all cores; units are bytes.
    #[serde(default)]
    pub saver: Option<Figure>,
    /// Seconds one thread took to open and read those files again, warm
    /// (right after the backups read them).
    #[serde(default)]
    pub read_seconds: f64,
}

/// Backs up the sample's whole directories into a new in-memory repository with
/// `setup`'s settings, `ctx.pipeline_runs` times, then reads their regular files
/// once more and runs the blob saver alone on their contents; `None` when the
/// sample has no whole directory (generated data, files given one by one, or
/// directories too large to walk).
pub(crate) fn measure_walk(ctx: &Ctx<'_>, sample: &Sample, setup: Setup) -> Result<Option<WalkRow>> {
    if sample.whole_dirs.is_empty() {
        return Ok(None);
    }
    ctx.say("backup of whole directories across the data (in-memory repository)");
    // Each run is a whole backup of up to half the sample size: three are enough.
    let ctx = &Ctx { pipeline_runs: ctx.pipeline_runs.min(3), ..*ctx };
    let key = SigningKey::from_seed(&[0x57; 32]);
    let opts = BackupOptions {
        paths: sample.whole_dirs.clone(),
        hostname: Some("coffer-bench".into()),
        ..BackupOptions::default()
    };
    let mut runs = Vec::new();
    let mut last = None;
    for _ in 0..ctx.pipeline_runs {
        let repo = mem_repo(setup)?;
        repo.register_writer(&key.public(), "coffer-bench".into(), "coffer-bench".into())?;
        let (result, seconds) = timed(|| ctx.pool.install(|| backup(&repo, &opts, &key, &NoProgress)));
        let summary = result?.snapshot.summary;
        runs.push((summary.bytes_read as f64, seconds));
        last = Some(summary);
    }
    let Some(s) = last else { return Ok(None) };
    // Listing is part of the walk's per-file work: only opening and reading are timed.
    let paths = files_below(&sample.whole_dirs);
    let (contents, read_seconds) = timed(|| paths.iter().filter_map(|p| read(p)).collect::<Vec<Vec<u8>>>());
    let refs: Vec<&[u8]> = contents.iter().map(Vec::as_slice).collect();
    let saver = pipeline::measure_config(ctx, Config::Coffer, setup, "the walk's files", &refs, false, false)?
        .into_iter()
        .next()
        .map(|r| r.all_cores);
    Ok(Some(WalkRow {
        directories: sample.whole_dirs.len() as u64,
        files: s.files_new + s.files_changed + s.files_unchanged,
        other_entries: s.dirs + s.others,
        bytes: s.bytes_read,
        all_cores: Figure::from_runs(&runs),
        saver,
        read_seconds,
    }))
}

/// The regular files at or below `dirs`, in name order, links not followed.
fn files_below(dirs: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack: Vec<PathBuf> = dirs.iter().rev().cloned().collect();
    while let Some(p) = stack.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&p) else { continue };
        if meta.is_file() {
            out.push(p);
        } else if meta.is_dir()
            && let Ok(rd) = std::fs::read_dir(&p)
        {
            let mut names: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
            names.sort();
            stack.extend(names.into_iter().rev());
        }
    }
    out
}

/// A file's contents, opened without following a link; `None` when it cannot be read.
fn read(path: &Path) -> Option<Vec<u8>> {
    use std::io::Read;
    let mut data = Vec::new();
    data::open_file(path).ok()?.read_to_end(&mut data).ok()?;
    Some(data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunker::ChunkerParams;
    use crate::ops::bench::{TestCtx, data};

    #[test]
    fn backs_up_the_whole_directories_only() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for (d, n) in [("a", 3), ("a/deep", 2), ("b", 4)] {
            std::fs::create_dir_all(root.join(d)).unwrap();
            for i in 0..n {
                std::fs::write(root.join(d).join(format!("f{i}")), data::text_like(10_000, i)).unwrap();
            }
        }
        std::os::unix::fs::symlink("f0", root.join("a/link")).unwrap();
        let mut sample = crate::ops::bench::sample::read_sample(&[root.to_path_buf()], 62_000, false).unwrap();
        sample.whole_dirs = vec![root.join("a")];
        let t = TestCtx::new(2);
        let ctx = t.ctx(1, 2, 0.001);
        let setup = Setup { chunker: ChunkerParams::default(), level: 3 };
        let w = measure_walk(&ctx, &sample, setup).unwrap().unwrap();
        assert_eq!((w.directories, w.files, w.bytes), (1, 5, 50_000));
        // `a`, `a/deep` and the link (the directories above `a` are not counted).
        assert!(w.other_entries >= 3, "{w:?}");
        assert_eq!(w.all_cores.runs, 2);
        assert!(w.all_cores.seconds.p50 > 0.0);
        // The saver ran on the same five files' 50,000 bytes, the link not followed.
        let saver = w.saver.unwrap();
        assert_eq!((saver.runs, saver.units_per_run), (2, 50_000.0));
        assert!(w.read_seconds > 0.0);
        // Generated data has no directory to walk.
        assert!(measure_walk(&ctx, &data::generated(1 << 20), setup).unwrap().is_none());
    }
}
