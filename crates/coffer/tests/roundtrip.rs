//! Round trips through the real binary: a tree holding every kind of entry is
//! backed up, restored into a fresh directory and compared with the source entry
//! by entry, metadata included (type, permission bits, size, content, symlink
//! target, mtime with nanoseconds, owner as root, extended attributes and ACLs,
//! device numbers, which names share an inode). Also: repeated backups add
//! (almost) nothing, restore with --include/--exclude, `ls` lists every path,
//! restoring into a non-empty target, and three narrower cases: --overwrite with
//! --include must not write through symlinks in the target, file capabilities
//! must survive a restore as root, and a subpath that is not UTF-8 can be restored.
//! Restores in tiny batches (many plan-and-write rounds) must be just as exact.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::fs::{self, File};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Instant;

use common::trees::{ACL_GROUP, ACL_USER, posix_acl as acl};
use common::{Env, assert_code, assert_same_tree, assert_success, data_extents, random_bytes, text};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// Owner and group given to some entries when the tests run as root.
const OTHER_UID: u32 = 1234;
const OTHER_GID: u32 = 5678;

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

// ---------------------------------------------------------------------------
// Building the source tree
// ---------------------------------------------------------------------------

/// A non-UTF-8 file name (Latin-1 "café").
const NAME_LATIN1: &[u8] = b"caf\xe9";
/// A non-UTF-8 directory name.
const NAME_FFFE: &[u8] = b"\xff\xfe";

fn osstr(b: &[u8]) -> &OsStr {
    OsStr::from_bytes(b)
}

