//! Known-answer and edge-case tests for writer signatures: Ed25519 through
//! `coffer_core::crypto::sign` (ring 0.17 underneath), checked through the public API only.
//!
//! Sources:
//! - RFC 8032 §7.1: TEST 1, TEST 2, TEST 3, TEST 1024 and TEST SHA(abc), typed in below.
//! - Project Wycheproof (github.com/C2SP/wycheproof) `testvectors_v1/ed25519_test.json` as of
//!   commit dac1dd4729fd1f8dd9e1e9f3dce51d783da6c166 (the commit `vectors.rs` copies from),
//!   committed unchanged as `tests/data/wycheproof/ed25519_test.json`. Wycheproof is
//!   Copyright 2016-2026 The Wycheproof Authors, Apache License 2.0; see `tests/data/wycheproof/README.md`.
//!
//! What the verifier does, as pinned by these tests (ring verifies one signature at a time, by
//! RFC 8032 §5.1.7 without the cofactor, and compares the encoding of the recomputed `R` with
//! the signature's `R` byte for byte):
//! - `S` must be below the group order `L`: `S + L` (same scalar mod `L`) is rejected.
//! - `R` must be the canonical encoding of the recomputed point: non-canonical `R` encodings,
//!   `-R`, and `R` with any bit changed are rejected.
//! - The public key: ring decodes it leniently and accepts small-order points and
//!   non-canonical encodings (a `y` coordinate of `p` or more), with which a signature can be
//!   made without any secret (the identity key accepts `R = identity, S = 0` for every
//!   message). `PublicKey::verify` refuses every such key before ring sees it
//!   (`PublicKey::is_weak`); keys derived from a seed are never weak.

use coffer_core::crypto::sign::{PublicKey, SEED_LEN, SIGNATURE_LEN, SigningKey};

fn unhex(s: &str) -> Vec<u8> {
    hex::decode(s).unwrap_or_else(|e| panic!("bad hex in test vector {s:?}: {e}"))
}

fn unhex32(s: &str) -> [u8; 32] {
    unhex(s).try_into().expect("32 bytes")
}

fn pk(s: &str) -> PublicKey {
    PublicKey(unhex32(s))
}

/// The order `L` of the prime-order subgroup, 2^252 + 27742317777372353535851937790883648493,
/// little-endian.
const L: [u8; 32] = [
    0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9, 0xde, 0x14, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10,
];

/// `a + b` for 256-bit little-endian numbers; panics on overflow.
fn add_le(a: &[u8; 32], b: &[u8; 32]) -> [u8; 32] {
    let mut out = [0u8; 32];
    let mut carry = 0u16;
    for i in 0..32 {
        let s = a[i] as u16 + b[i] as u16 + carry;
        out[i] = s as u8;
        carry = s >> 8;
    }
    assert_eq!(carry, 0, "overflow");
    out
}

/// The challenge `k = SHA-512(R || A || M) mod L` of RFC 8032 §5.1.7, as four little-endian
/// 64-bit limbs. Used to predict which messages a small-order key "verifies".
fn challenge(r: &[u8], a: &[u8; 32], msg: &[u8]) -> [u64; 4] {
    const L_LIMBS: [u64; 4] = [0x5812_631a_5cf5_d3ed, 0x14de_f9de_a2f7_9cd6, 0, 0x1000_0000_0000_0000];
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA512);
    ctx.update(r);
    ctx.update(a);
    ctx.update(msg);
    let h = ctx.finish();
    let h = h.as_ref();
    // Bit by bit from the top: acc = 2 * acc + bit, then subtract L once if acc >= L.
    let mut acc = [0u64; 4];
    for bit in (0..512).rev() {
        let b = (h[bit / 8] >> (bit % 8)) & 1;
        for i in (1..4).rev() {
            acc[i] = (acc[i] << 1) | (acc[i - 1] >> 63);
        }
        acc[0] = (acc[0] << 1) | b as u64;
        let ge = (0..4).rev().map(|i| acc[i].cmp(&L_LIMBS[i])).find(|o| o.is_ne()) != Some(std::cmp::Ordering::Less);
        if ge {
            let mut borrow = 0u64;
            for i in 0..4 {
                let (d, b1) = acc[i].overflowing_sub(L_LIMBS[i]);
                let (d, b2) = d.overflowing_sub(borrow);
                acc[i] = d;
                borrow = (b1 | b2) as u64;
            }
        }
    }
    acc
}

