//! `coffer serve --metrics` (docs/design.md#server, "Metrics"): a real server
//! with its metrics on a loopback port, a backup through it, then the
//! Prometheus text scraped over HTTP and checked line by line (every sample
//! `name{labels} value`, every name with its `TYPE`): the writer's last
//! snapshot is the backup's, the key's bytes and quota are there, the request
//! counters move, and no secret or object name shows. Hostile requests get a
//! 4xx and the endpoint keeps answering.

use std::collections::BTreeMap;

use super::*;

/// One sample: its labels and value.
type Samples = BTreeMap<String, Vec<(BTreeMap<String, String>, f64)>>;

/// Parses Prometheus text (format 0.0.4) strictly: `# HELP` and `# TYPE` lines,
/// then samples `name{k="v",…} value` whose name has a `TYPE`. Panics naming
/// the line that does not hold.
fn parse(text: &str) -> Samples {
    let mut types: BTreeMap<String, String> = BTreeMap::new();
    let mut samples = Samples::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            assert!(rest.split_once(' ').is_some_and(|(n, h)| valid_name(n) && !h.is_empty()), "HELP: {line:?}");
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or_else(|| panic!("TYPE: {line:?}"));
            assert!(valid_name(name), "TYPE: {line:?}");
            assert!(["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind), "TYPE: {line:?}");
            assert!(types.insert(name.to_string(), kind.to_string()).is_none(), "a second TYPE: {line:?}");
            continue;
        }
        assert!(!line.starts_with('#') && !line.is_empty(), "neither a comment nor a sample: {line:?}");
        let name_end = line.find(['{', ' ']).unwrap_or_else(|| panic!("no value: {line:?}"));
        let name = &line[..name_end];
        assert!(valid_name(name), "sample name: {line:?}");
        assert!(types.contains_key(name), "{name} has no TYPE line before it: {line:?}");
        let (labels, rest) = match line[name_end..].strip_prefix('{') {
            Some(inner) => labels_of(inner, line),
            None => (BTreeMap::new(), &line[name_end..]),
        };
        let value = rest.strip_prefix(' ').unwrap_or_else(|| panic!("no space before the value: {line:?}"));
        let value: f64 = value.parse().unwrap_or_else(|_| panic!("value {value:?}: {line:?}"));
        samples.entry(name.to_string()).or_default().push((labels, value));
    }
    samples
}

/// The labels at the start of `s` (just after the `{`) and what follows the `}`.
fn labels_of<'a>(s: &'a str, line: &str) -> (BTreeMap<String, String>, &'a str) {
    let mut labels = BTreeMap::new();
    let mut i = 0;
    loop {
        if s[i..].starts_with('}') {
            return (labels, &s[i + 1..]);
        }
        let eq = i + s[i..].find("=\"").unwrap_or_else(|| panic!("label without =\": {line:?}"));
        let key = &s[i..eq];
        assert!(valid_name(key), "label name {key:?}: {line:?}");
        let mut value = String::new();
        let mut chars = s[eq + 2..].char_indices();
        let close = loop {
            match chars.next() {
                Some((j, '"')) => break eq + 2 + j,
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c @ ('\\' | '"'))) => value.push(c),
                    other => panic!("bad escape {other:?}: {line:?}"),
                },
                Some((_, c)) => value.push(c),
                None => panic!("unclosed label value: {line:?}"),
            }
        };
        assert!(labels.insert(key.to_string(), value).is_none(), "label {key} twice: {line:?}");
        i = close + 1;
        if s[i..].starts_with(',') {
            i += 1;
        } else {
            assert!(s[i..].starts_with('}'), "labels not closed: {line:?}");
        }
    }
}

fn valid_name(n: &str) -> bool {
    let mut c = n.chars();
    c.next().is_some_and(|f| f.is_ascii_alphabetic() || f == '_' || f == ':')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_' || x == ':')
}