fn write(path: impl AsRef<Path>, data: impl AsRef<[u8]>) {
    let path = path.as_ref();
    fs::write(path, data).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

fn mkdir(path: &Path) {
    fs::create_dir_all(path).unwrap_or_else(|e| panic!("mkdir {}: {e}", path.display()));
}

fn chmod(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", path.display()));
}

fn lchown(path: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::lchown(path, Some(uid), Some(gid)).unwrap_or_else(|e| panic!("lchown {}: {e}", path.display()));
}

fn symlink(target: impl AsRef<Path>, link: &Path) {
    std::os::unix::fs::symlink(target.as_ref(), link).unwrap_or_else(|e| panic!("symlink {}: {e}", link.display()));
}

/// Sets the mtime of `path` (not following symlinks), leaving the atime alone.
fn set_mtime(path: &Path, sec: i64, nsec: u32) {
    use rustix::fs::{AtFlags, CWD, Timespec, Timestamps, UTIME_OMIT};
    let ts = Timestamps {
        last_access: Timespec { tv_sec: 0, tv_nsec: UTIME_OMIT },
        last_modification: Timespec { tv_sec: sec, tv_nsec: nsec as _ },
    };
    rustix::fs::utimensat(CWD, path, &ts, AtFlags::SYMLINK_NOFOLLOW)
        .unwrap_or_else(|e| panic!("utimensat {}: {e}", path.display()));
}

/// One region of real data inside a sparse file: offset, length, random seed.
#[derive(Clone, Copy, Debug)]
struct Region {
    offset: u64,
    len: u64,
    seed: u64,
}

/// The sparse file of a generated tree.
struct SparseSpec {
    rel: PathBuf,
    size: u64,
    regions: Vec<Region>,
}

/// What a generated tree holds, for the targeted assertions.
struct Built {
    xattrs: bool,
    devices: bool,
    hard_links: Vec<PathBuf>,
    sparse: SparseSpec,
    socket: Option<PathBuf>,
}

/// Whether `dir`'s file system accepts `user.*` extended attributes.
fn xattrs_supported(dir: &Path) -> bool {
    let probe = dir.join(".xattr-probe");
    write(&probe, b"");
    let r = xattr::set(&probe, "user.coffer.probe", b"1");
    fs::remove_file(&probe).unwrap();
    match r {
        Ok(()) => true,
        Err(e) => {
            eprintln!("NOTE: extended attributes not supported in {} ({e}): not tested", dir.display());
            false
        }
    }
}

/// Creates, below `root`, a tree with every kind of entry. With `big`, it also holds
/// a 20 MB incompressible file, a 6 MB compressible one and a 5 GiB sparse file;
/// without, the same names with small contents (and a 64 MiB sparse file).
fn build_tree(root: &Path, big: bool) -> Built {
    let root_user = is_root();
    mkdir(root);
    let p = |rel: &str| root.join(rel);

    // Directories: nested, empty, private, read-only, sticky, setgid.
    mkdir(&p("a/b/c"));
    write(p("a/b/c/deep.txt"), b"deep down\n");
    write(p("a/b/mid.txt"), b"middle\n");
    write(p("a/top.bin"), random_bytes(3000, 1));
    mkdir(&p("empty"));
    mkdir(&p("private"));
    write(p("private/secret.txt"), b"secret\n");
    chmod(&p("private/secret.txt"), 0o600);
    mkdir(&p("readonly_dir"));
    write(p("readonly_dir/inside.txt"), b"written before the directory became read-only\n");
    mkdir(&p("sticky"));
    write(p("sticky/t.txt"), b"t\n");
    mkdir(&p("setgid_dir"));

    // Regular files.
    mkdir(&p("files"));
    write(p("files/empty"), b"");
    write(p("files/small.txt"), b"hi!\n");
    write(p("files/one_byte"), b"x");
    write(p("files/all_zero"), vec![0u8; 100_000]);
    let random_len = if big { 20 * MIB as usize + 12_345 } else { 300_000 };
    write(p("files/random.bin"), random_bytes(random_len, 2));
    let lines = if big { 90_000 } else { 1_000 };
    let mut log = String::new();
    for i in 0..lines {
        log.push_str(&format!("{i:08} INFO the quick brown fox jumps over the lazy dog, request {} served\n", i % 97));
    }
    write(p("files/text.log"), log);
    write(p("files/setuid"), b"#!/bin/sh\necho setuid\n");
    write(p("files/setgid"), b"#!/bin/sh\necho setgid\n");
    write(p("files/readonly"), b"read only\n");
    write(p("files/old.txt"), b"from before 1970\n");
    write(p("files/future.txt"), b"from 2100\n");
    write(p("files/zero_ns.txt"), b"whole seconds\n");
    write(p("files/owned"), b"belongs to someone else\n");
    write(p("files/with:colon and space"), b"odd but valid name\n");
    write(p("files/new\nline"), b"a newline in the name\n");
    write(p("files/ünïcødé ✓"), b"valid UTF-8, not ASCII\n");
    // Sparse files besides the big one: a hole at the end, and nothing but a hole.
    {
        let f = File::create(p("files/hole_at_end")).unwrap();
        f.write_all_at(&random_bytes(100_000, 3), MIB).unwrap();
        f.set_len(64 * MIB).unwrap();
        File::create(p("files/all_hole")).unwrap().set_len(10 * MIB).unwrap();
    }
    if root_user {
        // Root can read it anyway; a normal user could not back it up.
        write(p("files/no_permissions"), b"mode 000\n");
        chmod(&p("files/no_permissions"), 0o000);
    }

    // Symlinks: relative, absolute, dangling, to a directory, non-UTF-8 target.
    mkdir(&p("links"));
    symlink("../files/small.txt", &p("links/rel"));
    symlink(p("files/small.txt"), &p("links/abs"));
    symlink("does/not/exist", &p("links/dangling"));
    symlink("../a", &p("links/dir"));
    symlink(Path::new(osstr(b"../names/caf\xe9")), &p("links/latin1_target"));

    // Hard links: one file, three names in three directories.
    mkdir(&p("hard/one"));
    mkdir(&p("hard/two"));
    write(p("hard/one/h1"), b"one inode, three names\n");
    fs::hard_link(p("hard/one/h1"), p("hard/two/h2")).unwrap();
    fs::hard_link(p("hard/one/h1"), p("hard/h3")).unwrap();
    let hard_links: Vec<PathBuf> = ["hard/one/h1", "hard/two/h2", "hard/h3"].iter().map(PathBuf::from).collect();

    // Names that are not UTF-8: a file, and a directory with a file in it.
    mkdir(&p("names"));
    write(p("names").join(osstr(NAME_LATIN1)), b"latin-1 name\n");
    mkdir(&p("names").join(osstr(NAME_FFFE)));
    write(p("names").join(osstr(NAME_FFFE)).join(osstr(b"inner\x80")), b"inside a binary-named dir\n");

    // Special files: FIFO, device nodes (root only), a socket (recorded, not restored).
    mkdir(&p("special"));
    rustix::fs::mkfifoat(rustix::fs::CWD, p("special/fifo"), rustix::fs::Mode::from_raw_mode(0o640)).unwrap();
    chmod(&p("special/fifo"), 0o640);
    let mut devices = false;
    if root_user {
        use rustix::fs::{CWD, FileType, Mode, makedev, mknodat};
        let chr = mknodat(CWD, p("special/null"), FileType::CharacterDevice, Mode::from_raw_mode(0o666), makedev(1, 3));
        let blk =
            mknodat(CWD, p("special/loop200"), FileType::BlockDevice, Mode::from_raw_mode(0o660), makedev(7, 200));
        match (chr, blk) {
            (Ok(()), Ok(())) => {
                chmod(&p("special/null"), 0o666);
                chmod(&p("special/loop200"), 0o660);
                devices = true;
            }
            (c, b) => {
                eprintln!("NOTE: cannot create device nodes ({c:?}, {b:?}): not tested");
                let _ = fs::remove_file(p("special/null"));
                let _ = fs::remove_file(p("special/loop200"));
            }
        }
    }
    let socket = match std::os::unix::net::UnixListener::bind(p("special/socket")) {
        Ok(l) => {
            drop(l);
            Some(PathBuf::from("special/socket"))
        }
        Err(e) => {
            eprintln!("NOTE: cannot create a Unix socket ({e}): not tested");
            None
        }
    };

    // Extended attributes on a file and a directory, including a binary value and
    // an empty one.
    mkdir(&p("xattr/dir"));
    write(p("xattr/file.txt"), b"has attributes\n");
    let xattrs = xattrs_supported(root);
    if xattrs {
        xattr::set(p("xattr/file.txt"), "user.text", b"plain value").unwrap();
        xattr::set(p("xattr/file.txt"), "user.binary", b"\x00\xff\xfe\x80\x7f\x00").unwrap();
        xattr::set(p("xattr/file.txt"), "user.empty", b"").unwrap();
        xattr::set(p("xattr/dir"), "user.dir", b"on a directory \xc3\x28").unwrap();
        xattr::set(p("files/random.bin"), "user.checksum", b"not really").unwrap();
        if root_user && xattr::set(p("xattr/file.txt"), "trusted.coffer", b"trusted value").is_err() {
            eprintln!("NOTE: cannot set trusted.* attributes: not tested");
        }
    }
    // POSIX ACLs (stored as system.* attributes): an access ACL on a file, a default
    // ACL on a directory and a file that inherited it.
    write(p("xattr/acl.txt"), b"has an ACL\n");
    mkdir(&p("xattr/acl_dir"));
    let acl_ok = xattr::set(p("xattr/acl.txt"), "system.posix_acl_access", &acl(&[(ACL_USER, 6, OTHER_UID)], 4))
        .and_then(|()| {
            xattr::set(p("xattr/acl_dir"), "system.posix_acl_default", &acl(&[(ACL_GROUP, 5, OTHER_GID)], 5))
        });
    match acl_ok {
        Ok(()) => write(p("xattr/acl_dir/inherited.txt"), b"inherited the default ACL\n"),
        Err(e) => eprintln!("NOTE: cannot set POSIX ACLs ({e}): not tested"),
    }

    // A sparse file: data at the start, in the middle (unaligned) and up to the end.
    let (size, regions) = if big {
        let size = 5 * GIB;
        (
            size,
            vec![
                Region { offset: 0, len: 2 * MIB, seed: 10 },
                Region { offset: 5 * GIB / 2 + 12_345, len: 2 * MIB + 7, seed: 11 },
                Region { offset: size - MIB - 3, len: MIB + 3, seed: 12 },
            ],
        )
    } else {
        let size = 64 * MIB;
        (
            size,
            vec![
                Region { offset: 0, len: 100_000, seed: 10 },
                Region { offset: 32 * MIB + 17, len: 200_000, seed: 11 },
                Region { offset: size - 50_000, len: 50_000, seed: 12 },
            ],
        )
    };
    let sparse_rel = PathBuf::from("sparse.img");
    {
        let f = File::create(p("sparse.img")).unwrap();
        f.set_len(size).unwrap();
        for r in &regions {
            f.write_all_at(&random_bytes(r.len as usize, r.seed), r.offset).unwrap();
        }
    }
    let md = fs::metadata(p("sparse.img")).unwrap();
    assert_eq!(md.len(), size);
    assert!(
        md.blocks() * 512 < size / 4,
        "the test file system did not create a sparse file ({} blocks for {size} bytes)",
        md.blocks()
    );

    // Owners (root only). The setuid/setgid files are chowned first, as chown clears
    // those bits, and restore must apply the mode after the owner.
    if root_user {
        for rel in ["files/owned", "files/setuid", "files/setgid", "private", "special/fifo"] {
            lchown(&p(rel), OTHER_UID, OTHER_GID);
        }
        lchown(&p("links/rel"), OTHER_UID, OTHER_GID);
    }
    chmod(&p("files/owned"), 0o640);
    chmod(&p("files/setuid"), 0o4755);
    chmod(&p("files/setgid"), 0o2755);
    chmod(&p("files/readonly"), 0o444);
    chmod(&p("private"), 0o700);
    chmod(&p("readonly_dir"), 0o555);
    chmod(&p("sticky"), 0o1777);
    chmod(&p("setgid_dir"), 0o2775);

    // Explicit mtimes with nanoseconds on every entry (files, directories, symlinks,
    // special files), distinct from each other; then a few edge cases.
    let all: Vec<PathBuf> = scan(root).into_keys().collect();
    for (i, rel) in all.iter().enumerate() {
        let i = i as i64;
        let nsec = ((i as u64 * 123_456_791 + 1) % 1_000_000_000) as u32;
        set_mtime(&root.join(rel), 1_500_000_000 + i * 86_400 + 7, nsec);
    }
    set_mtime(&p("files/old.txt"), -1_000_000_000, 5);
    set_mtime(&p("files/future.txt"), 4_102_444_801, 999_999_999);
    set_mtime(&p("files/zero_ns.txt"), 1_600_000_000, 0);

    Built { xattrs, devices, hard_links, sparse: SparseSpec { rel: sparse_rel, size, regions }, socket }
}

// ---------------------------------------------------------------------------
// Reading a tree back
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    File,
    Dir,
    Symlink,
    Fifo,
    CharDev,
    BlockDev,
    Socket,
}

impl Kind {
    /// The name `ls --json` uses.
    fn json_name(self) -> &'static str {
        match self {
            Kind::File => "file",
            Kind::Dir => "dir",
            Kind::Symlink => "symlink",
            Kind::Fifo => "fifo",
            Kind::CharDev => "chardev",
            Kind::BlockDev => "blockdev",
            Kind::Socket => "socket",
        }
    }
}

