use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

use super::*;

fn mode_of(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o777
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

#[test]
fn range_reads_past_the_end_are_short_not_errors() {
    let dir = tempfile::tempdir().unwrap();
    let be = LocalBackend::open(dir.path()).unwrap();
    be.write("data/ab/obj", (0..100u8).collect()).unwrap();
    assert_eq!(be.read_range("data/ab/obj", 10, 20).unwrap(), (10..30u8).collect::<Vec<_>>());
    assert_eq!(be.read_range("data/ab/obj", 50, 100).unwrap(), (50..100u8).collect::<Vec<_>>());
    assert!(be.read_range("data/ab/obj", 100, 10).unwrap().is_empty());
    assert!(be.read_range("data/ab/obj", 500, 10).unwrap().is_empty());
    assert_eq!(be.read_range("data/ab/missing", 0, 10).unwrap_err().kind, ErrorKind::NotFound);
    assert_eq!(be.read("data/ab/obj").unwrap(), (0..100u8).collect::<Vec<_>>());
    assert_eq!(be.read("data/ab/missing").unwrap_err().kind, ErrorKind::NotFound);
    assert_eq!(be.read("nodir/missing").unwrap_err().kind, ErrorKind::NotFound);
    be.write("data/ab/empty", Vec::new()).unwrap();
    assert!(be.read("data/ab/empty").unwrap().is_empty());
    assert!(be.read_range("data/ab/empty", 0, 10).unwrap().is_empty());
    assert_eq!(be.stat("data/ab/obj").unwrap(), 100);
    let mut listed = be.list("data/").unwrap();
    listed.sort_by(|a, b| a.name.cmp(&b.name));
    assert_eq!(
        listed,
        vec![
            ObjectInfo { name: "data/ab/empty".into(), size: 0 },
            ObjectInfo { name: "data/ab/obj".into(), size: 100 }
        ]
    );
    assert!(be.list("index/").unwrap().is_empty());
    be.delete("data/ab/obj").unwrap();
    be.delete("data/ab/obj").unwrap();
    be.delete("nodir/obj").unwrap();
    assert_eq!(be.stat("data/ab/obj").unwrap_err().kind, ErrorKind::NotFound);
    for bad in ["", "/etc/passwd", "../x", "data/../../x", "data//x", "./config"] {
        assert_eq!(be.write(bad, b"x".to_vec()).unwrap_err().kind, ErrorKind::Permanent, "{bad:?}");
    }
}

#[test]
fn read_max_refuses_a_planted_sparse_giant_without_reading_it() {
    let dir = tempfile::tempdir().unwrap();
    let be = LocalBackend::open(dir.path()).unwrap();
    be.write("index/aa", vec![7; 1000]).unwrap();
    let giant = std::fs::File::create(dir.path().join("index/bb")).unwrap();
    giant.set_len(64 << 30).unwrap();
    let e = be.read_max("index/bb", 1 << 20).unwrap_err();
    assert_eq!(e.kind, ErrorKind::TooLarge);
    assert!(e.to_string().contains(&(64u64 << 30).to_string()), "{e}");
    assert_eq!(be.read_max("index/aa", 1000).unwrap(), vec![7; 1000]);
    assert_eq!(be.read_max("index/aa", 999).unwrap_err().kind, ErrorKind::TooLarge);
    // A FIFO is refused at once, not waited on.
    rustix::fs::mknodat(CWD, dir.path().join("index/cc"), FileType::Fifo, Mode::from_raw_mode(0o600), 0).unwrap();
    assert_eq!(be.read_max("index/cc", 1000).unwrap_err().kind, ErrorKind::Permanent);
    assert_eq!(be.read_range("index/cc", 0, 10).unwrap_err().kind, ErrorKind::Permanent);
}

#[test]
fn no_planted_symbolic_link_is_followed() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret"), b"not coffer's").unwrap();
    let be = LocalBackend::open(&repo).unwrap();
    be.write("config", b"c".to_vec()).unwrap();
    std::fs::remove_dir(repo.join("tmp")).unwrap();
    for planted in ["index", "data", "tmp"] {
        std::os::unix::fs::symlink(&outside, repo.join(planted)).unwrap();
    }
    std::fs::create_dir_all(repo.join("snapshots")).unwrap();
    std::os::unix::fs::symlink(outside.join("secret"), repo.join("snapshots/secret")).unwrap();
    std::os::unix::fs::symlink(outside.join("new"), repo.join("snapshots/new")).unwrap();

    // Writes through a linked directory, or onto a linked tmp/, are refused, and
    // so is a spool file there.
    assert_eq!(be.spool_file().unwrap().unwrap_err().kind, ErrorKind::Permanent);
    assert_eq!(be.write("index/abc", b"x".to_vec()).unwrap_err().kind, ErrorKind::Permanent);
    assert_eq!(be.write("data/ab/abc", b"x".to_vec()).unwrap_err().kind, ErrorKind::Permanent);
    assert_eq!(be.write("keys/abc", b"x".to_vec()).unwrap_err().kind, ErrorKind::Permanent);
    // A link in the object's own place is replaced, never written through.
    std::fs::remove_file(repo.join("tmp")).unwrap();
    be.write("snapshots/new", b"mine".to_vec()).unwrap();
    assert!(!outside.join("new").exists());
    assert_eq!(std::fs::read(repo.join("snapshots/new")).unwrap(), b"mine");
    // Reads, stats and listings do not follow links either.
    let e = be.read("snapshots/secret").unwrap_err();
    assert_eq!(e.kind, ErrorKind::Permanent);
    assert!(e.to_string().contains("symbolic link"), "{e}");
    assert_eq!(be.read_range("snapshots/secret", 0, 4).unwrap_err().kind, ErrorKind::Permanent);
    assert_eq!(be.stat("snapshots/secret").unwrap_err().kind, ErrorKind::Permanent);
    assert_eq!(be.read("index/secret").unwrap_err().kind, ErrorKind::Permanent);
    assert_eq!(be.list("snapshots/").unwrap(), vec![ObjectInfo { name: "snapshots/new".into(), size: 4 }]);
    assert!(be.list("index/").is_err());
    // Nor do a cache's reads, which record their use.
    assert_eq!(be.read_max_used("snapshots/new", 10, Duration::ZERO).unwrap(), b"mine");
    assert_eq!(be.read_max_used("snapshots/secret", 10, Duration::ZERO).unwrap_err().kind, ErrorKind::Permanent);
    // Reads open in one call where the kernel offers it, else walk: both refuse
    // a link at any step alike, and open what is there.
    for path in ["snapshots/secret", "index/secret", "snapshots/new/x", "nothing/x"] {
        let walked = be.open_walking(path, &components(path).unwrap()).map(|_| ()).map_err(|e| e.kind);
        assert!(walked.is_err(), "{path}");
        if let Some(one_call) = open_beneath(&be.root_fd, path, READ_FLAGS) {
            assert_eq!(one_call.map(|_| ()).map_err(|e| err(path, e).kind), walked, "{path}");
        }
    }
    assert!(be.open_walking("snapshots/new", &["snapshots", "new"]).is_ok());
    assert!(open_beneath(&be.root_fd, "snapshots/new", READ_FLAGS).is_none_or(|r| r.is_ok()));
    // Deleting a linked object removes the link, not its target.
    be.delete("snapshots/secret").unwrap();
    assert!(outside.join("secret").exists());
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 1);
}

