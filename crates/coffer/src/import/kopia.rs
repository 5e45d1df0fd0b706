//! A kopia repository as coffer imports it (docs/design.md#import-from-kopia),
//! through the user's own `kopia`: `repository status --json` for the
//! repository's id, `snapshot list --all --json` for the snapshots, and one
//! `kopia server start` for the whole import, whose HTTP API (on a Unix socket
//! in a private directory, with a random password) serves every object: a
//! directory's JSON manifest, a file's bytes, a link's target.
//!
//! Every kopia command runs with a copy of the user's config file marked
//! read-only (`"readonly": true`, which makes kopia refuse writes to the
//! repository's storage, and keeps its server from running maintenance or
//! scheduled snapshots); the copy lives in a private temporary directory with
//! the socket, removed when the import ends.
//!
//! The files a snapshot's import stores are read ahead, several requests in
//! flight ([`feed`]), and handed over through [`ForeignTree::feed`].

mod feed;

pub use feed::WalkedDirs;

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use coffer_core::format::bytes::Bytes;
use coffer_core::format::tree::{Node, NodeKind, Timestamp};
use coffer_core::ops::backup::{ContentMemo, Fed, ForeignEntry, ForeignTree, Listing, Payload, Store};
use coffer_import::kopia::{self as k, EntryType};
use zeroize::Zeroizing;

/// How a `kopia` command failed, as far as its messages tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KopiaFailure {
    /// The password does not open the repository.
    WrongPassword,
    /// No repository is connected with that config file.
    NoRepository,
    /// Anything else.
    Other,
}

/// A `kopia` command failed; `stderr` is what it said (its end, when long).
#[derive(Debug)]
pub struct KopiaFailed {
    /// The command.
    pub command: String,
    /// Its exit status (or what stopped it).
    pub status: String,
    /// What it wrote to its standard error, or what went wrong running it.
    pub stderr: String,
    /// What that says.
    pub kind: KopiaFailure,
}

impl std::fmt::Display for KopiaFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "`kopia {}` failed ({}): {}", self.command, self.status, self.stderr.trim())?;
        match self.kind {
            KopiaFailure::WrongPassword => write!(
                f,
                "; give the kopia repository's password in COFFER_FROM_PASSWORD, --from-password-file or \
                 KOPIA_PASSWORD"
            ),
            KopiaFailure::NoRepository => write!(
                f,
                "; connect to the repository with `kopia repository connect …`, or name its config file: \
                 kopia:CONFIG_FILE"
            ),
            KopiaFailure::Other => Ok(()),
        }
    }
}

impl std::error::Error for KopiaFailed {}

impl KopiaFailed {
    fn new(command: &str, status: &str, stderr: String, kind: KopiaFailure) -> Self {
        KopiaFailed { command: command.into(), status: status.into(), stderr, kind }
    }
}

/// The most of a command's standard error kept for its message.
const STDERR_KEPT: usize = 16 << 10;

/// The largest config file read.
const CONFIG_LIMIT: u64 = 1 << 20;

/// How long the server may take to open the repository and listen.
const SERVER_READY: Duration = Duration::from_secs(120);

/// How long one request may wait for the server (for its answer, then for each
/// read of its body) before it is given up.
const REQUEST_STALL: Duration = Duration::from_secs(600);

/// The longest symbolic link target read (Linux's `PATH_MAX`).
const MAX_TARGET: u64 = 4096;

/// The user name the import's server accepts (with a random password).
const SERVER_USER: &str = "coffer";

/// What a failure's standard error says.
fn classify(stderr: &str) -> KopiaFailure {
    if stderr.contains("invalid repository password") {
        KopiaFailure::WrongPassword
    } else if stderr.contains("repository is not connected") || stderr.contains("unable to open config") {
        KopiaFailure::NoRepository
    } else {
        KopiaFailure::Other
    }
}

/// The user's `kopia`, with a read-only copy of the user's config file.
pub struct Kopia {
    program: PathBuf,
    password: Option<Zeroizing<String>>,
    dir: tempfile::TempDir,
    config: PathBuf,
}

