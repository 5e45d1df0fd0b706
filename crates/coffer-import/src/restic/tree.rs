//! Tree blobs: a directory's entries as JSON, `{"nodes": [...]}`, and their metadata.
//!
//! Each node holds `name`, `type` (`file`, `dir`, `symlink`, `dev`, `chardev`, `fifo`,
//! `socket`, `irregular`), `mode`, `mtime`/`atime`/`ctime` (RFC 3339), `uid`, `gid`,
//! `user`, `group`, `inode`, `device_id` (the st_dev, for hard links), `links`, `size`,
//! `content` (a file's data blob ids, in order), `subtree` (a directory's tree),
//! `linktarget` (and `linktarget_raw`, base64, when the target is not UTF-8), `device`
//! (st_rdev), `extended_attributes` (`[{"name", "value": base64}]`), `generic_attributes`
//! (OS-specific, kept raw) and `error`.
//!
//! **Names.** restic writes a name as Go's `strconv.Quote` would, without the outer
//! quotes, inside the JSON string: printable UTF-8 as is, `\"` and `\\`, `\a \b \f \n \r
//! \t \v`, other characters as `\xHH`, `\uHHHH` or `\UHHHHHHHH`, and each byte that is not
//! UTF-8 as `\xHH`. coffer undoes that quoting ([`go_unquote`]) to the name's raw bytes.
//! A name that is empty, `.` or `..`, or holds `/` or NUL, and a second node of a name
//! already seen in the tree, are refused node by node.
//!
//! **Modes.** `mode` is Go's `os.FileMode`: permission bits 0o777 in the low bits, and
//! flags in the high bits. coffer maps it to a Unix `st_mode` ([`Node::st_mode`]):
//!
//! | Go `FileMode` bit | st_mode |
//! |---|---|
//! | 0o777 (permissions) | 0o777 |
//! | `ModeSetuid` 1<<23 | `S_ISUID` 0o4000 |
//! | `ModeSetgid` 1<<22 | `S_ISGID` 0o2000 |
//! | `ModeSticky` 1<<20 | `S_ISVTX` 0o1000 |
//!
//! and the file type bits come from the node's `type` (`dir` S_IFDIR, `symlink` S_IFLNK,
//! `dev` S_IFBLK, `chardev` S_IFCHR, `fifo` S_IFIFO, `socket` S_IFSOCK, `file` S_IFREG;
//! `irregular` and unknown types none), which restic derives from the same mode's type
//! bits (`ModeDir` 1<<31, `ModeSymlink` 1<<27, `ModeDevice` 1<<26, `ModeCharDevice` 1<<21,
//! `ModeNamedPipe` 1<<25, `ModeSocket` 1<<24, `ModeIrregular` 1<<19).

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;

use super::id::BlobId;
use super::time::Timestamp;

/// Largest tree blob read, decompressed: 256 MiB (a directory of about a million
/// entries).
pub const MAX_TREE: u64 = 256 * 1024 * 1024;

/// Go's `os.FileMode` flags that map to st_mode's special bits.
pub const GO_MODE_SETUID: u32 = 1 << 23;
pub const GO_MODE_SETGID: u32 = 1 << 22;
pub const GO_MODE_STICKY: u32 = 1 << 20;
/// Go's `os.FileMode` type bits (all of them).
pub const GO_MODE_TYPE: u32 = (1 << 31) | (1 << 27) | (1 << 26) | (1 << 25) | (1 << 24) | (1 << 21) | (1 << 19);

/// What a node is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum NodeType {
    File,
    Dir,
    Symlink,
    /// A block device.
    Dev,
    CharDev,
    Fifo,
    Socket,
    /// Something the writer could not classify (Windows reparse points, for instance).
    Irregular,
    /// A type this reader does not know, as written.
    Other(String),
}

impl NodeType {
    fn from_str(s: &str) -> NodeType {
        match s {
            "file" => NodeType::File,
            "dir" => NodeType::Dir,
            "symlink" => NodeType::Symlink,
            "dev" => NodeType::Dev,
            "chardev" => NodeType::CharDev,
            "fifo" => NodeType::Fifo,
            "socket" => NodeType::Socket,
            "irregular" => NodeType::Irregular,
            other => NodeType::Other(other.to_string()),
        }
    }

