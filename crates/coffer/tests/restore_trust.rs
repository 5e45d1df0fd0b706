//! `restore --privileged`: as root, what only root can create comes back from a
//! snapshot this client signed itself, and from any other only when asked.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use common::*;

fn owner_and_mode(path: &Path) -> (u32, u32) {
    let md = std::fs::metadata(path).unwrap();
    (md.uid(), md.mode() & 0o7777)
}

#[test]
fn privileged_bits_come_back_only_from_this_clients_own_snapshots() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir(&src).unwrap();
    let suid = src.join("suid");
    std::fs::write(&suid, b"#!/bin/sh\n").unwrap();
    std::os::unix::fs::chown(&suid, Some(1234), Some(1234)).unwrap();
    std::fs::set_permissions(&suid, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let src_arg = src.to_str().unwrap();

    // A snapshot written by another client of the repository (another writer key).
    let out = env.cmd().env("HOME", env.path("other-home")).args(["backup", src_arg]).output().unwrap();
    assert_success(&out);
    let plain = env.path("plain");
    let out = env.run(&["restore", "latest", "--target", plain.to_str().unwrap()]);
    assert_success(&out);
    let stderr = text(&out.stderr);
    assert!(stderr.contains("which this client does not trust"), "{stderr}");
    assert!(stderr.contains("1 owners, 1 setuid/setgid bits") && stderr.contains("--privileged all"), "{stderr}");
    assert_eq!(owner_and_mode(&plain.join(src.strip_prefix("/").unwrap()).join("suid")), (0, 0o755));

    let all = env.path("all");
    let out = env.run(&["restore", "latest", "--privileged", "all", "--target", all.to_str().unwrap()]);
    assert_success(&out);
    assert_eq!(owner_and_mode(&all.join(src.strip_prefix("/").unwrap()).join("suid")), (1234, 0o4755));

    // This client's own snapshot comes back exactly by default, and not with --privileged none.
    env.backup(&[&src]);
    let own = env.path("own");
    assert_success(&env.run(&["restore", "latest", "--target", own.to_str().unwrap()]));
    assert_eq!(owner_and_mode(&own.join(src.strip_prefix("/").unwrap()).join("suid")), (1234, 0o4755));
    let none = env.path("none");
    let out = env.run(&["restore", "latest", "--privileged", "none", "--target", none.to_str().unwrap()]);
    assert_success(&out);
    assert!(text(&out.stderr).contains("--privileged none"), "{}", text(&out.stderr));
    assert_eq!(owner_and_mode(&none.join(src.strip_prefix("/").unwrap()).join("suid")), (0, 0o755));
}

/// A tree with a setuid file owned by uid 1234 (what only root can restore).
fn setuid_tree(env: &Env) -> std::path::PathBuf {
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    let suid = src.join("suid");
    std::fs::write(&suid, b"#!/bin/sh\n").unwrap();
    std::os::unix::fs::chown(&suid, Some(1234), Some(1234)).unwrap();
    std::fs::set_permissions(&suid, std::fs::Permissions::from_mode(0o4755)).unwrap();
    src
}

/// `coffer` against repository `repo` with `home` as HOME and the test
/// passphrase for `--from-repo` too.
fn at(env: &Env, repo: &Path, home: &str) -> std::process::Command {
    let mut c = env.cmd();
    c.env("COFFER_REPOSITORY", repo).env("HOME", env.path(home)).env("COFFER_FROM_PASSWORD", PASSWORD);
    c
}

/// Restores snapshot `id` of `repo` as `home` into a new target; returns the
/// restored setuid file's owner and mode, and stderr.
fn restore_suid(env: &Env, repo: &Path, home: &str, id: &str, src: &Path, target: &str) -> ((u32, u32), String) {
    let t = env.path(target);
    let out = at(env, repo, home).args(["restore", id, "--target", t.to_str().unwrap()]).output().unwrap();
    assert_success(&out);
    (owner_and_mode(&t.join(src.strip_prefix("/").unwrap()).join("suid")), text(&out.stderr))
}

