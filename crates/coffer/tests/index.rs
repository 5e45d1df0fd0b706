//! The index: a damaged or planted index file hides nothing else, an index file
//! replayed after a prune does not shadow the good copy, and `coffer repair index`
//! rebuilds the index from the packs.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::*;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn index_files(env: &Env) -> Vec<PathBuf> {
    files_under(&env.repo().join("index"))
}

/// A repository with two backups of a small tree (the second after a change),
/// and the source.
fn backed_up() -> (Env, PathBuf) {
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(src.join("d")).unwrap();
    std::fs::write(src.join("a"), random_bytes(300_000, 1)).unwrap();
    std::fs::write(src.join("d/b"), random_bytes(200_000, 2)).unwrap();
    std::fs::write(src.join("c"), b"small").unwrap();
    env.backup(&[&src]);
    (env, src)
}

/// Restores `latest` into a new directory and checks it against `src`.
fn restores_whole(env: &Env, src: &Path, name: &str) -> Output {
    let target = env.path(name);
    let out = env.run(&["restore", "latest", "--target", s(&target)]);
    assert_success(&out);
    assert_same_tree(src, &target.join(src.strip_prefix("/").unwrap()));
    out
}

#[test]
fn a_planted_index_file_hides_nothing_else_and_repair_removes_it() {
    let (env, src) = backed_up();
    // A second backup writes a second index file.
    std::fs::write(src.join("e"), random_bytes(100_000, 3)).unwrap();
    let first = index_files(&env);
    env.backup(&[&src]);
    let planted = env.repo().join("index").join("ab".repeat(32));
    std::fs::write(&planted, b"not an index file").unwrap();
    let only_new: Vec<PathBuf> =
        index_files(&env).into_iter().filter(|p| !first.contains(p) && *p != planted).collect();
    assert_eq!(only_new.len(), 1);

    // Every command goes on, naming the planted file.
    let out = restores_whole(&env, &src, "r1");
    let err = text(&out.stderr);
    assert!(err.contains("warning") && err.contains(&"ab".repeat(4)) && err.contains("repair index"), "{err}");
    let out = env.run(&["ls", "latest"]);
    assert_success(&out);
    // Check reports it as an error.
    let err = assert_code(&env.run(&["check"]), 20);
    assert!(err.contains(&format!("index file {}", "ab".repeat(4))), "{err}");

    // Repair removes it; check passes again.
    let out = env.run(&["repair", "index"]);
    assert_success(&out);
    assert!(!planted.exists());
    assert_success(&env.run(&["check", "--read-data"]));
    let out = restores_whole(&env, &src, "r2");
    assert!(!text(&out.stderr).contains("warning"), "{}", text(&out.stderr));
}

#[test]
fn repair_rebuilds_a_deleted_index() {
    let (env, src) = backed_up();
    let old = index_files(&env);
    // A dry run changes nothing.
    let v = env.json(&["repair", "index", "--dry-run"]);
    assert_eq!(v["report"]["index_files_deleted"], old.len());
    assert_eq!(index_files(&env), old);

    for f in &old {
        std::fs::remove_file(f).unwrap();
    }
    let err = assert_code(&env.run(&["restore", "latest", "--target", s(&env.path("lost"))]), 20);
    assert!(err.contains("not in any index"), "{err}");
    let v = env.json(&["repair", "index"]);
    assert_eq!(v["ok"], true, "{v}");
    assert!(v["report"]["packs_indexed"].as_u64().unwrap() >= 1, "{v}");
    assert!(!index_files(&env).is_empty());
    restores_whole(&env, &src, "back");
    assert_success(&env.run(&["check", "--read-data"]));
    // Repairing again replaces the files it wrote: the same packs, indexed once.
    let before = index_files(&env);
    assert_success(&env.run(&["repair", "index"]));
    let after = index_files(&env);
    assert_eq!(after.len(), before.len());
    assert!(after.iter().all(|f| !before.contains(f)));
}

