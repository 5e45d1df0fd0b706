//! The copy of the key file that last opened a remote location, kept beside the
//! local caches (`<cache dir>/locations/<BLAKE3 of the location>`), so that the
//! next open runs its key derivation while the storage is probed instead of
//! after reading the key files (docs/design.md#round-trips).
//!
//! A copy is only a hint: the open uses it only when the storage still lists a
//! key file of the same hash and the passphrase opens it. Trouble with the copy
//! (missing, damaged, unwritable) never fails a command.

use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;

use coffer_backend::location::Location;
use coffer_backend::{Backend, LocalBackend, Modes};
use coffer_core::format::ObjectKind;

use crate::args::GlobalArgs;

/// Where the copies are kept, and the name of `loc`'s: `None` for a location on
/// a local disk (reading its key files costs no round trip) and with
/// `--no-cache`.
pub fn place(global: &GlobalArgs, loc: &Location) -> Option<(PathBuf, String)> {
    if global.no_cache || loc.local_path().is_some() {
        return None;
    }
    let dir = crate::repo_open::cache_base(global).ok()?.join("locations");
    Some((dir, blake3::hash(loc.to_string().as_bytes()).to_hex().to_string()))
}

/// The copy kept for the location at `place`, if there is one.
pub fn read(place: &(PathBuf, String)) -> Option<Vec<u8>> {
    let store = LocalBackend::private_dir(&place.0, Modes::PRIVATE).ok()?;
    store.read_max(&place.1, ObjectKind::Key.max_len()).ok()
}

/// Keeps `key_file` as the copy for the location at `place` (written atomically,
/// owner-only), unless it is kept already.
pub fn keep(place: &(PathBuf, String), kept: Option<&[u8]>, key_file: &[u8]) {
    if kept == Some(key_file) {
        return;
    }
    let (dir, name) = place;
    if std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).is_err() {
        return;
    }
    // Like the caches: a link or another user's directory there is not used.
    if let Ok(store) = LocalBackend::private_dir(dir, Modes::PRIVATE) {
        let _ = store.without_sync().write(name, key_file.to_vec());
    }
}
