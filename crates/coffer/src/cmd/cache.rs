//! `coffer cache`: lists the local caches of repositories (one directory per
//! repository id under the cache directory), or removes those unused for a
//! while. See docs/design.md#local-cache.

use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};
use coffer_backend::{CacheInfo, list_caches, remove_cache};
use serde_json::json;

use crate::args::{CacheArgs, GlobalArgs};
use crate::table::Table;
use crate::{exit, output, repo_open};

const DAY: u64 = 24 * 3600;

/// Days since `t` (0 for a time in the future).
fn age_days(t: SystemTime) -> u64 {
    SystemTime::now().duration_since(t).unwrap_or(Duration::ZERO).as_secs() / DAY
}

fn last_used(c: &CacheInfo) -> String {
    let secs = c.last_used.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
    output::file_time(secs)
}

fn describe(c: &CacheInfo) -> serde_json::Value {
    json!({
        "type": "cache", "id": c.id, "path": c.path, "size": c.size, "last_used": last_used(c), "age_days": age_days(c.last_used),
    })
}

pub fn run(global: &GlobalArgs, args: &CacheArgs) -> Result<u8> {
    let base = repo_open::cache_base(global)?;
    let caches = list_caches(&base).with_context(|| format!("cannot list the caches in {}", base.display()))?;
    if !args.cleanup {
        if global.json {
            output::json(
                &json!({"type": "caches", "cache_dir": base, "caches": caches.iter().map(describe).collect::<Vec<_>>()}),
            );
        } else if caches.is_empty() {
            println!("no caches in {}", base.display());
        } else {
            println!("caches in {}:", base.display());
            let mut t = Table::new(&["repository", "size", "last used", "age"]).right([1]);
            for c in &caches {
                let age = output::plural(age_days(c.last_used), "day");
                t.row([c.id[..8].to_string(), output::bytes(c.size), last_used(c), age]);
            }
            t.print();
        }
        return Ok(exit::OK);
    }
    let (old, kept): (Vec<_>, Vec<_>) = caches.into_iter().partition(|c| age_days(c.last_used) >= args.max_age);
    for c in &old {
        remove_cache(c).with_context(|| format!("cannot remove the cache {}", c.path.display()))?;
    }
    let freed: u64 = old.iter().map(|c| c.size).sum();
    if global.json {
        output::json(&json!({
            "type": "cache_cleanup", "cache_dir": base, "removed": old.iter().map(describe).collect::<Vec<_>>(), "kept": kept.len(),
            "bytes_freed": freed,
        }));
    } else if !global.quiet {
        for c in &old {
            println!(
                "removed {} ({}, unused for {} days)",
                c.path.display(),
                output::bytes(c.size),
                age_days(c.last_used)
            );
        }
        println!(
            "{} caches removed ({} freed), {} kept (used in the last {} days)",
            old.len(),
            output::bytes(freed),
            kept.len(),
            args.max_age
        );
    }
    Ok(exit::OK)
}
