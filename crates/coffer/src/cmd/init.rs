//! `coffer init`.

use anyhow::{Result, bail};
use coffer_backend::Modes;
use coffer_core::chunker::ChunkerParams;
use coffer_core::repo::InitOptions;
use serde_json::json;

use crate::args::{GlobalArgs, InitArgs, RepoSettings};
use crate::{exit, output, repo_open};

fn to_u32(v: u64, what: &str) -> Result<u32> {
    u32::try_from(v).or_else(|_| bail!("{what} {v} is too large"))
}

/// The repository settings from the command line, with the default key derivation.
pub fn settings(s: &RepoSettings) -> Result<InitOptions> {
    let chunker = ChunkerParams {
        min_size: to_u32(s.chunk_min, "--chunk-min")?,
        avg_size: to_u32(s.chunk_avg, "--chunk-avg")?,
        max_size: to_u32(s.chunk_max, "--chunk-max")?,
    };
    chunker.validate().map_err(anyhow::Error::msg)?;
    Ok(InitOptions {
        chunker,
        compression_level: s.compression,
        pack_size: to_u32(s.pack_size, "--pack-size")?,
        ..InitOptions::default()
    })
}

/// The init options from the command line.
pub fn options(a: &InitArgs) -> Result<InitOptions> {
    Ok(InitOptions { kdf: crate::password::kdf(a.kdf_log_n, a.insecure_kdf)?, ..settings(&a.settings)? })
}

pub fn run(global: &GlobalArgs, a: &InitArgs) -> Result<u8> {
    let opts = options(a)?;
    let (path, _) = repo_open::location(global)?;
    let modes = if a.group_readable { Modes::GROUP_READABLE } else { Modes::PRIVATE };
    if let Some(r) = a.replicas {
        let named = a
            .backends
            .iter()
            .map(|spec| crate::replicas::parse_spec(spec).map(|(s, location)| (s.name, location)))
            .collect::<Result<Vec<_>>>()?;
        crate::replicas::refuse_overlapping(&named, named.len())?;
        let repo = crate::cmd::backend::init(global, r, &a.backends, &opts, modes)?;
        if global.json {
            output::json(
                &json!({"type": "initialized", "created": true, "backends": a.backends, "replicas": r, "id": repo.config().id, "config": repo.config()}),
            );
        } else if !global.quiet {
            println!(
                "created coffer repository {} over {} backends, {r} copies of every pack; any backend's location opens it",
                repo.config().id.short(),
                a.backends.len()
            );
            println!("keep the passphrase safe: without it, the data cannot be read");
        }
        return Ok(exit::OK);
    }
    let repo = match &a.from_repo {
        Some(src) => {
            let (source, _) = repo_open::open_source(src, a.from_password_file.as_deref())?;
            repo_open::create_related(global, &path, &opts, modes, &source, !a.own_data_keys)?
        }
        None => repo_open::create_with_modes(global, &path, &opts, modes)?,
    };
    if global.json {
        output::json(
            &json!({"type": "initialized", "created": true, "location": path.to_string(), "id": repo.config().id, "config": repo.config()}),
        );
    } else if !global.quiet {
        println!("created coffer repository {} at {}", repo.config().id.short(), path.display());
        if let Some(r) = &repo.config().related {
            if r.data_keys {
                println!(
                    "related to repository {} (same chunker, id and data keys): `coffer copy --from-repo` sends packs \
                     byte for byte",
                    r.repository.short()
                );
            } else {
                println!(
                    "related to repository {} (same chunker and id keys, own data keys): `coffer copy --from-repo` \
                     sends only the blobs this one lacks, encrypted again",
                    r.repository.short()
                );
            }
        }
        println!("keep the passphrase safe: without it, the data cannot be read");
    }
    Ok(exit::OK)
}
