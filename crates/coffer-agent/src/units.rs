//! systemd units for the agent, or one timer per scheduled kind of each job
//! (docs/design.md#agent-install). Every file written holds [`MARKER`];
//! [`remove`] removes only such files. A unit names the coffer binary and the
//! jobs file, never a passphrase.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::config::{Config, Kind};

/// The line every unit written begins with.
pub const MARKER: &str = "# Written by `coffer agent install`; `coffer agent uninstall` removes it.";

/// The agent's service.
pub const AGENT_UNIT: &str = "coffer-agent.service";

/// Whose units: the user's (`systemctl --user`) or the system's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    User,
    System,
}

/// A unit file's name and text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unit {
    pub name: String,
    pub text: String,
}

/// Why units could not be written or removed.
#[derive(Debug, thiserror::Error)]
pub enum UnitError {
    #[error("{}: {what}: {source}", path.display())]
    Io {
        path: PathBuf,
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{}: exists and was not written by coffer (it lacks coffer's marker line); move it away, or leave it and run \
         the agent some other way",
        path.display()
    )]
    NotOurs { path: PathBuf },
}

/// One word of an `ExecStart=` line, quoted as systemd reads it.
fn quote(word: &str) -> String {
    let mut q = String::from("\"");
    for c in word.chars() {
        match c {
            '"' | '\\' => {
                q.push('\\');
                q.push(c);
            }
            '%' => q.push_str("%%"),
            '$' => q.push_str("$$"),
            '\n' => q.push_str("\\n"),
            c => q.push(c),
        }
    }
    q.push('"');
    q
}

fn command(exe: &Path, args: &[String]) -> String {
    std::iter::once(quote(&exe.to_string_lossy())).chain(args.iter().map(|a| quote(a))).collect::<Vec<_>>().join(" ")
}

fn wanted_by(scope: Scope) -> &'static str {
    match scope {
        Scope::User => "default.target",
        Scope::System => "multi-user.target",
    }
}

/// The agent's service: `EXE [JOBS_ARGS] agent`, restarted when it fails;
/// SIGTERM reaches the agent first, which ends its runs.
pub fn agent_unit(exe: &Path, jobs_args: &[String], scope: Scope) -> Unit {
    let mut args = jobs_args.to_vec();
    args.insert(0, "agent".into());
    let text = format!(
        "{MARKER}\n[Unit]\nDescription=coffer agent: runs backup jobs when they are due\n\
         Wants=network-online.target\nAfter=network-online.target\n\n\
         [Service]\nType=simple\nExecStart={}\nExecReload=/bin/kill -HUP $MAINPID\n\
         Restart=on-failure\nRestartSec=30\nKillMode=mixed\nTimeoutStopSec=120\n\n\
         [Install]\nWantedBy={}\n",
        command(exe, &args),
        wanted_by(scope)
    );
    Unit { name: AGENT_UNIT.into(), text }
}

/// The base name of a kind's timer and service: `coffer-job-NAME` for backups,
/// `coffer-prune-NAME` and `coffer-check-NAME`.
pub fn timer_base(job: &str, kind: Kind) -> String {
    match kind {
        Kind::Backup => format!("coffer-job-{job}"),
        Kind::Prune => format!("coffer-prune-{job}"),
        Kind::Check => format!("coffer-check-{job}"),
    }
}

/// A timer and a service for each scheduled kind of each job whose schedule
/// systemd can read; the kinds left out are returned with the reason.
pub fn timer_units(config: &Config, exe: &Path, jobs_args: &[String]) -> (Vec<Unit>, Vec<String>) {
    let mut units = Vec::new();
    let mut left_out = Vec::new();
    for job in config.jobs.values() {
        for (kind, schedule) in &job.schedules {
            let Some(calendar) = schedule.systemd_form() else {
                left_out.push(format!(
                    "job {} {}: its schedule {:?} has no systemd form (a cron line restricting both day fields); \
                     run it with `coffer agent` instead",
                    job.name,
                    kind.as_str(),
                    schedule.as_str()
                ));
                continue;
            };
            let base = timer_base(&job.name, *kind);
            let mut args = jobs_args.to_vec();
            args.insert(0, "run".into());
            args.extend(["--kind".into(), kind.as_str().into(), "--".into(), job.name.clone()]);
            let mut timer = format!(
                "{MARKER}\n[Unit]\nDescription=coffer job {} ({})\n\n[Timer]\nOnCalendar={calendar}\nPersistent=true\n",
                job.name,
                kind.as_str()
            );
            if !job.randomized_delay.is_zero() {
                timer.push_str(&format!("RandomizedDelaySec={}\n", job.randomized_delay.as_secs().max(1)));
            }
            timer.push_str("\n[Install]\nWantedBy=timers.target\n");
            let service = format!(
                "{MARKER}\n[Unit]\nDescription=coffer job {} ({})\nWants=network-online.target\n\
                 After=network-online.target\n\n[Service]\nType=oneshot\nExecStart={}\nKillMode=mixed\n",
                job.name,
                kind.as_str(),
                command(exe, &args)
            );
            units.push(Unit { name: format!("{base}.timer"), text: timer });
            units.push(Unit { name: format!("{base}.service"), text: service });
        }
    }
    (units, left_out)
}

