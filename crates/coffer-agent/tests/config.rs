//! Loading the jobs file and profile jobs from real files in a temporary directory:
//! a full file into jobs, notifiers and argument vectors; every kind of error with
//! its file, line and key.

use std::path::{Path, PathBuf};
use std::time::Duration;

use coffer_agent::config::{CheckData, ConfigError, Event, Ionice, Kind, Preset, Target, load};
use jiff::tz::TimeZone;

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// The line (1-based) of the first line of `text` holding `needle`.
fn line_of(text: &str, needle: &str) -> usize {
    text.lines().position(|l| l.contains(needle)).unwrap_or_else(|| panic!("{needle:?} not in the text")) + 1
}

fn s(p: &Path) -> String {
    p.to_str().unwrap().to_string()
}

/// Loads `dir`'s configuration, expecting an error; returns its message.
fn error(dir: &Path) -> String {
    match load(None, dir, TimeZone::UTC) {
        Ok(c) => panic!("loaded: {:?}", c.jobs.keys().collect::<Vec<_>>()),
        Err(e) => e.to_string(),
    }
}

/// Writes `text` as the jobs file of a fresh directory and returns the error's
/// message, checking that it starts with `FILE:LINE: KEY: ` where LINE is that of
/// the first line holding `at`.
fn refused(text: &str, at: &str, key: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "jobs.toml", text);
    let e = error(dir.path());
    let prefix = format!("{}:{}: {key}: ", path.display(), line_of(text, at));
    assert!(e.starts_with(&prefix), "expected {prefix:?}, got {e:?}");
    e
}

const FULL: &str = r#"
[agent]
metrics = "127.0.0.1:9898"
textfile = "metrics/coffer.prom"
state = "/var/lib/coffer/agent.sqlite"

[job.home]
profile = "home"
paths = ["/home", "/etc"]
exclude = ["/home/*/.cache", "-weird"]
exclude-file = "excludes.txt"
exclude-caches = true
one-file-system = true
exclude-larger-than = "2G"
tag = ["nightly", "home"]
host = "box"
schedule = "daily"
randomized-delay = "15m"
retries = 3
overdue = "36h"
forget = { keep-daily = 7, keep-weekly = 5, keep-within = "30d", keep-tag = ["keep"], group-by = "host,paths" }
prune = { schedule = "Sun 03:00" }
check = { schedule = "*-*-* 04:30", read-data-subset = "1/7" }
nice = 10
ionice = "idle"
limit-upload = 2048
limit-download = 4096
notify = ["ops", "mail"]
notify-on = ["failure", "recovery", "overdue", "success"]

[job.home.hooks]
before = "/usr/local/sbin/dump-databases"
after-success = "echo ok"
timeout = "5m"

[job.inline]
repository = "s3:https://s3.example.net/bucket"
password-command = "pass show coffer"
connections = 16
cacert = "/etc/ssl/ca.pem"
paths = "/srv"
schedule = "30 4 * * * Europe/Paris"
retry-delay = "90s"
check = { schedule = "weekly", read-all-every = 7 }
ionice = "best-effort:3"

[job.inline.storage]
AWS_ACCESS_KEY_ID = "AKIA123"
AWS_SECRET_ACCESS_KEY = "very-secret"

[job.plain]
profile = "home"
paths = ["/data"]
notify = "ops"
notify-on = []

[notify.ops]
url = "https://ntfy.example.net/backups"
preset = "ntfy"
rate-limit = "1h"

[notify.mail]
smtp = "smtp://mail.example.net:587"
from = "coffer@example.net"
to = "admin@example.net"
username = "coffer"
password-file = "smtp-password"
cacert = "ca.pem"
"#;

const HOME_PROFILE: &str = "repository = \"/srv/repo\"\npassword-file = \"/root/pass\"\n[forget]\nkeep-daily = 3\n";

const LAPTOP_PROFILE: &str = r#"repository = "/srv/laptop"
password-file = "/root/pass"

[backup]
exclude = ["*.tmp"]

[forget]
keep-last = 3

[job]
paths = ["/home/u"]
schedule = "hourly"
randomized-delay = "5m"
tag = "laptop"
"#;

