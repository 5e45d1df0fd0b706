//! The `--json` envelope (docs/json.md): every object a command prints names its
//! shape in `type`, for the commands that printed untyped objects before (init,
//! key, cat, repair config, forget's decisions, check's findings); and `backup
//! -v`/`--json` report each file as new, changed or unchanged, as restic does.

mod common;

use std::fs;
use std::path::Path;

use common::{Env, assert_code, assert_success, files_under, text};
use serde_json::Value;

fn source(env: &Env) -> std::path::PathBuf {
    let src = env.path("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("a"), common::random_bytes(300_000, 1)).unwrap();
    fs::write(src.join("b"), b"bee").unwrap();
    src
}

/// JSON lines on stderr whose `type` is `verbose_status`, as (action, item).
fn verbose_lines(stderr: &[u8]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = text(stderr)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["type"] == "verbose_status")
        .map(|v| (v["action"].as_str().unwrap().to_string(), v["item"].as_str().unwrap().to_string()))
        .collect();
    out.sort();
    out
}

#[test]
fn init_key_and_cat_objects_carry_a_type() {
    let env = Env::empty();
    let init = env.json(&["init", "--kdf-log-n", "10", "--insecure-kdf"]);
    assert_eq!(init["type"], "initialized", "{init}");
    assert!(init["id"].is_string());

    let keys = env.json(&["key", "list"]);
    assert!(keys.as_array().unwrap().iter().all(|k| k["type"] == "key"), "{keys}");
    let pw = env.path("new-pw");
    fs::write(&pw, "another passphrase\n").unwrap();
    let added =
        env.json(&["key", "add", "--new-password-file", pw.to_str().unwrap(), "--kdf-log-n", "10", "--insecure-kdf"]);
    assert_eq!(added["type"], "key_added", "{added}");
    let removed = env.json(&["key", "remove", added["added"].as_str().unwrap()]);
    assert_eq!(removed["type"], "key_removed", "{removed}");

    let src = source(&env);
    let id = env.backup(&[&src]);
    assert_eq!(env.json(&["cat", "config"])["type"], "config");
    assert_eq!(env.json(&["cat", "key"])["type"], "key");
    let snap = env.json(&["cat", "snapshot", &id]);
    assert_eq!(snap["type"], "snapshot");
    assert_eq!(env.json(&["cat", "tree", snap["snapshot"]["tree"].as_str().unwrap()])["type"], "tree");
    let index = files_under(&env.repo().join("index"));
    let name = index[0].file_name().unwrap().to_str().unwrap();
    assert_eq!(env.json(&["cat", "index", name])["type"], "index");
}

#[test]
fn repair_config_reports_with_a_type() {
    let env = Env::new();
    fs::remove_file(env.repo().join("config")).unwrap();
    let v = env.json(&["repair", "config"]);
    assert_eq!(v["type"], "repaired", "{v}");
    assert_eq!(v["repaired"], "config");
}

#[test]
fn forget_decisions_carry_a_type_an_action_and_reasons() {
    let env = Env::new();
    let src = source(&env);
    let older = env.backup(&[&src]);
    fs::write(src.join("b"), b"changed").unwrap();
    let newer = env.backup(&[&src]);
    let v = env.json(&["forget", "--keep-last", "1", "--dry-run"]);
    assert_eq!(v["type"], "summary");
    let group = &v["groups"][0];
    assert_eq!(group["type"], "forget_group", "{v}");
    let keep = &group["keep"][0];
    assert_eq!((keep["type"].as_str(), keep["action"].as_str()), (Some("decision"), Some("keep")));
    assert_eq!(keep["id"], newer.as_str());
    assert!(!keep["reasons"].as_array().unwrap().is_empty(), "{keep}");
    let forget = &group["forget"][0];
    assert_eq!((forget["type"].as_str(), forget["action"].as_str()), (Some("decision"), Some("forget")));
    assert_eq!(forget["id"], older.as_str());
}

#[test]
fn check_findings_carry_a_type() {
    let env = Env::new();
    let src = source(&env);
    env.backup(&[&src]);
    // Damage every data pack in the middle of its first blob.
    for pack in files_under(&env.repo().join("data")) {
        let mut bytes = fs::read(&pack).unwrap();
        if bytes.len() > 4096 {
            bytes[100] ^= 0xff;
            fs::write(&pack, bytes).unwrap();
        }
    }
    let out = env.run(&["--json", "check", "--read-data"]);
    assert_code(&out, 20);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["type"], "summary");
    let damaged = v["damaged_blobs"].as_array().unwrap();
    assert!(!damaged.is_empty(), "{v}");
    for d in damaged {
        assert_eq!(d["type"], "damaged_blob", "{d}");
        assert!(d["blob_type"] == "data blob" || d["blob_type"] == "tree blob", "{d}");
    }
    let affected = v["affected"].as_array().unwrap();
    assert!(!affected.is_empty(), "{v}");
    assert!(affected.iter().all(|a| a["type"] == "affected"), "{v}");
}

