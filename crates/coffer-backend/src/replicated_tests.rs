//! Tests of the replicated backend: the contract suite over memory and local
//! members, placement of packs and other objects, fallbacks, the write rule and
//! migrations.

use std::sync::Arc;

use super::*;
use crate::placement::Table;
use crate::testing::run_suite;
use crate::{Faults, FaultyBackend, LocalBackend, MemBackend};

/// Four partitions over three members, two copies each.
fn table() -> Table {
    Table { partitions: 4, replicas: 2, owners: vec![0, 1, 1, 2, 2, 0, 0, 1] }
}

/// A pack name in partition `p` of [`table`] (its first byte decides: 0x00 mod 4 = 0, …).
fn pack(p: u8, n: u8) -> String {
    let mut id = [n; 32];
    id[0] = 0;
    id[1] = p;
    let h = hex::encode(id);
    format!("data/{}/{h}", &h[..2])
}

fn mems(n: usize) -> Vec<Arc<MemBackend>> {
    (0..n).map(|_| Arc::new(MemBackend::new())).collect()
}

fn replicated(members: &[Arc<MemBackend>]) -> ReplicatedBackend {
    let named =
        members.iter().enumerate().map(|(i, m)| (format!("b{i}"), Some(m.clone() as Arc<dyn Backend>))).collect();
    ReplicatedBackend::new(named, table()).unwrap()
}

#[test]
fn replicated_memory_backends_conform() {
    run_suite(|| replicated(&mems(3))).assert_passed();
}

#[test]
fn replicated_local_backends_conform() {
    let dir = tempfile::tempdir().unwrap();
    let n = std::sync::atomic::AtomicUsize::new(0);
    run_suite(|| {
        let k = n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let named = (0..3)
            .map(|i| {
                let p = dir.path().join(format!("{k}-{i}"));
                std::fs::create_dir(&p).unwrap();
                (format!("b{i}"), Some(Arc::new(LocalBackend::open(&p).unwrap()) as Arc<dyn Backend>))
            })
            .collect();
        ReplicatedBackend::new(named, table()).unwrap()
    })
    .assert_passed();
}

#[test]
fn packs_go_to_their_owners_and_everything_else_everywhere() {
    let m = mems(3);
    let r = replicated(&m);
    let p1 = pack(1, 7);
    r.write(&p1, b"pack".to_vec()).unwrap();
    r.write("index/abc", b"index".to_vec()).unwrap();
    assert!(m[0].stat(&p1).is_err(), "partition 1 is owned by b1 and b2 only");
    assert_eq!(m[1].stat(&p1).unwrap(), 4);
    assert_eq!(m[2].stat(&p1).unwrap(), 4);
    for b in &m {
        assert_eq!(b.read("index/abc").unwrap(), b"index");
    }
    assert_eq!(r.homes(&p1), vec![1, 2]);
    assert_eq!(r.list("data/").unwrap().len(), 1, "the listing is the union by name");
    r.delete(&p1).unwrap();
    assert!(m.iter().all(|b| b.stat(&p1).is_err()));
}

#[test]
fn a_file_is_written_to_every_owner() {
    let dir = tempfile::tempdir().unwrap();
    let members: Vec<Arc<LocalBackend>> = (0..3)
        .map(|i| {
            let p = dir.path().join(i.to_string());
            std::fs::create_dir(&p).unwrap();
            Arc::new(LocalBackend::open(&p).unwrap())
        })
        .collect();
    let named = members.iter().enumerate().map(|(i, m)| (format!("b{i}"), Some(m.clone() as Arc<dyn Backend>)));
    let r = ReplicatedBackend::new(named.collect(), table()).unwrap();
    // An unnamed spool file in the first member's directory, as packs are made.
    let mut f = members[0].spool_file().unwrap().unwrap();
    std::io::Write::write_all(&mut f, b"spooled pack bytes").unwrap();
    let p0 = pack(0, 3);
    r.write_file(&p0, &f, 18).unwrap();
    assert_eq!(members[0].read(&p0).unwrap(), b"spooled pack bytes");
    assert_eq!(members[1].read(&p0).unwrap(), b"spooled pack bytes");
    assert!(members[2].stat(&p0).is_err());
    let ino = |i: usize| std::fs::metadata(dir.path().join(i.to_string()).join(&p0)).unwrap().ino();
    assert_ne!(ino(0), ino(1), "two members never share one file");
}

#[test]
fn reads_fall_back_to_another_copy_and_any_copy_can_be_asked_for() {
    let m = mems(3);
    let r = replicated(&m);
    let p2 = pack(2, 9);
    r.write(&p2, b"0123456789".to_vec()).unwrap();
    m[2].delete(&p2).unwrap();
    assert_eq!(r.read(&p2).unwrap(), b"0123456789");
    assert_eq!(r.read_range(&p2, 2, 3).unwrap(), b"234");
    assert_eq!(
        r.read_ranges(&p2, &[(0, 1), (9, 5)]).into_iter().map(Result::unwrap).collect::<Vec<_>>(),
        [b"0".to_vec(), b"9".to_vec()]
    );
    // A copy that is there but damaged: the repository asks for the others.
    m[2].put_raw(&p2, b"0123XXXXXX".to_vec());
    assert_eq!(r.copies(&p2), 3, "the two owners, then the other member");
    let copies: Vec<_> = (0..3).map(|c| r.read_range_copy(&p2, 4, 2, c)).collect();
    assert!(copies.iter().any(|c| c.as_deref().ok() == Some(&b"XX"[..])));
    assert!(copies.iter().any(|c| c.as_deref().ok() == Some(&b"45"[..])));
    assert_eq!(r.read_range_copy(&p2, 0, 1, 3).unwrap_err().kind, ErrorKind::NotFound);
    assert_eq!(r.read("data/00/none").unwrap_err().kind, ErrorKind::NotFound);
}

