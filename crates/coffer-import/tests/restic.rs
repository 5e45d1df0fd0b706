//! coffer's restic reader against repositories written by the real restic (0.19.1, the
//! binary named by `COFFER_TEST_RESTIC`): snapshots, every node and every file's bytes
//! compared with what restic itself says and with the tree backed up, in repository
//! versions 1 and 2, with and without compression; then damage planted in a real
//! repository, which must give the typed error naming the object.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsStr;
use std::fs;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use coffer_import::restic::{BlobId, Id, NodeType, ResticRepo, Tree};
use coffer_import::{Error, LocalDir};

const PASSWORD: &str = "coffer-import-test";

/// The restic binary, or `None` when the `restic` group is skipped by name. Without the
/// binary and without the skip, the test fails saying how to run it.
fn restic(test: &str) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("COFFER_TEST_RESTIC").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let skip = std::env::var("COFFER_TEST_SKIP").unwrap_or_default();
    if skip.split([',', ' ']).any(|g| g.trim().eq_ignore_ascii_case("restic")) {
        eprintln!("skipped: {test} (COFFER_TEST_SKIP names restic)");
        if let Some(log) = std::env::var_os("COFFER_TEST_SKIP_LOG") {
            let mut f = fs::OpenOptions::new().create(true).append(true).open(log).unwrap();
            writeln!(f, "restic: {test}").unwrap();
        }
        return None;
    }
    panic!(
        "{test} needs restic 0.19.1: run the tests with `bash .ci/test.sh`, or skip this group with COFFER_TEST_SKIP=restic"
    );
}

fn run(restic: &Path, repo: &Path, args: &[&str], cwd: Option<&Path>) -> Vec<u8> {
    let mut c = Command::new(restic);
    c.arg("-r").arg(repo).args(args).env("RESTIC_PASSWORD", PASSWORD);
    c.env("RESTIC_CACHE_DIR", repo.with_extension("cache"));
    if let Some(d) = cwd {
        c.current_dir(d);
    }
    let out = c.output().unwrap();
    assert!(out.status.success(), "restic {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

/// Deterministic bytes: a SplitMix64 stream.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut s = seed;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        out.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Makes the tree to back up, with every kind of entry restic stores on Linux. Returns
/// whether extended attributes could be set.
fn make_tree(root: &Path) -> bool {
    fs::create_dir_all(root.join("sub/deeper")).unwrap();
    fs::write(root.join("small.txt"), b"hello from coffer\n").unwrap();
    fs::write(root.join("empty"), b"").unwrap();
    fs::write(root.join("big-random"), noise(1, 5 * 1024 * 1024 + 17)).unwrap();
    let text: Vec<u8> = b"compressible line of text, again and again\n".repeat(60_000);
    fs::write(root.join("sub/big-text"), &text).unwrap();
    fs::write(root.join("sub/deeper/leaf"), b"leaf").unwrap();
    std::os::unix::fs::symlink("small.txt", root.join("link")).unwrap();
    std::os::unix::fs::symlink(OsStr::from_bytes(b"target-\xff\xfe"), root.join("link-raw")).unwrap();
    fs::write(root.join(OsStr::from_bytes(b"name-\xff-not-utf8")), b"odd name").unwrap();
    fs::write(root.join("quote\"back\\slash\ttab"), b"quoted").unwrap();
    fs::write(root.join("new\nline"), b"newline").unwrap();
    fs::write(root.join("héllo wörld ✓"), b"unicode").unwrap();
    fs::hard_link(root.join("small.txt"), root.join("hard-link")).unwrap();
    let fifo = std::ffi::CString::new(root.join("fifo").as_os_str().as_bytes()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o640) }, 0);
    fs::write(root.join("setuid"), b"#!/bin/sh\n").unwrap();
    fs::set_permissions(root.join("setuid"), fs::Permissions::from_mode(0o4755)).unwrap();
    fs::write(root.join("setgid"), b"#!/bin/sh\n").unwrap();
    fs::set_permissions(root.join("setgid"), fs::Permissions::from_mode(0o2750)).unwrap();
    fs::create_dir(root.join("sticky")).unwrap();
    fs::set_permissions(root.join("sticky"), fs::Permissions::from_mode(0o1777)).unwrap();
    fs::write(root.join("sticky/inside"), b"x").unwrap();
    fs::write(root.join("private"), b"secret").unwrap();
    fs::set_permissions(root.join("private"), fs::Permissions::from_mode(0o600)).unwrap();
    xattr::set(root.join("small.txt"), "user.coffer", b"xattr value \x00\xff").is_ok()
}

