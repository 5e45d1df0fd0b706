//! Bad input and damage: wrong passphrase, missing repository, corrupted or
//! truncated objects of every kind, interrupted backups, unreadable files, and
//! what the repository reveals to its storage.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;

/// A small source tree: one incompressible file, one compressible, a subdirectory.
fn make_tree(root: &Path) {
    std::fs::create_dir_all(root.join("sub")).unwrap();
    std::fs::write(root.join("random.bin"), random_bytes(3 << 20, 1)).unwrap();
    std::fs::write(root.join("sub/text.txt"), "the same line again\n".repeat(20_000)).unwrap();
    std::fs::write(root.join("small"), b"tiny").unwrap();
}

fn objects(env: &Env, prefix: &str) -> Vec<PathBuf> {
    files_under(&env.repo().join(prefix))
}

fn flip_byte(path: &Path, offset: u64) {
    let mut b = std::fs::read(path).unwrap();
    let i = offset as usize % b.len();
    b[i] ^= 0x20;
    std::fs::write(path, b).unwrap();
}

fn short(path: &Path) -> String {
    path.file_name().unwrap().to_string_lossy()[..8].to_string()
}

fn backed_up() -> (Env, PathBuf, String) {
    let env = Env::new();
    let src = env.path("src");
    make_tree(&src);
    let id = env.backup(&[&src]);
    (env, src, id)
}

#[test]
fn wrong_passphrase_is_exit_3_and_quick() {
    let (env, _, _) = backed_up();
    let start = Instant::now();
    let out = env.cmd().env("COFFER_PASSWORD", "not it").args(["snapshots"]).output().unwrap();
    let err = assert_code(&out, 12);
    assert!(err.contains("wrong passphrase"), "{err}");
    // One scrypt evaluation at the test cost; generous bound for a loaded machine.
    assert!(start.elapsed() < Duration::from_secs(20));
}

#[test]
fn missing_repository_is_exit_10() {
    let env = Env::empty();
    let err = assert_code(&env.run(&["snapshots"]), 10);
    assert!(err.contains("no repository"), "{err}");
    // Nothing was created as a side effect.
    assert!(!env.repo().exists());
    let out = env.run(&["--json", "backup", env.dir.path().to_str().unwrap()]);
    let err = assert_code(&out, 10);
    let v: serde_json::Value = serde_json::from_str(err.trim()).unwrap();
    assert_eq!(v["exit_code"], 10);
}

#[test]
fn init_refuses_an_existing_repository() {
    let env = Env::new();
    let out = env.run(&["init", "--kdf-log-n", "10", "--insecure-kdf"]);
    let err = assert_code(&out, 1);
    assert!(err.contains("already exists"), "{err}");
}

#[test]
fn default_repository_is_created_on_first_backup() {
    let env = Env::empty();
    let src = env.path("src");
    make_tree(&src);
    let xdg = env.path("xdg");
    let backup_default = || {
        let mut c = env.cmd();
        c.env_remove("COFFER_REPOSITORY").env("XDG_DATA_HOME", &xdg).args(["backup", src.to_str().unwrap()]);
        c.output().unwrap()
    };
    let out = backup_default();
    assert_success(&out);
    assert!(text(&out.stdout).contains("created the default repository"), "{}", text(&out.stdout));
    assert!(xdg.join("coffer/repo/config").is_file());
    // The second backup opens it instead.
    let out = backup_default();
    assert_success(&out);
    assert!(!text(&out.stdout).contains("created"));
}

#[test]
fn no_plaintext_reaches_the_repository() {
    // Compression off, so that only encryption can hide the content.
    let env = Env::with_init_args(&["--compression", "0"]);
    let src = env.path("src");
    let content_marker = b"CONTENT-MARKER-7f3a9c-the-storage-must-never-see-this";
    let name_marker = "NAME-MARKER-52be1d";
    let dir_marker = "DIRNAME-MARKER-0a9e44";
    let xattr_marker = b"XATTR-MARKER-c81f20";
    std::fs::create_dir_all(src.join(dir_marker)).unwrap();
    let mut data = Vec::new();
    for _ in 0..2000 {
        data.extend_from_slice(content_marker);
    }
    std::fs::write(src.join(dir_marker).join(name_marker), &data).unwrap();
    std::fs::write(src.join("short"), content_marker).unwrap();
    let _ = xattr::set(src.join("short"), "user.marker", xattr_marker);
    let id = env.backup(&[&src]);
    let markers: Vec<&[u8]> = vec![
        content_marker,
        name_marker.as_bytes(),
        dir_marker.as_bytes(),
        xattr_marker,
        b"CONTENT-MARKER",
        PASSWORD.as_bytes(),
    ];
    let files = files_under(&env.repo());
    assert!(files.len() >= 4, "config, key, pack, index, snapshot expected");
    for f in &files {
        let bytes = std::fs::read(f).unwrap();
        for m in &markers {
            assert!(!bytes.windows(m.len()).any(|w| w == *m), "{} holds plaintext {:?}", f.display(), text(m));
        }
    }
    // And the data is really there: restore it.
    let target = env.path("out");
    assert_success(&env.run(&["restore", &format!("{id}:{}", src.display()), "--target", target.to_str().unwrap()]));
    assert_eq!(std::fs::read(target.join(dir_marker).join(name_marker)).unwrap(), data);
}

