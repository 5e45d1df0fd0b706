//! The pages (docs/design.md#ui-pages), rendered on the server: plain HTML
//! forms and links, usable without script, with the keyboard and a screen
//! reader (a skip link, labelled controls, captioned tables, state given in
//! words as well as colour). Every text from a repository or a jobs file is
//! escaped.

use coffer_agent::state::Run;
use coffer_agent::status::KindStatus;
use coffer_core::Id;
use coffer_core::format::snapshot::Snapshot;
use coffer_core::format::tree::{Node, NodeKind};
use http::StatusCode;
use serde_json::{Value, json};

use crate::app::{Filter, child_path, shown_path, tree_time};
use crate::brief::Brief;
use crate::http::{encode_query, esc};
use crate::preview::Preview;
use crate::repos::Page;

pub mod forget;
pub mod health;
pub mod restore;

fn layout(title: &str, csrf: Option<&str>, body: &str) -> String {
    layout_live(title, csrf, body, false)
}

/// A page; with `live`, one showing something going on, which a browser without
/// script reloads every few seconds (`ui.js` updates it in place instead).
fn layout_live(title: &str, csrf: Option<&str>, body: &str, live: bool) -> String {
    let refresh = if live { "<noscript><meta http-equiv=\"refresh\" content=\"3\"></noscript>" } else { "" };
    let nav = match csrf {
        Some(c) => format!(
            "<nav aria-label=\"main\"><a href=\"/\">Dashboard</a><a href=\"/restores\">Restores</a>\
             <form method=\"post\" action=\"/logout\" class=\"inline\"><input type=\"hidden\" name=\"csrf\" value=\"{}\">\
             <button type=\"submit\">Log out</button></form></nav>",
            esc(c)
        ),
        None => String::new(),
    };
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{} · coffer</title><link rel=\"stylesheet\" href=\"/assets/style.css\">{refresh}\
         <script src=\"/assets/ui.js\" defer></script></head>\
         <body><a class=\"skip\" href=\"#main\">Skip to content</a><header><span class=\"brand\">coffer</span>{nav}</header>\
         <main id=\"main\" tabindex=\"-1\"><h1>{}</h1>{body}</main></body></html>\n",
        esc(title),
        esc(title)
    )
}

/// The login page, with what went wrong last.
pub fn login(problem: Option<&str>) -> String {
    let p = problem.map_or(String::new(), |m| format!("<p class=\"bad\" role=\"alert\">{}</p>", esc(m)));
    layout(
        "Log in",
        None,
        &format!(
            "{p}<form method=\"post\" action=\"/login\"><label for=\"secret\">Password or login token</label>\
             <input id=\"secret\" name=\"secret\" type=\"password\" autocomplete=\"current-password\" required autofocus>\
             <button type=\"submit\">Log in</button></form>\
             <p class=\"hint\">The login token is printed by <code>coffer ui</code> when it starts; each opens one session.</p>"
        ),
    )
}

/// An error page.
pub fn error(status: StatusCode, message: &str) -> String {
    layout(
        status.canonical_reason().unwrap_or("Error"),
        None,
        &format!("<p class=\"bad\" role=\"alert\">{}</p><p><a href=\"/\">Back to the dashboard</a></p>", esc(message)),
    )
}

fn time(t: Option<jiff::Timestamp>) -> String {
    t.map_or("—".into(), |t| t.round(jiff::Unit::Second).unwrap_or(t).strftime("%Y-%m-%d %H:%M:%S UTC").to_string())
}

/// A kind's state in words: running, overdue, failed, ok, never run.
fn state_of(k: &KindStatus) -> (&'static str, &'static str) {
    if k.running.is_some() {
        ("running", "run")
    } else if k.overdue {
        ("overdue", "bad")
    } else {
        match &k.last {
            None => ("never run", "none"),
            Some(r) if r.outcome.is_success() => ("ok", "ok"),
            Some(_) => ("failed", "bad"),
        }
    }
}

