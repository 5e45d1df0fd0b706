//! Where a repository is: the `--repo` / `COFFER_REPOSITORY` string parsed into a
//! typed [`Location`]. A plain path or `local:PATH` is a local directory; every
//! other form names a remote service, which [`crate::OpendalBackend::open`]
//! connects to. A string that looks like `scheme:…` with a scheme coffer does not
//! know, or a remote form that does not parse, is an error listing the accepted
//! forms, never a local directory of that name. See
//! docs/design.md#locations.

use std::fmt;
use std::path::PathBuf;

/// A repository location.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    /// A directory on a local file system.
    Local(PathBuf),
    /// An S3 bucket. `endpoint` is `None` for AWS itself (the endpoint then comes
    /// from the region, or from `AWS_ENDPOINT_URL`).
    S3 { endpoint: Option<String>, bucket: String, prefix: String },
    /// A directory on an SSH server, through SFTP (needs the OpenSSH client).
    Sftp { user: Option<String>, host: String, port: Option<u16>, path: String },
    /// A WebDAV server: `endpoint` is `http(s)://host[:port]`, `root` the path.
    Webdav { endpoint: String, root: String },
    /// An Azure Blob Storage container.
    Azure { container: String, prefix: String },
    /// A Google Cloud Storage bucket.
    Gcs { bucket: String, prefix: String },
    /// A Backblaze B2 bucket.
    B2 { bucket: String, prefix: String },
    /// An OpenStack Swift container.
    Swift { container: String, prefix: String },
    /// A `coffer serve` server: its S3 endpoint (`https://host:port`) and the
    /// repository's name there (the bucket), `coffer` unless given
    /// (docs/design.md#server).
    Server { endpoint: String, name: String },
}

/// The forms `--repo` accepts, for error messages and help.
pub const ACCEPTED_FORMS: &str = "a local directory (/path, ./path or local:PATH), \
     s3:https://HOST[:PORT]/BUCKET[/PREFIX], s3:http://HOST[:PORT]/BUCKET[/PREFIX], \
     s3:HOST[:PORT]/BUCKET[/PREFIX] (https), s3://BUCKET[/PREFIX] (AWS, region from AWS_REGION), \
     sftp:[USER@]HOST:/PATH, sftp://[USER@]HOST[:PORT]/PATH, webdav:https://HOST[:PORT]/PATH, \
     azure:CONTAINER[:/PREFIX], gs:BUCKET[:/PREFIX], b2:BUCKET[:/PREFIX], swift:CONTAINER[:/PREFIX], \
     coffer:https://HOST[:PORT][/NAME] (a coffer server)";

/// A location string that is not one coffer can use.
#[derive(Debug, thiserror::Error)]
#[error("repository location {location:?}: {reason}; accepted forms: {ACCEPTED_FORMS}")]
pub struct LocationError {
    /// The string given.
    pub location: String,
    /// What is wrong with it.
    pub reason: String,
}

fn bad(location: &str, reason: impl Into<String>) -> LocationError {
    LocationError { location: location.to_string(), reason: reason.into() }
}

