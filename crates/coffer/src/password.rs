//! Where passphrases come from: COFFER_PASSWORD, the password file, the password
//! command's first line of output, the first line of standard input when it is not
//! a terminal (as restic reads it), or a prompt on the terminal (asked twice when a
//! repository is being created); for the passphrase
//! of a new key file, COFFER_NEW_PASSWORD, the new password file, or a prompt asked twice.
//!
//! A passphrase is held in a [`Passphrase`], wiped from memory when dropped, and so
//! is every buffer it passes through here (the password file's content, a prompt's
//! answer). A passphrase for a new key file (or a new repository) may not be empty.
//! (The copy in the process environment, when COFFER_PASSWORD is used, belongs to
//! the environment and is not wiped.)

use std::io::IsTerminal;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result, bail};
use coffer_core::crypto::ScryptParams;
use zeroize::Zeroizing;

use crate::args::GlobalArgs;
use crate::local_input::{self, Kind, Limit};

/// A passphrase, wiped from memory when dropped.
pub type Passphrase = Zeroizing<String>;

/// Whether the passphrase is for a new repository (then it is confirmed).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    Open,
    Create,
}

/// Set when standard input carries the data to back up (`backup --stdin`,
/// `import-tar -`).
static STDIN_IS_DATA: AtomicBool = AtomicBool::new(false);

/// Standard input is the data to back up: the passphrase is not read from it.
pub fn stdin_is_data() {
    STDIN_IS_DATA.store(true, Ordering::Relaxed);
}

/// Whether the passphrase comes without a prompt: from `COFFER_PASSWORD`,
/// `--password-file` or `--password-command`.
pub fn given(global: &GlobalArgs) -> bool {
    std::env::var_os("COFFER_PASSWORD").is_some() || global.password_file.is_some() || global.password_command.is_some()
}

/// Reads the passphrase. Never logs or prints it. One for a new repository may
/// not be empty.
pub fn read(global: &GlobalArgs, purpose: Purpose) -> Result<Passphrase> {
    if global.password_file.is_some() && global.password_command.is_some() {
        bail!("--password-file and --password-command both give the passphrase: give one");
    }
    let pw = if let Some(p) = env("COFFER_PASSWORD") {
        p
    } else if let Some(file) = &global.password_file {
        first_line(file)?
    } else if let Some(command) = &global.password_command {
        from_command(command)?
    } else if STDIN_IS_DATA.load(Ordering::Relaxed) && !std::io::stdin().is_terminal() {
        // Standard input is the data (`backup --stdin`): ask on the terminal, if any.
        Zeroizing::new(rpassword::prompt_password("enter passphrase for repository: ").map_err(|e| {
            anyhow::anyhow!(
                "the data comes from standard input (backup --stdin, import-tar -), so the passphrase cannot \
                 come from it, and there is no terminal to ask on ({e}): set COFFER_PASSWORD, or pass \
                 --password-file or --password-command"
            )
        })?)
    } else if !std::io::stdin().is_terminal() {
        from_stdin()?
    } else if purpose == Purpose::Create {
        prompt_twice("enter passphrase for repository: ", "enter the passphrase again: ")?
    } else {
        Zeroizing::new(rpassword::prompt_password("enter passphrase for repository: ")?)
    };
    if purpose == Purpose::Create && pw.is_empty() {
        bail!("{EMPTY}");
    }
    Ok(pw)
}

/// Reads the passphrase of a new key file: COFFER_NEW_PASSWORD, the new password
/// file, or a prompt on the terminal (asked twice). An empty one is refused.
pub fn read_new(new_password_file: Option<&Path>) -> Result<Passphrase> {
    let pw = if let Some(p) = env("COFFER_NEW_PASSWORD") {
        p
    } else if let Some(file) = new_password_file {
        first_line(file)?
    } else if std::io::stdin().is_terminal() {
        prompt_twice("enter the new passphrase: ", "enter the new passphrase again: ")?
    } else {
        bail!(
            "no new passphrase: set COFFER_NEW_PASSWORD or COFFER_NEW_PASSWORD_FILE, pass --new-password-file, \
             or run on a terminal"
        );
    };
    if pw.is_empty() {
        bail!("{EMPTY}");
    }
    Ok(pw)
}

/// Reads the passphrase of the source repository of `copy` or `init --from-repo`:
/// COFFER_FROM_PASSWORD, the file given (`--from-password-file`), or a prompt on
/// the terminal. Standard input is left to the destination's passphrase.
pub fn read_source(file: Option<&Path>) -> Result<Passphrase> {
    if let Some(p) = env("COFFER_FROM_PASSWORD") {
        Ok(p)
    } else if let Some(file) = file {
        first_line(file)
    } else if std::io::stdin().is_terminal() {
        Ok(Zeroizing::new(rpassword::prompt_password("enter passphrase for the source repository (--from-repo): ")?))
    } else {
        bail!(
            "no passphrase for the source repository: set COFFER_FROM_PASSWORD or COFFER_FROM_PASSWORD_FILE, pass \
             --from-password-file, or run on a terminal"
        )
    }
}

