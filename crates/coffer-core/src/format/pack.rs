//! Packs: encrypted blobs back to back, then an encrypted header, then a fixed
//! trailer. See docs/design.md#packs.
//!
//! ```text
//! blob_0 | blob_1 | … | blob_{n-1} | header ciphertext+tag | trailer (48 bytes)
//! trailer = salt (32) | header length incl. tag (u32 LE) | cipher (1) | epoch (u16 LE) | 0 | "CFPK" | version u32 LE (=1)
//! ```
//! The pack key is `data_key[epoch].derive("coffer v1 pack", salt)`. The blob at byte offset
//! `o` is sealed with nonce `Nonce::new(0, o)` and associated data `type || id`; its
//! plaintext is a compression byte (0 none, 1 zstd) followed by the payload. The
//! header is sealed with nonce `Nonce::new(1, 0)` and holds `count (u32 LE)` then
//! `count` entries of [`ENTRY_LEN`] bytes. The pack's id is the unkeyed BLAKE3 of all
//! its bytes, so anyone can verify a pack's integrity without keys.

use std::io::{self, Write};

use super::Reader;
use crate::crypto::{AeadKey, Cipher, Epoch, Key, Nonce, TAG_LEN};
use crate::id::{ID_LEN, Id};

/// Length of the fixed trailer.
pub const TRAILER_LEN: usize = 48;
/// Magic bytes near a pack's end.
pub const MAGIC: &[u8; 4] = b"CFPK";
/// Pack layout version.
pub const VERSION: u32 = 1;
/// Length of one header (and index) entry: type, id, offset, length, raw length.
pub const ENTRY_LEN: usize = 1 + ID_LEN + 8 + 4 + 4;
/// Key-derivation context for pack keys.
pub const KEY_CONTEXT: &str = "coffer v1 pack";
/// Nonce domain of blobs (the counter is the blob's byte offset in the pack).
pub const BLOB_NONCE_DOMAIN: u32 = 0;
/// Nonce domain of the header.
pub const HEADER_NONCE_DOMAIN: u32 = 1;
/// Compression byte: payload stored as is.
pub const COMPRESSION_NONE: u8 = 0;
/// Compression byte: payload is a zstd frame.
pub const COMPRESSION_ZSTD: u8 = 1;

/// What a blob holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BlobType {
    /// A chunk of file content.
    Data = 0,
    /// A directory listing.
    Tree = 1,
}

impl BlobType {
    /// Parses the stored type byte.
    pub fn from_byte(b: u8) -> Option<BlobType> {
        match b {
            0 => Some(BlobType::Data),
            1 => Some(BlobType::Tree),
            _ => None,
        }
    }
    /// A lowercase noun for messages.
    pub fn noun(self) -> &'static str {
        match self {
            BlobType::Data => "data blob",
            BlobType::Tree => "tree blob",
        }
    }
}

/// Where a blob sits in a pack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PackEntry {
    /// The blob's type.
    pub blob_type: BlobType,
    /// The keyed id of its plaintext.
    pub id: Id,
    /// Byte offset of its ciphertext in the pack.
    pub offset: u64,
    /// Length of its ciphertext, tag included.
    pub length: u32,
    /// Length of its plaintext payload before compression.
    pub raw_length: u32,
}

impl PackEntry {
    /// Appends the 49-byte encoding.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(self.blob_type as u8);
        out.extend_from_slice(&self.id.0);
        out.extend_from_slice(&self.offset.to_le_bytes());
        out.extend_from_slice(&self.length.to_le_bytes());
        out.extend_from_slice(&self.raw_length.to_le_bytes());
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<PackEntry, String> {
        let t = r.u8().ok_or("truncated entry")?;
        let blob_type = BlobType::from_byte(t).ok_or_else(|| format!("unknown blob type {t}"))?;
        let e = PackEntry {
            blob_type,
            id: r.id().ok_or("truncated entry")?,
            offset: r.u64().ok_or("truncated entry")?,
            length: r.u32().ok_or("truncated entry")?,
            raw_length: r.u32().ok_or("truncated entry")?,
        };
        if (e.length as usize) < TAG_LEN + 1 {
            return Err(format!("blob {} has impossible length {}", e.id.short(), e.length));
        }
        Ok(e)
    }