/// What is going on, with its figures: updated in place by `ui.js`.
pub fn live_figures(item: &crate::events::Item) -> String {
    let value = item.fraction.map_or(String::new(), |f| format!(" value=\"{f:.3}\""));
    format!(
        "<span data-live=\"{}\"><span class=\"figures\" aria-live=\"polite\">{}</span> \
         <progress max=\"1\"{value} aria-label=\"progress\"></progress></span>",
        esc(&item.key),
        esc(&item.text)
    )
}

/// The dashboard: jobs (overdue first), with the figures of those running
/// (`live`), recent runs, repositories.
pub fn dashboard(
    csrf: &str,
    jobs: &[KindStatus],
    live: &[crate::events::Item],
    runs: &[Run],
    repos: &[Value],
) -> String {
    let mut b = String::new();
    // `data-watch`: a run starting elsewhere makes ui.js draw the page again.
    b.push_str("<section aria-labelledby=\"jobs\" data-watch=\"/\"><h2 id=\"jobs\">Jobs</h2>");
    if jobs.is_empty() {
        b.push_str("<p>No jobs are configured (see <code>coffer agent</code>).</p>");
    } else {
        b.push_str(
            "<table><caption>Each job's steps, overdue ones first</caption><thead><tr><th scope=\"col\">Job</th>\
             <th scope=\"col\">Step</th><th scope=\"col\">State</th><th scope=\"col\">Last run</th>\
             <th scope=\"col\">Last success</th><th scope=\"col\">Next due</th><th scope=\"col\">Run now</th></tr></thead><tbody>",
        );
        for k in jobs {
            let (state, class) = state_of(k);
            let key = format!("job:{}", k.job);
            let figures = match live.iter().find(|i| i.key == key && k.running.is_some()) {
                Some(i) => format!(" {}", live_figures(i)),
                None => String::new(),
            };
            let last = k
                .last
                .as_ref()
                .map_or("—".to_string(), |r| format!("{} ({})", time(Some(r.started)), esc(r.outcome.as_str())));
            b.push_str(&format!(
                "<tr class=\"{class}\"><th scope=\"row\">{}</th><td>{}</td><td><span class=\"state {class}\">{state}</span>{figures}</td>\
                 <td>{last}</td><td>{}</td><td>{}</td><td><form method=\"post\" action=\"/jobs/{}/run\">\
                 <input type=\"hidden\" name=\"csrf\" value=\"{}\"><input type=\"hidden\" name=\"kind\" value=\"{}\">\
                 <button type=\"submit\" aria-label=\"Run {} of {} now\">Run</button></form></td></tr>",
                esc(&k.job),
                k.kind.as_str(),
                time(k.last_success.as_ref().map(|r| r.started)),
                time(k.next),
                encode_query(k.job.as_bytes()),
                esc(csrf),
                k.kind.as_str(),
                k.kind.as_str(),
                esc(&k.job),
            ));
        }
        b.push_str("</tbody></table>");
    }
    b.push_str("</section><section aria-labelledby=\"runs\"><h2 id=\"runs\">Recent runs</h2>");
    if runs.is_empty() {
        b.push_str("<p>No run yet.</p>");
    } else {
        b.push_str(
            "<table><caption>The newest runs first</caption><thead><tr><th scope=\"col\">Started</th><th scope=\"col\">Job</th>\
             <th scope=\"col\">Step</th><th scope=\"col\">Outcome</th><th scope=\"col\">Took</th><th scope=\"col\">Error</th></tr></thead><tbody>",
        );
        for r in runs {
            let took = r.duration().map_or("—".into(), |d| format!("{:.1} s", d.as_secs_f64()));
            b.push_str(&format!(
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{took}</td><td>{}</td></tr>",
                time(Some(r.started)),
                esc(&r.job),
                r.kind.as_str(),
                esc(r.outcome.as_str()),
                esc(r.error.as_deref().unwrap_or(""))
            ));
        }
        b.push_str("</tbody></table>");
    }
    b.push_str("</section><section aria-labelledby=\"repos\"><h2 id=\"repos\">Repositories</h2>");
    if repos.is_empty() {
        b.push_str("<p>No repository is shown.</p>");
    } else {
        b.push_str(
            "<table><caption>Repositories</caption><thead><tr><th scope=\"col\">Name</th><th scope=\"col\">Location</th>\
             <th scope=\"col\">Snapshots</th><th scope=\"col\">Hosts</th><th scope=\"col\">Latest</th>\
             <th scope=\"col\">Stored</th><th scope=\"col\">Saving</th><th scope=\"col\">Last check</th></tr></thead><tbody>",
        );
        for r in repos {
            let name = r["name"].as_str().unwrap_or_default();
            let row = match r.get("error") {
                Some(e) => format!("<td colspan=\"6\" class=\"bad\">{}</td>", esc(e.as_str().unwrap_or_default())),
                None => {
                    let hosts: Vec<String> = r["hosts"]
                        .as_object()
                        .map(|m| m.iter().map(|(h, n)| format!("{} ({n})", esc(h))).collect())
                        .unwrap_or_default();
                    let stored = r["stored_bytes"].as_u64().map_or("—".to_string(), bytes);
                    let saving = match (r["ratio"].as_f64(), r["logical_bytes"].as_u64()) {
                        (Some(x), Some(l)) => format!("{x:.1}× ({} in snapshots)", bytes(l)),
                        _ => "—".to_string(),
                    };
                    let c = &r["last_check"];
                    let check = match (c["outcome"].as_str(), c["age_seconds"].as_i64()) {
                        (Some(o), Some(age)) => format!(
                            "<a href=\"/repos/{}/health\"><span class=\"state {}\">{}</span>, {}</a>",
                            esc(name),
                            if o == "success" { "ok" } else { "bad" },
                            esc(o),
                            ago(age)
                        ),
                        _ => format!("<a href=\"/repos/{}/health\">never</a>", esc(name)),
                    };
                    format!(
                        "<td>{}</td><td>{}</td><td>{}</td><td>{stored}</td><td>{saving}</td><td>{check}</td>",
                        r["snapshots"],
                        hosts.join(", "),
                        esc(r["latest"]["time"].as_str().unwrap_or("—"))
                    )
                }
            };
            b.push_str(&format!(
                "<tr><th scope=\"row\"><a href=\"/repos/{}\">{}</a></th><td>{}</td>{row}</tr>",
                esc(name),
                esc(name),
                esc(r["location"].as_str().unwrap_or_default())
            ));
        }
        b.push_str("</tbody></table>");
    }
    b.push_str("</section>");
    layout_live("Dashboard", Some(csrf), &b, jobs.iter().any(|k| k.running.is_some()))
}

