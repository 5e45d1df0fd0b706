//! scrypt with its lanes side by side
//! (docs/design.md#key-derivation-from-a-passphrase).
//!
//! scrypt's `p` lanes are independent: the passphrase and salt are stretched
//! into `p` blocks (PBKDF2-HMAC-SHA256, one iteration), each block is mixed on
//! its own through `N` blocks of memory (ROMix), and the mixed blocks are
//! stretched into the key (PBKDF2 again). The `scrypt` crate runs the lanes one
//! after the other, in one buffer; [`derive`] runs them on up to `threads`
//! threads, one buffer per thread, for commands whose peak memory is larger than
//! those buffers anyway. PBKDF2 is the RustCrypto crate's (the one the `scrypt`
//! crate uses); what is written here is ROMix, BlockMix and the Salsa20/8 core
//! as RFC 7914 defines them, over rows of four words that are SSE2 registers on
//! x86-64, checked against the RFC's vectors and against the `scrypt` crate.

use std::sync::Mutex;

use pbkdf2::pbkdf2_hmac;
use sha2::Sha256;
use zeroize::Zeroize;

use super::ScryptParams;

/// Derives `out` from `passphrase` and `salt` as scrypt with `params` does,
/// running the lanes on up to `threads` threads (each holding `128 · r · N`
/// bytes). The parameters must be valid ([`ScryptParams::validate`]). The
/// calling thread is one of them; a thread that cannot be started leaves its
/// share to the others.
pub(super) fn derive(passphrase: &[u8], salt: &[u8], params: ScryptParams, threads: usize, out: &mut [u8]) {
    derive_with(passphrase, salt, params, threads, out, rows::mix_lane)
}

