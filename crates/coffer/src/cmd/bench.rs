//! `coffer bench`: reads the sample, runs the measurements of
//! `coffer_core::ops::bench`, and prints them as aligned tables, as JSON, or as
//! a self-contained HTML report with SVG bar charts. See docs/design.md#coffer-bench.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Args;
use coffer_core::ops::bench::{self, BenchOptions, BenchReport, Figure, StageRow};
use coffer_core::repo::Repository;

use crate::args::{GlobalArgs, RepoSettings, parse_size};
use crate::table::Table;
use crate::{exit, output, repo_open};

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Files and directories to take the sample from (no links followed);
    /// none: generated data (text-like, incompressible, zeros, copies).
    pub paths: Vec<PathBuf>,
    /// Read at most this much of the files (e.g. 256M; the run takes longer in
    /// proportion).
    #[arg(long, default_value = "64M", value_parser = parse_size)]
    pub sample_size: u64,
    /// Size of the generated sample when no path is given.
    #[arg(long, default_value = "64M", value_parser = parse_size)]
    pub generated_size: u64,
    /// Timed runs per figure, one per pass over all of them (scrypt takes at most 2).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub runs: u32,
    /// A run of a few seconds: fewer levels, smaller inputs, fewer runs.
    #[arg(long)]
    pub quick: bool,
    /// Threads for the all-cores figures (default: the cores available).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub threads: Option<u16>,
    /// The backup size to project the time for (e.g. 500G).
    #[arg(long, default_value = "100G", value_parser = parse_size)]
    pub projected_size: u64,
    /// scrypt cost to time: log2(N) (the default of `init` is 15).
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u8).range(10..=22))]
    pub kdf_log_n: u8,
    /// Also measure the storage of the repository (--repo): PUT, GET and LIST at
    /// concurrency 1, 4 and 16, on a scratch prefix deleted afterwards.
    #[arg(long)]
    pub storage: bool,
    /// Also time reading the files with a cold page cache (each file dropped
    /// from the cache before each run, as far as the kernel allows), and read
    /// the sample cold, so that the projection counts reads from the disk.
    #[arg(long)]
    pub cold: bool,
    /// Write the tables and charts to this HTML file.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// The settings to compare against (those of `init`).
    #[command(flatten)]
    pub settings: RepoSettings,
}

/// The largest sample accepted: it is held in memory.
const MAX_SAMPLE: u64 = 4 << 30;

pub fn run(global: &GlobalArgs, a: &BenchArgs) -> Result<u8> {
    let init = crate::cmd::init::settings(&a.settings)?;
    let threads = a.threads.map_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()), usize::from);
    for (flag, v) in [("--sample-size", a.sample_size), ("--generated-size", a.generated_size)] {
        if v > MAX_SAMPLE {
            bail!(
                "{flag} {v} is above the {} GiB a sample may hold (it is kept in memory): give less",
                MAX_SAMPLE >> 30
            );
        }
    }
    let mut opts = if a.quick { BenchOptions::quick(threads) } else { BenchOptions::standard(threads) };
    if !a.quick {
        opts.runs = a.runs as usize;
        opts.pipeline_runs = opts.pipeline_runs.min(a.runs as usize);
    }
    if a.cold && a.paths.is_empty() {
        bail!("--cold measures reading files from the disk: give the files or directories to sample");
    }
    opts.cold = a.cold;
    opts.chunker = init.chunker;
    opts.compression_level = init.compression_level;
    opts.projected_bytes = a.projected_size;
    opts.kdf = coffer_core::crypto::ScryptParams { log_n: a.kdf_log_n, ..coffer_core::crypto::ScryptParams::DEFAULT };
    let chatty = !global.quiet && !global.json;
    let say = |what: &str| {
        if chatty {
            eprintln!("measuring: {what}");
        }
    };

    let storage = if a.storage { Some(storage(global, a.quick)?) } else { None };
    let sample = if a.paths.is_empty() {
        let len = if a.quick { a.generated_size.min(8 << 20) } else { a.generated_size };
        bench::data::generated(usize::try_from(len).context("--generated-size is too large")?)
    } else {
        say("reading the sample");
        let limit = if a.quick { a.sample_size.min(16 << 20) } else { a.sample_size };
        bench::sample::read_sample(&a.paths, limit, a.cold)?
    };
    if sample.is_empty() {
        bail!(
            "no data to measure in {}: give files or directories holding regular files, or no path for generated data",
            a.paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
        );
    }
    let report = bench::run(&sample, &opts, storage, &say)?;
    keep_report(global, &report);
    if let Some(path) = &a.report {
        std::fs::write(path, html(&report))
            .with_context(|| format!("cannot write the report to {}: check the directory", path.display()))?;
    }
    if global.json {
        let mut v = serde_json::to_value(&report)?;
        v["type"] = "bench".into();
        output::json(&v);
    } else {
        let verbose = global.verbose > 0;
        let report_text = text(&report, verbose);
        if verbose {
            print!("{report_text}");
        } else {
            // Sentences longer than the width go on over more lines.
            for line in report_text.lines() {
                if line.chars().count() <= TEXT_WIDTH {
                    println!("{line}");
                } else {
                    let indent: String = line.chars().take_while(|c| *c == ' ').collect();
                    print!("{}", wrap(line, TEXT_WIDTH, &format!("{indent}  ")));
                }
            }
        }
        if let Some(path) = &a.report {
            println!("report written to {}", path.display());
        }
    }
    Ok(exit::OK)
}

