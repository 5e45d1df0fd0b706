//! scrypt with its lanes side by side
//! (docs/design.md#key-derivation-from-a-passphrase).
//!
//! scrypt's `p` lanes are independent: the passphrase and salt are stretched
//! into `p` blocks (PBKDF2-HMAC-SHA256, one iteration), each block is mixed on
//! its own through `N` blocks of memory (ROMix), and the mixed blocks are
//! stretched into the key (PBKDF2 again). The `scrypt` crate runs the lanes one
//! after the other, in one buffer; [`derive`] runs them on up to `threads`
//! threads, one buffer per thread, for commands whose peak memory is larger than
//! those buffers anyway. PBKDF2 and the Salsa20/8 core are the RustCrypto
//! crates' (the same the `scrypt` crate uses); what is written here is ROMix and
//! its BlockMix as RFC 7914 defines them, checked against the RFC's vectors and
//! against the `scrypt` crate.

use std::sync::Mutex;

use pbkdf2::pbkdf2_hmac;
use salsa20::SalsaCore;
use salsa20::cipher::StreamCipherCore;
use salsa20::cipher::consts::U4;
use sha2::Sha256;
use zeroize::Zeroize;

use super::ScryptParams;

/// Derives `out` from `passphrase` and `salt` as scrypt with `params` does,
/// running the lanes on up to `threads` threads (each holding `128 · r · N`
/// bytes). The parameters must be valid ([`ScryptParams::validate`]). The
/// calling thread is one of them; a thread that cannot be started leaves its
/// share to the others.
pub(super) fn derive(passphrase: &[u8], salt: &[u8], params: ScryptParams, threads: usize, out: &mut [u8]) {
    let r128 = 128 * params.r as usize;
    let n = 1usize << params.log_n;
    let mut b = vec![0u8; params.p as usize * r128];
    pbkdf2_hmac::<Sha256>(passphrase, salt, 1, &mut b);
    let lanes_per_thread = (params.p as usize).div_ceil(threads.max(1));
    let helpers = (params.p as usize).div_ceil(lanes_per_thread) - 1;
    let shares: Mutex<Vec<&mut [u8]>> = Mutex::new(b.chunks_mut(lanes_per_thread * r128).collect());
    let work = || {
        let mut v = Vec::new();
        let mut t = vec![0u8; r128];
        loop {
            // Taken in a statement of its own: the lock is not held while mixing.
            let next = shares.lock().unwrap_or_else(|p| p.into_inner()).pop();
            let Some(lanes) = next else { break };
            if v.is_empty() {
                v = vec![0u8; n * r128];
            }
            for lane in lanes.chunks_mut(r128) {
                ro_mix(lane, &mut v, &mut t, n);
            }
        }
        v.zeroize();
        t.zeroize();
    };
    std::thread::scope(|s| {
        for _ in 0..helpers {
            let _ = std::thread::Builder::new().spawn_scoped(s, work);
        }
        work();
    });
    pbkdf2_hmac::<Sha256>(passphrase, &b, 1, out);
    b.zeroize();
}

/// ROMix (RFC 7914, section 5) of the block `b` (`128 · r` bytes) in place,
/// with `v` (`N` blocks) and `t` (one block) as working memory.
fn ro_mix(b: &mut [u8], v: &mut [u8], t: &mut [u8], n: usize) {
    let len = b.len();
    for slot in v.chunks_mut(len) {
        slot.copy_from_slice(b);
        block_mix(slot, b);
    }
    for _ in 0..n {
        let j = integerify(b, n);
        for ((t, b), v) in t.iter_mut().zip(b.iter()).zip(&v[j * len..(j + 1) * len]) {
            *t = b ^ v;
        }
        block_mix(t, b);
    }
}

/// The first word of the last 64-byte part of `b`, little-endian, modulo `n` (a
/// power of two; RFC 7914 takes the whole last part as an integer, of which
/// only these bits count).
fn integerify(b: &[u8], n: usize) -> usize {
    let last = &b[b.len() - 64..];
    u32::from_le_bytes(last[..4].try_into().expect("four bytes")) as usize & (n - 1)
}

