//! The tar reader against archives made by GNU tar (/usr/bin/tar) and archives built by
//! hand with the `tar` crate: formats, entry kinds, metadata, sparse files, extended
//! attributes, and damaged or hostile input.

use std::ffi::OsStr;
use std::fs;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use coffer_import::tar::{self, Entry, Error, Kind, Limits, Time};

/// Every entry of `archive` with its content, read to the end.
fn read_all_with(archive: &[u8], limits: &Limits) -> Result<Vec<(Entry, Vec<u8>)>, Error> {
    let mut out = Vec::new();
    tar::read(archive, limits, &mut |e: Entry, r: &mut dyn Read| -> Result<(), Error> {
        let mut data = Vec::new();
        r.read_to_end(&mut data)?;
        assert_eq!(data.len() as u64, e.size, "{}: content length differs from size", e.path_lossy());
        out.push((e, data));
        Ok(())
    })?;
    Ok(out)
}

fn read_all(archive: &[u8]) -> Result<Vec<(Entry, Vec<u8>)>, Error> {
    read_all_with(archive, &Limits::default())
}

fn find<'a>(entries: &'a [(Entry, Vec<u8>)], path: &[u8]) -> &'a (Entry, Vec<u8>) {
    entries.iter().find(|(e, _)| e.path == path).unwrap_or_else(|| {
        let names: Vec<_> = entries.iter().map(|(e, _)| e.path_lossy()).collect();
        panic!("no entry {} among {names:?}", String::from_utf8_lossy(path))
    })
}

