//! Tools for tests below the binary (unit tests here, and other crates' tests
//! with the feature `testing`): a repository in memory, one fast key derivation,
//! and deterministic data.

use std::sync::Arc;

use coffer_backend::{Backend, MemBackend};

use crate::crypto::ScryptParams;
use crate::crypto::sign::SigningKey;
use crate::repo::{InitOptions, Repository};

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
