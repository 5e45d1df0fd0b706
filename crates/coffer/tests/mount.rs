//! `coffer mount` through the kernel (docs/design.md#mount): the tree under the
//! mount matches the source in content and metadata, new snapshots appear while
//! mounted, a damaged pack gives EIO for exactly the file it holds, and the
//! command exits 0 on `umount` and on SIGTERM. Needs root and /dev/fuse; skipped
//! with a notice otherwise.
#![cfg(all(feature = "mount", target_os = "linux"))]

mod common;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::{Env, random_bytes, text};

fn can_mount() -> bool {
    if !rustix::process::geteuid().is_root() || !Path::new("/dev/fuse").exists() {
        eprintln!("notice: mount tests skipped: they need root and /dev/fuse");
        return false;
    }
    true
}

fn mounted(mp: &Path) -> bool {
    let mounts = fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let mp = mp.to_string_lossy();
    mounts.lines().any(|l| l.split(' ').nth(1) == Some(&*mp))
}

/// A running `coffer mount`, unmounted and stopped on drop whatever happens.
struct Mount {
    mp: PathBuf,
    child: Option<Child>,
    stderr: PathBuf,
}

impl Mount {
    fn start(env: &Env, name: &str) -> Mount {
        Self::start_with(env, name, &[])
    }

