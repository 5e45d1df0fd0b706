//! Profiles (`-P NAME`): a TOML file `$XDG_CONFIG_HOME/coffer/NAME.toml` (else
//! `~/.config/coffer/NAME.toml`) holding the repository, where the passphrase
//! comes from, backup excludes and a retention policy. What the command line (or
//! the environment) gives wins over the profile. See docs/design.md#profiles.

use std::path::{Path, PathBuf};

use anyhow::{Result, anyhow};
use serde::Deserialize;

use crate::args::{BackupArgs, Cli, Command, ForgetArgs, parse_size};
use crate::local_input::{Kind, Limit};

/// A profile file. Unknown keys are an error naming the key.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Profile {
    repository: Option<String>,
    repository_file: Option<PathBuf>,
    password_file: Option<PathBuf>,
    password_command: Option<String>,
    connections: Option<u16>,
    cacert: Option<PathBuf>,
    cache_dir: Option<PathBuf>,
    #[serde(default)]
    no_cache: bool,
    /// `[storage]`: credentials and settings of the storage, by the names of
    /// the environment variables that carry them (which win).
    #[serde(default)]
    storage: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    backup: BackupSection,
    #[serde(default)]
    forget: ForgetSection,
    /// `[job]`: the agent's (docs/design.md#jobs), which reads and checks it; the
    /// command line leaves it alone.
    #[serde(default, rename = "job")]
    _job: Option<toml::Table>,
}

/// `[backup]`: used when the command line gives none of the same kind.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct BackupSection {
    #[serde(default)]
    exclude: Vec<String>,
    #[serde(default)]
    exclude_file: Vec<PathBuf>,
    #[serde(default)]
    iexclude: Vec<String>,
    #[serde(default)]
    iexclude_file: Vec<PathBuf>,
    #[serde(default)]
    exclude_if_present: Vec<String>,
    #[serde(default)]
    exclude_caches: bool,
    exclude_larger_than: Option<String>,
    #[serde(default)]
    one_file_system: bool,
    #[serde(default)]
    tag: Vec<String>,
    host: Option<String>,
}

/// `[forget]`: the retention policy, used when the command line gives no keep rule.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct ForgetSection {
    keep_last: Option<u32>,
    keep_hourly: Option<u32>,
    keep_daily: Option<u32>,
    keep_weekly: Option<u32>,
    keep_monthly: Option<u32>,
    keep_yearly: Option<u32>,
    keep_within: Option<String>,
    keep_within_hourly: Option<String>,
    keep_within_daily: Option<String>,
    keep_within_weekly: Option<String>,
    keep_within_monthly: Option<String>,
    keep_within_yearly: Option<String>,
    #[serde(default)]
    keep_tag: Vec<String>,
    group_by: Option<String>,
}

/// Where profile `name` lives: `config_home/coffer/NAME.toml`, or `name` itself
/// when it holds a `/` or ends in `.toml`.
pub fn path_of(name: &str, config_home: Option<PathBuf>) -> Result<PathBuf> {
    if name.contains('/') || name.ends_with(".toml") {
        return Ok(PathBuf::from(name));
    }
    let base = config_home.ok_or_else(|| {
        anyhow!("cannot find profile {name:?}: neither XDG_CONFIG_HOME nor HOME is set; give the file's path with -P")
    })?;
    Ok(base.join("coffer").join(format!("{name}.toml")))
}

/// The configuration directory: `$XDG_CONFIG_HOME` if set and absolute, else `~/.config`.
pub fn config_home() -> Option<PathBuf> {
    std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| dirs::home_dir().map(|h| h.join(".config")))
}

/// Reads and parses a profile file.
pub fn load(path: &Path) -> Result<Profile> {
    if std::fs::symlink_metadata(path).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound) {
        return Err(anyhow!("profile {} does not exist: create it, or check the name given to -P", path.display()));
    }
    let text = crate::local_input::read_text(path, "profile", Kind::File, Limit::PROFILE)?;
    let p: Profile =
        toml::from_str(&text).map_err(|e| anyhow!("profile {}: {}", path.display(), e.to_string().trim_end()))?;
    p.check().map_err(|e| anyhow!("profile {}: {e}", path.display()))?;
    Ok(p)
}

/// The most requests in flight `connections` may ask for, as `--connections`.
const MAX_CONNECTIONS: u16 = 1024;

impl Profile {
    /// Refuses values the command line would refuse too.
    fn check(&self) -> Result<()> {
        if let Some(n) = self.connections
            && !(1..=MAX_CONNECTIONS).contains(&n)
        {
            return Err(anyhow!("connections = {n}: give from 1 to {MAX_CONNECTIONS} requests in flight"));
        }
        Ok(())
    }
}

