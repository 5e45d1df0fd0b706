//! The S3 data plane: the subset of S3 that coffer's OpenDAL s3 backend uses
//! (PUT, multipart upload, GET with ranges, HEAD, DELETE, ListObjectsV2), over
//! an `Arc<dyn Backend>`. Every request is authenticated by SigV4 (s3s checks
//! the signature with the secret of [`crate::keys`]), its object name
//! classified ([`crate::names`]), its level checked ([`crate::keys::Level`]),
//! and every upload spooled to a local file, hashed and verified
//! ([`crate::verify`]) before the storage sees it. See docs/design.md#server.

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use coffer_backend::{Backend, BackendError, ErrorKind};
use coffer_core::format::ObjectKind;
use futures::StreamExt;
use s3s::dto::*;
use s3s::{S3, S3Error, S3ErrorCode, S3Request, S3Response, S3Result, s3_error};

use crate::keys::{KeyFile, Level, Op};
use crate::log::{LogRead, TransparencyLog};
use crate::notices::Notices;
use crate::state::Watched;
use crate::usage::Usage;
use crate::writers::AllowList;
use crate::{names, trash, verify};

/// Bytes read from the storage per piece of a GET body (a GET holds at most
/// about two pieces at once).
const GET_PIECE: u64 = 1 << 20;
/// Packs written to the storage at once: a write to an object store holds a
/// few MiB (OpenDAL gathers multipart parts of at least 5 MiB for S3), so the
/// server's memory is bounded by this, not by the number of clients.
const STORAGE_WRITES: usize = 8;
/// Multipart uploads a key may have open at once (each holds spool files).
const MAX_OPEN_UPLOADS: usize = 256;

/// How the service behaves; the binary fills it from its options.
#[derive(Clone, Debug)]
pub struct ServiceOptions {
    /// The one bucket name the server answers to.
    pub bucket: String,
    /// Where uploads are spooled before they are verified.
    pub spool: PathBuf,
    /// The longest wait for the next piece of a request body.
    pub body_timeout: Duration,
    /// How long a prune notice must have been stored before a `prune` key
    /// deletes packs or index files ([`crate::notices`]).
    pub prune_grace: Duration,
}

/// A multipart upload in progress.
struct Upload {
    key_id: String,
    name: String,
    kind: ObjectKind,
    parts: std::collections::BTreeMap<i32, (std::fs::File, u64)>,
}

/// The S3 service over a backend.
pub struct CofferS3 {
    backend: Arc<dyn Backend>,
    log: Arc<TransparencyLog>,
    keys: Arc<Watched<KeyFile>>,
    writers: Watched<AllowList>,
    opts: ServiceOptions,
    /// Which key wrote each session marker, while the server runs.
    sessions: Mutex<HashMap<String, String>>,
    uploads: Mutex<HashMap<String, Upload>>,
    /// Bytes accepted per key, for quotas.
    usage: Arc<Usage>,
    /// When each prune notice was stored.
    notices: Arc<Notices>,
    /// Permits for writes to the storage ([`STORAGE_WRITES`]).
    writes: Arc<tokio::sync::Semaphore>,
}

/// A complete upload in a spool file.
struct Spooled {
    file: std::fs::File,
    len: u64,
    hash: blake3::Hash,
}

/// Who is asking: the key id and its level and quota.
struct Caller {
    id: String,
    name: String,
    level: Level,
    quota: Option<u64>,
}

fn backend_error(e: BackendError) -> S3Error {
    match e.kind {
        ErrorKind::NotFound => s3_error!(NoSuchKey, "{e}"),
        ErrorKind::Transient => s3_error!(ServiceUnavailable, "the server's storage failed, retry: {e}"),
        ErrorKind::TooLarge => s3_error!(EntityTooLarge, "{e}"),
        ErrorKind::Permanent => s3_error!(InternalError, "the server's storage refused: {e}"),
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T, S3Error> + Send + 'static) -> S3Result<T> {
    tokio::task::spawn_blocking(f).await.map_err(|e| s3_error!(InternalError, "worker failed: {e}"))?
}

fn refused(e: verify::Refused) -> S3Error {
    s3_error!(InvalidRequest, "refused: {e}")
}

fn spool_err(e: std::io::Error) -> S3Error {
    s3_error!(InternalError, "the server cannot spool the upload: {e}")
}

fn random_id() -> String {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).expect("the system's random generator");
    hex::encode(b)
}