#[test]
fn files_are_private_until_config_says_otherwise() {
    let dir = tempfile::tempdir().unwrap();
    let be = LocalBackend::open(dir.path()).unwrap();
    be.write("keys/k", b"k".to_vec()).unwrap();
    be.write("config", b"c".to_vec()).unwrap();
    assert_eq!(mode_of(&dir.path().join("keys/k")), 0o600);
    assert_eq!(mode_of(&dir.path().join("config")), 0o600);
    assert_eq!(mode_of(&dir.path().join("keys")), 0o700);
    assert_eq!(mode_of(&dir.path().join("tmp")), 0o700);

    let shared = tempfile::tempdir().unwrap();
    let be = LocalBackend::with_modes(shared.path(), Modes::GROUP_READABLE).unwrap();
    be.write("keys/k", b"k".to_vec()).unwrap();
    be.write("config", b"c".to_vec()).unwrap();
    assert_eq!(mode_of(&shared.path().join("keys/k")), 0o640);
    assert_eq!(mode_of(&shared.path().join("keys")), 0o750);
    // Later writers follow the mode of config, whatever they were made with.
    std::fs::set_permissions(shared.path().join("config"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let be = LocalBackend::open(shared.path()).unwrap();
    be.write("data/ab/obj", b"d".to_vec()).unwrap();
    assert_eq!(mode_of(&shared.path().join("data/ab/obj")), 0o644);
    assert_eq!(mode_of(&shared.path().join("data/ab")), 0o755);
}

#[test]
fn write_file_links_an_unnamed_spool_file_into_place() {
    let dir = tempfile::tempdir().unwrap();
    let be = LocalBackend::with_modes(dir.path(), Modes::GROUP_READABLE).unwrap();
    be.write("config", b"c".to_vec()).unwrap();
    let spool = be.spool_dir().unwrap();
    let mut file = be.spool_file().unwrap().unwrap();
    let data: Vec<u8> = (0..100_000u32).map(|i| (i % 253) as u8).collect();
    file.write_all(&data).unwrap();
    be.write_file("data/ef/obj", &file, data.len() as u64).unwrap();
    assert_eq!(be.read("data/ef/obj").unwrap(), data);
    let object = std::fs::metadata(dir.path().join("data/ef/obj")).unwrap();
    // The same inode: linked, not copied; with the repository's permissions.
    assert_eq!(object.ino(), file.metadata().unwrap().ino());
    assert_eq!(object.permissions().mode() & 0o777, 0o640);
    // Again, as a retry would: the object exists, so it is written over by a copy.
    be.write_file("data/ef/obj", &file, data.len() as u64).unwrap();
    assert_eq!(be.read("data/ef/obj").unwrap(), data);
    drop(file);
    assert_eq!(be.read("data/ef/obj").unwrap(), data);
    assert_eq!(std::fs::read_dir(&spool).unwrap().count(), 0);
}

#[test]
fn write_file_copies_a_spool_file_that_holds_more() {
    let dir = tempfile::tempdir().unwrap();
    let be = LocalBackend::open(dir.path()).unwrap();
    let spool = be.spool_dir().unwrap();
    assert_eq!(spool, dir.path().join("tmp"));
    std::fs::create_dir_all(&spool).unwrap();
    let mut file = tempfile::tempfile_in(&spool).unwrap();
    let data: Vec<u8> = (0..(COPY_PIECE * 2 + 12_345)).map(|i| (i * 7 % 251) as u8).collect();
    file.write_all(&data).unwrap();
    file.write_all(b"not part of the object").unwrap();
    be.write_file("data/cd/obj", &file, data.len() as u64).unwrap();
    assert_eq!(be.read("data/cd/obj").unwrap(), data);
    be.write_file("data/cd/obj", &file, data.len() as u64).unwrap();
    assert_eq!(be.read("data/cd/obj").unwrap(), data);
    drop(file);
    assert_eq!(std::fs::read_dir(&spool).unwrap().count(), 0);
}

#[test]
fn reads_need_no_tmp_directory() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("index")).unwrap();
    std::fs::write(dir.path().join("index/aa"), b"abc").unwrap();
    let be = LocalBackend::open(dir.path()).unwrap();
    assert_eq!(be.read("index/aa").unwrap(), b"abc");
    assert_eq!(be.list("index/").unwrap().len(), 1);
    assert!(!dir.path().join("tmp").exists());
}

