//! A borg repository as coffer imports it (docs/design.md#import-from-borg),
//! through the user's own `borg`: `borg list --json` for the archives, `borg
//! debug dump-archive` for each archive's items (every entry's metadata and
//! chunk ids), and `borg export-tar` for the content of the files not imported
//! before, read in one pass ([`ForeignTree::feed`]).

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;

use coffer_core::format::bytes::Bytes;
use coffer_core::format::tree::{Node, NodeKind, Timestamp, Xattr};
use coffer_core::ops::backup::{
    ContentMemo, Fed, ForeignEntry, ForeignTree, Listing, Payload, StagedTree, Store, archive_components,
};
use coffer_import::borg::{DumpEvent, DumpMeta, HardLinks, Item, ItemKind, Limits};
use coffer_import::tar as rtar;
use zeroize::Zeroizing;

use super::pump::read_tar;
use super::tar::snapshot_path;

/// How a `borg` command failed, as far as its messages tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BorgFailure {
    /// The passphrase does not open the repository.
    WrongPassphrase,
    /// There is no borg repository at the location.
    NoRepository,
    /// Anything else.
    Other,
}

/// A `borg` command failed; `stderr` is what it said (its end, when long).
#[derive(Debug)]
pub struct BorgFailed {
    /// The command, without the repository.
    pub command: String,
    /// Its exit status.
    pub status: String,
    /// What it wrote to its standard error.
    pub stderr: String,
    /// What that says.
    pub kind: BorgFailure,
}

impl std::fmt::Display for BorgFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "`borg {}` failed ({}): {}", self.command, self.status, self.stderr.trim())?;
        match self.kind {
            BorgFailure::WrongPassphrase => write!(
                f,
                "; give the borg repository's passphrase in BORG_PASSPHRASE, BORG_PASSCOMMAND, COFFER_FROM_PASSWORD \
                 or --from-password-file"
            ),
            BorgFailure::NoRepository => write!(f, "; check the location after borg:"),
            BorgFailure::Other => Ok(()),
        }
    }
}

impl std::error::Error for BorgFailed {}

/// The most bytes of paths given to `borg export-tar` as arguments (a command
/// line holds about 2 MiB on Linux).
const MAX_PATH_ARGS: usize = 512 << 10;

/// The most of a command's standard error kept for its message.
const STDERR_KEPT: usize = 16 << 10;

/// The user's `borg`, with what every run of it gets.
pub struct Borg {
    program: PathBuf,
    passphrase: Option<Zeroizing<String>>,
}

impl Borg {
    /// `program` (found in `PATH` when it is a bare name), given `passphrase`
    /// in its environment when there is one (else borg's own `BORG_PASSPHRASE`,
    /// `BORG_PASSCOMMAND` apply).
    pub fn new(program: PathBuf, passphrase: Option<Zeroizing<String>>) -> Self {
        Borg { program, passphrase }
    }

    fn command(&self, args: &[&OsStr]) -> Command {
        let mut c = Command::new(&self.program);
        c.args(args)
            // Times borg prints without a zone are then in UTC, as they are read.
            .env("TZ", "UTC")
            .env("LC_ALL", "C.UTF-8")
            // A question borg would ask (a moved or unknown repository) is
            // answered no: borg says why it stops.
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(p) = &self.passphrase {
            c.env("BORG_PASSPHRASE", p.as_str());
        }
        c
    }