/// Measures the repository's storage on a fresh scratch prefix.
fn storage(global: &GlobalArgs, quick: bool) -> Result<bench::StorageReport> {
    let (path, _) = repo_open::location(global)?;
    let backend = if path.local_path().is_none_or(|p| p.is_dir()) { Some(repo_open::backend(&path)?) } else { None };
    let Some(backend) = backend.filter(|b| Repository::exists(b.as_ref()).unwrap_or(false)) else {
        bail!(
            "no repository at {}: --storage measures an existing repository's storage; pass --repo or create one \
             with `coffer init`",
            path.display()
        );
    };
    let prefix = format!("bench/{}/", hex(&coffer_core::crypto::random_array::<8>()));
    let (size, requests) = if quick { (256 << 10, 8) } else { (4 << 20, 32) };
    Ok(bench::measure_storage(backend.as_ref(), &prefix, size, &[1, 4, 16], requests)?)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A rate in the row's unit: bytes as MiB/s or GiB/s, operations per second.
fn rate(unit: &str, r: f64) -> String {
    if unit == "B" {
        let mib = r / 1048576.0;
        if mib >= 1024.0 { format!("{:.2} GiB/s", mib / 1024.0) } else { format!("{mib:.1} MiB/s") }
    } else if r >= 1e6 {
        format!("{:.2} M/s", r / 1e6)
    } else if r >= 1e3 {
        format!("{:.1} k/s", r / 1e3)
    } else {
        format!("{r:.2} /s")
    }
}

/// A ruled table (see [`Table`]) with the columns in `right` aligned right.
fn table(header: &[&str], right: std::ops::RangeInclusive<usize>, rows: &[Vec<String>]) -> String {
    let mut t = Table::new(header).right(right).ruled();
    for r in rows {
        t.row(r.iter().cloned());
    }
    t.render()
}

/// The widest text report without `-v`, in columns: it fits a terminal of 100.
const TEXT_WIDTH: usize = 100;

/// A table of the columns `keep` of `header` and `rows` (all of them when
/// `keep` is None), with the columns from `right` on aligned right.
fn table_of(header: &[&str], right: usize, rows: &[Vec<String>], keep: Option<&[usize]>) -> String {
    let Some(keep) = keep else { return table(header, right..=header.len() - 1, rows) };
    let pick = |cells: &[String]| keep.iter().map(|&i| cells[i].clone()).collect::<Vec<String>>();
    let header: Vec<&str> = keep.iter().map(|&i| header[i]).collect();
    let rows: Vec<Vec<String>> = rows.iter().map(|r| pick(r)).collect();
    let first_right = keep.iter().position(|&i| i >= right).unwrap_or(keep.len());
    table(&header, first_right..=header.len().saturating_sub(1), &rows)
}

/// The columns of the stage table without `-v`: stage, choice, input, the
/// medians on one and on all cores, and the ratio.
const STAGE_BRIEF: [usize; 6] = [0, 1, 2, 3, 8, 10];

/// The columns of the pipeline table without `-v`: pipeline, input, pass,
/// chunks and level, the median on all cores, files/s and bytes stored.
const PIPE_BRIEF: [usize; 7] = [0, 1, 2, 3, 4, 9, 10];

fn stage_cells(r: &StageRow) -> Vec<String> {
    let f = |x: f64| rate(&r.unit, x);
    vec![
        r.stage.clone(),
        r.choice.clone(),
        r.input.clone(),
        f(r.per_core.rate.p50),
        f(r.per_core.rate.mean),
        f(r.per_core.rate.p90),
        f(r.per_core.rate.p99),
        f(r.per_core.rate.worst),
        f(r.all_cores.rate.p50),
        f(r.all_cores.rate.worst),
        r.ratio.map_or(String::new(), |x| format!("{x:.3}")),
        r.note.clone().unwrap_or_default(),
    ]
}

const STAGE_HEADER: [&str; 12] = [
    "stage",
    "choice",
    "input",
    "1 core p50",
    "mean",
    "p90",
    "p99",
    "worst",
    "all cores p50",
    "worst",
    "ratio",
    "note",
];

fn pipe_cells(r: &bench::PipelineRow) -> Vec<String> {
    let per_core = |f: &Option<Figure>| f.as_ref().map_or(String::new(), |f| rate("B", f.rate.p50));
    let files_s = r.files as f64 / r.all_cores.seconds.p50.max(1e-9);
    vec![
        r.config.describe().to_string(),
        r.input.clone(),
        format!("{}", r.pass),
        format!("{} z{}", r.chunker, r.level),
        rate("B", r.all_cores.rate.p50),
        rate("B", r.all_cores.rate.p90),
        rate("B", r.all_cores.rate.p99),
        rate("B", r.all_cores.rate.worst),
        per_core(&r.per_core),
        format!("{files_s:.0}"),
        output::bytes(r.stored_bytes),
        r.new_blobs.to_string(),
    ]
}

const PIPE_HEADER: [&str; 12] = [
    "pipeline",
    "input",
    "pass",
    "chunks, level",
    "all cores p50",
    "p90",
    "p99",
    "worst",
    "1 core p50",
    "files/s",
    "stored",
    "new blobs",
];

/// The text report: without `verbose`, the tables' main columns only (each line
/// within [`TEXT_WIDTH`]; notes below the stage table); with it, every column,
/// as in `--json`.
fn text(r: &BenchReport, verbose: bool) -> String {
    let mut o = String::new();
    let s = &r.sample;
    let _ = writeln!(
        o,
        "machine: {} threads ({:.1} cores effectively free during the run); AES instructions: {}; cipher used: {}",
        r.machine.threads,
        r.machine.effective_cores,
        if r.machine.aes_instructions { "yes" } else { "no" },
        r.machine.cipher
    );
    let _ = writeln!(
        o,
        "sample: {} ({} files, {}{}{}); {} timed runs per figure ({} for the pipeline); {:.1} s\n",
        s.source,
        s.files,
        output::bytes(s.bytes),
        if s.truncated {
            format!(
                ", read in {} runs across {}{} files and {} counted below the paths",
                s.runs,
                if s.census_complete { "" } else { "at least " },
                s.census_files,
                output::bytes(s.census_bytes)
            )
        } else {
            String::new()
        },
        match (s.read_seconds, s.read_per_file, s.read_per_byte) {
            (Some(t), Some(f), Some(b)) if b > 0.0 => {
                format!(", read in {t:.2} s ({:.1} µs a file and {} on one thread)", f * 1e6, rate("B", 1.0 / b))
            }
            (Some(t), ..) => format!(", read in {t:.2} s"),
            _ => String::new(),
        },
        r.runs,
        r.pipeline_runs,
        r.seconds
    );
    let stage_rows: Vec<Vec<String>> = r.stages.iter().map(stage_cells).collect();
    if verbose {
        o.push_str("Stages (throughput per run: median, 90th and 99th percentile, slowest run)\n");
        o.push_str(&table(&STAGE_HEADER, 3..=10, &stage_rows));
    } else {
        o.push_str("Stages (median throughput per run; percentiles and slowest runs with -v or --json)\n");
        let mut brief = table_of(&STAGE_HEADER, 3, &stage_rows, Some(&STAGE_BRIEF));
        // The ratio column holds nothing but for compression: leave its header
        // where no row has one.
        if r.stages.iter().all(|x| x.ratio.is_none()) {
            brief = table_of(&STAGE_HEADER, 3, &stage_rows, Some(&STAGE_BRIEF[..5]));
        }
        o.push_str(&brief);
        for x in r.stages.iter().filter(|x| x.note.is_some()) {
            let line = format!("  {} {} ({}): {}", x.stage, x.choice, x.input, x.note.as_deref().unwrap_or(""));
            o.push_str(&line);
            o.push('\n');
        }
    }
    o.push_str("\nDeduplication in the sample\n");
    let rows: Vec<Vec<String>> = r
        .dedup
        .iter()
        .map(|d| {
            vec![
                d.chunker.clone(),
                d.chunks.to_string(),
                d.unique_chunks.to_string(),
                output::bytes(d.unique_bytes),
                format!("{:.1}%", 100.0 * d.unique_bytes as f64 / s.bytes.max(1) as f64),
            ]
        })
        .collect();
    o.push_str(&table(&["chunks min/avg/max", "chunks", "distinct", "distinct bytes", "of the sample"], 1..=4, &rows));
    o.push_str("\nPipeline (in memory; pass 2: every blob already stored)\n");
    let pipe_rows: Vec<Vec<String>> = r.pipeline.iter().map(pipe_cells).collect();
    o.push_str(&table_of(&PIPE_HEADER, 4, &pipe_rows, (!verbose).then_some(&PIPE_BRIEF[..])));
    if let Some(w) = &r.walk {
        o.push_str(&walk_text(w));
    }
    if let Some(st) = &r.storage {
        let _ = writeln!(o, "\nStorage at {} (scratch prefix {}, deleted afterwards)", st.location, st.prefix);
        let rows: Vec<Vec<String>> = st
            .rows
            .iter()
            .map(|x| {
                vec![
                    x.op.clone(),
                    x.concurrency.to_string(),
                    x.requests.to_string(),
                    format!("{:.2}", x.latency_ms.p50),
                    format!("{:.2}", x.latency_ms.p90),
                    format!("{:.2}", x.latency_ms.p99),
                    format!("{:.2}", x.latency_ms.max),
                    format!("{:.0}", x.requests_per_s),
                    if x.op == "list" { String::new() } else { rate("B", x.bytes_per_s) },
                ]
            })
            .collect();
        o.push_str(&table(
            &["op", "concurrency", "requests", "ms p50", "p90", "p99", "max", "requests/s", "throughput"],
            1..=8,
            &rows,
        ));
        if st.left_behind > 0 {
            let _ = writeln!(o, "warning: {} scratch objects could not be deleted under {}", st.left_behind, st.prefix);
        }
    }
    let rec = &r.recommendation;
    o.push_str("\nRecommendation\n");
    let _ = writeln!(
        o,
        "  init flags: {}",
        if rec.flags.is_empty() { "(the configured settings)".to_string() } else { rec.flags.clone() }
    );
    let _ = writeln!(o, "  cipher: {} (coffer picks it for this CPU)", rec.cipher);
    let _ = writeln!(
        o,
        "  sample backed up in {:.2} s storing {} (configured: {:.2} s, {})",
        rec.recommended_seconds,
        output::bytes(rec.recommended_stored_bytes),
        rec.default_seconds,
        output::bytes(rec.default_stored_bytes)
    );
    let _ = writeln!(o, "  {}", rec.reason);
    let p = &r.projection;
    let _ = writeln!(o, "\nProjection\n  {}", p.text);
    let shares: Vec<String> = p.shares.iter().map(|(n, s)| format!("{n} {:.0}%", s * 100.0)).collect();
    let _ = writeln!(o, "  time per byte: {}", shares.join(", "));
    if p.per_file_seconds > 0.0 {
        let _ = writeln!(
            o,
            "  per file: {:.1} µs beyond its bytes; {} of data like the sample holds {} files: {:.1} s",
            p.per_file_seconds * 1e6,
            output::bytes(p.bytes),
            p.files,
            p.per_file_seconds * p.files as f64
        );
    } else if r.walk.is_none() && s.source == "files" {
        o.push_str(
            "  per file: not measured (no directory below the paths is small enough to back up whole: give \
             directories, or a larger --sample-size)\n",
        );
    }
    o
}

/// `text` in lines of at most `width` columns, cut at spaces, the lines after
/// the first starting with `indent`; each line ends in a newline.
fn wrap(text: &str, width: usize, indent: &str) -> String {
    let body = text.trim_start_matches(' ');
    let mut line = text[..text.len() - body.len()].to_string();
    let mut empty = true;
    let mut out = String::new();
    for word in body.split(' ').filter(|w| !w.is_empty()) {
        if !empty && line.chars().count() + 1 + word.chars().count() > width {
            out.push_str(&line);
            out.push('\n');
            line = indent.to_string();
            empty = true;
        }
        if !empty {
            line.push(' ');
        }
        line.push_str(word);
        empty = false;
    }
    out.push_str(&line);
    out.push('\n');
    out
}

/// The backup of whole directories across the data, and its files' bytes alone.
fn walk_text(w: &bench::WalkRow) -> String {
    let f = &w.all_cores;
    let mut o = format!(
        "\nBackup of whole directories across the data (in-memory repository, all cores)\n  {} directories: {} files, \
         {} other entries, {} read; {:.3} s p50, {:.3} s worst of {} runs ({}, {:.0} files/s)\n",
        w.directories,
        w.files,
        w.other_entries,
        output::bytes(w.bytes),
        f.seconds.p50,
        f.seconds.max,
        f.runs,
        rate("B", f.rate.p50),
        w.files as f64 / f.seconds.p50.max(1e-9)
    );
    if let Some(saver) = &w.saver {
        let _ = writeln!(
            o,
            "  the same files' bytes: blob saver {:.3} s p50 (all cores), read again {:.3} s (one thread)",
            saver.seconds.p50, w.read_seconds
        );
    }
    o
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn html_table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut o = String::from("<table><tr>");
    for h in header {
        let _ = write!(o, "<th>{}</th>", esc(h));
    }
    o.push_str("</tr>\n");
    for r in rows {
        o.push_str("<tr>");
        for c in r {
            let _ = write!(o, "<td>{}</td>", esc(c));
        }
        o.push_str("</tr>\n");
    }
    o.push_str("</table>\n");
    o
}

/// A horizontal bar chart on a logarithmic scale (the rates span five orders of
/// magnitude): one bar per (label, median, worst), the worst run marked as a
/// darker bar inside the median's.
fn svg_bars(title: &str, unit: &str, bars: &[(String, f64, f64)]) -> String {
    let max = bars.iter().map(|b| b.1).fold(0.0, f64::max).max(1e-9);
    let lo = bars.iter().flat_map(|b| [b.1, b.2]).filter(|v| *v > 0.0).fold(max, f64::min) / 2.0;
    let scale = |v: f64| if v > lo { (v / lo).ln() / (max / lo).ln().max(1e-9) } else { 0.0 };
    let title = format!("{title} (logarithmic scale)");
    let title = title.as_str();
    let (label_w, bar_w, row_h) = (360.0, 420.0, 18.0);
    let h = 30.0 + row_h * bars.len() as f64;
    let mut o = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{h}\" font-family=\"sans-serif\" \
         font-size=\"11\"><text x=\"0\" y=\"14\" font-weight=\"bold\">{}</text>",
        label_w + bar_w + 120.0,
        esc(title)
    );
    for (i, (label, p50, worst)) in bars.iter().enumerate() {
        let y = 24.0 + row_h * i as f64;
        let w = bar_w * scale(*p50);
        let ww = bar_w * scale(*worst);
        let _ = write!(
            o,
            "<text x=\"0\" y=\"{}\">{}</text><rect x=\"{label_w}\" y=\"{y}\" width=\"{w:.1}\" height=\"{}\" \
             fill=\"#7aa6d8\"/><rect x=\"{label_w}\" y=\"{}\" width=\"{ww:.1}\" height=\"4\" fill=\"#1f4e87\"/>\
             <text x=\"{}\" y=\"{}\">{}</text>",
            y + 12.0,
            esc(label),
            row_h - 4.0,
            y + row_h - 8.0,
            (label_w + w + 4.0).round(),
            y + 12.0,
            esc(&rate(unit, *p50))
        );
    }
    o.push_str("</svg>\n");
    o
}