/// An age in words: `5 minutes ago`, `3 hours ago`, `2 days ago`.
fn ago(secs: i64) -> String {
    let (n, unit) = match secs {
        ..120 => (secs.max(0), "second"),
        120..7200 => (secs / 60, "minute"),
        7200..172_800 => (secs / 3600, "hour"),
        _ => (secs / 86_400, "day"),
    };
    format!("{n} {unit}{} ago", if n == 1 { "" } else { "s" })
}

fn field(id: &str, label: &str, value: &Option<String>) -> String {
    format!(
        "<label for=\"{id}\">{label}</label><input id=\"{id}\" name=\"{id}\" value=\"{}\">",
        esc(value.as_deref().unwrap_or(""))
    )
}

/// The rows of a snapshot list page, unless it asks for others (`limit`).
pub const SNAPSHOT_ROWS: usize = 200;
/// The most rows a snapshot list page shows.
pub const MAX_SNAPSHOT_ROWS: usize = 2000;

/// What a snapshot list page shows besides the snapshots.
pub struct SnapshotPage<'a> {
    pub filter: &'a Filter,
    /// The rows skipped, newest first.
    pub offset: usize,
    /// The rows shown at most.
    pub rows: usize,
    /// The job whose retention policy applies, if any.
    pub policy_job: Option<&'a str>,
}

