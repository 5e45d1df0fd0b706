//! `coffer key`: adding, listing and removing key files, changing a passphrase, and
//! rotating the data key, against the real binary.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Output;

use common::*;
use serde_json::Value;

/// Runs coffer with `passphrase` instead of the default one.
fn run_as(env: &Env, passphrase: &str, args: &[&str]) -> Output {
    env.cmd().env("COFFER_PASSWORD", passphrase).args(args).output().expect("run coffer")
}

/// Writes `passphrase` to a file and returns its path, for --new-password-file.
fn passphrase_file(env: &Env, passphrase: &str) -> String {
    let path = env.path(&format!("pw-{}", blake3::hash(passphrase.as_bytes()).to_hex()));
    std::fs::write(&path, format!("{passphrase}\n")).unwrap();
    path.to_str().unwrap().to_string()
}

/// `coffer --json key list` as `passphrase`.
fn key_list(env: &Env, passphrase: &str) -> Vec<Value> {
    let out = run_as(env, passphrase, &["--json", "key", "list"]);
    assert_success(&out);
    serde_json::from_slice::<Value>(&out.stdout).unwrap().as_array().unwrap().clone()
}

/// Adds a key file for `new` (opening with `opener`) and returns its id.
fn key_add(env: &Env, opener: &str, new: &str) -> String {
    let file = passphrase_file(env, new);
    let out = run_as(
        env,
        opener,
        &["--json", "key", "add", "--new-password-file", &file, "--kdf-log-n", "10", "--insecure-kdf"],
    );
    assert_success(&out);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["added"].as_str().unwrap().to_string()
}

/// The ids of the key files in the repository, sorted.
fn key_files(env: &Env) -> Vec<String> {
    let mut ids: Vec<String> = std::fs::read_dir(env.repo().join("keys"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_str().unwrap().to_string())
        .collect();
    ids.sort();
    ids
}

fn current(list: &[Value]) -> String {
    let cur: Vec<&Value> = list.iter().filter(|k| k["current"] == true).collect();
    assert_eq!(cur.len(), 1, "{list:?}");
    cur[0]["id"].as_str().unwrap().to_string()
}

#[test]
fn add_list_and_remove() {
    let env = Env::new();
    let list = key_list(&env, PASSWORD);
    assert_eq!(list.len(), 1);
    let first = current(&list);
    assert_eq!(list[0]["kdf"], "scrypt");
    assert_eq!(list[0]["scrypt"], serde_json::json!({"log_n": 10, "r": 8, "p": 4}));
    assert!(!list[0]["hostname"].as_str().unwrap().is_empty());
    assert!(list[0]["created"].as_str().unwrap().ends_with('Z'));

    let file = passphrase_file(&env, "second passphrase");
    let out = env.run(&["--json", "key", "add", "--new-password-file", &file, "--kdf-log-n", "11", "--insecure-kdf"]);
    assert_success(&out);
    let second = serde_json::from_slice::<Value>(&out.stdout).unwrap()["added"].as_str().unwrap().to_string();
    assert_eq!(key_files(&env), {
        let mut v = vec![first.clone(), second.clone()];
        v.sort();
        v
    });

    // Each passphrase opens the repository through its own key file.
    let list = key_list(&env, PASSWORD);
    assert_eq!(list.len(), 2);
    assert_eq!(current(&list), first);
    let new = list.iter().find(|k| k["id"] == second.as_str()).unwrap();
    assert_eq!(new["scrypt"]["log_n"], 11);
    assert_eq!(current(&key_list(&env, "second passphrase")), second);

    // The text listing marks the key file in use.
    let out = run_as(&env, "second passphrase", &["key", "list"]);
    assert_success(&out);
    let marked: Vec<String> = text(&out.stdout).lines().filter(|l| l.starts_with('*')).map(String::from).collect();
    assert_eq!(marked.len(), 1, "{}", text(&out.stdout));
    assert!(marked[0].contains(&second[..8]) && marked[0].contains("log_n=11"), "{marked:?}");

    // Unknown and ambiguous prefixes are refused.
    let err = assert_code(&env.run(&["key", "remove", "zz"]), 1);
    assert!(err.contains("no key file matches"), "{err}");
    let common_prefix: String = first.chars().zip(second.chars()).take_while(|(a, b)| a == b).map(|(a, _)| a).collect();
    let out = env.run(&["key", "remove", &common_prefix]);
    assert_code(&out, 1);

    // A unique prefix removes the other key file; its passphrase stops working.
    let out = env.run(&["--json", "key", "remove", &second[..8]]);
    assert_success(&out);
    assert_eq!(serde_json::from_slice::<Value>(&out.stdout).unwrap()["removed"], second.as_str());
    assert_eq!(key_files(&env), vec![first]);
    let err = assert_code(&run_as(&env, "second passphrase", &["key", "list"]), 12);
    assert!(err.contains("wrong passphrase"), "{err}");
}

#[test]
fn the_last_key_and_the_key_in_use_are_not_removed() {
    let env = Env::new();
    let first = key_files(&env).remove(0);
    let err = assert_code(&env.run(&["key", "remove", &first]), 1);
    assert!(err.contains("the only one"), "{err}");
    assert_eq!(key_files(&env), vec![first.clone()]);

    let second = key_add(&env, PASSWORD, "another");
    let err = assert_code(&env.run(&["key", "remove", &first[..10]]), 1);
    assert!(err.contains("opened the repository") && err.contains("another passphrase"), "{err}");
    assert_eq!(key_files(&env).len(), 2);
    let err = assert_code(&run_as(&env, "another", &["key", "remove", &second]), 1);
    assert!(err.contains("opened the repository"), "{err}");

    // Each may remove the other.
    assert_success(&run_as(&env, "another", &["key", "remove", &first]));
    assert_eq!(key_files(&env), vec![second]);
}

#[test]
fn passwd_replaces_the_key_in_use() {
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("f"), random_bytes(50_000, 1)).unwrap();
    let snap = env.backup(&[&src]);
    let old = key_files(&env).remove(0);

    let empty = env.path("empty");
    std::fs::write(&empty, "\n").unwrap();
    let err = assert_code(&env.run(&["key", "passwd", "--new-password-file", empty.to_str().unwrap()]), 1);
    assert!(err.contains("empty passphrase"), "{err}");
    let err = assert_code(&env.run(&["key", "passwd"]), 1);
    assert!(err.contains("no new passphrase"), "{err}");

    let file = passphrase_file(&env, "new passphrase");
    let out =
        env.run(&["--json", "key", "passwd", "--new-password-file", &file, "--kdf-log-n", "10", "--insecure-kdf"]);
    assert_success(&out);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["removed"], old.as_str());
    let new = v["added"].as_str().unwrap().to_string();
    assert_eq!(key_files(&env), vec![new.clone()]);

    let err = assert_code(&env.run(&["snapshots"]), 12);
    assert!(err.contains("wrong passphrase"), "{err}");
    let out = run_as(&env, "new passphrase", &["--json", "snapshots"]);
    assert_success(&out);
    assert!(text(&out.stdout).contains(&snap), "{}", text(&out.stdout));
    assert_success(&run_as(&env, "new passphrase", &["check", "--read-data"]));
    assert_eq!(current(&key_list(&env, "new passphrase")), new);
}

