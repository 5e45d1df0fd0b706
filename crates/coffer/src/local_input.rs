//! Files the user names on the command line or in a profile (the profile itself,
//! password files, repository files, exclude and include files, lists of paths,
//! CA certificates) and the output of the password command, read with a bound.
//!
//! Each kind of input has a largest size ([`Limit`]); what holds more is refused
//! with a message naming the file and the limit, never read whole into memory.
//! A file is opened without blocking, so that a FIFO nobody writes does not hang
//! the command, and then checked by its type: a regular file is read; a pipe (as
//! `<(command)` gives) only where the input is a stream by nature ([`Kind::Stream`]);
//! anything else (a device such as `/dev/zero`, a directory, a socket) is refused.
//! Where the rule is "the first line" only the first line is read. See
//! docs/design.md#local-inputs.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use anyhow::{Context, Result, bail};
use zeroize::Zeroizing;

/// The largest input of each kind, in bytes.
#[derive(Clone, Copy, Debug)]
pub struct Limit(pub u64);

impl Limit {
    /// A passphrase, or a repository location: the first line of a file or of a
    /// command's output.
    pub const LINE: Limit = Limit(64 << 10);
    /// All a password command may print (its first line is the passphrase; some
    /// password managers print more lines after it).
    pub const COMMAND_OUTPUT: Limit = Limit(1 << 20);
    /// A profile.
    pub const PROFILE: Limit = Limit(1 << 20);
    /// A file of CA certificates (`--cacert`).
    pub const CERTIFICATES: Limit = Limit(4 << 20);
    /// An exclude or include file.
    pub const PATTERNS: Limit = Limit(16 << 20);
    /// A list of paths to back up (`--files-from*`), about two million paths.
    pub const PATHS: Limit = Limit(256 << 20);
}

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.0;
        if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
            write!(f, "{} MiB", n >> 20)
        } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
            write!(f, "{} KiB", n >> 10)
        } else {
            write!(f, "{n} bytes")
        }
    }
}

/// What may be read as an input.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    /// A regular file only (a profile, an exclude file, a certificate).
    File,
    /// A regular file, or a pipe read until its writer closes it (a password
    /// file or a list of paths given as `<(command)`).
    Stream,
}

/// Opens `path` for reading without blocking on a FIFO, and checks its type
/// against `kind`. `what` names the input in messages ("profile", "password file").
pub fn open(path: &Path, what: &str, kind: Kind) -> Result<File> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .with_context(|| format!("cannot read {what} {}", path.display()))?;
    let kind_of = file.metadata().with_context(|| format!("cannot read {what} {}", path.display()))?.file_type();
    let pipe = kind_of.is_fifo();
    if kind_of.is_file() || (pipe && kind == Kind::Stream) {
        // Reads wait for data again: a pipe whose writer is slow is waited for; one
        // with no writer at all reads as empty.
        let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
        // SAFETY: fcntl on a descriptor this function owns changes only its flags.
        let cleared = unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            flags >= 0 && libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) == 0
        };
        if !cleared {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("cannot read {what} {}", path.display()));
        }
        return Ok(file);
    }
    let found = if kind_of.is_dir() {
        "a directory"
    } else if pipe {
        "a FIFO"
    } else if kind_of.is_char_device() || kind_of.is_block_device() {
        "a device"
    } else if kind_of.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    };
    let allowed = match kind {
        Kind::File => "a regular file",
        Kind::Stream => "a regular file or a pipe",
    };
    bail!("{what} {} is {found}: give {allowed}", path.display())
}

/// The whole of `path`, at most `limit` bytes.
pub fn read_all(path: &Path, what: &str, kind: Kind, limit: Limit) -> Result<Vec<u8>> {
    let file = open(path, what, kind)?;
    bounded(file, limit).map_err(|e| e.into_error(what, path, limit))
}

/// The whole of `path` as text, at most `limit` bytes.
pub fn read_text(path: &Path, what: &str, kind: Kind, limit: Limit) -> Result<String> {
    let bytes = read_all(path, what, kind, limit)?;
    String::from_utf8(bytes).map_err(|_| anyhow::anyhow!("{what} {} is not UTF-8 text", path.display()))
}

/// The first line of `path` without its line ending (the rest is not read),
/// wiped from memory when dropped; an empty file gives an empty line.
pub fn first_line(path: &Path, what: &str, kind: Kind) -> Result<Zeroizing<String>> {
    let file = open(path, what, kind)?;
    let line = line_of(std::io::BufReader::new(file), Limit::LINE).map_err(|e| match e {
        ReadError::TooLarge => anyhow::anyhow!(
            "{what} {}: its first line is longer than {}, the most coffer reads there: check that it is the right \
             file",
            path.display(),
            Limit::LINE
        ),
        e => e.into_error(what, path, Limit::LINE),
    })?;
    Ok(line.unwrap_or_default())
}

