//! `coffer serve` (docs/design.md#server): a repository served over HTTPS to
//! clients using `--repo coffer:https://HOST:PORT`, with access keys per level.
//! The real binary runs as server (`--listen 127.0.0.1:0`, a temporary state
//! directory, a generated certificate that clients trust with `--cacert`) and
//! as client: a backup, restore and check round trip; refusals by level; and
//! a malicious client (forged and unsigned snapshots, overwrites, deletes
//! without the prune level, oversized and malformed requests, names outside the
//! layout, a slowloris connection) that changes nothing stored; a copy to and
//! from the server that reads its reconciliation sketches instead of listing it;
//! the Prometheus metrics of `--metrics` (`serve/metrics.rs`).

mod common;
#[path = "serve/hostile.rs"]
mod hostile;
#[path = "serve/metrics.rs"]
mod metrics;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use coffer_backend::{Backend, Location, OpendalBackend, RemoteOptions};
use common::remote::make_tree;
use common::*;

/// A running `coffer serve`, killed on drop.
struct Server {
    child: Child,
    /// `127.0.0.1:PORT`.
    addr: String,
    state: PathBuf,
    cert: PathBuf,
    https: bool,
    /// The server's stdout, kept open (it prints its address there).
    _out: BufReader<std::process::ChildStdout>,
}

