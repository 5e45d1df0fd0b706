//! The library's error type. Every error names the object or path it concerns and,
//! where there is one, what the user can do about it.

use std::path::PathBuf;

use coffer_backend::BackendError;

/// Result alias used throughout the library.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in a library call, classified so that the binary
/// can map each class to its own exit code.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No repository at the location (its `config` object is absent).
    #[error("no repository at {location}: run 'coffer init' to create one, or check --repo")]
    RepoNotFound {
        /// Where the repository was looked for.
        location: String,
    },
    /// A repository already exists where one was to be created.
    #[error("a repository already exists at {location}")]
    RepoExists {
        /// Where the repository was found.
        location: String,
    },
    /// A location without `config` holds repository objects: a repository whose
    /// config was lost. Creating a new one there would bury its data.
    #[error(
        "{location} has no config but holds {found}: it is a repository whose config was lost, and a \
         new repository will not be created on top of it. Restore 'config' from a copy of the \
         repository, or run 'coffer repair config' to write a new one sealed under the existing keys \
         (it needs a passphrase that opens a key file)"
    )]
    ConfigLost {
        /// The repository location.
        location: String,
        /// What was found, e.g. `2 key files, 14 packs`.
        found: String,
    },
    /// No key file could be opened with the passphrase.
    #[error("wrong passphrase: no key file in the repository opens with it ({tried} tried)")]
    WrongPassword {
        /// How many key files were tried.
        tried: usize,
    },
    /// The repository has no key files at all.
    #[error("the repository has no key files: it cannot be opened")]
    NoKey,
    /// A stored object failed to decode, authenticate or match its id.
    #[error("{object}: {detail}; run 'coffer check' to locate the damage")]
    Corrupt {
        /// The object, for example `pack 3fa2…` or `snapshot 91bc…`.
        object: String,
        /// What is wrong with it.
        detail: String,
    },
    /// The storage backend failed.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// A local file operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The local path concerned.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A restore target already holds files and overwriting was not allowed.
    #[error("restore target {path} is not empty: pass --overwrite to replace what is there")]
    TargetNotEmpty {
        /// The target directory.
        path: PathBuf,
    },
    /// No snapshot matched a name, prefix or filter.
    #[error("no snapshot matches '{0}'")]
    SnapshotNotFound(String),
    /// A snapshot named by id was forgotten, or replaced by `coffer tag`.
    #[error("snapshot {name} is no longer in the repository: {why}")]
    SnapshotForgotten {
        /// The id or prefix given.
        name: String,
        /// What the tombstone records, and what to use instead.
        why: String,
    },
    /// An id prefix matched more than one object.
    #[error("'{0}' is ambiguous: it is a prefix of several ids; give more characters")]
    AmbiguousId(String),
    /// A path was not found inside a snapshot.
    #[error("path {0} is not in the snapshot")]
    PathNotInSnapshot(String),
    /// The caller passed something unusable.
    #[error("{0}")]
    InvalidInput(String),
    /// A concurrent prune overtook this backup (docs/design.md#prune): nothing
    /// was committed, and running the backup again succeeds.
    #[error("{0}; no snapshot was written: run the backup again")]
    Conflict(String),
    /// The source of a copy changed while it was read (a prune or a repair
    /// replaced what it was reading): what was copied is consistent, and running
    /// the copy again completes it (docs/design.md#copy).
    #[error(
        "{0}; the source repository changed while it was copied (a prune ran there): the snapshots copied so far are complete, run `coffer copy` again to copy the rest"
    )]
    SourceChanged(String),
    /// A server's transparency log contradicts what this client saw before or
    /// what the server stores (docs/design.md#transparency-log).
    #[error("{0}")]
    ServerLog(String),
}

impl Error {
    /// Builds a [`Error::Corrupt`].
    pub fn corrupt(object: impl Into<String>, detail: impl Into<String>) -> Self {
        Error::Corrupt { object: object.into(), detail: detail.into() }
    }

    /// Builds an [`Error::Io`] for `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { path: path.into(), source }
    }
}