/// Every file below `root`, by path relative to it, with its content.
fn contents(root: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    files_under(root)
        .into_iter()
        .map(|p| (p.strip_prefix(root).unwrap().to_path_buf(), std::fs::read(&p).unwrap()))
        .collect()
}

fn names(dir: &Path) -> BTreeSet<PathBuf> {
    files_under(dir).into_iter().collect()
}

/// The data key epoch of a sealed object: bytes 9..11 of its envelope (version 2).
fn envelope_epoch(path: &Path) -> u16 {
    let b = std::fs::read(path).unwrap();
    assert_eq!(&b[..6], b"coffer", "{}", path.display());
    assert_eq!(b[6], 2, "envelope version of {}", path.display());
    u16::from_le_bytes([b[9], b[10]])
}

/// The data key epoch in a pack's trailer (bytes 37..39 of the last 48), checking the
/// reserved byte after it is zero.
fn pack_epoch(path: &Path) -> u16 {
    let b = std::fs::read(path).unwrap();
    let t = &b[b.len() - 48..];
    assert_eq!(&t[40..44], b"CFPK");
    assert_eq!(t[39], 0, "reserved byte of {}", path.display());
    u16::from_le_bytes([t[37], t[38]])
}

/// Restores `snap` into a fresh directory and returns what it holds under `src`.
fn restored(env: &Env, passphrase: &str, snap: &str, src: &Path, name: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let target = env.path(name);
    let out = run_as(env, passphrase, &["restore", snap, "--target", target.to_str().unwrap()]);
    assert_success(&out);
    let canon = std::fs::canonicalize(src).unwrap();
    contents(&target.join(canon.strip_prefix("/").unwrap()))
}

