//! Trees of any size and depth: directories whose listing is split into parts,
//! files whose content list is kept in content parts, and snapshots whose trees
//! form a very deep chain. Large trees are made through the library with small
//! part sizes, so that a few thousand entries split; the commands are the real
//! binary.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use coffer_backend::Backend;
use coffer_backend::OpendalBackend;
use coffer_core::crypto::sign::SigningKey;
use coffer_core::format::pack::BlobType;
use coffer_core::format::tree::{SplitLimits, TreeBlob};
use coffer_core::ops::backup::{BackupOptions, backup_with_limits};
use coffer_core::progress::NoProgress;
use coffer_core::repo::Repository;
use coffer_core::repo::tree_walk::{Located, locate};
use common::*;

/// Parts of about a kilobyte: a few thousand entries make a split listing
/// nested several levels deep, and a file of three chunks keeps its content in
/// content parts.
const SMALL: SplitLimits = SplitLimits { part_max: 4 << 10, part_avg: 1 << 10, ids_per_blob: 8, inline_content: 2 };

fn open(env: &Env) -> Repository {
    let be: Arc<dyn Backend> = Arc::new(OpendalBackend::local(&env.repo()).unwrap());
    let repo = Repository::open(be, PASSWORD.as_bytes()).unwrap();
    repo.load_index().unwrap();
    repo
}

fn writer(repo: &Repository) -> SigningKey {
    let key = SigningKey::generate();
    repo.register_writer(&key.public(), "host".into(), "user".into()).unwrap();
    key
}

/// Backs up `src` through the library with part sizes `limits`; returns the snapshot id.
fn backup_split(env: &Env, src: &Path, key: &SigningKey, limits: SplitLimits) -> String {
    let repo = open(env);
    let opts = BackupOptions { paths: vec![src.to_path_buf()], ..BackupOptions::default() };
    let r = backup_with_limits(&repo, &opts, key, &NoProgress, limits).unwrap();
    assert_eq!(r.snapshot.version, 3);
    r.id.unwrap().to_hex()
}

/// `big/` with `n` files of long names, `huge` with content in several chunks,
/// and a small subdirectory.
fn make_source(src: &Path, n: usize) -> BTreeSet<PathBuf> {
    let mut paths = BTreeSet::new();
    std::fs::create_dir_all(src.join("big")).unwrap();
    std::fs::create_dir_all(src.join("sub")).unwrap();
    for i in 0..n {
        let p = src.join("big").join(format!("entry-{i:06}-{}", "n".repeat(60)));
        std::fs::write(&p, format!("file {i}")).unwrap();
        paths.insert(p);
    }
    // Larger than the largest chunk (8 MiB by default), so three chunks at least.
    let huge = src.join("huge");
    std::fs::write(&huge, random_bytes(20 << 20, 3)).unwrap();
    std::fs::write(src.join("sub/a"), b"a").unwrap();
    paths.extend([src.join("big"), src.join("sub"), src.join("sub/a"), huge]);
    paths
}

/// The paths `coffer ls` prints below `src` in the latest snapshot.
fn listed(env: &Env, src: &Path) -> BTreeSet<PathBuf> {
    let out = env.run(&["ls", "latest", src.to_str().unwrap()]);
    assert_success(&out);
    text(&out.stdout).lines().map(PathBuf::from).filter(|p| p != src).collect()
}

fn restore_and_compare(env: &Env, src: &Path, target: &str) {
    let target = env.path(target);
    let spec = format!("latest:{}", src.display());
    assert_success(&env.run(&["restore", &spec, "--target", target.to_str().unwrap()]));
    assert_same_tree(src, &target);
}

