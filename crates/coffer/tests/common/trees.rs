//! Trees for import tests: one holding every kind of entry the tools record,
//! and a description of a restored tree, entry by entry, to compare two
//! restores of the same snapshot.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use super::random_bytes;

/// A tree with what restic records: files of several blobs, an empty file,
/// a symbolic link, a name that is not UTF-8, a FIFO, a hard link, special
/// mode bits and (where the file system has them) extended attributes.
pub fn make_source(src: &Path) {
    std::fs::create_dir_all(src.join("dir/deeper")).unwrap();
    for i in 0..12u64 {
        std::fs::write(src.join(format!("f{i}")), random_bytes(10_000 + i as usize * 7_000, i)).unwrap();
    }
    std::fs::write(src.join("dir/large.bin"), random_bytes(5 << 20, 99)).unwrap();
    std::fs::write(src.join("dir/deeper/empty"), b"").unwrap();
    std::os::unix::fs::symlink("../f1", src.join("dir/link")).unwrap();
    std::fs::write(src.join(OsStr::from_bytes(b"name-\xff\xfe")), b"latin-1 name").unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        src.join("fifo"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o640),
        0,
    )
    .unwrap();
    std::fs::hard_link(src.join("f2"), src.join("dir/f2-link")).unwrap();
    let tool = src.join("tool");
    std::fs::write(&tool, b"#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o4755)).unwrap();
    std::fs::set_permissions(src.join("dir/deeper"), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let _ = xattr::set(src.join("f3"), "user.comment", b"kept");
}

pub const ACL_USER: u16 = 0x02;
pub const ACL_GROUP: u16 = 0x08;

/// A POSIX ACL in the kernel's xattr format (version 2): owner rw-, group r--,
/// other ---, the given named entries (tag, permissions, id) and the mask.
pub fn posix_acl(named: &[(u16, u16, u32)], mask: u16) -> Vec<u8> {
    const UNDEFINED: u32 = u32::MAX;
    let mut entries =
        vec![(0x01u16, 6u16, UNDEFINED), (0x04, 4, UNDEFINED), (0x10, mask, UNDEFINED), (0x20, 0, UNDEFINED)];
    entries.extend_from_slice(named);
    entries.sort();
    let mut v = 2u32.to_le_bytes().to_vec();
    for (tag, perm, id) in entries {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

/// What a restored tree holds, entry by entry (relative path → description):
/// type, permission and special bits, owner, modification time, size, content
/// or link target, extended attributes, and which entries share an inode.
pub fn describe(root: &Path) -> BTreeMap<Vec<u8>, String> {
    let mut out = BTreeMap::new();
    // Files sharing an inode are told by the first of their paths in order.
    let mut inodes: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    let mut files: Vec<(Vec<u8>, u64)> = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            let md = std::fs::symlink_metadata(&p).unwrap();
            let rel = p.strip_prefix(root).unwrap().as_os_str().as_bytes().to_vec();
            let ft = md.file_type();
            let what = if ft.is_dir() {
                stack.push(p.clone());
                "dir".to_string()
            } else if ft.is_symlink() {
                format!("link -> {:?}", std::fs::read_link(&p).unwrap())
            } else if ft.is_file() {
                let first = inodes.entry(md.ino()).or_insert_with(|| rel.clone());
                *first = (*first).clone().min(rel.clone());
                files.push((rel.clone(), md.ino()));
                format!("file {} {}", md.len(), blake3::hash(&std::fs::read(&p).unwrap()))
            } else {
                format!("special {:o}", md.mode() & 0o170000)
            };
            let mtime = if ft.is_symlink() { String::new() } else { format!("{}.{:09}", md.mtime(), md.mtime_nsec()) };
            let xattrs: Vec<String> = xattr::list(&p)
                .map(|names| {
                    names
                        .filter(|n| n.as_bytes().starts_with(b"user."))
                        .map(|n| format!("{n:?}={:?}", xattr::get(&p, &n).ok().flatten()))
                        .collect()
                })
                .unwrap_or_default();
            out.insert(
                rel,
                format!(
                    "{what} mode {:o} owner {}:{} mtime {mtime} xattrs {xattrs:?}",
                    md.mode() & 0o7777,
                    md.uid(),
                    md.gid()
                ),
            );
        }
    }
    for (rel, ino) in files {
        let first = String::from_utf8_lossy(&inodes[&ino]).into_owned();
        out.get_mut(&rel).unwrap().push_str(&format!(" linked-with {first}"));
    }
    out
}
