//! Loading many trees at once. Tree blobs are small (hundreds of bytes) and a
//! backup stores those of neighbouring directories close together, so the tree
//! blobs of a batch that lie near each other in a pack are read in one request,
//! the requests on the backend's I/O pool (as many in flight as
//! `Backend::connections` says, not one per core); then every blob is decrypted
//! and decoded in parallel on the CPU pool. A tree whose request fails is loaded
//! alone, so that its error is exactly the one a single load gives.

use std::collections::HashMap;

use rayon::prelude::*;

use crate::error::Result;
use crate::format::pack::{BlobType, PackEntry};
use crate::format::tree::Tree;
use crate::id::Id;
use crate::repo::{PackInfo, Repository};

/// Bytes between two blobs of a pack up to which they are read in one request.
const MAX_GAP: u64 = 64 << 10;
/// Bytes read in one request at most.
const MAX_READ: u64 = 8 << 20;

/// Neighbouring blobs of one pack, read in one request.
pub(super) struct Run {
    pack: PackInfo,
    start: u64,
    end: u64,
}

/// Where a tree's sealed bytes were read: its index entry and pack, and its run.
pub(super) type Placed = Option<(PackEntry, PackInfo, usize)>;

/// Bytes of tree packs [`TreePacks::read`] reads ahead at most; beyond that,
/// trees are read in runs as the walk needs them.
pub(super) const TREE_PACKS_BUDGET: u64 = 64 << 20;

/// The part of each pack that holds tree blobs (from its start to its last
/// tree), read once before a walk: the walk loads trees level by level, and
/// each level's runs would otherwise read the same packs again, one request
/// per run. Bytes are checked as any tree's are, when each tree is decrypted.
#[derive(Default)]
pub(super) struct TreePacks(HashMap<Id, Vec<u8>>);

impl TreePacks {
    /// Reads the trees' part of every pack holding trees, if they come to at
    /// most [`TREE_PACKS_BUDGET`] bytes; a pack that fails to read is left to
    /// the runs.
    pub(super) fn read(repo: &Repository) -> TreePacks {
        let wanted: Vec<(PackInfo, u64)> = {
            let index = repo.index();
            let mut ends: HashMap<u32, u64> = HashMap::new();
            for e in index.iter().filter(|e| e.entry.blob_type == BlobType::Tree) {
                let end = ends.entry(e.pack).or_insert(0);
                *end = (*end).max(e.entry.offset + u64::from(e.entry.length));
            }
            if ends.values().sum::<u64>() > TREE_PACKS_BUDGET {
                return TreePacks::default();
            }
            ends.into_iter().filter_map(|(p, end)| Some((index.packs().get(p as usize)?.clone(), end))).collect()
        };
        let got = repo.fetch_many(&wanted, |(pack, end)| {
            let bytes = repo.read_pack_range(pack, 0, *end).ok()?;
            (bytes.len() as u64 == *end).then_some((pack.id, bytes))
        });
        TreePacks(got.into_iter().flatten().collect())
    }

    fn run(&self, r: &Run) -> Option<Vec<u8>> {
        Some(self.0.get(&r.pack.id)?.get(r.start as usize..r.end as usize)?.to_vec())
    }
}

/// Loads trees `ids`; each result is what [`Repository::load_tree`] gives for it.
/// Runs inside `ahead` are taken from it.
pub(super) fn load_trees(repo: &Repository, ids: &[Id], ahead: &TreePacks) -> Vec<Result<Tree>> {
    let (runs, placed) = plan(repo, ids);
    let read: Vec<Option<Vec<u8>>> = repo
        .fetch_many(&runs, |r| ahead.run(r).or_else(|| repo.read_pack_range(&r.pack, r.start, r.end - r.start).ok()));
    ids.par_iter()
        .zip(placed)
        .map(|(id, place)| match place {
            Some((entry, pack, run)) if read[run].is_some() => {
                let bytes = read[run].as_deref().expect("checked");
                let from = (entry.offset - runs[run].start) as usize;
                decode_tree(repo, id, &pack, &entry, &bytes[from..from + entry.length as usize])
            }
            _ => repo.load_tree(id),
        })
        .collect()
}

/// Groups the indexed trees among `ids` into runs of neighbouring blobs.
pub(super) fn plan(repo: &Repository, ids: &[Id]) -> (Vec<Run>, Vec<Placed>) {
    let mut located: Vec<(usize, PackEntry, PackInfo)> = ids
        .iter()
        .enumerate()
        .filter_map(|(i, id)| repo.locate_blob(BlobType::Tree, id).ok().map(|(e, p)| (i, e, p)))
        // A blob too large for a tree is left to the single load, which refuses it.
        .filter(|(_, e, _)| e.length as usize <= crate::format::tree::MAX_TREE_BLOB)
        .collect();
    located.sort_by_key(|(_, e, p)| (p.id, e.offset));
    let mut runs: Vec<Run> = Vec::new();
    let mut placed: Vec<Placed> = vec![None; ids.len()];
    for (i, entry, pack) in located {
        let end = entry.offset + entry.length as u64;
        match runs.last_mut() {
            Some(run)
                if run.pack.id == pack.id
                    && entry.offset <= run.end + MAX_GAP
                    && end.max(run.end) - run.start <= MAX_READ =>
            {
                run.end = run.end.max(end)
            }
            _ => runs.push(Run { pack: pack.clone(), start: entry.offset, end }),
        }
        placed[i] = Some((entry, pack, runs.len() - 1));
    }
    (runs, placed)
}

/// Decrypts and decodes the sealed bytes of tree `id`, as [`Repository::load_tree`] does.
fn decode_tree(repo: &Repository, id: &Id, pack: &PackInfo, entry: &PackEntry, sealed: &[u8]) -> Result<Tree> {
    // A bad copy gives way to another copy the index knows.
    let data =
        repo.decode_blob(pack, entry, sealed).or_else(|e| repo.load_other_copy(BlobType::Tree, id, &pack.id, e))?;
    repo.assemble_tree(id, &data)
}