/// A repository's snapshots (those `snaps` the filter kept, oldest first),
/// newest first, `page.rows` a page, with the filter form; the charts
/// draw every one of them.
pub fn snapshots(csrf: &str, repo: &str, snaps: &[&(Id, Brief)], page: &SnapshotPage<'_>) -> String {
    let f = page.filter;
    let mut b = format!(
        "<form method=\"get\" action=\"/repos/{}\" class=\"filter\" role=\"search\">{}{}{}{}{}<button type=\"submit\">Filter</button></form>",
        esc(repo),
        field("host", "Host", &f.host),
        field("tag", "Tag", &f.tag),
        field("path", "Path", &f.path),
        field("since", "Since (day or time)", &f.since),
        field("until", "Until (day or time)", &f.until)
    );
    b.push_str(&find_form(repo, ""));
    b.push_str(&format!("<p><a href=\"/repos/{}/health\">Health: checks, server log, bench</a></p>", esc(repo)));
    if let Some(job) = page.policy_job {
        b.push_str(&format!(
            "<p><a href=\"/repos/{}/forget?policy=1\">See what the retention policy of job {} would forget</a></p>",
            esc(repo),
            esc(job)
        ));
    }
    b.push_str(&charts(snaps));
    let offset = page.offset.min(snaps.len());
    let rows = snaps.len() - offset;
    let shown = rows.min(page.rows);
    let which = if shown == snaps.len() {
        format!("{} snapshots", snaps.len())
    } else {
        format!("snapshots {} to {} of {}", offset + 1, offset + shown, snaps.len())
    };
    b.push_str(&format!(
        "<form method=\"get\" action=\"/repos/{}/diff\"><table><caption>{which}, newest first; pick two to compare \
         them</caption><thead><tr><th scope=\"col\">From</th><th scope=\"col\">To</th><th scope=\"col\">Time</th>\
         <th scope=\"col\">Id</th><th scope=\"col\">Host</th><th scope=\"col\">Paths</th><th scope=\"col\">Tags</th>\
         <th scope=\"col\">Files</th><th scope=\"col\">Size</th><th scope=\"col\">Added</th><th scope=\"col\">Forget</th>\
         </tr></thead><tbody>",
        esc(repo),
    ));
    for (i, (id, s)) in snaps.iter().rev().enumerate().skip(offset).take(shown) {
        let files = s.summary.files_new + s.summary.files_changed + s.summary.files_unchanged;
        let signed = if s.signature_valid { "" } else { " <span class=\"bad\">(unsigned or bad signature)</span>" };
        let hex = id.to_hex();
        let (from, to) = (if i == 1 { " checked" } else { "" }, if i == 0 { " checked" } else { "" });
        b.push_str(&format!(
            "<tr><td><input type=\"radio\" name=\"from\" value=\"{hex}\" aria-label=\"compare from {short}\"{from}></td>\
             <td><input type=\"radio\" name=\"to\" value=\"{hex}\" aria-label=\"compare to {short}\"{to}></td>\
             <td>{}</td><td><a href=\"/repos/{}/snapshots/{hex}\"><code>{short}</code></a>{signed}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{files}</td><td>{}</td><td>{}</td>\
             <td><a href=\"/repos/{repo}/forget?snapshots={hex}\" aria-label=\"Forget {short}\">Forget…</a></td></tr>",
            esc(&s.time),
            esc(repo),
            esc(&s.hostname),
            esc(&s.paths.join(", ")),
            esc(&s.tags.join(", ")),
            bytes(s.summary.bytes_total),
            bytes(s.summary.bytes_added),
            short = id.short(),
            repo = esc(repo),
        ));
    }
    b.push_str("</tbody></table>");
    if shown >= 2 {
        b.push_str("<button type=\"submit\">Compare the two</button>");
    }
    b.push_str("</form>");
    let link = |at: usize, label: &str| {
        let q = f.query();
        let sep = if q.is_empty() { "" } else { "&amp;" };
        let limit = if page.rows == SNAPSHOT_ROWS { String::new() } else { format!("&amp;limit={}", page.rows) };
        format!("<a href=\"/repos/{}?{}{sep}offset={at}{limit}\">{label}</a>", esc(repo), esc(&q))
    };
    let mut nav = Vec::new();
    if offset > 0 {
        nav.push(link(offset.saturating_sub(page.rows), "Newer"));
    }
    if offset + shown < snaps.len() {
        nav.push(link(offset + shown, "Older"));
    }
    if !nav.is_empty() {
        b.push_str(&format!("<nav aria-label=\"pages of snapshots\"><p>{}</p></nav>", nav.join(" · ")));
    }
    layout(&format!("Snapshots of {repo}"), Some(csrf), &b)
}

