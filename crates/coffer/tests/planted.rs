//! Objects that do not decode, planted in the storage (anyone who can write to
//! it can plant them): no command stops for them, `check` names each, and
//! `coffer repair planted` removes them and nothing else.

mod common;

use common::*;

/// Plants `bytes` in the repository as `dir/<name>`.
fn plant(env: &Env, dir: &str, name: &str, bytes: &[u8]) {
    let d = env.repo().join(dir);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join(name), bytes).unwrap();
}

const NOTICE: &str = "7e57000000000000000000000000000000000000000000000000000000000001";
const KEY: &str = "7e57000000000000000000000000000000000000000000000000000000000002";
const WRITER: &str = "7e57000000000000000000000000000000000000000000000000000000000003";
const LAYOUT: &str = "7e57000000000000000000000000000000000000000000000000000000000004";
const INDEX: &str = "7e57000000000000000000000000000000000000000000000000000000000005";

#[test]
fn planted_objects_stop_nothing_and_repair_planted_removes_them() {
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("f"), random_bytes(100_000, 1)).unwrap();
    env.backup(&[&src]);
    plant(&env, "prune", NOTICE, b"\x01\x07garbage");
    plant(&env, "keys", KEY, b"{\"not\": \"a key file\"}");
    plant(&env, "writers", WRITER, b"garbage");
    plant(&env, "layout", LAYOUT, b"garbage");
    // A backup warns of the notice and succeeds.
    std::fs::write(src.join("g"), random_bytes(50_000, 2)).unwrap();
    let out = env.run(&["backup", src.to_str().unwrap()]);
    assert_success(&out);
    let err = text(&out.stderr);
    assert!(err.contains(&format!("prune notice {}", &NOTICE[..8])), "{err}");
    // `check` names each, as a warning: none is harmful.
    let out = env.run(&["check"]);
    assert_success(&out);
    let err = text(&out.stderr);
    for id in [NOTICE, KEY, WRITER, LAYOUT] {
        assert!(err.contains(&id[..8]) && err.contains("repair planted"), "{id}: {err}");
    }
    // An index file that does not load stays an error (a prune refuses to run).
    plant(&env, "index", INDEX, b"garbage");
    let err = assert_code(&env.run(&["check"]), 20);
    assert!(err.contains(&INDEX[..8]), "{err}");
    // Shown, then removed; the rest stays.
    let before = files_under(&env.repo()).len();
    let out = env.run(&["repair", "planted", "-n"]);
    assert_success(&out);
    for id in [NOTICE, KEY, WRITER, LAYOUT, INDEX] {
        assert!(text(&out.stderr).contains(&id[..8]), "{id}: {}", text(&out.stderr));
    }
    assert_eq!(files_under(&env.repo()).len(), before, "a dry run deletes nothing");
    assert_success(&env.run(&["repair", "planted"]));
    assert_eq!(files_under(&env.repo()).len(), before - 5);
    let out = env.run(&["check"]);
    assert_success(&out);
    assert!(!text(&out.stderr).contains("7e57"), "{}", text(&out.stderr));
}

/// A snapshot dated far ahead (a co-writer's clock, or a forged date) does not
/// become `latest`: it is passed over with a warning naming it, and `check`
/// warns of it.
#[test]
fn a_snapshot_dated_far_ahead_is_not_latest() {
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("f"), b"now").unwrap();
    let now = env.backup(&[&src]);
    std::fs::write(src.join("f"), b"2099").unwrap();
    let v = env.json(&["backup", "--time", "2099-01-01T00:00:00Z", src.to_str().unwrap()]);
    let future = v["snapshot_id"].as_str().unwrap().to_string();
    let file = format!("{}/f", src.display());
    let out = env.run(&["dump", "latest", &file]);
    assert_success(&out);
    let err = text(&out.stderr);
    assert!(err.contains(&future[..8]) && err.contains("2099"), "{err}");
    assert_eq!(out.stdout, b"now", "latest is snapshot {now}");
    let out = env.run(&["check"]);
    assert_success(&out);
    assert!(text(&out.stderr).contains(&future[..8]), "{}", text(&out.stderr));
    // Named by its id, it is used.
    assert_eq!(env.run(&["dump", &future, &file]).stdout, b"2099");
}
