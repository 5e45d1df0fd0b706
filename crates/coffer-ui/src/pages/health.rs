//! A repository's health page (docs/design.md#ui-health): its checks and their
//! history with buttons to check or prune now, its packs' copies over several
//! backends, its server's log, and the last bench report.

use coffer_agent::state::Run;
use coffer_core::ops::bench::BenchReport;

use super::{bytes, layout, time};
use crate::health::{LogStatus, ReplicaReport};
use crate::http::{encode_query, esc};

/// What the health page shows.
pub struct Shown<'a> {
    pub repo: &'a str,
    /// The jobs that back up into it.
    pub jobs: &'a [String],
    /// Their check runs, newest first.
    pub checks: &'a [Run],
    pub replicas: Option<&'a Result<ReplicaReport, String>>,
    pub server_log: Option<&'a Result<LogStatus, String>>,
    pub bench: Option<&'a Result<BenchReport, String>>,
}

fn run_buttons(csrf: &str, job: &str) -> String {
    let form = |kind: &str, label: &str| {
        format!(
            "<form method=\"post\" action=\"/jobs/{}/run\" class=\"inline\"><input type=\"hidden\" name=\"csrf\" \
             value=\"{}\"><input type=\"hidden\" name=\"kind\" value=\"{kind}\"><button type=\"submit\" \
             aria-label=\"{label} with job {}\">{label}</button></form>",
            encode_query(job.as_bytes()),
            esc(csrf),
            esc(job)
        )
    };
    format!(
        "<div>Job <strong>{}</strong>: {} {}</div>",
        esc(job),
        form("check", "Check now"),
        form("prune", "Prune now")
    )
}

pub fn page(csrf: &str, s: &Shown<'_>) -> String {
    let mut b = String::from("<section aria-labelledby=\"checks\"><h2 id=\"checks\">Checks</h2>");
    if s.jobs.is_empty() {
        b.push_str("<p>No job backs up into this repository, so none checks it: run <code>coffer check</code>.</p>");
    }
    let last = s.checks.iter().find(|r| r.ended.is_some());
    match last {
        Some(r) => {
            let age = r.ended.map_or(0, |e| jiff::Timestamp::now().duration_since(e).as_secs());
            let class = if r.outcome.is_success() { "ok" } else { "bad" };
            b.push_str(&format!(
                "<p>Last check: <span class=\"state {class}\">{}</span>, {} ({}).</p>",
                esc(r.outcome.as_str()),
                time(r.ended),
                super::ago(age)
            ));
        }
        None if !s.jobs.is_empty() => b.push_str("<p class=\"bad\">Never checked from a job.</p>"),
        None => {}
    }
    for job in s.jobs {
        b.push_str(&run_buttons(csrf, job));
    }
    if !s.checks.is_empty() {
        b.push_str(
            "<table><caption>Check runs, newest first</caption><thead><tr><th scope=\"col\">Started</th>\
             <th scope=\"col\">Job</th><th scope=\"col\">Outcome</th><th scope=\"col\">Took</th>\
             <th scope=\"col\">Error</th></tr></thead><tbody>",
        );
        for r in s.checks {
            let took = r.duration().map_or("—".into(), |d| format!("{:.1} s", d.as_secs_f64()));
            let class = if r.outcome.is_success() { "" } else { " class=\"bad\"" };
            b.push_str(&format!(
                "<tr{class}><td>{}</td><td>{}</td><td>{}</td><td>{took}</td><td>{}</td></tr>",
                time(Some(r.started)),
                esc(&r.job),
                esc(r.outcome.as_str()),
                esc(r.error.as_deref().unwrap_or(""))
            ));
        }
        b.push_str("</tbody></table>");
    }
    b.push_str("</section>");
    if let Some(r) = s.replicas {
        b.push_str("<section aria-labelledby=\"replicas\"><h2 id=\"replicas\">Copies over the backends</h2>");
        match r {
            Ok(r) => b.push_str(&replicas(r)),
            Err(e) => b.push_str(&format!("<p class=\"bad\" role=\"alert\">{}</p>", esc(e))),
        }
        b.push_str("</section>");
    }
    if let Some(log) = s.server_log {
        b.push_str("<section aria-labelledby=\"log\"><h2 id=\"log\">Server transparency log</h2>");
        match log {
            Ok(l) if l.problems.is_empty() => b.push_str(&format!(
                "<p><span class=\"state ok\">consistent</span>: {} entries, {} new since last seen, signed by key \
                 <code>{}</code>{}.</p>",
                l.entries,
                l.new_entries,
                esc(&l.key),
                if l.first_contact { " (pinned now: compare it with the key the server printed)" } else { "" }
            )),
            Ok(l) => {
                b.push_str(&format!(
                    "<p><span class=\"state bad\">disagrees with the storage</span> ({} entries):</p><ul>",
                    l.entries
                ));
                for p in &l.problems {
                    b.push_str(&format!("<li>{}</li>", esc(p)));
                }
                b.push_str("</ul>");
            }
            Err(e) => b.push_str(&format!("<p class=\"bad\" role=\"alert\">{}</p>", esc(e))),
        }
        b.push_str("</section>");
    }
    b.push_str("<section aria-labelledby=\"bench\"><h2 id=\"bench\">Bench report</h2>");
    match s.bench {
        None => {
            b.push_str("<p>No report: <code>coffer bench</code> measures this machine and keeps its last report.</p>")
        }
        Some(Err(e)) => b.push_str(&format!("<p class=\"bad\">{}</p>", esc(e))),
        Some(Ok(r)) => b.push_str(&bench(r)),
    }
    b.push_str("</section>");
    layout(&format!("Health of {}", s.repo), Some(csrf), &b)
}

