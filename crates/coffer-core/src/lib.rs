//! # coffer-core
//!
//! The library behind the `coffer` command: it backs up directory trees into an
//! encrypted, deduplicated, compressed repository and restores them exactly.
//!
//! The repository format is specified in `docs/design.md`; `docs/internals.md`
//! maps the code. The subsystems, lowest first:
//!
//! - [`id`], [`crypto`], [`chunker`], [`compress`], [`merkle`]: pure primitives
//!   (ids, AEAD, key derivation and signatures, content-defined chunking, zstd
//!   policy, the content Merkle tree).
//! - [`format`]: the byte layout of every stored object, each with a decoder that
//!   never panics and checks its size limit first.
//! - storage lives in its own crate, `coffer-backend` (re-exported as [`backend`]).
//! - [`repo`]: an open repository: keys, config, index, blob load and save,
//!   trees, signed snapshots and the history.
//! - [`lifecycle`]: how writers and prune share a repository without locks.
//! - [`fs`]: the local file system: reading sources without following planted
//!   links, reading and applying metadata.
//! - [`local_state`]: what a client remembers between runs.
//! - [`ops`]: one module per user operation: backup, restore, check, prune,
//!   forget, diff, prove, keys, repair.
//! - [`vfs`]: the read-only snapshot file system behind `coffer mount`.
//! - [`translog`]: the append-only log of accepted objects, its consistency
//!   proofs and signed heads (pure).
//!
//! Libraries never print: progress and warnings reach the caller through [`progress::Progress`].
#![deny(missing_docs)]

pub mod chunker;
pub mod compress;
pub mod crypto;
pub mod error;
pub mod format;
pub mod fs;
pub mod id;
pub mod lifecycle;
pub mod local_state;
pub mod merkle;
pub mod ops;
pub mod progress;
pub mod recon;
pub mod repo;
pub mod server_log;
pub mod translog;
pub mod trust;
pub mod vfs;

/// The storage layer, re-exported so that callers name one crate.
pub use coffer_backend as backend;

pub use error::{Error, Result};
pub use id::Id;

#[cfg(any(test, feature = "testing"))]
pub mod testing;
