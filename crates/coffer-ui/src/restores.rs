//! Restores started from the UI (docs/design.md#ui-restore): each one runs on a
//! thread of its own through the restorer the command line uses, its progress
//! counted as it goes; the newest [`KEPT`] are kept with their results, for the
//! history the pages show, until the UI ends.
//!
//! A restore from the UI never restores what only root may create (owners,
//! set-id bits, device nodes): what was withheld is counted and told, and
//! `coffer restore --privileged` restores it.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use coffer_core::Id;
use coffer_core::format::snapshot::Snapshot;
use coffer_core::ops::restore::{Overwrite, RestoreOptions, RestoreSummary};
use coffer_core::progress::Progress;
use coffer_core::repo::Repository;
use serde_json::{Value, json};

/// Restores kept in the history, newest first.
pub const KEPT: usize = 50;
/// Failures kept of one restore (all are counted).
const FAILURES_KEPT: usize = 100;

/// What the user asked for.
#[derive(Clone, Debug)]
pub struct Order {
    pub repo: String,
    pub snapshot: Id,
    /// The entry restored, relative to the snapshot's root (empty: all of it).
    pub path: Vec<u8>,
    /// An absolute path.
    pub target: PathBuf,
    pub overwrite: Overwrite,
}

/// The overwrite modes by the names the form and the API use.
pub const OVERWRITE: [(&str, Overwrite, &str); 5] = [
    ("refuse", Overwrite::Refuse, "refuse a target that is not empty"),
    ("never", Overwrite::Never, "keep what is there, add what is missing"),
    ("if-changed", Overwrite::IfChanged, "replace files whose size or time differ"),
    ("if-newer", Overwrite::IfNewer, "replace files older than the snapshot's"),
    ("always", Overwrite::Always, "replace everything the snapshot has"),
];

pub fn overwrite_name(o: Overwrite) -> &'static str {
    OVERWRITE.iter().find(|(_, m, _)| *m == o).map_or("refuse", |(n, _, _)| n)
}

pub fn parse_overwrite(name: &str) -> Option<Overwrite> {
    OVERWRITE.iter().find(|(n, _, _)| *n == name).map(|(_, m, _)| *m)
}

impl Order {
    /// Checks the target: absolute, without `..`.
    pub fn check(&self) -> Result<(), String> {
        let t = &self.target;
        if !t.is_absolute() {
            return Err(format!("the target {} is not an absolute path", t.display()));
        }
        if t.components().any(|c| matches!(c, std::path::Component::ParentDir)) {
            return Err(format!("the target {} has a `..` component: give it plainly", t.display()));
        }
        Ok(())
    }

    fn options(&self, dry_run: bool) -> RestoreOptions {
        let subpath = (!self.path.is_empty()).then(|| {
            use std::os::unix::ffi::OsStrExt;
            PathBuf::from(std::ffi::OsStr::from_bytes(&self.path))
        });
        RestoreOptions {
            target: self.target.clone(),
            subpath,
            overwrite: self.overwrite,
            dry_run,
            privileged: false,
            ..RestoreOptions::default()
        }
    }

    fn to_json(&self) -> Value {
        json!({
            "repository": self.repo, "snapshot": self.snapshot.to_hex(),
            "path": crate::http::encode_query(&self.path), "target": self.target,
            "overwrite": overwrite_name(self.overwrite),
        })
    }
}

/// What a restore did (or a dry run would do).
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    pub files: u64,
    pub dirs: u64,
    pub others: u64,
    pub bytes: u64,
    pub skipped: u64,
    pub deleted: u64,
    pub warnings: u64,
    /// The first failures: path and why.
    pub failures: Vec<(String, String)>,
    pub failure_count: u64,
    /// What only root may create, left out.
    pub withheld: u64,
}

impl Outcome {
    fn of(s: &RestoreSummary) -> Outcome {
        let w = &s.withheld;
        Outcome {
            files: s.files,
            dirs: s.dirs,
            others: s.others,
            bytes: s.bytes,
            skipped: s.skipped,
            deleted: s.deleted,
            warnings: s.warnings,
            failures: s
                .failures
                .iter()
                .take(FAILURES_KEPT)
                .map(|(p, e)| (p.display().to_string(), e.to_string()))
                .collect(),
            failure_count: s.failures.len() as u64,
            withheld: w.owners + w.setid + w.xattrs + w.devices,
        }
    }

