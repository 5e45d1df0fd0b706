//! The totals a progress display shows: a separate walk of the trees, made only
//! when the display wants them, that counts what the restore will write without
//! keeping any of it. Like the restore's own walk, it keeps an explicit stack
//! and one path buffer, so its depth costs no recursion.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::plan::{Entries, load_tree};
use super::{Overwrite, RestoreOptions, RestoreSummary, Selector};
use crate::error::{Error, Result};
use crate::format::tree::{Node, NodeKind};
use crate::repo::Repository;
use crate::repo::tree_walk::Located;

/// Regular files a restore writes (each inode once) and their bytes.
#[derive(Debug, Default)]
pub(super) struct Totals {
    pub bytes: u64,
    pub files: u64,
}

/// One directory being counted: its entries not counted yet, whether it is
/// selected, and the path length without its name.
struct Frame<'a> {
    rest: Entries<'a>,
    selected: bool,
    snap_len: usize,
    /// For a selected directory when `left` is given: every name its tree holds.
    names: Option<HashSet<Vec<u8>>>,
}

/// One entry a restore takes, as [`walk`] reports it.
pub(super) struct Taken<'n> {
    /// Its path relative to the target.
    pub rel: &'n Path,
    pub node: &'n Node,
    /// Whether it is a further name of an inode already reported.
    pub another_name: bool,
}