impl CofferS3 {
    /// A service over `backend`, with the state directory's key and writer files.
    pub fn new(
        backend: Arc<dyn Backend>,
        log: Arc<TransparencyLog>,
        usage: Arc<Usage>,
        notices: Arc<Notices>,
        state_dir: &std::path::Path,
        opts: ServiceOptions,
    ) -> Self {
        CofferS3 {
            backend,
            log,
            keys: Arc::new(Watched::new(crate::keys::path(state_dir))),
            writers: Watched::new(crate::writers::path(state_dir)),
            opts,
            sessions: Mutex::new(HashMap::new()),
            uploads: Mutex::new(HashMap::new()),
            usage,
            notices,
            writes: Arc::new(tokio::sync::Semaphore::new(STORAGE_WRITES)),
        }
    }

    /// The key store, for the authenticator.
    pub fn keys(&self) -> Arc<Watched<KeyFile>> {
        self.keys.clone()
    }

    fn caller<T>(&self, req: &S3Request<T>) -> S3Result<Caller> {
        let Some(cred) = &req.credentials else {
            return Err(s3_error!(AccessDenied, "anonymous requests are refused: sign with an access key"));
        };
        let keys = self.keys.get().map_err(|e| s3_error!(InternalError, "{e}"))?;
        let key = keys.by_id(&cred.access_key).ok_or_else(|| {
            s3_error!(InvalidAccessKeyId, "access key {} is not known to this server", cred.access_key)
        })?;
        Ok(Caller { id: key.id.clone(), name: key.name.clone(), level: key.level, quota: key.quota })
    }

    fn bucket(&self, bucket: &str) -> S3Result<()> {
        if bucket != self.opts.bucket {
            return Err(s3_error!(
                NoSuchBucket,
                "this server serves the repository {:?}, not {bucket:?}: check the location",
                self.opts.bucket
            ));
        }
        Ok(())
    }

    fn name(&self, key: &str) -> S3Result<ObjectKind> {
        names::classify(key).map_err(|e| s3_error!(InvalidArgument, "{e}"))
    }

    fn allow(&self, c: &Caller, op: Op, kind: ObjectKind, name: &str) -> S3Result<()> {
        let own = match self.sessions.lock().unwrap_or_else(|e| e.into_inner()).get(name) {
            Some(owner) => *owner == c.id,
            // Markers written before the server started: treated as the caller's.
            None => true,
        };
        c.level
            .allows(op, Some(kind), own)
            .map_err(|why| s3_error!(AccessDenied, "{name}: access key {:?}: {why}", c.name))
    }

    fn check_size(&self, c: &Caller, kind: ObjectKind, name: &str, len: u64) -> S3Result<()> {
        if len > kind.max_len() {
            return Err(s3_error!(
                EntityTooLarge,
                "{name}: {len} bytes exceeds the {} limit of {} bytes (docs/design.md#size-limits)",
                kind.noun(),
                kind.max_len()
            ));
        }
        if let Some(q) = c.quota {
            let used = self.usage.used(&c.id);
            if used.saturating_add(len) > q {
                return Err(s3_error!(
                    AccessDenied,
                    "{name}: access key {:?} has a quota of {q} bytes and has used {used}; ask the server's admin",
                    c.name
                ));
            }
        }
        Ok(())
    }

    /// Reads a request body into `file`, at most `limit` bytes, hashing it;
    /// each piece must come within the body timeout.
    async fn spool_body(
        &self,
        name: &str,
        body: Option<StreamingBlob>,
        limit: u64,
        file: &mut std::fs::File,
        hasher: &mut blake3::Hasher,
    ) -> S3Result<u64> {
        let Some(mut body) = body else { return Ok(0) };
        let mut n = 0u64;
        loop {
            let next = tokio::time::timeout(self.opts.body_timeout, body.next()).await.map_err(|_| {
                s3_error!(RequestTimeout, "{name}: no part of the body came for {:?}", self.opts.body_timeout)
            })?;
            let Some(piece) = next else { break };
            let piece: Bytes = piece.map_err(|e| s3_error!(IncompleteBody, "{name}: the body broke off: {e}"))?;
            n += piece.len() as u64;
            if n > limit {
                return Err(s3_error!(
                    EntityTooLarge,
                    "{name}: the body is longer than announced or allowed ({limit} bytes)"
                ));
            }
            hasher.update(&piece);
            file.write_all(&piece).map_err(spool_err)?;
        }
        Ok(n)
    }