impl Drop for Server {
    fn drop(&mut self) {
        if std::thread::panicking() {
            if let Ok(Some(status)) = self.child.try_wait() {
                eprintln!("the server had exited: {status}");
            }
            if let Some(log) = self.state.parent().map(|d| d.join("serve.log")) {
                eprintln!("server log: {}", std::fs::read_to_string(log).unwrap_or_default());
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve_cmd(env: &Env, state: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_coffer"));
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", env.path("home"))
        .env("COFFER_REPOSITORY", env.repo())
        .arg("serve")
        .arg("--state-dir")
        .arg(state);
    c
}

/// Starts a server for `env`'s repository; reads the port from its first line.
fn start(env: &Env, extra: &[&str]) -> Server {
    start_with(env, extra, &[])
}

/// [`start`], with more variables for the server (another storage, its credentials).
fn start_with(env: &Env, extra: &[&str], vars: &[(String, String)]) -> Server {
    let state = env.path("serve-state");
    let mut child = serve_cmd(env, &state)
        .envs(vars.iter().cloned())
        .args(["--listen", "127.0.0.1:0"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(env.path("serve.log")).unwrap())
        .spawn()
        .expect("start coffer serve");
    let mut line = String::new();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    out.read_line(&mut line).unwrap();
    let url =
        line.split_whitespace().find(|w| w.starts_with("https://") || w.starts_with("http://")).unwrap_or_else(|| {
            panic!("no address in {line:?}: {}", std::fs::read_to_string(env.path("serve.log")).unwrap_or_default())
        });
    let https = url.starts_with("https://");
    let addr = url.split("://").nth(1).unwrap().to_string();
    Server { child, addr, state: state.clone(), cert: state.join("cert.pem"), https, _out: out }
}

/// Adds an access key; returns (id, secret).
fn add_key(env: &Env, srv: &Server, name: &str, level: &str) -> (String, String) {
    let out = serve_cmd(env, &srv.state).args(["--json", "key", "add", name, "--level", level]).output().unwrap();
    assert_success(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    (v["id"].as_str().unwrap().to_string(), v["secret"].as_str().unwrap().to_string())
}

/// The client command for `env`'s repository through `srv` with `key`.
fn client(env: &Env, srv: &Server, key: &(String, String)) -> Command {
    let mut c = env.cmd();
    let scheme = if srv.https { "https" } else { "http" };
    c.env("COFFER_REPOSITORY", format!("coffer:{scheme}://{}", srv.addr))
        .env("COFFER_SERVER_KEY_ID", &key.0)
        .env("COFFER_SERVER_SECRET", &key.1)
        .env("COFFER_CACERT", &srv.cert)
        .env("COFFER_SERVER_ALLOW_HTTP", "1")
        .env("COFFER_RETRY_BASE_MS", "5");
    c
}

/// A raw S3 view of the server with `key` (coffer's own OpenDAL backend).
fn raw(srv: &Server, key: &(String, String)) -> OpendalBackend {
    let scheme = if srv.https { "https" } else { "http" };
    let loc = Location::Server { endpoint: format!("{scheme}://{}", srv.addr), name: "coffer".into() };
    let mut opts = RemoteOptions::default();
    opts.vars.insert("COFFER_SERVER_KEY_ID".into(), key.0.clone());
    opts.vars.insert("COFFER_SERVER_SECRET".into(), key.1.clone());
    opts.vars.insert("COFFER_SERVER_ALLOW_HTTP".into(), "1".into());
    opts.cacert = std::fs::read(&srv.cert).ok();
    opts.timeout = Duration::from_secs(20);
    OpendalBackend::open(&loc, &opts).expect("open the server as S3")
}

/// This client's writer key for the served repository, as `coffer writers` prints it
/// through the server.
fn own_writer(env: &Env, srv: &Server, key: &(String, String)) -> String {
    let out = client(env, srv, key).args(["--json", "writers"]).output().unwrap();
    assert_success(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .find(|w| w["this_client"] == true)
        .and_then(|w| w["public_key"].as_str())
        .expect("this client's writer")
        .to_string()
}

/// Every file of the repository with its content, to show nothing changed.
fn repo_state(env: &Env) -> Vec<(PathBuf, Vec<u8>)> {
    files_under(&env.repo())
        .into_iter()
        .filter(|p| !p.starts_with(env.repo().join("tmp")))
        .map(|p| {
            let b = std::fs::read(&p).unwrap();
            (p, b)
        })
        .collect()
}

/// Backs up through the server until the writer is allowed: the first attempt
/// is refused naming the writer key, which the admin then allows.
fn first_backup(env: &Env, srv: &Server, key: &(String, String), src: &Path) -> String {
    let out = client(env, srv, key).args(["backup", src.to_str().unwrap()]).output().unwrap();
    let err = assert_code(&out, 23);
    let writer = own_writer(env, srv, key);
    assert!(err.contains("allow-list") && err.contains(&writer), "{err}");
    let out = serve_cmd(env, &srv.state).args(["writer", "allow", &writer, "--note", "test"]).output().unwrap();
    assert_success(&out);
    let out = client(env, srv, key).args(["--json", "backup", src.to_str().unwrap()]).output().unwrap();
    assert_success(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["snapshot_id"].as_str().unwrap().to_string()
}

/// `srv` (just started) with an `append` key and a first backup of
/// a tree under `src/` through it: (server, key, source).
fn served_backup(env: &Env, srv: Server) -> (Server, (String, String), PathBuf) {
    let append = add_key(env, &srv, "laptop", "append");
    let src = env.path("src");
    make_tree(&src);
    first_backup(env, &srv, &append, &src);
    (srv, append, src)
}

#[test]
fn round_trip_through_the_server() {
    let env = Env::new();
    let srv = start(&env, &[]);
    assert!(srv.https && srv.cert.exists());
    let append = add_key(&env, &srv, "laptop", "append");
    let read = add_key(&env, &srv, "restorer", "read");

    let src = env.path("src");
    make_tree(&src);
    let id = first_backup(&env, &srv, &append, &src);
    // A second backup through the server, after a change.
    std::fs::write(src.join("f3"), random_bytes(70_000, 4242)).unwrap();
    let out = client(&env, &srv, &append).args(["-q", "backup", src.to_str().unwrap()]).output().unwrap();
    assert_success(&out);

    // Restore and check with the read key.
    let target = env.path("out");
    let out =
        client(&env, &srv, &read).args(["-q", "restore", &id, "--target", target.to_str().unwrap()]).output().unwrap();
    assert_success(&out);
    let out = client(&env, &srv, &read)
        .args(["-q", "restore", "latest", "--target", env.path("out2").to_str().unwrap()])
        .output()
        .unwrap();
    assert_success(&out);
    assert_same_tree(&src, &env.path("out2").join(src.strip_prefix("/").unwrap()));
    let out = client(&env, &srv, &read).args(["-q", "check", "--read-data"]).output().unwrap();
    assert_success(&out);
    // The same repository read directly agrees.
    assert_success(&env.run(&["-q", "check", "--read-data"]));
    let snaps = env.json(&["snapshots"]);
    assert_eq!(snaps.as_array().map(Vec::len), Some(2), "{snaps}");

    // A read key cannot back up; the error names the level.
    let before = repo_state(&env);
    let out = client(&env, &srv, &read).args(["backup", src.to_str().unwrap()]).output().unwrap();
    let err = assert_code(&out, 23);
    assert!(err.contains("level is read") && err.contains("ask the server's admin"), "{err}");
    assert!(!err.contains("check the credentials"), "a level refusal is not a credentials problem: {err}");
    assert_eq!(repo_state(&env).len(), before.len());

    // An unknown key is refused.
    let out = client(&env, &srv, &("CFNOPE".into(), "x".into())).args(["snapshots"]).output().unwrap();
    assert_code(&out, 23);

    // Keys are listed without secrets.
    let out = serve_cmd(&env, &srv.state).args(["--json", "key", "list"]).output().unwrap();
    assert_success(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 2);
    assert!(!text(&out.stdout).contains(&append.1));
    assert_eq!(v[0]["level"], "append");
}

/// The head of a request signed with SigV4 (unsigned payload) for a server
/// started with `--insecure-http`, announcing `length` bytes; `path` may carry
/// a query (`?uploads`, `?partNumber=1&uploadId=…`).
fn signed_head(srv: &Server, key: &(String, String), method: &str, path: &str, length: u64) -> String {
    use ring::{digest, hmac};
    let now = jiff::Timestamp::now();
    let date = now.strftime("%Y%m%dT%H%M%SZ").to_string();
    let day = &date[..8];
    let (bare, query) = path.split_once('?').unwrap_or((path, ""));
    // The canonical query: parameters sorted, a bare name as `name=`.
    let mut params: Vec<String> = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| if p.contains('=') { p.into() } else { format!("{p}=") })
        .collect();
    params.sort();
    let canonical = format!(
        "{method}\n{bare}\n{}\nhost:{}\nx-amz-content-sha256:UNSIGNED-PAYLOAD\nx-amz-date:{date}\n\n\
         host;x-amz-content-sha256;x-amz-date\nUNSIGNED-PAYLOAD",
        params.join("&"),
        srv.addr
    );
    let scope = format!("{day}/us-east-1/s3/aws4_request");
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{date}\n{scope}\n{}",
        hex(digest::digest(&digest::SHA256, canonical.as_bytes()).as_ref())
    );
    let mac = |k: &[u8], m: &str| hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, k), m.as_bytes()).as_ref().to_vec();
    let k = mac(format!("AWS4{}", key.1).as_bytes(), day);
    let k = mac(&mac(&mac(&k, "us-east-1"), "s3"), "aws4_request");
    let sig = hex(&mac(&k, &to_sign));
    format!(
        "{method} {path} HTTP/1.1\r\nHost: {}\r\nx-amz-date: {date}\r\nx-amz-content-sha256: UNSIGNED-PAYLOAD\r\n\
         Authorization: AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders=host;x-amz-content-sha256;x-amz-date, \
         Signature={sig}\r\nContent-Length: {length}\r\nConnection: close\r\n\r\n",
        srv.addr, key.0
    )
}

/// Sends `head` and `body` over a new connection; returns the status and the
/// whole response as text.
fn send_raw(srv: &Server, head: &str, body: &[u8]) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(&srv.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(head.as_bytes()).unwrap();
    let _ = s.write_all(body);
    let mut resp = Vec::new();
    let _ = s.read_to_end(&mut resp);
    let resp = text(&resp);
    let status = resp.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, resp)
}

/// A request signed with SigV4 (unsigned payload), sent over plain TCP to a
/// server started with `--insecure-http`, announcing `length` bytes and sending
/// `body`; returns the status and the whole response as text.
fn raw_request(
    srv: &Server,
    key: &(String, String),
    method: &str,
    path: &str,
    length: u64,
    body: &[u8],
) -> (u16, String) {
    send_raw(srv, &signed_head(srv, key, method, path, length), body)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn blake3_hex(b: &[u8]) -> String {
    blake3::hash(b).to_hex().to_string()
}

/// The first object stored under `prefix` in the local repository: (name, bytes).
fn first_object(env: &Env, prefix: &str) -> (String, Vec<u8>) {
    let p = files_under(&env.repo().join(prefix)).into_iter().next().expect("an object");
    let name = p.strip_prefix(env.repo()).unwrap().to_str().unwrap().to_string();
    (name, std::fs::read(&p).unwrap())
}

#[test]
fn a_malicious_client_changes_nothing() {
    let env = Env::new();
    let srv = start(&env, &["--request-timeout", "2"]);
    let append = add_key(&env, &srv, "laptop", "append");
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("a"), random_bytes(300_000, 1)).unwrap();
    first_backup(&env, &srv, &append, &src);
    let before = repo_state(&env);
    let be = raw(&srv, &append);
    let refused = |name: &str, body: Vec<u8>, why: &str| {
        let e = be.write(name, body).expect_err(name);
        assert!(e.to_string().contains(why), "{name}: {e}");
    };

    let (snap_name, snap) = first_object(&env, "snapshots");
    let (index_name, index) = first_object(&env, "index");
    // An unsigned snapshot: the sealed part of a real one, alone.
    let sealed = snap[..snap.len() - 133].to_vec();
    refused(&format!("snapshots/{}", blake3_hex(&sealed)), sealed.clone(), "unsigned");
    // A forged one: one bit of a real one flipped, named by its new hash.
    let mut forged = snap.clone();
    forged[40] ^= 1;
    refused(&format!("snapshots/{}", blake3_hex(&forged)), forged, "does not verify");
    // Signed by a writer the server does not know.
    let stranger = coffer_core::crypto::sign::SigningKey::generate();
    let other = coffer_core::format::signed::sign(sealed.clone(), &[0; 32], &stranger);
    refused(&format!("snapshots/{}", blake3_hex(&other)), other, "allow-list");
    // A real snapshot under another kind's prefix, and an index file as a snapshot.
    refused(&format!("index/{}", blake3_hex(&snap)), snap.clone(), "kind byte");
    refused(&format!("snapshots/{}", blake3_hex(&index)), index.clone(), "unsigned");
    // A name that is not the hash of the body.
    refused(&snap_name.replace(&snap_name[10..14], "0000"), snap.clone(), "BLAKE3");
    // Overwriting: config with other bytes; an index file with other bytes.
    let mut config = std::fs::read(env.repo().join("config")).unwrap();
    *config.last_mut().unwrap() ^= 1;
    refused("config", config, "level is append");
    // Names outside the layout.
    let id = blake3_hex(&index);
    for name in [format!("tmp/{id}"), format!("trash/1/{id}"), format!("foo/{id}"), format!("data/zz/{id}")] {
        refused(&name, index.clone(), "layout");
    }
    // An identical re-PUT succeeds and changes nothing.
    be.write(&index_name, index.clone()).expect("identical re-PUT");
    // Deleting without the prune level.
    let e = be.delete(&snap_name).expect_err("delete");
    assert!(e.to_string().contains("level is append") && e.to_string().contains("prune"), "{e}");
    // Listing shows the layout only.
    assert!(be.list("").unwrap().iter().all(|o| !o.name.starts_with("tmp/")));

    // Raw requests on a plain-HTTP server over the same storage.
    let http = start_second(&env, &["--insecure-http", "--request-timeout", "2"]);
    // Oversized: refused from the announced length, before any body is read.
    let t = std::time::Instant::now();
    let (status, resp) = raw_request(&http, &append, "PUT", &format!("/coffer/snapshots/{id}"), 17 << 20, b"");
    assert_eq!(status, 400, "{resp}");
    assert!(resp.contains("EntityTooLarge") && resp.contains("limit"), "{resp}");
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    // A path with `..`.
    let (status, resp) = raw_request(&http, &append, "PUT", "/coffer/snapshots/../config", 5, b"hello");
    assert!((400..500).contains(&status), "{resp}");
    // A malformed request.
    let mut s = std::net::TcpStream::connect(&http.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"PUT \x01\x02 NONSENSE\r\n\r\n").unwrap();
    let mut resp = Vec::new();
    let _ = s.read_to_end(&mut resp);
    assert!(resp.is_empty() || text(&resp).starts_with("HTTP/1.1 4"), "{}", text(&resp));

    // Slowloris: a connection that sends its headers a byte at a time holds no
    // one up, and is closed once the request timeout passes.
    let mut slow = std::net::TcpStream::connect(&srv.addr).unwrap();
    slow.write_all(b"\x16").unwrap();
    let mut idle = std::net::TcpStream::connect(&http.addr).unwrap();
    idle.write_all(b"PUT /coffer/config HTTP/1.1\r\nHost: x\r\n").unwrap();
    std::fs::write(src.join("b"), random_bytes(100_000, 2)).unwrap();
    let out = client(&env, &srv, &append).args(["-q", "backup", src.to_str().unwrap()]).output().unwrap();
    assert_success(&out);
    idle.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let t = std::time::Instant::now();
    let mut buf = [0u8; 512];
    let n = idle.read(&mut buf).unwrap_or(0);
    assert!(n == 0 || text(&buf[..n]).starts_with("HTTP/1.1 408"), "{}", text(&buf[..n]));
    assert!(t.elapsed() < Duration::from_secs(9));
    drop(slow);

    // Nothing stored before was changed or removed.
    let after = repo_state(&env);
    for (path, bytes) in &before {
        if path.starts_with(env.repo().join("sessions")) {
            continue;
        }
        let now = after.iter().find(|(p, _)| p == path).unwrap_or_else(|| panic!("{} removed", path.display()));
        assert!(now.1 == *bytes, "{} changed", path.display());
    }
    assert!(after.iter().all(|(p, _)| !p.starts_with(env.repo().join("trash"))));
}

/// A second server over the same repository and state directory.
fn start_second(env: &Env, extra: &[&str]) -> Server {
    start(env, extra)
}

#[test]
fn prune_level_deletes_into_the_trash_and_append_cannot() {
    let env = Env::new();
    let srv = start(&env, &["--prune-grace", "1"]);
    let append = add_key(&env, &srv, "laptop", "append");
    let pruner = add_key(&env, &srv, "pruner", "prune");
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("a"), random_bytes(400_000, 1)).unwrap();
    first_backup(&env, &srv, &append, &src);
    std::fs::write(src.join("a"), random_bytes(400_000, 2)).unwrap();
    assert_success(&client(&env, &srv, &append).args(["-q", "backup", src.to_str().unwrap()]).output().unwrap());
    let snapshots_before = files_under(&env.repo().join("snapshots"));
    assert_eq!(snapshots_before.len(), 2);

    // An append key cannot forget: the deletion is refused, naming the level.
    let out = client(&env, &srv, &append)
        .env("COFFER_TEST_PRUNE_GRACE_MS", "10")
        .args(["forget", "--keep-last", "1", "--prune"])
        .output()
        .unwrap();
    let err = assert_code(&out, 23);
    assert!(err.contains("level is append") && err.contains("prune or admin"), "{err}");
    assert_eq!(files_under(&env.repo().join("snapshots")), snapshots_before);

    // A prune key can forget; its prune deletes packs and index files only a
    // grace period (here 1 s) after its notice: a prune that does not wait
    // is refused, one that does succeeds.
    let out = client(&env, &srv, &pruner)
        .env("COFFER_TEST_PRUNE_GRACE_MS", "10")
        .args(["-q", "forget", "--keep-last", "1", "--prune"])
        .output()
        .unwrap();
    let err = assert_code(&out, 23);
    assert!(err.contains("prune notice was stored") && err.contains("grace period of at least 1s"), "{err}");
    // Told apart from a refusal of the credentials or the level.
    assert!(err.contains("did not wait the server's grace period"), "{err}");
    assert!(!err.contains("check the credentials"), "{err}");
    let out = client(&env, &srv, &pruner)
        .env("COFFER_TEST_PRUNE_GRACE_MS", "1500")
        .args(["-q", "prune", "--grace", "1500ms"])
        .output()
        .unwrap();
    assert_success(&out);
    assert_eq!(files_under(&env.repo().join("snapshots")).len(), 1);
    assert_success(&client(&env, &srv, &pruner).args(["-q", "check", "--read-data"]).output().unwrap());

    // What it deleted is in the trash, invisible to clients, and restorable.
    let out = serve_cmd(&env, &srv.state).args(["--json", "trash", "list"]).output().unwrap();
    assert_success(&out);
    let trash: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = trash.as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap()).collect();
    assert!(names.iter().any(|n| n.starts_with("snapshots/")), "{trash}");
    assert!(names.iter().any(|n| n.starts_with("data/")), "{trash}");
    let be = raw(&srv, &pruner);
    assert!(be.list("").unwrap().iter().all(|o| !o.name.starts_with("trash/")));
    assert!(be.read("trash/x").is_err());
    let snap = names.iter().find(|n| n.starts_with("snapshots/")).unwrap();
    let out = serve_cmd(&env, &srv.state).args(["trash", "restore", snap]).output().unwrap();
    assert_success(&out);
    assert!(env.repo().join(snap).exists());
    // Purging empties it.
    let out = serve_cmd(&env, &srv.state).args(["trash", "purge", "--older-than", "0"]).output().unwrap();
    assert_success(&out);
    assert!(!env.repo().join("trash").exists() || files_under(&env.repo().join("trash")).is_empty());
}

#[test]
fn append_nodata_cannot_read_packs() {
    let env = Env::new();
    let srv = start(&env, &[]);
    let nodata = add_key(&env, &srv, "dropbox", "append-nodata");
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("a"), random_bytes(300_000, 1)).unwrap();
    // A first backup needs no pack read.
    first_backup(&env, &srv, &nodata, &src);
    // Restoring needs packs: refused, naming the level.
    let out = client(&env, &srv, &nodata)
        .args(["restore", "latest", "--target", env.path("out").to_str().unwrap()])
        .output()
        .unwrap();
    // Restore reports the refused pack per file (its failure code, 20) and names the level.
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("level is append-nodata"), "{err}");
    // A second backup of a changed tree needs its parent's trees: they come
    // from the local cache the first backup filled, not from packs.
    std::fs::write(src.join("b"), random_bytes(1000, 2)).unwrap();
    let out = client(&env, &srv, &nodata).args(["-q", "backup", src.to_str().unwrap()]).output().unwrap();
    assert_success(&out);
}

