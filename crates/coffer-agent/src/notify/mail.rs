//! E-mail over SMTP: one plain text message per event, subject `coffer: JOB EVENT`.
//!
//! `smtp://HOST[:PORT]` (port 587) requires STARTTLS, `smtps://HOST[:PORT]`
//! (465) is TLS from the start, `smtp+insecure://HOST[:PORT]` (25) is plain text
//! and refused unless HOST is a loopback address. Certificates are verified
//! against the system's roots and the notifier's `cacert`. The password is read
//! from `password-file` (its first line) at each send and wiped after use.

use std::net::IpAddr;

use lettre::message::{Mailbox, header::ContentType};
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Certificate, Tls, TlsParameters};
use lettre::transport::smtp::extension::ClientId;
use lettre::{SmtpTransport, Transport};
use zeroize::Zeroizing;

use super::{Message, Notifier, NotifyError, chain, read_cacert, tls_provider};
use crate::config::{MailConfig, NotifierConfig};

/// How the connection to the server is protected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Security {
    /// `smtp://`: plain text, then STARTTLS, which the server must offer.
    StartTls,
    /// `smtps://`: TLS from the first byte.
    Tls,
    /// `smtp+insecure://`: plain text throughout (loopback only).
    Plain,
}

/// Where `smtp` points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    pub security: Security,
    pub host: String,
    pub port: u16,
}

impl std::fmt::Display for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scheme = match self.security {
            Security::StartTls => "smtp",
            Security::Tls => "smtps",
            Security::Plain => "smtp+insecure",
        };
        if self.host.contains(':') {
            write!(f, "{scheme}://[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{scheme}://{}:{}", self.host, self.port)
        }
    }
}

/// Whether `host` is a loopback address (or `localhost`).
fn is_loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost") || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Reads an `smtp` value. Plain text to a host that is not a loopback address
/// is refused here, before any connection.
pub fn parse_server(smtp: &str) -> Result<Server, String> {
    let Some((scheme, rest)) = smtp.split_once("://") else {
        return Err(format!(
            "smtp {smtp:?} is not smtp://HOST[:PORT], smtps://HOST[:PORT] or smtp+insecure://HOST[:PORT]"
        ));
    };
    let (security, default_port) = match scheme.to_ascii_lowercase().as_str() {
        "smtp" => (Security::StartTls, 587),
        "smtps" => (Security::Tls, 465),
        "smtp+insecure" => (Security::Plain, 25),
        _ => {
            return Err(format!(
                "smtp: unknown scheme {scheme:?}; use smtp:// (STARTTLS), smtps:// (TLS) or smtp+insecure:// (loopback only)"
            ));
        }
    };
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    if authority.contains('@') {
        return Err("smtp: the address holds a user name or password; give them as username and password-file".into());
    }
    if authority.contains(['/', '?', '#']) {
        return Err(format!("smtp {}://…: give HOST[:PORT] only, with no path", scheme));
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (h, after) = v6.split_once(']').ok_or_else(|| format!("smtp {smtp:?}: an unclosed [ in the host"))?;
        match after.strip_prefix(':') {
            Some(p) => (h.to_string(), Some(p)),
            None if after.is_empty() => (h.to_string(), None),
            None => return Err(format!("smtp {smtp:?}: junk after the host")),
        }
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (authority.to_string(), None),
        }
    };
    if host.is_empty() {
        return Err(format!("smtp {smtp:?} names no host"));
    }
    let port = match port {
        None => default_port,
        Some(p) => p.parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(|| format!("smtp {smtp:?}: bad port {p:?}"))?,
    };
    if security == Security::Plain && !is_loopback(&host) {
        return Err(format!(
            "smtp+insecure:// sends the mail and the password as plain text, so it is for a loopback host only, not \
             {host}; use smtp:// (STARTTLS) or smtps:// (TLS)"
        ));
    }
    Ok(Server { security, host, port })
}

/// The first line of `password-file`, wiped when dropped.
fn read_password(cfg: &NotifierConfig, path: &std::path::Path) -> Result<Zeroizing<String>, NotifyError> {
    let bad = |what: String| NotifyError::PasswordFile { notifier: cfg.name.clone(), path: path.to_path_buf(), what };
    let bytes = Zeroizing::new(std::fs::read(path).map_err(|e| bad(e.to_string()))?);
    let first = bytes.split(|b| *b == b'\n').next().unwrap_or_default();
    let first = first.strip_suffix(b"\r").unwrap_or(first);
    if first.is_empty() {
        return Err(bad("its first line is empty; write the SMTP password on it".into()));
    }
    let text = std::str::from_utf8(first).map_err(|_| bad("its first line is not UTF-8".into()))?;
    Ok(Zeroizing::new(text.to_string()))
}

fn mailbox(cfg: &NotifierConfig, key: &str, addr: &str) -> Result<Mailbox, NotifyError> {
    addr.parse::<Mailbox>().map_err(|e| NotifyError::Config {
        notifier: cfg.name.clone(),
        what: format!("{key} {addr:?} is not an e-mail address ({e})"),
    })
}

