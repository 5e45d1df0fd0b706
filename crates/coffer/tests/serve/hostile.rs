//! Hostile clients against `coffer serve`: objects an `append` or `prune` key
//! could plant, uploads that hold descriptors, memory or connections, races
//! on quotas and the trash, and replays. Every case goes through the real
//! server and its real storage.

use super::*;

/// Bytes shaped like a sealed object: coffer's envelope header with the kind
/// byte `kind`, the cipher byte `cipher` and epoch 0, then `len - 11` bytes of
/// noise (no key seals them).
fn sealed_like(kind: u8, cipher: u8, len: usize, seed: u64) -> Vec<u8> {
    let mut b = coffer_core::format::envelope::MAGIC.to_vec();
    b.extend_from_slice(&[coffer_core::format::envelope::VERSION, kind, cipher, 0, 0]);
    b.extend_from_slice(&random_bytes(len - b.len(), seed));
    b
}

/// The name of `body` under `prefix` (`prune/`, `index/`, …).
fn named(prefix: &str, body: &[u8]) -> String {
    format!("{prefix}{}", blake3_hex(body))
}

#[test]
fn the_server_refuses_planted_objects_of_every_kind() {
    let env = Env::new();
    let (srv, append, src) = served_backup(&env, start(&env, &[]));
    let pruner = add_key(&env, &srv, "pruner", "prune");
    let admin = add_key(&env, &srv, "admin", "admin");
    let before = repo_state(&env);
    let refused = |key: &(String, String), name: &str, body: Vec<u8>, why: &str| {
        let e = raw(&srv, key).write(name, body).expect_err(name);
        assert!(e.to_string().contains(why), "{name}: expected {why:?} in: {e}");
    };
    // A prune notice: from an append key, refused whatever its bytes; from a
    // prune key, refused unless its envelope holds up.
    let notice = sealed_like(7, 1, 200, 1);
    refused(&append, &named("prune/", &notice), notice.clone(), "prune or admin");
    let garbage = sealed_like(7, 0xee, 200, 2);
    refused(&pruner, &named("prune/", &garbage), garbage, "cipher byte 238");
    let empty = sealed_like(7, 1, 59, 3);
    refused(&pruner, &named("prune/", &empty), empty, "shorter");
    // Index files, writer records, session markers: the envelope is checked.
    for (prefix, kind) in [("index/", 2u8), ("writers/", 4)] {
        let bad = sealed_like(kind, 9, 300, 4);
        refused(&append, &named(prefix, &bad), bad, "cipher byte 9");
        let short = sealed_like(kind, 1, 40, 5);
        refused(&append, &named(prefix, &short), short, "shorter");
    }
    let marker = sealed_like(6, 0, 100, 6);
    refused(&append, &format!("sessions/{}", "ab".repeat(32)), marker, "cipher byte 0");
    // Key files: plaintext JSON, decoded as coffer decodes them.
    let (_, key_file) = first_object(&env, "keys");
    let mut v: serde_json::Value = serde_json::from_slice(&key_file).unwrap();
    refused(&append, &named("keys/", b"{\"version\": 2}"), b"{\"version\": 2}".to_vec(), "not a coffer key file");
    let log_n = v["scrypt"]["log_n"].clone();
    v["scrypt"]["log_n"] = 30.into();
    let costly = serde_json::to_vec_pretty(&v).unwrap();
    refused(&append, &named("keys/", &costly), costly, "scrypt");
    v["scrypt"]["log_n"] = log_n;
    let data = v["data"].as_str().unwrap().to_string();
    v["data"] = data[..data.len() - 2].into();
    let cut = serde_json::to_vec_pretty(&v).unwrap();
    refused(&append, &named("keys/", &cut), cut, "wrapped keys");
    // Layouts: only an admin stores one, and only signed by an allowed writer.
    let layout = sealed_like(8, 1, 300, 7);
    refused(&append, &named("layout/", &layout), layout.clone(), "admin");
    refused(&admin, &named("layout/", &layout), layout, "unsigned");
    assert_eq!(repo_state(&env), before, "nothing refused was stored");

    // Real objects still pass: a new backup, and a check of everything.
    std::fs::write(src.join("more"), random_bytes(50_000, 8)).unwrap();
    assert_success(&client(&env, &srv, &append).args(["-q", "backup", src.to_str().unwrap()]).output().unwrap());
    assert_success(&client(&env, &srv, &append).args(["-q", "check"]).output().unwrap());
}

/// Descriptors the process `pid` has open.
fn open_descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count()
}

