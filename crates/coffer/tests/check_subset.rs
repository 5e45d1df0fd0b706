//! Partial data checks (`check --read-data-subset`): which packs each run reads and
//! what this machine remembers between runs; and damage location: a damaged blob
//! traced to the exact files it affects in every snapshot.

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use common::*;

/// The ids of every pack in the repository.
fn pack_ids(env: &Env) -> BTreeSet<String> {
    files_under(&env.repo().join("data"))
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect()
}

/// The packs a `check --json` run reports as read.
fn read_ids(v: &serde_json::Value) -> BTreeSet<String> {
    v["packs_read_ids"].as_array().expect("packs_read_ids").iter().map(|x| x.as_str().unwrap().to_string()).collect()
}

/// A repository of many small packs: 1 MiB packs, small chunks, 10 MiB of
/// incompressible data.
fn many_packs() -> Env {
    let env = Env::with_init_args(&[
        "--pack-size",
        "1M",
        "--chunk-min",
        "64K",
        "--chunk-avg",
        "256K",
        "--chunk-max",
        "1M",
        "--compression",
        "0",
    ]);
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    for i in 0..4 {
        std::fs::write(src.join(format!("f{i}")), random_bytes(5 << 19, 40 + i)).unwrap();
    }
    env.backup(&[&src]);
    // Two 34% runs must leave packs unread for the round test to mean something.
    assert!(pack_ids(&env).len() >= 7, "only {} packs; make the data set larger", pack_ids(&env).len());
    env
}

#[test]
fn groups_n_of_t_are_disjoint_and_together_read_every_pack() {
    let env = many_packs();
    let all = pack_ids(&env);
    let mut union = BTreeSet::new();
    for n in 1..=3u64 {
        let v = env.json(&["check", "--read-data-subset", &format!("{n}/3")]);
        let read = read_ids(&v);
        assert_eq!(v["packs_read"], read.len() as u64);
        // Pack ids are random, so with a dozen packs a group may be empty; what must hold
        // is that each pack is read by its group alone and every pack by one group.
        for id in read {
            // The documented rule: the id's first 8 bytes, big-endian, modulo t.
            assert_eq!(u64::from_str_radix(&id[..16], 16).unwrap() % 3, n - 1, "pack {id} in group {n}");
            assert!(union.insert(id.clone()), "pack {id} read by two groups");
        }
    }
    assert_eq!(union, all);
    // Text output says what was read.
    let out = env.run(&["check", "--read-data-subset", "2/3"]);
    assert_success(&out);
    assert!(text(&out.stdout).contains("read in full: subset 2/3"), "{}", text(&out.stdout));
}

#[test]
fn percentage_runs_continue_with_unverified_packs_then_begin_a_new_round() {
    let env = many_packs();
    let all = pack_ids(&env);
    let total = all.len();
    let want = (34 * total).div_ceil(100);
    let mut union = BTreeSet::new();
    for run in 1..=3 {
        let v = env.json(&["check", "--read-data-subset", "34%"]);
        let read = read_ids(&v);
        assert_eq!(read.len(), want, "run {run}");
        assert_eq!(v["new_round"], false, "run {run}");
        let fresh = read.difference(&union).count();
        assert_eq!(fresh, want.min(total - union.len()), "run {run} reread packs while others were unverified");
        union.extend(read);
        assert_eq!(v["packs_unverified"], (total - union.len()) as u64, "run {run}");
    }
    assert_eq!(union, all, "three runs of 34% did not cover every pack");
    // Every pack is verified: the fourth run clears the set and begins a new round.
    let v = env.json(&["check", "--read-data-subset", "34%"]);
    assert_eq!(v["new_round"], true);
    assert_eq!(read_ids(&v).len(), want);
    assert_eq!(v["packs_unverified"], (total - want) as u64);
    // The set lives in this machine's state directory, one pack id per line.
    let state: Vec<_> = files_under(&env.path("home/.local/state/coffer"))
        .into_iter()
        .filter(|p| p.file_name().unwrap() == "verified-packs")
        .collect();
    assert_eq!(state.len(), 1);
    let listed: BTreeSet<String> = std::fs::read_to_string(&state[0]).unwrap().lines().map(String::from).collect();
    assert_eq!(listed, read_ids(&v));
    // A full read records everything; a later share then begins a new round.
    let v = env.json(&["check", "--read-data"]);
    assert_eq!(v["packs_unverified"], 0);
    let v = env.json(&["check", "--read-data-subset", "34%"]);
    assert_eq!(v["new_round"], true);
}

#[test]
fn bad_subset_specs_are_usage_errors() {
    let env = Env::new();
    for spec in ["0/3", "4/3", "0%", "150%", "abc"] {
        assert_code(&env.run(&["check", "--read-data-subset", spec]), 2);
    }
    assert_code(&env.run(&["check", "--read-data", "--read-data-subset", "1/2"]), 2);
}

