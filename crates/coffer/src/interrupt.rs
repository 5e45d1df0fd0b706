//! Ctrl-C (SIGINT): a long command ends at once with exit code 130, as restic's
//! does, after saying that the repository is intact (docs/design.md#exit-codes);
//! SIGTERM (the agent stopping a run, a service manager) likewise with 143.
//!
//! Ending at once is safe because every write to a repository is crash-safe: an
//! object becomes visible only by an atomic rename once complete, a snapshot is
//! written last, and what an interrupted backup uploaded is reused by the next
//! one (its session marker goes stale and a later prune clears it). The handler
//! is installed only once a long operation starts (after any passphrase prompt,
//! which must restore the terminal itself).

/// Installs the handler; later calls do nothing.
#[cfg(unix)]
pub fn install() {
    use std::sync::Once;
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: the handler only calls async-signal-safe functions (write, _exit),
        // and sigaction is given a zeroed, then filled, struct.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_sigint as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(libc::SIGINT, &sa, std::ptr::null_mut());
            sa.sa_sigaction = on_sigterm as extern "C" fn(libc::c_int) as usize;
            libc::sigaction(libc::SIGTERM, &sa, std::ptr::null_mut());
        }
    });
}

#[cfg(not(unix))]
pub fn install() {}

#[cfg(unix)]
const MSG: &[u8] = b"\ninterrupted: nothing was left half-written; the repository is usable (run the command \
                     again to finish: a backup reuses what was uploaded)\n";

#[cfg(unix)]
extern "C" fn on_sigint(_: libc::c_int) {
    // SAFETY: write(2) and _exit(2) are async-signal-safe.
    unsafe {
        libc::write(2, MSG.as_ptr().cast(), MSG.len());
        libc::_exit(i32::from(crate::exit::INTERRUPTED));
    }
}

#[cfg(unix)]
extern "C" fn on_sigterm(_: libc::c_int) {
    // SAFETY: as on_sigint.
    unsafe {
        libc::write(2, MSG.as_ptr().cast(), MSG.len());
        libc::_exit(i32::from(crate::exit::TERMINATED));
    }
}