// ---------------------------------------------------------------------------------------------
// RFC 8032 §7.1
// ---------------------------------------------------------------------------------------------

struct Rfc8032 {
    name: &'static str,
    secret: &'static str,
    public: &'static str,
    msg: &'static str,
    sig: &'static str,
}

// TEST 1024's message: 1023 bytes.
const TEST_1024_MSG: &str = "08b8b2b733424243760fe426a4b54908632110a66c2f6591eabd3345e3e4eb98fa6e264bf09efe12ee50f8f54e9f77b1\
     e355f6c50544e23fb1433ddf73be84d879de7c0046dc4996d9e773f4bc9efe5738829adb26c81b37c93a1b270b20329d\
     658675fc6ea534e0810a4432826bf58c941efb65d57a338bbd2e26640f89ffbc1a858efcb8550ee3a5e1998bd177e93a\
     7363c344fe6b199ee5d02e82d522c4feba15452f80288a821a579116ec6dad2b3b310da903401aa62100ab5d1a36553e\
     06203b33890cc9b832f79ef80560ccb9a39ce767967ed628c6ad573cb116dbefefd75499da96bd68a8a97b928a8bbc10\
     3b6621fcde2beca1231d206be6cd9ec7aff6f6c94fcd7204ed3455c68c83f4a41da4af2b74ef5c53f1d8ac70bdcb7ed1\
     85ce81bd84359d44254d95629e9855a94a7c1958d1f8ada5d0532ed8a5aa3fb2d17ba70eb6248e594e1a2297acbbb39d\
     502f1a8c6eb6f1ce22b3de1a1f40cc24554119a831a9aad6079cad88425de6bde1a9187ebb6092cf67bf2b13fd65f270\
     88d78b7e883c8759d2c4f5c65adb7553878ad575f9fad878e80a0c9ba63bcbcc2732e69485bbc9c90bfbd62481d9089b\
     eccf80cfe2df16a2cf65bd92dd597b0707e0917af48bbb75fed413d238f5555a7a569d80c3414a8d0859dc65a46128ba\
     b27af87a71314f318c782b23ebfe808b82b0ce26401d2e22f04d83d1255dc51addd3b75a2b1ae0784504df543af8969b\
     e3ea7082ff7fc9888c144da2af58429ec96031dbcad3dad9af0dcbaaaf268cb8fcffead94f3c7ca495e056a9b47acdb7\
     51fb73e666c6c655ade8297297d07ad1ba5e43f1bca32301651339e22904cc8c42f58c30c04aafdb038dda0847dd988d\
     cda6f3bfd15c4b4c4525004aa06eeff8ca61783aacec57fb3d1f92b0fe2fd1a85f6724517b65e614ad6808d6f6ee34df\
     f7310fdc82aebfd904b01e1dc54b2927094b2db68d6f903b68401adebf5a7e08d78ff4ef5d63653a65040cf9bfd4aca7\
     984a74d37145986780fc0b16ac451649de6188a7dbdf191f64b5fc5e2ab47b57f7f7276cd419c17a3ca8e1b939ae49e4\
     88acba6b965610b5480109c8b17b80e1b7b750dfc7598d5d5011fd2dcc5600a32ef5b52a1ecc820e308aa342721aac09\
     43bf6686b64b2579376504ccc493d97e6aed3fb0f9cd71a43dd497f01f17c0e2cb3797aa2a2f256656168e6c496afc5f\
     b93246f6b1116398a346f1a641f3b041e989f7914f90cc2c7fff357876e506b50d334ba77c225bc307ba537152f3f161\
     0e4eafe595f6d9d90d11faa933a15ef1369546868a7f3a45a96768d40fd9d03412c091c6315cf4fde7cb68606937380d\
     b2eaaa707b4c4185c32eddcdd306705e4dc1ffc872eeee475a64dfac86aba41c0618983f8741c5ef68d3a101e8a3b8ca\
     c60c905c15fc910840b94c00a0b9d0";