    /// Whether the entry's lengths are within what a blob may take
    /// ([`super::limits::BLOB`], [`super::limits::BLOB_PLAINTEXT`]); checked before
    /// a blob is read, so that a planted length allocates nothing.
    pub fn check_bounds(&self) -> Result<(), String> {
        if u64::from(self.length) > super::limits::BLOB || u64::from(self.raw_length) > super::limits::BLOB_PLAINTEXT {
            return Err(format!(
                "its entry gives a length of {} bytes ({} decoded), more than a blob may take ({} bytes decoded)",
                self.length,
                self.raw_length,
                super::limits::BLOB_PLAINTEXT
            ));
        }
        Ok(())
    }

    /// Associated data of this blob's seal.
    pub fn aad(blob_type: BlobType, id: &Id) -> [u8; 1 + ID_LEN] {
        let mut a = [0u8; 1 + ID_LEN];
        a[0] = blob_type as u8;
        a[1..].copy_from_slice(&id.0);
        a
    }
}

/// Decodes a list of `count (u32 LE)` entries that fills `buf` exactly.
pub fn decode_entries(buf: &[u8]) -> Result<Vec<PackEntry>, String> {
    let mut r = Reader::new(buf);
    let count = r.u32().ok_or("truncated entry count")? as usize;
    if r.remaining() != count.saturating_mul(ENTRY_LEN) {
        return Err(format!("{count} entries announced but {} bytes follow", r.remaining()));
    }
    (0..count).map(|_| PackEntry::decode(&mut r)).collect()
}

/// The pack key for `salt`.
pub fn pack_key(data_key: &Key, cipher: Cipher, salt: &[u8; 32]) -> AeadKey {
    AeadKey::new(cipher, &data_key.derive(KEY_CONTEXT, salt))
}

/// The largest sealing buffer a pack builder keeps between blobs: a chunk of
/// the default maximum size (4 MiB) and its overhead fit.
const SCRATCH_KEEP: usize = 5 << 20;

/// Assembles one pack, writing its bytes to `W` as blobs are added: a `Vec<u8>`
/// in memory, or a spool file so that a pack being filled costs no memory
/// (docs/design.md#backup).
pub struct PackBuilder<W = Vec<u8>> {
    key: AeadKey,
    epoch: Epoch,
    salt: [u8; 32],
    out: W,
    len: u64,
    hasher: blake3::Hasher,
    /// The blob being sealed, reused from blob to blob.
    scratch: Vec<u8>,
    entries: Vec<PackEntry>,
}

impl PackBuilder<Vec<u8>> {
    /// Starts an empty pack in memory with a fresh random salt, under `data_key`,
    /// the data key of `epoch`.
    pub fn new(data_key: &Key, epoch: Epoch, cipher: Cipher, capacity: usize) -> Self {
        Self::with_output(data_key, epoch, cipher, Vec::with_capacity(capacity))
    }
}

impl<W: Write> PackBuilder<W> {
    /// Starts an empty pack written to `out` with a fresh random salt, under
    /// `data_key`, the data key of `epoch`.
    pub fn with_output(data_key: &Key, epoch: Epoch, cipher: Cipher, out: W) -> Self {
        let salt = crate::crypto::random_array();
        PackBuilder {
            key: pack_key(data_key, cipher, &salt),
            epoch,
            salt,
            out,
            len: 0,
            hasher: blake3::Hasher::new(),
            scratch: Vec::new(),
            entries: Vec::new(),
        }
    }

    /// Blobs added so far.
    pub fn count(&self) -> usize {
        self.entries.len()
    }

    /// Bytes written so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether no blob was added.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Gives the builder a sealing buffer to reuse (a closed pack's).
    pub fn reuse_scratch(&mut self, buffer: Vec<u8>) {
        self.scratch = buffer;
    }

