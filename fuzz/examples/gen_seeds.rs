//! Writes the seed corpus: a few valid encodings per target, under `corpus/<target>/`, then
//! checks that every seed passes its decoder. `cargo run --example gen_seeds` (from `fuzz/`);
//! with `-- --check`, only checks the seeds already there. Sealed seeds use random salts, so
//! their bytes change on every run (their number and meaning do not).

use std::fs;
use std::path::Path;

use coffer_core::chunker::ChunkerParams;
use coffer_core::crypto::{Cipher, ScryptParams};
use coffer_core::format::FORMAT_VERSION;
use coffer_core::format::bytes::Bytes;
use coffer_core::format::config::{Config, DEFAULT_COMPRESSION_LEVEL, DEFAULT_PACK_SIZE};
use coffer_core::format::envelope::{self, SealedKind};
use coffer_core::format::index::{self, PackRecord};
use coffer_core::format::keyfile::{KeyFile, MasterKeys};
use coffer_core::format::pack::{
    BlobType, COMPRESSION_NONE, COMPRESSION_ZSTD, PackBuilder, PackEntry, TRAILER_LEN, pack_key,
};
use coffer_core::format::signed;
use coffer_core::format::snapshot::{Skipped, Snapshot, Summary};
use coffer_core::format::layout::{BackendSpec, BackendState, Layout, LayoutBackend, Table};
use coffer_core::format::tombstone::{Forgotten, Tombstone};
use coffer_core::format::tree::{Node, NodeKind, Timestamp, Tree, Xattr};
use coffer_core::format::writer::WriterRecord;
use coffer_core::id::Id;
use coffer_core::merkle;
use coffer_core::format::proof::Proof;
use coffer_fuzz::{
    COMMITMENT, DATA_KEY, DATA_KEY_EPOCH_1, FLAG_CHACHA, FLAG_SEAL, FLAG_TREE, PACK_SALT, data_keys, seal_blob,
    signing_key,
};

fn write(target: &str, name: &str, bytes: &[u8]) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus").join(target);
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join(name), bytes).unwrap();
}

fn node(name: &[u8], kind: NodeKind) -> Node {
    Node {
        name: Bytes(name.to_vec()),
        kind,
        mode: 0o644,
        uid: 1000,
        gid: 1000,
        user: None,
        group: None,
        mtime: Timestamp(1_700_000_000, 123_456_789),
        ctime: Timestamp(1_700_000_001, 0),
        size: 0,
        inode: 42,
        device: 2049,
        links: 1,
        rdev: 0,
        target: None,
        xattrs: vec![],
        content: vec![],
        content_parts: vec![],
        digest: (kind == NodeKind::File).then_some(Id([4; 32])),
        sparse: false,
        subtree: None,
    }
}

fn trees() -> Vec<Tree> {
    let mut file = node(b"a.txt", NodeKind::File);
    file.size = 5;
    file.content = vec![Id([1; 32]), Id([2; 32])];
    file.digest = Some(Id([4; 32]));
    file.user = Some("me".into());
    file.group = Some("staff".into());
    file.xattrs = vec![Xattr { name: Bytes(b"user.comment".to_vec()), value: Bytes(vec![0xff, 0]) }];
    file.sparse = true;
    let mut dir = node(&[b'b', 0xff], NodeKind::Dir);
    dir.mode = 0o755;
    dir.subtree = Some(Id([3; 32]));
    let mut link = node(b"link", NodeKind::Symlink);
    link.target = Some(Bytes(b"../x".to_vec()));
    let mut dev = node(b"null", NodeKind::Chardev);
    dev.rdev = 0x103;
    vec![Tree::default(), Tree { nodes: vec![file, dir, link, dev, node(b"pipe", NodeKind::Fifo)] }]
}