#[test]
fn a_directory_split_into_parts_backs_up_restores_lists_checks_and_survives_prune() {
    let env = Env::new();
    let src = env.path("src");
    let expected = make_source(&src, 3000);
    let junk = src.join("junk");
    std::fs::write(&junk, random_bytes(4 << 20, 9)).unwrap();
    let repo = open(&env);
    let key = writer(&repo);
    let first = backup_split(&env, &src, &key, SMALL);

    // The directory really is split, nested, and the large file's content is out of line.
    let repo = open(&env);
    let (_, snap) = repo.find_snapshot(&first, &Default::default()).unwrap();
    let Located::Entry(big) = locate(&repo, snap.tree, &src.join("big")).unwrap() else { panic!() };
    let top = repo.load_blob(BlobType::Tree, &big.subtree.unwrap()).unwrap();
    let TreeBlob::Split(parts) = TreeBlob::decode(&top).unwrap() else { panic!("big/ is not split") };
    assert!(
        parts
            .iter()
            .any(|p| matches!(TreeBlob::decode(&repo.load_blob(BlobType::Tree, p).unwrap()), Ok(TreeBlob::Split(_)))),
        "the split listing does not nest"
    );
    let Located::Entry(src_node) = locate(&repo, snap.tree, &src).unwrap() else { panic!() };
    let huge = repo.tree_nodes(&src_node.subtree.unwrap()).unwrap().map(Result::unwrap).find(|n| n.name.0 == b"huge");
    assert!(!huge.unwrap().content_parts.is_empty(), "huge's content is inline");
    assert_eq!(repo.load_tree(&big.subtree.unwrap()).unwrap().nodes.len(), 3000);

    let mut with_junk = expected.clone();
    with_junk.insert(junk.clone());
    assert_eq!(listed(&env, &src), with_junk);
    assert_success(&env.run(&["check"]));
    restore_and_compare(&env, &src, "out1");

    // A second snapshot without `junk`; forgetting the first leaves its packs
    // mostly unused, so prune repacks them and keeps only the blobs marked used.
    std::fs::remove_file(&junk).unwrap();
    backup_split(&env, &src, &key, SMALL);
    assert_success(&env.run(&["forget", &first]));
    let out = env.cmd().env("COFFER_TEST_PRUNE_GRACE_MS", "100").args(["prune"]).output().unwrap();
    assert_success(&out);
    let out = env.run(&["check", "--read-data"]);
    assert_success(&out);
    assert_eq!(listed(&env, &src), expected);
    restore_and_compare(&env, &src, "out2");
}

/// A directory of 200,000 entries with long names: its single tree blob would be
/// over 100 MiB, more than any reader accepts. About a minute in the test
/// profile: run it with `cargo test -p coffer --test trees -- --ignored`.
#[test]
#[ignore]
fn a_directory_of_200000_entries_backs_up_restores_lists_and_checks() {
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    let n = 200_000;
    for i in 0..n {
        std::fs::File::create(src.join(format!("{i:07}-{}", "x".repeat(200)))).unwrap();
    }
    env.backup(&[&src]);
    let out = env.run(&["ls", "latest", src.to_str().unwrap()]);
    assert_success(&out);
    assert_eq!(text(&out.stdout).lines().count(), n + 1);
    assert_success(&env.run(&["check"]));
    let target = env.path("out");
    let spec = format!("latest:{}", src.display());
    assert_success(&env.run(&["restore", &spec, "--target", target.to_str().unwrap()]));
    assert_eq!(std::fs::read_dir(&target).unwrap().count(), n);
}

/// Stores, through the library, a snapshot whose root is a chain of `depth`
/// directories named `d` ending in an empty file `f` whose digest is that of
/// `content` (what a hostile co-writer can write). Returns its id.
fn deep_chain(env: &Env, key: &SigningKey, depth: usize, content: &[u8]) -> String {
    use coffer_core::format::snapshot::{SNAPSHOT_VERSION, Snapshot};
    use coffer_core::format::tree::{Node, Tree};
    use coffer_core::repo::BlobSaver;
    let repo = open(env);
    let node = |v: serde_json::Value| -> Node { serde_json::from_value(v).unwrap() };
    let digest = coffer_core::Id(*blake3::hash(content).as_bytes());
    let saver = BlobSaver::new(&repo);
    let file = node(serde_json::json!({"name": "f", "type": "file", "mode": 0o644, "uid": 0, "gid": 0,
        "mtime": [0, 0], "ctime": [0, 0], "digest": digest}));
    let mut id = saver.save(BlobType::Tree, &Tree { nodes: vec![file] }.encode()).unwrap().0;
    for _ in 0..depth {
        let dir = node(serde_json::json!({"name": "d", "type": "dir", "mode": 0o755, "uid": 0, "gid": 0,
            "mtime": [0, 0], "ctime": [0, 0], "subtree": id}));
        id = saver.save(BlobType::Tree, &Tree { nodes: vec![dir] }.encode()).unwrap().0;
    }
    saver.finish().unwrap();
    let mut path = b"/d".repeat(depth);
    path.extend_from_slice(b"/f");
    let merkle_key = [5u8; 32];
    let root = coffer_core::merkle::file_leaf(&coffer_core::merkle::leaf_salt(&merkle_key, &path), &digest.0, &path);
    let history = coffer_core::repo::history::History::load(&repo).unwrap();
    let snap = Snapshot {
        version: SNAPSHOT_VERSION,
        time: humantime::format_rfc3339_nanos(std::time::SystemTime::now()).to_string(),
        hostname: "host".into(),
        username: "user".into(),
        paths: vec!["/d".into()],
        tags: vec![],
        tree: id,
        parent: None,
        excludes: vec![],
        skipped_count: 0,
        skipped: vec![],
        summary: Default::default(),
        program: "coffer test".into(),
        writer: key.public(),
        history: history.heads(),
        merkle_root: coffer_core::Id(root),
        merkle_leaves: 1,
        merkle_key: coffer_core::Id(merkle_key),
        copied_from: None,
        imported_from: None,
        written: None,
        server_log: None,
        signature: Default::default(),
    };
    repo.save_snapshot(&snap, key).unwrap().to_hex()
}

