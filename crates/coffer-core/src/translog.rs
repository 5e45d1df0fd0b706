//! The append-only log of accepted objects and its signed heads. See
//! docs/design.md#transparency-log.
//!
//! A log is an ordered list of entries, each naming one stored object (its kind and
//! its 32-byte name). Its tree is the Merkle tree of [`crate::merkle`] over the
//! entries' leaves, so its shape is RFC 9162's and its proofs are RFC 9162's:
//! inclusion proofs (§2.1.3) show that an entry is in a log of a given size, and
//! consistency proofs (§2.1.4) show that a log of size `m` is a prefix of a log of
//! size `n`. Whoever keeps a log signs its head (size, root, time) with an Ed25519
//! key; a client that remembers the last head it saw and checks a consistency proof
//! to every newer head detects a log that was rewritten, truncated or forked.
//!
//! Everything here is pure: no storage, no clock, no randomness.

use crate::crypto::sign::{PUBLIC_KEY_LEN, PublicKey, SIGNATURE_LEN, SigningKey};
use crate::merkle::{self, Hash};

/// Derivation context of an entry's leaf input.
const ENTRY_CONTEXT: &[u8] = b"coffer v2 log entry";
/// The prefix of the bytes a head's signature covers.
const HEAD_CONTEXT: &[u8] = b"coffer v2 log head";
/// The magic at the start of an encoded signed head.
const HEAD_MAGIC: &[u8; 4] = b"clh1";
/// Length of an encoded [`SignedHead`].
pub const SIGNED_HEAD_LEN: usize = 4 + 8 + 32 + 8 + PUBLIC_KEY_LEN + SIGNATURE_LEN;
/// The longest proof a log of up to 2^64 entries needs (inclusion or consistency).
pub const MAX_PROOF_LEN: usize = 64;

/// The leaf of an entry: `leaf("coffer v2 log entry" || kind || name)`. `kind` is the
/// object kind of docs/design.md#layout (3 for snapshots, 5 for tombstones).
pub fn entry_leaf(kind: u8, name: &Hash) -> Hash {
    let mut input = Vec::with_capacity(ENTRY_CONTEXT.len() + 1 + 32);
    input.extend_from_slice(ENTRY_CONTEXT);
    input.push(kind);
    input.extend_from_slice(name);
    merkle::leaf_hash(&input)
}

/// A log held in memory: the leaves in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Log {
    leaves: Vec<Hash>,
}

impl Log {
    /// An empty log.
    pub fn new() -> Log {
        Log::default()
    }

    /// A log of the given leaves, in order.
    pub fn from_leaves(leaves: Vec<Hash>) -> Log {
        Log { leaves }
    }

    /// Appends the entry for object `name` of kind `kind`; returns its index.
    pub fn append(&mut self, kind: u8, name: &Hash) -> u64 {
        self.leaves.push(entry_leaf(kind, name));
        self.leaves.len() as u64 - 1
    }

    /// The number of entries.
    pub fn size(&self) -> u64 {
        self.leaves.len() as u64
    }

    /// The leaves, in order.
    pub fn leaves(&self) -> &[Hash] {
        &self.leaves
    }

    /// The root of the first `size` entries, or `None` beyond the log's size.
    pub fn root_at(&self, size: u64) -> Option<Hash> {
        let size = usize::try_from(size).ok()?;
        self.leaves.get(..size).map(merkle::root)
    }

    /// The head of the whole log at `time` (seconds since the Unix epoch).
    pub fn head(&self, time: u64) -> Head {
        Head { size: self.size(), root: merkle::root(&self.leaves), time }
    }

    /// The inclusion proof of entry `index` in the first `size` entries.
    pub fn inclusion_proof(&self, index: u64, size: u64) -> Option<Vec<Hash>> {
        let size = usize::try_from(size).ok()?;
        let index = usize::try_from(index).ok()?;
        merkle::inclusion_proof(self.leaves.get(..size)?, index)
    }