#[test]
fn a_damaged_pack_is_reported_by_repair_and_keeps_its_old_entries() {
    let (env, _src) = backed_up();
    // The largest pack holds file data; its trailer is damaged.
    let mut packs = files_under(&env.repo().join("data"));
    packs.sort_by_key(|p| std::fs::metadata(p).unwrap().len());
    let pack = packs.last().unwrap().clone();
    let mut bytes = std::fs::read(&pack).unwrap();
    let n = bytes.len();
    bytes[n - 3] ^= 0x55;
    std::fs::write(&pack, bytes).unwrap();
    let name = pack.file_name().unwrap().to_str().unwrap()[..8].to_string();
    let out = env.run(&["repair", "index"]);
    let err = assert_code(&out, 20);
    assert!(err.contains(&format!("pack {name}")) && err.contains("kept"), "{err}");
    // Its entries are still in the index: check names the pack, not "not in any index".
    let err = assert_code(&env.run(&["check", "--read-data"]), 20);
    assert!(err.contains(&format!("pack {name}")) && !err.contains("not in any index"), "{err}");
}

#[test]
fn an_index_file_replayed_after_a_prune_does_not_shadow_the_good_copy() {
    let (env, src) = backed_up();
    let first = env.json(&["snapshots"]).as_array().unwrap()[0]["id"].as_str().unwrap().to_string();
    // The second snapshot keeps `d/b` and drops the rest: a prune repacks `d/b`'s pack.
    std::fs::remove_file(src.join("a")).unwrap();
    std::fs::remove_file(src.join("c")).unwrap();
    env.backup(&[&src]);
    let saved: Vec<(PathBuf, Vec<u8>)> =
        index_files(&env).into_iter().map(|p| (p.clone(), std::fs::read(&p).unwrap())).collect();
    assert_success(&env.run(&["forget", &first]));
    let out = env.cmd().env("COFFER_TEST_PRUNE_GRACE_MS", "10").args(["prune", "--max-unused", "0"]).output().unwrap();
    assert_success(&out);
    // The storage serves the old index files again.
    let mut replayed = 0;
    for (p, b) in &saved {
        if !p.exists() {
            std::fs::write(p, b).unwrap();
            replayed += 1;
        }
    }
    assert!(replayed > 0, "prune replaced no index file");
    restores_whole(&env, &src, "after");
    // A backup does not take the blobs of deleted packs for stored.
    std::fs::write(src.join("a"), random_bytes(300_000, 1)).unwrap();
    env.backup(&[&src]);
    restores_whole(&env, &src, "again");
    // The stale entries are index damage; repair drops them.
    let err = assert_code(&env.run(&["check"]), 20);
    assert!(err.contains("listed in the index but missing"), "{err}");
    let out = env.run(&["repair", "index"]);
    let err = assert_code(&out, 20);
    assert!(err.contains("missing from the repository; dropped from the index"), "{err}");
    assert_success(&env.run(&["check", "--read-data"]));
}

#[test]
fn a_prune_after_a_replayed_index_file_keeps_the_good_copy() {
    let (env, src) = backed_up();
    let first = env.json(&["snapshots"]).as_array().unwrap()[0]["id"].as_str().unwrap().to_string();
    std::fs::remove_file(src.join("a")).unwrap();
    std::fs::remove_file(src.join("c")).unwrap();
    env.backup(&[&src]);
    let saved: Vec<(PathBuf, Vec<u8>)> =
        index_files(&env).into_iter().map(|p| (p.clone(), std::fs::read(&p).unwrap())).collect();
    assert_success(&env.run(&["forget", &first]));
    let prune = || {
        let out =
            env.cmd().env("COFFER_TEST_PRUNE_GRACE_MS", "10").args(["prune", "--max-unused", "0"]).output().unwrap();
        assert_success(&out);
    };
    prune();
    for (p, b) in &saved {
        if !p.exists() {
            std::fs::write(p, b).unwrap();
        }
    }
    // A second prune sees both copies of `d/b`: the one in the stored pack is the used one.
    prune();
    restores_whole(&env, &src, "after");
    // The replayed files still list the packs that are gone: repair drops them.
    assert_code(&env.run(&["repair", "index"]), 20);
    assert_success(&env.run(&["check", "--read-data"]));
    restores_whole(&env, &src, "repaired");
}
