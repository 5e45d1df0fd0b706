//! `coffer repair`.

use anyhow::{Result, bail};
use coffer_core::chunker::ChunkerParams;
use coffer_core::repo::{InitOptions, Repository};
use serde_json::json;

use crate::args::{GlobalArgs, RepairArgs, RepairCommand, RepairConfigArgs};
use crate::password::{self, Purpose};
use crate::{exit, output, repo_open};

pub fn run(global: &GlobalArgs, a: &RepairArgs) -> Result<u8> {
    match &a.command {
        RepairCommand::Config(c) => config(global, c),
    }
}

fn to_u32(v: u64, what: &str) -> Result<u32> {
    u32::try_from(v).or_else(|_| bail!("{what} {v} is too large"))
}

/// Writes a new config sealed under the existing keys.
fn config(global: &GlobalArgs, a: &RepairConfigArgs) -> Result<u8> {
    let chunker = ChunkerParams {
        min_size: to_u32(a.chunk_min, "--chunk-min")?,
        avg_size: to_u32(a.chunk_avg, "--chunk-avg")?,
        max_size: to_u32(a.chunk_max, "--chunk-max")?,
    };
    chunker.validate().map_err(anyhow::Error::msg)?;
    let opts = InitOptions {
        chunker,
        compression_level: a.compression,
        pack_size: to_u32(a.pack_size, "--pack-size")?,
        ..InitOptions::default()
    };
    let (path, _) = repo_open::location(global)?;
    if !path.is_dir() {
        return Err(coffer_core::Error::RepoNotFound { location: path.display().to_string() }.into());
    }
    let be = repo_open::backend(&path)?;
    if Repository::exists(be.as_ref())? {
        bail!("{} has a config: there is nothing to repair (run 'coffer check' to verify it)", path.display());
    }
    let pw = password::read(global, Purpose::Open)?;
    let (repo, reset) = Repository::repair_config(be, pw.as_bytes(), &opts)?;
    if global.json {
        output::json(&json!({"repaired": "config", "id": repo.config().id, "reset": reset}));
    } else if !global.quiet {
        println!("wrote a new config for the repository at {}, sealed under its existing keys", path.display());
        println!("reset, as the lost config could not be read back:");
        for r in &reset {
            println!("  {r}");
        }
        println!("run 'coffer check' to verify the repository");
    }
    Ok(exit::OK)
}
