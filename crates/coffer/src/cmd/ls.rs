//! `coffer ls`.

use std::path::{Path, PathBuf};

use std::os::unix::ffi::OsStrExt;

use anyhow::Result;
use coffer_core::format::bytes::Bytes;
use coffer_core::format::tree::{Node, NodeKind};
use coffer_core::repo::SnapshotFilter;
use coffer_core::repo::tree_walk::{Located, locate, walk_bounded};
use serde_json::json;

use crate::args::{GlobalArgs, LsArgs};
use crate::{exit, output, repo_open};

fn kind_char(k: NodeKind) -> char {
    match k {
        NodeKind::File => '-',
        NodeKind::Dir => 'd',
        NodeKind::Symlink => 'l',
        NodeKind::Fifo => 'p',
        NodeKind::Chardev => 'c',
        NodeKind::Blockdev => 'b',
        NodeKind::Socket => 's',
    }
}

fn mode_string(n: &Node) -> String {
    let mut s = String::with_capacity(10);
    s.push(kind_char(n.kind));
    let m = n.mode;
    for (shift, special, ch) in [(6, 0o4000, 's'), (3, 0o2000, 's'), (0, 0o1000, 't')] {
        let bits = (m >> shift) & 7;
        s.push(if bits & 4 != 0 { 'r' } else { '-' });
        s.push(if bits & 2 != 0 { 'w' } else { '-' });
        s.push(match (bits & 1 != 0, m & special != 0) {
            (true, true) => ch,
            (false, true) => ch.to_ascii_uppercase(),
            (true, false) => 'x',
            (false, false) => '-',
        });
    }
    s
}

fn print(global: &GlobalArgs, long: bool, path: &Path, n: &Node) {
    if global.json {
        // Paths are exact bytes: a string when UTF-8, else {"hex": …} (as names in trees).
        let exact = Bytes(path.as_os_str().as_bytes().to_vec());
        // Times as RFC 3339 strings (the tree stores seconds and nanoseconds).
        let mut node = json!(n);
        node["mtime"] = json!(output::rfc3339(n.mtime.0, n.mtime.1));
        node["ctime"] = json!(output::rfc3339(n.ctime.0, n.ctime.1));
        output::json(&json!({"type": "node", "path": exact, "node": node}));
    } else if long {
        let owner = n.user.clone().unwrap_or_else(|| n.uid.to_string());
        let group = n.group.clone().unwrap_or_else(|| n.gid.to_string());
        let target = n.target.as_ref().map(|t| format!(" -> {}", t.display())).unwrap_or_default();
        println!(
            "{} {owner:>8} {group:>8} {:>12} {} {}{target}",
            mode_string(n),
            n.size,
            output::file_time(n.mtime.0),
            path.display()
        );
    } else {
        println!("{}", path.display());
    }
}

pub fn run(global: &GlobalArgs, a: &LsArgs) -> Result<u8> {
    let (repo, id, snap) = repo_open::open_finding_one(global, &a.snapshot, &SnapshotFilter::from(&a.filter))?;
    super::flag_signature(&id, &snap);
    let start = Path::new("/").join(a.path.clone().unwrap_or_default());
    let tree = match locate(&repo, snap.tree, &start)? {
        Located::Root(id) => id,
        Located::Entry(n) => {
            print(global, a.long, &start, &n);
            match n.subtree {
                Some(id) if n.kind == NodeKind::Dir => id,
                _ => return Ok(exit::OK),
            }
        }
    };
    let prefix: PathBuf = start;
    let mut left_out = 0u64;
    let mut print_entry = |p: &Path, n: &Node| {
        print(global, a.long, p, n);
        Ok(())
    };
    walk_bounded(&repo, tree, &prefix, &mut print_entry, &mut |t| {
        left_out += 1;
        repo_open::warn(global, &t.to_string());
        Ok(())
    })?;
    repo_open::report_bad_copies(global, &repo);
    // The listing lacks what was left out.
    Ok(if left_out > 0 { exit::INCOMPLETE } else { exit::OK })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes() {
        let mut n: Node =
            serde_json::from_value(json!({"name": "a", "type": "file", "mode": 0o4755, "uid": 0, "gid": 0,
            "mtime": [0, 0], "ctime": [0, 0]}))
            .unwrap();
        assert_eq!(mode_string(&n), "-rwsr-xr-x");
        n.mode = 0o1644;
        assert_eq!(mode_string(&n), "-rw-r--r-T");
    }
}