impl Kopia {
    /// `program` (found in `PATH` when it is a bare name) with the kopia
    /// repository whose config file is `config`, given `password` in its
    /// environment when there is one (else kopia's own `KOPIA_PASSWORD` or the
    /// password it saved beside the config file apply).
    pub fn new(program: PathBuf, config: &Path, password: Option<Zeroizing<String>>) -> Result<Self, KopiaFailed> {
        let shown = format!("--config-file {}", config.display());
        let no_config = |why: String| KopiaFailed::new(&shown, "not started", why, KopiaFailure::NoRepository);
        let mut text = Vec::new();
        std::fs::File::open(config)
            .and_then(|f| f.take(CONFIG_LIMIT + 1).read_to_end(&mut text))
            .map_err(|e| no_config(format!("cannot read the kopia config file {}: {e}", config.display())))?;
        if text.len() as u64 > CONFIG_LIMIT {
            return Err(no_config(format!("{} is larger than a kopia config file", config.display())));
        }
        let mut v: serde_json::Value = serde_json::from_slice(&text)
            .map_err(|e| no_config(format!("{} is not a kopia config file: {e}", config.display())))?;
        let Some(obj) = v.as_object_mut() else {
            return Err(no_config(format!("{} is not a kopia config file", config.display())));
        };
        obj.insert("readonly".into(), true.into());
        // kopia resolves a relative cache directory against the config file's
        // directory: keep it the user's cache.
        let base = config.parent().unwrap_or(Path::new("."));
        if let Some(cache) = obj.get_mut("caching").and_then(|c| c.get_mut("cacheDirectory"))
            && let Some(d) = cache.as_str()
            && !d.is_empty()
            && !Path::new(d).is_absolute()
        {
            *cache = base.join(d).to_string_lossy().into_owned().into();
        }
        let dir = tempfile::Builder::new()
            .prefix("coffer-kopia-")
            .tempdir()
            .map_err(|e| no_config(format!("cannot make a temporary directory: {e}")))?;
        let copy = dir.path().join("repository.config");
        let write = |path: &Path, bytes: &[u8]| {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(path)
                .and_then(|mut f| f.write_all(bytes))
                .map_err(|e| no_config(format!("cannot write {}: {e}", path.display())))
        };
        write(&copy, &serde_json::to_vec(&v).expect("a JSON value"))?;
        // The password kopia saved when connecting, beside the config file.
        let mut saved = config.as_os_str().to_os_string();
        saved.push(".kopia-password");
        if let Ok(pw) = std::fs::read(&saved) {
            let pw = Zeroizing::new(pw);
            let mut to = copy.as_os_str().to_os_string();
            to.push(".kopia-password");
            write(Path::new(&to), &pw)?;
        }
        Ok(Kopia { program, password, dir, config: copy })
    }

    fn command(&self, args: &[&OsStr]) -> Command {
        let mut c = Command::new(&self.program);
        c.arg("--config-file")
            .arg(&self.config)
            .args(args)
            .env("KOPIA_CHECK_FOR_UPDATES", "false")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(p) = &self.password {
            c.env("KOPIA_PASSWORD", p.as_str());
        }
        c
    }

    fn spawn(&self, mut c: Command, shown: &str) -> Result<Child, KopiaFailed> {
        c.spawn().map_err(|e| {
            KopiaFailed::new(
                shown,
                "not started",
                format!(
                    "cannot run {}: {e} (is kopia installed and in PATH? COFFER_KOPIA names another)",
                    self.program.display()
                ),
                KopiaFailure::Other,
            )
        })
    }