/// [`derive`] with `mix` as ROMix over one kind of rows.
fn derive_with<P: Zeroize>(
    passphrase: &[u8],
    salt: &[u8],
    params: ScryptParams,
    threads: usize,
    out: &mut [u8],
    mix: fn(&mut [u8], &mut Vec<P>, usize),
) {
    let r128 = 128 * params.r as usize;
    let n = 1usize << params.log_n;
    let mut b = vec![0u8; params.p as usize * r128];
    pbkdf2_hmac::<Sha256>(passphrase, salt, 1, &mut b);
    let lanes_per_thread = (params.p as usize).div_ceil(threads.max(1));
    let helpers = (params.p as usize).div_ceil(lanes_per_thread) - 1;
    let shares: Mutex<Vec<&mut [u8]>> = Mutex::new(b.chunks_mut(lanes_per_thread * r128).collect());
    let work = || {
        let mut v = Vec::new();
        loop {
            // Taken in a statement of its own: the lock is not held while mixing.
            let next = shares.lock().unwrap_or_else(|p| p.into_inner()).pop();
            let Some(lanes) = next else { break };
            for lane in lanes.chunks_mut(r128) {
                mix(lane, &mut v, n);
            }
        }
        v.zeroize();
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

/// For each place of a part (see [`words`]), the index of the word it holds.
const DIAGONAL_ORDER: [usize; 16] = [0, 5, 10, 15, 4, 9, 14, 3, 8, 13, 2, 7, 12, 1, 6, 11];

/// ROMix, BlockMix and the Salsa20/8 core over rows of four words, written
/// once for the two kinds of row below.
///
/// A block is `2r` parts of 64 bytes; a part is held as sixteen little-endian
/// words in four rows, in the order of the Salsa20 matrix's diagonals (row 0
/// holds words 0, 5, 10, 15; row 1 words 4, 9, 14, 3; row 2 words 8, 13, 2, 7;
/// row 3 words 12, 1, 6, 11), so that the column and the row rounds both work
/// on whole rows, which are vector registers. Word 0 stays first, where
/// Integerify reads it.
macro_rules! mixing {
    ($(#[$feature:meta])*) => {
        use zeroize::Zeroize;

        use super::DIAGONAL_ORDER;

        pub(super) type Part = [Row; 4];

        /// ROMix (RFC 7914, section 5) of the block `b` (`128 · r` bytes) in
        /// place, with `v` as its `N` blocks of memory (allocated once, for
        /// all the lanes a thread mixes).
        $(#[$feature])*
        pub(super) fn ro_mix(b: &mut [u8], v: &mut Vec<Part>, n: usize) {
            let mut x: Vec<Part> = b.chunks_exact(64).map(|bytes| to_part(bytes)).collect();
            let mut y = x.clone();
            let parts = x.len();
            v.clear();
            v.reserve_exact(n * parts);
            for _ in 0..n {
                v.extend_from_slice(&x);
                block_mix(&v[v.len() - parts..], None, &mut x);
            }
            // N is a power of two of at least 2: the block goes from x to y
            // and back.
            let at = |b: &[Part]| (first_word(b[parts - 1][0]) as usize & (n - 1)) * parts;
            for _ in 0..n / 2 {
                let j = at(&x);
                block_mix(&x, Some(&v[j..j + parts]), &mut y);
                let j = at(&y);
                block_mix(&y, Some(&v[j..j + parts]), &mut x);
            }
            for (part, bytes) in x.iter().zip(b.chunks_exact_mut(64)) {
                from_part(part, bytes);
            }
            x.zeroize();
            y.zeroize();
        }

        /// BlockMix with Salsa20/8 (RFC 7914, section 4) of `input` (`2r`
        /// parts), XORed with `with` first where given, into `output`: the
        /// even parts' results first, then the odd ones'.
        $(#[$feature])*
        fn block_mix(input: &[Part], with: Option<&[Part]>, output: &mut [Part]) {
            let parts = input.len();
            let mut x = input[parts - 1];
            if let Some(with) = with {
                x = xor_part(x, with[parts - 1]);
            }
            for i in 0..parts {
                x = xor_part(x, input[i]);
                if let Some(with) = with {
                    x = xor_part(x, with[i]);
                }
                x = salsa20_8(x);
                output[i / 2 + (i % 2) * (parts / 2)] = x;
            }
        }

        $(#[$feature])*
        fn xor_part(a: Part, b: Part) -> Part {
            [xor(a[0], b[0]), xor(a[1], b[1]), xor(a[2], b[2]), xor(a[3], b[3])]
        }

        /// The Salsa20/8 core (four double rounds, then the input added) of
        /// one part.
        $(#[$feature])*
        pub(super) fn salsa20_8(input: Part) -> Part {
            let [mut a, mut b, mut c, mut d] = input;
            for _ in 0..4 {
                // Columns: each row holds one word of each column.
                b = xor(b, rotated::<7, 25>(add(a, d)));
                c = xor(c, rotated::<9, 23>(add(b, a)));
                d = xor(d, rotated::<13, 19>(add(c, b)));
                a = xor(a, rotated::<18, 14>(add(d, c)));
                // Rows: turned, rows 1-3 line up one word of each matrix row.
                let (mut b1, mut c1, mut d1) = (turn::<0x93>(b), turn::<0x4e>(c), turn::<0x39>(d));
                d1 = xor(d1, rotated::<7, 25>(add(a, b1)));
                c1 = xor(c1, rotated::<9, 23>(add(d1, a)));
                b1 = xor(b1, rotated::<13, 19>(add(c1, d1)));
                a = xor(a, rotated::<18, 14>(add(b1, c1)));
                (b, c, d) = (turn::<0x39>(b1), turn::<0x4e>(c1), turn::<0x93>(d1));
            }
            [add(a, input[0]), add(b, input[1]), add(c, input[2]), add(d, input[3])]
        }

        $(#[$feature])*
        pub(super) fn to_part(bytes: &[u8]) -> Part {
            let word = |place: usize| {
                let at = 4 * DIAGONAL_ORDER[place];
                u32::from_le_bytes(bytes[at..at + 4].try_into().expect("four bytes"))
            };
            std::array::from_fn(|r| from_words([word(4 * r), word(4 * r + 1), word(4 * r + 2), word(4 * r + 3)]))
        }

        $(#[$feature])*
        pub(super) fn from_part(part: &Part, bytes: &mut [u8]) {
            for (r, row) in part.iter().enumerate() {
                for (w, word) in to_words(*row).into_iter().enumerate() {
                    let at = 4 * DIAGONAL_ORDER[4 * r + w];
                    bytes[at..at + 4].copy_from_slice(&word.to_le_bytes());
                }
            }
        }
    };
}

/// Rows in SSE2 registers, which every x86-64 processor has.
#[cfg(target_arch = "x86_64")]
mod sse2 {
    use std::arch::x86_64::*;

    pub(super) type Row = __m128i;

    mixing!(#[target_feature(enable = "sse2")] #[inline]);

    /// [`ro_mix`] where SSE2 is known to be there.
    pub(super) fn mix_lane(b: &mut [u8], v: &mut Vec<Part>, n: usize) {
        // SAFETY: SSE2 is part of the x86-64 architecture itself: every
        // processor this module is compiled for has it.
        unsafe { ro_mix(b, v, n) }
    }

    #[target_feature(enable = "sse2")]
    #[inline]
    fn add(a: Row, b: Row) -> Row {
        _mm_add_epi32(a, b)
    }

    #[target_feature(enable = "sse2")]
    #[inline]
    fn xor(a: Row, b: Row) -> Row {
        _mm_xor_si128(a, b)
    }

    /// Each word rotated left by `L` (`R` is 32 - `L`).
    #[target_feature(enable = "sse2")]
    #[inline]
    fn rotated<const L: i32, const R: i32>(t: Row) -> Row {
        _mm_or_si128(_mm_slli_epi32::<L>(t), _mm_srli_epi32::<R>(t))
    }

    /// Word `i` of the result is word `(ORDER >> 2i) & 3` of `row`.
    #[target_feature(enable = "sse2")]
    #[inline]
    fn turn<const ORDER: i32>(row: Row) -> Row {
        _mm_shuffle_epi32::<ORDER>(row)
    }

    #[target_feature(enable = "sse2")]
    #[inline]
    fn first_word(row: Row) -> u32 {
        _mm_cvtsi128_si32(row) as u32
    }

    #[target_feature(enable = "sse2")]
    #[inline]
    fn from_words(w: [u32; 4]) -> Row {
        _mm_set_epi32(w[3] as i32, w[2] as i32, w[1] as i32, w[0] as i32)
    }

    #[target_feature(enable = "sse2")]
    #[inline]
    fn to_words(row: Row) -> [u32; 4] {
        [first_word(row), first_word(turn::<0x39>(row)), first_word(turn::<0x4e>(row)), first_word(turn::<0x93>(row))]
    }
}

/// Rows as plain arrays of words, for other processors (and, in the tests,
/// as the reference the SSE2 rows are checked against).
#[cfg(any(test, not(target_arch = "x86_64")))]
mod words {
    pub(super) type Row = [u32; 4];

    mixing!();

    pub(super) fn mix_lane(b: &mut [u8], v: &mut Vec<Part>, n: usize) {
        ro_mix(b, v, n)
    }

    fn add(a: Row, b: Row) -> Row {
        std::array::from_fn(|i| a[i].wrapping_add(b[i]))
    }

    fn xor(a: Row, b: Row) -> Row {
        std::array::from_fn(|i| a[i] ^ b[i])
    }

    fn rotated<const L: u32, const R: u32>(t: Row) -> Row {
        t.map(|w| w.rotate_left(L))
    }

    fn turn<const ORDER: usize>(row: Row) -> Row {
        std::array::from_fn(|i| row[(ORDER >> (2 * i)) & 3])
    }

    fn first_word(row: Row) -> u32 {
        row[0]
    }

    fn from_words(w: [u32; 4]) -> Row {
        w
    }

    fn to_words(row: Row) -> [u32; 4] {
        row
    }
}

#[cfg(target_arch = "x86_64")]
use sse2 as rows;
#[cfg(not(target_arch = "x86_64"))]
use words as rows;

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
        let mut got = [0u8; 64];
        // SAFETY (x86-64): SSE2 is part of the architecture.
        #[allow(unused_unsafe)]
        unsafe {
            rows::from_part(&rows::salsa20_8(rows::to_part(&input)), &mut got)
        };
        assert_eq!(got.to_vec(), want);
        let mut got = [0u8; 64];
        words::from_part(&words::salsa20_8(words::to_part(&input)), &mut got);
        assert_eq!(got.to_vec(), want);
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
        for (rows, derive) in both_kinds_of_rows() {
            for threads in 1..=5 {
                let mut out = vec![0u8; 64];
                derive(b"", b"", ScryptParams { log_n: 4, r: 1, p: 1 }, threads, &mut out);
                assert_eq!(out, empty, "{rows}, {threads} threads");
                derive(b"password", b"NaCl", ScryptParams { log_n: 10, r: 8, p: 16 }, threads, &mut out);
                assert_eq!(out, nacl, "{rows}, {threads} threads");
            }
        }
    }

    #[test]
    fn lanes_side_by_side_give_what_the_scrypt_crate_gives() {
        for (log_n, r, p) in [(1, 1, 1), (6, 2, 3), (8, 8, 4), (11, 8, 4), (5, 3, 7)] {
            let params = ScryptParams { log_n, r, p };
            let crate_params = scrypt::Params::new(log_n, r, p).unwrap();
            let mut want = [0u8; 32];
            scrypt::scrypt(b"a passphrase", b"its salt", &crate_params, &mut want).unwrap();
            for (rows, derive) in both_kinds_of_rows() {
                for threads in [1, 2, 4] {
                    let mut got = [0u8; 32];
                    derive(b"a passphrase", b"its salt", params, threads, &mut got);
                    assert_eq!(got, want, "log_n {log_n} r {r} p {p}, {rows}, on {threads} threads");
                }
            }
        }
    }

    type Derive = fn(&[u8], &[u8], ScryptParams, usize, &mut [u8]);

    /// The derivation as it runs here, and over rows of plain words (as it runs
    /// on other processors).
    fn both_kinds_of_rows() -> [(&'static str, Derive); 2] {
        [
            ("this processor's rows", derive),
            ("rows of words", |pw, salt, params, threads, out| {
                derive_with(pw, salt, params, threads, out, words::mix_lane)
            }),
        ]
    }
}
