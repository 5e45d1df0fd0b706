//! A repository's health (docs/design.md#ui-health): its checks as the agent
//! ran them, its packs' copies over several backends, the transparency log of
//! the server it is on, and the last `coffer bench` report. Each is read when
//! the page is asked for.

use std::path::Path;
use std::sync::Arc;

use coffer_core::crypto::sign::PublicKey;
use coffer_core::format::snapshot::LogMark;
use coffer_core::ops::bench::BenchReport;
use coffer_core::repo::history::History;

use crate::repos::RepoView;

/// The largest bench report read.
const MAX_REPORT: u64 = 8 << 20;

/// A repository on a coffer server: its log is followed.
pub struct ServerLog {
    /// The log key the user gave (else the key seen first is pinned).
    pub trusted: Option<PublicKey>,
}

/// The copies of a repository's packs over its backends, as one listing of
/// each shows them now. The binary, which composed the backends, lists them.
pub type ReplicaScan = Arc<dyn Fn() -> Result<ReplicaReport, String> + Send + Sync>;

/// The most packs a report names in each list; the counts are whole.
pub const NAMED_PACKS: usize = 100;

/// What one listing of every backend says of the indexed packs' copies.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ReplicaReport {
    /// The layout followed: its version and how many copies it asks of a pack.
    pub layout_version: u64,
    pub replicas: u8,
    /// A change of layout is under way (`coffer rebalance` finishes it).
    pub migrating: bool,
    /// Indexed packs.
    pub packs: u64,
    pub backends: Vec<BackendCopies>,
    /// Indexed packs no reachable backend lists: lost, unless an unreachable one holds them.
    pub missing_count: u64,
    pub missing: Vec<String>,
    /// Packs held on fewer of their homes than the layout asks.
    pub under_count: u64,
    pub under: Vec<UnderReplicated>,
    /// Copies on a backend that is not the pack's home (rebalance moves them).
    pub misplaced: u64,
    /// Shared objects (snapshots, index, keys…) a backend lacks.
    pub shared_missing: u64,
    /// How many more backends every indexed pack survives losing: the fewest
    /// copies of any pack, less one (None when a pack has no copy).
    pub can_lose: Option<u64>,
}

/// One backend as listed.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BackendCopies {
    pub name: String,
    /// active, removing, unreachable or "no location".
    pub state: String,
    pub packs: Option<u64>,
    pub bytes: Option<u64>,
    pub error: Option<String>,
}

/// A pack short of copies, and the homes that lack it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct UnderReplicated {
    pub pack: String,
    pub copies: u64,
    pub lacking: Vec<String>,
}

impl ReplicaReport {
    /// Every backend listed, and every pack has all the copies the layout asks
    /// for, where it asks.
    pub fn is_whole(&self) -> bool {
        let listed = self.backends.iter().all(|b| b.error.is_none());
        listed && self.missing_count == 0 && self.under_count == 0 && self.shared_missing == 0
    }
}

/// The server's log as followed now.
pub struct LogStatus {
    /// Entries the signed head covers.
    pub entries: u64,
    /// The key that signs it.
    pub key: String,
    /// Entries new since this client last followed it.
    pub new_entries: u64,
    /// The key was pinned now.
    pub first_contact: bool,
    /// What the log and the storage disagree on (hidden snapshots, heads).
    pub problems: Vec<String>,
}

impl RepoView {
    /// Lists every backend of a repository over several; None over one.
    pub fn replicas(&self) -> Option<Result<ReplicaReport, String>> {
        self.replicas.as_ref().map(|scan| scan())
    }

    /// Follows the server's log: None off a server; an error when it does not
    /// check (a head that does not extend the one seen, another key, …).
    pub fn server_log(&self) -> Option<Result<LogStatus, String>> {
        let s = self.server_log.as_ref()?;
        Some(self.follow(s).map_err(|e| e.to_string()))
    }

    fn follow(&self, s: &ServerLog) -> Result<LogStatus, Box<dyn std::error::Error>> {
        let state = self.writer.as_ref().ok_or("the UI has no local state for this repository")?;
        let repo = self.repo()?;
        let f = coffer_core::server_log::follow(repo.backend(), state, s.trusted.as_ref())?;
        let history = History::load(repo)?;
        let stored: Vec<_> = history.present.iter().copied().collect();
        let forgotten: Vec<_> = history.forgotten().into_keys().collect();
        let mut problems: Vec<String> = coffer_core::server_log::hidden(&f, &stored, &forgotten)
            .into_iter()
            .map(|(noun, id)| {
                format!("{noun} {id}: the log records it, but the server does not serve it: it hides or lost it")
            })
            .collect();
        let marks: Vec<(_, LogMark)> =
            history.snapshots.iter().filter_map(|(id, s)| Some((*id, *s.server_log.as_deref()?))).collect();
        problems.extend(f.disagreements(&marks));
        Ok(LogStatus {
            entries: f.head.head.size,
            key: f.head.public.to_hex(),
            new_entries: f.new_entries,
            first_contact: f.first_contact,
            problems,
        })
    }
}

/// The bench report at `path`: None when there is none, an error when it
/// cannot be read.
pub fn bench_report(path: &Path) -> Option<Result<BenchReport, String>> {
    use std::io::Read;
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => return Some(Err(format!("cannot read {}: {e}", path.display()))),
    };
    let mut bytes = Vec::new();
    if let Err(e) = file.take(MAX_REPORT + 1).read_to_end(&mut bytes) {
        return Some(Err(format!("cannot read {}: {e}", path.display())));
    }
    if bytes.len() as u64 > MAX_REPORT {
        return Some(Err(format!("{} is larger than a bench report ({MAX_REPORT} bytes)", path.display())));
    }
    Some(serde_json::from_slice(&bytes).map_err(|e| format!("{} is not a bench report: {e}", path.display())))
}
