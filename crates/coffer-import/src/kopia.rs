//! Parsers of what kopia 0.22 gives, for importing a kopia repository through the
//! user's own `kopia` (docs/design.md#import-from-kopia).
//!
//! coffer does not read kopia's repository format: the `coffer` binary runs `kopia`
//! (`repository status --json`, `snapshot list --all --json`, and `server start`, whose
//! HTTP API serves each object: a directory's JSON manifest, a file's bytes) and hands
//! what it gets to these parsers. This module only parses bytes: it never starts a
//! process, never prints and never reads the environment.
//!
//! | what kopia gives | parser | gives |
//! | --- | --- | --- |
//! | `kopia repository status --json` | [`parse_status`] | the repository's unique id |
//! | `kopia snapshot list --all --json` | [`parse_snapshots`] | the snapshots, oldest first, and those that do not parse |
//! | a directory object (`GET /api/v1/objects/ID`) | [`parse_dir`] | its entries, and those refused |
//!
//! # What kopia records
//!
//! A directory entry has a name, a type (`f` file, `d` directory, `s` symbolic link:
//! kopia 0.22 snapshots nothing else), Go's mode bits as an octal string (permissions,
//! setuid, setgid, sticky), a size, a modification time in nanoseconds, owner and group
//! ids (left out of the JSON when 0) and an object id (a directory's manifest, a file's
//! bytes, a link's target). Names are JSON text: kopia writes a name that is not UTF-8
//! with U+FFFD in place of each bad byte, as its own restore then names it.
//!
//! # Limits
//!
//! Every value is checked before it is used: an object id is 1 to [`MAX_OBJECT_ID`]
//! ASCII letters and digits (it goes into a URL path); a size is 0 to [`MAX_SIZE`]; a
//! name is 1 to [`MAX_NAME`] bytes; times are RFC 3339. A directory's manifest larger
//! than [`MAX_DIR_JSON`] is the caller's to refuse before it is read.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::restic::time::Timestamp;

/// The largest directory manifest accepted, in bytes (a directory of about two million
/// entries).
pub const MAX_DIR_JSON: u64 = 256 << 20;

/// The longest object id accepted: kopia's are an optional `I` per level of
/// indirection, an optional one-letter prefix and a hash in hex (about 34 characters).
pub const MAX_OBJECT_ID: usize = 256;

/// The largest file size accepted (2^53 bytes, 8 PiB): more is no real file.
pub const MAX_SIZE: u64 = 1 << 53;

/// The longest name accepted, in bytes (Linux's `NAME_MAX` is 255; more is refused
/// here so that nothing absurd is kept).
pub const MAX_NAME: usize = 4096;

/// The most tags of one snapshot kept.
pub const MAX_TAGS: usize = 1024;

/// What went wrong parsing what kopia gave.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Not the JSON expected.
    #[error("{what} is not the JSON kopia writes: {reason}")]
    Json {
        /// What was parsed.
        what: String,
        /// Why it does not parse.
        reason: String,
    },
    /// A value that cannot be right.
    #[error("{what}: {reason}")]
    Invalid {
        /// What was parsed.
        what: String,
        /// What is wrong.
        reason: String,
    },
}

/// What `kopia repository status --json` says of the repository.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    /// The repository's unique id, in hex (kopia's `uniqueIDHex`: 32 random bytes
    /// made when the repository was created).
    pub unique_id: String,
    /// Whether this connection is read-only.
    pub read_only: bool,
}

#[derive(Deserialize)]
struct RawStatus {
    #[serde(rename = "uniqueIDHex")]
    unique_id: Option<String>,
    #[serde(rename = "clientOptions", default)]
    client: RawClient,
}

#[derive(Deserialize, Default)]
struct RawClient {
    #[serde(default)]
    readonly: bool,
}

/// Parses `kopia repository status --json`.
pub fn parse_status(json: &[u8]) -> Result<Status, Error> {
    let what = "`kopia repository status --json`";
    let raw: RawStatus =
        serde_json::from_slice(json).map_err(|e| Error::Json { what: what.into(), reason: e.to_string() })?;
    let id = raw.unique_id.ok_or_else(|| Error::Invalid { what: what.into(), reason: "no uniqueIDHex".into() })?;
    if id.is_empty() || id.len() > 256 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Error::Invalid { what: what.into(), reason: format!("uniqueIDHex {id:?} is not an id in hex") });
    }
    Ok(Status { unique_id: id.to_ascii_lowercase(), read_only: raw.client.readonly })
}

