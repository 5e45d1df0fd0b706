//! `coffer init --from-repo` and `coffer copy` through the binary
//! (docs/design.md#copy): a copy between related local repositories, a second
//! copy that sends nothing, one after a changed backup that sends only the new
//! packs, bit-exact restores and `check --read-data` of the destination, a copy
//! interrupted by storage faults then resumed, the refusals, and local <-> S3
//! when the test servers are up (COFFER_TEST_S3_*).

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Output;

use common::*;

/// Runs `coffer` with the destination `dst` as repository and `src`'s passphrase.
fn run_in(dst: &str, home: &Path, extra_env: &[(String, String)], args: &[&str]) -> Output {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_coffer"));
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("COFFER_REPOSITORY", dst)
        .env("COFFER_PASSWORD", PASSWORD)
        .env("COFFER_FROM_PASSWORD", PASSWORD);
    for (k, v) in extra_env {
        c.env(k, v);
    }
    c.args(args).output().expect("run coffer")
}

/// Two local repositories: a source with a backup of `src/`, and an empty
/// destination made with `init --from-repo`.
struct Pair {
    env: Env,
}

impl Pair {
    fn new() -> Pair {
        let env = Env::new();
        make_tree(&env.path("src"), 0);
        env.backup(&[&env.path("src")]);
        let p = Pair { env };
        let out = p.dst(&["init", "--kdf-log-n", "10", "--insecure-kdf", "--from-repo", &p.src_repo()]);
        assert_success(&out);
        assert!(text(&out.stdout).contains("related to repository"), "{}", text(&out.stdout));
        p
    }

    fn src_repo(&self) -> String {
        self.env.repo().display().to_string()
    }

    fn dst_repo(&self) -> String {
        self.env.path("dst").display().to_string()
    }

    fn dst(&self, args: &[&str]) -> Output {
        run_in(&self.dst_repo(), &self.env.path("home"), &[], args)
    }

