//! `coffer copy --rechunk` through the binary (docs/design.md#copy, "Unrelated
//! repositories"): a copy into a repository with its own keys and chunker sizes
//! whose restores equal the source's in content and metadata (modes, times,
//! extended attributes, symlinks, hard links, sparse files); a second copy that
//! sends nothing; one after a change that reads only the changed file; a
//! destination backup that deduplicates against the copied content; copies
//! killed with SIGKILL at several moments, then resumed; and local <-> S3 both
//! ways while the source takes backups and a prune (COFFER_TEST_S3_*).

mod common;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::*;

/// Runs `coffer` against repository `repo` (a path or location), with `src`'s
/// passphrase for `--from-repo`.
fn run_in(repo: &str, home: &Path, extra_env: &[(String, String)], args: &[&str]) -> Output {
    cmd_in(repo, home, extra_env, args).output().expect("run coffer")
}

fn cmd_in(repo: &str, home: &Path, extra_env: &[(String, String)], args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_coffer"));
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("COFFER_REPOSITORY", repo)
        .env("COFFER_PASSWORD", PASSWORD)
        .env("COFFER_FROM_PASSWORD", PASSWORD)
        .env("COFFER_TEST_PRUNE_GRACE_MS", "200");
    for (k, v) in extra_env {
        c.env(k, v);
    }
    c.args(args);
    c
}

fn json_of(out: &Output) -> serde_json::Value {
    assert_success(out);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(&out.stdout)))
}

