//! The totals a progress display shows: a separate walk of the trees, made only
//! when the display wants them, that counts what the restore will write without
//! keeping any of it. Like the restore's own walk, it keeps an explicit stack
//! and one path buffer, so its depth costs no recursion.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::Selector;
use super::plan::{Entries, load_tree};
use crate::error::{Error, Result};
use crate::format::tree::NodeKind;
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

/// Counts what restoring `located` (found at `snap_root`) writes. A tree that
/// cannot be loaded counts as empty (the restore reports it).
pub(super) fn count(repo: &Repository, select: &Selector, located: &Located, snap_root: &Path) -> Result<Totals> {
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
    let mut seen: HashSet<(u64, u64)> = HashSet::new();
    let mut totals = Totals::default();
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
        match (judged, node.subtree) {
            (Some(selected), Some(id)) if is_dir => {
                let rest = load_tree(repo, &id).unwrap_or(Entries::Listed(Vec::new().into_iter()));
                stack.push(Frame { rest, selected, snap_len });
                continue;
            }
            (Some(true), _)
                if node.kind == NodeKind::File && (node.links <= 1 || seen.insert((node.device, node.inode))) =>
            {
                totals.bytes += node.size;
                totals.files += 1;
            }
            _ => {}
        }
        snap.truncate(snap_len);
    }
    Ok(totals)
}