/// Runs `f` and fails if it takes longer than `limit`.
fn within<T>(what: &str, limit: std::time::Duration, f: impl FnOnce() -> T) -> T {
    let start = std::time::Instant::now();
    let r = f();
    eprintln!("{what}: {:?}", start.elapsed());
    assert!(start.elapsed() < limit, "{what} took {:?}", start.elapsed());
    r
}

#[test]
fn a_200000_level_chain_is_checked_diffed_proven_forgotten_and_pruned() {
    const DEPTH: usize = 200_000;
    let limit = std::time::Duration::from_secs(60);
    let env = Env::new();
    let repo = open(&env);
    let key = writer(&repo);
    let old = within("chain", limit, || deep_chain(&env, &key, DEPTH, b"old"));
    let new = within("chain", limit, || deep_chain(&env, &key, DEPTH, b"new"));
    let mut bottom = "/d".repeat(DEPTH);
    bottom.push_str("/f");

    let out = within("check", limit, || env.run(&["check"]));
    assert_success(&out);
    let out = within("diff", limit, || env.run(&["diff", &old, &new]));
    assert_success(&out);
    let changes: Vec<String> = text(&out.stdout).lines().filter(|l| l.contains("/d/")).map(String::from).collect();
    assert_eq!(changes.len(), 1, "one file changed");
    assert!(changes[0].ends_with(&bottom), "{}", &changes[0][..80.min(changes[0].len())]);

    // Walks through the library (the path is longer than a command line takes).
    let repo = open(&env);
    let id = coffer_core::Id::from_hex(&new).unwrap();
    let proof = within("prove", limit, || coffer_core::ops::prove::prove(&repo, &id, bottom.as_bytes()).unwrap());
    proof.verify().unwrap();
    let (_, snap) = repo.find_snapshot(&new, &Default::default()).unwrap();
    let mut entries = 0;
    within("walk", limit, || {
        coffer_core::repo::tree_walk::walk(&repo, snap.tree, Path::new("/"), &mut |p, _| {
            entries += 1;
            assert!(p.as_os_str().len() <= bottom.len());
            Ok(())
        })
        .unwrap()
    });
    assert_eq!(entries, DEPTH + 1);
    let Located::Entry(f) = locate(&repo, snap.tree, Path::new(&bottom)).unwrap() else { panic!() };
    assert_eq!(f.name.0, b"f");

    assert_success(&env.run(&["forget", &old]));
    let out =
        within("prune", limit, || env.cmd().env("COFFER_TEST_PRUNE_GRACE_MS", "100").args(["prune"]).output().unwrap());
    assert_success(&out);
    assert_success(&within("check after prune", limit, || env.run(&["check"])));
}

#[test]
fn ls_of_a_deep_chain_lists_the_levels_a_path_can_reach_and_names_the_first_it_cannot() {
    const DEPTH: usize = 50_000;
    let env = Env::new();
    let repo = open(&env);
    let key = writer(&repo);
    deep_chain(&env, &key, DEPTH, b"");
    // Every path printed is at most 4096 bytes ("/d" per level): the listing
    // stops growing with the square of the depth.
    let out = env.run(&["ls", "latest"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().filter(|l| l.starts_with('/')).collect();
    assert!(lines.iter().all(|l| l.len() <= 4096), "a path longer than 4096 bytes was printed");
    assert!((2000..=2100).contains(&lines.len()), "{} levels listed", lines.len());
    assert!(text(&out.stderr).contains("more than the 4096"), "{}", text(&out.stderr));

    // `find` searches the same levels, and says what it could not search.
    let out = env.run(&["--json", "find", "d"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let found: Vec<serde_json::Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["type"] == "match")
        .collect();
    assert!((2000..=2100).contains(&found.len()), "{} levels found", found.len());
    assert!(text(&out.stderr).contains("more than the 4096"), "{}", text(&out.stderr));
}