/// Flips a byte inside the largest blob (the random file's first chunk) and
/// returns the pack that holds it.
fn damage_largest_blob(env: &Env) -> PathBuf {
    let index: serde_json::Value = {
        let idx = objects(env, "index");
        let name = idx[0].file_name().unwrap().to_str().unwrap().to_string();
        serde_json::from_slice(&env.run(&["cat", "index", &name]).stdout).unwrap()
    };
    let (pack_id, big) = index["packs"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["blobs"].as_array().unwrap().iter().map(move |b| (p["pack"].as_str().unwrap(), b)))
        .max_by_key(|(_, b)| b["raw_length"].as_u64().unwrap())
        .unwrap();
    let pack = objects(env, "data").into_iter().find(|p| p.ends_with(pack_id)).unwrap();
    flip_byte(&pack, big["offset"].as_u64().unwrap() + 100);
    pack
}

#[test]
fn flipped_bit_in_a_data_pack_fails_restore_of_that_file_only() {
    let (env, src, id) = backed_up();
    let pack = damage_largest_blob(&env);
    let target = env.path("out");
    let out = env.run(&["restore", &format!("{id}:{}", src.display()), "--target", target.to_str().unwrap()]);
    let err = assert_code(&out, 20);
    assert!(err.contains(&format!("pack {}", short(&pack))), "{err}");
    assert!(err.contains("random.bin"), "{err}");
    // The damaged file is not left behind half-written; the others are intact.
    assert!(!target.join("random.bin").exists());
    assert_eq!(std::fs::read(target.join("small")).unwrap(), b"tiny");
    assert_eq!(std::fs::read(target.join("sub/text.txt")).unwrap(), std::fs::read(src.join("sub/text.txt")).unwrap());
    let out = env.run(&["check", "--read-data"]);
    let err = assert_code(&out, 20);
    assert!(err.contains(&format!("pack {}", short(&pack))), "{err}");
}

/// A file that cannot be restored takes its other names with it, whether they
/// are planned in the same batch or, with `COFFER_TEST_RESTORE_BATCH=1`, in later
/// ones: each is reported, none is linked to a removed file.
#[test]
fn other_names_of_a_damaged_file_are_reported_not_linked() {
    let env = Env::new();
    let src = env.path("src");
    make_tree(&src);
    std::fs::create_dir(src.join("zz")).unwrap();
    std::fs::hard_link(src.join("random.bin"), src.join("zz/again")).unwrap();
    std::fs::hard_link(src.join("random.bin"), src.join("sub/once_more")).unwrap();
    let id = env.backup(&[&src]);
    damage_largest_blob(&env);
    for batch in ["", "1"] {
        let target = env.path(&format!("out{batch}"));
        let spec = format!("{id}:{}", src.display());
        let out = env
            .cmd()
            .env("COFFER_TEST_RESTORE_BATCH", batch)
            .args(["restore", &spec, "--target", target.to_str().unwrap()])
            .output()
            .unwrap();
        let err = assert_code(&out, 20);
        assert!(err.contains("3 entries could not be restored"), "{err}");
        for name in ["zz/again", "sub/once_more"] {
            assert!(err.contains(&format!("{name}: hard link to")), "{err}");
            assert!(!target.join(name).exists(), "{name} restored");
        }
        assert!(!target.join("random.bin").exists());
        assert_eq!(std::fs::read(target.join("small")).unwrap(), b"tiny");
        assert_eq!(
            std::fs::read(target.join("sub/text.txt")).unwrap(),
            std::fs::read(src.join("sub/text.txt")).unwrap()
        );
    }
}

