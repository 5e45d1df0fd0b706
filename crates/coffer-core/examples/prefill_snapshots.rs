//! Adds `N` snapshots to a repository in one process, each a copy of its newest
//! snapshot under another host and a later time, so that a history of that length
//! can be measured (the UI's memory and pages) without `N` backups, each of which
//! reads the whole history first:
//! `COFFER_PASSWORD=... cargo run --release -p coffer-core --example prefill_snapshots -- REPO N [HOSTS]`.
//!
//! The copies are signed by a writer registered for the purpose, each names the
//! previous one as its history head and the last one of its host as its parent,
//! and their times rise 50 ms apart from the template's: the history verifies as
//! a backup's would. Hosts are `host0` … `host{HOSTS-1}` (default 4).

use std::sync::Arc;
use std::time::Duration;

use coffer_backend::OpendalBackend;
use coffer_core::crypto::sign::SigningKey;
use coffer_core::id::Id;
use coffer_core::repo::Repository;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (repo, n, hosts) = match args.as_slice() {
        [_, repo, n] => (repo, n, "4"),
        [_, repo, n, hosts] => (repo, n, hosts.as_str()),
        _ => return Err("usage: prefill_snapshots REPO N [HOSTS]".into()),
    };
    let n: usize = n.replace('_', "").parse()?;
    let hosts: usize = hosts.parse()?;
    if hosts == 0 {
        return Err("HOSTS must be at least 1".into());
    }
    let password = std::env::var("COFFER_PASSWORD").map_err(|_| "set COFFER_PASSWORD")?;
    let repo = Repository::open(Arc::new(OpendalBackend::local(std::path::Path::new(repo))?), password.as_bytes())?;
    let (snapshots, _damaged) = repo.snapshots()?;
    let (template_id, template) = snapshots.last().ok_or("the repository holds no snapshot to copy")?.clone();
    let key = SigningKey::generate();
    repo.register_writer(&key.public(), "prefill".into(), "prefill".into())?;
    let start = template.system_time();
    let mut head: Id = template_id;
    let mut last_of_host: Vec<Option<Id>> = vec![None; hosts];
    for i in 0..n {
        let mut s = template.clone();
        let host = i % hosts;
        s.hostname = format!("host{host}");
        s.time = humantime::format_rfc3339_nanos(start + Duration::from_millis(50 * (i as u64 + 1))).to_string();
        s.written = None;
        s.parent = last_of_host[host];
        s.history = vec![head];
        s.writer = key.public();
        head = repo.save_snapshot(&s, &key)?;
        last_of_host[host] = Some(head);
    }
    println!("{n} snapshots added over {hosts} hosts");
    Ok(())
}