    /// Takes the sealing buffer back, for another pack to reuse.
    pub fn take_scratch(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.scratch)
    }

    fn emit(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.out.write_all(bytes)?;
        self.hasher.update(bytes);
        self.len += bytes.len() as u64;
        Ok(())
    }

    /// Appends a blob: `compression` byte and `payload` are sealed under the nonce
    /// of the blob's offset, which no other blob of this pack can share. On an
    /// error from the output, the pack must be abandoned.
    pub fn add(
        &mut self,
        blob_type: BlobType,
        id: Id,
        compression: u8,
        payload: &[u8],
        raw_length: u32,
    ) -> io::Result<()> {
        let offset = self.len;
        let mut sealed = std::mem::take(&mut self.scratch);
        sealed.clear();
        // Room for the tag too: grown by it, the buffer would double.
        sealed.reserve_exact(1 + payload.len() + TAG_LEN);
        sealed.push(compression);
        sealed.extend_from_slice(payload);
        let aad = PackEntry::aad(blob_type, &id);
        self.key.seal_suffix(Nonce::new(BLOB_NONCE_DOMAIN, offset), &aad, &mut sealed, 0);
        let written = self.emit(&sealed);
        let length = sealed.len() as u32;
        // A rare large blob's buffer is not kept for the rest of the pack.
        if sealed.capacity() <= SCRATCH_KEEP {
            self.scratch = sealed;
        }
        written?;
        self.entries.push(PackEntry { blob_type, id, offset, length, raw_length });
        Ok(())
    }

    /// Seals the header, appends the trailer and returns the finished pack.
    pub fn finish(mut self) -> io::Result<FinishedPack<W>> {
        let mut header = Vec::with_capacity(4 + self.entries.len() * ENTRY_LEN + TAG_LEN);
        header.extend_from_slice(&(self.entries.len() as u32).to_le_bytes());
        for e in &self.entries {
            e.encode(&mut header);
        }
        self.key.seal_in_place(Nonce::new(HEADER_NONCE_DOMAIN, 0), b"", &mut header);
        let mut tail = header;
        let header_len = (tail.len() as u32).to_le_bytes();
        tail.extend_from_slice(&self.salt);
        tail.extend_from_slice(&header_len);
        tail.push(self.key.cipher().to_byte());
        tail.extend_from_slice(&self.epoch.to_le_bytes());
        tail.push(0);
        tail.extend_from_slice(MAGIC);
        tail.extend_from_slice(&VERSION.to_le_bytes());
        self.emit(&tail)?;
        self.out.flush()?;
        Ok(FinishedPack {
            id: Id(*self.hasher.finalize().as_bytes()),
            len: self.len,
            bytes: self.out,
            salt: self.salt,
            cipher: self.key.cipher(),
            epoch: self.epoch,
            entries: self.entries,
        })
    }
}

/// A complete pack, ready to upload.
pub struct FinishedPack<W = Vec<u8>> {
    /// BLAKE3 of its bytes.
    pub id: Id,
    /// Its length in bytes.
    pub len: u64,
    /// Where its bytes were written.
    pub bytes: W,
    /// The salt of its key.
    pub salt: [u8; 32],
    /// Its cipher.
    pub cipher: Cipher,
    /// The epoch of the data key its key derives from.
    pub epoch: Epoch,
    /// Its blobs.
    pub entries: Vec<PackEntry>,
}

/// The decoded fixed trailer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trailer {
    /// Salt of the pack key.
    pub salt: [u8; 32],
    /// Length of the sealed header.
    pub header_len: u32,
    /// Cipher of the pack.
    pub cipher: Cipher,
    /// Epoch of the data key the pack key derives from.
    pub epoch: Epoch,
}

