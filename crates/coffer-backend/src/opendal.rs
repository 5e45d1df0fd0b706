//! The backend over OpenDAL: every remote service (S3 and the others listed in
//! [`crate::Location`]) and, for comparison, a local directory through OpenDAL's
//! fs service. Local repositories use [`super::LocalBackend`], which needs no
//! runtime and follows no links inside the repository.
//!
//! One multi-threaded tokio runtime per process drives every operator; the
//! synchronous [`Backend`] calls go through OpenDAL's blocking API on it, and
//! [`Backend::read_ranges`] sends its ranges concurrently on it. HTTP goes
//! through one reqwest client per backend, with rustls over ring, the system's
//! root certificates, and the extra ones of `--cacert`. Errors are classified
//! for the retry wrapper and explained (a missing bucket, refused credentials,
//! throttling, a refused connection, a timeout). See
//! docs/design.md#storage-contract and docs/design.md#locations.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use futures::StreamExt;
use opendal::{ErrorKind as OdErrorKind, Operator, blocking};

use super::location::Location;
use super::remote_error::{Cause, server_message};
use super::{Backend, BackendError, BackendResult, ErrorKind, ObjectInfo};

/// Requests in flight against an object store unless told otherwise.
pub const DEFAULT_REMOTE_CONNECTIONS: usize = 32;

/// Connections to an SFTP server unless told otherwise: each is an `ssh`
/// process with its own session.
pub const DEFAULT_SFTP_CONNECTIONS: usize = 4;

/// The environment variables a remote location may take its credentials and
/// settings from. The library reads none of them: the binary reads these and
/// passes them in [`RemoteOptions::vars`].
pub const CREDENTIAL_VARIABLES: &[&str] = &[
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ENDPOINT_URL",
    "AWS_PROFILE",
    "AZURE_ACCOUNT_NAME",
    "AZURE_ACCOUNT_KEY",
    "AZURE_ACCOUNT_SAS",
    "AZURE_ENDPOINT_SUFFIX",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GOOGLE_ACCESS_TOKEN",
    "B2_ACCOUNT_ID",
    "B2_ACCOUNT_KEY",
    "B2_BUCKET_ID",
    "OS_STORAGE_URL",
    "OS_AUTH_TOKEN",
    "COFFER_WEBDAV_USERNAME",
    "COFFER_WEBDAV_PASSWORD",
    "COFFER_SFTP_KEY",
    "COFFER_SERVER_KEY_ID",
    "COFFER_SERVER_SECRET",
    "COFFER_SERVER_ALLOW_HTTP",
    "COFFER_SERVER_LOG_KEY",
];

/// How to reach a remote location, as the binary gathered it.
#[derive(Clone, Debug)]
pub struct RemoteOptions {
    /// Credential and setting variables by name (those of
    /// [`CREDENTIAL_VARIABLES`] that are set).
    pub vars: BTreeMap<String, String>,
    /// Requests in flight at most ([`Backend::connections`]); `None` for the
    /// service's default ([`DEFAULT_REMOTE_CONNECTIONS`], or
    /// [`DEFAULT_SFTP_CONNECTIONS`] for SFTP).
    pub connections: Option<usize>,
    /// Extra trusted certificates (PEM), added to the system's roots.
    pub cacert: Option<Vec<u8>>,
    /// How long one request may take before it fails as a (transient) timeout.
    pub timeout: Duration,
}

impl Default for RemoteOptions {
    fn default() -> Self {
        RemoteOptions { vars: BTreeMap::new(), connections: None, cacert: None, timeout: Duration::from_secs(120) }
    }
}

/// A [`Backend`] over an OpenDAL operator, driven through OpenDAL's blocking API
/// on the process's I/O runtime.
pub struct OpendalBackend {
    op: blocking::Operator,
    async_op: Operator,
    location: String,
    connections: usize,
    /// Writes go to `tmp/` and are renamed into place: for services whose
    /// writes are not atomic by themselves (SFTP writes the file in place).
    staged: bool,
    /// Bytes of files being uploaded whole, read into memory (at most
    /// [`WHOLE_UPLOADS`]).
    whole: std::sync::atomic::AtomicU64,
}