#[test]
fn a_full_file_is_read_into_jobs_and_arguments() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let jobs = write(d, "jobs.toml", FULL);
    let home_profile = write(d, "home.toml", HOME_PROFILE);
    let laptop = write(d, "laptop.toml", LAPTOP_PROFILE);
    // Not profiles, or not holding a job: left alone.
    write(d, "notes.txt", "not toml [");
    write(d, ".hidden.toml", "not toml [");
    std::fs::create_dir(d.join("dir.toml")).unwrap();
    let config = load(None, d, TimeZone::UTC).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(config.files, [jobs.clone(), home_profile.clone(), laptop.clone()]);
    assert_eq!(config.jobs.keys().collect::<Vec<_>>(), ["home", "inline", "laptop", "plain"]);

    let agent = &config.agent;
    assert_eq!(agent.metrics, Some("127.0.0.1:9898".parse().unwrap()));
    assert!(!agent.metrics_remote);
    assert_eq!(agent.textfile.as_deref(), Some(d.join("metrics/coffer.prom").as_path()));
    assert_eq!(agent.state.as_deref(), Some(Path::new("/var/lib/coffer/agent.sqlite")));

    let home = &config.jobs["home"];
    assert_eq!(home.name, "home");
    assert_eq!(home.defined_at, (jobs.clone(), line_of(FULL, "[job.home]")));
    assert_eq!(home.table, "job.home");
    assert_eq!(home.global_args, ["-P", &s(&home_profile), "--limit-upload", "2048", "--limit-download", "4096"]);
    assert_eq!(home.paths, ["/home", "/etc"]);
    assert_eq!(
        home.backup_args,
        [
            "--exclude",
            "/home/*/.cache",
            "--exclude=-weird",
            "--exclude-file",
            &s(&d.join("excludes.txt")),
            "--exclude-caches",
            "--one-file-system",
            "--exclude-larger-than",
            "2G",
            "--tag",
            "nightly",
            "--tag",
            "home",
            "--host",
            "box",
        ]
    );
    // The job's rules win over the profile's policy.
    assert_eq!(
        home.forget_args.as_deref(),
        Some(
            &[
                "--keep-daily",
                "7",
                "--keep-weekly",
                "5",
                "--keep-within",
                "30d",
                "--keep-tag",
                "keep",
                "--group-by=host,paths"
            ]
            .map(String::from)[..]
        )
    );
    let schedules: Vec<(Kind, &str)> = home.schedules.iter().map(|(k, s)| (*k, s.as_str())).collect();
    assert_eq!(schedules, [(Kind::Backup, "daily"), (Kind::Prune, "Sun 03:00"), (Kind::Check, "*-*-* 04:30")]);
    assert_eq!(home.check_data, CheckData::Subset("1/7".into()));
    assert_eq!(home.randomized_delay, Duration::from_secs(15 * 60));
    assert_eq!(home.retries, 3);
    assert_eq!(home.retry_delay, Duration::from_secs(60));
    assert_eq!(home.overdue, Some(Duration::from_secs(36 * 3600)));
    assert_eq!(home.nice, Some(10));
    assert_eq!(home.ionice, Some(Ionice::Idle));
    assert_eq!(home.hooks.before.as_deref(), Some("/usr/local/sbin/dump-databases"));
    assert_eq!(home.hooks.after_success.as_deref(), Some("echo ok"));
    assert_eq!(home.hooks.after_failure, None);
    assert_eq!(home.hooks.finally, None);
    assert_eq!(home.hooks.timeout, Duration::from_secs(300));
    assert_eq!(home.notify, ["ops", "mail"]);
    assert_eq!(home.notify_on, [Event::Failure, Event::Recovery, Event::Overdue, Event::Success]);
    assert!(home.storage.is_empty());

    let inline = &config.jobs["inline"];
    assert_eq!(
        inline.global_args,
        [
            "--repo",
            "s3:https://s3.example.net/bucket",
            "--password-command",
            "pass show coffer",
            "--connections",
            "16",
            "--cacert",
            "/etc/ssl/ca.pem"
        ]
    );
    assert_eq!(inline.paths, ["/srv"]);
    assert!(inline.backup_args.is_empty());
    assert_eq!(inline.forget_args, None);
    assert_eq!(inline.check_data, CheckData::Rotate(7));
    assert_eq!(inline.retries, 0);
    assert_eq!(inline.retry_delay, Duration::from_secs(90));
    assert_eq!(inline.overdue, None);
    assert_eq!(inline.randomized_delay, Duration::ZERO);
    assert_eq!(inline.ionice, Some(Ionice::BestEffort(3)));
    assert_eq!(inline.nice, None);
    assert_eq!(inline.hooks.timeout, Duration::from_secs(600));
    assert_eq!(inline.hooks.before, None);
    assert!(inline.notify.is_empty());
    assert_eq!(inline.notify_on, [Event::Failure, Event::Recovery, Event::Overdue]);
    assert_eq!(inline.storage["AWS_ACCESS_KEY_ID"], "AKIA123");
    assert_eq!(inline.storage["AWS_SECRET_ACCESS_KEY"], "very-secret");
    assert_eq!(inline.storage_lines["AWS_SECRET_ACCESS_KEY"], line_of(FULL, "AWS_SECRET_ACCESS_KEY"));
    // The zone the line names, not the default.
    let backup = &inline.schedules[&Kind::Backup];
    let t: jiff::Timestamp = "2024-05-15T12:00:00Z".parse().unwrap();
    assert_eq!(backup.next_after(t), Some("2024-05-16T02:30:00Z".parse().unwrap()));
    assert_eq!(inline.schedules[&Kind::Check].as_str(), "weekly");
    assert!(!inline.schedules.contains_key(&Kind::Prune));
    // Storage values never show in Debug output.
    let debug = format!("{inline:?} {config:?}");
    assert!(!debug.contains("very-secret") && !debug.contains("AKIA123"), "{debug}");
    assert!(debug.contains("AWS_SECRET_ACCESS_KEY"), "{debug}");

    // A profile's policy, applied by the profile's own forget.
    let plain = &config.jobs["plain"];
    assert_eq!(plain.global_args, ["-P", &s(&home_profile)]);
    assert_eq!(plain.forget_args, Some(vec![]));
    assert!(plain.schedules.is_empty());
    assert_eq!(plain.notify, ["ops"]);
    assert!(plain.notify_on.is_empty());

    let laptop_job = &config.jobs["laptop"];
    assert_eq!(laptop_job.defined_at, (laptop.clone(), line_of(LAPTOP_PROFILE, "[job]")));
    assert_eq!(laptop_job.table, "job");
    assert_eq!(laptop_job.global_args, ["-P", &s(&laptop)]);
    assert_eq!(laptop_job.paths, ["/home/u"]);
    assert_eq!(laptop_job.backup_args, ["--tag", "laptop"]);
    assert_eq!(laptop_job.forget_args, Some(vec![]));
    assert_eq!(laptop_job.schedules[&Kind::Backup].as_str(), "hourly");
    assert_eq!(laptop_job.randomized_delay, Duration::from_secs(300));

    let ops = &config.notifiers["ops"];
    assert_eq!(ops.name, "ops");
    assert_eq!(ops.rate_limit, Duration::from_secs(3600));
    assert_eq!(ops.cacert, None);
    match &ops.target {
        Target::Webhook { url, preset } => {
            assert_eq!(url, "https://ntfy.example.net/backups");
            assert_eq!(*preset, Preset::Ntfy);
        }
        other => panic!("{other:?}"),
    }
    let mail = &config.notifiers["mail"];
    assert_eq!(mail.rate_limit, Duration::from_secs(600));
    assert_eq!(mail.cacert.as_deref(), Some(d.join("ca.pem").as_path()));
    match &mail.target {
        Target::Mail(m) => {
            assert_eq!(m.smtp, "smtp://mail.example.net:587");
            assert_eq!(m.from, "coffer@example.net");
            assert_eq!(m.to, ["admin@example.net"]);
            assert_eq!(m.username.as_deref(), Some("coffer"));
            assert_eq!(m.password_file.as_deref(), Some(d.join("smtp-password").as_path()));
        }
        other => panic!("{other:?}"),
    }

    // The storage names are checked against those the binary knows.
    config.check_storage_names(&["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"]).unwrap();
    let e = config.check_storage_names(&["AWS_ACCESS_KEY_ID"]).unwrap_err().to_string();
    let prefix =
        format!("{}:{}: job.inline.storage.AWS_SECRET_ACCESS_KEY: ", jobs.display(), line_of(FULL, "AWS_SECRET"));
    assert!(e.starts_with(&prefix) && e.contains("it reads AWS_ACCESS_KEY_ID"), "{e}");
}