impl PackBuilder<io::BufWriter<std::fs::File>> {
    /// Moves every blob of `other`, a pack being written to a file, into this
    /// one: each is opened under `other`'s key and sealed again under this
    /// pack's own key at its offset here (so no nonce is used twice under one
    /// key). `other`'s file is dropped. On an error the packs must be abandoned.
    pub fn absorb(&mut self, other: PackBuilder<io::BufWriter<std::fs::File>>) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        let PackBuilder { key, out, entries, .. } = other;
        let file = out.into_inner().map_err(|e| e.into_error())?;
        let mut sealed = Vec::new();
        for e in entries {
            sealed.resize(e.length as usize, 0);
            file.read_exact_at(&mut sealed, e.offset)?;
            let aad = PackEntry::aad(e.blob_type, &e.id);
            let plain =
                key.open_in_place(Nonce::new(BLOB_NONCE_DOMAIN, e.offset), &aad, &mut sealed).ok_or_else(|| {
                    io::Error::other(format!("blob {} of a pack being written was altered", e.id.short()))
                })?;
            let (&compression, payload) =
                plain.split_first().ok_or_else(|| io::Error::other("a sealed blob without its compression byte"))?;
            self.add(e.blob_type, e.id, compression, payload, e.raw_length)?;
        }
        Ok(())
    }
}

/// Parses the last [`TRAILER_LEN`] bytes of a pack of `pack_len` bytes.
pub fn decode_trailer(t: &[u8], pack_len: u64) -> Result<Trailer, String> {
    if t.len() != TRAILER_LEN {
        return Err(format!("trailer is {} bytes, expected {TRAILER_LEN}", t.len()));
    }
    let mut r = Reader::new(t);
    let salt = r.array32().ok_or("truncated trailer")?;
    let header_len = r.u32().ok_or("truncated trailer")?;
    let cb = r.u8().ok_or("truncated trailer")?;
    let cipher = Cipher::from_byte(cb).ok_or_else(|| format!("unknown cipher byte {cb}"))?;
    let epoch = r.u16().ok_or("truncated trailer")?;
    r.take(1).ok_or("truncated trailer")?; // reserved
    if r.take(4) != Some(MAGIC.as_slice()) {
        return Err("not a coffer pack (bad magic)".into());
    }
    let v = r.u32().ok_or("truncated trailer")?;
    if v != VERSION {
        return Err(format!("pack version {v} is not supported by this coffer"));
    }
    if (header_len as u64) < (4 + TAG_LEN) as u64 || header_len as u64 + TRAILER_LEN as u64 > pack_len {
        return Err(format!("header length {header_len} does not fit in a pack of {pack_len} bytes"));
    }
    Ok(Trailer { salt, header_len, cipher, epoch })
}

/// Decrypts a sealed header and checks each entry lies before the header. `key` is
/// the pack key: derived from the trailer's salt and the data key of its epoch.
pub fn open_header(key: &AeadKey, trailer: &Trailer, sealed: &[u8], pack_len: u64) -> Result<Vec<PackEntry>, String> {
    let plain = key
        .open(Nonce::new(HEADER_NONCE_DOMAIN, 0), b"", sealed)
        .ok_or("header authentication failed: the pack was altered or truncated")?;
    let entries = decode_entries(&plain)?;
    let blobs_end = pack_len - TRAILER_LEN as u64 - trailer.header_len as u64;
    for e in &entries {
        if e.offset.checked_add(e.length as u64).is_none_or(|end| end > blobs_end) {
            return Err(format!("blob {} lies outside the pack's blob area", e.id.short()));
        }
    }
    Ok(entries)
}