/// Walks what restoring `located` (found at `snap_root`) takes, calling `f` with
/// each selected entry (directories before what they hold). A tree that cannot
/// be loaded counts as empty (the restore reports it).
pub(super) fn walk(
    repo: &Repository,
    select: &Selector,
    located: &Located,
    snap_root: &Path,
    f: &mut dyn FnMut(Taken<'_>),
) -> Result<()> {
    walk_dirs(repo, select, located, snap_root, f, None)
}

/// A directory restored whole, left by [`walk_dirs`]: its path relative to the
/// target, and every name its tree holds.
type Left<'l> = &'l mut dyn FnMut(&Path, &HashSet<Vec<u8>>);

/// [`walk`], also calling `left` as each restored directory is left (the
/// target itself first among them when a whole directory is restored), as
/// `--delete` removes what else the target's directory holds then.
fn walk_dirs(
    repo: &Repository,
    select: &Selector,
    located: &Located,
    snap_root: &Path,
    f: &mut dyn FnMut(Taken<'_>),
    mut left: Option<Left<'_>>,
) -> Result<()> {
    let whole_dir = select.takes_all() && !matches!(located, Located::Entry(n) if n.kind != NodeKind::Dir);
    let (nodes, snap) = match located {
        Located::Root(id) => (load_tree(repo, id)?, snap_root),
        Located::Entry(node) if node.kind == NodeKind::Dir => {
            let sub = node.subtree.ok_or_else(|| Error::corrupt("tree", "directory without subtree"))?;
            (load_tree(repo, &sub)?, snap_root)
        }
        Located::Entry(node) => {
            (Entries::Listed(vec![(**node).clone()].into_iter()), snap_root.parent().unwrap_or(Path::new("/")))
        }
    };
    let mut snap = snap.as_os_str().as_bytes().to_vec();
    let base = snap.len();
    let mut seen: HashSet<(u64, u64)> = HashSet::new();
    let deleting = left.is_some();
    let names = |selected: bool| (selected && deleting).then(HashSet::new);
    let mut stack = vec![Frame { rest: nodes, selected: false, snap_len: snap.len(), names: names(whole_dir) }];
    while let Some(top) = stack.last_mut() {
        // A part that does not load ends its directory here (the restore reports it).
        let Some(Ok(node)) = top.rest.next() else {
            if let (Some(held), Some(left)) = (&top.names, left.as_mut()) {
                let r = snap[base..].strip_prefix(b"/").unwrap_or(&snap[base..]);
                left(Path::new(OsStr::from_bytes(r)), held);
            }
            snap.truncate(top.snap_len);
            stack.pop();
            continue;
        };
        if let Some(held) = &mut top.names {
            held.insert(node.name.0.clone());
        }
        let ancestor = top.selected;
        let snap_len = snap.len();
        if !snap.ends_with(b"/") {
            snap.push(b'/');
        }
        snap.extend_from_slice(&node.name.0);
        let is_dir = node.kind == NodeKind::Dir;
        let judged = select.judge(Path::new(OsStr::from_bytes(&snap)), is_dir, ancestor);
        let rel = || {
            let r = snap[base..].strip_prefix(b"/").unwrap_or(&snap[base..]);
            Path::new(OsStr::from_bytes(r)).to_path_buf()
        };
        match (judged, node.subtree) {
            (Some(selected), Some(id)) if is_dir => {
                if selected {
                    f(Taken { rel: &rel(), node: &node, another_name: false });
                }
                let rest = load_tree(repo, &id).unwrap_or(Entries::Listed(Vec::new().into_iter()));
                stack.push(Frame { rest, selected, snap_len, names: names(selected) });
                continue;
            }
            (Some(true), _) if node.kind != NodeKind::Socket => {
                let another_name =
                    node.kind == NodeKind::File && node.links > 1 && !seen.insert((node.device, node.inode));
                f(Taken { rel: &rel(), node: &node, another_name });
            }
            _ => {}
        }
        snap.truncate(snap_len);
    }
    Ok(())
}

/// Counts what restoring `located` (found at `snap_root`) writes.
pub(super) fn count(repo: &Repository, select: &Selector, located: &Located, snap_root: &Path) -> Result<Totals> {
    let mut totals = Totals::default();
    walk(repo, select, located, snap_root, &mut |t| {
        if t.node.kind == NodeKind::File && !t.another_name {
            totals.bytes += t.node.size;
            totals.files += 1;
        }
    })?;
    Ok(totals)
}

/// What a restore would do, counted without changing the target (`--dry-run`):
/// what the target holds is looked at (never through a symlink at the entry
/// itself) as the restore would, so entries [`Overwrite`] keeps count as
/// skipped and, with `--delete`, what the restore would remove as deleted.
pub(super) fn dry_run(
    repo: &Repository,
    select: &Selector,
    located: &Located,
    snap_root: &Path,
    opts: &RestoreOptions,
) -> Result<RestoreSummary> {
    let target = &opts.target;
    if !opts.overwrite.allows_existing() && std::fs::read_dir(target).is_ok_and(|mut d| d.next().is_some()) {
        return Err(Error::TargetNotEmpty { path: target.to_path_buf() });
    }
    let mut s = RestoreSummary::default();
    let mut deleted = 0;
    let mut left = |rel: &Path, held: &HashSet<Vec<u8>>| {
        if let Ok(entries) = std::fs::read_dir(target.join(rel)) {
            deleted += entries.flatten().filter(|e| !held.contains(e.file_name().as_bytes())).count() as u64;
        }
    };
    let delete: Option<Left<'_>> = opts.delete.then_some(&mut left);
    walk_dirs(
        repo,
        select,
        located,
        snap_root,
        &mut |t| match t.node.kind {
            NodeKind::File if !t.another_name => {
                let there = std::fs::symlink_metadata(target.join(t.rel)).ok().map(|m| Existing {
                    is_file: m.is_file(),
                    size: m.len(),
                    mtime: (m.mtime(), m.mtime_nsec() as u32),
                });
                if keeps_existing(opts.overwrite, there, t.node) {
                    s.skipped += 1;
                } else {
                    s.files += 1;
                    s.bytes += t.node.size;
                }
            }
            NodeKind::Dir => s.dirs += 1,
            _ => s.others += 1,
        },
        delete,
    )?;
    s.deleted = deleted;
    Ok(s)
}

/// What is already where a restore puts an entry.
#[derive(Clone, Copy, Debug)]
pub(super) struct Existing {
    pub is_file: bool,
    pub size: u64,
    pub mtime: (i64, u32),
}

/// Whether the entry `there` stays as it is instead of `node` ([`Overwrite`]);
/// the restore and its dry run decide alike.
pub(super) fn keeps_existing(mode: Overwrite, there: Option<Existing>, node: &Node) -> bool {
    let Some(there) = there else { return false };
    let file = there.is_file && node.kind == NodeKind::File;
    let theirs = (node.mtime.0, node.mtime.1);
    match mode {
        Overwrite::Never => true,
        Overwrite::IfNewer => file && there.mtime >= theirs,
        Overwrite::IfChanged => file && there.size == node.size && there.mtime == theirs,
        Overwrite::Refuse | Overwrite::Always => false,
    }
}
