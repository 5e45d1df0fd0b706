//! Read-only readers of other backup tools' repositories, for `coffer import`.
//!
//! Import reads a repository written by another tool, snapshot by snapshot, and hands
//! coffer the snapshots' metadata, directory trees and file contents so that coffer can
//! store them again in a repository of its own. Nothing here writes to the source: every
//! reader only lists and reads objects through the narrow [`Source`] trait, which coffer
//! adapts to its storage backends (a local directory, S3, SFTP...).
//!
//! The one reader so far is [`restic`], for restic's documented repository format
//! (repository versions 1 and 2). Everything read is authenticated before it is parsed,
//! every length read from the source is checked against a limit before anything is
//! allocated for it, and every damaged object yields a typed [`Error`] naming it.

pub mod error;
pub mod restic;
pub mod source;

pub use error::Error;
pub use source::{LocalDir, Source, SourceError, SourceErrorKind};
