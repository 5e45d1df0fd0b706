//! Fuzz-style test of every decoder of coffer's restic reader: random and mutated bytes,
//! from a seeded generator, fed to the key file, pack header, index, snapshot and tree
//! parsers, the unpacked-file decompression, Go's name unquoting and the timestamp
//! parser, and through a repository in memory to `pack_header`, `read_blob_at`,
//! `snapshots` and `load_index`. Nothing may panic, and no allocation may follow a length
//! read from the input before it was checked: a counting allocator bounds the peak of live
//! heap bytes during the run.

mod support;

use std::collections::BTreeMap;
use std::io::Write;

use std::sync::{Arc, Mutex};

use coffer_import::restic::crypto::{self, KdfParams, MasterKey};
use coffer_import::restic::{
    self, BlobType, Id, KeyFile, PackedBlob, ResticRepo, Timestamp, index, pack, snapshot, tree,
};
use coffer_import::{Source, SourceError};

#[global_allocator]
static ALLOC: support::Counting = support::Counting;

impl support::Rng {
    /// A few random edits of `input`.
    fn mutate(&mut self, input: &[u8]) -> Vec<u8> {
        let mut v = input.to_vec();
        for _ in 0..1 + self.below(6) {
            let at = self.below(v.len() + 1);
            match self.below(8) {
                0 if at < v.len() => v[at] ^= 1 << self.below(8),
                1 if at < v.len() => v[at] = self.byte(),
                2 => v.insert(at, self.byte()),
                3 if at < v.len() => {
                    v.remove(at);
                }
                4 => v.truncate(at),
                5 => {
                    let n = self.below(4) + 1;
                    let big = [b"4294967295", b"9999999999", b"1073741824", b"0000000000"][self.below(4)];
                    v.splice(at..at, big[..n.min(big.len())].iter().copied().chain(big.iter().copied()));
                }
                6 if !v.is_empty() => {
                    let s = self.below(v.len());
                    let e = (s + self.below(64)).min(v.len());
                    let chunk = v[s..e].to_vec();
                    v.splice(at..at, chunk);
                }
                _ => {
                    let n = self.below(16);
                    let r = self.bytes(n);
                    v.splice(at..at, r);
                }
            }
        }
        v
    }
}

#[derive(Default)]
struct MemSource(Mutex<BTreeMap<String, Vec<u8>>>);

impl MemSource {
    fn put(&self, name: &str, data: Vec<u8>) {
        self.0.lock().unwrap().insert(name.to_string(), data);
    }
    fn remove_under(&self, dir: &str) {
        self.0.lock().unwrap().retain(|k, _| !k.starts_with(&format!("{dir}/")));
    }
}

impl Source for MemSource {
    fn list(&self, dir: &str) -> Result<Vec<(String, u64)>, SourceError> {
        let m = self.0.lock().unwrap();
        Ok(m.iter()
            .filter(|(k, _)| k.starts_with(&format!("{dir}/")))
            .map(|(k, v)| (k.clone(), v.len() as u64))
            .collect())
    }
    fn read_range(&self, name: &str, offset: u64, len: u64) -> Result<Vec<u8>, SourceError> {
        let m = self.0.lock().unwrap();
        let v = m.get(name).ok_or_else(|| SourceError::not_found(name))?;
        let s = (offset as usize).min(v.len());
        let e = (offset.saturating_add(len) as usize).min(v.len());
        Ok(v[s..e].to_vec())
    }
    fn size(&self, name: &str) -> Result<u64, SourceError> {
        let m = self.0.lock().unwrap();
        m.get(name).map(|v| v.len() as u64).ok_or_else(|| SourceError::not_found(name))
    }
}

fn b64(b: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(b)
}

const TREE_JSON: &str = r#"{"nodes":[{"name":"a\\xff\\\"b","type":"file","mode":8389101,"mtime":"2026-01-01T00:00:00.123456789+01:00","atime":"2026-01-01T00:00:00Z","ctime":"2026-01-01T00:00:00Z","uid":1000,"gid":1000,"user":"u","group":"g","inode":12,"device_id":5,"links":2,"size":5,"content":["0000000000000000000000000000000000000000000000000000000000000001"],"extended_attributes":[{"name":"user.x","value":"AAE="}],"generic_attributes":{"windows.creation_time":"x"}},{"name":"d","type":"dir","mode":2147484141,"subtree":"0000000000000000000000000000000000000000000000000000000000000002"},{"name":"l","type":"symlink","linktarget":"x","linktarget_raw":"/w=="},{"name":"dev","type":"chardev","device":1234}]}"#;

const INDEX_JSON: &str = r#"{"packs":[{"id":"00000000000000000000000000000000000000000000000000000000000000aa","blobs":[{"id":"0000000000000000000000000000000000000000000000000000000000000001","type":"data","offset":0,"length":37},{"id":"0000000000000000000000000000000000000000000000000000000000000002","type":"tree","offset":37,"length":60,"uncompressed_length":200}]}]}"#;

