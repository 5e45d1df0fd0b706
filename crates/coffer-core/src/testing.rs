//! Tools for tests below the binary (unit tests here, and other crates' tests
//! with the feature `testing`): a repository in memory, one fast key derivation,
//! deterministic data, and small snapshots built without a file system
//! ([`TestTree`], [`TestRepo::snapshot`]).

use std::sync::Arc;

use coffer_backend::{Backend, MemBackend};

use crate::crypto::ScryptParams;
use crate::crypto::sign::SigningKey;
use crate::error::Result;
use crate::format::bytes::Bytes;
use crate::format::pack::BlobType;
use crate::format::snapshot::{SNAPSHOT_VERSION, Snapshot};
use crate::format::tree::{Node, NodeKind, Timestamp, Tree};
use crate::id::Id;
use crate::repo::{BlobSaver, InitOptions, Repository};

/// A key derivation cost for tests only: fast, and far too weak for real keys.
pub const FAST_KDF: ScryptParams = ScryptParams { log_n: 4, r: 8, p: 1 };

/// The passphrase of [`test_repo`]'s repositories.
pub const PASSPHRASE: &[u8] = b"test passphrase";

/// Deterministic incompressible bytes (xorshift64), different for each `seed`.
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A repository in memory with a registered writer.
pub struct TestRepo {
    /// The storage, to inspect or damage.
    pub backend: Arc<MemBackend>,
    /// The open repository.
    pub repo: Repository,
    /// The writer's key, registered in the repository.
    pub key: SigningKey,
}

impl TestRepo {
    /// Stores `tree` (blobs, packs and index files) and a snapshot of it signed by
    /// the test writer; returns the snapshot's id and its root tree's.
    pub fn snapshot(&self, tree: &TestTree) -> (Id, Id) {
        let saver = BlobSaver::new(&self.repo);
        let root = tree.store(&saver).expect("store a test tree");
        saver.finish().expect("finish storing a test tree");
        let id = self.repo.save_snapshot(&snapshot_of(root, &self.key), &self.key).expect("store a test snapshot");
        (id, root)
    }

    /// Opens the same storage again, as a second process would.
    pub fn reopen(&self) -> Repository {
        Repository::open(self.backend.clone() as Arc<dyn Backend>, PASSPHRASE).expect("reopen the test repository")
    }
}

/// A new repository in memory with [`FAST_KDF`], small packs (1 MiB) and a
/// registered writer.
pub fn test_repo() -> TestRepo {
    test_repo_with(InitOptions { kdf: FAST_KDF, pack_size: 1 << 20, ..InitOptions::default() })
}

/// A new repository in memory made with `opts`, and a registered writer.
pub fn test_repo_with(opts: InitOptions) -> TestRepo {
    let backend = Arc::new(MemBackend::new());
    let repo =
        Repository::init(backend.clone() as Arc<dyn Backend>, PASSPHRASE, &opts).expect("init a test repository");
    let key = SigningKey::generate();
    repo.register_writer(&key.public(), "test-host".into(), "test-user".into()).expect("register the test writer");
    TestRepo { backend, repo, key }
}

/// A directory to store as a tree blob: files, whose content is the given
/// chunks (one data blob each), and subdirectories. Names are sorted when stored.
#[derive(Clone, Debug, Default)]
pub struct TestTree {
    entries: Vec<(String, TestEntry)>,
}

#[derive(Clone, Debug)]
enum TestEntry {
    File(Vec<Vec<u8>>),
    Dir(TestTree),
}

impl TestTree {
    /// An empty directory.
    pub fn new() -> TestTree {
        TestTree::default()
    }

    /// Adds a file made of `chunks`.
    pub fn file(mut self, name: &str, chunks: &[&[u8]]) -> TestTree {
        self.entries.push((name.into(), TestEntry::File(chunks.iter().map(|c| c.to_vec()).collect())));
        self
    }

    /// Adds a subdirectory.
    pub fn dir(mut self, name: &str, tree: TestTree) -> TestTree {
        self.entries.push((name.into(), TestEntry::Dir(tree)));
        self
    }

    /// Stores the tree's blobs with `saver` (the caller finishes it); returns the
    /// root tree's id.
    pub fn store(&self, saver: &BlobSaver) -> Result<Id> {
        let mut nodes = Vec::with_capacity(self.entries.len());
        for (name, entry) in &self.entries {
            let mut node = test_node(name, NodeKind::File);
            match entry {
                TestEntry::File(chunks) => {
                    for c in chunks {
                        node.content.push(saver.save(BlobType::Data, c)?.0);
                    }
                    node.size = chunks.iter().map(|c| c.len() as u64).sum();
                    node.digest = Some(Id(*blake3::hash(&chunks.concat()).as_bytes()));
                }
                TestEntry::Dir(sub) => {
                    node.kind = NodeKind::Dir;
                    node.mode = 0o755;
                    node.subtree = Some(sub.store(saver)?);
                }
            }
            nodes.push(node);
        }
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(saver.save(BlobType::Tree, &Tree { nodes }.encode())?.0)
    }
}

/// A tree entry named `name` of `kind` with plain metadata (mode 0644, owner 0,
/// a fixed time) and no content; tests override the fields they need.
pub fn test_node(name: &str, kind: NodeKind) -> Node {
    Node::new(Bytes(name.as_bytes().to_vec()), kind, 0o644, Timestamp(1_700_000_000, 0))
}

/// A snapshot of the tree `root` by `key`'s writer, taken now, with an empty
/// Merkle tree (enough for everything but `check` and proofs).
pub fn snapshot_of(root: Id, key: &SigningKey) -> Snapshot {
    Snapshot {
        version: SNAPSHOT_VERSION,
        time: humantime::format_rfc3339_nanos(std::time::SystemTime::now()).to_string(),
        hostname: "test-host".into(),
        username: "test-user".into(),
        paths: vec!["/test".into()],
        tags: vec![],
        tree: root,
        parent: None,
        excludes: vec![],
        skipped_count: 0,
        skipped: vec![],
        summary: Default::default(),
        program: "coffer tests".into(),
        writer: key.public(),
        history: vec![],
        merkle_root: Id([0; 32]),
        merkle_leaves: 0,
        merkle_key: Id([0; 32]),
        copied_from: None,
        imported_from: None,
        written: None,
        server_log: None,
        signature: Default::default(),
    }
}

/// The stored packs of `repo`'s storage, split by what they hold according to
/// its index files: (packs holding data blobs, packs holding tree blobs). Since
/// writers keep trees in packs of their own (docs/design.md#packs), the two are
/// disjoint for packs written by this version.
pub fn packs_by_type(backend: &Arc<MemBackend>) -> (std::collections::HashSet<Id>, std::collections::HashSet<Id>) {
    let repo = Repository::open(backend.clone() as Arc<dyn Backend>, PASSPHRASE).expect("reopen the test repository");
    repo.load_index().expect("load the index");
    let index = repo.index();
    let (mut data, mut trees) = (std::collections::HashSet::new(), std::collections::HashSet::new());
    for e in index.iter() {
        let id = index.packs()[e.pack as usize].id;
        match e.entry.blob_type {
            BlobType::Data => data.insert(id),
            BlobType::Tree => trees.insert(id),
        };
    }
    (data, trees)
}