/// Every regular file's bytes under `root`, by path relative to it.
fn file_contents(root: &Path) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                stack.push(e.path());
            } else if ft.is_file() {
                let rel = e.path().strip_prefix(root).unwrap().as_os_str().as_bytes().to_vec();
                out.insert(rel, fs::read(e.path()).unwrap());
            }
        }
    }
    out
}

/// Every node of a snapshot, by path from the root ("/a/b"), with the raw path.
fn walk(repo: &ResticRepo, root: &BlobId) -> Vec<(Vec<u8>, coffer_import::restic::Node)> {
    let mut out = Vec::new();
    let mut stack: Vec<(Vec<u8>, BlobId)> = vec![(Vec::new(), *root)];
    while let Some((prefix, id)) = stack.pop() {
        let tree: Tree = repo.tree(&id).unwrap();
        assert!(tree.rejected.is_empty(), "{:?}", tree.rejected);
        for n in tree.nodes {
            let mut path = prefix.clone();
            path.push(b'/');
            path.extend_from_slice(&n.name);
            if let Some(sub) = n.subtree {
                stack.push((path.clone(), sub));
            }
            out.push((path, n));
        }
    }
    out
}

fn content(repo: &ResticRepo, node: &coffer_import::restic::Node) -> Vec<u8> {
    let mut out = Vec::new();
    for b in &node.content {
        out.extend(repo.blob(b).unwrap());
    }
    let mut read = Vec::new();
    std::io::Read::read_to_end(&mut repo.file_reader(node), &mut read).unwrap();
    assert!(read == out, "file_reader and blob agree");
    out
}

fn open(dir: &Path) -> ResticRepo {
    ResticRepo::open(Arc::new(LocalDir::new(dir)), PASSWORD.as_bytes()).unwrap()
}

fn time_of(v: &serde_json::Value) -> coffer_import::restic::Timestamp {
    coffer_import::restic::Timestamp::parse(v.as_str().unwrap()).unwrap()
}

fn strings(v: &serde_json::Value) -> Vec<String> {
    v.as_array().map(|a| a.iter().map(|s| s.as_str().unwrap().to_string()).collect()).unwrap_or_default()
}

