//! Years in a repository's life, compressed: many writers at once, forget and
//! prune while backups run, and processes killed at random moments. Afterwards the
//! repository checks clean and every snapshot that was not forgotten restores
//! bit for bit. Randomness comes from fixed seeds, so a failure can be replayed.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use common::*;

/// Prune's grace period in these tests (the real default is two minutes).
const GRACE_MS: &str = "1500";

/// The grace period while four backups run at once on a small, busy machine: a backup's
/// last check must come within a quarter of it before its snapshot is written.
const BUSY_GRACE_MS: &str = "4000";

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn cmd(env: &Env, home: &Path) -> Command {
    let mut c = env.cmd();
    c.env("HOME", home).env("COFFER_TEST_PRUNE_GRACE_MS", GRACE_MS);
    c
}

fn spawn(env: &Env, home: &Path, args: &[&str]) -> Child {
    cmd(env, home).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
}

fn run(env: &Env, home: &Path, args: &[&str]) -> Output {
    cmd(env, home).args(args).output().unwrap()
}

/// Waits until the repository holds more packs than `before`, or `child` ends.
fn wait_for_more_packs(env: &Env, before: usize, child: &mut Child) {
    let data = env.repo().join("data");
    for _ in 0..4000 {
        if files_under(&data).len() > before || child.try_wait().unwrap().is_some() {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn json_of(out: &Output) -> serde_json::Value {
    assert_success(out);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(&out.stdout)))
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let (src, dst) = (e.path(), to.join(e.file_name()));
        if e.file_type().unwrap().is_dir() {
            copy_tree(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).unwrap();
        }
    }
}

/// Restores snapshot `id` of `src` and compares it with `expected`.
fn assert_restores(env: &Env, id: &str, src: &Path, expected: &Path) {
    let target = env.path(&format!("restore-{id}"));
    let out = env.run(&["-q", "restore", id, "--target", target.to_str().unwrap()]);
    assert_success(&out);
    assert_same_tree(expected, &target.join(src.strip_prefix("/").unwrap()));
    std::fs::remove_dir_all(&target).unwrap();
}

