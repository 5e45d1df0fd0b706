//! The repository's storage as the command line meets it: lost configs, modes,
//! read-only and full file systems, planted objects.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

fn mode_of(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o777
}

/// A mount made for a test, unmounted when dropped.
struct Mount(PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

fn mount(args: &[&str], at: &Path) -> Option<Mount> {
    let ok = Command::new("mount").args(args).arg(at).status().is_ok_and(|s| s.success());
    ok.then(|| Mount(at.to_path_buf()))
}

fn source(env: &Env) -> PathBuf {
    let src = env.path("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    std::fs::write(src.join("a.txt"), b"hello").unwrap();
    std::fs::write(src.join("sub/b.bin"), random_bytes(300_000, 5)).unwrap();
    src
}

fn names_under(dir: &Path) -> Vec<PathBuf> {
    files_under(dir).into_iter().filter(|p| !p.starts_with(dir.join("tmp"))).collect()
}

#[test]
fn a_lost_config_is_never_reinitialised() {
    let env = Env::new();
    let src = source(&env);
    env.backup(&[&src]);
    std::fs::remove_file(env.repo().join("config")).unwrap();
    let before = names_under(&env.repo());

    let err = assert_code(&env.run(&["init", "--kdf-log-n", "10", "--insecure-kdf"]), 25);
    assert!(err.contains("config was lost") && err.contains("1 key file"), "{err}");
    // Other commands say so too, rather than that there is no repository.
    let err = assert_code(&env.run(&["snapshots"]), 25);
    assert!(err.contains("config was lost"), "{err}");
    assert!(err.contains("Restore 'config' from a copy"), "{err}");
    assert_eq!(names_under(&env.repo()), before, "nothing was written");

    // The default repository is created by the first backup, but not on top of a
    // repository whose config is gone.
    let data = env.path("xdg");
    let default = data.join("coffer/repo");
    std::fs::create_dir_all(default.parent().unwrap()).unwrap();
    std::fs::rename(env.repo(), &default).unwrap();
    let mut cmd = env.cmd();
    cmd.env_remove("COFFER_REPOSITORY").env("XDG_DATA_HOME", &data).args(["backup", src.to_str().unwrap()]);
    let out = cmd.output().unwrap();
    let err = assert_code(&out, 25);
    assert!(err.contains("config was lost"), "{err}");
    assert_eq!(names_under(&default).len(), before.len(), "nothing was written");

    // `repair config` writes a new config under the existing keys: every snapshot
    // restores again.
    std::fs::rename(&default, env.repo()).unwrap();
    let mut wrong = env.cmd();
    wrong.env("COFFER_PASSWORD", "not the passphrase").args(["repair", "config"]);
    assert_code(&wrong.output().unwrap(), 12);
    assert!(!env.repo().join("config").exists());
    let out = env.run(&["repair", "config"]);
    assert_success(&out);
    assert!(text(&out.stdout).contains("repository id: new"), "{}", text(&out.stdout));
    assert_code(&env.run(&["repair", "config"]), 1);
    let target = env.path("restored");
    assert_success(&env.run(&["restore", "latest", "--target", target.to_str().unwrap()]));
    assert_same_tree(&src, &target.join(src.strip_prefix("/").unwrap()));
    assert_success(&env.run(&["check", "--read-data"]));
}

#[test]
fn repository_files_are_private_unless_chosen_group_readable() {
    let env = Env::new();
    let src = source(&env);
    env.backup(&[&src]);
    let repo = env.repo();
    assert_eq!(mode_of(&repo), 0o700);
    for f in files_under(&repo) {
        assert_eq!(mode_of(&f), 0o600, "{}", f.display());
        assert_eq!(mode_of(f.parent().unwrap()), 0o700, "{}", f.display());
    }

    let shared = Env::with_init_args(&["--group-readable"]);
    let src = source(&shared);
    shared.backup(&[&src]);
    assert_eq!(mode_of(&shared.repo()), 0o750);
    for f in files_under(&shared.repo()) {
        assert_eq!(mode_of(&f), 0o640, "{}", f.display());
        assert_eq!(mode_of(f.parent().unwrap()), 0o750, "{}", f.display());
    }
}

#[test]
fn a_read_only_repository_serves_every_read_command() {
    if !is_root() {
        eprintln!("skipped: a read-only bind mount needs root");
        return;
    }
    let env = Env::new();
    let src = source(&env);
    let first = env.backup(&[&src]);
    std::fs::write(src.join("a.txt"), b"changed").unwrap();
    let second = env.backup(&[&src]);
    // A copy on a backup disk has no tmp/: nothing is being written there.
    let _ = std::fs::remove_dir_all(env.repo().join("tmp"));
    let ro = env.path("ro");
    std::fs::create_dir_all(&ro).unwrap();
    let Some(_bind) = mount(&["--bind", env.repo().to_str().unwrap()], &ro) else {
        eprintln!("skipped: cannot bind-mount here");
        return;
    };
    let remounted = Command::new("mount").args(["-o", "remount,bind,ro"]).arg(&ro).status().unwrap();
    assert!(remounted.success());
    let run = |args: &[&str]| env.cmd().env("COFFER_REPOSITORY", &ro).args(args).output().unwrap();
    let target = env.path("restored");
    for args in [
        vec!["snapshots"],
        vec!["ls", "latest"],
        vec!["check", "--read-data"],
        vec!["diff", &first, &second],
        vec!["cat", "snapshot", &second],
        vec!["prove", &second, &format!("{}/a.txt", src.display())],
        vec!["restore", "latest", "--target", target.to_str().unwrap()],
    ] {
        assert_success(&run(&args));
    }
    assert_eq!(std::fs::read(target.join(src.strip_prefix("/").unwrap()).join("a.txt")).unwrap(), b"changed");
    // A write is refused at once, saying why.
    let started = Instant::now();
    let err = assert_code(&run(&["backup", src.to_str().unwrap()]), 23);
    assert!(err.contains("read-only file system"), "{err}");
    assert!(!err.contains("temporary"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(20), "took {:?}", started.elapsed());
}

#[test]
fn a_full_disk_fails_at_once_and_says_so() {
    if !is_root() {
        eprintln!("skipped: mounting a small tmpfs needs root");
        return;
    }
    let env = Env::empty();
    std::fs::create_dir_all(env.repo()).unwrap();
    let Some(_m) = mount(&["-t", "tmpfs", "-o", "size=512k", "tmpfs"], &env.repo()) else {
        eprintln!("skipped: cannot mount a tmpfs here");
        return;
    };
    assert_success(&env.run(&["init", "--kdf-log-n", "10", "--insecure-kdf", "--compression", "0"]));
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("big"), random_bytes(4 << 20, 9)).unwrap();
    let started = Instant::now();
    let err = assert_code(&env.run(&["backup", src.to_str().unwrap()]), 23);
    assert!(err.contains("full"), "{err}");
    assert!(!err.contains("temporary"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(20), "took {:?}", started.elapsed());
}

#[test]
fn a_planted_giant_object_is_damage_not_an_abort() {
    let env = Env::new();
    let src = source(&env);
    env.backup(&[&src]);
    let giant = 64u64 << 30;
    let name = format!("index/{}", "ab".repeat(32));
    std::fs::File::create(env.repo().join(&name)).unwrap().set_len(giant).unwrap();
    // Commands go on without it, saying so; check reports it as damage.
    let err = assert_code(&env.run(&["ls", "latest"]), 0);
    assert!(err.contains(&name) && err.contains(&giant.to_string()), "{err}");
    let err = assert_code(&env.run(&["check"]), 20);
    assert!(err.contains(&name) && err.contains(&giant.to_string()), "{err}");
}

#[test]
fn a_planted_symbolic_link_is_not_followed() {
    let env = Env::new();
    let src = source(&env);
    let outside = env.path("outside");
    std::fs::create_dir_all(&outside).unwrap();
    // The storage (or a local user who can write there) replaces a directory of
    // the repository with a link to somewhere else.
    let _ = std::fs::remove_dir_all(env.repo().join("snapshots"));
    std::os::unix::fs::symlink(&outside, env.repo().join("snapshots")).unwrap();
    let err = assert_code(&env.run(&["backup", src.to_str().unwrap()]), 23);
    assert!(err.contains("symbolic link"), "{err}");
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0, "nothing was written through the link");
}
