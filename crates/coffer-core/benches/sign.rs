//! Cost of writer signatures (Ed25519 through `coffer_core::crypto::sign`): signing a 256-byte
//! message, verifying a valid signature, and verifying invalid signatures of several kinds.
//! Signatures are verified one at a time (no batch verification), so an invalid signature
//! should cost no more than a valid one. Run with
//! `cargo bench -p coffer-core --bench sign -- --warm-up-time 1 --measurement-time 3`;
//! figures are recorded in docs/performance.md.

use std::hint::black_box;

use coffer_core::crypto::sign::{PublicKey, SIGNATURE_LEN, SigningKey};
use criterion::{Criterion, criterion_group, criterion_main};

mod common;
use common::noise;

/// The group order L, little-endian.
const L: [u8; 32] = [
    0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9, 0xde, 0x14, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10,
];

fn with_s_plus_l(sig: &[u8; SIGNATURE_LEN]) -> [u8; SIGNATURE_LEN] {
    let mut out = *sig;
    let mut carry = 0u16;
    for i in 0..32 {
        let s = sig[32 + i] as u16 + L[i] as u16 + carry;
        out[32 + i] = s as u8;
        carry = s >> 8;
    }
    assert_eq!(carry, 0);
    out
}

fn signatures(c: &mut Criterion) {
    let key = SigningKey::from_seed(&[0x42; 32]);
    let public = key.public();
    let msg = noise(256, 1);
    let sig = key.sign(&msg);

    let mut g = c.benchmark_group("ed25519");
    g.bench_function("sign-256B", |b| b.iter(|| key.sign(black_box(&msg))));
    // For comparison: ring signing with a key pair kept across calls (`SigningKey::sign`
    // rebuilds the key pair from the seed on every call).
    let pair = ring::signature::Ed25519KeyPair::from_seed_unchecked(&[0x42; 32]).unwrap();
    g.bench_function("sign-256B-ring-kept-keypair", |b| b.iter(|| pair.sign(black_box(&msg))));

    assert!(public.verify(&msg, &sig));
    g.bench_function("verify-valid", |b| b.iter(|| public.verify(black_box(&msg), black_box(&sig))));

    let random: [u8; SIGNATURE_LEN] = noise(SIGNATURE_LEN, 2).try_into().unwrap();
    // A random S is at least L with probability 15/16 (and this one is), so the range check
    // rejects it before any curve arithmetic. With S below L (top four bits cleared) the full
    // verification runs: R is not decoded, only compared with the recomputed point.
    assert!(random[63] > 0x10, "S of the random signature is at least L");
    let mut random_s_below_l = random;
    random_s_below_l[63] &= 0x0f;
    let mut flipped_s = sig;
    flipped_s[32] ^= 1;
    let other = SigningKey::from_seed(&[0x43; 32]).public();
    // An order-8 point (a small-order public key).
    let small_order = PublicKey::from_hex("c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a").unwrap();
    // y = 2 is not the y coordinate of any curve point: decoding fails.
    let not_a_point = PublicKey::from_hex("0200000000000000000000000000000000000000000000000000000000000000").unwrap();
    let invalid: [(&str, PublicKey, [u8; SIGNATURE_LEN]); 7] = [
        ("verify-invalid-random-bytes", public, random),
        ("verify-invalid-random-r-s-below-l", public, random_s_below_l),
        ("verify-invalid-flipped-s-bit", public, flipped_s),
        ("verify-invalid-s-plus-l", public, with_s_plus_l(&sig)),
        ("verify-invalid-wrong-key", other, sig),
        ("verify-invalid-small-order-key", small_order, sig),
        ("verify-invalid-key-not-a-point", not_a_point, sig),
    ];
    for (name, k, s) in invalid {
        assert!(!k.verify(&msg, &s), "{name} verifies");
        g.bench_function(name, |b| b.iter(|| k.verify(black_box(&msg), black_box(&s))));
    }
    g.finish();
}

criterion_group!(benches, signatures);
criterion_main!(benches);
