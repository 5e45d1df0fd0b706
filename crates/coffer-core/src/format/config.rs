//! The repository config: settings fixed when the repository is created.
//! Stored sealed under the name `config`. See docs/design.md#config.

use serde::{Deserialize, Serialize};

use crate::chunker::ChunkerParams;
use crate::id::Id;

/// Default zstd level.
pub const DEFAULT_COMPRESSION_LEVEL: i32 = 3;
/// Default target pack size: large enough to keep object counts low on object
/// stores, small enough to upload in one request.
pub const DEFAULT_PACK_SIZE: u32 = 16 << 20;
/// The largest target pack size a config may set.
pub const MAX_PACK_SIZE: u32 = 1 << 30;

/// Repository settings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    /// Repository format version.
    pub version: u32,
    /// Random repository id.
    pub id: Id,
    /// Chunk size limits.
    pub chunker: ChunkerParams,
    /// zstd level; 0 disables compression.
    pub compression_level: i32,
    /// Target pack size in bytes.
    pub pack_size: u32,
    /// The repository this one was made from with `init --from-repo`, and which
    /// keys they share; absent for a repository made on its own (readers that do
    /// not know the field ignore it). See docs/design.md#copy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub related: Option<Related>,
}

/// How a repository made with `init --from-repo` relates to the one it was made
/// from (docs/design.md#copy).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Related {
    /// The source repository's id.
    pub repository: Id,
    /// Whether the data keys were shared too (then packs, index files, writer
    /// records and snapshots copy byte for byte); the id and chunker keys and the
    /// chunker sizes always are.
    pub data_keys: bool,
}

impl Config {
    /// Serializes to JSON.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("config always serializes")
    }

    /// Parses and validates.
    pub fn decode(buf: &[u8]) -> Result<Config, String> {
        let c: Config = serde_json::from_slice(buf).map_err(|e| format!("config does not parse: {e}"))?;
        if c.version != super::FORMAT_VERSION {
            return Err(format!(
                "repository format version {} is not supported by this coffer (it reads version {})",
                c.version,
                super::FORMAT_VERSION
            ));
        }
        c.chunker.validate()?;
        if !(0..=22).contains(&c.compression_level) {
            return Err(format!("compression level {} out of range 0..=22", c.compression_level));
        }
        if !(1 << 20..=MAX_PACK_SIZE).contains(&c.pack_size) {
            return Err(format!("pack size {} out of range 1 MiB..=1 GiB", c.pack_size));
        }
        Ok(c)
    }
}
