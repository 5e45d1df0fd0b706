//! Who may come in (docs/design.md#ui-security): the password or the one-time
//! login token, the sessions they open, each session's CSRF token, and the delay
//! that slows a client guessing. Nothing here is written to disk: a restart ends
//! every session.
//!
//! Secrets are compared as keyed BLAKE3 hashes in constant time; sessions are
//! kept by the hash of their id, so that neither a lookup's timing nor a dump of
//! the table gives a usable id away.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use zeroize::Zeroizing;

/// Failed logins a client may make within [`FAILURE_WINDOW`] before each next
/// attempt is delayed.
pub const FREE_FAILURES: usize = 4;
/// The window failed logins are counted in.
pub const FAILURE_WINDOW: Duration = Duration::from_secs(60);
/// The longest delay a login attempt is held for.
pub const MAX_DELAY: Duration = Duration::from_secs(16);
/// Sessions kept at most; the least recently used goes first.
const MAX_SESSIONS: usize = 256;
/// Clients whose failures are remembered at most (the oldest are forgotten).
const MAX_CLIENTS: usize = 4096;

/// How long sessions last.
#[derive(Clone, Copy, Debug)]
pub struct SessionLimits {
    /// Without a request for this long, a session ends.
    pub idle: Duration,
    /// A session ends this long after its login, however busy.
    pub lifetime: Duration,
}

impl Default for SessionLimits {
    fn default() -> Self {
        SessionLimits { idle: Duration::from_secs(30 * 60), lifetime: Duration::from_secs(12 * 3600) }
    }
}

/// A session opened by a login.
pub struct Opened {
    /// The session's id, for its cookie (64 hex digits).
    pub id: Zeroizing<String>,
    /// The session's CSRF token.
    pub csrf: String,
    /// Whether the login token was used (it is replaced: see [`Gate::token`]).
    pub used_token: bool,
}

struct Session {
    csrf: String,
    opened: Instant,
    seen: Instant,
}

/// The gate: what a login is checked against and the sessions it opened.
pub struct Gate {
    key: [u8; 32],
    password: Option<blake3::Hash>,
    token: Mutex<(Zeroizing<String>, blake3::Hash)>,
    sessions: Mutex<HashMap<[u8; 32], Session>>,
    failures: Mutex<HashMap<IpAddr, VecDeque<Instant>>>,
    limits: SessionLimits,
}

/// 32 random bytes.
pub fn random32() -> [u8; 32] {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).expect("the system's random source is available");
    b
}

impl Gate {
    /// A gate that opens for `password` (if any) and for a fresh login token.
    pub fn new(password: Option<&[u8]>, limits: SessionLimits) -> Gate {
        let key = random32();
        let token = Zeroizing::new(hex::encode(random32()));
        let token_hash = blake3::keyed_hash(&key, token.as_bytes());
        Gate {
            key,
            password: password.map(|p| blake3::keyed_hash(&key, p)),
            token: Mutex::new((token, token_hash)),
            sessions: Mutex::new(HashMap::new()),
            failures: Mutex::new(HashMap::new()),
            limits,
        }
    }

    /// The login token in force: it opens one session, then is replaced.
    pub fn token(&self) -> Zeroizing<String> {
        self.token.lock().expect("token lock").0.clone()
    }

    /// Compared with `==`, hashes are compared in constant time.
    fn hash(&self, secret: &[u8]) -> blake3::Hash {
        blake3::keyed_hash(&self.key, secret)
    }

