//! `coffer backup` options a restic user expects: missing paths, path lists,
//! the exclusion options, `--time`, `--skip-if-unchanged`; and `snapshots`
//! `--latest`/`--compact`/`--group-by` (docs/design.md#cli).

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use common::*;

/// The paths below `root` that the newest snapshot holds, relative to it.
fn listed(env: &Env, root: &Path) -> BTreeSet<String> {
    let out = env.run(&["ls", "latest", root.to_str().unwrap()]);
    assert_success(&out);
    text(&out.stdout)
        .lines()
        .filter_map(|l| Path::new(l).strip_prefix(root).ok().map(|p| p.to_string_lossy().into_owned()))
        .filter(|p| !p.is_empty())
        .collect()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

#[test]
fn a_missing_path_is_warned_about_and_the_rest_backed_up() {
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("a"), b"a").unwrap();
    let gone = env.path("gone");
    let out = env.run(&["backup", src.to_str().unwrap(), gone.to_str().unwrap()]);
    let err = assert_code(&out, 3);
    assert!(err.contains("gone") && err.contains("does not exist"), "{err}");
    assert!(text(&out.stdout).contains("snapshot "), "{}", text(&out.stdout));
    assert_eq!(listed(&env, &src), set(&["a"]));
    let v = env.json(&["snapshots"]);
    assert_eq!(v[0]["snapshot"]["paths"], serde_json::json!([src.to_str().unwrap()]));
    // --force rereads every file, and one whose content is the parent's is
    // still unchanged: -v does not list it as modified, the summary counts it.
    let out = env.run(&["-v", "backup", src.to_str().unwrap(), "--force"]);
    assert_success(&out);
    assert!(!text(&out.stderr).contains("modified /"), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("0 changed, 1 unchanged"), "{}", text(&out.stdout));
    std::fs::write(src.join("a"), b"b").unwrap();
    let out = env.run(&["-v", "backup", src.to_str().unwrap(), "--force"]);
    assert!(text(&out.stderr).contains(&format!("modified {}", src.join("a").display())), "{}", text(&out.stderr));
    // Nothing that exists: an error, no snapshot.
    let err = assert_code(&env.run(&["backup", gone.to_str().unwrap()]), 1);
    assert!(err.contains("none of the paths") && err.contains("gone"), "{err}");
    assert!(!err.contains("backing up the rest"), "{err}");
    assert_eq!(env.json(&["snapshots"]).as_array().unwrap().len(), 3);
}

