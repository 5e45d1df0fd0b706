//! The restore pages (docs/design.md#ui-restore): the form, the dry run's
//! figures with the button that starts it, each restore's progress and result,
//! and the history.

use coffer_core::Id;
use coffer_core::format::snapshot::Snapshot;
use serde_json::Value;

use super::{bytes, layout, live_figures};
use crate::events::Item;
use crate::http::esc;
use crate::restores::{OVERWRITE, Order, Outcome, overwrite_name};

fn action(repo: &str, id: &Id) -> String {
    format!("/repos/{}/snapshots/{}/restore", esc(repo), id.to_hex())
}

fn what(path: &[u8]) -> String {
    if path.is_empty() { "the whole snapshot".into() } else { format!("<code>{}</code>", crate::app::shown_path(path)) }
}

/// The form: what, where, and the overwrite mode.
pub fn form(csrf: &str, repo: &str, snap: &(Id, Snapshot), path: &[u8], target: &str, problem: Option<&str>) -> String {
    let (id, s) = snap;
    let p = problem.map_or(String::new(), |m| format!("<p class=\"bad\" role=\"alert\">{}</p>", esc(m)));
    let mut modes = String::new();
    for (name, _, says) in OVERWRITE {
        modes.push_str(&format!("<option value=\"{name}\">{name}: {says}</option>"));
    }
    let b = format!(
        "{p}<p>Restore {} of snapshot <code>{}</code> ({}, {}).</p>\
         <form method=\"post\" action=\"{}\"><input type=\"hidden\" name=\"csrf\" value=\"{}\">\
         <input type=\"hidden\" name=\"path\" value=\"{}\">\
         <label for=\"target\">Target directory (an absolute path on the machine the UI runs on)</label>\
         <input id=\"target\" name=\"target\" value=\"{}\" required size=\"50\">\
         <label for=\"overwrite\">What is already in the target</label><select id=\"overwrite\" name=\"overwrite\">{modes}</select>\
         <p><button type=\"submit\" name=\"step\" value=\"dry-run\">Show what it would do</button></p></form>\
         <p class=\"hint\">Nothing is written until you confirm. Owners, set-id bits and device nodes are not restored \
         from the UI: <code>coffer restore --privileged</code> restores them.</p>",
        what(path),
        id.short(),
        esc(&s.hostname),
        esc(&s.time),
        action(repo, id),
        esc(csrf),
        crate::http::encode_query(path),
        esc(target),
    );
    layout("Restore", Some(csrf), &b)
}

fn outcome_list(o: &Outcome, would: bool) -> String {
    let v = if would { "would be " } else { "" };
    let mut b = format!(
        "<ul><li>{} files, {} {v}written</li><li>{} directories, {} other entries</li>",
        o.files,
        bytes(o.bytes),
        o.dirs,
        o.others
    );
    if o.skipped > 0 || o.deleted > 0 {
        b.push_str(&format!("<li>{} entries already there {v}kept, {} {v}deleted</li>", o.skipped, o.deleted));
    }
    if o.warnings > 0 {
        b.push_str(&format!("<li>{} warnings</li>", o.warnings));
    }
    if o.withheld > 0 {
        b.push_str(&format!(
            "<li>{} owners, set-id bits or devices left out (only root may set them)</li>",
            o.withheld
        ));
    }
    b.push_str("</ul>");
    b
}

/// The dry run's figures, and the button that starts the restore.
pub fn preview(csrf: &str, order: &Order, o: &Outcome) -> String {
    let b = format!(
        "<p>Restoring {} of snapshot <code>{}</code> to <code>{}</code> ({}):</p>{}\
         <form method=\"post\" action=\"{}\"><input type=\"hidden\" name=\"csrf\" value=\"{}\">\
         <input type=\"hidden\" name=\"path\" value=\"{}\"><input type=\"hidden\" name=\"target\" value=\"{}\">\
         <input type=\"hidden\" name=\"overwrite\" value=\"{}\">\
         <button type=\"submit\" name=\"step\" value=\"run\">Restore now</button></form>\
         <p><a href=\"{}?path={}\">Change something</a></p>",
        what(&order.path),
        order.snapshot.short(),
        esc(&order.target.display().to_string()),
        overwrite_name(order.overwrite),
        outcome_list(o, true),
        action(&order.repo, &order.snapshot),
        esc(csrf),
        crate::http::encode_query(&order.path),
        esc(&order.target.display().to_string()),
        overwrite_name(order.overwrite),
        action(&order.repo, &order.snapshot),
        crate::http::encode_query(&order.path),
    );
    layout("Restore: what it would do", Some(csrf), &b)
}

