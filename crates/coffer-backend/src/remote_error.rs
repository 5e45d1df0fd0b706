//! What a remote storage's failure means for the user. OpenDAL reports an error
//! with its own context (the operation, the service, the signer's internals, the
//! HTTP response); the common causes are recognised here and told in one line
//! naming the cause and the fix ([`Cause::advice`]), with OpenDAL's text kept as
//! the error's detail (shown under `-v`). A cause also settles whether a retry
//! can help ([`Cause::kind`]): an untrusted certificate or refused credentials
//! fail at once, not after a minute of retries.

use opendal::ErrorKind as OdErrorKind;

use super::ErrorKind;

/// A recognised cause of a remote storage error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// No credentials were found to sign requests with.
    NoCredentials,
    /// The storage does not know the access key, or the secret does not match.
    WrongCredentials,
    /// The credentials are valid but may not do this (403).
    AccessDenied,
    /// A coffer server refused an upload: the key's quota is used up.
    QuotaUsed,
    /// A coffer server refused a request: the key's level does not allow it.
    KeyLevel,
    /// A coffer server refused a prune's delete: its notice is younger than the
    /// server's grace period.
    PruneGrace,
    /// A coffer server refused a request it had received before (a replay).
    Replayed,
    /// The bucket (or container) does not exist.
    NoBucket,
    /// The host name does not resolve.
    HostNotFound,
    /// Nothing listens at the host and port.
    Refused,
    /// The server's TLS certificate is not trusted.
    TlsUntrusted,
    /// The storage refused the request's signature time: the clocks differ.
    ClockSkew,
    /// The request took too long.
    TimedOut,
    /// The storage asks for fewer requests.
    Throttled,
    /// The connection was closed in the middle.
    Dropped,
    /// The storage's settings do not make sense.
    ConfigInvalid,
}

impl Cause {
    /// The cause of `e`, when it is a common one.
    pub fn of(e: &opendal::Error) -> Option<Cause> {
        let text = format!("{e:?}");
        let has = |s: &str| text.contains(s);
        Some(match e.kind() {
            _ if has("NoSuchBucket") || has("bucket does not exist") || has("NoSuchContainer") => Cause::NoBucket,
            _ if has("RequestTimeTooSkewed") || has("RequestExpired") || has("too skewed") => Cause::ClockSkew,
            _ if has("failed to load signing credential") || has("no valid credential") => Cause::NoCredentials,
            _ if has("SignatureDoesNotMatch")
                || has("InvalidAccessKeyId")
                || has("InvalidClientTokenId")
                || has("XAdminUserNotFound")
                || has("AuthorizationHeaderMalformed") =>
            {
                Cause::WrongCredentials
            }
            OdErrorKind::PermissionDenied if has("PruneGracePending") => Cause::PruneGrace,
            OdErrorKind::PermissionDenied if has("RequestReplayed") => Cause::Replayed,
            OdErrorKind::PermissionDenied if has("access key") && has("has a quota of") => Cause::QuotaUsed,
            OdErrorKind::PermissionDenied if has("access key") && has("level is") => Cause::KeyLevel,
            OdErrorKind::PermissionDenied => Cause::AccessDenied,
            OdErrorKind::RateLimited => Cause::Throttled,
            OdErrorKind::ConfigInvalid => Cause::ConfigInvalid,
            _ if has("certificate") || has("InvalidCertificate") || has("UnknownIssuer") => Cause::TlsUntrusted,
            _ if has("dns error") || has("failed to lookup address") || has("Name or service not known") => {
                Cause::HostNotFound
            }
            _ if has("Connection refused") || has("ConnectionRefused") => Cause::Refused,
            _ if has("timeout reached") || has("timed out") => Cause::TimedOut,
            _ if has("connection reset") || has("Connection reset") || has("connection closed") => Cause::Dropped,
            _ => return None,
        })
    }

    /// Whether a retry can mend it, where the cause settles that: `None` leaves
    /// the error's own classification.
    pub fn kind(self) -> Option<ErrorKind> {
        match self {
            Cause::NoCredentials
            | Cause::WrongCredentials
            | Cause::AccessDenied
            | Cause::QuotaUsed
            | Cause::KeyLevel
            | Cause::PruneGrace
            | Cause::NoBucket
            | Cause::TlsUntrusted
            | Cause::ClockSkew
            | Cause::ConfigInvalid => Some(ErrorKind::Permanent),
            Cause::Throttled | Cause::TimedOut | Cause::Dropped | Cause::Refused => Some(ErrorKind::Transient),
            // A client that meets it sent the same request twice within a
            // second (the signature covers the time to the second): the retry
            // is signed anew.
            Cause::Replayed => Some(ErrorKind::Transient),
            // A name that does not resolve may be a resolver that is down for a moment.
            Cause::HostNotFound => None,
        }
    }