/// Runs GNU tar in `dir` with `args`, returning the archive it writes to stdout.
fn gnu_tar(dir: &Path, args: &[&OsStr]) -> Vec<u8> {
    let out = Command::new("/usr/bin/tar").arg("-C").arg(dir).arg("-cf").arg("-").args(args).output().unwrap();
    assert!(out.status.success(), "tar failed: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

fn os(s: &str) -> &OsStr {
    OsStr::new(s)
}

fn run(cmd: &str, args: &[&OsStr]) {
    let st = Command::new(cmd).args(args).status().unwrap();
    assert!(st.success(), "{cmd} failed");
}

/// A tree of every kind, with long and non-UTF-8 names, big ids and old times.
fn make_tree(dir: &Path) {
    let long_dir = "d".repeat(60);
    let long_file = "f".repeat(120);
    fs::create_dir_all(dir.join(&long_dir)).unwrap();
    fs::write(dir.join(&long_dir).join(&long_file), b"long named content").unwrap();
    fs::write(dir.join("plain"), b"hello\n").unwrap();
    fs::write(dir.join(OsStr::from_bytes(b"caf\xe9")), b"latin-1 name").unwrap();
    fs::hard_link(dir.join("plain"), dir.join("hard")).unwrap();
    std::os::unix::fs::symlink("l".repeat(150), dir.join("sym")).unwrap();
    run("mkfifo", &[dir.join("fifo").as_os_str()]);
    run("mknod", &[dir.join("chr").as_os_str(), os("c"), os("1"), os("3")]);
    run("mknod", &[dir.join("blk").as_os_str(), os("b"), os("8"), os("1")]);
    fs::create_dir(dir.join("sub")).unwrap();
    run("chmod", &[os("4751"), dir.join("plain").as_os_str()]);
    run("chmod", &[os("1777"), dir.join("sub").as_os_str()]);
    run("touch", &[os("-h"), os("-d"), os("1969-07-20 20:17:40.123456789 UTC"), dir.join("plain").as_os_str()]);
}

fn check_tree(entries: &[(Entry, Vec<u8>)], long: bool, nanos: bool) {
    let (plain, data) = find(entries, b"plain");
    assert_eq!((plain.kind, data.as_slice()), (Kind::File, &b"hello\n"[..]));
    assert_eq!(plain.mode, 0o4751);
    assert_eq!(
        plain.mtime,
        if nanos { Time { secs: -14182940, nanos: 123456789 } } else { Time { secs: -14182940, nanos: 0 } }
    );
    assert_eq!(find(entries, b"caf\xe9").1, b"latin-1 name");
    let (hard, data) = find(entries, b"hard");
    assert_eq!((hard.kind, hard.link.as_deref(), hard.size), (Kind::HardLink, Some(&b"plain"[..]), 0));
    assert!(data.is_empty());
    assert_eq!(find(entries, b"fifo").0.kind, Kind::Fifo);
    let chr = &find(entries, b"chr").0;
    assert_eq!((chr.kind, chr.dev_major, chr.dev_minor), (Kind::CharDev, 1, 3));
    let blk = &find(entries, b"blk").0;
    assert_eq!((blk.kind, blk.dev_major, blk.dev_minor), (Kind::BlockDev, 8, 1));
    let sub = &find(entries, b"sub/").0;
    assert_eq!((sub.kind, sub.mode), (Kind::Dir, 0o1777));
    if long {
        let name = format!("{}/{}", "d".repeat(60), "f".repeat(120));
        assert_eq!(find(entries, name.as_bytes()).1, b"long named content");
        let sym = &find(entries, b"sym").0;
        assert_eq!((sym.kind, sym.link.clone()), (Kind::Symlink, Some("l".repeat(150).into_bytes())));
    }
}

fn tree_args() -> Vec<&'static OsStr> {
    ["--owner=alice:3000000", "--group=staff:4000001", "plain", "hard", "fifo", "chr", "blk", "sub", "sym"]
        .iter()
        .map(|s| os(s))
        .chain([OsStr::from_bytes(b"caf\xe9")])
        .collect()
}

#[test]
fn gnu_tar_pax() {
    let t = tempfile::tempdir().unwrap();
    make_tree(t.path());
    let mut args = vec![os("--format=pax")];
    args.extend(tree_args());
    args.push(os(&*Box::leak("d".repeat(60).into_boxed_str())));
    let entries = read_all(&gnu_tar(t.path(), &args)).unwrap();
    check_tree(&entries, true, true);
    let plain = &find(&entries, b"plain").0;
    assert_eq!((plain.uid, plain.gid), (3_000_000, 4_000_001));
    assert_eq!((plain.user.as_deref(), plain.group.as_deref()), (Some(&b"alice"[..]), Some(&b"staff"[..])));
    assert!(plain.atime.is_some() && plain.ctime.is_some());
}

#[test]
fn gnu_tar_gnu_format() {
    let t = tempfile::tempdir().unwrap();
    make_tree(t.path());
    let mut args = vec![os("--format=gnu")];
    args.extend(tree_args());
    args.push(os(&*Box::leak("d".repeat(60).into_boxed_str())));
    let archive = gnu_tar(t.path(), &args);
    // Long names as GNU 'L' and 'K' records; ids above 2^21 as base-256.
    assert!(archive.chunks(512).any(|b| b.len() == 512 && b[156] == b'L'));
    assert!(archive.chunks(512).any(|b| b.len() == 512 && b[156] == b'K'));
    let entries = read_all(&archive).unwrap();
    check_tree(&entries, true, false);
    let plain = &find(&entries, b"plain").0;
    assert_eq!((plain.uid, plain.gid), (3_000_000, 4_000_001));
    assert_eq!(plain.user.as_deref(), Some(&b"alice"[..]));
}

#[test]
fn gnu_tar_ustar() {
    let t = tempfile::tempdir().unwrap();
    make_tree(t.path());
    run("touch", &[os("-d"), os("2001-02-03 04:05:06 UTC"), t.path().join("plain").as_os_str()]);
    let args: Vec<&OsStr> =
        ["--format=ustar", "--owner=bob:1000", "--group=users:100", "plain", "hard", "fifo", "chr", "blk", "sub"]
            .iter()
            .map(|s| os(s))
            .collect();
    let entries = read_all(&gnu_tar(t.path(), &args)).unwrap();
    let plain = &find(&entries, b"plain").0;
    assert_eq!((plain.uid, plain.gid, plain.mtime.secs), (1000, 100, 981173106));
    assert_eq!(plain.group.as_deref(), Some(&b"users"[..]));
    assert_eq!(plain.atime, None);
    assert_eq!(find(&entries, b"hard").0.kind, Kind::HardLink);
    assert_eq!(find(&entries, b"chr").0.dev_minor, 3);
    // A name split between the ustar prefix and name fields.
    let deep = t.path().join("p".repeat(90)).join("q".repeat(90));
    fs::create_dir_all(&deep).unwrap();
    fs::write(deep.join("file"), b"x").unwrap();
    let name = format!("{}/{}/file", "p".repeat(90), "q".repeat(90));
    let entries = read_all(&gnu_tar(t.path(), &[os("--format=ustar"), os(&name)])).unwrap();
    assert_eq!(find(&entries, name.as_bytes()).1, b"x");
}

/// A header of `kind` with `name`, content `data`.
fn append(b: &mut ::tar::Builder<Vec<u8>>, ty: u8, name: &[u8], data: &[u8]) {
    let mut h = ::tar::Header::new_gnu();
    h.as_old_mut().name[..name.len()].copy_from_slice(name);
    h.set_mode(0o644);
    h.set_size(data.len() as u64);
    h.set_mtime(1_700_000_000);
    h.as_old_mut().linkflag[0] = ty;
    h.set_cksum();
    b.append(&h, data).unwrap();
}

#[test]
fn old_types_and_unsupported_ones() {
    let mut b = ::tar::Builder::new(Vec::new());
    append(&mut b, b'\0', b"old", b"old file");
    append(&mut b, b'7', b"contig", b"contiguous");
    append(&mut b, b'\0', b"olddir/", b"");
    append(&mut b, b'V', b"volume label", b"");
    append(&mut b, b'Z', b"unknown", b"data");
    append(&mut b, b'0', b"after", b"still read");
    let archive = b.into_inner().unwrap();
    let entries = read_all(&archive).unwrap();
    let kinds: Vec<_> = entries.iter().map(|(e, d)| (e.path_lossy(), e.kind, d.clone())).collect();
    assert_eq!(
        kinds,
        vec![
            ("old".into(), Kind::File, b"old file".to_vec()),
            ("contig".into(), Kind::File, b"contiguous".to_vec()),
            ("olddir/".into(), Kind::Dir, vec![]),
            ("volume label".into(), Kind::Unsupported(b'V'), vec![]),
            ("unknown".into(), Kind::Unsupported(b'Z'), b"data".to_vec()),
            ("after".into(), Kind::File, b"still read".to_vec()),
        ]
    );
    let msg = entries[3].0.unsupported().unwrap().to_string();
    assert!(msg.contains("`volume label`") && msg.contains("'V'") && msg.contains("volume header"), "{msg}");
    assert!(entries[0].0.unsupported().is_none());
}

fn pax_archive(records: &[(&str, &[u8])], name: &[u8], data: &[u8]) -> Vec<u8> {
    let mut b = ::tar::Builder::new(Vec::new());
    b.append_pax_extensions(records.iter().copied()).unwrap();
    append(&mut b, b'0', name, data);
    b.into_inner().unwrap()
}

#[test]
fn pax_records_override_the_header() {
    let archive = pax_archive(
        &[
            ("path", b"a/\xffname\nwith newline"),
            ("uid", b"123456789012"),
            ("gid", b"7"),
            ("uname", b"\xc3\xa9mile"),
            ("gname", b"g"),
            ("mtime", b"-1.25"),
            ("atime", b"1700000000.000000001"),
            ("SCHILY.xattr.user.bin", b"\x00\n\xff"),
        ],
        b"short",
        b"abc",
    );
    let entries = read_all(&archive).unwrap();
    let (e, data) = &entries[0];
    assert_eq!(e.path, b"a/\xffname\nwith newline");
    assert_eq!((e.uid, e.gid), (123456789012, 7));
    assert_eq!(e.user.as_deref(), Some("émile".as_bytes()));
    assert_eq!(e.mtime, Time { secs: -2, nanos: 750_000_000 });
    assert_eq!(e.atime, Some(Time { secs: 1_700_000_000, nanos: 1 }));
    assert_eq!(e.xattrs, vec![(b"user.bin".to_vec(), b"\x00\n\xff".to_vec())]);
    assert_eq!(data, b"abc");
}

#[test]
fn global_headers_apply_to_what_follows() {
    let mut b = ::tar::Builder::new(Vec::new());
    let mut g = Vec::new();
    for (k, v) in [("uname", "global"), ("mtime", "5.5"), ("SCHILY.xattr.user.g", "1"), ("path", "ignored")] {
        let rec = format!(" {k}={v}\n");
        let mut len = rec.len() + 1;
        if (len + 1).to_string().len() + rec.len() == len + 1 {
            len += 1;
        }
        g.extend_from_slice(format!("{len}{rec}").as_bytes());
    }
    append(&mut b, b'g', b"global", &g);
    append(&mut b, b'0', b"one", b"1");
    b.append_pax_extensions([("uname", &b"local"[..]), ("SCHILY.xattr.user.g", b"2")]).unwrap();
    append(&mut b, b'0', b"two", b"2");
    let entries = read_all(&b.into_inner().unwrap()).unwrap();
    assert_eq!(entries.len(), 2);
    let one = &entries[0].0;
    assert_eq!((one.path.as_slice(), one.user.as_deref()), (&b"one"[..], Some(&b"global"[..])));
    assert_eq!(one.mtime, Time { secs: 5, nanos: 500_000_000 });
    assert_eq!(one.xattrs, vec![(b"user.g".to_vec(), b"1".to_vec())]);
    let two = &entries[1].0;
    assert_eq!((two.path.as_slice(), two.user.as_deref()), (&b"two"[..], Some(&b"local"[..])));
    assert_eq!(two.xattrs, vec![(b"user.g".to_vec(), b"2".to_vec())]);
}

#[test]
fn libarchive_xattrs() {
    let archive = pax_archive(
        &[
            ("LIBARCHIVE.xattr.user.a%3Db%25", b"AAEC"),
            ("LIBARCHIVE.xattr.user.plain", b"aGVsbG8"),
            ("SCHILY.xattr.user.plain", b"hello"),
            ("SCHILY.xattr.security.x", b"v"),
        ],
        b"f",
        b"",
    );
    let e = &read_all(&archive).unwrap()[0].0;
    assert_eq!(
        e.xattrs,
        vec![
            (b"user.a=b%".to_vec(), vec![0, 1, 2]),
            (b"user.plain".to_vec(), b"hello".to_vec()),
            (b"security.x".to_vec(), b"v".to_vec()),
        ]
    );
    let bad = pax_archive(&[("LIBARCHIVE.xattr.user.a", b"!!!")], b"f", b"");
    let err = read_all(&bad).unwrap_err().to_string();
    assert!(err.contains("`f`") && err.contains("base64"), "{err}");
    let many: Vec<(String, Vec<u8>)> = (0..5).map(|i| (format!("SCHILY.xattr.user.{i}"), vec![b'v'])).collect();
    let many: Vec<(&str, &[u8])> = many.iter().map(|(k, v)| (k.as_str(), v.as_slice())).collect();
    let limits = Limits { max_xattrs: 4, ..Limits::default() };
    let err = read_all_with(&pax_archive(&many, b"f", b""), &limits).unwrap_err();
    assert!(err.to_string().contains("more than the 4 extended attributes"), "{err}");
}

/// A directory where user.* extended attributes can be set: the test's temporary
/// directory, or another on a file system that has them.
fn xattr_dir() -> tempfile::TempDir {
    let candidates = [std::env::temp_dir(), PathBuf::from("/var/tmp"), PathBuf::from(env!("CARGO_TARGET_TMPDIR"))];
    for base in candidates {
        let Ok(t) = tempfile::tempdir_in(&base) else { continue };
        let probe = t.path().join("probe");
        fs::write(&probe, b"").unwrap();
        if xattr::set(&probe, "user.probe", b"1").is_ok() {
            fs::remove_file(&probe).unwrap();
            return t;
        }
    }
    panic!("no directory here takes user.* extended attributes");
}

#[test]
fn gnu_tar_xattrs() {
    let t = xattr_dir();
    let f = t.path().join("file");
    fs::write(&f, b"with attributes").unwrap();
    xattr::set(&f, "user.one", b"first").unwrap();
    xattr::set(&f, "user.bin", b"\x00\x01\n\xff").unwrap();
    fs::create_dir(t.path().join("dir")).unwrap();
    xattr::set(t.path().join("dir"), "user.d", b"on a dir").unwrap();
    let archive =
        gnu_tar(t.path(), &[os("--format=pax"), os("--xattrs"), os("--xattrs-include=user.*"), os("file"), os("dir")]);
    let entries = read_all(&archive).unwrap();
    let (e, data) = find(&entries, b"file");
    assert_eq!(data, b"with attributes");
    let mut x = e.xattrs.clone();
    x.sort();
    assert_eq!(x, vec![(b"user.bin".to_vec(), b"\x00\x01\n\xff".to_vec()), (b"user.one".to_vec(), b"first".to_vec())]);
    assert_eq!(find(&entries, b"dir/").0.xattrs, vec![(b"user.d".to_vec(), b"on a dir".to_vec())]);
}

/// Sparse files: one ending in a hole, one ending in data, one all hole, one with many
/// segments.
fn make_sparse(dir: &Path) -> Vec<(&'static str, Vec<u8>)> {
    let mut out = Vec::new();
    let mut seed = 1u64;
    let mut noise = |n: usize| -> Vec<u8> {
        (0..n)
            .map(|_| {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (seed >> 56) as u8 | 1
            })
            .collect()
    };
    let mut holes_end = vec![0u8; 3 << 20];
    holes_end[100 * 4096..103 * 4096].copy_from_slice(&noise(3 * 4096));
    holes_end[700 * 4096..701 * 4096].copy_from_slice(&noise(4096));
    out.push(("holes_end", holes_end));
    let mut data_end = vec![0u8; 1 << 20];
    let n = data_end.len();
    data_end[..4096].copy_from_slice(&noise(4096));
    data_end[n - 5000..].copy_from_slice(&noise(5000));
    out.push(("data_end", data_end));
    out.push(("all_hole", vec![0u8; 2 << 20]));
    let mut many = vec![0u8; 200 * 8192];
    for i in 0..200 {
        many[i * 8192..i * 8192 + 100].copy_from_slice(&noise(100));
    }
    out.push(("many", many));
    for (name, content) in &out {
        let p = dir.join(name);
        let mut f = fs::File::create(&p).unwrap();
        // Written block by block, skipping zeros, so that the file has real holes.
        for (i, chunk) in content.chunks(4096).enumerate() {
            if chunk.iter().any(|b| *b != 0) {
                use std::os::unix::fs::FileExt;
                f.write_all_at(chunk, (i * 4096) as u64).unwrap();
            }
        }
        f.set_len(content.len() as u64).unwrap();
        f.flush().unwrap();
    }
    out
}

fn check_sparse(args: &[&str], expect_sparse_records: Option<&[u8]>) {
    let t = tempfile::tempdir().unwrap();
    let files = make_sparse(t.path());
    let mut a: Vec<&OsStr> = args.iter().map(|s| os(s)).collect();
    a.extend(files.iter().map(|(n, _)| os(n)));
    let archive = gnu_tar(t.path(), &a);
    if let Some(needle) = expect_sparse_records {
        assert!(archive.windows(needle.len()).any(|w| w == needle), "{args:?}: no {needle:?} in the archive");
    }
    assert!(archive.len() < 1 << 20, "{args:?}: the archive ({} bytes) is not sparse", archive.len());
    let entries = read_all(&archive).unwrap();
    assert_eq!(entries.len(), files.len());
    for ((e, data), (name, content)) in entries.iter().zip(&files) {
        assert_eq!(e.path, name.as_bytes(), "{args:?}");
        assert_eq!(e.size, content.len() as u64, "{args:?} {name}");
        assert!(data == content, "{args:?} {name}: content differs");
        assert_eq!(e.kind, Kind::File);
    }
    assert!(entries.iter().filter(|(e, _)| e.sparse).count() >= 3, "{args:?}: not read as sparse");
}

#[test]
fn sparse_pax_1_0() {
    check_sparse(&["--sparse", "--format=pax", "--sparse-version=1.0"], Some(b"GNU.sparse.major=1"));
}

#[test]
fn sparse_pax_0_1() {
    check_sparse(&["--sparse", "--format=pax", "--sparse-version=0.1"], Some(b"GNU.sparse.map="));
}

#[test]
fn sparse_pax_0_0() {
    check_sparse(&["--sparse", "--format=pax", "--sparse-version=0.0"], Some(b"GNU.sparse.offset="));
}

#[test]
fn sparse_gnu_old() {
    // 'many' has 200 segments: the old GNU header's extension blocks.
    check_sparse(&["--sparse", "--format=gnu"], None);
    let t = tempfile::tempdir().unwrap();
    make_sparse(t.path());
    let archive = gnu_tar(t.path(), &[os("--sparse"), os("--format=gnu"), os("many")]);
    assert_eq!(archive[156], b'S');
    let limits = Limits { max_sparse_segments: 50, ..Limits::default() };
    let err = read_all_with(&archive, &limits).unwrap_err();
    assert!(matches!(err, Error::SparseMap { .. }), "{err}");
    assert!(err.to_string().contains("`many`"), "{err}");
}

fn sparse_10(map: &str, stored: &[u8], real: &str) -> Vec<u8> {
    let mut data = map.as_bytes().to_vec();
    data.resize(data.len().div_ceil(512) * 512, 0);
    data.extend_from_slice(stored);
    pax_archive(
        &[
            ("GNU.sparse.major", b"1"),
            ("GNU.sparse.minor", b"0"),
            ("GNU.sparse.name", b"real"),
            ("GNU.sparse.realsize", real.as_bytes()),
        ],
        b"GNUSparseFile.1/real",
        &data,
    )
}

#[test]
fn sparse_maps_are_checked() {
    let good = sparse_10("2\n2\n3\n10\n2\n", b"abcde", "14");
    let entries = read_all(&good).unwrap();
    assert_eq!(entries[0].0.path, b"real");
    assert_eq!(entries[0].1, b"\0\0abc\0\0\0\0\0de\0\0");
    let bad = [
        sparse_10("99999999999999\n", b"", "14"),
        sparse_10("1\n99999999999999999999999\n1\n", b"a", "14"),
        sparse_10("2\n5\n3\n4\n2\n", b"abcde", "14"),
        sparse_10("1\n13\n5\n", b"abcde", "14"),
        sparse_10("1\n0\n4\n", b"abcde", "14"),
        sparse_10("1\n0\n5\n", b"abcde", "18446744073709551616"),
        sparse_10("1\n0\nfive\n", b"abcde", "14"),
        pax_archive(
            &[("GNU.sparse.size", b"10"), ("GNU.sparse.numblocks", b"1"), ("GNU.sparse.map", b"8,5")],
            b"f",
            b"abcde",
        ),
        pax_archive(
            &[("GNU.sparse.size", b"10"), ("GNU.sparse.numblocks", b"2"), ("GNU.sparse.map", b"0,5")],
            b"f",
            b"abcde",
        ),
        pax_archive(&[("GNU.sparse.size", b"10"), ("GNU.sparse.numbytes", b"5")], b"f", b"abcde"),
        pax_archive(&[("GNU.sparse.major", b"2"), ("GNU.sparse.minor", b"0")], b"f", b"abcde"),
    ];
    for (i, archive) in bad.iter().enumerate() {
        match read_all(archive) {
            Err(Error::SparseMap { .. }) => {}
            other => panic!("bad map {i}: {other:?}"),
        }
    }
    let limits = Limits { max_sparse_segments: 1, ..Limits::default() };
    let err = read_all_with(&sparse_10("2\n0\n1\n5\n1\n", b"ab", "14"), &limits).unwrap_err();
    assert!(err.to_string().contains("more than the 1 accepted"), "{err}");
}

/// A header of type `ty` stating `size` bytes, followed by only a few.
fn huge_header(ty: u8, size: u64) -> Vec<u8> {
    let mut h = ::tar::Header::new_gnu();
    h.as_old_mut().name[..5].copy_from_slice(b"huge!");
    h.set_size(size);
    h.set_entry_type(::tar::EntryType::new(ty));
    h.set_cksum();
    let mut v = h.as_bytes().to_vec();
    v.extend_from_slice(b"12 path=abc\n");
    v.resize(v.len() + 2000, b'a');
    v
}

#[test]
fn huge_metadata_records_are_refused_at_their_header() {
    for (ty, what) in
        [(b'x', "PAX extended header"), (b'g', "PAX global header"), (b'L', "GNU long name"), (b'K', "GNU long link")]
    {
        let err = read_all(&huge_header(ty, 8 << 30)).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, Error::TooLarge { size, offset: 0, .. } if size == 8 << 30), "{msg}");
        assert!(
            msg.contains(what) && msg.contains("8 GiB") && msg.contains("1 MiB") && msg.contains("`huge!`"),
            "{msg}"
        );
    }
    // Just under the limit passes the guard (and then is truncated).
    let limits = Limits { max_meta: 4096, ..Limits::default() };
    assert!(matches!(read_all_with(&huge_header(b'x', 4096), &limits), Err(Error::Truncated { .. })));
    assert!(matches!(read_all_with(&huge_header(b'x', 4097), &limits), Err(Error::TooLarge { .. })));
    // A PAX size record of 8 GiB on a file is no allocation: the content streams; here it is
    // truncated.
    let archive = pax_archive(&[("size", b"8589934592")], b"big", b"abc");
    let err = tar::read(&archive[..], &Limits::default(), &mut |_e, r: &mut dyn Read| -> Result<(), Error> {
        let mut buf = [0u8; 4096];
        while r.read(&mut buf)? > 0 {}
        Ok(())
    })
    .unwrap_err();
    assert!(matches!(err, Error::Truncated { .. }), "{err}");
}

