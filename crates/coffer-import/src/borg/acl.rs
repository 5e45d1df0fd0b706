//! A Linux POSIX ACL as borg records it (`acl_access`, `acl_default`), turned
//! into the value of the extended attribute Linux keeps it in
//! (`system.posix_acl_access`, `system.posix_acl_default`), which is how a
//! coffer backup of the same file holds it.
//!
//! borg's text is one entry per line, `TAG:QUALIFIER:PERMS[:ID]`: `user::rw-`
//! (the owner), `user:ann:rw-:1000` (a named user, its id last), `group::r--`,
//! `group:staff:r-x:50`, `mask::rwx`, `other::r--`. With `--numeric-ids` the
//! qualifier is the id itself and the fourth field is absent. The id recorded is
//! the one kept: coffer stores owners by number, as the file system does.
//!
//! The attribute's value is little-endian: a `u32` version (2), then per entry a
//! `u16` tag, a `u16` permission set (r 4, w 2, x 1) and a `u32` id (all ones for
//! the entries that name no one), sorted by tag, then id, as Linux requires.

/// The name of the attribute holding a file's access ACL.
pub const ACCESS_XATTR: &[u8] = b"system.posix_acl_access";
/// The name of the attribute holding a directory's default ACL.
pub const DEFAULT_XATTR: &[u8] = b"system.posix_acl_default";

/// The most entries an ACL may have (Linux allows fewer on most file systems).
pub const MAX_ENTRIES: usize = 4096;

const VERSION: u32 = 2;
const USER_OBJ: u16 = 0x01;
const USER: u16 = 0x02;
const GROUP_OBJ: u16 = 0x04;
const GROUP: u16 = 0x08;
const MASK: u16 = 0x10;
const OTHER: u16 = 0x20;
const NO_ID: u32 = u32::MAX;

/// borg's text of an ACL as the attribute's value; why not, for text that is no
/// ACL (an unknown tag, a permission other than `r`, `w`, `x` or `-`, a named
/// entry without a number, one entry twice, no owner, group or other entry, or
/// named entries without a mask).
pub fn to_xattr(text: &[u8]) -> Result<Vec<u8>, String> {
    let text = std::str::from_utf8(text).map_err(|_| "an ACL that is not text".to_string())?;
    let mut entries: Vec<(u16, u32, u16)> = Vec::new();
    for line in text.split(['\n', ',']) {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        if entries.len() == MAX_ENTRIES {
            return Err(format!("an ACL of more than {MAX_ENTRIES} entries"));
        }
        entries.push(entry(line).map_err(|why| format!("ACL entry {line:?}: {why}"))?);
    }
    entries.sort_unstable();
    if entries.windows(2).any(|w| (w[0].0, w[0].1) == (w[1].0, w[1].1)) {
        return Err("an ACL naming one entry twice".into());
    }
    let has = |tag: u16| entries.iter().any(|e| e.0 == tag);
    if !(has(USER_OBJ) && has(GROUP_OBJ) && has(OTHER)) {
        return Err("an ACL without its owner, group or other entry".into());
    }
    if (has(USER) || has(GROUP)) && !has(MASK) {
        return Err("an ACL with named entries and no mask".into());
    }
    let mut out = Vec::with_capacity(4 + entries.len() * 8);
    out.extend_from_slice(&VERSION.to_le_bytes());
    for (tag, id, perm) in entries {
        out.extend_from_slice(&tag.to_le_bytes());
        out.extend_from_slice(&perm.to_le_bytes());
        out.extend_from_slice(&id.to_le_bytes());
    }
    Ok(out)
}