    /// Runs `kopia ARGS` to its end; what it printed (at most `limit` bytes).
    pub fn output(&self, args: &[&str], limit: usize) -> Result<Vec<u8>, KopiaFailed> {
        let shown = args.join(" ");
        let os: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
        let mut child = self.spawn(self.command(&os), &shown)?;
        let stderr = drain(child.stderr.take().expect("piped"), None);
        let mut out = Vec::new();
        let read = child.stdout.take().expect("piped").take(limit as u64 + 1).read_to_end(&mut out);
        if out.len() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return Err(KopiaFailed::new(
                &shown,
                "stopped",
                format!("it printed more than the {limit} bytes accepted"),
                KopiaFailure::Other,
            ));
        }
        let status = child.wait();
        let stderr = stderr.join().unwrap_or_default();
        match status {
            Ok(s) if s.success() => {}
            Ok(s) => return Err(KopiaFailed::new(&shown, &s.to_string(), stderr.clone(), classify(&stderr))),
            Err(e) => return Err(KopiaFailed::new(&shown, "not waited for", e.to_string(), KopiaFailure::Other)),
        }
        read.map_err(|e| KopiaFailed::new(&shown, "read failed", e.to_string(), KopiaFailure::Other))?;
        Ok(out)
    }

    /// Starts `kopia server start` on a Unix socket of this import's private
    /// directory, and waits until it listens.
    pub fn serve(&self) -> Result<Server, KopiaFailed> {
        let shown = "server start";
        let socket = self.dir.path().join("server.sock");
        let mut address = std::ffi::OsString::from("unix:");
        address.push(&socket);
        let password = Zeroizing::new(random_hex()?);
        let args: Vec<&OsStr> = [
            "server",
            "start",
            "--insecure",
            "--server-username",
            SERVER_USER,
            "--no-grpc",
            "--no-control-api",
            "--shutdown-on-stdin",
            "--address",
        ]
        .iter()
        .map(OsStr::new)
        .chain([address.as_os_str()])
        .collect();
        let mut c = self.command(&args);
        c.env("KOPIA_SERVER_PASSWORD", password.as_str()).stdin(Stdio::piped()).stdout(Stdio::null());
        let mut child = self.spawn(c, shown)?;
        let stdin = child.stdin.take();
        let (ready_tx, ready) = mpsc::channel();
        let stderr = drain(child.stderr.take().expect("piped"), Some(ready_tx));
        let mut server = Server { child, stdin, stderr: Some(stderr), client: None, password };
        match ready.recv_timeout(SERVER_READY) {
            Ok(()) => {}
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let said = server.stop();
                return Err(KopiaFailed::new(
                    shown,
                    "stopped",
                    format!("it did not listen within {}s: {said}", SERVER_READY.as_secs()),
                    KopiaFailure::Other,
                ));
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let status = server.child.wait().map(|s| s.to_string()).unwrap_or_else(|e| e.to_string());
                let said = server.stop();
                let kind = classify(&said);
                return Err(KopiaFailed::new(shown, &status, said, kind));
            }
        }
        // The socket speaks plain HTTP, but reqwest's client is built with TLS support.
        coffer_backend::install_tls_provider();
        let client = reqwest::blocking::Client::builder()
            .unix_socket(socket.as_path())
            .no_proxy()
            .timeout(REQUEST_STALL)
            .pool_max_idle_per_host(16)
            .build()
            .map_err(|e| {
                KopiaFailed::new(shown, "started", format!("cannot make an HTTP client: {e}"), KopiaFailure::Other)
            })?;
        server.client = Some(client);
        Ok(server)
    }
}

/// 32 random bytes in hex.
fn random_hex() -> Result<String, KopiaFailed> {
    let mut b = [0u8; 32];
    std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b)).map_err(|e| {
        KopiaFailed::new("server start", "not started", format!("cannot read /dev/urandom: {e}"), KopiaFailure::Other)
    })?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Reads `err` to its end on a thread of its own, keeping its last
/// [`STDERR_KEPT`] bytes; tells `ready` once a line says the server listens.
fn drain(err: impl Read + Send + 'static, ready: Option<mpsc::Sender<()>>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut kept: Vec<u8> = Vec::new();
        let mut lines = BufReader::new(err);
        let mut line = Vec::new();
        let mut ready = ready;
        loop {
            line.clear();
            match lines.by_ref().take(STDERR_KEPT as u64).read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            if line.starts_with(b"SERVER ADDRESS:")
                && let Some(tx) = ready.take()
            {
                let _ = tx.send(());
            }
            kept.extend_from_slice(&line);
            if kept.len() > 2 * STDERR_KEPT {
                kept.drain(..kept.len() - STDERR_KEPT);
            }
        }
        String::from_utf8_lossy(&kept[kept.len().saturating_sub(STDERR_KEPT)..]).into_owned()
    })
}

/// A running `kopia server start`, stopped when dropped.
pub struct Server {
    child: Child,
    stdin: Option<ChildStdin>,
    stderr: Option<std::thread::JoinHandle<String>>,
    client: Option<reqwest::blocking::Client>,
    password: Zeroizing<String>,
}