const RFC8032: &[Rfc8032] = &[
    // RFC 8032 §7.1 -----TEST 1: empty message.
    Rfc8032 {
        name: "RFC 8032 TEST 1",
        secret: "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
        public: "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
        msg: "",
        sig: "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b",
    },
    // RFC 8032 §7.1 -----TEST 2: one byte.
    Rfc8032 {
        name: "RFC 8032 TEST 2",
        secret: "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
        public: "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c",
        msg: "72",
        sig: "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00",
    },
    // RFC 8032 §7.1 -----TEST 3: two bytes.
    Rfc8032 {
        name: "RFC 8032 TEST 3",
        secret: "c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7",
        public: "fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025",
        msg: "af82",
        sig: "6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac18ff9b538d16f290ae67f760984dc6594a7c15e9716ed28dc027beceea1ec40a",
    },
    // RFC 8032 §7.1 -----TEST 1024: 1023 bytes.
    Rfc8032 {
        name: "RFC 8032 TEST 1024",
        secret: "f5e5767cf153319517630f226876b86c8160cc583bc013744c6bf255f5cc0ee5",
        public: "278117fc144c72340f67d0f2316e8386ceffbf2b2428c9c51fef7c597f1d426e",
        msg: TEST_1024_MSG,
        sig: "0aab4c900501b3e24d7cdf4663326a3a87df5e4843b2cbdb67cbf6e460fec350aa5371b1508f9f4528ecea23c436d94b5e8fcd4f681e30a6ac00a9704a188a03",
    },
    // RFC 8032 §7.1 -----TEST SHA(abc): the message is SHA-512("abc"), 64 bytes.
    Rfc8032 {
        name: "RFC 8032 TEST SHA(abc)",
        secret: "833fe62409237b9d62ec77587520911e9a759cec1d19755b7da901b96dca3d42",
        public: "ec172b93ad5e563bf4932c70e1245034c35467ef2efd4d64ebf819683467e2bf",
        msg: "ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a\
              2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f",
        sig: "dc2a4459e7369633a52b1bf277839a00201009a3efbf3ecb69bea2186c26b589\
              09351fc9ac90b3ecfdfbc7c66431e0303dca179c138ac17ad9bef1177331a704",
    },
];

/// From the seed: the public key and the signature must match byte for byte, the signature
/// must verify, and a changed message, a changed signature or another vector's key must not.
#[test]
fn rfc8032_7_1() {
    assert_eq!(unhex(TEST_1024_MSG).len(), 1023);
    assert_eq!(
        hex::encode(ring::digest::digest(&ring::digest::SHA512, b"abc")),
        RFC8032[4].msg,
        "TEST SHA(abc) message is SHA-512(\"abc\")"
    );
    for (i, v) in RFC8032.iter().enumerate() {
        let seed: [u8; SEED_LEN] = unhex32(v.secret);
        let key = SigningKey::from_seed(&seed);
        assert_eq!(key.public().to_hex(), v.public, "{}: public key", v.name);
        let msg = unhex(v.msg);
        let sig = key.sign(&msg);
        assert_eq!(hex::encode(sig), v.sig, "{}: signature", v.name);

        let public = pk(v.public);
        assert!(public.verify(&msg, &sig), "{}: does not verify", v.name);

        let mut longer = msg.clone();
        longer.push(0);
        assert!(!public.verify(&longer, &sig), "{}: verifies with a byte appended", v.name);
        if let Some((last, head)) = msg.split_last() {
            assert!(!public.verify(head, &sig), "{}: verifies with the last byte cut", v.name);
            let mut flipped = msg.clone();
            *flipped.last_mut().unwrap() = last ^ 0x01;
            assert!(!public.verify(&flipped, &sig), "{}: verifies with a message bit flipped", v.name);
        }
        for byte in [0, 31, 32, 63] {
            let mut bad = sig;
            bad[byte] ^= 0x04;
            assert!(!public.verify(&msg, &bad), "{}: verifies with signature byte {byte} changed", v.name);
        }
        let other = pk(RFC8032[(i + 1) % RFC8032.len()].public);
        assert!(!other.verify(&msg, &sig), "{}: verifies under another vector's key", v.name);
    }
}

// ---------------------------------------------------------------------------------------------
// Wycheproof
// ---------------------------------------------------------------------------------------------

/// The vector file, byte for byte as published (see the module comment for its origin).
const WYCHEPROOF_ED25519: &str = include_str!("data/wycheproof/ed25519_test.json");

/// Cases in the file; asserted so that the test cannot pass having run none.
const WYCHEPROOF_CASES: usize = 151;

/// Wycheproof cases whose verdict from ring differs from the file's `result`, each with the
/// reason. Empty: ring 0.17 agrees on every `valid` and `invalid` case. (The file has no
/// `acceptable` cases; they would be allowed either way.)
const WYCHEPROOF_DEVIATIONS: &[(u64, &str)] = &[];

