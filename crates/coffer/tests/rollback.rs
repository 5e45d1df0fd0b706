//! `latest` after a detected rollback is never resolved silently to an older snapshot.

mod common;

use common::*;

#[test]
fn latest_is_refused_after_a_rollback() {
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("f"), b"old").unwrap();
    let older = env.backup(&[&src]);
    std::fs::write(src.join("f"), b"new").unwrap();
    let newer = env.backup(&[&src]);
    // The storage serves the state before the newer snapshot.
    std::fs::remove_file(env.repo().join("snapshots").join(&newer)).unwrap();

    let target = env.path("r");
    let t = target.to_str().unwrap();
    for args in [vec!["restore", "latest", "--target", t], vec!["ls", "latest"], vec!["diff", &older, "latest"]] {
        let err = assert_code(&env.run(&args), 20);
        assert!(err.contains("latest") && err.contains(&newer[..8]) && err.contains("older state"), "{args:?}: {err}");
    }
    assert!(!target.exists(), "nothing restored");
    // In JSON too, the error names the missing head.
    let out = env.run(&["--json", "restore", "latest", "--target", t]);
    let err = assert_code(&out, 20);
    assert!(err.contains(&newer[..8]), "{err}");
    // Naming the snapshot by id restores it.
    assert_success(&env.run(&["restore", &older, "--target", t]));
    assert_eq!(std::fs::read(target.join(src.strip_prefix("/").unwrap()).join("f")).unwrap(), b"old");
}

#[test]
fn latest_is_not_refused_after_a_forget() {
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("f"), b"old").unwrap();
    env.backup(&[&src]);
    let newer = env.backup(&[&src]);
    assert_success(&env.run(&["forget", &newer]));
    assert_success(&env.run(&["ls", "latest"]));
}