fn flip_byte(path: &Path, offset: u64) {
    let mut b = std::fs::read(path).unwrap();
    b[offset as usize] ^= 0x20;
    std::fs::write(path, b).unwrap();
}

#[test]
fn damaged_blob_is_traced_to_the_file_in_every_snapshot() {
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(src.join("docs")).unwrap();
    std::fs::write(src.join("docs/victim.bin"), random_bytes(3 << 20, 7)).unwrap();
    std::fs::write(src.join("docs/keep.txt"), "kept as it is\n").unwrap();
    std::fs::write(src.join("unrelated-notes.txt"), "first version\n").unwrap();
    let s1 = env.backup(&[&src]);
    std::fs::write(src.join("unrelated-notes.txt"), "second version, changed\n").unwrap();
    let s2 = env.backup(&[&src]);
    assert_ne!(s1, s2);

    // The largest blob in any index is a chunk of victim.bin.
    let mut blobs = Vec::new();
    for idx in files_under(&env.repo().join("index")) {
        let name = idx.file_name().unwrap().to_str().unwrap().to_string();
        let v: serde_json::Value = serde_json::from_slice(&env.run(&["cat", "index", &name]).stdout).unwrap();
        for p in v["packs"].as_array().unwrap() {
            for b in p["blobs"].as_array().unwrap() {
                blobs.push((p["pack"].as_str().unwrap().to_string(), b.clone()));
            }
        }
    }
    let (pack_id, blob) = blobs.into_iter().max_by_key(|(_, b)| b["raw_length"].as_u64().unwrap()).unwrap();
    let blob_id = blob["id"].as_str().unwrap().to_string();
    let pack = env.repo().join("data").join(&pack_id[..2]).join(&pack_id);
    flip_byte(&pack, blob["offset"].as_u64().unwrap() + blob["length"].as_u64().unwrap() / 2);

    let victim = std::fs::canonicalize(src.join("docs/victim.bin")).unwrap();
    let err = assert_code(&env.run(&["check", "--read-data"]), 20);
    assert!(err.contains(&format!("pack {}", &pack_id[..8])), "{err}");
    assert!(err.contains(&format!("data blob {} in pack {}", &blob_id[..8], &pack_id[..8])), "{err}");
    for s in [&s1, &s2] {
        let line = format!("affected: snapshot {}: {} (data blob {})", &s[..8], victim.display(), &blob_id[..8]);
        assert!(err.contains(&line), "missing {line:?} in:\n{err}");
    }
    for unaffected in ["keep.txt", "unrelated-notes.txt"] {
        assert!(!err.contains(unaffected), "{unaffected} named in:\n{err}");
    }

    // The same, structured.
    let out = env.run(&["--json", "check", "--read-data"]);
    assert_code(&out, 20);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let damaged = v["damaged_blobs"].as_array().unwrap();
    assert_eq!(damaged.len(), 1, "{damaged:?}");
    assert_eq!(damaged[0]["id"], blob_id.as_str());
    assert_eq!(damaged[0]["pack"], pack_id.as_str());
    let affected = v["affected"].as_array().unwrap();
    let mut snapshots: Vec<&str> = affected.iter().map(|f| f["snapshot"].as_str().unwrap()).collect();
    snapshots.sort();
    let mut expected = vec![s1.as_str(), s2.as_str()];
    expected.sort();
    assert_eq!(snapshots, expected);
    for f in affected {
        assert_eq!(f["path"], victim.to_str().unwrap());
        assert_eq!(f["kind"], "file");
        assert_eq!(f["blobs"], serde_json::json!([blob_id]));
    }
    // The damaged pack is not recorded as verified: a share run reads it first.
    let v: serde_json::Value = {
        let out = env.run(&["--json", "check", "--read-data-subset", "1%"]);
        assert_code(&out, 20);
        serde_json::from_slice(&out.stdout).unwrap()
    };
    assert_eq!(read_ids(&v), BTreeSet::from([pack_id.clone()]));
}

#[test]
fn a_missing_pack_names_the_files_it_held() {
    let env = Env::with_init_args(&["--pack-size", "1M"]);
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("big.bin"), random_bytes(4 << 20, 3)).unwrap();
    let s = env.backup(&[&src]);
    let big = std::fs::canonicalize(src.join("big.bin")).unwrap();
    // Remove a pack that holds no tree blob (the snapshot still lists), so only
    // file content is lost.
    let mut removed = false;
    for pack in files_under(&env.repo().join("data")) {
        let saved = std::fs::read(&pack).unwrap();
        std::fs::remove_file(&pack).unwrap();
        if env.run(&["ls", "latest"]).status.success() {
            removed = true;
            break;
        }
        std::fs::write(&pack, saved).unwrap();
    }
    assert!(removed, "every pack holds a tree blob");
    let err = assert_code(&env.run(&["check"]), 20);
    assert!(err.contains("missing from the repository"), "{err}");
    assert!(err.contains(&format!("affected: snapshot {}: {} (data blob", &s[..8], big.display())), "{err}");
}