    pub fn to_json(&self) -> Value {
        json!({
            "files": self.files, "dirs": self.dirs, "others": self.others, "bytes": self.bytes,
            "skipped": self.skipped, "deleted": self.deleted, "warnings": self.warnings,
            "failures": self.failure_count,
            "failure_list": self.failures.iter().map(|(p, m)| json!({"path": p, "message": m})).collect::<Vec<_>>(),
            "withheld": self.withheld,
        })
    }
}

/// What the restore would do, nothing written.
pub fn dry_run(repo: &Repository, snap: &Snapshot, order: &Order) -> Result<Outcome, coffer_core::Error> {
    let s = coffer_core::ops::restore::restore(repo, snap, &order.options(true), &coffer_core::progress::NoProgress)?;
    Ok(Outcome::of(&s))
}

/// One restore started from the UI.
pub struct Task {
    pub id: u64,
    pub order: Order,
    pub started: jiff::Timestamp,
    counts: Counts,
    end: Mutex<Option<End>>,
}

#[derive(Default)]
struct Counts {
    bytes: AtomicU64,
    files: AtomicU64,
    total_bytes: AtomicU64,
    total_files: AtomicU64,
}

/// How a restore ended.
#[derive(Clone, Debug)]
pub struct End {
    pub ended: jiff::Timestamp,
    /// What it did, or why it did not start (the target not empty, say).
    pub result: Result<Outcome, String>,
}

impl Progress for Task {
    fn wants_totals(&self) -> bool {
        true
    }
    fn set_total(&self, bytes: u64, items: u64) {
        self.counts.total_bytes.store(bytes, Ordering::Relaxed);
        self.counts.total_files.store(items, Ordering::Relaxed);
    }
    fn add_bytes(&self, n: u64) {
        self.counts.bytes.fetch_add(n, Ordering::Relaxed);
    }
    fn add_item(&self, _path: &Path) {
        self.counts.files.fetch_add(1, Ordering::Relaxed);
    }
}

impl Task {
    pub fn end(&self) -> Option<End> {
        self.end.lock().expect("restore end lock").clone()
    }

    /// The figures so far (and the result, once ended).
    pub fn to_json(&self) -> Value {
        let c = &self.counts;
        let (bytes, total) = (c.bytes.load(Ordering::Relaxed), c.total_bytes.load(Ordering::Relaxed));
        let elapsed = jiff::Timestamp::now().duration_since(self.started).as_secs_f64().max(0.0);
        let end = self.end();
        let mut v = json!({
            "type": "restore", "id": self.id, "order": self.order.to_json(), "started": self.started.to_string(),
            "state": match &end { None => "running", Some(End { result: Ok(o), .. }) if o.failure_count == 0 => "done",
                                  Some(End { result: Ok(_), .. }) => "done with failures", Some(_) => "failed" },
            "bytes_done": bytes, "files_done": c.files.load(Ordering::Relaxed),
            "total_bytes": total, "total_files": c.total_files.load(Ordering::Relaxed),
        });
        if end.is_none() && elapsed >= 1.0 && bytes > 0 {
            let rate = bytes as f64 / elapsed;
            v["rate"] = json!(rate.round());
            v["eta_seconds"] = json!((total.saturating_sub(bytes) as f64 / rate).ceil());
        }
        if let Some(e) = end {
            v["ended"] = json!(e.ended.to_string());
            match e.result {
                Ok(o) => v["result"] = o.to_json(),
                Err(m) => v["error"] = json!(m),
            }
        }
        v
    }
}

/// The restores of this UI, newest first.
#[derive(Default)]
pub struct Restores {
    next: AtomicU64,
    list: Mutex<VecDeque<Arc<Task>>>,
}