/// The value of `name` whose labels include `want`.
fn value(s: &Samples, name: &str, want: &[(&str, &str)]) -> Option<f64> {
    s.get(name)?
        .iter()
        .find(|(labels, _)| want.iter().all(|(k, v)| labels.get(*k).map(String::as_str) == Some(*v)))
        .map(|(_, v)| *v)
}

/// The sum of `name` over the samples whose labels pass `keep`.
fn sum(s: &Samples, name: &str, keep: impl Fn(&BTreeMap<String, String>) -> bool) -> f64 {
    s.get(name).map_or(0.0, |v| v.iter().filter(|(l, _)| keep(l)).map(|(_, x)| x).sum())
}

/// The address of the metrics the server printed on start (`metrics: URL`).
fn metrics_addr(srv: &mut Server) -> String {
    loop {
        let mut line = String::new();
        assert!(srv._out.read_line(&mut line).unwrap() > 0, "the server printed no metrics line");
        if let Some(url) = line.trim().strip_prefix("metrics: ") {
            let addr = url.strip_prefix("http://").and_then(|u| u.strip_suffix("/metrics"));
            return addr.unwrap_or_else(|| panic!("metrics at {url:?}")).to_string();
        }
    }
}

/// Sends `request` as is to `addr`; returns the status (0 if none came) and the answer.
fn send(addr: &str, request: &[u8]) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let _ = s.write_all(request);
    let mut resp = Vec::new();
    let _ = s.read_to_end(&mut resp);
    let resp = text(&resp);
    let status = resp.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, resp)
}

/// A scrape: `GET /metrics`, its status 200 and content type checked, the body parsed.
fn scrape(addr: &str) -> (Samples, String) {
    let (status, resp) = send(addr, format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes());
    assert_eq!(status, 200, "{resp}");
    let (head, body) = resp.split_once("\r\n\r\n").unwrap();
    assert!(head.to_ascii_lowercase().contains("content-type: text/plain; version=0.0.4"), "{head}");
    (parse(body), body.to_string())
}

fn now_secs() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64()
}