/// Whether `id` can be a kopia object id: 1 to [`MAX_OBJECT_ID`] ASCII letters and
/// digits (nothing that could change the URL it is put in).
pub fn valid_object_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= MAX_OBJECT_ID && id.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// Go's `os.FileMode` bits kopia writes (`fs.ModBits`).
const GO_SETUID: u32 = 1 << 23;
const GO_SETGID: u32 = 1 << 22;
const GO_STICKY: u32 = 1 << 20;

/// The Unix permission bits (with setuid 0o4000, setgid 0o2000, sticky 0o1000) of the
/// Go mode bits `go`.
pub fn unix_permissions(go: u32) -> u32 {
    let mut m = go & 0o777;
    if go & GO_SETUID != 0 {
        m |= 0o4000;
    }
    if go & GO_SETGID != 0 {
        m |= 0o2000;
    }
    if go & GO_STICKY != 0 {
        m |= 0o1000;
    }
    m
}

/// Parses a mode as kopia writes it: `"0"` then octal digits (Go's `strconv.ParseInt`
/// with base 0 reads it back, so `0o`, `0x` and decimal are taken too).
pub fn parse_mode(s: &str) -> Option<u32> {
    let s = s.replace('_', "");
    let v = if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u32::from_str_radix(h, 16).ok()?
    } else if let Some(o) = s.strip_prefix("0o").or_else(|| s.strip_prefix("0O")) {
        u32::from_str_radix(o, 8).ok()?
    } else if let Some(b) = s.strip_prefix("0b").or_else(|| s.strip_prefix("0B")) {
        u32::from_str_radix(b, 2).ok()?
    } else if s.len() > 1 && s.starts_with('0') {
        u32::from_str_radix(&s[1..], 8).ok()?
    } else {
        s.parse().ok()?
    };
    (v <= i32::MAX as u32).then_some(v)
}

/// An entry's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryType {
    /// A regular file (`f`).
    File,
    /// A directory (`d`).
    Dir,
    /// A symbolic link (`s`): its object holds the target.
    Symlink,
}

/// One entry of a directory (or a snapshot's root entry).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Its name (UTF-8: see the module's doc).
    pub name: String,
    /// Its type.
    pub kind: EntryType,
    /// Go's mode bits as recorded (see [`unix_permissions`]).
    pub go_mode: u32,
    /// Its size in bytes (a file's content, a link's target).
    pub size: u64,
    /// Its modification time: seconds and nanoseconds since the epoch.
    pub mtime: (i64, u32),
    /// Owner id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
    /// Its object: a directory's manifest, a file's or a link's content.
    pub object: String,
    /// The number of entries below it, as the directory's summary records it (files,
    /// directories, links), when it has one.
    pub below: Option<u64>,
}

#[derive(Deserialize)]
struct RawEntry {
    name: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
    mode: Option<String>,
    size: Option<i64>,
    mtime: Option<String>,
    uid: Option<i64>,
    gid: Option<i64>,
    obj: Option<String>,
    summ: Option<RawSummary>,
}

#[derive(Deserialize)]
struct RawSummary {
    files: Option<i64>,
    symlinks: Option<i64>,
    dirs: Option<i64>,
}

impl RawSummary {
    fn total(&self) -> Option<u64> {
        let n = |v: Option<i64>| u64::try_from(v.unwrap_or(0)).ok();
        n(self.files)?.checked_add(n(self.symlinks)?)?.checked_add(n(self.dirs)?)
    }
}