    /// [`Mount::start`] with more options for `coffer mount`.
    fn start_with(env: &Env, name: &str, options: &[&str]) -> Mount {
        let mp = env.path(name);
        fs::create_dir_all(&mp).unwrap();
        let stderr = env.path(&format!("{name}.stderr"));
        let child = env
            .cmd()
            .args(["mount", "--cache-size", "8M"])
            .args(options)
            .arg(&mp)
            .stdout(Stdio::null())
            .stderr(fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap();
        let m = Mount { mp, child: Some(child), stderr };
        let start = Instant::now();
        while !m.mp.join("snapshots").exists() {
            assert!(start.elapsed() < Duration::from_secs(30), "mount did not appear: {}", m.stderr_text());
            std::thread::sleep(Duration::from_millis(50));
        }
        m
    }

    fn stderr_text(&self) -> String {
        fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Waits for the command to exit and returns whether it exited 0.
    fn wait(&mut self) -> bool {
        let mut child = self.child.take().unwrap();
        let start = Instant::now();
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status.success();
            }
            assert!(start.elapsed() < Duration::from_secs(20), "mount did not exit: {}", self.stderr_text());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The directory of the only snapshot, or of the one named `name`.
    fn snapshot_dirs(&self) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = fs::read_dir(self.mp.join("snapshots"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.file_name().unwrap() != "latest")
            .collect();
        v.sort();
        v
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if mounted(&self.mp) {
            let _ = std::process::Command::new("umount").arg("-l").arg(&self.mp).status();
        }
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn xattrs(p: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = xattr::list(p)
        .unwrap()
        .filter(|n| n.to_string_lossy().starts_with("user."))
        .map(|n| (n.to_string_lossy().into_owned(), xattr::get(p, &n).unwrap().unwrap_or_default()))
        .collect();
    v.sort();
    v
}

/// Compares every entry below `src` with its counterpart below `got`.
fn compare(src: &Path, got: &Path) -> usize {
    let mut n = 0;
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let (s, g) = (src.join(&rel), got.join(&rel));
        let (ms, mg) = (fs::symlink_metadata(&s).unwrap(), fs::symlink_metadata(&g).unwrap());
        assert_eq!(ms.file_type(), mg.file_type(), "{rel:?}: kind");
        assert_eq!(ms.permissions().mode() & 0o7777, mg.permissions().mode() & 0o7777, "{rel:?}: mode");
        assert_eq!((ms.uid(), ms.gid()), (mg.uid(), mg.gid()), "{rel:?}: owner");
        if !ms.is_dir() {
            assert_eq!((ms.mtime(), ms.mtime_nsec()), (mg.mtime(), mg.mtime_nsec()), "{rel:?}: mtime");
        }
        if ms.is_file() {
            assert_eq!(ms.len(), mg.len(), "{rel:?}: size");
            assert!(fs::read(&s).unwrap() == fs::read(&g).unwrap(), "{rel:?}: content");
            assert_eq!(xattrs(&s), xattrs(&g), "{rel:?}: xattrs");
            assert_eq!(ms.nlink(), mg.nlink(), "{rel:?}: link count");
        } else if ms.file_type().is_symlink() {
            assert_eq!(fs::read_link(&s).unwrap(), fs::read_link(&g).unwrap(), "{rel:?}: target");
        } else if ms.is_dir() {
            let mut names: Vec<_> = fs::read_dir(&s).unwrap().map(|e| e.unwrap().file_name()).collect();
            let mut got_names: Vec<_> = fs::read_dir(&g).unwrap().map(|e| e.unwrap().file_name()).collect();
            names.sort();
            got_names.sort();
            assert_eq!(names, got_names, "{rel:?}: entries");
            stack.extend(names.into_iter().map(|name| rel.join(name)));
        }
        n += 1;
    }
    n
}

fn in_mount(snapshot_dir: &Path, src: &Path) -> PathBuf {
    snapshot_dir.join(src.strip_prefix("/").unwrap())
}

#[test]
fn the_mount_shows_each_snapshot_as_backed_up_and_new_ones_appear() {
    if !can_mount() {
        return;
    }
    let env = Env::new();
    let src = env.path("src");
    fs::create_dir_all(src.join("dir/nested/deeper")).unwrap();
    fs::write(src.join("small.txt"), b"hello mount\n").unwrap();
    fs::write(src.join("dir/nested/big.bin"), random_bytes(5 << 20, 7)).unwrap();
    fs::write(src.join("empty"), b"").unwrap();
    fs::write(src.join("dir/h1"), random_bytes(70_000, 8)).unwrap();
    fs::hard_link(src.join("dir/h1"), src.join("dir/nested/h2")).unwrap();
    symlink("../small.txt", src.join("dir/link")).unwrap();
    let sparse = fs::File::create(src.join("sparse")).unwrap();
    sparse.set_len(8 << 20).unwrap();
    std::os::unix::fs::FileExt::write_at(&sparse, &random_bytes(5000, 9), 3 << 20).unwrap();
    drop(sparse);
    fs::set_permissions(src.join("small.txt"), fs::Permissions::from_mode(0o640)).unwrap();
    fs::set_permissions(src.join("dir/nested/deeper"), fs::Permissions::from_mode(0o700)).unwrap();
    xattr::set(src.join("small.txt"), "user.comment", b"kept").unwrap();
    let first = env.backup(&[&src]);

    let mut m = Mount::start(&env, "mnt");
    let snaps = m.snapshot_dirs();
    assert_eq!(snaps.len(), 1, "one snapshot: {snaps:?}");
    let name = snaps[0].file_name().unwrap().to_owned();
    assert!(name.to_string_lossy().ends_with('Z'), "named by its time: {name:?}");
    assert_eq!(fs::read_link(m.mp.join("snapshots/latest")).unwrap(), Path::new(&name));
    let root = in_mount(&snaps[0], &src);
    assert!(compare(&src, &root) >= 10);
    // Hard links share an inode number; other files do not.
    let ino = |p: &str| fs::metadata(root.join(p)).unwrap().ino();
    assert_eq!(ino("dir/h1"), ino("dir/nested/h2"));
    assert_ne!(ino("dir/h1"), ino("small.txt"));
    // The same snapshot under ids/ and hosts/.
    let by_id = m.mp.join("ids").join(&first[..8]);
    assert_eq!(fs::read(in_mount(&by_id, &src).join("small.txt")).unwrap(), b"hello mount\n");
    let hosts: Vec<_> = fs::read_dir(m.mp.join("hosts")).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(hosts.len(), 1);
    assert_eq!(fs::read(in_mount(&hosts[0].join("latest"), &src).join("empty")).unwrap(), b"");
    // Reading at an offset in the middle of a multi-blob file.
    let big = fs::read(src.join("dir/nested/big.bin")).unwrap();
    let f = fs::File::open(root.join("dir/nested/big.bin")).unwrap();
    let mut buf = vec![0; 100_000];
    std::os::unix::fs::FileExt::read_exact_at(&f, &mut buf, 3_000_001).unwrap();
    assert!(buf == big[3_000_001..3_100_001]);
    assert_eq!(fs::read(root.join("nonexistent")).unwrap_err().kind(), std::io::ErrorKind::NotFound);
    assert!(fs::write(root.join("small.txt"), b"x").is_err(), "the mount is read-only");

    // A backup made while mounted shows up without remounting.
    fs::write(src.join("added.txt"), b"second").unwrap();
    let second = env.backup(&[&src]);
    assert_ne!(first, second);
    let start = Instant::now();
    while m.snapshot_dirs().len() < 2 {
        assert!(start.elapsed() < Duration::from_secs(20), "the new snapshot did not appear");
        std::thread::sleep(Duration::from_millis(200));
    }
    let newest = m.snapshot_dirs().into_iter().find(|d| d.file_name() != Some(&name)).unwrap();
    assert_eq!(fs::read(in_mount(&newest, &src).join("added.txt")).unwrap(), b"second");
    assert!(m.mp.join("ids").join(&second[..8]).exists());
    drop(f);

    let out = std::process::Command::new("umount").arg(&m.mp).output().unwrap();
    assert!(out.status.success(), "umount: {}", String::from_utf8_lossy(&out.stderr));
    assert!(m.wait(), "coffer mount exits 0 after umount: {}", m.stderr_text());
    assert!(!mounted(&m.mp));
}

#[test]
fn a_damaged_pack_fails_reads_of_exactly_its_file_and_sigterm_unmounts() {
    if !can_mount() {
        return;
    }
    let env = Env::new();
    let src = env.path("src");
    fs::create_dir_all(&src).unwrap();
    let good = random_bytes(200_000, 1);
    fs::write(src.join("good.bin"), &good).unwrap();
    env.backup(&[&src]);
    let before: Vec<PathBuf> = common::files_under(&env.repo().join("data"));
    fs::write(src.join("bad.bin"), random_bytes(400_000, 2)).unwrap();
    env.backup(&[&src]);
    // The largest new pack holds bad.bin's data (trees are small): flip a byte
    // in its middle.
    let pack = common::files_under(&env.repo().join("data"))
        .into_iter()
        .filter(|p| !before.contains(p))
        .max_by_key(|p| fs::metadata(p).unwrap().len())
        .unwrap();
    let mut bytes = fs::read(&pack).unwrap();
    assert!(bytes.len() > 300_000, "the new data pack");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    fs::write(&pack, bytes).unwrap();

    let mut m = Mount::start(&env, "mnt");
    let latest = in_mount(&m.mp.join("snapshots/latest"), &src);
    assert!(fs::read(latest.join("good.bin")).unwrap() == good, "other files read");
    let err = fs::read(latest.join("bad.bin")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc_eio()), "EIO, never wrong bytes: {err}");
    assert!(fs::metadata(latest.join("bad.bin")).unwrap().len() == 400_000, "metadata still there");

    let pid = rustix::process::Pid::from_child(m.child.as_ref().unwrap());
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    assert!(m.wait(), "coffer mount exits 0 on SIGTERM: {}", m.stderr_text());
    assert!(!mounted(&m.mp), "SIGTERM unmounts");
    let stderr = m.stderr_text();
    assert!(stderr.contains("bad.bin") && stderr.contains("error:"), "damage reported: {stderr}");
    assert!(!stderr.contains("good.bin"), "{stderr}");
}

/// `cat PATH` run as user and group `nobody` (65534) with no other group.
fn cat_as_nobody(path: &Path) -> std::process::Output {
    std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "cat"])
        .arg(path)
        .output()
        .expect("run setpriv")
}