impl Server {
    /// Stops the server (closing its standard input asks it to; it is killed
    /// if it has not stopped within two seconds); what it said.
    fn stop(&mut self) -> String {
        drop(self.stdin.take());
        self.client = None;
        let mut stopped = false;
        for _ in 0..40 {
            if let Ok(Some(_)) = self.child.try_wait() {
                stopped = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if !stopped {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        self.stderr.take().and_then(|h| h.join().ok()).unwrap_or_default()
    }

    /// `GET /api/v1/objects/OBJECT`: the answer when it is 200, else why not.
    fn get(&self, object: &str) -> Result<reqwest::blocking::Response, String> {
        if !k::valid_object_id(object) {
            return Err(format!("{object:?} is not a kopia object id"));
        }
        let client = self.client.as_ref().ok_or("kopia's server has stopped")?;
        let r = client
            .get(format!("http://kopia/api/v1/objects/{object}"))
            .basic_auth(SERVER_USER, Some(self.password.as_str()))
            .send()
            .map_err(|e| format!("kopia's server did not give object {object}: {e}"))?;
        if r.status() != reqwest::StatusCode::OK {
            let status = r.status();
            let mut said = Vec::new();
            let _ = r.take(512).read_to_end(&mut said);
            return Err(format!(
                "kopia's server answered {status} for object {object}: {}",
                String::from_utf8_lossy(&said).trim()
            ));
        }
        Ok(r)
    }

    /// The bytes of object `object`, at most `limit` of them.
    fn read(&self, object: &str, limit: u64, what: &str) -> Result<Vec<u8>, String> {
        let r = self.get(object)?;
        if let Some(n) = r.content_length()
            && n > limit
        {
            return Err(format!("kopia's {what} {object} has {n} bytes, more than the {limit} accepted"));
        }
        let mut out = Vec::new();
        r.take(limit + 1).read_to_end(&mut out).map_err(|e| format!("reading kopia's {what} {object}: {e}"))?;
        if out.len() as u64 > limit {
            return Err(format!("kopia's {what} {object} has more than the {limit} bytes accepted"));
        }
        Ok(out)
    }
}

impl feed::Objects for Server {
    type Body = reqwest::blocking::Response;

    fn get(&self, object: &str) -> Result<Self::Body, String> {
        Server::get(self, object)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.stderr.is_some() {
            self.stop();
        }
    }
}

/// The key of a file's content: its kopia object id, hashed (kopia's object ids
/// name their content: two files of one id have the same bytes).
pub fn content_key(object: &str) -> [u8; 32] {
    let mut h = blake3::Hasher::new_derive_key("coffer import kopia content 2026-12");
    h.update(object.as_bytes());
    *h.finalize().as_bytes()
}

/// More entries than this below a snapshot's root are never listed, whatever its
/// manifest says: a tree that shares a directory at every level (kopia stores
/// one object for identical directories) could otherwise name more than any
/// import could list.
const MAX_ENTRIES: u64 = 1 << 32;

/// Entries a snapshot may list beyond what its root's summary counts.
const ENTRIES_SLACK: u64 = 100_000;

/// Handles: a directory made up for the snapshot's path (`0`, then its level),
/// or a kopia directory (`1`, then the object ids from the root to it, each
/// followed by `/`).
const MADE_UP: u8 = 0;
const KOPIA_DIR: u8 = 1;

/// One kopia snapshot's tree, read through the import's server. The root entry
/// is placed at the snapshot's path (`/home/ann` holds it as `home/ann`), the
/// directories above it made up (mode 0755, root's, time 0).
pub struct KopiaTree<'s> {
    server: &'s Server,
    root: k::Entry,
    /// The path's components (each a valid name); empty when the path is `/`
    /// or not one coffer can hold, and the root is then the tree's root.
    components: Vec<Vec<u8>>,
    /// Entries that may still be listed.
    budget: AtomicU64,
    /// What the import knows already: files whose content it holds are not fed,
    /// directories walked by an earlier snapshot's feed are not walked again.
    memo: Option<(&'s ContentMemo, &'s WalkedDirs)>,
    /// Directories the feed listed, kept for the import's own walk.
    listings: feed::Listings,
}

impl<'s> KopiaTree<'s> {
    /// The tree of snapshot `snap`.
    pub fn new(server: &'s Server, snap: &k::Snapshot) -> Self {
        let mut components: Vec<Vec<u8>> = Vec::new();
        if snap.path.starts_with('/') {
            for c in snap.path.split('/') {
                match c {
                    "" | "." => {}
                    ".." => {
                        components.clear();
                        break;
                    }
                    c if c.contains('\0') || c.len() > k::MAX_NAME => {
                        components.clear();
                        break;
                    }
                    c => components.push(c.as_bytes().to_vec()),
                }
            }
        }
        if components.is_empty() && snap.root.kind != EntryType::Dir {
            let name = if snap.root.name.is_empty() || snap.root.name.contains('/') {
                "file"
            } else {
                snap.root.name.as_str()
            };
            components.push(name.as_bytes().to_vec());
        }
        let budget = AtomicU64::new(Self::entries_allowed(&snap.root));
        KopiaTree { server, root: snap.root.clone(), components, budget, memo: None, listings: Default::default() }
    }

    /// Feeds the import ([`ForeignTree::feed`]) the files whose content `memo`
    /// does not hold, read ahead with several requests in flight, passing over the
    /// directories `walked` holds (and adding those it walks).
    pub fn feeding(mut self, memo: &'s ContentMemo, walked: &'s WalkedDirs) -> Self {
        self.memo = Some((memo, walked));
        self
    }

    /// The entries a snapshot of root entry `root` may list.
    fn entries_allowed(root: &k::Entry) -> u64 {
        root.below.unwrap_or(MAX_ENTRIES).min(MAX_ENTRIES) + ENTRIES_SLACK + 1
    }

    /// The paths the snapshot records: its path, or `/`.
    pub fn paths(&self) -> Vec<String> {
        if self.components.is_empty() {
            return vec!["/".into()];
        }
        let mut p = Vec::new();
        for c in &self.components {
            p.push(b'/');
            p.extend_from_slice(c);
        }
        vec![String::from_utf8_lossy(&p).into_owned()]
    }

    fn spend(&self, n: u64) -> Result<(), String> {
        if self.budget.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| left.checked_sub(n)).is_err() {
            self.budget.store(0, Ordering::Relaxed);
            return Err(format!(
                "the snapshot lists more entries than its root's summary records ({}): the tree is crafted, and what \
                 is not listed yet is left out",
                self.root.below.unwrap_or(MAX_ENTRIES)
            ));
        }
        Ok(())
    }

    /// coffer's entry for kopia's entry `e` in the directory whose handle is `parent` (the
    /// object chain of a kopia directory, empty for one made up).
    fn entry(&self, e: &k::Entry, name: &[u8], parent: &[u8]) -> Result<ForeignEntry, String> {
        let kind = match e.kind {
            EntryType::File => NodeKind::File,
            EntryType::Dir => NodeKind::Dir,
            EntryType::Symlink => NodeKind::Symlink,
        };
        let mtime = Timestamp(e.mtime.0, e.mtime.1);
        let mut node = Node::new(Bytes(name.to_vec()), kind, k::unix_permissions(e.go_mode), mtime);
        node.uid = e.uid;
        node.gid = e.gid;
        node.ctime = mtime;
        let payload = match e.kind {
            EntryType::File => {
                node.size = e.size;
                Payload::File { key: content_key(&e.object), handle: e.object.as_bytes().to_vec() }
            }
            EntryType::Dir => {
                let mut h = if parent.is_empty() { vec![KOPIA_DIR] } else { parent.to_vec() };
                h.extend_from_slice(e.object.as_bytes());
                h.push(b'/');
                Payload::Dir(h)
            }
            EntryType::Symlink => {
                let target = self.server.read(&e.object, MAX_TARGET, "symbolic link target")?;
                if target.is_empty() || target.contains(&0) {
                    return Err(format!("kopia's symbolic link target {} is empty or holds a NUL byte", e.object));
                }
                node.target = Some(Bytes(target));
                Payload::Other
            }
        };
        Ok(ForeignEntry { node, payload })
    }

    fn list_made_up(&self, level: usize) -> Result<Listing, String> {
        let name = self.components.get(level).ok_or("not a directory of this snapshot")?;
        let entry = if level + 1 == self.components.len() {
            self.entry(&self.root, name, &[])?
        } else {
            let node = Node::new(Bytes(name.clone()), NodeKind::Dir, 0o755, Timestamp(0, 0));
            let mut h = vec![MADE_UP];
            h.extend_from_slice(&((level + 1) as u64).to_le_bytes());
            ForeignEntry { node, payload: Payload::Dir(h) }
        };
        Ok(Listing { entries: vec![entry], left_out: Vec::new() })
    }

    fn list_kopia(&self, chain: &[u8]) -> Result<Listing, String> {
        let ids: Vec<&[u8]> = chain.strip_suffix(b"/").unwrap_or(chain).split(|&b| b == b'/').collect();
        let (this, above) = ids.split_last().ok_or("an empty directory handle")?;
        let object = std::str::from_utf8(this).map_err(|_| "a directory handle that is not an object id")?;
        if above.contains(this) {
            return Err(format!("kopia's directory {object} holds itself (a cycle): it is left out"));
        }
        let dir = match self.listings.take(object) {
            Some(dir) => dir,
            None => {
                let json = self.server.read(object, k::MAX_DIR_JSON, "directory")?;
                k::parse_dir(&json, object).map_err(|e| e.to_string())?
            }
        };
        self.spend((dir.entries.len() + dir.refused.len()) as u64)?;
        let mut listing = Listing::default();
        for (name, why) in dir.refused {
            listing.left_out.push((name, format!("kopia's directory {object} records it badly: {why}: left out")));
        }
        let parent = [&[KOPIA_DIR][..], chain].concat();
        for e in &dir.entries {
            match self.entry(e, e.name.as_bytes(), &parent) {
                Ok(fe) => listing.entries.push(fe),
                Err(why) => listing.left_out.push((e.name.clone(), why)),
            }
        }
        Ok(listing)
    }
}

impl ForeignTree for KopiaTree<'_> {
    fn root(&self) -> Vec<u8> {
        if self.components.is_empty() {
            let mut h = vec![KOPIA_DIR];
            h.extend_from_slice(self.root.object.as_bytes());
            h.push(b'/');
            h
        } else {
            let mut h = vec![MADE_UP];
            h.extend_from_slice(&0u64.to_le_bytes());
            h
        }
    }