#[test]
fn an_explicit_jobs_file_and_the_profiles_beside_it() {
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let jobs = write(
        elsewhere.path(),
        "my-jobs.toml",
        "[job.x]\npaths = [\"/x\"]\nprofile = \"profiles/p.toml\"\nexclude-file = \"ex\"\n",
    );
    std::fs::create_dir(elsewhere.path().join("profiles")).unwrap();
    let p = write(elsewhere.path(), "profiles/p.toml", "repository = \"/r\"\n");
    let laptop = write(dir.path(), "laptop.toml", LAPTOP_PROFILE);
    // Not read: the jobs file given takes its place.
    write(dir.path(), "jobs.toml", "not toml [");
    let config = load(Some(&jobs), dir.path(), TimeZone::UTC).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(config.files, [jobs.clone(), p.clone(), laptop]);
    let x = &config.jobs["x"];
    // Relative paths are from the jobs file's directory.
    assert_eq!(x.global_args, ["-P", &s(&p)]);
    assert_eq!(x.backup_args, ["--exclude-file", &s(&elsewhere.path().join("ex"))]);
    assert_eq!(x.forget_args, None);
    assert!(config.jobs.contains_key("laptop"));

    // The jobs file in the configuration directory under another name is no profile.
    let inside = write(dir.path(), "agent-jobs.toml", "[job.y]\npaths = [\"/y\"]\n");
    let config = load(Some(&inside), dir.path(), TimeZone::UTC).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(config.jobs.keys().collect::<Vec<_>>(), ["laptop", "y"]);
}

