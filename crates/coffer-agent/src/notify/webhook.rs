//! Webhooks: one POST per message, shaped by the notifier's preset.
//!
//! - `json`: the message as `{"job","kind","event","outcome","host","time","snapshot","error","summary"}`;
//! - `ntfy`: the message as text, with `Title`, `Priority` and `Tags` headers;
//! - `gotify`: `{"title","message","priority"}`;
//! - `slack`: `{"text"}`; `discord`: `{"content"}` (cut to Discord's 2000 characters);
//! - `healthchecks`: `URL/start` when a run starts ([`start`]), `URL` on success
//!   and recovery, `URL/fail` on failure and when overdue, the text as body.
//!
//! HTTPS is verified against the system's roots and the notifier's `cacert`.
//! Redirects are not followed (a token would go along). A URL's path, query
//! and user info may hold a token: messages show `scheme://host/…` only.

use reqwest::blocking::{Client, RequestBuilder};
use reqwest::header::{CONTENT_TYPE, HeaderValue};

use super::{Message, Notifier, NotifyError, chain, read_cacert, tls_provider};
use crate::config::{Event, NotifierConfig, Preset};

/// The most of an error answer's body an error message shows.
const BODY_EXCERPT: usize = 300;

/// Discord refuses longer content.
const DISCORD_MAX: usize = 2000;

/// `url` with only its scheme and host (and port) kept: `https://ntfy.example.net/…`.
pub fn redact(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(u) => {
            let host = match (u.host_str(), u.port()) {
                (Some(h), Some(p)) => format!("{h}:{p}"),
                (Some(h), None) => h.to_string(),
                (None, _) => String::new(),
            };
            let rest = if u.path() == "/" && u.query().is_none() && u.fragment().is_none() { "" } else { "…" };
            format!("{}://{host}/{rest}", u.scheme())
        }
        Err(_) => "(a URL that does not parse)".to_string(),
    }
}

fn parse_url(cfg: &NotifierConfig, url: &str) -> Result<reqwest::Url, NotifyError> {
    let u = reqwest::Url::parse(url).map_err(|e| NotifyError::Config {
        notifier: cfg.name.clone(),
        what: format!("its url does not parse ({e}); give an http:// or https:// URL"),
    })?;
    if !matches!(u.scheme(), "http" | "https") || u.host_str().is_none() {
        return Err(NotifyError::Config {
            notifier: cfg.name.clone(),
            what: format!("its url {} is not an http:// or https:// URL with a host", redact(url)),
        });
    }
    Ok(u)
}

fn client(notifier: &Notifier, cfg: &NotifierConfig) -> Result<Client, NotifyError> {
    tls_provider();
    let mut b = Client::builder()
        .timeout(notifier.timeout)
        .connect_timeout(notifier.timeout)
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(notifier.user_agent.clone());
    if let Some(pem) = read_cacert(cfg)? {
        let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| NotifyError::Cacert {
            notifier: cfg.name.clone(),
            path: cfg.cacert.clone().unwrap_or_default(),
            what: e.to_string(),
        })?;
        b = b.tls_certs_merge(certs);
    }
    b.build().map_err(|e| NotifyError::Config {
        notifier: cfg.name.clone(),
        what: format!("cannot set up its HTTP client: {}", chain(&e.without_url())),
    })
}

/// `url` with `segment` added to its path: `https://hc-ping.com/UUID` → `…/UUID/fail`.
fn with_segment(cfg: &NotifierConfig, mut url: reqwest::Url, segment: &str) -> Result<reqwest::Url, NotifyError> {
    let shown = redact(url.as_str());
    url.path_segments_mut()
        .map_err(|_| NotifyError::Config {
            notifier: cfg.name.clone(),
            what: format!("its url {shown} cannot take a path"),
        })?
        .pop_if_empty()
        .push(segment);
    Ok(url)
}

/// An HTTP header value from text: characters a header cannot carry become `?`.
fn header_text(s: &str) -> HeaderValue {
    let clean: String = s.chars().map(|c| if (' '..='~').contains(&c) { c } else { '?' }).collect();
    HeaderValue::from_str(&clean).unwrap_or(HeaderValue::from_static("coffer"))
}

fn urgent(event: Event) -> bool {
    matches!(event, Event::Failure | Event::Overdue)
}

