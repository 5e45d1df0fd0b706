//! Checks of single values, as the coffer command line would make them: names,
//! sizes, retention spans, check subsets, webhook and SMTP addresses. Each returns
//! the reason a value is refused, for the caller to put after its file, line and key.

use url::{Host, Url};

/// A job's or notifier's name: it becomes part of unit and lock file names.
pub fn name(s: &str) -> Result<(), String> {
    let ok = s.len() <= 64
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{s:?} is not a usable name: use up to 64 letters, digits, '-', '_' and '.', starting with a letter or digit"
        ))
    }
}

/// A size such as `2G`, `512K` or `4096` (bytes), as `--exclude-larger-than` takes.
pub fn size(s: &str) -> Result<(), String> {
    let t = s.trim();
    let digits = t.strip_suffix(|c: char| "kKmMgGtTbB".contains(c)).unwrap_or(t).trim();
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || digits.parse::<u64>().is_err() {
        return Err(format!("{s:?} is not a size: write one such as 512K, 8M or 2G"));
    }
    Ok(())
}

/// A retention span (`keep-within`): `<number><unit>` pairs, units y, m, d, h,
/// each at most once, longer than zero: `30d`, `1y5m7d2h`.
pub fn span(s: &str) -> Result<(), String> {
    let bad = |why: &str| format!("{s:?} is not a duration like 30d or 1y5m7d2h: {why}");
    let (mut digits, mut seen, mut total) = (String::new(), String::new(), 0u64);
    for c in s.trim().chars() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        if digits.is_empty() {
            return Err(bad(&format!("a number must come before {c:?}")));
        }
        if !"ymdh".contains(c) {
            return Err(bad(&format!("unknown unit {c:?} (use y, m, d or h)")));
        }
        if seen.contains(c) {
            return Err(bad(&format!("unit {c:?} given twice")));
        }
        seen.push(c);
        total += digits.parse::<u32>().map_err(|_| bad(&format!("{digits} is too large")))? as u64;
        digits.clear();
    }
    if !digits.is_empty() {
        return Err(bad(&format!("{digits} has no unit (use y, m, d or h)")));
    }
    if total == 0 {
        return Err(bad("it must be longer than zero"));
    }
    Ok(())
}

/// `group-by`: a comma-separated subset of host, paths, tags (or "" for one group).
pub fn group_by(s: &str) -> Result<(), String> {
    match s.split(',').map(str::trim).find(|p| !p.is_empty() && !["host", "paths", "tags"].contains(p)) {
        Some(p) => Err(format!(
            "cannot group by {p:?}: use a comma-separated subset of host, paths, tags, or \"\" for one group"
        )),
        None => Ok(()),
    }
}

/// `read-data-subset`: `n/t` with 1 <= n <= t, or a percentage above 0 and at most 100.
pub fn subset(s: &str) -> Result<(), String> {
    let bad = || format!("{s:?} is not a subset: use n/t (such as 2/5) or a percentage (such as 2.5%)");
    let t = s.trim();
    if let Some((n, total)) = t.split_once('/') {
        let (n, total): (u64, u64) = (n.trim().parse().map_err(|_| bad())?, total.trim().parse().map_err(|_| bad())?);
        if n == 0 || n > total {
            return Err(format!("{s:?}: n/t needs 1 <= n <= t"));
        }
        return Ok(());
    }
    let num = t.strip_suffix('%').ok_or_else(bad)?.trim();
    if num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return Err(bad());
    }
    match num.parse::<f64>() {
        Ok(p) if p > 0.0 && p <= 100.0 => Ok(()),
        _ => Err(format!("{s:?}: give a percentage above 0 and at most 100")),
    }
}

/// A tag: one value of `--tag`, where a comma would split it.
pub fn tag(s: &str) -> Result<(), String> {
    if s.contains(',') {
        return Err(format!("tag {s:?} holds a comma: give each tag as its own string"));
    }
    Ok(())
}

/// An environment variable's name, as `[storage]` gives them.
pub fn variable(s: &str) -> Result<(), String> {
    let ok = s.starts_with(|c: char| c.is_ascii_uppercase() || c == '_')
        && s.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
    if !ok {
        return Err(format!("{s:?} is not a storage variable's name (upper-case letters, digits and '_')"));
    }
    if s == "COFFER_PASSWORD" {
        return Err("the passphrase is never written in a job: give password-file = FILE or password-command = \
                    COMMAND instead"
            .to_string());
    }
    Ok(())
}

/// A webhook's URL: http or https, with a host. The URL itself is not repeated in
/// messages, since webhook URLs often carry a token.
pub fn webhook_url(s: &str) -> Result<(), String> {
    let u = Url::parse(s.trim())
        .map_err(|e| format!("not a URL ({e}): give one such as https://ntfy.example.net/backups"))?;
    if !matches!(u.scheme(), "http" | "https") {
        return Err(format!("the scheme {:?} is not http or https", u.scheme()));
    }
    if u.host().is_none() {
        return Err("the URL has no host".to_string());
    }
    Ok(())
}

/// An SMTP server: `smtp://HOST[:PORT]` (STARTTLS), `smtps://HOST[:PORT]` (TLS), or
/// `smtp+insecure://HOST[:PORT]` (plain text) with a loopback host only.
pub fn smtp_url(s: &str) -> Result<(), String> {
    // Not repeated in messages either: it might hold a password.
    let u =
        Url::parse(s.trim()).map_err(|e| format!("not a URL ({e}): give one such as smtp://mail.example.net:587"))?;
    if !u.username().is_empty() || u.password().is_some() {
        return Err("the URL holds a user name or password: give username and password-file instead".to_string());
    }
    let insecure = match u.scheme() {
        "smtp" | "smtps" => false,
        "smtp+insecure" => true,
        other => return Err(format!("the scheme {other:?} is not smtp, smtps or smtp+insecure")),
    };
    let Some(host) = u.host() else { return Err("the URL has no host".to_string()) };
    if !matches!(u.path(), "" | "/") || u.query().is_some() || u.fragment().is_some() {
        return Err("an SMTP server is smtp://HOST[:PORT], with no path or query".to_string());
    }
    let loopback = match host {
        // Hosts of schemes the URL standard does not know are kept as written.
        Host::Domain(d) => {
            d.eq_ignore_ascii_case("localhost") || d.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
        }
        Host::Ipv4(ip) => ip.is_loopback(),
        Host::Ipv6(ip) => ip.is_loopback(),
    };
    if insecure && !loopback {
        return Err("plain-text SMTP (smtp+insecure) is for a server on this machine only (localhost, 127.0.0.1, \
                    ::1); use smtp:// (STARTTLS) or smtps:// (TLS)"
            .to_string());
    }
    Ok(())
}

/// An e-mail address, roughly: the mail notifier checks it in full when it sends.
pub fn mail_address(s: &str) -> Result<(), String> {
    match s.rsplit_once('@') {
        Some((user, domain)) if !user.is_empty() && !domain.is_empty() && !s.contains(char::is_whitespace) => Ok(()),
        _ => Err(format!("{s:?} is not an e-mail address such as admin@example.net")),
    }
}