/// Fills in what the command line left unset from `p`.
pub fn apply(p: Profile, cli: &mut Cli) -> Result<()> {
    let g = &mut cli.global;
    if g.repo.is_none() && g.repository_file.is_none() {
        g.repo = p.repository;
        g.repository_file = p.repository_file;
    }
    if g.password_file.is_none() && g.password_command.is_none() {
        g.password_file = p.password_file;
        g.password_command = p.password_command;
    }
    g.connections = g.connections.or(p.connections);
    g.cacert = g.cacert.take().or(p.cacert);
    g.cache_dir = g.cache_dir.take().or(p.cache_dir);
    g.no_cache |= p.no_cache;
    let known = coffer_backend::CREDENTIAL_VARIABLES;
    if let Some(k) = p.storage.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(anyhow!(
            "profile [storage] {k}: not a storage variable coffer reads; it reads {}",
            known.join(", ")
        ));
    }
    g.storage_vars = p.storage;
    match &mut cli.command {
        Command::Backup(a) => apply_backup(p.backup, a)?,
        Command::Forget(a) => apply_forget(p.forget, a)?,
        _ => {}
    }
    Ok(())
}

fn apply_backup(b: BackupSection, a: &mut BackupArgs) -> Result<()> {
    let excludes_given = !(a.excludes.is_empty()
        && a.exclude_files.is_empty()
        && a.iexcludes.is_empty()
        && a.iexclude_files.is_empty()
        && a.exclude_if_present.is_empty());
    if !excludes_given {
        a.excludes = b.exclude;
        a.exclude_files = b.exclude_file;
        a.iexcludes = b.iexclude;
        a.iexclude_files = b.iexclude_file;
        a.exclude_if_present = b.exclude_if_present;
    }
    a.exclude_caches |= b.exclude_caches;
    a.one_file_system |= b.one_file_system;
    if a.exclude_larger_than.is_none()
        && let Some(s) = b.exclude_larger_than
    {
        a.exclude_larger_than =
            Some(parse_size(&s).map_err(|e| anyhow!("profile [backup] exclude-larger-than {s:?}: {e}"))?);
    }
    if a.tags.is_empty() {
        a.tags = b.tag;
    }
    if a.host.is_none() {
        a.host = b.host;
    }
    Ok(())
}

fn apply_forget(f: ForgetSection, a: &mut ForgetArgs) -> Result<()> {
    let given = a.keep_last + a.keep_hourly + a.keep_daily + a.keep_weekly + a.keep_monthly + a.keep_yearly > 0
        || a.keep_within.is_some()
        || a.keep_within_hourly.is_some()
        || a.keep_within_daily.is_some()
        || a.keep_within_weekly.is_some()
        || a.keep_within_monthly.is_some()
        || a.keep_within_yearly.is_some()
        || !a.keep_tags.is_empty();
    // Snapshots named on the command line are forgotten as named; the policy is not used.
    if given || !a.snapshots.is_empty() {
        return Ok(());
    }
    let span = |key: &str, v: Option<String>| -> Result<Option<coffer_core::ops::retention::Span>> {
        v.map(|s| s.parse().map_err(|e| anyhow!("profile [forget] {key} {s:?}: {e}"))).transpose()
    };
    a.keep_last = f.keep_last.unwrap_or(0);
    a.keep_hourly = f.keep_hourly.unwrap_or(0);
    a.keep_daily = f.keep_daily.unwrap_or(0);
    a.keep_weekly = f.keep_weekly.unwrap_or(0);
    a.keep_monthly = f.keep_monthly.unwrap_or(0);
    a.keep_yearly = f.keep_yearly.unwrap_or(0);
    a.keep_within = span("keep-within", f.keep_within)?;
    a.keep_within_hourly = span("keep-within-hourly", f.keep_within_hourly)?;
    a.keep_within_daily = span("keep-within-daily", f.keep_within_daily)?;
    a.keep_within_weekly = span("keep-within-weekly", f.keep_within_weekly)?;
    a.keep_within_monthly = span("keep-within-monthly", f.keep_within_monthly)?;
    a.keep_within_yearly = span("keep-within-yearly", f.keep_within_yearly)?;
    a.keep_tags = f.keep_tag;
    if let Some(g) = f.group_by {
        a.group_by = g.parse().map_err(|e| anyhow!("profile [forget] group-by {g:?}: {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_keys_are_named() {
        let e = toml::from_str::<Profile>("repository = \"/r\"\n[forget]\nkeep-dayly = 7\n").unwrap_err();
        assert!(e.to_string().contains("keep-dayly"), "{e}");
        let p: Profile = toml::from_str("password-command = \"pass x\"\n[backup]\nexclude = [\"*.o\"]\n").unwrap();
        assert_eq!(p.password_command.as_deref(), Some("pass x"));
        assert_eq!(p.backup.exclude, ["*.o"]);
    }

    #[test]
    fn connections_out_of_range_are_refused() {
        for bad in ["connections = 0", "connections = 1025"] {
            let p: Profile = toml::from_str(bad).unwrap();
            let e = p.check().unwrap_err().to_string();
            assert!(e.contains("connections") && e.contains("1 to 1024"), "{e}");
        }
        toml::from_str::<Profile>("connections = 1").unwrap().check().unwrap();
    }

    #[test]
    fn names_and_paths() {
        let home = Some(PathBuf::from("/cfg"));
        assert_eq!(path_of("daily", home.clone()).unwrap(), Path::new("/cfg/coffer/daily.toml"));
        assert_eq!(path_of("./p.toml", home).unwrap(), Path::new("./p.toml"));
        assert!(path_of("daily", None).is_err());
    }
}