/// The process's I/O runtime, made on first use.
fn runtime() -> BackendResult<&'static tokio::runtime::Runtime> {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    if let Some(rt) = RT.get() {
        return Ok(rt);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("coffer-io")
        .enable_all()
        .build()
        .map_err(|e| {
            BackendError::new(ErrorKind::Permanent, "runtime", format!("cannot start the I/O runtime: {e}"))
        })?;
    Ok(RT.get_or_init(|| rt))
}

fn classify(e: &opendal::Error) -> ErrorKind {
    // A recognised cause wins over the status: some S3 servers answer an
    // unknown access key or a missing bucket with 404, which is no missing object.
    if let Some(kind) = Cause::of(e).and_then(Cause::kind) {
        return kind;
    }
    match e.kind() {
        OdErrorKind::NotFound => ErrorKind::NotFound,
        _ if local_cause_is_permanent(e) => ErrorKind::Permanent,
        _ if e.is_temporary() => ErrorKind::Transient,
        _ => ErrorKind::Permanent,
    }
}

/// Whether a local system error under `e` is one that no retry mends: a full
/// disk or quota, a read-only file system, a permission denied. OpenDAL marks
/// most local I/O errors temporary.
fn local_cause_is_permanent(e: &opendal::Error) -> bool {
    io_cause(e).is_some_and(|io| {
        matches!(io.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT | libc::EROFS | libc::EACCES | libc::EPERM))
    })
}

/// The first system error in the chain of causes of `e`.
fn io_cause(e: &opendal::Error) -> Option<&std::io::Error> {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            return Some(io);
        }
        cause = c.source();
    }
    None
}

/// The error for `object`: a common cause in one line (with the server's own
/// words where it gave some), OpenDAL's text as the detail.
fn err(object: &str, e: opendal::Error) -> BackendError {
    let kind = classify(&e);
    match Cause::of(&e) {
        Some(cause) => {
            let message = match (cause, server_message(&e)) {
                (Cause::QuotaUsed | Cause::KeyLevel | Cause::PruneGrace | Cause::Replayed, Some(m)) => {
                    format!("{} ({m})", cause.advice())
                }
                _ => cause.advice().to_string(),
            };
            BackendError::new(kind, object, message).with_detail(e.to_string())
        }
        None => BackendError::new(kind, object, e.to_string()),
    }
}

/// An error about the location itself (before any object).
fn config_err(location: &str, message: impl Into<String>) -> BackendError {
    BackendError::new(ErrorKind::Permanent, location, message)
}

/// Checks extra trusted certificates (`--cacert`): PEM text holding at least
/// one certificate, each one a certificate rustls can take as a trust anchor.
/// Returns how many it holds, or what is wrong, in words.
pub fn check_cacert(pem: &[u8]) -> Result<usize, String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    let mut n = 0;
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|e| format!("not a PEM certificate bundle ({e})"))?;
        roots.add(cert).map_err(|e| format!("certificate {} does not parse ({e})", n + 1))?;
        n += 1;
    }
    if n == 0 {
        return Err("it holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into());
    }
    Ok(n)
}

/// The reqwest client for HTTP services: rustls over ring, the system's roots
/// plus `cacert`, and a connection pool as large as the requests in flight.
fn http_client(location: &str, opts: &RemoteOptions, connections: usize) -> BackendResult<reqwest::Client> {
    // rustls needs a crypto provider; ring is the one coffer already links. When
    // the process has one installed, this does nothing.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut b = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(30))
        .read_timeout(opts.timeout)
        .pool_max_idle_per_host(connections);
    if let Some(pem) = &opts.cacert {
        check_cacert(pem).map_err(|e| config_err(location, format!("--cacert: {e}")))?;
        let certs = reqwest::Certificate::from_pem_bundle(pem)
            .map_err(|e| config_err(location, format!("--cacert: not a PEM certificate bundle: {e}")))?;
        if certs.is_empty() {
            return Err(config_err(location, "--cacert: the file holds no PEM certificate"));
        }
        b = b.tls_certs_merge(certs);
    }
    b.build().map_err(|e| config_err(location, format!("cannot set up the HTTP client: {e}")))
}