/// The colours of the charts' series (hosts), in turn.
const COLOURS: [&str; 6] = ["#0b5cad", "#c2410c", "#15803d", "#7c3aed", "#be185d", "#4b5563"];

/// A snapshot placed on a chart: its time (seconds), host, id and record.
type Point<'a> = (f64, &'a str, &'a Id, &'a Brief);

/// The charts of a snapshot list: bytes added, backup duration and size per
/// snapshot over time, one series per host; each point's title names its
/// snapshot (shown on hover and read by screen readers).
fn charts(snaps: &[&(Id, Brief)]) -> String {
    let points: Vec<Point<'_>> = snaps
        .iter()
        .filter_map(|(id, s)| {
            let t: jiff::Timestamp = s.time.parse().ok()?;
            Some((t.as_millisecond() as f64 / 1000.0, &*s.hostname, id, s))
        })
        .collect();
    if points.len() < 2 {
        return String::new();
    }
    let added = chart("Bytes added per backup", &points, |s| s.summary.bytes_added as f64, |v| bytes(v as u64));
    let took = chart("Backup duration", &points, |s| s.summary.duration_ms as f64 / 1000.0, |v| format!("{v:.1} s"));
    let total = chart("Size of each snapshot", &points, |s| s.summary.bytes_total as f64, |v| bytes(v as u64));
    format!("<section class=\"charts\" aria-label=\"charts\">{added}{took}{total}</section>")
}

/// One chart, drawn as SVG with presentation attributes only (the content
/// security policy allows no inline style).
fn chart(title: &str, points: &[Point<'_>], value: impl Fn(&Brief) -> f64, shown: impl Fn(f64) -> String) -> String {
    const W: f64 = 360.0;
    const H: f64 = 150.0;
    const PAD: f64 = 8.0;
    let (t0, t1) = points.iter().fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.0), b.max(p.0)));
    let top = points.iter().map(|p| value(p.3)).fold(0.0f64, f64::max).max(1e-9);
    let x = |t: f64| if t1 > t0 { PAD + (t - t0) / (t1 - t0) * (W - 2.0 * PAD) } else { W / 2.0 };
    let y = |v: f64| H - PAD - v / top * (H - 2.0 * PAD);
    let mut hosts: Vec<&str> = points.iter().map(|p| p.1).collect();
    hosts.sort_unstable();
    hosts.dedup();
    let mut svg = format!(
        "<figure><figcaption>{} (up to {})</figcaption><svg viewBox=\"0 0 {W} {H}\" role=\"img\" aria-label=\"{}\" \
         width=\"100%\"><rect x=\"0\" y=\"0\" width=\"{W}\" height=\"{H}\" fill=\"none\" stroke=\"#8886\"/>",
        esc(title),
        esc(&shown(top)),
        esc(title)
    );
    for (k, host) in hosts.iter().enumerate() {
        let colour = COLOURS[k % COLOURS.len()];
        let mine: Vec<&Point<'_>> = points.iter().filter(|p| p.1 == *host).collect();
        let line: Vec<String> = mine.iter().map(|p| format!("{:.1},{:.1}", x(p.0), y(value(p.3)))).collect();
        svg.push_str(&format!(
            "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.5\" points=\"{}\"/>",
            line.join(" ")
        ));
        for p in mine {
            svg.push_str(&format!(
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{colour}\"><title>{} {} {}: {}</title></circle>",
                x(p.0),
                y(value(p.3)),
                esc(host),
                p.2.short(),
                esc(&p.3.time),
                esc(&shown(value(p.3)))
            ));
        }
    }
    svg.push_str("</svg>");
    if hosts.len() > 1 {
        let legend: Vec<String> = hosts
            .iter()
            .enumerate()
            .map(|(k, h)| {
                format!(
                    "<span><svg width=\"10\" height=\"10\" aria-hidden=\"true\"><rect width=\"10\" height=\"10\" \
                     fill=\"{}\"/></svg> {}</span>",
                    COLOURS[k % COLOURS.len()],
                    esc(h)
                )
            })
            .collect();
        svg.push_str(&format!("<p class=\"legend\">{}</p>", legend.join(" ")));
    }
    svg.push_str("</figure>");
    svg
}