/// Backs up a generated tree three times with changes and tags, then compares the reader
/// with restic and with the tree.
fn round_trip(test: &str, version: &str, compression: &str) {
    let Some(restic) = restic(test) else { return };
    let tmp = tempfile::tempdir().unwrap();
    let repo_dir = tmp.path().join("repo");
    let src = tmp.path().join("src");
    let xattrs = make_tree(&src);
    run(&restic, &repo_dir, &["init", "-q", "--repository-version", version], None);

    let backup = |tags: &[&str]| {
        let mut args = vec!["backup", "-q", "--host", "coffer-host", "--compression", compression];
        for t in tags {
            args.push("--tag");
            args.push(t);
        }
        args.push(src.to_str().unwrap());
        run(&restic, &repo_dir, &args, None);
    };
    let mut expected: Vec<BTreeMap<Vec<u8>, Vec<u8>>> = Vec::new();
    backup(&["first"]);
    expected.push(file_contents(&src));
    fs::write(src.join("small.txt"), b"changed\n").unwrap();
    fs::write(src.join("sub/added"), noise(2, 1_500_000)).unwrap();
    fs::remove_file(src.join("sub/deeper/leaf")).unwrap();
    backup(&["second", "two"]);
    expected.push(file_contents(&src));
    let mut f = fs::OpenOptions::new().append(true).open(src.join("big-random")).unwrap();
    f.write_all(&noise(3, 300_000)).unwrap();
    drop(f);
    backup(&[]);
    expected.push(file_contents(&src));

    let mut repo = open(&repo_dir);
    assert_eq!(repo.version().to_string(), version);
    let config: serde_json::Value = serde_json::from_slice(&run(&restic, &repo_dir, &["cat", "config"], None)).unwrap();
    assert_eq!(repo.id(), config["id"].as_str().unwrap());

    // Snapshots, against `restic snapshots --json`.
    let snaps = repo.snapshots().unwrap();
    assert!(snaps.damaged.is_empty(), "{:?}", snaps.damaged);
    let listed: Vec<serde_json::Value> =
        serde_json::from_slice(&run(&restic, &repo_dir, &["snapshots", "--json"], None)).unwrap();
    assert_eq!(snaps.good.len(), 3);
    assert_eq!(listed.len(), 3);
    for ((id, s), j) in snaps.good.iter().zip(&listed) {
        assert_eq!(id.to_hex(), j["id"].as_str().unwrap());
        assert_eq!(s.tree.to_hex(), j["tree"].as_str().unwrap());
        let t = time_of(&j["time"]);
        assert_eq!((s.time.secs, s.time.nanos), (t.secs, t.nanos));
        assert_eq!(s.paths, strings(&j["paths"]));
        assert_eq!(s.hostname, "coffer-host");
        assert_eq!(s.hostname, j["hostname"].as_str().unwrap());
        assert_eq!(s.username, j["username"].as_str().unwrap_or(""));
        assert_eq!(s.tags, strings(&j["tags"]));
        assert_eq!(s.parent.map(|p| p.to_hex()), j["parent"].as_str().map(str::to_string));
        assert_eq!(s.program_version.as_deref(), Some("restic 0.19.1"));
        let sum = s.summary.as_ref().unwrap();
        assert_eq!(sum.total_files_processed, j["summary"]["total_files_processed"].as_u64().unwrap());
        assert_eq!(sum.data_added, j["summary"]["data_added"].as_u64().unwrap());
    }
    assert_eq!(snaps.good[0].1.tags, ["first"]);
    assert_eq!(snaps.good[1].1.parent, Some(snaps.good[0].0));

    let report = repo.load_index().unwrap();
    assert!(report.damaged.is_empty(), "{:?}", report.damaged);
    assert!(report.files_read >= 1 && report.packs >= 1);

    let mut multi_blob_files = 0;
    for (i, (id, s)) in snaps.good.iter().enumerate() {
        let nodes = walk(&repo, &s.tree);
        // Every node against `restic ls --json`.
        let ls = run(&restic, &repo_dir, &["ls", "--json", &id.to_hex()], None);
        let mut by_path: HashMap<String, serde_json::Value> = HashMap::new();
        for line in ls.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            let v: serde_json::Value = serde_json::from_slice(line).unwrap();
            if v["message_type"] == "node" {
                by_path.insert(v["path"].as_str().unwrap().to_string(), v);
            }
        }
        assert_eq!(nodes.len(), by_path.len(), "snapshot {i}: node count");
        for (path, n) in &nodes {
            let key = String::from_utf8_lossy(path).into_owned();
            let j = by_path.get(&key).unwrap_or_else(|| panic!("{key:?} not listed by restic"));
            assert_eq!(j["name"].as_str().unwrap(), n.name_lossy(), "{key}");
            assert_eq!(j["type"].as_str().unwrap(), n.node_type.as_str(), "{key}");
            assert_eq!(j["mode"].as_u64().unwrap_or(0), u64::from(n.go_mode), "{key}");
            assert_eq!(j["uid"].as_u64().unwrap(), u64::from(n.uid), "{key}");
            assert_eq!(j["gid"].as_u64().unwrap(), u64::from(n.gid), "{key}");
            assert_eq!(j["inode"].as_u64().unwrap_or(0), n.inode, "{key}");
            if n.node_type == NodeType::File {
                assert_eq!(j["size"].as_u64().unwrap(), n.size, "{key}");
            }
            for (field, t) in [("mtime", &n.mtime), ("atime", &n.atime), ("ctime", &n.ctime)] {
                let want = time_of(&j[field]);
                let got = t.as_ref().unwrap();
                assert_eq!((got.secs, got.nanos), (want.secs, want.nanos), "{key} {field}");
            }
        }

        // Every file's bytes against the tree as it was backed up.
        let base = s.paths[0].as_bytes().to_vec();
        let mut files = BTreeMap::new();
        for (path, n) in &nodes {
            if n.node_type != NodeType::File || !path.starts_with(&base) {
                continue;
            }
            let rel = path[base.len() + 1..].to_vec();
            let bytes = content(&repo, n);
            assert_eq!(bytes.len() as u64, n.size);
            if n.content.len() > 1 {
                multi_blob_files += 1;
            }
            files.insert(rel, bytes);
        }
        assert!(files == expected[i], "snapshot {i}: file contents differ");
    }
    assert!(multi_blob_files >= 2, "the large files span several blobs");

    // Metadata of the last snapshot against the live tree.
    let (_, last) = snaps.good.last().unwrap();
    let base = last.paths[0].clone();
    let nodes: HashMap<Vec<u8>, _> = walk(&repo, &last.tree).into_iter().collect();
    let node = |rel: &[u8]| {
        let mut p = base.as_bytes().to_vec();
        p.push(b'/');
        p.extend_from_slice(rel);
        nodes.get(&p).unwrap_or_else(|| panic!("no node {}", String::from_utf8_lossy(rel)))
    };
    for (rel, n) in nodes.iter().filter_map(|(p, n)| p.strip_prefix(base.as_bytes()).map(|r| (r, n))) {
        if rel.is_empty() {
            continue;
        }
        let meta = fs::symlink_metadata(src.join(OsStr::from_bytes(&rel[1..]))).unwrap();
        assert_eq!(n.st_mode(), meta.mode(), "st_mode of {}", String::from_utf8_lossy(rel));
        assert_eq!(n.inode, meta.ino());
    }
    assert_eq!(node(b"setuid").st_mode(), 0o104755);
    assert_eq!(node(b"setgid").st_mode(), 0o102750);
    assert_eq!(node(b"sticky").st_mode(), 0o41777);
    assert_eq!(node(b"fifo").node_type, NodeType::Fifo);
    assert_eq!(node(b"fifo").st_mode() & 0o170000, 0o010000);
    assert_eq!(node(b"link").link_target.as_deref(), Some(&b"small.txt"[..]));
    assert_eq!(node(b"link-raw").link_target.as_deref(), Some(&b"target-\xff\xfe"[..]));
    assert_eq!(content(&repo, node(b"name-\xff-not-utf8")), b"odd name");
    assert_eq!(content(&repo, node(b"quote\"back\\slash\ttab")), b"quoted");
    assert_eq!(content(&repo, node(b"new\nline")), b"newline");
    assert_eq!(content(&repo, node("héllo wörld ✓".as_bytes())), b"unicode");
    assert!(node(b"empty").content.is_empty());
    let (a, b) = (node(b"small.txt"), node(b"hard-link"));
    assert_eq!((a.inode, a.device_id, a.links), (b.inode, b.device_id, 2));
    assert!(a.device_id != 0);
    if xattrs {
        assert!(
            a.extended_attributes.contains(&("user.coffer".to_string(), b"xattr value \x00\xff".to_vec())),
            "{:?}",
            a.extended_attributes
        );
    }

    // The index rebuilt from the packs' headers finds the same blobs.
    let blobs: Vec<_> = repo.index().unwrap().blobs().collect();
    let rebuilt = repo.rebuild_index_from_packs().unwrap();
    assert!(rebuilt.damaged.is_empty(), "{:?}", rebuilt.damaged);
    assert_eq!(repo.index().unwrap().blobs().collect::<Vec<_>>(), blobs);
    assert_eq!(content(&repo, node(b"small.txt")), b"changed\n");

    // Compression as asked: v2 with `auto` compresses the text file's blobs.
    let text = node(b"sub/big-text");
    let idx = repo.index().unwrap();
    let compressed = text.content.iter().any(|b| idx.find(b)[0].blob.uncompressed_length.is_some());
    assert_eq!(compressed, compression == "auto", "compression of sub/big-text");
}