/// The destination snapshot a copy wrote for source snapshot `source`.
fn copy_of(env: &Env, repo: &Path, source: &str) -> String {
    let out = at(env, repo, "home").args(["--json", "snapshots"]).output().unwrap();
    assert_success(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let s = v.as_array().unwrap().iter().find(|s| s["snapshot"]["copied_from"]["snapshot"] == source);
    s.unwrap_or_else(|| panic!("no copy of {source}: {v}"))["id"].as_str().unwrap().to_string()
}

#[test]
fn a_copy_written_anew_keeps_who_wrote_each_snapshot() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let env = Env::new();
    let src = setuid_tree(&env);
    let own = env.backup(&[&src]);
    // A co-writer of the source (another writer key) backs up the same tree.
    let out = at(&env, &env.repo(), "co-home").args(["--json", "backup", src.to_str().unwrap()]).output().unwrap();
    assert_success(&out);
    let co: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let co = co["snapshot_id"].as_str().unwrap().to_string();
    // An unrelated destination: the copy cuts every file again and signs anew.
    let dst = env.path("dst");
    assert_success(&at(&env, &dst, "home").args(["init", "--kdf-log-n", "10", "--insecure-kdf"]).output().unwrap());
    let from = env.repo();
    let out =
        at(&env, &dst, "home").args(["copy", "--rechunk", "--from-repo", from.to_str().unwrap()]).output().unwrap();
    assert_success(&out);
    // The co-writer's snapshot stays the co-writer's: nothing privileged comes back.
    let co_copy = copy_of(&env, &dst, &co);
    let (got, stderr) = restore_suid(&env, &dst, "home", &co_copy, &src, "co");
    assert_eq!(got, (0, 0o755), "{stderr}");
    assert!(stderr.contains("does not trust") && stderr.contains("coffer writers trust"), "{stderr}");
    // This client's own snapshot: its source key is its own, trusted by the copy.
    let own_copy = copy_of(&env, &dst, &own);
    let (got, stderr) = restore_suid(&env, &dst, "home", &own_copy, &src, "own");
    assert_eq!(got, (1234, 0o4755), "{stderr}");
    // Nor does the copy count as this client's own for a later backup's parent.
    let out = at(&env, &dst, "home").args(["--json", "snapshots"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rec = v.as_array().unwrap().iter().find(|s| s["id"] == co_copy.as_str()).unwrap().clone();
    assert_eq!(rec["snapshot"]["copied_from"]["writer"].as_str().unwrap().len(), 64, "{rec}");
    assert_eq!(rec["snapshot"]["copied_from"]["signature"].as_str().unwrap().len(), 128, "{rec}");
}

#[test]
fn a_byte_copy_leaves_out_a_snapshot_by_an_unknown_writer_and_says_so() {
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("f"), b"data").unwrap();
    let good = env.backup(&[&src]);
    let out = at(&env, &env.repo(), "co-home").args(["--json", "backup", src.to_str().unwrap()]).output().unwrap();
    assert_success(&out);
    let co: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let co = co["snapshot_id"].as_str().unwrap().to_string();
    // The co-writer's registration disappears: its snapshot is by an unknown writer.
    let out = env.json(&["writers"]);
    let theirs = out.as_array().unwrap().iter().find(|w| w["this_client"] == false).unwrap()["public_key"].clone();
    let be: std::sync::Arc<dyn coffer_backend::Backend> =
        std::sync::Arc::new(coffer_backend::OpendalBackend::local(&env.repo()).unwrap());
    let repo = coffer_core::repo::Repository::open(be.clone(), PASSWORD.as_bytes()).unwrap();
    let mut removed = 0;
    for (id, w) in repo.writer_records().unwrap().0 {
        if w.public_key.to_hex() == theirs.as_str().unwrap() {
            be.delete(&coffer_core::format::ObjectKind::Writer.path(&id)).unwrap();
            removed += 1;
        }
    }
    assert_eq!(removed, 1);
    let dst = env.path("dst");
    let from = env.repo();
    let init = ["init", "--kdf-log-n", "10", "--insecure-kdf", "--from-repo", from.to_str().unwrap()];
    assert_success(&at(&env, &dst, "home").args(init).output().unwrap());
    let out = at(&env, &dst, "home").args(["--json", "copy", "--from-repo", from.to_str().unwrap()]).output().unwrap();
    let stderr = assert_code(&out, 20);
    assert!(stderr.contains(&co[..8]) && stderr.contains("was not copied"), "{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["snapshots"], serde_json::json!([good]), "{v}");
    assert_eq!(v["refused"], serde_json::json!([co]), "{v}");
    // The destination holds what it can vouch for: its check is clean.
    assert_success(&at(&env, &dst, "home").args(["check"]).output().unwrap());
}

#[test]
fn a_new_machine_restores_exactly_once_the_old_writer_key_is_trusted() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let env = Env::new();
    let src = setuid_tree(&env);
    let id = env.backup(&[&src]);
    let writers = env.json(&["writers"]);
    let old_key = writers[0]["public_key"].as_str().unwrap().to_string();
    // A new machine: no local state, so no writer key of its own.
    let (got, stderr) = restore_suid(&env, &env.repo(), "new-home", &id, &src, "first");
    assert_eq!(got, (0, 0o755), "{stderr}");
    assert!(stderr.contains(&format!("coffer writers trust {old_key}")), "{stderr}");
    assert!(stderr.contains("not restored: 1 owners, 1 setuid/setgid bits"), "{stderr}");
    let out = at(&env, &env.repo(), "new-home").args(["--json", "writers"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[0]["trusted"], false, "{v}");
    // Trusting the old key by a prefix, as `coffer writers` shows it.
    let out = at(&env, &env.repo(), "new-home").args(["writers", "trust", &old_key[..12]]).output().unwrap();
    assert_success(&out);
    assert!(text(&out.stdout).contains("now trusted"), "{}", text(&out.stdout));
    let out = at(&env, &env.repo(), "new-home").args(["--json", "writers"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[0]["trusted"], true, "{v}");
    let (got, stderr) = restore_suid(&env, &env.repo(), "new-home", &id, &src, "trusted");
    assert_eq!(got, (1234, 0o4755), "{stderr}");
    assert!(!stderr.contains("withheld"), "{stderr}");
    // Untrusted again, it is withheld again; `trust --all` trusts every registered writer.
    assert_success(&at(&env, &env.repo(), "new-home").args(["writers", "untrust", &old_key]).output().unwrap());
    assert_eq!(restore_suid(&env, &env.repo(), "new-home", &id, &src, "untrusted").0, (0, 0o755));
    assert_success(&at(&env, &env.repo(), "new-home").args(["writers", "trust", "--all"]).output().unwrap());
    assert_eq!(restore_suid(&env, &env.repo(), "new-home", &id, &src, "all").0, (1234, 0o4755));
    // A key that is not one is refused with the reason.
    let out = at(&env, &env.repo(), "new-home").args(["writers", "trust", "xyz"]).output().unwrap();
    assert!(text(&out.stderr).contains("is not a public key"), "{}", text(&out.stderr));
    assert_ne!(out.status.code(), Some(0));
}