fn wycheproof() -> serde_json::Value {
    serde_json::from_str(WYCHEPROOF_ED25519).expect("the Wycheproof file parses")
}

/// Every case of the file through `PublicKey::verify`.
#[test]
fn wycheproof_ed25519() {
    let file = wycheproof();
    assert_eq!(file["algorithm"], "EDDSA");
    assert_eq!(file["schema"], "eddsa_verify_schema_v1.json");
    assert_eq!(file["numberOfTests"].as_u64(), Some(WYCHEPROOF_CASES as u64));

    let (mut run, mut valid, mut invalid, mut acceptable) = (0, 0, 0, 0);
    let mut deviations: Vec<(u64, String)> = Vec::new();
    for group in file["testGroups"].as_array().expect("testGroups") {
        assert_eq!(group["type"], "EddsaVerify");
        assert_eq!(group["publicKey"]["curve"], "edwards25519");
        let key = pk(group["publicKey"]["pk"].as_str().expect("pk"));
        for case in group["tests"].as_array().expect("tests") {
            let id = case["tcId"].as_u64().expect("tcId");
            let msg = unhex(case["msg"].as_str().expect("msg"));
            let sig = unhex(case["sig"].as_str().expect("sig"));
            let verdict = key.verify(&msg, &sig);
            run += 1;
            let expected = match case["result"].as_str().expect("result") {
                "valid" => {
                    valid += 1;
                    true
                }
                "invalid" => {
                    invalid += 1;
                    false
                }
                "acceptable" => {
                    acceptable += 1;
                    continue;
                }
                other => panic!("tcId {id}: unknown result {other:?}"),
            };
            if verdict != expected {
                let comment = case["comment"].as_str().unwrap_or_default();
                let flags = &case["flags"];
                deviations.push((id, format!("expected {expected}, got {verdict}: {flags} {comment}")));
            }
        }
    }
    assert_eq!(run, WYCHEPROOF_CASES, "cases run");
    assert_eq!((valid, invalid, acceptable), (88, 63, 0), "valid, invalid and acceptable cases");
    let got: Vec<u64> = deviations.iter().map(|d| d.0).collect();
    let known: Vec<u64> = WYCHEPROOF_DEVIATIONS.iter().map(|d| d.0).collect();
    assert_eq!(got, known, "deviations from Wycheproof: {deviations:#?}");
}

/// TEST 1, 2, 3 and 1024 of RFC 8032 are in the Wycheproof file too (tcIds 80-83, from the
/// draft they came from); the typed-in copies above must agree with them.
#[test]
fn rfc8032_vectors_agree_with_wycheproof() {
    let file = wycheproof();
    for (id, v) in (80..=83).zip(RFC8032) {
        let (group, case) = file["testGroups"]
            .as_array()
            .unwrap()
            .iter()
            .find_map(|g| g["tests"].as_array().unwrap().iter().find(|t| t["tcId"] == id).map(|t| (g, t)))
            .unwrap_or_else(|| panic!("tcId {id} missing"));
        assert_eq!(group["publicKey"]["pk"], v.public, "{} against tcId {id}", v.name);
        assert_eq!(case["msg"], v.msg, "{} against tcId {id}", v.name);
        assert_eq!(case["sig"], v.sig, "{} against tcId {id}", v.name);
        assert_eq!(case["result"], "valid");
    }
}

// ---------------------------------------------------------------------------------------------
// Edge cases
// ---------------------------------------------------------------------------------------------

/// RFC 8032 TEST 3's key, message and signature, as the valid starting point for edge cases.
fn known_good() -> (PublicKey, Vec<u8>, [u8; SIGNATURE_LEN]) {
    let v = &RFC8032[2];
    let sig: [u8; SIGNATURE_LEN] = unhex(v.sig).try_into().unwrap();
    let (key, msg) = (pk(v.public), unhex(v.msg));
    assert!(key.verify(&msg, &sig));
    (key, msg, sig)
}