fn snapshots() -> Vec<Snapshot> {
    let minimal = Snapshot {
        version: FORMAT_VERSION,
        time: "2026-01-02T03:04:05.123456789Z".into(),
        hostname: "host".into(),
        username: "user".into(),
        paths: vec!["/home/user".into()],
        tags: vec![],
        tree: Id([9; 32]),
        parent: None,
        excludes: vec![],
        skipped_count: 0,
        skipped: vec![],
        summary: Summary::default(),
        program: "coffer 0.1.0".into(),
        writer: signing_key().public(),
        history: vec![],
        merkle_root: Id(merkle::root(&[])),
        merkle_leaves: 0,
        merkle_key: Id([0x4b; 32]),
        signature: Default::default(),
    };
    let full = Snapshot {
        tags: vec!["nightly".into()],
        parent: Some(Id([8; 32])),
        history: vec![Id([0x10; 32]), Id([0x11; 32])],
        merkle_leaves: 3,
        excludes: vec!["target/".into(), "*.tmp".into()],
        skipped_count: 1,
        skipped: vec![Skipped { path: "/home/user/secret".into(), error: "permission denied".into() }],
        summary: Summary {
            files_new: 3,
            dirs: 2,
            bytes_read: 100,
            bytes_total: 100,
            duration_ms: 7,
            ..Summary::default()
        },
        ..minimal.clone()
    };
    vec![minimal, full]
}

fn config() -> Config {
    Config {
        version: FORMAT_VERSION,
        id: Id([0xc0; 32]),
        chunker: ChunkerParams::default(),
        compression_level: DEFAULT_COMPRESSION_LEVEL,
        pack_size: DEFAULT_PACK_SIZE,
    }
}

