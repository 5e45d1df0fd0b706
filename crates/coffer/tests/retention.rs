//! `coffer forget` with a retention policy, run as a user would: which snapshots
//! remain, that one tombstone records each real run, and that a dry run changes
//! nothing. Time buckets are covered by the unit tests of `coffer_core::ops::retention`;
//! here snapshots differ by host and tag, and by order.

mod common;

use std::collections::BTreeSet;

use common::{Env, assert_code, assert_success, files_under, text};
use serde_json::Value;

/// Backs up `data` with `--host` and `--tag` (empty for none); returns the id.
fn backup(env: &Env, host: &str, tag: &str) -> String {
    let data = env.path("data");
    let data = data.to_str().unwrap();
    let mut args = vec!["backup", data, "--host", host];
    if !tag.is_empty() {
        args.extend(["--tag", tag]);
    }
    env.json(&args)["snapshot_id"].as_str().expect("snapshot id").to_string()
}

fn live(env: &Env) -> BTreeSet<String> {
    let v = env.json(&["snapshots"]);
    v.as_array().unwrap().iter().map(|s| s["id"].as_str().unwrap().to_string()).collect()
}

fn tombstones(env: &Env) -> usize {
    files_under(&env.repo().join("tombstones")).len()
}

fn set(ids: &[&String]) -> BTreeSet<String> {
    ids.iter().map(|s| s.to_string()).collect()
}

fn ids(v: &Value) -> BTreeSet<String> {
    v.as_array().unwrap().iter().map(|x| x.as_str().or_else(|| x["id"].as_str()).unwrap().to_string()).collect()
}

/// Two hosts, four snapshots on `alpha` (the second tagged `keep`) and two on `beta`.
fn setup() -> (Env, Vec<String>, Vec<String>) {
    let env = Env::new();
    std::fs::create_dir(env.path("data")).unwrap();
    std::fs::write(env.path("data/file"), b"some content").unwrap();
    let a = vec![
        backup(&env, "alpha", ""),
        backup(&env, "alpha", "keep"),
        backup(&env, "alpha", ""),
        backup(&env, "alpha", ""),
    ];
    let b = vec![backup(&env, "beta", ""), backup(&env, "beta", "")];
    (env, a, b)
}

