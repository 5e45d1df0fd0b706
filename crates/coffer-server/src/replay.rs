//! Signatures of state-changing requests already received
//! (docs/design.md#server, "Replays"). A SigV4 signature is valid for 15
//! minutes after the time it signs, so a captured PUT or DELETE could be sent
//! again within that window; the server remembers the signature of every
//! PUT, POST and DELETE for [`WINDOW`] and refuses one it has seen. A request
//! that fails forgets its signature, so a client's retry of a refused or
//! failed request is not taken for a replay. At most [`MAX_SEEN`] signatures
//! are kept (40 bytes each, about 10 MiB); when that many state-changing
//! requests came within the window, new ones are refused until the oldest
//! age out, rather than forgetting signatures that could then be replayed.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a signature is remembered: the 15 minutes a SigV4 signature is
/// valid either side of the server's clock.
pub const WINDOW: Duration = Duration::from_secs(30 * 60);
/// The most signatures remembered.
pub const MAX_SEEN: usize = 256 * 1024;

/// A SigV4 signature (32 bytes).
pub type Signature = [u8; 32];

/// Why a request is refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum Replay {
    /// The signature was received before.
    #[error(
        "this signed request was already received {0:?} ago: a replayed request is refused (a client signs each request anew)"
    )]
    Seen(Duration),
    /// Too many state-changing requests within the window.
    #[error("the server has received {max} state-changing requests within {window:?}; retry later", max = MAX_SEEN, window = WINDOW)]
    Full,
}

#[derive(Default)]
struct Inner {
    seen: HashMap<Signature, Instant>,
    order: VecDeque<(Signature, Instant)>,
}

/// The signatures seen within the window.
#[derive(Default)]
pub struct Seen {
    inner: Mutex<Inner>,
}

/// A signature claimed by a request in progress: forgotten when dropped
/// unless [`Claim::keep`] was called (the request succeeded).
pub struct Claim {
    seen: Arc<Seen>,
    sig: Signature,
    keep: bool,
}

impl Claim {
    /// The request succeeded: the signature stays remembered.
    pub fn keep(mut self) {
        self.keep = true;
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if !self.keep {
            let mut inner = self.seen.inner.lock().unwrap_or_else(|e| e.into_inner());
            inner.seen.remove(&self.sig);
        }
    }
}

impl Seen {
    /// Claims `sig` at `now`, or says why not.
    pub fn claim(self: &Arc<Self>, sig: Signature, now: Instant) -> Result<Claim, Replay> {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(&(old, at)) = inner.order.front() {
            if now.saturating_duration_since(at) < WINDOW {
                break;
            }
            inner.order.pop_front();
            if inner.seen.get(&old) == Some(&at) {
                inner.seen.remove(&old);
            }
        }
        if let Some(at) = inner.seen.get(&sig) {
            return Err(Replay::Seen(now.saturating_duration_since(*at)));
        }
        if inner.order.len() >= MAX_SEEN {
            // Entries of requests that failed leave the order only with age;
            // drop those no longer remembered first.
            let Inner { seen, order } = &mut *inner;
            order.retain(|(s, at)| seen.get(s) == Some(at));
            if order.len() >= MAX_SEEN {
                return Err(Replay::Full);
            }
        }
        inner.seen.insert(sig, now);
        inner.order.push_back((sig, now));
        Ok(Claim { seen: self.clone(), sig, keep: false })
    }
}

/// The signature of a SigV4 request: the `Signature=` of its `Authorization`
/// header, or the `X-Amz-Signature` of a presigned URL's query.
pub fn signature_of(headers: &http::HeaderMap, uri: &http::Uri) -> Option<Signature> {
    let from_header = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(',').find_map(|p| p.trim().strip_prefix("Signature=")));
    let from_query = || uri.query().and_then(|q| q.split('&').find_map(|p| p.strip_prefix("X-Amz-Signature=")));
    let hex_sig = from_header.or_else(from_query)?;
    let mut sig = [0u8; 32];
    hex::decode_to_slice(hex_sig.trim(), &mut sig).ok()?;
    Some(sig)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_is_accepted_once_within_the_window() {
        let seen = Arc::new(Seen::default());
        let t = Instant::now();
        let kept = seen.claim([1; 32], t).unwrap();
        assert!(matches!(seen.claim([1; 32], t + Duration::from_secs(60)), Err(Replay::Seen(_))));
        kept.keep();
        assert!(seen.claim([1; 32], t + Duration::from_secs(60)).is_err());
        // A failed request forgets its signature: its retry is no replay.
        drop(seen.claim([2; 32], t).unwrap());
        assert!(seen.claim([2; 32], t).is_ok());
        // Past the window the entry is gone.
        assert!(seen.claim([1; 32], t + WINDOW).is_ok());
    }

    #[test]
    fn signatures_are_read_from_the_header_or_the_query() {
        let mut h = http::HeaderMap::new();
        let sig = "ab".repeat(32);
        h.insert(
            http::header::AUTHORIZATION,
            format!("AWS4-HMAC-SHA256 Credential=K/x, SignedHeaders=host, Signature={sig}").parse().unwrap(),
        );
        let uri: http::Uri = "/b/k".parse().unwrap();
        assert_eq!(signature_of(&h, &uri), Some([0xab; 32]));
        let q: http::Uri = format!("/b/k?X-Amz-Date=1&X-Amz-Signature={sig}").parse().unwrap();
        assert_eq!(signature_of(&http::HeaderMap::new(), &q), Some([0xab; 32]));
        assert_eq!(signature_of(&http::HeaderMap::new(), &uri), None);
    }
}