/// One restore: its progress while it runs, then its result.
pub fn task(csrf: &str, v: &Value, order: &Order, outcome: Option<&Outcome>, live: Option<&Item>) -> String {
    let mut b = format!(
        "<p>Restore #{} of {} of snapshot <code>{}</code> in {} to <code>{}</code>, started {}.</p>",
        v["id"],
        what(&order.path),
        order.snapshot.short(),
        esc(&order.repo),
        esc(&order.target.display().to_string()),
        esc(v["started"].as_str().unwrap_or_default()),
    );
    match (live, v.get("error").and_then(Value::as_str), outcome) {
        (Some(item), _, _) => {
            b.push_str(&format!("<p><span class=\"state run\">running</span> {}</p>", live_figures(item)));
        }
        (None, Some(e), _) => b.push_str(&format!(
            "<p><span class=\"state bad\">failed</span></p><p class=\"bad\" role=\"alert\">{}</p>",
            esc(e)
        )),
        (None, None, Some(o)) => {
            let (state, class) = if o.failure_count == 0 { ("done", "ok") } else { ("done with failures", "bad") };
            b.push_str(&format!("<p><span class=\"state {class}\">{state}</span></p>{}", outcome_list(o, false)));
            if o.failure_count > 0 {
                b.push_str(&format!(
                    "<table><caption>{} entries could not be restored (the first {} listed)</caption><thead><tr>\
                     <th scope=\"col\">Path</th><th scope=\"col\">Why</th></tr></thead><tbody>",
                    o.failure_count,
                    o.failures.len()
                ));
                for (p, m) in &o.failures {
                    b.push_str(&format!("<tr><td>{}</td><td>{}</td></tr>", esc(p), esc(m)));
                }
                b.push_str("</tbody></table>");
            }
        }
        _ => {}
    }
    b.push_str("<p><a href=\"/restores\">Every restore</a></p>");
    super::layout_live("Restore", Some(csrf), &b, live.is_some())
}

/// The restores of this UI, newest first.
pub fn list(csrf: &str, tasks: &[Value]) -> String {
    let mut b = String::new();
    if tasks.is_empty() {
        b.push_str("<p>No restore was started from this UI since it started. Pick a snapshot to restore from.</p>");
    } else {
        b.push_str(
            "<table><caption>Restores started here, newest first</caption><thead><tr><th scope=\"col\">#</th>\
             <th scope=\"col\">Started</th><th scope=\"col\">Repository</th><th scope=\"col\">What</th>\
             <th scope=\"col\">Target</th><th scope=\"col\">State</th><th scope=\"col\">Restored</th></tr></thead><tbody>",
        );
        for v in tasks {
            let o = &v["order"];
            let class = match v["state"].as_str() {
                Some("running") => "run",
                Some("done") => "ok",
                _ => "bad",
            };
            let restored = match v.get("result") {
                Some(r) => format!("{} files, {}", r["files"], bytes(r["bytes"].as_u64().unwrap_or(0))),
                None => "—".into(),
            };
            b.push_str(&format!(
                "<tr><td><a href=\"/restores/{}\">{}</a></td><td>{}</td><td>{}</td><td>{} <code>{}</code></td>\
                 <td><code>{}</code></td><td><span class=\"state {class}\">{}</span></td><td>{restored}</td></tr>",
                v["id"],
                v["id"],
                esc(v["started"].as_str().unwrap_or_default()),
                esc(o["repository"].as_str().unwrap_or_default()),
                esc(&o["snapshot"].as_str().unwrap_or_default()
                    [..8.min(o["snapshot"].as_str().unwrap_or_default().len())]),
                esc(o["path"].as_str().filter(|p| !p.is_empty()).unwrap_or("/")),
                esc(o["target"].as_str().unwrap_or_default()),
                esc(v["state"].as_str().unwrap_or_default()),
            ));
        }
        b.push_str("</tbody></table>");
    }
    layout("Restores", Some(csrf), &b)
}
