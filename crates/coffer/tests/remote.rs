//! Repositories that are not local directories (docs/design.md#locations): the
//! whole life of a repository on a real S3 server and on an SFTP server (init,
//! backup, restore bit-exact, check --read-data, forget, prune), when their test
//! variables are set (docs/testing.md; each test uses its own prefix, so they run
//! in parallel); and, everywhere, that a location coffer cannot use is refused
//! rather than made into a local directory, that retries are reported, and that
//! `--verbose` and `--json` give the storage request counts.

mod common;

use common::remote::*;
use common::*;

/// init, two backups, restore bit-exact, check --read-data, forget, prune, and
/// check and restore again.
fn full_life(r: &Remote) {
    let out = r.run(&["init", "--kdf-log-n", "10", "--insecure-kdf"]);
    assert_success(&out);
    let src = r.path("src");
    make_tree(&src);
    let s = src.to_str().unwrap();
    let first = r.json(&["backup", s]);
    let storage = &first["storage"];
    assert!(storage["put"].as_u64().unwrap() > 0 && storage["bytes_up"].as_u64().unwrap() > 10 << 20, "{first}");
    std::fs::write(src.join("f3"), random_bytes(70_000, 4242)).unwrap();
    std::fs::remove_file(src.join("f4")).unwrap();
    let second = r.json(&["backup", s]);
    assert_ne!(first["snapshot_id"], second["snapshot_id"]);

    let target = r.path("out");
    assert_success(&r.run(&["-q", "restore", "latest", "--target", target.to_str().unwrap()]));
    assert_same_tree(&src, &target.join(src.strip_prefix("/").unwrap()));
    assert_success(&r.run(&["-q", "check", "--read-data"]));

    assert_success(&r.run(&["-q", "forget", "--keep-last", "1"]));
    let snaps = r.json(&["snapshots"]);
    assert_eq!(snaps.as_array().map(Vec::len), Some(1), "{snaps}");
    let out = r.cmd().env("COFFER_TEST_PRUNE_GRACE_MS", "10").args(["prune", "--max-unused", "0"]).output().unwrap();
    assert_success(&out);
    assert_success(&r.run(&["-q", "check", "--read-data"]));
    let again = r.path("again");
    assert_success(&r.run(&["-q", "restore", "latest", "--target", again.to_str().unwrap()]));
    assert_same_tree(&src, &again.join(src.strip_prefix("/").unwrap()));
}

#[test]
fn s3_repository_lives_through_backup_restore_check_forget_and_prune() {
    let Some(r) = Remote::s3("cli-life") else { return };
    full_life(&r);
}

#[test]
fn sftp_repository_lives_through_backup_restore_check_forget_and_prune() {
    let Some(r) = Remote::sftp("cli-life") else { return };
    full_life(&r);
}

#[test]
fn s3_verbose_reports_the_requests_and_a_second_init_is_refused() {
    let Some(r) = Remote::s3("cli-verbose") else { return };
    assert_success(&r.run(&["init", "--kdf-log-n", "10", "--insecure-kdf"]));
    let out = r.run(&["--verbose", "snapshots"]);
    assert_success(&out);
    let err = text(&out.stderr);
    assert!(err.contains("storage: ") && err.contains(" GET") && err.contains(" LIST"), "{err}");
    let out = r.run(&["init", "--kdf-log-n", "10", "--insecure-kdf"]);
    assert!(!out.status.success(), "a second init over a repository must fail");
}

#[test]
fn s3_missing_bucket_and_wrong_credentials_are_storage_errors_that_say_so() {
    let Some(mut r) = Remote::s3("cli-errors") else { return };
    let endpoint = var("COFFER_TEST_S3_ENDPOINT").unwrap();
    let good = r.repo.clone();
    r.repo = format!("s3:{endpoint}/no-such-bucket-for-coffer/x");
    let out = r.run(&["init", "--kdf-log-n", "10", "--insecure-kdf"]);
    let err = assert_code(&out, 23);
    assert!(err.contains("bucket does not exist"), "{err}");

    r.repo = good;
    for (k, v) in r.env.iter_mut() {
        if k == "AWS_SECRET_ACCESS_KEY" {
            *v = "not-the-secret".into();
        }
    }
    let out = r.run(&["snapshots"]);
    let err = assert_code(&out, 23);
    assert!(err.contains("403") && err.contains("AWS_SECRET_ACCESS_KEY"), "{err}");
}

