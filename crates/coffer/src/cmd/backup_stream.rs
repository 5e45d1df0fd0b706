//! `coffer backup --stdin` and `--stdin-from-command`: the stream a backup stores
//! as one file (docs/design.md#backup-from-a-stream). A command's output is read
//! to its end and the command waited for there: if it failed, the read fails, so
//! the library writes no snapshot, as restic does.

use std::ffi::OsString;
use std::io::Read;
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};

use anyhow::{Context, Result, bail};
use coffer_core::crypto::sign::SigningKey;
use coffer_core::ops::backup::{BackupOptions, BackupResult, StreamSource, backup_stream};
use coffer_core::progress::Progress;
use coffer_core::repo::Repository;

/// Where the stream comes from.
pub enum Stream {
    /// Standard input (`--stdin`).
    Stdin,
    /// The standard output of a command and its arguments (`--stdin-from-command`).
    Command(Vec<OsString>),
}

impl Stream {
    /// Backs up the stream as the file `name`. A command is started here, and
    /// its exit status decides whether the snapshot is written.
    pub fn backup(
        &self,
        name: &str,
        repo: &Repository,
        opts: &BackupOptions,
        key: &SigningKey,
        progress: &dyn Progress,
    ) -> Result<BackupResult> {
        match self {
            Stream::Stdin => {
                let mut stdin = std::io::stdin();
                let source =
                    StreamSource { name: name.to_string(), reader: &mut stdin, label: "standard input".into() };
                Ok(backup_stream(repo, opts, source, key, progress)?)
            }
            Stream::Command(argv) => {
                let mut output = CommandOutput::start(argv)?;
                let label = format!("the output of {}", output.command);
                let source = StreamSource { name: name.to_string(), reader: &mut output, label };
                let result = backup_stream(repo, opts, source, key, progress);
                if let Some(status) = output.status.filter(|s| !s.success()) {
                    bail!("the command {} failed ({status}): fix the command and run the backup again", output.command);
                }
                Ok(result?)
            }
        }
    }
}

/// A running command's standard output. At its end the command is waited for,
/// and a failure is returned as a read error.
struct CommandOutput {
    child: Child,
    stdout: ChildStdout,
    /// The command line, quoted for messages.
    command: String,
    /// Set once the command has ended.
    status: Option<ExitStatus>,
}

impl CommandOutput {
    fn start(argv: &[OsString]) -> Result<CommandOutput> {
        let Some((program, args)) = argv.split_first() else {
            bail!("--stdin-from-command needs a command: coffer backup --stdin-from-command -- COMMAND [ARGS...]");
        };
        let command = format!("{:?}", argv.iter().map(|a| a.to_string_lossy()).collect::<Vec<_>>().join(" "));
        let mut child = Command::new(program)
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot run the command {command}: check its name and PATH"))?;
        let stdout = child.stdout.take().context("the command's output was not captured")?;
        Ok(CommandOutput { child, stdout, command, status: None })
    }

    fn failure(&self, status: ExitStatus) -> std::io::Error {
        std::io::Error::other(format!("the command {} failed ({status})", self.command))
    }
}

impl Read for CommandOutput {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if let Some(status) = self.status {
            return if status.success() { Ok(0) } else { Err(self.failure(status)) };
        }
        let n = self.stdout.read(buf)?;
        if n == 0 && !buf.is_empty() {
            let status = self.child.wait()?;
            self.status = Some(status);
            if !status.success() {
                return Err(self.failure(status));
            }
        }
        Ok(n)
    }
}

impl Drop for CommandOutput {
    /// A backup that ended early leaves no command running behind it.
    fn drop(&mut self) {
        if self.status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