#[test]
fn paths_from_files_in_three_formats() {
    let env = Env::new();
    let src = env.path("src");
    for d in ["one", "two", "three", "with space", "four"] {
        std::fs::create_dir_all(src.join(d)).unwrap();
        std::fs::write(src.join(d).join("f"), d.as_bytes()).unwrap();
    }
    let lines = env.path("lines");
    std::fs::write(&lines, format!("# a comment\n{}\n\n{}  \n", src.join("one").display(), src.join("two").display()))
        .unwrap();
    let verbatim = env.path("verbatim");
    std::fs::write(&verbatim, format!("{}\n", src.join("with space").display())).unwrap();
    let raw = env.path("raw");
    std::fs::write(&raw, format!("{}\0{}\0", src.join("three").display(), src.join("four").display())).unwrap();
    let v = env.json(&[
        "backup",
        "--files-from",
        lines.to_str().unwrap(),
        "--files-from-verbatim",
        verbatim.to_str().unwrap(),
        "--files-from-raw",
        raw.to_str().unwrap(),
    ]);
    let paths: BTreeSet<String> = env.json(&["snapshots"])[0]["snapshot"]["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().to_string())
        .collect();
    let want: BTreeSet<String> =
        ["one", "two", "three", "with space", "four"].iter().map(|d| src.join(d).display().to_string()).collect();
    assert_eq!(paths, want, "{v}");
    // A --files-from line with a pattern takes the paths it matches, as restic's does.
    let globbed = env.path("globbed");
    std::fs::write(&globbed, format!("{}\n", src.join("t*").display())).unwrap();
    env.json(&["backup", "--files-from", globbed.to_str().unwrap()]);
    let snaps = env.json(&["snapshots"]);
    let last = snaps.as_array().unwrap().last().unwrap();
    let got: BTreeSet<&str> =
        last["snapshot"]["paths"].as_array().unwrap().iter().map(|p| p.as_str().unwrap()).collect();
    let (two, three) = (src.join("two").display().to_string(), src.join("three").display().to_string());
    assert_eq!(got, BTreeSet::from([two.as_str(), three.as_str()]));
    // The command line needs a path or a list.
    assert_code(&env.run(&["backup"]), 2);
}

#[test]
fn exclusion_options() {
    let env = Env::new();
    let src = env.path("src");
    let mk = |rel: &str, content: &[u8]| {
        let p = src.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    };
    mk("keep/small", b"small");
    mk("keep/big", &[7u8; 5000]);
    mk("keep/Notes.TXT", b"upper");
    mk("keep/notes.txt", b"lower");
    mk("cache/CACHEDIR.TAG", b"Signature: 8a477f597d28d172789f06886806bc55\n# a cache\n");
    mk("cache/data", b"cached");
    mk("faketag/CACHEDIR.TAG", b"not the signature");
    mk("faketag/data", b"kept");
    mk("marked/.nobackup", b"");
    mk("marked/data", b"skipped");
    let ifile = env.path("iexcludes");
    std::fs::write(&ifile, "# case-insensitive\n*.TXT\n").unwrap();
    let s = src.to_str().unwrap();
    env.json(&[
        "backup",
        s,
        "--exclude-caches",
        "--exclude-if-present",
        ".nobackup",
        "--exclude-larger-than",
        "4K",
        "--iexclude-file",
        ifile.to_str().unwrap(),
    ]);
    assert_eq!(
        listed(&env, &src),
        set(&["keep", "keep/small", "faketag", "faketag/CACHEDIR.TAG", "faketag/data"]),
        "big file, cache, marked directory and both *.txt left out"
    );
    // --iexclude on the command line; --exclude stays case-sensitive.
    env.json(&["backup", s, "--iexclude", "*.txt", "--exclude", "BIG"]);
    let got = listed(&env, &src);
    assert!(got.contains("keep/big") && !got.contains("keep/notes.txt") && !got.contains("keep/Notes.TXT"), "{got:?}");
    // An invalid pattern is an error before anything is read.
    for flag in ["--exclude", "--iexclude"] {
        for bad in ["{unclosed", "[abc"] {
            let err = assert_code(&env.run(&["backup", s, flag, bad]), 1);
            assert!(err.contains("bad exclude pattern") && err.contains(bad), "{flag}: {err}");
        }
    }
    assert_code(&env.run(&["backup", s, "--exclude-larger-than", "4Q"]), 2);
}

#[test]
fn time_and_skip_if_unchanged() {
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("a"), b"a").unwrap();
    let s = src.to_str().unwrap();
    let v = env.json(&["--utc", "backup", s, "--time", "2021-03-04 05:06:07"]);
    assert!(v["snapshot_id"].is_string());
    let snaps = env.json(&["snapshots"]);
    assert!(snaps[0]["snapshot"]["time"].as_str().unwrap().starts_with("2021-03-04T05:06:07"), "{snaps}");
    let out = env.run(&["--utc", "snapshots"]);
    assert!(text(&out.stdout).contains("2021-03-04 05:06:07") && text(&out.stdout).contains("time (UTC)"));
    // The same instant written in another zone, as RFC 3339.
    env.json(&["backup", s, "--time", "2021-03-04T06:06:07+01:00", "--force"]);
    assert!(env.json(&["snapshots"])[1]["snapshot"]["time"].as_str().unwrap().starts_with("2021-03-04T05:06:07"));
    assert_code(&env.run(&["backup", s, "--time", "yesterday"]), 1);

    // The directory above the source changes (as /tmp does all the time): that
    // is not a change of what is backed up.
    std::fs::write(src.with_file_name("beside"), b"x").unwrap();
    let v = env.json(&["backup", s, "--skip-if-unchanged"]);
    assert_eq!(v["unchanged"], true);
    assert!(v["snapshot_id"].is_null());
    assert_eq!(env.json(&["snapshots"]).as_array().unwrap().len(), 2, "no snapshot written");
    std::fs::write(src.join("b"), b"b").unwrap();
    let v = env.json(&["backup", s, "--skip-if-unchanged"]);
    assert_eq!(v["unchanged"], false);
    assert!(v["snapshot_id"].is_string());
    // A backup dated before the snapshots it links to is not out of order: it
    // records when it was written.
    env.json(&["backup", s, "--time", "2020-01-01 00:00:00"]);
    let out = env.run(&["check"]);
    assert_success(&out);
    assert!(!text(&out.stderr).contains("out of order") && !text(&out.stdout).contains("out of order"), "{out:?}");
    let snaps = env.json(&["snapshots"]);
    assert!(snaps[0]["snapshot"]["written"].is_string(), "{snaps}");
}

#[test]
fn snapshots_latest_compact_and_grouped() {
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("a"), b"a").unwrap();
    let s = src.to_str().unwrap();
    let mut ids = Vec::new();
    for host in ["alpha", "alpha", "alpha", "beta"] {
        ids.push(env.json(&["backup", s, "--host", host])["snapshot_id"].as_str().unwrap().to_string());
    }
    let latest: Vec<String> = env
        .json(&["snapshots", "--latest", "2"])
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(latest, [ids[1].clone(), ids[2].clone(), ids[3].clone()]);
    let grouped = env.json(&["snapshots", "--group-by", "host"]);
    assert_eq!(grouped.as_array().unwrap().len(), 2);
    assert_eq!(grouped[0]["group_key"]["host"], "alpha");
    assert_eq!(grouped[0]["snapshots"].as_array().unwrap().len(), 3);
    let out = env.run(&["snapshots", "--compact", "-g", "host"]);
    assert_success(&out);
    let t = text(&out.stdout);
    assert!(t.contains("snapshots of host alpha:") && t.contains("snapshots of host beta:"), "{t}");
    assert!(!t.contains("signed by"), "compact: {t}");
    assert!(t.trim_end().ends_with("4 snapshots"), "{t}");
    // COFFER_HOST narrows the listing, as --host does.
    let out = env.cmd().env("COFFER_HOST", "beta").args(["--json", "snapshots"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 1);
}
