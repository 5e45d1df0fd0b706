//! `coffer bench`: the quick run on a sample of real files produces well-formed
//! JSON with every stage, positive throughputs, ordered percentiles, the pipeline
//! table, the recommendation and the projection; the text and HTML reports; and
//! the storage measurement, which leaves nothing behind.

mod common;

use std::path::PathBuf;

use common::{Env, assert_success, random_bytes, text};
use serde_json::Value;

/// A sample of real files: coffer-core's sources, one incompressible file, and
/// a symbolic link (which must not be followed).
fn sample(env: &Env) -> Vec<PathBuf> {
    let extra = env.path("sample");
    std::fs::create_dir_all(&extra).unwrap();
    std::fs::write(extra.join("random.bin"), random_bytes(3 << 20, 5)).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", extra.join("link")).unwrap();
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../coffer-core/src");
    vec![src, extra]
}

fn run_json(env: &Env, args: &[&str]) -> Value {
    let out = env.run(args);
    assert_success(&out);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(&out.stdout)))
}

fn num(v: &Value, path: &str) -> f64 {
    v.pointer(path).and_then(Value::as_f64).unwrap_or_else(|| panic!("no number at {path} in {v}"))
}

/// A figure's percentiles are ordered and its rates positive.
fn check_figure(fig: &Value, what: &str) {
    let s = |k: &str| num(fig, &format!("/seconds/{k}"));
    assert!(s("p50") > 0.0, "{what}: {fig}");
    assert!(s("p50") <= s("p90") && s("p90") <= s("p99") && s("p99") <= s("max"), "{what}: {fig}");
    let r = |k: &str| num(fig, &format!("/rate/{k}"));
    assert!(r("worst") > 0.0 && r("mean") > 0.0, "{what}: {fig}");
    assert!(r("p50") >= r("p90") && r("p90") >= r("p99") && r("p99") >= r("worst"), "{what}: {fig}");
    assert!(num(fig, "/runs") >= 1.0);
}