/// BlockMix with Salsa20/8 (RFC 7914, section 4) of `input` (`2r` parts of 64
/// bytes) into `output`: the even parts' results first, then the odd ones'.
fn block_mix(input: &[u8], output: &mut [u8]) {
    let parts = input.len() / 64;
    let mut x = [0u8; 64];
    x.copy_from_slice(&input[input.len() - 64..]);
    for (i, part) in input.chunks_exact(64).enumerate() {
        for (x, p) in x.iter_mut().zip(part) {
            *x ^= p;
        }
        x = salsa20_8(&x);
        let at = (i / 2 + (i % 2) * (parts / 2)) * 64;
        output[at..at + 64].copy_from_slice(&x);
    }
}

/// The Salsa20/8 core of one 64-byte block.
fn salsa20_8(block: &[u8; 64]) -> [u8; 64] {
    let mut state = [0u32; 16];
    for (w, b) in state.iter_mut().zip(block.chunks_exact(4)) {
        *w = u32::from_le_bytes(b.try_into().expect("four bytes"));
    }
    let mut out = Default::default();
    SalsaCore::<U4>::from_raw_state(state).write_keystream_block(&mut out);
    out.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unhex(s: &str) -> Vec<u8> {
        hex::decode(s.split_whitespace().collect::<String>()).unwrap()
    }

    #[test]
    fn salsa20_8_core_matches_rfc_7914() {
        // RFC 7914, section 8.
        let input = unhex(
            "7e879a214f3ec9867ca940e641718f26baee555b8c61c1b50df846116dcd3b1d
             ee24f319df9b3d8514121e4b5ac5aa3276021d2909c74829edebc68db8b8c25e",
        );
        let want = unhex(
            "a41f859c6608cc993b81cacb020cef05044b2181a2fd337dfd7b1c6396682f29
             b4393168e3c9e6bcfe6bc5b7a06d96bae424cc102c91745c24ad673dc7618f81",
        );
        assert_eq!(salsa20_8(&input.try_into().unwrap()).to_vec(), want);
    }

    #[test]
    fn scrypt_matches_rfc_7914_on_any_number_of_threads() {
        // RFC 7914, section 12, the first two vectors (the others take seconds
        // unoptimised; the comparison with the `scrypt` crate below covers
        // larger N).
        let empty = unhex(
            "77d6576238657b203b19ca42c18a0497f16b4844e3074ae8dfdffa3fede21442
             fcd0069ded0948f8326a753a0fc81f17e8d3e0fb2e0d3628cf35e20c38d18906",
        );
        let nacl = unhex(
            "fdbabe1c9d3472007856e7190d01e9fe7c6ad7cbc8237830e77376634b373162
             2eaf30d92e22a3886ff109279d9830dac727afb94a83ee6d8360cbdfa2cc0640",
        );
        for threads in 1..=5 {
            let mut out = vec![0u8; 64];
            derive(b"", b"", ScryptParams { log_n: 4, r: 1, p: 1 }, threads, &mut out);
            assert_eq!(out, empty, "{threads} threads");
            derive(b"password", b"NaCl", ScryptParams { log_n: 10, r: 8, p: 16 }, threads, &mut out);
            assert_eq!(out, nacl, "{threads} threads");
        }
    }

    #[test]
    fn lanes_side_by_side_give_what_the_scrypt_crate_gives() {
        for (log_n, r, p) in [(1, 1, 1), (6, 2, 3), (8, 8, 4), (11, 8, 4), (5, 3, 7)] {
            let params = ScryptParams { log_n, r, p };
            let crate_params = scrypt::Params::new(log_n, r, p).unwrap();
            let mut want = [0u8; 32];
            scrypt::scrypt(b"a passphrase", b"its salt", &crate_params, &mut want).unwrap();
            for threads in [1, 2, 4] {
                let mut got = [0u8; 32];
                derive(b"a passphrase", b"its salt", params, threads, &mut got);
                assert_eq!(got, want, "log_n {log_n} r {r} p {p} on {threads} threads");
            }
        }
    }
}
