//! `coffer diff`: the changes between two snapshots, as text and as JSON lines.

mod common;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use common::*;
use serde_json::{Value, json};

/// Runs `coffer --json diff` and splits its lines into the changes and the summary.
fn diff_json(env: &Env, args: &[&str]) -> (Vec<Value>, Value) {
    let mut a = vec!["--json", "diff"];
    a.extend_from_slice(args);
    let out = env.run(&a);
    assert_success(&out);
    let mut lines: Vec<Value> = text(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let summary = lines.pop().expect("a summary line");
    assert_eq!(summary["type"], "summary", "{summary}");
    assert!(lines.iter().all(|l| l["type"] == "change"), "{lines:?}");
    (lines, summary)
}

/// A path as the JSON output writes it: a string when UTF-8, else `{"hex": …}`.
fn json_path(p: &[u8]) -> Value {
    match std::str::from_utf8(p) {
        Ok(s) => json!(s),
        Err(_) => json!({"hex": p.iter().map(|b| format!("{b:02x}")).collect::<String>()}),
    }
}

fn write(path: &Path, data: &[u8]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, data).unwrap();
}

/// The source directory with symlinks above it resolved, as the snapshot records it.
fn snapshot_path(src: &Path) -> PathBuf {
    std::fs::canonicalize(src).unwrap()
}