#[test]
fn repository_v1() {
    round_trip("repository_v1", "1", "off");
}

#[test]
fn repository_v2_uncompressed() {
    round_trip("repository_v2_uncompressed", "2", "off");
}

#[test]
fn repository_v2_compressed() {
    round_trip("repository_v2_compressed", "2", "auto");
}

/// A copy of a repository directory, to plant damage in.
fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

fn sealed(repo: &ResticRepo, plaintext: &[u8]) -> Vec<u8> {
    let iv: [u8; 16] = Id::hash(plaintext).0[..16].try_into().unwrap();
    repo.master_key().seal(&iv, plaintext)
}

#[test]
fn planted_damage() {
    let Some(restic) = restic("planted_damage") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let good = tmp.path().join("repo");
    let src = tmp.path().join("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("a"), noise(7, 200_000)).unwrap();
    fs::write(src.join("b"), b"bee").unwrap();
    run(&restic, &good, &["init", "-q", "--repository-version", "2"], None);
    run(&restic, &good, &["backup", "-q", "--compression", "off", "."], Some(&src));
    // (Backed up as ".": the root tree holds the files themselves.)

    let mut case = 0;
    let mut fresh = || {
        case += 1;
        let d = tmp.path().join(format!("case{case}"));
        copy_dir(&good, &d);
        d
    };

    // Wrong password: names how many key files were tried.
    let err = ResticRepo::open(Arc::new(LocalDir::new(&good)), b"not the password").unwrap_err();
    assert!(matches!(err, Error::WrongPassword { tried: 1, skipped: 0 }), "{err}");
    assert!(err.to_string().contains("1 key file"), "{err}");

    // A key file with absurd parameters is refused before deriving; the good one opens.
    let d = fresh();
    let absurd = r#"{"kdf":"scrypt","N":1073741824,"r":8,"p":1,"salt":"AAAAAAAAAAA=","data":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="}"#;
    fs::write(d.join("keys").join("0".repeat(64)), absurd).unwrap();
    let t0 = std::time::Instant::now();
    let err = ResticRepo::open(Arc::new(LocalDir::new(&d)), b"wrong").unwrap_err();
    assert!(matches!(err, Error::WrongPassword { tried: 1, skipped: 1 }), "{err}");
    assert!(t0.elapsed().as_secs() < 30);
    let kerr = coffer_import::restic::KeyFile::parse("keys/x", absurd.as_bytes()).unwrap_err();
    assert!(kerr.to_string().contains("N = 1073741824"), "{kerr}");
    open(&d);

    let mut repo = open(&good);
    repo.load_index().unwrap();
    let (sid, snap) = repo.snapshots().unwrap().good.remove(0);
    let root = repo.tree(&snap.tree).unwrap();
    let file_a = root.nodes.iter().find(|n| n.name == b"a").unwrap().clone();
    let blob_a = file_a.content[0];
    let loc = repo.index().unwrap().find(&blob_a)[0];
    let pack_path = |d: &Path| {
        let hex = loc.pack.to_hex();
        d.join("data").join(&hex[..2]).join(&hex)
    };

    // A byte flipped inside a blob: its authentication fails, naming pack and blob.
    let d = fresh();
    let mut bytes = fs::read(pack_path(&d)).unwrap();
    bytes[(loc.blob.offset + 40) as usize] ^= 0x20;
    fs::write(pack_path(&d), &bytes).unwrap();
    let mut r = open(&d);
    r.load_index().unwrap();
    let err = r.blob(&blob_a).unwrap_err();
    assert!(matches!(err, Error::BlobUnauthenticated { pack, blob } if pack == loc.pack && blob == blob_a), "{err}");
    let msg = err.to_string();
    assert!(msg.contains(&loc.pack.to_hex()) && msg.contains(&blob_a.to_hex()), "{msg}");
    assert!(msg.contains("restic check --read-data"), "{msg}");
    let mut sink = Vec::new();
    let ioerr = std::io::Read::read_to_end(&mut r.file_reader(&file_a), &mut sink).unwrap_err();
    let inner = ioerr.get_ref().and_then(|e| e.downcast_ref::<Error>());
    assert!(matches!(inner, Some(Error::BlobUnauthenticated { .. })), "{ioerr}");

    // A truncated pack: the blob lies beyond its end, and the header is gone.
    let d = fresh();
    let f = fs::OpenOptions::new().write(true).open(pack_path(&d)).unwrap();
    f.set_len(loc.blob.offset + u64::from(loc.blob.length) / 2).unwrap();
    drop(f);
    let mut r = open(&d);
    r.load_index().unwrap();
    let err = r.blob(&blob_a).unwrap_err();
    assert!(matches!(err, Error::PackTruncated { pack, .. } if pack == loc.pack), "{err}");
    assert!(matches!(r.pack_header(&loc.pack), Err(Error::PackHeader { .. })));
    let rebuilt = r.rebuild_index_from_packs().unwrap();
    assert_eq!(rebuilt.damaged.len(), 1);
    assert!(rebuilt.damaged[0].name.ends_with(&loc.pack.to_hex()));

    // An absurd header length: refused before anything is read or allocated for it.
    let d = fresh();
    let mut bytes = fs::read(pack_path(&d)).unwrap();
    let n = bytes.len();
    bytes[n - 4..].copy_from_slice(&0xffff_fff0u32.to_le_bytes());
    fs::write(pack_path(&d), &bytes).unwrap();
    let r = open(&d);
    let err = r.pack_header(&loc.pack).unwrap_err();
    assert!(err.to_string().contains("header length 4294967280"), "{err}");
    // Just below the file's size but above the limit, and a length in range that does
    // not authenticate.
    for (len, want) in [(16 * 1024 * 1024 + 1, "more than the"), (100, "authentication")] {
        let mut b = bytes.clone();
        b[n - 4..].copy_from_slice(&(len as u32).to_le_bytes());
        if len > n {
            b.resize(len + 8, 0);
            let m = b.len();
            b[m - 4..].copy_from_slice(&(len as u32).to_le_bytes());
        }
        fs::write(pack_path(&d), &b).unwrap();
        let err = r.pack_header(&loc.pack).unwrap_err();
        assert!(err.to_string().contains(want), "{len}: {err}");
    }

    // A damaged index file is skipped and reported; the packs' headers still give every
    // blob.
    let d = fresh();
    let (index_name, _) = fs::read_dir(d.join("index"))
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (e.path(), ())
        })
        .next()
        .unwrap();
    let mut bytes = fs::read(&index_name).unwrap();
    bytes[20] ^= 1;
    fs::write(&index_name, &bytes).unwrap();
    let mut r = open(&d);
    let report = r.load_index().unwrap();
    assert_eq!(report.damaged.len(), 1);
    assert!(matches!(report.damaged[0].error, Error::Index { .. }));
    assert!(matches!(r.blob(&blob_a), Err(Error::BlobNotFound { .. })));
    r.rebuild_index_from_packs().unwrap();
    assert_eq!(r.blob(&blob_a).unwrap(), noise(7, 200_000));

    // A snapshot whose JSON is wrong but whose encryption is right: that snapshot is
    // reported, the others are listed.
    let d = fresh();
    let r = open(&d);
    for bad in [
        &b"{\"time\": \"yesterday\", \"tree\": null"[..],
        b"{\"time\":\"2026-01-01T00:00:00Z\"}",
        b"[1,2]",
        b"\x02garbage",
    ] {
        let enc = sealed(&r, bad);
        let name = Id::hash(&enc).to_hex();
        fs::write(d.join("snapshots").join(&name), &enc).unwrap();
    }
    // And a snapshot file whose name is not the hash of its bytes.
    let good_name = sid.to_hex();
    let mut renamed = good_name.clone();
    renamed.replace_range(0..1, if &good_name[0..1] == "0" { "1" } else { "0" });
    fs::copy(d.join("snapshots").join(&good_name), d.join("snapshots").join(&renamed)).unwrap();
    let snaps = r.snapshots().unwrap();
    assert_eq!(snaps.good.len(), 1);
    assert_eq!(snaps.good[0].0, sid);
    assert_eq!(snaps.damaged.len(), 5, "{:?}", snaps.damaged);
    for dmg in &snaps.damaged {
        assert!(matches!(dmg.error, Error::Snapshot { .. }));
        assert!(dmg.error.to_string().contains(&dmg.name), "{}", dmg.error);
    }

    // A tree blob planted whose JSON holds refused names: those nodes are rejected and
    // the others kept.
    let tree_json = br#"{"nodes":[{"name":"ok","type":"file","content":[]},{"name":"..","type":"file"},{"name":"a/b","type":"file"},{"name":"nul\\x00","type":"file"}]}"#;
    let t = coffer_import::restic::tree::parse_tree(tree_json).unwrap();
    assert_eq!(t.nodes.len(), 1);
    assert_eq!(t.rejected.len(), 3);
    let e = ResticRepo::node_error(&snap.tree, &t.rejected[0]);
    assert!(e.to_string().contains(&snap.tree.to_hex()), "{e}");

    // A symbolic link inside the repository is not followed.
    let d = fresh();
    let outside = tmp.path().join("outside");
    fs::rename(d.join("config"), &outside).unwrap();
    std::os::unix::fs::symlink(&outside, d.join("config")).unwrap();
    let err = ResticRepo::open(Arc::new(LocalDir::new(&d)), PASSWORD.as_bytes()).unwrap_err();
    assert!(err.to_string().contains("symbolic link"), "{err}");
}