#[test]
fn four_writers_and_a_prune_at_once_lose_nothing() {
    let env = Env::with_init_args(&["--pack-size", "1M"]);
    let shared: Vec<Vec<u8>> = (0..6).map(|i| random_bytes(300_000, 100 + i)).collect();
    let hosts = 4;
    let srcs: Vec<PathBuf> = (0..hosts).map(|h| env.path(&format!("src{h}"))).collect();
    let homes: Vec<PathBuf> = (0..hosts).map(|h| env.path(&format!("home{h}"))).collect();
    for (h, src) in srcs.iter().enumerate() {
        std::fs::create_dir_all(src.join("shared")).unwrap();
        for (i, data) in shared.iter().enumerate() {
            std::fs::write(src.join(format!("shared/s{i}")), data).unwrap();
        }
        std::fs::write(src.join("own"), random_bytes(400_000, 1000 + h as u64)).unwrap();
    }
    let admin = env.path("admin-home");
    // (snapshot id, host, copy of what it holds)
    let mut snaps: Vec<(String, usize, PathBuf)> = Vec::new();
    let mut forgotten: Vec<String> = Vec::new();
    for round in 0..3u64 {
        for (h, src) in srcs.iter().enumerate() {
            std::fs::write(src.join(format!("r{round}")), random_bytes(350_000, round * 10 + h as u64)).unwrap();
            std::fs::write(src.join("shared/s0"), random_bytes(300_000, 500 + round)).unwrap();
            if round > 0 {
                let _ = std::fs::remove_file(src.join(format!("r{}", round - 1)));
            }
        }
        let expect: Vec<PathBuf> = (0..hosts).map(|h| env.path(&format!("expect/{round}/{h}"))).collect();
        for h in 0..hosts {
            copy_tree(&srcs[h], &expect[h]);
        }
        // The oldest snapshot of host 0 is forgotten and pruned while the backups run.
        let victim = snaps.iter().find(|(id, h, _)| *h == 0 && !forgotten.contains(id)).map(|s| s.0.clone());
        let pruner = {
            let victim = victim.clone();
            let (env_dir, admin) = (env.dir.path().to_path_buf(), admin.clone());
            std::thread::spawn(move || -> Vec<Output> {
                let mut c = Command::new(env!("CARGO_BIN_EXE_coffer"));
                c.env_clear()
                    .env("PATH", std::env::var_os("PATH").unwrap_or_default())
                    .env("HOME", &admin)
                    .env("COFFER_REPOSITORY", env_dir.join("repo"))
                    .env("COFFER_PASSWORD", PASSWORD)
                    .env("COFFER_TEST_PRUNE_GRACE_MS", BUSY_GRACE_MS);
                let mut outs = Vec::new();
                if let Some(v) = victim {
                    outs.push(
                        Command::new(c.get_program())
                            .envs(c.get_envs().filter_map(|(k, v)| Some((k, v?))))
                            .args(["-q", "forget", &v])
                            .output()
                            .unwrap(),
                    );
                }
                outs.push(c.args(["--json", "prune", "--max-unused", "10"]).output().unwrap());
                outs
            })
        };
        let children: Vec<Child> = (0..hosts)
            .map(|h| {
                let host = format!("host{h}");
                cmd(&env, &homes[h])
                    .env("COFFER_TEST_PRUNE_GRACE_MS", BUSY_GRACE_MS)
                    .args(["--json", "backup", "--host", &host, srcs[h].to_str().unwrap()])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for (h, child) in children.into_iter().enumerate() {
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success(), "round {round}: backup of host {h} failed: {}", text(&out.stderr));
            let v = json_of(&out);
            snaps.push((v["snapshot_id"].as_str().unwrap().to_string(), h, expect[h].clone()));
        }
        for out in pruner.join().unwrap() {
            assert!(out.status.success(), "round {round}: forget or prune failed: {}", text(&out.stderr));
        }
        let check = env.run(&["check"]);
        assert!(check.status.success(), "round {round}: check failed: {}", text(&check.stderr));
        if let Some(v) = victim {
            forgotten.push(v);
        }
    }
    let check = env.run(&["check", "--read-data"]);
    assert_success(&check);
    let listed = env.json(&["snapshots"]);
    let ids: Vec<&str> = listed.as_array().unwrap().iter().map(|s| s["id"].as_str().unwrap()).collect();
    for (id, h, expected) in &snaps {
        if forgotten.contains(id) {
            assert!(!ids.contains(&id.as_str()), "forgotten snapshot {id} is still listed");
            continue;
        }
        assert!(ids.contains(&id.as_str()), "snapshot {id} was lost");
        assert_restores(&env, id, &srcs[*h], expected);
    }
    // The history joined the concurrent writers: the newest snapshots' links cover
    // every other head, so the repository has few heads.
    let head_count = listed.as_array().unwrap().len();
    assert!(head_count >= snaps.len() - forgotten.len());
    // Prune freed space: a final prune with nothing running leaves no notice behind.
    let out = run(&env, &admin, &["--json", "prune"]);
    let r = json_of(&out);
    assert!(r["report"]["packs_spared"].as_u64().unwrap() == 0, "{r}");
    assert!(files_under(&env.repo().join("prune")).is_empty(), "notices left after a quiet prune");
    assert!(files_under(&env.repo().join("sessions")).is_empty(), "session markers left behind");
    assert_success(&env.run(&["-q", "check", "--read-data"]));
}

#[test]
fn processes_killed_at_random_moments_never_damage_the_repository() {
    let env = Env::with_init_args(&["--pack-size", "1M"]);
    let home = env.path("home");
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    for i in 0..4 {
        std::fs::write(src.join(format!("base{i}")), random_bytes(1 << 20, i)).unwrap();
    }
    let mut rng = Rng(0x5eed_c0ff_ee00_1234);
    let mut completed: Vec<(String, PathBuf)> = Vec::new();
    let mut forgotten: Vec<String> = Vec::new();
    let (mut pending_new, mut reused_total, mut killed_backups) = (0u64, 0i64, 0);
    for iter in 0..10u64 {
        // Backups that get killed have enough new data to be caught uploading.
        let files = if iter % 3 == 2 { 2 } else { 8 };
        for f in 0..files {
            let new = 1_000_000 + rng.below(1_000_000) as usize;
            std::fs::write(src.join(format!("n{iter}-{f}")), random_bytes(new, 7_000 + iter * 10 + f)).unwrap();
            pending_new += new as u64;
        }
        let kill_after = Duration::from_millis(if iter % 3 == 2 { rng.below(2_500) } else { 60 + rng.below(300) });
        // Every other killed backup is killed only once it has uploaded a pack, so
        // that reuse is exercised however slow the machine; the others at any moment.
        let after_upload = iter % 3 != 2 && iter % 2 == 1;
        let packs_before = files_under(&env.repo().join("data")).len();
        let mut child = if iter % 3 == 2 {
            if completed.len() > 2 {
                let victim = completed.iter().find(|(id, _)| !forgotten.contains(id)).unwrap().0.clone();
                assert_success(&run(&env, &home, &["-q", "forget", &victim]));
                forgotten.push(victim);
            }
            spawn(&env, &home, &["--json", "prune", "--max-unused", "1"])
        } else {
            killed_backups += 1;
            spawn(&env, &home, &["--json", "backup", src.to_str().unwrap()])
        };
        if after_upload {
            // Killed as soon as a pack is there: a fast backup could finish in any pause.
            wait_for_more_packs(&env, packs_before, &mut child);
        } else {
            std::thread::sleep(kill_after);
        }
        let _ = child.kill();
        let out = child.wait_with_output().unwrap();
        if out.status.success() && iter % 3 != 2 {
            // It finished before the kill: a completed snapshot.
            let v = json_of(&out);
            let copy = env.path(&format!("expect/{iter}-early"));
            copy_tree(&src, &copy);
            completed.push((v["snapshot_id"].as_str().unwrap().to_string(), copy));
            pending_new = 0;
        }
        // Whatever was interrupted, the repository checks clean...
        let check = run(&env, &home, &["check"]);
        assert_success(&check);
        // ... and the next backup completes, reusing what the killed one uploaded.
        let out = run(&env, &home, &["--json", "backup", src.to_str().unwrap()]);
        let v = json_of(&out);
        let added = v["summary"]["bytes_added"].as_u64().unwrap() as i64;
        reused_total += pending_new as i64 - added;
        eprintln!("iteration {iter}: {pending_new} new bytes pending, the next backup uploaded {added}");
        pending_new = 0;
        let copy = env.path(&format!("expect/{iter}"));
        copy_tree(&src, &copy);
        completed.push((v["snapshot_id"].as_str().unwrap().to_string(), copy));
    }
    eprintln!(
        "{killed_backups} backups killed; the backups after them uploaded {reused_total} bytes less than was new"
    );
    assert!(reused_total > 1 << 20, "packs uploaded by killed backups were not reused");
    assert_success(&run(&env, &home, &["-q", "check", "--read-data"]));
    let listed = env.json(&["snapshots"]);
    let ids: Vec<&str> = listed.as_array().unwrap().iter().map(|s| s["id"].as_str().unwrap()).collect();
    for (id, copy) in &completed {
        if forgotten.contains(id) {
            continue;
        }
        assert!(ids.contains(&id.as_str()), "completed snapshot {id} was lost");
        assert_restores(&env, id, &src, copy);
    }
}