/// The EHLO name: the message's host when it is a valid domain name.
fn hello_name(host: &str) -> ClientId {
    let ok = !host.is_empty()
        && host.len() <= 253
        && host
            .split('.')
            .all(|l| !l.is_empty() && l.len() <= 63 && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'));
    if ok { ClientId::Domain(host.to_string()) } else { ClientId::Domain("localhost".to_string()) }
}

/// The e-mail of `msg`.
pub fn email(cfg: &NotifierConfig, mail: &MailConfig, msg: &Message) -> Result<lettre::Message, NotifyError> {
    let mut b = lettre::Message::builder().from(mailbox(cfg, "from", &mail.from)?).subject(msg.title());
    if mail.to.is_empty() {
        return Err(NotifyError::Config { notifier: cfg.name.clone(), what: "to lists no address".into() });
    }
    for to in &mail.to {
        b = b.to(mailbox(cfg, "to", to)?);
    }
    b.header(ContentType::TEXT_PLAIN)
        .body(msg.text())
        .map_err(|e| NotifyError::Config { notifier: cfg.name.clone(), what: format!("cannot make the message: {e}") })
}

pub(crate) fn send(
    notifier: &Notifier,
    cfg: &NotifierConfig,
    mail: &MailConfig,
    msg: &Message,
) -> Result<(), NotifyError> {
    let server = parse_server(&mail.smtp).map_err(|what| NotifyError::Config { notifier: cfg.name.clone(), what })?;
    let shown = server.to_string();
    let fail = |what: String| NotifyError::Mail { notifier: cfg.name.clone(), server: shown.clone(), what };
    let email = email(cfg, mail, msg)?;

    let mut builder = SmtpTransport::builder_dangerous(server.host.as_str())
        .port(server.port)
        .timeout(Some(notifier.timeout))
        .hello_name(hello_name(&msg.host));
    if server.security != Security::Plain {
        tls_provider();
        let mut params = TlsParameters::builder(server.host.clone());
        if let Some(pem) = read_cacert(cfg)? {
            let cert = Certificate::from_pem(&pem).map_err(|e| NotifyError::Cacert {
                notifier: cfg.name.clone(),
                path: cfg.cacert.clone().unwrap_or_default(),
                what: chain(&e),
            })?;
            params = params.add_root_certificate(cert);
        }
        let params = params.build_rustls().map_err(|e| fail(format!("cannot set up TLS: {}", chain(&e))))?;
        builder = builder.tls(match server.security {
            Security::StartTls => Tls::Required(params),
            _ => Tls::Wrapper(params),
        });
    } else {
        builder = builder.tls(Tls::None);
    }
    match (&mail.username, &mail.password_file) {
        (Some(user), Some(file)) => {
            let password = read_password(cfg, file)?;
            builder = builder.credentials(Credentials::new(user.clone(), password.to_string()));
        }
        (Some(_), None) => {
            return Err(NotifyError::Config {
                notifier: cfg.name.clone(),
                what: "it has a username but no password-file; give the file that holds the SMTP password".into(),
            });
        }
        (None, Some(_)) => {
            return Err(NotifyError::Config {
                notifier: cfg.name.clone(),
                what: "it has a password-file but no username; give the SMTP user name".into(),
            });
        }
        (None, None) => {}
    }
    let transport = builder.build();
    transport.send(&email).map(|_| ()).map_err(|e| {
        let mut what = chain(&e);
        if e.is_timeout() {
            what = format!("no answer within {}s ({what})", notifier.timeout.as_secs_f64());
        }
        if what.contains("certificate") || what.contains("UnknownIssuer") {
            what.push_str("; if the server's certificate is signed by a private CA, give that CA's PEM file as cacert");
        }
        if what.contains("(535)") || what.contains("(530)") {
            what.push_str("; check its username and the password in its password-file");
        }
        if server.security == Security::StartTls && what.contains("STARTTLS") {
            what.push_str("; the server must offer STARTTLS for smtp://, or use smtps://");
        }
        fail(what)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn servers_parse_with_their_defaults() {
        let s = parse_server("smtp://mail.example.net").unwrap();
        assert_eq!((s.security, s.host.as_str(), s.port), (Security::StartTls, "mail.example.net", 587));
        let s = parse_server("smtps://mail.example.net:2465/").unwrap();
        assert_eq!((s.security, s.port), (Security::Tls, 2465));
        let s = parse_server("smtp+insecure://[::1]:2525").unwrap();
        assert_eq!((s.security, s.host.as_str(), s.port), (Security::Plain, "::1", 2525));
        assert_eq!(s.to_string(), "smtp+insecure://[::1]:2525");
        assert!(parse_server("smtp+insecure://127.0.0.2").is_ok());
        assert!(parse_server("smtp+insecure://localhost").is_ok());
    }

    #[test]
    fn bad_servers_are_refused() {
        let e = parse_server("smtp+insecure://mail.example.net").unwrap_err();
        assert!(e.contains("loopback") && e.contains("mail.example.net"), "{e}");
        assert!(parse_server("smtp+insecure://10.0.0.1:25").is_err());
        assert!(parse_server("imap://mail.example.net").unwrap_err().contains("unknown scheme"));
        let e = parse_server("smtp://user:hunter2@mail.example.net").unwrap_err();
        assert!(!e.contains("hunter2"), "{e}");
        assert!(parse_server("smtp://mail.example.net:0").is_err());
        assert!(parse_server("smtp://mail.example.net:99999").is_err());
        assert!(parse_server("smtp://").is_err());
        assert!(parse_server("mail.example.net").is_err());
    }
}