#[test]
fn nothing_configured_is_an_empty_configuration() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "home.toml", HOME_PROFILE);
    let config = load(None, dir.path(), TimeZone::UTC).unwrap();
    assert!(config.jobs.is_empty() && config.notifiers.is_empty() && config.files.is_empty());
    assert_eq!(config.agent.metrics, None);
    let missing = dir.path().join("no-such-dir");
    let config = load(None, &missing, TimeZone::UTC).unwrap();
    assert!(config.jobs.is_empty());
    // A jobs file named but missing is an error.
    let e = load(Some(&missing.join("jobs.toml")), dir.path(), TimeZone::UTC).unwrap_err();
    assert!(matches!(e, ConfigError::JobsFileMissing { .. }), "{e}");
    assert!(e.to_string().contains("no-such-dir/jobs.toml: the jobs file does not exist"), "{e}");
}

#[test]
fn a_schedule_that_does_not_parse() {
    let text = "[job.home]\npaths = [\"/home\"]\nschedule = \"dialy\"\n";
    let e = refused(text, "dialy", "job.home.schedule");
    assert!(e.contains("\"dialy\" is not a schedule: unknown word \"dialy\""), "{e}");
    let text = "[job.home]\npaths = [\"/home\"]\ncheck = { schedule = \"*-02-30\" }\n";
    let e = refused(text, "02-30", "job.home.check.schedule");
    assert!(e.contains("matches no time at all"), "{e}");
    let text = "[job.home]\npaths = [\"/home\"]\n\n[job.home.prune]\nschedule = 3\n";
    let e = refused(text, "schedule = 3", "job.home.prune.schedule");
    assert!(e.ends_with("expected a string, found an integer"), "{e}");
    let text = "[job.home]\npaths = [\"/home\"]\nprune = {}\n";
    let e = refused(text, "prune", "job.home.prune");
    assert!(e.contains("schedule is missing"), "{e}");
}