#[test]
fn server_killed_mid_upload_leaves_no_partial_object() {
    let env = Env::new();
    let mut srv = start(&env, &[]);
    let append = add_key(&env, &srv, "laptop", "append");
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("small"), random_bytes(1000, 9)).unwrap();
    first_backup(&env, &srv, &append, &src);
    std::fs::write(src.join("big"), random_bytes(40 << 20, 3)).unwrap();
    let mut backup = client(&env, &srv, &append)
        .args(["-q", "backup", src.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Kill the server once the backup has stored a pack.
    let packs = || files_under(&env.repo().join("data")).len();
    let before = packs();
    let t = std::time::Instant::now();
    while packs() == before && t.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(20));
    }
    srv.child.kill().unwrap();
    srv.child.wait().unwrap();
    let status = backup.wait().unwrap();
    assert!(!status.success(), "the backup cannot finish without its server");
    // Every stored object is whole: each content-named file hashes to its name.
    for p in files_under(&env.repo()) {
        let rel = p.strip_prefix(env.repo()).unwrap().to_str().unwrap().to_string();
        if rel.starts_with("tmp/") || rel == "config" || rel.starts_with("sessions/") {
            continue;
        }
        let name = p.file_name().unwrap().to_str().unwrap();
        assert_eq!(blake3_hex(&std::fs::read(&p).unwrap()), name, "{rel} is partial");
    }
    // Restarted on the same address, the backup runs again and the repository checks clean.
    let port = srv.addr.clone();
    drop(srv);
    let srv = start_at(&env, &port);
    assert_success(&client(&env, &srv, &append).args(["-q", "backup", src.to_str().unwrap()]).output().unwrap());
    assert_success(&client(&env, &srv, &append).args(["-q", "check", "--read-data"]).output().unwrap());
}

