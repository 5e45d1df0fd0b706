//! Per-core throughput of each backup stage: chunking, blob id hashing, AEAD
//! sealing, compression (with the skip probe), pack assembly, and the key
//! derivation that opens a repository. Run with
//! `cargo bench -p coffer-core --bench stages`; figures are recorded in
//! docs/performance.md.

use std::hint::black_box;

use coffer_core::chunker::{Chunker, ChunkerParams};
use coffer_core::compress;
use coffer_core::crypto::{AeadKey, Cipher, Key, Nonce, ScryptParams, blob_id, scrypt_kdf_on};
use coffer_core::format::pack::{BlobType, COMPRESSION_NONE, PackBuilder};
use coffer_core::id::Id;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

mod common;
use common::noise;

/// Text-like data that compresses about 4:1.
fn text(len: usize) -> Vec<u8> {
    let words = ["backup", "chunk", "repository", "snapshot", "index", "pack", "tree", "blob", "key", "restore"];
    let r = noise(len, 7);
    let mut out = Vec::with_capacity(len + 16);
    let mut i = 0;
    while out.len() < len {
        out.extend_from_slice(words[r[i % r.len()] as usize % words.len()].as_bytes());
        out.push(if r[(i + 1) % r.len()].is_multiple_of(8) { b'\n' } else { b' ' });
        i += 2;
    }
    out.truncate(len);
    out
}

fn stages(c: &mut Criterion) {
    const MIB: usize = 1 << 20;
    let data = noise(64 * MIB, 1);
    let chunk = &data[..MIB];

    let mut g = c.benchmark_group("chunker");
    g.throughput(Throughput::Bytes(data.len() as u64));
    g.sample_size(10);
    let chunker = Chunker::new(&Key([3; 32]), ChunkerParams::default());
    g.bench_function("fastcdc-1MiB-avg", |b| b.iter(|| black_box(chunker.chunk_lengths(black_box(&data))).len()));
    g.finish();

    let mut g = c.benchmark_group("blob-id");
    g.throughput(Throughput::Bytes(MIB as u64));
    let key = Key([5; 32]);
    g.bench_function("keyed-blake3-1MiB", |b| b.iter(|| blob_id(&key, black_box(chunk))));
    g.finish();

    let mut g = c.benchmark_group("aead");
    g.throughput(Throughput::Bytes(MIB as u64));
    for cipher in [Cipher::Aes256Gcm, Cipher::ChaCha20Poly1305] {
        let k = AeadKey::new(cipher, &Key([9; 32]));
        let mut n = 0u64;
        g.bench_function(format!("{cipher:?}-seal-1MiB"), |b| {
            b.iter(|| {
                n += 1;
                k.seal(Nonce::new(0, n), b"", black_box(chunk))
            })
        });
    }
    g.finish();

    let mut g = c.benchmark_group("compression");
    g.throughput(Throughput::Bytes(MIB as u64));
    g.sample_size(20);
    let txt = text(MIB);
    g.bench_function("zstd3-text-1MiB", |b| b.iter(|| compress::compress(black_box(&txt), 3)));
    g.bench_function("zstd3-noise-1MiB-probe-skips", |b| b.iter(|| compress::compress(black_box(chunk), 3)));
    g.bench_function("zstd3-noise-1MiB-no-probe", |b| b.iter(|| zstd::bulk::compress(black_box(chunk), 3)));
    g.finish();

    let mut g = c.benchmark_group("pack");
    g.throughput(Throughput::Bytes(16 * MIB as u64));
    g.sample_size(20);
    let data_key = Key([11; 32]);
    g.bench_function("assemble-16x1MiB", |b| {
        b.iter(|| {
            let mut p = PackBuilder::new(&data_key, 0, Cipher::preferred(), 17 * MIB);
            for i in 0..16u8 {
                p.add(BlobType::Data, Id([i; 32]), COMPRESSION_NONE, &data[i as usize * MIB..][..MIB], MIB as u32)
                    .unwrap();
            }
            p.finish().unwrap().bytes.len()
        })
    });
    // The same into a spool file, as a backup assembles its packs.
    let spool = std::env::temp_dir();
    g.bench_function("assemble-16x1MiB-spooled", |b| {
        b.iter(|| {
            let file = std::io::BufWriter::new(tempfile::tempfile_in(&spool).unwrap());
            let mut p = PackBuilder::with_output(&data_key, 0, Cipher::preferred(), file);
            for i in 0..16u8 {
                p.add(BlobType::Data, Id([i; 32]), COMPRESSION_NONE, &data[i as usize * MIB..][..MIB], MIB as u32)
                    .unwrap();
            }
            p.finish().unwrap().len
        })
    });
    g.finish();

    // Opening a repository: the default key derivation, its lanes one after
    // the other (every command) and two side by side (a remote restore).
    let mut g = c.benchmark_group("scrypt");
    g.sample_size(10);
    for threads in [1, 2] {
        g.bench_function(format!("default-{threads}-threads"), |b| {
            b.iter(|| scrypt_kdf_on(b"passphrase", &[7; 32], ScryptParams::DEFAULT, threads).unwrap().0[0])
        });
    }
    g.finish();
}

criterion_group!(benches, stages);
criterion_main!(benches);
