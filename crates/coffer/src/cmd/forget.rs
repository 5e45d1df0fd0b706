//! `coffer forget`: removes the snapshots named, or those a retention policy does
//! not keep (docs/design.md#retention). Either way one tombstone records the removal.

use std::collections::HashMap;

use anyhow::{Result, anyhow, bail};
use coffer_core::Id;
use coffer_core::format::ObjectKind;
use coffer_core::format::snapshot::Snapshot;
use coffer_core::ops::forget::forget;
use coffer_core::ops::retention::{self, Decision, GroupKey, Policy};
use coffer_core::repo::history::History;
use coffer_core::repo::{Repository, SnapshotFilter};
use serde_json::{Value, json};

use crate::args::{ForgetArgs, GlobalArgs, PruneArgs};
use crate::{exit, output, repo_open};

/// Exit code of a usage error, as clap uses for invalid arguments.
const USAGE: u8 = exit::USAGE;

pub fn run(global: &GlobalArgs, a: &ForgetArgs) -> Result<u8> {
    if a.prune && a.dry_run {
        let err =
            anyhow!("--prune and --dry-run do not go together: run `coffer prune --dry-run` to see what it would do");
        output::error(global.json, &err, USAGE);
        return Ok(USAGE);
    }
    let code = forget_only(global, a)?;
    if a.prune && code == exit::OK {
        let args = PruneArgs { max_unused: 5.0, dry_run: false, grace: a.grace };
        return super::prune::run(global, &args);
    }
    Ok(code)
}

fn forget_only(global: &GlobalArgs, a: &ForgetArgs) -> Result<u8> {
    let policy = policy_of(a);
    if a.snapshots.is_empty() && !policy.has_keep_rule() && !a.unsafe_allow_remove_all {
        let err = anyhow!(
            "nothing to keep: without snapshot ids, forget applies a policy, and one without a keep rule would \
             forget every snapshot; name the snapshots to forget, or give at least one of --keep-last, \
             --keep-hourly, --keep-daily, --keep-weekly, --keep-monthly, --keep-yearly, --keep-within(-*), \
             --keep-tag (or --unsafe-allow-remove-all to forget them all)"
        );
        output::error(global.json, &err, USAGE);
        return Ok(USAGE);
    }
    let (path, _) = repo_open::location(global)?;
    let repo = repo_open::open_unindexed(global, &path)?;
    let history = History::load(&repo)?;
    if a.snapshots.is_empty() {
        by_policy(global, a, &repo, &history, &policy)
    } else {
        by_ids(global, a, &repo, &history)
    }
}

/// The policy the `--keep-*` and `--group-by` options describe.
pub fn policy_of(a: &ForgetArgs) -> Policy {
    Policy {
        last: a.keep_last,
        hourly: a.keep_hourly,
        daily: a.keep_daily,
        weekly: a.keep_weekly,
        monthly: a.keep_monthly,
        yearly: a.keep_yearly,
        within: a.keep_within,
        within_hourly: a.keep_within_hourly,
        within_daily: a.keep_within_daily,
        within_weekly: a.keep_within_weekly,
        within_monthly: a.keep_within_monthly,
        within_yearly: a.keep_within_yearly,
        tags: a.keep_tags.iter().map(|l| l.split(',').map(|t| t.trim().to_string()).collect()).collect(),
        group_by: a.group_by,
    }
}

fn by_ids(global: &GlobalArgs, a: &ForgetArgs, repo: &Repository, history: &History) -> Result<u8> {
    let ids =
        a.snapshots.iter().map(|s| repo.resolve_prefix(ObjectKind::Snapshot, s)).collect::<Result<Vec<_>, _>>()?;
    if a.dry_run {
        if global.json {
            output::json(&json!({"type": "summary", "dry_run": true, "forgotten": ids, "tombstone": null}));
        } else if !global.quiet {
            for id in &ids {
                println!("would forget snapshot {}", id.short());
            }
            println!("dry run: nothing changed");
        }
        return Ok(exit::OK);
    }
    let tombstone = remove(repo, history, &ids)?;
    if global.json {
        output::json(&json!({"type": "summary", "dry_run": false, "forgotten": ids, "tombstone": tombstone}));
    } else if !global.quiet {
        for id in &ids {
            println!("forgot snapshot {}", id.short());
        }
        println!("tombstone {} records the removal", tombstone.short());
    }
    Ok(exit::OK)
}

