//! `coffer prove` and `coffer verify-proof`.

use std::io::Read;
use std::os::unix::ffi::OsStrExt;

use anyhow::{Context, Result};
use coffer_core::crypto::sign::PublicKey;
use coffer_core::format::proof::Proof;
use coffer_core::ops::prove::prove;
use coffer_core::repo::SnapshotFilter;
use serde_json::json;

use crate::args::{GlobalArgs, ProveArgs, VerifyProofArgs};
use crate::{exit, output, repo_open};

pub fn run(global: &GlobalArgs, a: &ProveArgs) -> Result<u8> {
    let (repo, id, snap) = repo_open::open_finding_one(global, &a.snapshot, &SnapshotFilter::from(&a.filter))?;
    super::flag_signature(&id, &snap);
    let proof = prove(&repo, &id, a.path.as_bytes())?;
    let bytes = proof.encode();
    match &a.output {
        Some(f) => {
            std::fs::write(f, &bytes).with_context(|| format!("cannot write the proof to {}", f.display()))?;
            if !global.quiet && !global.json {
                println!(
                    "proof for {} in snapshot {} written to {}",
                    a.path.to_string_lossy(),
                    id.short(),
                    f.display()
                );
            }
        }
        None => println!("{}", String::from_utf8_lossy(&bytes)),
    }
    Ok(exit::OK)
}

pub fn verify(global: &GlobalArgs, a: &VerifyProofArgs) -> Result<u8> {
    let raw = if a.proof.as_os_str() == "-" {
        let mut b = Vec::new();
        std::io::stdin().read_to_end(&mut b).context("cannot read the proof from standard input")?;
        b
    } else {
        std::fs::read(&a.proof).with_context(|| format!("cannot read the proof {}", a.proof.display()))?
    };
    let trusted: Vec<PublicKey> = a
        .public_keys
        .iter()
        .map(|k| PublicKey::from_hex(k.trim()).with_context(|| format!("{k:?} is not a public key (64 hex digits)")))
        .collect::<Result<_>>()?;
    let fail = |why: String| -> Result<u8> {
        if global.json {
            output::json(&json!({"type": "summary", "valid": false, "reason": why}));
        } else {
            eprintln!("proof does NOT verify: {why}");
        }
        Ok(exit::NOT_VERIFIED)
    };
    let proof = match Proof::decode(&raw) {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    let v = match proof.verify() {
        Ok(v) => v,
        Err(e) => return fail(e),
    };
    if !trusted.is_empty() && !trusted.contains(&v.signer) {
        return fail(format!("signed by {}, which is not among the public keys given", v.signer.to_hex()));
    }
    if let Some(f) = &a.file {
        let mut hasher = blake3::Hasher::new();
        let file = std::fs::File::open(f).with_context(|| format!("cannot open {}", f.display()))?;
        hasher.update_reader(file).with_context(|| format!("cannot read {}", f.display()))?;
        if hasher.finalize().as_bytes() != &v.digest.0 {
            return fail(format!("the content of {} is not the content proven", f.display()));
        }
    }
    let path = String::from_utf8_lossy(&v.path);
    if global.json {
        output::json(&json!({
            "type": "summary", "valid": true, "snapshot_id": v.snapshot_id, "signer": v.signer,
            "path": proof.path, "digest": v.digest, "content_checked": a.file.is_some(),
            "signer_trusted": !trusted.is_empty(),
        }));
    } else {
        println!("proof verifies: {path} (BLAKE3 {}) is in snapshot {}", v.digest.to_hex(), v.snapshot_id.to_hex());
        println!("signed by {}", v.signer.to_hex());
        if let Some(f) = &a.file {
            println!("the content of {} matches", f.display());
        }
        if trusted.is_empty() {
            println!("compare the signer with `coffer writers`, or pass --public-key to require it");
        }
    }
    Ok(exit::OK)
}
