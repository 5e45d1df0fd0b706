//! `coffer ui` end to end over HTTP (docs/design.md#ui): the real binary
//! serving a real repository, driven by an HTTP client as a browser or a
//! script would, and by hostile requests: no session, a wrong or missing CSRF
//! token, another site's Origin, another Host, paths that climb out, guessing.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::ui::{Session, UI_PASSWORD, serve, with_home_job};
use common::*;
use reqwest::StatusCode;
use reqwest::blocking::Client;
use serde_json::json;

/// A repository with one snapshot of a tree holding a large file, a directory
/// of many entries, a name with markup and a name that is not UTF-8.
fn repository() -> (Env, PathBuf, String) {
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(src.join("many")).unwrap();
    std::fs::write(src.join("big.bin"), random_bytes(5 << 20, 1)).unwrap();
    for i in 0..2500 {
        std::fs::write(src.join("many").join(format!("f{i:05}")), format!("{i}")).unwrap();
    }
    std::fs::write(src.join("<img src=x onerror=alert(1)>"), b"markup").unwrap();
    use std::os::unix::ffi::OsStrExt;
    std::fs::write(src.join(std::ffi::OsStr::from_bytes(b"caf\xe9")), b"latin-1").unwrap();
    let id = env.backup(&[&src]);
    (env, src, id)
}

fn rel(p: &Path) -> String {
    p.to_str().unwrap().trim_start_matches('/').to_string()
}

