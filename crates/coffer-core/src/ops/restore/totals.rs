//! The totals a progress display shows: a separate walk of the trees, made only
//! when the display wants them, that counts what the restore will write without
//! keeping any of it. Like the restore's own walk, it keeps an explicit stack
//! and one path buffer, so its depth costs no recursion.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::plan::{Entries, load_tree};
use super::{RestoreSummary, Selector};
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
    let mut stack = vec![Frame { rest: nodes, selected: false, snap_len: snap.len() }];
    while let Some(top) = stack.last_mut() {
        // A part that does not load ends its directory here (the restore reports it).
        let Some(Ok(node)) = top.rest.next() else {
            snap.truncate(top.snap_len);
            stack.pop();
            continue;
        };
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
                stack.push(Frame { rest, selected, snap_len });
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

/// What a restore would write, counted without touching the target (`--dry-run`).
pub(super) fn dry_run(
    repo: &Repository,
    select: &Selector,
    located: &Located,
    snap_root: &Path,
) -> Result<RestoreSummary> {
    let mut s = RestoreSummary::default();
    walk(repo, select, located, snap_root, &mut |t| match t.node.kind {
        NodeKind::File if !t.another_name => {
            s.files += 1;
            s.bytes += t.node.size;
        }
        NodeKind::Dir => s.dirs += 1,
        _ => s.others += 1,
    })?;
    Ok(s)
}
