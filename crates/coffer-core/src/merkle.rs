//! The content Merkle tree of a snapshot. See docs/design.md#merkle-root.
//!
//! A binary hash tree over an ordered list of leaves, with domain-separated
//! hashes: `leaf = BLAKE3(0x00 || x)`, `inner = BLAKE3(0x01 || left || right)`.
//! Leaves are paired left to right level by level and a lone last node is promoted
//! unchanged, which gives the same shape as RFC 9162 §2.1.1 (the left subtree holds
//! the largest power of two of leaves smaller than the total). The root of no
//! leaves is `BLAKE3(0x00)`.
//!
//! A snapshot's leaves are its regular files in tree order (depth first, names in
//! byte order), each leaf committing to the file's path and the BLAKE3 digest of its
//! content, salted so that a hash disclosed in a proof cannot be used to test
//! guesses about other files (see [`file_leaf`]).

/// A 32-byte hash.
pub type Hash = [u8; 32];

/// `BLAKE3(0x00 || x)`.
pub fn leaf_hash(x: &[u8]) -> Hash {
    let mut h = blake3::Hasher::new();
    h.update(&[0]);
    h.update(x);
    *h.finalize().as_bytes()
}

/// `BLAKE3(0x01 || left || right)`.
pub fn node_hash(left: &Hash, right: &Hash) -> Hash {
    let mut h = blake3::Hasher::new();
    h.update(&[1]);
    h.update(left);
    h.update(right);
    *h.finalize().as_bytes()
}

/// Derivation context of a file leaf's salt.
const SALT_CONTEXT: &str = "coffer v2 merkle leaf salt";

/// The salt of the leaf for `path`: `BLAKE3-derive(SALT_CONTEXT, merkle_key || path)`.
/// Every snapshot has its own random `merkle_key`; a proof discloses only the salt
/// of the file it proves.
pub fn leaf_salt(merkle_key: &[u8; 32], path: &[u8]) -> Hash {
    let mut h = blake3::Hasher::new_derive_key(SALT_CONTEXT);
    h.update(merkle_key);
    h.update(path);
    *h.finalize().as_bytes()
}

/// The leaf of one regular file: `leaf_hash(salt (32) || content digest (32) || path)`,
/// where `path` is the file's absolute path in the snapshot and the digest is the
/// unkeyed BLAKE3 hash of its content.
pub fn file_leaf(salt: &Hash, digest: &Hash, path: &[u8]) -> Hash {
    let mut h = blake3::Hasher::new();
    h.update(&[0]);
    h.update(salt);
    h.update(digest);
    h.update(path);
    *h.finalize().as_bytes()
}

/// Derivation context of a snapshot's commitment.
const COMMITMENT_CONTEXT: &str = "coffer v2 snapshot commitment";

/// What a snapshot signs in the clear: its Merkle root bound to its number of leaves,
/// `BLAKE3-derive_key(COMMITMENT_CONTEXT, root || leaves u64 LE)`, so that a proof
/// cannot claim another tree shape.
pub fn commitment(root: &Hash, leaves: u64) -> Hash {
    let mut h = blake3::Hasher::new_derive_key(COMMITMENT_CONTEXT);
    h.update(root);
    h.update(&leaves.to_le_bytes());
    *h.finalize().as_bytes()
}

/// Computes a root from leaves given in order, keeping only one hash per level.
#[derive(Clone, Debug, Default)]
pub struct Builder {
    /// Roots of complete subtrees, largest first, each with its height.
    stack: Vec<(u32, Hash)>,
    count: u64,
}

impl Builder {
    /// An empty tree.
    pub fn new() -> Builder {
        Builder::default()
    }

    /// Appends a leaf hash.
    pub fn push(&mut self, leaf: Hash) {
        self.count += 1;
        let mut node = (0u32, leaf);
        while let Some(&(height, left)) = self.stack.last() {
            if height != node.0 {
                break;
            }
            self.stack.pop();
            node = (height + 1, node_hash(&left, &node.1));
        }
        self.stack.push(node);
    }

    /// Leaves pushed so far.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The root of the leaves pushed so far.
    pub fn root(&self) -> Hash {
        let mut it = self.stack.iter().rev();
        let Some(&(_, mut acc)) = it.next() else {
            return leaf_hash(&[]);
        };
        for (_, left) in it {
            acc = node_hash(left, &acc);
        }
        acc
    }
}

