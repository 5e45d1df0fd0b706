//! Who may open what through a mount shared with other users (`mount
//! --allow-other`): the classic Unix permission check on an entry's recorded
//! owner, group and mode, for the user asking. The kernel makes the same check
//! first when the mount has `default_permissions`; this one is the file system's
//! own, so that a kernel or mount without it still keeps a file to those its
//! mode lets in.

use super::Attr;

/// The user asking: what the kernel reports of the calling process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    /// Effective user id.
    pub uid: u32,
    /// Effective group id.
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
}

/// What the caller wants to do with the entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Read a file's content or list a directory (`r`).
    Read,
    /// Look up a name in a directory (`x`).
    Search,
}

/// Whether `caller` may `want` the entry `attr`: by the owner's bits if the
/// caller owns it, else by the group's if the caller is in its group, else by
/// the others' bits. Root may read anything, and search a directory (as the
/// kernel lets root do).
pub fn permits(attr: &Attr, caller: &Caller, want: Access) -> bool {
    if caller.uid == 0 {
        return true;
    }
    let bit = match want {
        Access::Read => 0o4,
        Access::Search => 0o1,
    };
    let class = if caller.uid == attr.uid {
        6
    } else if caller.gid == attr.gid || caller.groups.contains(&attr.gid) {
        3
    } else {
        0
    };
    (attr.perm >> class) & bit != 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vfs::Kind;
    use std::time::SystemTime;

    fn attr(perm: u16, uid: u32, gid: u32) -> Attr {
        let t = SystemTime::UNIX_EPOCH;
        Attr { ino: 20, kind: Kind::File, size: 1, perm, nlink: 1, uid, gid, rdev: 0, mtime: t, ctime: t }
    }

    fn caller(uid: u32, gid: u32, groups: &[u32]) -> Caller {
        Caller { uid, gid, groups: groups.to_vec() }
    }

    #[test]
    fn a_private_file_is_kept_from_other_users() {
        let secret = attr(0o600, 0, 0);
        assert!(permits(&secret, &caller(0, 0, &[]), Access::Read));
        assert!(!permits(&secret, &caller(1000, 1000, &[]), Access::Read));
        assert!(!permits(&secret, &caller(1000, 0, &[0]), Access::Read), "group bits are 0");
        let shared = attr(0o640, 1, 50);
        assert!(permits(&shared, &caller(1, 1, &[]), Access::Read), "the owner");
        assert!(permits(&shared, &caller(2, 50, &[]), Access::Read), "the group");
        assert!(permits(&shared, &caller(2, 7, &[9, 50]), Access::Read), "a supplementary group");
        assert!(!permits(&shared, &caller(2, 7, &[9]), Access::Read), "others");
        // The owner class decides, even when a wider class would allow.
        assert!(!permits(&attr(0o044, 5, 5), &caller(5, 5, &[]), Access::Read));
        let dir = attr(0o711, 0, 0);
        assert!(permits(&dir, &caller(1000, 1000, &[]), Access::Search));
        assert!(!permits(&dir, &caller(1000, 1000, &[]), Access::Read));
        assert!(!permits(&attr(0o700, 0, 0), &caller(1000, 1000, &[]), Access::Search));
    }
}