/// Everything compared about one entry (from `lstat` and `llistxattr`).
#[derive(Clone, Debug)]
struct Entry {
    kind: Kind,
    mode: u32,
    uid: u32,
    gid: u32,
    size: u64,
    mtime: (i64, i64),
    ino: u64,
    nlink: u64,
    rdev: u64,
    blocks: u64,
    target: Option<Vec<u8>>,
    xattrs: Result<BTreeMap<Vec<u8>, Vec<u8>>, String>,
}

fn read_entry(path: &Path) -> Entry {
    let md = fs::symlink_metadata(path).unwrap_or_else(|e| panic!("lstat {}: {e}", path.display()));
    let ft = md.file_type();
    let kind = if ft.is_dir() {
        Kind::Dir
    } else if ft.is_symlink() {
        Kind::Symlink
    } else if ft.is_fifo() {
        Kind::Fifo
    } else if ft.is_char_device() {
        Kind::CharDev
    } else if ft.is_block_device() {
        Kind::BlockDev
    } else if ft.is_socket() {
        Kind::Socket
    } else {
        Kind::File
    };
    let target = (kind == Kind::Symlink).then(|| fs::read_link(path).unwrap().as_os_str().as_bytes().to_vec());
    // xattr::list and xattr::get do not follow symlinks.
    let xattrs = (|| {
        let mut m = BTreeMap::new();
        for name in xattr::list(path)? {
            if let Some(v) = xattr::get(path, &name)? {
                m.insert(name.as_bytes().to_vec(), v);
            }
        }
        Ok::<_, std::io::Error>(m)
    })()
    .or_else(|e| {
        if e.raw_os_error() == Some(rustix::io::Errno::OPNOTSUPP.raw_os_error()) {
            Ok(BTreeMap::new())
        } else {
            Err(e.to_string())
        }
    });
    Entry {
        kind,
        mode: md.mode() & 0o7777,
        uid: md.uid(),
        gid: md.gid(),
        size: md.size(),
        mtime: (md.mtime(), md.mtime_nsec()),
        ino: md.ino(),
        nlink: md.nlink(),
        rdev: md.rdev(),
        blocks: md.blocks(),
        target,
        xattrs,
    }
}

/// Every entry at and below `root`, by path relative to it (the root is "").
fn scan(root: &Path) -> BTreeMap<PathBuf, Entry> {
    let mut out = BTreeMap::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let path = if rel.as_os_str().is_empty() { root.to_path_buf() } else { root.join(&rel) };
        let e = read_entry(&path);
        if e.kind == Kind::Dir {
            for d in fs::read_dir(&path).unwrap_or_else(|e| panic!("read_dir {}: {e}", path.display())) {
                stack.push(rel.join(d.unwrap().file_name()));
            }
        }
        out.insert(rel, e);
    }
    out
}

fn show(rel: &Path) -> String {
    if rel.as_os_str().is_empty() { "(root)".into() } else { format!("{:?}", rel) }
}

fn show_bytes(b: &[u8]) -> String {
    format!("\"{}\"", b.escape_ascii())
}

fn show_xattrs(x: &Result<BTreeMap<Vec<u8>, Vec<u8>>, String>) -> String {
    match x {
        Err(e) => format!("<error: {e}>"),
        Ok(m) => {
            let items: Vec<String> = m.iter().map(|(k, v)| format!("{}={}", show_bytes(k), show_bytes(v))).collect();
            format!("{{{}}}", items.join(", "))
        }
    }
}

/// Compares two files' content. Only the union of both files' data extents is
/// read: outside it both files are holes, which read as zeros, so this is exact
/// and cheap for sparse files.
fn compare_content(a: &Path, b: &Path) -> Result<(), String> {
    let fa = File::open(a).map_err(|e| format!("open {}: {e}", a.display()))?;
    let fb = File::open(b).map_err(|e| format!("open {}: {e}", b.display()))?;
    let size = fa.metadata().unwrap().len();
    if fb.metadata().unwrap().len() != size {
        return Err("sizes differ".into());
    }
    let mut ext = data_extents(&fa, size);
    ext.extend(data_extents(&fb, size));
    ext.sort();
    let mut merged: Vec<(u64, u64)> = Vec::new();
    for (s, e) in ext {
        match merged.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => merged.push((s, e)),
        }
    }
    let mut ba = vec![0u8; MIB as usize];
    let mut bb = vec![0u8; MIB as usize];
    for (s, e) in merged {
        let mut off = s;
        while off < e {
            let n = (e - off).min(MIB) as usize;
            fa.read_exact_at(&mut ba[..n], off).map_err(|e| format!("read {}: {e}", a.display()))?;
            fb.read_exact_at(&mut bb[..n], off).map_err(|e| format!("read {}: {e}", b.display()))?;
            if ba[..n] != bb[..n] {
                let i = ba[..n].iter().zip(&bb[..n]).position(|(x, y)| x != y).unwrap();
                return Err(format!("content differs from byte {}", off + i as u64));
            }
            off += n as u64;
        }
    }
    Ok(())
}

#[derive(Clone, Copy)]
struct CompareOpts {
    /// Compare link counts and which names share an inode (only meaningful when
    /// every name of every inode was restored).
    links: bool,
}

/// Compares two scanned trees entry by entry; panics listing every difference.
fn compare(
    src_root: &Path,
    src: &BTreeMap<PathBuf, Entry>,
    dst_root: &Path,
    dst: &BTreeMap<PathBuf, Entry>,
    opts: CompareOpts,
) {
    let diffs = differences(src_root, src, dst_root, dst, opts);
    assert!(
        diffs.is_empty(),
        "{} difference(s) between the source {} and the restored tree {}:\n  {}",
        diffs.len(),
        src_root.display(),
        dst_root.display(),
        diffs.join("\n  ")
    );
}

/// Every difference between two scanned trees, one line each, naming the path
/// and the field.
fn differences(
    src_root: &Path,
    src: &BTreeMap<PathBuf, Entry>,
    dst_root: &Path,
    dst: &BTreeMap<PathBuf, Entry>,
    opts: CompareOpts,
) -> Vec<String> {
    let owners = is_root();
    let mut diffs: Vec<String> = Vec::new();
    for (rel, e) in src {
        if !dst.contains_key(rel) {
            diffs.push(format!("{}: missing from the restored tree (a {:?})", show(rel), e.kind));
        }
    }
    for (rel, e) in dst {
        if !src.contains_key(rel) {
            diffs.push(format!("{}: in the restored tree but not expected (a {:?})", show(rel), e.kind));
        }
    }
    for (rel, a) in src {
        let Some(b) = dst.get(rel) else { continue };
        let mut field = |name: &str, x: String, y: String| {
            if x != y {
                diffs.push(format!("{}: {name} differs: source {x}, restored {y}", show(rel)));
            }
        };
        field("type", format!("{:?}", a.kind), format!("{:?}", b.kind));
        if a.kind != b.kind {
            continue;
        }
        if a.kind != Kind::Symlink {
            field("mode", format!("{:o}", a.mode), format!("{:o}", b.mode));
        }
        if matches!(a.kind, Kind::File | Kind::Symlink) {
            field("size", a.size.to_string(), b.size.to_string());
        }
        field("mtime", format!("{}.{:09}", a.mtime.0, a.mtime.1), format!("{}.{:09}", b.mtime.0, b.mtime.1));
        if owners {
            field("uid", a.uid.to_string(), b.uid.to_string());
            field("gid", a.gid.to_string(), b.gid.to_string());
        }
        if opts.links && a.kind != Kind::Dir {
            field("link count", a.nlink.to_string(), b.nlink.to_string());
        }
        field("xattrs", show_xattrs(&a.xattrs), show_xattrs(&b.xattrs));
        if matches!(a.kind, Kind::CharDev | Kind::BlockDev) {
            field("rdev", format!("{:#x}", a.rdev), format!("{:#x}", b.rdev));
        }
        if a.kind == Kind::Symlink {
            field("symlink target", show_bytes(a.target.as_deref().unwrap()), show_bytes(b.target.as_deref().unwrap()));
        }
        if a.kind == Kind::File
            && a.size == b.size
            && let Err(e) = compare_content(&src_root.join(rel), &dst_root.join(rel))
        {
            diffs.push(format!("{}: {e}", show(rel)));
        }
    }
    if opts.links {
        let groups = |m: &BTreeMap<PathBuf, Entry>| -> BTreeSet<Vec<PathBuf>> {
            let mut by_ino: BTreeMap<u64, Vec<PathBuf>> = BTreeMap::new();
            for (rel, e) in m.iter().filter(|(_, e)| e.kind != Kind::Dir) {
                by_ino.entry(e.ino).or_default().push(rel.clone());
            }
            by_ino.into_values().filter(|v| v.len() > 1).collect()
        };
        let (ga, gb) = (groups(src), groups(dst));
        if ga != gb {
            diffs.push(format!("names sharing an inode differ: source {ga:?}, restored {gb:?}"));
        }
    }
    diffs
}