#[test]
fn sessions_csrf_and_hostile_requests() {
    let (env, src, id) = repository();
    std::fs::write(env.path("ui-pass"), format!("{UI_PASSWORD}\n")).unwrap();
    let ui = serve(
        env.cmd(),
        &env.path("state"),
        &["--no-jobs", "--ui-password-file", env.path("ui-pass").to_str().unwrap()],
    );
    assert!(ui.stderr.iter().any(|l| l.starts_with("coffer ui: login token ")), "{:?}", ui.stderr);

    // No session: pages send to the login, the API says 401, assets are served.
    let r = ui.get(None, "/");
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(r.headers()["location"], "/login");
    assert_eq!(ui.get(None, "/api/v1/repos").status(), StatusCode::UNAUTHORIZED);
    let snap_path = format!("/api/v1/repos/default/snapshots/{id}/content?path={}/big.bin", rel(&src));
    assert_eq!(ui.get(None, &snap_path).status(), StatusCode::UNAUTHORIZED);
    let login = ui.get(None, "/login");
    assert_eq!(login.status(), StatusCode::OK);
    let csp = login.headers()["content-security-policy"].to_str().unwrap().to_string();
    assert!(csp.contains("default-src 'none'") && csp.contains("frame-ancestors 'none'"), "{csp}");
    assert_eq!(login.headers()["x-frame-options"], "DENY");

    // A forged cookie opens nothing.
    let forged = Session { cookie: format!("coffer_session={}", "ab".repeat(32)), csrf: String::new() };
    assert_eq!(ui.get(Some(&forged), "/api/v1/repos").status(), StatusCode::UNAUTHORIZED);

    // The one-time token opens one session; the next is in the file, not the log.
    let token = ui.token();
    let s1 = ui.login(&token).expect("the token opens a session");
    assert_eq!(ui.login(&token).err(), Some(StatusCode::UNAUTHORIZED), "used once");
    assert_ne!(ui.token(), token);
    let mode = std::fs::metadata(ui.state.join("coffer/ui/login-token")).unwrap();
    assert_eq!(std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777, 0o600);
    // The password opens sessions too.
    let s = ui.login(UI_PASSWORD).expect("the password opens a session");
    let repos = ui.json(&s, "/api/v1/repos");
    assert_eq!(repos["repositories"][0]["snapshots"], 1, "{repos}");
    // What the snapshots hold (big.bin alone is 5 MiB) against what the packs store.
    let (logical, stored) =
        (repos["repositories"][0]["logical_bytes"].as_u64(), repos["repositories"][0]["stored_bytes"].as_u64());
    assert!(logical.is_some_and(|l| l >= 5 << 20) && stored.is_some_and(|b| b > 0), "{repos}");
    assert!(repos["repositories"][0]["ratio"].as_f64().is_some_and(|x| x > 0.0), "{repos}");

    // Reading: a page of a large directory, then the next; the entry's path is
    // what the next request gives back.
    let many = format!("/api/v1/repos/default/snapshots/{id}/entries?path={}/many", rel(&src));
    let p1 = ui.json(&s, &format!("{many}&limit=1000"));
    assert_eq!((p1["total"].as_u64(), p1["entries"].as_array().unwrap().len()), (Some(2500), 1000));
    let p3 = ui.json(&s, &format!("{many}&offset=2000&limit=1000"));
    assert_eq!(p3["entries"].as_array().unwrap().len(), 500);
    assert_eq!(p3["entries"][0]["name"], "f02000");
    let f = p3["entries"][499]["path"].as_str().unwrap().to_string();
    let r = ui.get(Some(&s), &format!("/api/v1/repos/default/snapshots/{id}/content?path={f}"));
    assert_eq!(r.text().unwrap(), "2499");
    // The HTML page of it offers the next page.
    let page = ui.get(Some(&s), &format!("/repos/default/snapshots/{id}?path={}/many", rel(&src))).text().unwrap();
    assert!(page.contains("offset=1000") && page.contains("Entries 1–1000 of 2500"), "{page}");

    // A download is the file's bytes, whole, with its length.
    let r = ui.get(Some(&s), &snap_path);
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["content-length"], (5u64 << 20).to_string().as_str());
    assert!(r.headers()["content-disposition"].to_str().unwrap().starts_with("attachment; filename=\"big.bin\""));
    assert!(r.bytes().unwrap() == std::fs::read(src.join("big.bin")).unwrap(), "the downloaded bytes differ");
    // A name that is not UTF-8 is given as percent-encoded bytes and found by them.
    let root = ui.json(&s, &format!("/api/v1/repos/default/snapshots/{id}/entries?path={}", rel(&src)));
    let cafe = root["entries"].as_array().unwrap().iter().find(|e| e["name"]["hex"] == "636166e9").expect("café");
    let r = ui.get(
        Some(&s),
        &format!("/api/v1/repos/default/snapshots/{id}/content?path={}", cafe["path"].as_str().unwrap()),
    );
    assert_eq!(r.text().unwrap(), "latin-1");
    // Markup in a name is shown as text.
    let page = ui.get(Some(&s), &format!("/repos/default/snapshots/{id}?path={}", rel(&src))).text().unwrap();
    assert!(page.contains("&lt;img src=x onerror=alert(1)&gt;") && !page.contains("<img"), "{page}");

    // Paths that climb out, absolute paths, empty components: refused; missing: 404.
    for bad in ["..", "tmp/../etc", "/etc/passwd", "%2Fetc%2Fpasswd", "a//b", "a/./b", "a%00b"] {
        let r = ui.get(Some(&s), &format!("/api/v1/repos/default/snapshots/{id}/content?path={bad}"));
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{bad}");
        let r = ui.get(Some(&s), &format!("/repos/default/snapshots/{id}/download?path={bad}"));
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{bad}");
    }
    let r = ui.get(Some(&s), &format!("/api/v1/repos/default/snapshots/{id}/content?path={}/nothing", rel(&src)));
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert_eq!(ui.get(Some(&s), "/api/v1/repos/elsewhere/snapshots").status(), StatusCode::NOT_FOUND);
    let r = ui.get(Some(&s), &format!("/api/v1/repos/default/snapshots/{}/entries", "0".repeat(64)));
    assert_eq!(r.status(), StatusCode::NOT_FOUND);

    // A second snapshot, one file changed and one added: the diff says so, with sizes.
    std::fs::write(src.join("many/f00007"), b"seven, changed").unwrap();
    std::fs::write(src.join("added.txt"), b"12345").unwrap();
    let id2 = env.backup(&[&src]);
    let d = ui.json(&s, &format!("/api/v1/repos/default/diff?from={id}&to={id2}"));
    let st = &d["stats"];
    assert_eq!(
        (st["added"].as_u64(), st["modified"].as_u64(), st["removed"].as_u64()),
        (Some(1), Some(1), Some(0)),
        "{d}"
    );
    assert_eq!(st["bytes_added"], 5, "{d}");
    let changed: Vec<(&str, &str)> = d["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["change"].as_str().unwrap(), c["path"].as_str().unwrap()))
        .collect();
    let want_mod = format!("{}/many/f00007", src.display());
    assert!(changed.contains(&("modified", want_mod.as_str())), "{changed:?}");
    let page = ui.get(Some(&s), &format!("/repos/default/diff?from={id}&to={id2}")).text().unwrap();
    assert!(page.contains("1 added (5 B)") && page.contains("f00007"), "{page}");
    let d1 = ui.json(&s, &format!("/api/v1/repos/default/diff?from={id}&to={id2}&limit=1"));
    assert_eq!((d1["changes"].as_array().unwrap().len(), d1["truncated"].as_bool()), (1, Some(true)), "{d1}");
    // The snapshot list draws its charts, each point titled with its snapshot.
    let page = ui.get(Some(&s), "/repos/default").text().unwrap();
    assert!(page.contains("<svg") && page.contains("Bytes added per backup") && page.contains(&id2[..8]), "{page}");
    assert_eq!(
        ui.get(Some(&s), &format!("/api/v1/repos/default/diff?from={id}&to=nope")).status(),
        StatusCode::BAD_REQUEST
    );

    // Find by name across snapshots, newest first; the same tree is searched once.
    let f = ui.json(&s, "/api/v1/repos/default/find?pattern=f0000%5B0-2%5D");
    let found: Vec<(&str, &str)> = f["found"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["snapshot"].as_str().unwrap(), e["name"].as_str().unwrap()))
        .collect();
    assert_eq!(
        found,
        vec![
            (id2.as_str(), "f00000"),
            (&id2, "f00001"),
            (&id2, "f00002"),
            (&id, "f00000"),
            (&id, "f00001"),
            (&id, "f00002")
        ],
        "{f}"
    );
    let f = ui.json(&s, &format!("/api/v1/repos/default/find?pattern=added.txt&snapshot={id2}"));
    let hit = &f["found"][0];
    let r = ui.get(
        Some(&s),
        &format!("/api/v1/repos/default/snapshots/{id2}/content?path={}", hit["path"].as_str().unwrap()),
    );
    assert_eq!(r.text().unwrap(), "12345");
    let f = ui.json(&s, "/api/v1/repos/default/find?pattern=f*&limit=10");
    assert_eq!((f["found"].as_array().unwrap().len(), f["truncated"].as_bool()), (10, Some(true)));
    assert_eq!(ui.get(Some(&s), "/api/v1/repos/default/find?pattern=%5B").status(), StatusCode::BAD_REQUEST);
    let page = ui.get(Some(&s), "/repos/default/find?pattern=added.txt").text().unwrap();
    assert!(page.contains("1 entries named added.txt") && page.contains("Download"), "{page}");

    // Another Host (a page of another site resolving its name to 127.0.0.1): refused.
    let r = ui
        .client
        .get(ui.url("/api/v1/repos"))
        .header("host", "attacker.example")
        .header("cookie", &s.cookie)
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::MISDIRECTED_REQUEST);

    // State changes need the session's CSRF token, and no other site's Origin.
    assert_eq!(ui.post(&s, "/api/v1/logout", None, json!({})).status(), StatusCode::FORBIDDEN);
    assert_eq!(
        ui.post(&s, "/api/v1/logout", Some(&s1.csrf), json!({})).status(),
        StatusCode::FORBIDDEN,
        "another session's"
    );
    assert_eq!(ui.post(&s, "/api/v1/logout", Some(""), json!({})).status(), StatusCode::FORBIDDEN);
    let r = ui
        .client
        .post(ui.url("/logout"))
        .header("cookie", &s.cookie)
        .header("origin", "https://attacker.example")
        .form(&[("csrf", s.csrf.as_str())])
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    // The form posts of the pages carry it as a field.
    let r = ui
        .client
        .post(ui.url("/logout"))
        .header("cookie", &s1.cookie)
        .form(&[("csrf", s1.csrf.as_str())])
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(ui.get(Some(&s1), "/api/v1/repos").status(), StatusCode::UNAUTHORIZED, "logged out");
    assert_eq!(ui.post(&s, "/api/v1/logout", Some(&s.csrf), json!({})).status(), StatusCode::OK);
    assert_eq!(ui.get(Some(&s), "/api/v1/repos").status(), StatusCode::UNAUTHORIZED, "logged out");
    // A body past the limit is refused before it is read whole.
    let s = ui.login(UI_PASSWORD).unwrap();
    let big = "x".repeat(1 << 20);
    let r = ui
        .client
        .post(ui.url("/api/v1/logout"))
        .header("cookie", &s.cookie)
        .header("x-csrf-token", &s.csrf)
        .body(big)
        .send();
    assert!(r.map_or(true, |r| r.status() == StatusCode::PAYLOAD_TOO_LARGE));

    // Guessing: four failures answered at once, the fifth in the minute delayed.
    for _ in 0..4 {
        let t = Instant::now();
        assert!(ui.login("guess").is_err());
        assert!(t.elapsed() < Duration::from_millis(900), "{:?}", t.elapsed());
    }
    let t = Instant::now();
    assert_eq!(ui.login("guess").err(), Some(StatusCode::UNAUTHORIZED));
    assert!(t.elapsed() >= Duration::from_millis(950), "the fifth failure was not delayed: {:?}", t.elapsed());
    // The right password still opens (after its delay).
    assert!(ui.login(UI_PASSWORD).is_ok());
}

