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
    // Into a non-empty target without --overwrite: refused, as the restore would be.
    fs::create_dir_all(&target).unwrap();
    fs::write(target.join("a.txt"), b"mine").unwrap();
    let out = env.run(&["restore", &spec, "--target", s(&target), "--dry-run"]);
    assert_code(&out, 21);
    assert_eq!(fs::read(target.join("a.txt")).unwrap(), b"mine");
    assert_eq!(fs::read_dir(&target).unwrap().count(), 1);
}

#[test]
fn restore_dry_run_figures_match_the_real_run_with_overwrite_and_delete() {
    let (env, _src, spec) = backed_up();
    for mode in ["always", "if-changed", "if-newer", "never"] {
        let target = prepared_target(&env);
        fs::create_dir_all(target.join("d/old")).unwrap();
        let args = ["restore", &spec, "--target", s(&target), "--overwrite", mode, "--delete"];
        let dry = env.json(&[&args[..], &["--dry-run"]].concat());
        assert!(target.join("extra.txt").exists() && target.join("d/old").exists(), "a dry run deleted");
        let real = env.json(&args);
        for field in ["files", "bytes", "skipped", "deleted"] {
            assert_eq!(dry[field], real[field], "{mode} {field}: dry {dry}, real {real}");
        }
        assert_eq!(real["deleted"], 2, "{mode}: {real}");
        fs::remove_dir_all(&target).unwrap();
    }
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
    // A bad include pattern is an error that says so, and nothing is restored.
    for flag in ["--include", "--iinclude"] {
        let out = env.run(&["restore", &spec, "--target", s(&env.path("t0")), flag, "[bad"]);
        let err = assert_code(&out, 1);
        assert!(err.contains("bad include pattern") && err.contains("[bad"), "{flag}: {err}");
        assert!(!env.path("t0").exists());
    }

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

/// A source with a multi-chunk file, a symlink, a hard link and modes.
fn dump_source(env: &Env) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let src = env.path("dsrc");
    fs::create_dir_all(src.join("sub")).unwrap();
    fs::write(src.join("big.bin"), random_bytes(3 << 20, 7)).unwrap();
    fs::write(src.join("sub/run.sh"), b"#!/bin/sh\necho hi\n").unwrap();
    fs::set_permissions(src.join("sub/run.sh"), fs::Permissions::from_mode(0o750)).unwrap();
    set_mtime(&src.join("sub/run.sh"), SystemTime::UNIX_EPOCH + Duration::from_secs(1_600_000_000));
    std::os::unix::fs::symlink("sub/run.sh", src.join("link")).unwrap();
    fs::hard_link(src.join("big.bin"), src.join("big-again.bin")).unwrap();
    src
}

