//! Tests that need a server the test command starts (docs/testing.md): S3 (the
//! Versity gateway), SFTP (OpenSSH's sshd) and the fault proxy (toxiproxy), each
//! found through its `COFFER_TEST_*` variables.
//!
//! A test whose server's variables are absent calls [`absent`]. When
//! `COFFER_TEST_SKIP` names the server's group, the test returns after a notice,
//! and a line goes to the file `COFFER_TEST_SKIP_LOG` names (the test command
//! counts them in its summary). Otherwise the test fails, saying how to run it:
//! a test never passes by skipping unless its group was skipped by name.

use std::io::Write;

/// A group of tests, by the server they need.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Server {
    /// The S3 test server (`COFFER_TEST_S3_*`, `COFFER_TEST_VERSITYGW`).
    S3,
    /// The SFTP test server (`COFFER_TEST_SFTP_*`).
    Sftp,
    /// The fault proxy in front of the S3 server (`COFFER_TEST_TOXIPROXY*`).
    Toxiproxy,
    /// The pinned restic binary the import tests make repositories with
    /// (`COFFER_TEST_RESTIC`): a tool, not a server, installed the same way.
    Restic,
    /// The pinned borg (Debian's package, `COFFER_TEST_BORG`), likewise.
    Borg,
    /// The pinned kopia binary (`COFFER_TEST_KOPIA`), likewise.
    Kopia,
    /// The SMTP test server (mailpit, `COFFER_TEST_SMTP*`).
    Smtp,
    /// A browser driven through its WebDriver server (Debian's Chromium and
    /// ChromeDriver, `COFFER_TEST_WEBDRIVER`, `COFFER_TEST_CHROMIUM`).
    Browser,
    /// Firefox driven through geckodriver (Debian's firefox-esr,
    /// `COFFER_TEST_GECKODRIVER`, `COFFER_TEST_FIREFOX`).
    Firefox,
}

impl Server {
    /// The group's name in `COFFER_TEST_SKIP`.
    pub fn group(self) -> &'static str {
        match self {
            Server::S3 => "s3",
            Server::Sftp => "sftp",
            Server::Toxiproxy => "toxiproxy",
            Server::Restic => "restic",
            Server::Borg => "borg",
            Server::Kopia => "kopia",
            Server::Smtp => "smtp",
            Server::Browser => "browser",
            Server::Firefox => "firefox",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Server::S3 => "the S3 test server (COFFER_TEST_S3_ENDPOINT and the other COFFER_TEST_S3_* variables)",
            Server::Sftp => "the SFTP test server (COFFER_TEST_SFTP_HOST and the other COFFER_TEST_SFTP_* variables)",
            Server::Toxiproxy => "the fault proxy (COFFER_TEST_TOXIPROXY) or the S3 server behind it",
            Server::Restic => "the pinned restic binary (COFFER_TEST_RESTIC)",
            Server::Borg => "the pinned borg (COFFER_TEST_BORG)",
            Server::Kopia => "the pinned kopia binary (COFFER_TEST_KOPIA)",
            Server::Smtp => "the SMTP test server (COFFER_TEST_SMTP and the other COFFER_TEST_SMTP_* variables)",
            Server::Browser => "the browser and its WebDriver server (COFFER_TEST_WEBDRIVER, COFFER_TEST_CHROMIUM)",
            Server::Firefox => "Firefox and geckodriver (COFFER_TEST_GECKODRIVER, COFFER_TEST_FIREFOX)",
        }
    }
}

/// Whether `skip` (the value of `COFFER_TEST_SKIP`: group names separated by
/// commas or spaces) skips `server`'s group. The fault proxy's tests go through
/// the S3 server, so skipping `s3` skips them too.
pub fn skipped_by(skip: &str, server: Server) -> bool {
    let named = |g: &str| skip.split([',', ' ']).any(|n| n.trim().eq_ignore_ascii_case(g));
    named(server.group()) || (server == Server::Toxiproxy && named(Server::S3.group()))
}

/// Called by a test whose server's variables are not set: returns (after a
/// notice) when `COFFER_TEST_SKIP` skips the server's group, and panics with
/// the way to run the test otherwise.
pub fn absent(server: Server) {
    let skip = std::env::var("COFFER_TEST_SKIP").unwrap_or_default();
    let test = std::thread::current().name().unwrap_or("a test").to_string();
    if let Err(why) = may_skip(&skip, server, &test) {
        panic!("{why}");
    }
    eprintln!("skipped: COFFER_TEST_SKIP={skip} skips the {} tests", server.group());
    if let Some(log) = std::env::var_os("COFFER_TEST_SKIP_LOG") {
        // One short line per skipped test, appended in one write.
        let line = format!("{} {test}\n", server.group());
        if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(log) {
            let _ = f.write_all(line.as_bytes());
        }
    }
}

/// `Ok` when `skip` skips `server`'s group, else why `test` fails.
fn may_skip(skip: &str, server: Server, test: &str) -> Result<(), String> {
    if skipped_by(skip, server) {
        return Ok(());
    }
    Err(format!(
        "{test} needs {}, which is not set: run the tests with `bash .ci/test.sh` (the README's test command \
         installs and starts every test server), or skip this group by name with COFFER_TEST_SKIP={}",
        server.describe(),
        server.group()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_are_skipped_only_by_name() {
        assert!(skipped_by("s3", Server::S3));
        assert!(skipped_by("sftp, S3", Server::S3));
        assert!(skipped_by("s3", Server::Toxiproxy), "the proxy's tests need S3");
        assert!(!skipped_by("", Server::S3));
        assert!(!skipped_by("s3x,sftp", Server::S3));
        assert!(!skipped_by("toxiproxy", Server::S3));
        assert!(!skipped_by("s3", Server::Sftp));
    }

    #[test]
    fn an_absent_server_fails_the_test_unless_its_group_is_skipped() {
        let why = may_skip("", Server::Sftp, "t").unwrap_err();
        assert!(why.contains("bash .ci/test.sh") && why.contains("COFFER_TEST_SKIP=sftp"), "{why}");
        assert!(may_skip("s3", Server::Sftp, "t").is_err());
        assert_eq!(may_skip("s3,sftp", Server::Sftp, "t"), Ok(()));
    }
}
