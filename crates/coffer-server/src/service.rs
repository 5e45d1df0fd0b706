//! The S3 data plane: the subset of S3 that coffer's OpenDAL s3 backend uses
//! (PUT, multipart upload, GET with ranges, HEAD, DELETE, ListObjectsV2), over
//! an `Arc<dyn Backend>`. Every request is authenticated by SigV4 (s3s checks
//! the signature with the secret of [`crate::keys`]), its object name
//! classified ([`crate::names`]), its level checked ([`crate::keys::Level`]),
//! and every upload spooled to a local file, hashed and verified
//! ([`crate::verify`]) before the storage sees it. See docs/design.md#server.

use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use coffer_backend::{Backend, BackendError, ErrorKind};
use coffer_core::format::ObjectKind;
use s3s::dto::*;
use s3s::{S3, S3Error, S3ErrorCode, S3Request, S3Response, S3Result, s3_error};

use crate::activity::Activity;
use crate::keys::{KeyFile, Level, Op};
use crate::log::{LogRead, TransparencyLog};
use crate::multipart::{CompleteError, UploadError, Uploads, WriteAt};
use crate::notices::Notices;
use crate::owners::Owners;
use crate::replay::{self, Claim, Seen};
use crate::spool::{Pace, drain, read_body};
use crate::state::Watched;
use crate::usage::{Reservation, Usage};
use crate::writers::AllowList;
use crate::{names, trash, verify};

/// Bytes read from the storage per piece of a GET body (a GET holds at most
/// about two pieces at once).
const GET_PIECE: u64 = 1 << 20;
/// Packs written to the storage at once: a write to an object store holds a
/// few MiB (OpenDAL gathers multipart parts of at least 5 MiB for S3), so the
/// server's memory is bounded by this, not by the number of clients.
const STORAGE_WRITES: usize = 8;
/// Bytes the checks of uploads read whole ([`verify::needs_whole`]) may hold
/// in memory at once, counted in [`BUDGET_UNIT`]s; a check that needs more
/// waits. The largest check (a 64 MiB tombstone and the signed message)
/// needs 128 MiB.
const MEMORY_BUDGET: u64 = 256 << 20;
/// The unit of [`MEMORY_BUDGET`]'s semaphore.
const BUDGET_UNIT: u64 = 1 << 10;

/// Permits of the memory budget for `bytes`.
fn budget_units(bytes: u64) -> u32 {
    bytes.div_ceil(BUDGET_UNIT).min(MEMORY_BUDGET / BUDGET_UNIT) as u32
}

/// How the service behaves; the binary fills it from its options.
#[derive(Clone, Debug)]
pub struct ServiceOptions {
    /// The one bucket name the server answers to.
    pub bucket: String,
    /// Where uploads are spooled before they are verified.
    pub spool: PathBuf,
    /// The longest wait for the next piece of a request body.
    pub body_timeout: Duration,
    /// The least average rate of a request body once `body_timeout` has
    /// passed, bytes per second ([`crate::spool`]).
    pub min_rate: u64,
    /// How long a multipart upload may stay untouched before it is dropped.
    pub upload_expiry: Duration,
    /// How long a prune notice must have been stored before a `prune` key
    /// deletes packs or index files ([`crate::notices`]).
    pub prune_grace: Duration,
}

/// The S3 service over a backend.
pub struct CofferS3 {
    backend: Arc<dyn Backend>,
    log: Arc<TransparencyLog>,
    keys: Arc<Watched<KeyFile>>,
    writers: Watched<AllowList>,
    opts: ServiceOptions,
    /// Which key wrote each session marker.
    owners: Arc<Owners>,
    /// Multipart uploads in progress.
    uploads: Arc<Uploads>,
    /// Bytes accepted per key, for quotas.
    usage: Arc<Usage>,
    /// When each prune notice was stored.
    notices: Arc<Notices>,
    /// When each writer last stored a snapshot, for the metrics.
    activity: Arc<Activity>,
    /// Permits for writes to the storage ([`STORAGE_WRITES`]).
    writes: Arc<tokio::sync::Semaphore>,
    /// Permits for memory held by upload checks ([`MEMORY_BUDGET`]).
    memory: tokio::sync::Semaphore,
    /// Signatures of state-changing requests received ([`crate::replay`]).
    seen: Arc<Seen>,
}

/// A spooled upload that passed its checks.
struct Checked {
    file: std::fs::File,
    /// A `config`'s bytes.
    config: Option<Vec<u8>>,
    /// The public key (hex) that signed a snapshot.
    writer: Option<String>,
}

