//! Multipart uploads in progress (docs/design.md#server, "Slow and hostile
//! connections"). Every part of an upload is written into one spool file of
//! its own, at an offset handed out when the part begins; the file is named,
//! so an upload holds no descriptor between its requests (a part's request
//! opens it while it writes, the completion while it reads). An upload holds
//! at most [`max_parts`] parts, a key at most [`MAX_OPEN_PER_KEY`] uploads,
//! and an upload untouched for the expiry period is dropped with its file.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use coffer_core::format::ObjectKind;
use tempfile::TempPath;

use crate::usage::Reservation;

/// Multipart uploads one key may have open at once.
pub const MAX_OPEN_PER_KEY: usize = 64;
/// The highest part number (S3's).
pub const MAX_PART_NUMBER: i32 = 10_000;
/// The part size coffer's S3 backend sends; [`max_parts`] allows an object
/// of its kind's largest size in parts of this size.
pub const PART_SIZE: u64 = 1 << 20;

/// The most parts an upload of `kind` may hold.
pub fn max_parts(kind: ObjectKind) -> usize {
    (kind.max_len().div_ceil(PART_SIZE) + 1).min(MAX_PART_NUMBER as u64) as usize
}

/// Why a multipart request cannot go on.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UploadError {
    /// No such upload for this key and name (never begun, finished, aborted
    /// or expired).
    #[error("no such upload {0} (never begun, completed, aborted, or expired after {1:?} untouched)")]
    NoSuchUpload(String, Duration),
    /// The key has too many uploads open.
    #[error("the access key has {max} multipart uploads open; complete or abort one first", max = MAX_OPEN_PER_KEY)]
    TooManyUploads,
    /// A part number or count out of bounds.
    #[error("{0}")]
    BadPart(String),
}

/// Where a part is to be written.
pub struct PartSlot {
    /// The kind of object being uploaded.
    pub kind: ObjectKind,
    /// Bytes of the upload's other parts.
    pub others: u64,
    /// The spool file.
    pub file: Arc<TempPath>,
    /// The part's offset in it.
    pub offset: u64,
}

/// A part written whole.
struct Part {
    offset: u64,
    len: u64,
    /// Its bytes against the key's quota, until the upload completes.
    hold: Option<Reservation>,
}

/// One upload.
struct Upload {
    key_id: String,
    name: String,
    kind: ObjectKind,
    file: Arc<TempPath>,
    /// Bytes of the spool file handed out (a part sent again gets new ones).
    reserved: u64,
    /// Part number → its place, for parts written whole.
    parts: BTreeMap<i32, Part>,
    touched: Instant,
}

/// A completed upload's bytes, in order, in an unnamed spool file.
pub struct Assembled {
    /// The file.
    pub file: File,
    /// Its length.
    pub len: u64,
    /// The BLAKE3 hash of its bytes.
    pub hash: blake3::Hash,
    /// The object's kind.
    pub kind: ObjectKind,
    /// The parts' bytes against the key's quota.
    pub holds: Vec<Reservation>,
}

/// Every upload in progress.
pub struct Uploads {
    dir: PathBuf,
    expiry: Duration,
    map: Mutex<HashMap<String, Upload>>,
}

fn random_id() -> String {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).expect("the system's random generator");
    hex::encode(b)
}