#[test]
fn rotate_seals_new_data_under_a_new_epoch_and_keeps_old_data_readable() {
    let env = Env::new();
    let repo = env.repo();
    let src = env.path("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    let big = random_bytes(3 << 20, 7);
    std::fs::write(src.join("big"), &big).unwrap();
    std::fs::write(src.join("sub/small.txt"), b"before the rotation\n").unwrap();
    let before = contents(&src);
    let snap1 = env.backup(&[&src]);
    let (packs1, index1) = (names(&repo.join("data")), names(&repo.join("index")));
    let snap1_file = repo.join("snapshots").join(&snap1);

    // A second passphrase, whose key file is kept aside to be put back after the rotation.
    let opener = key_files(&env).remove(0);
    let other = key_add(&env, PASSWORD, "other passphrase");
    let aside = env.path("other-key");
    std::fs::copy(repo.join("keys").join(&other), &aside).unwrap();

    // Without --yes, nothing happens: the other key file would be lost.
    let err = assert_code(&env.run(&["key", "rotate"]), 1);
    assert!(err.contains("--yes") && err.contains(&other[..8]), "{err}");
    assert_eq!(key_files(&env).len(), 2);

    let out = env.run(&["--json", "key", "rotate", "--yes"]);
    assert_success(&out);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["epoch"], 1);
    let rotated = v["key"].as_str().unwrap().to_string();
    let removed: BTreeSet<&str> = v["removed"].as_array().unwrap().iter().map(|r| r.as_str().unwrap()).collect();
    assert_eq!(removed, BTreeSet::from([opener.as_str(), other.as_str()]));
    assert_eq!(key_files(&env), vec![rotated.clone()]);
    assert!(!repo.join("keys").join(&opener).exists());
    let err = assert_code(&run_as(&env, "other passphrase", &["snapshots"]), 12);
    assert!(err.contains("wrong passphrase"), "{err}");

    // Back up more: a new file, a changed one, and a copy of data stored before.
    std::fs::write(src.join("sub/small.txt"), b"after the rotation\n").unwrap();
    std::fs::write(src.join("new"), random_bytes(200_000, 8)).unwrap();
    std::fs::write(src.join("big-copy"), &big).unwrap();
    let after = contents(&src);
    let out = env.json(&["backup", src.to_str().unwrap()]);
    let snap2 = out["snapshot_id"].as_str().unwrap().to_string();
    // The id and chunker keys did not change, so the copy deduplicates against old data.
    let bytes_new = out["summary"]["bytes_new"].as_u64().unwrap();
    assert!(bytes_new < 1 << 20, "{out}");

    // New objects carry epoch 1; old ones keep epoch 0; the config stays at epoch 0.
    let new_packs: Vec<PathBuf> = names(&repo.join("data")).difference(&packs1).cloned().collect();
    let new_index: Vec<PathBuf> = names(&repo.join("index")).difference(&index1).cloned().collect();
    assert!(!new_packs.is_empty() && !new_index.is_empty());
    for p in &new_packs {
        assert_eq!(pack_epoch(p), 1, "{}", p.display());
    }
    for p in &packs1 {
        assert_eq!(pack_epoch(p), 0, "{}", p.display());
    }
    for p in &new_index {
        assert_eq!(envelope_epoch(p), 1, "{}", p.display());
    }
    for p in &index1 {
        assert_eq!(envelope_epoch(p), 0, "{}", p.display());
    }
    assert_eq!(envelope_epoch(&repo.join("snapshots").join(&snap2)), 1);
    assert_eq!(envelope_epoch(&snap1_file), 0);
    assert_eq!(envelope_epoch(&repo.join("config")), 0);
    let cat: Value = env.json(&["cat", "index", new_index[0].file_name().unwrap().to_str().unwrap()]);
    assert!(cat["packs"].as_array().unwrap().iter().all(|p| p["epoch"] == 1), "{cat}");

    // Both snapshots restore bit for bit, and every pack verifies.
    assert_eq!(restored(&env, PASSWORD, &snap1, &src, "r1"), before);
    assert_eq!(restored(&env, PASSWORD, &snap2, &src, "r2"), after);
    assert_success(&env.run(&["check", "--read-data"]));

    // A key file from before the rotation opens the repository and reads old data, but
    // not new data: that is damage it cannot decrypt, named by its epoch, not a crash.
    std::fs::copy(&aside, repo.join("keys").join(&other)).unwrap();
    let old = |args: &[&str]| run_as(&env, "other passphrase", args);
    assert_eq!(current(&key_list(&env, "other passphrase")), other);
    let out = old(&["--json", "cat", "snapshot", &snap1]);
    assert_success(&out);
    let err = assert_code(&old(&["cat", "snapshot", &snap2]), 20);
    assert!(err.contains("epoch 1") && err.contains("predates a key rotation"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let err = assert_code(&old(&["restore", &snap2, "--target", env.path("r3").to_str().unwrap()]), 20);
    assert!(err.contains("epoch 1"), "{err}");
    // Nor may it rotate: it would reuse epoch 1 for another key.
    let err = assert_code(&old(&["key", "rotate", "--yes"]), 1);
    assert!(err.contains("predates an earlier rotation"), "{err}");
    assert!(repo.join("keys").join(&rotated).exists());

    // The rotated key file adds a passphrase again, with every epoch.
    std::fs::remove_file(repo.join("keys").join(&other)).unwrap();
    key_add(&env, PASSWORD, "other passphrase");
    assert_eq!(restored(&env, "other passphrase", &snap2, &src, "r4"), after);
}
