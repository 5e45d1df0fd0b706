//! Access keys and their levels: who may do what through the server. A key is
//! an S3 access key id and secret (SigV4) with one level; the store is
//! `keys.json` in the state directory. The rules of each level are in
//! [`Level::allows`]. See docs/design.md#server.

use std::path::{Path, PathBuf};

use coffer_core::format::ObjectKind;
use serde::{Deserialize, Serialize};

use crate::ServerError;
use crate::state;

/// What a key may do. A closed set; docs/design.md#server has the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Level {
    /// Add new objects, read what a backup needs, rewrite and delete its own
    /// session markers; never delete or replace anything else.
    Append,
    /// As `append`, without reading packs (`data/`): write-only for data.
    AppendNodata,
    /// Read and list only (restore, check).
    Read,
    /// As `append`, and delete: deletions go to the trash, restorable for
    /// the trash period.
    Prune,
    /// Everything, `config` replaced included; deletions go to the trash too.
    Admin,
}

/// A request, as far as levels care.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// GET (whole or a range).
    Get,
    /// HEAD.
    Head,
    /// LIST.
    List,
    /// PUT of a name that does not exist yet (or holds the same bytes).
    Create,
    /// PUT of different bytes over an existing name.
    Replace,
    /// DELETE.
    Delete,
}

impl Level {
    /// All levels, for help and errors.
    pub const ALL: [Level; 5] = [Level::Append, Level::AppendNodata, Level::Read, Level::Prune, Level::Admin];

    /// The level's name, as the command line spells it.
    pub fn name(self) -> &'static str {
        match self {
            Level::Append => "append",
            Level::AppendNodata => "append-nodata",
            Level::Read => "read",
            Level::Prune => "prune",
            Level::Admin => "admin",
        }
    }

    /// Parses a level name.
    pub fn parse(s: &str) -> Option<Level> {
        Level::ALL.into_iter().find(|l| l.name() == s)
    }

    /// Whether this level may do `op` on an object of `kind`; `own_session`
    /// says whether a session marker was written by the same key. The error
    /// says what is refused and which level would allow it.
    pub fn allows(self, op: Op, kind: Option<ObjectKind>, own_session: bool) -> Result<(), String> {
        use Level::*;
        let writes = matches!(self, Append | AppendNodata | Prune | Admin);
        let ok = match op {
            Op::List | Op::Head => true,
            Op::Get => !(self == AppendNodata && kind == Some(ObjectKind::Pack)),
            // A prune announces deletes in a notice; a layout decides where
            // packs are stored. Neither is a backup's to write.
            Op::Create => match kind {
                Some(ObjectKind::PruneNotice) => matches!(self, Prune | Admin),
                Some(ObjectKind::Layout) => self == Admin,
                _ => writes,
            },
            // Session markers are the objects a backup rewrites (its heartbeat).
            Op::Replace => self == Admin || (writes && kind == Some(ObjectKind::Session) && own_session),
            Op::Delete => match self {
                Admin => true,
                // What a prune and forget delete; the repository's identity
                // (config, key files, writer records, layouts) and its
                // tombstones, which coffer never deletes, are an admin's.
                Prune => !kind.is_some_and(admin_deletes),
                Append | AppendNodata => kind == Some(ObjectKind::Session) && own_session,
                Read => false,
            },
        };
        if ok {
            return Ok(());
        }
        let what = match op {
            Op::Get => "reading packs (data/)",
            Op::Create => "writing",
            Op::Replace => "replacing an existing object with different bytes",
            Op::Delete => "deleting",
            Op::List | Op::Head => "this",
        };
        let needs = match (op, kind) {
            (Op::Get, _) => "append, read, prune or admin",
            (Op::Create, Some(ObjectKind::PruneNotice)) => "prune or admin (prune notices are a prune's)",
            (Op::Create, Some(ObjectKind::Layout)) => "admin (a layout decides where packs are stored)",
            (Op::Create, _) => "append, append-nodata, prune or admin",
            (Op::Delete, Some(ObjectKind::Session)) if !own_session => {
                "prune or admin (a session marker written by another key)"
            }
            (Op::Delete, Some(k)) if admin_deletes(k) => {
                "admin (config, key files, writer records, layouts and tombstones are deleted only by admin keys)"
            }
            (Op::Delete, _) => "prune or admin",
            (Op::Replace, Some(ObjectKind::Session)) => "admin (a session marker written by another key)",
            _ => "admin",
        };
        Err(format!("the access key's level is {}, which does not allow {what}; that needs {needs}", self.name()))
    }
}

/// The kinds only an `admin` key deletes.
fn admin_deletes(kind: ObjectKind) -> bool {
    matches!(
        kind,
        ObjectKind::Config | ObjectKind::Key | ObjectKind::Writer | ObjectKind::Layout | ObjectKind::Tombstone
    )
}

/// One access key.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AccessKey {
    /// A name for people (`laptop`, `nightly`).
    pub name: String,
    /// The S3 access key id.
    pub id: String,
    /// The S3 secret access key.
    pub secret: String,
    /// What the key may do.
    pub level: Level,
    /// Bytes this key may add, if limited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota: Option<u64>,
    /// When the key was made (seconds since the Unix epoch).
    pub created: u64,
}

