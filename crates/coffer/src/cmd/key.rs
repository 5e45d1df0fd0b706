//! `coffer key list|add|remove|passwd|rotate`.

use anyhow::{Result, bail};
use coffer_core::Id;
use coffer_core::crypto::ScryptParams;
use coffer_core::format::ObjectKind;
use coffer_core::ops::keys;
use coffer_core::repo::Repository;
use serde_json::json;

use crate::args::{GlobalArgs, KeyArgs, KeyCommand, KeyRotateArgs, NewKeyArgs};
use crate::table::Table;
use crate::{exit, output, password, repo_open};

pub fn run(global: &GlobalArgs, a: &KeyArgs) -> Result<u8> {
    let (path, _) = repo_open::location(global)?;
    match &a.command {
        KeyCommand::List => list(global, &repo_open::open_unindexed(global, &path)?),
        KeyCommand::Add(n) => {
            let repo = repo_open::open_unindexed(global, &path)?;
            let pw = password::read_new(n.new_password_file.as_deref())?;
            let id = keys::add(&repo, pw.as_bytes(), kdf(n)?)?;
            report(global, json!({"type": "key_added", "added": id}), &format!("added key file {}", id.short()));
            Ok(exit::OK)
        }
        KeyCommand::Remove(r) => {
            let repo = repo_open::open_unindexed(global, &path)?;
            let id = keys::resolve(&repo, &r.id)?;
            keys::remove(&repo, &id)?;
            report(global, json!({"type": "key_removed", "removed": id}), &format!("removed key file {}", id.short()));
            Ok(exit::OK)
        }
        KeyCommand::Passwd(n) => {
            let repo = repo_open::open_unindexed(global, &path)?;
            let pw = password::read_new(n.new_password_file.as_deref())?;
            let (added, removed) = keys::passwd(&repo, pw.as_bytes(), kdf(n)?)?;
            report(
                global,
                json!({"type": "key_changed", "added": added, "removed": removed}),
                &format!(
                    "added key file {} for the new passphrase, removed key file {}",
                    added.short(),
                    removed.short()
                ),
            );
            Ok(exit::OK)
        }
        KeyCommand::Rotate(r) => rotate(global, &path, r),
    }
}

fn kdf(n: &NewKeyArgs) -> Result<ScryptParams> {
    password::kdf(n.kdf_log_n, n.insecure_kdf)
}

fn report(global: &GlobalArgs, value: serde_json::Value, line: &str) {
    if global.json {
        output::json(&value);
    } else if !global.quiet {
        println!("{line}");
    }
}

fn list(global: &GlobalArgs, repo: &Repository) -> Result<u8> {
    let keys::KeyFiles { mut files, damaged } = keys::list(repo)?;
    files.sort_by(|a, b| a.1.created.cmp(&b.1.created).then(a.0.cmp(&b.0)));
    for e in &damaged {
        eprintln!("error: {e}");
    }
    let current = repo.key_id();
    if global.json {
        let list: Vec<_> = files
            .iter()
            .map(|(id, k)| {
                json!({"type": "key", "id": id, "created": k.created, "hostname": k.hostname, "username": k.username,
                       "kdf": k.kdf, "scrypt": k.scrypt, "current": *id == current})
            })
            .collect();
        output::json(&serde_json::Value::Array(list));
    } else {
        let time_header = if output::is_utc() { "created (UTC)" } else { "created" };
        let mut t = Table::new(&["", "id", time_header, "user@host", "kdf"]);
        for (id, k) in &files {
            let mark = if *id == current { "*" } else { "" };
            let s = k.scrypt;
            t.row([
                mark.to_string(),
                id.short(),
                output::time(&k.created),
                format!("{}@{}", k.username, k.hostname),
                format!("{} log_n={} r={} p={}", k.kdf, s.log_n, s.r, s.p),
            ]);
        }
        t.print();
    }
    Ok(if damaged.is_empty() { exit::OK } else { exit::DAMAGED })
}

fn rotate(global: &GlobalArgs, path: &coffer_backend::Location, r: &KeyRotateArgs) -> Result<u8> {
    let (repo, pw) = repo_open::open_with_passphrase(global, path)?;
    let others: Vec<Id> = repo.list_ids(ObjectKind::Key)?.into_iter().filter(|id| *id != repo.key_id()).collect();
    if !others.is_empty() && !r.yes {
        let names: Vec<String> = others.iter().map(Id::short).collect();
        bail!(
            "rotating removes the other key files ({}): they cannot be given the new data key without their \
             passphrases. Pass --yes to go ahead; afterwards, add the other passphrases again with 'coffer key add'",
            names.join(", ")
        );
    }
    let rot = keys::rotate(&repo, pw.as_bytes())?;
    if global.json {
        output::json(&json!({"type": "key_rotated", "epoch": rot.epoch, "key": rot.key, "removed": rot.removed}));
    } else if !global.quiet {
        println!(
            "rotated the data key: everything written from now on is encrypted under epoch {}; existing data \
             keeps its keys",
            rot.epoch
        );
        println!("key file {} replaces {}", rot.key.short(), repo.key_id().short());
        let dropped: Vec<String> = rot.removed.iter().filter(|id| **id != repo.key_id()).map(Id::short).collect();
        if !dropped.is_empty() {
            println!(
                "removed the key files of other passphrases: {}; to let their holders in again, run \
                 'coffer key add' and have each enter theirs",
                dropped.join(", ")
            );
        }
    }
    Ok(exit::OK)
}