fn by_policy(global: &GlobalArgs, a: &ForgetArgs, repo: &Repository, history: &History, policy: &Policy) -> Result<u8> {
    if !history.damaged.is_empty() {
        eprintln!(
            "warning: {} could not be loaded and {} not considered (run `coffer check`)",
            output::plural(history.damaged.len(), "snapshot"),
            if history.damaged.len() == 1 { "is" } else { "are" }
        );
    }
    let filter = SnapshotFilter::from(&a.filter);
    let snapshots: Vec<(Id, Snapshot)> =
        history.live_snapshots().into_iter().filter(|(_, s)| filter.matches(s)).collect();
    let decisions = retention::apply_with_offset(&snapshots, policy, &output::utc_offset);
    if !a.unsafe_allow_remove_all {
        let emptied: Vec<String> = by_group(&decisions)
            .iter()
            .filter(|(_, ds)| ds.iter().all(|d| !d.keep))
            .map(|(key, ds)| format!("{key} ({})", output::plural(ds.len(), "snapshot")))
            .collect();
        if !emptied.is_empty() {
            bail!(
                "the policy keeps no snapshot of {}, and would forget every one of them; nothing was forgotten. \
                 Check the --keep-* options (a --keep-tag naming a tag no snapshot has keeps nothing), or pass \
                 --unsafe-allow-remove-all to forget them",
                emptied.join("; ")
            );
        }
    }
    let doomed: Vec<Id> = decisions.iter().filter(|d| !d.keep).map(|d| d.id).collect();
    let tombstone = if a.dry_run || doomed.is_empty() { None } else { Some(remove(repo, history, &doomed)?) };

    let times: HashMap<Id, &str> = snapshots.iter().map(|(id, s)| (*id, s.time.as_str())).collect();
    let groups = by_group(&decisions);
    if global.json {
        let groups: Vec<Value> = groups.iter().map(|(key, ds)| group_json(key, ds, &times)).collect();
        output::json(&json!({
            "type": "summary",
            "dry_run": a.dry_run,
            "group_by": policy.group_by.to_string(),
            "groups": groups,
            "kept": decisions.len() - doomed.len(),
            "forgotten": doomed,
            "tombstone": tombstone,
        }));
        return Ok(exit::OK);
    }
    if global.quiet {
        return Ok(exit::OK);
    }
    for (key, ds) in &groups {
        let kept = ds.iter().filter(|d| d.keep).count();
        println!("{key}: keep {kept}, forget {}", ds.len() - kept);
        for d in ds {
            let reasons: Vec<String> = d.reasons.iter().map(|r| r.to_string()).collect();
            let action = if d.keep { "keep" } else { "forget" };
            let time = output::time(times.get(&d.id).copied().unwrap_or_default());
            let line = format!("  {action:<6}  {}  {time}  {}", d.id.short(), reasons.join(", "));
            println!("{}", line.trim_end());
        }
    }
    let n = doomed.len();
    match tombstone {
        _ if snapshots.is_empty() => println!("no snapshots match"),
        _ if a.dry_run => {
            println!("dry run: would forget {n} of {}; nothing changed", output::plural(snapshots.len(), "snapshot"))
        }
        None if snapshots.len() == 1 => println!("nothing to forget: the policy keeps the 1 snapshot"),
        None => println!("nothing to forget: the policy keeps all {} snapshots", snapshots.len()),
        Some(t) => println!(
            "forgot {n} of {}; tombstone {} records the removal",
            output::plural(snapshots.len(), "snapshot"),
            t.short()
        ),
    }
    Ok(exit::OK)
}

/// Forgets `ids` under one tombstone signed by this client, and remembers the
/// resulting history heads.
fn remove(repo: &Repository, history: &History, ids: &[Id]) -> Result<Id> {
    let state = repo_open::local_state(repo)?;
    let key = repo.writer_key(&state)?;
    let tombstone = forget(repo, history, ids, &key)?;
    History::load(repo)?.sync_remembered(repo, &state)?;
    Ok(tombstone)
}

/// Decisions split by group, in the order `apply` returned them.
fn by_group(decisions: &[Decision]) -> Vec<(&GroupKey, Vec<&Decision>)> {
    let mut out: Vec<(&GroupKey, Vec<&Decision>)> = Vec::new();
    for d in decisions {
        match out.last_mut() {
            Some((key, ds)) if *key == &d.group => ds.push(d),
            _ => out.push((&d.group, vec![d])),
        }
    }
    out
}

fn group_json(key: &GroupKey, ds: &[&Decision], times: &HashMap<Id, &str>) -> Value {
    let entry = |d: &Decision| {
        let reasons: Vec<String> = d.reasons.iter().map(|r| r.to_string()).collect();
        json!({"type": "decision", "action": if d.keep { "keep" } else { "forget" }, "id": d.id,
               "time": times.get(&d.id), "reasons": reasons})
    };
    json!({
        "type": "forget_group",
        "key": {"host": key.host, "paths": key.paths, "tags": key.tags},
        "keep": ds.iter().filter(|d| d.keep).map(|d| entry(d)).collect::<Vec<_>>(),
        "forget": ds.iter().filter(|d| !d.keep).map(|d| entry(d)).collect::<Vec<_>>(),
    })
}