/// A server on a given address (a restart).
fn start_at(env: &Env, addr: &str) -> Server {
    let state = env.path("serve-state");
    let mut child = serve_cmd(env, &state)
        .args(["--listen", addr])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start coffer serve");
    let mut line = String::new();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    out.read_line(&mut line).unwrap();
    assert!(line.contains(addr), "{line}");
    Server { child, addr: addr.to_string(), state: state.clone(), cert: state.join("cert.pem"), https: true, _out: out }
}

/// The public key of the server's transparency log, from its state directory.
fn log_key(srv: &Server) -> String {
    let seed: [u8; 32] = std::fs::read(srv.state.join("log/key")).unwrap().try_into().unwrap();
    coffer_core::crypto::sign::SigningKey::from_seed(&seed).public().to_hex()
}

/// Restarts the server on its address after `change` altered its state or storage.
fn restart_after(env: &Env, srv: Server, change: impl FnOnce()) -> Server {
    let addr = srv.addr.clone();
    drop(srv);
    change();
    start_at(env, &addr)
}

/// Exit code 20 and `what` in the error.
fn refused_with(out: &std::process::Output, what: &str) {
    let err = assert_code(out, 20);
    assert!(err.contains(what), "expected {what:?} in: {err}");
}

#[test]
fn the_transparency_log_catches_a_server_that_rolls_back_forks_or_hides() {
    let env = Env::new();
    let (srv, append, src) = served_backup(&env, start(&env, &[]));
    std::fs::write(src.join("f3"), random_bytes(70_000, 4242)).unwrap();
    let out = client(&env, &srv, &append).args(["--json", "backup", src.to_str().unwrap()]).output().unwrap();
    assert_success(&out);
    let second: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let second = second["snapshot_id"].as_str().unwrap().to_string();
    let entries = srv.state.join("log/entries");
    let logged = std::fs::read(&entries).unwrap();
    assert_eq!(logged.len(), 2 * 33, "two snapshots logged");
    assert_eq!(hex(&logged[34..]), second, "in the order accepted");

    // The key the server printed is the one it signs with; another is refused.
    let key = log_key(&srv);
    let out = client(&env, &srv, &append).env("COFFER_SERVER_LOG_KEY", &key).args(["snapshots"]).output().unwrap();
    assert_success(&out);
    let other = "11".repeat(32);
    let out = client(&env, &srv, &append).env("COFFER_SERVER_LOG_KEY", &other).args(["snapshots"]).output().unwrap();
    refused_with(&out, "not the server you trust");

    // Rolled back: the second snapshot and its log entry gone.
    let snap_file = env.repo().join("snapshots").join(&second);
    let aside = env.path("aside");
    let srv = restart_after(&env, srv, || {
        std::fs::rename(&snap_file, &aside).unwrap();
        std::fs::write(&entries, &logged[..33]).unwrap();
    });
    refused_with(&client(&env, &srv, &append).args(["snapshots"]).output().unwrap(), "shrank");

    // Forked: the same entries in another order.
    let srv = restart_after(&env, srv, || {
        std::fs::write(&entries, [&logged[33..], &logged[..33]].concat()).unwrap();
    });
    refused_with(&client(&env, &srv, &append).args(["snapshots"]).output().unwrap(), "different history");
    // A client that never saw this server catches the fork too: the second
    // snapshot (served again) records the head its writer followed (one entry,
    // the first snapshot), which this log does not have.
    std::fs::rename(&aside, &snap_file).unwrap();
    let v = env.json(&["cat", "snapshot", &second]);
    assert_eq!(v["snapshot"]["server_log"]["size"], 1, "{v}");
    let out = client(&env, &srv, &append).env("HOME", env.path("home2")).args(["check"]).output().unwrap();
    assert_eq!(out.status.code(), Some(20), "{}", text(&out.stderr));
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(said.contains(&format!("snapshot {}: its writer was shown a different", &second[..8])), "{said}");
    std::fs::rename(&snap_file, &aside).unwrap();

    // Hiding: the log is whole again, but the second snapshot is not served.
    let srv = restart_after(&env, srv, || std::fs::write(&entries, &logged).unwrap());
    let out = client(&env, &srv, &append).args(["check"]).output().unwrap();
    assert_eq!(out.status.code(), Some(20), "{}", text(&out.stderr));
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(said.contains(&format!("snapshot {second}: the server's transparency log records it")), "{said}");
    // Served again, it checks clean.
    std::fs::rename(&aside, &snap_file).unwrap();
    assert_success(&client(&env, &srv, &append).args(["-q", "check"]).output().unwrap());

    // A server that lost its log key (or another server) is not trusted silently.
    let key_file = srv.state.join("log/key");
    let srv = restart_after(&env, srv, || std::fs::remove_file(&key_file).unwrap());
    assert_ne!(log_key(&srv), key);
    refused_with(&client(&env, &srv, &append).args(["snapshots"]).output().unwrap(), "log key changed");
}