/// A signature must be exactly 64 bytes: one byte short (63) or one byte long (65, a zero byte
/// appended or prepended) is rejected even though the first 64 bytes are a valid signature.
/// (Wycheproof tcIds 30-41 cover the same ground on its own key.)
#[test]
fn wrong_signature_length_rejected() {
    let (key, msg, sig) = known_good();
    assert!(!key.verify(&msg, &sig[..63]), "63 bytes, last cut");
    assert!(!key.verify(&msg, &sig[1..]), "63 bytes, first cut");
    let appended: Vec<u8> = sig.iter().copied().chain([0]).collect();
    assert_eq!(appended.len(), 65);
    assert!(!key.verify(&msg, &appended), "65 bytes, zero appended");
    let prepended: Vec<u8> = [0].into_iter().chain(sig).collect();
    assert!(!key.verify(&msg, &prepended), "65 bytes, zero prepended");
    assert!(!key.verify(&msg, &[]), "empty");
    assert!(!key.verify(&msg, &[sig, sig].concat()), "128 bytes");
}

/// Malleability: `S + L` is the same scalar modulo the group order, so a verifier that reduced
/// `S` instead of requiring `S < L` would accept it (RFC 8032 §5.1.7 and §8.4). Rejected, as
/// are `S + 2L`, `S + 4L`, `S + 8L`, `S = L` and `S = 2^256 - 1`. (Wycheproof tcIds 63-66 and
/// 85 are the same check on other keys.)
#[test]
fn s_at_or_above_group_order_rejected() {
    let (key, msg, sig) = known_good();
    let s: [u8; 32] = sig[32..].try_into().unwrap();
    let mut multiple = L; // k * L
    for k in [1, 2, 4, 8] {
        if k > 1 {
            multiple = add_le(&multiple, &multiple);
        }
        let mut bad = sig;
        bad[32..].copy_from_slice(&add_le(&s, &multiple));
        assert!(!key.verify(&msg, &bad), "S + {k}L accepted");
    }
    for s in [L, [0xff; 32]] {
        let mut bad = sig;
        bad[32..].copy_from_slice(&s);
        assert!(!key.verify(&msg, &bad), "S = {} accepted", hex::encode(s));
    }
}

/// The eight points of small order (the torsion subgroup), canonical encodings, with their
/// orders.
const SMALL_ORDER: [(&str, u64); 8] = [
    ("0100000000000000000000000000000000000000000000000000000000000000", 1), // identity (0, 1)
    ("ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f", 2), // (0, -1)
    ("0000000000000000000000000000000000000000000000000000000000000000", 4), // (sqrt(-1), 0)
    ("0000000000000000000000000000000000000000000000000000000000000080", 4), // (-sqrt(-1), 0)
    ("26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05", 8),
    ("26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85", 8),
    ("c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a", 8),
    ("c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa", 8),
];

/// Non-canonical encodings that decode to small-order points: `y = p + 1` (the identity),
/// `y = 1` with the sign bit set (`x = 0` cannot be negative: RFC 8032 §5.1.3 says decoding
/// must fail), and `y = p` (the order-4 points).
const NON_CANONICAL_SMALL_ORDER: [(&str, u64); 4] = [
    ("eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f", 1),
    ("0100000000000000000000000000000000000000000000000000000000000080", 1),
    ("edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f", 4),
    ("edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff", 4),
];

fn messages() -> impl Iterator<Item = Vec<u8>> {
    (0u32..256).map(|i| format!("snapshot {i}").into_bytes())
}

/// A small-order public key with `R = identity, S = 0`. Then `[S]B = R + [k]A` holds whenever
/// `[k]A` is the identity, that is when the order of `A` divides the challenge `k`.
///
/// Wycheproof's `ed25519_test.json` has no small-order public keys (its tcIds 10-29 put small
/// order points and edge values in `R` and `S` under an ordinary key), so these cases are
/// built here. The verifier underneath (ring) is cofactorless and does not reject small-order
/// keys: it accepts the identity key (and its non-canonical encodings) for every message, a
/// forgery needing no secret, and keys of order 2, 4 and 8 whenever the order divides `k`.
/// coffer refuses such keys itself (`PublicKey::is_weak`): every one is rejected for every
/// message, including those the plain verifier would accept, which the prediction shows exist.
#[test]
fn small_order_public_key_with_identity_r_and_zero_s() {
    let mut sig = [0u8; SIGNATURE_LEN];
    sig[0] = 1; // R = identity (canonical encoding), S = 0
    for (hex, order) in SMALL_ORDER.iter().chain(&NON_CANONICAL_SMALL_ORDER) {
        let a = unhex32(hex);
        let key = PublicKey(a);
        assert!(key.is_weak(), "key {hex} (order {order}) is not refused");
        let mut plain_verifier_would_accept = 0;
        for msg in messages() {
            let k = challenge(&sig[..32], &a, &msg);
            plain_verifier_would_accept += k[0].is_multiple_of(*order) as u32;
            assert!(!key.verify(&msg, &sig), "key {hex} (order {order}) verified {:?}", String::from_utf8_lossy(&msg));
        }
        assert!(plain_verifier_would_accept > 0, "key {hex}: no message would have been forged");
    }
    // No key from a seed is weak.
    for i in 0..64u8 {
        assert!(!coffer_core::crypto::sign::SigningKey::from_seed(&[i; 32]).public().is_weak());
    }
}