#[test]
fn unknown_keys_and_tables_are_named() {
    let e = refused("[job.home]\npaths = [\"/home\"]\nschedul = \"daily\"\n", "schedul", "job.home.schedul");
    assert!(e.ends_with("unknown key; did you mean \"schedule\"?"), "{e}");
    // Misspelt, the key is named rather than the key it then misses.
    let e = refused("[job.home]\npath = [\"/home\"]\n", "path", "job.home.path");
    assert!(e.contains("did you mean \"paths\"?"), "{e}");
    let e = refused("[jobs.home]\npaths = [\"/home\"]\n", "[jobs.home]", "jobs");
    assert!(e.contains("did you mean \"job\"?"), "{e}");
    let e = refused("[agent]\nmetrix = \"127.0.0.1:1\"\n", "metrix", "agent.metrix");
    assert!(e.contains("did you mean \"metrics\"?"), "{e}");
    let e = refused("[notify.ops]\nurll = \"https://x.example\"\n", "urll", "notify.ops.urll");
    assert!(e.contains("did you mean \"url\"?"), "{e}");
    let text = "[job.home]\npaths = [\"/home\"]\nforget = { keep-dayly = 7 }\n";
    let e = refused(text, "keep-dayly", "job.home.forget.keep-dayly");
    assert!(e.contains("did you mean \"keep-daily\"?"), "{e}");
    let text = "[job.home]\npaths = [\"/home\"]\n[job.home.hooks]\nbefore = \"x\"\nwhatever = 1\n";
    let e = refused(text, "whatever", "job.home.hooks.whatever");
    assert!(e.contains("the keys here are after-failure, after-success, before, finally, timeout"), "{e}");
    let text = "[job.home]\npaths = [\"/home\"]\ncheck = { schedule = \"daily\", read-all = 3 }\n";
    refused(text, "read-all", "job.home.check.read-all");
}

#[test]
fn values_of_the_wrong_type_or_range() {
    let job = |extra: &str| format!("[job.home]\npaths = [\"/home\"]\n{extra}\n");
    let e = refused(&job("retries = \"3\""), "retries", "job.home.retries");
    assert!(e.ends_with("expected an integer from 0 to 30, found a string"), "{e}");
    let e = refused(&job("retries = 31"), "retries", "job.home.retries");
    assert!(e.contains("31: give an integer from 0 to 30"), "{e}");
    let e = refused(&job("nice = 20"), "nice", "job.home.nice");
    assert!(e.contains("from -20 to 19"), "{e}");
    let e = refused(&job("ionice = \"realtime\""), "ionice", "job.home.ionice");
    assert!(e.contains("best-effort:N"), "{e}");
    let e = refused(&job("ionice = \"best-effort:8\""), "ionice", "job.home.ionice");
    assert!(e.contains("best-effort:N"), "{e}");
    let e = refused(&job("randomized-delay = \"soon\""), "randomized", "job.home.randomized-delay");
    assert!(e.contains("\"soon\" is not a duration"), "{e}");
    let e = refused(&job("retry-delay = \"0s\""), "retry-delay", "job.home.retry-delay");
    assert!(e.contains("longer than zero"), "{e}");
    let e = refused(&job("limit-upload = 0"), "limit-upload", "job.home.limit-upload");
    assert!(e.contains("KiB/s"), "{e}");
    let e = refused(&job("connections = 2000"), "connections", "job.home.connections");
    assert!(e.contains("from 1 to 1024"), "{e}");
    let e = refused(&job("exclude-caches = \"yes\""), "exclude-caches", "job.home.exclude-caches");
    assert!(e.contains("expected true or false, found a string"), "{e}");
    let e = refused(&job("exclude-larger-than = \"2X\""), "larger", "job.home.exclude-larger-than");
    assert!(e.contains("not a size"), "{e}");
    let e = refused(&job("tag = [\"a,b\"]"), "tag", "job.home.tag");
    assert!(e.contains("holds a comma"), "{e}");
    let e = refused(&job("exclude = [\"ok\", 3]"), "exclude", "job.home.exclude");
    assert!(e.contains("found an integer in the list"), "{e}");
    let e = refused(&job("forget = { keep-within = \"30x\" }"), "forget", "job.home.forget.keep-within");
    assert!(e.contains("unknown unit 'x'"), "{e}");
    let e = refused(&job("forget = { group-by = \"host\" }"), "forget", "job.home.forget");
    assert!(e.contains("no keep rule"), "{e}");
    let e = refused(&job("forget = { keep-daily = 1, group-by = \"hosts\" }"), "forget", "job.home.forget.group-by");
    assert!(e.contains("cannot group by \"hosts\""), "{e}");
    let e = refused(
        &job("check = { schedule = \"daily\", read-data-subset = \"8/7\" }"),
        "check",
        "job.home.check.read-data-subset",
    );
    assert!(e.contains("1 <= n <= t"), "{e}");
    let e = refused(
        &job("check = { schedule = \"daily\", read-data-subset = \"1/7\", read-all-every = 7 }"),
        "check",
        "job.home.check.read-all-every",
    );
    assert!(e.contains("not both"), "{e}");
    let e = refused(&job("notify-on = [\"failure\", \"sometimes\"]"), "notify-on", "job.home.notify-on");
    assert!(e.contains("\"sometimes\" is not an event: give some of failure, recovery, overdue, success"), "{e}");
    let e = refused(&job("hooks = { timeout = \"0s\" }"), "hooks", "job.home.hooks.timeout");
    assert!(e.contains("longer than zero"), "{e}");
    let e =
        refused(&job("repository = \"/r\"\nrepository-file = \"/f\""), "repository-file", "job.home.repository-file");
    assert!(e.contains("give repository or repository-file, not both"), "{e}");
    let e = refused(
        &job("password-file = \"/p\"\npassword-command = \"x\""),
        "password-command",
        "job.home.password-command",
    );
    assert!(e.contains("not both"), "{e}");
    let e = refused(
        &job("[job.home.storage]\nCOFFER_PASSWORD = \"x\""),
        "COFFER_PASSWORD",
        "job.home.storage.COFFER_PASSWORD",
    );
    assert!(e.contains("password-file"), "{e}");
    let e = refused(&job("[job.home.storage]\nlower = \"x\""), "lower", "job.home.storage.lower");
    assert!(e.contains("not a storage variable's name"), "{e}");
    let e = refused(&job("[job.home.storage]\nAWS_REGION = 3"), "AWS_REGION", "job.home.storage.AWS_REGION");
    assert!(e.contains("expected a string"), "{e}");
}