fn sample_archive() -> Vec<u8> {
    let mut b = ::tar::Builder::new(Vec::new());
    append(&mut b, b'0', b"first", &vec![b'1'; 1500]);
    append(&mut b, b'0', b"second", &vec![b'2'; 700]);
    b.into_inner().unwrap()
}

#[test]
fn truncated_archives_are_reported() {
    let full = sample_archive();
    assert_eq!(read_all(&full).unwrap().len(), 2);
    // Mid-header, mid-data, mid-padding, at a block boundary without the end blocks.
    for cut in [100, 512 + 700, 512 + 1500 + 10, 2048 + 200, 2048 + 512 + 300, 2048 + 512 + 1024] {
        let err = read_all(&full[..cut]).unwrap_err();
        assert!(matches!(err, Error::Truncated { .. }), "cut at {cut}: {err}");
        assert!(err.to_string().contains("truncated"), "{err}");
    }
    // A content reader never yields fewer bytes than `size` without an error.
    let cut = &full[..512 + 1000];
    let mut got = 0;
    let err = tar::read(cut, &Limits::default(), &mut |e: Entry, r: &mut dyn Read| -> Result<(), Error> {
        let mut data = Vec::new();
        let res = r.read_to_end(&mut data);
        got = data.len();
        assert_eq!(e.size, 1500);
        res?;
        Ok(())
    })
    .unwrap_err();
    assert_eq!(got, 1000);
    let msg = err.to_string();
    assert!(matches!(err, Error::Truncated { offset: 1512, .. }) && msg.contains("`first`"), "{msg}");
    // The end after one zero block is accepted, as GNU tar does.
    assert_eq!(read_all(&full[..3584 + 512]).unwrap().len(), 2);
}