fn entry(blob_type: BlobType, id: u8, offset: u64, length: u32, raw_length: u32) -> PackEntry {
    PackEntry { blob_type, id: Id([id; 32]), offset, length, raw_length }
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some("--check") {
        check_seeds();
        return;
    }
    for (i, t) in trees().iter().enumerate() {
        write("tree_decode", &format!("seed-{i}.json"), &t.encode());
    }
    for (i, s) in snapshots().iter().enumerate() {
        write("snapshot_decode", &format!("seed-{i}.json"), &s.encode());
    }
    write("config_decode", "seed-0.json", &config().encode());

    let fast = ScryptParams { log_n: 4, r: 8, p: 1 };
    for (i, cipher) in [Cipher::Aes256Gcm, Cipher::ChaCha20Poly1305].into_iter().enumerate() {
        let kf = KeyFile::create(&MasterKeys::random(), b"pw", fast, cipher, "host".into(), "user".into()).unwrap();
        write("keyfile_decode", &format!("seed-{i}.json"), &kf.encode());
    }

    let records = vec![
        PackRecord {
            id: Id([0xa1; 32]),
            salt: [0xa2; 32],
            cipher: Cipher::Aes256Gcm,
            epoch: 0,
            entries: vec![entry(BlobType::Data, 1, 0, 40, 23), entry(BlobType::Tree, 2, 40, 100, 300)],
        },
        PackRecord {
            id: Id([0xb1; 32]),
            salt: [0xb2; 32],
            cipher: Cipher::ChaCha20Poly1305,
            epoch: 1,
            entries: vec![],
        },
    ];
    write("index_decode", "seed-0.bin", &index::encode(&[]));
    write("index_decode", "seed-1.bin", &index::encode(&records));

    // A real pack, for its trailer and its header's plaintext.
    let mut b = PackBuilder::new(&DATA_KEY, 0, Cipher::Aes256Gcm, 0);
    b.add(BlobType::Data, Id([1; 32]), COMPRESSION_NONE, b"hello", 5).unwrap();
    let z = zstd_frame();
    b.add(BlobType::Tree, Id([2; 32]), COMPRESSION_ZSTD, &z, 1000).unwrap();
    let pack = b.finish().unwrap();
    let n = pack.bytes.len();
    let mut t = (n as u64).to_le_bytes().to_vec();
    t.extend_from_slice(&pack.bytes[n - TRAILER_LEN..]);
    write("pack_trailer", "seed-0.bin", &t);
    // The same pack's trailer had it been written under epoch 1.
    t[8 + 37] = 1;
    write("pack_trailer", "seed-1.bin", &t);
    let mut header = (pack.entries.len() as u32).to_le_bytes().to_vec();
    for e in &pack.entries {
        e.encode(&mut header);
    }
    write("pack_entries", "seed-0.bin", &header);
    write("pack_entries", "seed-1.bin", &0u32.to_le_bytes());

    let snap = snapshots().pop().unwrap().encode();
    write(
        "envelope_open",
        "config.bin",
        &envelope::seal(&DATA_KEY, 0, Cipher::Aes256Gcm, SealedKind::Config, &config().encode()),
    );
    write(
        "envelope_open",
        "index.bin",
        &envelope::seal(&DATA_KEY_EPOCH_1, 1, Cipher::ChaCha20Poly1305, SealedKind::Index, &index::encode(&records)),
    );
    write(
        "envelope_open",
        "snapshot.bin",
        &envelope::seal(&DATA_KEY, 0, Cipher::Aes256Gcm, SealedKind::Snapshot, &snap),
    );
    write(
        "envelope_open",
        "writer.bin",
        &envelope::seal(&DATA_KEY, 0, Cipher::ChaCha20Poly1305, SealedKind::Writer, &writer_record().encode()),
    );
    write(
        "envelope_open",
        "tombstone.bin",
        &envelope::seal(&DATA_KEY, 0, Cipher::Aes256Gcm, SealedKind::Tombstone, &tombstones().pop().unwrap().encode()),
    );

    // pack_open_blob: flags | offset | raw_length | rest.
    let blob_input = |flags: u8, offset: u64, raw: u32, rest: &[u8]| {
        let mut v = vec![flags];
        v.extend_from_slice(&offset.to_le_bytes());
        v.extend_from_slice(&raw.to_le_bytes());
        v.extend_from_slice(rest);
        v
    };
    let mut plain_none = vec![COMPRESSION_NONE];
    plain_none.extend_from_slice(b"hello");
    let mut plain_zstd = vec![COMPRESSION_ZSTD];
    plain_zstd.extend_from_slice(&z);
    write("pack_open_blob", "plain-none.bin", &blob_input(FLAG_SEAL, 0, 5, &plain_none));
    write("pack_open_blob", "plain-zstd.bin", &blob_input(FLAG_SEAL | FLAG_TREE | FLAG_CHACHA, 22, 1000, &plain_zstd));
    // Already sealed, as stored (opens without FLAG_SEAL).
    let key = pack_key(&DATA_KEY, Cipher::Aes256Gcm, &PACK_SALT);
    let sealed = seal_blob(&key, BlobType::Data, 64, &plain_none);
    write("pack_open_blob", "sealed-none.bin", &blob_input(0, 64, 5, &sealed));

    // signed_split: signed snapshot and tombstone as stored, and a signed object whose
    // signature does not verify (the sealed part altered after signing).
    let key = signing_key();
    let sealed_snap = envelope::seal(&DATA_KEY, 0, Cipher::Aes256Gcm, SealedKind::Snapshot, &snap);
    write("signed_split", "snapshot.bin", &signed::sign(sealed_snap.clone(), &COMMITMENT, &key));
    let tomb = tombstones().pop().unwrap().encode();
    let sealed_tomb = envelope::seal(&DATA_KEY, 0, Cipher::ChaCha20Poly1305, SealedKind::Tombstone, &tomb);
    write("signed_split", "tombstone.bin", &signed::sign(sealed_tomb, &[0; 32], &key));
    let mut altered = signed::sign(b"sealed bytes".to_vec(), &COMMITMENT, &key);
    altered[0] ^= 1;
    write("signed_split", "bad-signature.bin", &altered);

    for (i, t) in tombstones().iter().enumerate() {
        write("tombstone_decode", &format!("seed-{i}.json"), &t.encode());
    }
    write("writer_decode", "seed-0.json", &writer_record().encode());
    for (i, l) in layouts().iter().enumerate() {
        write("layout_decode", &format!("seed-{i}.bin"), &l.encode());
    }

    for (i, p) in proofs().iter().enumerate() {
        write("proof_decode_verify", &format!("seed-{i}.json"), &p.encode());
    }

    check_seeds();
}