impl OpendalBackend {
    /// A backend over a local directory through OpenDAL's file system service.
    /// Writes go to `<root>/tmp/` first and are renamed into place, so they are
    /// atomic; directories are not synced and links are followed: coffer itself
    /// uses [`super::LocalBackend`].
    pub fn local(root: &Path) -> BackendResult<Self> {
        let root_s = root.to_string_lossy().to_string();
        let tmp = root.join("tmp").to_string_lossy().to_string();
        let builder = opendal::services::Fs::default().root(&root_s).atomic_write_dir(&tmp);
        let op = Operator::new(builder).map_err(|e| err(&root_s, e))?;
        Self::from_operator(op, root_s, super::local_connections())
    }

    /// Opens a remote `location` with `opts`. A local location is refused: it
    /// belongs to [`super::LocalBackend`].
    pub fn open(location: &Location, opts: &RemoteOptions) -> BackendResult<Self> {
        let loc = location.to_string();
        let connections = match location {
            Location::Sftp { .. } => opts.connections.unwrap_or(DEFAULT_SFTP_CONNECTIONS),
            _ => opts.connections.unwrap_or(DEFAULT_REMOTE_CONNECTIONS),
        }
        .max(1);
        let var = |k: &str| opts.vars.get(k).map(String::as_str).filter(|v| !v.is_empty());
        let need =
            |k: &str, what: &str| var(k).ok_or_else(|| config_err(&loc, format!("{what}: set {k} in the environment")));
        let op = match location {
            Location::Local(_) => {
                return Err(config_err(&loc, "a local directory is opened with the local backend"));
            }
            Location::S3 { endpoint, bucket, prefix } => {
                let region = var("AWS_REGION").or(var("AWS_DEFAULT_REGION")).unwrap_or("us-east-1");
                let endpoint = match (endpoint, var("AWS_ENDPOINT_URL")) {
                    (Some(e), _) => e.clone(),
                    (None, Some(e)) => e.to_string(),
                    (None, None) => format!("https://s3.{region}.amazonaws.com"),
                };
                let mut b = opendal::services::S3::default()
                    .endpoint(&endpoint)
                    .bucket(bucket)
                    .root(&format!("/{prefix}"))
                    .region(region)
                    .disable_ec2_metadata();
                match (var("AWS_ACCESS_KEY_ID"), var("AWS_SECRET_ACCESS_KEY")) {
                    (Some(id), Some(secret)) => {
                        b = b.access_key_id(id).secret_access_key(secret).disable_config_load();
                        if let Some(t) = var("AWS_SESSION_TOKEN") {
                            b = b.session_token(t);
                        }
                    }
                    (Some(_), None) | (None, Some(_)) => {
                        return Err(config_err(
                            &loc,
                            "set both AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or neither (to use a profile)",
                        ));
                    }
                    // No keys: OpenDAL loads the shared AWS config and credentials
                    // files, with the profile named by AWS_PROFILE.
                    (None, None) => {
                        if let Some(p) = var("AWS_PROFILE") {
                            b = b.profile(p);
                        }
                    }
                }
                Operator::new(b).map_err(|e| err(&loc, e))?
            }
            Location::Sftp { user, host, port, path } => {
                let endpoint = match port {
                    Some(p) => format!("ssh://{host}:{p}"),
                    None => host.clone(),
                };
                let mut b = opendal::services::Sftp::default().endpoint(&endpoint).root(path);
                if let Some(u) = user {
                    b = b.user(u);
                }
                if let Some(k) = var("COFFER_SFTP_KEY") {
                    b = b.key(k);
                }
                Operator::new(b.known_hosts_strategy("strict")).map_err(|e| err(&loc, e))?
            }
            Location::Webdav { endpoint, root } => {
                let mut b = opendal::services::Webdav::default().endpoint(endpoint).root(root);
                if let Some(u) = var("COFFER_WEBDAV_USERNAME") {
                    b = b.username(u).password(var("COFFER_WEBDAV_PASSWORD").unwrap_or(""));
                }
                Operator::new(b).map_err(|e| err(&loc, e))?
            }
            Location::Azure { container, prefix } => {
                let account = need("AZURE_ACCOUNT_NAME", "the Azure storage account")?;
                let suffix = var("AZURE_ENDPOINT_SUFFIX").unwrap_or("core.windows.net");
                let mut b = opendal::services::Azblob::default()
                    .container(container)
                    .root(&format!("/{prefix}"))
                    .endpoint(&format!("https://{account}.blob.{suffix}"))
                    .account_name(account);
                match (var("AZURE_ACCOUNT_KEY"), var("AZURE_ACCOUNT_SAS")) {
                    (Some(k), _) => b = b.account_key(k),
                    (None, Some(sas)) => b = b.sas_token(sas),
                    (None, None) => {
                        return Err(config_err(&loc, "set AZURE_ACCOUNT_KEY or AZURE_ACCOUNT_SAS in the environment"));
                    }
                }
                Operator::new(b).map_err(|e| err(&loc, e))?
            }
            Location::Gcs { bucket, prefix } => {
                let mut b = opendal::services::Gcs::default()
                    .bucket(bucket)
                    .root(&format!("/{prefix}"))
                    .disable_vm_metadata()
                    .disable_config_load();
                match (var("GOOGLE_APPLICATION_CREDENTIALS"), var("GOOGLE_ACCESS_TOKEN")) {
                    (Some(path), _) => b = b.credential_path(path),
                    (None, Some(t)) => b = b.token(t.to_string()),
                    (None, None) => {
                        return Err(config_err(
                            &loc,
                            "set GOOGLE_APPLICATION_CREDENTIALS (a service account file) or GOOGLE_ACCESS_TOKEN",
                        ));
                    }
                }
                Operator::new(b).map_err(|e| err(&loc, e))?
            }
            Location::B2 { bucket, prefix } => {
                let b = opendal::services::B2::default()
                    .bucket(bucket)
                    .bucket_id(need("B2_BUCKET_ID", "the B2 bucket's id")?)
                    .application_key_id(need("B2_ACCOUNT_ID", "the B2 application key id")?)
                    .application_key(need("B2_ACCOUNT_KEY", "the B2 application key")?)
                    .root(&format!("/{prefix}"));
                Operator::new(b).map_err(|e| err(&loc, e))?
            }
            Location::Server { endpoint, name } => {
                if endpoint.starts_with("http://") && var("COFFER_SERVER_ALLOW_HTTP") != Some("1") {
                    return Err(config_err(
                        &loc,
                        "coffer:http:// sends credentials and data unencrypted: use https, or set \
                         COFFER_SERVER_ALLOW_HTTP=1 when a trusted network or proxy carries it",
                    ));
                }
                // The server checks SigV4 with the key's secret; the region is not checked.
                let b = opendal::services::S3::default()
                    .endpoint(endpoint)
                    .bucket(name)
                    .root("/")
                    .region("us-east-1")
                    .disable_ec2_metadata()
                    .disable_config_load()
                    .access_key_id(need("COFFER_SERVER_KEY_ID", "the access key id `coffer serve key add` printed")?)
                    .secret_access_key(need("COFFER_SERVER_SECRET", "the secret `coffer serve key add` printed")?);
                Operator::new(b).map_err(|e| err(&loc, e))?
            }
            Location::Swift { container, prefix } => {
                let b = opendal::services::Swift::default()
                    .endpoint(need("OS_STORAGE_URL", "the Swift storage URL")?)
                    .token(need("OS_AUTH_TOKEN", "the Swift token")?)
                    .container(container)
                    .root(&format!("/{prefix}"));
                Operator::new(b).map_err(|e| err(&loc, e))?
            }
        };
        let op = match location {
            Location::Sftp { .. } => op,
            _ => {
                let transport =
                    opendal_http_transport_reqwest::ReqwestTransport::new(http_client(&loc, opts, connections)?);
                op.with_context(
                    opendal::OperationContext::new().with_http_transport(opendal::HttpTransporter::new(transport)),
                )
            }
        };
        let op =
            op.layer(opendal::layers::TimeoutLayer::new().with_timeout(opts.timeout).with_io_timeout(opts.timeout));
        let mut be = Self::from_operator(op, loc, connections)?;
        // An SFTP upload writes the file in place, so a reader could see a part
        // of it (the conformance suite's atomic-write check caught this): stage it.
        be.staged = matches!(location, Location::Sftp { .. });
        Ok(be)
    }