    /// Counts a login attempt by `client` and says how long to hold it before
    /// it is checked: nothing for the first [`FREE_FAILURES`] attempts within
    /// [`FAILURE_WINDOW`] since its last success, then one second doubling with
    /// each, up to [`MAX_DELAY`]. The attempt counts as soon as it arrives, so
    /// that attempts sent at once are held in turn as much as ones sent one
    /// after the other; a successful login clears the count.
    pub fn delay(&self, client: IpAddr, now: Instant) -> Duration {
        let mut f = self.failures.lock().expect("failures lock");
        if f.len() >= MAX_CLIENTS && !f.contains_key(&client) {
            // Forget the client whose last attempt is oldest.
            let oldest = f.iter().min_by_key(|(_, q)| q.back().copied()).map(|(ip, _)| *ip);
            if let Some(ip) = oldest {
                f.remove(&ip);
            }
        }
        let q = f.entry(client).or_default();
        while q.front().is_some_and(|t| now.duration_since(*t) >= FAILURE_WINDOW) {
            q.pop_front();
        }
        let n = q.len();
        q.push_back(now);
        // More than the window's worth is never needed.
        while q.len() > FREE_FAILURES + 8 {
            q.pop_front();
        }
        if n < FREE_FAILURES {
            return Duration::ZERO;
        }
        let doublings = (n - FREE_FAILURES).min(4) as u32;
        (Duration::from_secs(1) * 2u32.pow(doublings)).min(MAX_DELAY)
    }

    /// Checks `secret` (the password or the login token) for `client`; on a
    /// match opens a session. The caller has counted the attempt and held it
    /// for [`Gate::delay`].
    pub fn login(&self, client: IpAddr, secret: &[u8], now: Instant) -> Option<Opened> {
        let given = self.hash(secret);
        let by_password = self.password.is_some_and(|p| p == given);
        let mut used_token = false;
        if !by_password {
            let mut t = self.token.lock().expect("token lock");
            if t.1 == given {
                let fresh = Zeroizing::new(hex::encode(random32()));
                t.1 = self.hash(fresh.as_bytes());
                t.0 = fresh;
                used_token = true;
            }
        }
        if !by_password && !used_token {
            return None;
        }
        self.failures.lock().expect("failures lock").remove(&client);
        let id = Zeroizing::new(hex::encode(random32()));
        let csrf = hex::encode(random32());
        let mut s = self.sessions.lock().expect("sessions lock");
        self.expire(&mut s, now);
        if s.len() >= MAX_SESSIONS {
            let lru = s.iter().min_by_key(|(_, v)| v.seen).map(|(k, _)| *k);
            if let Some(k) = lru {
                s.remove(&k);
            }
        }
        s.insert(*self.hash(id.as_bytes()).as_bytes(), Session { csrf: csrf.clone(), opened: now, seen: now });
        Some(Opened { id, csrf, used_token })
    }

    fn expire(&self, s: &mut HashMap<[u8; 32], Session>, now: Instant) {
        let l = self.limits;
        s.retain(|_, v| now.duration_since(v.seen) < l.idle && now.duration_since(v.opened) < l.lifetime);
    }

    /// The CSRF token of the live session `id`, which counts as seen now.
    pub fn session(&self, id: &str, now: Instant) -> Option<String> {
        let mut s = self.sessions.lock().expect("sessions lock");
        self.expire(&mut s, now);
        let v = s.get_mut(self.hash(id.as_bytes()).as_bytes())?;
        v.seen = now;
        Some(v.csrf.clone())
    }

    /// Whether session `id` is still open, without counting this as a use (a
    /// page's event stream does not keep an idle session open).
    pub fn alive(&self, id: &str, now: Instant) -> bool {
        let mut s = self.sessions.lock().expect("sessions lock");
        self.expire(&mut s, now);
        s.contains_key(self.hash(id.as_bytes()).as_bytes())
    }

    /// Ends session `id`.
    pub fn logout(&self, id: &str) {
        self.sessions.lock().expect("sessions lock").remove(self.hash(id.as_bytes()).as_bytes());
    }
}