// ---------------------------------------------------------------------------
// Running coffer
// ---------------------------------------------------------------------------

/// Runs `coffer --json restore ARGS`, requires success without warnings or failures,
/// and returns the summary.
fn restore(env: &Env, args: &[&str]) -> serde_json::Value {
    restore_in_batches(env, None, args)
}

/// Like [`restore`]; with `Some(n)`, the restore closes a batch (plans no more
/// before writing) at `n` entries or `n` chunks, through `COFFER_TEST_RESTORE_BATCH`.
fn restore_in_batches(env: &Env, batch: Option<usize>, args: &[&str]) -> serde_json::Value {
    let mut cmd = env.cmd();
    if let Some(n) = batch {
        cmd.env("COFFER_TEST_RESTORE_BATCH", n.to_string());
    }
    let out = cmd.arg("--json").arg("restore").args(args).output().expect("run coffer");
    assert_success(&out);
    let stderr = text(&out.stderr);
    assert!(stderr.trim().is_empty(), "restore {args:?} printed warnings:\n{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("restore summary is not JSON ({e}): {}", text(&out.stdout)));
    assert_eq!(v["failures"], 0, "{v}");
    assert_eq!(v["warnings"], 0, "{v}");
    v
}

/// `SNAPSHOT:PATH` for restore.
fn at(id: &str, path: &Path) -> String {
    format!("{id}:{}", path.to_str().expect("temp paths are UTF-8"))
}

fn s(p: &Path) -> &str {
    p.to_str().expect("temp paths are UTF-8")
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

#[test]
fn roundtrip_every_kind_of_entry() {
    let env = Env::new();
    let src = env.path("src");
    let t = Instant::now();
    let built = build_tree(&src, true);
    eprintln!("roundtrip: tree built in {:.1?}", t.elapsed());
    let mut before = scan(&src);

    let t = Instant::now();
    let id = env.backup(&[&src]);
    eprintln!("roundtrip: backup in {:.1?}, repository {} bytes", t.elapsed(), env.repo_size());

    // The whole snapshot: absolute paths are mirrored below the target, so the
    // source root's own metadata is restored too.
    let target = env.path("restore");
    let t = Instant::now();
    let summary = restore(&env, &[&id, "--target", s(&target)]);
    eprintln!("roundtrip: restore in {:.1?}: {summary}", t.elapsed());
    let restored = target.join(src.strip_prefix("/").unwrap());
    let mut after = scan(&restored);

    // Sockets are recorded but (by design) not recreated.
    if let Some(sock) = &built.socket {
        assert_eq!(before.remove(sock).map(|e| e.kind), Some(Kind::Socket));
        assert!(after.remove(sock).is_none(), "a socket was recreated at {}", sock.display());
    }
    let t = Instant::now();
    compare(&src, &before, &restored, &after, CompareOpts { links: true });
    eprintln!("roundtrip: compared {} entries in {:.1?}", before.len(), t.elapsed());

    // Targeted checks, so that a bug in the generic comparison cannot hide them.
    let r = |rel: &str| after.get(Path::new(rel)).unwrap_or_else(|| panic!("{rel} not restored"));
    let inos: Vec<u64> = built.hard_links.iter().map(|l| after[l].ino).collect();
    assert!(inos.iter().all(|&i| i == inos[0]), "hard links restored as separate files: {inos:?}");
    for l in &built.hard_links {
        assert_eq!(after[l].nlink, 3, "{}: link count", l.display());
    }
    assert_eq!(r("files/setuid").mode, 0o4755);
    assert_eq!(r("files/setgid").mode, 0o2755);
    assert_eq!(r("sticky").mode, 0o1777);
    assert_eq!(r("private").mode, 0o700);
    assert_eq!(r("readonly_dir").mode, 0o555);
    assert_eq!(r("files/future.txt").mtime, (4_102_444_801, 999_999_999));
    assert_eq!(r("files/old.txt").mtime, (-1_000_000_000, 5));
    assert_eq!(r("links/dangling").target.as_deref(), Some(&b"does/not/exist"[..]));
    assert_eq!(r("links/latin1_target").target.as_deref(), Some(&b"../names/caf\xe9"[..]));
    assert_eq!(r("special/fifo").kind, Kind::Fifo);
    assert!(after.contains_key(&PathBuf::from("names").join(osstr(NAME_LATIN1))));
    assert!(after.contains_key(&PathBuf::from("names").join(osstr(NAME_FFFE)).join(osstr(b"inner\x80"))));
    if is_root() {
        assert_eq!((r("files/owned").uid, r("files/owned").gid), (OTHER_UID, OTHER_GID));
        assert_eq!((r("files/setuid").uid, r("files/setuid").gid), (OTHER_UID, OTHER_GID));
        assert_eq!((r("links/rel").uid, r("links/rel").gid), (OTHER_UID, OTHER_GID));
    }
    if built.devices {
        assert_eq!(r("special/null").kind, Kind::CharDev);
        assert_eq!(r("special/null").rdev, rustix::fs::makedev(1, 3));
        assert_eq!(r("special/loop200").kind, Kind::BlockDev);
        assert_eq!(r("special/loop200").rdev, rustix::fs::makedev(7, 200));
    }
    if built.xattrs {
        let x = r("xattr/file.txt").xattrs.as_ref().unwrap();
        assert_eq!(x.get(&b"user.binary"[..]).map(Vec::as_slice), Some(&b"\x00\xff\xfe\x80\x7f\x00"[..]));
        assert_eq!(x.get(&b"user.empty"[..]).map(Vec::as_slice), Some(&b""[..]));
        let x = r("xattr/dir").xattrs.as_ref().unwrap();
        assert_eq!(x.get(&b"user.dir"[..]).map(Vec::as_slice), Some(&b"on a directory \xc3\x28"[..]));
    }

    // The sparse file: same size, the data where it was written, zeros between, and
    // still sparse.
    let sp = &built.sparse;
    let rs = &after[&sp.rel];
    assert_eq!(rs.size, sp.size);
    assert!(
        rs.blocks * 512 < 64 * MIB,
        "the restored sparse file is not sparse: {} bytes allocated for {} bytes",
        rs.blocks * 512,
        rs.size
    );
    eprintln!(
        "roundtrip: sparse file: {} bytes allocated in the source, {} in the restore",
        before[&sp.rel].blocks * 512,
        rs.blocks * 512
    );
    let f = File::open(restored.join(&sp.rel)).unwrap();
    for reg in &sp.regions {
        let mut buf = vec![0u8; reg.len as usize];
        f.read_exact_at(&mut buf, reg.offset).unwrap();
        assert!(buf == random_bytes(reg.len as usize, reg.seed), "sparse file: data at {} differs", reg.offset);
    }
    for off in [3 * MIB, GIB, 5 * GIB / 2 - MIB, 4 * GIB, sp.size - 2 * MIB] {
        let mut buf = vec![0u8; 64 * KIB as usize];
        f.read_exact_at(&mut buf, off).unwrap();
        assert!(buf.iter().all(|&b| b == 0), "sparse file: hole at {off} is not zero");
    }

    // Holes are restored chunk by chunk: zeros sharing a chunk (up to the maximum
    // chunk size) with data are written out, so allow for two chunks around the data.
    for (rel, max) in [("files/hole_at_end", 20 * MIB), ("files/all_hole", 0)] {
        assert!(r(rel).blocks * 512 <= max, "{rel} restored with {} bytes allocated", r(rel).blocks * 512);
    }

    // The directories above the source were recreated with their own metadata.
    let tmp_src = read_entry(src.parent().unwrap());
    let tmp_dst = read_entry(restored.parent().unwrap());
    assert_eq!(tmp_dst.mode, tmp_src.mode, "mode of the directory above the source");

    // And the repository is sound.
    let t = Instant::now();
    assert_success(&env.run(&["check", "--read-data"]));
    eprintln!("roundtrip: check --read-data in {:.1?}", t.elapsed());
}

/// The same tree (small contents) restored with `SNAPSHOT:PATH`, which puts the
/// source's contents directly in the target.
#[test]
fn roundtrip_of_a_subpath_lands_directly_in_the_target() {
    let env = Env::new();
    let src = env.path("src");
    let built = build_tree(&src, false);
    let id = env.backup(&[&src]);
    let target = env.path("out");
    let summary = restore(&env, &[&at(&id, &src), "--target", s(&target)]);
    let mut before = scan(&src);
    let mut after = scan(&target);
    // The target directory is not an entry of the snapshot: its metadata is its own.
    before.remove(Path::new(""));
    after.remove(Path::new(""));
    if let Some(sock) = &built.socket {
        before.remove(sock);
    }
    compare(&src, &before, &target, &after, CompareOpts { links: true });

    // The summary counts what was restored: one file per inode (further names
    // are hard links, counted with symlinks and special files).
    let file_inodes: BTreeMap<u64, u64> =
        before.values().filter(|e| e.kind == Kind::File).map(|e| (e.ino, e.size)).collect();
    let files = before.values().filter(|e| e.kind == Kind::File).count() as u64;
    let dirs = before.values().filter(|e| e.kind == Kind::Dir).count() as u64;
    let others = before.values().filter(|e| !matches!(e.kind, Kind::File | Kind::Dir)).count() as u64;
    let want = serde_json::json!({
        "files": file_inodes.len(),
        "dirs": dirs,
        "others": others + files - file_inodes.len() as u64,
        "bytes": file_inodes.values().sum::<u64>(),
    });
    let got = serde_json::json!({
        "files": summary["files"], "dirs": summary["dirs"], "others": summary["others"], "bytes": summary["bytes"],
    });
    assert_eq!(got, want, "restore summary {summary}");

    // A single file restores as TARGET/<name>; a subdirectory's contents land in TARGET.
    let one = env.path("one");
    restore(&env, &[&at(&id, &src.join("files/setuid")), "--target", s(&one)]);
    let e = read_entry(&one.join("setuid"));
    assert_eq!((e.kind, e.mode), (Kind::File, 0o4755));
    assert_eq!(fs::read(one.join("setuid")).unwrap(), fs::read(src.join("files/setuid")).unwrap());
    assert_eq!(fs::read_dir(&one).unwrap().count(), 1);
    let sub = env.path("sub");
    restore(&env, &[&at(&id, &src.join("a")), "--target", s(&sub)]);
    let mut want = scan(&src.join("a"));
    want.remove(Path::new(""));
    let mut got = scan(&sub);
    got.remove(Path::new(""));
    compare(&src.join("a"), &want, &sub, &got, CompareOpts { links: true });
}

/// Restore plans and writes a bounded batch at a time. With tiny batches (one
/// entry or chunk each, then three), the tree with every kind of entry plus many
/// small files in nested directories, with hard links between directories, must
/// come back exactly: contents bit for bit, every directory's metadata (applied
/// once its last batch is written), further names linked to files written in
/// earlier batches, and the same summary as a restore in one batch.
#[test]
fn restore_in_tiny_batches_is_exact() {
    let env = Env::new();
    let src = env.path("src");
    let built = build_tree(&src, false);
    for d in 0..4u64 {
        for e in 0..3u64 {
            let dir = src.join(format!("many/d{d}/e{e}"));
            mkdir(&dir);
            for f in 0..15u64 {
                let seed = 100 + d * 100 + e * 20 + f;
                write(dir.join(format!("f{f:02}")), random_bytes(50 + seed as usize * 13, seed));
            }
        }
    }
    fs::hard_link(src.join("many/d0/e0/f00"), src.join("many/d3/e2/link_a")).unwrap();
    fs::hard_link(src.join("many/d1/e1/f07"), src.join("many/d2/e0/link_b")).unwrap();
    fs::hard_link(src.join("many/d1/e1/f07"), src.join("many/link_b2")).unwrap();
    let many: Vec<PathBuf> = scan(&src.join("many")).into_keys().collect();
    for (i, rel) in many.iter().enumerate() {
        set_mtime(&src.join("many").join(rel), 1_400_000_000 + i as i64 * 3_600, (i as u32 * 7_919) % 1_000_000_000);
    }
    let id = env.backup(&[&src]);
    let mut before = scan(&src);
    before.remove(Path::new(""));
    if let Some(sock) = &built.socket {
        before.remove(sock);
    }

    let whole = restore(&env, &[&at(&id, &src), "--target", s(&env.path("whole"))]);
    for n in [1, 3] {
        let target = env.path(&format!("batches_of_{n}"));
        let summary = restore_in_batches(&env, Some(n), &[&at(&id, &src), "--target", s(&target)]);
        let mut after = scan(&target);
        after.remove(Path::new(""));
        compare(&src, &before, &target, &after, CompareOpts { links: true });
        assert_same_tree(&src, &target);
        for key in ["files", "dirs", "others", "bytes"] {
            assert_eq!(summary[key], whole[key], "{key} with batches of {n}: {summary} vs {whole}");
        }
    }
}

#[test]
fn backup_twice_adds_almost_nothing() {
    let env = Env::new();
    let src = env.path("src");
    let mut total = 0u64;
    let mut files = 0u64;
    for d in 0..12 {
        let dir = src.join(format!("dir{d:02}"));
        mkdir(&dir);
        for f in 0..25 {
            let len = 500 + (d * 25 + f) * 13 % 3500;
            write(dir.join(format!("f{f:03}.dat")), random_bytes(len, (d * 100 + f) as u64 + 1000));
            total += len as u64;
            files += 1;
        }
    }
    for (i, len) in [9_500_000usize, 10_000_000, 9_000_000].into_iter().enumerate() {
        write(src.join(format!("big{i}.bin")), random_bytes(len, 77 + i as u64));
        total += len as u64;
        files += 1;
    }
    eprintln!("backup_twice: {files} files, {total} bytes");

    let backup = |extra: &[&str]| -> (serde_json::Value, u64) {
        let mut args = vec!["--json", "backup"];
        args.extend_from_slice(extra);
        args.push(s(&src));
        let out = env.run(&args);
        assert_success(&out);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        (v, env.repo_size())
    };
    let empty_repo = env.repo_size();
    let (first, size1) = backup(&[]);
    assert_eq!(first["summary"]["files_new"], files, "{first}");
    eprintln!("backup_twice: first backup: repository {empty_repo} -> {size1} bytes");
    assert!(size1 > total * 9 / 10 && size1 < total + total / 10, "first backup stored {size1} bytes for {total}");

    let (second, size2) = backup(&[]);
    eprintln!("backup_twice: unchanged backup: +{} bytes (summary {})", size2 - size1, second["summary"]);
    assert_eq!(second["summary"]["files_unchanged"], files, "{second}");
    assert_eq!(second["summary"]["bytes_read"], 0, "{second}");

    let (third, size3) = backup(&["--force"]);
    eprintln!("backup_twice: --force backup: +{} bytes (summary {})", size3 - size2, third["summary"]);
    // Every file read again, and found unchanged.
    assert_eq!(third["summary"]["bytes_read"], total, "{third}");
    assert_eq!(third["summary"]["files_unchanged"], files, "{third}");
    assert_eq!(third["summary"]["files_changed"], 0, "{third}");
    assert!(third["summary"]["blobs_added"].as_u64().unwrap_or(99) <= 2, "{third}");

    assert!(size2 - size1 < 64 * KIB, "an unchanged backup grew the repository by {} bytes", size2 - size1);
    assert!(size3 - size2 < 64 * KIB, "a --force backup grew the repository by {} bytes", size3 - size2);

    // The three snapshots restore to the same thing.
    for (i, v) in [&first, &second, &third].into_iter().enumerate() {
        let id = v["snapshot_id"].as_str().unwrap();
        let target = env.path(&format!("r{i}"));
        restore(&env, &[&at(id, &src), "--target", s(&target)]);
        let mut a = scan(&src);
        let mut b = scan(&target);
        a.remove(Path::new(""));
        b.remove(Path::new(""));
        compare(&src, &a, &target, &b, CompareOpts { links: true });
    }
}

/// The expected result of a restore with include/exclude rules: entries excluded
/// (with everything below them) are dropped; an entry is restored when it or an
/// ancestor is included; directories above restored entries are restored too.
/// Sockets are never restored. Paths are relative to the restored root.
fn expected_subset(
    all: &BTreeMap<PathBuf, Entry>,
    included: impl Fn(&Path, &Entry) -> bool,
    excluded: impl Fn(&Path, &Entry) -> bool,
) -> BTreeMap<PathBuf, Entry> {
    let mut keep: BTreeSet<PathBuf> = BTreeSet::new();
    for (rel, e) in all {
        if rel.as_os_str().is_empty() || e.kind == Kind::Socket {
            continue;
        }
        let ancestors: Vec<&Path> = rel.ancestors().filter(|a| !a.as_os_str().is_empty()).collect();
        if ancestors.iter().any(|a| excluded(a, &all[*a])) {
            continue;
        }
        if ancestors.iter().any(|a| included(a, &all[*a])) {
            for a in ancestors {
                keep.insert(a.to_path_buf());
            }
        }
    }
    all.iter().filter(|(k, _)| keep.contains(*k)).map(|(k, v)| (k.clone(), v.clone())).collect()
}

fn name_of(p: &Path) -> &[u8] {
    p.file_name().map(|n| n.as_bytes()).unwrap_or_default()
}

#[test]
fn restore_with_include_and_exclude() {
    let env = Env::new();
    let src = env.path("src");
    build_tree(&src, false);
    let id = env.backup(&[&src]);
    let all = scan(&src);
    let never = |_: &Path, _: &Entry| false;
    let always = |_: &Path, _: &Entry| true;
    let src_a = format!("{}/a", s(&src));
    let cases: Vec<(&str, Vec<&str>, BTreeMap<PathBuf, Entry>)> = vec![
        (
            "include *.txt",
            vec!["--include", "*.txt"],
            expected_subset(&all, |p, _| name_of(p).ends_with(b".txt"), never),
        ),
        (
            "include an anchored directory",
            vec!["--include", &src_a],
            expected_subset(&all, |p, _| p == Path::new("a"), never),
        ),
        (
            "exclude *.bin and directories named hard",
            vec!["--exclude", "*.bin", "--exclude", "hard/"],
            expected_subset(&all, always, |p, e| {
                name_of(p).ends_with(b".bin") || (name_of(p) == b"hard" && e.kind == Kind::Dir)
            }),
        ),
        (
            "include files/ but exclude *.log and *.txt",
            vec!["--include", "files/", "--exclude", "*.log", "--exclude", "*.txt"],
            expected_subset(
                &all,
                |p, e| name_of(p) == b"files" && e.kind == Kind::Dir,
                |p, _| name_of(p).ends_with(b".log") || name_of(p).ends_with(b".txt"),
            ),
        ),
        (
            "include one name of a hard-linked file",
            vec!["--include", "h2"],
            expected_subset(&all, |p, _| name_of(p) == b"h2", never),
        ),
        (
            "include the special files and the sparse file",
            vec!["--include", "special", "--include", "sparse.img"],
            expected_subset(&all, |p, _| name_of(p) == b"special" || name_of(p) == b"sparse.img", never),
        ),
    ];
    for (i, (what, args, want)) in cases.into_iter().enumerate() {
        let target = env.path(&format!("subset{i}"));
        let spec = at(&id, &src);
        let mut a = vec![spec.as_str(), "--target", s(&target)];
        a.extend_from_slice(&args);
        restore(&env, &a);
        let mut got = scan(&target);
        got.remove(Path::new(""));
        assert!(!want.is_empty(), "{what}: the expected subset is empty");
        eprintln!("include/exclude: {what}: {} entries", want.len());
        let diffs = differences(&src, &want, &target, &got, CompareOpts { links: false });
        assert!(diffs.is_empty(), "restore {args:?} ({what}):\n  {}", diffs.join("\n  "));
    }
}

#[test]
fn ls_lists_every_path() {
    let env = Env::new();
    let src = env.path("src");
    let built = build_tree(&src, false);
    let id = env.backup(&[&src]);
    let all = scan(&src);

    let ls = |args: &[&str]| -> Vec<serde_json::Value> {
        let mut a = vec!["--json", "ls"];
        a.extend_from_slice(args);
        let out = env.run(&a);
        assert_success(&out);
        text(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}")))
            .collect()
    };
    let lines = ls(&[&id]);

    // The JSON path is lossy for non-UTF-8 names; the node's name is exact.
    let name_bytes = |v: &serde_json::Value| -> Vec<u8> {
        match v {
            serde_json::Value::String(t) => t.as_bytes().to_vec(),
            serde_json::Value::Object(o) => {
                let h = o["hex"].as_str().unwrap();
                (0..h.len()).step_by(2).map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap()).collect()
            }
            other => panic!("unexpected name {other}"),
        }
    };
    let mut expected: BTreeMap<String, Option<(&PathBuf, &Entry)>> = BTreeMap::new();
    for anc in src.ancestors().skip(1).filter(|a| *a != Path::new("/")) {
        expected.insert(anc.to_string_lossy().into_owned(), None);
    }
    for (rel, e) in &all {
        let abs = if rel.as_os_str().is_empty() { src.clone() } else { src.join(rel) };
        let key = abs.to_string_lossy().into_owned();
        assert!(expected.insert(key.clone(), Some((rel, e))).is_none(), "two paths render as {key:?}");
    }
    let mut seen = BTreeSet::new();
    let mut problems = Vec::new();
    for l in &lines {
        // Paths are exact: a string when UTF-8, else {"hex": ...}; compare them rendered.
        let path = match (&l["path"], l["path"]["hex"].as_str()) {
            (serde_json::Value::String(s), _) => s.clone(),
            (_, Some(h)) => {
                let bytes: Vec<u8> =
                    (0..h.len()).step_by(2).map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap()).collect();
                String::from_utf8_lossy(&bytes).into_owned()
            }
            _ => panic!("no path in {l}"),
        };
        if !seen.insert(path.clone()) {
            problems.push(format!("{path:?} listed twice"));
        }
        let Some(exp) = expected.get(&path) else {
            problems.push(format!("{path:?} listed but not in the source"));
            continue;
        };
        let node = &l["node"];
        let Some((rel, e)) = exp else {
            if node["type"] != "dir" {
                problems.push(format!("{path:?}: a directory above the source listed as {}", node["type"]));
            }
            continue;
        };
        let abs = if rel.as_os_str().is_empty() { src.clone() } else { src.join(rel) };
        if name_bytes(&node["name"]) != name_of(&abs) {
            problems.push(format!("{path:?}: name {} is not {}", node["name"], show_bytes(name_of(&abs))));
        }
        if node["type"] != e.kind.json_name() {
            problems.push(format!("{path:?}: type {} is not {}", node["type"], e.kind.json_name()));
        }
        if node["mode"] != e.mode {
            problems.push(format!("{path:?}: mode {} is not {}", node["mode"], e.mode));
        }
        let mtime = jiff::Timestamp::new(e.mtime.0, e.mtime.1 as i32).unwrap().to_string();
        if node["mtime"] != mtime.as_str() {
            problems.push(format!("{path:?}: mtime {} is not {:?}", node["mtime"], e.mtime));
        }
        if e.kind == Kind::File && node["size"].as_u64().unwrap_or(0) != e.size {
            problems.push(format!("{path:?}: size {} is not {}", node["size"], e.size));
        }
    }
    for p in expected.keys() {
        if !seen.contains(p) {
            problems.push(format!("{p:?} not listed"));
        }
    }
    assert!(problems.is_empty(), "ls --json:\n  {}", problems.join("\n  "));
    assert!(built.socket.is_none() || seen.contains(&src.join("special/socket").to_string_lossy().into_owned()));

    // With a path: that entry and everything below it, nothing else.
    let files = src.join("files");
    let sub = ls(&[&id, s(&files)]);
    let got: BTreeSet<String> = sub.iter().map(|l| l["path"].as_str().unwrap().to_string()).collect();
    let want: BTreeSet<String> = expected.keys().filter(|k| Path::new(k).starts_with(&files)).cloned().collect();
    assert_eq!(got, want);

    // The text listing has one line per entry too (names may contain newlines, so
    // only count when none does).
    let out = env.run(&["ls", &id]);
    assert_success(&out);
    let newlines = all.keys().filter(|k| k.as_os_str().as_bytes().contains(&b'\n')).count();
    assert_eq!(text(&out.stdout).lines().count(), lines.len() + newlines);
}