/// Checks a raw entry; the reason when it cannot be imported.
fn entry(raw: RawEntry, root: bool) -> Result<Entry, String> {
    let name = raw.name.unwrap_or_default();
    if !root && (name.is_empty() || name.len() > MAX_NAME) {
        return Err(format!("a name of {} bytes", name.len()));
    }
    let kind = match raw.kind.as_deref() {
        Some("f") => EntryType::File,
        Some("d") => EntryType::Dir,
        Some("s") => EntryType::Symlink,
        Some(t) => return Err(format!("kopia records an entry of type {t:?}, which coffer does not know")),
        None => return Err("kopia records an entry without a type".into()),
    };
    let go_mode = match raw.mode.as_deref() {
        None => 0,
        Some(m) => parse_mode(m).ok_or_else(|| format!("a mode {m:?} that is not a number"))?,
    };
    let size = match raw.size {
        None => 0,
        Some(s) => u64::try_from(s).ok().filter(|&s| s <= MAX_SIZE).ok_or_else(|| format!("an absurd size {s}"))?,
    };
    let mtime = match raw.mtime.as_deref() {
        None => (0, 0),
        Some(t) => {
            let t = Timestamp::parse(t).ok_or_else(|| format!("a time {t:?} that is not RFC 3339"))?;
            (t.secs, t.nanos)
        }
    };
    let id = |v: Option<i64>, what: &str| -> Result<u32, String> {
        u32::try_from(v.unwrap_or(0)).map_err(|_| format!("an absurd {what} {}", v.unwrap_or(0)))
    };
    let uid = id(raw.uid, "owner id")?;
    let gid = id(raw.gid, "group id")?;
    let object = raw.obj.unwrap_or_default();
    if !valid_object_id(&object) {
        return Err(format!("an object id {:?} that is not one", object.chars().take(80).collect::<String>()));
    }
    let below = raw.summ.as_ref().and_then(RawSummary::total);
    Ok(Entry { name, kind, go_mode, size, mtime, uid, gid, object, below })
}

/// A directory's entries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dir {
    /// The entries, as recorded.
    pub entries: Vec<Entry>,
    /// Entries refused: their name (lossy, maybe empty) and why.
    pub refused: Vec<(String, String)>,
}

#[derive(Deserialize)]
struct RawDir {
    stream: Option<String>,
    entries: Option<Vec<RawEntry>>,
}

/// Parses a directory object's manifest (`{"stream": "kopia:directory", "entries": […]}`).
/// `object` names it in errors.
pub fn parse_dir(json: &[u8], object: &str) -> Result<Dir, Error> {
    let what = || format!("kopia directory {object}");
    if json.len() as u64 > MAX_DIR_JSON {
        return Err(Error::Invalid { what: what(), reason: format!("more than {MAX_DIR_JSON} bytes") });
    }
    let raw: RawDir = serde_json::from_slice(json).map_err(|e| Error::Json { what: what(), reason: e.to_string() })?;
    if raw.stream.as_deref() != Some("kopia:directory") {
        return Err(Error::Invalid {
            what: what(),
            reason: format!("its stream is {:?}, not \"kopia:directory\"", raw.stream.unwrap_or_default()),
        });
    }
    let mut dir = Dir::default();
    for r in raw.entries.unwrap_or_default() {
        let name = r.name.clone().unwrap_or_default();
        match entry(r, false) {
            Ok(e) => dir.entries.push(e),
            Err(why) => dir.refused.push((name, why)),
        }
    }
    Ok(dir)
}

/// One snapshot, as `kopia snapshot list --json` gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// The manifest id.
    pub id: String,
    /// The source: host, user and path.
    pub host: String,
    /// The user name of the source.
    pub user: String,
    /// The path snapshotted.
    pub path: String,
    /// Its description (maybe empty).
    pub description: String,
    /// Its start time.
    pub start: Timestamp,
    /// Its tags (`tag:KEY` → value, as kopia keeps them), in key order.
    pub tags: Vec<(String, String)>,
    /// Its root entry: the directory (or file) snapshotted.
    pub root: Entry,
}

#[derive(Deserialize)]
struct RawSnapshot {
    id: Option<String>,
    source: Option<RawSource>,
    #[serde(default)]
    description: String,
    #[serde(rename = "startTime")]
    start: Option<String>,
    #[serde(rename = "rootEntry")]
    root: Option<RawEntry>,
    #[serde(default)]
    tags: BTreeMap<String, String>,
}

#[derive(Deserialize)]
struct RawSource {
    #[serde(default)]
    host: String,
    #[serde(rename = "userName", default)]
    user: String,
    #[serde(default)]
    path: String,
}

/// The snapshots `kopia snapshot list --all --json` lists.
#[derive(Clone, Debug, Default)]
pub struct Snapshots {
    /// Those that parse, oldest first (by start time, then id).
    pub good: Vec<Snapshot>,
    /// Those that do not: an id (or their place in the list) and why.
    pub damaged: Vec<(String, String)>,
}