    /// The name restic uses.
    pub fn as_str(&self) -> &str {
        match self {
            NodeType::File => "file",
            NodeType::Dir => "dir",
            NodeType::Symlink => "symlink",
            NodeType::Dev => "dev",
            NodeType::CharDev => "chardev",
            NodeType::Fifo => "fifo",
            NodeType::Socket => "socket",
            NodeType::Irregular => "irregular",
            NodeType::Other(s) => s,
        }
    }

    /// The st_mode file type bits (`S_IFMT`), 0 for irregular and unknown types.
    pub fn st_type_bits(&self) -> u32 {
        match self {
            NodeType::File => 0o100000,
            NodeType::Dir => 0o040000,
            NodeType::Symlink => 0o120000,
            NodeType::Dev => 0o060000,
            NodeType::CharDev => 0o020000,
            NodeType::Fifo => 0o010000,
            NodeType::Socket => 0o140000,
            NodeType::Irregular | NodeType::Other(_) => 0,
        }
    }
}

/// One entry of a directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// The name's raw bytes (see the module's documentation on quoting).
    pub name: Vec<u8>,
    pub node_type: NodeType,
    /// The mode as stored: Go's `os.FileMode` bits. See [`Node::st_mode`].
    pub go_mode: u32,
    pub mtime: Option<Timestamp>,
    pub atime: Option<Timestamp>,
    pub ctime: Option<Timestamp>,
    pub uid: u32,
    pub gid: u32,
    pub user: String,
    pub group: String,
    pub inode: u64,
    /// st_dev of the file (stored for hard links: with `inode` it tells links apart).
    pub device_id: u64,
    pub links: u64,
    pub size: u64,
    /// A file's data blobs, in order.
    pub content: Vec<BlobId>,
    /// A directory's tree.
    pub subtree: Option<BlobId>,
    /// A symbolic link's target, raw bytes (from `linktarget_raw` when present).
    pub link_target: Option<Vec<u8>>,
    /// st_rdev of a device.
    pub device: u64,
    /// Extended attributes: name and value.
    pub extended_attributes: Vec<(String, Vec<u8>)>,
    /// OS-specific attributes (`windows.creation_time`...), as raw JSON values.
    pub generic_attributes: BTreeMap<String, serde_json::Value>,
    /// An error restic recorded while reading the file, if any.
    pub error: Option<String>,
}

impl Node {
    /// The name as text, when it is UTF-8.
    pub fn name_str(&self) -> Option<&str> {
        std::str::from_utf8(&self.name).ok()
    }

    /// The name for messages: UTF-8 with any other byte replaced.
    pub fn name_lossy(&self) -> String {
        String::from_utf8_lossy(&self.name).into_owned()
    }

    /// The Unix st_mode: type bits from the node's type, permissions and the setuid,
    /// setgid and sticky bits from Go's mode (see the module's documentation).
    pub fn st_mode(&self) -> u32 {
        self.node_type.st_type_bits() | go_mode_permissions(self.go_mode)
    }
}

/// The st_mode permission and special bits (0o7777) of Go's `os.FileMode` bits.
pub fn go_mode_permissions(go: u32) -> u32 {
    let mut m = go & 0o777;
    if go & GO_MODE_SETUID != 0 {
        m |= 0o4000;
    }
    if go & GO_MODE_SETGID != 0 {
        m |= 0o2000;
    }
    if go & GO_MODE_STICKY != 0 {
        m |= 0o1000;
    }
    m
}

/// A decoded tree: the nodes kept, in order, and those refused.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Tree {
    pub nodes: Vec<Node>,
    pub rejected: Vec<RejectedNode>,
}

/// A node refused: its place in the tree, its name (lossy) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejectedNode {
    pub position: usize,
    pub name: String,
    pub reason: String,
}

#[derive(Deserialize)]
struct XattrJson {
    name: String,
    #[serde(default)]
    value: Option<String>,
}

#[derive(Deserialize)]
struct NodeJson {
    #[serde(default)]
    name: String,
    #[serde(rename = "type", default)]
    node_type: String,
    #[serde(default)]
    mode: u32,
    #[serde(default)]
    mtime: Option<String>,
    #[serde(default)]
    atime: Option<String>,
    #[serde(default)]
    ctime: Option<String>,
    #[serde(default)]
    uid: u32,
    #[serde(default)]
    gid: u32,
    #[serde(default)]
    user: String,
    #[serde(default)]
    group: String,
    #[serde(default)]
    inode: u64,
    #[serde(default)]
    device_id: u64,
    #[serde(default)]
    size: u64,
    #[serde(default)]
    links: u64,
    #[serde(default)]
    linktarget: Option<String>,
    #[serde(default)]
    linktarget_raw: Option<String>,
    #[serde(default)]
    extended_attributes: Option<Vec<XattrJson>>,
    #[serde(default)]
    generic_attributes: Option<BTreeMap<String, serde_json::Value>>,
    #[serde(default)]
    device: u64,
    #[serde(default)]
    content: Option<Vec<BlobId>>,
    #[serde(default)]
    subtree: Option<BlobId>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Deserialize)]