#[test]
fn an_unknown_or_malformed_location_is_refused_and_no_local_directory_is_made() {
    let env = Env::empty();
    let cwd = env.path("cwd");
    std::fs::create_dir(&cwd).unwrap();
    for loc in ["ftp:host/srv/repo", "s3:https://host-only", "sftp:host", "s3://"] {
        let out = env.cmd().current_dir(&cwd).env("COFFER_REPOSITORY", loc).args(["init", "--insecure-kdf"]).output();
        let out = out.unwrap();
        assert!(!out.status.success(), "{loc} was accepted");
        let err = text(&out.stderr);
        assert!(err.contains(loc) && err.contains("accepted forms"), "{loc}: {err}");
    }
    // An unreadable --cacert is named, before anything is created.
    let out = env
        .cmd()
        .current_dir(&cwd)
        .env("COFFER_REPOSITORY", "s3:https://s3.example.invalid/bucket")
        .args(["--cacert", "/nonexistent/ca.pem", "snapshots"])
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert!(!out.status.success() && err.contains("--cacert") && err.contains("/nonexistent/ca.pem"), "{err}");
    // restic's sftp form is a remote location now: with a host that does not
    // resolve it fails as storage, and never becomes a local directory.
    let out = env
        .cmd()
        .current_dir(&cwd)
        .env("COFFER_REPOSITORY", "sftp:user@host.invalid:/srv/repo")
        .env("COFFER_RETRY_BASE_MS", "1")
        .args(["init", "--kdf-log-n", "10", "--insecure-kdf"])
        .output()
        .unwrap();
    assert!(!out.status.success(), "{}", text(&out.stdout));
    assert_eq!(std::fs::read_dir(&cwd).unwrap().count(), 0, "something was created in the working directory");
    assert!(!env.path("home").join(".local/share/coffer").exists());
}

#[test]
fn a_storage_that_cannot_be_reached_is_retried_once_over_and_reported_in_one_line_per_attempt() {
    let env = Env::empty();
    // A port nothing listens on: every request's connection is refused.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let run = |args: &[&str]| {
        env.cmd()
            .env("COFFER_REPOSITORY", format!("s3:http://127.0.0.1:{port}/bucket/repo"))
            .env("AWS_ACCESS_KEY_ID", "id")
            .env("AWS_SECRET_ACCESS_KEY", "secret")
            .env("COFFER_RETRY_BASE_MS", "1")
            .args(args)
            .output()
            .unwrap()
    };
    let out = run(&["--json", "snapshots"]);
    assert_eq!(out.status.code(), Some(23), "{}", text(&out.stderr));
    let config_retries = text(&out.stderr)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["type"] == "retry" && v["object"] == "config")
        .count();
    // The open's first round reads the config with its retries, and reports
    // what they ended in: it is not read (and retried) again.
    assert_eq!(config_retries, 9, "{}", text(&out.stderr));
    let out = run(&["snapshots"]);
    assert_eq!(out.status.code(), Some(23));
    let err = text(&out.stderr);
    let lines = err.lines().filter(|l| l.starts_with("storage: retrying ")).count();
    assert!((1..=9).contains(&lines), "six requests retried nine times each: {err}");
    assert!(err.contains("connection was refused"), "{err}");
}