#[test]
fn beyond_loopback_it_needs_tls_and_a_password() {
    let env = Env::new();
    std::fs::write(env.path("ui-pass"), format!("{UI_PASSWORD}\n")).unwrap();
    let pass = env.path("ui-pass");
    let state = env.path("state");
    let out =
        env.cmd().env("XDG_STATE_HOME", &state).args(["ui", "--no-jobs", "--listen", "0.0.0.0:0"]).output().unwrap();
    let err = assert_code(&out, 2);
    assert!(err.contains("not a loopback address") && err.contains("TLS"), "{err}");
    let out = env
        .cmd()
        .env("XDG_STATE_HOME", &state)
        .args(["ui", "--no-jobs", "--listen", "0.0.0.0:0", "--tls-generate"])
        .output()
        .unwrap();
    let err = assert_code(&out, 2);
    assert!(err.contains("a password"), "{err}");
    std::fs::write(env.path("empty"), "\n").unwrap();
    let out = env
        .cmd()
        .env("XDG_STATE_HOME", &state)
        .args(["ui", "--no-jobs", "--ui-password-file", env.path("empty").to_str().unwrap()])
        .output()
        .unwrap();
    assert!(text(&out.stderr).contains("is empty"), "{}", text(&out.stderr));

    // With both, over TLS: the certificate generated is the one served, its
    // fingerprint printed; the session cookie is Secure.
    let mut cmd = env.cmd();
    cmd.env("XDG_STATE_HOME", &state);
    let ui = serve(cmd, &state, &["--no-jobs", "--tls-generate", "--ui-password-file", pass.to_str().unwrap()]);
    assert!(ui.base.starts_with("https://127.0.0.1:"), "{}", ui.base);
    assert!(ui.stderr.iter().any(|l| l.contains("SHA-256 fingerprint")), "{:?}", ui.stderr);
    let plain = Client::new().get(ui.url("/login").replace("https:", "http:")).send();
    assert!(plain.map_or(true, |r| !r.status().is_success()), "plain HTTP is not served");
    let cert = std::fs::read(state.join("coffer/ui/cert.pem")).unwrap();
    let client = Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&cert).unwrap())
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let r = client.post(ui.url("/api/v1/login")).json(&json!({"secret": UI_PASSWORD})).send().unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let cookie = r.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(
        cookie.contains("; Secure") && cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
}