    /// Verifies a complete upload of `len` bytes in `file` and stores it under
    /// `name`, following the rules for existing names.
    async fn store(
        &self,
        c: &Caller,
        name: String,
        kind: ObjectKind,
        up: Spooled,
        if_none_match: bool,
    ) -> S3Result<()> {
        let Spooled { mut file, len, hash } = up;
        verify::check_hash(&name, names::content_id(kind, &name), &hash).map_err(refused)?;
        // Sealed objects are small (64 MiB at most): check their structure in memory.
        let body = if kind != ObjectKind::Pack {
            let mut b = Vec::with_capacity(len as usize);
            file.seek(SeekFrom::Start(0)).map_err(spool_err)?;
            (&mut file).take(len).read_to_end(&mut b).map_err(spool_err)?;
            let allow = self.writers.get().map_err(|e| s3_error!(InternalError, "{e}"))?;
            verify::check_structure(&name, kind, &b, &allow).map_err(refused)?;
            Some(b)
        } else {
            None
        };
        let be = self.backend.clone();
        let stat_name = name.clone();
        let existing = blocking(move || match be.stat(&stat_name) {
            Ok(size) => Ok(Some(size)),
            Err(e) if e.kind == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(backend_error(e)),
        })
        .await?;
        if let Some(size) = existing {
            if if_none_match {
                return Err(s3_error!(PreconditionFailed, "{name} exists"));
            }
            let same = match (names::content_id(kind, &name), &body) {
                // Named by the hash of these very bytes: the same object.
                (Some(_), _) => size == len,
                (None, Some(b)) => {
                    let be = self.backend.clone();
                    let (n, max) = (name.clone(), kind.max_len());
                    let old = blocking(move || be.read_max(&n, max).map_err(backend_error)).await?;
                    old == *b
                }
                (None, None) => false,
            };
            if same {
                return self.record(&c.id, kind, name).await;
            }
            self.allow(c, Op::Replace, kind, &name)?;
        }
        let be = self.backend.clone();
        let n = name.clone();
        // Packs wait for a permit; small objects (session markers a running backup
        // rewrites to show it is alive, index files, snapshots) never queue behind them.
        let _permit = match kind {
            ObjectKind::Pack => {
                Some(self.writes.acquire().await.map_err(|_| s3_error!(InternalError, "the server is stopping"))?)
            }
            _ => None,
        };
        blocking(move || {
            match body {
                Some(b) if kind == ObjectKind::Config && existing.is_none() => {
                    if !be.write_new(&n, b).map_err(backend_error)? {
                        return Err(s3_error!(PreconditionFailed, "{n} exists"));
                    }
                }
                Some(b) => be.write(&n, b).map_err(backend_error)?,
                None => {
                    file.seek(SeekFrom::Start(0)).map_err(spool_err)?;
                    be.write_file(&n, &file, len).map_err(backend_error)?;
                }
            }
            Ok(())
        })
        .await?;
        self.usage.add(&c.id, len);
        if kind == ObjectKind::Session {
            self.sessions.lock().unwrap_or_else(|e| e.into_inner()).insert(name, c.id.clone());
            return Ok(());
        }
        self.record(&c.id, kind, name).await
    }

    /// Keeps what the server must know of an object it stored, before the
    /// upload is answered: a snapshot or tombstone is appended to the
    /// transparency log (once), a prune notice's time and key are kept.
    async fn record(&self, key_id: &str, kind: ObjectKind, name: String) -> S3Result<()> {
        if kind == ObjectKind::PruneNotice {
            let (notices, key) = (self.notices.clone(), key_id.to_string());
            return blocking(move || {
                notices
                    .stored(&name, &key, trash::now())
                    .map_err(|e| s3_error!(InternalError, "{name} was stored but its time not kept: {e}"))
            })
            .await;
        }
        if crate::log::logged_kind(kind).is_none() {
            return Ok(());
        }
        let log = self.log.clone();
        blocking(move || {
            log.append(kind, &name).map_err(|e| s3_error!(InternalError, "{name} was stored but not logged: {e}"))
        })
        .await
    }

