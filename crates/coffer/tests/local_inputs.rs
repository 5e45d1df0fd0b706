//! What the command line reads from the local machine (docs/design.md#local-inputs):
//! profiles, password files and commands, exclude files and lists of paths are
//! read with a bound and refused when they are no regular file (a pipe where a
//! stream is natural); the cache and state directories are not followed when
//! they are links or used when another user owns them; and the small checks of
//! `--cacert`, locations, profiles and backends sharing a directory.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{Env, PASSWORD, assert_success, text};

/// Runs `cmd` with at most 4 GB of address space, failing the test if it has
/// not ended within `secs` seconds (it is killed then).
fn run_bounded(cmd: &mut Command, secs: u64) -> Output {
    // The limit keeps a command that reads without end from taking the machine's memory.
    let program = cmd.get_program().to_owned();
    let mut shell = Command::new("sh");
    shell.arg("-c").arg("ulimit -v 4000000; exec \"$0\" \"$@\"").arg(program).args(cmd.get_args());
    if let Some(dir) = cmd.get_current_dir() {
        shell.current_dir(dir);
    }
    shell.env_clear().envs(cmd.get_envs().filter_map(|(k, v)| v.map(|v| (k, v))));
    let mut child = shell.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if start.elapsed() > Duration::from_secs(secs) {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!("still running after {secs} s: {}", text(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

/// Asserts exit `want` and that stderr holds every one of `parts`.
fn refused(out: &Output, want: i32, parts: &[&str]) {
    let err = text(&out.stderr);
    assert_eq!(code(out), want, "exit code; stderr: {err}");
    for p in parts {
        assert!(err.contains(p), "stderr lacks {p:?}: {err}");
    }
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a plain libc call on a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

/// Regression: `--password-command yes` read without end and died of
/// exhaustion (exit 101); now the output is bounded and the command refused.
#[test]
fn a_password_command_that_never_ends_is_stopped_and_refused() {
    let env = Env::new();
    let mut c = env.cmd();
    c.env_remove("COFFER_PASSWORD").args(["--password-command", "yes", "snapshots"]);
    let out = run_bounded(&mut c, 60);
    refused(&out, 1, &["password command", "\"yes\"", "more than 1 MiB"]);
    // A command that prints the passphrase, then more lines, still opens it.
    let mut c = env.cmd();
    c.env_remove("COFFER_PASSWORD").args(["--password-command", &format!("printf '{PASSWORD}\\nuser: me\\n'")]);
    assert_success(&run_bounded(c.arg("snapshots"), 60));
}

/// Regression: `/dev/zero` given as a profile, password file, exclude file or
/// list of paths was read into memory without end.
#[test]
fn a_device_is_refused_wherever_a_file_is_read() {
    let env = Env::new();
    fs::create_dir_all(env.path("src")).unwrap();
    let src = env.path("src");
    let src = src.to_str().unwrap();
    let cases: [(&[&str], i32, &str); 5] = [
        (&["-P", "/dev/zero", "snapshots"], 2, "profile /dev/zero is a device"),
        (&["--password-file", "/dev/zero", "snapshots"], 1, "password file /dev/zero is a device"),
        (&["--repository-file", "/dev/zero", "snapshots"], 2, "repository file /dev/zero is a device"),
        (&["backup", "--exclude-file", "/dev/zero", src], 1, "pattern file /dev/zero is a device"),
        (&["backup", "--files-from", "/dev/zero"], 1, "the list of paths /dev/zero is a device"),
    ];
    for (args, want, message) in cases {
        let mut c = env.cmd();
        if args.contains(&"--password-file") {
            c.env_remove("COFFER_PASSWORD");
        }
        if args.contains(&"--repository-file") {
            c.env_remove("COFFER_REPOSITORY");
        }
        let out = run_bounded(c.args(args), 30);
        refused(&out, want, &[message]);
    }
}

/// Regression: a FIFO as the profile blocked the command forever.
#[test]
fn a_fifo_is_refused_as_a_profile_and_read_as_a_stream_for_a_password_file() {
    let env = Env::new();
    let fifo = env.path("profile.toml");
    mkfifo(&fifo);
    let out = run_bounded(env.cmd().arg("-P").arg(&fifo).arg("snapshots"), 30);
    refused(&out, 2, &["profile", "is a FIFO", "give a regular file"]);
    // A password file that is a FIFO nobody writes reads as empty, at once.
    let out =
        run_bounded(env.cmd().env_remove("COFFER_PASSWORD").arg("--password-file").arg(&fifo).arg("snapshots"), 30);
    assert!(!out.status.success(), "an empty passphrase opened the repository");
    // A pipe (what `<(command)` gives) is read as a stream.
    let mut child = env
        .cmd()
        .env_remove("COFFER_PASSWORD")
        .args(["--password-file", "/dev/stdin", "snapshots"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(format!("{PASSWORD}\n").as_bytes()).unwrap();
    assert_success(&child.wait_with_output().unwrap());
}

#[test]
fn inputs_beyond_their_bound_are_refused_naming_the_file_and_the_bound() {
    let env = Env::new();
    let long_line = env.path("long-pass");
    fs::write(&long_line, vec![b'x'; 100 << 10]).unwrap();
    let out = run_bounded(
        env.cmd().env_remove("COFFER_PASSWORD").arg("--password-file").arg(&long_line).arg("snapshots"),
        30,
    );
    refused(&out, 1, &[&long_line.display().to_string(), "64 KiB"]);
    // Only the first line of a password file is read: what follows may be anything.
    let pass = env.path("pass");
    let mut bytes = format!("{PASSWORD}\n").into_bytes();
    bytes.extend(vec![0xff; 200 << 10]);
    fs::write(&pass, bytes).unwrap();
    assert_success(&run_bounded(
        env.cmd().env_remove("COFFER_PASSWORD").arg("--password-file").arg(&pass).arg("snapshots"),
        30,
    ));

    let profile = env.path("big.toml");
    let mut toml = b"repository = \"/r\"\n".to_vec();
    toml.extend(std::iter::repeat_n(b"# padding padding padding\n".as_slice(), 50_000).flatten());
    fs::write(&profile, toml).unwrap();
    let out = run_bounded(env.cmd().arg("-P").arg(&profile).arg("snapshots"), 30);
    refused(&out, 2, &[&profile.display().to_string(), "more than 1 MiB"]);

    // A list of paths on standard input is bounded too.
    let mut c = env.cmd();
    c.args(["backup", "--files-from", "-"]);
    let zero = fs::File::open("/dev/zero").unwrap();
    let out = c.stdin(zero).stdout(Stdio::piped()).stderr(Stdio::piped()).output().unwrap();
    refused(&out, 1, &["the list of paths", "standard input", "more than 256 MiB"]);
}

/// Regression: a profile accepted `connections = 0`.
#[test]
fn a_profile_with_no_connections_is_refused_at_load() {
    let env = Env::new();
    let profile = env.path("p.toml");
    fs::write(&profile, "connections = 0\n").unwrap();
    let out = run_bounded(env.cmd().arg("-P").arg(&profile).arg("snapshots"), 30);
    refused(&out, 2, &[&profile.display().to_string(), "connections = 0", "from 1 to 1024"]);
}

/// Regression: `--cacert` was read only for remote locations, so a file of
/// garbage went unnoticed with a local one.
#[test]
fn a_cacert_that_holds_no_certificate_is_an_error_for_any_location() {
    let env = Env::new();
    let garbage = env.path("ca.pem");
    fs::write(&garbage, "not a certificate\n").unwrap();
    let out = run_bounded(env.cmd().arg("--cacert").arg(&garbage).arg("snapshots"), 30);
    refused(&out, 1, &["--cacert", &garbage.display().to_string(), "no PEM certificate"]);
    let bad_pem = env.path("bad.pem");
    fs::write(&bad_pem, "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n").unwrap();
    let out = run_bounded(env.cmd().arg("--cacert").arg(&bad_pem).arg("snapshots"), 30);
    refused(&out, 1, &["--cacert", "does not parse"]);
    let out = run_bounded(env.cmd().args(["--cacert", "/dev/zero", "snapshots"]), 30);
    refused(&out, 1, &["--cacert /dev/zero is a device"]);
}

/// Regression: a malformed IPv6 host was sent to the storage and failed there
/// (exit 23) instead of being a location error.
#[test]
fn a_malformed_host_is_a_location_error() {
    let env = Env::empty();
    for loc in ["s3:https://[::1/b", "s3:https://[::1]x/b", "s3:https://ho%st/b"] {
        let out = run_bounded(env.cmd().env("COFFER_REPOSITORY", loc).arg("snapshots"), 30);
        refused(&out, 2, &[&format!("{loc:?}"), "accepted forms"]);
    }
}

/// Regression: two backends on one directory made half a repository, then
/// failed with "a repository already exists at replicated(x, y)".
#[test]
fn backends_sharing_a_directory_are_refused_before_anything_is_written() {
    let env = Env::empty();
    let a = env.path("a");
    let spec = |name: &str, p: PathBuf| format!("{name}:1G={}", p.display());
    for (x, y) in [(a.clone(), a.clone()), (a.clone(), a.join("inner")), (a.join("inner"), a.clone())] {
        let out = run_bounded(
            env.cmd()
                .env_remove("COFFER_REPOSITORY")
                .args(["init", "--kdf-log-n", "10", "--insecure-kdf", "--replicas", "1"])
                .args(["--backend", &spec("one", x), "--backend", &spec("two", y)]),
            30,
        );
        refused(&out, 1, &["backend one", "backend two", "must not share storage"]);
        assert!(!a.exists(), "something was created");
    }
}

/// The repository id: the name of the one cache directory under `base`.
fn cache_id(base: &Path) -> String {
    let ids: Vec<String> = fs::read_dir(base)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.len() == 64)
        .collect();
    assert_eq!(ids.len(), 1, "{ids:?}");
    ids[0].clone()
}

fn entries(dir: &Path) -> usize {
    fs::read_dir(dir).unwrap().count()
}

/// Regression: with the cache directory a link to elsewhere, coffer wrote its
/// cache files there.
#[test]
fn a_cache_directory_that_is_a_link_or_anothers_is_not_used() {
    let env = Env::new();
    let base = env.path("cache");
    let src = env.path("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("f"), b"data").unwrap();
    let cached = |args: &[&str]| {
        let mut c = env.cmd();
        c.arg("--cache-dir").arg(&base).args(args);
        run_bounded(&mut c, 60)
    };
    assert_success(&cached(&["backup", src.to_str().unwrap()]));
    let id = cache_id(&base);
    let dir = base.join(&id);
    assert_eq!(fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);

    // A link planted in its place (to a directory the attacker wants written).
    let victim = env.path("victim");
    fs::create_dir(&victim).unwrap();
    fs::remove_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink(&victim, &dir).unwrap();
    let out = cached(&["snapshots"]);
    assert_success(&out);
    let err = text(&out.stderr);
    assert!(err.contains("symbolic link") && err.contains("without the cache"), "{err}");
    assert_eq!(entries(&victim), 0, "something was written through the link");

    // A directory another user owns (only root can make one; the unit tests of
    // the check cover the other case).
    fs::remove_file(&dir).unwrap();
    fs::create_dir(&dir).unwrap();
    if rustix::process::geteuid().is_root() {
        std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).unwrap();
        let out = cached(&["snapshots"]);
        assert_success(&out);
        let err = text(&out.stderr);
        assert!(err.contains("is owned by user 65534") && err.contains("without the cache"), "{err}");
        assert_eq!(entries(&dir), 0, "the other user's directory was written");
    }
}

/// Regression: the state directories were created 0755 and followed when a
/// link; now 0700, and a link or another user's directory is refused.
#[test]
fn a_state_directory_is_private_and_never_followed() {
    let env = Env::new();
    let src = env.path("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("f"), b"data").unwrap();
    let state = env.path("home/.local/state/coffer");
    assert_success(&run_bounded(env.cmd().arg("backup").arg(&src), 60));
    let dirs: Vec<PathBuf> = fs::read_dir(&state).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    let dir = dirs[0].clone();
    for d in [&state, &dir] {
        assert_eq!(fs::metadata(d).unwrap().permissions().mode() & 0o777, 0o700, "{}", d.display());
    }

    let victim = env.path("victim");
    fs::create_dir(&victim).unwrap();
    fs::rename(&dir, env.path("state-kept")).unwrap();
    std::os::unix::fs::symlink(&victim, &dir).unwrap();
    let out = run_bounded(env.cmd().arg("backup").arg(&src), 60);
    refused(&out, 1, &["local state directory", &dir.display().to_string(), "symbolic link"]);
    assert_eq!(entries(&victim), 0, "something was written through the link");

    if rustix::process::geteuid().is_root() {
        fs::remove_file(&dir).unwrap();
        fs::rename(env.path("state-kept"), &dir).unwrap();
        std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).unwrap();
        let out = run_bounded(env.cmd().arg("backup").arg(&src), 60);
        refused(&out, 1, &["local state directory", "is owned by user 65534"]);
    }
}
