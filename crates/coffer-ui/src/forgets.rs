//! Forgetting snapshots from the UI (docs/design.md#ui-forget): chosen ones, or
//! those the repository's job's retention policy does not keep. What would go
//! is worked out first and shown ([`Plan`]); what the user then confirms is the
//! list of snapshots shown, forgotten exactly (a snapshot stored meanwhile is
//! never forgotten by a confirmation that did not show it), under a signed
//! tombstone as `coffer forget` writes it.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::SystemTime;

use crate::brief::Brief;
use coffer_core::Id;
use coffer_core::local_state::LocalState;
use coffer_core::ops::retention::{self, Decision, Policy};
use coffer_core::repo::history::History;

use crate::repos::{RepoView, ViewError};

/// The snapshots one confirmation may forget, at most.
pub const MAX_FORGET: usize = 10_000;

/// A job's retention policy, as the binary read it from the jobs file.
pub struct Retention {
    /// The job whose `forget` policy it is.
    pub job: String,
    pub policy: Policy,
    /// Seconds east of UTC at a time, for the policy's days and weeks: the
    /// zone the job's own `coffer forget` uses.
    pub offset: Arc<dyn Fn(SystemTime) -> i64 + Send + Sync>,
}

/// What forgetting would do.
pub struct Plan {
    /// The snapshots forgotten, oldest first.
    pub forget: Vec<(Id, Brief)>,
    /// The live snapshots kept.
    pub kept: usize,
    /// Under a policy: how it decided.
    pub policy: Option<Applied>,
}

/// A policy applied to a repository's snapshots.
pub struct Applied {
    /// The job whose policy it is.
    pub job: String,
    /// Every decision, grouped, newest first in a group.
    pub decisions: Vec<Decision>,
    /// The snapshots decided on.
    pub snapshots: Arc<crate::repos::Live>,
}

impl RepoView {
    /// Forgetting the snapshots `ids` (full hex ids), each a live snapshot.
    pub fn plan_snapshots(&self, ids: &[&str]) -> Result<Plan, ViewError> {
        if ids.is_empty() {
            return Err(ViewError::BadRequest("choose the snapshots to forget".into()));
        }
        if ids.len() > MAX_FORGET {
            return Err(ViewError::BadRequest(format!("at most {MAX_FORGET} snapshots are forgotten at once")));
        }
        let mut want = HashSet::new();
        for id in ids {
            want.insert(Id::from_hex(id).ok_or_else(|| ViewError::BadRequest(format!("{id:?} is not a snapshot id")))?);
        }
        let live = self.snapshots()?;
        let forget: Vec<(Id, Brief)> = live.iter().filter(|(i, _)| want.contains(i)).cloned().collect();
        if forget.len() < want.len() {
            let found: HashSet<Id> = forget.iter().map(|(i, _)| *i).collect();
            let missing = want.iter().find(|i| !found.contains(i)).expect("one is missing");
            return Err(ViewError::NotFound(format!(
                "repository {} has no snapshot {} (forgotten already?)",
                self.name,
                missing.short()
            )));
        }
        Ok(Plan { kept: live.len() - forget.len(), forget, policy: None })
    }

    /// Forgetting what the job's policy does not keep. A policy that would keep
    /// nothing of a group (a host's paths) is refused, as `coffer forget` refuses it.
    pub fn plan_policy(&self) -> Result<Plan, ViewError> {
        let r = self.retention.as_ref().ok_or_else(|| {
            ViewError::BadRequest(format!("repository {} has no job with a forget policy", self.name))
        })?;
        let live = self.snapshots()?;
        let list: Vec<(Id, Brief)> = live.iter().cloned().collect();
        let decisions = retention::apply_with_offset(&list, &r.policy, &*r.offset);
        let mut groups: Vec<(String, bool)> = Vec::new();
        for d in &decisions {
            let key = d.group.to_string();
            match groups.last_mut() {
                Some((k, any)) if *k == key => *any |= d.keep,
                _ => groups.push((key, d.keep)),
            }
        }
        if let Some((key, _)) = groups.iter().find(|(_, any)| !any) {
            return Err(ViewError::BadRequest(format!(
                "the policy of job {} keeps no snapshot of {key} and would forget every one of them; nothing is \
                 forgotten from the UI: check the job's keep rules",
                r.job
            )));
        }
        let doomed: HashSet<Id> = decisions.iter().filter(|d| !d.keep).map(|d| d.id).collect();
        let forget: Vec<(Id, Brief)> = live.iter().filter(|(i, _)| doomed.contains(i)).cloned().collect();
        Ok(Plan {
            kept: live.len() - forget.len(),
            forget,
            policy: Some(Applied { job: r.job.clone(), decisions, snapshots: live }),
        })
    }

    /// Forgets the snapshots `ids`, each still live, under one tombstone signed
    /// by this client's writer key; returns the tombstone's id.
    pub fn forget(&self, ids: &[Id]) -> Result<Id, ViewError> {
        let state: &LocalState = self.writer.as_ref().ok_or_else(|| {
            ViewError::Unavailable(format!("repository {}: the UI has no writer key to sign a forget with", self.name))
        })?;
        let repo = self.repo()?;
        let history = History::load(repo)?;
        let live: HashSet<Id> = history.live_snapshots().iter().map(|(i, _)| *i).collect();
        if let Some(gone) = ids.iter().find(|i| !live.contains(i)) {
            return Err(ViewError::NotFound(format!(
                "repository {} has no snapshot {} any more: nothing was forgotten",
                self.name,
                gone.short()
            )));
        }
        let key = repo.writer_key(state)?;
        let tombstone = coffer_core::ops::forget::forget(repo, &history, ids, &key)?;
        History::load(repo)?.sync_remembered(repo, state)?;
        Ok(tombstone)
    }

    /// The job whose policy the UI can apply here, if any.
    pub fn policy_job(&self) -> Option<&str> {
        self.retention.as_ref().map(|r| r.job.as_str())
    }
}
