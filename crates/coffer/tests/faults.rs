//! A storage that fails: transient errors, timeouts, short reads and lost write
//! acknowledgements are retried and never corrupt anything; a storage that refuses
//! writes (a full disk) gives a clear error, exit code 23, and leaves every
//! existing object as it was. Faults come from `COFFER_TEST_FAULTS` with fixed seeds.

mod common;

use std::path::Path;
use std::process::Output;

use common::*;

fn make_tree(root: &Path) {
    std::fs::create_dir_all(root.join("sub")).unwrap();
    for i in 0..12u64 {
        std::fs::write(root.join(format!("f{i}")), random_bytes(150_000 + i as usize * 7_000, i)).unwrap();
    }
    std::fs::write(root.join("sub/big"), random_bytes(3 << 20, 99)).unwrap();
    std::fs::write(root.join("sub/text"), "hello\n".repeat(10_000)).unwrap();
}

fn run_faulty(env: &Env, faults: &str, args: &[&str]) -> Output {
    env.cmd().env("COFFER_TEST_FAULTS", faults).env("COFFER_RETRY_BASE_MS", "1").args(args).output().unwrap()
}

#[test]
fn a_storage_failing_often_is_retried_and_nothing_is_damaged() {
    for seed in 1..=3 {
        let env = Env::new();
        let src = env.path("src");
        make_tree(&src);
        // About a third of all reads and writes fail at these rates, yet ten attempts
        // all failing stays below 1 in 10 000 per operation (a read fails at 0.34, a
        // write at 0.38), so the commands succeed whatever order their threads take.
        let faults = format!("seed={seed},transient=0.2,timeout=0.05,delay_ms=2,short_read=0.15,lost_ack=0.2");
        let s = src.to_str().unwrap();
        assert_success(&run_faulty(&env, &faults, &["-q", "backup", s]));
        std::fs::write(src.join("f3"), random_bytes(90_000, 1234)).unwrap();
        assert_success(&run_faulty(&env, &faults, &["-q", "backup", s]));
        let target = env.path("out");
        assert_success(&run_faulty(&env, &faults, &["-q", "restore", "latest", "--target", target.to_str().unwrap()]));
        assert_same_tree(&src, &target.join(src.strip_prefix("/").unwrap()));
        assert_success(&run_faulty(&env, &faults, &["-q", "check", "--read-data"]));
        // And without faults, the same repository is intact.
        assert_success(&env.run(&["-q", "check", "--read-data"]));
    }
}

#[test]
fn retries_give_up_with_exit_code_23_and_a_message_naming_the_object() {
    let env = Env::new();
    let src = env.path("src");
    make_tree(&src);
    // Every operation fails transiently: after the retries, a storage error.
    let out = run_faulty(&env, "seed=7,transient=1", &["snapshots"]);
    let err = assert_code(&out, 23);
    assert!(err.contains("gave up after 10 attempts"), "{err}");
    assert!(err.contains("config") || err.contains("keys/"), "names the object: {err}");
}

#[test]
fn a_pack_the_storage_cannot_serve_is_a_storage_error_not_damage() {
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("small"), b"one small file: a data pack and a tree pack hold it").unwrap();
    assert_success(&env.run(&["-q", "backup", src.to_str().unwrap()]));
    // One data pack and one tree pack.
    let packs = files_under(&env.repo().join("data"));
    assert_eq!(packs.len(), 2, "{packs:?}");
    let names: Vec<String> =
        packs.iter().map(|p| p.strip_prefix(env.repo()).unwrap().to_str().unwrap().to_string()).collect();
    // The tree pack is the one whose loss stops `ls`.
    let fails_ls = |n: &String| {
        let out = run_faulty(&env, &format!("seed=3,transient=1,only={n}"), &["ls", "latest"]);
        out.status.code() == Some(23)
    };
    let trees: Vec<&String> = names.iter().filter(|n| fails_ls(n)).collect();
    assert_eq!(trees.len(), 1, "{names:?}");
    let name = trees[0];
    // Every read of that pack fails: the trees cannot be read, which says
    // nothing about whether they are intact.
    for args in [&["check"][..], &["check", "--read-data"], &["ls", "latest"]] {
        let out = run_faulty(&env, &format!("seed=3,transient=1,only={name}"), args);
        let err = assert_code(&out, 23);
        assert!(err.contains(&name[name.len() - 20..]) && err.contains("gave up"), "{args:?}: {err}");
        assert!(!err.contains("damaged"), "{args:?} calls a storage failure damage: {err}");
    }
    // Nor does a restore whose data pack cannot be read call the file damaged.
    let data = names.iter().find(|n| *n != name).unwrap();
    let target = env.path("out");
    let out = run_faulty(
        &env,
        &format!("seed=3,transient=1,only={data}"),
        &["restore", "latest", "--target", target.to_str().unwrap()],
    );
    let err = assert_code(&out, 23);
    assert!(err.contains(&data[data.len() - 20..]) && err.contains("gave up"), "restore: {err}");
    assert!(!err.contains("damage"), "restore calls a storage failure damage: {err}");
    assert_success(&env.run(&["-q", "check", "--read-data"]));
}

#[test]
fn a_full_disk_fails_the_backup_cleanly_and_changes_nothing() {
    let env = Env::new();
    let src = env.path("src");
    make_tree(&src);
    let s = src.to_str().unwrap();
    env.backup(&[&src]);
    std::fs::write(src.join("new-file"), random_bytes(500_000, 77)).unwrap();
    let before: Vec<_> = files_under(&env.repo());
    let before_bytes: Vec<Vec<u8>> = before.iter().map(|p| std::fs::read(p).unwrap()).collect();
    let out = run_faulty(&env, "refuse_writes", &["backup", s]);
    let err = assert_code(&out, 23);
    assert!(err.contains("No space left on device"), "{err}");
    assert!(err.contains("no snapshot was written"), "{err}");
    assert!(err.contains("sessions/") || err.contains("data/"), "names the object: {err}");
    // Every object is as it was, and nothing was added.
    let after: Vec<_> =
        files_under(&env.repo()).into_iter().filter(|p| !p.starts_with(env.repo().join("tmp"))).collect();
    assert_eq!(before, after);
    for (p, b) in before.iter().zip(&before_bytes) {
        assert!(&std::fs::read(p).unwrap() == b, "{} changed", p.display());
    }
    assert_success(&env.run(&["-q", "check", "--read-data"]));
    // Once there is space again, the backup goes through.
    assert_success(&env.run(&["-q", "backup", s]));
    let snaps = env.json(&["snapshots"]);
    assert_eq!(snaps.as_array().unwrap().len(), 2);
}

#[test]
fn a_bad_fault_spec_is_a_clear_error() {
    let env = Env::new();
    let out = run_faulty(&env, "sometimes", &["snapshots"]);
    let err = assert_code(&out, 1);
    assert!(err.contains("unknown fault"), "{err}");
}