    /// The proof that the first `old` entries are a prefix of the first `new` ones
    /// (RFC 9162 §2.1.4.1); `None` unless `old <= new <= size`.
    pub fn consistency_proof(&self, old: u64, new: u64) -> Option<Vec<Hash>> {
        let old = usize::try_from(old).ok()?;
        let new = usize::try_from(new).ok()?;
        if old > new {
            return None;
        }
        let leaves = self.leaves.get(..new)?;
        let mut proof = Vec::new();
        if old > 0 && old < new {
            subproof(old, leaves, true, &mut proof);
        }
        Some(proof)
    }
}

/// RFC 9162 §2.1.4.1 `SUBPROOF(m, D[n], b)`, appending to `out`.
fn subproof(m: usize, leaves: &[Hash], complete: bool, out: &mut Vec<Hash>) {
    let n = leaves.len();
    if m == n {
        if !complete {
            out.push(merkle::root(leaves));
        }
        return;
    }
    let k = largest_power_of_two_below(n);
    if m <= k {
        subproof(m, &leaves[..k], complete, out);
        out.push(merkle::root(&leaves[k..]));
    } else {
        subproof(m - k, &leaves[k..], false, out);
        out.push(merkle::root(&leaves[..k]));
    }
}

/// The largest power of two strictly below `n` (`n >= 2`).
fn largest_power_of_two_below(n: usize) -> usize {
    debug_assert!(n > 1);
    1 << (usize::BITS - 1 - (n - 1).leading_zeros())
}

/// Whether `proof` shows that the log of `old_size` entries with root `old_root` is a
/// prefix of the log of `new_size` entries with root `new_root` (RFC 9162 §2.1.4.2).
/// Equal sizes need equal roots and an empty proof; an empty old log is a prefix of
/// every log.
pub fn verify_consistency(old_size: u64, new_size: u64, old_root: &Hash, new_root: &Hash, proof: &[Hash]) -> bool {
    if old_size > new_size || proof.len() > MAX_PROOF_LEN {
        return false;
    }
    if old_size == 0 {
        return proof.is_empty();
    }
    if old_size == new_size {
        return proof.is_empty() && old_root == new_root;
    }
    if proof.is_empty() {
        return false;
    }
    let mut path: Vec<Hash> = Vec::with_capacity(proof.len() + 1);
    if old_size.is_power_of_two() {
        path.push(*old_root);
    }
    path.extend_from_slice(proof);
    let (mut f, mut s) = (old_size - 1, new_size - 1);
    while f & 1 == 1 {
        f >>= 1;
        s >>= 1;
    }
    let (mut fr, mut sr) = (path[0], path[0]);
    for c in &path[1..] {
        if s == 0 {
            return false;
        }
        if f & 1 == 1 || f == s {
            fr = merkle::node_hash(c, &fr);
            sr = merkle::node_hash(c, &sr);
            while f & 1 == 0 && f != 0 {
                f >>= 1;
                s >>= 1;
            }
        } else {
            sr = merkle::node_hash(&sr, c);
        }
        f >>= 1;
        s >>= 1;
    }
    s == 0 && fr == *old_root && sr == *new_root
}

/// A log's state at one moment: its size, its root and when it was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Head {
    /// The number of entries.
    pub size: u64,
    /// The root of those entries.
    pub root: Hash,
    /// Seconds since the Unix epoch, as the log's keeper says.
    pub time: u64,
}

impl Head {
    /// The bytes a signature covers: `"coffer v2 log head" || size u64 LE || root || time u64 LE`.
    fn signed_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEAD_CONTEXT.len() + 48);
        out.extend_from_slice(HEAD_CONTEXT);
        out.extend_from_slice(&self.size.to_le_bytes());
        out.extend_from_slice(&self.root);
        out.extend_from_slice(&self.time.to_le_bytes());
        out
    }

    /// This head signed with `key`.
    pub fn sign(self, key: &SigningKey) -> SignedHead {
        let signature = key.sign(&self.signed_bytes());
        SignedHead { head: self, public: key.public(), signature }
    }
}

