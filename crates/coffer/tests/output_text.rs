//! Human output a restic user reads at a glance: tables whose columns line up
//! whatever the host names and tags, counts with the right plural, and check's
//! account of snapshots removed on purpose.

mod common;

use std::fs;

use common::*;

/// Byte offset of each header name in `header`.
fn starts(header: &str, names: &[&str]) -> Vec<usize> {
    names.iter().map(|n| header.find(n).unwrap_or_else(|| panic!("no {n:?} in {header:?}"))).collect()
}

/// Two snapshots: one with a long host name and long tags, one with short ones.
fn two_hosts() -> (Env, String, String) {
    let env = Env::new();
    let src = env.path("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("f"), b"data").unwrap();
    let long_host = "a-very-long-hostname.example.internal.company.com";
    let long_tags = "production,database,nightly,very-long-tag-name";
    let s = src.to_str().unwrap();
    assert_success(&env.cmd().env("COFFER_HOST", long_host).args(["backup", "--tag", long_tags, s]).output().unwrap());
    assert_success(&env.cmd().env("COFFER_HOST", "h").args(["backup", "--tag", "t", s]).output().unwrap());
    (env, long_host.to_string(), long_tags.to_string())
}

#[test]
fn snapshots_columns_line_up_with_long_hosts_and_tags() {
    let (env, long_host, long_tags) = two_hosts();
    let out = env.run(&["--utc", "snapshots"]);
    assert_success(&out);
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    let [host, tags, size, signed] = starts(lines[0], &["host", "tags", "size", "signed by"])[..] else { panic!() };
    let size_end = size + "size".len();
    for (row, (h, t)) in lines[1..3].iter().zip([(long_host.as_str(), long_tags.as_str()), ("h", "t")]) {
        assert!(row[host..].starts_with(h), "host column of {row:?} in\n{stdout}");
        assert!(row[tags..].starts_with(t), "tags column of {row:?} in\n{stdout}");
        assert!(row[..size_end].ends_with(" B"), "size column of {row:?} in\n{stdout}");
        assert!(row[..signed].ends_with("  ") && !row[signed..].starts_with(' '), "signed-by column of {row:?}");
    }
    assert_eq!(lines[3], "2 snapshots");
}

#[test]
fn compact_and_grouped_snapshots_line_up_too() {
    let (env, long_host, long_tags) = two_hosts();
    let out = env.run(&["snapshots", "--compact"]);
    assert_success(&out);
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    let [host, tags] = starts(lines[0], &["host", "tags"])[..] else { panic!() };
    assert!(lines[1][host..].starts_with(&long_host) && lines[1][tags..].starts_with(&long_tags), "{stdout}");
    assert!(lines[2][host..].starts_with("h ") && lines[2][tags..].starts_with('t'), "{stdout}");

    // Grouped by path, both snapshots share one table.
    let out = env.run(&["snapshots", "--group-by", "paths"]);
    assert_success(&out);
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines[0].starts_with("snapshots of "), "{stdout}");
    let [tags, size] = starts(lines[1], &["tags", "size"])[..] else { panic!() };
    assert!(lines[2][tags..].starts_with(&long_tags) && lines[3][tags..].starts_with("t "), "{stdout}");
    assert_eq!(lines[2][..size + 4].chars().last(), Some('B'), "{stdout}");
    assert_eq!(lines[3][..size + 4].chars().last(), Some('B'), "{stdout}");
}

#[test]
fn counts_of_one_are_singular() {
    let env = Env::new();
    let src = env.path("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("f"), b"one file").unwrap();
    let gone = env.path("gone");
    let out = env.run(&["backup", src.to_str().unwrap(), gone.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert!(stdout.contains("1 of the paths given does not exist and was not backed up"), "{stdout}");

    let target = env.path("target");
    let out = env.run(&["restore", "latest", "--target", target.to_str().unwrap()]);
    assert_success(&out);
    let stdout = text(&out.stdout);
    assert!(stdout.contains(": 1 file, ") && stdout.contains(", 0 other entries, "), "{stdout}");

    let out = env.run(&["check"]);
    assert_success(&out);
    let stdout = text(&out.stdout);
    assert!(stdout.contains("checked 1 snapshot, ") && stdout.contains(", 1 data blob, "), "{stdout}");

    let out = env.run(&["snapshots"]);
    assert!(text(&out.stdout).ends_with("\n1 snapshot\n"), "{}", text(&out.stdout));
}

#[test]
fn check_says_a_retagged_snapshot_was_replaced_by_tag_not_forgotten() {
    let env = Env::new();
    let src = env.path("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("f"), b"data").unwrap();
    env.backup(&[&src]);
    assert_success(&env.run(&["tag", "--add", "kept", "latest"]));
    let out = env.run(&["check"]);
    assert_success(&out);
    let stdout = text(&out.stdout);
    assert!(stdout.contains("1 snapshot was removed on purpose (1 replaced by tag)"), "{stdout}");
    assert!(!stdout.contains("by forget"), "{stdout}");
    let v = env.json(&["check"]);
    assert_eq!((v["forgotten"].as_u64(), v["replaced"].as_u64()), (Some(1), Some(1)), "{v}");

    // A forget afterwards is counted apart.
    let id = env.backup(&[&src]);
    assert_success(&env.run(&["forget", &id]));
    let stdout = text(&env.run(&["check"]).stdout);
    assert!(stdout.contains("2 snapshots were removed on purpose (1 by forget, 1 replaced by tag)"), "{stdout}");
}