    /// A reconciliation sketch: open to every key, as a listing is.
    async fn sketch(&self, r: Result<(ObjectKind, usize), String>) -> S3Result<Vec<u8>> {
        let (kind, cells) = r.map_err(|e| s3_error!(InvalidArgument, "{e}"))?;
        let be = self.backend.clone();
        blocking(move || crate::sync::sketch(be.as_ref(), kind, cells).map_err(backend_error)).await
    }

    /// A read of the transparency log: open to every key, at every level.
    fn log_read(&self, name: &str, r: Result<LogRead, String>) -> S3Result<Vec<u8>> {
        let r = r.map_err(|e| s3_error!(InvalidArgument, "{e}"))?;
        self.log.read(r, trash::now()).map_err(|e| s3_error!(InvalidRange, "{name}: {e}"))
    }
}

fn etag_of(hash: &blake3::Hash) -> ETag {
    ETag::Strong(hash.to_hex()[..32].to_string())
}

#[async_trait::async_trait]
impl S3 for CofferS3 {
    async fn put_object(&self, req: S3Request<PutObjectInput>) -> S3Result<S3Response<PutObjectOutput>> {
        let c = self.caller(&req)?;
        let input = req.input;
        self.bucket(&input.bucket)?;
        let name = input.key;
        let kind = self.name(&name)?;
        self.allow(&c, Op::Create, kind, &name)?;
        let len = input.content_length.ok_or_else(|| {
            s3_error!(MissingContentLength, "{name}: a PUT must announce its length (Content-Length)")
        })?;
        let len = u64::try_from(len).map_err(|_| s3_error!(InvalidArgument, "{name}: negative length"))?;
        self.check_size(&c, kind, &name, len)?;
        let mut file = tempfile::tempfile_in(&self.opts.spool).map_err(spool_err)?;
        let mut hasher = blake3::Hasher::new();
        let got = self.spool_body(&name, input.body, len, &mut file, &mut hasher).await?;
        if got != len {
            return Err(s3_error!(IncompleteBody, "{name}: {got} bytes came of the {len} announced"));
        }
        let hash = hasher.finalize();
        let if_none_match = input.if_none_match.is_some();
        self.store(&c, name, kind, Spooled { file, len, hash }, if_none_match).await?;
        Ok(S3Response::new(PutObjectOutput { e_tag: Some(etag_of(&hash)), ..Default::default() }))
    }

    async fn create_multipart_upload(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        let c = self.caller(&req)?;
        let input = req.input;
        self.bucket(&input.bucket)?;
        let kind = self.name(&input.key)?;
        self.allow(&c, Op::Create, kind, &input.key)?;
        let id = random_id();
        {
            let mut uploads = self.uploads.lock().unwrap_or_else(|e| e.into_inner());
            if uploads.values().filter(|u| u.key_id == c.id).count() >= MAX_OPEN_UPLOADS {
                return Err(s3_error!(SlowDown, "access key {:?} has {MAX_OPEN_UPLOADS} uploads open", c.name));
            }
            uploads.insert(
                id.clone(),
                Upload { key_id: c.id.clone(), name: input.key.clone(), kind, parts: Default::default() },
            );
        }
        Ok(S3Response::new(CreateMultipartUploadOutput {
            bucket: Some(input.bucket),
            key: Some(input.key),
            upload_id: Some(id),
            ..Default::default()
        }))
    }

