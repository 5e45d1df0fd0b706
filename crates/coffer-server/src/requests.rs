//! The request log (docs/design.md#server, "Request log"): one JSON line per
//! request answered, appended to `requests.log` in the state directory:
//!
//! ```text
//! {"time":1764624000123,"peer":"192.0.2.7","key":"CF0123…","method":"PUT","name":"snapshots/…","status":200,"bytes":1234}
//! ```
//!
//! `time` is milliseconds since the Unix epoch; `key` the access key id the
//! request claims (its `Credential`, empty when unsigned: a refused signature
//! is logged with the key it claimed and status 403); `name` the path after
//! the bucket, without the query; `bytes` the body's length, the request's
//! for uploads and the answer's otherwise. Secrets, signatures and queries
//! are never written. When the file passes [`MAX_LEN`] it is renamed to
//! `requests.log.1` (replacing the one before) and a new one begun, so the log
//! holds at most twice that.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::net::IpAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::ServerError;

/// The log's file name in the state directory.
pub const FILE: &str = "requests.log";
/// The size at which the log is rotated.
pub const MAX_LEN: u64 = 16 << 20;

/// One request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Milliseconds since the Unix epoch, when it was answered.
    pub time: u64,
    /// The client's address.
    pub peer: String,
    /// The access key id it claims.
    pub key: String,
    /// The HTTP method.
    pub method: String,
    /// The object name (the path after the bucket).
    pub name: String,
    /// The HTTP status of the answer.
    pub status: u16,
    /// Body bytes: the request's for PUT and POST, the answer's otherwise.
    pub bytes: u64,
}

/// The open log.
pub struct RequestLog {
    path: PathBuf,
    file: Mutex<(File, u64)>,
}

fn open(path: &Path) -> Result<(File, u64), ServerError> {
    let f = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| ServerError::io(path, "cannot open the request log", e))?;
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    Ok((f, len))
}

impl RequestLog {
    /// Opens (or begins) the log in `state_dir`.
    pub fn open(state_dir: &Path) -> Result<RequestLog, ServerError> {
        let path = state_dir.join(FILE);
        let file = open(&path)?;
        Ok(RequestLog { path, file: Mutex::new(file) })
    }

    /// Appends `entry`, rotating first when the log is full. A failure to
    /// write is returned; the request it describes was answered anyway.
    pub fn record(&self, entry: &Entry) -> Result<(), ServerError> {
        let mut line = serde_json::to_vec(entry).unwrap_or_default();
        line.push(b'\n');
        let mut f = self.file.lock().unwrap_or_else(|e| e.into_inner());
        if f.1 + line.len() as u64 > MAX_LEN {
            let old = self.path.with_extension("log.1");
            std::fs::rename(&self.path, &old).map_err(|e| ServerError::io(&self.path, "cannot rotate", e))?;
            *f = open(&self.path)?;
        }
        f.0.write_all(&line).map_err(|e| ServerError::io(&self.path, "cannot write", e))?;
        f.1 += line.len() as u64;
        Ok(())
    }
}

/// What a request says of itself, before it is answered.
pub struct Request {
    /// The client's address.
    pub peer: IpAddr,
    /// The access key id it claims.
    pub key: String,
    /// The method.
    pub method: String,
    /// The object name.
    pub name: String,
    /// The announced body length.
    pub bytes: u64,
}

impl Request {
    /// Reads a request's head; `bucket` is stripped from the path.
    pub fn of<B>(req: &http::Request<B>, peer: IpAddr, bucket: &str) -> Request {
        let key = req
            .headers()
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split("Credential=").nth(1))
            .and_then(|v| v.split('/').next())
            .unwrap_or("")
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .take(64)
            .collect();
        let path = req.uri().path();
        let name = path.strip_prefix('/').unwrap_or(path);
        let name = name.strip_prefix(bucket).map(|n| n.strip_prefix('/').unwrap_or(n)).unwrap_or(name);
        let bytes = req
            .headers()
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        Request { peer, key, method: req.method().to_string(), name: name.chars().take(512).collect(), bytes }
    }

    /// The entry once answered with `status` and a body of `answer_bytes`.
    pub fn answered(self, status: u16, answer_bytes: u64) -> Entry {
        let time = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let upload = self.method == "PUT" || self.method == "POST";
        Entry {
            time,
            peer: self.peer.to_string(),
            key: self.key,
            method: self.method,
            name: self.name,
            status,
            bytes: if upload { self.bytes } else { answer_bytes },
        }
    }
}

/// Every entry of the log in `state_dir`, the rotated part first; lines that
/// do not parse (a line torn by a crash) are skipped.
pub fn read(state_dir: &Path) -> Result<Vec<Entry>, ServerError> {
    let mut out = Vec::new();
    for name in [format!("{FILE}.1"), FILE.to_string()] {
        let path = state_dir.join(name);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(ServerError::io(&path, "cannot read", e)),
        };
        out.extend(text.lines().filter_map(|l| serde_json::from_str(l).ok()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_never_hold_secrets_and_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let log = RequestLog::open(dir.path()).unwrap();
        let req = http::Request::builder()
            .method("PUT")
            .uri("/coffer/snapshots/ab?X-Amz-Signature=secret")
            .header("authorization", "AWS4-HMAC-SHA256 Credential=CFKEY/20260101/us-east-1/s3, Signature=deadbeef")
            .header("content-length", "42")
            .body(())
            .unwrap();
        let e = Request::of(&req, "127.0.0.1".parse().unwrap(), "coffer").answered(403, 300);
        assert_eq!((e.key.as_str(), e.name.as_str(), e.bytes, e.status), ("CFKEY", "snapshots/ab", 42, 403));
        log.record(&e).unwrap();
        let text = std::fs::read_to_string(dir.path().join(FILE)).unwrap();
        assert!(!text.contains("deadbeef") && !text.contains("secret"), "{text}");
        assert_eq!(read(dir.path()).unwrap(), vec![e]);
    }
}