/// A complete upload in a spool file.
struct Spooled {
    file: std::fs::File,
    len: u64,
    hash: blake3::Hash,
    /// Its bytes against the caller's quota: counted once it is stored.
    holds: Vec<Reservation>,
    /// The refusal of a replayed request, if it is one: given unless the
    /// upload changes nothing.
    replayed: Option<S3Error>,
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

/// An error with a code of coffer's own (the client tells it apart from
/// other refusals by the code) and an HTTP status.
fn coded(code: &'static str, status: http::StatusCode, message: String) -> S3Error {
    let mut e = S3Error::with_message(S3ErrorCode::Custom(code.into()), message);
    e.set_status_code(status);
    e
}

/// Keeps a claimed signature: the request succeeded.
fn keep(claim: Option<Claim>) {
    if let Some(c) = claim {
        c.keep();
    }
}

fn upload_error(name: &str, e: UploadError) -> S3Error {
    match e {
        UploadError::NoSuchUpload(..) => s3_error!(NoSuchUpload, "{name}: {e}"),
        UploadError::TooManyUploads => s3_error!(SlowDown, "{name}: {e}"),
        UploadError::BadPart(_) => s3_error!(InvalidPart, "{name}: {e}"),
    }
}

fn spool_err(e: std::io::Error) -> S3Error {
    s3_error!(InternalError, "the server cannot spool the upload: {e}")
}

/// What the server keeps of the objects it stores, beside the storage: the
/// service records into them, the server loads them at start.
pub struct Records {
    /// The transparency log of snapshots and tombstones.
    pub log: Arc<TransparencyLog>,
    /// Bytes stored per key.
    pub usage: Arc<Usage>,
    /// When each prune notice was stored.
    pub notices: Arc<Notices>,
    /// Which key wrote each session marker.
    pub owners: Arc<Owners>,
    /// Each writer's snapshots.
    pub activity: Arc<Activity>,
}

impl CofferS3 {
    /// A service over `backend`, with the state directory's key and writer files.
    pub fn new(backend: Arc<dyn Backend>, records: Records, state_dir: &std::path::Path, opts: ServiceOptions) -> Self {
        let Records { log, usage, notices, owners, activity } = records;
        let uploads = Arc::new(Uploads::new(&opts.spool, opts.upload_expiry));
        CofferS3 {
            backend,
            log,
            keys: Arc::new(Watched::new(crate::keys::path(state_dir))),
            writers: Watched::new(crate::writers::path(state_dir)),
            opts,
            owners,
            uploads,
            usage,
            notices,
            activity,
            writes: Arc::new(tokio::sync::Semaphore::new(STORAGE_WRITES)),
            memory: tokio::sync::Semaphore::new((MEMORY_BUDGET / BUDGET_UNIT) as usize),
            seen: Arc::new(Seen::default()),
        }
    }

    /// The multipart uploads in progress, for the task that expires them.
    pub fn uploads(&self) -> Arc<Uploads> {
        self.uploads.clone()
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
        // A marker no key is known to have written is no one's.
        let own = kind == ObjectKind::Session && self.owners.owner(name).as_deref() == Some(c.id.as_str());
        c.level
            .allows(op, Some(kind), own)
            .map_err(|why| s3_error!(AccessDenied, "{name}: access key {:?}: {why}", c.name))
    }

    fn check_size(&self, kind: ObjectKind, name: &str, len: u64) -> S3Result<()> {
        if len > kind.max_len() {
            return Err(s3_error!(
                EntityTooLarge,
                "{name}: {len} bytes exceeds the {} limit of {} bytes (docs/design.md#size-limits)",
                kind.noun(),
                kind.max_len()
            ));
        }
        Ok(())
    }

    /// Reserves `len` bytes of the caller's quota for an upload in flight.
    fn reserve(&self, c: &Caller, name: &str, len: u64) -> S3Result<Reservation> {
        self.usage.reserve(&c.id, len, c.quota).map_err(|o| {
            s3_error!(
                AccessDenied,
                "{name}: access key {:?} has a quota of {} bytes and has used {} (and {} more are being uploaded); \
                 ask the server's admin",
                c.name,
                c.quota.unwrap_or(0),
                o.used,
                o.reserved
            )
        })
    }

    /// Claims the signature of a state-changing request ([`crate::replay`]).
    fn fresh<T>(&self, req: &S3Request<T>) -> S3Result<Option<Claim>> {
        let Some(sig) = replay::signature_of(&req.headers, &req.uri) else { return Ok(None) };
        self.seen.claim(sig, std::time::Instant::now()).map(Some).map_err(|e| {
            coded("RequestReplayed", http::StatusCode::FORBIDDEN, format!("{} {}: {e}", req.method, req.uri.path()))
        })
    }