#[test]
fn every_kind_of_change_is_reported() {
    let env = Env::new();
    let src = env.path("src");
    for name in ["keep.txt", "modify.txt", "remove.txt", "chmod.txt", "touch.txt", "to-link.txt"] {
        write(&src.join(name), name.as_bytes());
        std::fs::set_permissions(src.join(name), std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    write(&src.join("olddir/a"), &random_bytes(1000, 1));
    write(&src.join("olddir/b"), b"bb");
    write(&src.join("olddir/sub/c"), b"ccc");
    let first = env.backup(&[&src]);

    write(&src.join("added.txt"), b"12345");
    write(&src.join(OsStr::from_bytes(b"bin-\xff")), b"x");
    std::fs::remove_file(src.join("remove.txt")).unwrap();
    write(&src.join("modify.txt"), b"new content, longer than before");
    std::fs::set_permissions(src.join("chmod.txt"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let touched = std::fs::File::options().write(true).open(src.join("touch.txt")).unwrap();
    touched.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000)).unwrap();
    drop(touched);
    std::fs::remove_file(src.join("to-link.txt")).unwrap();
    std::os::unix::fs::symlink("keep.txt", src.join("to-link.txt")).unwrap();
    write(&src.join("newdir/x"), &random_bytes(3000, 2));
    write(&src.join("newdir/y/z"), b"zz");
    std::fs::remove_dir_all(src.join("olddir")).unwrap();
    let second = env.backup(&[&src]);

    let (changes, summary) = diff_json(&env, &[&first, &second]);
    let root = snapshot_path(&src);
    let root_bytes = root.as_os_str().as_bytes();
    // Directories above the source may change too (other tests create files in /tmp); only
    // their own metadata, never anything else.
    let (inside, outside): (Vec<&Value>, Vec<&Value>) = changes.iter().partition(|c| {
        let p = c["path"].as_str().map(str::as_bytes).unwrap_or(b"\xff");
        c["path"].is_object() || p == root_bytes || p.starts_with(&[root_bytes, b"/"].concat())
    });
    for c in outside {
        assert_eq!(c["change"], "metadata_only", "{c}");
        assert!(root.starts_with(c["path"].as_str().unwrap()), "{c}");
    }
    let got: Vec<(Value, String)> =
        inside.iter().map(|c| (c["path"].clone(), c["change"].as_str().unwrap().to_string())).collect();
    let at = |rel: &[u8]| json_path(&[root_bytes, rel].concat());
    let expected: Vec<(Value, &str)> = vec![
        (at(b""), "metadata_only"),
        (at(b"/added.txt"), "added"),
        (at(b"/bin-\xff"), "added"),
        (at(b"/chmod.txt"), "metadata_only"),
        (at(b"/modify.txt"), "modified"),
        (at(b"/newdir"), "added"),
        (at(b"/newdir/x"), "added"),
        (at(b"/newdir/y"), "added"),
        (at(b"/newdir/y/z"), "added"),
        (at(b"/olddir"), "removed"),
        (at(b"/olddir/a"), "removed"),
        (at(b"/olddir/b"), "removed"),
        (at(b"/olddir/sub"), "removed"),
        (at(b"/olddir/sub/c"), "removed"),
        (at(b"/remove.txt"), "removed"),
        (at(b"/to-link.txt"), "type_changed"),
        (at(b"/touch.txt"), "metadata_only"),
    ];
    let expected: Vec<(Value, String)> = expected.into_iter().map(|(p, k)| (p, k.to_string())).collect();
    assert_eq!(got, expected);

    let fields = |rel: &str| -> Value {
        let path = at(rel.as_bytes());
        inside.iter().find(|c| c["path"] == path).unwrap()["fields"].clone()
    };
    assert_eq!(fields("/chmod.txt"), json!(["mode"]));
    assert_eq!(fields("/touch.txt"), json!(["mtime"]));
    assert_eq!(fields("/modify.txt")[0], "content");
    assert!(fields("").as_array().unwrap().contains(&json!("mtime")));
    assert_eq!(fields("/to-link.txt"), json!([]));
    let node_type = |rel: &str| inside.iter().find(|c| c["path"] == at(rel.as_bytes())).unwrap()["node_type"].clone();
    assert_eq!(node_type("/to-link.txt"), "symlink");
    assert_eq!(node_type("/olddir/sub"), "dir");

    assert_eq!(summary["snapshot1"], first.as_str());
    assert_eq!(summary["snapshot2"], second.as_str());
    assert_eq!(summary["added"], 6);
    assert_eq!(summary["removed"], 6);
    assert_eq!(summary["modified"], 1);
    assert_eq!(summary["type_changed"], 1);
    assert_eq!(summary["bytes_added"], 5 + 1 + 3000 + 2);
    assert_eq!(summary["bytes_removed"], "remove.txt".len() + 1000 + 2 + 3 + "to-link.txt".len());
    let outside_count = changes.len() - inside.len();
    assert_eq!(summary["metadata_only"], 3 + outside_count);

    // Text output: restic's markers, directories with a trailing slash, then a summary.
    let out = env.run(&["diff", &first[..8], "latest"]);
    assert_success(&out);
    let stdout = text(&out.stdout);
    let r = root.display();
    for line in [
        format!("+    {r}/added.txt"),
        format!("+    {r}/bin-\u{fffd}"),
        format!("-    {r}/remove.txt"),
        format!("M    {r}/modify.txt"),
        format!("U    {r}/chmod.txt"),
        format!("T    {r}/to-link.txt"),
        format!("+    {r}/newdir/"),
        format!("-    {r}/olddir/sub/"),
    ] {
        assert!(stdout.lines().any(|l| l == line), "missing {line:?} in\n{stdout}");
    }
    let last = stdout.lines().last().unwrap();
    assert!(last.starts_with("6 added, 6 removed, 1 modified, 1 type changed, "), "{last}");

    // The other way round, additions and removals swap.
    let (back, back_summary) = diff_json(&env, &[&second, &first]);
    assert_eq!(back.len(), changes.len());
    assert_eq!(back_summary["added"], 6);
    assert_eq!(back_summary["bytes_added"], summary["bytes_removed"]);
}

#[test]
fn a_snapshot_compared_with_itself_has_no_changes() {
    let env = Env::new();
    let src = env.path("src");
    write(&src.join("a/b"), b"b");
    let id = env.backup(&[&src]);
    let (changes, summary) = diff_json(&env, &[&id, "latest"]);
    assert!(changes.is_empty(), "{changes:?}");
    assert_eq!(summary["added"], 0);
    assert_eq!(summary["trees_loaded"], 0);
    let out = env.run(&["diff", &id, &id]);
    assert_success(&out);
    assert_eq!(text(&out.stdout).lines().count(), 1, "{}", text(&out.stdout));
    // Filters narrow `latest` as for ls.
    let err = assert_code(&env.run(&["diff", &id, "latest", "--host", "nowhere"]), 1);
    assert!(err.contains("no snapshot matches"), "{err}");
}

/// Many unchanged directories: only the trees on the path to the changed file are
/// loaded, two per directory level, however many directories there are.
#[test]
fn unchanged_directories_are_not_loaded() {
    let env = Env::new();
    let src = env.path("src");
    for i in 0..40 {
        for j in 0..5 {
            write(&src.join(format!("d{i}/e{j}/f")), format!("{i} {j}").as_bytes());
        }
    }
    let first = env.backup(&[&src]);
    let changed = src.join("d17/e3/f");
    write(&changed, b"changed");
    let second = env.backup(&[&src]);
    let (changes, summary) = diff_json(&env, &[&first, &second]);
    let changed_path = snapshot_path(&changed);
    let modified: Vec<&Value> = changes.iter().filter(|c| c["change"] != "metadata_only").collect();
    assert_eq!(modified.len(), 1, "{changes:?}");
    assert_eq!(modified[0]["path"], changed_path.to_str().unwrap());
    assert_eq!(modified[0]["change"], "modified");
    // The root tree and one tree per directory on the path, in each snapshot.
    let depth = changed_path.components().count() as u64 - 1;
    let loaded = summary["trees_loaded"].as_u64().unwrap();
    assert!(loaded <= depth * 2 + 2, "{loaded} trees loaded for a change at depth {depth}");
}
