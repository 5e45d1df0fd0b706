//! Inclusion proofs: that a file with given content belongs to a signed snapshot,
//! checkable without the repository or its keys. See docs/design.md#proofs.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::crypto::sign::PublicKey;
use crate::error::{Error, Result};
use crate::format::bytes::Bytes;
use crate::format::envelope::{self, SealedKind};
use crate::format::signed;
use crate::format::snapshot::Snapshot;
use crate::format::tree::NodeKind;
use crate::format::{ObjectKind, tree::Node};
use crate::id::Id;
use crate::merkle::{self, Hash};
use crate::repo::Repository;
use crate::repo::tree_walk;

/// The `magic` field of every proof.
pub const MAGIC: &str = "coffer inclusion proof";
/// The proof format version.
pub const VERSION: u32 = 1;

/// Visits the snapshot's regular files in Merkle order (tree order) with their
/// leaf hashes. Fails on a file without a digest.
pub fn for_each_leaf(
    repo: &Repository,
    snap: &Snapshot,
    visit: &mut dyn FnMut(&Path, &Node, Hash) -> Result<()>,
) -> Result<()> {
    let key = snap.merkle_key.0;
    tree_walk::walk(repo, snap.tree, Path::new("/"), &mut |path, node| {
        if node.kind != NodeKind::File {
            return Ok(());
        }
        let digest = node.digest.ok_or_else(|| Error::corrupt(format!("file {}", path.display()), "has no digest"))?;
        let p = path.as_os_str().as_bytes();
        visit(path, node, merkle::file_leaf(&merkle::leaf_salt(&key, p), &digest.0, p))
    })
}

/// Recomputes the snapshot's Merkle root and leaf count from its trees.
pub fn compute_root(repo: &Repository, snap: &Snapshot) -> Result<(Hash, u64)> {
    let mut b = merkle::Builder::new();
    for_each_leaf(repo, snap, &mut |_, _, leaf| {
        b.push(leaf);
        Ok(())
    })?;
    Ok((b.root(), b.count()))
}

/// Whether a snapshot's signed Merkle root and leaf count agree with its trees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RootCheck {
    /// Recomputed from the trees, they match.
    Matches,
    /// Recomputed from the trees, they differ: the snapshot or a tree was forged.
    Differs,
    /// Not every tree loaded (damage the structure check reports).
    Unknown,
}

/// Recomputes the snapshot's root from its trees and compares it with the signed one.
pub fn check_root(repo: &Repository, snap: &Snapshot) -> RootCheck {
    match compute_root(repo, snap) {
        Ok((root, n)) if root == snap.merkle_root.0 && n == snap.merkle_leaves => RootCheck::Matches,
        Ok(_) => RootCheck::Differs,
        Err(_) => RootCheck::Unknown,
    }
}

/// A self-contained inclusion proof.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Proof {
    /// Always [`MAGIC`].
    pub magic: String,
    /// Always [`VERSION`].
    pub version: u32,
    /// The snapshot's id.
    pub snapshot_id: Id,
    /// The snapshot exactly as stored (encrypted, with its signature block), hex.
    pub snapshot: String,
    /// The file's absolute path in the snapshot.
    pub path: Bytes,
    /// BLAKE3 of the file's content.
    pub digest: Id,
    /// The file's leaf salt.
    pub salt: Id,
    /// The leaf's position.
    pub index: u64,
    /// Number of leaves.
    pub leaves: u64,
    /// Sibling hashes from the leaf up to the root.
    pub siblings: Vec<Id>,
}

/// What a valid proof establishes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verified {
    /// The snapshot.
    pub snapshot_id: Id,
    /// Who signed it.
    pub signer: PublicKey,
    /// The file's path in it.
    pub path: Vec<u8>,
    /// BLAKE3 of the file's content.
    pub digest: Id,
}

