//! A repository over several real S3 servers: two Versity gateways of the test's
//! own plus a local directory, two copies of every pack. One gateway is killed
//! in the middle of a backup, which completes with `--min-copies 1` and says so;
//! `check --replicas` names the under-replicated packs, `repair --replicas`
//! restores two copies, and every snapshot restores bit-exact with any one
//! backend gone. Skips when the S3 test variables are not set (CI sets them).
//! See docs/design.md#many-backends and docs/testing.md.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::remote::{Gateway, unique, var};
use common::*;

/// The test's scratch space, credentials and backends.
struct Setup {
    env: Env,
    gateways: Vec<Gateway>,
    /// (name, location) of every backend: `s3a`, `s3b`, `disk`.
    backends: Vec<(String, String)>,
}

impl Setup {
    /// `coffer` opened at backend `at`, with the default grace period: a backup
    /// that retries a dead server takes longer than a test's short one allows.
    fn cmd(&self, at: usize) -> Command {
        let mut c = self.env.cmd();
        c.env("COFFER_REPOSITORY", &self.backends[at].1)
            .env("COFFER_RETRY_BASE_MS", "1")
            .env("AWS_ACCESS_KEY_ID", var("COFFER_TEST_S3_ACCESS_KEY").unwrap())
            .env("AWS_SECRET_ACCESS_KEY", var("COFFER_TEST_S3_SECRET_KEY").unwrap())
            .env("AWS_REGION", var("COFFER_TEST_S3_REGION").unwrap());
        c
    }

    fn json(&self, at: usize, args: &[&str]) -> (i32, serde_json::Value) {
        let out = self.cmd(at).arg("--json").args(args).output().unwrap();
        let v = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{args:?}: {e}: {}{}", text(&out.stdout), text(&out.stderr)));
        (out.status.code().unwrap_or(-1), v)
    }

    /// Restores snapshot `id` opening the repository at backend `at`, and
    /// compares it with `held` (what `path` held when it was backed up).
    fn restores(&self, at: usize, id: &str, path: &Path, held: &Path) {
        let target = self.env.path("restored");
        let out = self.cmd(at).args(["-q", "restore", id, "--target", target.to_str().unwrap()]).output().unwrap();
        assert_success(&out);
        assert_same_tree(held, &target.join(path.strip_prefix("/").unwrap()));
        std::fs::remove_dir_all(&target).unwrap();
    }
}

/// Packs stored below `dir` (a gateway's bucket prefix or a local backend).
fn packs_under(dir: &Path) -> BTreeSet<String> {
    files_under(&dir.join("data"))
        .iter()
        .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
        .filter(|n| n.len() == 64)
        .collect()
}

fn write_files(dir: &Path, tag: &str, n: u64, seed: u64) {
    std::fs::create_dir_all(dir).unwrap();
    for i in 0..n {
        std::fs::write(dir.join(format!("{tag}{i}")), random_bytes(1 << 20, seed + i)).unwrap();
    }
}