    /// The cause and what to do, in one line.
    pub fn advice(self) -> &'static str {
        match self {
            Cause::NoCredentials => {
                "no credentials for the storage: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or the service's \
                 own variables, or a profile's [storage] table)"
            }
            Cause::WrongCredentials => {
                "the storage does not accept these credentials (403: unknown access key, or wrong secret): check \
                 AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
            }
            Cause::AccessDenied => {
                "the storage refused the request (403: access denied): check the credentials (AWS_ACCESS_KEY_ID and \
                 AWS_SECRET_ACCESS_KEY, or the service's own variables) and the bucket's access policy"
            }
            Cause::QuotaUsed => {
                "the coffer server refused the upload: this access key's quota is used up (ask the server's admin \
                 for a larger one)"
            }
            Cause::KeyLevel => {
                "the coffer server refused the request: this access key's level does not allow it (the server's \
                 message names the level that would; ask the server's admin for such a key)"
            }
            Cause::PruneGrace => {
                "the coffer server refused the delete: the prune did not wait the server's grace period after its \
                 prune notice (the server's message says how long it waited and how long is needed; run the prune \
                 with at least that --grace)"
            }
            Cause::Replayed => {
                "the coffer server refused a request it had received before with the same signature (a replay); if \
                 no one replays this client's requests, run the command again"
            }
            Cause::NoBucket => {
                "the bucket does not exist: create it first (coffer does not create buckets), or correct the location"
            }
            Cause::HostNotFound => "the storage host name does not resolve: check the host in the location",
            Cause::Refused => {
                "the connection was refused: is the storage server running, and are the host and port right?"
            }
            Cause::TlsUntrusted => {
                "the server's TLS certificate is not trusted: pass the CA that signed it with --cacert FILE, or check \
                 the host name"
            }
            Cause::ClockSkew => {
                "the storage refused the request's time: this machine's clock is too far from the server's; set the \
                 clock right (NTP)"
            }
            Cause::TimedOut => "the request timed out: check the network and the storage's load",
            Cause::Throttled => "the storage is throttling requests: try again later, or lower --connections",
            Cause::Dropped => "the connection was dropped: check the network",
            Cause::ConfigInvalid => "the storage configuration is invalid: check the location and its variables",
        }
    }
}

/// The server's own words in an S3 error response, when there are some: a
/// coffer server explains its refusals there. OpenDAL reports the parsed
/// response as `S3Error { code: "…", message: "…", … }` (a quoted, escaped
/// string), or the body itself (`<Message>…</Message>`).
pub fn server_message(e: &opendal::Error) -> Option<String> {
    message_in(&e.to_string())
}

fn message_in(text: &str) -> Option<String> {
    if let Some(at) = text.find("message: \"") {
        let mut out = String::new();
        let mut chars = text[at + "message: \"".len()..].chars();
        loop {
            match chars.next()? {
                '"' => break,
                '\\' => match chars.next()? {
                    'n' => out.push(' '),
                    c => out.push(c),
                },
                c => out.push(c),
            }
        }
        return Some(out).filter(|m| !m.is_empty());
    }
    let start = text.find("<Message>")? + "<Message>".len();
    let end = text[start..].find("</Message>")? + start;
    Some(text[start..end].to_string()).filter(|m| !m.is_empty())
}

#[cfg(test)]
mod tests {
    use super::message_in;

    #[test]
    fn the_servers_words_are_found_in_either_form() {
        let parsed = r#"PermissionDenied at write => S3Error { code: "AccessDenied", message: "sessions/x: access key \"laptop\": the level is read", resource: "" }"#;
        assert_eq!(message_in(parsed).as_deref(), Some(r#"sessions/x: access key "laptop": the level is read"#));
        let body = "<Error><Code>AccessDenied</Code><Message>quota used</Message></Error>";
        assert_eq!(message_in(body).as_deref(), Some("quota used"));
        assert_eq!(message_in("PermissionDenied at stat"), None);
        assert_eq!(message_in(r#"S3Error { code: "X", message: "", resource: "" }"#), None);
        assert_eq!(message_in(r#"S3Error { message: "cut"#), None);
    }
}