fn html(r: &BenchReport) -> String {
    let mut o = String::from(
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>coffer bench</title><style>\
         body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin-bottom:1.5em}\
         td,th{border:1px solid #ccc;padding:2px 6px;font-size:12px;text-align:left}th{background:#eee}\
         </style></head><body><h1>coffer bench</h1>\n",
    );
    let mut summary = text(r, true);
    if let Some(i) = summary.find("\n\n") {
        summary.truncate(i);
    }
    let _ = write!(o, "<pre>{}</pre>", esc(&summary));
    let _ = write!(
        o,
        "<h2>Recommendation</h2><p><code>{}</code></p><p>{}</p><h2>Projection</h2><p>{}</p>",
        esc(if r.recommendation.flags.is_empty() { "(the configured settings)" } else { &r.recommendation.flags }),
        esc(&r.recommendation.reason),
        esc(&r.projection.text)
    );
    if let Some(w) = &r.walk {
        let _ = write!(o, "<pre>{}</pre>", esc(walk_text(w).trim()));
    }
    o.push_str("<h2>Stages, one core</h2><p>Bar: median run; dark line: slowest run.</p>");
    let bars: Vec<(String, f64, f64)> = r
        .stages
        .iter()
        .filter(|s| s.unit == "B")
        .map(|s| (format!("{} {} ({})", s.stage, s.choice, s.input), s.per_core.rate.p50, s.per_core.rate.worst))
        .collect();
    o.push_str(&svg_bars("throughput per core", "B", &bars));
    o.push_str(&html_table(&STAGE_HEADER, &r.stages.iter().map(stage_cells).collect::<Vec<_>>()));
    o.push_str("<h2>Pipeline, all cores</h2>");
    let bars: Vec<(String, f64, f64)> = r
        .pipeline
        .iter()
        .map(|p| {
            (
                format!("{} ({}, pass {})", p.config.describe(), p.input, p.pass),
                p.all_cores.rate.p50,
                p.all_cores.rate.worst,
            )
        })
        .collect();
    o.push_str(&svg_bars("throughput on all cores", "B", &bars));
    o.push_str(&html_table(&PIPE_HEADER, &r.pipeline.iter().map(pipe_cells).collect::<Vec<_>>()));
    if let Some(st) = &r.storage {
        o.push_str("<h2>Storage</h2>");
        let bars: Vec<(String, f64, f64)> = st
            .rows
            .iter()
            .filter(|x| x.op != "list")
            .map(|x| (format!("{} x{}", x.op, x.concurrency), x.bytes_per_s, x.bytes_per_s))
            .collect();
        o.push_str(&svg_bars("storage throughput", "B", &bars));
    }
    o.push_str("<h2>JSON</h2><pre>");
    o.push_str(&esc(&serde_json::to_string_pretty(r).unwrap_or_default()));
    o.push_str("</pre></body></html>\n");
    o
}

/// Where the last report is kept, for `coffer ui`'s health pages.
pub fn last_report_path() -> Result<std::path::PathBuf> {
    Ok(crate::repo_open::state_base()?.join("bench").join("last.json"))
}

/// Keeps the report as the last one (a fresh file renamed into place); a
/// failure is a warning: the measurement itself stands.
fn keep_report(global: &GlobalArgs, report: &bench::BenchReport) {
    let kept = (|| -> Result<()> {
        let path = last_report_path()?;
        let dir = path.parent().expect("the path has a directory");
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let tmp = dir.join(format!(".last.json.{}", std::process::id()));
        std::fs::write(&tmp, serde_json::to_vec(report)?).with_context(|| format!("cannot write {}", tmp.display()))?;
        std::fs::rename(&tmp, &path).with_context(|| format!("cannot rename into {}", path.display()))?;
        Ok(())
    })();
    if let Err(e) = kept {
        crate::repo_open::warn(global, &format!("the report is not kept for `coffer ui`: {e:#}"));
    }
}