    fn spawn(&self, args: &[&OsStr]) -> Result<Running, BorgFailed> {
        let shown = shown(args);
        let mut child = self.command(args).spawn().map_err(|e| BorgFailed {
            command: shown.clone(),
            status: "not started".into(),
            stderr: format!("cannot run {}: {e} (is borg installed and in PATH?)", self.program.display()),
            kind: BorgFailure::Other,
        })?;
        let mut err = child.stderr.take().expect("piped");
        let stderr = std::thread::spawn(move || {
            let mut kept = Vec::new();
            let mut buf = [0u8; 8192];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                kept.extend_from_slice(&buf[..n]);
                if kept.len() > 2 * STDERR_KEPT {
                    kept.drain(..kept.len() - STDERR_KEPT);
                }
            }
            String::from_utf8_lossy(&kept[kept.len().saturating_sub(STDERR_KEPT)..]).into_owned()
        });
        Ok(Running { child, stderr: Some(stderr), shown })
    }

    /// Runs `borg ARGS` to its end; what it printed.
    pub fn output(&self, args: &[&OsStr], limit: usize) -> Result<Vec<u8>, BorgFailed> {
        let mut run = self.spawn(args)?;
        let mut out = Vec::new();
        let read = run.child.stdout.take().expect("piped").take(limit as u64 + 1).read_to_end(&mut out);
        if out.len() > limit {
            let _ = run.child.kill();
            let _ = run.finish();
            return Err(BorgFailed {
                command: run.shown.clone(),
                status: "stopped".into(),
                stderr: format!("it printed more than the {limit} bytes accepted"),
                kind: BorgFailure::Other,
            });
        }
        run.finish()?;
        read.map_err(|e| BorgFailed {
            command: run.shown.clone(),
            status: "read failed".into(),
            stderr: e.to_string(),
            kind: BorgFailure::Other,
        })?;
        Ok(out)
    }

    /// Starts `borg ARGS`, for its output to be read as a stream.
    pub fn stream(&self, args: &[&OsStr]) -> Result<Running, BorgFailed> {
        self.spawn(args)
    }
}

fn shown(args: &[&OsStr]) -> String {
    args.iter().map(|a| a.to_string_lossy().into_owned()).collect::<Vec<_>>().join(" ")
}

/// A running `borg` command.
pub struct Running {
    child: Child,
    stderr: Option<std::thread::JoinHandle<String>>,
    shown: String,
}

impl Running {
    /// Its standard output (once).
    pub fn stdout(&mut self) -> impl Read + Send + use<> {
        self.child.stdout.take().expect("taken once")
    }