    async fn upload_part(&self, req: S3Request<UploadPartInput>) -> S3Result<S3Response<UploadPartOutput>> {
        let c = self.caller(&req)?;
        let input = req.input;
        self.bucket(&input.bucket)?;
        let (kind, so_far) = {
            let uploads = self.uploads.lock().unwrap_or_else(|e| e.into_inner());
            let u = uploads
                .get(&input.upload_id)
                .filter(|u| u.key_id == c.id && u.name == input.key)
                .ok_or_else(|| s3_error!(NoSuchUpload, "{}: no such upload {}", input.key, input.upload_id))?;
            let others: u64 = u.parts.iter().filter(|(n, _)| **n != input.part_number).map(|(_, p)| p.1).sum();
            (u.kind, others)
        };
        let len = input
            .content_length
            .and_then(|l| u64::try_from(l).ok())
            .ok_or_else(|| s3_error!(MissingContentLength, "{}: a part must announce its length", input.key))?;
        self.check_size(&c, kind, &input.key, so_far.saturating_add(len))?;
        let mut file = tempfile::tempfile_in(&self.opts.spool).map_err(spool_err)?;
        let mut hasher = blake3::Hasher::new();
        let got = self.spool_body(&input.key, input.body, len, &mut file, &mut hasher).await?;
        if got != len {
            return Err(s3_error!(IncompleteBody, "{}: {got} bytes came of the {len} announced", input.key));
        }
        let hash = hasher.finalize();
        let mut uploads = self.uploads.lock().unwrap_or_else(|e| e.into_inner());
        let u = uploads
            .get_mut(&input.upload_id)
            .ok_or_else(|| s3_error!(NoSuchUpload, "{}: the upload was aborted", input.key))?;
        u.parts.insert(input.part_number, (file, len));
        Ok(S3Response::new(UploadPartOutput { e_tag: Some(etag_of(&hash)), ..Default::default() }))
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        let c = self.caller(&req)?;
        let input = req.input;
        self.bucket(&input.bucket)?;
        let upload = {
            let mut uploads = self.uploads.lock().unwrap_or_else(|e| e.into_inner());
            match uploads.get(&input.upload_id) {
                Some(u) if u.key_id == c.id && u.name == input.key => uploads.remove(&input.upload_id),
                _ => None,
            }
        }
        .ok_or_else(|| s3_error!(NoSuchUpload, "{}: no such upload {}", input.key, input.upload_id))?;
        let wanted: Vec<i32> = input
            .multipart_upload
            .and_then(|m| m.parts)
            .unwrap_or_default()
            .iter()
            .filter_map(|p| p.part_number)
            .collect();
        if wanted.is_empty() {
            return Err(s3_error!(InvalidRequest, "{}: the completion lists no parts", input.key));
        }
        let spool = self.opts.spool.clone();
        let name = input.key.clone();
        let (file, len, hash) = blocking(move || {
            let mut parts = upload.parts;
            let mut out = tempfile::tempfile_in(&spool).map_err(spool_err)?;
            let mut hasher = blake3::Hasher::new();
            let mut len = 0u64;
            let mut buf = vec![0u8; 1 << 20];
            for n in wanted {
                let (mut f, size) = parts.remove(&n).ok_or_else(|| s3_error!(InvalidPart, "{name}: no part {n}"))?;
                f.seek(SeekFrom::Start(0)).map_err(spool_err)?;
                let mut left = size;
                while left > 0 {
                    let want = left.min(buf.len() as u64) as usize;
                    let k = f.read(&mut buf[..want]).map_err(spool_err)?;
                    if k == 0 {
                        return Err(s3_error!(InternalError, "{name}: a spooled part ended early"));
                    }
                    hasher.update(&buf[..k]);
                    out.write_all(&buf[..k]).map_err(spool_err)?;
                    left -= k as u64;
                }
                len += size;
            }
            Ok((out, len, hasher.finalize()))
        })
        .await?;
        self.check_size(&c, upload.kind, &input.key, len)?;
        let up = Spooled { file, len, hash };
        self.store(&c, input.key.clone(), upload.kind, up, input.if_none_match.is_some()).await?;
        Ok(S3Response::new(CompleteMultipartUploadOutput {
            bucket: Some(input.bucket),
            key: Some(input.key),
            e_tag: Some(etag_of(&hash)),
            ..Default::default()
        }))
    }

    async fn abort_multipart_upload(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        let c = self.caller(&req)?;
        let mut uploads = self.uploads.lock().unwrap_or_else(|e| e.into_inner());
        if uploads.get(&req.input.upload_id).is_some_and(|u| u.key_id == c.id) {
            uploads.remove(&req.input.upload_id);
        }
        Ok(S3Response::new(AbortMultipartUploadOutput::default()))
    }