#[test]
fn restore_into_non_empty_target() {
    let env = Env::new();
    let src = env.path("src");
    build_tree(&src, false);
    let id = env.backup(&[&src]);
    let spec = at(&id, &src);

    let target = env.path("target");
    let outside = env.path("outside");
    mkdir(&target);
    mkdir(&outside);
    write(target.join("keep.txt"), b"original content\n");
    // Conflicts: a file where the snapshot has a directory, a symlink leading out of
    // the target where the snapshot has a directory, a directory where it has a
    // symlink, a file with other content, and an existing directory with an extra
    // file in it.
    write(target.join("files"), b"a file in the way\n");
    symlink(&outside, &target.join("a"));
    mkdir(&target.join("links/rel"));
    write(target.join("links/rel/x"), b"x");
    mkdir(&target.join("hard/one"));
    write(target.join("hard/one/h1"), b"stale");
    mkdir(&target.join("empty"));
    write(target.join("empty/extra.txt"), b"extra\n");
    let state = scan(&target);

    let out: Output = env.run(&["restore", &spec, "--target", s(&target)]);
    let err = assert_code(&out, 21);
    eprintln!("non-empty target: {}", err.trim());
    let now = scan(&target);
    compare(&target, &state, &target, &now, CompareOpts { links: true });
    assert_eq!(fs::read(target.join("keep.txt")).unwrap(), b"original content\n");
    assert_eq!(fs::read_dir(&outside).unwrap().count(), 0);

    // --json reports the same code.
    let out = env.run(&["--json", "restore", &spec, "--target", s(&target)]);
    assert_code(&out, 21);

    // --overwrite replaces what is in the way and leaves the rest alone.
    restore(&env, &[&spec, "--target", s(&target), "--overwrite"]);
    assert_eq!(fs::read(target.join("keep.txt")).unwrap(), b"original content\n");
    assert_eq!(fs::read(target.join("empty/extra.txt")).unwrap(), b"extra\n");
    assert_eq!(fs::read_dir(&outside).unwrap().count(), 0, "restore wrote through a symlink in the target");
    let mut want = scan(&src);
    want.retain(|k, e| !k.as_os_str().is_empty() && e.kind != Kind::Socket);
    let mut got = scan(&target);
    got.remove(Path::new(""));
    got.remove(Path::new("keep.txt"));
    got.remove(Path::new("empty/extra.txt"));
    // The extra file's own metadata aside, "empty" must carry the snapshot's.
    compare(&src, &want, &target, &got, CompareOpts { links: true });

    // Restoring again over an identical tree with --overwrite is fine too.
    restore(&env, &[&spec, "--target", s(&target), "--overwrite"]);
    let mut again = scan(&target);
    again.remove(Path::new(""));
    again.remove(Path::new("keep.txt"));
    again.remove(Path::new("empty/extra.txt"));
    compare(&src, &want, &target, &again, CompareOpts { links: true });
}