#[test]
fn backup_verbose_lists_new_modified_and_unchanged_files() {
    let env = Env::new();
    let src = source(&env);
    let (a, b) = (src.join("a"), src.join("b"));
    let path = |p: &Path| p.to_str().unwrap().to_string();

    let out = env.run(&["--json", "-v", "backup", src.to_str().unwrap()]);
    assert_success(&out);
    assert_eq!(verbose_lines(&out.stderr), vec![("new".into(), path(&a)), ("new".into(), path(&b))]);

    fs::write(&b, b"bee, changed").unwrap();
    // -v: new and changed files only; -vv: unchanged ones too.
    let out = env.run(&["--json", "-v", "backup", src.to_str().unwrap()]);
    assert_success(&out);
    assert_eq!(verbose_lines(&out.stderr), vec![("changed".into(), path(&b))]);
    let out = env.run(&["--json", "-vv", "backup", src.to_str().unwrap()]);
    assert_success(&out);
    assert_eq!(verbose_lines(&out.stderr), vec![("unchanged".into(), path(&a)), ("unchanged".into(), path(&b))]);

    // In text, restic's words.
    fs::write(&b, b"bee, changed again").unwrap();
    fs::write(src.join("c"), b"sea").unwrap();
    let out = env.run(&["-v", "backup", src.to_str().unwrap()]);
    assert_success(&out);
    let err = text(&out.stderr);
    assert!(err.lines().any(|l| l == format!("modified {}", path(&b))), "{err}");
    assert!(err.lines().any(|l| l == format!("new {}", src.join("c").display())), "{err}");
    assert!(!err.contains(&format!("unchanged {}", path(&a))), "{err}");
    let out = env.run(&["-vv", "backup", src.to_str().unwrap()]);
    assert!(text(&out.stderr).lines().any(|l| l == format!("unchanged {}", path(&a))), "{}", text(&out.stderr));
    // Without -v, nothing is listed.
    let out = env.run(&["--json", "backup", src.to_str().unwrap()]);
    assert!(verbose_lines(&out.stderr).is_empty());
}

/// An RFC 3339 time in UTC: it parses, and ends in `Z`.
fn assert_rfc3339(v: &Value) {
    let s = v.as_str().unwrap_or_else(|| panic!("{v} is not a string"));
    assert!(s.ends_with('Z') && s.parse::<jiff::Timestamp>().is_ok(), "{s} is not RFC 3339");
}

#[test]
fn writers_ls_and_serve_keys_give_typed_objects_and_rfc3339_times() {
    let env = Env::new();
    let src = source(&env);
    let id = env.backup(&[&src]);

    let writers = env.json(&["writers"]);
    assert!(writers.as_array().unwrap().iter().all(|w| w["type"] == "writer"), "{writers}");
    assert_rfc3339(&writers[0]["created"]);

    // ls: a node's times are RFC 3339, to the nanosecond the tree stores.
    let t = jiff::Timestamp::new(1_600_000_000, 123_456_789).unwrap();
    fs::File::options().write(true).open(src.join("b")).unwrap().set_modified(t.into()).unwrap();
    let id2 = env.backup(&[&src]);
    assert_ne!(id, id2);
    let out = env.run(&["--json", "ls", &id2]);
    assert_success(&out);
    let nodes: Vec<Value> = text(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let b = nodes.iter().find(|n| n["node"]["name"] == "b").expect("b listed");
    assert_eq!(b["node"]["mtime"], "2020-09-13T12:26:40.123456789Z", "{b}");
    assert_rfc3339(&b["node"]["ctime"]);

    let state = env.path("serve-state");
    let serve = |args: &[&str]| env.cmd().arg("serve").arg("--state-dir").arg(&state).args(args).output().unwrap();
    assert_success(&serve(&["key", "add", "k", "--level", "read"]));
    let out = serve(&["--json", "key", "list"]);
    assert_success(&out);
    let keys: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(keys[0]["type"], "access_key", "{keys}");
    assert_rfc3339(&keys[0]["created"]);
}

#[test]
fn generate_prints_one_json_object() {
    let env = Env::empty();
    let v = env.json(&["generate", "--bash-completion", "-"]);
    assert_eq!(v["type"], "generate", "{v}");
    assert_eq!(v["completions"][0]["shell"], "bash", "{v}");
    assert!(v["completions"][0]["script"].as_str().unwrap().contains("coffer"), "{v}");

    let man = env.path("man");
    let fish = env.path("coffer.fish");
    let v = env.json(&["generate", "--man", man.to_str().unwrap(), "--fish-completion", fish.to_str().unwrap()]);
    assert_eq!(v["completions"][0]["path"], fish.to_str().unwrap(), "{v}");
    assert!(v["man"]["pages"].as_array().unwrap().iter().any(|p| p == "coffer.1"), "{v}");
    assert!(man.join("coffer.1").exists() && fish.exists());
}