const SNAPSHOT_JSON: &str = r#"{"time":"2026-12-02T01:04:52.625945645Z","parent":"0000000000000000000000000000000000000000000000000000000000000003","tree":"0000000000000000000000000000000000000000000000000000000000000002","paths":["/tmp/x"],"hostname":"h","username":"root","uid":1,"gid":2,"tags":["a","b"],"excludes":["*.o"],"program_version":"restic 0.19.1","summary":{"backup_start":"2026-12-02T01:04:52Z","files_new":1,"data_blobs":1}}"#;

/// A pack of two blobs (one compressed) and the blobs' plaintexts.
fn make_pack(key: &MasterKey) -> Vec<u8> {
    let a = b"hello blob".to_vec();
    let b = TREE_JSON.as_bytes().to_vec();
    let bz = zstd::encode_all(&b[..], 3).unwrap();
    let sa = key.seal(&[1; 16], &a);
    let sb = key.seal(&[2; 16], &bz);
    let mut header = vec![0u8];
    header.extend_from_slice(&(sa.len() as u32).to_le_bytes());
    header.extend_from_slice(&Id::hash(&a).0);
    header.push(3);
    header.extend_from_slice(&(sb.len() as u32).to_le_bytes());
    header.extend_from_slice(&(b.len() as u32).to_le_bytes());
    header.extend_from_slice(&Id::hash(&b).0);
    let sh = key.seal(&[3; 16], &header);
    let mut pack = sa;
    pack.extend(sb);
    pack.extend_from_slice(&sh);
    pack.extend_from_slice(&(sh.len() as u32).to_le_bytes());
    pack
}