/// Decompresses a zstd frame that must decode to exactly `raw` bytes into the
/// front of `out`, returning how many it decoded to. Memory is `raw` bytes (from
/// the authenticated header, and at most the largest chunk size allowed), never a
/// length the frame merely claims; a frame that decodes to more fails. `out` is
/// reused from one blob to the next: it grows to the largest blob it has held and
/// is only zeroed where it grows. Each thread keeps one decompression context.
fn decompress_bounded(payload: &[u8], raw: usize, out: &mut Vec<u8>) -> Result<usize, String> {
    thread_local! {
        static DECOMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
            const { std::cell::RefCell::new(None) };
    }
    let raw = raw.min(crate::chunker::ChunkerParams::MAX_MAX_SIZE as usize);
    if out.len() < raw {
        out.resize(raw, 0);
    }
    DECOMPRESSOR.with(|cell| {
        let mut slot = cell.borrow_mut();
        let d = match slot.as_mut() {
            Some(d) => d,
            None => slot.insert(zstd::bulk::Decompressor::new().map_err(|e| format!("zstd: {e}"))?),
        };
        d.decompress_to_buffer(payload, &mut out[..raw]).map_err(|e| format!("zstd: {e}"))
    })
}

/// Decrypts one blob's ciphertext. Returns the compression byte's payload decoded,
/// or a description of what is wrong. The caller checks the id.
pub fn open_blob(key: &AeadKey, entry: &PackEntry, sealed: &[u8]) -> Result<Vec<u8>, String> {
    let mut buf = sealed.to_vec();
    let mut out = Vec::new();
    let plain = open_blob_in_place(key, entry, &mut buf, &mut out)?;
    let (mut v, range) = match plain {
        Plain::Stored(range) => (buf, range),
        Plain::Decompressed(len) => (out, 0..len),
    };
    v.truncate(range.end);
    v.drain(..range.start);
    Ok(v)
}

/// Where [`open_blob_in_place`] left a blob's plaintext.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plain {
    /// Stored uncompressed: this range of the sealed bytes, decrypted in place.
    Stored(std::ops::Range<usize>),
    /// Decompressed into the front of the buffer given: this many bytes.
    Decompressed(usize),
}

