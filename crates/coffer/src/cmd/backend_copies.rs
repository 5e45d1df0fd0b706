//! Damaged copies of packs in a repository over several backends
//! (docs/design.md#check-and-repair): the copies a data check found damaged
//! (remembered in the local state file `replicas-damaged`), the packs whose
//! copies differ in size in the listings, and their replacement from a copy
//! that verifies, by `repair --replicas`.
//!
//! A damaged copy is replaced by writing the verified bytes under its name,
//! which every backend does atomically (the old bytes stay until the new ones
//! are complete), and the new copy is then read back and hashed: the damaged
//! bytes are never deleted before a verified copy stands in their place.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Result;
use coffer_core::Id;
use coffer_core::format::ObjectKind;
use coffer_core::local_state::LocalState;
use coffer_core::ops::check::DamagedCopy;
use coffer_core::repo::Repository;

use super::backend::{Scan, holds};
use crate::replicas::Opened;

/// The local state file listing copies a data check found damaged or missing:
/// `<pack id><TAB><backend>` per line.
pub const DAMAGED_FILE: &str = "replicas-damaged";

/// Adds `copies` to the state's list of damaged copies.
pub fn remember(state: &LocalState, copies: &[DamagedCopy]) -> Result<()> {
    if copies.is_empty() {
        return Ok(());
    }
    let mut all = remembered(state)?;
    all.extend(copies.iter().map(|c| (c.pack, c.backend.clone())));
    let text: String = all.iter().map(|(id, b)| format!("{}\t{b}\n", id.to_hex())).collect();
    state.write(DAMAGED_FILE, text.as_bytes())?;
    Ok(())
}

/// The damaged copies the state lists; lines that do not parse are skipped
/// (the list only says where to look first).
pub fn remembered(state: &LocalState) -> Result<BTreeSet<(Id, String)>> {
    let Some(bytes) = state.read(DAMAGED_FILE)? else { return Ok(BTreeSet::new()) };
    Ok(String::from_utf8_lossy(&bytes)
        .lines()
        .filter_map(|l| {
            let (id, backend) = l.split_once('\t')?;
            Some((Id::from_hex(id.trim())?, backend.trim().to_string()))
        })
        .collect())
}

/// Packs whose copies the listings give different sizes, with each holder's
/// (backend index, size): at least one of those copies is damaged.
pub fn size_mismatches(s: &Scan) -> Vec<(Id, Vec<(usize, u64)>)> {
    let mut sizes: BTreeMap<Id, Vec<(usize, u64)>> = BTreeMap::new();
    for (i, listed) in s.listed.iter().enumerate() {
        let Ok(m) = listed else { continue };
        for (id, size) in m {
            sizes.entry(*id).or_default().push((i, *size));
        }
    }
    sizes.into_iter().filter(|(_, v)| v.iter().any(|(_, n)| *n != v[0].1)).collect()
}

/// What replacing damaged copies did.
#[derive(Default)]
pub struct Replaced {
    /// Copies replaced by a verified one: (pack, backend).
    pub replaced: Vec<(Id, String)>,
    /// Their bytes.
    pub bytes: u64,
    /// Copies read and hashed.
    pub verified: usize,
    /// What could not be done, each naming the pack and backend.
    pub failures: Vec<String>,
}

/// Reads the home copies of each pack in `packs` that the listing shows, and
/// replaces each one that does not hash to the pack's name with a verified
/// copy (read back and hashed once written).
pub fn replace_damaged(o: &Opened, s: &Scan, packs: &BTreeSet<Id>) -> Replaced {
    let mut r = Replaced::default();
    let name_of = |i: usize| o.layout.1.backends[i].spec.name.clone();
    for id in packs {
        let name = ObjectKind::Pack.path(id);
        let homes: Vec<usize> = o.backend.homes(&name).into_iter().filter(|&i| holds(s, i, id)).collect();
        let mut good: Option<Vec<u8>> = None;
        let mut bad = Vec::new();
        for &i in &homes {
            let Some(be) = o.backend.member(i) else { continue };
            r.verified += 1;
            match be.read_max(&name, ObjectKind::Pack.max_len()) {
                Ok(bytes) if Id::hash_of(&bytes) == *id => {
                    good.get_or_insert(bytes);
                }
                Ok(_) => bad.push(i),
                Err(e) if e.kind == coffer_backend::ErrorKind::NotFound => {}
                Err(e) => r.failures.push(format!("pack {}: backend {}: {e}", id.short(), name_of(i))),
            }
        }
        if bad.is_empty() {
            continue;
        }
        let Some(data) = good else {
            let on: Vec<String> = bad.iter().map(|&i| name_of(i)).collect();
            r.failures.push(format!(
                "pack {}: every copy is damaged (on {}); its blobs are lost unless another backend comes back: \
                 `coffer check --read-data` names the files affected",
                id.short(),
                on.join(", ")
            ));
            continue;
        };
        for i in bad {
            let Some(be) = o.backend.member(i) else { continue };
            let written = be.write(&name, data.clone()).map_err(|e| e.to_string()).and_then(|()| {
                match be.read_max(&name, ObjectKind::Pack.max_len()) {
                    Ok(back) if Id::hash_of(&back) == *id => Ok(()),
                    Ok(_) => Err("the copy written does not read back as written".to_string()),
                    Err(e) => Err(e.to_string()),
                }
            });
            match written {
                Ok(()) => {
                    r.bytes += data.len() as u64;
                    r.replaced.push((*id, name_of(i)));
                }
                Err(e) => {
                    r.failures.push(format!("pack {}: replacing the copy on backend {}: {e}", id.short(), name_of(i)))
                }
            }
        }
    }
    r
}

/// The packs whose copies `repair --replicas` reads and hashes: those the local
/// state lists as damaged, those whose copies differ in size, and with
/// `every` every indexed pack.
pub fn suspects(repo: &Repository, state: Option<&LocalState>, s: &Scan, every: bool) -> Result<BTreeSet<Id>> {
    let mut packs: BTreeSet<Id> = size_mismatches(s).into_iter().map(|(id, _)| id).collect();
    if let Some(state) = state {
        packs.extend(remembered(state)?.into_iter().map(|(id, _)| id));
    }
    if every {
        packs.extend(repo.index().packs().iter().map(|p| p.id));
    }
    Ok(packs)
}
