//! Repositories on the real servers the test script starts (docs/testing.md):
//! a fresh prefix of the S3 test bucket or a fresh directory on the SFTP server
//! per test, and toxiproxy proxies in front of the S3 server that inject
//! latency, bandwidth limits and connection resets.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use coffer_backend::testing::servers::{Server, absent};

use super::*;

pub fn var(k: &str) -> Option<String> {
    std::env::var(k).ok().filter(|v| !v.is_empty())
}

/// A prefix no other test or run uses.
pub fn unique(tag: &str) -> String {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    format!("{tag}-{}-{t}", std::process::id())
}

/// A remote repository and local scratch space.
pub struct Remote {
    pub dir: tempfile::TempDir,
    pub repo: String,
    pub env: Vec<(String, String)>,
}

impl Remote {
    /// A repository in a fresh prefix of the S3 test bucket; `None` (after a
    /// notice) when the S3 variables are not set and the `s3` group is skipped
    /// by name, a failure when they are not set otherwise.
    pub fn s3(tag: &str) -> Option<Remote> {
        let Some(endpoint) = var("COFFER_TEST_S3_ENDPOINT") else {
            absent(Server::S3);
            return None;
        };
        Remote::s3_at(&endpoint, tag)
    }

    /// A repository in a fresh prefix of the S3 test bucket, reached through
    /// `endpoint` (the server's own, or a fault proxy in front of it).
    pub fn s3_at(endpoint: &str, tag: &str) -> Option<Remote> {
        let bucket = var("COFFER_TEST_S3_BUCKET")?;
        let env = vec![
            ("AWS_ACCESS_KEY_ID".into(), var("COFFER_TEST_S3_ACCESS_KEY")?),
            ("AWS_SECRET_ACCESS_KEY".into(), var("COFFER_TEST_S3_SECRET_KEY")?),
            ("AWS_REGION".into(), var("COFFER_TEST_S3_REGION")?),
        ];
        let repo = format!("s3:{endpoint}/{bucket}/{}", unique(tag));
        Some(Remote { dir: tempfile::tempdir().unwrap(), repo, env })
    }

    /// A repository in a fresh directory of the SFTP test server; `None` (after
    /// a notice) when the SFTP variables are not set. `ssh` is wrapped so that it
    /// checks the server's key against the test known-hosts file.
    pub fn sftp(tag: &str) -> Option<Remote> {
        let Some(host) = var("COFFER_TEST_SFTP_HOST") else {
            absent(Server::Sftp);
            return None;
        };
        let (port, user) = (var("COFFER_TEST_SFTP_PORT")?, var("COFFER_TEST_SFTP_USER")?);
        let (key, known, root) =
            (var("COFFER_TEST_SFTP_KEY")?, var("COFFER_TEST_SFTP_KNOWN_HOSTS")?, var("COFFER_TEST_SFTP_ROOT")?);
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let ssh = bin.join("ssh");
        std::fs::write(
            &ssh,
            format!("#!/bin/sh\nexec /usr/bin/ssh -o UserKnownHostsFile={known} -o IdentitiesOnly=yes \"$@\"\n"),
        )
        .unwrap();
        std::fs::set_permissions(&ssh, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
        let repo = format!("sftp://{user}@{host}:{port}{root}/{}", unique(tag));
        Some(Remote { dir, repo, env: vec![("COFFER_SFTP_KEY".into(), key), ("PATH".into(), path)] })
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub fn cmd(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_coffer"));
        c.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.path("home"))
            .env("COFFER_REPOSITORY", &self.repo)
            .env("COFFER_PASSWORD", PASSWORD)
            .env("COFFER_RETRY_BASE_MS", "20")
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        c
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd().args(args).output().unwrap()
    }

    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let out = self.run(&[&["--json"], args].concat());
        assert_success(&out);
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(&out.stdout)))
    }
}

pub fn make_tree(root: &Path) {
    std::fs::create_dir_all(root.join("sub/deeper")).unwrap();
    for i in 0..20u64 {
        std::fs::write(root.join(format!("f{i}")), random_bytes(20_000 + i as usize * 3_000, i)).unwrap();
    }
    std::fs::write(root.join("sub/big"), random_bytes(10 << 20, 77)).unwrap();
    std::fs::write(root.join("sub/deeper/text"), "a line of text\n".repeat(50_000)).unwrap();
    std::fs::write(root.join("sub/empty"), b"").unwrap();
}

/// A toxiproxy proxy of its own in front of the S3 test server, removed on
/// drop; `None` (after a notice) when the toxiproxy or S3 variables are not set.
pub struct Proxy {
    api: String,
    name: String,
    /// `http://127.0.0.1:PORT`, the address clients use.
    pub endpoint: String,
}

impl Proxy {
    pub fn s3(tag: &str) -> Option<Proxy> {
        let (Some(api), Some(upstream)) = (var("COFFER_TEST_TOXIPROXY"), var("COFFER_TEST_S3_ENDPOINT")) else {
            absent(Server::Toxiproxy);
            return None;
        };
        let name = unique(tag);
        let upstream = upstream.trim_start_matches("http://").to_string();
        let body = serde_json::json!({"name": name, "listen": "127.0.0.1:0", "upstream": upstream, "enabled": true});
        let made = curl(&api, "POST", "/proxies", &body);
        let listen = made["listen"].as_str().unwrap_or_else(|| panic!("toxiproxy made no proxy: {made}"));
        Some(Proxy { endpoint: format!("http://{listen}"), api, name })
    }

