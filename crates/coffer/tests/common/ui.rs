//! `coffer ui` started for a test, and an HTTP client logged in to it.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use reqwest::StatusCode;
use reqwest::blocking::{Client, Response};
use serde_json::{Value, json};

pub const UI_PASSWORD: &str = "let me see my files";

/// A `coffer ui` process, stopped on drop.
pub struct Served {
    pub child: Child,
    pub base: String,
    pub stderr: Vec<String>,
    pub state: PathBuf,
    pub client: Client,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `coffer ui ARGS` with `cmd`'s environment and waits for its "serving" line.
pub fn serve(mut cmd: Command, state: &Path, args: &[&str]) -> Served {
    cmd.env("XDG_STATE_HOME", state).arg("ui").args(["--listen", "127.0.0.1:0"]).args(args);
    let mut child = cmd.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("start coffer ui");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut stderr = Vec::new();
    let base = loop {
        let line = lines.next().unwrap_or_else(|| panic!("coffer ui ended: {stderr:?}")).unwrap();
        stderr.push(line.clone());
        if let Some(url) = line.strip_prefix("coffer ui: serving ") {
            break url.trim_end_matches('/').to_string();
        }
    };
    // The rest of its standard error is drained, so that it never blocks.
    std::thread::spawn(move || for _ in lines {});
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    Served { child, base, stderr, state: state.to_path_buf(), client }
}

/// A logged-in client: its session cookie and CSRF token.
pub struct Session {
    pub cookie: String,
    pub csrf: String,
}

impl Served {
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn token(&self) -> String {
        std::fs::read_to_string(self.state.join("coffer/ui/login-token")).unwrap().trim().to_string()
    }

    pub fn get(&self, s: Option<&Session>, path: &str) -> Response {
        let mut r = self.client.get(self.url(path));
        if let Some(s) = s {
            r = r.header("cookie", &s.cookie);
        }
        r.send().unwrap()
    }

    pub fn json(&self, s: &Session, path: &str) -> Value {
        let r = self.get(Some(s), path);
        assert_eq!(r.status(), StatusCode::OK, "{path}");
        r.json().unwrap()
    }

    pub fn post(&self, s: &Session, path: &str, csrf: Option<&str>, body: Value) -> Response {
        let mut r = self.client.post(self.url(path)).header("cookie", &s.cookie).json(&body);
        if let Some(c) = csrf {
            r = r.header("x-csrf-token", c);
        }
        r.send().unwrap()
    }

    pub fn login(&self, secret: &str) -> Result<Session, StatusCode> {
        let r = self.client.post(self.url("/api/v1/login")).json(&json!({"secret": secret})).send().unwrap();
        if r.status() != StatusCode::OK {
            return Err(r.status());
        }
        let set = r.headers()["set-cookie"].to_str().unwrap().to_string();
        let cookie = set.split(';').next().unwrap().to_string();
        let v: Value = r.json().unwrap();
        Ok(Session { cookie, csrf: v["csrf"].as_str().unwrap().to_string() })
    }
}

/// Writes a jobs file with one job, `home`, backing up `src` daily into `env`'s
/// repository (its passphrase in a file), and returns `env`'s command with the
/// jobs file, the agent's state database and a configuration directory of its own.
pub fn with_home_job(env: &super::Env, src: &Path) -> Command {
    std::fs::write(env.path("pass"), format!("{}\n", super::PASSWORD)).unwrap();
    let jobs = format!(
        "[job.home]\nrepository = {:?}\npassword-file = {:?}\npaths = [{:?}]\nschedule = \"daily\"\n",
        env.repo().display().to_string(),
        env.path("pass").display().to_string(),
        src.display().to_string()
    );
    std::fs::write(env.path("jobs.toml"), jobs).unwrap();
    let mut cmd = env.cmd();
    cmd.env("COFFER_JOBS", env.path("jobs.toml"))
        .env("COFFER_AGENT_STATE", env.path("state/agent.sqlite"))
        .env("XDG_CONFIG_HOME", env.path("config"));
    cmd
}