#[test]
fn values_at_their_bounds() {
    let dir = tempfile::tempdir().unwrap();
    let text = "[job.j]\npaths = [\"/j\"]\nnice = -20\nretries = 30\nexclude-larger-than = 1_048_576\n\
                randomized-delay = \"0s\"\nhost = \"-h\"\nforget = { keep-last = 0x10, group-by = \"\" }\n";
    write(dir.path(), "jobs.toml", text);
    let c = load(None, dir.path(), TimeZone::UTC).unwrap_or_else(|e| panic!("{e}"));
    let j = &c.jobs["j"];
    assert_eq!(j.nice, Some(-20));
    assert_eq!(j.retries, 30);
    assert_eq!(j.randomized_delay, Duration::ZERO);
    assert_eq!(j.backup_args, ["--exclude-larger-than", "1048576", "--host=-h"]);
    assert_eq!(j.forget_args, Some(vec!["--keep-last".to_string(), "16".to_string(), "--group-by=".to_string()]));
}

#[test]
fn paths_are_required_and_absolute() {
    let text = "\n[job.home]\nschedule = \"daily\"\n";
    let e = refused(text, "[job.home]", "job.home");
    assert!(e.contains("paths is missing"), "{e}");
    let e = refused("[job.home]\npaths = []\n", "paths", "job.home.paths");
    assert!(e.contains("no paths"), "{e}");
    let e = refused("[job.home]\npaths = [\"docs\"]\n", "paths", "job.home.paths");
    assert!(e.contains("\"docs\" is not an absolute path"), "{e}");
    let e = refused("[job]\npaths = [\"/home\"]\n", "paths", "job.paths");
    assert!(e.contains("each job is a table [job.NAME]"), "{e}");
    let e = refused("[job.\"a b\"]\npaths = [\"/home\"]\n", "[job.", "job.a b");
    assert!(e.contains("not a usable name"), "{e}");
}

#[test]
fn a_passphrase_written_inline_is_refused() {
    let e = refused("[job.home]\npaths = [\"/h\"]\npassword = \"hunter2\"\n", "password", "job.home.password");
    assert!(e.contains("password-file") && e.contains("password-command"), "{e}");
    assert!(!e.contains("hunter2"), "{e}");
    let text = "[notify.m]\nsmtp = \"smtp://mail.example.net\"\nfrom = \"a@b\"\nto = \"c@d\"\npassword = \"hunter2\"\n";
    let e = refused(text, "password", "notify.m.password");
    assert!(e.contains("password-file") && !e.contains("hunter2"), "{e}");
}