#[test]
fn quick_json_on_real_files_has_every_stage_and_a_recommendation() {
    let env = Env::empty();
    let paths = sample(&env);
    let mut args = vec!["bench", "--quick", "--cold", "--json", "--kdf-log-n", "10", "--projected-size", "10G"];
    let p: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    args.extend(p.iter().map(String::as_str));
    let v = run_json(&env, &args);

    assert_eq!(v["type"], "bench");
    assert_eq!(v["sample"]["source"], "files");
    assert!(num(&v, "/sample/files") > 20.0, "{}", v["sample"]);
    assert!(num(&v, "/sample/bytes") > (3 << 20) as f64);
    assert_eq!(num(&v, "/sample/skipped"), 1.0, "the link is skipped");
    assert_eq!(v["sample"]["cold"], true, "--cold reads the sample cold");
    assert!(v["machine"]["aes_instructions"].is_boolean());
    assert!(num(&v, "/machine/threads") >= 1.0);
    assert!(
        num(&v, "/machine/effective_cores") >= 0.5
            && num(&v, "/machine/effective_cores") <= num(&v, "/machine/threads")
    );

    let stages = v["stages"].as_array().unwrap();
    let has = |stage: &str, choice: &str, input: &str| {
        stages.iter().any(|r| {
            r["stage"] == stage
                && r["choice"].as_str().unwrap().starts_with(choice)
                && (input.is_empty() || r["input"] == input)
        })
    };
    for set in ["256K/512K/2M", "512K/1M/4M", "1M/2M/8M"] {
        for input in ["sample", "no-cut", "zeros"] {
            assert!(has("chunker", set, input), "chunker {set} {input}");
        }
    }
    // Reading the files again, warm and (with --cold) cold, is its own stage,
    // left out of the effective cores.
    for choice in ["warm page cache", "cold page cache"] {
        let row = stages.iter().find(|r| r["stage"] == "read files" && r["choice"] == choice);
        let row = row.unwrap_or_else(|| panic!("no read files row for {choice}"));
        assert_eq!(row["input"], "files");
        check_figure(&row["per_core"], choice);
        assert!(num(row, "/per_core/units_per_run") >= (3 << 20) as f64, "{row}");
    }
    for (stage, choice, input) in [
        ("file digest", "blake3", "sample"),
        ("blob id", "keyed blake3", "sample"),
        ("aead", "aes-256-gcm", "sample"),
        ("aead", "chacha20-poly1305", "sample"),
        ("zstd", "level 1", "sample"),
        ("zstd", "level 3", "sample"),
        ("zstd", "level 19", "sample"),
        ("zstd", "level 19", "repetitive"),
        ("zstd", "level 3", "incompressible"),
        ("zstd probe", "", "sample"),
        ("scrypt", "log_n 10 r 8 p 4", ""),
        ("ed25519", "sign", ""),
        ("ed25519", "verify valid", ""),
        ("ed25519", "verify invalid", ""),
        ("merkle", "root", ""),
        ("merkle", "inclusion proof", ""),
        ("merkle", "verify proof", ""),
    ] {
        assert!(has(stage, choice, input), "missing stage {stage} {choice} {input}");
    }
    // One run of every figure per pass: 3 passes with --quick (scrypt 1 run).
    assert_eq!(num(&v, "/runs"), 3.0);
    for r in stages {
        let what = format!("{} {} {}", r["stage"], r["choice"], r["input"]);
        check_figure(&r["per_core"], &what);
        check_figure(&r["all_cores"], &what);
        let runs = if r["stage"] == "scrypt" { 1.0 } else { 3.0 };
        assert_eq!(num(r, "/per_core/runs"), runs, "{what}");
        assert_eq!(num(r, "/all_cores/runs"), runs, "{what}");
        assert!(r["note"].as_str().is_none_or(|n| !n.contains("unexpected verdict")), "{what}: {}", r["note"]);
    }
    // Compression ratios: the sample's sources compress, the repetitive input
    // almost vanishes, the incompressible one is stored as is.
    let ratio = |choice: &str, input: &str| {
        stages.iter().find(|r| r["stage"] == "zstd" && r["choice"] == choice && r["input"] == input).unwrap()["ratio"]
            .as_f64()
            .unwrap()
    };
    assert!(ratio("level 3", "sample") < 0.95);
    assert!(ratio("level 19", "sample") <= ratio("level 1", "sample") + 0.01);
    assert!(ratio("level 19", "repetitive") < 0.01);
    assert_eq!(ratio("level 3", "incompressible"), 1.0);

    let pipe = v["pipeline"].as_array().unwrap();
    for config in ["dedup-only", "compress", "encrypt", "compress-encrypt", "coffer"] {
        // A second pass stores nothing: measured for dedup only and the saver.
        let passes: &[u64] = if config == "dedup-only" || config == "coffer" { &[1, 2] } else { &[1] };
        for &pass in passes {
            let row = pipe
                .iter()
                .find(|r| r["config"] == config && r["pass"] == pass && r["input"] == "sample")
                .unwrap_or_else(|| panic!("no pipeline row {config} pass {pass}"));
            check_figure(&row["all_cores"], config);
            assert_eq!(num(row, "/all_cores/runs"), 2.0, "--quick: 2 pipeline runs");
            if pass == 1 {
                assert!(num(row, "/new_blobs") > 0.0 && num(row, "/stored_bytes") > 0.0, "{row}");
            } else {
                assert_eq!(num(row, "/new_blobs"), 0.0, "{config}: the second pass finds every blob stored");
            }
        }
    }
    assert!(pipe.iter().any(|r| r["input"] == "tiny files" && r["config"] == "coffer"));
    assert!(pipe.iter().any(|r| r["input"] == "no-cut" && r["config"] == "coffer"));
    let coffer1 = pipe.iter().find(|r| r["config"] == "coffer" && r["pass"] == 1).unwrap();
    check_figure(&coffer1["per_core"], "coffer per core");

    let rec = &v["recommendation"];
    assert!(rec["flags"].is_string());
    assert!(rec["reason"].as_str().unwrap().len() > 10);
    assert!(!rec["candidates"].as_array().unwrap().is_empty());
    assert!(num(rec, "/default_seconds") > 0.0 && num(rec, "/recommended_seconds") > 0.0);
    assert!(num(rec, "/recommended_stored_bytes") <= num(rec, "/default_stored_bytes") * 1.001);
    let proj = &v["projection"];
    assert_eq!(num(proj, "/bytes"), (10u64 << 30) as f64);
    assert!(num(proj, "/seconds") > 0.0);
    assert!(proj["text"].as_str().unwrap().contains("the bottleneck is"), "{proj}");
    assert!(!proj["shares"].as_array().unwrap().is_empty());
    // A real backup walked whole directories picked at even steps of the
    // files counted: at least the sources (all but one of the files; the
    // random file may fall between two steps).
    let walk = &v["walk"];
    assert!(num(walk, "/directories") >= 1.0, "{walk}");
    assert!(num(walk, "/files") >= num(&v, "/sample/census_files") / 2.0, "{walk}");
    assert!(num(walk, "/files") <= num(&v, "/sample/census_files"), "{walk}");
    assert!(num(walk, "/bytes") <= num(&v, "/sample/census_bytes"), "{walk}");
    assert!(num(walk, "/other_entries") >= 1.0, "{walk}");
    check_figure(&walk["all_cores"], "walk");
    // The saver ran alone on the walk's files, which were read again.
    check_figure(&walk["saver"], "the saver on the walk's files");
    assert_eq!(num(walk, "/saver/units_per_run"), num(walk, "/bytes"), "{walk}");
    assert!(num(walk, "/read_seconds") > 0.0, "{walk}");
    // Reading the sample splits into a time per file and per byte.
    assert!(num(&v, "/sample/read_per_file") >= 0.0 && num(&v, "/sample/read_per_byte") >= 0.0);
    assert!(num(&v, "/sample/read_per_file") + num(&v, "/sample/read_per_byte") > 0.0);
    let files = num(&v, "/sample/files") * (10u64 << 30) as f64 / num(&v, "/sample/bytes");
    assert!((num(proj, "/files") - files).abs() <= 1.0, "{proj}");
    assert!(num(proj, "/per_file_seconds") >= 0.0);
    assert!(v["storage"].is_null());
}