/// Builds the proof that the file at `path` belongs to snapshot `id`.
pub fn prove(repo: &Repository, id: &Id, path: &[u8]) -> Result<Proof> {
    let snap = repo.load_snapshot(id)?;
    let mut leaves = Vec::with_capacity(snap.merkle_leaves.min(1 << 24) as usize);
    let mut found = None;
    for_each_leaf(repo, &snap, &mut |p, node, leaf| {
        if p.as_os_str().as_bytes() == path {
            found = Some((leaves.len(), node.digest.expect("checked by for_each_leaf")));
        }
        leaves.push(leaf);
        Ok(())
    })?;
    let Some((index, digest)) = found else {
        return Err(Error::PathNotInSnapshot(format!(
            "{} (no regular file at this path in snapshot {})",
            String::from_utf8_lossy(path),
            id.short()
        )));
    };
    if merkle::root(&leaves) != snap.merkle_root.0 || leaves.len() as u64 != snap.merkle_leaves {
        return Err(Error::corrupt(
            ObjectKind::Snapshot.describe(id),
            "its Merkle root does not match its trees; run `coffer check`",
        ));
    }
    let siblings = merkle::inclusion_proof(&leaves, index).expect("index is in range").into_iter().map(Id).collect();
    Ok(Proof {
        magic: MAGIC.into(),
        version: VERSION,
        snapshot_id: *id,
        snapshot: hex::encode(repo.read_object(ObjectKind::Snapshot, id)?),
        path: Bytes(path.to_vec()),
        digest,
        salt: Id(merkle::leaf_salt(&snap.merkle_key.0, path)),
        index: index as u64,
        leaves: leaves.len() as u64,
        siblings,
    })
}

impl Proof {
    /// Pretty JSON.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec_pretty(self).expect("proofs always serialize")
    }

    /// Parses a proof, checking its magic and version.
    pub fn decode(buf: &[u8]) -> std::result::Result<Proof, String> {
        let p: Proof = serde_json::from_slice(buf).map_err(|e| format!("not a coffer proof: {e}"))?;
        if p.magic != MAGIC {
            return Err(format!("not a coffer proof (magic {:?})", p.magic));
        }
        if p.version != VERSION {
            return Err(format!("proof version {} is not supported by this coffer", p.version));
        }
        if p.siblings.len() > 64 {
            return Err(format!("proof has {} sibling hashes; no tree needs more than 64", p.siblings.len()));
        }
        Ok(p)
    }

    /// Checks the proof: the snapshot bytes match its id and carry a valid
    /// signature, and the file's leaf leads to the signed Merkle root. Needs no
    /// keys. Whether the signer is trusted is for the caller to decide.
    pub fn verify(&self) -> std::result::Result<Verified, String> {
        let stored = hex::decode(&self.snapshot).map_err(|_| "the snapshot field is not hex".to_string())?;
        if Id::hash_of(&stored) != self.snapshot_id {
            return Err("the snapshot bytes do not match the snapshot id".into());
        }
        let (sealed, block) = signed::split(&stored)?;
        let block = block.ok_or("the snapshot is not signed")?;
        if sealed.len() < envelope::OVERHEAD
            || &sealed[..6] != envelope::MAGIC
            || sealed[7] != SealedKind::Snapshot as u8
        {
            return Err("the signed object is not a coffer snapshot".into());
        }
        if !block.verify(sealed) {
            return Err("the snapshot's signature does not verify".into());
        }
        let leaf = merkle::file_leaf(&self.salt.0, &self.digest.0, &self.path.0);
        let siblings: Vec<Hash> = self.siblings.iter().map(|s| s.0).collect();
        let root = merkle::root_from_inclusion(&leaf, self.index, self.leaves, &siblings)
            .ok_or("the proof's path does not fit a tree of that many leaves")?;
        if merkle::commitment(&root, self.leaves) != block.commitment {
            return Err("the file is not under the snapshot's signed Merkle root".into());
        }
        Ok(Verified {
            snapshot_id: self.snapshot_id,
            signer: block.public_key,
            path: self.path.0.clone(),
            digest: self.digest,
        })
    }
}