#[test]
fn quotas_hold_across_a_restart() {
    let env = Env::new();
    let srv = start(&env, &[]);
    let out = serve_cmd(&env, &srv.state)
        .args(["--json", "key", "add", "small", "--level", "append", "--quota", "400000"])
        .output()
        .unwrap();
    assert_success(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let key = (v["id"].as_str().unwrap().to_string(), v["secret"].as_str().unwrap().to_string());
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("a"), random_bytes(150_000, 1)).unwrap();
    first_backup(&env, &srv, &key, &src);
    // The count reaches the state directory within a few seconds.
    let used = || {
        let out = serve_cmd(&env, &srv.state).args(["--json", "key", "list"]).output().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v[0]["used"].as_u64().unwrap()
    };
    let t = std::time::Instant::now();
    while used() < 150_000 && t.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(200));
    }
    let before = used();
    assert!((150_000..400_000).contains(&before), "{before}");
    // After a restart the key has less left than a fresh one: 300 kB more is refused.
    let addr = srv.addr.clone();
    drop(srv);
    let srv = start_at(&env, &addr);
    std::fs::write(src.join("b"), random_bytes(300_000, 2)).unwrap();
    let out = client(&env, &srv, &key).args(["backup", src.to_str().unwrap()]).output().unwrap();
    let err = assert_code(&out, 23);
    assert!(err.contains("quota of 400000 bytes") && err.contains("quota is used up"), "{err}");
}

