//! Settings only the test suite uses, read from the environment by debug builds
//! alone: `COFFER_TEST_PRUNE_GRACE_MS` (a short grace period for prune),
//! `COFFER_TEST_RESTORE_BATCH` (small restore batches), `COFFER_TEST_FAULTS` and
//! `COFFER_TEST_FAULTS_<BACKEND>` (storage faults), `COFFER_RETRY_BASE_MS` (a
//! short first retry delay). A release build, the one users install, ignores
//! them: a variable left in someone's environment must not shorten the grace
//! period that keeps a running backup's data from a prune, nor inject faults.

/// Whether this build reads the test settings: debug builds only.
pub const ENABLED: bool = cfg!(debug_assertions);

/// The test setting `name`, when this build reads test settings and it is set
/// and not empty.
pub fn get(name: &str) -> Option<String> {
    read(ENABLED, name)
}

fn read(enabled: bool, name: &str) -> Option<String> {
    if !enabled {
        return None;
    }
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_release_build_reads_no_test_setting() {
        // PATH is set in any test run: a build that reads test settings would see it.
        assert!(read(true, "PATH").is_some());
        assert_eq!(read(false, "PATH"), None);
        assert_eq!(ENABLED, cfg!(debug_assertions));
    }
}