/// Standard input, whole, at most `limit` bytes.
pub fn stdin_all(what: &str, limit: Limit) -> Result<Vec<u8>> {
    bounded(std::io::stdin().lock(), limit).map_err(|e| e.into_error(what, Path::new("from standard input"), limit))
}

/// The first line of standard input, or None when standard input is empty.
pub fn stdin_line(what: &str) -> Result<Option<Zeroizing<String>>> {
    line_of(std::io::stdin().lock(), Limit::LINE)
        .map_err(|e| e.into_error(what, Path::new("from standard input"), Limit::LINE))
}

/// Why an input could not be read.
#[derive(Debug)]
pub enum ReadError {
    Io(std::io::Error),
    TooLarge,
    NotText,
}

impl ReadError {
    fn into_error(self, what: &str, path: &Path, limit: Limit) -> anyhow::Error {
        match self {
            ReadError::Io(e) => anyhow::Error::new(e).context(format!("cannot read {what} {}", path.display())),
            ReadError::TooLarge => anyhow::anyhow!(
                "{what} {} holds more than {limit}, the most coffer reads there: check that it is the right file",
                path.display()
            ),
            ReadError::NotText => anyhow::anyhow!("{what} {} is not UTF-8 text", path.display()),
        }
    }
}

/// All of `input`, refused when it holds more than `limit` bytes. The buffer is
/// wiped when dropped (the input may be a secret).
pub fn bounded(input: impl Read, limit: Limit) -> Result<Vec<u8>, ReadError> {
    let mut out = Zeroizing::new(Vec::new());
    input.take(limit.0 + 1).read_to_end(&mut out).map_err(ReadError::Io)?;
    if out.len() as u64 > limit.0 {
        return Err(ReadError::TooLarge);
    }
    Ok(std::mem::take(&mut *out))
}

/// The first line of `input` without its line ending (`\n` or `\r\n`), reading
/// no further than its end, or None when `input` is empty; a line longer than
/// `limit` is refused.
pub fn line_of(mut input: impl Read, limit: Limit) -> Result<Option<Zeroizing<String>>, ReadError> {
    let mut line = Zeroizing::new(Vec::new());
    let mut buf = [0u8; 1];
    let mut empty = true;
    loop {
        match input.read(&mut buf) {
            Ok(0) => break,
            Ok(_) if buf[0] == b'\n' => {
                empty = false;
                break;
            }
            Ok(_) => {
                empty = false;
                if line.len() as u64 >= limit.0 {
                    return Err(ReadError::TooLarge);
                }
                line.push(buf[0]);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(ReadError::Io(e)),
        }
    }
    if empty {
        return Ok(None);
    }
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    let text = std::str::from_utf8(&line).map_err(|_| ReadError::NotText)?;
    Ok(Some(Zeroizing::new(text.to_string())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bound_is_kept() {
        assert_eq!(bounded(&b"abc"[..], Limit(3)).unwrap(), b"abc");
        assert!(matches!(bounded(&b"abcd"[..], Limit(3)), Err(ReadError::TooLarge)));
        // An endless input stops at the bound.
        assert!(matches!(bounded(std::io::repeat(0), Limit(1 << 10)), Err(ReadError::TooLarge)));
    }

    #[test]
    fn the_first_line_only() {
        assert_eq!(
            line_of(&b"secret\r\nmore"[..], Limit::LINE).unwrap().as_deref().map(|s| s.as_str()),
            Some("secret")
        );
        assert_eq!(line_of(&b"\n"[..], Limit::LINE).unwrap().as_deref().map(|s| s.as_str()), Some(""));
        assert!(line_of(&b""[..], Limit::LINE).unwrap().is_none());
        assert!(matches!(line_of(std::io::repeat(b'y'), Limit(100)), Err(ReadError::TooLarge)));
        // Only the line is read: what follows stays in the input.
        let mut input = &b"one\ntwo\n"[..];
        line_of(&mut input, Limit::LINE).unwrap();
        assert_eq!(input, b"two\n");
    }

    #[test]
    fn limits_read_plainly() {
        assert_eq!(Limit::LINE.to_string(), "64 KiB");
        assert_eq!(Limit::PROFILE.to_string(), "1 MiB");
        assert_eq!(Limit(10).to_string(), "10 bytes");
    }
}