/// A layout over three backends in the middle of a migration, and one over one.
fn layouts() -> Vec<Layout> {
    let backend = |name: &str, capacity, zone: Option<&str>, state| LayoutBackend {
        spec: BackendSpec { name: name.into(), capacity, zone: zone.map(Into::into) },
        state,
    };
    vec![
        Layout {
            version: 4,
            writer: signing_key().public(),
            time: "2026-11-24T10:00:00Z".into(),
            backends: vec![
                backend("disk", 1 << 40, None, BackendState::Active),
                backend("s3-eu", 2 << 40, Some("eu"), BackendState::Active),
                backend("old", 1 << 30, Some("us"), BackendState::Removing),
            ],
            table: Table { partitions: 4, replicas: 2, owners: vec![0, 1, 1, 0, 0, 1, 1, 0] },
            previous: Some(Table { partitions: 4, replicas: 2, owners: vec![0, 2, 2, 1, 1, 0, 0, 2] }),
        },
        Layout {
            version: 1,
            writer: signing_key().public(),
            time: "2026-11-24T10:00:00Z".into(),
            backends: vec![backend("only", 5, None, BackendState::Active)],
            table: Table { partitions: 1, replicas: 1, owners: vec![0] },
            previous: None,
        },
    ]
}

fn tombstones() -> Vec<Tombstone> {
    let empty = Tombstone {
        version: FORMAT_VERSION,
        time: "2026-02-03T04:05:06.000000001Z".into(),
        hostname: "host".into(),
        username: "user".into(),
        writer: signing_key().public(),
        history: vec![],
        forgotten: vec![],
        program: "coffer 0.1.0".into(),
        signature: Default::default(),
    };
    let full = Tombstone {
        history: vec![Id([0x20; 32])],
        forgotten: vec![
            Forgotten {
                id: Id([0x21; 32]),
                time: "2026-01-02T03:04:05.123456789Z".into(),
                hostname: "host".into(),
                paths: vec!["/home/user".into()],
                history: vec![Id([0x22; 32])],
                end: "2026-01-02T03:04:05.123456789Z".into(),
            },
            Forgotten {
                id: Id([0x23; 32]),
                time: "2026-01-01T00:00:00Z".into(),
                hostname: "other".into(),
                paths: vec![],
                history: vec![],
                end: String::new(),
            },
        ],
        ..empty.clone()
    };
    vec![empty, full]
}

fn writer_record() -> WriterRecord {
    WriterRecord {
        version: FORMAT_VERSION,
        public_key: signing_key().public(),
        hostname: "host".into(),
        username: "user".into(),
        created: "2026-01-01T00:00:00.5Z".into(),
    }
}