impl Location {
    /// Parses a location string.
    pub fn parse(s: &str) -> Result<Location, LocationError> {
        if s.is_empty() {
            return Err(bad(s, "it is empty"));
        }
        if let Some(path) = s.strip_prefix("local:") {
            if path.is_empty() {
                return Err(bad(s, "no directory after local:"));
            }
            return Ok(Location::Local(PathBuf::from(path)));
        }
        // A path that starts like one is a path, whatever colons it holds later.
        if s.starts_with(['/', '.', '~']) {
            return Ok(Location::Local(PathBuf::from(s)));
        }
        let Some((scheme, rest)) = split_scheme(s) else {
            return Ok(Location::Local(PathBuf::from(s)));
        };
        match scheme {
            "s3" => parse_s3(s, rest),
            "sftp" => parse_sftp(s, rest),
            "webdav" => {
                let (endpoint, root) = split_url(s, rest)?;
                Ok(Location::Webdav { endpoint, root: if root.is_empty() { "/".into() } else { format!("/{root}") } })
            }
            "azure" => bucket_form(s, rest).map(|(container, prefix)| Location::Azure { container, prefix }),
            "gs" => bucket_form(s, rest).map(|(bucket, prefix)| Location::Gcs { bucket, prefix }),
            "b2" => bucket_form(s, rest).map(|(bucket, prefix)| Location::B2 { bucket, prefix }),
            "swift" => bucket_form(s, rest).map(|(container, prefix)| Location::Swift { container, prefix }),
            "coffer" => {
                let (endpoint, name) = split_url(s, rest)?;
                if name.contains('/') {
                    return Err(bad(
                        s,
                        "a coffer server location names at most one repository: coffer:https://HOST[:PORT][/NAME]",
                    ));
                }
                let name = if name.is_empty() { "coffer".to_string() } else { check_name(s, "repository", &name)? };
                Ok(Location::Server { endpoint, name })
            }
            other => Err(bad(
                s,
                format!(
                    "{other:?} is not a storage coffer knows (for a local directory whose name holds a colon, \
                     write ./{s} or local:{s})"
                ),
            )),
        }
    }

    /// The local directory, for a local location.
    pub fn local_path(&self) -> Option<&std::path::Path> {
        match self {
            Location::Local(p) => Some(p),
            _ => None,
        }
    }

    /// The location as messages show it (a [`fmt::Display`]), like `Path::display`.
    pub fn display(&self) -> &Self {
        self
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let slash = |p: &str| if p.is_empty() { String::new() } else { format!("/{p}") };
        match self {
            Location::Local(p) => write!(f, "{}", p.display()),
            Location::S3 { endpoint: Some(e), bucket, prefix } => write!(f, "s3:{e}/{bucket}{}", slash(prefix)),
            Location::S3 { endpoint: None, bucket, prefix } => write!(f, "s3://{bucket}{}", slash(prefix)),
            Location::Sftp { user, host, port, path } => {
                let user = user.as_ref().map(|u| format!("{u}@")).unwrap_or_default();
                match port {
                    Some(p) => write!(f, "sftp://{user}{host}:{p}{path}"),
                    None => write!(f, "sftp:{user}{host}:{path}"),
                }
            }
            Location::Webdav { endpoint, root } => write!(f, "webdav:{endpoint}{root}"),
            Location::Azure { container, prefix } => write!(f, "azure:{container}:/{prefix}"),
            Location::Gcs { bucket, prefix } => write!(f, "gs:{bucket}:/{prefix}"),
            Location::B2 { bucket, prefix } => write!(f, "b2:{bucket}:/{prefix}"),
            Location::Swift { container, prefix } => write!(f, "swift:{container}:/{prefix}"),
            Location::Server { endpoint, name } => write!(f, "coffer:{endpoint}/{name}"),
        }
    }
}