#[test]
fn copy_to_and_from_the_server_reads_sketches_not_listings() {
    let env = Env::new();
    let (srv, append, src) = served_backup(&env, start(&env, &[]));
    let server = format!("coffer:https://{}", srv.addr);
    let mirror = env.path("mirror").display().to_string();
    // Commands on a local mirror, with the server as the other side.
    let local = |args: &[&str]| {
        client(&env, &srv, &append)
            .env("COFFER_REPOSITORY", &mirror)
            .env("COFFER_FROM_PASSWORD", PASSWORD)
            .args(args)
            .output()
            .unwrap()
    };
    let copy_json = |out: std::process::Output| -> serde_json::Value {
        assert_success(&out);
        serde_json::from_slice(&out.stdout).unwrap()
    };
    assert_success(&local(&["init", "--kdf-log-n", "10", "--insecure-kdf", "--from-repo", &server]));
    let v = copy_json(local(&["--json", "copy", "--from-repo", &server]));
    assert_eq!(v["snapshots"].as_array().map(Vec::len), Some(1), "{v}");
    // Up to date: both sides open alike (the same listings); then the local
    // side lists its four kinds and the server is read four sketches, not listed.
    let lists = |v: &serde_json::Value, side: &str| v["requests"][side]["list"].as_u64().unwrap();
    let v = copy_json(local(&["--json", "copy", "--from-repo", &server]));
    assert_eq!(v["snapshots"].as_array().map(Vec::len), Some(0), "{v}");
    assert_eq!(lists(&v, "source") + 4, lists(&v, "destination"), "{v}");
    assert_success(&local(&["-q", "check", "--read-data"]));

    // A backup in the mirror, copied to the server once its writer is allowed.
    std::fs::write(src.join("f3"), random_bytes(70_000, 4243)).unwrap();
    assert_success(&local(&["-q", "backup", src.to_str().unwrap()]));
    let to_server = || {
        client(&env, &srv, &append)
            .env("COFFER_FROM_PASSWORD", PASSWORD)
            .args(["--json", "copy", "--from-repo", &mirror])
            .output()
            .unwrap()
    };
    let out = local(&["--json", "writers"]);
    assert_success(&out);
    let writers: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for w in writers.as_array().unwrap() {
        let out =
            serve_cmd(&env, &srv.state).args(["writer", "allow", w["public_key"].as_str().unwrap()]).output().unwrap();
        assert_success(&out);
    }
    let v = copy_json(to_server());
    assert_eq!(v["snapshots"].as_array().map(Vec::len), Some(1), "{v}");
    let v = copy_json(to_server());
    assert_eq!(v["snapshots"].as_array().map(Vec::len), Some(0), "{v}");
    assert_eq!(lists(&v, "destination") + 4, lists(&v, "source"), "{v}");
    // The sketches themselves: their size, and malformed names refused.
    let be = raw(&srv, &append);
    assert_eq!(be.read_max("sync/index/96", 1 << 20).unwrap().len(), 96 * 48);
    for bad in ["sync/index/4", "sync/sessions/96", "sync/index/096", "sync/trash/96"] {
        assert!(be.read_max(bad, 1 << 20).is_err(), "{bad}");
    }
    assert_success(&env.run(&["-q", "check", "--read-data"]));
    let snaps = env.json(&["snapshots"]);
    assert_eq!(snaps.as_array().map(Vec::len), Some(2), "{snaps}");
}