/// Whether `given` is the session's CSRF token (in constant time).
pub fn csrf_matches(expected: &str, given: &str) -> bool {
    blake3::hash(expected.as_bytes()) == blake3::hash(given.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

    #[test]
    fn the_password_opens_sessions_and_a_wrong_one_does_not() {
        let g = Gate::new(Some(b"correct horse"), SessionLimits::default());
        let now = Instant::now();
        assert!(g.login(ME, b"wrong", now).is_none());
        let s = g.login(ME, b"correct horse", now).expect("a session");
        assert!(!s.used_token);
        assert_eq!(g.session(&s.id, now).as_deref(), Some(s.csrf.as_str()));
        assert!(g.session("00", now).is_none());
        g.logout(&s.id);
        assert!(g.session(&s.id, now).is_none());
    }

    #[test]
    fn the_login_token_opens_one_session_then_is_replaced() {
        let g = Gate::new(None, SessionLimits::default());
        let now = Instant::now();
        let t = g.token();
        assert!(g.login(ME, b"", now).is_none(), "no password: an empty secret is no password");
        let s = g.login(ME, t.as_bytes(), now).expect("the token opens");
        assert!(s.used_token);
        assert!(g.login(ME, t.as_bytes(), now).is_none(), "used once");
        assert_ne!(*g.token(), *t);
        assert!(g.login(ME, g.token().as_bytes(), now).is_some());
    }

    #[test]
    fn sessions_end_when_idle_and_at_their_lifetime() {
        let limits = SessionLimits { idle: Duration::from_secs(10), lifetime: Duration::from_secs(25) };
        let g = Gate::new(Some(b"pw"), limits);
        let t0 = Instant::now();
        let s = g.login(ME, b"pw", t0).unwrap();
        assert!(g.session(&s.id, t0 + Duration::from_secs(9)).is_some());
        assert!(g.session(&s.id, t0 + Duration::from_secs(18)).is_some(), "seen at 9 s, idle 9 s");
        assert!(g.session(&s.id, t0 + Duration::from_secs(26)).is_none(), "past its lifetime");
        let s = g.login(ME, b"pw", t0).unwrap();
        assert!(g.session(&s.id, t0 + Duration::from_secs(11)).is_none(), "idle 11 s");
    }

    #[test]
    fn guessing_is_delayed_from_the_fifth_attempt_in_a_minute() {
        let g = Gate::new(Some(b"pw"), SessionLimits::default());
        let other = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 2));
        let t0 = Instant::now();
        let attempt = |secret: &[u8], at: Instant| (g.delay(ME, at), g.login(ME, secret, at).is_some());
        for i in 0..FREE_FAILURES {
            assert_eq!(attempt(b"guess", t0), (Duration::ZERO, false), "attempt {i}");
        }
        assert_eq!(attempt(b"guess", t0).0, Duration::from_secs(1), "the fifth");
        assert_eq!(attempt(b"guess", t0).0, Duration::from_secs(2));
        // Attempts sent at once, before any is checked, are held in turn.
        assert_eq!((g.delay(ME, t0), g.delay(ME, t0)), (Duration::from_secs(4), Duration::from_secs(8)));
        for _ in 0..10 {
            attempt(b"guess", t0);
        }
        assert_eq!(g.delay(ME, t0), MAX_DELAY);
        assert_eq!(g.delay(other, t0), Duration::ZERO, "per client");
        assert_eq!(attempt(b"guess", t0 + FAILURE_WINDOW).0, Duration::ZERO, "a minute later");
        // A success clears the count.
        for _ in 0..FREE_FAILURES - 1 {
            attempt(b"guess", t0 + FAILURE_WINDOW);
        }
        assert_eq!(attempt(b"pw", t0 + FAILURE_WINDOW), (Duration::from_secs(1), true));
        assert_eq!(attempt(b"guess", t0 + FAILURE_WINDOW).0, Duration::ZERO);
    }

    #[test]
    fn csrf_tokens_compare_whole() {
        assert!(csrf_matches("abcd", "abcd"));
        assert!(!csrf_matches("abcd", "abc"));
        assert!(!csrf_matches("abcd", ""));
    }
}