#[test]
fn policy_forgets_what_no_rule_keeps_and_dry_run_changes_nothing() {
    let (env, a, b) = setup();
    let all = set(&[&a[0], &a[1], &a[2], &a[3], &b[0], &b[1]]);
    assert_eq!(live(&env), all);

    // Dry run: the same decisions, reported, and nothing written.
    let v = env.json(&["forget", "--keep-last", "1", "--keep-tag", "keep", "--dry-run"]);
    assert_eq!(v["dry_run"], true);
    assert_eq!(v["tombstone"], Value::Null);
    assert_eq!(ids(&v["forgotten"]), set(&[&a[0], &a[2], &b[0]]));
    assert_eq!(v["kept"], 3);
    let groups = v["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 2, "grouped by host and paths: {v}");
    assert_eq!(groups[0]["key"]["host"], "alpha");
    assert_eq!(groups[0]["key"]["tags"], Value::Null);
    assert_eq!(ids(&groups[0]["keep"]), set(&[&a[1], &a[3]]));
    assert_eq!(ids(&groups[0]["forget"]), set(&[&a[0], &a[2]]));
    assert_eq!(groups[0]["keep"][0]["id"], a[3].as_str(), "newest first");
    assert_eq!(groups[0]["keep"][0]["reasons"], serde_json::json!(["last"]));
    assert_eq!(groups[0]["keep"][1]["reasons"], serde_json::json!(["tag keep"]));
    assert_eq!(groups[1]["key"]["host"], "beta");
    assert_eq!(ids(&groups[1]["keep"]), set(&[&b[1]]));
    assert_eq!(live(&env), all, "a dry run forgets nothing");
    assert_eq!(tombstones(&env), 0, "a dry run writes no tombstone");

    // The text of a dry run lists each group with its decisions.
    let out = env.run(&["forget", "--keep-last", "1", "--keep-tag", "keep", "-n"]);
    assert_success(&out);
    let stdout = text(&out.stdout);
    assert!(stdout.contains("host alpha, paths "), "{stdout}");
    assert!(stdout.contains(&format!("keep    {}", &a[1][..8])), "{stdout}");
    assert!(stdout.contains("tag keep"), "{stdout}");
    assert!(stdout.contains(&format!("forget  {}", &a[0][..8])), "{stdout}");
    assert!(stdout.contains("dry run: would forget 3 of 6 snapshots; nothing changed"), "{stdout}");
    assert_eq!(tombstones(&env), 0);

    // The real run: one tombstone for everything it forgets.
    let out = env.run(&["forget", "--keep-last", "1", "--keep-tag", "keep"]);
    assert_success(&out);
    assert!(text(&out.stdout).contains("forgot 3 of 6 snapshots; tombstone"), "{}", text(&out.stdout));
    assert_eq!(live(&env), set(&[&a[1], &a[3], &b[1]]));
    assert_eq!(tombstones(&env), 1);
    assert_success(&env.run(&["check"]));

    // A policy that keeps everything left forgets nothing and writes nothing.
    let v = env.json(&["forget", "--keep-last", "2"]);
    assert_eq!(v["tombstone"], Value::Null);
    assert_eq!(ids(&v["forgotten"]), BTreeSet::new());
    assert_eq!(tombstones(&env), 1);
}

#[test]
fn filters_and_grouping_narrow_what_the_policy_sees() {
    let (env, a, b) = setup();

    // COFFER_HOST stands for --host, as it does for backups.
    let out =
        env.cmd().env("COFFER_HOST", "beta").args(["--json", "forget", "--keep-last", "1", "-n"]).output().unwrap();
    assert_success(&out);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(ids(&v["forgotten"]), set(&[&b[0]]), "{v}");

    // Only beta's snapshots are considered; alpha's are left alone.
    let v = env.json(&["forget", "--keep-last", "1", "--host", "beta"]);
    assert_eq!(ids(&v["forgotten"]), set(&[&b[0]]));
    assert!(v["tombstone"].is_string());
    assert_eq!(live(&env), set(&[&a[0], &a[1], &a[2], &a[3], &b[1]]));
    assert_eq!(tombstones(&env), 1);

    // One group over both hosts: keep-last 2 counts across them.
    let v = env.json(&["forget", "--keep-last", "2", "--group-by", ""]);
    let groups = v["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 1);
    assert_eq!(groups[0]["key"], serde_json::json!({"host": null, "paths": null, "tags": null}));
    assert_eq!(ids(&groups[0]["keep"]), set(&[&a[3], &b[1]]));
    assert_eq!(live(&env), set(&[&a[3], &b[1]]));
    assert_eq!(tombstones(&env), 2, "one tombstone per run");
    assert_success(&env.run(&["check"]));

    // Grouped by host (any paths), each host keeps its newest.
    let v = env.json(&["forget", "--keep-last", "1", "--group-by", "host", "-n"]);
    assert_eq!(v["groups"].as_array().unwrap().len(), 2);
    assert_eq!(v["groups"][0]["key"], serde_json::json!({"host": "alpha", "paths": null, "tags": null}));
    assert_eq!(ids(&v["forgotten"]), BTreeSet::new());
}

#[test]
fn a_policy_without_keep_rules_and_ids_with_a_policy_are_refused() {
    let (env, a, _) = setup();
    let before = live(&env);

    for args in [&["forget"][..], &["forget", "--keep-last", "0"], &["forget", "--host", "alpha", "--dry-run"]] {
        let err = assert_code(&env.run(args), 2);
        assert!(err.contains("nothing to keep") && err.contains("--keep-last"), "{args:?}: {err}");
    }
    let err = assert_code(&env.run(&["forget", &a[0], "--keep-last", "1"]), 2);
    assert!(err.contains("cannot be used with"), "{err}");
    let err = assert_code(&env.run(&["forget", &a[0], "--group-by", "host"]), 2);
    assert!(err.contains("cannot be used with"), "{err}");
    assert_code(&env.run(&["forget", "--keep-within", "5"]), 2);
    assert_code(&env.run(&["forget", "--keep-last", "1", "--group-by", "time"]), 2);
    assert_eq!(live(&env), before);
    assert_eq!(tombstones(&env), 0);

    // Named snapshots with --dry-run: reported, not forgotten.
    let v = env.json(&["forget", &a[0], "--dry-run"]);
    assert_eq!(ids(&v["forgotten"]), set(&[&a[0]]));
    assert_eq!(v["tombstone"], Value::Null);
    assert_eq!(live(&env), before);
    assert_eq!(tombstones(&env), 0);
}

#[test]
fn restic_short_flags_and_within_periods() {
    let (env, a, b) = setup();
    // `-H 24` is --keep-hourly, as in restic (not --host): every snapshot of the
    // test lies in one or two hours, so each group keeps its newest of each hour.
    let v = env.json(&["forget", "-H", "24", "-n"]);
    assert_eq!(v["groups"].as_array().unwrap().len(), 2, "both hosts considered: {v}");
    assert!(v["groups"][0]["keep"][0]["reasons"].as_array().unwrap().contains(&"hourly".into()), "{v}");
    let v = env.json(&["forget", "-l", "2", "-d", "1", "-w", "1", "-m", "1", "-y", "1", "-n"]);
    assert_eq!(ids(&v["forgotten"]), set(&[&a[0], &a[1]]));
    let v = env.json(&["forget", "--keep-within-daily", "1d", "-n"]);
    assert_eq!(v["groups"][0]["keep"][0]["reasons"], serde_json::json!(["daily within 1d"]));
    assert_eq!(v["kept"], 2, "one per host and day: {v}");
    assert_eq!(ids(&v["forgotten"]).len(), 4);
    assert!(ids(&v["forgotten"]).contains(&b[0]));
    assert_eq!(tombstones(&env), 0);
}

#[test]
fn a_policy_that_would_empty_a_group_is_refused_unless_allowed() {
    let (env, a, b) = setup();
    let before = live(&env);
    // A tag nobody has: restic would forget everything; coffer refuses.
    for extra in [&[][..], &["-n"]] {
        let mut args = vec!["forget", "--keep-tag", "typo"];
        args.extend_from_slice(extra);
        let err = assert_code(&env.run(&args), 1);
        assert!(err.contains("keeps no snapshot of host alpha") && err.contains("--unsafe-allow-remove-all"), "{err}");
    }
    // Only beta empties: still refused, and nothing of alpha is forgotten either.
    let err = assert_code(&env.run(&["forget", "--keep-tag", "keep"]), 1);
    assert!(err.contains("host beta") && !err.contains("host alpha"), "{err}");
    assert_eq!(live(&env), before);
    assert_eq!(tombstones(&env), 0);

    let v = env.json(&["forget", "--keep-tag", "keep", "--unsafe-allow-remove-all"]);
    assert_eq!(ids(&v["forgotten"]), set(&[&a[0], &a[2], &a[3], &b[0], &b[1]]));
    assert_eq!(live(&env), set(&[&a[1]]));
    // Without any rule, the flag forgets everything that passes the filters.
    let v = env.json(&["forget", "--unsafe-allow-remove-all"]);
    assert_eq!(ids(&v["forgotten"]), set(&[&a[1]]));
    assert_eq!(live(&env), BTreeSet::new());
}

#[test]
fn forget_prune_runs_prune_after() {
    let (env, _, _) = setup();
    std::fs::write(env.path("data/other"), common::random_bytes(200_000, 7)).unwrap();
    backup(&env, "alpha", "");
    std::fs::remove_file(env.path("data/other")).unwrap();
    backup(&env, "alpha", "");
    let out = env
        .cmd()
        .env("COFFER_TEST_PRUNE_GRACE_MS", "100")
        .args(["--json", "forget", "--keep-last", "1", "--prune", "--grace", "100ms"])
        .output()
        .unwrap();
    assert_success(&out);
    let lines: Vec<Value> = text(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 2, "forget's summary, then prune's: {lines:?}");
    assert_eq!(lines[0]["forgotten"].as_array().unwrap().len(), 6);
    assert!(lines[1]["bytes_freed"].as_i64().unwrap() >= 200_000, "{}", lines[1]);
    assert_code(&env.run(&["forget", "--keep-last", "1", "--prune", "-n"]), 2);
    assert_success(&env.run(&["check", "--read-data"]));
}
