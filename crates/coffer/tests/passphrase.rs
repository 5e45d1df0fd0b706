//! Passphrases: an empty one is refused wherever a key file is made, and a KDF
//! cost below the default needs an explicit flag.

mod common;

use common::*;

#[test]
fn an_empty_passphrase_is_refused() {
    let env = Env::empty();
    // From the environment, and from a password file whose first line is empty.
    let out =
        env.cmd().env("COFFER_PASSWORD", "").args(["init", "--kdf-log-n", "10", "--insecure-kdf"]).output().unwrap();
    let err = assert_code(&out, 1);
    assert!(err.contains("empty passphrase"), "{err}");
    let file = env.path("pw");
    std::fs::write(&file, "\nsecond line\n").unwrap();
    let out = env
        .cmd()
        .env_remove("COFFER_PASSWORD")
        .args(["init", "--kdf-log-n", "10", "--insecure-kdf", "--password-file", file.to_str().unwrap()])
        .output()
        .unwrap();
    let err = assert_code(&out, 1);
    assert!(err.contains("empty passphrase"), "{err}");
    assert!(!env.repo().join("config").exists());

    let env = Env::new();
    for cmd in ["add", "passwd"] {
        let out = env
            .cmd()
            .env("COFFER_NEW_PASSWORD", "")
            .args(["key", cmd, "--kdf-log-n", "10", "--insecure-kdf"])
            .output()
            .unwrap();
        let err = assert_code(&out, 1);
        assert!(err.contains("empty passphrase"), "{cmd}: {err}");
    }
    assert_eq!(files_under(&env.repo().join("keys")).len(), 1);
}

#[test]
fn a_weak_kdf_needs_an_explicit_flag() {
    let env = Env::empty();
    let out = env.run(&["init", "--kdf-log-n", "12"]);
    let err = assert_code(&out, 1);
    assert!(err.contains("--kdf-log-n 12") && err.contains("--insecure-kdf"), "{err}");
    assert!(!env.repo().join("config").exists());
    assert_success(&env.run(&["init", "--kdf-log-n", "12", "--insecure-kdf"]));

    for cmd in ["add", "passwd"] {
        let out =
            env.cmd().env("COFFER_NEW_PASSWORD", "another").args(["key", cmd, "--kdf-log-n", "14"]).output().unwrap();
        let err = assert_code(&out, 1);
        assert!(err.contains("--insecure-kdf"), "{cmd}: {err}");
    }
    // The default cost needs no flag.
    let out = env.cmd().env("COFFER_NEW_PASSWORD", "another").args(["key", "add"]).output().unwrap();
    assert_success(&out);
}
