//! A repository over several backends, through the binary: two copies over three
//! local directories; one directory deleted entirely, every snapshot still
//! restores, `check --replicas` names what is short and `repair --replicas`
//! brings it back; a backend failing in the middle of a backup, with and
//! without `--min-copies`; adding and removing a backend with `rebalance`; and,
//! when the S3 test server is configured, one backend in a bucket.
//! See docs/design.md#many-backends.

mod common;

use std::process::Command;

use common::replicas::*;
use common::*;

#[test]
fn two_copies_over_three_directories_survive_losing_one_and_repair_restores_them() {
    let r = Replicas::new(2, &["b0:1G", "b1:1G", "b2:2G"]);
    let src = r.env.path("src");
    make_tree(&src, 1);
    // Enough packs (about 16) that b1, which owns about half the partitions,
    // holds some of them whatever their ids.
    for i in 0..12u64 {
        std::fs::write(src.join(format!("more{i}")), random_bytes(1 << 20, 900 + i)).unwrap();
    }
    let first = backup(&r, "b0", &src, &[]);
    let kept = keep_copy(&r, &src, "first");
    std::fs::write(src.join("f2"), random_bytes(700_000, 77)).unwrap();
    let second = backup(&r, "b1", &src, &[]);
    let (code, v) = r.json("b2", &["check", "--replicas"]);
    assert_eq!(code, 0, "{v}");
    let copies = r.copies();
    assert!(copies.len() >= 4, "several packs: {copies:?}");
    assert!(copies.values().all(|&n| n == 2), "every pack on exactly two backends: {copies:?}");
    // Every other object is on every backend: any one opens the repository.
    for n in &r.names {
        assert!(r.dir(n).join("config").is_file());
        assert_eq!(files_under(&r.dir(n).join("snapshots")).len(), 2);
        assert_eq!(files_under(&r.dir(n).join("layout")).len(), 1);
    }

    // One backend is lost entirely.
    let lost: Vec<String> = files_under(&r.dir("b1").join("data"))
        .iter()
        .map(|f| f.file_name().unwrap().to_string_lossy().into())
        .collect();
    assert!(!lost.is_empty(), "b1 held packs");
    std::fs::remove_dir_all(r.dir("b1")).unwrap();
    let sources = vec![(first, src.clone(), kept), (second, src.clone(), src.clone())];
    restores_bit_exact(&r, "b0", &sources);
    restores_bit_exact(&r, "b2", &sources);

    // A new empty disk takes its place: check names what it lacks, repair fills it.
    std::fs::create_dir(r.dir("b1")).unwrap();
    let (code, v) = r.json("b0", &["check", "--replicas"]);
    assert_eq!(code, 20, "{v}");
    let under: Vec<&str> = v["under_replicated"].as_array().unwrap().iter().map(|x| x.as_str().unwrap()).collect();
    let mut want = lost.clone();
    want.sort();
    let mut got: Vec<String> = under.iter().map(|s| s.to_string()).collect();
    got.sort();
    assert_eq!(got, want, "the packs b1 held are the under-replicated ones");
    let b1 = &v["backends"][1];
    assert_eq!(b1["name"], "b1");
    assert_eq!(b1["missing_packs"].as_array().unwrap().len(), lost.len());
    assert!(b1["missing_objects"].as_array().unwrap().iter().any(|o| o == "config"));
    let (code, v) = r.json("b2", &["repair", "--replicas"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["packs_copied"].as_u64().unwrap() as usize, lost.len(), "only the difference is sent: {v}");
    let (code, v) = r.json("b1", &["check", "--replicas"]);
    assert_eq!(code, 0, "{v}");
    assert!(r.copies().values().all(|&n| n == 2));
    restores_bit_exact(&r, "b1", &sources);
    // A second repair has nothing to send.
    let (_, v) = r.json("b0", &["repair", "--replicas"]);
    assert_eq!(v["packs_copied"], 0);
    assert_eq!(v["objects_copied"], 0);
}

#[test]
fn a_backend_failing_mid_backup_fails_it_unless_fewer_copies_are_allowed() {
    let r = Replicas::new(2, &["b0:1G", "b1:1G", "b2:1G"]);
    let src = r.env.path("src");
    make_tree(&src, 10);
    let failing = |c: &mut Command| {
        c.env("COFFER_TEST_FAULTS_B2", "fail_after=6");
    };
    let mut c = r.at("b0");
    failing(&mut c);
    let out = c.args(["-q", "backup", src.to_str().unwrap()]).output().unwrap();
    let err = assert_code(&out, 23);
    assert!(err.contains("backend b2") && err.contains("--min-copies"), "{err}");

    let mut c = r.at("b0");
    failing(&mut c);
    let out = c.args(["--min-copies", "1", "backup", src.to_str().unwrap()]).output().unwrap();
    assert_success(&out);
    let err = text(&out.stderr);
    assert!(err.contains("fewer copies") && err.contains("on b2") && err.contains("repair --replicas"), "{err}");
    let (code, v) = r.json("b0", &["check", "--replicas"]);
    assert_eq!(code, 20, "{v}");
    assert!(v["missing"].as_array().unwrap().is_empty(), "every pack has a copy: {v}");
    // b2 failed after its sixth request: what it lacks depends on the order the
    // uploads took (packs it owns, or objects every backend holds), but it lacks
    // something, and a pack it lacks is under-replicated.
    let b2 = &v["backends"][2];
    let lacking = |k: &str| b2[k].as_array().unwrap().len();
    assert!(lacking("missing_packs") + lacking("missing_objects") > 0, "b2 is named: {v}");
    assert_eq!(lacking("missing_packs") > 0, !v["under_replicated"].as_array().unwrap().is_empty(), "{v}");
    let (code, v) = r.json("b1", &["repair", "--replicas"]);
    assert_eq!(code, 0, "{v}");
    let (code, v) = r.json("b2", &["check", "--replicas"]);
    assert_eq!(code, 0, "{v}");
    assert!(r.copies().values().all(|&n| n == 2));
    let (_, snaps) = r.json("b2", &["snapshots"]);
    let id = snaps[0]["id"].as_str().unwrap().to_string();
    restores_bit_exact(&r, "b2", &[(id, src.clone(), src.clone())]);
}

#[test]
fn adding_and_removing_a_backend_moves_packs_with_rebalance() {
    let r0 = Replicas::new(2, &["b0:1G", "b1:1G"]);
    let r = Replicas { names: vec!["b0".into(), "b1".into(), "b2".into()], ..r0 };
    let src = r.env.path("src");
    make_tree(&src, 20);
    let id = backup(&r, "b0", &src, &[]);
    let b2 = r.dir("b2");
    // Regression: a backend on or inside another's directory was added, and
    // one copy could overwrite another. Refused, and nothing is created.
    for inside in [r.dir("b1"), r.dir("b1").join("inner")] {
        let out = r.run("b0", &["backend", "add", "bx", inside.to_str().unwrap(), "--capacity", "1G"]);
        let err = text(&out.stderr);
        assert!(!out.status.success() && err.contains("backend bx") && err.contains("backend b1"), "{err}");
    }
    assert!(!r.dir("b1").join("inner").exists());
    assert_success(&r.run("b0", &["backend", "add", "b2", b2.to_str().unwrap(), "--capacity", "2G", "--zone", "far"]));
    let (_, list) = r.json("b1", &["backend", "list"]);
    assert_eq!(list["migrating"], true);
    assert_eq!(list["backends"].as_array().unwrap().len(), 3);
    assert_eq!(list["backends"][2]["zone"], "far");
    assert_eq!(list["backends"][2]["packs"], 0);
    // Reads during the migration find the packs at their old homes.
    restores_bit_exact(&r, "b2", &[(id.clone(), src.clone(), src.clone())]);
    let (code, _) = r.json("b0", &["check", "--replicas"]);
    assert_eq!(code, 20, "the new backend lacks its packs until rebalance");
    let before = r.copies();
    let (code, moved) = r.json("b0", &["rebalance"]);
    assert_eq!(code, 0, "{moved}");
    // Zone "far" is alone: every pack gains a copy there and loses one elsewhere.
    assert_eq!(moved["packs_copied"].as_u64().unwrap() as usize, before.len(), "{moved}");
    assert_eq!(moved["misplaced_removed"].as_u64().unwrap() as usize, before.len(), "{moved}");
    // The old copies went once the new home held verified ones: every pack is on
    // exactly its two homes, and the copy notices are gone.
    let (code, v) = r.json("b2", &["check", "--replicas"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["misplaced"], 0, "{v}");
    let after = r.verified_holders();
    assert_eq!(after.keys().collect::<Vec<_>>(), before.keys().collect::<Vec<_>>());
    assert!(after.values().all(|h| h.len() == 2 && h.contains(&"b2".to_string())), "{after:?}");
    for n in &r.names {
        assert!(r.objects(n, "prune").is_empty(), "no notice left on {n}");
    }
    let (_, list) = r.json("b1", &["backend", "list"]);
    assert_eq!(list["migrating"], false);
    assert!(list["backends"][2]["packs"].as_u64().unwrap() > 0);
    // Zone "far" is the only other zone: every pack has a copy there.
    assert_eq!(list["backends"][2]["share_of_partitions"], 1.0);

    assert_success(&r.run("b1", &["backend", "remove", "b0"]));
    assert_success(&r.run("b1", &["rebalance"]));
    let (_, list) = r.json("b1", &["backend", "list"]);
    let names: Vec<&str> = list["backends"].as_array().unwrap().iter().map(|b| b["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["b1", "b2"]);
    std::fs::remove_dir_all(r.dir("b0")).unwrap();
    restores_bit_exact(&r, "b1", &[(id, src.clone(), src.clone())]);
    let (code, v) = r.json("b2", &["check", "--replicas"]);
    assert_eq!(code, 0, "{v}");
}

#[test]
fn a_damaged_copy_is_read_from_the_other_backend() {
    let r = Replicas::new(2, &["b0:1G", "b1:1G"]);
    let src = r.env.path("src");
    make_tree(&src, 30);
    let id = backup(&r, "b0", &src, &[]);
    // Flip a byte in the middle of every pack on b0: blobs there fail to verify.
    for f in files_under(&r.dir("b0").join("data")) {
        let mut bytes = std::fs::read(&f).unwrap();
        let mid = bytes.len() / 3;
        bytes[mid] ^= 0xff;
        std::fs::write(&f, bytes).unwrap();
    }
    let target = r.env.path("out");
    let out = r.run("b0", &["restore", &id, "--target", target.to_str().unwrap()]);
    assert_success(&out);
    assert_same_tree(&src, &target.join(src.strip_prefix("/").unwrap()));
    // Reads go to the healthiest, quickest copy first, so whether b0's damaged
    // copies are read at all depends on timing; when one is, b1's copy serves
    // and that is reported.
    let err = text(&out.stderr);
    assert!(err.trim().is_empty() || err.contains("on another backend served instead"), "{err}");
}

#[test]
fn init_refuses_bad_backend_lists() {
    let env = Env::empty();
    let b = |n: &str| format!("{n}:1G={}", env.path(n).display());
    let base = ["init", "--kdf-log-n", "10", "--insecure-kdf"];
    let out =
        env.cmd().args(base).args(["--replicas", "3", "--backend", &b("a"), "--backend", &b("b")]).output().unwrap();
    assert!(text(&out.stderr).contains("needs at least 3 backends"), "{}", text(&out.stderr));
    let out =
        env.cmd().args(base).args(["--replicas", "1", "--backend", &b("a"), "--backend", &b("a")]).output().unwrap();
    assert!(text(&out.stderr).contains("same name"), "{}", text(&out.stderr));
    let out = env.cmd().args(base).args(["--replicas", "1", "--backend", "a=/x"]).output().unwrap();
    assert!(text(&out.stderr).contains("capacity"), "{}", text(&out.stderr));
}

#[test]
fn one_backend_in_an_s3_bucket_with_two_directories() {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let Some(endpoint) = var("COFFER_TEST_S3_ENDPOINT") else {
        coffer_backend::testing::servers::absent(coffer_backend::testing::servers::Server::S3);
        return;
    };
    let bucket = var("COFFER_TEST_S3_BUCKET").unwrap();
    let unique = format!("replicas-{}-{}", std::process::id(), std::time::UNIX_EPOCH.elapsed().unwrap().as_nanos());
    let s3 = format!("s3:{endpoint}/{bucket}/{unique}");
    let env = Env::empty();
    let creds = [
        ("AWS_ACCESS_KEY_ID", var("COFFER_TEST_S3_ACCESS_KEY").unwrap()),
        ("AWS_SECRET_ACCESS_KEY", var("COFFER_TEST_S3_SECRET_KEY").unwrap()),
        ("AWS_REGION", var("COFFER_TEST_S3_REGION").unwrap()),
    ];
    let cmd = |repo: &str| {
        let mut c = env.cmd();
        c.env("COFFER_REPOSITORY", repo).envs(creds.iter().map(|(k, v)| (*k, v.as_str())));
        c
    };
    let (d0, d1) = (env.path("d0"), env.path("d1"));
    let out = cmd(d0.to_str().unwrap())
        .args(["init", "--kdf-log-n", "10", "--insecure-kdf", "--pack-size", "1M", "--replicas", "2"])
        .args(["--backend", &format!("d0:1G={}", d0.display()), "--backend", &format!("d1:1G={}", d1.display())])
        .args(["--backend", &format!("s3:2G={s3}")])
        .output()
        .unwrap();
    assert_success(&out);
    let src = env.path("src");
    make_tree(&src, 40);
    assert_success(&cmd(d0.to_str().unwrap()).args(["-q", "backup", src.to_str().unwrap()]).output().unwrap());
    // The bucket alone opens the repository; with d0 gone, everything restores.
    std::fs::remove_dir_all(&d0).unwrap();
    let target = env.path("out");
    assert_success(&cmd(&s3).args(["-q", "restore", "latest", "--target", target.to_str().unwrap()]).output().unwrap());
    assert_same_tree(&src, &target.join(src.strip_prefix("/").unwrap()));
    std::fs::create_dir(&d0).unwrap();
    assert_success(&cmd(&s3).args(["-q", "repair", "--replicas"]).output().unwrap());
    assert_success(&cmd(d1.to_str().unwrap()).args(["check", "--replicas"]).output().unwrap());
}

/// A source of about 16 packs of 1 MiB, so that every backend holds some.
fn many_packs(r: &Replicas, name: &str, seed: u64) -> std::path::PathBuf {
    let src = r.env.path(name);
    make_tree(&src, seed);
    for i in 0..12u64 {
        std::fs::write(src.join(format!("more{i}")), random_bytes(1 << 20, seed * 1000 + i)).unwrap();
    }
    src
}

#[test]
fn repair_removes_a_misplaced_copy_only_when_every_home_holds_a_verified_one() {
    let r = Replicas::new(2, &["b0:1G", "b1:1G", "b2:1G"]);
    let src = many_packs(&r, "src", 50);
    let id = backup(&r, "b0", &src, &[]);
    let holders = r.verified_holders();
    assert!(holders.len() >= 3, "{holders:?}");
    let path = |backend: &str, pack: &str| r.dir(backend).join("data").join(&pack[..2]).join(pack);
    let other = |h: &[String]| r.names.iter().find(|n| !h.contains(n)).unwrap().clone();
    let mut planted = Vec::new();
    for (pack, h) in holders.iter().take(3) {
        let to = other(h);
        std::fs::create_dir_all(path(&to, pack).parent().unwrap()).unwrap();
        std::fs::copy(path(&h[0], pack), path(&to, pack)).unwrap();
        planted.push((pack.clone(), h.clone(), to));
    }
    // The first pack has a sound copy on both homes; the second's copy on a home
    // is damaged; the third is missing from a home (repair copies it there first).
    let (damaged, lacking) = (&planted[1], &planted[2]);
    let mut bytes = std::fs::read(path(&damaged.1[0], &damaged.0)).unwrap();
    bytes[100] ^= 1;
    std::fs::write(path(&damaged.1[0], &damaged.0), bytes).unwrap();
    std::fs::remove_file(path(&lacking.1[1], &lacking.0)).unwrap();
    let (code, v) = r.json("b0", &["check", "--replicas"]);
    assert_eq!((code, v["misplaced"].as_u64()), (20, Some(3)), "{v}");

    let (code, v) = r.json("b1", &["repair", "--replicas"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["packs_copied"], 1, "{v}");
    assert_eq!(v["misplaced_removed"], 2, "{v}");
    assert_eq!(v["misplaced_kept"], 1, "{v}");
    assert!(!path(&planted[0].2, &planted[0].0).exists(), "the sound pack's extra copy is gone");
    assert!(!path(&lacking.2, &lacking.0).exists(), "removed once both homes held it");
    assert!(path(&lacking.1[1], &lacking.0).exists());
    assert!(path(&damaged.2, &damaged.0).exists(), "kept: a home's copy does not verify");
    // Every pack still has two copies that verify, and the notices are gone.
    let after = r.verified_holders();
    assert!(after.values().all(|h| h.len() >= 2), "{after:?}");
    assert_eq!(after[&damaged.0].len(), 2);
    for n in &r.names {
        assert!(r.objects(n, "prune").is_empty(), "no notice left on {n}");
    }
    let (_, v) = r.json("b2", &["check", "--replicas"]);
    assert_eq!(v["misplaced"], 1, "{v}");
    restores_bit_exact(&r, "b2", &[(id, src.clone(), src.clone())]);
}

#[test]
fn backups_run_during_a_rebalance_and_keep_every_copy() {
    let r0 = Replicas::new(2, &["b0:1G", "b1:1G", "b2:1G"]);
    let r = Replicas { names: vec!["b0".into(), "b1".into(), "b2".into(), "b3".into()], ..r0 };
    let src = many_packs(&r, "src", 60);
    let first = backup(&r, "b0", &src, &[]);
    let kept = keep_copy(&r, &src, "first");
    let b3 = r.dir("b3");
    assert_success(&r.run("b0", &["backend", "add", "b3", b3.to_str().unwrap(), "--capacity", "2G"]));
    // A long grace period, so that the backups below run while the rebalance
    // copies and waits to remove.
    let mut rebalance = r.at("b1");
    let mut child = rebalance
        .env("COFFER_TEST_PRUNE_GRACE_MS", "2500")
        .args(["--json", "rebalance"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut sources = vec![(first, src.clone(), kept)];
    for round in 0..2u64 {
        for i in 0..3u64 {
            std::fs::write(src.join(format!("new{round}-{i}")), random_bytes(700_000, 70 + round * 10 + i)).unwrap();
        }
        let id = backup(&r, ["b2", "b3"][round as usize], &src, &[]);
        sources.push((id, src.clone(), keep_copy(&r, &src, &format!("during{round}"))));
    }
    assert!(child.try_wait().unwrap().is_none(), "the backups ran while the rebalance did");
    let out = child.wait_with_output().unwrap();
    assert_success(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["misplaced_removed"].as_u64().unwrap() > 0, "{v}");
    let (code, v) = r.json("b3", &["check", "--replicas"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["misplaced"], 0, "{v}");
    assert!(r.verified_holders().values().all(|h| h.len() == 2));
    assert_success(&r.run("b0", &["-q", "check", "--read-data"]));
    restores_bit_exact(&r, "b3", &sources);
}

/// Flips one byte in the middle of `pack`'s copy on `backend` (its size stays).
fn damage_copy(r: &Replicas, backend: &str, pack: &str) {
    let f = r.dir(backend).join("data").join(&pack[..2]).join(pack);
    let mut bytes = std::fs::read(&f).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x20;
    std::fs::write(&f, bytes).unwrap();
}

#[test]
fn a_damaged_copy_is_named_by_backend_and_repair_replaces_it_from_a_verified_one() {
    let r = Replicas::new(2, &["b0:1G", "b1:1G"]);
    let src = r.env.path("src");
    make_tree(&src, 31);
    let id = backup(&r, "b0", &src, &[]);
    let holders = r.verified_holders();
    let (pack, _) = holders.iter().next().unwrap();
    let pack = pack.clone();
    damage_copy(&r, "b1", &pack);

    // The data check reads both copies: b1's is damaged, b0's intact, no blob lost.
    let (code, v) = r.json("b0", &["check", "--read-data"]);
    assert_eq!(code, 20, "{v}");
    assert_eq!(v["damaged_blobs"], serde_json::json!([]), "{v}");
    let copies = v["damaged_copies"].as_array().unwrap();
    assert_eq!(copies.len(), 1, "{v}");
    assert_eq!(copies[0]["pack"], pack.as_str());
    assert_eq!(copies[0]["backend"], "b1");
    assert_eq!(copies[0]["problem"], "damaged");
    assert_eq!(copies[0]["intact_on"], serde_json::json!(["b0"]));
    let out = r.run("b0", &["check", "--read-data"]);
    let err = assert_code(&out, 20);
    assert!(err.contains("the copy on backend b1 is damaged") && err.contains("no data is lost"), "{err}");

    // Repair replaces the damaged copy from the verified one.
    let (code, v) = r.json("b1", &["repair", "--replicas"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["damaged_replaced"], serde_json::json!([{"pack": pack, "backend": "b1"}]), "{v}");
    assert_eq!(r.verified_holders()[&pack], vec!["b0".to_string(), "b1".to_string()]);
    assert_success(&r.run("b1", &["check", "--read-data"]));

    // Without a check first, `repair --replicas --read-data` reads every copy.
    damage_copy(&r, "b0", &pack);
    let out = r.run("b1", &["check", "--replicas", "--read-data"]);
    let err = assert_code(&out, 20);
    assert!(err.contains("the copy on backend b0 is damaged"), "{err}");
    // Another client, which remembers nothing of that check.
    let out = r
        .at("b1")
        .env("HOME", r.env.path("other-home"))
        .env("COFFER_BACKEND_B0", r.dir("b0"))
        .env("COFFER_BACKEND_B1", r.dir("b1"))
        .args(["--json", "repair", "--replicas", "--read-data"])
        .output()
        .unwrap();
    assert_success(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["damaged_replaced"], serde_json::json!([{"pack": pack, "backend": "b0"}]), "{v}");
    assert_eq!(r.verified_holders()[&pack].len(), 2);
    restores_bit_exact(&r, "b0", &[(id, src.clone(), src.clone())]);
}

#[test]
fn a_layout_lowering_protection_by_an_untrusted_writer_is_reported_not_followed() {
    use coffer_backend::{Backend, OpendalBackend};
    use coffer_core::format::ObjectKind;
    use std::sync::Arc;

    let r = Replicas::new(2, &["b0:1G", "b1:1G", "b2:1G"]);
    let src = many_packs(&r, "src", 61);
    let id = backup(&r, "b0", &src, &[]);
    let before = r.verified_holders();
    assert!(before.values().all(|h| h.len() == 2), "{before:?}");
    // A newly registered writer signs the next version: one copy, all on b0.
    let local = |n: &str| -> Arc<dyn Backend> { Arc::new(OpendalBackend::local(&r.dir(n)).unwrap()) };
    let repo = coffer_core::repo::Repository::open(local("b0"), PASSWORD.as_bytes()).unwrap();
    let (_, current) = repo.current_layout().unwrap().0.unwrap();
    let key = coffer_core::crypto::sign::SigningKey::generate();
    let record = repo.register_writer(&key.public(), "elsewhere".into(), "someone".into()).unwrap();
    let table = coffer_backend::placement::Table {
        partitions: current.table.partitions,
        replicas: 1,
        owners: vec![0; current.table.partitions as usize],
    };
    let lowered = coffer_core::format::layout::Layout {
        version: current.version + 1,
        writer: key.public(),
        table,
        previous: None,
        ..current.clone()
    };
    let lid = repo.save_layout(&lowered, &key).unwrap();
    for name in [ObjectKind::Writer.path(&record), ObjectKind::Layout.path(&lid)] {
        let bytes = local("b0").read(&name).unwrap();
        for n in ["b1", "b2"] {
            local(n).write(&name, bytes.clone()).unwrap();
        }
    }
    // The owner's rebalance follows the version it trusts and says why.
    let out = r.run("b0", &["rebalance"]);
    assert_success(&out);
    let err = text(&out.stderr);
    assert!(err.contains("lowers protection") && err.contains("is not followed"), "{err}");
    assert!(err.contains(&format!("coffer writers trust {}", key.public().to_hex())), "{err}");
    assert_eq!(r.verified_holders(), before, "no copy was removed");
    let (code, v) = r.json("b1", &["check", "--replicas"]);
    assert_eq!(code, 0, "{v}");
    restores_bit_exact(&r, "b2", &[(id, src.clone(), src.clone())]);
}
