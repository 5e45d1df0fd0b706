//! Read-only readers of other backup tools' repositories, for `coffer import`.
//!
//! Import reads a repository written by another tool, snapshot by snapshot, and hands
//! coffer the snapshots' metadata, directory trees and file contents so that coffer can
//! store them again in a repository of its own. Nothing here writes to the source: every
//! reader only lists and reads objects through the narrow [`Source`] trait, which coffer
//! adapts to its storage backends (a local directory, S3, SFTP...).
//!
//! The one repository reader so far is [`restic`], for restic's documented repository format
//! (repository versions 1 and 2). Everything read is authenticated before it is parsed,
//! every length read from the source is checked against a limit before anything is
//! allocated for it, and every damaged object yields a typed [`Error`] naming it.
//!
//! [`tar`] reads a tar archive as a stream (GNU tar's, or `borg export-tar`'s output) into
//! neutral entry records, for importing an archive rather than a repository.
//! [`borg`] is different: it parses what the user's own `borg` prints (`list --json`,
//! `info --json`, `debug dump-archive`), which the `coffer` binary runs; so is [`kopia`], for
//! what the user's own `kopia` prints and serves (its snapshot list, its directory objects).
//!
//! ```no_run
//! use std::io::Read;
//! use std::sync::Arc;
//! use coffer_import::LocalDir;
//! use coffer_import::restic::{NodeType, ResticRepo};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut repo = ResticRepo::open(Arc::new(LocalDir::new("/srv/restic-repo")), b"passphrase")?;
//! let snapshots = repo.snapshots()?; // damaged ones in snapshots.damaged
//! let report = repo.load_index()?; // damaged index files in report.damaged
//! for (id, snap) in &snapshots.good {
//!     let root = repo.tree(&snap.tree)?; // refused nodes in root.rejected
//!     for node in &root.nodes {
//!         if node.node_type == NodeType::File {
//!             let mut bytes = Vec::new();
//!             repo.file_reader(node).read_to_end(&mut bytes)?;
//!             println!("{id} {} {} bytes, mode {:o}", node.name_lossy(), bytes.len(), node.st_mode());
//!         }
//!         // node.subtree: a directory's tree, read the same way.
//!     }
//! }
//! # let _ = report;
//! # Ok(())
//! # }
//! ```

pub mod borg;
pub mod error;
pub mod kopia;
pub mod restic;
pub mod source;
pub mod tar;

pub use error::Error;
pub use source::{LocalDir, Source, SourceError, SourceErrorKind};
