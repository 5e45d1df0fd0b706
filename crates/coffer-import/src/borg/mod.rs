//! Parsers of what BorgBackup 1.2 prints, for importing a borg repository by running the
//! user's own `borg`.
//!
//! coffer does not read borg's repository format itself: the `coffer` binary runs `borg`
//! (which knows the user's keys, passphrase and remote setup) and hands what it prints to
//! these parsers. This module only parses bytes from a [`Read`](std::io::Read): it never
//! starts a process, never prints and never reads the environment.
//!
//! | borg command | parser | gives |
//! | --- | --- | --- |
//! | `borg list --json REPO` | [`parse_list`] | repository id and location; archives, oldest first |
//! | `borg info --json REPO::ARCHIVE` | [`parse_info`] | an archive's host, user, times, comment, command line |
//! | `borg debug dump-archive REPO::ARCHIVE -` | [`read_dump`] | the archive's metadata, then every item, streamed |
//!
//! # Running borg
//!
//! * Run every command with `TZ=UTC`: `borg list` and `borg info` print archive times in
//!   local time without a zone, and these parsers read them as UTC. (The dump's own
//!   `time`/`time_end` are UTC whatever `TZ` says.) `borg list`/`borg info` print those
//!   times to the second (the fraction is always `.000000`); the dump's metadata has
//!   microseconds.
//! * `borg debug dump-archive ARCHIVE -` writes the JSON to standard output; its messages
//!   go to standard error. A dump that ends early (borg failed, or was killed) is an
//!   [`Error::DumpSyntax`]: items already handed to the callback must then be thrown away
//!   with the rest of that archive.
//!
//! # Bytes
//!
//! borg's dump writes byte strings (paths, link targets, user and group names, xattr names
//! and values, ACLs, chunk ids) as the text itself when the bytes are UTF-8 and do not
//! start with 0x7f, and otherwise as U+007F followed by the bytes in hex; a file named
//! `b"caf\xe9"` appears as `"\u007f636166e9"`. Every such field is decoded back to the
//! exact bytes. Text borg holds as a Python `str` (archive names, command lines) may hold
//! "surrogate escapes", which `json` writes as lone surrogates (`"\udce9"`) that JSON
//! parsers refuse; a pre-pass over the byte stream turns them back into the raw bytes
//! (see `text.rs`). So every name here is `Vec<u8>`; use `String::from_utf8_lossy` to
//! show one.
//!
//! # Limits
//!
//! Everything read is bounded by [`Limits`] before it is allocated: one item's JSON, the
//! chunk list, xattrs, strings, the whole of a `list`/`info` document. An item that breaks
//! a per-field limit or is malformed is handed to the callback as
//! [`DumpEvent::Rejected`] and the dump goes on; one whose JSON alone is past
//! [`Limits::item_json_bytes`] stops the dump with [`Error::ItemTooLarge`], since the
//! stream cannot be resynchronised without reading it.

pub mod acl;
mod dump;
mod fields;
mod item;
mod list;
mod text;

use std::fmt;

pub use dump::{ChunkerParams, DumpEvent, DumpMeta, read_dump};
pub use item::{Chunk, ContentKey, HardLinks, Item, ItemKind, Reject};
pub use list::{ArchiveInfo, ArchiveSummary, RepoList, parse_info, parse_info_all, parse_list, parse_list_with};
pub use text::{BorgTime, parse_time};

/// A 32-byte id as borg prints it in hex: a repository's, an archive's or a chunk's.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct BorgId(pub [u8; 32]);

impl BorgId {
    /// Parses 64 hex digits.
    pub fn from_hex(s: &str) -> Option<BorgId> {
        let mut id = [0; 32];
        hex::decode_to_slice(s, &mut id).ok()?;
        Some(BorgId(id))
    }

    /// The id in lower-case hex, as borg prints it.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }
}

impl fmt::Debug for BorgId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BorgId({})", self.to_hex())
    }
}

impl fmt::Display for BorgId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

/// Bounds on what the parsers accept, checked before anything is allocated for it.
#[derive(Debug, Clone)]
pub struct Limits {
    /// The whole output of `borg list --json` or `borg info --json`.
    pub listing_bytes: u64,
    /// The JSON of one item of the dump, not counting its chunk list (bounded by
    /// `chunks_per_item`), whitespace included.
    pub item_json_bytes: u64,
    /// The JSON of each part of the dump outside `_items` (`_name`, `_meta`...).
    pub meta_json_bytes: u64,
    /// Chunks in one item's chunk list. borg's default chunker cuts about 2 MiB chunks,
    /// so the default (2 Mi chunks, 80 MiB of memory) covers files of about 4 TiB.
    pub chunks_per_item: usize,
    /// Extended attributes on one item.
    pub xattrs_per_item: usize,
    /// One xattr's value (Linux allows 64 KiB).
    pub xattr_value_bytes: usize,
    /// One xattr's name (Linux allows 255 bytes).
    pub xattr_name_bytes: usize,
    /// A path, or a symlink's or hard link's `source`.
    pub path_bytes: usize,
    /// Any other byte string of an item (user, group, each ACL).
    pub text_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            listing_bytes: 256 << 20,
            item_json_bytes: 16 << 20,
            meta_json_bytes: 16 << 20,
            chunks_per_item: 2 << 20,
            xattrs_per_item: 1024,
            xattr_value_bytes: 64 << 10,
            xattr_name_bytes: 255,
            path_bytes: 64 << 10,
            text_bytes: 1 << 20,
        }
    }
}

/// What can go wrong parsing borg's output. Problems with single items of a dump are not
/// errors but [`DumpEvent::Rejected`].
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading borg's output failed.
    #[error("reading the output of borg {command}: {source}")]
    Read {
        command: &'static str,
        #[source]
        source: std::io::Error,
    },

    /// `borg list --json` or `borg info --json` printed more than [`Limits::listing_bytes`].
    #[error("the output of borg {command} is more than the {limit} bytes accepted")]
    ListingTooLarge { command: &'static str, limit: u64 },

    /// The output of `borg list --json` or `borg info --json` is not what borg 1.2 prints.
    #[error("the output of borg {command} is not what borg 1.2 prints: {reason} (is this borg 1.x?)")]
    Listing { command: &'static str, reason: String },

    /// The dump ends early or is not JSON: borg most likely failed or was stopped.
    #[error(
        "archive {archive}: the output of borg debug dump-archive ends early or is not JSON ({reason}); see borg's error output, and run 'borg check' on the repository if borg reported damage"
    )]
    DumpSyntax { archive: String, reason: String },

    /// The dump is JSON but not the document `borg debug dump-archive` writes.
    #[error("archive {archive}: the output of borg debug dump-archive is not what borg 1.2 writes: {reason}")]
    DumpShape { archive: String, reason: String },

    /// One item's JSON is larger than [`Limits::item_json_bytes`].
    #[error(
        "archive {archive}: item {index} ({after}) is more than the {limit} bytes of JSON accepted for one item; the import of this archive stops here"
    )]
    ItemTooLarge {
        archive: String,
        /// Items before it in the dump.
        index: u64,
        /// Says which item: the path of the one before it.
        after: String,
        limit: u64,
    },

    /// A part of the dump outside the items is larger than [`Limits::meta_json_bytes`].
    #[error("archive {archive}: the dump's {part} is more than the {limit} bytes of JSON accepted for it")]
    MetaTooLarge { archive: String, part: String, limit: u64 },
}