fn ours(path: &Path) -> Result<Option<bool>, UnitError> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text.lines().any(|l| l == MARKER))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(UnitError::Io { path: path.to_path_buf(), what: "cannot read it", source }),
    }
}

/// Writes `units` into `dir` (created when missing), each file replaced
/// atomically; a file of the same name that coffer did not write is refused
/// before anything is written.
pub fn write(dir: &Path, units: &[Unit]) -> Result<Vec<PathBuf>, UnitError> {
    let io = |path: &Path, what, source| UnitError::Io { path: path.to_path_buf(), what, source };
    for u in units {
        let path = dir.join(&u.name);
        if ours(&path)? == Some(false) {
            return Err(UnitError::NotOurs { path });
        }
    }
    std::fs::create_dir_all(dir).map_err(|e| io(dir, "cannot create the directory", e))?;
    let mut written = Vec::new();
    for u in units {
        let path = dir.join(&u.name);
        let tmp = dir.join(format!(".{}.tmp", u.name));
        let result = std::fs::File::create(&tmp)
            .and_then(|mut f| f.write_all(u.text.as_bytes()).and_then(|()| f.sync_all()))
            .and_then(|()| std::fs::rename(&tmp, &path));
        if let Err(e) = result {
            let _ = std::fs::remove_file(&tmp);
            return Err(io(&path, "cannot write it", e));
        }
        written.push(path);
    }
    Ok(written)
}

/// The unit files in `dir` that coffer wrote: the agent's and every job's.
pub fn installed(dir: &Path) -> Result<Vec<PathBuf>, UnitError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(UnitError::Io { path: dir.to_path_buf(), what: "cannot list it", source }),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry =
            entry.map_err(|source| UnitError::Io { path: dir.to_path_buf(), what: "cannot list it", source })?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let candidate = name == AGENT_UNIT
            || (["coffer-job-", "coffer-prune-", "coffer-check-"].iter().any(|p| name.starts_with(p))
                && (name.ends_with(".timer") || name.ends_with(".service")));
        let path = entry.path();
        if candidate && entry.file_type().is_ok_and(|t| t.is_file()) && ours(&path)? == Some(true) {
            out.push(path);
        }
    }
    out.sort();
    Ok(out)
}

/// Removes the files [`installed`] finds.
pub fn remove(paths: &[PathBuf]) -> Result<(), UnitError> {
    for p in paths {
        std::fs::remove_file(p).map_err(|source| UnitError::Io {
            path: p.clone(),
            what: "cannot remove it",
            source,
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_quoted_for_systemd() {
        assert_eq!(quote("/opt/my dir/coffer"), "\"/opt/my dir/coffer\"");
        assert_eq!(quote("100%$\"\\"), "\"100%%$$\\\"\\\\\"");
    }

    #[test]
    fn timers_and_the_agent_unit() {
        let dir = tempfile::tempdir().unwrap();
        let jobs = dir.path().join("jobs.toml");
        std::fs::write(
            &jobs,
            "[job.home]\nrepository = \"/r\"\npassword-file = \"/p\"\npaths = [\"/home\"]\nschedule = \"daily\"\n\
             randomized-delay = \"15m\"\ncheck = { schedule = \"0 4 1 * mon\" }\n",
        )
        .unwrap();
        let config = crate::config::load(Some(&jobs), dir.path(), jiff::tz::TimeZone::UTC).unwrap();
        let exe = Path::new("/usr/bin/coffer");
        let args = vec!["--jobs".to_string(), jobs.display().to_string()];
        let (units, left_out) = timer_units(&config, exe, &args);
        let names: Vec<&str> = units.iter().map(|u| u.name.as_str()).collect();
        assert_eq!(names, ["coffer-job-home.timer", "coffer-job-home.service"]);
        assert_eq!(left_out.len(), 1, "{left_out:?}");
        assert!(units[0].text.contains("OnCalendar=") && units[0].text.contains("Persistent=true"));
        assert!(units[0].text.contains("RandomizedDelaySec=900"));
        assert!(
            units[1].text.contains(&format!("ExecStart=\"/usr/bin/coffer\" \"run\" \"--jobs\" \"{}\"", jobs.display()))
        );

        let unit_dir = dir.path().join("units");
        let agent = agent_unit(exe, &args, Scope::User);
        assert!(agent.text.contains("KillMode=mixed") && agent.text.contains("WantedBy=default.target"));
        let mut all = units.clone();
        all.push(agent);
        write(&unit_dir, &all).unwrap();
        // A file of the user's is left alone, and not overwritten.
        std::fs::write(unit_dir.join("coffer-job-other.timer"), "[Timer]\n").unwrap();
        assert_eq!(installed(&unit_dir).unwrap().len(), 3);
        std::fs::write(unit_dir.join(AGENT_UNIT), "[Service]\n").unwrap();
        assert!(matches!(write(&unit_dir, &all), Err(UnitError::NotOurs { .. })));
        remove(&installed(&unit_dir).unwrap()).unwrap();
        let left: Vec<_> = std::fs::read_dir(&unit_dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left.len(), 2, "{left:?}");
    }
}
