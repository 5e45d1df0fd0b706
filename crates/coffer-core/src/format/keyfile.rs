//! Key files: the repository's master secrets wrapped by a passphrase.
//! Stored as plaintext JSON under `keys/<id>`. See docs/design.md#key-files.
//!
//! The key-encryption key is `scrypt(passphrase, salt, log_n, r, p)` (32 bytes) with
//! a random 32-byte salt per key file, so each key-encryption key seals exactly one
//! message and the nonce `Nonce::new(0, 0)` is never reused. The associated data is
//! [`AAD`]. The sealed plaintext is the JSON of [`MasterKeys`]: the id and chunker
//! keys, and the data keys of every epoch up to the current one.

use serde::{Deserialize, Serialize};
use zeroize::Zeroize;

use crate::crypto::{
    AeadKey, Cipher, DataKeys, Key, Nonce, ScryptParams, TAG_LEN, random_array, scrypt_kdf, scrypt_kdf_on,
};

/// Associated data of the wrapped secrets.
pub const AAD: &[u8] = b"coffer v1 key file";
/// Key file layout version.
pub const VERSION: u32 = 2;

/// The repository's master secrets, each for one purpose.
#[derive(Clone, Debug)]
pub struct MasterKeys {
    /// Encrypt packs, index files, snapshots and the config (through derived subkeys),
    /// by epoch; the last is current. Rotation adds one.
    pub data: DataKeys,
    /// Keys the BLAKE3 blob ids. Never changes: a new one would break deduplication.
    pub id: Key,
    /// Seeds the chunker's gear table. Never changes: a new one would move every
    /// chunk boundary, so nothing new would deduplicate against stored data.
    pub chunker: Key,
}

#[derive(Serialize, Deserialize)]
struct MasterRepr {
    data: Vec<String>,
    id: String,
    chunker: String,
}

impl Drop for MasterRepr {
    fn drop(&mut self) {
        self.data.iter_mut().for_each(Zeroize::zeroize);
        self.id.zeroize();
        self.chunker.zeroize();
    }
}

impl MasterKeys {
    /// Fresh random secrets, with one data key (epoch 0).
    pub fn random() -> MasterKeys {
        MasterKeys { data: DataKeys::new(Key::random()), id: Key::random(), chunker: Key::random() }
    }

    /// The same secrets with a new data key for the next epoch, which becomes current.
    /// The id and chunker keys stay, so new data deduplicates against old.
    pub fn rotated(&self) -> Result<MasterKeys, String> {
        Ok(MasterKeys { data: self.data.rotated()?, id: self.id.clone(), chunker: self.chunker.clone() })
    }

    fn encode(&self) -> Vec<u8> {
        let r = MasterRepr {
            data: self.data.as_slice().iter().map(|k| hex::encode(k.0)).collect(),
            id: hex::encode(self.id.0),
            chunker: hex::encode(self.chunker.0),
        };
        serde_json::to_vec(&r).expect("serializes")
    }

    fn decode(buf: &[u8]) -> Result<MasterKeys, String> {
        let r: MasterRepr = serde_json::from_slice(buf).map_err(|e| format!("master keys do not parse: {e}"))?;
        let key = |s: &str| -> Result<Key, String> {
            let mut k = [0u8; 32];
            hex::decode_to_slice(s, &mut k).map_err(|_| "master key is not 64 hex digits".to_string())?;
            Ok(Key(k))
        };
        let data = r.data.iter().map(|s| key(s)).collect::<Result<Vec<_>, _>>()?;
        Ok(MasterKeys { data: DataKeys::from_vec(data)?, id: key(&r.id)?, chunker: key(&r.chunker)? })
    }
}

/// A stored key file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyFile {
    /// Key file layout version ([`VERSION`]).
    pub version: u32,
    /// When the key was added (RFC 3339).
    pub created: String,
    /// Host it was added on.
    pub hostname: String,
    /// User who added it.
    pub username: String,
    /// Always `"scrypt"`.
    pub kdf: String,
    /// scrypt parameters.
    pub scrypt: ScryptParams,
    /// KDF salt, hex.
    pub salt: String,
    /// Cipher of the wrapped secrets.
    pub cipher: Cipher,
    /// Wrapped secrets: ciphertext and tag, hex.
    pub data: String,
}

impl KeyFile {
    /// Wraps `master` under `passphrase`.
    pub fn create(
        master: &MasterKeys,
        passphrase: &[u8],
        params: ScryptParams,
        cipher: Cipher,
        hostname: String,
        username: String,
    ) -> Result<KeyFile, String> {
        let salt: [u8; 32] = random_array();
        let kek = scrypt_kdf(passphrase, &salt, params)?;
        let mut plain = master.encode();
        let sealed = AeadKey::new(cipher, &kek).seal(Nonce::new(0, 0), AAD, &plain);
        plain.zeroize();
        Ok(KeyFile {
            version: VERSION,
            created: humantime::format_rfc3339_nanos(std::time::SystemTime::now()).to_string(),
            hostname,
            username,
            kdf: "scrypt".into(),
            scrypt: params,
            salt: hex::encode(salt),
            cipher,
            data: hex::encode(sealed),
        })
    }