impl Uploads {
    /// Uploads spooled in `dir`, dropped after `expiry` untouched.
    pub fn new(dir: &Path, expiry: Duration) -> Uploads {
        Uploads { dir: dir.to_path_buf(), expiry, map: Mutex::new(HashMap::new()) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Upload>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Drops the uploads untouched for the expiry period at `now`; returns how many.
    pub fn expire(&self, now: Instant) -> usize {
        let mut map = self.lock();
        let before = map.len();
        map.retain(|_, u| now.saturating_duration_since(u.touched) < self.expiry);
        before - map.len()
    }

    /// Begins an upload of `name` by `key_id`; returns its id.
    pub fn create(&self, key_id: &str, name: &str, kind: ObjectKind) -> Result<String, std::io::Error> {
        self.expire(Instant::now());
        let file = tempfile::Builder::new().prefix("upload-").tempfile_in(&self.dir)?.into_temp_path();
        let mut map = self.lock();
        if map.values().filter(|u| u.key_id == key_id).count() >= MAX_OPEN_PER_KEY {
            return Err(std::io::Error::other(UploadError::TooManyUploads));
        }
        let id = random_id();
        let upload = Upload {
            key_id: key_id.to_string(),
            name: name.to_string(),
            kind,
            file: Arc::new(file),
            reserved: 0,
            parts: BTreeMap::new(),
            touched: Instant::now(),
        };
        map.insert(id.clone(), upload);
        Ok(id)
    }

    /// Hands out the place of part `number` (`len` bytes) of upload `id`.
    pub fn begin_part(
        &self,
        id: &str,
        key_id: &str,
        name: &str,
        number: i32,
        len: u64,
    ) -> Result<PartSlot, UploadError> {
        self.expire(Instant::now());
        let mut map = self.lock();
        let u = map
            .get_mut(id)
            .filter(|u| u.key_id == key_id && u.name == name)
            .ok_or_else(|| UploadError::NoSuchUpload(id.to_string(), self.expiry))?;
        if !(1..=MAX_PART_NUMBER).contains(&number) {
            return Err(UploadError::BadPart(format!("part number {number} is not between 1 and {MAX_PART_NUMBER}")));
        }
        let most = max_parts(u.kind);
        if !u.parts.contains_key(&number) && u.parts.len() >= most {
            return Err(UploadError::BadPart(format!(
                "an upload of a {} holds at most {most} parts (of {} MiB)",
                u.kind.noun(),
                PART_SIZE >> 20
            )));
        }
        // Parts sent again take new room: at most twice the kind's limit in all.
        if u.reserved.saturating_add(len) > u.kind.max_len().saturating_mul(2) {
            return Err(UploadError::BadPart(format!(
                "the parts sent for this upload exceed twice the {} limit of {} bytes",
                u.kind.noun(),
                u.kind.max_len()
            )));
        }
        let others = u.parts.iter().filter(|(n, _)| **n != number).map(|(_, p)| p.len).sum();
        let offset = u.reserved;
        u.reserved += len;
        u.touched = Instant::now();
        Ok(PartSlot { kind: u.kind, others, file: u.file.clone(), offset })
    }

    /// Records that part `number` was written whole at `offset`, holding
    /// `hold` against the quota until the upload ends.
    pub fn finish_part(
        &self,
        id: &str,
        number: i32,
        offset: u64,
        len: u64,
        hold: Option<Reservation>,
    ) -> Result<(), UploadError> {
        let mut map = self.lock();
        let u = map.get_mut(id).ok_or_else(|| UploadError::NoSuchUpload(id.to_string(), self.expiry))?;
        u.parts.insert(number, Part { offset, len, hold });
        u.touched = Instant::now();
        Ok(())
    }

    /// Ends upload `id` of `key_id` (aborted): false if there was none.
    pub fn abort(&self, id: &str, key_id: &str) -> bool {
        let mut map = self.lock();
        if map.get(id).is_some_and(|u| u.key_id == key_id) {
            map.remove(id);
            return true;
        }
        false
    }

    /// Ends upload `id` of `key_id` for `name` and copies the parts `wanted`,
    /// in that order, into an unnamed file in the spool directory, hashing
    /// them. Blocking (file I/O).
    pub fn complete(&self, id: &str, key_id: &str, name: &str, wanted: &[i32]) -> Result<Assembled, CompleteError> {
        let mut upload = {
            let mut map = self.lock();
            match map.get(id) {
                Some(u) if u.key_id == key_id && u.name == name => map.remove(id),
                _ => None,
            }
        }
        .ok_or_else(|| CompleteError::Upload(UploadError::NoSuchUpload(id.to_string(), self.expiry)))?;
        let src = File::open(&*upload.file).map_err(CompleteError::Spool)?;
        let mut out = tempfile::tempfile_in(&self.dir).map_err(CompleteError::Spool)?;
        let mut hasher = blake3::Hasher::new();
        let mut len = 0u64;
        let mut buf = vec![0u8; 1 << 20];
        for n in wanted {
            let part = upload
                .parts
                .get(n)
                .ok_or_else(|| CompleteError::Upload(UploadError::BadPart(format!("no part {n}"))))?;
            let (offset, size) = (part.offset, part.len);
            let mut done = 0;
            while done < size {
                let want = (size - done).min(buf.len() as u64) as usize;
                let k = src.read_at(&mut buf[..want], offset + done).map_err(CompleteError::Spool)?;
                if k == 0 {
                    return Err(CompleteError::Spool(std::io::Error::other("a spooled part ended early")));
                }
                hasher.update(&buf[..k]);
                out.write_all(&buf[..k]).map_err(CompleteError::Spool)?;
                done += k as u64;
            }
            len += size;
        }
        let holds = std::mem::take(&mut upload.parts).into_values().filter_map(|p| p.hold).collect();
        Ok(Assembled { file: out, len, hash: hasher.finalize(), kind: upload.kind, holds })
    }
}

/// Why a completion failed.
#[derive(Debug, thiserror::Error)]
pub enum CompleteError {
    /// The upload or a part is missing.
    #[error(transparent)]
    Upload(UploadError),
    /// The spool file.
    #[error("the server cannot spool the upload: {0}")]
    Spool(std::io::Error),
}

/// A [`Write`] at a fixed place of a file, for a part's bytes.
pub struct WriteAt<'a> {
    /// The file.
    pub file: &'a File,
    /// Where the next byte goes.
    pub at: u64,
}

impl Write for WriteAt<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.file.write_all_at(buf, self.at)?;
        self.at += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_share_one_file_and_uploads_expire() {
        let dir = tempfile::tempdir().unwrap();
        let ups = Uploads::new(dir.path(), Duration::from_secs(60));
        let id = ups.create("k", "data/aa/x", ObjectKind::Pack).unwrap();
        for (n, bytes) in [(2, &b"world"[..]), (1, b"hello "), (2, b"there")] {
            let slot = ups.begin_part(&id, "k", "data/aa/x", n, bytes.len() as u64).unwrap();
            let f = std::fs::OpenOptions::new().write(true).open(&*slot.file).unwrap();
            WriteAt { file: &f, at: slot.offset }.write_all(bytes).unwrap();
            ups.finish_part(&id, n, slot.offset, bytes.len() as u64, None).unwrap();
        }
        assert!(ups.begin_part(&id, "other", "data/aa/x", 3, 1).is_err());
        assert!(ups.begin_part(&id, "k", "data/aa/x", 0, 1).is_err());
        let done = ups.complete(&id, "k", "data/aa/x", &[1, 2]).unwrap();
        assert_eq!((done.len, done.hash), (11, blake3::hash(b"hello there")));
        // Gone once completed, its spool file with it.
        assert!(ups.complete(&id, "k", "data/aa/x", &[1]).is_err());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        // Part counts are bounded; untouched uploads expire.
        let id = ups.create("k", "index/x", ObjectKind::Index).unwrap();
        for n in 1..=max_parts(ObjectKind::Index) as i32 {
            let slot = ups.begin_part(&id, "k", "index/x", n, 1).unwrap();
            ups.finish_part(&id, n, slot.offset, 1, None).unwrap();
        }
        assert!(matches!(ups.begin_part(&id, "k", "index/x", 9999, 1), Err(UploadError::BadPart(_))));
        assert_eq!(ups.expire(Instant::now() + Duration::from_secs(61)), 1);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
