//! Key files (`keys/<id>`): plain JSON that wraps the repository's master key in a key
//! derived from a passphrase with scrypt.
//!
//! ```json
//! {"created": "...", "username": "...", "hostname": "...",
//!  "kdf": "scrypt", "N": 32768, "r": 8, "p": 1,
//!  "salt": "<base64>", "data": "<base64 of IV ‖ ciphertext ‖ MAC>"}
//! ```
//!
//! `data` opens, with the derived key, to the master key as JSON:
//! `{"mac": {"k": "<16 bytes, base64>", "r": "<16 bytes, base64>"}, "encrypt": "<32 bytes, base64>"}`.
//!
//! A key file is checked before anything is derived from it: at most [`MAX_KEY_FILE`]
//! bytes, the kdf `scrypt`, `N` a power of two from 2 to 2^20, `r` and `p` at least 1,
//! `r·p` at most [`MAX_R_TIMES_P`], scrypt's memory (128·N·r bytes) at most
//! [`MAX_SCRYPT_MEMORY`], a salt of 8 to 1024 bytes and `data` of at most 4 KiB. restic
//! writes N = 2^15 or a calibrated value near it, r = 8, p = 1 and a 64-byte salt.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;
use zeroize::Zeroizing;

use super::crypto::{self, KdfParams, MasterKey};
use crate::Error;

/// Largest key file read.
pub const MAX_KEY_FILE: u64 = 64 * 1024;
/// Largest scrypt `N`.
pub const MAX_N: u64 = 1 << 20;
/// Largest product of scrypt's `r` and `p` (their product is the work per `N`).
pub const MAX_R_TIMES_P: u64 = 256;
/// Largest memory scrypt may take for one key file, 128·N·r bytes: 1 GiB.
pub const MAX_SCRYPT_MEMORY: u64 = 1 << 30;

#[derive(Deserialize)]
struct KeyFileJson {
    #[serde(default)]
    created: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    hostname: Option<String>,
    kdf: String,
    #[serde(rename = "N")]
    n: u64,
    r: u64,
    p: u64,
    salt: String,
    data: String,
}

/// A parsed and checked key file.
#[derive(Debug, Clone)]
pub struct KeyFile {
    /// The object's name, `keys/<id>`.
    pub name: String,
    pub created: Option<String>,
    pub username: Option<String>,
    pub hostname: Option<String>,
    pub params: KdfParams,
    pub salt: Vec<u8>,
    data: Vec<u8>,
}

impl KeyFile {
    /// Parses and checks a key file's bytes (see the module's documentation for what is
    /// refused). Nothing expensive happens here.
    pub fn parse(name: &str, bytes: &[u8]) -> Result<KeyFile, Error> {
        let bad = |reason: String| Error::KeyFile { name: name.to_string(), reason };
        if bytes.len() as u64 > MAX_KEY_FILE {
            return Err(bad(format!("{} bytes, more than the {MAX_KEY_FILE} accepted", bytes.len())));
        }
        let j: KeyFileJson = serde_json::from_slice(bytes).map_err(|e| bad(format!("not a key file: {e}")))?;
        if j.kdf != "scrypt" {
            return Err(bad(format!("kdf {:?} is not supported (only scrypt)", j.kdf)));
        }
        if j.n < 2 || j.n > MAX_N || !j.n.is_power_of_two() {
            return Err(bad(format!("scrypt N = {} refused: a power of two from 2 to {MAX_N} is expected", j.n)));
        }
        if j.r == 0 || j.p == 0 || j.r.saturating_mul(j.p) > MAX_R_TIMES_P {
            return Err(bad(format!(
                "scrypt r = {}, p = {} refused: both at least 1, r·p at most {MAX_R_TIMES_P}",
                j.r, j.p
            )));
        }
        let memory = 128u64.saturating_mul(j.n).saturating_mul(j.r);
        if memory > MAX_SCRYPT_MEMORY {
            return Err(bad(format!(
                "scrypt N = {}, r = {} would take {memory} bytes of memory, more than the {MAX_SCRYPT_MEMORY} accepted",
                j.n, j.r
            )));
        }
        if j.salt.len() > 2048 || j.data.len() > 8192 {
            return Err(bad("salt or data too long".to_string()));
        }
        let salt = STANDARD.decode(&j.salt).map_err(|e| bad(format!("salt is not base64: {e}")))?;
        if !(8..=1024).contains(&salt.len()) {
            return Err(bad(format!("a salt of {} bytes refused (8 to 1024 expected)", salt.len())));
        }
        let data = STANDARD.decode(&j.data).map_err(|e| bad(format!("data is not base64: {e}")))?;
        if data.len() < crypto::OVERHEAD || data.len() > 4096 {
            return Err(bad(format!("data of {} bytes cannot hold a master key", data.len())));
        }
        Ok(KeyFile {
            name: name.to_string(),
            created: j.created,
            username: j.username,
            hostname: j.hostname,
            params: KdfParams { log_n: j.n.trailing_zeros() as u8, r: j.r as u32, p: j.p as u32 },
            salt,
            data,
        })
    }

    /// Derives the key from `password` and opens the master key. `Ok(None)`: the password
    /// does not open this key file. The derived key is wiped before returning.
    pub fn open(&self, password: &[u8]) -> Result<Option<MasterKey>, Error> {
        let bad = |reason: String| Error::KeyFile { name: self.name.clone(), reason };
        let user = crypto::derive(password, &self.salt, self.params).map_err(bad)?;
        let plain = match user.open(&self.data) {
            Ok(p) => Zeroizing::new(p),
            Err(_) => return Ok(None),
        };
        drop(user);
        parse_master_key(&plain).map(Some).map_err(bad)
    }
}

#[derive(Deserialize)]
struct MacJson {
    k: String,
    r: String,
}

#[derive(Deserialize)]
struct MasterJson {
    mac: MacJson,
    encrypt: String,
}

impl Drop for MasterJson {
    fn drop(&mut self) {
        use zeroize::Zeroize;
        self.mac.k.zeroize();
        self.mac.r.zeroize();
        self.encrypt.zeroize();
    }
}

/// The master key of a key file's opened `data`.
pub fn parse_master_key(plain: &[u8]) -> Result<MasterKey, String> {
    let j: MasterJson = serde_json::from_slice(plain).map_err(|e| format!("opens, but not to a master key: {e}"))?;
    let field = |what: &str, s: &str, out: &mut [u8]| -> Result<(), String> {
        let v = Zeroizing::new(STANDARD.decode(s).map_err(|_| format!("master key: {what} is not base64"))?);
        if v.len() != out.len() {
            return Err(format!("master key: {what} has {} bytes, not {}", v.len(), out.len()));
        }
        out.copy_from_slice(&v);
        Ok(())
    };
    let mut encrypt = Zeroizing::new([0u8; 32]);
    let mut k = Zeroizing::new([0u8; 16]);
    let mut r = Zeroizing::new([0u8; 16]);
    field("encrypt", &j.encrypt, &mut encrypt[..])?;
    field("mac.k", &j.mac.k, &mut k[..])?;
    field("mac.r", &j.mac.r, &mut r[..])?;
    let key = MasterKey::new(*encrypt, *k, *r);
    if !key.is_valid() {
        return Err("master key: a key of all zeros".to_string());
    }
    Ok(key)
}