#[test]
fn metrics_show_writers_keys_and_requests_and_nothing_secret() {
    let env = Env::new();
    let mut srv = start(&env, &["--metrics", "127.0.0.1:0"]);
    let addr = metrics_addr(&mut srv);
    let out = serve_cmd(&env, &srv.state)
        .args(["--json", "key", "add", "laptop", "--level", "append", "--quota", "1G"])
        .output()
        .unwrap();
    assert_success(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let key = (v["id"].as_str().unwrap().to_string(), v["secret"].as_str().unwrap().to_string());

    // Before any backup: the key is there, with nothing stored; no writer yet.
    let (before, _) = scrape(&addr);
    assert_eq!(value(&before, "coffer_server_key_bytes_stored", &[("key", "laptop")]), Some(0.0));
    assert_eq!(value(&before, "coffer_server_key_quota_bytes", &[("key", "laptop")]), Some(f64::from(1u32 << 30)));
    assert!(before.get("coffer_server_writer_last_snapshot_timestamp_seconds").is_none_or(Vec::is_empty));
    assert!(value(&before, "coffer_server_uptime_seconds", &[]).unwrap() > 0.0);

    let src = env.path("src");
    make_tree(&src);
    let t0 = now_secs();
    first_backup(&env, &srv, &key, &src);
    let t1 = now_secs();
    let writer = own_writer(&env, &srv, &key);

    let (m, body) = scrape(&addr);
    let last = value(&m, "coffer_server_writer_last_snapshot_timestamp_seconds", &[("writer", &writer)])
        .unwrap_or_else(|| panic!("no last snapshot for {writer}:\n{body}"));
    assert!((t0 - 1.0..=t1 + 1.0).contains(&last), "last snapshot at {last}, the backup ran from {t0} to {t1}");
    assert_eq!(value(&m, "coffer_server_writer_snapshots_total", &[("writer", &writer)]), Some(1.0), "{body}");
    assert_eq!(value(&m, "coffer_server_writer_allowed", &[("writer", &writer), ("note", "test")]), Some(1.0));
    let stored = value(&m, "coffer_server_key_bytes_stored", &[("key", "laptop")]).unwrap();
    assert!(stored > 100_000.0, "bytes stored: {stored}\n{body}");
    let puts = sum(&m, "coffer_server_requests_total", |l| l["method"] == "PUT" && l["status"] == "200");
    assert!(puts >= 3.0, "{body}");
    // The refused first attempt is counted as a refusal.
    let refusals = sum(&m, "coffer_server_requests_total", |l| l["status"].starts_with('4'));
    assert!(refusals >= 1.0, "{body}");
    assert!(value(&m, "coffer_server_transparency_log_entries", &[]).unwrap() >= 1.0, "{body}");
    // No secret, no key id, no object name.
    for secret in [key.1.as_str(), key.0.as_str(), "snapshots/", "data/", "index/"] {
        assert!(!body.contains(secret), "{secret:?} shows in the metrics:\n{body}");
    }
    let snapshot_ids: Vec<String> = files_under(&env.repo().join("snapshots"))
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into())
        .collect();
    assert!(snapshot_ids.iter().all(|id| !body.contains(&id[..16])), "{body}");

    // Another backup: the counters move.
    std::fs::write(src.join("new-file"), random_bytes(50_000, 9)).unwrap();
    assert_success(&client(&env, &srv, &key).args(["-q", "backup", src.to_str().unwrap()]).output().unwrap());
    let (again, body) = scrape(&addr);
    assert_eq!(value(&again, "coffer_server_writer_snapshots_total", &[("writer", &writer)]), Some(2.0), "{body}");
    let more = sum(&again, "coffer_server_requests_total", |l| l["method"] == "PUT" && l["status"] == "200");
    assert!(more > puts, "PUTs {puts} then {more}");
    assert!(value(&again, "coffer_server_key_bytes_stored", &[("key", "laptop")]).unwrap() > stored);
}

#[test]
fn the_metrics_endpoint_refuses_what_is_not_a_scrape_and_keeps_serving() {
    let env = Env::new();
    let mut srv = start(&env, &["--metrics", "127.0.0.1:0"]);
    let addr = metrics_addr(&mut srv);
    // A connection that sends nothing holds no one up.
    let _idle = std::net::TcpStream::connect(&addr).unwrap();
    let (status, resp) = send(&addr, b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc");
    assert_eq!(status, 405, "{resp}");
    assert!(resp.to_ascii_lowercase().contains("allow: get"), "{resp}");
    for path in ["/", "/metrics/../keys.json", "/../metrics", "/keys.json", "/metricsx", "/metrics/"] {
        let (status, resp) = send(&addr, format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
        assert_eq!(status, 404, "{path}: {resp}");
        assert!(!resp.contains("secret"), "{resp}");
    }
    // Headers past the limit.
    let huge = format!("GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n", "a".repeat(64 << 10));
    let (status, resp) = send(&addr, huge.as_bytes());
    assert!((400..500).contains(&status), "{status}: {}", &resp[..resp.len().min(300)]);
    // Not HTTP at all.
    let (status, _) = send(&addr, b"\x16\x03\x01\x02\x00garbage\r\n\r\n");
    assert!(status == 0 || (400..500).contains(&status), "{status}");
    // And it still answers.
    let (m, _) = scrape(&addr);
    assert!(m.contains_key("coffer_server_uptime_seconds"));
}

#[test]
fn metrics_on_an_address_others_reach_need_metrics_remote() {
    let env = Env::new();
    let out = serve_cmd(&env, &env.path("state"))
        .args(["--listen", "127.0.0.1:0", "--metrics", "0.0.0.0:0"])
        .output()
        .unwrap();
    let err = assert_code(&out, 2);
    assert!(err.contains("--metrics 0.0.0.0:0") && err.contains("--metrics-remote"), "{err}");
}
