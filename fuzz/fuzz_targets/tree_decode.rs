//! `format::tree::Tree::decode`: tree blobs (JSON) as decrypted from a pack.
#![no_main]

use coffer_core::format::tree::Tree;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(tree) = Tree::decode(data) {
        // A tree that decodes re-encodes to one that decodes to the same value.
        assert_eq!(Tree::decode(&tree.encode()).as_ref(), Ok(&tree));
        for n in &tree.nodes {
            assert!(tree.find(&n.name.0).is_some());
        }
    }
});
