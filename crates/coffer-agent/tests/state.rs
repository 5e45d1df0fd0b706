//! The state database on real SQLite files: two writers at once, reopening,
//! the schema version, abandoned runs and times.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use coffer_agent::config::{Event, Kind};
use coffer_agent::state::{Db, Finish, Outcome, RunId, StateError, Trigger, pid_alive};
use jiff::Timestamp;

fn ts(ms: i64) -> Timestamp {
    Timestamp::from_millisecond(ms).unwrap()
}

fn finish(db: &Db, id: RunId, ended: Timestamp, outcome: Outcome) {
    db.finish_run(id, Finish { ended, outcome, exit_code: Some(0), snapshot: None, summary: None, error: None })
        .unwrap();
}

#[test]
fn creates_private_files_and_directories() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a/b/agent.sqlite");
    let db = Db::open(&path).unwrap();
    db.start_run("home", Kind::Backup, Trigger::Manual, None, ts(1_000), 1).unwrap();
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(&dir.path().join("a/b")), 0o700);
    assert_eq!(mode(&dir.path().join("a")), 0o700);
    let wal = dir.path().join("a/b/agent.sqlite-wal");
    assert!(wal.exists(), "the database is in WAL mode");
    assert_eq!(mode(&wal), 0o600);
}

#[test]
fn reopen_keeps_runs_slots_rounds_and_notices() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.sqlite");
    let summary = serde_json::json!({"type": "summary", "summary": {"bytes_read": 12345}});
    let id = {
        let db = Db::open(&path).unwrap();
        let id = db.start_run("home", Kind::Backup, Trigger::Schedule, Some(ts(3_600_000)), ts(3_600_123), 42).unwrap();
        db.finish_run(
            id,
            Finish {
                ended: ts(3_660_456),
                outcome: Outcome::Warning,
                exit_code: Some(3),
                snapshot: Some("abc123"),
                summary: Some(&summary),
                error: Some("2 entries unreadable"),
            },
        )
        .unwrap();
        db.set_slot("home", Kind::Backup, ts(3_600_000)).unwrap();
        assert_eq!(db.bump_check_round("home").unwrap(), 1);
        assert_eq!(db.bump_check_round("home").unwrap(), 2);
        db.set_notice_sent("home", Event::Failure, "ops", ts(5_000)).unwrap();
        id
    };
    let db = Db::open(&path).unwrap();
    let run = db.last_run("home", Kind::Backup).unwrap().expect("the run is kept");
    assert_eq!(run.id, id);
    assert_eq!(run.job, "home");
    assert_eq!(run.kind, Kind::Backup);
    assert_eq!(run.trigger, Trigger::Schedule);
    assert_eq!(run.slot, Some(ts(3_600_000)));
    assert_eq!(run.started, ts(3_600_123));
    assert_eq!(run.ended, Some(ts(3_660_456)));
    assert_eq!(run.outcome, Outcome::Warning);
    assert_eq!(run.exit_code, Some(3));
    assert_eq!(run.snapshot.as_deref(), Some("abc123"));
    assert_eq!(run.summary, Some(summary));
    assert_eq!(run.error.as_deref(), Some("2 entries unreadable"));
    assert_eq!(run.pid, Some(42));
    assert_eq!(run.duration().unwrap().as_millis(), 60_333);
    assert_eq!(db.last_success("home", Kind::Backup).unwrap().unwrap().id, id, "a warning counts as a success");
    assert_eq!(db.slot("home", Kind::Backup).unwrap(), Some(ts(3_600_000)));
    assert_eq!(db.slot("home", Kind::Prune).unwrap(), None);
    assert_eq!(db.check_round("home").unwrap(), 2);
    assert_eq!(db.check_round("other").unwrap(), 0);
    assert_eq!(db.notice_sent("home", Event::Failure, "ops").unwrap(), Some(ts(5_000)));
    assert_eq!(db.notice_sent("home", Event::Failure, "mail").unwrap(), None, "the notifier is in the key");
    assert_eq!(db.notice_sent("home", Event::Overdue, "ops").unwrap(), None);

    let ro = Db::open_read_only(&path).unwrap();
    assert_eq!(ro.runs(None, 10).unwrap().len(), 1);
    let err = ro.start_run("home", Kind::Backup, Trigger::Manual, None, ts(1), 1).unwrap_err();
    assert!(err.to_string().contains(&path.display().to_string()), "{err}");
}