/// A head with its keeper's public key and signature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SignedHead {
    /// The head.
    pub head: Head,
    /// The key that signed it.
    pub public: PublicKey,
    /// Ed25519 over [`Head`]'s signed bytes.
    pub signature: [u8; SIGNATURE_LEN],
}

/// Why an encoded signed head was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeadError {
    /// Not the encoded length.
    #[error("a signed log head is {SIGNED_HEAD_LEN} bytes, not {0}")]
    Length(usize),
    /// The magic does not match.
    #[error("not a coffer log head (bad magic)")]
    Magic,
    /// The signature does not verify, or the key is weak.
    #[error("the log head's signature does not verify")]
    Signature,
}

impl SignedHead {
    /// `"clh1" || size u64 LE || root || time u64 LE || public key || signature`.
    pub fn encode(&self) -> [u8; SIGNED_HEAD_LEN] {
        let mut out = [0u8; SIGNED_HEAD_LEN];
        out[..4].copy_from_slice(HEAD_MAGIC);
        out[4..12].copy_from_slice(&self.head.size.to_le_bytes());
        out[12..44].copy_from_slice(&self.head.root);
        out[44..52].copy_from_slice(&self.head.time.to_le_bytes());
        out[52..84].copy_from_slice(&self.public.0);
        out[84..].copy_from_slice(&self.signature);
        out
    }

    /// Decodes and verifies a signed head; which key signed it is the caller's
    /// question (compare [`SignedHead::public`] with the key it trusts).
    pub fn decode(bytes: &[u8]) -> Result<SignedHead, HeadError> {
        if bytes.len() != SIGNED_HEAD_LEN {
            return Err(HeadError::Length(bytes.len()));
        }
        if &bytes[..4] != HEAD_MAGIC {
            return Err(HeadError::Magic);
        }
        let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        let mut root = [0u8; 32];
        root.copy_from_slice(&bytes[12..44]);
        let mut public = [0u8; PUBLIC_KEY_LEN];
        public.copy_from_slice(&bytes[52..84]);
        let mut signature = [0u8; SIGNATURE_LEN];
        signature.copy_from_slice(&bytes[84..]);
        let signed =
            SignedHead { head: Head { size: u64_at(4), root, time: u64_at(44) }, public: PublicKey(public), signature };
        if !signed.public.verify(&signed.head.signed_bytes(), &signed.signature) {
            return Err(HeadError::Signature);
        }
        Ok(signed)
    }
}

/// What a client concludes on seeing a new head after `old`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ForkError {
    /// The new head is smaller: the log was truncated or rolled back.
    #[error("the log shrank from {old} to {new} entries: it was rolled back or truncated")]
    Shrank {
        /// The size seen before.
        old: u64,
        /// The size seen now.
        new: u64,
    },
    /// The proof does not show the old log as a prefix of the new one.
    #[error(
        "the log of {new} entries does not extend the log of {old} entries seen before: the history was rewritten or forked"
    )]
    Forked {
        /// The size seen before.
        old: u64,
        /// The size seen now.
        new: u64,
    },
}