#[test]
fn damaged_and_empty_input() {
    let mut bad = sample_archive();
    bad[10] ^= 1;
    let err = read_all(&bad).unwrap_err();
    assert!(matches!(err, Error::Header { offset: 0, .. }) && err.to_string().contains("checksum"), "{err}");
    let mut second = sample_archive();
    second[2048 + 3] ^= 0x20;
    let err = read_all(&second).unwrap_err();
    assert!(matches!(err, Error::Header { offset: 2048, .. }), "{err}");
    let garbage: Vec<u8> = (0..4096u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    assert!(matches!(read_all(&garbage), Err(Error::Header { .. })));
    assert!(matches!(read_all(b"hello, not a tar archive"), Err(Error::Truncated { .. })));
    assert!(read_all(b"").unwrap().is_empty());
    assert!(read_all(&[0u8; 1024]).unwrap().is_empty());
    assert!(read_all(&[0u8; 10240]).unwrap().is_empty());
    // PAX header that describes no entry.
    let mut b = ::tar::Builder::new(Vec::new());
    b.append_pax_extensions([("path", &b"x"[..])]).unwrap();
    let err = read_all(&b.into_inner().unwrap()).unwrap_err();
    assert!(matches!(err, Error::Header { .. }), "{err}");
}

#[test]
fn callback_errors_end_the_read_and_content_may_be_left() {
    let full = sample_archive();
    let mut seen = 0;
    let r = tar::read(&full[..], &Limits::default(), &mut |_e, _r| -> Result<(), Error> {
        seen += 1;
        Ok(())
    });
    assert!(r.is_ok());
    assert_eq!(seen, 2);
    #[derive(Debug)]
    enum Mine {
        Stop,
        Tar(#[allow(dead_code)] Error),
    }
    impl From<Error> for Mine {
        fn from(e: Error) -> Self {
            Mine::Tar(e)
        }
    }
    let mut seen = 0;
    let r = tar::read(&full[..], &Limits::default(), &mut |_e, _r| -> Result<(), Mine> {
        seen += 1;
        Err(Mine::Stop)
    });
    assert!(matches!(r, Err(Mine::Stop)));
    assert_eq!(seen, 1);
}

#[test]
fn read_errors_of_the_input() {
    struct Failing(Vec<u8>, usize);
    impl Read for Failing {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if self.1 >= self.0.len() {
                return Err(std::io::Error::other("disk on fire"));
            }
            let n = buf.len().min(self.0.len() - self.1).min(100);
            buf[..n].copy_from_slice(&self.0[self.1..self.1 + n]);
            self.1 += n;
            Ok(n)
        }
    }
    let full = sample_archive();
    for cut in [300, 1000, 2600] {
        let err = tar::read(Failing(full[..cut].to_vec(), 0), &Limits::default(), &mut |_e, r: &mut dyn Read| {
            std::io::copy(r, &mut std::io::sink())?;
            Ok::<(), Error>(())
        })
        .unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, Error::Io { offset: Some(o), .. } if o == cut as u64), "cut {cut}: {msg}");
        assert!(msg.contains("disk on fire"), "{msg}");
    }
}