/// Computes the root of a known number of leaves given last to first, keeping only
/// one hash per level; `check` uses it to recompute a snapshot's root while walking
/// each directory's entries from the last.
///
/// The tree of `n` leaves is a run of perfect subtrees, one per set bit of `n`,
/// largest first, nested to the right: `node(P1, node(P2, ... Pk))`. Leaves arriving
/// from the right fill the smallest subtree first; each one finished is joined to
/// the right part built so far.
#[derive(Clone, Debug)]
pub struct ReverseBuilder {
    expected: u64,
    pushed: u64,
    /// The leaf count at which the perfect subtree being filled is complete.
    part_end: u64,
    /// Roots of complete subtrees of that part, smallest on top, with their height.
    stack: Vec<(u32, Hash)>,
    /// The root of the parts finished so far (the right end of the tree).
    right: Option<Hash>,
}

impl ReverseBuilder {
    /// A tree that should get `leaves` leaves.
    pub fn new(leaves: u64) -> ReverseBuilder {
        ReverseBuilder { expected: leaves, pushed: 0, part_end: 0, stack: Vec::new(), right: None }
    }

    /// Prepends a leaf hash. Leaves beyond the expected count only spoil the root.
    pub fn push(&mut self, leaf: Hash) {
        if self.pushed >= self.expected {
            self.pushed = self.pushed.saturating_add(1);
            return;
        }
        if self.stack.is_empty() {
            let left = self.expected - self.pushed;
            self.part_end = self.pushed + (left & left.wrapping_neg());
        }
        self.pushed += 1;
        let mut node = (0u32, leaf);
        while let Some(&(height, right)) = self.stack.last() {
            if height != node.0 {
                break;
            }
            self.stack.pop();
            node = (height + 1, node_hash(&node.1, &right));
        }
        self.stack.push(node);
        if self.pushed == self.part_end {
            let (_, part) = self.stack.pop().expect("a part just completed");
            self.right = Some(self.right.map_or(part, |right| node_hash(&part, &right)));
        }
    }

    /// The root, if exactly the expected number of leaves was pushed.
    pub fn root(&self) -> Option<Hash> {
        (self.pushed == self.expected).then(|| self.right.unwrap_or_else(|| leaf_hash(&[])))
    }
}

/// The root of `leaves`.
pub fn root(leaves: &[Hash]) -> Hash {
    let mut b = Builder::new();
    leaves.iter().for_each(|l| b.push(*l));
    b.root()
}

/// The inclusion proof of leaf `index`: the sibling hashes from the leaf up to the
/// root (RFC 9162 §2.1.3.1), about log2(n) of them. `None` if `index` is out of range.
pub fn inclusion_proof(leaves: &[Hash], index: usize) -> Option<Vec<Hash>> {
    if index >= leaves.len() {
        return None;
    }
    let mut path = Vec::new();
    let (mut lo, mut hi, mut m) = (0usize, leaves.len(), index);
    // Walk down from the root, recording the sibling subtree at each split.
    let mut siblings = Vec::new();
    while hi - lo > 1 {
        let k = largest_power_of_two_below(hi - lo);
        if m < k {
            siblings.push(root(&leaves[lo + k..hi]));
            hi = lo + k;
        } else {
            siblings.push(root(&leaves[lo..lo + k]));
            lo += k;
            m -= k;
        }
    }
    // The proof lists siblings from the leaf upwards.
    while let Some(s) = siblings.pop() {
        path.push(s);
    }
    Some(path)
}

fn largest_power_of_two_below(n: usize) -> usize {
    debug_assert!(n > 1);
    1 << (usize::BITS - 1 - (n - 1).leading_zeros())
}

/// Whether `proof` shows that `leaf` is leaf number `index` of a tree of `count`
/// leaves with root `root` (RFC 9162 §2.1.3.2).
pub fn verify_inclusion(leaf: &Hash, index: u64, count: u64, proof: &[Hash], root: &Hash) -> bool {
    root_from_inclusion(leaf, index, count, proof).is_some_and(|r| constant_time_eq(&r, root))
}

/// The root that `proof` leads to from `leaf` at `index` in a tree of `count`
/// leaves, or `None` if the proof does not fit that shape (RFC 9162 §2.1.3.2).
pub fn root_from_inclusion(leaf: &Hash, index: u64, count: u64, proof: &[Hash]) -> Option<Hash> {
    if index >= count {
        return None;
    }
    let (mut f, mut s) = (index, count - 1);
    let mut r = *leaf;
    for p in proof {
        if s == 0 {
            return None;
        }
        if f & 1 == 1 || f == s {
            r = node_hash(p, &r);
            while f & 1 == 0 && f != 0 {
                f >>= 1;
                s >>= 1;
            }
        } else {
            r = node_hash(&r, p);
        }
        f >>= 1;
        s >>= 1;
    }
    (s == 0).then_some(r)
}