#[test]
fn a_notifier_that_is_not_defined() {
    let text =
        "[job.home]\npaths = [\"/h\"]\nnotify = [\"ops\", \"pager\"]\n\n[notify.ops]\nurl = \"https://h.example/x\"\n";
    let e = refused(text, "notify = ", "job.home.notify");
    assert!(
        e.contains("no notifier \"pager\": define it as [notify.pager]") && e.contains("those defined are ops"),
        "{e}"
    );
}

#[test]
fn notifiers_are_checked() {
    let e = refused("[notify.x]\nurl = \"ftp://h.example/x\"\n", "url", "notify.x.url");
    assert!(e.contains("the scheme \"ftp\" is not http or https"), "{e}");
    let e = refused("[notify.x]\nurl = \"https://h.example/x\"\npreset = \"teams\"\n", "preset", "notify.x.preset");
    assert!(e.contains("give one of json, ntfy, gotify, slack, discord, healthchecks"), "{e}");
    let e = refused("[notify.x]\nurl = \"https://h.example/x\"\nfrom = \"a@b\"\n", "from", "notify.x.from");
    assert!(e.contains("only e-mail notifiers"), "{e}");
    let e = refused("\n[notify.x]\ncacert = \"ca.pem\"\n", "[notify.x]", "notify.x");
    assert!(e.contains("give url"), "{e}");
    let mail = |smtp: &str| {
        format!("[notify.m]\nsmtp = \"{smtp}\"\nfrom = \"coffer@example.net\"\nto = [\"a@example.net\"]\n")
    };
    let e = refused(&mail("smtp+insecure://mail.example.net:25"), "smtp", "notify.m.smtp");
    assert!(e.contains("for a server on this machine only"), "{e}");
    let e = refused(&mail("smtp+insecure://10.0.0.1:25"), "smtp", "notify.m.smtp");
    assert!(e.contains("for a server on this machine only"), "{e}");
    let e = refused(&mail("smtps://user:pw@mail.example.net"), "smtp", "notify.m.smtp");
    assert!(e.contains("user name or password") && !e.contains("pw@"), "{e}");
    let e = refused(&mail("imap://mail.example.net"), "smtp", "notify.m.smtp");
    assert!(e.contains("not smtp, smtps or smtp+insecure"), "{e}");
    let e = refused("\n[notify.m]\nsmtp = \"smtp://m.example\"\nto = \"a@b\"\n", "[notify.m]", "notify.m");
    assert!(e.contains("from is missing"), "{e}");
    let e =
        refused("[notify.m]\nsmtp = \"smtp://m.example\"\nfrom = \"nobody\"\nto = \"a@b\"\n", "from", "notify.m.from");
    assert!(e.contains("not an e-mail address"), "{e}");
    let text = "\n[notify.m]\nsmtp = \"smtp://m.example\"\nfrom = \"a@b\"\nto = \"a@b\"\nusername = \"u\"\n";
    let e = refused(text, "[notify.m]", "notify.m");
    assert!(e.contains("username and password-file go together"), "{e}");
    let e = refused("[notify.m]\nurl = \"https://h.example\"\nsmtp = \"smtp://m.example\"\n", "smtp", "notify.m.smtp");
    assert!(e.contains("not both"), "{e}");
    // Loopback hosts may take plain text.
    for ok in ["smtp+insecure://127.0.0.1:2525", "smtp+insecure://localhost", "smtp+insecure://[::1]:25"] {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "jobs.toml", &mail(ok));
        let c = load(None, dir.path(), TimeZone::UTC).unwrap_or_else(|e| panic!("{ok}: {e}"));
        assert!(matches!(&c.notifiers["m"].target, Target::Mail(m) if m.smtp == ok));
    }
}

#[test]
fn the_metrics_address() {
    let e = refused("[agent]\nmetrics = \"0.0.0.0:9898\"\n", "metrics", "agent.metrics");
    assert!(e.contains("not a loopback address") && e.contains("metrics-remote = true"), "{e}");
    let e = refused("[agent]\nmetrics = \"localhost\"\n", "metrics", "agent.metrics");
    assert!(e.contains("not an address and port"), "{e}");
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "jobs.toml", "[agent]\nmetrics = \"0.0.0.0:9898\"\nmetrics-remote = true\n");
    let c = load(None, dir.path(), TimeZone::UTC).unwrap();
    assert_eq!(c.agent.metrics, Some("0.0.0.0:9898".parse().unwrap()));
    assert!(c.agent.metrics_remote);
}