/// The request a preset makes of `msg`.
fn request(
    client: &Client,
    cfg: &NotifierConfig,
    url: reqwest::Url,
    preset: Preset,
    msg: &Message,
) -> Result<RequestBuilder, NotifyError> {
    let text = |rb: RequestBuilder, body: String| rb.header(CONTENT_TYPE, "text/plain; charset=utf-8").body(body);
    let json = |rb: RequestBuilder, body: serde_json::Value| {
        rb.header(CONTENT_TYPE, "application/json").body(body.to_string())
    };
    Ok(match preset {
        Preset::Json => json(client.post(url), msg.json()),
        Preset::Ntfy => {
            let (priority, tag) = match msg.event {
                Event::Failure => ("high", "rotating_light"),
                Event::Overdue => ("high", "hourglass"),
                Event::Recovery => ("default", "white_check_mark"),
                Event::Success => ("default", "heavy_check_mark"),
            };
            let rb = client
                .post(url)
                .header("Title", header_text(&msg.title()))
                .header("Priority", priority)
                .header("Tags", header_text(&format!("{tag},coffer,{}", msg.event.as_str())));
            text(rb, msg.text())
        }
        Preset::Gotify => json(
            client.post(url),
            serde_json::json!({
                "title": msg.title(),
                "message": msg.text(),
                "priority": if urgent(msg.event) { 8 } else { 4 },
            }),
        ),
        Preset::Slack => json(client.post(url), serde_json::json!({ "text": msg.text() })),
        Preset::Discord => {
            let mut content = msg.text();
            if content.chars().count() > DISCORD_MAX {
                content = content.chars().take(DISCORD_MAX - 1).collect::<String>() + "…";
            }
            json(client.post(url), serde_json::json!({ "content": content }))
        }
        Preset::Healthchecks => {
            let url = if urgent(msg.event) { with_segment(cfg, url, "fail")? } else { url };
            text(client.post(url), msg.text())
        }
    })
}

/// Sends `msg` to the webhook `url` with `preset`.
pub(crate) fn send(
    notifier: &Notifier,
    cfg: &NotifierConfig,
    url: &str,
    preset: Preset,
    msg: &Message,
) -> Result<(), NotifyError> {
    let u = parse_url(cfg, url)?;
    let client = client(notifier, cfg)?;
    let rb = request(&client, cfg, u.clone(), preset, msg)?;
    execute(notifier, cfg, &u, rb)
}

/// The `healthchecks` preset's start ping: `URL/start`, saying which run of
/// `msg`'s job starts (its event and outcome are not used).
pub(crate) fn start(notifier: &Notifier, cfg: &NotifierConfig, url: &str, msg: &Message) -> Result<(), NotifyError> {
    let u = parse_url(cfg, url)?;
    let client = client(notifier, cfg)?;
    let ping = with_segment(cfg, u.clone(), "start")?;
    let body = format!("The {} of job {} on {} starts.\n", msg.kind.as_str(), msg.job, msg.host);
    let rb = client.post(ping).header(CONTENT_TYPE, "text/plain; charset=utf-8").body(body);
    execute(notifier, cfg, &u, rb)
}

fn execute(
    notifier: &Notifier,
    cfg: &NotifierConfig,
    url: &reqwest::Url,
    rb: RequestBuilder,
) -> Result<(), NotifyError> {
    let shown = redact(url.as_str());
    let resp = rb.send().map_err(|e| {
        let what = if e.is_timeout() {
            format!("no answer within {}s", notifier.timeout.as_secs_f64())
        } else {
            chain(&e.without_url())
        };
        NotifyError::Http { notifier: cfg.name.clone(), url: shown.clone(), what }
    })?;
    let status = resp.status();
    if status.is_success() {
        return Ok(());
    }
    let body = if status.is_redirection() {
        "a redirect, which coffer does not follow; give the URL it points to".to_string()
    } else {
        excerpt(&resp.text().unwrap_or_default(), url)
    };
    Err(NotifyError::Status { notifier: cfg.name.clone(), url: shown, status: status.as_u16(), body })
}

/// The start of an error answer, on one line, with anything of the URL that
/// may be a token taken out.
fn excerpt(body: &str, url: &reqwest::Url) -> String {
    let mut s: String = body.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut secrets: Vec<String> = Vec::new();
    if let Some(q) = url.query() {
        secrets.push(q.to_string());
        secrets.extend(url.query_pairs().map(|(_, v)| v.into_owned()).filter(|v| v.len() >= 4));
    }
    secrets.extend(url.path_segments().into_iter().flatten().filter(|p| p.len() >= 4).map(str::to_string));
    if let Some(p) = url.password() {
        secrets.push(p.to_string());
    }
    secrets.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for secret in secrets {
        s = s.replace(&secret, "…");
    }
    if s.chars().count() > BODY_EXCERPT {
        s = s.chars().take(BODY_EXCERPT).collect::<String>() + "…";
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_keeps_scheme_and_host_only() {
        assert_eq!(redact("https://ntfy.example.net/backups?auth=tok"), "https://ntfy.example.net/…");
        assert_eq!(redact("https://user:pw@hooks.slack.com/services/T/B/X"), "https://hooks.slack.com/…");
        assert_eq!(redact("http://127.0.0.1:8080/"), "http://127.0.0.1:8080/");
        assert_eq!(redact("not a url secret"), "(a URL that does not parse)");
    }

    #[test]
    fn excerpts_lose_the_url_tokens() {
        let url = reqwest::Url::parse("https://g.example/message?token=AbCdEf123").unwrap();
        let got = excerpt("bad token AbCdEf123\n for /message?token=AbCdEf123", &url);
        assert!(!got.contains("AbCdEf123"), "{got}");
        assert!(got.starts_with("bad token …"), "{got}");
    }
}
