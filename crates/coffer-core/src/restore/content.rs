//! Writing file contents pack by pack. See docs/design.md#restore.
//!
//! Every chunk reference of every file is planned first and grouped by the pack
//! that holds the blob; packs are then processed in parallel, each read in few
//! large ranges (neighbouring blobs are fetched together, so the storage does
//! not see individual blob lengths), each blob decrypted and verified once and
//! written with positioned writes to every place that needs it. Files are created
//! at their full length first, so the chunks of zeros skipped in sparse files
//! stay holes.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Mutex;

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::format::pack::{BlobType, PackEntry};
use crate::format::tree::Node;
use crate::progress::Progress;
use crate::repo::{PackInfo, Repository};

/// Blobs closer than this in a pack are read with one request (the gap is read
/// and discarded).
const MAX_GAP: u64 = 1 << 20;
/// The longest single read.
const MAX_RANGE: u64 = 32 << 20;

/// One place a blob goes: a file and an offset in it.
#[derive(Clone, Copy)]
struct Target {
    entry: PackEntry,
    file: usize,
    offset: u64,
}

/// Writes the contents of `files`; returns, per file, its length or why it failed.
pub(super) fn write_contents(
    repo: &Repository,
    files: &[(PathBuf, Node)],
    progress: &dyn Progress,
) -> Vec<Result<u64>> {
    let errors: Vec<Mutex<Option<Error>>> = files.iter().map(|_| Mutex::new(None)).collect();
    let fail = |i: usize, e: Error| {
        let mut slot = errors[i].lock().expect("poisoned");
        if slot.is_none() {
            *slot = Some(e);
        }
    };
    let failed = |i: usize| errors[i].lock().expect("poisoned").is_some();

    // Plan: where every chunk of every file comes from.
    let mut sizes = vec![0u64; files.len()];
    let mut by_pack: HashMap<u32, (PackInfo, Vec<Target>)> = HashMap::new();
    {
        let idx = repo.index();
        for (i, (_, node)) in files.iter().enumerate() {
            let mut offset = 0;
            for id in &node.content {
                match idx.get(id) {
                    Some((e, p)) if e.entry.blob_type == BlobType::Data => {
                        by_pack.entry(e.pack).or_insert_with(|| (p.clone(), Vec::new())).1.push(Target {
                            entry: e.entry,
                            file: i,
                            offset,
                        });
                        offset += e.entry.raw_length as u64;
                    }
                    _ => {
                        fail(i, Error::corrupt(format!("data blob {}", id.short()), "not in any index"));
                        break;
                    }
                }
            }
            sizes[i] = offset;
        }
    }

    // Create every file at its full length.
    files.par_iter().enumerate().for_each(|(i, (path, _))| {
        let r = File::create(path).and_then(|f| f.set_len(sizes[i]));
        if let Err(e) = r {
            fail(i, Error::io(path, e));
        }
    });

    // Fill them, pack by pack.
    let mut packs: Vec<(PackInfo, Vec<Target>)> = by_pack.into_values().collect();
    packs.sort_by_key(|a| a.0.id);
    packs.par_iter_mut().for_each(|(pack, targets)| {
        targets.sort_by_key(|t| (t.entry.offset, t.file, t.offset));
        let mut start = 0;
        while start < targets.len() {
            let first = targets[start].entry.offset;
            let mut end = first + targets[start].entry.length as u64;
            let mut stop = start + 1;
            while stop < targets.len() {
                let e = &targets[stop].entry;
                let e_end = e.offset + e.length as u64;
                if e.offset > end + MAX_GAP || e_end - first > MAX_RANGE {
                    break;
                }
                end = end.max(e_end);
                stop += 1;
            }
            let group = &targets[start..stop];
            start = stop;
            if group.iter().all(|t| failed(t.file)) {
                continue;
            }
            let bytes = match repo.read_pack_range(pack, first, end - first) {
                Ok(b) => b,
                Err(e) => {
                    let msg = e.to_string();
                    group
                        .iter()
                        .for_each(|t| fail(t.file, Error::corrupt(format!("pack {}", pack.id.short()), msg.clone())));
                    continue;
                }
            };
            for blob in group.chunk_by(|a, b| a.entry.offset == b.entry.offset) {
                let e = &blob[0].entry;
                let at = (e.offset - first) as usize;
                let data = match repo.decode_blob(pack, e, &bytes[at..at + e.length as usize]) {
                    Ok(d) => d,
                    Err(err) => {
                        let msg = err.to_string();
                        blob.iter().for_each(|t| {
                            fail(t.file, Error::corrupt(format!("pack {}", pack.id.short()), msg.clone()))
                        });
                        continue;
                    }
                };
                let zeros = data.iter().all(|&b| b == 0);
                for t in blob {
                    let (path, node) = &files[t.file];
                    if failed(t.file) {
                        continue;
                    }
                    if !(zeros && node.sparse) {
                        let r = OpenOptions::new().write(true).open(path).and_then(|f| f.write_all_at(&data, t.offset));
                        if let Err(err) = r {
                            fail(t.file, Error::io(path, err));
                            continue;
                        }
                    }
                    progress.add_bytes(data.len() as u64);
                }
            }
        }
    });

    errors
        .into_iter()
        .zip(sizes)
        .map(|(e, size)| match e.into_inner().expect("poisoned") {
            Some(err) => Err(err),
            None => Ok(size),
        })
        .collect()
}