/// The changes from one snapshot to another.
pub fn diff(csrf: &str, repo: &str, d: &crate::repos::Compared) -> String {
    let st = &d.stats;
    let link = |(id, s): &(Id, Snapshot)| {
        format!(
            "<a href=\"/repos/{}/snapshots/{}\"><code>{}</code></a> ({})",
            esc(repo),
            id.to_hex(),
            id.short(),
            esc(&s.time)
        )
    };
    let mut b = format!(
        "<p>From {} to {}.</p><p>{} added ({}), {} removed ({}), {} modified, {} changed type, {} changed metadata \
         only.</p>",
        link(&d.from),
        link(&d.to),
        st.added,
        bytes(st.bytes_added),
        st.removed,
        bytes(st.bytes_removed),
        st.modified,
        st.type_changed,
        st.metadata_only
    );
    b.push_str(
        "<table><caption>Changed entries, in path order</caption><thead><tr><th scope=\"col\">Change</th>\
         <th scope=\"col\">Path</th><th scope=\"col\">Type</th><th scope=\"col\">What differs</th></tr></thead><tbody>",
    );
    for c in &d.changes {
        let class = match c.kind.as_str() {
            "added" => "ok",
            "removed" => "bad",
            _ => "run",
        };
        b.push_str(&format!(
            "<tr><td><span class=\"state {class}\">{}</span></td><td>{}</td><td>{}</td><td>{}</td></tr>",
            c.kind.as_str(),
            shown_path(&c.path),
            crate::app::kind_name(c.node_kind),
            c.fields.iter().map(|f| f.as_str()).collect::<Vec<_>>().join(", ")
        ));
    }
    b.push_str("</tbody></table>");
    if d.truncated {
        b.push_str(&format!("<p>Only the first {} changes are listed.</p>", d.changes.len()));
    }
    layout(&format!("Changes in {repo}"), Some(csrf), &b)
}

/// Entries found by name.
pub fn found(csrf: &str, repo: &str, pattern: &str, found: &[crate::repos::Found], full: bool) -> String {
    let mut b = find_form(repo, pattern);
    b.push_str(&format!(
        "<table><caption>{} entries named {}, newest snapshot first</caption><thead><tr><th scope=\"col\">Snapshot</th>\
         <th scope=\"col\">Path</th><th scope=\"col\">Size</th><th scope=\"col\">Modified</th><th scope=\"col\">Get</th>\
         </tr></thead><tbody>",
        found.len(),
        esc(pattern)
    ));
    for f in found {
        let base = format!("/repos/{}/snapshots/{}", esc(repo), f.snapshot.to_hex());
        let dir = f.path.rsplitn(2, |b| *b == b'/').nth(1).unwrap_or_default();
        let get = if f.node.kind == NodeKind::File {
            format!("<a href=\"{base}/download?path={}\">Download</a>", encode_query(&f.path))
        } else {
            String::new()
        };
        b.push_str(&format!(
            "<tr><td><code>{}</code> {}</td><td><a href=\"{base}?path={}\">{}</a></td><td>{}</td><td>{}</td><td>{get}</td></tr>",
            f.snapshot.short(),
            esc(&f.time),
            encode_query(dir),
            shown_path(&f.path),
            if f.node.kind == NodeKind::File { bytes(f.node.size) } else { String::new() },
            tree_time(f.node.mtime.0, f.node.mtime.1)
        ));
    }
    b.push_str("</tbody></table>");
    if full {
        b.push_str(&format!("<p>Only the first {} are listed: narrow the pattern.</p>", found.len()));
    }
    layout(&format!("Find in {repo}"), Some(csrf), &b)
}

fn find_form(repo: &str, pattern: &str) -> String {
    format!(
        "<form method=\"get\" action=\"/repos/{}/find\" class=\"filter\" role=\"search\"><label for=\"pattern\">Find by \
         name (*, ?, [..]; a pattern with / matches the path)<input id=\"pattern\" name=\"pattern\" value=\"{}\" required>\
         </label><button type=\"submit\">Find</button></form>",
        esc(repo),
        esc(pattern)
    )
}

/// `n` bytes in binary units.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 { format!("{n} B") } else { format!("{v:.1} {}", UNITS[u]) }
}

