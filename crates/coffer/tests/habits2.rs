//! More habits a restic user brings: restore's --dry-run, --verify,
//! --overwrite modes, --delete and pattern options; dump, find, tag and
//! profiles (docs/design.md#restore-options and the sections after it).

mod common;

use std::fs;
use std::path::Path;
use std::time::{Duration, SystemTime};

use common::*;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn set_mtime(p: &Path, t: SystemTime) {
    fs::File::options().write(true).open(p).unwrap().set_modified(t).unwrap();
}

/// A source tree with old modification times, backed up: (env, src, spec).
fn backed_up() -> (Env, std::path::PathBuf, String) {
    let env = Env::new();
    let src = env.path("src");
    fs::create_dir_all(src.join("d")).unwrap();
    fs::write(src.join("a.txt"), b"snapshot a\n").unwrap();
    fs::write(src.join("b.txt"), b"snapshot b\n").unwrap();
    fs::write(src.join("d/c.txt"), b"snapshot c\n").unwrap();
    fs::write(src.join("README.TXT"), b"readme\n").unwrap();
    fs::write(src.join("img.PNG"), b"png\n").unwrap();
    let old = SystemTime::UNIX_EPOCH + Duration::from_secs(1_600_000_000);
    for f in ["a.txt", "b.txt", "d/c.txt", "README.TXT", "img.PNG"] {
        set_mtime(&src.join(f), old);
    }
    let id = env.backup(&[&src]);
    let spec = format!("{id}:{}", src.display());
    (env, src, spec)
}

#[test]
fn restore_dry_run_counts_and_touches_nothing() {
    let (env, _src, spec) = backed_up();
    let target = env.path("target");
    let v = env.json(&["restore", &spec, "--target", s(&target), "--dry-run"]);
    assert_eq!(v["type"], "dry_run");
    assert_eq!(v["files"], 5, "{v}");
    assert_eq!(v["dirs"], 1, "{v}");
    assert_eq!(v["bytes"], 11 * 3 + 7 + 4, "{v}");
    assert!(!target.exists(), "a dry run created the target");
    // Into a non-empty target too, without --overwrite: nothing is written, so nothing is refused.
    fs::create_dir_all(&target).unwrap();
    fs::write(target.join("a.txt"), b"mine").unwrap();
    let out = env.run(&["restore", &spec, "--target", s(&target), "--dry-run"]);
    assert_success(&out);
    assert!(text(&out.stdout).contains("would restore") && text(&out.stdout).contains("5 files"), "{}", text(&out.stdout));
    assert_eq!(fs::read(target.join("a.txt")).unwrap(), b"mine");
    assert_eq!(fs::read_dir(&target).unwrap().count(), 1);
}

/// A target holding a newer a.txt, an older b.txt and a file the snapshot lacks.
fn prepared_target(env: &Env) -> std::path::PathBuf {
    let target = env.path("target");
    fs::create_dir_all(&target).unwrap();
    fs::write(target.join("a.txt"), b"local a, newer\n").unwrap();
    fs::write(target.join("b.txt"), b"local b\n").unwrap();
    set_mtime(&target.join("b.txt"), SystemTime::UNIX_EPOCH + Duration::from_secs(1_500_000_000));
    fs::write(target.join("extra.txt"), b"not in the snapshot\n").unwrap();
    target
}

#[test]
fn restore_overwrite_modes_decide_what_stays() {
    let (env, _src, spec) = backed_up();
    // No --overwrite: a non-empty target is refused (coffer's default, kept).
    let target = prepared_target(&env);
    assert_code(&env.run(&["restore", &spec, "--target", s(&target)]), 21);
    assert_eq!(fs::read(target.join("a.txt")).unwrap(), b"local a, newer\n");

    // never: everything there stays, what is missing is restored.
    let v = env.json(&["restore", &spec, "--target", s(&target), "--overwrite", "never"]);
    assert_eq!(v["skipped"], 2, "{v}");
    assert_eq!(fs::read(target.join("a.txt")).unwrap(), b"local a, newer\n");
    assert_eq!(fs::read(target.join("b.txt")).unwrap(), b"local b\n");
    assert_eq!(fs::read(target.join("d/c.txt")).unwrap(), b"snapshot c\n");
    fs::remove_dir_all(&target).unwrap();

    // if-newer: the newer a.txt stays, the older b.txt is replaced.
    let target = prepared_target(&env);
    env.json(&["restore", &spec, "--target", s(&target), "--overwrite", "if-newer"]);
    assert_eq!(fs::read(target.join("a.txt")).unwrap(), b"local a, newer\n");
    assert_eq!(fs::read(target.join("b.txt")).unwrap(), b"snapshot b\n");
    fs::remove_dir_all(&target).unwrap();

    // if-changed: both differ in time, so both are replaced; a file of the same
    // size and time is kept.
    let target = prepared_target(&env);
    fs::write(target.join("README.TXT"), b"README\n").unwrap();
    set_mtime(&target.join("README.TXT"), SystemTime::UNIX_EPOCH + Duration::from_secs(1_600_000_000));
    env.json(&["restore", &spec, "--target", s(&target), "--overwrite", "if-changed"]);
    assert_eq!(fs::read(target.join("a.txt")).unwrap(), b"snapshot a\n");
    assert_eq!(fs::read(target.join("b.txt")).unwrap(), b"snapshot b\n");
    assert_eq!(fs::read(target.join("README.TXT")).unwrap(), b"README\n");
    assert_eq!(fs::read(target.join("extra.txt")).unwrap(), b"not in the snapshot\n");
    fs::remove_dir_all(&target).unwrap();

    // A bare --overwrite is `always`.
    let target = prepared_target(&env);
    env.json(&["restore", &spec, "--target", s(&target), "--overwrite"]);
    assert_eq!(fs::read(target.join("a.txt")).unwrap(), b"snapshot a\n");
    assert_eq!(fs::read(target.join("extra.txt")).unwrap(), b"not in the snapshot\n");
}