/// Mounts a file system for a test and unmounts it when dropped.
struct Mount(PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

fn mount(args: &[&str], at: &Path) -> Option<Mount> {
    let ok = std::process::Command::new("mount").args(args).arg(at).status().is_ok_and(|s| s.success());
    ok.then(|| Mount(at.to_path_buf()))
}

#[test]
fn a_full_disk_is_permanent_and_says_so() {
    if !is_root() {
        eprintln!("skipped: mounting a small tmpfs needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(_m) = mount(&["-t", "tmpfs", "-o", "size=64k", "tmpfs"], dir.path()) else {
        eprintln!("skipped: cannot mount a tmpfs here");
        return;
    };
    let be = LocalBackend::open(dir.path()).unwrap();
    let e = be.write("data/ab/big", vec![1; 1 << 20]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Permanent, "{e}");
    assert!(e.to_string().contains("full"), "{e}");
    // Nothing half-written is left behind.
    assert_eq!(std::fs::read_dir(dir.path().join("tmp")).unwrap().count(), 0);
}

#[test]
fn a_read_only_file_system_is_permanent_and_says_so() {
    if !is_root() {
        eprintln!("skipped: a read-only bind mount needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (src, ro) = (dir.path().join("src"), dir.path().join("ro"));
    std::fs::create_dir_all(src.join("index")).unwrap();
    std::fs::create_dir_all(&ro).unwrap();
    std::fs::write(src.join("index/aa"), b"abc").unwrap();
    let Some(_bind) = mount(&["--bind", src.to_str().unwrap()], &ro) else {
        eprintln!("skipped: cannot bind-mount here");
        return;
    };
    assert!(mount(&["-o", "remount,bind,ro"], &ro).map(std::mem::forget).is_some());
    let be = LocalBackend::open(&ro).unwrap();
    assert_eq!(be.read("index/aa").unwrap(), b"abc");
    let e = be.write("index/bb", b"x".to_vec()).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Permanent, "{e}");
    assert!(e.to_string().contains("read-only"), "{e}");
}
