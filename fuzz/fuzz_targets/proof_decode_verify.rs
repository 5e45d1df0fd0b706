//! `proof::Proof::decode`, then `Proof::verify`: inclusion proofs (JSON) as handed to
//! `coffer verify-proof` by anyone. A proof that verifies must say what it proved.
#![no_main]

use coffer_core::format::proof::Proof;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = Proof::decode(data) {
        assert_eq!(Proof::decode(&p.encode()).as_ref(), Ok(&p));
        if let Ok(v) = p.verify() {
            assert_eq!(v.snapshot_id, p.snapshot_id);
            assert_eq!(v.path, p.path.0);
            assert_eq!(v.digest, p.digest);
            assert!(p.index < p.leaves);
        }
    }
});