    fn pace(&self) -> Pace {
        Pace { timeout: self.opts.body_timeout, min_rate: self.opts.min_rate }
    }

    /// Checks the structure of a complete upload ([`verify`]): the kinds whose
    /// check needs every byte are read whole, within the memory budget
    /// ([`MEMORY_BUDGET`]); the others from their first bytes. Returns the
    /// file, the bytes of a `config` (at most 64 KiB), which are stored
    /// with [`Backend::write_new`], and the public key (hex) that signed a
    /// snapshot.
    async fn check_spooled(&self, name: &str, kind: ObjectKind, file: std::fs::File, len: u64) -> S3Result<Checked> {
        let allow = self.writers.get().map_err(|e| s3_error!(InternalError, "{e}"))?;
        let whole = verify::needs_whole(kind) || kind == ObjectKind::Config;
        // A signature check holds the object and the signed message (a copy).
        let cost = if whole { budget_units(len.saturating_mul(2)) } else { 0 };
        let _memory =
            self.memory.acquire_many(cost).await.map_err(|_| s3_error!(InternalError, "the server is stopping"))?;
        let name = name.to_string();
        blocking(move || {
            let want = if whole { len } else { len.min(verify::HEAD_LEN as u64) };
            let mut b = Vec::with_capacity(want as usize);
            let mut f = &file;
            f.seek(SeekFrom::Start(0)).map_err(spool_err)?;
            f.take(want).read_to_end(&mut b).map_err(spool_err)?;
            let body = if whole { verify::Body::Whole(&b) } else { verify::Body::Head { head: &b, len } };
            verify::check_structure(&name, kind, body, &allow).map_err(refused)?;
            let writer = match kind {
                ObjectKind::Snapshot => coffer_core::format::signed::split(&b)
                    .ok()
                    .and_then(|(_, block)| block)
                    .map(|block| block.public_key.to_hex()),
                _ => None,
            };
            Ok(Checked { file, config: (kind == ObjectKind::Config).then_some(b), writer })
        })
        .await
    }

    /// Whether `name` is stored.
    async fn exists(&self, name: &str) -> S3Result<bool> {
        let (be, n) = (self.backend.clone(), name.to_string());
        blocking(move || match be.stat(&n) {
            Ok(_) => Ok(true),
            Err(e) if e.kind == ErrorKind::NotFound => Ok(false),
            Err(e) => Err(backend_error(e)),
        })
        .await
    }

    /// Refuses a `config` from a non-admin key where a config with other
    /// bytes was deleted into the trash: a deleted config is put back from
    /// the trash, or replaced by an admin.
    async fn check_recreate(&self, c: &Caller, name: &str, hash: blake3::Hash) -> S3Result<()> {
        if c.level == Level::Admin {
            return Ok(());
        }
        let (be, n) = (self.backend.clone(), name.to_string());
        let deleted =
            blocking(move || trash::deleted_with_other_bytes(be.as_ref(), &n, &hash).map_err(backend_error)).await?;
        match deleted {
            None => Ok(()),
            Some(t) => Err(s3_error!(
                AccessDenied,
                "{name}: access key {:?}: a {name} with other bytes was deleted into the trash at {t} (seconds since \
                 the epoch); the access key's level is {}, which does not allow writing other bytes under its name; \
                 that needs admin (or put the deleted one back: `coffer serve trash restore {name}`)",
                c.name,
                c.level.name()
            )),
        }
    }

