//! `coffer cat`: prints decrypted repository objects as JSON, for debugging.

use std::path::Path;

use anyhow::{Context, Result, bail};
use coffer_core::format::ObjectKind;
use coffer_core::format::keyfile::KeyFile;
use coffer_core::format::tree::NodeKind;
use coffer_core::id::Id;
use coffer_core::repo::tree_walk::{Located, locate};
use coffer_core::repo::{Repository, SnapshotFilter};
use serde_json::{Value, json};

use crate::args::{CatArgs, GlobalArgs};
use crate::{exit, repo_open};

fn need(a: &CatArgs) -> Result<&str> {
    a.id.as_deref().with_context(|| format!("'coffer cat {}' needs an id", a.kind))
}

fn tree_id(global: &GlobalArgs, repo: &Repository, spec: &str) -> Result<Id> {
    if let Some(id) = Id::from_hex(spec) {
        return Ok(id);
    }
    let (snap, path) = spec.split_once(':').unwrap_or((spec, "/"));
    let (_, s) = repo_open::find_snapshot(global, repo, snap, &SnapshotFilter::default())?;
    match locate(repo, s.tree, &Path::new("/").join(path))? {
        Located::Root(id) => Ok(id),
        Located::Entry(n) if n.kind == NodeKind::Dir => n.subtree.context("directory without a tree"),
        Located::Entry(_) => bail!("{path} is not a directory"),
    }
}

pub fn run(global: &GlobalArgs, a: &CatArgs) -> Result<u8> {
    let (path, _) = repo_open::location(global)?;
    let repo = repo_open::open_unindexed(global, &path)?;
    let value: Value = match a.kind.as_str() {
        "config" => {
            let mut v = serde_json::to_value(repo.config())?;
            if let Value::Object(m) = &mut v {
                m.insert("type".into(), "config".into());
            }
            v
        }
        "key" => {
            let id = match &a.id {
                Some(p) => repo.resolve_prefix(ObjectKind::Key, p)?,
                None => repo.key_id(),
            };
            let bytes = repo.read_object(ObjectKind::Key, &id)?;
            let kf =
                KeyFile::decode(&bytes).map_err(|e| coffer_core::Error::corrupt(ObjectKind::Key.describe(&id), e))?;
            json!({"type": "key", "id": id, "key": kf})
        }
        "snapshot" => {
            let (id, s) = repo_open::find_snapshot(global, &repo, need(a)?, &SnapshotFilter::default())?;
            json!({"type": "snapshot", "id": id, "snapshot": s})
        }
        "index" => {
            let id = repo.resolve_prefix(ObjectKind::Index, need(a)?)?;
            let packs = repo.load_index_file(&id)?;
            let list: Vec<Value> = packs
                .iter()
                .map(|p| {
                    let blobs: Vec<Value> = p
                        .entries
                        .iter()
                        .map(|e| json!({"id": e.id, "type": e.blob_type.noun(), "offset": e.offset, "length": e.length, "raw_length": e.raw_length}))
                        .collect();
                    json!({"pack": p.id, "cipher": p.cipher, "epoch": p.epoch, "blobs": blobs})
                })
                .collect();
            json!({"type": "index", "id": id, "packs": list})
        }
        "tree" => {
            repo_open::load_index(global, &repo)?;
            let id = tree_id(global, &repo, need(a)?)?;
            json!({"type": "tree", "id": id, "tree": repo.load_tree(&id)?})
        }
        other => bail!("cannot cat {other:?}: use config, key, snapshot, index or tree"),
    };
    println!("{}", serde_json::to_string_pretty(&value)?);
    Ok(exit::OK)
}