    /// Adds a toxic (see toxiproxy's documentation for `kind` and `attributes`)
    /// acting on `toxicity` of the connections, in `stream` ("upstream" is
    /// towards the server).
    pub fn toxic(&self, kind: &str, stream: &str, toxicity: f64, attributes: serde_json::Value) {
        let body = serde_json::json!({
            "name": format!("{kind}-{stream}"), "type": kind, "stream": stream,
            "toxicity": toxicity, "attributes": attributes,
        });
        let v = curl(&self.api, "POST", &format!("/proxies/{}/toxics", self.name), &body);
        assert_eq!(v["type"], kind, "toxiproxy refused the toxic: {v}");
    }

    /// Removes every toxic: the proxy passes traffic untouched again.
    pub fn heal(&self) {
        let v = curl(&self.api, "GET", &format!("/proxies/{}/toxics", self.name), &serde_json::Value::Null);
        for t in v.as_array().into_iter().flatten() {
            let name = t["name"].as_str().unwrap_or_default();
            curl(&self.api, "DELETE", &format!("/proxies/{}/toxics/{name}", self.name), &serde_json::Value::Null);
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        curl(&self.api, "DELETE", &format!("/proxies/{}", self.name), &serde_json::Value::Null);
    }
}

/// One request to the toxiproxy API; its JSON answer (`Null` when empty).
fn curl(api: &str, method: &str, path: &str, body: &serde_json::Value) -> serde_json::Value {
    let mut c = Command::new("curl");
    c.args(["-sS", "--max-time", "10", "-X", method, &format!("{api}{path}")]);
    if !body.is_null() {
        c.args(["-d", &body.to_string()]);
    }
    let out = c.output().expect("curl runs");
    assert!(out.status.success(), "toxiproxy {method} {path}: {}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null)
}

/// A Versity gateway of the test's own: the pinned binary the test script
/// installed (`COFFER_TEST_VERSITYGW`), on a free loopback port, with its own data
/// directory and the test bucket, so a test may kill and restart it. Killed when
/// dropped.
pub struct Gateway {
    child: Option<std::process::Child>,
    port: u16,
    data: PathBuf,
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
}

impl Gateway {
    /// Starts a gateway keeping its objects in `data` (created), and creates the
    /// bucket `COFFER_TEST_S3_BUCKET`. `None` (after a notice) without the S3
    /// variables.
    pub fn start(data: &Path) -> Option<Gateway> {
        if var("COFFER_TEST_S3_ENDPOINT").is_none() || var("COFFER_TEST_VERSITYGW").is_none() {
            absent(Server::S3);
            return None;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut g =
            Gateway { child: None, port, data: data.to_path_buf(), endpoint: format!("http://127.0.0.1:{port}") };
        g.restart();
        Some(g)
    }

    /// Starts the gateway again (after [`Gateway::kill`]) on the same port and data.
    pub fn restart(&mut self) {
        let bin = var("COFFER_TEST_VERSITYGW").expect(
            "COFFER_TEST_VERSITYGW is not set: run `.ci/services.sh start` again, its env file names the gateway",
        );
        std::fs::create_dir_all(&self.data).unwrap();
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.data.with_extension("log")).unwrap();
        let child = Command::new(bin)
            .args(["--access", &var("COFFER_TEST_S3_ACCESS_KEY").unwrap()])
            .args(["--secret", &var("COFFER_TEST_S3_SECRET_KEY").unwrap()])
            .args(["--region", &var("COFFER_TEST_S3_REGION").unwrap()])
            .args(["--port", &format!("127.0.0.1:{}", self.port), "posix"])
            .arg(&self.data)
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
        // Ready once it answers; the bucket is created (or found) with a signed PUT.
        let start = std::time::Instant::now();
        loop {
            let status = self.put_bucket();
            if status == "200" || status == "409" {
                return;
            }
            assert!(
                start.elapsed() < std::time::Duration::from_secs(30),
                "gateway on port {} did not create the bucket (HTTP {status}); see {}",
                self.port,
                self.data.with_extension("log").display()
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    fn put_bucket(&self) -> String {
        let user =
            format!("{}:{}", var("COFFER_TEST_S3_ACCESS_KEY").unwrap(), var("COFFER_TEST_S3_SECRET_KEY").unwrap());
        let out = Command::new("curl")
            .args(["-s", "-o", "/dev/null", "--max-time", "5", "-w", "%{http_code}", "-X", "PUT"])
            .args(["--aws-sigv4", &format!("aws:amz:{}:s3", var("COFFER_TEST_S3_REGION").unwrap())])
            .args(["--user", &user, "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD"])
            .arg(format!("{}/{}", self.endpoint, var("COFFER_TEST_S3_BUCKET").unwrap()))
            .output()
            .expect("curl runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Kills the gateway with SIGKILL, as a server that dies.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The directory holding the bucket's objects.
    pub fn bucket_dir(&self) -> PathBuf {
        self.data.join(var("COFFER_TEST_S3_BUCKET").unwrap())
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.kill();
    }
}
