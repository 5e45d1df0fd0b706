//! `borg list --json REPO` and `borg info --json REPO::ARCHIVE`.

use std::io::Read;

use serde::Deserialize;

use super::text::{Meter, Prepass, parse_time, text_bytes};
use super::{BorgId, BorgTime, Error, Limits};

/// What `borg list --json REPO` says: the repository and its archives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoList {
    /// The repository's id.
    pub repository_id: BorgId,
    /// The repository's location as borg prints it (a path or an `ssh://` URL).
    pub location: Vec<u8>,
    /// Oldest first: by `start`, then by name.
    pub archives: Vec<ArchiveSummary>,
}

/// One archive of `borg list --json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveSummary {
    /// The archive's name, verbatim (borg's `barchive`): pass it back to borg as
    /// `REPO::NAME` with `OsStr::from_bytes`.
    pub name: Vec<u8>,
    /// The archive's id.
    pub id: BorgId,
    /// When the backup started, to the second (borg's `start`, read as UTC: run borg with
    /// `TZ=UTC`).
    pub start: BorgTime,
}

/// What `borg info --json REPO::ARCHIVE` says about one archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveInfo {
    /// The archive's name.
    pub name: Vec<u8>,
    /// The archive's id.
    pub id: BorgId,
    /// The host the backup ran on.
    pub hostname: Vec<u8>,
    /// The user the backup ran as.
    pub username: Vec<u8>,
    /// Start and end of the backup, to the second, read as UTC (run borg with `TZ=UTC`).
    pub start: BorgTime,
    /// See `start`.
    pub end: BorgTime,
    /// The archive's comment (empty when none was given).
    pub comment: Vec<u8>,
    /// The `borg create` command line, one argument per entry.
    pub command_line: Vec<Vec<u8>>,
}

#[derive(Deserialize)]
struct RawList {
    repository: RawRepo,
    archives: Vec<RawSummary>,
}

#[derive(Deserialize)]
struct RawRepo {
    id: String,
    location: String,
}

#[derive(Deserialize)]
struct RawSummary {
    barchive: Option<String>,
    archive: Option<String>,
    name: Option<String>,
    id: String,
    start: Option<String>,
    time: Option<String>,
}

#[derive(Deserialize)]
struct RawInfo {
    archives: Vec<RawArchiveInfo>,
}

#[derive(Deserialize)]
struct RawArchiveInfo {
    name: String,
    id: String,
    #[serde(default)]
    hostname: String,
    #[serde(default)]
    username: String,
    start: String,
    end: String,
    #[serde(default)]
    comment: String,
    #[serde(default)]
    command_line: Vec<String>,
}

/// Reads the whole document (bounded), through the surrogate pre-pass, and parses it.
fn read_doc<T: for<'de> Deserialize<'de>>(r: impl Read, limits: &Limits, command: &'static str) -> Result<T, Error> {
    let mut input = Vec::new();
    r.take(limits.listing_bytes.saturating_add(1))
        .read_to_end(&mut input)
        .map_err(|source| Error::Read { command, source })?;
    if input.len() as u64 > limits.listing_bytes {
        return Err(Error::ListingTooLarge { command, limit: limits.listing_bytes });
    }
    let mut buf = Vec::with_capacity(input.len());
    Prepass::new(&input[..], Meter::new()).read_to_end(&mut buf).map_err(|source| Error::Read { command, source })?;
    drop(input);
    serde_json::from_slice(&buf).map_err(|e| Error::Listing { command, reason: e.to_string() })
}

fn text(s: &str, command: &'static str, what: &str) -> Result<Vec<u8>, Error> {
    text_bytes(s).map_err(|e| Error::Listing { command, reason: format!("{what}: {e}") })
}

fn id(s: &str, command: &'static str, what: &str) -> Result<BorgId, Error> {
    BorgId::from_hex(s).ok_or_else(|| Error::Listing { command, reason: format!("{what}: {s:?} is not 64 hex digits") })
}