    /// Serializes to JSON.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec_pretty(self).expect("key files always serialize")
    }

    /// Parses and validates the outer layer (no passphrase needed).
    pub fn decode(buf: &[u8]) -> Result<KeyFile, String> {
        let k: KeyFile = serde_json::from_slice(buf).map_err(|e| format!("key file does not parse: {e}"))?;
        if k.version != VERSION {
            return Err(format!("key file version {} is not supported by this coffer", k.version));
        }
        if k.kdf != "scrypt" {
            return Err(format!("key file uses unknown KDF {:?}", k.kdf));
        }
        k.scrypt.validate()?;
        match hex::decode(&k.salt) {
            Ok(s) if s.len() == 32 => {}
            _ => return Err("salt is not 32 bytes of hex".into()),
        }
        match hex::decode(&k.data) {
            Ok(d) if d.len() > TAG_LEN => {}
            _ => return Err("wrapped secrets are not hex, or too short".into()),
        }
        Ok(k)
    }

    /// Unwraps the master secrets. `Ok(None)` means the passphrase is wrong (or the
    /// wrapped secrets were altered: the two cannot be told apart).
    pub fn open(&self, passphrase: &[u8]) -> Result<Option<MasterKeys>, String> {
        self.open_on(passphrase, 1)
    }

    /// [`KeyFile::open`], deriving the key with its lanes on up to `threads`
    /// threads ([`scrypt_kdf_on`]).
    pub fn open_on(&self, passphrase: &[u8], threads: usize) -> Result<Option<MasterKeys>, String> {
        let salt = hex::decode(&self.salt).map_err(|_| "salt is not hex")?;
        let sealed = hex::decode(&self.data).map_err(|_| "data is not hex")?;
        let kek = scrypt_kdf_on(passphrase, &salt, self.scrypt, threads)?;
        let Some(mut plain) = AeadKey::new(self.cipher, &kek).open(Nonce::new(0, 0), AAD, &sealed) else {
            return Ok(None);
        };
        let keys = MasterKeys::decode(&plain);
        plain.zeroize();
        keys.map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testing::FAST_KDF as FAST;

    #[test]
    fn wrap_unwrap() {
        let m = MasterKeys::random();
        let kf = KeyFile::create(&m, b"pw", FAST, Cipher::Aes256Gcm, "h".into(), "u".into()).unwrap();
        let kf = KeyFile::decode(&kf.encode()).unwrap();
        let back = kf.open(b"pw").unwrap().unwrap();
        assert_eq!(back.data, m.data);
        assert_eq!(back.data.current().0, 0);
        assert_eq!(back.id, m.id);
        assert_eq!(back.chunker, m.chunker);
        assert!(kf.open(b"wrong").unwrap().is_none());
    }

    #[test]
    fn secrets_do_not_appear_in_key_file() {
        let m = MasterKeys::random();
        let kf = KeyFile::create(&m, b"pw", FAST, Cipher::ChaCha20Poly1305, "h".into(), "u".into()).unwrap();
        let text = String::from_utf8(kf.encode()).unwrap();
        assert!(!text.contains(&hex::encode(m.data.current().1.0)));
        assert!(!text.contains("pw\""));
    }

    #[test]
    fn rotated_keys_wrap_every_epoch_and_keep_id_and_chunker_keys() {
        let m = MasterKeys::random();
        let r = m.rotated().unwrap().rotated().unwrap();
        assert_eq!(r.data.current().0, 2);
        assert_eq!(r.data.get(0), m.data.get(0));
        assert_ne!(r.data.get(1), r.data.get(2));
        assert_eq!((&r.id, &r.chunker), (&m.id, &m.chunker));
        let kf = KeyFile::create(&r, b"pw", FAST, Cipher::Aes256Gcm, "h".into(), "u".into()).unwrap();
        let back = KeyFile::decode(&kf.encode()).unwrap().open(b"pw").unwrap().unwrap();
        assert_eq!(back.data, r.data);
        assert_eq!((&back.id, &back.chunker), (&m.id, &m.chunker));
    }

    #[test]
    fn wrapped_secrets_must_hold_a_data_key() {
        assert!(MasterKeys::decode(br#"{"data":[],"id":"00","chunker":"00"}"#).is_err());
        let zero = "0".repeat(64);
        let ok = format!(r#"{{"data":["{zero}"],"id":"{zero}","chunker":"{zero}"}}"#);
        assert!(MasterKeys::decode(ok.as_bytes()).is_ok());
        let old = format!(r#"{{"data":"{zero}","id":"{zero}","chunker":"{zero}"}}"#);
        assert!(MasterKeys::decode(old.as_bytes()).is_err());
    }

    #[test]
    fn version_1_key_files_are_refused() {
        let m = MasterKeys::random();
        let mut kf = KeyFile::create(&m, b"pw", FAST, Cipher::Aes256Gcm, "h".into(), "u".into()).unwrap();
        kf.version = 1;
        assert!(KeyFile::decode(&kf.encode()).unwrap_err().contains("version 1"));
    }
}