#[test]
fn dump_writes_a_file_and_a_directory_as_tar_or_zip() {
    let env = Env::new();
    let src = dump_source(&env);
    let id = env.backup(&[&src]);
    let big = fs::read(src.join("big.bin")).unwrap();

    let out = env.run(&["dump", &id, &format!("{}/big.bin", src.display())]);
    assert_success(&out);
    assert!(out.stdout == big, "dump of a file differs from it");

    // tar, the default: names, modes, times, symlink, hard link and content.
    let out = env.run(&["dump", &id, s(&src)]);
    assert_success(&out);
    let mut archive = tar::Archive::new(&out.stdout[..]);
    let prefix = src.strip_prefix("/").unwrap().to_path_buf();
    let mut seen = Vec::new();
    for e in archive.entries().unwrap() {
        let mut e = e.unwrap();
        let rel = e.path().unwrap().strip_prefix(&prefix).unwrap().display().to_string();
        let kind = e.header().entry_type();
        match rel.as_str() {
            "sub/run.sh" => {
                assert_eq!(e.header().mode().unwrap(), 0o750);
                assert_eq!(e.header().mtime().unwrap(), 1_600_000_000);
                let mut body = String::new();
                std::io::Read::read_to_string(&mut e, &mut body).unwrap();
                assert_eq!(body, "#!/bin/sh\necho hi\n");
            }
            "link" => {
                assert_eq!(kind, tar::EntryType::Symlink);
                assert_eq!(e.link_name().unwrap().unwrap().to_str(), Some("sub/run.sh"));
            }
            "big-again.bin" => {
                // Walked first (name order): the content is here, big.bin links to it.
                let mut body = Vec::new();
                std::io::Read::read_to_end(&mut e, &mut body).unwrap();
                assert!(body == big);
            }
            "big.bin" => {
                assert_eq!(kind, tar::EntryType::Link);
                assert!(e.link_name().unwrap().unwrap().ends_with("big-again.bin"));
            }
            _ => {}
        }
        seen.push(rel);
    }
    assert_eq!(seen, ["", "big-again.bin", "big.bin", "link", "sub", "sub/run.sh"]);

    // zip: every name has its content, symlinks are kept.
    let file = env.path("out.zip");
    assert_success(&env.run(&["dump", &id, s(&src), "--archive", "zip", "--target", s(&file)]));
    let mut zip = zip::ZipArchive::new(fs::File::open(&file).unwrap()).unwrap();
    let mut names: Vec<String> = zip.file_names().map(|n| n.unwrap().into_owned()).collect();
    names.sort();
    let p = prefix.display().to_string();
    assert_eq!(
        names,
        [
            format!("{p}/"),
            format!("{p}/big-again.bin"),
            format!("{p}/big.bin"),
            format!("{p}/link"),
            format!("{p}/sub/"),
            format!("{p}/sub/run.sh")
        ]
    );
    let mut body = Vec::new();
    std::io::Read::read_to_end(&mut zip.by_name(&format!("{p}/big.bin")).unwrap(), &mut body).unwrap();
    assert!(body == big);
    let run = zip.by_name(&format!("{p}/sub/run.sh")).unwrap();
    assert_eq!(run.unix_mode().map(|m| m & 0o7777), Some(0o750));
    drop(run);
    assert!(zip.by_name(&format!("{p}/link")).unwrap().is_symlink());

    // A path that is not in the snapshot is an error naming it.
    let err = assert_code(&env.run(&["dump", &id, "/no/such/path"]), 1);
    assert!(err.contains("/no/such/path"), "{err}");
}