#[test]
fn retries_are_reported_as_they_happen_in_text_and_json() {
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("a"), random_bytes(300_000, 5)).unwrap();
    let faults = "seed=11,transient=0.3";
    let out = env
        .cmd()
        .env("COFFER_TEST_FAULTS", faults)
        .env("COFFER_RETRY_BASE_MS", "1")
        .args(["-q", "backup", src.to_str().unwrap()])
        .output()
        .unwrap();
    assert_success(&out);
    let err = text(&out.stderr);
    let line = err.lines().find(|l| l.starts_with("storage: retrying ")).unwrap_or_else(|| panic!("{err}"));
    assert!(line.contains("(attempt ") && line.contains("injected"), "{line}");
    let out = env
        .cmd()
        .env("COFFER_TEST_FAULTS", faults)
        .env("COFFER_RETRY_BASE_MS", "1")
        .args(["--json", "snapshots"])
        .output()
        .unwrap();
    assert_success(&out);
    let events: Vec<serde_json::Value> = text(&out.stderr)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|v: &serde_json::Value| v["type"] == "retry")
        .collect();
    assert!(!events.is_empty(), "{}", text(&out.stderr));
    assert!(events[0]["attempt"].as_u64().unwrap() >= 2 && events[0]["object"].is_string(), "{}", events[0]);
}

#[test]
fn verbose_and_json_report_request_counts_on_a_local_repository() {
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("a"), random_bytes(100_000, 6)).unwrap();
    let v = env.json(&["backup", src.to_str().unwrap()]);
    let st = &v["storage"];
    assert!(st["put"].as_u64().unwrap() >= 3, "a pack, an index file and a snapshot at least: {v}");
    assert!(st["bytes_up"].as_u64().unwrap() >= 100_000, "{v}");
    let out = env.run(&["-v", "snapshots"]);
    assert_success(&out);
    let err = text(&out.stderr);
    assert!(err.contains("storage: ") && err.contains(" PUT") && err.contains(" down"), "{err}");
    // Restore and check report theirs in their summaries too: reads, no writes of data.
    let target = env.path("out");
    let v = env.json(&["restore", "latest", "--target", target.to_str().unwrap()]);
    assert!(
        v["storage"]["get"].as_u64().unwrap() >= 2 && v["storage"]["bytes_down"].as_u64().unwrap() >= 100_000,
        "{v}"
    );
    let v = env.json(&["check", "--read-data"]);
    assert!(v["storage"]["get"].as_u64().unwrap() >= 2 && v["storage"]["list"].as_u64().unwrap() >= 1, "{v}");
}

#[test]
fn a_profile_gives_the_storage_credentials_and_options() {
    // A [storage] key coffer does not read is an error naming it (no server needed).
    let env = Env::empty();
    let config = env.path("config");
    std::fs::create_dir_all(config.join("coffer")).unwrap();
    std::fs::write(config.join("coffer/bad.toml"), "[storage]\nAWS_SECRET = \"x\"\n").unwrap();
    let out = env.cmd().env("XDG_CONFIG_HOME", &config).args(["-P", "bad", "snapshots"]).output().unwrap();
    let err = assert_code(&out, 2);
    assert!(err.contains("AWS_SECRET") && err.contains("AWS_SECRET_ACCESS_KEY"), "{err}");

    let Some(r) = Remote::s3("cli-profile") else { return };
    assert_success(&r.run(&["init", "--kdf-log-n", "10", "--insecure-kdf"]));
    let var = |k: &str| r.env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()).unwrap();
    let profile = format!(
        "repository = {:?}\nconnections = 4\n[storage]\nAWS_ACCESS_KEY_ID = {:?}\nAWS_SECRET_ACCESS_KEY = {:?}\nAWS_REGION = {:?}\n",
        r.repo,
        var("AWS_ACCESS_KEY_ID"),
        var("AWS_SECRET_ACCESS_KEY"),
        var("AWS_REGION")
    );
    let config = r.path("config");
    std::fs::create_dir_all(config.join("coffer")).unwrap();
    std::fs::write(config.join("coffer/s3.toml"), profile).unwrap();
    let run = |args: &[&str]| {
        let mut c = r.cmd();
        c.env_remove("COFFER_REPOSITORY").env("XDG_CONFIG_HOME", &config);
        for (k, _) in &r.env {
            c.env_remove(k);
        }
        c.args(args).output().unwrap()
    };
    // The credentials come from the profile alone.
    let out = run(&["-P", "s3", "--json", "snapshots"]);
    assert_success(&out);
    // Without them the same command is refused by the server.
    std::fs::write(config.join("coffer/bare.toml"), format!("repository = {:?}\n", r.repo)).unwrap();
    assert_code(&run(&["-P", "bare", "snapshots"]), 23);
}