    /// Waits for it to end: Err when it failed.
    pub fn finish(&mut self) -> Result<(), BorgFailed> {
        let status = self.child.wait();
        let stderr = self.stderr.take().and_then(|h| h.join().ok()).unwrap_or_default();
        match status {
            Ok(s) if s.success() => Ok(()),
            s => {
                let kind = if stderr.contains("passphrase") && stderr.contains("incorrect") {
                    BorgFailure::WrongPassphrase
                } else if stderr.contains("does not exist") || stderr.contains("is not a valid repository") {
                    BorgFailure::NoRepository
                } else {
                    BorgFailure::Other
                };
                let status = match s {
                    Ok(s) => s.to_string(),
                    Err(e) => e.to_string(),
                };
                Err(BorgFailed { command: self.shown.clone(), status, stderr, kind })
            }
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.stderr.is_some() {
            let _ = self.child.kill();
            let _ = self.finish();
        }
    }
}

/// `REPO::NAME`, as borg takes an archive.
pub fn archive_arg(repo: &str, name: &[u8]) -> OsString {
    let mut s = OsString::from(repo);
    s.push("::");
    s.push(OsStr::from_bytes(name));
    s
}

/// coffer's node for a borg item named `name`, or why it cannot be imported.
fn node_of(item: &Item, name: &[u8]) -> Result<Node, String> {
    let kind = match item.kind() {
        ItemKind::File | ItemKind::HardLink => NodeKind::File,
        ItemKind::Directory => NodeKind::Dir,
        ItemKind::Symlink => NodeKind::Symlink,
        ItemKind::Fifo => NodeKind::Fifo,
        ItemKind::CharDevice => NodeKind::Chardev,
        ItemKind::BlockDevice => NodeKind::Blockdev,
        ItemKind::Socket => NodeKind::Socket,
        ItemKind::Unknown => {
            return Err(format!("borg records a file of mode {:o}, which is no kind coffer knows", item.mode));
        }
    };
    let stamp = |ns: i64| Timestamp(ns.div_euclid(1_000_000_000), ns.rem_euclid(1_000_000_000) as u32);
    let text =
        |b: &Option<Vec<u8>>| b.as_ref().and_then(|b| String::from_utf8(b.clone()).ok()).filter(|s| !s.is_empty());
    let mut node = Node::new(Bytes(name.to_vec()), kind, item.mode & 0o7777, stamp(item.mtime));
    node.uid = item.uid;
    node.gid = item.gid;
    node.user = text(&item.user);
    node.group = text(&item.group);
    node.ctime = item.ctime.map(stamp).unwrap_or(node.mtime);
    node.size = if kind == NodeKind::File { item.size.unwrap_or(0) } else { 0 };
    node.rdev = if matches!(kind, NodeKind::Chardev | NodeKind::Blockdev) { item.rdev.unwrap_or(0) } else { 0 };
    node.xattrs = item.xattrs.iter().map(|(n, v)| Xattr { name: Bytes(n.clone()), value: Bytes(v.clone()) }).collect();
    if kind == NodeKind::Symlink {
        node.target = Some(Bytes(item.source.clone().ok_or("borg records a symbolic link without its target")?));
    }
    Ok(node)
}

/// Adds a Linux ACL borg recorded to the entry's extended attributes, where a
/// coffer backup of the file keeps it; false when the item has an ACL that is
/// not imported (macOS's or NFSv4's, or text that is no ACL).
fn add_acls(item: &Item, node: &mut Node) -> bool {
    use coffer_import::borg::acl;
    let mut all = item.acl_extended.is_none() && item.acl_nfs4.is_none();
    for (text, name) in [(&item.acl_access, acl::ACCESS_XATTR), (&item.acl_default, acl::DEFAULT_XATTR)] {
        let Some(text) = text else { continue };
        match acl::to_xattr(text) {
            Ok(value) if !node.xattrs.iter().any(|x| x.name.0 == name) => {
                node.xattrs.push(Xattr { name: Bytes(name.to_vec()), value: Bytes(value) });
            }
            Ok(_) => {}
            Err(_) => all = false,
        }
    }
    node.xattrs.sort_by(|a, b| a.name.0.cmp(&b.name.0));
    all
}

/// One archive, its items staged, its files' contents to come from `borg
/// export-tar`.
pub struct BorgArchive<'b> {
    borg: &'b Borg,
    archive: OsString,
    staged: StagedTree,
    /// Files to read, by their path in the archive: content key and size.
    wanted: HashMap<Vec<u8>, ([u8; 32], u64)>,
    /// Why a file's content could not be read, by content key.
    failed: Mutex<HashMap<[u8; 32], String>>,
    /// The archive's metadata.
    pub meta: DumpMeta,
    /// Items with ACLs that are not imported: macOS's and NFSv4's, and text that is no ACL.
    pub acls: u64,
}