/// The keys of `keys.json`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct KeyFile {
    /// Every key, in the order added.
    pub keys: Vec<AccessKey>,
}

impl KeyFile {
    /// The key with access key id `id`.
    pub fn by_id(&self, id: &str) -> Option<&AccessKey> {
        self.keys.iter().find(|k| k.id == id)
    }
}

/// Where the keys of the state directory `dir` are.
pub fn path(dir: &Path) -> PathBuf {
    dir.join("keys.json")
}

fn random_hex(n: usize) -> String {
    let mut b = vec![0u8; n];
    getrandom::fill(&mut b).expect("the system's random generator");
    hex::encode(b)
}

/// Adds a key named `name` and returns it (with its secret, shown once).
pub fn add(dir: &Path, name: &str, level: Level, quota: Option<u64>) -> Result<AccessKey, ServerError> {
    if name.is_empty() || name.len() > 64 || !name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.@".contains(c)) {
        return Err(ServerError::Invalid(format!(
            "key name {name:?}: use 1 to 64 letters, digits, '-', '_', '.' or '@'"
        )));
    }
    let mut file: KeyFile = state::read_json(&path(dir))?;
    if file.keys.iter().any(|k| k.name == name) {
        return Err(ServerError::Invalid(format!(
            "a key named {name:?} exists: remove it first (`coffer serve key remove {name}`) or pick another name"
        )));
    }
    let created = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let key = AccessKey {
        name: name.to_string(),
        id: format!("CF{}", random_hex(9).to_uppercase()),
        secret: random_hex(24),
        level,
        quota,
        created,
    };
    file.keys.push(key.clone());
    state::write_json(&path(dir), &file)?;
    Ok(key)
}

/// Removes the key named `name`; false if there was none.
pub fn remove(dir: &Path, name: &str) -> Result<bool, ServerError> {
    let mut file: KeyFile = state::read_json(&path(dir))?;
    let before = file.keys.len();
    file.keys.retain(|k| k.name != name);
    if file.keys.len() == before {
        return Ok(false);
    }
    state::write_json(&path(dir), &file)?;
    Ok(true)
}

/// Every key.
pub fn list(dir: &Path) -> Result<Vec<AccessKey>, ServerError> {
    Ok(state::read_json::<KeyFile>(&path(dir))?.keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels() {
        let p = Some(ObjectKind::Pack);
        let s = Some(ObjectKind::Snapshot);
        let m = Some(ObjectKind::Session);
        assert!(Level::Append.allows(Op::Get, p, false).is_ok());
        assert!(Level::AppendNodata.allows(Op::Get, p, false).is_err());
        assert!(Level::AppendNodata.allows(Op::Get, s, false).is_ok());
        assert!(Level::Read.allows(Op::Create, s, false).is_err());
        assert!(Level::Append.allows(Op::Delete, s, false).unwrap_err().contains("prune"));
        assert!(Level::Append.allows(Op::Delete, m, true).is_ok());
        assert!(Level::Append.allows(Op::Delete, m, false).is_err());
        assert!(Level::Append.allows(Op::Replace, m, true).is_ok());
        assert!(Level::Prune.allows(Op::Replace, s, false).is_err());
        assert!(Level::Prune.allows(Op::Delete, s, false).is_ok());
        for k in [ObjectKind::Config, ObjectKind::Key, ObjectKind::Writer, ObjectKind::Layout, ObjectKind::Tombstone] {
            assert!(Level::Prune.allows(Op::Delete, Some(k), false).unwrap_err().contains("only by admin"), "{k:?}");
            assert!(Level::Admin.allows(Op::Delete, Some(k), false).is_ok());
        }
        assert!(Level::Prune.allows(Op::Delete, Some(ObjectKind::PruneNotice), false).is_ok());
        assert!(Level::Admin.allows(Op::Replace, Some(ObjectKind::Config), false).is_ok());
        let notice = Some(ObjectKind::PruneNotice);
        assert!(Level::Append.allows(Op::Create, notice, false).unwrap_err().contains("prune or admin"));
        assert!(Level::Prune.allows(Op::Create, notice, false).is_ok());
        assert!(Level::Prune.allows(Op::Create, Some(ObjectKind::Layout), false).unwrap_err().contains("admin"));
        assert!(Level::Admin.allows(Op::Create, Some(ObjectKind::Layout), false).is_ok());
    }

    #[test]
    fn store_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let k = add(dir.path(), "laptop", Level::Append, Some(10)).unwrap();
        assert!(add(dir.path(), "laptop", Level::Read, None).is_err());
        assert!(add(dir.path(), "bad name", Level::Read, None).is_err());
        let all = list(dir.path()).unwrap();
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].secret, k.secret);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path(dir.path())).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(remove(dir.path(), "laptop").unwrap());
        assert!(!remove(dir.path(), "laptop").unwrap());
    }
}
