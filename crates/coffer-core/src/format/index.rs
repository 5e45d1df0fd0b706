//! Index files: which blobs each pack holds, so that blobs can be found and
//! decrypted without reading pack headers. See docs/design.md#index-files.
//!
//! The sealed plaintext is binary, little-endian:
//! ```text
//! version u32 (=2) | pack count u32 | packs…
//! pack = pack id (32) | salt (32) | cipher (1) | epoch u16 | entry count u32 | entries (49 bytes each, as in pack headers)
//! ```
//! Salt, cipher and epoch are the pack trailer's: with them, a reader derives the
//! pack key and decrypts any blob with one range read.

use super::Reader;
use super::pack::{ENTRY_LEN, PackEntry};
use crate::crypto::{Cipher, Epoch};
use crate::id::Id;

/// Version of the index plaintext layout.
pub const VERSION: u32 = 2;
/// Length of a pack record before its entries: id, salt, cipher, epoch, entry count.
pub const RECORD_HEADER_LEN: usize = 32 + 32 + 1 + 2 + 4;

/// The index record of one pack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackRecord {
    /// The pack's id.
    pub id: Id,
    /// Salt of the pack's key.
    pub salt: [u8; 32],
    /// The pack's cipher.
    pub cipher: Cipher,
    /// Epoch of the data key the pack key derives from.
    pub epoch: Epoch,
    /// Its blobs.
    pub entries: Vec<PackEntry>,
}

impl PackRecord {
    /// Bytes this record takes in an index file's plaintext.
    pub fn encoded_len(&self) -> u64 {
        (RECORD_HEADER_LEN + self.entries.len() * ENTRY_LEN) as u64
    }
}

/// Whether an index file holding `packs` records of `bytes` bytes in all is full:
/// a writer stores it then and starts another (docs/design.md#size-limits).
pub fn is_full(packs: usize, bytes: u64) -> bool {
    packs >= super::limits::INDEX_FILE_PACKS || bytes >= super::limits::INDEX_FILE_TARGET
}

/// Splits `records` into the contents of index files that each stay below the
/// index file limit.
pub fn batches(records: &[PackRecord]) -> Vec<&[PackRecord]> {
    let (mut out, mut start, mut bytes) = (Vec::new(), 0, 0);
    for (i, r) in records.iter().enumerate() {
        bytes += r.encoded_len();
        if is_full(i + 1 - start, bytes) {
            out.push(&records[start..=i]);
            (start, bytes) = (i + 1, 0);
        }
    }
    if start < records.len() {
        out.push(&records[start..]);
    }
    out
}

/// Encodes the plaintext of an index file.
pub fn encode(packs: &[PackRecord]) -> Vec<u8> {
    let n: usize = packs.iter().map(|p| RECORD_HEADER_LEN + p.entries.len() * ENTRY_LEN).sum();
    let mut out = Vec::with_capacity(8 + n);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(packs.len() as u32).to_le_bytes());
    for p in packs {
        out.extend_from_slice(&p.id.0);
        out.extend_from_slice(&p.salt);
        out.push(p.cipher.to_byte());
        out.extend_from_slice(&p.epoch.to_le_bytes());
        out.extend_from_slice(&(p.entries.len() as u32).to_le_bytes());
        for e in &p.entries {
            e.encode(&mut out);
        }
    }
    out
}

/// Decodes the plaintext of an index file.
pub fn decode(buf: &[u8]) -> Result<Vec<PackRecord>, String> {
    let mut r = Reader::new(buf);
    let v = r.u32().ok_or("truncated index")?;
    if v != VERSION {
        return Err(format!("index version {v} is not supported by this coffer"));
    }
    let count = r.u32().ok_or("truncated index")? as usize;
    let mut packs = Vec::with_capacity(count.min(r.remaining() / RECORD_HEADER_LEN));
    for _ in 0..count {
        let id = r.id().ok_or("truncated index")?;
        let salt = r.array32().ok_or("truncated index")?;
        let cb = r.u8().ok_or("truncated index")?;
        let cipher = Cipher::from_byte(cb).ok_or_else(|| format!("unknown cipher byte {cb}"))?;
        let epoch = r.u16().ok_or("truncated index")?;
        let n = r.u32().ok_or("truncated index")? as usize;
        if n.saturating_mul(ENTRY_LEN) > r.remaining() {
            return Err(format!("pack {} announces {n} entries beyond the end of the index", id.short()));
        }
        let entries = (0..n).map(|_| PackEntry::decode(&mut r)).collect::<Result<Vec<_>, _>>()?;
        packs.push(PackRecord { id, salt, cipher, epoch, entries });
    }
    if r.remaining() != 0 {
        return Err(format!("{} trailing bytes after the last pack", r.remaining()));
    }
    Ok(packs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::pack::BlobType;

    #[test]
    fn round_trip_and_truncation() {
        let rec = PackRecord {
            id: Id([3; 32]),
            salt: [4; 32],
            cipher: Cipher::ChaCha20Poly1305,
            epoch: 0x0201,
            entries: vec![PackEntry {
                blob_type: BlobType::Tree,
                id: Id([5; 32]),
                offset: 9,
                length: 40,
                raw_length: 7,
            }],
        };
        let enc = encode(std::slice::from_ref(&rec));
        assert_eq!(&enc[..4], &[2, 0, 0, 0], "version");
        assert_eq!(enc.len(), 8 + RECORD_HEADER_LEN + ENTRY_LEN);
        assert_eq!(&enc[8 + 65..8 + 67], &[0x01, 0x02], "epoch u16 LE after the cipher byte");
        assert_eq!(decode(&enc).unwrap(), vec![rec]);
        let mut v1 = enc.clone();
        v1[0] = 1;
        assert!(decode(&v1).unwrap_err().contains("version 1"));
        for n in 0..enc.len() {
            assert!(decode(&enc[..n]).is_err());
        }
        let mut long = enc.clone();
        long.push(0);
        assert!(decode(&long).is_err());
    }
}