#[test]
fn a_server_in_front_of_s3_serves_backups_copies_and_prunes() {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let Some(endpoint) = var("COFFER_TEST_S3_ENDPOINT") else {
        coffer_backend::testing::servers::absent(coffer_backend::testing::servers::Server::S3);
        return;
    };
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let unique = format!("serve-{}-{nanos}", std::process::id());
    let repo = format!("s3:{endpoint}/{}/{unique}", var("COFFER_TEST_S3_BUCKET").unwrap());
    let vars: Vec<(String, String)> = vec![
        ("AWS_ACCESS_KEY_ID".into(), var("COFFER_TEST_S3_ACCESS_KEY").unwrap()),
        ("AWS_SECRET_ACCESS_KEY".into(), var("COFFER_TEST_S3_SECRET_KEY").unwrap()),
        ("AWS_REGION".into(), var("COFFER_TEST_S3_REGION").unwrap()),
        ("COFFER_REPOSITORY".into(), repo.clone()),
    ];
    let env = Env::new();
    let out = env.cmd().envs(vars.iter().cloned()).args(["init", "--kdf-log-n", "10", "--insecure-kdf"]).output();
    assert_success(&out.unwrap());
    let (srv, append, src) = served_backup(&env, start_with(&env, &["--prune-grace", "1"], &vars));
    let pruner = add_key(&env, &srv, "pruner", "prune");
    std::fs::write(src.join("f3"), random_bytes(70_000, 77)).unwrap();
    assert_success(&client(&env, &srv, &append).args(["-q", "backup", src.to_str().unwrap()]).output().unwrap());
    assert_eq!(raw(&srv, &append).read_max("sync/snapshots/96", 1 << 20).unwrap().len(), 96 * 48);
    let out = client(&env, &srv, &pruner)
        .env("COFFER_TEST_PRUNE_GRACE_MS", "1500")
        .args(["-q", "forget", "--keep-last", "1", "--prune"])
        .output()
        .unwrap();
    assert_success(&out);
    assert_success(&client(&env, &srv, &pruner).args(["-q", "check", "--read-data"]).output().unwrap());
    let out = client(&env, &srv, &append)
        .args(["-q", "restore", "latest", "--target", env.path("out").to_str().unwrap()])
        .output()
        .unwrap();
    assert_success(&out);
    assert_same_tree(&src, &env.path("out").join(src.strip_prefix("/").unwrap()));
}

