//! Request bodies, read into spool files at a pace the server sets
//! (docs/design.md#server, "Slow and hostile connections"): each piece must
//! come within the body timeout, and the body as a whole must keep an average
//! of at least the minimum rate once the timeout has passed, so a body that
//! trickles a byte at a time is cut off after about the timeout, and no body
//! takes longer than `timeout + length / rate`.

use std::io::Write;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use s3s::dto::StreamingBlob;
use s3s::{S3Error, S3Result, s3_error};

/// How fast a body must come.
#[derive(Clone, Copy, Debug)]
pub struct Pace {
    /// The longest wait for the next piece, and the grace before the rate counts.
    pub timeout: Duration,
    /// The least average rate, in bytes per second, once `timeout` has passed.
    pub min_rate: u64,
}

impl Pace {
    /// When a body of which `got` bytes came by `start` falls below the rate.
    fn deadline(&self, start: Instant, got: u64) -> Instant {
        let earned = Duration::from_secs_f64(got as f64 / self.min_rate.max(1) as f64);
        start + self.timeout + earned
    }
}

/// Reads `body` into `sink`, at most `limit` bytes, hashing it, at `pace`;
/// returns the bytes read. `name` is the object, for errors.
pub async fn read_body(
    name: &str,
    body: Option<StreamingBlob>,
    limit: u64,
    sink: &mut impl Write,
    hasher: &mut blake3::Hasher,
    pace: Pace,
) -> S3Result<u64> {
    let Some(mut body) = body else { return Ok(0) };
    let start = Instant::now();
    let mut n = 0u64;
    loop {
        let now = Instant::now();
        let deadline = pace.deadline(start, n);
        let wait = pace.timeout.min(deadline.saturating_duration_since(now));
        let next = tokio::time::timeout(wait, body.next()).await.map_err(|_| {
            if wait < pace.timeout {
                s3_error!(
                    RequestTimeout,
                    "{name}: the body came slower than {} bytes/s on average ({n} bytes in {:?})",
                    pace.min_rate,
                    start.elapsed()
                )
            } else {
                s3_error!(RequestTimeout, "{name}: no part of the body came for {:?}", pace.timeout)
            }
        })?;
        let Some(piece) = next else { break };
        let piece: Bytes = piece.map_err(|e| s3_error!(IncompleteBody, "{name}: the body broke off: {e}"))?;
        n += piece.len() as u64;
        if n > limit {
            return Err(s3_error!(
                EntityTooLarge,
                "{name}: the body is longer than announced or allowed ({limit} bytes)"
            ));
        }
        hasher.update(&piece);
        sink.write_all(&piece).map_err(|e| s3_error!(InternalError, "the server cannot spool the upload: {e}"))?;
    }
    Ok(n)
}

/// The longest body a refused upload is still read to its end for ([`drain`]).
pub const DRAIN_LIMIT: u64 = 16 << 20;

/// Reads and drops the body of an upload refused before it was read, when it
/// announced at most [`DRAIN_LIMIT`] bytes, then returns `refusal`. An HTTP
/// client still sending its body when the server closes the connection sees a
/// broken connection, not the answer: draining lets it read why (a used-up
/// quota, a level that does not allow the write). The body comes at `pace`
/// like any other, so a slow one is cut off all the same.
pub async fn drain(body: Option<StreamingBlob>, len: u64, pace: Pace, refusal: S3Error) -> S3Error {
    if len <= DRAIN_LIMIT {
        let _ = read_body("", body, len, &mut std::io::sink(), &mut blake3::Hasher::new(), pace).await;
    }
    refusal
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deadline_moves_with_the_bytes_received() {
        let pace = Pace { timeout: Duration::from_secs(2), min_rate: 1000 };
        let t = Instant::now();
        assert_eq!(pace.deadline(t, 0), t + Duration::from_secs(2));
        assert_eq!(pace.deadline(t, 3000), t + Duration::from_secs(5));
    }
}