impl<'b> BorgArchive<'b> {
    /// Reads the items of archive `archive` (`REPO::NAME`) from `borg debug
    /// dump-archive`; the files whose content `memo` holds are not read again.
    pub fn stage(borg: &'b Borg, archive: OsString, memo: &ContentMemo) -> anyhow::Result<Self> {
        let mut run = borg.stream(&[OsStr::new("debug"), OsStr::new("dump-archive"), &archive, OsStr::new("-")])?;
        let mut staged = StagedTree::default();
        let mut wanted = HashMap::new();
        let mut wanted_keys = std::collections::HashSet::new();
        let mut links = HardLinks::default();
        // Hard link sets: the master's path to its inode number and names.
        let mut sets: HashMap<Vec<u8>, (u64, u64)> = HashMap::new();
        let mut acls = 0u64;
        let mut f = |ev: DumpEvent| -> Result<(), coffer_import::borg::Error> {
            let mut item = match ev {
                DumpEvent::Item(i) => i,
                DumpEvent::Rejected { path, reason, .. } => {
                    let shown = path.as_deref().map(String::from_utf8_lossy).unwrap_or("an item".into()).into_owned();
                    staged.leave_out(shown, format!("borg's dump of it cannot be read: {reason}"));
                    return Ok(());
                }
            };
            if item.part.is_some() {
                // A checkpoint's piece of a file the archive holds whole.
                return Ok(());
            }
            let shown = String::from_utf8_lossy(&item.path).into_owned();
            if !links.resolve(&mut item) {
                staged.leave_out(shown, "a hard link to a file the archive does not hold before it: left out".into());
                return Ok(());
            }
            let comps = match archive_components(&item.path) {
                Ok(c) => c,
                Err(why) => {
                    staged.leave_out(shown, format!("{why}: left out"));
                    return Ok(());
                }
            };
            if item.repaired {
                staged.leave_out(
                    shown,
                    "borg check --repair replaced missing chunks of this file with zeros: its content is damaged and \
                     left out"
                        .into(),
                );
                return Ok(());
            }
            let mut node = match node_of(&item, comps[comps.len() - 1]) {
                Ok(n) => n,
                Err(why) => {
                    staged.leave_out(shown, format!("{why}: left out"));
                    return Ok(());
                }
            };
            if !add_acls(&item, &mut node) {
                acls += 1;
            }
            let payload = match (item.kind(), item.content_key) {
                (ItemKind::File | ItemKind::HardLink, Some(key)) => {
                    let master = match item.kind() {
                        ItemKind::HardLink => item.source.clone(),
                        _ if item.hardlink_master => Some(item.path.clone()),
                        _ => None,
                    };
                    if let Some(m) = master {
                        let next = sets.len() as u64 + 1;
                        let set = sets.entry(m).or_insert((next, 0));
                        set.1 += 1;
                        node.inode = set.0;
                        node.device = 1;
                    }
                    if item.kind() == ItemKind::File && !memo.knows(&key.0) && wanted_keys.insert(key.0) {
                        wanted.insert(item.path.clone(), (key.0, node.size));
                    }
                    Payload::File { key: key.0, handle: key.0.to_vec() }
                }
                (ItemKind::File | ItemKind::HardLink, None) => {
                    staged.leave_out(shown, "borg records a file without its chunks: left out".into());
                    return Ok(());
                }
                _ => Payload::Other,
            };
            if let Err(why) = staged.insert(&comps, ForeignEntry { node, payload }) {
                staged.leave_out(shown, why);
            }
            Ok(())
        };
        let meta = coffer_import::borg::read_dump(run.stdout(), &Limits::default(), &mut f);
        let finished = run.finish();
        finished?;
        let meta = meta?;
        let counts: HashMap<u64, u64> = sets.values().copied().collect();
        for e in staged.entries_mut() {
            if e.node.inode != 0 {
                e.node.links = counts.get(&e.node.inode).copied().unwrap_or(1);
            }
        }
        Ok(BorgArchive { borg, archive, staged, wanted, failed: Mutex::default(), meta, acls })
    }

    /// The files to read and their bytes (the rest were imported before).
    pub fn to_read(&self) -> (u64, u64) {
        (self.wanted.len() as u64, self.wanted.values().map(|(_, s)| s).sum())
    }

    /// The top-level names of the archive, as absolute paths.
    pub fn top_paths(&self) -> Vec<String> {
        let l = self.staged.list(&self.staged.root()).unwrap_or_default();
        let mut v: Vec<String> =
            l.entries.iter().map(|e| format!("/{}", String::from_utf8_lossy(&e.node.name.0))).collect();
        v.sort();
        if v.is_empty() {
            v.push("/".into());
        }
        v
    }