/// Regression: with `--allow-other` every user read every file of the mount,
/// whatever its recorded owner and mode. Now the kernel checks them
/// (`default_permissions`) and so does the file system.
#[test]
fn a_mount_shared_with_other_users_keeps_to_each_files_mode() {
    if !can_mount() {
        return;
    }
    let env = Env::new();
    // The way down to the mount and to the files in the snapshot is open to all.
    fs::set_permissions(env.dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let src = env.path("src");
    fs::create_dir_all(src.join("private")).unwrap();
    fs::set_permissions(&src, fs::Permissions::from_mode(0o755)).unwrap();
    fs::write(src.join("secret"), b"root only\n").unwrap();
    fs::set_permissions(src.join("secret"), fs::Permissions::from_mode(0o600)).unwrap();
    fs::write(src.join("public"), b"for everyone\n").unwrap();
    fs::set_permissions(src.join("public"), fs::Permissions::from_mode(0o644)).unwrap();
    fs::write(src.join("private/inside"), b"behind a closed directory\n").unwrap();
    fs::set_permissions(src.join("private/inside"), fs::Permissions::from_mode(0o644)).unwrap();
    fs::set_permissions(src.join("private"), fs::Permissions::from_mode(0o700)).unwrap();
    env.backup(&[&src]);

    let m = Mount::start_with(&env, "shared", &["--allow-other"]);
    let root = in_mount(&m.snapshot_dirs()[0], &src);
    let public = cat_as_nobody(&root.join("public"));
    assert!(public.status.success(), "another user reads a file open to all: {}", text(&public.stderr));
    assert_eq!(public.stdout, b"for everyone\n");
    for refused in [root.join("secret"), root.join("private/inside")] {
        let out = cat_as_nobody(&refused);
        assert!(!out.status.success(), "{}: read by another user: {:?}", refused.display(), text(&out.stdout));
        assert!(out.stdout.is_empty());
        assert!(text(&out.stderr).contains("Permission denied"), "{}: {}", refused.display(), text(&out.stderr));
    }
    // The owner (root here) still reads it.
    assert_eq!(fs::read(root.join("secret")).unwrap(), b"root only\n");
    let mounts = fs::read_to_string("/proc/self/mounts").unwrap();
    let line = mounts.lines().find(|l| l.split(' ').nth(1) == Some(&*m.mp.to_string_lossy())).unwrap();
    assert!(line.contains("default_permissions") && line.contains("allow_other"), "{line}");
}

fn libc_eio() -> i32 {
    5
}