fn time(s: &str, command: &'static str, what: &str) -> Result<BorgTime, Error> {
    parse_time(s)
        .ok_or_else(|| Error::Listing { command, reason: format!("{what}: {s:?} is not a time as borg prints it") })
}

/// Parses the output of `borg list --json REPO`.
///
/// Archives come oldest first (by `start`, then by name). Their times are borg's local
/// times read as UTC: run borg with `TZ=UTC`.
pub fn parse_list(r: impl Read) -> Result<RepoList, Error> {
    parse_list_with(r, &Limits::default())
}

/// [`parse_list`] with other limits.
pub fn parse_list_with(r: impl Read, limits: &Limits) -> Result<RepoList, Error> {
    const CMD: &str = "list --json";
    let raw: RawList = read_doc(r, limits, CMD)?;
    let mut archives = Vec::with_capacity(raw.archives.len());
    for a in &raw.archives {
        let name = a
            .barchive
            .as_ref()
            .or(a.archive.as_ref())
            .or(a.name.as_ref())
            .ok_or_else(|| Error::Listing { command: CMD, reason: format!("archive {} has no name", a.id) })?;
        let name = text(name, CMD, "archive name")?;
        let shown = String::from_utf8_lossy(&name).into_owned();
        let start = a
            .start
            .as_ref()
            .or(a.time.as_ref())
            .ok_or_else(|| Error::Listing { command: CMD, reason: format!("archive {shown} has no start time") })?;
        archives.push(ArchiveSummary {
            id: id(&a.id, CMD, &format!("id of archive {shown}"))?,
            start: time(start, CMD, &format!("start of archive {shown}"))?,
            name,
        });
    }
    archives.sort_by(|a, b| a.start.cmp(&b.start).then_with(|| a.name.cmp(&b.name)));
    Ok(RepoList {
        repository_id: id(&raw.repository.id, CMD, "repository id")?,
        location: text(&raw.repository.location, CMD, "repository location")?,
        archives,
    })
}

/// Parses the output of `borg info --json REPO::ARCHIVE`: exactly one archive.
pub fn parse_info(r: impl Read) -> Result<ArchiveInfo, Error> {
    let mut all = parse_info_all(r, &Limits::default())?;
    if all.len() != 1 {
        return Err(Error::Listing {
            command: "info --json",
            reason: format!("{} archives where one was asked for (give REPO::ARCHIVE)", all.len()),
        });
    }
    Ok(all.remove(0))
}

/// Parses the output of `borg info --json` for any number of archives (`borg info --json
/// REPO` describes them all, in borg's order).
pub fn parse_info_all(r: impl Read, limits: &Limits) -> Result<Vec<ArchiveInfo>, Error> {
    const CMD: &str = "info --json";
    let raw: RawInfo = read_doc(r, limits, CMD)?;
    let mut out = Vec::with_capacity(raw.archives.len());
    for a in raw.archives {
        let name = text(&a.name, CMD, "archive name")?;
        let shown = String::from_utf8_lossy(&name).into_owned();
        let mut command_line = Vec::with_capacity(a.command_line.len());
        for arg in &a.command_line {
            command_line.push(text(arg, CMD, &format!("command line of archive {shown}"))?);
        }
        out.push(ArchiveInfo {
            id: id(&a.id, CMD, &format!("id of archive {shown}"))?,
            hostname: text(&a.hostname, CMD, &format!("hostname of archive {shown}"))?,
            username: text(&a.username, CMD, &format!("username of archive {shown}"))?,
            start: time(&a.start, CMD, &format!("start of archive {shown}"))?,
            end: time(&a.end, CMD, &format!("end of archive {shown}"))?,
            comment: text(&a.comment, CMD, &format!("comment of archive {shown}"))?,
            command_line,
            name,
        });
    }
    Ok(out)
}