#[test]
fn truncated_pack_is_reported() {
    let (env, src, id) = backed_up();
    // The largest pack: one of file data (tree blobs have packs of their own,
    // and half of a small tree pack may still hold every tree a restore needs).
    let pack = objects(&env, "data").into_iter().max_by_key(|p| std::fs::metadata(p).unwrap().len()).unwrap();
    let len = std::fs::metadata(&pack).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&pack).unwrap().set_len(len / 2).unwrap();
    let err = assert_code(&env.run(&["check", "--read-data"]), 20);
    assert!(err.contains(&format!("pack {}", short(&pack))), "{err}");
    let target = env.path("out");
    let out = env.run(&["restore", &format!("{id}:{}", src.display()), "--target", target.to_str().unwrap()]);
    let err = assert_code(&out, 20);
    assert!(err.contains("truncated") || err.contains("altered"), "{err}");
}

#[test]
fn missing_pack_is_reported_by_check_and_restore() {
    let (env, src, id) = backed_up();
    let pack = objects(&env, "data").remove(0);
    std::fs::remove_file(&pack).unwrap();
    let err = assert_code(&env.run(&["check"]), 20);
    assert!(err.contains(&format!("pack {}", short(&pack))) && err.contains("missing"), "{err}");
    let target = env.path("out");
    let out = env.run(&["restore", &format!("{id}:{}", src.display()), "--target", target.to_str().unwrap()]);
    assert_code(&out, 20);
}

#[test]
fn flipped_tree_blob_is_reported() {
    let (env, _, _) = backed_up();
    let idx = objects(&env, "index");
    let name = idx[0].file_name().unwrap().to_str().unwrap().to_string();
    let index: serde_json::Value = serde_json::from_slice(&env.run(&["cat", "index", &name]).stdout).unwrap();
    // Workers fill packs of their own, so find a pack that holds a tree blob.
    let (pack, tree) = index["packs"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|p| Some((p, p["blobs"].as_array().unwrap().iter().find(|b| b["type"] == "tree blob")?.clone())))
        .expect("a tree blob");
    let pack_path = objects(&env, "data").into_iter().find(|p| p.ends_with(pack["pack"].as_str().unwrap())).unwrap();
    flip_byte(&pack_path, tree["offset"].as_u64().unwrap() + 3);
    let out = env.run(&["ls", "latest"]);
    let err = assert_code(&out, 20);
    assert!(err.contains("tree blob") && err.contains(&tree["id"].as_str().unwrap()[..8]), "{err}");
    let err = assert_code(&env.run(&["check"]), 20);
    assert!(err.contains("tree blob"), "{err}");
}

#[test]
fn damaged_index_snapshot_key_and_config_are_named() {
    // index
    let (env, _, _) = backed_up();
    let idx = objects(&env, "index").remove(0);
    flip_byte(&idx, 60);
    let err = assert_code(&env.run(&["ls", "latest"]), 20);
    assert!(err.contains(&format!("index file {}", short(&idx))), "{err}");
    let err = assert_code(&env.run(&["check"]), 20);
    assert!(err.contains(&format!("index file {}", short(&idx))), "{err}");

    // snapshot: truncated
    let (env, _, id) = backed_up();
    let snap = objects(&env, "snapshots").remove(0);
    let len = std::fs::metadata(&snap).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&snap).unwrap().set_len(len - 5).unwrap();
    let err = assert_code(&env.run(&["snapshots"]), 20);
    assert!(err.contains(&format!("snapshot {}", &id[..8])), "{err}");
    let err = assert_code(&env.run(&["check"]), 20);
    assert!(err.contains(&format!("snapshot {}", &id[..8])), "{err}");
    // One damaged snapshot hides nothing else: backups go on, and the others are listed.
    let src = env.path("src");
    let newer = env.backup(&[&src]);
    let out = env.run(&["snapshots"]);
    assert_code(&out, 20);
    assert!(text(&out.stdout).contains(&newer[..8]), "{}", text(&out.stdout));

    // key file
    let (env, _, _) = backed_up();
    let key = objects(&env, "keys").remove(0);
    flip_byte(&key, 40);
    let err = assert_code(&env.run(&["snapshots"]), 20);
    assert!(err.contains(&format!("key file {}", short(&key))), "{err}");

    // config
    let (env, _, _) = backed_up();
    flip_byte(&env.repo().join("config"), 30);
    let err = assert_code(&env.run(&["snapshots"]), 20);
    assert!(err.contains("config"), "{err}");
}