/// Reads the passphrase of a repository of another program to import
/// (`tool`, e.g. `restic`): COFFER_FROM_PASSWORD, the file given
/// (`--from-password-file`), that program's own variables (RESTIC_PASSWORD,
/// RESTIC_PASSWORD_FILE), or a prompt on the terminal.
pub fn read_import_source(file: Option<&Path>, tool: &str) -> Result<Passphrase> {
    let upper = tool.to_ascii_uppercase();
    if let Some(p) = env("COFFER_FROM_PASSWORD") {
        Ok(p)
    } else if let Some(file) = file {
        first_line(file)
    } else if let Some(p) = env(&format!("{upper}_PASSWORD")) {
        Ok(p)
    } else if let Some(file) = std::env::var_os(format!("{upper}_PASSWORD_FILE")) {
        first_line(Path::new(&file))
    } else if std::io::stdin().is_terminal() {
        Ok(Zeroizing::new(rpassword::prompt_password(format!("enter passphrase for the {tool} repository: "))?))
    } else {
        bail!(
            "no passphrase for the {tool} repository: set COFFER_FROM_PASSWORD or {upper}_PASSWORD, pass \
             --from-password-file (or set {upper}_PASSWORD_FILE), or run on a terminal"
        )
    }
}

/// The passphrase of a repository being imported through its own program
/// (borg), when coffer is given one: COFFER_FROM_PASSWORD, else the first line
/// of `file`. `None` leaves the program to its own ways (BORG_PASSPHRASE,
/// BORG_PASSCOMMAND).
pub fn read_import_source_if_given(file: Option<&Path>) -> Result<Option<Passphrase>> {
    if let Some(p) = env("COFFER_FROM_PASSWORD") {
        Ok(Some(p))
    } else if let Some(file) = file {
        first_line(file).map(Some)
    } else {
        Ok(None)
    }
}

const EMPTY: &str = "an empty passphrase is not allowed: anyone could open the repository; choose a passphrase \
                     (a long one: it is all that protects the data)";

/// The scrypt cost for a new key file: `log_n` below the default needs `insecure`.
pub fn kdf(log_n: u8, insecure: bool) -> Result<ScryptParams> {
    let floor = ScryptParams::DEFAULT.log_n;
    if log_n < floor && !insecure {
        bail!(
            "--kdf-log-n {log_n} is below {floor}, the least coffer uses by default: the key file would be \
             {}x cheaper to guess; pass --insecure-kdf as well to accept that (for tests and throwaway repositories)",
            1u64 << (floor - log_n)
        );
    }
    Ok(ScryptParams { log_n, ..ScryptParams::DEFAULT })
}

fn env(name: &str) -> Option<Passphrase> {
    std::env::var(name).ok().map(Zeroizing::new)
}

/// The first line a shell command prints; the command must succeed and print at
/// most [`Limit::COMMAND_OUTPUT`] (a command that prints without end, such as
/// `yes`, is stopped and refused).
fn from_command(command: &str) -> Result<Passphrase> {
    let mut child = std::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .stdin(std::process::Stdio::inherit())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .with_context(|| format!("cannot run the password command {command:?}"))?;
    let stdout = child.stdout.take().expect("piped");
    let out = local_input::bounded(stdout, Limit::COMMAND_OUTPUT).map(Zeroizing::new);
    if out.is_err() {
        let _ = child.kill();
    }
    let status = child.wait().with_context(|| format!("cannot run the password command {command:?}"))?;
    let text = match out {
        Ok(text) => text,
        Err(local_input::ReadError::TooLarge) => bail!(
            "the password command {command:?} printed more than {}: it must print the passphrase on its first \
             line and end",
            Limit::COMMAND_OUTPUT
        ),
        Err(local_input::ReadError::Io(e)) => {
            return Err(e).with_context(|| format!("cannot read the output of the password command {command:?}"));
        }
        Err(local_input::ReadError::NotText) => unreachable!("bounded reads bytes"),
    };
    if !status.success() {
        bail!("the password command {command:?} failed ({status}): fix it, or give the passphrase another way");
    }
    let line = local_input::line_of(&text[..], Limit::LINE).map_err(|e| match e {
        local_input::ReadError::TooLarge => {
            anyhow::anyhow!("the password command {command:?} printed a first line longer than {}", Limit::LINE)
        }
        _ => anyhow::anyhow!("the password command {command:?} printed something that is not UTF-8"),
    })?;
    Ok(line.unwrap_or_default())
}

/// The first line of standard input (not a terminal), at most [`Limit::LINE`].
/// Nothing at all there is an error, so that a script that forgot to give a
/// passphrase is told so.
fn from_stdin() -> Result<Passphrase> {
    match local_input::stdin_line("the passphrase")? {
        Some(line) => Ok(line),
        None => bail!(
            "no passphrase: standard input is not a terminal and was empty; set COFFER_PASSWORD or \
             COFFER_PASSWORD_FILE, pass --password-file or --password-command, pipe the passphrase in, or run on \
             a terminal"
        ),
    }
}

/// The first line of a password file (a regular file or a pipe), at most [`Limit::LINE`].
fn first_line(file: &Path) -> Result<Passphrase> {
    local_input::first_line(file, "password file", Kind::Stream)
}

fn prompt_twice(first_prompt: &str, again_prompt: &str) -> Result<Passphrase> {
    let first = Zeroizing::new(rpassword::prompt_password(first_prompt)?);
    if first.is_empty() {
        bail!("{EMPTY}");
    }
    let again = Zeroizing::new(rpassword::prompt_password(again_prompt)?);
    if again != first {
        bail!("the passphrases do not match");
    }
    Ok(first)
}
