//! Where the passphrase comes from: COFFER_PASSWORD, the password file, or a
//! prompt on the terminal (asked twice when a repository is being created).

use std::io::IsTerminal;

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
        let text =
            std::fs::read_to_string(file).with_context(|| format!("cannot read password file {}", file.display()))?;
        return Ok(text.lines().next().unwrap_or("").to_string());
    }
    if !std::io::stdin().is_terminal() {
        bail!("no passphrase: set COFFER_PASSWORD or COFFER_PASSWORD_FILE, pass --password-file, or run on a terminal");
    }
    let first = rpassword::prompt_password("enter passphrase for repository: ")?;
    if purpose == Purpose::Create {
        if first.is_empty() {
            bail!("an empty passphrase is not allowed");
        }
        let again = rpassword::prompt_password("enter the passphrase again: ")?;
        if again != first {
            bail!("the passphrases do not match");
        }
    }
    Ok(first)
}