/// One entry: (tag, id, permissions).
fn entry(line: &str) -> Result<(u16, u32, u16), String> {
    let fields: Vec<&str> = line.split(':').collect();
    let (kind, qualifier, perms, id) = match fields[..] {
        [k, q, p] => (k, q, p, None),
        [k, q, p, id] => (k, q, p, Some(id)),
        _ => return Err("not TAG:QUALIFIER:PERMISSIONS[:ID]".into()),
    };
    let number = |s: &str| s.parse::<u32>().ok().filter(|&n| n != NO_ID);
    let named = || -> Result<u32, String> {
        id.and_then(number).or_else(|| number(qualifier)).ok_or_else(|| "a named entry without its number".to_string())
    };
    let (tag, id) = match (kind, qualifier.is_empty()) {
        ("user" | "u", true) => (USER_OBJ, NO_ID),
        ("user" | "u", false) => (USER, named()?),
        ("group" | "g", true) => (GROUP_OBJ, NO_ID),
        ("group" | "g", false) => (GROUP, named()?),
        ("mask" | "m", true) => (MASK, NO_ID),
        ("other" | "o", true) => (OTHER, NO_ID),
        _ => return Err(format!("no ACL entry is tagged {kind:?} with qualifier {qualifier:?}")),
    };
    if perms.len() > 3 {
        return Err(format!("permissions {perms:?}"));
    }
    let mut bits = 0u16;
    for (i, c) in perms.chars().enumerate() {
        bits |= match (i, c) {
            (_, '-') => 0,
            (0, 'r') => 4,
            (1, 'w') => 2,
            (2, 'x') => 1,
            _ => return Err(format!("permissions {perms:?}")),
        };
    }
    Ok((tag, id, bits))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(entries: &[(u16, u16, u32)]) -> Vec<u8> {
        let mut v = VERSION.to_le_bytes().to_vec();
        for (tag, perm, id) in entries {
            v.extend_from_slice(&tag.to_le_bytes());
            v.extend_from_slice(&perm.to_le_bytes());
            v.extend_from_slice(&id.to_le_bytes());
        }
        v
    }

    #[test]
    fn borg_text_becomes_the_attribute_linux_keeps() {
        let text = b"user::rw-\ngroup:staff:r-x:50\nuser:ann:rw-:1000\ngroup::r--\nmask::rwx\nother::r--";
        let want = value(&[
            (USER_OBJ, 6, NO_ID),
            (USER, 6, 1000),
            (GROUP_OBJ, 4, NO_ID),
            (GROUP, 5, 50),
            (MASK, 7, NO_ID),
            (OTHER, 4, NO_ID),
        ]);
        assert_eq!(to_xattr(text).unwrap(), want);
        // --numeric-ids: the qualifier is the number.
        let numeric = b"user::rw-\nuser:1000:rw-\ngroup::r--\ngroup:50:r-x\nmask::rwx\nother::r--\n";
        assert_eq!(to_xattr(numeric).unwrap(), want);
        // A comment or a blank line is passed over; the number recorded wins over a name.
        let commented =
            b"# file: x\nuser::rw-\nuser:1000:rw-:1000\n\ngroup::r--\ngroup:50:r-x:50\nmask::rwx\nother::r--";
        assert_eq!(to_xattr(commented).unwrap(), want);
        // Only the three base entries.
        let base = value(&[(USER_OBJ, 7, NO_ID), (GROUP_OBJ, 5, NO_ID), (OTHER, 0, NO_ID)]);
        assert_eq!(to_xattr(b"user::rwx\ngroup::r-x\nother::---").unwrap(), base);
    }

    #[test]
    fn what_is_no_acl_is_refused_with_the_reason() {
        for (text, why) in [
            (&b"user::rw-\ngroup::r--"[..], "other entry"),
            (b"user::rw-\nuser:ann:rw-\ngroup::r--\nmask::rw-\nother::r--", "without its number"),
            (b"user::rw-\nuser:ann:rw-:1000\ngroup::r--\nother::r--", "no mask"),
            (b"user::rw-\nuser::r--\ngroup::r--\nother::r--", "twice"),
            (b"user::rwz\ngroup::r--\nother::r--", "permissions"),
            (b"user::wr-\ngroup::r--\nother::r--", "permissions"),
            (b"owner::rw-\ngroup::r--\nother::r--", "tagged"),
            (b"mask:ann:rw-\ngroup::r--\nother::r--", "tagged"),
            (b"user:rw-\ngroup::r--\nother::r--", "TAG:QUALIFIER"),
            (b"user:ann:rw-:4294967295\nuser::rw-\ngroup::r--\nmask::rw-\nother::r--", "without its number"),
            (b"user::rw-\xff", "not text"),
        ] {
            let err = to_xattr(text).unwrap_err();
            assert!(err.contains(why), "{:?}: {err}", String::from_utf8_lossy(text));
        }
        let many: String = (0..=MAX_ENTRIES).map(|i| format!("user:{i}:r--\n")).collect();
        assert!(to_xattr(many.as_bytes()).unwrap_err().contains("more than"));
    }
}
