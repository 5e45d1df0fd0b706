//! The in-memory index: memory per indexed blob and lookup cost at 10^5, 10^6
//! and 10^7 blobs. Memory is measured as the growth of the process's resident set
//! while the index is built (and also computed from the structure's capacity).
//! Run with `cargo bench -p coffer-core --bench index`.

use std::hint::black_box;
use std::time::Instant;

use coffer_core::crypto::Cipher;
use coffer_core::format::index::PackRecord;
use coffer_core::format::pack::{BlobType, PackEntry};
use coffer_core::id::Id;
use coffer_core::repo::MasterIndex;
use criterion::{Criterion, criterion_group, criterion_main};

fn id(i: u64) -> Id {
    Id::hash_of(&i.to_le_bytes())
}

fn rss_bytes() -> u64 {
    // Return freed heap to the kernel first, so the figure is what is in use.
    // SAFETY: malloc_trim only releases free memory held by the allocator.
    unsafe { libc::malloc_trim(0) };
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    s.split_whitespace().nth(1).and_then(|p| p.parse::<u64>().ok()).unwrap_or(0) * 4096
}

/// The index records of `n` blobs in packs of 16 (as with 1 MiB chunks in 16 MiB packs).
fn records(n: u64) -> Vec<PackRecord> {
    let mut recs = Vec::with_capacity((n / 16 + 1) as usize);
    for p in 0..n.div_ceil(16) {
        let entries = (p * 16..(p * 16 + 16).min(n))
            .map(|i| PackEntry {
                blob_type: BlobType::Data,
                id: id(i),
                offset: (i % 16) << 20,
                length: 1 << 20,
                raw_length: 1 << 20,
            })
            .collect();
        recs.push(PackRecord { id: id(u64::MAX - p), salt: [0; 32], cipher: Cipher::Aes256Gcm, epoch: 0, entries });
    }
    recs
}

fn index(c: &mut Criterion) {
    for n in [100_000u64, 1_000_000, 10_000_000] {
        // Measure the index alone: the decoded index files it is built from are
        // freed before the second reading.
        let before = rss_bytes();
        let recs = records(n);
        let start = Instant::now();
        let mut idx = MasterIndex::default();
        idx.add_packs(&recs).expect("valid records");
        let built = start.elapsed();
        drop(recs);
        let after = rss_bytes();
        eprintln!(
            "index of {n} blobs: built in {built:.2?}; {:.1} bytes/blob computed, {:.1} bytes/blob measured (RSS growth, packs table included)",
            idx.memory_bytes() as f64 / n as f64,
            after.saturating_sub(before) as f64 / n as f64
        );
        // Ids are computed ahead, so the loop measures lookups only.
        let present: Vec<Id> = (0..4096u64).map(|k| id(k * 7919 % n)).collect();
        let absent: Vec<Id> = (0..4096u64).map(|k| id(n + k)).collect();
        let mut g = c.benchmark_group(format!("index-{n}"));
        let mut i = 0usize;
        g.bench_function("lookup-present", |b| {
            b.iter(|| {
                i = (i + 1) & 4095;
                black_box(idx.contains(&present[i], BlobType::Data))
            })
        });
        let mut j = 0usize;
        g.bench_function("lookup-absent", |b| {
            b.iter(|| {
                j = (j + 1) & 4095;
                black_box(idx.contains(&absent[j], BlobType::Data))
            })
        });
        // The per-chunk work of a backup that finds its chunks already stored:
        // hash a 1 MiB chunk with the id key, then look the id up. Compare the
        // throughput across index sizes.
        let key = coffer_core::crypto::Key([7; 32]);
        let chunk = vec![0x5au8; 1 << 20];
        g.throughput(criterion::Throughput::Bytes(chunk.len() as u64));
        g.bench_function("hash-and-lookup-1MiB-chunk", |b| {
            b.iter(|| {
                let id = coffer_core::crypto::blob_id(&key, black_box(&chunk));
                black_box(idx.contains(&id, BlobType::Data))
            })
        });
        g.finish();
        drop(idx);
    }
}

criterion_group!(benches, index);
criterion_main!(benches);