fn n(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// The chunker sizes of the destinations: unlike the source's defaults.
const SMALL_CHUNKS: [&str; 6] = ["--chunk-min", "64K", "--chunk-avg", "128K", "--chunk-max", "512K"];

fn init_unrelated(repo: &str, home: &Path, env: &[(String, String)]) {
    let mut a = vec!["init", "--kdf-log-n", "10", "--insecure-kdf", "--pack-size", "1M"];
    a.extend_from_slice(&SMALL_CHUNKS);
    assert_success(&run_in(repo, home, env, &a));
}

fn xattrs_supported(dir: &Path) -> bool {
    let p = dir.join(".xattr-probe");
    fs::write(&p, b"").unwrap();
    let ok = xattr::set(&p, "user.probe", b"1").is_ok();
    fs::remove_file(&p).unwrap();
    ok
}

fn set_mtime(p: &Path, sec: i64) {
    let t = rustix::fs::Timestamps {
        last_access: rustix::fs::Timespec { tv_sec: sec, tv_nsec: 5 },
        last_modification: rustix::fs::Timespec { tv_sec: sec, tv_nsec: 123_456_789 },
    };
    rustix::fs::utimensat(rustix::fs::CWD, p, &t, rustix::fs::AtFlags::SYMLINK_NOFOLLOW).unwrap();
}

/// A tree with every kind of metadata a copy must keep: files of several sizes
/// (one of many chunks), modes, times, extended attributes, a symlink, two hard
/// links to one file, a sparse file, an empty file and nested directories.
fn make_tree(root: &Path, seed: u64) {
    fs::create_dir_all(root.join("sub/deeper")).unwrap();
    for i in 0..6u64 {
        let dir = if i % 2 == 0 { root.to_path_buf() } else { root.join("sub") };
        fs::write(dir.join(format!("f{i}")), random_bytes(150_000 + i as usize * 70_000, i + seed * 100)).unwrap();
    }
    // Compressible, several destination chunks.
    let text: Vec<u8> = (0..3_000_000u32).map(|i| b"coffer rechunk "[(i % 15) as usize] ^ (i / 4096) as u8).collect();
    fs::write(root.join("sub/deeper/big.txt"), text).unwrap();
    fs::write(root.join("empty"), b"").unwrap();
    fs::write(root.join("linked"), random_bytes(50_000, 9 + seed)).unwrap();
    fs::hard_link(root.join("linked"), root.join("sub/linked-too")).unwrap();
    std::os::unix::fs::symlink("sub/deeper/big.txt", root.join("link")).unwrap();
    // Sparse: a hole of 2 MiB, 100 KB of data, a hole at the end.
    let f = fs::File::create(root.join("sparse")).unwrap();
    f.set_len(4 << 20).unwrap();
    use std::os::unix::fs::FileExt;
    f.write_all_at(&random_bytes(100_000, 77 + seed), 2 << 20).unwrap();
    drop(f);
    fs::set_permissions(root.join("f0"), fs::Permissions::from_mode(0o600)).unwrap();
    fs::set_permissions(root.join("sub/f1"), fs::Permissions::from_mode(0o751)).unwrap();
    if xattrs_supported(root) {
        xattr::set(root.join("f2"), "user.comment", b"kept across the copy").unwrap();
        xattr::set(root.join("sub"), "user.dir", b"on a directory").unwrap();
    }
    for (i, p) in ["f0", "sub/f1", "sub/deeper/big.txt", "link", "sparse", "empty"].iter().enumerate() {
        set_mtime(&root.join(p), 1_600_000_000 + i as i64 * 1000);
    }
}

fn user_xattrs(p: &Path) -> Vec<(String, Vec<u8>)> {
    let Ok(names) = xattr::list(p) else { return Vec::new() };
    let mut v: Vec<(String, Vec<u8>)> = names
        .filter(|n| n.to_string_lossy().starts_with("user."))
        .map(|n| (n.to_string_lossy().into_owned(), xattr::get(p, &n).unwrap().unwrap_or_default()))
        .collect();
    v.sort();
    v
}

/// Asserts that the trees `a` and `b` (two restores) are the same: kinds,
/// modes, owners, times, sizes, contents, extended attributes, symlink targets,
/// hard-link groups, and holes of sparse files.
fn assert_same_restore(a: &Path, b: &Path) {
    let mut inodes_a: std::collections::HashMap<u64, PathBuf> = Default::default();
    let mut inodes_b: std::collections::HashMap<u64, PathBuf> = Default::default();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let (pa, pb) = (a.join(&rel), b.join(&rel));
        let (ma, mb) = (fs::symlink_metadata(&pa).unwrap(), fs::symlink_metadata(&pb).unwrap());
        assert_eq!(ma.file_type(), mb.file_type(), "{rel:?}: kind");
        // The targets themselves were made by the restores, not restored.
        if !rel.as_os_str().is_empty() {
            assert_eq!(ma.mode() & 0o7777, mb.mode() & 0o7777, "{rel:?}: mode");
            assert_eq!((ma.uid(), ma.gid()), (mb.uid(), mb.gid()), "{rel:?}: owner");
            assert_eq!((ma.mtime(), ma.mtime_nsec()), (mb.mtime(), mb.mtime_nsec()), "{rel:?}: mtime");
            assert_eq!(user_xattrs(&pa), user_xattrs(&pb), "{rel:?}: xattrs");
        }
        if ma.is_file() {
            assert_eq!(ma.len(), mb.len(), "{rel:?}: size");
            assert!(fs::read(&pa).unwrap() == fs::read(&pb).unwrap(), "{rel:?}: content");
            assert_eq!(ma.nlink(), mb.nlink(), "{rel:?}: link count");
            // The same hard-link groups: a path's first sibling is the same.
            let fa = inodes_a.entry(ma.ino()).or_insert_with(|| rel.clone()).clone();
            let fb = inodes_b.entry(mb.ino()).or_insert_with(|| rel.clone()).clone();
            assert_eq!(fa, fb, "{rel:?}: hard links");
            // Holes: a restore leaves a hole for each all-zero chunk of a file
            // flagged sparse, so its data extents are the file's data widened
            // to the chunks around it. Chunk boundaries differ between the two
            // repositories (other sizes, or the same sizes under another
            // chunker key), so the chunk that ends a data run may carry up to a
            // maximum chunk (512 KiB here) more or fewer zeros on either side:
            // the destination holds at most that much more data per data run
            // (the sparse file has one). The data extents are compared, not the
            // blocks allocated, which follow the file system's preallocation too.
            let data = |p: &Path| -> u64 {
                let f = fs::File::open(p).unwrap();
                data_extents(&f, f.metadata().unwrap().len()).iter().map(|(s, e)| e - s).sum()
            };
            let (da, db) = (data(&pa), data(&pb));
            assert!(db <= da + 2 * (512 << 10), "{rel:?}: holes ({da} vs {db} bytes of data)");
            if rel.ends_with("sparse") {
                assert!(mb.blocks() * 512 + (1 << 20) < mb.len(), "{rel:?}: no holes ({} blocks)", mb.blocks());
            }
        } else if ma.file_type().is_symlink() {
            assert_eq!(fs::read_link(&pa).unwrap(), fs::read_link(&pb).unwrap(), "{rel:?}: target");
        } else if ma.is_dir() {
            let names = |p: &Path| {
                let mut v: Vec<_> = fs::read_dir(p).unwrap().map(|e| e.unwrap().file_name()).collect();
                v.sort();
                v
            };
            assert_eq!(names(&pa), names(&pb), "{rel:?}: entries");
            stack.extend(names(&pa).into_iter().map(|name| rel.join(name)));
        }
    }
}