    async fn get_object(&self, req: S3Request<GetObjectInput>) -> S3Result<S3Response<GetObjectOutput>> {
        let c = self.caller(&req)?;
        let input = req.input;
        self.bucket(&input.bucket)?;
        let name = input.key;
        let generated = match (LogRead::parse(&name), coffer_core::recon::parse_request(&name)) {
            (Some(r), _) => Some(self.log_read(&name, r)?),
            (_, Some(r)) => Some(self.sketch(r).await?),
            _ => None,
        };
        if let Some(body) = generated {
            let len = body.len() as i64;
            return Ok(S3Response::new(GetObjectOutput {
                body: Some(StreamingBlob::wrap(futures::stream::once(async move {
                    Ok::<Bytes, std::io::Error>(Bytes::from(body))
                }))),
                content_length: Some(len),
                last_modified: Some(Timestamp::from(std::time::SystemTime::UNIX_EPOCH)),
                ..Default::default()
            }));
        }
        let kind = self.name(&name)?;
        self.allow(&c, Op::Get, kind, &name)?;
        let be = self.backend.clone();
        let n = name.clone();
        let size = blocking(move || be.stat(&n).map_err(backend_error)).await?;
        let (start, end) = match &input.range {
            Some(r) => {
                let r =
                    r.check(size).map_err(|_| s3_error!(InvalidRange, "{name}: the range is outside the object"))?;
                (r.start, r.end)
            }
            None => (0, size),
        };
        let be = self.backend.clone();
        let n = name.clone();
        let stream = futures::stream::unfold(start, move |at| {
            let (be, n) = (be.clone(), n.clone());
            async move {
                if at >= end {
                    return None;
                }
                let len = GET_PIECE.min(end - at);
                let r = tokio::task::spawn_blocking(move || be.read_range(&n, at, len)).await;
                match r {
                    Ok(Ok(b)) if !b.is_empty() => {
                        let next = at + b.len() as u64;
                        Some((Ok::<Bytes, std::io::Error>(Bytes::from(b)), next))
                    }
                    Ok(Ok(_)) => Some((Err(std::io::Error::other("the object ended early")), end)),
                    Ok(Err(e)) => Some((Err(std::io::Error::other(e.to_string())), end)),
                    Err(e) => Some((Err(std::io::Error::other(e.to_string())), end)),
                }
            }
        });
        Ok(S3Response::new(GetObjectOutput {
            body: Some(StreamingBlob::wrap(stream)),
            content_length: Some((end - start) as i64),
            content_range: input.range.map(|_| format!("bytes {start}-{}/{size}", end.saturating_sub(1))),
            accept_ranges: Some("bytes".into()),
            last_modified: Some(Timestamp::from(std::time::SystemTime::UNIX_EPOCH)),
            ..Default::default()
        }))
    }

    async fn head_object(&self, req: S3Request<HeadObjectInput>) -> S3Result<S3Response<HeadObjectOutput>> {
        let c = self.caller(&req)?;
        let input = req.input;
        self.bucket(&input.bucket)?;
        let kind = self.name(&input.key)?;
        self.allow(&c, Op::Head, kind, &input.key)?;
        let be = self.backend.clone();
        let n = input.key.clone();
        let size = blocking(move || be.stat(&n).map_err(backend_error)).await?;
        Ok(S3Response::new(HeadObjectOutput {
            content_length: Some(size as i64),
            accept_ranges: Some("bytes".into()),
            last_modified: Some(Timestamp::from(std::time::SystemTime::UNIX_EPOCH)),
            ..Default::default()
        }))
    }

    async fn delete_object(&self, req: S3Request<DeleteObjectInput>) -> S3Result<S3Response<DeleteObjectOutput>> {
        let c = self.caller(&req)?;
        let input = req.input;
        self.bucket(&input.bucket)?;
        let name = input.key;
        let kind = self.name(&name)?;
        self.allow(&c, Op::Delete, kind, &name)?;
        if c.level == Level::Prune && matches!(kind, ObjectKind::Pack | ObjectKind::Index) {
            self.notices
                .allow_deletes(&c.id, trash::now(), self.opts.prune_grace.as_secs())
                .map_err(|why| s3_error!(AccessDenied, "{name}: access key {:?}: {why}", c.name))?;
        }
        let be = self.backend.clone();
        let spool = self.opts.spool.clone();
        let n = name.clone();
        blocking(move || {
            if kind == ObjectKind::Session {
                // Markers are rewritten garbage once deleted: no trash.
                be.delete(&n).map_err(backend_error)
            } else {
                trash::move_to_trash(be.as_ref(), &n, trash::now(), &spool).map_err(backend_error)
            }
        })
        .await?;
        self.sessions.lock().unwrap_or_else(|e| e.into_inner()).remove(&name);
        if kind == ObjectKind::PruneNotice {
            let (notices, n) = (self.notices.clone(), name.clone());
            blocking(move || {
                notices
                    .deleted(&n)
                    .map_err(|e| s3_error!(InternalError, "{n} was deleted but its time not dropped: {e}"))
            })
            .await?;
        }
        Ok(S3Response::new(DeleteObjectOutput::default()))
    }