    /// Wraps any OpenDAL operator; `connections` is how many requests to keep
    /// in flight.
    pub fn from_operator(op: Operator, location: String, connections: usize) -> BackendResult<Self> {
        let _guard = runtime()?.enter();
        let async_op = op.clone();
        let op = blocking::Operator::new(op).map_err(|e| err(&location, e))?;
        Ok(OpendalBackend { op, async_op, location, connections, staged: false, whole: Default::default() })
    }

    /// Writes object `name` with `write`, which is given the name to write to:
    /// the object's own, or for a staged backend a new name in `tmp/` that is
    /// then renamed over it (SFTP's `posix-rename`, atomic on OpenSSH servers).
    fn put(&self, name: &str, write: impl FnOnce(&str) -> BackendResult<()>) -> BackendResult<()> {
        if !self.staged {
            return write(name);
        }
        let tmp = format!("tmp/{}.tmp", hex::encode(crate::random_array::<12>()));
        let r = write(&tmp).and_then(|()| self.op.rename(&tmp, name).map_err(|e| err(name, e)));
        if r.is_err() {
            let _ = self.op.delete(&tmp);
        }
        r
    }

    /// Reads `len` bytes at `offset` through the async operator (for batches).
    async fn read_range_async(&self, name: &str, offset: u64, len: u64) -> BackendResult<Vec<u8>> {
        if len == 0 {
            return Ok(Vec::new());
        }
        match self.async_op.read_with(name).range(offset..offset.saturating_add(len)).await {
            Ok(b) => Ok(b.to_vec()),
            Err(e) if e.kind() == OdErrorKind::NotFound => Err(err(name, e)),
            // Past the end of the object, a service answers 416 or a short body,
            // which OpenDAL reports as an error: clip the range to the size.
            Err(e) => {
                let Ok(meta) = self.async_op.stat(name).await else { return Err(err(name, e)) };
                let size = meta.content_length();
                if offset.saturating_add(len) <= size {
                    return Err(err(name, e));
                }
                if offset >= size {
                    return Ok(Vec::new());
                }
                Ok(self.async_op.read_with(name).range(offset..size).await.map_err(|e| err(name, e))?.to_vec())
            }
        }
    }
}