/// Checks that `new` extends `old` through `proof`; signatures are checked by
/// [`SignedHead::decode`], keys by the caller.
pub fn check_extends(old: &Head, new: &Head, proof: &[Hash]) -> Result<(), ForkError> {
    if new.size < old.size {
        return Err(ForkError::Shrank { old: old.size, new: new.size });
    }
    if !verify_consistency(old.size, new.size, &old.root, &new.root, proof) {
        return Err(ForkError::Forked { old: old.size, new: new.size });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(n: u32) -> Log {
        let mut log = Log::new();
        for i in 0..n {
            log.append(3, blake3::hash(&i.to_le_bytes()).as_bytes());
        }
        log
    }

    #[test]
    fn every_prefix_is_consistent_with_every_longer_log() {
        let full = log(70);
        for new in 1..=70u64 {
            let new_root = full.root_at(new).unwrap();
            for old in 0..=new {
                let old_root = full.root_at(old).unwrap();
                let proof = full.consistency_proof(old, new).unwrap();
                assert!(proof.len() <= 2 + 64 - new.leading_zeros() as usize, "{old}->{new}: {}", proof.len());
                assert!(verify_consistency(old, new, &old_root, &new_root, &proof), "{old} -> {new}");
            }
        }
    }

    #[test]
    fn a_changed_proof_root_or_size_fails() {
        let full = log(37);
        for new in 2..=37u64 {
            let new_root = full.root_at(new).unwrap();
            for old in 1..new {
                let old_root = full.root_at(old).unwrap();
                let proof = full.consistency_proof(old, new).unwrap();
                for i in 0..proof.len() {
                    let mut bad = proof.clone();
                    bad[i][0] ^= 1;
                    assert!(!verify_consistency(old, new, &old_root, &new_root, &bad), "{old}->{new} at {i}");
                }
                let mut short = proof.clone();
                short.pop();
                assert!(!verify_consistency(old, new, &old_root, &new_root, &short));
                let mut long = proof.clone();
                long.push(new_root);
                assert!(!verify_consistency(old, new, &old_root, &new_root, &long));
                let wrong = full.root_at(old - 1).unwrap();
                assert!(!verify_consistency(old, new, &wrong, &new_root, &proof));
                assert!(!verify_consistency(old, new, &old_root, &old_root, &proof));
            }
        }
    }

    #[test]
    fn a_rewritten_entry_is_caught() {
        let honest = log(20);
        let mut leaves = honest.leaves().to_vec();
        leaves[5] = entry_leaf(3, &[9; 32]);
        let mut forked = Log::from_leaves(leaves);
        forked.append(3, &[1; 32]);
        let old = honest.head(1);
        let new = forked.head(2);
        let proof = forked.consistency_proof(20, 21).unwrap();
        assert_eq!(check_extends(&old, &new, &proof), Err(ForkError::Forked { old: 20, new: 21 }));
        assert_eq!(check_extends(&new, &old, &[]), Err(ForkError::Shrank { old: 21, new: 20 }));
        let mut grown = honest.clone();
        grown.append(5, &[2; 32]);
        let proof = grown.consistency_proof(20, 21).unwrap();
        assert_eq!(check_extends(&old, &grown.head(3), &proof), Ok(()));
    }

    #[test]
    fn inclusion_proofs_reach_the_head() {
        let l = log(13);
        let head = l.head(0);
        for i in 0..13 {
            let proof = l.inclusion_proof(i, 13).unwrap();
            assert!(merkle::verify_inclusion(&l.leaves()[i as usize], i, 13, &proof, &head.root));
        }
        assert!(l.inclusion_proof(13, 13).is_none());
    }

    #[test]
    fn entry_leaves_separate_kinds() {
        assert_ne!(entry_leaf(3, &[0; 32]), entry_leaf(5, &[0; 32]));
    }

    #[test]
    fn signed_heads_round_trip_and_refuse_changes() {
        let key = SigningKey::from_seed(&[7; 32]);
        let signed = log(4).head(1_700_000_000).sign(&key);
        let bytes = signed.encode();
        assert_eq!(SignedHead::decode(&bytes), Ok(signed));
        for i in 0..bytes.len() {
            let mut bad = bytes;
            bad[i] ^= 0x40;
            assert!(SignedHead::decode(&bad).is_err(), "byte {i}");
        }
        assert_eq!(SignedHead::decode(&bytes[1..]), Err(HeadError::Length(SIGNED_HEAD_LEN - 1)));
    }
}