#[test]
fn find_matches_names_across_snapshots() {
    let env = Env::new();
    let src = env.path("fsrc");
    fs::create_dir_all(src.join("docs")).unwrap();
    fs::write(src.join("docs/Report.PDF"), b"pdf one").unwrap();
    fs::write(src.join("notes.txt"), b"n").unwrap();
    let first = env.backup(&[&src]);
    fs::write(src.join("docs/report-2.pdf"), b"pdf two!").unwrap();
    let second = env.backup(&[&src]);

    let out = env.run(&["--json", "find", "*.pdf"]);
    assert_success(&out);
    let lines: Vec<serde_json::Value> = text(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let matches: Vec<_> = lines.iter().filter(|v| v["type"] == "match").collect();
    assert_eq!(matches.len(), 1, "{lines:?}");
    assert_eq!(matches[0]["snapshot_id"], second.as_str());
    assert!(matches[0]["path"].as_str().unwrap().ends_with("/docs/report-2.pdf"));
    assert_eq!(matches[0]["size"], 8);
    assert!(matches[0]["mtime"].as_str().unwrap().ends_with('Z'), "{}", matches[0]);
    assert_eq!(lines.last().unwrap()["type"], "find_summary");

    let out = env.run(&["find", "-i", "*.pdf"]);
    assert_success(&out);
    let t = text(&out.stdout);
    assert_eq!(t.matches("Report.PDF").count(), 2, "{t}");
    assert!(t.contains("3 matches in 2 snapshots"), "{t}");

    let out = env.run(&["find", "-i", "*.pdf", "--snapshot", &first[..8]]);
    assert!(text(&out.stdout).contains("1 match in 1 snapshot"), "{}", text(&out.stdout));
    // By modification time (as restic: --oldest is the earliest, --newest the
    // latest) and by size.
    let out = env.run(&["find", "-i", "*.pdf", "--oldest", "2999-01-01"]);
    assert!(text(&out.stdout).contains("0 matches in 2 snapshots"), "{}", text(&out.stdout));
    let out = env.run(&["find", "-i", "*.pdf", "--newest", "2999-01-01", "--oldest", "2000-01-01"]);
    assert!(text(&out.stdout).contains("3 matches in 2 snapshots"), "{}", text(&out.stdout));
    let out = env.run(&["find", "-i", "*.pdf", "--newest", "2000-01-01"]);
    assert!(text(&out.stdout).contains("0 matches"), "{}", text(&out.stdout));
    let out = env.run(&["find", "-i", "*.pdf", "--min-size", "8"]);
    assert!(text(&out.stdout).contains("1 match in 2 snapshots"), "{}", text(&out.stdout));
    let out = env.run(&["find", "*", "--max-size", "1"]);
    assert!(text(&out.stdout).contains("2 matches"), "notes.txt in each snapshot: {}", text(&out.stdout));
    // A pattern with a slash matches whole paths.
    let out = env.run(&["find", &format!("{}/*.txt", src.display())]);
    assert!(text(&out.stdout).contains("2 matches"), "{}", text(&out.stdout));
    let err = assert_code(&env.run(&["find", "[oops"]), 1);
    assert!(err.contains("[oops"), "{err}");
}

#[test]
fn tag_replaces_snapshots_and_keeps_the_history_checkable() {
    let env = Env::new();
    let src = env.path("tsrc");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("f"), b"x").unwrap();
    let first = env.backup(&[&src]);
    let second = env.backup(&[&src]);

    let first_time = env.json(&["snapshots"])[0]["snapshot"]["time"].clone();
    let v = env.json(&["tag", "--add", "keep,work", &first]);
    assert_eq!(v["type"], "tag_summary");
    let changed = &v["changed"][0];
    assert_eq!(changed["old_snapshot_id"], first.as_str());
    assert_eq!(changed["tags"], serde_json::json!(["keep", "work"]));
    let retagged = changed["snapshot_id"].as_str().unwrap().to_string();
    assert_ne!(retagged, first);

    let list = env.json(&["snapshots"]);
    let ids: Vec<&str> = list.as_array().unwrap().iter().map(|s| s["id"].as_str().unwrap()).collect();
    assert!(ids.contains(&retagged.as_str()) && ids.contains(&second.as_str()) && !ids.contains(&first.as_str()));
    // The same time and tree as the one it replaces.
    assert_eq!(list[0]["id"], retagged.as_str(), "the retagged snapshot kept its place");
    assert_eq!(list[0]["snapshot"]["time"], first_time);
    // The old id says where the snapshot went.
    let err = assert_code(&env.run(&["ls", &first[..8]]), 1);
    assert!(err.contains("replaced it by snapshot") && err.contains(&retagged[..8]), "{err}");

    // Nothing to change: no new snapshot.
    let v = env.json(&["tag", "--add", "keep", &retagged]);
    assert_eq!(v["unchanged"], 1);
    assert!(v["changed"].as_array().unwrap().is_empty());

    // --remove, then --set '' on every snapshot the filter passes.
    let v = env.json(&["tag", "--remove", "work", &retagged]);
    let again = v["changed"][0]["snapshot_id"].as_str().unwrap().to_string();
    assert_eq!(v["changed"][0]["tags"], serde_json::json!(["keep"]));
    let v = env.json(&["tag", "--set", "daily", "--tag", "keep"]);
    assert_eq!(v["changed"].as_array().unwrap().len(), 1);
    assert_eq!(v["changed"][0]["old_snapshot_id"], again.as_str());

    // The history is whole: check passes without errors or warnings, and a new backup links on.
    env.backup(&[&src]);
    let out = env.run(&["check"]);
    assert_success(&out);
    let err = text(&out.stderr);
    assert!(!err.contains("warning") && !err.contains("out of order"), "{err}");
    // The restored content of a retagged snapshot is what was backed up.
    let target = env.path("t");
    let latest_daily = env.json(&["snapshots", "--tag", "daily"]);
    let id = latest_daily[0]["id"].as_str().unwrap();
    env.json(&["restore", &format!("{id}:{}", src.display()), "--target", s(&target)]);
    assert_eq!(fs::read(target.join("f")).unwrap(), b"x");

    // No change given is a usage error.
    assert_code(&env.run(&["tag", &second]), 2);
}

