//! `coffer writers`.

use anyhow::Result;
use coffer_core::repo::WRITER_KEY_FILE;
use serde_json::json;

use crate::args::GlobalArgs;
use crate::table::Table;
use crate::{exit, output, repo_open};

pub fn run(global: &GlobalArgs) -> Result<u8> {
    let (path, _) = repo_open::location(global)?;
    let repo = repo_open::open_unindexed(global, &path)?;
    let state = repo_open::local_state(&repo)?;
    // This client's key, if it has one; listing never creates a writer.
    let own = state.read(WRITER_KEY_FILE)?.and_then(|b| {
        let v: serde_json::Value = serde_json::from_slice(&b).ok()?;
        v.get("public_key")?.as_str().map(str::to_string)
    });
    let (mut records, damaged) = repo.writer_records()?;
    records.sort_by(|a, b| a.1.created.cmp(&b.1.created));
    for e in &damaged {
        eprintln!("error: {e}");
    }
    if global.json {
        let list: Vec<_> = records
            .iter()
            .map(|(id, w)| {
                json!({"type": "writer", "id": id, "name": w.name(), "public_key": w.public_key, "created": w.created,
                       "this_client": own.as_deref() == Some(w.public_key.to_hex().as_str())})
            })
            .collect();
        output::json(&serde_json::Value::Array(list));
    } else {
        let time_header = if output::is_utc() { "registered (UTC)" } else { "registered" };
        let mut t = Table::new(&[time_header, "public key", "writer"]);
        for (_, w) in &records {
            let mine = if own.as_deref() == Some(w.public_key.to_hex().as_str()) { "  (this client)" } else { "" };
            t.row([output::time(&w.created), w.public_key.to_hex(), format!("{}{mine}", w.name())]);
        }
        t.print();
    }
    Ok(if damaged.is_empty() { exit::OK } else { exit::DAMAGED })
}
