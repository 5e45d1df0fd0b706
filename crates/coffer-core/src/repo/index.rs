//! The in-memory master index: blob id -> where the blob lies.
//! See docs/design.md#index-files.

use std::collections::HashMap;

use crate::crypto::Cipher;
use crate::format::index::PackRecord;
use crate::format::pack::{BlobType, PackEntry};
use crate::id::Id;

/// A pack known to the index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackInfo {
    /// Pack id.
    pub id: Id,
    /// Salt of its key.
    pub salt: [u8; 32],
    /// Its cipher.
    pub cipher: Cipher,
}

/// Where one blob lies; `pack` indexes [`MasterIndex::packs`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexEntry {
    /// Position of the pack in the pack table.
    pub pack: u32,
    /// The blob's placement, as in the pack header.
    pub entry: PackEntry,
}

/// All index files merged.
#[derive(Default)]
pub struct MasterIndex {
    blobs: HashMap<Id, IndexEntry>,
    packs: Vec<PackInfo>,
    pack_pos: HashMap<Id, u32>,
}

impl MasterIndex {
    /// Adds every blob of `rec`. A blob already indexed keeps its first location.
    pub fn add_pack(&mut self, rec: &PackRecord) {
        let pos = *self.pack_pos.entry(rec.id).or_insert_with(|| {
            self.packs.push(PackInfo { id: rec.id, salt: rec.salt, cipher: rec.cipher });
            (self.packs.len() - 1) as u32
        });
        for e in &rec.entries {
            self.blobs.entry(e.id).or_insert(IndexEntry { pack: pos, entry: *e });
        }
    }

    /// The location of blob `id`.
    pub fn get(&self, id: &Id) -> Option<(IndexEntry, &PackInfo)> {
        let e = self.blobs.get(id)?;
        Some((*e, &self.packs[e.pack as usize]))
    }

    /// Whether blob `id` of `blob_type` is stored.
    pub fn contains(&self, id: &Id, blob_type: BlobType) -> bool {
        self.blobs.get(id).is_some_and(|e| e.entry.blob_type == blob_type)
    }

    /// Number of indexed blobs.
    pub fn len(&self) -> usize {
        self.blobs.len()
    }

    /// Whether nothing is indexed.
    pub fn is_empty(&self) -> bool {
        self.blobs.is_empty()
    }

    /// Every indexed pack.
    pub fn packs(&self) -> &[PackInfo] {
        &self.packs
    }

    /// Every indexed blob with its location.
    pub fn iter(&self) -> impl Iterator<Item = (&Id, &IndexEntry)> {
        self.blobs.iter()
    }
}