/// A page of a snapshot's directory.
pub fn browse(csrf: &str, repo: &str, snap: &(Id, Snapshot), dir: &[u8], page: &Page, limit: usize) -> String {
    let (id, s) = snap;
    let base = format!("/repos/{}/snapshots/{}", esc(repo), id.to_hex());
    // Breadcrumbs: the root, then each component.
    let mut crumbs = format!("<a href=\"{base}\">{}</a>", esc(&s.hostname));
    let mut so_far: Vec<u8> = Vec::new();
    if !dir.is_empty() {
        for part in dir.split(|b| *b == b'/') {
            if !so_far.is_empty() {
                so_far.push(b'/');
            }
            so_far.extend_from_slice(part);
            crumbs.push_str(&format!(" / <a href=\"{base}?path={}\">{}</a>", encode_query(&so_far), shown_path(part)));
        }
    }
    let here_q = if dir.is_empty() { String::new() } else { format!("?path={}", encode_query(dir)) };
    let here_a = if dir.is_empty() { "?".to_string() } else { format!("?path={}&amp;", encode_query(dir)) };
    let what = if dir.is_empty() { "all of it" } else { "this directory" };
    let mut b = format!(
        "<nav aria-label=\"breadcrumb\" class=\"crumbs\">{crumbs}</nav><p>Snapshot <code>{}</code> of {}, {}. \
         <a href=\"{base}/restore{here_q}\">Restore {what}</a>; download {what} as \
         <a href=\"{base}/archive{here_a}format=tar\">tar</a> or <a href=\"{base}/archive{here_a}format=zip\">zip</a></p>",
        id.short(),
        esc(&s.hostname),
        esc(&s.time),
    );
    let end = page.offset + page.entries.len();
    b.push_str(&format!(
        "<table><caption>Entries {}–{} of {}</caption><thead><tr><th scope=\"col\">Name</th><th scope=\"col\">Size</th>\
         <th scope=\"col\">Modified</th><th scope=\"col\">Mode</th><th scope=\"col\">Get</th></tr></thead><tbody>",
        if page.entries.is_empty() { 0 } else { page.offset + 1 },
        end,
        page.total
    ));
    for n in &page.entries {
        let p = encode_query(&child_path(dir, n));
        let name = shown_path(&n.name.0);
        let (shown, get) = match n.kind {
            NodeKind::Dir => (
                format!("<a href=\"{base}?path={p}\">{name}/</a>"),
                format!(
                    "<a href=\"{base}/archive?path={p}&amp;format=tar\" aria-label=\"Download {name} as tar\">tar</a> \
                     <a href=\"{base}/archive?path={p}&amp;format=zip\" aria-label=\"Download {name} as zip\">zip</a> \
                     <a href=\"{base}/restore?path={p}\" aria-label=\"Restore {name}\">Restore</a>"
                ),
            ),
            NodeKind::File => (
                format!("<a href=\"{base}/preview?path={p}\">{name}</a>"),
                format!(
                    "<a href=\"{base}/download?path={p}\" aria-label=\"Download {name}\">Download</a> \
                     <a href=\"{base}/restore?path={p}\" aria-label=\"Restore {name}\">Restore</a>"
                ),
            ),
            NodeKind::Symlink => (
                format!(
                    "{name} → {}",
                    esc(&n.target.as_ref().map(|t| String::from_utf8_lossy(&t.0).into_owned()).unwrap_or_default())
                ),
                String::new(),
            ),
            _ => (name, String::new()),
        };
        b.push_str(&format!(
            "<tr><td>{shown}</td><td>{}</td><td>{}</td><td><code>{:o}</code></td><td>{get}</td></tr>",
            if n.kind == NodeKind::File { bytes(n.size) } else { String::new() },
            tree_time(n.mtime.0, n.mtime.1),
            n.mode & 0o7777
        ));
    }
    b.push_str("</tbody></table><nav aria-label=\"pages\" class=\"pager\">");
    let here = if dir.is_empty() { String::new() } else { format!("path={}&amp;", encode_query(dir)) };
    if page.offset > 0 {
        let prev = page.offset.saturating_sub(limit);
        b.push_str(&format!(
            "<a href=\"{base}?{here}offset={prev}&amp;limit={limit}\" rel=\"prev\">Previous {limit}</a> "
        ));
    }
    if end < page.total {
        b.push_str(&format!("<a href=\"{base}?{here}offset={end}&amp;limit={limit}\" rel=\"next\">Next {limit}</a>"));
    }
    b.push_str("</nav>");
    layout("Browse", Some(csrf), &b)
}

