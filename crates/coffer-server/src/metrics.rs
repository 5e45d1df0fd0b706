//! `coffer serve --metrics ADDR`: the server's figures as Prometheus text
//! (exposition format 0.0.4) at `GET /metrics`, on a listener of its own
//! (plain HTTP, loopback unless the operator allows another address). See
//! docs/design.md#server, "Metrics".
//!
//! What is shown needs no repository key and holds no secret: per writer
//! (its public key), when it last stored a snapshot and how many
//! ([`crate::activity`]); per access key (its name, never its id or secret),
//! the bytes it stored and its quota ([`crate::usage`]); the requests answered
//! by method and status; the transparency log's size; the uptime. No object
//! name appears. Every figure is read when the endpoint is asked, from what
//! the server holds anyway.
//!
//! The endpoint is as guarded as the data plane: one request per connection,
//! its headers within [`HEADER_LIMIT`] bytes and [`HEADER_TIMEOUT`], the whole
//! connection within [`CONNECTION_TIMEOUT`], at most [`CONNECTIONS`] at once;
//! any other path is 404, any other method 405.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hyper_util::rt::{TokioIo, TokioTimer};

use crate::ServerError;
use crate::activity::Activity;
use crate::keys::KeyFile;
use crate::log::TransparencyLog;
use crate::state::Watched;
use crate::usage::Usage;
use crate::writers::AllowList;

/// The most bytes of request headers read (hyper's smallest buffer limit).
pub const HEADER_LIMIT: usize = 8 << 10;
/// The longest a connection may take to send its request's headers.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest a connection may stay open, its answer included.
pub const CONNECTION_TIMEOUT: Duration = Duration::from_secs(30);
/// Connections served at once; more wait in the kernel's backlog.
pub const CONNECTIONS: usize = 16;

/// The path the figures are served at.
pub const PATH: &str = "/metrics";

/// The content type of exposition format 0.0.4.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Refuses an address other hosts could reach unless `remote` allows it: the
/// figures name the access keys and writers.
pub fn check_address(addr: SocketAddr, remote: bool) -> Result<(), ServerError> {
    if addr.ip().is_loopback() || remote {
        return Ok(());
    }
    Err(ServerError::Invalid(format!(
        "--metrics {addr}: not a loopback address; the figures name the access keys and writers and are served \
         over plain HTTP, so listen on 127.0.0.1 or ::1 (a Prometheus on this host, or a proxy in front), or pass \
         --metrics-remote to serve them to other hosts"
    )))
}

/// Requests answered on the data plane, by method and status.
#[derive(Default)]
pub struct Requests {
    counts: Mutex<BTreeMap<(&'static str, u16), u64>>,
}

impl Requests {
    /// Counts a request of `method` answered with `status`. Methods outside
    /// S3's are counted as `other`, so that a client cannot grow the table.
    pub fn record(&self, method: &http::Method, status: u16) {
        let m = match *method {
            http::Method::GET => "GET",
            http::Method::HEAD => "HEAD",
            http::Method::PUT => "PUT",
            http::Method::POST => "POST",
            http::Method::DELETE => "DELETE",
            _ => "other",
        };
        *self.counts.lock().unwrap_or_else(|e| e.into_inner()).entry((m, status)).or_insert(0) += 1;
    }

    fn get(&self) -> BTreeMap<(&'static str, u16), u64> {
        self.counts.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Prometheus text being written: families, each with its `HELP` and `TYPE`
/// lines, then its samples.
#[derive(Default)]
struct Exposition(String);

impl Exposition {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = writeln!(self.0, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.0.push_str(name);
        if !labels.is_empty() {
            self.0.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.0.push(',');
                }
                let v = v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n");
                let _ = write!(self.0, "{k}=\"{v}\"");
            }
            self.0.push('}');
        }
        let _ = writeln!(self.0, " {value}");
    }
}

/// Where the figures come from: the server's own state.
pub struct Metrics {
    started: Instant,
    started_ms: u64,
    requests: Arc<Requests>,
    keys: Arc<Watched<KeyFile>>,
    writers: Watched<AllowList>,
    usage: Arc<Usage>,
    activity: Arc<Activity>,
    log: Arc<TransparencyLog>,
}

impl Metrics {
    /// The figures of a server whose state directory is `state_dir`, started now.
    pub fn new(
        state_dir: &std::path::Path,
        requests: Arc<Requests>,
        keys: Arc<Watched<KeyFile>>,
        usage: Arc<Usage>,
        activity: Arc<Activity>,
        log: Arc<TransparencyLog>,
    ) -> Metrics {
        Metrics {
            started: Instant::now(),
            started_ms: crate::activity::now_ms(),
            requests,
            keys,
            writers: Watched::new(crate::writers::path(state_dir)),
            usage,
            activity,
            log,
        }
    }