#[test]
fn toml_syntax_errors_give_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "jobs.toml", "[job.home]\npaths = [\"/h\"]\nschedule = daily\n");
    let e = error(dir.path());
    assert!(e.starts_with(&format!("{}:3: not valid TOML: ", path.display())), "{e}");
}

#[test]
fn profile_jobs() {
    let dir = tempfile::tempdir().unwrap();
    // A bad job in a profile names the profile.
    let bad = write(dir.path(), "bad.toml", "repository = \"/r\"\n[job]\npaths = []\n");
    let e = error(dir.path());
    assert!(e.starts_with(&format!("{}:3: job.paths: no paths", bad.display())), "{e}");
    std::fs::remove_file(&bad).unwrap();
    let bad = write(dir.path(), "bad.toml", "[job]\npaths = [\"/p\"]\nprofile = \"other\"\n");
    let e = error(dir.path());
    assert!(e.starts_with(&format!("{}:3: job.profile: a profile's job uses that profile", bad.display())), "{e}");
    std::fs::remove_file(&bad).unwrap();
    let bad = write(dir.path(), "bad name.toml", "[job]\npaths = [\"/p\"]\n");
    let e = error(dir.path());
    assert!(e.starts_with(&format!("{}:1: job: the job takes the profile's name", bad.display())), "{e}");
    std::fs::remove_file(&bad).unwrap();
    // A profile that is not TOML is refused: it may hold a job.
    let bad = write(dir.path(), "broken.toml", "repository = \n");
    let e = error(dir.path());
    assert!(e.starts_with(&format!("{}:1: not valid TOML", bad.display())), "{e}");
    std::fs::remove_file(&bad).unwrap();

    // A profile job and a jobs-file job of the same name.
    let laptop = write(dir.path(), "laptop.toml", LAPTOP_PROFILE);
    let jobs_text = "[notify.ops]\nurl = \"https://h.example\"\n\n[job.laptop]\npaths = [\"/x\"]\n";
    let jobs = write(dir.path(), "jobs.toml", jobs_text);
    let e = error(dir.path());
    assert!(e.starts_with(&format!("{}:{}: job \"laptop\" is defined twice", laptop.display(), 10)), "{e}");
    assert!(e.contains(&format!("{}:{}", jobs.display(), line_of(jobs_text, "[job.laptop]"))), "{e}");

    // A profile job names the jobs file's notifiers.
    write(dir.path(), "jobs.toml", "[notify.ops]\nurl = \"https://h.example\"\n");
    write(dir.path(), "laptop.toml", &format!("{LAPTOP_PROFILE}notify = [\"ops\"]\n"));
    let c = load(None, dir.path(), TimeZone::UTC).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.jobs["laptop"].notify, ["ops"]);
    write(dir.path(), "laptop.toml", &format!("{LAPTOP_PROFILE}notify = [\"pager\"]\n"));
    let e = error(dir.path());
    assert!(e.starts_with(&format!("{}:{}: job.notify: no notifier \"pager\"", laptop.display(), 15)), "{e}");
}

#[test]
fn a_missing_profile_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let text = "[job.home]\npaths = [\"/h\"]\nprofile = \"nope\"\n";
    let e = refused(text, "profile", "job.home.profile");
    assert!(e.contains("nope.toml does not exist"), "{e}");
    // The name resolves in the configuration directory.
    write(dir.path(), "nope.toml", "repository = \"/r\"\n");
    write(dir.path(), "jobs.toml", text);
    let c = load(None, dir.path(), TimeZone::UTC).unwrap();
    assert_eq!(c.jobs["home"].global_args, ["-P", &s(&dir.path().join("nope.toml"))]);
}

#[test]
fn files_that_are_not_configuration() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("jobs.toml")).unwrap();
    let e = error(dir.path());
    assert!(e.contains("jobs.toml: not a regular file (a directory)"), "{e}");
    let dir = tempfile::tempdir().unwrap();
    let big = "# padding\n".repeat(120_000);
    write(dir.path(), "jobs.toml", &big);
    let e = error(dir.path());
    assert!(e.contains("larger than 1048576 bytes"), "{e}");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("jobs.toml"), b"# \xff\xfe\n").unwrap();
    let e = error(dir.path());
    assert!(e.contains("not UTF-8"), "{e}");
}
