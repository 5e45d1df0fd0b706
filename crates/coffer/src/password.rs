//! Where passphrases come from: COFFER_PASSWORD, the password file, or a prompt on
//! the terminal (asked twice when a repository is being created); for the passphrase
//! of a new key file, COFFER_NEW_PASSWORD, the new password file, or a prompt asked twice.

use std::io::IsTerminal;
use std::path::Path;

use anyhow::{Context, Result, bail};

use crate::args::GlobalArgs;

/// Whether the passphrase is for a new repository (then it is confirmed).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    Open,
    Create,
}

/// Reads the passphrase. Never logs or prints it.
pub fn read(global: &GlobalArgs, purpose: Purpose) -> Result<String> {
    if let Ok(p) = std::env::var("COFFER_PASSWORD") {
        return Ok(p);
    }
    if let Some(file) = &global.password_file {
        return first_line(file);
    }
    if !std::io::stdin().is_terminal() {
        bail!("no passphrase: set COFFER_PASSWORD or COFFER_PASSWORD_FILE, pass --password-file, or run on a terminal");
    }
    if purpose == Purpose::Create {
        return prompt_twice("enter passphrase for repository: ", "enter the passphrase again: ");
    }
    Ok(rpassword::prompt_password("enter passphrase for repository: ")?)
}

/// Reads the passphrase of a new key file: COFFER_NEW_PASSWORD, the new password
/// file, or a prompt on the terminal (asked twice). An empty one is refused.
pub fn read_new(new_password_file: Option<&Path>) -> Result<String> {
    let pw = if let Ok(p) = std::env::var("COFFER_NEW_PASSWORD") {
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
        bail!("an empty passphrase is not allowed");
    }
    Ok(pw)
}

fn first_line(file: &Path) -> Result<String> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("cannot read password file {}", file.display()))?;
    Ok(text.lines().next().unwrap_or("").to_string())
}

fn prompt_twice(first_prompt: &str, again_prompt: &str) -> Result<String> {
    let first = rpassword::prompt_password(first_prompt)?;
    if first.is_empty() {
        bail!("an empty passphrase is not allowed");
    }
    let again = rpassword::prompt_password(again_prompt)?;
    if again != first {
        bail!("the passphrases do not match");
    }
    Ok(first)
}