#[test]
fn text_and_html_reports_on_generated_data() {
    let env = Env::empty();
    let html = env.path("report.html");
    let out = env.run(&["bench", "--quick", "--kdf-log-n", "10", "--report", html.to_str().unwrap()]);
    assert_success(&out);
    let t = text(&out.stdout);
    for part in ["sample: generated", "Stages", "Pipeline", "Recommendation", "init flags:", "Projection", "bottleneck"]
    {
        assert!(t.contains(part), "no {part:?} in:\n{t}");
    }
    let h = std::fs::read_to_string(&html).unwrap();
    assert!(h.starts_with("<!DOCTYPE html>") && h.trim_end().ends_with("</html>"));
    assert!(h.matches("<svg").count() >= 2 && h.contains("<table>"));
    assert!(!h.contains("<script") && !h.contains("src=\"http"), "the report is self-contained");
    // Generated data has no files to read cold.
    let out = env.run(&["bench", "--quick", "--cold"]);
    assert!(!out.status.success() && text(&out.stderr).contains("--cold"), "{}", text(&out.stderr));
}

#[test]
fn storage_is_measured_on_a_scratch_prefix_that_is_removed() {
    let env = Env::new();
    let v = run_json(&env, &["bench", "--quick", "--storage", "--json", "--kdf-log-n", "10", "--generated-size", "1M"]);
    let st = &v["storage"];
    let rows = st["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 9, "put, get, list at 3 levels");
    for c in [1, 4, 16] {
        for op in ["put", "get", "list"] {
            let r = rows.iter().find(|r| r["op"] == op && r["concurrency"] == c).unwrap();
            let l = &r["latency_ms"];
            assert!(
                num(l, "/p50") <= num(l, "/p90")
                    && num(l, "/p90") <= num(l, "/p99")
                    && num(l, "/p99") <= num(l, "/max")
            );
            assert!(num(r, "/requests_per_s") > 0.0);
        }
    }
    assert_eq!(num(st, "/left_behind"), 0.0);
    let prefix = st["prefix"].as_str().unwrap();
    assert!(prefix.starts_with("bench/"));
    let left = common::files_under(&env.repo().join(prefix));
    assert!(left.is_empty(), "scratch objects left: {left:?}");
    // The repository still checks clean.
    assert_success(&env.run(&["check"]));

    // Without a repository, --storage says what to do.
    let none = Env::empty();
    let out = none.run(&["bench", "--quick", "--storage", "--generated-size", "1M"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("no repository"), "{}", text(&out.stderr));

    // A sample larger than memory should hold is refused before anything is allocated.
    let out = none.run(&["bench", "--generated-size", "5G"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("--generated-size"), "{}", text(&out.stderr));
}
