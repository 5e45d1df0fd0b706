//! Following a coffer server's transparency log from the client: every command
//! on a `coffer:` location reads the log's signed head and checks it against
//! the last head this client saw (docs/design.md#transparency-log).

use anyhow::Result;
use coffer_backend::Location;
use coffer_core::crypto::sign::PublicKey;
use coffer_core::format::snapshot::LogMark;
use coffer_core::repo::Repository;
use coffer_core::server_log::{self, Followed};
use serde_json::json;

use crate::args::GlobalArgs;
use crate::repo_open;

/// The variable (or profile setting) naming the log key a client expects.
pub const LOG_KEY_VARIABLE: &str = "COFFER_SERVER_LOG_KEY";

/// The head followed last by this process (one repository per command).
static LAST: std::sync::Mutex<Option<LogMark>> = std::sync::Mutex::new(None);

/// The head of the server's log this command followed when it opened the
/// repository, for the snapshot it writes to record; `None` off a server.
pub fn last_mark() -> Option<LogMark> {
    *LAST.lock().unwrap_or_else(|e| e.into_inner())
}

/// The log key the user expects (`COFFER_SERVER_LOG_KEY`, or the profile's), if given.
pub fn trusted_key(global: &GlobalArgs) -> Result<Option<PublicKey>> {
    let given = std::env::var(LOG_KEY_VARIABLE)
        .ok()
        .filter(|v| !v.is_empty())
        .or_else(|| global.storage_vars.get(LOG_KEY_VARIABLE).cloned());
    match given {
        Some(hex) => Ok(Some(PublicKey::from_hex(hex.trim()).ok_or_else(|| {
            anyhow::anyhow!(
                "{LOG_KEY_VARIABLE}: {hex:?} is not a key: the server prints its log key (64 hex digits) as it starts"
            )
        })?)),
        None => Ok(None),
    }
}

/// Follows the log of the server `loc` names (`None` for other locations),
/// saying on stderr when a server's key is pinned for the first time.
pub fn follow(global: &GlobalArgs, loc: &Location, repo: &Repository) -> Result<Option<Followed>> {
    if !matches!(loc, Location::Server { .. }) {
        return Ok(None);
    }
    let trusted = trusted_key(global)?;
    let state = repo_open::local_state(repo)?;
    let f = server_log::follow(repo.backend(), &state, trusted.as_ref())?;
    *LAST.lock().unwrap_or_else(|e| e.into_inner()) = Some(f.mark());
    if f.first_contact && !global.quiet {
        let key = f.head.public.to_hex();
        if global.json {
            eprintln!("{}", json!({"type": "server_log", "key": key, "entries": f.head.head.size, "pinned": true}));
        } else {
            eprintln!(
                "following the server's transparency log ({} entries), signed by key {key}: pinned for this \
                 repository (set {LOG_KEY_VARIABLE} to the key the server printed to check it)",
                f.head.head.size
            );
        }
    }
    Ok(Some(f))
}