#[test]
fn decoders_survive_random_input() {
    let mut rng = support::Rng(0xc0ffee);
    let password = b"fuzz";
    let master = MasterKey::new([7; 32], [8; 16], [9; 16]);
    let salt = [5u8; 64];
    let user = crypto::derive(password, &salt, KdfParams { log_n: 10, r: 1, p: 1 }).unwrap();
    let master_json =
        format!(r#"{{"mac":{{"k":"{}","r":"{}"}},"encrypt":"{}"}}"#, b64(&[8; 16]), b64(&[9; 16]), b64(&[7; 32]));
    let key_json = format!(
        r#"{{"created":"2026-12-02T01:04:52Z","username":"u","hostname":"h","kdf":"scrypt","N":1024,"r":1,"p":1,"salt":"{}","data":"{}"}}"#,
        b64(&salt),
        b64(&user.seal(&[4; 16], master_json.as_bytes()))
    );
    let src = Arc::new(MemSource::default());
    let key_name = format!("keys/{}", Id::hash(key_json.as_bytes()));
    src.put(&key_name, key_json.clone().into_bytes());
    let config = br#"{"version":2,"id":"5f2a","chunker_polynomial":"25b468838dcb75"}"#;
    src.put("config", master.seal(&[6; 16], config));
    let mut repo = ResticRepo::open(src.clone(), password).unwrap();
    assert_eq!(repo.version(), 2);
    let kf = KeyFile::parse(&key_name, key_json.as_bytes()).unwrap();
    assert!(kf.open(password).unwrap().is_some());
    assert!(kf.open(b"nope").unwrap().is_none());

    let pack_bytes = make_pack(&master);
    let pack_id = Id::hash(&pack_bytes);
    let pack_name = pack::pack_name(&pack_id);
    src.put(&pack_name, pack_bytes.clone());
    let blobs = repo.pack_header(&pack_id).unwrap();
    assert_eq!(blobs.len(), 2);
    assert_eq!(repo.read_blob_at(&pack_id, &blobs[0]).unwrap(), b"hello blob");
    assert_eq!(repo.read_blob_at(&pack_id, &blobs[1]).unwrap(), TREE_JSON.as_bytes());
    let t = tree::parse_tree(TREE_JSON.as_bytes()).unwrap();
    assert_eq!((t.nodes.len(), t.rejected.len()), (4, 0));
    assert_eq!(t.nodes[0].name, b"a\xff\"b");
    assert_eq!(t.nodes[0].st_mode(), 0o104755);
    assert_eq!(t.nodes[2].link_target.as_deref(), Some(&[0xff][..]));
    assert!(index::parse_index(INDEX_JSON.as_bytes()).is_ok());
    assert!(snapshot::parse_snapshot(SNAPSHOT_JSON.as_bytes()).is_ok());

    let compressible: Vec<u8> = b"some text that compresses well ".repeat(4000);
    let mut frame = vec![2u8];
    frame.extend(zstd::encode_all(&compressible[..], 3).unwrap());
    assert_eq!(restic::decode_unpacked(frame.clone(), 2, 1 << 20).unwrap(), compressible);
    // A bomb: 256 MiB of zeros in a few KiB. The limit stops it as it goes.
    let mut enc = zstd::Encoder::new(Vec::new(), 19).unwrap();
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..256 {
        enc.write_all(&zeros).unwrap();
    }
    drop(zeros);
    let mut bomb = vec![2u8];
    bomb.extend(enc.finish().unwrap());
    let base = support::start_peak();
    let err = restic::decode_unpacked(bomb.clone(), 2, 1 << 20).unwrap_err();
    assert!(err.contains("more than"), "{err}");
    let peak = support::peak_above(base);
    assert!(peak < 8 << 20, "the bomb took {peak} bytes of heap");

    let header_plain = {
        let mut h = vec![0u8];
        h.extend_from_slice(&100u32.to_le_bytes());
        h.extend_from_slice(&[1; 32]);
        h.push(2);
        h.extend_from_slice(&100u32.to_le_bytes());
        h.extend_from_slice(&500u32.to_le_bytes());
        h.extend_from_slice(&[2; 32]);
        h
    };

    // From here on the peak of live heap bytes is what the run may take.
    let base = support::start_peak();
    let iterations = 20_000;
    for i in 0..iterations {
        let _ = KeyFile::parse("keys/f", &rng.mutate(key_json.as_bytes())).map(|k| {
            // Only cheap parameters are worth deriving from in a loop.
            if k.params.log_n <= 10 && u64::from(k.params.r) * u64::from(k.params.p) <= 2 && i % 50 == 0 {
                let _ = k.open(password);
            }
        });
        let _ = pack::parse_header(&rng.mutate(&header_plain));
        let n = rng.below(200);
        let _ = pack::parse_header(&rng.bytes(n));
        let _ = index::parse_index(&rng.mutate(INDEX_JSON.as_bytes()));
        let _ = snapshot::parse_snapshot(&rng.mutate(SNAPSHOT_JSON.as_bytes()));
        if let Ok(t) = tree::parse_tree(&rng.mutate(TREE_JSON.as_bytes())) {
            for n in &t.nodes {
                let _ = n.st_mode();
                assert!(tree::check_name(&n.name).is_ok());
            }
        }
        let s = String::from_utf8_lossy(&rng.mutate(br#"a\xff\"b\u00e9\U0001F600\101"#)).into_owned();
        let _ = tree::go_unquote(&s);
        let _ = Timestamp::parse(&String::from_utf8_lossy(&rng.mutate(b"2026-12-02T01:04:52.625945645+01:00")));
        let _ = restic::decode_unpacked(rng.mutate(&frame), 2, 1 << 20);
        if i % 20 == 0 {
            let _ = restic::decode_unpacked(rng.mutate(&bomb), 2, 1 << 20);
        }
        let _ = restic::zstd_decompress(&rng.mutate(&frame[1..]), 1 << 16);

        // Through the repository: a damaged pack, its header and its blobs.
        let damaged = rng.mutate(&pack_bytes);
        src.put(&pack_name, damaged);
        let _ = repo.pack_header(&pack_id);
        for b in &blobs {
            let mut b = *b;
            if rng.below(4) == 0 {
                b.offset = rng.next() % 4096;
                b.length = (rng.next() % 8192) as u32;
                b.uncompressed_length = [None, Some(rng.next() as u32)][rng.below(2)];
            }
            let _ = repo.read_blob_at(&pack_id, &b);
        }
        // Sealed but malformed snapshots, index files and trees, as a writer holding the
        // key could plant them.
        if i % 10 == 0 {
            src.remove_under("snapshots");
            src.remove_under("index");
            let snap = master.seal(&[1; 16], &rng.mutate(SNAPSHOT_JSON.as_bytes()));
            src.put(&format!("snapshots/{}", Id::hash(&snap)), snap);
            let idx = master.seal(&[1; 16], &rng.mutate(INDEX_JSON.as_bytes()));
            src.put(&format!("index/{}", Id::hash(&idx)), idx);
            let raw = rng.mutate(&frame);
            let bad = master.seal(&[1; 16], &raw);
            src.put(&format!("index/{}", Id::hash(&bad)), bad);
            let _ = repo.snapshots().unwrap();
            let report = repo.load_index().unwrap();
            assert_eq!(report.files_read + report.damaged.len(), 2);
            let _ = repo.rebuild_index_from_packs().unwrap();
            let tree_json = rng.mutate(TREE_JSON.as_bytes());
            let fake = PackedBlob {
                id: Id::hash(&tree_json),
                blob_type: BlobType::Tree,
                offset: 0,
                length: (tree_json.len() + crypto::OVERHEAD) as u32,
                uncompressed_length: None,
            };
            let sealed = master.seal(&[1; 16], &tree_json);
            src.put(&pack::pack_name(&Id([0; 32])), sealed);
            let _ = repo.read_blob_at(&Id([0; 32]), &fake);
        }
    }
    let peak = support::peak_above(base);
    eprintln!("{iterations} rounds; peak of live heap above the start: {peak} bytes");
    assert!(peak < 32 << 20, "peak heap {peak} bytes: an allocation followed an unchecked length");
}