    /// The figures now, as Prometheus text. A state file that does not read
    /// (being replaced, damaged) leaves its figures out for this answer.
    pub fn render(&self) -> String {
        let mut t = Exposition::default();
        t.family("coffer_server_uptime_seconds", "gauge", "Seconds since the server started.");
        t.sample("coffer_server_uptime_seconds", &[], self.started.elapsed().as_secs_f64());
        t.family("coffer_server_start_time_seconds", "gauge", "When the server started, seconds since the epoch.");
        t.sample("coffer_server_start_time_seconds", &[], self.started_ms as f64 / 1000.0);

        t.family("coffer_server_requests_total", "counter", "Requests answered, by HTTP method and status.");
        for ((method, status), n) in self.requests.get() {
            t.sample("coffer_server_requests_total", &[("method", method), ("status", &status.to_string())], n as f64);
        }

        t.family("coffer_server_transparency_log_entries", "gauge", "Snapshots and tombstones in the server's log.");
        t.sample("coffer_server_transparency_log_entries", &[], self.log.size() as f64);

        let allowed = self.writers.get().map(|a| a.writers.clone()).unwrap_or_default();
        let activity = self.activity.get();
        t.family("coffer_server_writer_allowed", "gauge", "1 for each writer on the allow-list, with its note.");
        for w in &allowed {
            t.sample("coffer_server_writer_allowed", &[("writer", &w.public_key), ("note", &w.note)], 1.0);
        }
        t.family(
            "coffer_server_writer_last_snapshot_timestamp_seconds",
            "gauge",
            "When the writer last stored a snapshot through this server, seconds since the epoch.",
        );
        for (key, a) in &activity {
            let at = a.last_snapshot_ms as f64 / 1000.0;
            t.sample("coffer_server_writer_last_snapshot_timestamp_seconds", &[("writer", key)], at);
        }
        t.family("coffer_server_writer_snapshots_total", "counter", "Snapshots the writer stored through this server.");
        let mut writers: BTreeMap<&str, u64> = allowed.iter().map(|w| (w.public_key.as_str(), 0)).collect();
        writers.extend(activity.iter().map(|(k, a)| (k.as_str(), a.snapshots)));
        for (key, n) in writers {
            t.sample("coffer_server_writer_snapshots_total", &[("writer", key)], n as f64);
        }

        let keys = self.keys.get().map(|k| k.keys.clone()).unwrap_or_default();
        t.family("coffer_server_key_bytes_stored", "gauge", "Bytes the access key stored (its quota's usage).");
        for k in &keys {
            t.sample("coffer_server_key_bytes_stored", &[("key", &k.name)], self.usage.used(&k.id) as f64);
        }
        t.family("coffer_server_key_quota_bytes", "gauge", "The access key's quota, for keys that have one.");
        for k in &keys {
            if let Some(q) = k.quota {
                t.sample("coffer_server_key_quota_bytes", &[("key", &k.name)], q as f64);
            }
        }
        t.0
    }
}

/// The answer to one request.
fn answer(metrics: &Metrics, req: &http::Request<hyper::body::Incoming>) -> http::Response<String> {
    let plain = |status: http::StatusCode, text: String| {
        let mut r = http::Response::new(text);
        *r.status_mut() = status;
        r.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("text/plain; charset=utf-8"));
        r
    };
    if req.uri().path() != PATH {
        return plain(http::StatusCode::NOT_FOUND, format!("not found: the figures are at GET {PATH}\n"));
    }
    if req.method() != http::Method::GET {
        let mut r = plain(
            http::StatusCode::METHOD_NOT_ALLOWED,
            format!("{} is not allowed: the figures are read with GET {PATH}\n", req.method()),
        );
        r.headers_mut().insert(http::header::ALLOW, http::HeaderValue::from_static("GET"));
        return r;
    }
    let mut r = http::Response::new(metrics.render());
    r.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static(CONTENT_TYPE));
    r
}

/// Serves the figures on `listener` until the process ends.
pub(crate) async fn serve(listener: tokio::net::TcpListener, metrics: Arc<Metrics>) {
    let slots = Arc::new(tokio::sync::Semaphore::new(CONNECTIONS));
    loop {
        let permit = slots.clone().acquire_owned().await.expect("the semaphore is never closed");
        let tcp = match listener.accept().await {
            Ok((tcp, _)) => tcp,
            // Out of descriptors and the like: wait and go on serving.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .max_buf_size(HEADER_LIMIT)
                .keep_alive(false);
            let service = hyper::service::service_fn(move |req| {
                let r = answer(&metrics, &req);
                async move { Ok::<_, std::convert::Infallible>(r) }
            });
            let _ = tokio::time::timeout(CONNECTION_TIMEOUT, http.serve_connection(TokioIo::new(tcp), service)).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_unless_allowed() {
        assert!(check_address("127.0.0.1:9898".parse().unwrap(), false).is_ok());
        assert!(check_address("[::1]:9898".parse().unwrap(), false).is_ok());
        let e = check_address("0.0.0.0:9898".parse().unwrap(), false).unwrap_err().to_string();
        assert!(e.contains("0.0.0.0:9898") && e.contains("--metrics-remote"), "{e}");
        assert!(check_address("192.0.2.1:9898".parse().unwrap(), true).is_ok());
    }

    #[test]
    fn labels_and_help_are_escaped() {
        let mut t = Exposition::default();
        t.family("x_total", "counter", "a \\ b\nc");
        t.sample("x_total", &[("note", "say \"hi\"\\\nbye"), ("k", "v")], 3.0);
        t.sample("x_total", &[], 0.5);
        assert_eq!(
            t.0,
            concat!(
                "# HELP x_total a \\\\ b\\nc\n# TYPE x_total counter\n",
                "x_total{note=\"say \\\"hi\\\"\\\\\\nbye\",k=\"v\"} 3\n",
                "x_total 0.5\n"
            )
        );
    }

    #[test]
    fn methods_are_counted_by_name_and_others_together() {
        let r = Requests::default();
        r.record(&http::Method::GET, 200);
        r.record(&http::Method::GET, 200);
        r.record(&http::Method::from_bytes(b"BREW").unwrap(), 400);
        r.record(&http::Method::PATCH, 400);
        let got = r.get();
        assert_eq!(got[&("GET", 200)], 2);
        assert_eq!(got[&("other", 400)], 2);
        assert_eq!(got.len(), 2);
    }
}