fn constant_time_eq(a: &Hash, b: &Hash) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaves(n: usize) -> Vec<Hash> {
        (0..n as u32).map(|i| leaf_hash(&i.to_le_bytes())).collect()
    }

    /// The definition in the design document, level by level.
    fn level_by_level(leaves: &[Hash]) -> Hash {
        if leaves.is_empty() {
            return leaf_hash(&[]);
        }
        let mut level = leaves.to_vec();
        while level.len() > 1 {
            level = level.chunks(2).map(|p| if p.len() == 2 { node_hash(&p[0], &p[1]) } else { p[0] }).collect();
        }
        level[0]
    }

    #[test]
    fn streaming_root_matches_definition() {
        for n in 0..200 {
            let l = leaves(n);
            assert_eq!(root(&l), level_by_level(&l), "n = {n}");
        }
    }

    #[test]
    fn reverse_builder_matches_the_forward_root() {
        for n in 0..200u64 {
            let l = leaves(n as usize);
            let mut b = ReverseBuilder::new(n);
            l.iter().rev().for_each(|x| b.push(*x));
            assert_eq!(b.root(), Some(root(&l)), "n = {n}");
        }
    }

    #[test]
    fn reverse_builder_needs_the_exact_count() {
        for n in 0..40u64 {
            let l = leaves(n as usize);
            for expected in [n + 1, n.saturating_sub(1), n + 7] {
                if expected == n {
                    continue;
                }
                let mut b = ReverseBuilder::new(expected);
                l.iter().rev().for_each(|x| b.push(*x));
                assert_eq!(b.root(), None, "n = {n}, expected {expected}");
            }
        }
        // Order matters: the same leaves forwards give another root.
        let l = leaves(5);
        let mut b = ReverseBuilder::new(5);
        l.iter().for_each(|x| b.push(*x));
        assert_ne!(b.root(), Some(root(&l)));
    }

    #[test]
    fn small_trees_by_hand() {
        let l = leaves(3);
        assert_eq!(root(&l[..1]), l[0]);
        assert_eq!(root(&l[..2]), node_hash(&l[0], &l[1]));
        assert_eq!(root(&l), node_hash(&node_hash(&l[0], &l[1]), &l[2]));
        assert_eq!(root(&[]), leaf_hash(&[]));
    }

    #[test]
    fn every_proof_verifies_and_tampering_fails() {
        for n in 1..70usize {
            let l = leaves(n);
            let r = root(&l);
            for i in 0..n {
                let p = inclusion_proof(&l, i).unwrap();
                assert!(p.len() <= 64 - (n as u64).leading_zeros() as usize, "n {n}: proof of {} hashes", p.len());
                assert!(verify_inclusion(&l[i], i as u64, n as u64, &p, &r), "n {n} i {i}");
                assert!(!verify_inclusion(&l[(i + 1) % n], i as u64, n as u64, &p, &r) || n == 1);
                if !p.is_empty() {
                    let mut bad = p.clone();
                    bad[0][0] ^= 1;
                    assert!(!verify_inclusion(&l[i], i as u64, n as u64, &bad, &r));
                    assert!(!verify_inclusion(&l[i], i as u64, n as u64, &p[..p.len() - 1], &r));
                }
                assert!(!verify_inclusion(&l[i], n as u64, n as u64, &p, &r));
            }
            assert!(inclusion_proof(&l, n).is_none());
        }
    }

    #[test]
    fn leaf_and_inner_hashes_are_separated() {
        let (a, b) = (leaf_hash(b"a"), leaf_hash(b"b"));
        let mut x = Vec::new();
        x.extend_from_slice(&a);
        x.extend_from_slice(&b);
        assert_ne!(leaf_hash(&x), node_hash(&a, &b));
    }

    #[test]
    fn file_leaf_is_a_leaf_hash() {
        let salt = leaf_salt(&[7; 32], b"/a/b");
        let digest = *blake3::hash(b"content").as_bytes();
        let mut x = salt.to_vec();
        x.extend_from_slice(&digest);
        x.extend_from_slice(b"/a/b");
        assert_eq!(file_leaf(&salt, &digest, b"/a/b"), leaf_hash(&x));
        assert_ne!(salt, leaf_salt(&[8; 32], b"/a/b"));
    }
}