#[test]
fn a_failing_member_is_read_last() {
    let m = mems(3);
    let failing: Arc<dyn Backend> =
        Arc::new(FaultyBackend::new(m[1].clone(), Faults { transient: 1.0, ..Faults::default() }));
    let named = vec![
        ("b0".to_string(), Some(m[0].clone() as Arc<dyn Backend>)),
        ("b1".to_string(), Some(failing)),
        ("b2".to_string(), Some(m[2].clone() as Arc<dyn Backend>)),
    ];
    let r = ReplicatedBackend::new(named, table()).unwrap();
    let p1 = pack(1, 1);
    m[1].write(&p1, b"x".to_vec()).unwrap();
    m[2].write(&p1, b"x".to_vec()).unwrap();
    for _ in 0..3 {
        assert_eq!(r.read(&p1).unwrap(), b"x");
    }
    let h = r.health();
    assert_eq!(h[1].failures, 1, "b1 failed once, then was asked last: {h:?}");
    assert_eq!(h[2].failures, 0);
    assert!(h[2].latency_us > 0);
}

#[test]
fn a_strict_write_needs_every_home_and_a_degraded_one_remembers_what_is_short() {
    let m = mems(3);
    let refusing: Arc<dyn Backend> =
        Arc::new(FaultyBackend::new(m[2].clone(), Faults { refuse_writes: true, ..Faults::default() }));
    let named = || {
        vec![
            ("b0".to_string(), Some(m[0].clone() as Arc<dyn Backend>)),
            ("b1".to_string(), Some(m[1].clone() as Arc<dyn Backend>)),
            ("b2".to_string(), Some(refusing.clone())),
        ]
    };
    let strict = ReplicatedBackend::new(named(), table()).unwrap();
    let p1 = pack(1, 4);
    let e = strict.write(&p1, b"p".to_vec()).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Permanent);
    assert!(e.message.contains("stored on 1 of 2 backends, 2 needed") && e.message.contains("backend b2"), "{e}");
    assert!(strict.write("index/x", b"i".to_vec()).is_err());
    // Partition 0 (b0, b1) does not touch b2: fine even when strict.
    strict.write(&pack(0, 4), b"p".to_vec()).unwrap();
    assert!(strict.take_short().is_empty());

    let degraded = ReplicatedBackend::new(named(), table()).unwrap().with_min_copies(1);
    degraded.write(&p1, b"p".to_vec()).unwrap();
    degraded.write("index/x", b"i".to_vec()).unwrap();
    let short = degraded.take_short();
    assert_eq!(
        short,
        vec![
            ShortCopy { object: p1.clone(), missing: vec!["b2".into()] },
            ShortCopy { object: "index/x".into(), missing: vec!["b2".into()] },
        ]
    );
    assert!(degraded.take_short().is_empty(), "taken once");
    assert_eq!(degraded.read(&p1).unwrap(), b"p");
}

#[test]
fn a_member_without_a_location_is_skipped_by_reads_and_fails_writes() {
    let m = mems(3);
    let named = vec![
        ("b0".to_string(), Some(m[0].clone() as Arc<dyn Backend>)),
        ("b1".to_string(), None),
        ("b2".to_string(), Some(m[2].clone() as Arc<dyn Backend>)),
    ];
    let r = ReplicatedBackend::new(named, table()).unwrap();
    let p1 = pack(1, 5);
    let e = r.write(&p1, b"p".to_vec()).unwrap_err();
    assert!(e.message.contains("b1 has no location configured"), "{e}");
    m[2].write(&p1, b"p".to_vec()).unwrap();
    assert_eq!(r.read(&p1).unwrap(), b"p");
    assert_eq!(r.list("data/").unwrap().len(), 1);
}

#[test]
fn during_a_migration_reads_ask_the_new_owners_then_the_old() {
    let m = mems(3);
    // Partition 1 moves from (b1, b2) to (b0, b1): b2 still holds the old copy.
    let next = Table { partitions: 4, replicas: 2, owners: vec![0, 1, 0, 1, 2, 0, 0, 1] };
    let named = m.iter().enumerate().map(|(i, b)| (format!("b{i}"), Some(b.clone() as Arc<dyn Backend>))).collect();
    let r = ReplicatedBackend::new(named, next).unwrap().with_previous(table()).unwrap();
    let p1 = pack(1, 6);
    m[2].write(&p1, b"old home".to_vec()).unwrap();
    assert_eq!(r.read(&p1).unwrap(), b"old home");
    assert_eq!(r.homes(&p1), vec![0, 1]);
    r.write(&pack(1, 8), b"new".to_vec()).unwrap();
    assert!(m[0].stat(&pack(1, 8)).is_ok() && m[2].stat(&pack(1, 8)).is_err(), "writes follow the new table");
}

#[test]
fn a_table_naming_an_unknown_member_is_refused() {
    let bad = Table { partitions: 1, replicas: 2, owners: vec![0, 5] };
    let named = vec![("b0".to_string(), None), ("b1".to_string(), None)];
    assert!(ReplicatedBackend::new(named, bad).is_err());
}