    /// `coffer --json copy --from-repo SRC ARGS...`, which must succeed.
    fn copy(&self, args: &[&str]) -> serde_json::Value {
        let src = self.src_repo();
        let mut a = vec!["--json", "copy", "--from-repo", src.as_str()];
        a.extend_from_slice(args);
        let out = self.dst(&a);
        assert_success(&out);
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

/// Files of noise under `root` (about 3 MB), varied by `seed`.
fn make_tree(root: &Path, seed: u64) {
    std::fs::create_dir_all(root.join("sub")).unwrap();
    for i in 0..10u64 {
        let dir = if i % 2 == 0 { root.to_path_buf() } else { root.join("sub") };
        std::fs::write(dir.join(format!("f{i}")), random_bytes(200_000 + i as usize * 30_000, i + seed * 100)).unwrap();
    }
}

/// Restores the destination's latest snapshot of `src/` into `name` and
/// compares it with `src/`.
fn restore_same(p: &Pair, name: &str) {
    let spec = format!("latest:{}", p.env.path("src").display());
    let out = p.dst(&["restore", &spec, "--target", &p.env.path(name).display().to_string()]);
    assert_success(&out);
    assert_same_tree(&p.env.path("src"), &p.env.path(name));
}

fn packs(repo: &Path) -> BTreeSet<String> {
    files_under(&repo.join("data")).iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect()
}

fn n(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn copy_between_related_repositories_sends_only_the_difference() {
    let p = Pair::new();
    let (src, dst) = (p.env.repo(), p.env.path("dst"));
    // A dry run first: it reports what the real copy sends, and writes nothing.
    let dry = p.copy(&["--dry-run"]);
    assert!(packs(&dst).is_empty());
    let first = p.copy(&[]);
    assert_eq!(first["snapshots"].as_array().unwrap().len(), 1);
    assert_eq!(first["relation"], "shared_keys");
    assert_eq!(dry["sent"]["packs"], first["sent"]["packs"]);
    assert_eq!(n(&first["sent"]["packs"]["objects"]) as usize, packs(&src).len());
    assert_eq!(packs(&src), packs(&dst));
    // Byte for byte: every object has the same name and content on both sides.
    for f in files_under(&src) {
        let rel = f.strip_prefix(&src).unwrap();
        if rel.starts_with("keys") || rel.starts_with("config") || rel.starts_with("tmp") {
            continue;
        }
        assert_eq!(std::fs::read(&f).unwrap(), std::fs::read(dst.join(rel)).unwrap(), "{}", rel.display());
    }
    // The copied snapshot restores bit-exact, with a valid signature, and the
    // destination passes a full check.
    restore_same(&p, "r1");
    assert_success(&p.dst(&["check", "--read-data"]));
    // Again: nothing sent, nothing written, no pack or index file read.
    let again = p.copy(&[]);
    assert_eq!(n(&again["sent"]["total"]["objects"]), 0, "{again}");
    let (s, d) = (&again["requests"]["source"], &again["requests"]["destination"]);
    assert_eq!(n(&s["put"]) + n(&d["put"]) + n(&s["delete"]) + n(&d["delete"]), 0, "{again}");
    // Opening reads the config and a key file on each side, and lists the key
    // files, the layout and the writers (docs/design.md#round-trips); a copy with
    // nothing to do adds only listings (four a side), whatever the repository's size.
    for side in [s, d] {
        assert!(n(&side["get"]) <= 2 && n(&side["head"]) == 0 && n(&side["list"]) <= 7, "{again}");
        // Rounds are counted for each side: at least one, never more than the
        // requests (on a local disk, requests sent together may not overlap).
        let rounds = n(&side["rounds"]);
        assert!(rounds >= 1 && rounds <= n(&side["get"]) + n(&side["list"]), "{again}");
    }

    // A changed backup (one file changed, one added): only the new packs travel.
    std::fs::write(p.env.path("src/f0"), random_bytes(200_000, 777)).unwrap();
    std::fs::write(p.env.path("src/new"), random_bytes(300_000, 778)).unwrap();
    let before = packs(&src);
    p.env.backup(&[&p.env.path("src")]);
    let new: BTreeSet<String> = packs(&src).difference(&before).cloned().collect();
    let new_bytes: u64 =
        new.iter().map(|n| std::fs::metadata(src.join("data").join(&n[..2]).join(n)).unwrap().len()).sum();
    let second = p.copy(&[]);
    assert_eq!(n(&second["sent"]["packs"]["objects"]) as usize, new.len(), "{second}");
    assert_eq!(n(&second["sent"]["packs"]["bytes"]), new_bytes, "{second}");
    assert!(n(&second["sent"]["packs"]["bytes"]) < n(&first["sent"]["packs"]["bytes"]) / 2);
    assert_eq!(second["snapshots"].as_array().unwrap().len(), 1);
    assert_eq!(packs(&src), packs(&dst));
    restore_same(&p, "r2");
    assert_success(&p.dst(&["check", "--read-data"]));
}

#[test]
fn a_copy_interrupted_by_storage_faults_resumes_without_sending_again() {
    let p = Pair::new();
    // A second backup, so that there is more to copy.
    make_tree(&p.env.path("src2"), 1);
    p.env.backup(&[&p.env.path("src2")]);
    let (src, dst) = (p.env.repo(), p.env.path("dst"));
    let src_arg = p.src_repo();
    let mut interrupted = false;
    for seed in 1..=6 {
        // Writes and reads fail so often that retries run out part way.
        let faults = vec![
            ("COFFER_TEST_FAULTS".to_string(), format!("seed={seed},transient=0.75,lost_ack=0.2")),
            ("COFFER_RETRY_BASE_MS".to_string(), "1".to_string()),
        ];
        let out = run_in(&p.dst_repo(), &p.env.path("home"), &faults, &["copy", "--from-repo", &src_arg]);
        if !out.status.success() {
            interrupted = true;
            assert_eq!(out.status.code(), Some(23), "{}", text(&out.stderr));
        }
        let arrived = packs(&dst).len();
        let r = p.copy(&[]);
        // What arrived is not sent again: the rest is.
        assert_eq!(n(&r["sent"]["packs"]["objects"]) as usize + arrived, packs(&src).len(), "{r}");
        assert_eq!(packs(&src), packs(&dst));
        assert_success(&p.dst(&["check", "--read-data"]));
        if interrupted {
            break;
        }
        // Start over with an empty destination for the next seed.
        std::fs::remove_dir_all(&dst).unwrap();
        assert_success(&p.dst(&["init", "--kdf-log-n", "10", "--insecure-kdf", "--from-repo", &src_arg]));
    }
    assert!(interrupted, "no seed interrupted the copy");
    let out = p.dst(&["snapshots", "--json"]);
    assert_success(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 2);
}

#[test]
fn copies_that_cannot_be_made_are_refused_and_say_what_to_do() {
    let p = Pair::new();
    let src_arg = p.src_repo();
    // Unrelated repositories: not implemented yet, exit code 2.
    let other = Env::new();
    let out = run_in(&other.repo().display().to_string(), &p.env.path("home"), &[], &["copy", "--from-repo", &src_arg]);
    let err = assert_code(&out, 2);
    assert!(err.contains("unrelated") && err.contains("init --from-repo"), "{err}");
    // The same repository.
    let out = run_in(&src_arg, &p.env.path("home"), &[], &["copy", "--from-repo", &src_arg]);
    let err = assert_code(&out, 1);
    assert!(err.contains("same repository"), "{err}");
    // No source repository.
    let missing = p.env.path("nothing").display().to_string();
    let out = p.dst(&["copy", "--from-repo", &missing]);
    let err = assert_code(&out, 10);
    assert!(err.contains("source repository"), "{err}");
    // A named snapshot the source lacks.
    let out = p.dst(&["copy", "--from-repo", &src_arg, "deadbeef"]);
    assert_code(&out, 1);
    // A wrong source passphrase.
    let wrong = vec![("COFFER_FROM_PASSWORD".to_string(), "wrong".to_string())];
    let out = run_in(&p.dst_repo(), &p.env.path("home"), &wrong, &["copy", "--from-repo", &src_arg]);
    assert_code(&out, 12);
}

#[test]
fn copy_filters_and_names_like_snapshots() {
    let p = Pair::new();
    make_tree(&p.env.path("other"), 2);
    let out = p.env.run(&["--json", "backup", "--host", "elsewhere", &p.env.path("other").display().to_string()]);
    assert_success(&out);
    let r = p.copy(&["--host", "elsewhere"]);
    assert_eq!(r["snapshots"].as_array().unwrap().len(), 1);
    let out = p.dst(&["--json", "snapshots"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[0]["snapshot"]["hostname"], "elsewhere");
    // `latest` of the rest, then nothing left.
    let r = p.copy(&["latest"]);
    assert!(r["snapshots"].as_array().unwrap().is_empty() || r["snapshots_present"] == 1, "{r}");
    let r = p.copy(&[]);
    assert_eq!(r["snapshots"].as_array().unwrap().len(), 1, "{r}");
    assert!(r["unlinked"].as_array().unwrap().is_empty(), "{r}");
    assert_success(&p.dst(&["check", "--read-data"]));
}

fn s3_env() -> Option<(String, Vec<(String, String)>)> {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let Some(endpoint) = var("COFFER_TEST_S3_ENDPOINT") else {
        coffer_backend::testing::servers::absent(coffer_backend::testing::servers::Server::S3);
        return None;
    };
    let env = vec![
        ("AWS_ACCESS_KEY_ID".into(), var("COFFER_TEST_S3_ACCESS_KEY")?),
        ("AWS_SECRET_ACCESS_KEY".into(), var("COFFER_TEST_S3_SECRET_KEY")?),
        ("AWS_REGION".into(), var("COFFER_TEST_S3_REGION")?),
    ];
    let unique = format!(
        "copy-{}-{}",
        std::process::id(),
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
    );
    Some((format!("s3:{endpoint}/{}/{unique}", var("COFFER_TEST_S3_BUCKET")?), env))
}

#[test]
fn copy_from_local_to_s3_and_back() {
    let Some((s3, creds)) = s3_env() else { return };
    let p = Pair::new();
    let home = p.env.path("home");
    let src_arg = p.src_repo();
    let init = ["init", "--kdf-log-n", "10", "--insecure-kdf", "--from-repo", src_arg.as_str()];
    assert_success(&run_in(&s3, &home, &creds, &init));
    let out = run_in(&s3, &home, &creds, &["--json", "copy", "--from-repo", &src_arg]);
    assert_success(&out);
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(n(&r["sent"]["packs"]["objects"]) as usize, packs(&p.env.repo()).len());
    let out = run_in(&s3, &home, &creds, &["--json", "copy", "--from-repo", &src_arg]);
    assert_success(&out);
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(n(&r["sent"]["total"]["objects"]), 0, "{r}");
    assert_success(&run_in(&s3, &home, &creds, &["check", "--read-data"]));
    // Back: from S3 into a second local repository related to the first.
    let back = p.env.path("back").display().to_string();
    let init = ["init", "--kdf-log-n", "10", "--insecure-kdf", "--from-repo", src_arg.as_str()];
    assert_success(&run_in(&back, &home, &[], &init));
    let out = run_in(&back, &home, &creds, &["--json", "copy", "--from-repo", &s3]);
    assert_success(&out);
    let target = p.env.path("r").display().to_string();
    let spec = format!("latest:{}", p.env.path("src").display());
    assert_success(&run_in(&back, &home, &[], &["restore", &spec, "--target", &target]));
    assert_same_tree(&p.env.path("src"), &p.env.path("r"));
    assert_success(&run_in(&back, &home, &[], &["check", "--read-data"]));
}

#[test]
fn a_copy_killed_part_way_resumes_and_the_destination_stays_consistent() {
    let p = Pair::new();
    make_tree(&p.env.path("src2"), 3);
    p.env.backup(&[&p.env.path("src2")]);
    let (src, dst) = (p.env.repo(), p.env.path("dst"));
    let src_arg = p.src_repo();
    // Every storage operation is slowed (a fifth of them wait 30 ms and fail,
    // then are retried), so that SIGKILL lands in the middle of the copy.
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_coffer"));
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", p.env.path("home"))
        .env("COFFER_REPOSITORY", p.dst_repo())
        .env("COFFER_PASSWORD", PASSWORD)
        .env("COFFER_FROM_PASSWORD", PASSWORD)
        .env("COFFER_TEST_FAULTS", "seed=5,timeout=0.2,delay_ms=30")
        .env("COFFER_RETRY_BASE_MS", "1")
        .args(["copy", "--from-repo", &src_arg])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut child = c.spawn().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(250));
    let _ = child.kill();
    child.wait().unwrap();
    // Whatever arrived is a consistent repository already.
    assert_success(&p.dst(&["check"]));
    let arrived = packs(&dst).len();
    eprintln!("killed after {arrived} of {} packs arrived", packs(&src).len());
    let r = p.copy(&[]);
    assert_eq!(n(&r["sent"]["packs"]["objects"]) as usize + arrived, packs(&src).len(), "{r}");
    assert_eq!(packs(&src), packs(&dst));
    assert_success(&p.dst(&["check", "--read-data"]));
}

#[test]
fn copy_into_a_repository_with_its_own_data_keys_writes_new_signed_snapshots() {
    let env = Env::new();
    make_tree(&env.path("src"), 4);
    let id = env.backup(&[&env.path("src")]);
    let dst = env.path("own").display().to_string();
    let home = env.path("home");
    let src_arg = env.repo().display().to_string();
    let init = ["init", "--kdf-log-n", "10", "--insecure-kdf", "--from-repo", &src_arg, "--own-data-keys"];
    let out = run_in(&dst, &home, &[], &init);
    assert_success(&out);
    assert!(text(&out.stdout).contains("own data keys"), "{}", text(&out.stdout));
    let out = run_in(&dst, &home, &[], &["--json", "copy", "--from-repo", &src_arg]);
    assert_success(&out);
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["relation"], "shared_ids");
    assert_eq!(r["snapshots"][0], id.as_str());
    assert!(n(&r["blobs"]["objects"]) >= 11, "{r}");
    // The new snapshot says where it comes from, and is signed by this client.
    let out = run_in(&dst, &home, &[], &["--json", "snapshots"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[0]["snapshot"]["copied_from"]["snapshot"], id.as_str());
    assert_eq!(v[0]["signature_valid"], true);
    let spec = format!("latest:{}", env.path("src").display());
    let target = env.path("r").display().to_string();
    assert_success(&run_in(&dst, &home, &[], &["restore", &spec, "--target", &target]));
    assert_same_tree(&env.path("src"), &env.path("r"));
    assert_success(&run_in(&dst, &home, &[], &["check", "--read-data"]));
    // Again: nothing.
    let out = run_in(&dst, &home, &[], &["--json", "copy", "--from-repo", &src_arg]);
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(n(&r["blobs"]["objects"]) + n(&r["sent"]["total"]["objects"]), 0, "{r}");
}

#[test]
fn copies_while_the_source_takes_backups_and_a_prune_lose_nothing() {
    let p = Pair::new();
    let home = p.env.path("home");
    let src_arg = p.src_repo();
    // Into S3 when the test servers are up, else into the local destination.
    let (dst, creds) = match s3_env() {
        Some((s3, creds)) => {
            let init = ["init", "--kdf-log-n", "10", "--insecure-kdf", "--from-repo", src_arg.as_str()];
            assert_success(&run_in(&s3, &home, &creds, &init));
            (s3, creds)
        }
        None => (p.dst_repo(), Vec::new()),
    };
    // A mirror: without --with-forgets, a copy that took h0's first snapshot
    // before the forget keeps it, so the tombstone forgetting it is not copied
    // and a later snapshot linking to that tombstone leaves its link open (as
    // docs/design.md#copy says, and `check` then reports it).
    let copy = || run_in(&dst, &home, &creds, &["--json", "copy", "--with-forgets", "--from-repo", &src_arg]);
    for h in 0..4 {
        make_tree(&p.env.path(&format!("h{h}")), 10 + h);
    }
    let grace = [("COFFER_TEST_PRUNE_GRACE_MS".to_string(), "300".to_string())];
    let on_src = |host: &str, args: &[&str]| {
        let mut c = p.env.cmd();
        c.env("COFFER_HOST", host).envs(grace.iter().cloned()).args(args);
        c.output().unwrap()
    };
    std::thread::scope(|s| {
        // Four hosts back up twice each (their tree changed in between); one
        // of them forgets its first snapshot and prunes; copies run meanwhile.
        let writers: Vec<_> = (0..4)
            .map(|h| {
                let (host, dir) = (format!("h{h}"), p.env.path(&format!("h{h}")));
                let on_src = &on_src;
                s.spawn(move || {
                    assert_success(&on_src(&host, &["-q", "backup", dir.to_str().unwrap()]));
                    std::fs::write(dir.join("f0"), random_bytes(200_000, 99 + h)).unwrap();
                    assert_success(&on_src(&host, &["-q", "backup", dir.to_str().unwrap()]));
                    if h == 0 {
                        assert_success(&on_src(&host, &["-q", "forget", "--host", &host, "--keep-last", "1"]));
                        assert_success(&on_src(&host, &["-q", "prune", "--max-unused", "0"]));
                    }
                })
            })
            .collect();
        while !writers.iter().all(|w| w.is_finished()) {
            let out = copy();
            // A prune of the source meanwhile may make a copy stop and ask to run it again.
            assert!(matches!(out.status.code(), Some(0 | 24)), "{}", text(&out.stderr));
        }
        for w in writers {
            w.join().unwrap();
        }
    });
    assert_success(&copy());
    let again: serde_json::Value = serde_json::from_slice(&copy().stdout).unwrap();
    assert_eq!(n(&again["sent"]["total"]["objects"]), 0, "{again}");
    assert_success(&run_in(&dst, &home, &creds, &["check", "--read-data"]));
    // Every snapshot the source keeps is in the destination, and restores.
    let ids = |repo: &str, env: &[(String, String)]| -> BTreeSet<String> {
        let out = run_in(repo, &home, env, &["--json", "snapshots"]);
        assert_success(&out);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v.as_array().unwrap().iter().map(|s| s["id"].as_str().unwrap().to_string()).collect()
    };
    let (in_src, in_dst) = (ids(&src_arg, &[]), ids(&dst, &creds));
    assert_eq!(in_src, in_dst, "a mirror holds what the source keeps, and what it forgot is forgotten");
    for h in 0..4 {
        let dir = p.env.path(&format!("h{h}"));
        let target = p.env.path(&format!("r{h}"));
        let spec = format!("latest:{}", dir.display());
        let args = ["restore", spec.as_str(), "--host", &format!("h{h}"), "--target", target.to_str().unwrap()];
        assert_success(&run_in(&dst, &home, &creds, &args));
        assert_same_tree(&dir, &target);
    }
}
