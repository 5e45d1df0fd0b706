//! Backups that local files and co-writers cannot fool: special files given as
//! paths are recorded, not read; a file whose content disagrees with its size is
//! marked, never stored torn; a planted snapshot is not taken as parent; and
//! coffer's own state (its signing keys) is never backed up.

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use coffer_core::format::pack::BlobType;
use coffer_core::format::tree::Tree;
use coffer_core::id::Id;
use coffer_core::repo::{BlobSaver, Repository};
use common::{Env, PASSWORD, assert_code, assert_success, text};

/// Runs `cmd`, killing it and failing if it takes longer than a minute.
fn run_within_a_minute(mut cmd: Command) -> Output {
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(60) {
            child.kill().unwrap();
            let out = child.wait_with_output().unwrap();
            panic!("backup hung\nstdout: {}\nstderr: {}", text(&out.stdout), text(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// The entries of `ls --json` for a snapshot, by path.
fn listing(env: &Env, snapshot: &str) -> Vec<serde_json::Value> {
    let out = env.run(&["--json", "ls", snapshot]);
    assert_success(&out);
    text(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// The node listed at `path`.
fn entry<'a>(entries: &'a [serde_json::Value], path: &str) -> Option<&'a serde_json::Value> {
    entries.iter().find(|e| e["path"] == path).map(|e| &e["node"])
}

#[test]
fn special_files_given_as_paths_are_recorded_without_being_read() {
    let env = Env::new();
    let fifo = env.path("fifo");
    rustix::fs::mknodat(rustix::fs::CWD, &fifo, rustix::fs::FileType::Fifo, rustix::fs::Mode::from_raw_mode(0o644), 0)
        .unwrap();
    let mut cmd = env.cmd();
    cmd.args(["--json", "backup"]).arg(&fifo).arg("/dev/zero");
    // /proc/kmsg is a "regular file" of size 0 that blocks until the kernel logs.
    if Path::new("/proc/kmsg").exists() {
        cmd.arg("/proc/kmsg");
    }
    let out = run_within_a_minute(cmd);
    assert!(matches!(out.status.code(), Some(0 | 3)), "exit {:?}: {}", out.status.code(), text(&out.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let entries = listing(&env, summary["snapshot_id"].as_str().unwrap());
    let kind = |p: &str| entry(&entries, p).map(|e| e["type"].clone());
    assert_eq!(kind(fifo.to_str().unwrap()), Some("fifo".into()));
    assert_eq!(kind("/dev/zero"), Some("chardev".into()));
    if let Some(kmsg) = entry(&entries, "/proc/kmsg") {
        // Its size says 0 (a size of 0 is not written): nothing was read.
        assert_eq!(kmsg["size"].as_u64().unwrap_or(0), 0, "{kmsg}");
        assert!(kmsg["content"].as_array().is_none_or(|c| c.is_empty()), "{kmsg}");
    }
}

/// A sysfs file states a size of 4096 whatever its content: a file whose size
/// and content disagree, the way a file changing while read does, every time.
#[test]
fn a_file_whose_content_disagrees_with_its_size_is_marked_not_stored_torn() {
    let sys = Path::new("/sys/kernel/mm/transparent_hugepage/enabled");
    let Ok(md) = std::fs::metadata(sys) else {
        eprintln!("{} is missing: skipped", sys.display());
        return;
    };
    let content = std::fs::read(sys).unwrap();
    if md.size() == content.len() as u64 {
        eprintln!("{} states its true size here: skipped", sys.display());
        return;
    }
    let env = Env::new();
    let out = env.cmd().args(["--json", "backup"]).arg(sys).output().unwrap();
    assert_code(&out, 3);
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = summary["snapshot_id"].as_str().unwrap();
    let snap = env.json(&["cat", "snapshot", id]);
    let skipped = snap["snapshot"]["skipped"].to_string();
    assert!(skipped.contains("changed while it was read"), "{skipped}");
    // Stored as read: its recorded size is its content's, and it restores whole.
    let entries = listing(&env, id);
    let e = entry(&entries, sys.to_str().unwrap()).expect("stored");
    assert_eq!(e["size"], content.len(), "{e}");
    let target = env.path("restored");
    assert_success(&env.run(&["restore", id, "--target", target.to_str().unwrap()]));
    let restored = std::fs::read(target.join(sys.strip_prefix("/").unwrap())).unwrap();
    assert_eq!(restored, content);
}

#[test]
fn coffer_state_and_repository_inside_a_backed_up_home_are_left_out() {
    let env = Env::new();
    let home = env.path("home");
    std::fs::create_dir_all(home.join("docs")).unwrap();
    std::fs::write(home.join("docs/a"), b"a").unwrap();
    // The state under $XDG_STATE_HOME and the default one under ~/.local/state.
    let xdg_state = home.join("xdg-state");
    let run = |args: &[&str]| env.cmd().env("XDG_STATE_HOME", &xdg_state).args(args).output().unwrap();
    let out = run(&["--json", "backup", home.to_str().unwrap()]);
    assert_success(&out);
    assert!(xdg_state.join("coffer").is_dir(), "the state was not written where expected");
    std::fs::create_dir_all(home.join(".local/state/coffer/0000")).unwrap();
    std::fs::write(home.join(".local/state/coffer/0000/writer.key"), b"a key of the default state").unwrap();
    let out = run(&["--json", "backup", home.to_str().unwrap()]);
    assert_success(&out);
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let entries = listing(&env, summary["snapshot_id"].as_str().unwrap());
    let paths: Vec<&str> = entries.iter().filter_map(|e| e["path"].as_str()).collect();
    assert!(paths.iter().any(|p| p.ends_with("/docs/a")), "{paths:?}");
    for p in &paths {
        assert!(!p.contains("writer.key") && !p.ends_with("/coffer"), "{p} was backed up");
    }
    // Given directly, they are refused.
    let out = run(&["backup", xdg_state.join("coffer").to_str().unwrap()]);
    let err = assert_code(&out, 1);
    assert!(err.contains("never backed up"), "{err}");
}

/// Replaces the content of the file at `comps` below tree `id` with `content`,
/// keeping its metadata, and returns the new tree's id.
fn forge(repo: &Repository, saver: &BlobSaver, id: Id, comps: &[&[u8]], content: &[u8]) -> Id {
    let mut tree: Tree = repo.load_tree(&id).unwrap();
    let node = tree.nodes.iter_mut().find(|n| n.name.0 == comps[0]).unwrap();
    if comps.len() == 1 {
        node.content = vec![saver.save(BlobType::Data, content).unwrap().0];
        node.digest = Some(Id(*blake3::hash(content).as_bytes()));
    } else {
        node.subtree = Some(forge(repo, saver, node.subtree.unwrap(), &comps[1..], content));
    }
    saver.save(BlobType::Tree, &tree.encode()).unwrap().0
}

#[test]
fn a_snapshot_planted_by_another_writer_is_not_taken_as_parent() {
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("f"), b"the victim's content").unwrap();
    let first = env.backup(&[&src]);

    // Another key holder plants a snapshot of the same host and paths, newer,
    // claiming the unchanged file holds its content.
    let backend = coffer_backend::OpendalBackend::local(&env.repo()).unwrap();
    let repo = Repository::open(Arc::new(backend), PASSWORD.as_bytes()).unwrap();
    repo.load_index().unwrap();
    let stranger = coffer_core::crypto::sign::SigningKey::generate();
    repo.register_writer(&stranger.public(), "mallory".into(), "elsewhere".into()).unwrap();
    let mut planted = repo.load_snapshot(&Id::from_hex(&first).unwrap()).unwrap();
    let saver = BlobSaver::new(&repo);
    let path = src.join("f");
    let comps: Vec<&[u8]> = path.iter().skip(1).map(|c| c.as_encoded_bytes()).collect();
    planted.tree = forge(&repo, &saver, planted.tree, &comps, b"attacker's content!!");
    saver.finish().unwrap();
    planted.writer = stranger.public();
    planted.time = humantime::format_rfc3339_nanos(std::time::SystemTime::now() + Duration::from_secs(60)).to_string();
    let planted_id = repo.save_snapshot(&planted, &stranger).unwrap().to_hex();

    let out = env.json(&["backup", src.to_str().unwrap()]);
    assert_eq!(out["parent"], first.as_str(), "the planted snapshot was taken as parent");
    let target = env.path("restored");
    let id = out["snapshot_id"].as_str().unwrap();
    assert_success(&env.run(&["restore", id, "--target", target.to_str().unwrap()]));
    assert_eq!(std::fs::read(target.join(path.strip_prefix("/").unwrap())).unwrap(), b"the victim's content");

    // Named with --parent, it is used as asked, with a warning naming its writer.
    let out = env.run(&["--json", "backup", "--parent", &planted_id, src.to_str().unwrap()]);
    assert_success(&out);
    let err = text(&out.stderr);
    assert!(err.contains("another writer") && err.contains("mallory"), "{err}");
}
