//! Connections not yet authenticated, per peer address (docs/design.md#server,
//! "Slow and hostile connections"). A connection counts against its peer from
//! when it is accepted until a request on it is answered with anything but a
//! refusal of its credentials (403); a peer with [`Pending::max`] such
//! connections has further ones closed at once, so one address cannot hold
//! every connection slot with idle handshakes.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// Counts of connections not yet authenticated, by peer.
pub struct Pending {
    max: usize,
    counts: Mutex<HashMap<IpAddr, usize>>,
}

/// One connection's place in the count, given back when it authenticates or
/// closes.
pub struct Slot {
    pending: Arc<Pending>,
    peer: IpAddr,
    held: AtomicBool,
}

impl Pending {
    /// At most `max` connections not yet authenticated per peer.
    pub fn new(max: usize) -> Arc<Pending> {
        Arc::new(Pending { max: max.max(1), counts: Mutex::new(HashMap::new()) })
    }

    /// The most connections a peer may have pending.
    pub fn max(&self) -> usize {
        self.max
    }

    /// A place for a new connection from `peer`, or `None` if it has too many.
    pub fn admit(self: &Arc<Self>, peer: IpAddr) -> Option<Arc<Slot>> {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let n = counts.entry(peer).or_insert(0);
        if *n >= self.max {
            return None;
        }
        *n += 1;
        Some(Arc::new(Slot { pending: self.clone(), peer, held: AtomicBool::new(true) }))
    }

    /// Connections `peer` has pending.
    pub fn count(&self, peer: IpAddr) -> usize {
        self.counts.lock().unwrap_or_else(|e| e.into_inner()).get(&peer).copied().unwrap_or(0)
    }
}

impl Slot {
    /// The connection authenticated: it no longer counts (idempotent).
    pub fn release(&self) {
        if self.held.swap(false, Ordering::AcqRel) {
            let mut counts = self.pending.counts.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(n) = counts.get_mut(&self.peer) {
                *n -= 1;
                if *n == 0 {
                    counts.remove(&self.peer);
                }
            }
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_holds_at_most_max_pending_connections() {
        let p = Pending::new(2);
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        let other: IpAddr = "10.0.0.2".parse().unwrap();
        let a = p.admit(ip).unwrap();
        let b = p.admit(ip).unwrap();
        assert!(p.admit(ip).is_none());
        assert!(p.admit(other).is_some());
        a.release();
        a.release();
        assert_eq!(p.count(ip), 1);
        let c = p.admit(ip).unwrap();
        drop(b);
        drop(c);
        assert_eq!(p.count(ip), 0);
    }
}