/// [`Backend::write_file`] hands a file to OpenDAL in pieces of this size.
const UPLOAD_PIECE: u64 = 1 << 20;

/// Files being uploaded (packs) are sent in one request, read whole into memory,
/// while the bytes so held stay within this budget: one round trip, where a file
/// streamed in pieces costs three on S3 (a multipart upload is begun, its parts
/// sent, then completed). Beyond the budget files are streamed, so memory stays
/// bounded whatever the pack size and the number of uploads in flight.
const WHOLE_UPLOADS: u64 = 32 << 20;

impl Backend for OpendalBackend {
    fn location(&self) -> String {
        self.location.clone()
    }

    fn connections(&self) -> usize {
        self.connections
    }

    fn read_ranges(&self, name: &str, ranges: &[(u64, u64)]) -> Vec<BackendResult<Vec<u8>>> {
        if ranges.len() < 2 {
            return ranges.iter().map(|&(o, l)| self.read_range(name, o, l)).collect();
        }
        let Ok(rt) = runtime() else {
            return ranges.iter().map(|&(o, l)| self.read_range(name, o, l)).collect();
        };
        rt.block_on(
            futures::stream::iter(ranges.iter().map(|&(o, l)| self.read_range_async(name, o, l)))
                .buffered(self.connections)
                .collect(),
        )
    }