#[test]
fn times_round_trip_at_millisecond_precision() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(&dir.path().join("s.sqlite")).unwrap();
    let times: Vec<Timestamp> = vec![
        ts(0),
        ts(-86_400_123),
        ts(1_767_225_599_999),
        "2026-03-29T01:30:00.250+00:00".parse().unwrap(),
        "9999-12-29T23:59:59.999Z".parse().unwrap(),
    ];
    for (i, t) in times.iter().enumerate() {
        let slot = Timestamp::from_second(t.as_second()).unwrap();
        let id = db.start_run("t", Kind::Check, Trigger::CatchUp, Some(slot), *t, i as i64).unwrap();
        finish(&db, id, *t, Outcome::Success);
        let got = db.runs_of("t", Kind::Check, 100).unwrap().into_iter().find(|r| r.id == id).unwrap();
        assert_eq!(got.started, *t);
        assert_eq!(got.ended, Some(*t));
        assert_eq!(got.slot, Some(slot));
        db.set_slot("t", Kind::Check, slot).unwrap();
        assert_eq!(db.slot("t", Kind::Check).unwrap(), Some(slot));
        db.set_notice_sent("t", Event::Success, "n", *t).unwrap();
        assert_eq!(db.notice_sent("t", Event::Success, "n").unwrap(), Some(*t));
    }
    // A slot keeps whole seconds.
    db.set_slot("t", Kind::Backup, ts(10_999)).unwrap();
    assert_eq!(db.slot("t", Kind::Backup).unwrap(), Some(ts(10_000)));
}

#[test]
fn a_later_schema_version_is_refused_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.sqlite");
    drop(Db::open(&path).unwrap());
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.pragma_update(None, "user_version", 2).unwrap();
    drop(conn);
    for err in [Db::open(&path).unwrap_err(), Db::open_read_only(&path).unwrap_err()] {
        assert!(matches!(err, StateError::TooNew { found: 2, .. }), "{err:?}");
        let msg = err.to_string();
        assert!(msg.contains(&path.display().to_string()) && msg.contains("version 2"), "{msg}");
    }
}

#[test]
fn read_only_open_of_a_missing_or_empty_file_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("none.sqlite");
    let err = Db::open_read_only(&path).unwrap_err();
    assert!(err.to_string().contains("none.sqlite"), "{err}");
    assert!(!path.exists(), "a read-only open creates nothing");
    std::fs::write(&path, b"").unwrap();
    let err = Db::open_read_only(&path).unwrap_err();
    assert!(err.to_string().contains("no coffer state yet"), "{err}");
}

#[test]
fn a_file_that_is_not_a_database_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("junk.sqlite");
    std::fs::write(&path, vec![0x5a; 8192]).unwrap();
    let err = Db::open(&path).unwrap_err();
    assert!(err.to_string().contains("junk.sqlite"), "{err}");
}

#[test]
fn abandoned_runs_are_marked_interrupted_and_live_ones_kept() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(&dir.path().join("s.sqlite")).unwrap();
    // A real process that has ended, and this one, which runs.
    let mut child = Command::new("true").spawn().unwrap();
    let dead = i64::from(child.id());
    child.wait().unwrap();
    let me = i64::from(std::process::id());
    assert!(!pid_alive(dead));
    assert!(pid_alive(me));

    let gone = db.start_run("a", Kind::Backup, Trigger::Schedule, None, ts(1_000), dead).unwrap();
    let live = db.start_run("b", Kind::Backup, Trigger::Schedule, None, ts(2_000), me).unwrap();
    let done = db.start_run("a", Kind::Prune, Trigger::Manual, None, ts(3_000), dead).unwrap();
    finish(&db, done, ts(4_000), Outcome::Success);
    assert_eq!(db.running(None).unwrap().iter().map(|r| r.id).collect::<Vec<_>>(), vec![gone, live]);

    let marked = db.mark_abandoned(ts(9_000), pid_alive).unwrap();
    assert_eq!(marked, vec![gone]);
    let run = db.last_run("a", Kind::Backup).unwrap().unwrap();
    assert_eq!(run.outcome, Outcome::Interrupted);
    assert_eq!(run.ended, Some(ts(9_000)));
    assert!(run.error.unwrap().contains(&format!("pid {dead}")));
    assert_eq!(db.running(None).unwrap().iter().map(|r| r.id).collect::<Vec<_>>(), vec![live]);
    assert_eq!(db.running(Some("a")).unwrap().len(), 0);
    assert_eq!(db.last_run("a", Kind::Prune).unwrap().unwrap().outcome, Outcome::Success, "ended runs stay");
    assert!(db.mark_abandoned(ts(10_000), pid_alive).unwrap().is_empty(), "marking twice marks nothing");
}