/// Decrypts one blob's ciphertext where it lies (`sealed` is overwritten) and
/// decodes it: an uncompressed payload stays in `sealed`, a compressed one is
/// decompressed into the front of `out` (which is reused: see
/// [`decompress_bounded`]). Returns where the plaintext is, or a description of
/// what is wrong. The caller checks the id.
pub fn open_blob_in_place(
    key: &AeadKey,
    entry: &PackEntry,
    sealed: &mut [u8],
    out: &mut Vec<u8>,
) -> Result<Plain, String> {
    let nonce = Nonce::new(BLOB_NONCE_DOMAIN, entry.offset);
    let plain = key
        .open_in_place(nonce, &PackEntry::aad(entry.blob_type, &entry.id), sealed)
        .ok_or("authentication failed: the blob was altered")?;
    let (&comp, payload) = plain.split_first().ok_or("empty plaintext")?;
    let raw = entry.raw_length as usize;
    let (decoded, len) = match comp {
        COMPRESSION_NONE => (Plain::Stored(1..plain.len()), payload.len()),
        COMPRESSION_ZSTD => {
            let len = decompress_bounded(payload, raw, out)?;
            (Plain::Decompressed(len), len)
        }
        c => return Err(format!("unknown compression byte {c}")),
    };
    if len != raw {
        return Err(format!("decoded to {len} bytes, the index says {raw}"));
    }
    Ok(decoded)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_and_read_back() {
        let dk = Key::random();
        let mut b = PackBuilder::new(&dk, 0, Cipher::Aes256Gcm, 0);
        let ids = [Id([1; 32]), Id([2; 32])];
        b.add(BlobType::Data, ids[0], COMPRESSION_NONE, b"hello", 5).unwrap();
        let z = zstd::bulk::compress(&[7u8; 1000], 3).unwrap();
        b.add(BlobType::Tree, ids[1], COMPRESSION_ZSTD, &z, 1000).unwrap();
        let p = b.finish().unwrap();
        assert_eq!(p.id, Id::hash_of(&p.bytes));
        assert_eq!(p.len, p.bytes.len() as u64);
        let n = p.bytes.len() as u64;
        let t = decode_trailer(&p.bytes[p.bytes.len() - TRAILER_LEN..], n).unwrap();
        let hstart = p.bytes.len() - TRAILER_LEN - t.header_len as usize;
        let key = pack_key(&dk, t.cipher, &t.salt);
        let entries = open_header(&key, &t, &p.bytes[hstart..p.bytes.len() - TRAILER_LEN], n).unwrap();
        assert_eq!(entries, p.entries);
        let e = entries[1];
        let blob = open_blob(&key, &e, &p.bytes[e.offset as usize..(e.offset + e.length as u64) as usize]).unwrap();
        assert_eq!(blob, vec![7u8; 1000]);
        // A blob presented at the wrong offset or with the wrong id fails.
        let mut moved = e;
        moved.offset = 0;
        assert!(open_blob(&key, &moved, &p.bytes[e.offset as usize..(e.offset + e.length as u64) as usize]).is_err());
    }

    #[test]
    fn the_sealing_buffer_is_sized_once_and_passes_to_the_next_pack() {
        let dk = Key::random();
        let big = vec![9u8; (1 << 20) + 5];
        let mut a = PackBuilder::new(&dk, 0, Cipher::Aes256Gcm, 0);
        a.add(BlobType::Data, Id([1; 32]), COMPRESSION_NONE, &big, big.len() as u32).unwrap();
        let scratch = a.take_scratch();
        // Room for the compression byte, the blob and the tag, and no more: grown
        // by the tag it would have doubled past what a builder keeps.
        assert_eq!(scratch.capacity(), 1 + big.len() + TAG_LEN);
        let at = scratch.as_ptr();
        let mut b = PackBuilder::new(&dk, 0, Cipher::Aes256Gcm, 0);
        b.reuse_scratch(scratch);
        b.add(BlobType::Data, Id([2; 32]), COMPRESSION_NONE, &big[..1000], 1000).unwrap();
        let back = b.take_scratch();
        assert_eq!(back.as_ptr(), at, "the same buffer");
        // What it sealed reads back.
        let mut c = PackBuilder::new(&dk, 0, Cipher::Aes256Gcm, 0);
        c.reuse_scratch(vec![0xee; 4096]);
        c.add(BlobType::Data, Id([3; 32]), COMPRESSION_NONE, b"reused", 6).unwrap();
        let p = c.finish().unwrap();
        let t = decode_trailer(&p.bytes[p.bytes.len() - TRAILER_LEN..], p.len).unwrap();
        let e = p.entries[0];
        let key = pack_key(&dk, t.cipher, &t.salt);
        let sealed = &p.bytes[e.offset as usize..(e.offset + u64::from(e.length)) as usize];
        assert_eq!(open_blob(&key, &e, sealed).unwrap(), b"reused");
    }

    #[test]
    fn a_pack_written_to_a_file_reads_back_like_one_in_memory() {
        let dk = Key::random();
        let file = tempfile::tempfile().unwrap();
        let mut b = PackBuilder::with_output(&dk, 3, Cipher::Aes256Gcm, io::BufWriter::new(file));
        for i in 0..50u8 {
            b.add(BlobType::Data, Id([i; 32]), COMPRESSION_NONE, &vec![i; 1000 * i as usize], 1000 * i as u32).unwrap();
        }
        let p = b.finish().unwrap();
        let mut file = p.bytes.into_inner().unwrap();
        let mut bytes = Vec::new();
        io::Seek::rewind(&mut file).unwrap();
        io::Read::read_to_end(&mut file, &mut bytes).unwrap();
        assert_eq!(bytes.len() as u64, p.len);
        assert_eq!(p.id, Id::hash_of(&bytes));
        let t = trailer_of(&bytes).unwrap();
        assert_eq!(t.epoch, 3);
        let key = pack_key(&dk, t.cipher, &t.salt);
        let entries = open_header(&key, &t, header_of(&bytes, &t), p.len).unwrap();
        assert_eq!(entries, p.entries);
        for (i, e) in entries.iter().enumerate() {
            let blob = open_blob(&key, e, &bytes[e.offset as usize..(e.offset + e.length as u64) as usize]).unwrap();
            assert_eq!(blob, vec![i as u8; 1000 * i]);
        }
    }

    #[test]
    fn a_pack_absorbed_into_another_reads_back_from_it_sealed_anew() {
        let dk = Key::random();
        let spooled =
            || PackBuilder::with_output(&dk, 0, Cipher::Aes256Gcm, io::BufWriter::new(tempfile::tempfile().unwrap()));
        let (mut a, mut b) = (spooled(), spooled());
        a.add(BlobType::Data, Id([1; 32]), COMPRESSION_NONE, b"first", 5).unwrap();
        let z = zstd::bulk::compress(&[9u8; 3000], 3).unwrap();
        b.add(BlobType::Data, Id([2; 32]), COMPRESSION_ZSTD, &z, 3000).unwrap();
        b.add(BlobType::Data, Id([3; 32]), COMPRESSION_NONE, b"third", 5).unwrap();
        let b_entries = b.entries.clone();
        a.absorb(b).unwrap();
        let p = a.finish().unwrap();
        let mut file = p.bytes.into_inner().unwrap();
        let mut bytes = Vec::new();
        io::Seek::rewind(&mut file).unwrap();
        io::Read::read_to_end(&mut file, &mut bytes).unwrap();
        let t = trailer_of(&bytes).unwrap();
        let key = pack_key(&dk, t.cipher, &t.salt);
        let entries = open_header(&key, &t, header_of(&bytes, &t), p.len).unwrap();
        let ids: Vec<Id> = entries.iter().map(|e| e.id).collect();
        assert_eq!(ids, [Id([1; 32]), Id([2; 32]), Id([3; 32])]);
        let want: [&[u8]; 3] = [b"first", &[9u8; 3000], b"third"];
        for (e, want) in entries.iter().zip(want) {
            let blob = open_blob(&key, e, &bytes[e.offset as usize..(e.offset + e.length as u64) as usize]).unwrap();
            assert_eq!(blob, want);
        }
        // Sealed again at their new offsets, not copied.
        for (moved, was) in entries[1..].iter().zip(&b_entries) {
            assert_ne!(moved.offset, was.offset);
        }
    }

    #[test]
    fn decompression_is_bounded_by_the_authenticated_length() {
        let z = zstd::bulk::compress(&[5u8; 100_000], 3).unwrap();
        let mut out = Vec::new();
        assert_eq!(decompress_bounded(&z, 100_000, &mut out).unwrap(), 100_000);
        assert_eq!(out, vec![5u8; 100_000]);
        // A frame decoding to more than the header says fails, even into a buffer
        // that has held more before.
        assert!(decompress_bounded(&z, 99_999, &mut out).is_err());
        assert!(decompress_bounded(&z, 99_999, &mut Vec::new()).is_err());
        // To fewer: decoded, and refused by the length check of open_blob.
        assert_eq!(decompress_bounded(&z, 100_001, &mut out).unwrap(), 100_000);
        assert!(decompress_bounded(b"not zstd", 10, &mut out).is_err());
        // The context kept by the thread is reusable after an error, and the
        // buffer is reused: it grew to the largest length asked for, no further.
        assert_eq!(decompress_bounded(&z, 100_000, &mut out).unwrap(), 100_000);
        assert_eq!(&out[..100_000], &[5u8; 100_000][..]);
        assert_eq!(out.len(), 100_001);
    }

    #[test]
    fn a_blob_opened_in_place_is_the_blob_opened_from_a_copy() {
        let dk = Key::random();
        let mut b = PackBuilder::new(&dk, 0, Cipher::Aes256Gcm, 0);
        let z = zstd::bulk::compress(&[7u8; 3000], 3).unwrap();
        b.add(BlobType::Data, Id([1; 32]), COMPRESSION_NONE, b"hello", 5).unwrap();
        b.add(BlobType::Data, Id([2; 32]), COMPRESSION_ZSTD, &z, 3000).unwrap();
        let p = b.finish().unwrap();
        let t = decode_trailer(&p.bytes[p.bytes.len() - TRAILER_LEN..], p.len).unwrap();
        let key = pack_key(&dk, t.cipher, &t.salt);
        let mut out = vec![9u8; 10_000];
        for e in &p.entries {
            let sealed = &p.bytes[e.offset as usize..(e.offset + e.length as u64) as usize];
            let copy = open_blob(&key, e, sealed).unwrap();
            let mut buf = sealed.to_vec();
            let plain = match open_blob_in_place(&key, e, &mut buf, &mut out).unwrap() {
                Plain::Stored(r) => buf[r].to_vec(),
                Plain::Decompressed(n) => out[..n].to_vec(),
            };
            assert_eq!(plain, copy);
            // Altered, it fails either way.
            let mut bad = sealed.to_vec();
            bad[3] ^= 1;
            assert!(open_blob(&key, e, &bad).is_err());
            assert!(open_blob_in_place(&key, e, &mut bad, &mut out).is_err());
        }
    }

    fn one_blob_pack(dk: &Key, epoch: Epoch) -> FinishedPack {
        let mut b = PackBuilder::new(dk, epoch, Cipher::ChaCha20Poly1305, 0);
        b.add(BlobType::Data, Id([1; 32]), COMPRESSION_NONE, b"hello", 5).unwrap();
        b.finish().unwrap()
    }

    fn trailer_of(p: &[u8]) -> Result<Trailer, String> {
        decode_trailer(&p[p.len() - TRAILER_LEN..], p.len() as u64)
    }

    fn header_of<'a>(p: &'a [u8], t: &Trailer) -> &'a [u8] {
        &p[p.len() - TRAILER_LEN - t.header_len as usize..p.len() - TRAILER_LEN]
    }

    #[test]
    fn trailer_layout_and_epoch_round_trip() {
        let dk = Key::random();
        let p = one_blob_pack(&dk, 0x0302);
        let t = &p.bytes[p.bytes.len() - TRAILER_LEN..];
        assert_eq!(&t[..32], &p.salt);
        assert_eq!(t[36], Cipher::ChaCha20Poly1305.to_byte());
        assert_eq!(&t[37..39], &[0x02, 0x03], "epoch u16 LE");
        assert_eq!(t[39], 0, "reserved");
        assert_eq!(&t[40..44], b"CFPK");
        assert_eq!(&t[44..48], &1u32.to_le_bytes());
        let tr = trailer_of(&p.bytes).unwrap();
        assert_eq!(tr.epoch, 0x0302);
        assert_eq!(p.epoch, 0x0302);
        let key = pack_key(&dk, tr.cipher, &tr.salt);
        assert_eq!(open_header(&key, &tr, header_of(&p.bytes, &tr), p.bytes.len() as u64).unwrap(), p.entries);
        // An epoch-0 trailer is byte for byte what the three zero reserved bytes were.
        let p0 = one_blob_pack(&dk, 0);
        assert_eq!(&p0.bytes[p0.bytes.len() - 11..p0.bytes.len() - 8], &[0, 0, 0]);
    }

    #[test]
    fn tampered_trailer_epoch_fails_authentication() {
        // The epoch picks the data key: presenting the header to another epoch's key,
        // as a reader would after the epoch bytes were changed, fails the tag.
        let (k0, k1) = (Key::random(), Key::random());
        let mut p = one_blob_pack(&k1, 1).bytes;
        let at = p.len() - TRAILER_LEN + 37;
        p[at] = 0;
        let t = trailer_of(&p).unwrap();
        assert_eq!(t.epoch, 0);
        let err = open_header(&pack_key(&k0, t.cipher, &t.salt), &t, header_of(&p, &t), p.len() as u64).unwrap_err();
        assert!(err.contains("authentication failed"), "{err}");
    }

    #[test]
    fn garbage_trailers_are_errors() {
        assert!(decode_trailer(&[0u8; 48], 100).is_err());
        assert!(decode_trailer(&[0u8; 47], 100).is_err());
        assert!(decode_entries(&[5, 0, 0, 0, 1]).is_err());
    }
}