    fn list(&self, dir: &[u8]) -> Result<Listing, String> {
        match dir.split_first() {
            Some((&MADE_UP, level)) => {
                let level: [u8; 8] = level.try_into().map_err(|_| "a directory handle of the wrong size")?;
                self.list_made_up(u64::from_le_bytes(level) as usize)
            }
            Some((&KOPIA_DIR, chain)) => self.list_kopia(chain),
            _ => Err("not a directory of this snapshot".into()),
        }
    }

    fn open<'a>(&'a self, file: &[u8]) -> Result<Box<dyn Read + Send + 'a>, String> {
        let object = std::str::from_utf8(file).map_err(|_| "a file handle that is not an object id")?;
        Ok(Box::new(self.server.get(object)?))
    }

    /// The files the import has not stored yet, in the tree's order (each content
    /// once), read ahead. A file whose object fails to read is not remembered: the
    /// import opens it again when it meets it, and lists it with that error.
    fn feed(&self, store: &mut Store<'_>) -> coffer_core::error::Result<Result<(), String>> {
        let Some((memo, walked)) = self.memo else { return Ok(Ok(())) };
        let path: PathBuf = std::iter::once(Path::new("/"))
            .chain(self.components.iter().map(|c| Path::new(OsStr::from_bytes(c))))
            .collect();
        let known = feed::Known { memo, walked, listings: &self.listings };
        let walk = feed::FileWalk::new(self.server, known, &self.root, path, Self::entries_allowed(&self.root));
        feed::read_ahead(self.server, walk, feed::FeedLimits::default(), |file, reader| {
            // A content that fails to read is read again by `open`, which gives its error.
            let _ = store(Fed { key: file.key, path: &file.path, reader, size: file.size })?;
            Ok::<(), coffer_core::error::Error>(())
        })?;
        Ok(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_told_apart_by_what_kopia_says() {
        assert_eq!(
            classify("ERROR error connecting to repository: invalid repository password"),
            KopiaFailure::WrongPassword
        );
        assert_eq!(classify("open repository: repository is not connected."), KopiaFailure::NoRepository);
        assert_eq!(classify("ERROR something else"), KopiaFailure::Other);
    }

    /// A server that was never started: these trees read only what their
    /// listings hold, and a read that reaches the server fails.
    fn idle_server() -> Server {
        let child = Command::new("true").spawn().expect("run true");
        Server { child, stdin: None, stderr: None, client: None, password: Zeroizing::new(String::new()) }
    }

    fn dir_entry(name: &str, object: &str, below: Option<u64>) -> k::Entry {
        k::Entry {
            name: name.into(),
            kind: EntryType::Dir,
            go_mode: 0o755 | (1 << 31),
            size: 0,
            mtime: (1_700_000_000, 0),
            uid: 0,
            gid: 0,
            object: object.into(),
            below,
        }
    }

    fn snapshot(root: k::Entry) -> k::Snapshot {
        k::Snapshot {
            id: "s1".into(),
            host: "h".into(),
            user: "u".into(),
            path: "/data".into(),
            description: String::new(),
            start: coffer_import::restic::Timestamp::parse("2023-11-14T22:13:20Z").expect("a time"),
            tags: Vec::new(),
            root,
        }
    }

    fn handle(listing: &Listing, name: &str) -> Vec<u8> {
        let e = listing.entries.iter().find(|e| e.node.name.0 == name.as_bytes()).expect("entry listed");
        match &e.payload {
            Payload::Dir(h) => h.clone(),
            _ => panic!("{name} is not a directory"),
        }
    }

    #[test]
    fn a_directory_that_holds_itself_is_left_out_not_walked_forever() {
        let server = idle_server();
        // Directory kA holds kB, which holds kA again (a crafted repository: kopia's
        // own objects are named by their content and cannot).
        let tree = KopiaTree::new(&server, &snapshot(dir_entry("data", "kA", Some(10))));
        let a = k::Dir { entries: vec![dir_entry("b", "kB", None)], refused: Vec::new() };
        let b = k::Dir { entries: vec![dir_entry("a", "kA", None), dir_entry("c", "kC", None)], refused: Vec::new() };
        tree.listings.put("kA", &a);
        tree.listings.put("kB", &b);
        let top = tree.list(&tree.root()).unwrap();
        let data = tree.list(&handle(&top, "data")).unwrap();
        let inner = tree.list(&handle(&data, "b")).unwrap();
        assert_eq!(inner.entries.len(), 2, "the cycle's entry is listed, its sibling too");
        let err = tree.list(&handle(&inner, "a")).unwrap_err();
        assert!(err.contains("kA") && err.contains("cycle"), "{err}");
        // A directory whose object only repeats one met elsewhere (not above it) is no cycle.
        let c = tree.list(&handle(&inner, "c")).unwrap_err();
        assert!(!c.contains("cycle"), "kC is read from the server, which is not running: {c}");
    }

    #[test]
    fn a_tree_listing_more_than_its_summary_says_is_cut_at_the_cap() {
        let server = idle_server();
        // The root's summary says 3 entries below it; the listing names many more.
        let tree = KopiaTree::new(&server, &snapshot(dir_entry("data", "kA", Some(3))));
        let many = (ENTRIES_SLACK + 10) as usize;
        let a = k::Dir {
            entries: (0..many).map(|i| dir_entry(&format!("d{i}"), &format!("kD{i}"), None)).collect(),
            refused: Vec::new(),
        };
        tree.listings.put("kA", &a);
        let top = tree.list(&tree.root()).unwrap();
        let err = tree.list(&handle(&top, "data")).unwrap_err();
        assert!(err.contains("more entries than its root's summary records (3)"), "{err}");
        // Once spent, nothing more is listed.
        tree.listings.put("kA", &k::Dir { entries: vec![dir_entry("x", "kX", None)], refused: Vec::new() });
        assert!(tree.list(&handle(&top, "data")).is_err());
        // A summary claiming more than any import could list is held to the cap.
        assert_eq!(KopiaTree::entries_allowed(&dir_entry("r", "kR", Some(u64::MAX))), MAX_ENTRIES + ENTRIES_SLACK + 1);
        assert_eq!(KopiaTree::entries_allowed(&dir_entry("r", "kR", None)), MAX_ENTRIES + ENTRIES_SLACK + 1);
    }

    #[test]
    fn content_keys_are_the_object_ids_hashed() {
        assert_eq!(content_key("kabc"), content_key("kabc"));
        assert_ne!(content_key("kabc"), content_key("kabd"));
    }
}