    async fn list_objects_v2(&self, req: S3Request<ListObjectsV2Input>) -> S3Result<S3Response<ListObjectsV2Output>> {
        let _c = self.caller(&req)?;
        let input = req.input;
        self.bucket(&input.bucket)?;
        let prefix = input.prefix.clone().unwrap_or_default();
        if !names::listable_prefix(&prefix) {
            return Err(s3_error!(InvalidArgument, "prefix {prefix:?} is not part of a coffer repository's layout"));
        }
        let dir = match prefix.rfind('/') {
            Some(i) => prefix[..=i].to_string(),
            None => String::new(),
        };
        let be = self.backend.clone();
        let mut all = blocking(move || {
            if !dir.is_empty() {
                return be.list(&dir).map_err(backend_error);
            }
            // The whole bucket: every directory of the layout, and `config`.
            let mut all = Vec::new();
            for d in names::DIRECTORIES {
                all.extend(be.list(d).map_err(backend_error)?);
            }
            match be.stat("config") {
                Ok(size) => all.push(coffer_backend::ObjectInfo { name: "config".into(), size }),
                Err(e) if e.kind == ErrorKind::NotFound => {}
                Err(e) => return Err(backend_error(e)),
            }
            Ok(all)
        })
        .await?;
        all.retain(|o| o.name.starts_with(&prefix) && names::classify(&o.name).is_ok());
        all.sort_by(|a, b| a.name.cmp(&b.name));
        let after = input.continuation_token.clone().or(input.start_after.clone()).unwrap_or_default();
        let max = input.max_keys.unwrap_or(1000).clamp(1, 1000) as usize;
        let mut contents = Vec::new();
        let mut prefixes: Vec<String> = Vec::new();
        let mut last = None;
        let mut truncated = false;
        for o in all.into_iter().filter(|o| o.name.as_str() > after.as_str()) {
            if contents.len() + prefixes.len() >= max {
                truncated = true;
                break;
            }
            if let Some(d) = input.delimiter.as_deref().filter(|d| !d.is_empty())
                && let Some(i) = o.name[prefix.len()..].find(d)
            {
                let p = o.name[..prefix.len() + i + d.len()].to_string();
                if prefixes.last() != Some(&p) {
                    prefixes.push(p);
                }
                last = Some(o.name.clone());
                continue;
            }
            last = Some(o.name.clone());
            contents.push(Object {
                key: Some(o.name),
                size: Some(o.size as i64),
                last_modified: Some(Timestamp::from(std::time::SystemTime::UNIX_EPOCH)),
                ..Default::default()
            });
        }
        let count = (contents.len() + prefixes.len()) as i32;
        Ok(S3Response::new(ListObjectsV2Output {
            name: Some(input.bucket),
            prefix: input.prefix,
            delimiter: input.delimiter,
            max_keys: Some(max as i32),
            key_count: Some(count),
            is_truncated: Some(truncated),
            continuation_token: input.continuation_token,
            next_continuation_token: if truncated { last } else { None },
            contents: Some(contents),
            common_prefixes: Some(prefixes.into_iter().map(|p| CommonPrefix { prefix: Some(p) }).collect()),
            ..Default::default()
        }))
    }
}

/// SigV4 secrets from the key store.
pub struct KeyAuth(pub Arc<Watched<KeyFile>>);

#[async_trait::async_trait]
impl s3s::auth::S3Auth for KeyAuth {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<s3s::auth::SecretKey> {
        let keys = self.0.get().map_err(|e| s3_error!(InternalError, "{e}"))?;
        match keys.by_id(access_key) {
            Some(k) => Ok(s3s::auth::SecretKey::from(k.secret.as_str())),
            None => Err(S3Error::with_message(
                S3ErrorCode::InvalidAccessKeyId,
                format!("access key {access_key} is not known to this server: `coffer serve key list` shows the keys"),
            )),
        }
    }
}