struct TreeJson {
    #[serde(default)]
    nodes: Option<Vec<serde_json::Value>>,
}

/// Parses a tree blob's JSON. A document that is not a tree is an error; a node that
/// does not parse or whose name is refused goes to [`Tree::rejected`].
pub fn parse_tree(json: &[u8]) -> Result<Tree, String> {
    if json.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err("not a tree: not a JSON object".to_string());
    }
    let j: TreeJson = serde_json::from_slice(json).map_err(|e| format!("not a tree: {e}"))?;
    let mut tree = Tree::default();
    let mut seen = std::collections::HashSet::new();
    for (position, v) in j.nodes.unwrap_or_default().into_iter().enumerate() {
        let fallback = v.get("name").and_then(|n| n.as_str()).unwrap_or("").to_string();
        match serde_json::from_value::<NodeJson>(v)
            .map_err(|e| (fallback.clone(), format!("not a node: {e}")))
            .and_then(parse_node)
        {
            Ok(n) if !seen.insert(n.name.clone()) => tree.rejected.push(RejectedNode {
                position,
                name: n.name_lossy(),
                reason: "a second entry of the same name in this directory".to_string(),
            }),
            Ok(n) => tree.nodes.push(n),
            Err((name, reason)) => tree.rejected.push(RejectedNode { position, name, reason }),
        }
    }
    Ok(tree)
}

fn time(field: &str, v: Option<String>) -> Result<Option<Timestamp>, String> {
    match v {
        None => Ok(None),
        Some(s) => Timestamp::parse(&s).map(Some).ok_or_else(|| format!("{field} {s:?} is not RFC 3339")),
    }
}

fn parse_node(j: NodeJson) -> Result<Node, (String, String)> {
    let name = go_unquote(&j.name).map_err(|e| (j.name.clone(), format!("name: {e}")))?;
    let lossy = String::from_utf8_lossy(&name).into_owned();
    let fail = |reason: String| (lossy.clone(), reason);
    check_name(&name).map_err(|r| fail(r.to_string()))?;
    let node_type = NodeType::from_str(&j.node_type);
    let link_target = match (j.linktarget_raw, j.linktarget) {
        (Some(raw), _) => Some(STANDARD.decode(raw).map_err(|_| fail("linktarget_raw is not base64".into()))?),
        (None, Some(t)) => Some(t.into_bytes()),
        (None, None) => None,
    };
    let mut xattrs = Vec::new();
    for x in j.extended_attributes.unwrap_or_default() {
        let value = match x.value {
            Some(v) => {
                STANDARD.decode(v).map_err(|_| fail(format!("extended attribute {:?}: value is not base64", x.name)))?
            }
            None => Vec::new(),
        };
        xattrs.push((x.name, value));
    }
    if node_type == NodeType::Dir && j.subtree.is_none() {
        return Err(fail("a directory without a subtree".into()));
    }
    Ok(Node {
        name,
        node_type,
        go_mode: j.mode,
        mtime: time("mtime", j.mtime).map_err(&fail)?,
        atime: time("atime", j.atime).map_err(&fail)?,
        ctime: time("ctime", j.ctime).map_err(&fail)?,
        uid: j.uid,
        gid: j.gid,
        user: j.user,
        group: j.group,
        inode: j.inode,
        device_id: j.device_id,
        links: j.links,
        size: j.size,
        content: j.content.unwrap_or_default(),
        subtree: j.subtree,
        link_target,
        device: j.device,
        extended_attributes: xattrs,
        generic_attributes: j.generic_attributes.unwrap_or_default(),
        error: j.error.filter(|e| !e.is_empty()),
    })
}

/// Refuses names that cannot be one entry of a directory.
pub fn check_name(name: &[u8]) -> Result<(), &'static str> {
    match name {
        b"" => Err("an empty name"),
        b"." | b".." => Err("the name '.' or '..'"),
        _ if name.contains(&b'/') => Err("a name holding '/'"),
        _ if name.contains(&0) => Err("a name holding NUL"),
        _ => Ok(()),
    }
}

