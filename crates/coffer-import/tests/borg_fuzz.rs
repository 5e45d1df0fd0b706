//! Fuzz-style test of the parsers of borg's output: a hand-written dump holding every kind
//! of item and a `list --json` document, mutated from a seeded generator (byte edits,
//! truncations, repeated and dropped spans, numbers and strings made huge), parsed to
//! their end. Nothing may panic, every outcome is a typed result, and a counting allocator
//! bounds the peak of live heap bytes during the run.

mod support;

use coffer_import::borg::{self, DumpEvent, Error, Limits};

#[global_allocator]
static ALLOC: support::Counting = support::Counting;

impl support::Rng {
    /// A few random edits of `input`.
    fn mutate(&mut self, input: &[u8]) -> Vec<u8> {
        let mut v = input.to_vec();
        for _ in 0..1 + self.below(4) {
            let at = self.below(v.len() + 1).min(v.len());
            match self.below(8) {
                0 if at < v.len() => v[at] ^= 1 << self.below(8),
                1 if at < v.len() => {
                    let picks = b"{}[]\",:0\\u7fe-";
                    v[at] = picks[self.below(picks.len())];
                }
                2 => v.truncate(at),
                3 => {
                    // A span repeated: items, chunks or keys twice.
                    let len = self.below(200).min(v.len() - at);
                    let span = v[at..at + len].to_vec();
                    v.splice(at..at, span);
                }
                4 => {
                    let len = self.below(200).min(v.len() - at);
                    v.drain(at..at + len);
                }
                5 => {
                    // A number made huge.
                    let s: &[u8] =
                        [&b"99999999999999999999999"[..], b"-1", b"18446744073709551615", b"1e400"][self.below(4)];
                    v.splice(at..at, s.iter().copied());
                }
                6 => {
                    // An escape, maybe a lone surrogate, maybe cut.
                    let s: &[u8] = [&b"\\udcff"[..], b"\\ud800", b"\\u007f", b"\\u00", b"\\"][self.below(5)];
                    v.splice(at..at, s.iter().copied());
                }
                _ => {
                    // A long string: within the limits below, but long.
                    let n = self.below(100_000);
                    v.splice(at..at, std::iter::repeat_n(b'a', n));
                }
            }
        }
        v
    }
}

const ID: &str = "\\u007f1111111111111111111111111111111111111111111111111111111111111111";

fn dump() -> String {
    let items = [
        r#"{"gid": 0, "mode": 16877, "mtime": 5, "path": "d", "uid": 0, "user": "root", "group": "root"}"#.to_string(),
        format!(r#"{{"chunks": [["{ID}", 100, 90], ["{ID}", 200, 190]], "gid": 0, "mode": 33188, "mtime": -5, "ctime": 6, "path": "d/f", "size": 300, "uid": 1000, "xattrs": {{"user.a": "\u007fff007f", "user.b": "v"}}, "hardlink_master": true}}"#),
        r#"{"gid": 0, "mode": 33188, "mtime": 5, "path": "d/hl", "source": "d/f", "uid": 0}"#.to_string(),
        r#"{"gid": 0, "mode": 41471, "mtime": 5, "path": "d/sl", "source": "f", "uid": 0}"#.to_string(),
        r#"{"gid": 0, "mode": 8630, "mtime": 5, "path": "d/null", "rdev": 259, "uid": 0}"#.to_string(),
        r#"{"gid": 0, "mode": 4516, "mtime": 5, "path": "\u007f636166e9", "uid": 0}"#.to_string(),
        format!(r#"{{"chunks": [["{ID}", 3, 9]], "gid": 0, "mode": 33188, "mtime": 5, "part": 1, "path": "big.borg_part_1", "size": 3, "uid": 0}}"#),
        r#"{"chunks": [], "gid": 0, "mode": 33188, "mtime": 5, "path": "empty", "size": 0, "uid": 0, "acl_access": "user::rw-\n"}"#.to_string(),
    ];
    format!(
        r#"{{"_name": "arch\udce9", "_manifest_entry": {{"id": "\u007f00", "time": "2024-01-02T03:04:05.000000"}}, "_meta": {{"hostname": "h", "username": "u", "time": "2024-01-02T03:04:05.678901", "time_end": "2024-01-02T03:04:06.000000", "cmdline": ["borg", "create"], "comment": "", "chunker_params": ["buzhash", 19, 23, 21, 4095], "items": ["\u007f22"], "version": 1}}, "_items": [{}]}}"#,
        items.join(",\n")
    )
}

const LIST: &str = r#"{"archives": [{"archive": "b", "barchive": "b", "id": "2222222222222222222222222222222222222222222222222222222222222222", "name": "b", "start": "2024-01-02T03:04:05.000000", "time": "2024-01-02T03:04:05.000000"}, {"archive": "a", "barchive": "a\udce9", "id": "1111111111111111111111111111111111111111111111111111111111111111", "name": "a", "start": "2023-01-02T03:04:05.000000", "time": "2023-01-02T03:04:05.000000"}], "encryption": {"mode": "repokey"}, "repository": {"id": "3333333333333333333333333333333333333333333333333333333333333333", "last_modified": "2024-01-02T03:04:05.000000", "location": "/r"}}"#;

#[test]
fn mutated_borg_output_never_panics_and_stays_bounded() {
    let dump = dump();
    let (meta, events) = {
        let mut ev = Vec::new();
        let meta = borg::read_dump(dump.as_bytes(), &Limits::default(), &mut |e| {
            ev.push(e);
            Ok::<_, Error>(())
        })
        .expect("the unmutated dump parses");
        (meta, ev)
    };
    assert_eq!(meta.items, 8);
    assert!(events.iter().all(|e| matches!(e, DumpEvent::Item(_))), "{events:?}");
    assert_eq!(borg::parse_list(LIST.as_bytes()).unwrap().archives.len(), 2);

    let limits = Limits::default();
    let baseline = support::start_peak();
    let mut rng = support::Rng(0x00c0_ffee_b0e6);
    let (mut parsed, mut failed, mut rejected) = (0u32, 0u32, 0u64);
    for round in 0..20_000u32 {
        let input = if round % 4 == 3 { rng.mutate(LIST.as_bytes()) } else { rng.mutate(dump.as_bytes()) };
        if round % 4 == 3 {
            match borg::parse_list(input.as_slice()) {
                Ok(l) => assert!(l.archives.len() <= 4, "{l:?}"),
                Err(e) => assert!(!e.to_string().is_empty()),
            }
            continue;
        }
        let r = borg::read_dump(input.as_slice(), &limits, &mut |e| {
            if let DumpEvent::Rejected { reason, .. } = &e {
                assert!(!reason.to_string().is_empty());
                rejected += 1;
            }
            Ok::<_, Error>(())
        });
        match r {
            Ok(_) => parsed += 1,
            Err(e) => {
                assert!(!e.to_string().is_empty());
                failed += 1;
            }
        }
    }
    let peak = support::peak_above(baseline);
    assert!(parsed > 100 && failed > 100 && rejected > 100, "every outcome is reached: {parsed} {failed} {rejected}");
    assert!(peak < 32 << 20, "peak heap {peak} bytes over 20,000 mutated documents");
}
