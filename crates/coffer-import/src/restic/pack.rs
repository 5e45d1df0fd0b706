//! Pack files (`data/<first two hex digits>/<id>`): blobs one after the other, then the
//! encrypted header, then the header's length.
//!
//! ```text
//! blob 1 ‖ blob 2 ‖ ... ‖ blob n ‖ encrypted header ‖ header length (u32 LE)
//! ```
//!
//! Each blob is encrypted on its own (`IV ‖ ciphertext ‖ MAC`); a compressed blob is the
//! encryption of its zstd frame. The header length counts the encrypted header only
//! (IV, entries, MAC), not its own 4 bytes. The header opens to entries of 37 or 41
//! bytes, in the order of the blobs:
//!
//! | type byte | meaning | then |
//! |---|---|---|
//! | 0 | data blob | length (u32 LE), id (32) |
//! | 1 | tree blob | length (u32 LE), id (32) |
//! | 2 | compressed data blob | length (u32 LE), uncompressed length (u32 LE), id (32) |
//! | 3 | compressed tree blob | length (u32 LE), uncompressed length (u32 LE), id (32) |
//!
//! The length is the blob's length in the pack (encrypted); offsets are the running sum.
//! A header longer than [`MAX_HEADER`] or than the file, or whose blobs do not fit before
//! it, is refused before anything is allocated for it.

use super::crypto::{self, MasterKey};
use super::id::{BlobId, Id, PackId};
use crate::Error;
use crate::source::Source;

/// Largest encrypted pack header read (restic's own bound): 16 MiB.
pub const MAX_HEADER: u64 = 16 * 1024 * 1024;
/// Bytes of an uncompressed entry.
pub const ENTRY_LEN: usize = 37;
/// Bytes of a compressed entry.
pub const COMPRESSED_ENTRY_LEN: usize = 41;

/// What a blob holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BlobType {
    /// File contents.
    Data,
    /// A directory's tree (JSON).
    Tree,
}

impl std::fmt::Display for BlobType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BlobType::Data => "data",
            BlobType::Tree => "tree",
        })
    }
}

/// Where a blob lies in its pack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PackedBlob {
    pub id: BlobId,
    pub blob_type: BlobType,
    /// Offset of the encrypted blob in the pack.
    pub offset: u64,
    /// Length of the encrypted blob in the pack.
    pub length: u32,
    /// For a compressed blob, the length of its plaintext; `None` when stored as is.
    pub uncompressed_length: Option<u32>,
}

/// Parses an opened (decrypted) header into its entries, offsets counted from 0.
pub fn parse_header(plain: &[u8]) -> Result<Vec<PackedBlob>, String> {
    let mut out = Vec::with_capacity(plain.len() / ENTRY_LEN);
    let mut rest = plain;
    let mut offset = 0u64;
    while !rest.is_empty() {
        let t = rest[0];
        let (blob_type, compressed) = match t {
            0 => (BlobType::Data, false),
            1 => (BlobType::Tree, false),
            2 => (BlobType::Data, true),
            3 => (BlobType::Tree, true),
            _ => return Err(format!("header entry {}: unknown blob type {t}", out.len())),
        };
        let len = if compressed { COMPRESSED_ENTRY_LEN } else { ENTRY_LEN };
        if rest.len() < len {
            return Err(format!("header entry {}: cut short ({} of {len} bytes)", out.len(), rest.len()));
        }
        let u32_at = |i: usize| u32::from_le_bytes(rest[i..i + 4].try_into().unwrap());
        let length = u32_at(1);
        let (uncompressed_length, id_at) = if compressed { (Some(u32_at(5)), 9) } else { (None, 5) };
        let id = Id(rest[id_at..id_at + 32].try_into().unwrap());
        if (length as usize) < crypto::OVERHEAD {
            return Err(format!("header entry {}: blob {id} of {length} bytes cannot be encrypted data", out.len()));
        }
        out.push(PackedBlob { id, blob_type, offset, length, uncompressed_length });
        offset += u64::from(length);
        rest = &rest[len..];
    }
    if out.is_empty() {
        return Err("header holds no blob".to_string());
    }
    Ok(out)
}

/// Reads, opens and parses the header of the pack `id`, of `size` bytes, checking each
/// length against the file before reading or allocating for it.
pub(crate) fn read_header(
    source: &dyn Source,
    key: &MasterKey,
    id: PackId,
    size: u64,
) -> Result<Vec<PackedBlob>, Error> {
    let bad = |reason: String| Error::PackHeader { pack: id, reason };
    let name = pack_name(&id);
    let min = 4 + (crypto::OVERHEAD + ENTRY_LEN + crypto::OVERHEAD) as u64;
    if size < min {
        return Err(bad(format!("{size} bytes is too short for a pack (at least {min})")));
    }
    let tail = source.read_range(&name, size - 4, 4)?;
    let tail: [u8; 4] = tail.as_slice().try_into().map_err(|_| bad("cut short while read".to_string()))?;
    let hlen = u64::from(u32::from_le_bytes(tail));
    if hlen > size - 4 {
        return Err(bad(format!("header length {hlen} is more than the pack's {size} bytes")));
    }
    if hlen > MAX_HEADER {
        return Err(bad(format!("header length {hlen} is more than the {MAX_HEADER} accepted")));
    }
    if hlen < (crypto::OVERHEAD + ENTRY_LEN) as u64 {
        return Err(bad(format!("header length {hlen} cannot hold an entry")));
    }
    let start = size - 4 - hlen;
    let enc = source.read_range(&name, start, hlen)?;
    if enc.len() as u64 != hlen {
        return Err(bad("cut short while read".to_string()));
    }
    let plain =
        key.open(&enc).map_err(|_| bad("the header fails its authentication (damaged or altered)".to_string()))?;
    let blobs = parse_header(&plain).map_err(bad)?;
    let end = blobs.last().map(|b| b.offset + u64::from(b.length)).unwrap_or(0);
    if end != start {
        return Err(bad(format!("the header's blobs end at {end}, but the header starts at {start}")));
    }
    Ok(blobs)
}

/// The object name of pack `id`: `data/<first two hex digits>/<id>`.
pub fn pack_name(id: &PackId) -> String {
    let hex = id.to_hex();
    format!("data/{}/{hex}", &hex[..2])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(t: u8, len: u32, ulen: Option<u32>, id: u8) -> Vec<u8> {
        let mut v = vec![t];
        v.extend_from_slice(&len.to_le_bytes());
        if let Some(u) = ulen {
            v.extend_from_slice(&u.to_le_bytes());
        }
        v.extend_from_slice(&[id; 32]);
        v
    }

    #[test]
    fn header_entries() {
        let mut h = entry(0, 100, None, 1);
        h.extend(entry(3, 50, Some(200), 2));
        let b = parse_header(&h).unwrap();
        assert_eq!(b.len(), 2);
        assert_eq!(
            (b[0].blob_type, b[0].offset, b[0].length, b[0].uncompressed_length),
            (BlobType::Data, 0, 100, None)
        );
        assert_eq!(
            (b[1].blob_type, b[1].offset, b[1].length, b[1].uncompressed_length),
            (BlobType::Tree, 100, 50, Some(200))
        );
        assert_eq!(b[1].id, Id([2; 32]));
        assert!(parse_header(&h[..h.len() - 1]).is_err());
        assert!(parse_header(&entry(4, 100, None, 1)).is_err());
        assert!(parse_header(&[]).is_err());
        assert!(parse_header(&entry(0, 3, None, 1)).is_err());
    }
}