#[test]
fn history_queries() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(&dir.path().join("s.sqlite")).unwrap();
    let outcomes = [Outcome::Success, Outcome::Failure, Outcome::Failure, Outcome::Warning, Outcome::Skipped];
    let mut ids = Vec::new();
    for (i, o) in outcomes.iter().enumerate() {
        let t = 1_000 * (i as i64 + 1);
        let id = db.start_run("home", Kind::Backup, Trigger::Schedule, None, ts(t), 1).unwrap();
        finish(&db, id, ts(t + 500), *o);
        ids.push(id);
    }
    let other = db.start_run("work", Kind::Check, Trigger::Manual, None, ts(99_000), 1).unwrap();
    let running = db.start_run("home", Kind::Backup, Trigger::Retry, None, ts(100_000), 1).unwrap();

    assert_eq!(db.last_run("home", Kind::Backup).unwrap().unwrap().id, ids[4], "the newest ended run");
    assert_eq!(db.last_success("home", Kind::Backup).unwrap().unwrap().id, ids[3], "a warning is a success");
    assert!(db.last_run("home", Kind::Prune).unwrap().is_none());
    let all = db.runs(None, 100).unwrap();
    assert_eq!(all.len(), 7);
    assert_eq!(all[0].id, running, "newest first");
    assert_eq!(all[1].id, other);
    let home: Vec<RunId> = db.runs(Some("home"), 3).unwrap().iter().map(|r| r.id).collect();
    assert_eq!(home, vec![running, ids[4], ids[3]]);
    assert_eq!(
        db.outcome_counts("home", Kind::Backup).unwrap(),
        vec![
            (Outcome::Running, 1),
            (Outcome::Success, 1),
            (Outcome::Warning, 1),
            (Outcome::Failure, 2),
            (Outcome::Skipped, 1)
        ]
    );
    assert_eq!(db.running(Some("home")).unwrap()[0].trigger, Trigger::Retry);
    assert!(
        db.finish_run(
            RunId(9999),
            Finish {
                ended: ts(1),
                outcome: Outcome::Success,
                exit_code: None,
                snapshot: None,
                summary: None,
                error: None
            }
        )
        .unwrap_err()
        .to_string()
        .contains("run 9999")
    );
}

#[test]
fn enums_round_trip_through_their_names() {
    for t in Trigger::ALL {
        assert_eq!(Trigger::parse(t.as_str()), Some(t));
    }
    for o in Outcome::ALL {
        assert_eq!(Outcome::parse(o.as_str()), Some(o));
    }
    assert_eq!(Trigger::parse("catch-up"), Some(Trigger::CatchUp));
    assert_eq!(Outcome::parse("Success"), None);
    assert!(Outcome::Warning.is_success() && !Outcome::Skipped.is_success());
}

/// A child process of this test binary that writes runs into `path`, for two
/// processes' worth of writers.
fn writer_child(path: &std::path::Path, job: &str, n: usize) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "concurrent_writer_child", "--nocapture", "--test-threads=1"])
        .env("COFFER_STATE_TEST_DB", path)
        .env("COFFER_STATE_TEST_JOB", job)
        .env("COFFER_STATE_TEST_N", n.to_string())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

/// Not a test by itself: the writer that [`writer_child`] starts.
#[test]
fn concurrent_writer_child() {
    let Some(path) = std::env::var_os("COFFER_STATE_TEST_DB") else { return };
    let job = std::env::var("COFFER_STATE_TEST_JOB").unwrap();
    let n: usize = std::env::var("COFFER_STATE_TEST_N").unwrap().parse().unwrap();
    let db = Db::open(std::path::Path::new(&path)).unwrap();
    for i in 0..n {
        let id = db
            .start_run(&job, Kind::Backup, Trigger::Schedule, None, ts(i as i64), i64::from(std::process::id()))
            .unwrap();
        finish(&db, id, ts(i as i64 + 1), Outcome::Success);
        db.bump_check_round("shared").unwrap();
        db.set_notice_sent(&job, Event::Success, "n", ts(i as i64)).unwrap();
    }
}

#[test]
fn two_processes_and_two_connections_write_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.sqlite");
    // The file does not exist yet: both processes create it at once.
    const N: usize = 150;
    let mut a = writer_child(&path, "a", N);
    let mut b = writer_child(&path, "b", N);
    // And two connections of this process, on threads.
    let threads: Vec<_> = ["c", "d"]
        .into_iter()
        .map(|job| {
            let path = path.clone();
            std::thread::spawn(move || {
                // The children may be creating the schema: open waits for them.
                let db = Db::open(&path).unwrap();
                for i in 0..N {
                    let id = db.start_run(job, Kind::Backup, Trigger::Manual, None, ts(i as i64), 7).unwrap();
                    finish(&db, id, ts(i as i64 + 1), Outcome::Success);
                    db.bump_check_round("shared").unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert!(a.wait().unwrap().success(), "writer a failed");
    assert!(b.wait().unwrap().success(), "writer b failed");
    let db = Db::open_read_only(&path).unwrap();
    for job in ["a", "b", "c", "d"] {
        assert_eq!(db.outcome_counts(job, Kind::Backup).unwrap(), vec![(Outcome::Success, N as u64)], "job {job}");
    }
    assert_eq!(db.check_round("shared").unwrap(), 4 * N as u32, "every bump counted");
    assert_eq!(db.runs(None, 10_000).unwrap().len(), 4 * N);
}
