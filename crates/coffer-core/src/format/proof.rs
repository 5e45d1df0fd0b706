//! Inclusion proofs: the self-contained object that shows a file with given
//! content belongs to a signed snapshot, and its check, which needs neither the
//! repository nor its keys. See docs/design.md#proofs.

use serde::{Deserialize, Serialize};

use crate::crypto::sign::PublicKey;
use crate::format::bytes::Bytes;
use crate::format::envelope::{self, SealedKind};
use crate::format::signed;
use crate::id::Id;
use crate::merkle::{self, Hash};

/// The `magic` field of every proof.
pub const MAGIC: &str = "coffer inclusion proof";
/// The proof format version.
pub const VERSION: u32 = 1;

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