    fn read_max(&self, name: &str, max: u64) -> BackendResult<Vec<u8>> {
        // One request, no HEAD first (docs/design.md#round-trips): the object is
        // streamed and the read stops once it passes `max` bytes, so no more than
        // `max` plus one chunk is ever held. (A bounded range would not do: past
        // the object's end OpenDAL takes the short answer for an error.) The
        // whole body is taken in one task on the I/O runtime, so the connection
        // is read as fast as the data arrives: a server that closes after the
        // response, behind a proxy that then resets, loses nothing we were slow
        // to take.
        let rt = runtime()?;
        let got = rt.block_on(async {
            let reader = self.async_op.reader(name).await?;
            let mut stream = reader.into_stream(..).await?;
            let mut out = Vec::new();
            while let Some(buf) = stream.next().await {
                let buf = buf?;
                if (out.len() + buf.len()) as u64 > max {
                    return Ok(Err(out.len() + buf.len()));
                }
                for chunk in buf {
                    out.extend_from_slice(&chunk);
                }
            }
            Ok(Ok(out))
        });
        match got.map_err(|e: opendal::Error| err(name, e))? {
            Ok(out) => Ok(out),
            Err(seen) => {
                // The size, for the message only, is asked for separately.
                let size = self.stat(name).unwrap_or(seen as u64);
                Err(BackendError::too_large(name, size, max))
            }
        }
    }

    fn read_range(&self, name: &str, offset: u64, len: u64) -> BackendResult<Vec<u8>> {
        if len == 0 {
            return Ok(Vec::new());
        }
        let range = |end: u64| opendal::options::ReadOptions { range: (offset..end).into(), ..Default::default() };
        match self.op.read_options(name, range(offset.saturating_add(len))) {
            Ok(b) => Ok(b.to_vec()),
            Err(e) if e.kind() == OdErrorKind::NotFound => Err(err(name, e)),
            // Past the end of the object, a service answers 416 or a short body,
            // which OpenDAL reports as an error: clip the range to the size.
            Err(e) => {
                let Ok(size) = self.stat(name) else { return Err(err(name, e)) };
                if offset.saturating_add(len) <= size {
                    return Err(err(name, e));
                }
                if offset >= size {
                    return Ok(Vec::new());
                }
                Ok(self.op.read_options(name, range(size)).map_err(|e| err(name, e))?.to_vec())
            }
        }
    }

    fn write(&self, name: &str, data: Vec<u8>) -> BackendResult<()> {
        self.put(name, |to| self.op.write(to, data).map(|_| ()).map_err(|e| err(name, e)))
    }

    fn write_new(&self, name: &str, data: Vec<u8>) -> BackendResult<bool> {
        if !self.op.info().capability().write_with_if_not_exists {
            // The default: stat, then write.
            return match self.stat(name) {
                Ok(_) => Ok(false),
                Err(e) if e.kind == ErrorKind::NotFound => self.write(name, data).map(|()| true),
                Err(e) => Err(e),
            };
        }
        let opts = opendal::options::WriteOptions { if_not_exists: true, ..Default::default() };
        match self.op.write_options(name, data, opts) {
            Ok(_) => Ok(true),
            // 412: the object exists (S3 `If-None-Match: *`).
            Err(e) if e.kind() == OdErrorKind::ConditionNotMatch => Ok(false),
            Err(e) => Err(err(name, e)),
        }
    }