#[test]
fn two_copies_over_two_s3_servers_and_a_disk_survive_a_server_killed_mid_backup() {
    let env = Env::empty();
    let Some(a) = Gateway::start(&env.path("gw-a")) else { return };
    let b = Gateway::start(&env.path("gw-b")).unwrap();
    let bucket = var("COFFER_TEST_S3_BUCKET").unwrap();
    let prefix = unique("replicas-s3");
    let disk = env.path("disk");
    let backends = vec![
        ("s3a".to_string(), format!("s3:{}/{bucket}/{prefix}", a.endpoint)),
        ("s3b".to_string(), format!("s3:{}/{bucket}/{prefix}", b.endpoint)),
        ("disk".to_string(), disk.to_str().unwrap().to_string()),
    ];
    let mut s = Setup { env, gateways: vec![a, b], backends };
    let prefix_dir = |g: &Gateway| g.bucket_dir().join(&prefix);
    let mut init = s.cmd(2);
    init.args(["init", "--kdf-log-n", "10", "--insecure-kdf", "--pack-size", "1M", "--replicas", "2"]);
    for (name, loc) in &s.backends {
        init.args(["--backend", &format!("{name}:1G={loc}")]);
    }
    assert_success(&init.output().unwrap());

    let src = s.env.path("src");
    write_files(&src, "first", 10, 100);
    let out = s.cmd(0).args(["--json", "-q", "backup", src.to_str().unwrap()]).output().unwrap();
    assert_success(&out);
    let first = snapshot_id(&out.stdout);
    let kept = s.env.path("kept");
    assert!(Command::new("cp").arg("-a").arg(&src).arg(&kept).status().unwrap().success());

    // Server b dies once it holds a few of the second backup's packs.
    write_files(&src, "second", 24, 200);
    let before = packs_under(&prefix_dir(&s.gateways[1]));
    let child = s
        .cmd(2)
        .args(["--json", "--min-copies", "1", "backup", src.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while packs_under(&prefix_dir(&s.gateways[1])).len() < before.len() + 2 {
        assert!(start.elapsed() < Duration::from_secs(60), "server b never received the backup's packs");
        std::thread::sleep(Duration::from_millis(5));
    }
    s.gateways[1].kill();
    let out = child.wait_with_output().unwrap();
    assert_success(&out);
    let err = text(&out.stderr);
    assert!(err.contains("fewer copies") && err.contains("on s3b"), "the backup says what is short: {err}");
    let second = snapshot_id(&out.stdout);
    // What the backup reported short: the packs s3b did not get.
    let short: BTreeSet<String> = err
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["type"] == "under_replicated")
        .flat_map(|v| v["objects"].as_array().cloned().unwrap_or_default())
        .filter_map(|o| o["object"].as_str().map(String::from))
        .filter(|o| o.starts_with("data/"))
        .map(|o| o.rsplit('/').next().unwrap().to_string())
        .collect();
    assert!(!short.is_empty(), "{err}");

    // Server b comes back (its data survived the crash); check names the packs it lacks.
    s.gateways[1].restart();
    let (code, v) = s.json(0, &["check", "--replicas"]);
    assert_eq!(code, 20, "{v}");
    let under: BTreeSet<String> =
        v["under_replicated"].as_array().unwrap().iter().map(|x| x.as_str().unwrap().to_string()).collect();
    assert!(
        !under.is_empty() && under.is_subset(&short),
        "under-replicated {under:?} are what the backup left short {short:?}"
    );
    let on_b = packs_under(&prefix_dir(&s.gateways[1]));
    assert!(under.iter().all(|p| !on_b.contains(p)), "s3b lacks every pack named");
    let b_lacks: BTreeSet<String> =
        v["backends"][1]["missing_packs"].as_array().unwrap().iter().map(|x| x.as_str().unwrap().to_string()).collect();
    assert_eq!(b_lacks, under, "{v}");
    assert!(v["missing"].as_array().unwrap().is_empty(), "{v}");

    let (code, v) = s.json(1, &["repair", "--replicas"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["packs_copied"].as_u64().unwrap() as usize, under.len(), "only the difference is sent: {v}");
    let (code, v) = s.json(2, &["check", "--replicas"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["misplaced"], 0, "{v}");
    assert_success(&s.cmd(0).args(["-q", "check", "--read-data"]).output().unwrap());

    // Opened at the local directory, the repository still keeps a local cache for
    // its remote members (a local location alone would get none).
    let out = s.cmd(2).args(["-v", "--json", "snapshots"]).output().unwrap();
    assert_success(&out);
    let storage = text(&out.stderr)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["type"] == "storage")
        .unwrap_or_else(|| panic!("no storage line: {}", text(&out.stderr)));
    assert!(storage["cache"].is_object(), "{storage}");

    // Any one backend gone: a server down, or the directory deleted.
    let snapshots = [(first, kept.clone()), (second, src.clone())];
    for gone in 0..3 {
        let moved: PathBuf = s.env.path("disk-away");
        match gone {
            2 => std::fs::rename(&disk, &moved).unwrap(),
            g => s.gateways[g].kill(),
        }
        for (id, held) in &snapshots {
            s.restores((gone + 1) % 3, id, &src, held);
        }
        match gone {
            2 => std::fs::rename(&moved, &disk).unwrap(),
            g => s.gateways[g].restart(),
        }
    }
}

fn snapshot_id(stdout: &[u8]) -> String {
    let line = stdout.split(|&b| b == b'\n').rfind(|l| !l.is_empty()).unwrap();
    let v: serde_json::Value = serde_json::from_slice(line).unwrap_or_else(|e| panic!("{e}: {}", text(stdout)));
    v["snapshot_id"].as_str().unwrap_or_else(|| panic!("no snapshot id in {v}")).to_string()
}
