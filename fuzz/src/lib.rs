//! Shared by the fuzz targets and the seed generator (`examples/gen_seeds.rs`): the fixed
//! keys the targets decrypt with, and the input layouts of targets that take more than one
//! argument, so that seeds and targets agree.

use coffer_core::crypto::{AeadKey, Cipher, DataKeys, Key, Nonce};
use coffer_core::format::pack::{BLOB_NONCE_DOMAIN, BlobType, PackEntry, pack_key};
use coffer_core::id::Id;
use coffer_core::crypto::sign::SigningKey;

/// The data key of `envelope_open` and `pack_open_blob`. Fixed, so that seeds sealed with
/// it open; the fuzzer cannot forge a tag, so inputs it derives from them mostly exercise
/// the checks made before and after decryption.
pub const DATA_KEY: Key = Key([0x42; 32]);

/// The seed of the writer key that `signed_split` signs with and that signed the seeds of
/// `signed_split` and `proof_decode_verify`.
pub const SIGNING_SEED: [u8; 32] = [0x33; 32];

/// The writer key with [`SIGNING_SEED`].
pub fn signing_key() -> SigningKey {
    SigningKey::from_seed(&SIGNING_SEED)
}

/// The commitment `signed_split` signs its input with.
pub const COMMITMENT: [u8; 32] = [0xc5; 32];

/// The data key of epoch 1 in [`data_keys`].
pub const DATA_KEY_EPOCH_1: Key = Key([0x43; 32]);

/// The data keys `envelope_open` opens with: [`DATA_KEY`] for epoch 0 and
/// [`DATA_KEY_EPOCH_1`] for epoch 1, so that both a known and an unknown epoch are reached.
pub fn data_keys() -> DataKeys {
    DataKeys::from_vec(vec![DATA_KEY, DATA_KEY_EPOCH_1]).expect("two keys")
}

/// The pack salt of `pack_open_blob`.
pub const PACK_SALT: [u8; 32] = [0x5a; 32];

/// The blob id of `pack_open_blob` (part of each blob's associated data).
pub const BLOB_ID: Id = Id([0x07; 32]);

/// `pack_trailer` input: `pack_len (u64 LE) || trailer bytes`.
pub fn split_trailer_input(data: &[u8]) -> Option<(u64, &[u8])> {
    let (len, trailer) = data.split_at_checked(8)?;
    Some((u64::from_le_bytes(len.try_into().ok()?), trailer))
}

/// `pack_open_blob` input header length: flags (1) | offset (u64 LE) | raw_length (u32 LE).
pub const BLOB_HEADER_LEN: usize = 13;

/// Flag bit: the rest of the input is a blob *plaintext* (compression byte, payload) that the
/// target seals itself before calling `open_blob`, so that the fuzzer reaches decompression
/// and the length checks behind the AEAD. Without it the rest is the sealed blob as stored.
pub const FLAG_SEAL: u8 = 1;
/// Flag bit: tree blob (else data blob).
pub const FLAG_TREE: u8 = 2;
/// Flag bit: ChaCha20-Poly1305 (else AES-256-GCM).
pub const FLAG_CHACHA: u8 = 4;

/// A decoded `pack_open_blob` input: the key, the index entry and the sealed bytes.
pub struct BlobCase {
    /// The pack key.
    pub key: AeadKey,
    /// The index entry presented with the blob.
    pub entry: PackEntry,
    /// The sealed blob (ciphertext and tag).
    pub sealed: Vec<u8>,
}

/// Decodes a `pack_open_blob` input.
pub fn blob_case(data: &[u8]) -> Option<BlobCase> {
    let (head, rest) = data.split_at_checked(BLOB_HEADER_LEN)?;
    let flags = head[0];
    let offset = u64::from_le_bytes(head[1..9].try_into().ok()?);
    let raw_length = u32::from_le_bytes(head[9..13].try_into().ok()?);
    let cipher = if flags & FLAG_CHACHA != 0 { Cipher::ChaCha20Poly1305 } else { Cipher::Aes256Gcm };
    let blob_type = if flags & FLAG_TREE != 0 { BlobType::Tree } else { BlobType::Data };
    let key = pack_key(&DATA_KEY, cipher, &PACK_SALT);
    let sealed = if flags & FLAG_SEAL != 0 { seal_blob(&key, blob_type, offset, rest) } else { rest.to_vec() };
    let length = u32::try_from(sealed.len()).ok()?;
    let entry = PackEntry { blob_type, id: BLOB_ID, offset, length, raw_length };
    Some(BlobCase { key, entry, sealed })
}

/// Seals a blob plaintext the way `PackBuilder::add` does.
pub fn seal_blob(key: &AeadKey, blob_type: BlobType, offset: u64, plaintext: &[u8]) -> Vec<u8> {
    key.seal(Nonce::new(BLOB_NONCE_DOMAIN, offset), &PackEntry::aad(blob_type, &BLOB_ID), plaintext)
}
