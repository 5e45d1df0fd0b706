//! `coffer writers [list | trust KEY | trust --all | untrust KEY]`: the registered
//! writers, and which of them this client trusts (docs/design.md#trusted-writers).

use anyhow::{Result, anyhow, bail};
use coffer_core::Id;
use coffer_core::crypto::sign::PublicKey;
use coffer_core::format::writer::WriterRecord;
use coffer_core::repo::Repository;
use coffer_core::trust::TrustedWriters;
use serde_json::json;

use crate::args::{GlobalArgs, WritersArgs, WritersCommand};
use crate::table::Table;
use crate::{exit, output, repo_open};

pub fn run(global: &GlobalArgs, a: &WritersArgs) -> Result<u8> {
    let (path, _) = repo_open::location(global)?;
    let repo = repo_open::open_unindexed(global, &path)?;
    let (mut records, damaged) = repo.writer_records()?;
    records.sort_by(|a, b| a.1.created.cmp(&b.1.created));
    for e in &damaged {
        eprintln!("error: {e}");
    }
    let code = if damaged.is_empty() { exit::OK } else { exit::DAMAGED };
    match &a.command {
        None | Some(WritersCommand::List) => list(global, &repo, &records).map(|()| code),
        Some(WritersCommand::Trust(t)) => {
            let keys: Vec<(PublicKey, String)> = if t.all {
                records.iter().map(|(_, w)| (w.public_key, w.name())).collect()
            } else {
                let key = t.key.as_deref().expect("clap requires KEY without --all");
                let k = resolve(key, records.iter().map(|(_, w)| w.public_key))?;
                let name = records.iter().find(|(_, w)| w.public_key == k).map(|(_, w)| w.name()).unwrap_or_default();
                vec![(k, name)]
            };
            let state = repo_open::local_state(&repo)?;
            let mut trusted = repo_open::trusted_writers(&repo)?;
            for (k, name) in keys {
                let added = trusted.add(&state, k, &name)?;
                if !global.quiet {
                    let who = if name.is_empty() { "an unregistered writer".to_string() } else { name };
                    let verb = if added { "now trusted" } else { "trusted already" };
                    println!("{} ({who}): {verb}", k.to_hex());
                }
            }
            Ok(code)
        }
        Some(WritersCommand::Untrust(u)) => {
            let state = repo_open::local_state(&repo)?;
            let mut trusted = repo_open::trusted_writers(&repo)?;
            let k = resolve(&u.key, trusted.listed().map(|(k, _)| *k).chain(trusted.own()))?;
            if trusted.own() == Some(k) {
                bail!(
                    "{} is this client's own writer key, which it always trusts; to stop using it, move its \
                     writer.key out of {}",
                    k.to_hex(),
                    state.dir().display()
                );
            }
            if !trusted.remove(&state, &k)? {
                bail!("writer {} is not trusted by this client; `coffer writers` lists those it trusts", k.to_hex());
            }
            if !global.quiet {
                println!("{}: no longer trusted", k.to_hex());
            }
            Ok(code)
        }
    }
}

/// A full public key, or the one key among `known` that starts with `prefix`.
fn resolve(given: &str, known: impl Iterator<Item = PublicKey>) -> Result<PublicKey> {
    let given = given.trim().to_ascii_lowercase();
    if let Some(k) = PublicKey::from_hex(&given) {
        return Ok(k);
    }
    if given.is_empty() || !given.bytes().all(|b| b.is_ascii_hexdigit()) {
        bail!("{given:?} is not a public key (64 hex digits, or a prefix of one `coffer writers` lists)");
    }
    let mut found: Vec<PublicKey> = known.filter(|k| k.to_hex().starts_with(&given)).collect();
    found.sort();
    found.dedup();
    match found.as_slice() {
        [k] => Ok(*k),
        [] => Err(anyhow!("no writer's key starts with {given}; `coffer writers` lists them")),
        _ => Err(anyhow!("{} writers' keys start with {given}; give more digits", found.len())),
    }
}

fn list(global: &GlobalArgs, repo: &Repository, records: &[(Id, WriterRecord)]) -> Result<()> {
    let trusted: TrustedWriters = repo_open::trusted_writers(repo)?;
    let own = trusted.own();
    // Trusted keys no registration names (a writer whose record is gone).
    let unregistered: Vec<(&PublicKey, &str)> =
        trusted.listed().filter(|(k, _)| !records.iter().any(|(_, w)| w.public_key == **k)).collect();
    if global.json {
        let mut list: Vec<_> = records
            .iter()
            .map(|(id, w)| {
                json!({"type": "writer", "id": id, "name": w.name(), "public_key": w.public_key, "created": w.created,
                       "this_client": own == Some(w.public_key), "trusted": trusted.trusts(&w.public_key),
                       "registered": true})
            })
            .collect();
        list.extend(unregistered.iter().map(|(k, note)| {
            json!({"type": "writer", "name": note, "public_key": k, "this_client": false, "trusted": true,
                   "registered": false})
        }));
        output::json(&serde_json::Value::Array(list));
        return Ok(());
    }
    let time_header = if output::is_utc() { "registered (UTC)" } else { "registered" };
    let mut t = Table::new(&[time_header, "public key", "trusted", "writer"]);
    for (_, w) in records {
        let trust = match (own == Some(w.public_key), trusted.trusts(&w.public_key)) {
            (true, _) => "own",
            (false, true) => "yes",
            (false, false) => "no",
        };
        let mine = if own == Some(w.public_key) { "  (this client)" } else { "" };
        t.row([output::time(&w.created), w.public_key.to_hex(), trust.to_string(), format!("{}{mine}", w.name())]);
    }
    for (k, note) in &unregistered {
        t.row(["(not registered)".to_string(), k.to_hex(), "yes".to_string(), note.to_string()]);
    }
    t.print();
    Ok(())
}
