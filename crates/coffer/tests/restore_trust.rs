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
    assert!(stderr.contains("not signed by this client's own writer key"), "{stderr}");
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
    assert!(text(&out.stderr).contains("--privileged none"));
    assert_eq!(owner_and_mode(&none.join(src.strip_prefix("/").unwrap()).join("suid")), (0, 0o755));
}