/// A file's page: what it is, a link to download it, and its preview.
pub fn preview(csrf: &str, repo: &str, snap: &(Id, Snapshot), path: &[u8], node: &Node, p: &Preview) -> String {
    let (id, s) = snap;
    let base = format!("/repos/{}/snapshots/{}", esc(repo), id.to_hex());
    let q = encode_query(path);
    let (dir, name) = match path.iter().rposition(|b| *b == b'/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => (&path[..0], path),
    };
    let up = if dir.is_empty() { base.clone() } else { format!("{base}?path={}", encode_query(dir)) };
    let mut b = format!(
        "<p><a href=\"{up}\">Back to {}</a> · snapshot <code>{}</code> of {}, {}</p>\
         <p>{}, modified {}, mode <code>{:o}</code>. <a href=\"{base}/download?path={q}\">Download</a> \
         <a href=\"{base}/restore?path={q}\">Restore</a></p>",
        if dir.is_empty() { esc(&s.hostname) } else { shown_path(dir) },
        id.short(),
        esc(&s.hostname),
        esc(&s.time),
        bytes(node.size),
        tree_time(node.mtime.0, node.mtime.1),
        node.mode & 0o7777
    );
    match p {
        Preview::Text { text, truncated } => {
            if *truncated {
                b.push_str(&format!(
                    "<p class=\"hint\">The first {} of {} are shown.</p>",
                    bytes(text.len() as u64),
                    bytes(node.size)
                ));
            }
            b.push_str(&format!(
                "<pre class=\"preview\" tabindex=\"0\" aria-label=\"Content of {}\">{}</pre>",
                shown_path(name),
                esc(text)
            ));
        }
        Preview::Image(_) => b.push_str(&format!(
            "<figure><img class=\"preview\" src=\"{base}/image?path={q}\" alt=\"Image {}\"></figure>",
            shown_path(name)
        )),
        Preview::Binary => {
            b.push_str("<p>No preview: this file is neither text in UTF-8 nor an image the UI shows.</p>")
        }
    }
    layout(&String::from_utf8_lossy(name), Some(csrf), &b)
}

fn run_brief(r: &Run) -> Value {
    json!({"id": r.id.0, "started": r.started.to_string(), "ended": r.ended.map(|t| t.to_string()),
           "outcome": r.outcome.as_str(), "exit_code": r.exit_code, "snapshot": r.snapshot, "error": r.error})
}

/// A job's kind for the API.
pub fn kind_json(k: &KindStatus) -> Value {
    json!({
        "job": k.job, "kind": k.kind.as_str(), "schedule": k.schedule, "state": state_of(k).0,
        "overdue": k.overdue, "overdue_after_seconds": k.overdue_after.map(|d| d.as_secs()),
        "next": k.next.map(|t| t.to_string()),
        "last": k.last.as_ref().map(run_brief), "last_success": k.last_success.as_ref().map(run_brief),
        "running": k.running.as_ref().map(run_brief),
    })
}

/// A run for the API.
pub fn run_json(r: &Run) -> Value {
    let mut v = run_brief(r);
    v["job"] = json!(r.job);
    v["kind"] = json!(r.kind.as_str());
    v["trigger"] = json!(r.trigger.as_str());
    v["summary"] = r.summary.clone().unwrap_or(Value::Null);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_well() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(3 << 30), "3.0 GiB");
    }

    #[test]
    fn pages_escape_what_they_show() {
        let p = error(StatusCode::NOT_FOUND, "<script>alert(1)</script>");
        assert!(!p.contains("<script>alert"), "{p}");
        assert!(p.contains("&lt;script&gt;"));
        let l = login(Some("a \"quoted\" <b>"));
        assert!(l.contains("a &quot;quoted&quot; &lt;b&gt;"));
    }
}