/// `scheme` and the rest of `scheme:rest`, when the part before the first colon
/// is a URL scheme (a letter, then letters, digits, `+`, `-`, `.`) and comes
/// before any `/`.
fn split_scheme(s: &str) -> Option<(&str, &str)> {
    let (scheme, rest) = s.split_once(':')?;
    let mut chars = scheme.chars();
    let first = chars.next()?;
    (first.is_ascii_alphabetic() && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
        .then_some((scheme, rest))
}

/// A bucket or container name: non-empty, no slash, colon or space.
fn check_name(loc: &str, what: &str, name: &str) -> Result<String, LocationError> {
    if name.is_empty() || name.contains(['/', ':', ' ', '@', '?', '#']) {
        return Err(bad(loc, format!("{name:?} is not a valid {what} name")));
    }
    Ok(name.to_string())
}

/// A prefix inside a bucket: no empty, `.` or `..` component; no leading or
/// trailing slash in the result.
fn check_prefix(loc: &str, prefix: &str) -> Result<String, LocationError> {
    let p = prefix.trim_matches('/');
    if !p.is_empty() && p.split('/').any(|c| c.is_empty() || c == "." || c == "..") {
        return Err(bad(loc, format!("{prefix:?} is not a valid path inside the bucket")));
    }
    Ok(p.to_string())
}

/// `BUCKET[/PREFIX]`, `BUCKET[:/PREFIX]` or `//BUCKET[/PREFIX]`.
fn bucket_form(loc: &str, rest: &str) -> Result<(String, String), LocationError> {
    let rest = rest.strip_prefix("//").unwrap_or(rest);
    let (bucket, prefix) = match (rest.find(':'), rest.find('/')) {
        (Some(c), s) if s.is_none_or(|s| c < s) => (&rest[..c], &rest[c + 1..]),
        (_, Some(s)) => (&rest[..s], &rest[s..]),
        (_, None) => (rest, ""),
    };
    Ok((check_name(loc, "bucket", bucket)?, check_prefix(loc, prefix)?))
}

/// `http(s)://host[:port]` and the path after it (no leading slash), from an
/// URL with a scheme; refuses credentials in the URL.
fn split_url(loc: &str, url: &str) -> Result<(String, String), LocationError> {
    let (scheme, after) = url
        .split_once("://")
        .filter(|(s, _)| matches!(*s, "http" | "https"))
        .ok_or_else(|| bad(loc, "expected an http:// or https:// URL"))?;
    let (authority, path) = after.split_once('/').unwrap_or((after, ""));
    check_authority(loc, authority)?;
    Ok((format!("{scheme}://{authority}"), check_prefix(loc, path)?))
}

/// A `host[:port]`: a host name (letters, digits, `-`, `.`, `_`), an IPv4
/// address or a bracketed IPv6 one (`[::1]`), then an optional numeric port; no
/// user information (credentials come from the environment, never from the
/// location, which is shown in messages).
fn check_authority(loc: &str, authority: &str) -> Result<(), LocationError> {
    if authority.contains('@') {
        return Err(bad(
            loc,
            "credentials do not belong in the location (it is printed in messages): set them in the environment",
        ));
    }
    let invalid = || bad(loc, format!("{authority:?} is not a valid host"));
    let port = if let Some(inner) = authority.strip_prefix('[') {
        let (address, after) = inner.split_once(']').ok_or_else(|| {
            bad(loc, format!("{authority:?} is not a valid host: an IPv6 address is written in brackets, [::1]"))
        })?;
        if address.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(bad(loc, format!("{address:?} is not a valid IPv6 address")));
        }
        match after {
            "" => None,
            _ => Some(after.strip_prefix(':').ok_or_else(invalid)?),
        }
    } else {
        let (host, port) = match authority.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        };
        let name_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_');
        if host.is_empty() || !host.chars().all(name_char) || host.starts_with(['-', '.']) {
            return Err(invalid());
        }
        port
    };
    if let Some(p) = port
        && p.parse::<u16>().is_err()
    {
        return Err(bad(loc, format!("{p:?} is not a valid port")));
    }
    Ok(())
}

fn parse_s3(loc: &str, rest: &str) -> Result<Location, LocationError> {
    if rest.starts_with("http://") || rest.starts_with("https://") {
        let (endpoint, path) = split_url(loc, rest)?;
        return s3_bucket_path(loc, Some(endpoint), &path);
    }
    if let Some(path) = rest.strip_prefix("//") {
        return s3_bucket_path(loc, None, path);
    }
    // s3:host[:port]/bucket[/prefix], over https.
    let (authority, path) =
        rest.split_once('/').ok_or_else(|| bad(loc, "no bucket: expected s3:HOST/BUCKET[/PREFIX]"))?;
    check_authority(loc, authority)?;
    s3_bucket_path(loc, Some(format!("https://{authority}")), path)
}