fn replicas(r: &ReplicaReport) -> String {
    let verdict = if r.is_whole() {
        format!(
            "<span class=\"state ok\">every pack has its {} copies</span>; the repository survives losing {} more \
             backend(s)",
            r.replicas,
            r.can_lose.unwrap_or(0)
        )
    } else {
        let lose = match r.can_lose {
            Some(n) => format!("the least copied pack survives losing {n} more backend(s)"),
            None => "some pack has no copy on any backend listed".to_string(),
        };
        let unlisted = r.backends.iter().filter(|b| b.error.is_some()).count();
        let unlisted = if unlisted > 0 { format!(", {unlisted} backend(s) not listed") } else { String::new() };
        format!(
            "<span class=\"state bad\">{} under-replicated, {} missing, {} shared object(s) short{unlisted}</span>; \
             {lose}: run <code>coffer repair --replicas</code>",
            r.under_count, r.missing_count, r.shared_missing
        )
    };
    let mut b = format!(
        "<p>Layout version {}, {} copies of every pack{}; {} indexed packs: {verdict}.{}</p>",
        r.layout_version,
        r.replicas,
        if r.migrating { ", migrating (run <code>coffer rebalance</code>)" } else { "" },
        r.packs,
        if r.misplaced > 0 {
            format!(" {} copies are off their homes: <code>coffer rebalance</code> moves them.", r.misplaced)
        } else {
            String::new()
        }
    );
    b.push_str(
        "<table><caption>Backends, as listed now</caption><thead><tr><th scope=\"col\">Backend</th>\
         <th scope=\"col\">State</th><th scope=\"col\">Packs</th><th scope=\"col\">Held</th>\
         <th scope=\"col\">Error</th></tr></thead><tbody>",
    );
    for be in &r.backends {
        let class = if be.error.is_some() { " class=\"bad\"" } else { "" };
        b.push_str(&format!(
            "<tr{class}><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&be.name),
            esc(&be.state),
            be.packs.map_or("—".into(), |p| p.to_string()),
            be.bytes.map_or("—".into(), bytes),
            esc(be.error.as_deref().unwrap_or(""))
        ));
    }
    b.push_str("</tbody></table>");
    if !r.under.is_empty() || !r.missing.is_empty() {
        b.push_str(&format!(
            "<table><caption>Packs short of copies{}</caption><thead><tr><th scope=\"col\">Pack</th>\
             <th scope=\"col\">Copies</th><th scope=\"col\">Lacking on</th></tr></thead><tbody>",
            if r.under_count + r.missing_count > (r.under.len() + r.missing.len()) as u64 {
                format!(" (the first of {})", r.under_count + r.missing_count)
            } else {
                String::new()
            }
        ));
        for p in &r.missing {
            b.push_str(&format!(
                "<tr class=\"bad\"><td><code>{}</code></td><td>0</td><td>every backend</td></tr>",
                esc(p)
            ));
        }
        for u in &r.under {
            b.push_str(&format!(
                "<tr><td><code>{}</code></td><td>{}</td><td>{}</td></tr>",
                esc(&u.pack),
                u.copies,
                esc(&u.lacking.join(", "))
            ));
        }
        b.push_str("</tbody></table>");
    }
    b
}

fn bench(r: &BenchReport) -> String {
    let mut b = format!(
        "<p>{} threads ({:.1} cores effective), cipher {}; sample of {} in {} files; measured in {:.0} s.</p>\
         <p>{}</p><p>Recommended: {}. {}</p>",
        r.machine.threads,
        r.machine.effective_cores,
        esc(&r.machine.cipher),
        bytes(r.sample.bytes),
        r.sample.files,
        r.seconds,
        esc(&r.projection.text),
        if r.recommendation.flags.is_empty() {
            "the defaults".to_string()
        } else {
            format!("<code>{}</code>", esc(&r.recommendation.flags))
        },
        esc(&r.recommendation.reason)
    );
    b.push_str(
        "<table><caption>Each stage alone, median rates</caption><thead><tr><th scope=\"col\">Stage</th>\
         <th scope=\"col\">Choice</th><th scope=\"col\">Input</th><th scope=\"col\">One core</th>\
         <th scope=\"col\">All cores</th></tr></thead><tbody>",
    );
    for s in &r.stages {
        let rate =
            |v: f64| if s.unit == "B" { format!("{}/s", bytes(v as u64)) } else { format!("{v:.0} {}/s", s.unit) };
        b.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&s.stage),
            esc(&s.choice),
            esc(&s.input),
            rate(s.per_core.rate.p50),
            rate(s.all_cores.rate.p50)
        ));
    }
    b.push_str("</tbody></table>");
    b
}