/// Valid proofs, built the way `proof::prove` builds them: a snapshot over `n` files,
/// sealed and signed, and the proof of one of its files.
fn proofs() -> Vec<Proof> {
    let merkle_key = [0x4b; 32];
    let mut out = Vec::new();
    for (n, index) in [(1usize, 0usize), (5, 3), (8, 7)] {
        let files: Vec<(Vec<u8>, [u8; 32])> = (0..n)
            .map(|i| (format!("/home/user/f{i}").into_bytes(), Id::hash_of(format!("content {i}").as_bytes()).0))
            .collect();
        let leaves: Vec<merkle::Hash> =
            files.iter().map(|(p, d)| merkle::file_leaf(&merkle::leaf_salt(&merkle_key, p), d, p)).collect();
        let root = merkle::root(&leaves);
        let snap = Snapshot {
            merkle_root: Id(root),
            merkle_leaves: n as u64,
            merkle_key: Id(merkle_key),
            ..snapshots().remove(0)
        };
        let sealed = envelope::seal(&DATA_KEY, 0, Cipher::Aes256Gcm, SealedKind::Snapshot, &snap.encode());
        let stored = signed::sign(sealed, &snap.commitment(), &signing_key());
        let (path, digest) = &files[index];
        out.push(Proof {
            magic: coffer_core::format::proof::MAGIC.into(),
            version: coffer_core::format::proof::VERSION,
            snapshot_id: Id::hash_of(&stored),
            snapshot: stored.iter().map(|b| format!("{b:02x}")).collect(),
            path: Bytes(path.clone()),
            digest: Id(*digest),
            salt: Id(merkle::leaf_salt(&merkle_key, path)),
            index: index as u64,
            leaves: n as u64,
            siblings: merkle::inclusion_proof(&leaves, index).unwrap().into_iter().map(Id).collect(),
        });
    }
    out
}

/// Every seed is a valid input: it passes the decoder it seeds, so fuzzing starts from the
/// accepting paths.
fn check_seeds() {
    use coffer_core::format::pack::{decode_entries, decode_trailer, open_blob};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let mut n = 0;
    for target in fs::read_dir(&dir).unwrap() {
        let target = target.unwrap().path();
        for f in fs::read_dir(&target).unwrap() {
            let f = f.unwrap().path();
            let f_name = f.file_name().unwrap().to_string_lossy().into_owned();
            let data = fs::read(&f).unwrap();
            let ok = match target.file_name().unwrap().to_str().unwrap() {
                "tree_decode" => Tree::decode(&data).is_ok(),
                "snapshot_decode" => Snapshot::decode(&data).is_ok(),
                "config_decode" => Config::decode(&data).is_ok(),
                "keyfile_decode" => KeyFile::decode(&data).is_ok(),
                "index_decode" => index::decode(&data).is_ok(),
                "pack_entries" => decode_entries(&data).is_ok(),
                "pack_trailer" => {
                    let (len, t) = coffer_fuzz::split_trailer_input(&data).unwrap();
                    decode_trailer(t, len).is_ok()
                }
                "envelope_open" => [
                    SealedKind::Config,
                    SealedKind::Index,
                    SealedKind::Snapshot,
                    SealedKind::Writer,
                    SealedKind::Tombstone,
                ]
                .into_iter()
                .any(|k| envelope::open(&data_keys(), k, &data).is_ok()),
                "pack_open_blob" => {
                    let c = coffer_fuzz::blob_case(&data).unwrap();
                    open_blob(&c.key, &c.entry, &c.sealed).is_ok()
                }
                // All but one seed verify; the other is a block over altered bytes.
                "signed_split" => matches!(signed::split(&data), Ok((sealed, Some(b)))
                    if b.verify(sealed) == !f_name.starts_with("bad-")),
                "tombstone_decode" => Tombstone::decode(&data).is_ok(),
                "writer_decode" => WriterRecord::decode(&data).is_ok(),
                "layout_decode" => Layout::decode(&data).is_ok(),
                "proof_decode_verify" => Proof::decode(&data).is_ok_and(|p| p.verify().is_ok()),
                other => panic!("seeds for unknown target {other}"),
            };
            assert!(ok, "seed {} of {} does not decode", n, target.display());
            n += 1;
        }
    }
    println!("{n} seeds checked");
}

/// 1000 bytes of a repeating pattern as a zstd frame (the payload of a compressed blob).
fn zstd_frame() -> Vec<u8> {
    zstd::bulk::compress(&(0..1000u32).map(|i| (i % 7) as u8).collect::<Vec<_>>(), 3).unwrap()
}
