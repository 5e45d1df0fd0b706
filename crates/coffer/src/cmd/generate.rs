//! `coffer generate` (shell completions and man pages, from the argument
//! definitions by clap_complete and clap_mangen) and `coffer version`
//! (docs/design.md#cli).

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};
use clap::CommandFactory;
use serde_json::json;

use crate::args::{Cli, GenerateArgs, GlobalArgs};
use crate::{exit, output};

/// Writes `bytes` to `target`, or to standard output for `-`.
fn write_to(target: &Path, bytes: &[u8]) -> Result<()> {
    if target.as_os_str() == "-" {
        std::io::stdout().write_all(bytes).context("cannot write to standard output")?;
        return Ok(());
    }
    std::fs::write(target, bytes)
        .with_context(|| format!("cannot write {}: check the directory exists", target.display()))
}

/// With `--json`, prints one object of type `generate`: each completion script
/// with its `path`, or its text as `script` when written to standard output, and
/// the man pages written.
pub fn run(global: &GlobalArgs, a: &GenerateArgs) -> Result<u8> {
    use clap_complete::Shell;
    let shells =
        [(Shell::Bash, &a.bash_completion), (Shell::Zsh, &a.zsh_completion), (Shell::Fish, &a.fish_completion)];
    let mut completions = Vec::new();
    for (shell, target) in shells {
        let Some(target) = target else { continue };
        let mut buf = Vec::new();
        clap_complete::generate(shell, &mut Cli::command(), "coffer", &mut buf);
        let to_stdout = target.as_os_str() == "-";
        if global.json && to_stdout {
            completions.push(json!({"shell": shell.to_string(), "script": String::from_utf8_lossy(&buf)}));
            continue;
        }
        write_to(target, &buf)?;
        if global.json {
            completions.push(json!({"shell": shell.to_string(), "path": target}));
        } else if !global.quiet && !to_stdout {
            eprintln!("wrote the {shell} completion script to {}", target.display());
        }
    }
    let mut man = serde_json::Value::Null;
    if let Some(dir) = &a.man {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create the man page directory {}", dir.display()))?;
        let cmd = Cli::command();
        let mut pages = vec![("coffer".to_string(), cmd.clone())];
        for sub in cmd.get_subcommands() {
            let name = format!("coffer-{}", sub.get_name());
            pages.push((name.clone(), sub.clone().name(name)));
        }
        let names: Vec<String> = pages.iter().map(|(name, _)| format!("{name}.1")).collect();
        for (name, page) in pages {
            let mut buf = Vec::new();
            clap_mangen::Man::new(page)
                .render(&mut buf)
                .with_context(|| format!("cannot render the man page {name}"))?;
            write_to(&dir.join(format!("{name}.1")), &buf)?;
        }
        if global.json {
            man = json!({"directory": dir, "pages": names});
        } else if !global.quiet {
            eprintln!("wrote man pages to {}", dir.display());
        }
    }
    if global.json {
        output::json(&json!({"type": "generate", "completions": completions, "man": man}));
    }
    Ok(exit::OK)
}

pub fn version(global: &GlobalArgs) -> Result<u8> {
    let (v, os, arch) = (env!("CARGO_PKG_VERSION"), std::env::consts::OS, std::env::consts::ARCH);
    if global.json {
        output::json(&json!({"type": "version", "version": v, "os": os, "arch": arch}));
    } else {
        println!("coffer {v} ({os}/{arch})");
    }
    Ok(exit::OK)
}