#[test]
fn restore_verify_reads_back_and_damage_is_exit_20() {
    let (env, _src, spec) = backed_up();
    let target = env.path("target");
    let out = env.run(&["restore", &spec, "--target", s(&target), "--verify"]);
    assert_success(&out);
    assert!(text(&out.stdout).contains("verified 5 files"), "{}", text(&out.stdout));
    // Kept files that differ from the snapshot are found.
    fs::write(target.join("a.txt"), b"changed since\n").unwrap();
    fs::write(target.join("b.txt"), b"snapshot B\n").unwrap();
    let out = env.run(&["restore", &spec, "--target", s(&target), "--overwrite", "never", "--verify"]);
    let err = assert_code(&out, 20);
    assert!(err.contains("a.txt") && err.contains("b.txt") && err.contains("2 restored files differ"), "{err}");
    // Restoring over them mends it.
    let out = env.run(&["restore", &spec, "--target", s(&target), "--overwrite", "always", "--verify"]);
    assert_success(&out);
}

#[test]
fn restore_delete_removes_what_the_snapshot_lacks_without_following_links() {
    let (env, _src, spec) = backed_up();
    let target = prepared_target(&env);
    let outside = env.path("outside");
    fs::create_dir_all(&outside).unwrap();
    fs::write(outside.join("precious"), b"keep me").unwrap();
    std::os::unix::fs::symlink(&outside, target.join("link-out")).unwrap();
    fs::create_dir_all(target.join("d/sub/deeper")).unwrap();
    fs::write(target.join("d/sub/deeper/x"), b"x").unwrap();
    std::os::unix::fs::symlink(&outside, target.join("d/sub/to-outside")).unwrap();

    // --delete needs --overwrite.
    assert_code(&env.run(&["restore", &spec, "--target", s(&target), "--delete"]), 2);

    let v = env.json(&["restore", &spec, "--target", s(&target), "--overwrite", "--delete"]);
    assert_eq!(v["deleted"], 3, "{v}");
    let mut names: Vec<String> =
        files_under(&target).iter().map(|p| p.strip_prefix(&target).unwrap().display().to_string()).collect();
    names.sort();
    assert_eq!(names, ["README.TXT", "a.txt", "b.txt", "d/c.txt", "img.PNG"]);
    assert!(!target.join("link-out").exists() && fs::symlink_metadata(target.join("link-out")).is_err());
    assert_eq!(fs::read(outside.join("precious")).unwrap(), b"keep me", "--delete followed a symlink");

    // With --include only the included entries' directories are restored, so nothing else is deleted.
    fs::write(target.join("extra.txt"), b"again").unwrap();
    env.json(&["restore", &spec, "--target", s(&target), "--overwrite", "--delete", "--include", "d"]);
    assert!(target.join("extra.txt").exists());
}

#[test]
fn restore_pattern_options_from_files_and_ignoring_case() {
    let (env, _src, spec) = backed_up();
    let t1 = env.path("t1");
    env.json(&["restore", &spec, "--target", s(&t1), "--iinclude", "*.txt"]);
    let mut got: Vec<_> = files_under(&t1).iter().map(|p| p.strip_prefix(&t1).unwrap().display().to_string()).collect();
    got.sort();
    assert_eq!(got, ["README.TXT", "a.txt", "b.txt", "d/c.txt"]);

    let t2 = env.path("t2");
    env.json(&["restore", &spec, "--target", s(&t2), "--iexclude", "*.png", "--iexclude", "D"]);
    let mut got: Vec<_> = files_under(&t2).iter().map(|p| p.strip_prefix(&t2).unwrap().display().to_string()).collect();
    got.sort();
    assert_eq!(got, ["README.TXT", "a.txt", "b.txt"]);

    let list = env.path("list");
    fs::write(&list, "# what I need\n\na.txt\nc.txt\n").unwrap();
    let t3 = env.path("t3");
    env.json(&["restore", &spec, "--target", s(&t3), "--include-file", s(&list)]);
    let mut got: Vec<_> = files_under(&t3).iter().map(|p| p.strip_prefix(&t3).unwrap().display().to_string()).collect();
    got.sort();
    assert_eq!(got, ["a.txt", "d/c.txt"]);

    let t4 = env.path("t4");
    env.json(&["restore", &spec, "--target", s(&t4), "--exclude-file", s(&list)]);
    let mut got: Vec<_> = files_under(&t4).iter().map(|p| p.strip_prefix(&t4).unwrap().display().to_string()).collect();
    got.sort();
    assert_eq!(got, ["README.TXT", "b.txt", "img.PNG"]);

    let missing = env.path("no-such-list");
    let out = env.run(&["restore", &spec, "--target", s(&env.path("t5")), "--include-file", s(&missing)]);
    let err = assert_code(&out, 1);
    assert!(err.contains("no-such-list"), "{err}");
}