    fn write_file(&self, name: &str, file: &std::fs::File, len: u64) -> BackendResult<()> {
        use std::sync::atomic::Ordering::AcqRel;
        if self.whole.fetch_add(len, AcqRel) + len <= WHOLE_UPLOADS {
            let r = super::read_spool(name, file, 0, len).and_then(|data| self.write(name, data));
            self.whole.fetch_sub(len, AcqRel);
            return r;
        }
        self.whole.fetch_sub(len, AcqRel);
        self.put(name, |to| {
            let mut w = self.op.writer(to).map_err(|e| err(name, e))?;
            let mut offset = 0;
            while offset < len {
                let n = (len - offset).min(UPLOAD_PIECE);
                w.write(super::read_spool(name, file, offset, n)?).map_err(|e| err(name, e))?;
                offset += n;
            }
            w.close().map_err(|e| err(name, e))?;
            Ok(())
        })
    }

    fn stat(&self, name: &str) -> BackendResult<u64> {
        Ok(self.op.stat(name).map_err(|e| err(name, e))?.content_length())
    }

    fn list(&self, prefix: &str) -> BackendResult<Vec<ObjectInfo>> {
        let opts = opendal::options::ListOptions { recursive: true, ..Default::default() };
        let entries = match self.op.list_options(prefix, opts) {
            Ok(e) => e,
            Err(e) if e.kind() == OdErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(err(prefix, e)),
        };
        let mut out = Vec::with_capacity(entries.len());
        for e in entries {
            if e.metadata().is_dir() {
                continue;
            }
            let size = match e.metadata().content_length() {
                0 => self.stat(e.path()).unwrap_or(0),
                n => n,
            };
            out.push(ObjectInfo { name: e.path().to_string(), size });
        }
        Ok(out)
    }

    fn delete(&self, name: &str) -> BackendResult<()> {
        match self.op.delete(name) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == OdErrorKind::NotFound => Ok(()),
            Err(e) => Err(err(name, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_reads_past_the_end_are_short_not_errors() {
        let dir = tempfile::tempdir().unwrap();
        let be = OpendalBackend::local(dir.path()).unwrap();
        be.write("data/ab/obj", (0..100u8).collect()).unwrap();
        assert_eq!(be.read_range("data/ab/obj", 10, 20).unwrap(), (10..30u8).collect::<Vec<_>>());
        assert_eq!(be.read_range("data/ab/obj", 50, 100).unwrap(), (50..100u8).collect::<Vec<_>>());
        assert!(be.read_range("data/ab/obj", 100, 10).unwrap().is_empty());
        assert!(be.read_range("data/ab/obj", 500, 10).unwrap().is_empty());
        assert_eq!(be.read_range("data/ab/missing", 0, 10).unwrap_err().kind, ErrorKind::NotFound);
        assert_eq!(be.read("data/ab/obj").unwrap(), (0..100u8).collect::<Vec<_>>());
        assert_eq!(be.read("data/ab/missing").unwrap_err().kind, ErrorKind::NotFound);
        be.write("data/ab/empty", Vec::new()).unwrap();
        assert!(be.read("data/ab/empty").unwrap().is_empty());
        assert!(be.read_range("data/ab/empty", 0, 10).unwrap().is_empty());
    }

    #[test]
    fn a_full_disk_is_permanent_not_temporary() {
        if !rustix::process::geteuid().is_root() {
            eprintln!("skipped: mounting a small tmpfs needs root");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            eprintln!("skipped: cannot mount a tmpfs here");
            return;
        }
        let be = OpendalBackend::local(dir.path()).unwrap();
        let r = be.write("data/ab/big", vec![1; 1 << 20]);
        let _ = std::process::Command::new("umount").arg(dir.path()).status();
        assert_eq!(r.unwrap_err().kind, ErrorKind::Permanent);
    }
}