/// `restore --overwrite --include PATTERN` when the target already holds a symlink
/// where the snapshot has a directory that is not itself included: the restore must
/// not write (or change metadata) through that symlink, outside the target.
#[test]
fn overwrite_with_include_does_not_follow_symlinks_in_the_target() {
    let env = Env::new();
    let src = env.path("src");
    mkdir(&src.join("a/b"));
    write(src.join("a/b/deep.txt"), b"deep\n");
    write(src.join("top.txt"), b"top\n");
    chmod(&src.join("a"), 0o750);
    let id = env.backup(&[&src]);

    let target = env.path("target");
    let outside = env.path("outside");
    mkdir(&target);
    mkdir(&outside);
    chmod(&outside, 0o711);
    set_mtime(&outside, 1_000_000_000, 1);
    symlink(&outside, &target.join("a"));
    let outside_before = read_entry(&outside);

    let spec = at(&id, &src);
    let out = env.run(&["restore", &spec, "--target", s(&target), "--overwrite", "--include", "deep.txt"]);
    let escaped: Vec<PathBuf> = scan(&outside).into_keys().filter(|k| !k.as_os_str().is_empty()).collect();
    let outside_after = read_entry(&outside);
    assert!(
        escaped.is_empty(),
        "restore wrote through the symlink {} into {}: {escaped:?} (exit {:?}, stderr {})",
        target.join("a").display(),
        outside.display(),
        out.status.code(),
        text(&out.stderr)
    );
    assert_eq!(
        (outside_after.mode, outside_after.mtime),
        (outside_before.mode, outside_before.mtime),
        "restore changed the metadata of {} through the symlink {}",
        outside.display(),
        target.join("a").display()
    );
    // As without --include: what stood in the way was replaced.
    assert_success(&out);
    assert_eq!(read_entry(&target.join("a")).kind, Kind::Dir);
    assert_eq!(fs::read(target.join("a/b/deep.txt")).unwrap(), b"deep\n");
    assert!(!target.join("top.txt").exists());
}