/// All-zero public key with the all-zero signature. The zero encoding is not invalid: it
/// decodes to `(sqrt(-1), 0)`, a point of order 4, and `R` = the same point. The plain
/// verifier recomputes `R' = -[k]A`, which equals `A` exactly when `k = 3 mod 4`, so it would
/// accept about one message in four; coffer refuses the key, so none is accepted.
#[test]
fn all_zero_public_key_and_signature() {
    let key = PublicKey([0; 32]);
    let sig = [0u8; SIGNATURE_LEN];
    let mut plain_verifier_would_accept = 0;
    for msg in messages().chain([Vec::new()]) {
        let k = challenge(&sig[..32], &key.0, &msg);
        plain_verifier_would_accept += (k[0] % 4 == 3) as u32;
        assert!(!key.verify(&msg, &sig), "message {:?}", String::from_utf8_lossy(&msg));
    }
    assert!((32..=96).contains(&plain_verifier_would_accept), "{plain_verifier_would_accept} of 257");
    // The all-zero signature under a real key, and a real signature under the zero key: rejected.
    let (good_key, msg, good_sig) = known_good();
    assert!(!good_key.verify(&msg, &sig));
    assert!(!key.verify(&msg, &good_sig));
}

/// Each of the 512 single-bit changes of a valid signature is rejected: in `R` the recomputed
/// point no longer matches, in `S` the scalar changes (or leaves the range below `L`).
#[test]
fn every_single_bit_flip_rejected() {
    for v in RFC8032 {
        let key = pk(v.public);
        let msg = unhex(v.msg);
        let sig: [u8; SIGNATURE_LEN] = unhex(v.sig).try_into().unwrap();
        for bit in 0..SIGNATURE_LEN * 8 {
            let mut bad = sig;
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(!key.verify(&msg, &bad), "{}: bit {bit} flipped, accepted", v.name);
        }
    }
}

/// One message and its signature checked against many keys: the signer's key accepts, every
/// other key rejects, and nothing panics. The keys: every small-order point (canonical or not),
/// every encoding with `y >= p` (both signs), each constant byte 0x00-0xff, keys of one bit,
/// the signer's key with each bit flipped, and 2000 pseudo-random byte strings (about half of
/// which are not points at all).
#[test]
fn one_message_many_keys() {
    let signer = SigningKey::from_seed(&[7; SEED_LEN]);
    let msg = b"snapshot 0123456789abcdef";
    let sig = signer.sign(msg);
    let mut keys: Vec<[u8; 32]> = Vec::new();
    keys.extend(SMALL_ORDER.iter().chain(&NON_CANONICAL_SMALL_ORDER).map(|(h, _)| unhex32(h)));
    for low in 0xedu8..=0xff {
        let mut k = [0xff; 32];
        k[0] = low;
        keys.push(k);
        k[31] = 0x7f;
        keys.push(k);
    }
    keys.extend((0..=255u8).map(|b| [b; 32]));
    for bit in 0..256 {
        let mut k = [0; 32];
        k[bit / 8] = 1 << (bit % 8);
        keys.push(k);
        let mut flipped = signer.public().0;
        flipped[bit / 8] ^= 1 << (bit % 8);
        keys.push(flipped);
    }
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for _ in 0..2000 {
        let mut k = [0u8; 32];
        for chunk in k.chunks_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            chunk.copy_from_slice(&x.to_le_bytes());
        }
        keys.push(k);
    }
    let total = keys.len();
    let accepted: Vec<_> = keys.into_iter().filter(|k| PublicKey(*k).verify(msg, &sig)).collect();
    assert!(total > 2500, "{total} keys");
    assert!(signer.public().verify(msg, &sig));
    assert_eq!(accepted, Vec::<[u8; 32]>::new(), "keys other than the signer's accepted");
}