fn snapshot(raw: RawSnapshot) -> Result<Snapshot, String> {
    let id = raw.id.ok_or("no id")?;
    if id.is_empty() || id.len() > 256 || !id.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(format!("an id {id:?} that is not one"));
    }
    let source = raw.source.ok_or("no source")?;
    let start = raw.start.ok_or("no start time")?;
    let start = Timestamp::parse(&start).ok_or_else(|| format!("a start time {start:?} that is not RFC 3339"))?;
    let root = entry(raw.root.ok_or("no root entry")?, true).map_err(|e| format!("its root entry has {e}"))?;
    if raw.tags.len() > MAX_TAGS {
        return Err(format!("{} tags", raw.tags.len()));
    }
    Ok(Snapshot {
        id,
        host: source.host,
        user: source.user,
        path: source.path,
        description: raw.description,
        start,
        tags: raw.tags.into_iter().collect(),
        root,
    })
}

/// Parses `kopia snapshot list --all --json` (a JSON array of snapshot manifests). A
/// manifest that does not parse is listed in `damaged`; a list that does not parse is
/// an error.
pub fn parse_snapshots(json: &[u8]) -> Result<Snapshots, Error> {
    let what = "`kopia snapshot list --json`";
    let list: Vec<serde_json::Value> =
        serde_json::from_slice(json).map_err(|e| Error::Json { what: what.into(), reason: e.to_string() })?;
    let mut out = Snapshots::default();
    for (i, v) in list.into_iter().enumerate() {
        let shown = v.get("id").and_then(|i| i.as_str()).map(str::to_string).unwrap_or_else(|| format!("#{}", i + 1));
        let parsed = serde_json::from_value::<RawSnapshot>(v).map_err(|e| e.to_string()).and_then(snapshot);
        match parsed {
            Ok(s) => out.good.push(s),
            Err(why) => out.damaged.push((shown, why)),
        }
    }
    out.good.sort_by(|a, b| (a.start.secs, a.start.nanos, &a.id).cmp(&(b.start.secs, b.start.nanos, &b.id)));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIR: &str = r#"{"stream":"kopia:directory","entries":[
        {"name":"d","type":"d","mode":"04000777","mtime":"2026-12-02T04:53:53.692713612Z","obj":"kdb0fd3c99349c58586cf8e1fd1b7f0ec","summ":{"size":0,"files":2,"symlinks":1,"dirs":1}},
        {"name":"a","type":"f","mode":"040000755","size":3,"mtime":"2026-12-02T04:53:53.688713612Z","uid":1000,"gid":100,"obj":"42bd44dbd5f1ff7290e68fba3d31ea27"},
        {"name":"l","type":"s","mode":"0777","size":4,"mtime":"1969-12-31T23:59:59.5Z","obj":"2867491c0440f0f8f93b9e6a9a7a43fd"},
        {"name":"dev","type":"c","obj":"aa"},
        {"name":"neg","type":"f","size":-1,"obj":"aa"},
        {"name":"huge","type":"f","size":9223372036854775807,"obj":"aa"},
        {"name":"url","type":"f","obj":"../../api/v1/control/shutdown"},
        {"name":"uid","type":"f","uid":4294967296,"obj":"aa"},
        {"name":"mode","type":"f","mode":"rwx","obj":"aa"},
        {"name":"","type":"f","obj":"aa"},
        {"name":"time","type":"f","mtime":"yesterday","obj":"aa"}
    ],"summary":{"size":7}}"#;

    #[test]
    fn a_directory_parses_entry_by_entry() {
        let d = parse_dir(DIR.as_bytes(), "kx").unwrap();
        assert_eq!(d.entries.len(), 3, "{d:?}");
        let [dir, file, link] = &d.entries[..] else { panic!() };
        assert_eq!(dir.kind, EntryType::Dir);
        assert_eq!(unix_permissions(dir.go_mode), 0o1777);
        assert_eq!(dir.below, Some(4));
        assert_eq!(file.kind, EntryType::File);
        assert_eq!(unix_permissions(file.go_mode), 0o4755);
        assert_eq!((file.size, file.uid, file.gid), (3, 1000, 100));
        assert_eq!(file.mtime, (1_796_187_233, 688_713_612));
        assert_eq!(file.object, "42bd44dbd5f1ff7290e68fba3d31ea27");
        assert_eq!((link.kind, link.go_mode, link.uid), (EntryType::Symlink, 0o777, 0));
        assert_eq!(link.mtime, (-1, 500_000_000));
        let refused: Vec<&str> = d.refused.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(refused, ["dev", "neg", "huge", "url", "uid", "mode", "", "time"]);
        assert!(d.refused[0].1.contains("\"c\""), "{:?}", d.refused[0]);
        assert!(d.refused[2].1.contains("absurd size"), "{:?}", d.refused[2]);
    }

    #[test]
    fn what_is_not_a_directory_is_an_error_naming_it() {
        for bad in [&b"{"[..], b"[]", b"{\"entries\":[]}", b"{\"stream\":\"kopia:directory\",\"entries\":7}"] {
            let e = parse_dir(bad, "kbad").unwrap_err().to_string();
            assert!(e.contains("kbad"), "{e}");
        }
        let empty = parse_dir(br#"{"stream":"kopia:directory","entries":[]}"#, "k").unwrap();
        assert!(empty.entries.is_empty());
    }

    #[test]
    fn modes_read_as_go_writes_them() {
        assert_eq!(parse_mode("0644"), Some(0o644));
        assert_eq!(parse_mode("020000755"), Some((1 << 22) | 0o755));
        assert_eq!(unix_permissions(parse_mode("020000755").unwrap()), 0o2755);
        assert_eq!(parse_mode("0x1ff"), Some(0o777));
        assert_eq!(parse_mode("420"), Some(0o644));
        assert_eq!(parse_mode("0"), Some(0));
        assert_eq!(parse_mode("09"), None);
        assert_eq!(parse_mode("-1"), None);
        assert_eq!(parse_mode("077777777777"), None);
    }

    #[test]
    fn object_ids_are_letters_and_digits() {
        assert!(valid_object_id("Ixk0123abc"));
        assert!(!valid_object_id(""));
        assert!(!valid_object_id("a/b"));
        assert!(!valid_object_id("a?b"));
        assert!(!valid_object_id(&"a".repeat(MAX_OBJECT_ID + 1)));
    }

    #[test]
    fn status_gives_the_unique_id() {
        let s =
            parse_status(br#"{"configFile":"/x","uniqueIDHex":"30166A9e","clientOptions":{"hostname":"vm"}}"#).unwrap();
        assert_eq!(s, Status { unique_id: "30166a9e".into(), read_only: false });
        assert!(parse_status(br#"{"uniqueIDHex":"not hex"}"#).is_err());
        assert!(parse_status(br#"{"configFile":"/x"}"#).is_err());
        assert!(parse_status(b"nope").is_err());
    }

    #[test]
    fn snapshots_sort_oldest_first_and_damaged_ones_are_listed() {
        let list = r#"[
          {"id":"bbb","source":{"host":"h","userName":"u","path":"/p"},"description":"second","startTime":"2024-05-02T00:00:00Z",
           "rootEntry":{"name":"p","type":"d","mode":"0755","mtime":"2024-05-01T00:00:00Z","obj":"k1","summ":{"files":3,"dirs":1}},
           "tags":{"tag:a":"1"}},
          {"id":"aaa","source":{"host":"h","userName":"u","path":"/p"},"startTime":"2024-05-01T00:00:00.25Z",
           "rootEntry":{"name":"p","type":"d","obj":"k2"}},
          {"id":"ccc","source":{"host":"h"},"startTime":"never","rootEntry":{"type":"d","obj":"k3"}},
          {"source":{}},
          7
        ]"#;
        let s = parse_snapshots(list.as_bytes()).unwrap();
        let ids: Vec<&str> = s.good.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["aaa", "bbb"]);
        assert_eq!(s.good[0].start.nanos, 250_000_000);
        assert_eq!(s.good[1].tags, [("tag:a".to_string(), "1".to_string())]);
        assert_eq!(s.good[1].description, "second");
        assert_eq!(s.good[1].root.below, Some(4));
        assert_eq!((s.good[1].path.as_str(), s.good[1].user.as_str()), ("/p", "u"));
        let damaged: Vec<&str> = s.damaged.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(damaged, ["ccc", "#4", "#5"]);
        assert!(parse_snapshots(b"{}").is_err());
    }
}
