//! `coffer rebalance` killed with SIGKILL at varied moments and run again until
//! it completes: after every kill each pack still has at least R copies whose
//! bytes hash to its name (counted by listing the backends' directories), and at
//! the end every pack is on exactly its homes, `check --read-data` is clean and
//! every snapshot restores bit-exact. See
//! docs/design.md#removing-misplaced-copies.

mod common;

use std::time::{Duration, Instant};

use common::replicas::*;
use common::*;

/// When each run dies: after a number of storage requests on one backend
/// (`COFFER_TEST_FAULTS=kill_after=N`: the process kills itself with SIGKILL
/// before the next request, so every step is reached: the listings, the copies,
/// the notice, the removals, the layout), or after a time (SIGKILL from here,
/// landing in the middle of whatever runs: a write, the grace wait).
#[derive(Clone, Copy, Debug)]
enum Kill {
    AfterRequests(u64),
    AfterMs(u64),
}

const KILLS: [Kill; 16] = [
    Kill::AfterRequests(4),
    Kill::AfterRequests(12),
    Kill::AfterMs(60),
    Kill::AfterRequests(20),
    Kill::AfterRequests(30),
    Kill::AfterMs(120),
    Kill::AfterRequests(40),
    Kill::AfterRequests(55),
    Kill::AfterMs(180),
    Kill::AfterRequests(70),
    Kill::AfterRequests(90),
    Kill::AfterMs(250),
    Kill::AfterRequests(120),
    Kill::AfterRequests(160),
    Kill::AfterMs(350),
    Kill::AfterRequests(220),
];

/// Runs `coffer rebalance` on `at`, killed as `kill` says unless it ends first
/// (`None`: no kill); returns its exit status, `None` when it was killed.
fn rebalance_killed(r: &Replicas, at: &str, kill: Option<Kill>) -> Option<std::process::ExitStatus> {
    let mut cmd = r.at(at);
    if let Some(Kill::AfterRequests(n)) = kill {
        cmd.env("COFFER_TEST_FAULTS", format!("kill_after={n}"));
    }
    let mut child = cmd
        .args(["-q", "rebalance"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let limit = match kill {
        Some(Kill::AfterMs(ms)) => Duration::from_millis(ms),
        _ => Duration::from_secs(120),
    };
    let start = Instant::now();
    while start.elapsed() < limit {
        if child.try_wait().unwrap().is_some() {
            let out = child.wait_with_output().unwrap();
            // No exit code: a signal ended it (it killed itself).
            out.status.code()?;
            assert!(out.status.success(), "rebalance ({kill:?}) failed: {}", text(&out.stderr));
            return Some(out.status);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    None
}

#[test]
fn rebalance_survives_kill_9_at_any_moment_and_never_drops_below_r_copies() {
    let r0 = Replicas::new(2, &["b0:1G", "b1:1G", "b2:1G"]);
    let r = Replicas { names: vec!["b0".into(), "b1".into(), "b2".into(), "b3".into()], ..r0 };
    let src = r.env.path("src");
    make_tree(&src, 5);
    for i in 0..14u64 {
        std::fs::write(src.join(format!("more{i}")), random_bytes(1 << 20, 500 + i)).unwrap();
    }
    let first = backup(&r, "b0", &src, &[]);
    let kept = keep_copy(&r, &src, "first");
    std::fs::write(src.join("late"), random_bytes(1_500_000, 99)).unwrap();
    let second = backup(&r, "b1", &src, &[]);
    let packs: Vec<String> = r.verified_holders().into_keys().collect();
    assert!(packs.len() >= 12, "{packs:?}");

    let b3 = r.dir("b3");
    assert_success(&r.run("b0", &["backend", "add", "b3", b3.to_str().unwrap(), "--capacity", "2G"]));
    let mut kills = Vec::new();
    let mut steps = Vec::new();
    let mut finished = false;
    let plan = KILLS.iter().copied().map(Some).chain(std::iter::once(None));
    for (round, kill) in plan.enumerate() {
        let at = &r.names[round % 4];
        match rebalance_killed(&r, at, kill) {
            Some(_) => finished = true,
            None => kills.push(kill),
        }
        // Whatever the moment of the kill, no pack has fewer than two sound copies.
        let holders = r.verified_holders();
        for p in &packs {
            let n = holders.get(p).map_or(0, Vec::len);
            assert!(n >= 2, "after run {round} (killed: {kill:?}) pack {p} has {n} verified copies: {holders:?}");
        }
        // Which step the kill interrupted: a copy notice left behind means it
        // came after the announcement (waiting, or removing).
        let noticed = r.names.iter().any(|n| !r.objects(n, "prune").is_empty());
        let extra = holders.values().filter(|h| h.len() > 2).count();
        steps.push((kill, noticed, extra));
        if finished {
            break;
        }
    }
    eprintln!("rebalance runs (kill, copy notice left, packs with an extra copy): {steps:?}");
    assert!(
        steps.iter().any(|(k, noticed, _)| k.is_some() && *noticed),
        "no kill landed between the announcement and the end of the removals: {steps:?}"
    );
    assert!(finished, "rebalance never completed");
    assert!(kills.len() >= 6, "the runs were killed {} times: too few to test anything", kills.len());

    let (code, v) = r.json("b3", &["check", "--replicas"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["misplaced"], 0, "every pack on exactly its homes: {v}");
    let (_, list) = r.json("b2", &["backend", "list"]);
    assert_eq!(list["migrating"], false, "{list}");
    let holders = r.verified_holders();
    assert_eq!(holders.keys().cloned().collect::<Vec<_>>(), packs);
    assert!(holders.values().all(|h| h.len() == 2), "{holders:?}");
    assert!(holders.values().filter(|h| h.contains(&"b3".to_string())).count() > 0);
    for n in &r.names {
        assert!(r.objects(n, "prune").is_empty(), "no copy notice left on {n}");
    }
    assert_success(&r.run("b2", &["-q", "check", "--read-data"]));
    restores_bit_exact(&r, "b3", &[(first, src.clone(), kept), (second, src.clone(), src.clone())]);
}