/// The snapshots of `repo` as `snapshots --json` lists them.
fn snapshots(repo: &str, home: &Path, env: &[(String, String)]) -> Vec<serde_json::Value> {
    json_of(&run_in(repo, home, env, &["--json", "snapshots"])).as_array().unwrap().clone()
}

/// Restores snapshot `id` of `repo` into `target`.
fn restore(repo: &str, home: &Path, env: &[(String, String)], id: &str, target: &Path) {
    let out = run_in(repo, home, env, &["restore", id, "--target", &target.display().to_string()]);
    assert_success(&out);
}

/// Every snapshot of `dst` copied from `src`: restored from both and compared.
/// Returns how many were compared.
fn every_copy_restores_exact(
    src: &str,
    dst: &str,
    home: &Path,
    senv: &[(String, String)],
    denv: &[(String, String)],
    scratch: &Path,
) -> usize {
    let mut compared = 0;
    for s in snapshots(dst, home, denv) {
        let from = s["snapshot"]["copied_from"]["snapshot"].as_str().expect("a copied snapshot").to_string();
        let id = s["id"].as_str().unwrap().to_string();
        let (a, b) = (scratch.join(format!("a-{compared}")), scratch.join(format!("b-{compared}")));
        restore(src, home, senv, &from, &a);
        restore(dst, home, denv, &id, &b);
        assert_same_restore(&a, &b);
        fs::remove_dir_all(&a).unwrap();
        fs::remove_dir_all(&b).unwrap();
        compared += 1;
    }
    compared
}

#[test]
fn rechunked_copy_keeps_content_and_metadata_and_sends_nothing_twice() {
    let env = Env::new();
    let home = env.path("home");
    make_tree(&env.path("src"), 0);
    let id = env.backup(&[&env.path("src")]);
    let src = env.repo().display().to_string();
    let dst = env.path("dst").display().to_string();
    init_unrelated(&dst, &home, &[]);
    // Without --rechunk: refused, saying what to do.
    let err = assert_code(&run_in(&dst, &home, &[], &["copy", "--from-repo", &src]), 2);
    assert!(err.contains("--rechunk") && err.contains("init --from-repo"), "{err}");
    // A dry run reads and counts, and writes nothing.
    let dry = json_of(&run_in(&dst, &home, &[], &["--json", "copy", "--from-repo", &src, "--rechunk", "--dry-run"]));
    assert_eq!(dry["relation"], "unrelated");
    assert!(snapshots(&dst, &home, &[]).is_empty());
    assert!(files_under(&env.path("dst/data")).is_empty());
    let first = json_of(&run_in(&dst, &home, &[], &["--json", "copy", "--from-repo", &src, "--rechunk"]));
    assert_eq!(first["snapshots"][0], id.as_str(), "{first}");
    assert_eq!(dry["blobs"], first["blobs"], "the dry run counts what the copy stores");
    assert!(n(&first["files_read"]) >= 9, "{first}");
    // Cut again: the destination's blobs are of its own sizes (the big file of
    // 3 MB is one or a few source blobs, many destination ones).
    assert!(n(&first["blobs"]["objects"]) > 20, "{first}");
    // The new snapshot: signed here, recording its origin, with the source's
    // Merkle root (its files' paths and digests are the same).
    let s = &snapshots(&dst, &home, &[])[0];
    let orig = &snapshots(&src, &home, &[])[0];
    assert_eq!(s["snapshot"]["copied_from"]["snapshot"], id.as_str());
    assert_eq!(s["snapshot"]["copied_from"]["writer"], orig["snapshot"]["writer"]);
    assert_eq!(s["snapshot"]["merkle_root"], orig["snapshot"]["merkle_root"]);
    assert_eq!(s["signature_valid"], true);
    // check recomputes the root from the new trees, and reads every blob.
    assert_success(&run_in(&dst, &home, &[], &["check", "--read-data"]));
    assert_eq!(every_copy_restores_exact(&src, &dst, &home, &[], &[], &env.path("cmp")), 1);

    // Again: nothing read, nothing written.
    let again = json_of(&run_in(&dst, &home, &[], &["--json", "copy", "--from-repo", &src, "--rechunk"]));
    assert!(again["snapshots"].as_array().unwrap().is_empty(), "{again}");
    assert_eq!(n(&again["sent"]["total"]["objects"]) + n(&again["files_read"]), 0, "{again}");
    assert_eq!(n(&again["requests"]["destination"]["put"]), 0, "{again}");

    // One file changed: only it is read; the others are found by digest.
    fs::write(env.path("src/f0"), random_bytes(200_000, 4242)).unwrap();
    env.backup(&[&env.path("src")]);
    let second = json_of(&run_in(&dst, &home, &[], &["--json", "copy", "--from-repo", &src, "--rechunk"]));
    assert_eq!(second["snapshots"].as_array().unwrap().len(), 1, "{second}");
    assert_eq!(n(&second["files_read"]), 1, "{second}");
    assert!(n(&second["files_reused"]) >= 9, "{second}");
    assert!(n(&second["bytes_read"]) == 200_000, "{second}");
    assert_success(&run_in(&dst, &home, &[], &["check", "--read-data"]));
    assert_eq!(every_copy_restores_exact(&src, &dst, &home, &[], &[], &env.path("cmp")), 2);

    // A backup of the same files into the destination stores no file content
    // again (the copy cut it with the destination's own chunker, and the copied
    // snapshot, signed by this client, may serve as its parent): only the trees
    // whose metadata changed since (the directories above src/) are new.
    let out = run_in(&dst, &home, &[], &["--json", "backup", &env.path("src").display().to_string()]);
    let b = json_of(&out);
    assert!(n(&b["summary"]["bytes_new"]) < 20_000, "{b}");
}