/// File capabilities (the `security.capability` attribute, e.g. on ping) must
/// survive a restore as root. The kernel drops that attribute on every chown of
/// a regular file, so it must be applied after the owner.
#[test]
fn file_capabilities_survive_restore() {
    if !is_root() {
        eprintln!("NOTE: not root: file capabilities not tested");
        return;
    }
    let env = Env::new();
    let src = env.path("src");
    mkdir(&src);
    let file = src.join("ping");
    write(&file, b"#!/bin/sh\n");
    chmod(&file, 0o755);
    // VFS_CAP_REVISION_2 | effective; permitted = CAP_NET_RAW; inheritable none.
    let mut cap = Vec::new();
    for w in [0x0200_0001u32, 1 << 13, 0, 0, 0] {
        cap.extend_from_slice(&w.to_le_bytes());
    }
    if let Err(e) = xattr::set(&file, "security.capability", &cap) {
        eprintln!("NOTE: cannot set file capabilities ({e}): not tested");
        return;
    }
    let owned = src.join("owned_ping");
    write(&owned, b"#!/bin/sh\n");
    lchown(&owned, OTHER_UID, OTHER_GID);
    chmod(&owned, 0o750);
    xattr::set(&owned, "security.capability", &cap).unwrap();
    let id = env.backup(&[&src]);
    let target = env.path("out");
    restore(&env, &[&at(&id, &src), "--target", s(&target)]);
    let mut want = scan(&src);
    let mut got = scan(&target);
    want.remove(Path::new(""));
    got.remove(Path::new(""));
    compare(&src, &want, &target, &got, CompareOpts { links: true });
}