/// The highest resident memory of the process `pid` so far, in bytes.
fn peak_memory(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

/// The `<UploadId>` of a CreateMultipartUpload answer.
fn upload_id(resp: &str) -> String {
    let start = resp.find("<UploadId>").expect("an upload id") + "<UploadId>".len();
    resp[start..start + resp[start..].find('<').unwrap()].to_string()
}

#[test]
fn multipart_parts_hold_no_descriptors_and_unfinished_uploads_expire() {
    let env = Env::new();
    let srv = start(&env, &["--insecure-http", "--upload-expiry", "3"]);
    let append = add_key(&env, &srv, "laptop", "append");
    let pid = srv.child.id();
    let pack = format!("/coffer/data/ab/ab{}", "0".repeat(62));
    let (status, resp) = raw_request(&srv, &append, "POST", &format!("{pack}?uploads"), 0, b"");
    assert_eq!(status, 200, "{resp}");
    let id = upload_id(&resp);
    let before = open_descriptors(pid);
    for n in 1..=300 {
        let (status, resp) =
            raw_request(&srv, &append, "PUT", &format!("{pack}?partNumber={n}&uploadId={id}"), 1, b"x");
        assert_eq!(status, 200, "part {n}: {resp}");
    }
    let after = open_descriptors(pid);
    assert!(after < before + 10, "300 one-byte parts took {} descriptors", after - before);

    // An index file's upload holds at most 65 parts (64 MiB in 1 MiB parts).
    let index = format!("/coffer/index/{}", "cd".repeat(32));
    let (_, resp) = raw_request(&srv, &append, "POST", &format!("{index}?uploads"), 0, b"");
    let index_id = upload_id(&resp);
    for n in 1..=65 {
        let (status, resp) =
            raw_request(&srv, &append, "PUT", &format!("{index}?partNumber={n}&uploadId={index_id}"), 1, b"x");
        assert_eq!(status, 200, "part {n}: {resp}");
    }
    let (status, resp) =
        raw_request(&srv, &append, "PUT", &format!("{index}?partNumber=66&uploadId={index_id}"), 1, b"x");
    assert_eq!(status, 400, "{resp}");
    assert!(resp.contains("at most 65 parts"), "{resp}");

    // Left untouched past the expiry, both are dropped with their spool files.
    let spool = srv.state.join("spool");
    assert!(std::fs::read_dir(&spool).unwrap().count() >= 2);
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(std::fs::read_dir(&spool).unwrap().count(), 0, "spool files left");
    let (status, resp) = raw_request(&srv, &append, "PUT", &format!("{pack}?partNumber=301&uploadId={id}"), 1, b"x");
    assert_eq!(status, 404, "{resp}");
    assert!(resp.contains("expired"), "{resp}");
}

#[test]
fn sealed_uploads_are_not_read_whole_into_memory() {
    let env = Env::new();
    let srv = start(&env, &[]);
    let append = add_key(&env, &srv, "laptop", "append");
    let pid = srv.child.id();
    // Warm the server up with one upload, then measure twelve at once.
    let be = raw(&srv, &append);
    let warm = sealed_like(2, 1, 1 << 20, 99);
    be.write(&named("index/", &warm), warm).unwrap();
    let base = peak_memory(pid);
    let bodies: Vec<Vec<u8>> = (0..12).map(|i| sealed_like(2, 1, 15 << 20, 100 + i)).collect();
    std::thread::scope(|s| {
        for body in &bodies {
            let be = raw(&srv, &append);
            s.spawn(move || be.write(&named("index/", body), body.clone()).unwrap());
        }
    });
    let grew = peak_memory(pid).saturating_sub(base);
    assert_eq!(files_under(&env.repo().join("index")).len(), 1 + 12);
    assert!(grew < 100 << 20, "twelve 15 MiB index files took the server {} MiB more", grew >> 20);
}

#[test]
fn a_body_that_trickles_is_cut_off() {
    let env = Env::new();
    let srv = start(&env, &["--insecure-http", "--request-timeout", "2"]);
    let append = add_key(&env, &srv, "laptop", "append");
    let head = signed_head(&srv, &append, "PUT", &format!("/coffer/data/ab/ab{}", "1".repeat(62)), 1000);
    let mut s = std::net::TcpStream::connect(&srv.addr).unwrap();
    s.write_all(head.as_bytes()).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    let t = std::time::Instant::now();
    let mut answer = Vec::new();
    // A byte every half second: each within the timeout, far below the rate.
    while t.elapsed() < Duration::from_secs(12) {
        if s.write_all(b"x").is_err() {
            break;
        }
        let mut buf = [0u8; 4096];
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                answer.extend_from_slice(&buf[..n]);
                break;
            }
            Err(_) => {}
        }
    }
    let took = t.elapsed();
    assert!(took < Duration::from_secs(6), "the trickling body was served for {took:?}");
    let answer = text(&answer);
    assert!(answer.is_empty() || answer.contains("slower than"), "{answer}");
}

