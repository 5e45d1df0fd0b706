//! # coffer-core
//!
//! The library behind the `coffer` command: it backs up directory trees into an
//! encrypted, deduplicated, compressed repository and restores them exactly.
//!
//! The repository format is specified in `docs/design.md`; each module below
//! mirrors one part of it:
//!
//! - [`id`], [`crypto`], [`chunker`]: pure functions (ids, AEAD and KDF, content-defined chunking).
//! - [`format`]: the byte layouts of every stored object, each with a decoder that never panics.
//! - [`backend`]: stores opaque named objects; OpenDAL underneath.
//! - [`repo`]: keys, index, packer, blob load/save, snapshots.
//! - [`keys`]: the key files of an open repository: add, remove, change a passphrase, rotate.
//! - [`backup`], [`restore`], [`check`], [`diff`]: the operations a user runs.
//!
//! Libraries never print: progress and warnings reach the caller through [`progress::Progress`].
#![deny(missing_docs)]

pub mod backend;
pub mod backup;

pub mod check;
pub mod chunker;
pub mod compress;
pub mod crypto;
pub mod diff;
pub mod error;
pub mod forget;
pub mod format;
pub mod fsmeta;
pub mod history;
pub mod id;
pub mod keys;
mod leaves;
pub mod merkle;
pub mod progress;
pub mod proof;
pub mod prune;
pub mod repair;
pub mod repo;
pub mod restore;
pub mod retention;
pub mod session;
pub mod sign;
pub mod source;
pub mod state;
pub mod walk;

pub use error::{Error, Result};
pub use id::Id;

/// Helpers shared by the unit tests.
#[cfg(test)]
pub(crate) mod testutil {
    /// Deterministic incompressible bytes (xorshift64).
    pub(crate) fn noise(len: usize, seed: u64) -> Vec<u8> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }
}