#[test]
fn profiles_give_repository_passphrase_excludes_and_policy() {
    let env = Env::new();
    let src = env.path("psrc");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("keep.txt"), b"k").unwrap();
    fs::write(src.join("scratch.tmp"), b"t").unwrap();
    let config = env.path("config");
    fs::create_dir_all(config.join("coffer")).unwrap();
    let profile = format!(
        "repository = {:?}\npassword-command = \"echo {PASSWORD}\"\n[backup]\nexclude = [\"*.tmp\"]\ntag = \
         [\"nightly\"]\n[forget]\nkeep-last = 1\n",
        env.repo().display().to_string()
    );
    fs::write(config.join("coffer/nightly.toml"), profile).unwrap();
    let run = |args: &[&str]| {
        env.cmd()
            .env_remove("COFFER_REPOSITORY")
            .env_remove("COFFER_PASSWORD")
            .env("XDG_CONFIG_HOME", &config)
            .args(args)
            .output()
            .unwrap()
    };
    assert_success(&run(&["-P", "nightly", "backup", s(&src)]));
    assert_success(&run(&["--profile", "nightly", "backup", s(&src)]));
    let out = run(&["-P", "nightly", "--json", "snapshots"]);
    assert_success(&out);
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list.as_array().unwrap().len(), 2);
    assert_eq!(list[0]["snapshot"]["tags"], serde_json::json!(["nightly"]));
    let out = run(&["-P", "nightly", "ls", "latest", s(&src)]);
    let listing = text(&out.stdout);
    assert!(listing.contains("keep.txt") && !listing.contains("scratch.tmp"), "{listing}");
    // The profile's policy applies when the command line gives none.
    assert_success(&run(&["-P", "nightly", "forget"]));
    let out = run(&["-P", "nightly", "--json", "snapshots"]);
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list.as_array().unwrap().len(), 1);
    // The command line wins: another repository, and an exclude instead of the profile's.
    assert_code(&run(&["-P", "nightly", "--repo", s(&env.path("elsewhere")), "snapshots"]), 10);
    assert_success(&run(&["-P", "nightly", "backup", s(&src), "--exclude", "keep.txt"]));
    let listing = text(&run(&["-P", "nightly", "ls", "latest", s(&src)]).stdout);
    assert!(!listing.contains("keep.txt") && listing.contains("scratch.tmp"), "{listing}");

    // An unknown key is an error naming it; so is a missing profile.
    fs::write(config.join("coffer/typo.toml"), "[forget]\nkeep-dayly = 7\n").unwrap();
    let err = assert_code(&run(&["-P", "typo", "snapshots"]), 2);
    assert!(err.contains("keep-dayly"), "{err}");
    let err = assert_code(&run(&["-P", "absent", "snapshots"]), 2);
    assert!(err.contains("absent.toml"), "{err}");
}

#[test]
fn json_objects_of_ls_and_snapshots_carry_a_type() {
    let env = Env::new();
    let src = env.path("jsrc");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("f"), b"x").unwrap();
    env.backup(&[&src]);
    let list = env.json(&["snapshots"]);
    assert_eq!(list[0]["type"], "snapshot");
    assert!(list[0]["snapshot"]["time"].as_str().unwrap().ends_with('Z'));
    let grouped = env.json(&["snapshots", "--group-by", "host"]);
    assert_eq!(grouped[0]["type"], "group");
    let out = env.run(&["--json", "ls", "latest"]);
    assert_success(&out);
    for line in text(&out.stdout).lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["type"], "node", "{line}");
    }
}