#[test]
fn the_uis_health_page_follows_the_servers_log_and_sees_what_it_hides() {
    let env = Env::new();
    let (srv, append, src) = served_backup(&env, start(&env, &[]));
    std::fs::write(src.join("f3"), random_bytes(70_000, 77)).unwrap();
    let out = client(&env, &srv, &append).args(["--json", "backup", src.to_str().unwrap()]).output().unwrap();
    assert_success(&out);
    let second: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let second = second["snapshot_id"].as_str().unwrap().to_string();
    let mut cmd = client(&env, &srv, &append);
    cmd.env("COFFER_SERVER_LOG_KEY", log_key(&srv));
    let ui = common::ui::serve(cmd, &env.path("ui-state"), &["--no-jobs"]);
    let s = ui.login(&ui.token()).unwrap();
    let h = ui.json(&s, "/api/v1/repos/default/health");
    assert_eq!(h["server_log"]["ok"], true, "{h}");
    assert_eq!(h["server_log"]["entries"], 2, "{h}");
    assert_eq!(h["server_log"]["key"], log_key(&srv).as_str());
    let page = ui.get(Some(&s), "/repos/default/health").text().unwrap();
    assert!(page.contains("consistent") && page.contains("2 entries"), "{page}");

    // The server stops serving the second snapshot, which its log records.
    std::fs::rename(env.repo().join("snapshots").join(&second), env.path("aside")).unwrap();
    let h = ui.json(&s, "/api/v1/repos/default/health");
    assert_eq!(h["server_log"]["ok"], false, "{h}");
    let problems = h["server_log"]["problems"].to_string();
    assert!(problems.contains(&second) && problems.contains("hides or lost"), "{h}");
    let page = ui.get(Some(&s), "/repos/default/health").text().unwrap();
    assert!(page.contains("disagrees with the storage") && page.contains(&second), "{page}");
}
