//! Prune notices: the sealed object `prune/<id>` (kind 7, named by hash) in which a
//! prune lists the packs it is about to delete, so that running backups can keep
//! what they use, or (with `backends`) the copies of packs that `rebalance` and
//! `repair --replicas` remove from backends that are not their homes. Plaintext JSON; at most [`limits::PRUNE_NOTICE_PACKS`] packs per
//! notice ([`limits::PRUNE_NOTICE`] bytes stored). See docs/design.md#prune.

use serde::{Deserialize, Serialize};

use super::{FORMAT_VERSION, limits};
use crate::id::Id;

/// The notice a prune stores before deleting anything.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PruneNotice {
    /// MUST equal 2.
    pub version: u32,
    /// When (informational).
    pub time: String,
    /// Host that ran the prune.
    pub hostname: String,
    /// Packs it is deleting.
    pub packs: Vec<Id>,
    /// When not empty, a *copy notice*: only the copies of `packs` on these
    /// backends of a repository over several are removed, and the packs stay
    /// (docs/design.md#removing-misplaced-copies). Writers neither rescue nor
    /// refuse them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub backends: Vec<String>,
}

impl PruneNotice {
    /// Most packs one notice lists: a prune deleting more writes several.
    pub const MAX_PACKS: usize = limits::PRUNE_NOTICE_PACKS;

    /// The notice's plaintext, to be sealed.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("prune notices serialize")
    }

    /// Parses a notice's plaintext.
    pub fn decode(buf: &[u8]) -> std::result::Result<PruneNotice, String> {
        let n: PruneNotice = serde_json::from_slice(buf).map_err(|e| format!("prune notice does not parse: {e}"))?;
        if n.version != FORMAT_VERSION {
            return Err(format!("prune notice version {} is not supported", n.version));
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_notice_round_trips_and_other_versions_are_refused() {
        let n = PruneNotice {
            version: FORMAT_VERSION,
            time: "2026-11-24T00:00:00Z".into(),
            hostname: "h".into(),
            packs: vec![Id([7; 32])],
            backends: Vec::new(),
        };
        assert_eq!(PruneNotice::decode(&n.encode()).unwrap(), n);
        assert!(!String::from_utf8(n.encode()).unwrap().contains("backends"), "a prune notice is as before");
        let copies = PruneNotice { backends: vec!["b0".into()], ..n.clone() };
        assert_eq!(PruneNotice::decode(&copies.encode()).unwrap(), copies);
        let newer = PruneNotice { version: FORMAT_VERSION + 1, ..n };
        assert!(PruneNotice::decode(&newer.encode()).unwrap_err().contains("version 3"));
        assert!(PruneNotice::decode(b"{").unwrap_err().contains("does not parse"));
    }
}