#[test]
fn rechunked_copies_killed_at_several_moments_resume() {
    let env = Env::new();
    let home = env.path("home");
    make_tree(&env.path("src"), 1);
    env.backup(&[&env.path("src")]);
    make_tree(&env.path("src2"), 2);
    env.backup(&[&env.path("src2")]);
    let src = env.repo().display().to_string();
    let dst = env.path("dst").display().to_string();
    init_unrelated(&dst, &home, &[]);
    // Every storage operation waits 30 ms (and some fail and are retried), so
    // the copy is slow enough to be killed at several points.
    let slow = vec![
        ("COFFER_TEST_FAULTS".to_string(), "seed=3,timeout=0.1,delay_ms=30".to_string()),
        ("COFFER_RETRY_BASE_MS".to_string(), "1".to_string()),
    ];
    // Killed before anything is stored, then each time once one more pack has
    // arrived than before.
    let mut killed = 0;
    for round in 0..5 {
        let before = files_under(&env.path("dst/data")).len();
        let mut child = cmd_in(&dst, &home, &slow, &["copy", "--from-repo", &src, "--rechunk"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let start = std::time::Instant::now();
        while round > 0
            && files_under(&env.path("dst/data")).len() <= before
            && child.try_wait().unwrap().is_none()
            && start.elapsed() < std::time::Duration::from_secs(60)
        {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        if round == 0 {
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let finished = child.try_wait().unwrap().is_some();
        let _ = child.kill();
        child.wait().unwrap();
        let now = files_under(&env.path("dst/data")).len();
        eprintln!(
            "round {round}: {} after {:?}; {before} -> {now} packs",
            if finished { "finished" } else { "killed" },
            start.elapsed()
        );
        if finished {
            break;
        }
        killed += 1;
        // Whatever arrived is a consistent repository.
        assert_success(&run_in(&dst, &home, &[], &["check"]));
    }
    assert!(killed >= 3, "the copy finished before it could be killed three times");
    let r = json_of(&run_in(&dst, &home, &[], &["--json", "copy", "--from-repo", &src, "--rechunk"]));
    eprintln!("resumed: {r}");
    assert_eq!(snapshots(&dst, &home, &[]).len(), 2);
    assert_success(&run_in(&dst, &home, &[], &["check", "--read-data"]));
    assert_eq!(every_copy_restores_exact(&src, &dst, &home, &[], &[], &env.path("cmp")), 2);
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
        "rechunk-{}-{}",
        std::process::id(),
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
    );
    Some((format!("s3:{endpoint}/{}/{unique}", var("COFFER_TEST_S3_BUCKET")?), env))
}

/// Copies from `src` into `dst` with `--rechunk` until a run completes: a run
/// may fail only with a retryable error (the source changed: exit 24).
fn copy_until_done(src: &str, dst: &str, home: &Path, env: &[(String, String)]) -> usize {
    for attempt in 1..=5 {
        let out = run_in(dst, home, env, &["--json", "copy", "--from-repo", src, "--rechunk"]);
        if out.status.success() {
            return attempt;
        }
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(24), "not a retryable failure: {err}");
        assert!(err.contains("run `coffer copy` again"), "{err}");
    }
    panic!("five copies did not complete");
}

#[test]
fn rechunked_copy_between_local_and_s3_both_ways_while_the_source_changes() {
    let Some((s3, creds)) = s3_env() else { return };
    let env = Env::new();
    let home = env.path("home");
    let src = env.repo().display().to_string();
    make_tree(&env.path("src"), 5);
    env.backup(&[&env.path("src")]);
    init_unrelated(&s3, &home, &creds);
    // Four backups, a forget and a prune run on the source while it is copied.
    let changer = {
        let (src, home, data) = (src.clone(), home.clone(), env.path("src"));
        std::thread::spawn(move || {
            for i in 0..4u64 {
                fs::write(data.join(format!("f{}", i % 3)), random_bytes(180_000, 900 + i)).unwrap();
                assert_success(&run_in(&src, &home, &[], &["backup", &data.display().to_string()]));
            }
            assert_success(&run_in(&src, &home, &[], &["forget", "--keep-last", "2"]));
            assert_success(&run_in(&src, &home, &[], &["prune", "--max-unused", "0"]));
        })
    };
    let mut attempts = 0;
    while !changer.is_finished() {
        attempts += copy_until_done(&src, &s3, &home, &creds);
    }
    changer.join().unwrap();
    // Once the source is still, a last run copies what is left.
    attempts += copy_until_done(&src, &s3, &home, &creds);
    eprintln!("{attempts} copy runs into S3");
    let again = json_of(&run_in(&s3, &home, &creds, &["--json", "copy", "--from-repo", &src, "--rechunk"]));
    assert!(again["snapshots"].as_array().unwrap().is_empty(), "{again}");
    assert_success(&run_in(&s3, &home, &creds, &["check", "--read-data"]));
    // Every snapshot the source still holds (the forgotten ones may have been
    // copied before the forget) restores the same from S3.
    let live: Vec<String> = snapshots(&src, &home, &[]).iter().map(|s| s["id"].as_str().unwrap().to_string()).collect();
    let copied: Vec<String> = snapshots(&s3, &home, &creds)
        .iter()
        .map(|s| s["snapshot"]["copied_from"]["snapshot"].as_str().unwrap().to_string())
        .collect();
    for id in &live {
        assert!(copied.contains(id), "source snapshot {id} was not copied");
    }
    for (i, id) in live.iter().enumerate() {
        let dst_id = snapshots(&s3, &home, &creds)
            .into_iter()
            .find(|s| s["snapshot"]["copied_from"]["snapshot"] == id.as_str())
            .unwrap()["id"]
            .as_str()
            .unwrap()
            .to_string();
        let (a, b) = (env.path(&format!("a{i}")), env.path(&format!("b{i}")));
        restore(&src, &home, &[], id, &a);
        restore(&s3, &home, &creds, &dst_id, &b);
        assert_same_restore(&a, &b);
    }
    // Back: from S3 into a local repository unrelated to both.
    let back = env.path("back").display().to_string();
    init_unrelated(&back, &home, &[]);
    let r = json_of(&run_in(&back, &home, &creds, &["--json", "copy", "--from-repo", &s3, "--rechunk"]));
    assert_eq!(r["snapshots"].as_array().unwrap().len(), copied.len(), "{r}");
    assert_success(&run_in(&back, &home, &[], &["check", "--read-data"]));
    let n_back = every_copy_restores_exact(&s3, &back, &home, &creds, &[], &env.path("cmp"));
    assert_eq!(n_back, copied.len());
}