impl Restores {
    /// Starts restoring `snap` as `order` says, on a thread of its own.
    pub fn start(&self, repo: Arc<Repository>, snap: Snapshot, order: Order) -> std::io::Result<Arc<Task>> {
        let task = Arc::new(Task {
            id: self.next.fetch_add(1, Ordering::Relaxed) + 1,
            order,
            started: jiff::Timestamp::now(),
            counts: Counts::default(),
            end: Mutex::new(None),
        });
        let t = task.clone();
        std::thread::Builder::new().name(format!("coffer-ui-restore-{}", task.id)).spawn(move || {
            let r = coffer_core::ops::restore::restore(&repo, &snap, &t.order.options(false), t.as_ref());
            let result = r.map(|s| Outcome::of(&s)).map_err(|e| e.to_string());
            *t.end.lock().expect("restore end lock") = Some(End { ended: jiff::Timestamp::now(), result });
        })?;
        let mut list = self.list.lock().expect("restores lock");
        list.push_front(task.clone());
        // Only ended restores leave the history.
        while list.len() > KEPT {
            match list.iter().rposition(|t| t.end().is_some()) {
                Some(i) => drop(list.remove(i)),
                None => break,
            }
        }
        Ok(task)
    }

    pub fn get(&self, id: u64) -> Option<Arc<Task>> {
        self.list.lock().expect("restores lock").iter().find(|t| t.id == id).cloned()
    }

    /// Every restore kept, newest first.
    pub fn all(&self) -> Vec<Arc<Task>> {
        self.list.lock().expect("restores lock").iter().cloned().collect()
    }

    /// Those still running.
    pub fn running(&self) -> Vec<Arc<Task>> {
        self.all().into_iter().filter(|t| t.end().is_none()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use coffer_core::testing::{TestTree, test_repo};

    fn wait(t: &Task) -> End {
        for _ in 0..500 {
            if let Some(e) = t.end() {
                return e;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("the restore did not end");
    }

    #[test]
    fn a_dry_run_writes_nothing_and_a_restore_is_kept_with_its_result() {
        let r = test_repo();
        let tree = TestTree::new().file("top", &[b"top file"]).dir("sub", TestTree::new().file("a", &[b"aaaa"]));
        let (id, _) = r.snapshot(&tree);
        let repo = Arc::new(r.reopen());
        repo.load_index().unwrap();
        let snap = repo.load_snapshot(&id).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out");
        let order = Order {
            repo: "t".into(),
            snapshot: id,
            path: b"sub".to_vec(),
            target: target.clone(),
            overwrite: Overwrite::Refuse,
        };
        order.check().unwrap();
        let o = dry_run(&repo, &snap, &order).unwrap();
        assert_eq!((o.files, o.bytes), (1, 4));
        assert!(!target.exists(), "a dry run writes nothing");
        let restores = Restores::default();
        let t = restores.start(repo.clone(), snap.clone(), order.clone()).unwrap();
        let end = wait(&t).result.unwrap();
        assert_eq!((end.files, end.bytes, end.failure_count), (1, 4, 0));
        assert_eq!(std::fs::read(target.join("a")).unwrap(), b"aaaa");
        let v = t.to_json();
        assert_eq!((v["state"].as_str(), v["bytes_done"].as_u64()), (Some("done"), Some(4)));
        // Again into the same target: refused, the file kept, the refusal in the history.
        let t2 = restores.start(repo, snap, order).unwrap();
        assert!(wait(&t2).result.unwrap_err().contains("not empty"), "{:?}", t2.to_json());
        assert_eq!(std::fs::read(target.join("a")).unwrap(), b"aaaa");
        assert_eq!(restores.all().iter().map(|t| t.id).collect::<Vec<_>>(), vec![2, 1]);
        assert!(restores.running().is_empty());
        assert_eq!(restores.get(1).unwrap().to_json()["result"]["files"], 1);
    }

    #[test]
    fn targets_are_absolute_and_plain() {
        let mut o = Order {
            repo: "t".into(),
            snapshot: Id::from_hex(&"0".repeat(64)).unwrap(),
            path: Vec::new(),
            target: PathBuf::from("rel/dir"),
            overwrite: Overwrite::Refuse,
        };
        assert!(o.check().unwrap_err().contains("not an absolute path"));
        o.target = PathBuf::from("/tmp/a/../b");
        assert!(o.check().unwrap_err().contains(".."));
        o.target = PathBuf::from("/tmp/b");
        assert!(o.check().is_ok());
        for (name, mode, _) in OVERWRITE {
            assert_eq!(parse_overwrite(name), Some(mode));
            assert_eq!(overwrite_name(mode), name);
        }
        assert_eq!(parse_overwrite("sometimes"), None);
    }
}