#[test]
fn interrupted_backup_leaves_a_valid_repository() {
    let env = Env::with_init_args(&["--pack-size", "1M"]);
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    for i in 0..12 {
        std::fs::write(src.join(format!("f{i}")), random_bytes(8 << 20, 100 + i)).unwrap();
    }
    let mut child =
        env.cmd().args(["backup", src.to_str().unwrap()]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    // Kill it once some packs are stored but before it is done.
    let deadline = Instant::now() + Duration::from_secs(60);
    while objects(&env, "data").len() < 3 && Instant::now() < deadline {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let killed = child.try_wait().unwrap().is_none();
    child.kill().unwrap();
    child.wait().unwrap();
    let packs_before = objects(&env, "data").len();
    eprintln!("backup killed mid-way: {killed}, packs stored: {packs_before}");
    assert!(killed, "the backup finished before it could be interrupted; make the data set larger");
    assert!(objects(&env, "snapshots").is_empty(), "a killed backup wrote a snapshot");
    // The repository is valid: check passes (packs not yet indexed are only warnings).
    let out = env.run(&["check", "--read-data"]);
    assert_success(&out);
    // The next backup succeeds and its snapshot restores bit-exact.
    let id = env.backup(&[&src]);
    let target = env.path("out");
    assert_success(&env.run(&["restore", &format!("{id}:{}", src.display()), "--target", target.to_str().unwrap()]));
    for i in 0..12 {
        let name = format!("f{i}");
        assert!(
            std::fs::read(target.join(&name)).unwrap() == std::fs::read(src.join(&name)).unwrap(),
            "{name} differs"
        );
    }
    assert_success(&env.run(&["check", "--read-data"]));
}

/// Runs `coffer` as the unprivileged user `nobody` when this process is root,
/// since root can read files whatever their mode.
fn unprivileged(env: &Env, args: &[&str]) -> std::process::Output {
    let is_root = rustix::process::geteuid().is_root();
    if !is_root {
        return env.run(args);
    }
    let mut c = env.cmd();
    let prog = c.get_program().to_owned();
    let mut cmd = std::process::Command::new("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]).arg(prog).args(args);
    for (k, v) in c.get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    c = cmd;
    c.output().unwrap()
}

fn chown_tree(path: &Path, uid: u32) {
    for p in files_under(path).into_iter().chain(dirs_under(path)) {
        std::os::unix::fs::chown(&p, Some(uid), Some(uid)).unwrap();
    }
}

fn dirs_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![dir.to_path_buf()];
    let mut i = 0;
    while i < out.len() {
        if let Ok(rd) = std::fs::read_dir(&out[i]) {
            for e in rd.flatten() {
                if e.file_type().unwrap().is_dir() {
                    out.push(e.path());
                }
            }
        }
        i += 1;
    }
    out
}

#[test]
fn unreadable_file_is_skipped_and_snapshot_marked_incomplete() {
    let env = Env::new();
    let src = env.path("src");
    make_tree(&src);
    std::fs::write(src.join("secret"), b"no access").unwrap();
    std::fs::set_permissions(src.join("secret"), std::fs::Permissions::from_mode(0o000)).unwrap();
    if rustix::process::geteuid().is_root() {
        std::fs::set_permissions(env.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        chown_tree(&env.repo(), 65534);
        chown_tree(&src, 65534);
        // The unprivileged user keeps its signing key and history heads in its home.
        std::fs::create_dir_all(env.path("home")).unwrap();
        chown_tree(&env.path("home"), 65534);
    }
    let out = unprivileged(&env, &["--json", "backup", src.to_str().unwrap()]);
    let err = assert_code(&out, 3);
    assert!(err.contains("secret"), "the warning names the file: {err}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["incomplete"], true);
    assert_eq!(v["skipped"], 1);
    // As the same user: root refuses a state directory another user owns.
    let out = unprivileged(&env, &["--json", "snapshots"]);
    assert_success(&out);
    let snaps: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let s = &snaps[0]["snapshot"];
    assert_eq!(s["skipped_count"], 1);
    assert!(s["skipped"][0]["path"].as_str().unwrap().ends_with("/secret"));
    // Everything else is in the snapshot.
    let ls = unprivileged(&env, &["--json", "ls", "latest"]);
    let listing = text(&ls.stdout);
    assert!(listing.contains("random.bin") && !listing.contains("\"secret\""));
}

#[test]
fn restore_of_a_missing_snapshot_or_path_is_a_clear_error() {
    let (env, src, id) = backed_up();
    let target = env.path("out");
    let err = assert_code(&env.run(&["restore", "deadbeef", "--target", target.to_str().unwrap()]), 1);
    assert!(err.contains("no snapshot matches"), "{err}");
    let spec = format!("{id}:{}/nonexistent", src.display());
    let err = assert_code(&env.run(&["restore", &spec, "--target", target.to_str().unwrap()]), 1);
    assert!(err.contains("not in the snapshot"), "{err}");
    assert!(!target.exists(), "a failed restore left its target behind");
}
