//! The forget pages (docs/design.md#ui-forget): what would be forgotten, with
//! the policy's decisions when it is the policy that forgets, and the button
//! that confirms exactly that list; then what was done.

use std::collections::HashMap;

use crate::brief::Brief;
use coffer_core::Id;

use super::layout;
use crate::forgets::Plan;
use crate::http::esc;

fn snapshot_link(repo: &str, id: &Id) -> String {
    format!("<a href=\"/repos/{}/snapshots/{}\"><code>{}</code></a>", esc(repo), id.to_hex(), id.short())
}

/// The dry run: what goes, and the confirmation.
pub fn plan(csrf: &str, repo: &str, p: &Plan) -> String {
    let mut b = String::new();
    if let Some(a) = &p.policy {
        let by_id: HashMap<&Id, &Brief> = a.snapshots.iter().map(|(i, s)| (i, s)).collect();
        b.push_str(&format!(
            "<p>The retention policy of job <strong>{}</strong> applied now, as its next run would apply it:</p>\
             <table><caption>Each snapshot, grouped, newest first</caption><thead><tr><th scope=\"col\">Group</th>\
             <th scope=\"col\">Snapshot</th><th scope=\"col\">Time</th><th scope=\"col\">Decision</th>\
             <th scope=\"col\">Kept by</th></tr></thead><tbody>",
            esc(&a.job)
        ));
        for d in &a.decisions {
            let time = by_id.get(&d.id).map_or("", |s| &*s.time);
            let reasons: Vec<String> = d.reasons.iter().map(|r| r.to_string()).collect();
            b.push_str(&format!(
                "<tr{}><td>{}</td><td>{}</td><td>{}</td><td class=\"state {}\">{}</td><td>{}</td></tr>",
                if d.keep { "" } else { " class=\"bad\"" },
                esc(&d.group.to_string()),
                snapshot_link(repo, &d.id),
                esc(time),
                if d.keep { "ok" } else { "bad" },
                if d.keep { "keep" } else { "forget" },
                esc(&reasons.join(", "))
            ));
        }
        b.push_str("</tbody></table>");
    } else {
        b.push_str(
            "<table><caption>The snapshots chosen</caption><thead><tr><th scope=\"col\">Snapshot</th>\
             <th scope=\"col\">Time</th><th scope=\"col\">Host</th><th scope=\"col\">Paths</th></tr></thead><tbody>",
        );
        for (id, s) in p.forget.iter().rev() {
            b.push_str(&format!(
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                snapshot_link(repo, id),
                esc(&s.time),
                esc(&s.hostname),
                esc(&s.paths.join(", "))
            ));
        }
        b.push_str("</tbody></table>");
    }
    if p.forget.is_empty() {
        b.push_str(&format!(
            "<p>Nothing would be forgotten: all {} snapshots are kept.</p><p><a href=\"/repos/{}\">Back to the \
             snapshots</a></p>",
            p.kept,
            esc(repo)
        ));
        return layout("Forget", Some(csrf), &b);
    }
    let ids: Vec<String> = p.forget.iter().map(|(i, _)| i.to_hex()).collect();
    let n = p.forget.len();
    b.push_str(&format!(
        "<p>Forgetting {n} {} keeps {} {}. A signed tombstone records what was forgotten; the data only they \
         hold stays in the repository until the next prune.</p>\
         <form method=\"post\" action=\"/repos/{}/forget\"><input type=\"hidden\" name=\"csrf\" value=\"{}\">\
         <input type=\"hidden\" name=\"snapshots\" value=\"{}\">\
         <button type=\"submit\">Forget {n} {}</button> <a href=\"/repos/{}\">Cancel</a></form>",
        if n == 1 { "snapshot" } else { "snapshots" },
        p.kept,
        if p.kept == 1 { "snapshot" } else { "snapshots" },
        esc(repo),
        esc(csrf),
        ids.join(","),
        if n == 1 { "snapshot" } else { "snapshots" },
        esc(repo)
    ));
    layout("Forget", Some(csrf), &b)
}

/// What was forgotten.
pub fn done(csrf: &str, repo: &str, forgotten: &[Id], tombstone: &Id) -> String {
    let list: Vec<String> = forgotten.iter().map(|i| format!("<code>{}</code>", i.short())).collect();
    let b = format!(
        "<p role=\"status\">Forgot {} ({}); tombstone <code>{}</code> records it. Run a prune to free the data only \
         they held.</p><p><a href=\"/repos/{}\">Back to the snapshots</a></p>",
        if forgotten.len() == 1 { "1 snapshot".to_string() } else { format!("{} snapshots", forgotten.len()) },
        list.join(", "),
        tombstone.short(),
        esc(repo)
    );
    layout("Forgotten", Some(csrf), &b)
}
