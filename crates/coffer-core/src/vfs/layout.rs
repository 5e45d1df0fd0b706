//! The made-up directories of the mount: `snapshots/`, `ids/`, `hosts/`,
//! `tags/` and the `latest` links, rebuilt from the list of snapshots. See
//! docs/design.md#mount ("Layout").

use std::collections::{HashMap, HashSet};
use std::time::SystemTime;

use crate::id::Id;

use super::{HOSTS, IDS, Ino, ROOT, SNAPSHOTS, TAGS, hash_ino};

/// A made-up entry of the layout.
pub enum Virt {
    /// A directory of made-up entries, sorted by name.
    Dir(Vec<(Vec<u8>, Ino)>),
    /// A `latest` link.
    Link(Vec<u8>),
    /// A snapshot's root directory.
    Root { tree: Id, time: SystemTime },
}

#[derive(Default)]
pub struct Layout {
    pub virt: HashMap<Ino, Virt>,
    pub snapshots: HashSet<Id>,
}

/// The made-up part of the tree for `snaps` (oldest first).
pub fn build_layout(snaps: &[(Id, crate::format::snapshot::Snapshot)]) -> Layout {
    let mut virt = HashMap::new();
    let mut names: Vec<(Vec<u8>, usize)> = Vec::new();
    let mut used = HashSet::new();
    for (i, (_, s)) in snaps.iter().enumerate() {
        let base = humantime::format_rfc3339_seconds(s.system_time()).to_string();
        let mut name = base.clone();
        let mut n = 1;
        while !used.insert(name.clone()) {
            name = format!("{base}-{n}");
            n += 1;
        }
        names.push((name.into_bytes(), i));
    }
    let root = |tag: &[u8], extra: &[u8], i: usize| hash_ino(&[b"root", tag, extra, &snaps[i].0.0]);
    let add_root = |virt: &mut HashMap<Ino, Virt>, ino: Ino, i: usize| {
        virt.insert(ino, Virt::Root { tree: snaps[i].1.tree, time: snaps[i].1.system_time() });
    };
    // A directory of snapshots (with a `latest` link) under `tag`/`extra`.
    let group = |virt: &mut HashMap<Ino, Virt>, tag: &[u8], extra: &[u8], members: &[&(Vec<u8>, usize)]| {
        let mut children = Vec::new();
        for (name, i) in members {
            let ino = root(tag, extra, *i);
            add_root(virt, ino, *i);
            children.push((name.clone(), ino));
        }
        if let Some((newest, _)) = members.iter().max_by_key(|(_, i)| snaps[*i].1.system_time()) {
            let ino = hash_ino(&[b"latest", tag, extra]);
            virt.insert(ino, Virt::Link(newest.clone()));
            children.push((b"latest".to_vec(), ino));
        }
        children.sort();
        children.dedup_by(|a, b| a.0 == b.0);
        children
    };
    let all: Vec<&(Vec<u8>, usize)> = names.iter().collect();
    let snapshots = group(&mut virt, b"snapshots", b"", &all);
    virt.insert(SNAPSHOTS, Virt::Dir(snapshots));
    let mut ids = Vec::new();
    for (_, i) in &names {
        let ino = root(b"ids", b"", *i);
        add_root(&mut virt, ino, *i);
        ids.push((snaps[*i].0.short().into_bytes(), ino));
    }
    ids.sort();
    virt.insert(IDS, Virt::Dir(ids));
    let clean = |s: &str| {
        let s = s.replace('/', "_");
        if s.is_empty() || s == "." || s == ".." { format!("_{s}") } else { s }
    };
    for (top, tag, keys) in [
        (HOSTS, &b"hosts"[..], snaps.iter().map(|(_, s)| vec![clean(&s.hostname)]).collect::<Vec<_>>()),
        (TAGS, &b"tags"[..], snaps.iter().map(|(_, s)| s.tags.iter().map(|t| clean(t)).collect()).collect()),
    ] {
        let mut by: std::collections::BTreeMap<String, Vec<&(Vec<u8>, usize)>> = Default::default();
        for entry in &names {
            for k in &keys[entry.1] {
                by.entry(k.clone()).or_default().push(entry);
            }
        }
        let mut children = Vec::new();
        for (k, members) in by {
            let ino = hash_ino(&[b"group", tag, k.as_bytes()]);
            let list = group(&mut virt, tag, k.as_bytes(), &members);
            virt.insert(ino, Virt::Dir(list));
            children.push((k.into_bytes(), ino));
        }
        virt.insert(top, Virt::Dir(children));
    }
    virt.insert(
        ROOT,
        Virt::Dir(vec![
            (b"hosts".to_vec(), HOSTS),
            (b"ids".to_vec(), IDS),
            (b"snapshots".to_vec(), SNAPSHOTS),
            (b"tags".to_vec(), TAGS),
        ]),
    );
    Layout { virt, snapshots: snaps.iter().map(|(id, _)| *id).collect() }
}