#[test]
fn jobs_are_shown_and_run_from_the_ui() {
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("a"), random_bytes(100_000, 3)).unwrap();
    let cmd = with_home_job(&env, &src);
    let ui = serve(cmd, &env.path("state"), &[]);
    let s = ui.login(&ui.token()).unwrap();
    let v = ui.json(&s, "/api/v1/jobs");
    let home = v["jobs"].as_array().unwrap().iter().find(|k| k["job"] == "home" && k["kind"] == "backup").cloned();
    let home = home.unwrap_or_else(|| panic!("{v}"));
    assert_eq!(home["state"], "never run", "{v}");
    // The job's repository is the one of the global options: shown once.
    assert_eq!(ui.json(&s, "/api/v1/repos")["repositories"].as_array().unwrap().len(), 1);
    let page = ui.get(Some(&s), "/").text().unwrap();
    assert!(page.contains("<th scope=\"row\">home</th>") && page.contains("never run"), "{page}");

    assert_eq!(ui.post(&s, "/api/v1/jobs/home/run", None, json!({})).status(), StatusCode::FORBIDDEN);
    assert_eq!(ui.post(&s, "/api/v1/jobs/nobody/run", Some(&s.csrf), json!({})).status(), StatusCode::NOT_FOUND);
    assert_eq!(
        ui.post(&s, "/api/v1/jobs/home/run", Some(&s.csrf), json!({"kind": "dance"})).status(),
        StatusCode::BAD_REQUEST
    );
    let r = ui.post(&s, "/api/v1/jobs/home/run", Some(&s.csrf), json!({"kind": "backup"}));
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    let deadline = Instant::now() + Duration::from_secs(60);
    let last = loop {
        let v = ui.json(&s, "/api/v1/jobs");
        let k = v["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["job"] == "home" && k["kind"] == "backup")
            .cloned()
            .unwrap();
        if !k["last"].is_null() && k["running"].is_null() {
            break k["last"].clone();
        }
        assert!(Instant::now() < deadline, "the run did not end: {v}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(last["outcome"], "success", "{last}");
    // The snapshot it made is in the repository's list (refreshed within seconds).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let snaps = ui.json(&s, "/api/v1/repos/default/snapshots");
        if snaps["snapshots"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| Some(x["id"].as_str().unwrap()) == last["snapshot"].as_str())
        {
            break;
        }
        assert!(Instant::now() < deadline, "snapshot {} not listed: {snaps}", last["snapshot"]);
        std::thread::sleep(Duration::from_millis(250));
    }
    let runs = ui.json(&s, "/api/v1/jobs")["runs"].clone();
    assert_eq!(runs[0]["trigger"], "manual", "{runs}");
}

#[test]
fn the_agent_serves_the_ui_when_asked() {
    use std::io::BufRead;
    let env = Env::new();
    std::fs::write(env.path("pass"), format!("{PASSWORD}\n")).unwrap();
    let jobs = |ui: &str| {
        format!(
            "[agent]\nui = {ui:?}\n\n[job.home]\nrepository = {:?}\npassword-file = {:?}\npaths = [{:?}]\nschedule = \"yearly\"\n",
            env.repo().display().to_string(),
            env.path("pass").display().to_string(),
            env.path("src").display().to_string()
        )
    };
    let agent = |text: &str| {
        std::fs::write(env.path("jobs.toml"), text).unwrap();
        let mut c = env.cmd();
        c.env("COFFER_JOBS", env.path("jobs.toml"))
            .env("COFFER_AGENT_STATE", env.path("state/agent.sqlite"))
            .env("XDG_STATE_HOME", env.path("state"))
            .env("XDG_CONFIG_HOME", env.path("config"))
            .arg("agent");
        c
    };
    // Beyond loopback without TLS and a password: the agent does not start.
    let out = agent(&jobs("0.0.0.0:0")).output().unwrap();
    assert_ne!(out.status.code(), Some(0));
    assert!(text(&out.stderr).contains("not a loopback address"), "{}", text(&out.stderr));

    let mut child = agent(&jobs("127.0.0.1:0"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    let base = loop {
        let Some(Ok(line)) = lines.next() else { panic!("the agent ended: {seen:?}") };
        seen.push(line.clone());
        if let Some(i) = line.find("ui at ") {
            break line[i + 6..].trim_end_matches('/').to_string();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    // The agent's log is no place for the token: it only says where it is.
    assert!(!seen.iter().any(|l| l.contains("login token ") && !l.contains("is in")), "{seen:?}");
    let token = std::fs::read_to_string(env.path("state/coffer/ui/login-token")).unwrap();
    // The client's TLS provider, as `serve` installs it: this test may run first.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::blocking::Client::new();
    let r = client.post(format!("{base}/api/v1/login")).json(&json!({"secret": token.trim()})).send().unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let cookie = r.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_string();
    let v: serde_json::Value =
        client.get(format!("{base}/api/v1/jobs")).header("cookie", cookie).send().unwrap().json().unwrap();
    assert!(v["jobs"].as_array().unwrap().iter().any(|k| k["job"] == "home"), "{v}");
    let _ = child.kill();
    let _ = child.wait();
}

/// Polls restore `n` until it ends; its JSON.
fn restore_end(ui: &common::ui::Served, s: &Session, n: u64) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let v = ui.json(s, &format!("/api/v1/restores/{n}"));
        if v["state"] != "running" {
            return v;
        }
        assert!(Instant::now() < deadline, "restore {n} did not end: {v}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn restores_run_from_the_ui_after_a_dry_run() {
    let (env, src, id) = repository();
    let ui = serve(env.cmd(), &env.path("state"), &["--no-jobs"]);
    let s = ui.login(&ui.token()).unwrap();
    let api = format!("/api/v1/repos/default/snapshots/{id}/restore");
    let many = format!("{}/many", rel(&src));
    let target = env.path("back");

    // Hostile or mistaken orders: refused, nothing written.
    let order = |t: &str, p: &str| json!({"target": t, "path": p, "dry_run": true});
    assert_eq!(ui.post(&s, &api, None, order(target.to_str().unwrap(), &many)).status(), StatusCode::FORBIDDEN);
    for (t, p) in [
        ("back", many.as_str()),
        ("/tmp/../etc", many.as_str()),
        (target.to_str().unwrap(), "../.."),
        (target.to_str().unwrap(), "/etc"),
    ] {
        let r = ui.post(&s, &api, Some(&s.csrf), order(t, p));
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{t} {p}");
        assert!(r.text().unwrap().contains("\"message\""), "{t} {p}");
    }
    let r = ui.post(&s, &api, Some(&s.csrf), json!({"target": target, "path": many, "overwrite": "sometimes"}));
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let r = ui.post(&s, &api, Some(&s.csrf), order(target.to_str().unwrap(), &format!("{many}/none")));
    assert_eq!(r.status(), StatusCode::NOT_FOUND, "{}", r.text().unwrap());
    assert!(!target.exists());

    // A dry run counts and writes nothing; the run restores the same.
    let dry: serde_json::Value =
        ui.post(&s, &api, Some(&s.csrf), order(target.to_str().unwrap(), &many)).json().unwrap();
    assert_eq!((dry["type"].as_str(), dry["files"].as_u64()), (Some("dry_run"), Some(2500)), "{dry}");
    assert!(!target.exists(), "a dry run writes nothing");
    let r = ui.post(&s, &api, Some(&s.csrf), json!({"target": target, "path": many}));
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    let n = r.json::<serde_json::Value>().unwrap()["id"].as_u64().unwrap();
    let v = restore_end(&ui, &s, n);
    assert_eq!((v["state"].as_str(), v["result"]["files"].as_u64()), (Some("done"), Some(2500)), "{v}");
    for i in [0, 1234, 2499] {
        let name = format!("f{i:05}");
        assert_eq!(std::fs::read(target.join(&name)).unwrap(), std::fs::read(src.join("many").join(&name)).unwrap());
    }
    assert_eq!(std::fs::read_dir(&target).unwrap().count(), 2500);
    // Into the same target again: refused by default, and said so.
    let r = ui.post(&s, &api, Some(&s.csrf), json!({"target": target, "path": many}));
    let v = restore_end(&ui, &s, r.json::<serde_json::Value>().unwrap()["id"].as_u64().unwrap());
    assert_eq!(v["state"], "failed", "{v}");
    assert!(v["error"].as_str().unwrap().contains("not empty"), "{v}");
    // With overwrite = if-changed, a changed file is put back and the others kept.
    std::fs::write(target.join("f00007"), b"changed").unwrap();
    let r = ui.post(&s, &api, Some(&s.csrf), json!({"target": target, "path": many, "overwrite": "if-changed"}));
    let v = restore_end(&ui, &s, r.json::<serde_json::Value>().unwrap()["id"].as_u64().unwrap());
    assert_eq!(v["state"], "done", "{v}");
    assert_eq!(std::fs::read(target.join("f00007")).unwrap(), b"7");
    assert_eq!(v["result"]["skipped"], 2499, "{v}");

    // The forms: the dry run's page offers the run, which goes to the task's page.
    let form = format!("/repos/default/snapshots/{id}/restore");
    let page = ui.get(Some(&s), &format!("{form}?path={}", rel(&src))).text().unwrap();
    assert!(page.contains("name=\"target\"") && page.contains("dry-run"), "{page}");
    let target2 = env.path("back2");
    let post = |fields: &[(&str, &str)]| {
        ui.client.post(ui.url(&form)).header("cookie", &s.cookie).form(fields).send().unwrap()
    };
    let root = rel(&src);
    let t2 = target2.to_str().unwrap();
    let r = post(&[("path", &root), ("target", t2), ("step", "run")]);
    assert_eq!(r.status(), StatusCode::FORBIDDEN, "no CSRF token");
    let r = post(&[("csrf", &s.csrf), ("path", &root), ("target", "relative"), ("step", "dry-run")]);
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert!(r.text().unwrap().contains("not an absolute path"));
    let r = post(&[("csrf", &s.csrf), ("path", &root), ("target", t2), ("step", "dry-run")]);
    assert_eq!(r.status(), StatusCode::OK);
    let page = r.text().unwrap();
    assert!(page.contains("Restore now") && page.contains("2503 files"), "{page}");
    assert!(!target2.exists());
    let r = post(&[("csrf", &s.csrf), ("path", &root), ("target", t2), ("step", "run")]);
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let to = r.headers()["location"].to_str().unwrap().to_string();
    let n: u64 = to.strip_prefix("/restores/").unwrap().parse().unwrap();
    let v = restore_end(&ui, &s, n);
    assert_eq!(v["state"], "done", "{v}");
    assert!(std::fs::read(target2.join("big.bin")).unwrap() == std::fs::read(src.join("big.bin")).unwrap());
    use std::os::unix::ffi::OsStrExt;
    assert_eq!(std::fs::read(target2.join(std::ffi::OsStr::from_bytes(b"caf\xe9"))).unwrap(), b"latin-1");
    let page = ui.get(Some(&s), &to).text().unwrap();
    assert!(page.contains("done") && page.contains(t2), "{page}");
    let list = ui.json(&s, "/api/v1/restores");
    assert_eq!(list["restores"].as_array().unwrap().len(), 4, "{list}");
    assert_eq!(list["restores"][0]["id"], n);
    assert_eq!(ui.get(Some(&s), "/api/v1/restores/99").status(), StatusCode::NOT_FOUND);
}

#[test]
fn a_running_job_shows_its_progress() {
    use std::io::BufRead;
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("a"), random_bytes(6 << 20, 4)).unwrap();
    let cmd = with_home_job(&env, &src);
    // At 1 MiB/s the backup takes about six seconds.
    let mut jobs = std::fs::read_to_string(env.path("jobs.toml")).unwrap();
    jobs.push_str("limit-upload = 1024\n");
    std::fs::write(env.path("jobs.toml"), jobs).unwrap();
    let ui = serve(cmd, &env.path("state"), &[]);
    let s = ui.login(&ui.token()).unwrap();
    let events = ui.get(Some(&s), "/api/v1/events");
    assert_eq!(events.status(), StatusCode::OK);
    assert!(events.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    let r = ui.post(&s, "/api/v1/jobs/home/run", Some(&s.csrf), json!({"kind": "backup"}));
    assert_eq!(r.status(), StatusCode::ACCEPTED);

    // The jobs list gives the run's figures while it goes on.
    let deadline = Instant::now() + Duration::from_secs(60);
    let progress = loop {
        let v = ui.json(&s, "/api/v1/jobs");
        let k = v["jobs"].as_array().unwrap().iter().find(|k| k["job"] == "home" && k["kind"] == "backup").cloned();
        let p = k.unwrap()["progress"].clone();
        if p["bytes_done"].as_u64().is_some_and(|b| b > 0) {
            break p;
        }
        assert!(Instant::now() < deadline, "no progress shown: {v}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(progress["step"], "backup", "{progress}");
    // The page shows it too.
    let page = ui.get(Some(&s), "/").text().unwrap();
    assert!(page.contains("data-live=\"job:home\"") && page.contains("<progress"), "{page}");

    // The event stream carries it.
    let mut lines = std::io::BufReader::new(events).lines();
    let live = loop {
        let line = lines.next().expect("the stream ended").unwrap();
        if let Some(d) = line.strip_prefix("data: ") {
            let v: serde_json::Value = serde_json::from_str(d).unwrap();
            if let Some(i) = v["live"]
                .as_array()
                .unwrap()
                .iter()
                .find(|i| i["key"] == "job:home" && i["figures"]["bytes_done"].as_u64() > Some(0))
            {
                break i.clone();
            }
        }
        assert!(Instant::now() < deadline, "no event for the job");
    };
    assert!(live["text"].as_str().unwrap().contains("MiB"), "{live}");
    assert_eq!(live["page"], "/");
    // Once it ends, no figures are left behind.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let v = ui.json(&s, "/api/v1/jobs");
        let k = v["jobs"].as_array().unwrap().iter().find(|k| k["job"] == "home" && k["kind"] == "backup").cloned();
        let k = k.unwrap();
        if k["running"].is_null() && !k["last"].is_null() {
            assert!(k["progress"].is_null(), "{k}");
            assert_eq!(k["last"]["outcome"], "success", "{k}");
            break;
        }
        assert!(Instant::now() < deadline, "the run did not end: {v}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn directories_download_as_tar_and_zip() {
    use std::io::Read;
    let (env, src, id) = repository();
    let ui = serve(env.cmd(), &env.path("state"), &["--no-jobs"]);
    let s = ui.login(&ui.token()).unwrap();
    let base = format!("/api/v1/repos/default/snapshots/{id}/archive?path={}", rel(&src));

    // tar: every entry, names exact (one is not UTF-8), contents whole.
    let r = ui.get(Some(&s), &format!("{base}&format=tar"));
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["content-type"], "application/x-tar");
    assert!(r.headers()["content-disposition"].to_str().unwrap().starts_with("attachment; filename=\"src.tar\""));
    let body = r.bytes().unwrap();
    let mut tar = tar::Archive::new(&body[..]);
    let mut files = 0;
    for e in tar.entries().unwrap() {
        let mut e = e.unwrap();
        let name = e.path().unwrap().into_owned();
        let inside =
            name.strip_prefix(rel(&src)).unwrap_or_else(|_| panic!("{} is outside the directory", name.display()));
        if e.header().entry_type().is_file() {
            let mut got = Vec::new();
            e.read_to_end(&mut got).unwrap();
            assert!(got == std::fs::read(src.join(inside)).unwrap(), "{} differs", name.display());
            files += 1;
        }
    }
    assert_eq!(files, 2500 + 3, "every file is in the tar");

    // zip of a subdirectory: its files, each readable and the same.
    let r = ui.get(Some(&s), &format!("{base}/many&format=zip"));
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["content-type"], "application/zip");
    assert!(r.headers()["content-disposition"].to_str().unwrap().starts_with("attachment; filename=\"many.zip\""));
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(r.bytes().unwrap())).unwrap();
    let mut files = 0;
    for i in 0..zip.len() {
        let mut f = zip.by_index(i).unwrap();
        if f.is_file() {
            let name = f.name().unwrap().to_string();
            let mut got = String::new();
            f.read_to_string(&mut got).unwrap();
            let n: usize = name.rsplit('f').next().unwrap().parse().unwrap();
            assert_eq!(got, n.to_string(), "{name}");
            files += 1;
        }
    }
    assert_eq!(files, 2500);

    // The snapshot's root is named after its host and snapshot; the page links to both formats.
    let r = ui.get(Some(&s), &format!("/api/v1/repos/default/snapshots/{id}/archive"));
    let d = r.headers()["content-disposition"].to_str().unwrap().to_string();
    assert!(d.contains(&format!("-{}.tar\"", &id[..8])), "{d}");
    let page = ui.get(Some(&s), &format!("/repos/default/snapshots/{id}?path={}", rel(&src))).text().unwrap();
    assert!(page.contains("/archive?path=") && page.contains("format=zip"), "{page}");

    // Climbing out, a file, an unknown format: refused before any byte.
    for bad in ["..", "a/../..", "/etc", "%2Fetc"] {
        let r = ui.get(Some(&s), &format!("/repos/default/snapshots/{id}/archive?path={bad}"));
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{bad}");
    }
    let r = ui.get(Some(&s), &format!("{base}/big.bin&format=tar"));
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert_eq!(ui.get(Some(&s), &format!("{base}&format=rar")).status(), StatusCode::BAD_REQUEST);
    assert_eq!(ui.get(Some(&s), &format!("{base}/nothing")).status(), StatusCode::NOT_FOUND);
}

#[test]
fn a_download_cut_by_damage_is_seen_as_incomplete() {
    // Two files, backed up one after the other: the second's content is in packs of its own.
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("a.bin"), random_bytes(3 << 20, 2)).unwrap();
    env.backup(&[&src]);
    let before = files_under(&env.repo().join("data"));
    std::fs::write(src.join("z.bin"), random_bytes(3 << 20, 3)).unwrap();
    let id = env.backup(&[&src]);
    let new: Vec<PathBuf> = files_under(&env.repo().join("data")).into_iter().filter(|p| !before.contains(p)).collect();
    let pack = new.iter().max_by_key(|p| std::fs::metadata(p).unwrap().len()).expect("a new data pack");
    let mut b = std::fs::read(pack).unwrap();
    let mid = b.len() / 2;
    b[mid] ^= 0x20;
    std::fs::write(pack, b).unwrap();

    let ui = serve(env.cmd(), &env.path("state"), &["--no-jobs"]);
    let s = ui.login(&ui.token()).unwrap();
    // a.bin is whole; the archive of both starts, then breaks off at z.bin.
    let a = ui.get(Some(&s), &format!("/api/v1/repos/default/snapshots/{id}/content?path={}/a.bin", rel(&src)));
    assert!(a.bytes().unwrap() == std::fs::read(src.join("a.bin")).unwrap());
    let r = ui.get(Some(&s), &format!("/api/v1/repos/default/snapshots/{id}/archive?path={}", rel(&src)));
    assert_eq!(r.status(), StatusCode::OK, "the archive's start is readable");
    assert!(r.bytes().is_err(), "the damaged archive's body ends in an error, not a short archive");
    // z.bin alone: its damage is found before the first byte, or cuts the download short.
    let r = ui.get(Some(&s), &format!("/api/v1/repos/default/snapshots/{id}/content?path={}/z.bin", rel(&src)));
    if r.status() == StatusCode::OK {
        assert!(r.bytes().is_err(), "a short file is not taken for whole");
    } else {
        assert_eq!(r.status(), StatusCode::BAD_GATEWAY);
        assert!(r.text().unwrap().contains("pack"), "the error names the pack");
    }
}

#[test]
fn files_preview_as_text_or_images_and_nothing_runs() {
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("notes.txt"), "line one\n<script>alert(1)</script>\ncafé\n").unwrap();
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    png.extend_from_slice(&random_bytes(3000, 4));
    std::fs::write(src.join("photo.png"), &png).unwrap();
    std::fs::write(
        src.join("drawing.svg"),
        "<svg xmlns=\"http://www.w3.org/2000/svg\"><script>alert(1)</script></svg>",
    )
    .unwrap();
    std::fs::write(src.join("page.html"), "<html><script>alert(1)</script></html>").unwrap();
    std::fs::write(src.join("program"), b"\x7fELF\x02\x01\x01\0\0\0").unwrap();
    std::fs::write(src.join("long.txt"), "x".repeat(300 << 10)).unwrap();
    let id = env.backup(&[&src]);
    let ui = serve(env.cmd(), &env.path("state"), &["--no-jobs"]);
    let s = ui.login(&ui.token()).unwrap();
    let api =
        |name: &str| ui.json(&s, &format!("/api/v1/repos/default/snapshots/{id}/preview?path={}/{name}", rel(&src)));

    let t = api("notes.txt");
    assert_eq!((t["kind"].as_str(), t["truncated"].as_bool()), (Some("text"), Some(false)), "{t}");
    assert_eq!(t["text"], "line one\n<script>alert(1)</script>\ncafé\n");
    let page = ui
        .get(Some(&s), &format!("/repos/default/snapshots/{id}/preview?path={}/notes.txt", rel(&src)))
        .text()
        .unwrap();
    assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;") && !page.contains("<script>alert"), "{page}");
    let long = api("long.txt");
    assert_eq!((long["truncated"].as_bool(), long["text"].as_str().unwrap().len()), (Some(true), 256 << 10));
    assert_eq!(api("program")["kind"], "binary");
    // SVG and HTML are text to be read, never documents or images the browser runs.
    assert_eq!(api("drawing.svg")["kind"], "text");
    assert_eq!(api("page.html")["kind"], "text");
    for name in ["drawing.svg", "page.html", "notes.txt"] {
        let r = ui.get(Some(&s), &format!("/repos/default/snapshots/{id}/image?path={}/{name}", rel(&src)));
        assert_eq!(r.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE, "{name}");
    }

    // An image is shown by its bytes, inline, under its own type.
    let p = api("photo.png");
    assert_eq!((p["kind"].as_str(), p["media_type"].as_str()), (Some("image"), Some("image/png")), "{p}");
    let page = ui
        .get(Some(&s), &format!("/repos/default/snapshots/{id}/preview?path={}/photo.png", rel(&src)))
        .text()
        .unwrap();
    assert!(page.contains("/image?path=") && page.contains("alt=\"Image photo.png\""), "{page}");
    let r = ui.get(Some(&s), &format!("/repos/default/snapshots/{id}/image?path={}/photo.png", rel(&src)));
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["content-type"], "image/png");
    assert_eq!(r.headers()["content-disposition"], "inline");
    assert_eq!(r.headers()["x-content-type-options"], "nosniff");
    assert!(r.bytes().unwrap() == png);

    // The listing links each file to its preview; bad paths are refused.
    let page = ui.get(Some(&s), &format!("/repos/default/snapshots/{id}?path={}", rel(&src))).text().unwrap();
    assert!(page.contains(&format!("/preview?path={}/notes.txt", rel(&src))), "{page}");
    for bad in ["..", "/etc/passwd", "a/../b"] {
        let r = ui.get(Some(&s), &format!("/api/v1/repos/default/snapshots/{id}/preview?path={bad}"));
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{bad}");
    }
    let r = ui.get(Some(&s), &format!("/api/v1/repos/default/snapshots/{id}/preview?path={}", rel(&src)));
    assert_eq!(r.status(), StatusCode::BAD_REQUEST, "a directory has no preview");
}

#[test]
fn snapshots_are_forgotten_after_a_dry_run_by_choice_or_by_the_jobs_policy() {
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    let mut ids = Vec::new();
    for i in 0..5 {
        std::fs::write(src.join("a"), format!("version {i}")).unwrap();
        ids.push(env.backup(&[&src]));
    }
    let cmd = with_home_job(&env, &src);
    let mut jobs = std::fs::read_to_string(env.path("jobs.toml")).unwrap();
    jobs.push_str("forget = { keep-last = 2 }\n");
    std::fs::write(env.path("jobs.toml"), jobs).unwrap();
    let ui = serve(cmd, &env.path("state"), &[]);
    let s = ui.login(&ui.token()).unwrap();
    let count = || ui.json(&s, "/api/v1/repos/default/snapshots")["snapshots"].as_array().unwrap().len();

    // One chosen: the API's dry run (the default) forgets nothing.
    let api = "/api/v1/repos/default/forget";
    let v: serde_json::Value = ui.post(&s, api, Some(&s.csrf), json!({"snapshots": [ids[0]]})).json().unwrap();
    assert_eq!((v["dry_run"].as_bool(), v["kept"].as_u64()), (Some(true), Some(4)), "{v}");
    assert_eq!(v["forgotten"], json!([ids[0]]));
    assert!(v["tombstone"].is_null());
    assert_eq!(count(), 5);
    // The page shows it and asks; without the CSRF token the post is refused.
    let page = ui.get(Some(&s), &format!("/repos/default/forget?snapshots={}", ids[0])).text().unwrap();
    assert!(page.contains("Forget 1 snapshot") && page.contains(&ids[0]), "{page}");
    let post = |fields: &[(&str, &str)]| {
        ui.client.post(ui.url("/repos/default/forget")).header("cookie", &s.cookie).form(fields).send().unwrap()
    };
    assert_eq!(post(&[("snapshots", &ids[0])]).status(), StatusCode::FORBIDDEN);
    assert_eq!(count(), 5);
    let r = post(&[("csrf", &s.csrf), ("snapshots", &ids[0])]);
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.text().unwrap().contains("Forgot 1 snapshot"));
    assert_eq!(count(), 4);
    // Confirming again finds it gone, and forgets nothing else.
    assert_eq!(post(&[("csrf", &s.csrf), ("snapshots", &ids[0])]).status(), StatusCode::NOT_FOUND);
    assert_eq!(post(&[("csrf", &s.csrf), ("snapshots", "nonsense")]).status(), StatusCode::BAD_REQUEST);

    // The job's policy (keep the last 2): its decisions first, then exactly those forgotten.
    let snaps_page = ui.get(Some(&s), "/repos/default").text().unwrap();
    assert!(snaps_page.contains("/repos/default/forget?policy=1"), "{snaps_page}");
    let page = ui.get(Some(&s), "/repos/default/forget?policy=1").text().unwrap();
    assert_eq!(page.matches(">keep</td><td>last</td>").count(), 2, "{page}");
    assert_eq!(page.matches(">forget</td>").count(), 2, "{page}");
    assert!(page.contains("Forget 2 snapshots"), "{page}");
    let v: serde_json::Value = ui.post(&s, api, Some(&s.csrf), json!({"policy": true})).json().unwrap();
    assert_eq!(v["forgotten"], json!([ids[1], ids[2]]), "{v}");
    assert_eq!(v["policy"]["job"], "home");
    assert_eq!(v["policy"]["decisions"].as_array().unwrap().len(), 4);
    // A snapshot stored after the dry run is not forgotten by its confirmation.
    std::fs::write(src.join("a"), "version 5").unwrap();
    let newest = env.backup(&[&src]);
    let r = post(&[("csrf", &s.csrf), ("snapshots", &format!("{},{}", ids[1], ids[2]))]);
    assert_eq!(r.status(), StatusCode::OK);
    let left: Vec<String> = ui.json(&s, "/api/v1/repos/default/snapshots")["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(left.len(), 3, "{left:?}");
    for id in [&ids[3], &ids[4], &newest] {
        assert!(left.contains(id), "{id} is kept: {left:?}");
    }
    // The command line sees the tombstones: history intact, nothing missing.
    let out = env.run(&["check"]);
    assert_success(&out);
    let v = env.json(&["snapshots"]);
    assert_eq!(v.as_array().map(Vec::len).or(v["snapshots"].as_array().map(Vec::len)), Some(3), "{v}");
}

#[test]
fn snapshots_are_filtered_by_time_and_listed_a_page_at_a_time() {
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    let s_ = src.to_str().unwrap();
    // Five backups a day apart, oldest first, on two hosts.
    let ids: Vec<String> = (1..=5)
        .map(|d| {
            std::fs::write(src.join("a"), format!("day {d}")).unwrap();
            let (time, host) = (format!("2026-01-0{d}T10:00:00Z"), if d % 2 == 0 { "even" } else { "odd" });
            env.json(&["backup", s_, "--time", &time, "--host", host])["snapshot_id"].as_str().unwrap().to_string()
        })
        .collect();
    let ui = serve(env.cmd(), &env.path("state"), &[]);
    let s = ui.login(&ui.token()).unwrap();
    let listed = |q: &str| -> Vec<String> {
        let v = ui.json(&s, &format!("/api/v1/repos/default/snapshots?{q}"));
        v["snapshots"].as_array().unwrap().iter().map(|x| x["id"].as_str().unwrap().to_string()).collect()
    };
    // A day is the whole day in UTC, at either end; a time is taken as given, inclusive.
    assert_eq!(listed("since=2026-01-02&until=2026-01-03"), ids[1..3]);
    assert_eq!(listed("until=2026-01-02T10:00:00Z"), ids[..2]);
    assert_eq!(listed("until=2026-01-02T09:59:59Z"), ids[..1]);
    assert_eq!(listed("since=2026-01-04T11:00:00%2B01:00"), ids[3..]);
    assert_eq!(listed("since=2026-01-02&host=odd"), vec![ids[2].clone(), ids[4].clone()]);
    assert!(listed("since=2026-02-01").is_empty());
    // A bound that does not read is refused, naming it.
    let r = ui.get(Some(&s), "/api/v1/repos/default/snapshots?since=yesterday");
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let text = r.text().unwrap();
    assert!(text.contains("since=") && text.contains("yesterday") && text.contains("RFC 3339"), "{text}");
    assert_eq!(ui.get(Some(&s), "/repos/default?until=2026-13-01").status(), StatusCode::BAD_REQUEST);
    // The API pages too, oldest first, and says how many match.
    let v = ui.json(&s, "/api/v1/repos/default/snapshots?offset=1&limit=2");
    assert_eq!(v["total"], 5);
    assert_eq!(
        v["snapshots"].as_array().unwrap().iter().map(|x| x["id"].as_str().unwrap()).collect::<Vec<_>>(),
        ids[1..3]
    );

    // The page lists newest first, a page at a time, its links keeping the filter.
    let page = |q: &str| ui.get(Some(&s), &format!("/repos/default?{q}")).text().unwrap();
    let p1 = page("limit=2");
    assert!(p1.contains("snapshots 1 to 2 of 5, newest first"), "{p1}");
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(p1.contains(&format!("/repos/default/snapshots/{id}")), i >= 3, "snapshot {i} on the first page");
    }
    assert!(p1.contains("href=\"/repos/default?offset=2&amp;limit=2\">Older</a>"), "{p1}");
    assert!(!p1.contains(">Newer</a>"));
    let p3 = page("offset=4&limit=2");
    assert!(p3.contains("snapshots 5 to 5 of 5") && p3.contains(&ids[0]) && !p3.contains(&ids[1]), "{p3}");
    assert!(
        p3.contains("href=\"/repos/default?offset=2&amp;limit=2\">Newer</a>") && !p3.contains(">Older</a>"),
        "{p3}"
    );
    let filtered = page("since=2026-01-02&limit=1");
    assert!(filtered.contains("snapshots 1 to 1 of 4"), "{filtered}");
    assert!(
        filtered.contains("href=\"/repos/default?since=2026-01-02&amp;offset=1&amp;limit=1\">Older</a>"),
        "{filtered}"
    );
    assert!(filtered.contains("value=\"2026-01-02\""), "the form shows the bound: {filtered}");
    // Without paging asked for, five fit on one page, with no links.
    let all = page("");
    assert!(all.contains("5 snapshots, newest first") && !all.contains("pages of snapshots"), "{all}");
    assert_eq!(ui.get(Some(&s), "/repos/default?limit=0").status(), StatusCode::BAD_REQUEST);
    assert_eq!(ui.get(Some(&s), "/repos/default?limit=100000").status(), StatusCode::BAD_REQUEST);
}

#[test]
fn the_health_page_shows_checks_run_from_it_and_the_last_bench_report() {
    let env = Env::new();
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("a"), random_bytes(100_000, 5)).unwrap();
    env.backup(&[&src]);
    let cmd = with_home_job(&env, &src);
    let ui = serve(cmd, &env.path("state"), &[]);
    let s = ui.login(&ui.token()).unwrap();
    let h = ui.json(&s, "/api/v1/repos/default/health");
    assert_eq!((h["jobs"].clone(), h["last_check"].is_null(), h["bench"].is_null()), (json!(["home"]), true, true));
    let page = ui.get(Some(&s), "/repos/default/health").text().unwrap();
    assert!(page.contains("Never checked") && page.contains("Check now") && page.contains("Prune now"), "{page}");

    // A check now, though the job schedules none: it runs as the agent's run and is the last check.
    let r = ui.post(&s, "/api/v1/jobs/home/run", Some(&s.csrf), json!({"kind": "check"}));
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    let deadline = Instant::now() + Duration::from_secs(60);
    let h = loop {
        let h = ui.json(&s, "/api/v1/repos/default/health");
        if !h["last_check"].is_null() {
            break h;
        }
        assert!(Instant::now() < deadline, "the check did not end: {h}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(h["last_check"]["outcome"], "success", "{h}");
    assert_eq!(h["checks"][0]["kind"], "check");
    assert!(h["last_check"]["age_seconds"].as_i64().is_some_and(|a| (0..60).contains(&a)), "{h}");
    let repos = ui.json(&s, "/api/v1/repos");
    let dash = ui.get(Some(&s), "/").text().unwrap();
    assert!(dash.contains("/repos/default/health") && dash.contains(">success</span>"), "{dash}\n{repos}");

    // A bench run keeps its report, which the page then shows.
    let out = env
        .cmd()
        .env("XDG_STATE_HOME", env.path("state"))
        .args(["bench", "--quick", "--kdf-log-n", "10", "--generated-size", "1M"])
        .output()
        .unwrap();
    assert_success(&out);
    let h = ui.json(&s, "/api/v1/repos/default/health");
    assert!(h["bench"]["stages"].as_array().is_some_and(|a| !a.is_empty()), "{h}");
    let page = ui.get(Some(&s), "/repos/default/health").text().unwrap();
    assert!(page.contains("Each stage alone") && page.contains("chunker"), "{page}");
    // A damaged report is said to be one, not shown.
    std::fs::write(env.path("state/coffer/bench/last.json"), b"{\"machine\": 3").unwrap();
    let h = ui.json(&s, "/api/v1/repos/default/health");
    assert!(h["bench"]["error"].as_str().is_some_and(|e| e.contains("not a bench report")), "{h}");
}

#[test]
fn the_health_page_names_packs_short_of_copies_over_several_backends() {
    let r = common::replicas::Replicas::new(2, &["b0:1G", "b1:1G", "b2:1G"]);
    let src = r.env.path("src");
    common::replicas::make_tree(&src, 3);
    for i in 0..8u64 {
        std::fs::write(src.join(format!("more{i}")), random_bytes(1 << 20, 300 + i)).unwrap();
    }
    common::replicas::backup(&r, "b0", &src, &[]);
    // The UI finds the backends where the command line left their locations.
    let ui = serve(r.at("b0"), &r.env.path("home/.local/state"), &[]);
    let s = ui.login(&ui.token()).unwrap();
    let h = ui.json(&s, "/api/v1/repos/default/health");
    let rep = &h["replicas"];
    assert_eq!(
        (rep["ok"].clone(), rep["replicas"].clone(), rep["can_lose"].clone()),
        (json!(true), json!(2), json!(1))
    );
    let names: Vec<&str> = rep["backends"].as_array().unwrap().iter().map(|b| b["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["b0", "b1", "b2"]);
    let listed: u64 = rep["backends"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["packs"].as_u64().unwrap_or_else(|| panic!("{rep}")))
        .sum();
    assert_eq!(listed, 2 * rep["packs"].as_u64().unwrap(), "two copies of every indexed pack: {rep}");
    let page = ui.get(Some(&s), "/repos/default/health").text().unwrap();
    assert!(page.contains("every pack has its 2 copies"), "{page}");

    // One copy of one pack is lost: that pack is named, with the backend lacking it.
    let lost = r.objects("b1", "data").into_iter().next().expect("b1 holds a pack");
    let pack = lost.file_name().unwrap().to_string_lossy().into_owned();
    std::fs::remove_file(&lost).unwrap();
    let h = ui.json(&s, "/api/v1/repos/default/health");
    let rep = &h["replicas"];
    assert_eq!(
        (rep["ok"].clone(), rep["under_count"].clone(), rep["can_lose"].clone()),
        (json!(false), json!(1), json!(0))
    );
    assert_eq!(rep["under"][0], json!({"pack": pack, "copies": 1, "lacking": ["b1"]}), "{rep}");
    let page = ui.get(Some(&s), "/repos/default/health").text().unwrap();
    assert!(
        page.contains("1 under-replicated") && page.contains(&pack) && page.contains("repair --replicas"),
        "{page}"
    );

    // Repaired from the command line, the page sees it whole again.
    assert_success(&r.run("b2", &["-q", "repair", "--replicas"]));
    let h = ui.json(&s, "/api/v1/repos/default/health");
    assert_eq!(h["replicas"]["ok"], true, "{h}");
    drop(ui);

    // Where the UI does not know where the backends are, it says so and calls nothing whole.
    let ui = serve(r.at("b0"), &r.env.path("elsewhere"), &[]);
    let s = ui.login(&ui.token()).unwrap();
    let rep = ui.json(&s, "/api/v1/repos/default/health")["replicas"].clone();
    assert_eq!(rep["ok"], false, "{rep}");
    assert!(rep["backends"][1]["error"].as_str().is_some_and(|e| e.contains("COFFER_BACKEND_B1")), "{rep}");
    drop(ui);
    // A repository over one backend has no such section.
    let (env, _, _) = (Env::new(), (), ());
    let ui = serve(env.cmd(), &env.path("state"), &[]);
    let s = ui.login(&ui.token()).unwrap();
    assert!(ui.json(&s, "/api/v1/repos/default/health")["replicas"].is_null());
}