fn s3_bucket_path(loc: &str, endpoint: Option<String>, path: &str) -> Result<Location, LocationError> {
    let path = path.trim_start_matches('/');
    let (bucket, prefix) = path.split_once('/').unwrap_or((path, ""));
    if bucket.is_empty() {
        return Err(bad(loc, "no bucket named"));
    }
    Ok(Location::S3 { endpoint, bucket: check_name(loc, "bucket", bucket)?, prefix: check_prefix(loc, prefix)? })
}

fn parse_sftp(loc: &str, rest: &str) -> Result<Location, LocationError> {
    let (user, host, port, path) = if let Some(after) = rest.strip_prefix("//") {
        // sftp://[user@]host[:port]/path
        let (authority, path) = after.split_once('/').ok_or_else(|| bad(loc, "no path: expected sftp://HOST/PATH"))?;
        let (user, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let (host, port) = match hostport.rsplit_once(':') {
            Some((h, p)) => (h, Some(p.parse::<u16>().map_err(|_| bad(loc, format!("{p:?} is not a valid port")))?)),
            None => (hostport, None),
        };
        (user, host, port, format!("/{path}"))
    } else {
        // sftp:[user@]host:/path (restic's form; a relative path is relative to the login directory)
        let (userhost, path) = rest.split_once(':').ok_or_else(|| bad(loc, "no path: expected sftp:HOST:/PATH"))?;
        let (user, host) = match userhost.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, userhost),
        };
        (user, host, None, path.to_string())
    };
    if host.is_empty() || host.contains(['/', ' ', ':']) {
        return Err(bad(loc, format!("{host:?} is not a valid host")));
    }
    if user.is_some_and(|u| u.is_empty() || u.contains([':', '/', ' '])) {
        return Err(bad(loc, "not a valid user name (a password does not belong in the location)"));
    }
    if path.is_empty() || path == "/" {
        return Err(bad(loc, "no directory on the server"));
    }
    Ok(Location::Sftp { user: user.map(str::to_string), host: host.to_string(), port, path })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s3(endpoint: Option<&str>, bucket: &str, prefix: &str) -> Location {
        Location::S3 { endpoint: endpoint.map(str::to_string), bucket: bucket.into(), prefix: prefix.into() }
    }

    #[test]
    fn local_forms() {
        for (s, p) in [
            ("/srv/repo", "/srv/repo"),
            ("./a:b", "./a:b"),
            ("repo", "repo"),
            ("local:/x/y", "/x/y"),
            ("local:rel:dir", "rel:dir"),
            ("/tmp/with:colon", "/tmp/with:colon"),
        ] {
            assert_eq!(Location::parse(s).unwrap(), Location::Local(p.into()), "{s}");
        }
    }

    #[test]
    fn s3_forms() {
        let cases = [
            ("s3:https://s3.example.com/bkt", s3(Some("https://s3.example.com"), "bkt", "")),
            ("s3:https://h:9000/bkt/a/b/", s3(Some("https://h:9000"), "bkt", "a/b")),
            ("s3:http://127.0.0.1:7070/coffer-test/t1", s3(Some("http://127.0.0.1:7070"), "coffer-test", "t1")),
            ("s3:s3.example.com/bkt/p", s3(Some("https://s3.example.com"), "bkt", "p")),
            ("s3:minio:9000/bkt", s3(Some("https://minio:9000"), "bkt", "")),
            ("s3://bkt/some/prefix", s3(None, "bkt", "some/prefix")),
            ("s3://bkt", s3(None, "bkt", "")),
            ("s3:http://[::1]:9000/b", s3(Some("http://[::1]:9000"), "b", "")),
            ("s3:https://[fd00::2]/b/p", s3(Some("https://[fd00::2]"), "b", "p")),
        ];
        for (s, want) in cases {
            let got = Location::parse(s).unwrap();
            assert_eq!(got, want, "{s}");
            assert_eq!(Location::parse(&got.to_string()).unwrap(), want, "display of {s} parses back");
        }
    }

    #[test]
    fn sftp_forms() {
        let l = Location::parse("sftp:user@host:/srv/repo").unwrap();
        assert_eq!(
            l,
            Location::Sftp { user: Some("user".into()), host: "host".into(), port: None, path: "/srv/repo".into() }
        );
        let l = Location::parse("sftp://u@127.0.0.1:2222/srv/r").unwrap();
        assert_eq!(
            l,
            Location::Sftp {
                user: Some("u".into()),
                host: "127.0.0.1".into(),
                port: Some(2222),
                path: "/srv/r".into()
            }
        );
        assert_eq!(Location::parse(&l.to_string()).unwrap(), l);
        assert!(matches!(Location::parse("sftp:host:backups").unwrap(), Location::Sftp { user: None, .. }));
    }

    #[test]
    fn other_services() {
        assert_eq!(
            Location::parse("webdav:https://dav.example.com:8443/a/b").unwrap(),
            Location::Webdav { endpoint: "https://dav.example.com:8443".into(), root: "/a/b".into() }
        );
        assert_eq!(
            Location::parse("azure:box:/backups/x").unwrap(),
            Location::Azure { container: "box".into(), prefix: "backups/x".into() }
        );
        assert_eq!(Location::parse("gs://b/p").unwrap(), Location::Gcs { bucket: "b".into(), prefix: "p".into() });
        assert_eq!(Location::parse("b2:b").unwrap(), Location::B2 { bucket: "b".into(), prefix: "".into() });
        assert_eq!(
            Location::parse("swift:c:/p/q").unwrap(),
            Location::Swift { container: "c".into(), prefix: "p/q".into() }
        );
    }

    #[test]
    fn unknown_or_malformed_is_an_error_naming_it_and_the_forms() {
        for s in [
            "",
            "ftp:host/x",
            "rest:http://h/",
            "s3:",
            "s3://",
            "s3:https://host",
            "s3:https://host/",
            "s3:https://k:secret@host/b",
            "s3:https://host:notaport/b",
            "s3:host",
            "s3:ftp://h/b",
            // Malformed hosts are the location's fault, found before any request.
            "s3:https://[::1/b",
            "s3:https://[::1]x/b",
            "s3:https://[not-ipv6]/b",
            "s3:https://::1/b",
            "s3:https://h:1:2/b",
            "s3:https://ho%st/b",
            "webdav:https://[::1/x",
            "coffer:https://[::1",
            "s3://b/../x",
            "sftp:host",
            "sftp:host:",
            "sftp://host",
            "sftp://h:99999/x",
            "webdav:dav.example.com/x",
            "gs:",
            "local:",
        ] {
            let e = Location::parse(s).unwrap_err().to_string();
            assert!(e.contains(&format!("{s:?}")), "{e}");
            assert!(e.contains("accepted forms") && e.contains("s3:https://"), "{e}");
        }
    }

    #[test]
    fn server_forms() {
        let srv = |e: &str, n: &str| Location::Server { endpoint: e.into(), name: n.into() };
        assert_eq!(Location::parse("coffer:https://h:8443").unwrap(), srv("https://h:8443", "coffer"));
        assert_eq!(Location::parse("coffer:https://h:8443/").unwrap(), srv("https://h:8443", "coffer"));
        assert_eq!(Location::parse("coffer:https://h/home").unwrap(), srv("https://h", "home"));
        assert_eq!(Location::parse("coffer:http://127.0.0.1:1/x").unwrap(), srv("http://127.0.0.1:1", "x"));
        assert_eq!(Location::parse("coffer:https://h:1/x").unwrap().to_string(), "coffer:https://h:1/x");
        for bad in ["coffer:h:1", "coffer:https://h/a/b", "coffer:https://u:p@h/x", "coffer:ftp://h"] {
            assert!(Location::parse(bad).is_err(), "{bad}");
        }
    }
}