/// The comparison itself: identical trees compare equal, and each kind of
/// difference is reported with the path and the field.
#[test]
fn comparison_catches_differences() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a");
    build_tree(&a, false);
    let sa = scan(&a);
    // Another copy of the tree; its absolute symlink is made to point where a's does.
    let copy = |name: &str| -> PathBuf {
        let c = dir.path().join(name);
        build_tree(&c, false);
        let link = c.join("links/abs");
        let parent = read_entry(&c.join("links"));
        fs::remove_file(&link).unwrap();
        symlink(a.join("files/small.txt"), &link);
        set_mtime(&c.join("links"), parent.mtime.0, parent.mtime.1 as u32);
        let e = &sa[Path::new("links/abs")];
        set_mtime(&link, e.mtime.0, e.mtime.1 as u32);
        if is_root() {
            lchown(&link, e.uid, e.gid);
        }
        c
    };
    let b = copy("b");
    compare(&a, &sa, &b, &scan(&b), CompareOpts { links: true });

    let expect = |what: &str, change: &dyn Fn(&Path)| {
        let c = copy(&format!("c-{}", what.replace(' ', "_")));
        change(&c);
        let diffs = differences(&a, &sa, &c, &scan(&c), CompareOpts { links: true });
        assert!(!diffs.is_empty(), "a change of {what} was not detected");
        assert!(diffs.len() == 1 && diffs[0].contains(what), "a change of {what} was reported as: {diffs:#?}");
    };
    // Runs `f`, then puts back the mtimes of `p` and of its parent directory.
    let keep_mtime = |p: &Path, f: &dyn Fn()| {
        let e = read_entry(p);
        let parent = p.parent().unwrap();
        let pe = read_entry(parent);
        f();
        set_mtime(p, e.mtime.0, e.mtime.1 as u32);
        set_mtime(parent, pe.mtime.0, pe.mtime.1 as u32);
    };
    expect("mode", &|c| chmod(&c.join("files/setuid"), 0o755));
    expect("mtime", &|c| set_mtime(&c.join("a/b"), 1, 2));
    expect("content differs from byte 41943040", &|c| {
        let p = c.join("sparse.img");
        keep_mtime(&p, &|| File::options().write(true).open(&p).unwrap().write_all_at(b"!", 40 * MIB).unwrap())
    });
    expect("size", &|c| {
        let p = c.join("files/empty");
        keep_mtime(&p, &|| write(&p, b"x"))
    });
    expect("symlink target", &|c| {
        let p = c.join("links/dangling");
        keep_mtime(&p, &|| {
            fs::remove_file(&p).unwrap();
            symlink("does/not/exis!", &p);
        })
    });
    expect("missing from the restored tree", &|c| {
        let d = c.join("names");
        keep_mtime(&d, &|| fs::remove_file(d.join(osstr(NAME_LATIN1))).unwrap())
    });
    expect("names sharing an inode", &|c| {
        // h3 becomes a separate file with the same content, and, to keep the link
        // counts equal, gets a second name outside the compared tree.
        let p = c.join("hard/h3");
        keep_mtime(&p, &|| {
            fs::remove_file(&p).unwrap();
            write(&p, b"one inode, three names\n");
        });
        fs::hard_link(c.join("hard/one/h1"), c.with_extension("h1-extra-name")).unwrap();
        fs::hard_link(&p, c.with_extension("h3-extra-names")).unwrap();
        fs::hard_link(&p, c.with_extension("h3-extra-names2")).unwrap();
    });
    if is_root() {
        expect("uid", &|c| lchown(&c.join("links/rel"), 0, OTHER_GID));
        expect("rdev", &|c| {
            let p = c.join("special/null");
            keep_mtime(&p, &|| {
                use rustix::fs::{CWD, FileType, Mode, makedev, mknodat};
                fs::remove_file(&p).unwrap();
                mknodat(CWD, &p, FileType::CharacterDevice, Mode::from_raw_mode(0o666), makedev(1, 5)).unwrap();
                chmod(&p, 0o666);
            })
        });
    }
    if xattrs_supported(dir.path()) {
        expect("xattrs", &|c| xattr::set(c.join("xattr/dir"), "user.dir", b"changed").unwrap());
    }
}

/// `restore SNAPSHOT:SUBPATH` where the subpath is not valid UTF-8 (as file names
/// need not be).
#[test]
fn restore_subpath_with_a_non_utf8_name() {
    use std::ffi::OsString;
    use std::os::unix::ffi::OsStringExt;
    let env = Env::new();
    let src = env.path("src");
    let dir = src.join(osstr(NAME_FFFE));
    mkdir(&dir);
    write(dir.join(osstr(NAME_LATIN1)), b"inside\n");
    let id = env.backup(&[&src]);
    let target = env.path("out");
    let mut spec = format!("{id}:").into_bytes();
    spec.extend_from_slice(dir.as_os_str().as_bytes());
    let out = env.cmd().arg("restore").arg(OsString::from_vec(spec)).arg("--target").arg(&target).output().unwrap();
    assert_success(&out);
    assert_eq!(fs::read(target.join(osstr(NAME_LATIN1))).unwrap(), b"inside\n");
}
