//! Fills a repository's index with records of `N` made-up data blobs, so a backup
//! can be measured against an index of that size without storing `N` chunks:
//! `COFFER_PASSWORD=... cargo run --release -p coffer-core --example prefill_index -- REPO N`.
//!
//! The records point at packs that do not exist: the repository is for
//! measuring backups only (`check` reports every one of those packs missing).
//! With `--pack-files`, an empty file stands in for each pack, so that the
//! `data/` listing is as long as the index says (`check` then reports them
//! damaged instead).
//! Blobs sit 16 to a pack, as 1 MiB chunks do in 16 MiB packs.

use std::sync::Arc;

use coffer_backend::OpendalBackend;
use coffer_core::crypto::Cipher;
use coffer_core::format::ObjectKind;
use coffer_core::format::envelope::SealedKind;
use coffer_core::format::index::{self, PackRecord};
use coffer_core::format::pack::{BlobType, PackEntry};
use coffer_core::id::Id;
use coffer_core::repo::Repository;

/// Packs per index file written here (a backup writes 32; bigger files keep the
/// object count of a large index reasonable).
const PACKS_PER_FILE: u64 = 8192;
const BLOBS_PER_PACK: u64 = 16;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (repo, n, pack_files) = match args.as_slice() {
        [_, repo, n] => (repo, n, false),
        [_, repo, n, flag] if flag == "--pack-files" => (repo, n, true),
        _ => return Err("usage: prefill_index REPO N [--pack-files]".into()),
    };
    let n: u64 = n.replace('_', "").parse()?;
    let password = std::env::var("COFFER_PASSWORD").map_err(|_| "set COFFER_PASSWORD")?;
    let repo_dir = repo;
    let repo = Repository::open(Arc::new(OpendalBackend::local(std::path::Path::new(repo))?), password.as_bytes())?;
    let packs = n.div_ceil(BLOBS_PER_PACK);
    let mut first = 0;
    while first < packs {
        let last = (first + PACKS_PER_FILE).min(packs);
        let records: Vec<PackRecord> = (first..last).map(|p| record(p, n)).collect();
        repo.save_sealed(SealedKind::Index, &index::encode(&records))?;
        if pack_files {
            for r in &records {
                let path = std::path::Path::new(repo_dir).join(ObjectKind::Pack.path(&r.id));
                std::fs::create_dir_all(path.parent().expect("a pack's path has a folder"))?;
                std::fs::write(path, b"")?;
            }
        }
        first = last;
    }
    println!("{n} blobs in {packs} packs indexed");
    Ok(())
}

fn record(p: u64, n: u64) -> PackRecord {
    let entries = (p * BLOBS_PER_PACK..((p + 1) * BLOBS_PER_PACK).min(n))
        .map(|i| PackEntry {
            blob_type: BlobType::Data,
            id: Id::hash_of(format!("prefilled blob {i}").as_bytes()),
            offset: (i % BLOBS_PER_PACK) << 20,
            length: 1 << 20,
            raw_length: 1 << 20,
        })
        .collect();
    PackRecord {
        id: Id::hash_of(format!("prefilled pack {p}").as_bytes()),
        salt: [0; 32],
        cipher: Cipher::Aes256Gcm,
        epoch: 0,
        entries,
    }
}
