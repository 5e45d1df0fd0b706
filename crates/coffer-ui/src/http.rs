//! Requests in, responses out: query strings and forms decoded to exact bytes,
//! cookies, bodies read within a limit, and every response given the headers
//! that keep a browser from framing, sniffing or leaking it
//! (docs/design.md#ui-security).

use std::collections::HashMap;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, combinators::BoxBody};

/// A response body: whole, or streamed (a download).
pub type Body = BoxBody<Bytes, std::io::Error>;

/// The largest request body read (a login, a form, a JSON request).
pub const MAX_BODY: usize = 64 * 1024;

/// The content security policy: nothing but this server's own assets, no inline
/// script or style, no framing, forms posted only here.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// A whole body.
pub fn full(b: impl Into<Bytes>) -> Body {
    Full::new(b.into()).map_err(|never| match never {}).boxed()
}

/// A response with `status`, `content_type` and `body`, and the security headers.
pub fn respond(status: StatusCode, content_type: &'static str, body: Body) -> Response<Body> {
    let mut r = Response::new(body);
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    // Not `no-referrer`: under it a browser's form posts carry `Origin: null`,
    // which is what a sandboxed page of another site sends too.
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert("cross-origin-opener-policy", HeaderValue::from_static("same-origin"));
    h.insert("cross-origin-resource-policy", HeaderValue::from_static("same-origin"));
    r
}

/// An HTML page.
pub fn html(status: StatusCode, page: String) -> Response<Body> {
    respond(status, "text/html; charset=utf-8", full(page))
}

/// A JSON document.
pub fn json(status: StatusCode, v: &serde_json::Value) -> Response<Body> {
    let mut text = serde_json::to_vec(v).expect("JSON values serialize");
    text.push(b'\n');
    respond(status, "application/json", full(text))
}

/// A JSON error: `{"type": "error", "status": …, "message": …}`.
pub fn json_error(status: StatusCode, message: &str) -> Response<Body> {
    json(status, &serde_json::json!({"type": "error", "status": status.as_u16(), "message": message}))
}

/// A redirection to `to` (a path of this server) after a form was posted.
pub fn see_other(to: &str) -> Response<Body> {
    let mut r = respond(StatusCode::SEE_OTHER, "text/plain; charset=utf-8", full(""));
    if let Ok(v) = HeaderValue::from_str(to) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    r
}

/// Decodes `a=b&c=d` (a query string or a form body) into exact bytes, `+` as a
/// space. A name given twice keeps its first value.
pub fn decode_pairs(raw: &[u8]) -> HashMap<String, Vec<u8>> {
    let mut out = HashMap::new();
    for pair in raw.split(|b| *b == b'&').filter(|p| !p.is_empty()) {
        let (k, v) = match pair.iter().position(|b| *b == b'=') {
            Some(i) => (&pair[..i], &pair[i + 1..]),
            None => (pair, &b""[..]),
        };
        let decode = |s: &[u8]| -> Vec<u8> {
            let plus: Vec<u8> = s.iter().map(|b| if *b == b'+' { b' ' } else { *b }).collect();
            percent_encoding::percent_decode(&plus).collect()
        };
        let key = String::from_utf8_lossy(&decode(k)).into_owned();
        out.entry(key).or_insert_with(|| decode(v));
    }
    out
}

/// The query of a request's URI, decoded.
pub fn query(uri: &http::Uri) -> HashMap<String, Vec<u8>> {
    decode_pairs(uri.query().unwrap_or("").as_bytes())
}

/// The value of cookie `name`, if the request carries it once.
pub fn cookie(headers: &http::HeaderMap, name: &str) -> Option<String> {
    let mut found = None;
    for v in headers.get_all(header::COOKIE) {
        let Ok(v) = v.to_str() else { continue };
        for c in v.split(';') {
            let c = c.trim();
            if let Some(val) = c.strip_prefix(name).and_then(|r| r.strip_prefix('=')) {
                if found.is_some() {
                    // Two cookies of one name: one may have been planted; neither is used.
                    return None;
                }
                found = Some(val.to_string());
            }
        }
    }
    found
}

/// Percent-encodes `bytes` for a query value (everything but unreserved characters and `/`).
pub fn encode_query(bytes: &[u8]) -> String {
    const SET: &percent_encoding::AsciiSet =
        &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~').remove(b'/');
    percent_encoding::percent_encode(bytes, SET).to_string()
}

/// Undoes [`encode_query`]: how a path given back by a listing or a form is read.
pub fn decode_value(s: &[u8]) -> Vec<u8> {
    percent_encoding::percent_decode(s).collect()
}

/// Why a body could not be read.
#[derive(Debug)]
pub enum BodyError {
    TooLarge,
    Broken,
}

/// Reads a request body of at most [`MAX_BODY`] bytes.
pub async fn read_body(body: hyper::body::Incoming) -> Result<Bytes, BodyError> {
    match http_body_util::Limited::new(body, MAX_BODY).collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() => Err(BodyError::TooLarge),
        Err(_) => Err(BodyError::Broken),
    }
}

/// Escapes text for HTML (element content and quoted attribute values).
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_decode_to_exact_bytes() {
        let p = decode_pairs(b"path=a%2Fb+c%FF&x&path=second&e=");
        assert_eq!(p["path"], b"a/b c\xff");
        assert_eq!(p["x"], b"");
        assert_eq!(p["e"], b"");
        assert_eq!(encode_query(b"a/b c\xff"), "a/b%20c%FF");
        assert_eq!(decode_pairs(format!("p={}", encode_query(b"d\xfe/&=+%")).as_bytes())["p"], b"d\xfe/&=+%");
    }

    #[test]
    fn a_cookie_given_twice_is_not_used() {
        let mut h = http::HeaderMap::new();
        h.append(header::COOKIE, HeaderValue::from_static("a=1; coffer_session=abc"));
        assert_eq!(cookie(&h, "coffer_session").as_deref(), Some("abc"));
        assert_eq!(cookie(&h, "coffer"), None);
        h.append(header::COOKIE, HeaderValue::from_static("coffer_session=planted"));
        assert_eq!(cookie(&h, "coffer_session"), None);
    }

    #[test]
    fn html_is_escaped() {
        assert_eq!(esc("<a href=\"x\">'&'</a>"), "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
    }
}
