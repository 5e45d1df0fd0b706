//! `format::tree::{TreeBlob, ContentPart}::decode`: tree blobs (JSON) as decrypted
//! from a pack: listings, split listings and content parts.
#![no_main]

use coffer_core::format::tree::{ContentPart, Tree, TreeBlob};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match TreeBlob::decode(data) {
        Ok(TreeBlob::Listing(nodes)) => {
            let tree = Tree { nodes };
            // A listing that decodes re-encodes to one that decodes to the same value.
            assert_eq!(Tree::decode(&tree.encode()).as_ref(), Ok(&tree));
            for n in &tree.nodes {
                assert!(tree.find(&n.name.0).is_some());
            }
        }
        Ok(TreeBlob::Split(parts)) => assert!(!parts.is_empty()),
        Err(_) => assert!(Tree::decode(data).is_err()),
    }
    if let Ok(p) = ContentPart::decode(data) {
        assert!(p.content.is_empty() != p.content_parts.is_empty());
    }
});