    /// Whether the stored object `name` holds the bytes whose BLAKE3 hash is
    /// `hash`, read in pieces.
    async fn same_bytes(&self, name: &str, size: u64, len: u64, hash: blake3::Hash) -> S3Result<bool> {
        if size != len {
            return Ok(false);
        }
        let be = self.backend.clone();
        let n = name.to_string();
        blocking(move || {
            let mut hasher = blake3::Hasher::new();
            let mut at = 0;
            while at < size {
                let piece = be.read_range(&n, at, GET_PIECE.min(size - at)).map_err(backend_error)?;
                if piece.is_empty() {
                    return Ok(false);
                }
                hasher.update(&piece);
                at += piece.len() as u64;
            }
            Ok(hasher.finalize() == hash)
        })
        .await
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
        let Spooled { file, len, hash, holds, replayed } = up;
        verify::check_hash(&name, names::content_id(kind, &name), &hash).map_err(refused)?;
        let Checked { file, config, writer } = self.check_spooled(&name, kind, file, len).await?;
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
            let same = match names::content_id(kind, &name) {
                // Named by the hash of these very bytes: the same object.
                Some(_) => size == len,
                None => self.same_bytes(&name, size, len, hash).await?,
            };
            if same {
                return self.record(&c.id, kind, name).await;
            }
            if let Some(e) = replayed {
                return Err(e);
            }
            self.allow(c, Op::Replace, kind, &name)?;
        } else if let Some(e) = replayed {
            return Err(e);
        } else if kind == ObjectKind::Config {
            self.check_recreate(c, &name, hash).await?;
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
            match config {
                Some(b) if existing.is_none() => {
                    if !be.write_new(&n, b).map_err(backend_error)? {
                        return Err(s3_error!(PreconditionFailed, "{n} exists"));
                    }
                }
                _ => be.write_file(&n, &file, len).map_err(backend_error)?,
            }
            Ok(())
        })
        .await?;
        holds.into_iter().for_each(Reservation::commit);
        if kind == ObjectKind::Session {
            let (owners, key) = (self.owners.clone(), c.id.clone());
            return blocking(move || {
                owners
                    .stored(&name, &key)
                    .map_err(|e| s3_error!(InternalError, "{name} was stored but its owner not kept: {e}"))
            })
            .await;
        }
        self.record(&c.id, kind, name).await?;
        if let Some(w) = writer {
            // For the metrics only: a file that cannot be written fails no upload
            // (the count in memory stands, and the next snapshot writes it).
            let activity = self.activity.clone();
            let _ = blocking(move || {
                activity.snapshot_stored(&w, crate::activity::now_ms()).map_err(|e| s3_error!(InternalError, "{e}"))
            })
            .await;
        }
        Ok(())
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
        // A PUT sent again (the same signature) is answered only when it
        // changes nothing: the same bytes are stored already.
        let (claim, replayed) = match self.fresh(&req) {
            Ok(claim) => (claim, None),
            Err(e) => (None, Some(e)),
        };
        let input = req.input;
        self.bucket(&input.bucket)?;
        let name = input.key;
        let kind = self.name(&name)?;
        let len = input.content_length.ok_or_else(|| {
            s3_error!(MissingContentLength, "{name}: a PUT must announce its length (Content-Length)")
        })?;
        let len = u64::try_from(len).map_err(|_| s3_error!(InvalidArgument, "{name}: negative length"))?;
        let admitted = self
            .allow(&c, Op::Create, kind, &name)
            .and_then(|()| self.check_size(kind, &name, len))
            .and_then(|()| self.reserve(&c, &name, len));
        let hold = match admitted {
            Ok(hold) => hold,
            Err(refusal) => return Err(drain(input.body, len, self.pace(), refusal).await),
        };
        let mut file = tempfile::tempfile_in(&self.opts.spool).map_err(spool_err)?;
        let mut hasher = blake3::Hasher::new();
        let got = read_body(&name, input.body, len, &mut file, &mut hasher, self.pace()).await?;
        if got != len {
            return Err(s3_error!(IncompleteBody, "{name}: {got} bytes came of the {len} announced"));
        }
        let hash = hasher.finalize();
        let if_none_match = input.if_none_match.is_some();
        let up = Spooled { file, len, hash, holds: vec![hold], replayed };
        self.store(&c, name, kind, up, if_none_match).await?;
        keep(claim);
        Ok(S3Response::new(PutObjectOutput { e_tag: Some(etag_of(&hash)), ..Default::default() }))
    }

    async fn create_multipart_upload(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        let c = self.caller(&req)?;
        let claim = self.fresh(&req)?;
        let input = req.input;
        self.bucket(&input.bucket)?;
        let kind = self.name(&input.key)?;
        self.allow(&c, Op::Create, kind, &input.key)?;
        let id = self.uploads.create(&c.id, &input.key, kind).map_err(|e| match e.get_ref() {
            Some(inner) if inner.is::<UploadError>() => {
                s3_error!(SlowDown, "{}: access key {:?}: {e}", input.key, c.name)
            }
            _ => spool_err(e),
        })?;
        keep(claim);
        Ok(S3Response::new(CreateMultipartUploadOutput {
            bucket: Some(input.bucket),
            key: Some(input.key),
            upload_id: Some(id),
            ..Default::default()
        }))
    }

    async fn upload_part(&self, req: S3Request<UploadPartInput>) -> S3Result<S3Response<UploadPartOutput>> {
        let c = self.caller(&req)?;
        let claim = self.fresh(&req)?;
        let input = req.input;
        self.bucket(&input.bucket)?;
        let name = input.key;
        let len = input
            .content_length
            .and_then(|l| u64::try_from(l).ok())
            .ok_or_else(|| s3_error!(MissingContentLength, "{name}: a part must announce its length"))?;
        let slot = self
            .uploads
            .begin_part(&input.upload_id, &c.id, &name, input.part_number, len)
            .map_err(|e| upload_error(&name, e))?;
        let admitted = self
            .check_size(slot.kind, &name, slot.others.saturating_add(len))
            .and_then(|()| self.reserve(&c, &name, len));
        let hold = match admitted {
            Ok(hold) => hold,
            Err(refusal) => return Err(drain(input.body, len, self.pace(), refusal).await),
        };
        let file = std::fs::OpenOptions::new().write(true).open(&*slot.file).map_err(spool_err)?;
        let mut hasher = blake3::Hasher::new();
        let mut sink = WriteAt { file: &file, at: slot.offset };
        let got = read_body(&name, input.body, len, &mut sink, &mut hasher, self.pace()).await?;
        drop(file);
        if got != len {
            return Err(s3_error!(IncompleteBody, "{name}: {got} bytes came of the {len} announced"));
        }
        let hash = hasher.finalize();
        self.uploads
            .finish_part(&input.upload_id, input.part_number, slot.offset, len, Some(hold))
            .map_err(|e| upload_error(&name, e))?;
        keep(claim);
        Ok(S3Response::new(UploadPartOutput { e_tag: Some(etag_of(&hash)), ..Default::default() }))
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        let c = self.caller(&req)?;
        let claim = self.fresh(&req)?;
        let input = req.input;
        self.bucket(&input.bucket)?;
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
        let (uploads, id, key_id, name) =
            (self.uploads.clone(), input.upload_id.clone(), c.id.clone(), input.key.clone());
        let done = blocking(move || {
            uploads.complete(&id, &key_id, &name, &wanted).map_err(|e| match e {
                CompleteError::Upload(e) => upload_error(&name, e),
                CompleteError::Spool(e) => spool_err(e),
            })
        })
        .await?;
        self.check_size(done.kind, &input.key, done.len)?;
        let hash = done.hash;
        let up = Spooled { file: done.file, len: done.len, hash, holds: done.holds, replayed: None };
        self.store(&c, input.key.clone(), done.kind, up, input.if_none_match.is_some()).await?;
        keep(claim);
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
        let claim = self.fresh(&req)?;
        self.uploads.abort(&req.input.upload_id, &c.id);
        keep(claim);
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
        let fresh = self.fresh(&req);
        let input = req.input;
        self.bucket(&input.bucket)?;
        let name = input.key;
        let kind = self.name(&name)?;
        // A DELETE sent again is answered only when the object is gone: it
        // may not delete what was stored (or restored) since.
        let claim = match fresh {
            Ok(claim) => claim,
            Err(e) => {
                if self.exists(&name).await? {
                    return Err(e);
                }
                return Ok(S3Response::new(DeleteObjectOutput::default()));
            }
        };
        if kind == ObjectKind::Session && self.owners.owner(&name).is_none() && !self.exists(&name).await? {
            // Deleting what is not there succeeds (a prune may have removed it).
            keep(claim);
            return Ok(S3Response::new(DeleteObjectOutput::default()));
        }
        self.allow(&c, Op::Delete, kind, &name)?;
        if c.level == Level::Prune && matches!(kind, ObjectKind::Pack | ObjectKind::Index) {
            self.notices.allow_deletes(&c.id, trash::now(), self.opts.prune_grace.as_secs()).map_err(|why| {
                coded(
                    "PruneGracePending",
                    http::StatusCode::FORBIDDEN,
                    format!("{name}: access key {:?}: {why}", c.name),
                )
            })?;
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
        if kind == ObjectKind::Session {
            let (owners, n) = (self.owners.clone(), name.clone());
            blocking(move || {
                owners.deleted(&n).map_err(|e| s3_error!(InternalError, "{n} was deleted but its owner kept: {e}"))
            })
            .await?;
        }
        if kind == ObjectKind::PruneNotice {
            let (notices, n) = (self.notices.clone(), name.clone());
            blocking(move || {
                notices
                    .deleted(&n)
                    .map_err(|e| s3_error!(InternalError, "{n} was deleted but its time not dropped: {e}"))
            })
            .await?;
        }
        keep(claim);
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
