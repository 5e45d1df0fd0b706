//! Typed errors of the readers. Each message names the object (key file, config, snapshot,
//! index file, pack, blob, tree, node) and, where there is one, what to do.

use crate::restic::id::Id;
use crate::source::SourceError;

/// Everything that can go wrong reading a repository.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The storage failed (the object is named in the [`SourceError`]).
    #[error("reading {}: {}", .0.object, .0.message)]
    Source(#[from] SourceError),

    /// No key file under `keys/`: not a restic repository, or the wrong location.
    #[error("no key file under keys/: is this a restic repository? check the location")]
    NoKeyFiles,

    /// The passphrase opens none of the key files.
    #[error("wrong password: it opens none of the {tried} key file(s) tried{}", skipped_note(*.skipped))]
    WrongPassword {
        /// Key files whose derived key was tried.
        tried: usize,
        /// Key files refused before deriving (malformed, absurd parameters): see `KeyFile`.
        skipped: usize,
    },

    /// A key file is malformed or states absurd parameters; refused before deriving.
    #[error("key file {name}: {reason}")]
    KeyFile { name: String, reason: String },

    /// The config file does not open or does not parse.
    #[error("config: {reason}")]
    Config { reason: String },

    /// A repository version this reader does not know.
    #[error(
        "config: repository version {version} is not supported (this reader reads versions 1 and 2); a newer restic may be able to migrate or read it"
    )]
    UnsupportedVersion { version: u64 },

    /// An object (config, index or snapshot file) is larger than this reader accepts.
    #[error("{object}: {size} bytes is more than the {limit} bytes accepted for it")]
    TooLarge { object: String, size: u64, limit: u64 },

    /// A snapshot file is damaged.
    #[error(
        "snapshot {name}: {reason}; it is skipped (restic's 'check' and 'repair snapshots' deal with damaged snapshots)"
    )]
    Snapshot { name: String, reason: String },

    /// An index file is damaged.
    #[error("index file {name}: {reason}; it is skipped (restic's 'repair index' rebuilds the index from the packs)")]
    Index { name: String, reason: String },

    /// `blob` was called before the index was loaded.
    #[error("the index is not loaded: call load_index or rebuild_index_from_packs first")]
    IndexNotLoaded,

    /// The index names no pack holding the blob.
    #[error("blob {blob}: in no pack of the index; run 'restic check' on the source")]
    BlobNotFound { blob: Id },

    /// A pack's header is damaged or its lengths do not fit the file.
    #[error("pack {pack}: {reason}; run 'restic check --read-data' on the source")]
    PackHeader { pack: Id, reason: String },

    /// The pack is shorter than the index says.
    #[error(
        "pack {pack}: blob {blob} at offset {offset}, {length} bytes, lies beyond the pack's end ({size} bytes: truncated?); run 'restic check --read-data' on the source"
    )]
    PackTruncated { pack: Id, blob: Id, offset: u64, length: u64, size: u64 },

    /// A blob's MAC does not match.
    #[error(
        "pack {pack}: blob {blob} fails its authentication (damaged or altered); run 'restic check --read-data' on the source"
    )]
    BlobUnauthenticated { pack: Id, blob: Id },

    /// A blob decrypts but its plaintext does not hash to its id.
    #[error(
        "pack {pack}: blob {blob} decrypts to data whose SHA-256 is {actual}, not its id (altered by someone holding the key?); run 'restic check --read-data' on the source"
    )]
    BlobHash { pack: Id, blob: Id, actual: Id },

    /// A blob is malformed: too large, bad compression, wrong length.
    #[error("pack {pack}: blob {blob}: {reason}; run 'restic check --read-data' on the source")]
    Blob { pack: Id, blob: Id, reason: String },

    /// A tree blob is not a valid tree.
    #[error("tree {tree}: {reason}")]
    Tree { tree: Id, reason: String },

    /// One node of a tree is refused; the rest of the tree is kept.
    #[error("tree {tree}: node {position} ({name}): {reason}; the node is skipped")]
    Node { tree: Id, position: usize, name: String, reason: String },
}

fn skipped_note(skipped: usize) -> String {
    if skipped == 0 { String::new() } else { format!(" ({skipped} more refused as malformed)") }
}
