//! `coffer diff`.

use std::io::{BufWriter, Write};

use anyhow::Result;
use coffer_core::Error;
use coffer_core::format::bytes::Bytes;
use coffer_core::format::tree::NodeKind;
use coffer_core::ops::diff::{Change, ChangeKind, DiffStats, diff};
use coffer_core::repo::SnapshotFilter;
use serde_json::json;

use crate::args::{DiffArgs, GlobalArgs};
use crate::{exit, output, repo_open};

/// The marker in front of a change in text output, as restic prints them.
fn marker(kind: ChangeKind) -> char {
    match kind {
        ChangeKind::Added => '+',
        ChangeKind::Removed => '-',
        ChangeKind::Modified => 'M',
        ChangeKind::TypeChanged => 'T',
        ChangeKind::MetadataOnly => 'U',
    }
}

/// One change as a line: `M    /path`, a directory with a trailing `/`; or a JSON line.
fn line(json_out: bool, c: &Change) -> String {
    if json_out {
        let fields: Vec<&str> = c.fields.iter().map(|f| f.as_str()).collect();
        // Paths are exact bytes: a string when UTF-8, else {"hex": …} (as names in trees).
        json!({"type": "change", "path": Bytes(c.path.clone()), "change": c.kind.as_str(),
               "node_type": c.node_kind, "fields": fields})
        .to_string()
    } else {
        let slash = if c.node_kind == NodeKind::Dir { "/" } else { "" };
        format!("{}    {}{slash}", marker(c.kind), String::from_utf8_lossy(&c.path))
    }
}

fn summary_text(s: &DiffStats) -> String {
    format!(
        "{} added, {} removed, {} modified, {} type changed, {} metadata only; {} added, {} removed",
        s.added,
        s.removed,
        s.modified,
        s.type_changed,
        s.metadata_only,
        output::bytes(s.bytes_added),
        output::bytes(s.bytes_removed)
    )
}

pub fn run(global: &GlobalArgs, a: &DiffArgs) -> Result<u8> {
    let filter = SnapshotFilter::from(&a.filter);
    let (repo, found) = repo_open::open_finding(global, &[&a.snapshot1, &a.snapshot2], &filter)?;
    let mut found = found.into_iter();
    let (Some((id1, snap1)), Some((id2, snap2))) = (found.next(), found.next()) else {
        unreachable!("a snapshot per name")
    };
    super::flag_signature(&id1, &snap1);
    super::flag_signature(&id2, &snap2);
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let stats = diff(&repo, snap1.tree, snap2.tree, &mut |c| {
        writeln!(out, "{}", line(global.json, &c)).map_err(|e| Error::io("standard output", e))
    })?;
    out.flush()?;
    drop(out);
    if global.json {
        output::json(&json!({
            "type": "summary", "snapshot1": id1, "snapshot2": id2,
            "added": stats.added, "removed": stats.removed, "modified": stats.modified,
            "type_changed": stats.type_changed, "metadata_only": stats.metadata_only,
            "bytes_added": stats.bytes_added, "bytes_removed": stats.bytes_removed,
            "trees_loaded": stats.trees_loaded,
        }));
    } else if !global.quiet {
        println!("{}", summary_text(&stats));
    }
    repo_open::report_bad_copies(global, &repo);
    Ok(exit::OK)
}

#[cfg(test)]
mod tests {
    use super::*;
    use coffer_core::ops::diff::Field;

    #[test]
    fn text_and_json_lines() {
        let c = Change {
            path: b"/a/b\xff".to_vec(),
            kind: ChangeKind::MetadataOnly,
            node_kind: NodeKind::Dir,
            fields: vec![Field::Mode, Field::Mtime],
        };
        assert_eq!(line(false, &c), "U    /a/b\u{fffd}/");
        let v: serde_json::Value = serde_json::from_str(&line(true, &c)).unwrap();
        assert_eq!(
            v,
            json!({"type": "change", "path": {"hex": "2f612f62ff"}, "change": "metadata_only",
                   "node_type": "dir", "fields": ["mode", "mtime"]})
        );
        let s = DiffStats { added: 2, bytes_added: 1536, ..Default::default() };
        assert_eq!(
            summary_text(&s),
            "2 added, 0 removed, 0 modified, 0 type changed, 0 metadata only; 1.50 KiB added, 0 B removed"
        );
    }
}