    /// What selects exactly the wanted files for `borg export-tar`: a patterns
    /// file of those whose path borg reads there (UTF-8, no line break, no space
    /// at either end, not starting with `#`) and path arguments for the others
    /// (which select what is below them too, ignored when read). `None` when the
    /// arguments would be too long: the whole archive is exported then.
    fn selection(&self) -> Option<(Vec<u8>, Vec<OsString>)> {
        let (mut file, mut args, mut arg_bytes) = (Vec::new(), Vec::new(), 0usize);
        for path in self.wanted.keys() {
            let plain = std::str::from_utf8(path)
                .is_ok_and(|p| !p.contains(['\n', '\r']) && p.trim() == p && !p.starts_with('#') && !p.is_empty());
            if plain {
                file.extend_from_slice(b"+ pf:");
                file.extend_from_slice(path);
                file.push(b'\n');
            } else {
                arg_bytes += path.len() + 1;
                args.push(OsStr::from_bytes(path).to_os_string());
            }
        }
        if arg_bytes > MAX_PATH_ARGS {
            return None;
        }
        if args.is_empty() {
            // Without path arguments borg keeps what no pattern excludes.
            file.extend_from_slice(b"- fm:*\n");
        }
        Some((file, args))
    }

    fn export(&self, store: &mut Store<'_>) -> coffer_core::error::Result<Result<(), String>> {
        let dir = match tempfile::Builder::new().prefix("coffer-borg-").tempdir() {
            Ok(d) => d,
            Err(e) => return Ok(Err(format!("cannot make a temporary directory for borg's patterns: {e}"))),
        };
        let mut args: Vec<OsString> = vec!["export-tar".into()];
        let mut paths = Vec::new();
        if let Some((patterns, by_arg)) = self.selection() {
            let file = dir.path().join("patterns");
            if let Err(e) = std::fs::write(&file, patterns) {
                return Ok(Err(format!("cannot write borg's patterns to {}: {e}", file.display())));
            }
            args.push("--patterns-from".into());
            args.push(file.into_os_string());
            paths = by_arg;
        }
        args.extend([self.archive.clone(), "-".into()]);
        args.extend(paths);
        let args: Vec<&OsStr> = args.iter().map(OsString::as_os_str).collect();
        let mut run = match self.borg.stream(&args) {
            Ok(r) => r,
            Err(e) => return Ok(Err(e.to_string())),
        };
        let input = std::io::BufReader::with_capacity(1 << 20, run.stdout());
        let mut left: HashMap<&[u8], ([u8; 32], u64)> = self.wanted.iter().map(|(p, v)| (p.as_slice(), *v)).collect();
        let mut on = |e: rtar::Entry, reader: &mut (dyn Read + Send)| -> coffer_core::error::Result<()> {
            if e.kind != rtar::Kind::File {
                return Ok(());
            }
            let Some(clean) = archive_components(&e.path).ok().map(|c| c.join(&b'/')) else { return Ok(()) };
            let Some((key, _)) = left.remove(clean.as_slice()) else { return Ok(()) };
            let path = snapshot_path(&clean);
            if let Err(why) = store(Fed { key, path: &path, reader, size: e.size })? {
                self.failed.lock().expect("poisoned").insert(key, why);
            }
            Ok(())
        };
        let read = read_tar(input, &rtar::Limits::default(), &mut on);
        let finished = run.finish();
        if let Err(e) = read? {
            return Ok(Err(format!("borg export-tar's output: {e}")));
        }
        if let Err(e) = finished {
            return Ok(Err(e.to_string()));
        }
        Ok(Ok(()))
    }
}

impl ForeignTree for BorgArchive<'_> {
    fn root(&self) -> Vec<u8> {
        self.staged.root()
    }

    fn list(&self, dir: &[u8]) -> Result<Listing, String> {
        self.staged.list(dir)
    }

    fn open<'a>(&'a self, file: &[u8]) -> Result<Box<dyn Read + Send + 'a>, String> {
        let key: Option<[u8; 32]> = file.try_into().ok();
        match key.and_then(|k| self.failed.lock().expect("poisoned").get(&k).cloned()) {
            Some(why) => Err(why),
            None => Err("borg export-tar did not give its content".into()),
        }
    }

    fn feed(&self, store: &mut Store<'_>) -> coffer_core::error::Result<Result<(), String>> {
        if self.wanted.is_empty() {
            return Ok(Ok(()));
        }
        self.export(store)
    }
}