fn hex_val(c: u8) -> Option<u32> {
    (c as char).to_digit(16)
}

/// Undoes Go's `strconv.Quote` escaping of a string (given without its outer quotes) to
/// raw bytes. Refuses what Go's `strconv.Unquote` refuses: bad escapes, an unescaped `"`
/// or newline, a `\u` or `\U` that is not a Unicode scalar value, an octal above 0o377.
pub fn go_unquote(s: &str) -> Result<Vec<u8>, String> {
    if !s.contains(['\\', '"', '\n']) {
        return Ok(s.as_bytes().to_vec());
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'"' || c == b'\n' {
            return Err("an unescaped quote or newline".to_string());
        }
        if c != b'\\' {
            out.push(c);
            i += 1;
            continue;
        }
        let Some(&e) = b.get(i + 1) else {
            return Err("a lone backslash at the end".to_string());
        };
        i += 2;
        let simple = match e {
            b'a' => Some(7u8),
            b'b' => Some(8),
            b'f' => Some(12),
            b'n' => Some(b'\n'),
            b'r' => Some(b'\r'),
            b't' => Some(b'\t'),
            b'v' => Some(11),
            b'\\' => Some(b'\\'),
            b'"' => Some(b'"'),
            _ => None,
        };
        if let Some(v) = simple {
            out.push(v);
            continue;
        }
        match e {
            b'x' | b'u' | b'U' => {
                let n = match e {
                    b'x' => 2,
                    b'u' => 4,
                    _ => 8,
                };
                let digits = b.get(i..i + n).ok_or("a short escape")?;
                let mut v = 0u32;
                for &d in digits {
                    v = v * 16 + hex_val(d).ok_or("a bad hex digit in an escape")?;
                }
                i += n;
                if e == b'x' {
                    out.push(v as u8);
                } else {
                    let ch = char::from_u32(v).ok_or(format!("escape of {v:#x}, not a Unicode scalar value"))?;
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                }
            }
            b'0'..=b'7' => {
                let digits = b.get(i - 1..i + 2).ok_or("a short octal escape")?;
                let mut v = 0u32;
                for &d in digits {
                    if !(b'0'..=b'7').contains(&d) {
                        return Err("a bad octal escape".to_string());
                    }
                    v = v * 8 + u32::from(d - b'0');
                }
                if v > 255 {
                    return Err("an octal escape above \\377".to_string());
                }
                i += 2;
                out.push(v as u8);
            }
            _ => return Err(format!("an unknown escape \\{}", e as char)),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unquotes_like_go() {
        assert_eq!(go_unquote("plain é").unwrap(), "plain é".as_bytes());
        assert_eq!(go_unquote(r"a\xffb").unwrap(), b"a\xffb");
        assert_eq!(go_unquote(r#"q\"b\\s\n\t\a\v\f\r\b"#).unwrap(), b"q\"b\\s\n\t\x07\x0b\x0c\r\x08");
        assert_eq!(go_unquote(r"\u00e9\U0001F600\101").unwrap(), "é😀A".as_bytes());
        for bad in [r"\", r"\q", r"\x1", r"\ud800", r"\400", "a\"b", "a\nb", r"\U00110000"] {
            assert!(go_unquote(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn nodes_and_refusals() {
        let t = parse_tree(
            br#"{"nodes":[
            {"name":"f\\xfe","type":"file","mode":8389101,"mtime":"2026-01-01T00:00:00.5Z","content":[]},
            {"name":"..","type":"file"},
            {"name":"a/b","type":"file"},
            {"name":"d","type":"dir"},
            {"name":"x","type":"whatever","mode":1048576},
            {"name":"x","type":"file"}
        ]}"#,
        )
        .unwrap();
        assert_eq!(t.nodes.len(), 2);
        assert_eq!(t.nodes[0].name, b"f\xfe");
        // 8389101 = ModeSetuid | 0o755
        assert_eq!(t.nodes[0].st_mode(), 0o104755);
        assert_eq!(t.nodes[1].node_type, NodeType::Other("whatever".into()));
        assert_eq!(t.nodes[1].st_mode(), 0o1000);
        assert_eq!(t.rejected.iter().map(|r| r.position).collect::<Vec<_>>(), vec![1, 2, 3, 5]);
        assert!(parse_tree(b"[]").is_err());
    }
}