#[test]
fn idle_connections_of_one_peer_are_bounded() {
    let env = Env::new();
    let srv = start(&env, &["--max-pending-per-peer", "4"]);
    let append = add_key(&env, &srv, "laptop", "append");
    let idle: Vec<std::net::TcpStream> = (0..4).map(|_| std::net::TcpStream::connect(&srv.addr).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(300));
    // A fifth connection that has not authenticated is closed at once.
    let mut fifth = std::net::TcpStream::connect(&srv.addr).unwrap();
    fifth.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let t = std::time::Instant::now();
    let mut buf = [0u8; 16];
    let n = fifth.read(&mut buf).unwrap_or(usize::MAX);
    assert!(n == 0 && t.elapsed() < Duration::from_secs(2), "read {n} after {:?}", t.elapsed());
    // Once they go, clients are served.
    drop(idle);
    std::thread::sleep(Duration::from_millis(300));
    assert_success(&client(&env, &srv, &append).args(["snapshots"]).output().unwrap());
}

#[test]
fn concurrent_uploads_cannot_pass_a_quota_together() {
    let env = Env::new();
    let srv = start(&env, &[]);
    let out = serve_cmd(&env, &srv.state)
        .args(["--json", "key", "add", "small", "--level", "append", "--quota", "5M"])
        .output()
        .unwrap();
    assert_success(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let key = (v["id"].as_str().unwrap().to_string(), v["secret"].as_str().unwrap().to_string());
    let bodies: Vec<Vec<u8>> = (0..8).map(|i| random_bytes(3_000_000, 200 + i)).collect();
    let results: Vec<Result<(), String>> = std::thread::scope(|s| {
        let handles: Vec<_> = bodies
            .iter()
            .map(|body| {
                let be = raw(&srv, &key);
                let h = blake3_hex(body);
                s.spawn(move || be.write(&format!("data/{}/{h}", &h[..2]), body.clone()).map_err(|e| e.to_string()))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let accepted = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(accepted, 1, "{results:?}");
    assert!(results.iter().filter_map(|r| r.as_ref().err()).all(|e| e.contains("quota")), "{results:?}");
    assert_eq!(files_under(&env.repo().join("data")).len(), 1);
}

#[test]
fn a_prune_key_cannot_swap_config_or_delete_what_identifies_the_repository() {
    let env = Env::new();
    let (srv, append, _src) = served_backup(&env, start(&env, &[]));
    let pruner = add_key(&env, &srv, "pruner", "prune");
    let admin = add_key(&env, &srv, "admin", "admin");
    let original = std::fs::read(env.repo().join("config")).unwrap();
    // Config, key files, writer records and tombstones: an admin's to delete.
    let be = raw(&srv, &pruner);
    let (key_name, _) = first_object(&env, "keys");
    let (writer_name, _) = first_object(&env, "writers");
    for name in ["config", key_name.as_str(), writer_name.as_str()] {
        let e = be.delete(name).expect_err(name).to_string();
        assert!(e.contains("only by admin") && !e.contains("check the credentials"), "{name}: {e}");
    }
    assert_eq!(std::fs::read(env.repo().join("config")).unwrap(), original);

    // Deleted by an admin, the name cannot be taken with other bytes by a
    // non-admin key while the old config is in the trash.
    let admin_be = raw(&srv, &admin);
    admin_be.delete("config").unwrap();
    let mut planted = original.clone();
    *planted.last_mut().unwrap() ^= 1;
    for key in [&append, &pruner] {
        let e = raw(&srv, key).write("config", planted.clone()).expect_err("re-created").to_string();
        assert!(e.contains("deleted into the trash") && e.contains("trash restore config"), "{e}");
    }
    // The same name deleted twice in one second keeps both entries, and a
    // restore brings back the first one deleted, saying so.
    admin_be.write("config", planted.clone()).unwrap();
    // Another admin key, so that the DELETE is not the same signed request as
    // the first (which the server refuses as a replay within its window).
    let other_admin = add_key(&env, &srv, "admin2", "admin");
    raw(&srv, &other_admin).delete("config").unwrap();
    let out = serve_cmd(&env, &srv.state).args(["trash", "restore", "config"]).output().unwrap();
    assert_success(&out);
    assert!(text(&out.stdout).contains("oldest of 2 entries"), "{}", text(&out.stdout));
    assert_eq!(std::fs::read(env.repo().join("config")).unwrap(), original);
    assert_success(&client(&env, &srv, &append).args(["-q", "check"]).output().unwrap());
}

#[test]
fn session_markers_stay_their_writers_across_a_restart() {
    let env = Env::new();
    let srv = start(&env, &[]);
    let a = add_key(&env, &srv, "a", "append");
    let b = add_key(&env, &srv, "b", "append");
    let marker = format!("sessions/{}", "5e".repeat(32));
    let opening = coffer_core::format::session::OPENING.to_vec();
    raw(&srv, &a).write(&marker, opening.clone()).unwrap();
    let addr = srv.addr.clone();
    drop(srv);
    let srv = start_at(&env, &addr);
    // After the restart the marker is still a's: b can neither rewrite nor delete it.
    let sealed = sealed_like(6, 1, 200, 9);
    let e = raw(&srv, &b).write(&marker, sealed.clone()).expect_err("rewrite").to_string();
    assert!(e.contains("written by another key"), "{e}");
    let e = raw(&srv, &b).delete(&marker).expect_err("delete").to_string();
    assert!(e.contains("written by another key"), "{e}");
    assert_eq!(std::fs::read(env.repo().join(&marker)).unwrap(), opening);
    // a still can.
    raw(&srv, &a).write(&marker, sealed).unwrap();
    raw(&srv, &a).delete(&marker).unwrap();
    assert!(!env.repo().join(&marker).exists());
}

#[test]
fn a_replayed_request_is_refused() {
    let env = Env::new();
    let srv = start(&env, &["--insecure-http"]);
    let a = add_key(&env, &srv, "a", "append");
    let marker = format!("sessions/{}", "7a".repeat(32));
    let opening = coffer_core::format::session::OPENING;
    let put = signed_head(&srv, &a, "PUT", &format!("/coffer/{marker}"), opening.len() as u64);
    assert_eq!(send_raw(&srv, &put, opening).0, 200);
    let delete = signed_head(&srv, &a, "DELETE", &format!("/coffer/{marker}"), 0);
    assert_eq!(send_raw(&srv, &delete, b"").0, 204);
    // Stored again by a new request, then the captured DELETE sent again.
    raw(&srv, &a).write(&marker, opening.to_vec()).unwrap();
    let (status, resp) = send_raw(&srv, &delete, b"");
    assert_eq!(status, 403, "{resp}");
    assert!(resp.contains("RequestReplayed") && resp.contains("already received"), "{resp}");
    assert!(env.repo().join(&marker).exists(), "the replay deleted the marker");
    // A captured PUT sent again changes nothing either: with the same bytes it
    // is answered, with others refused.
    assert_eq!(send_raw(&srv, &put, opening).0, 200);
    let other = [b'y'; 30];
    let (status, resp) = send_raw(&srv, &put, &other);
    assert!(status >= 400, "{resp}");
    assert_eq!(std::fs::read(env.repo().join(&marker)).unwrap(), opening);
}

#[test]
fn the_server_logs_every_request_without_secrets() {
    let env = Env::new();
    let srv = start(&env, &[]);
    let a = add_key(&env, &srv, "a", "append");
    let read = add_key(&env, &srv, "r", "read");
    assert_success(&client(&env, &srv, &a).args(["snapshots"]).output().unwrap());
    let e = raw(&srv, &read).write(&format!("sessions/{}", "11".repeat(32)), b"x".to_vec()).expect_err("refused");
    assert!(e.to_string().contains("level is read"), "{e}");
    let out = serve_cmd(&env, &srv.state).args(["--json", "log"]).output().unwrap();
    assert_success(&out);
    let said = text(&out.stdout);
    assert!(!said.contains(&a.1) && !said.contains(&read.1) && !said.contains("Signature"), "{said}");
    let entries: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert!(entries.iter().any(|e| e["key"] == a.0.as_str() && e["method"] == "GET" && e["status"] == 200), "{said}");
    assert!(
        entries.iter().any(|e| e["key"] == read.0.as_str()
            && e["method"] == "PUT"
            && e["status"] == 403
            && e["name"].as_str().unwrap().starts_with("sessions/")),
        "{said}"
    );
}
