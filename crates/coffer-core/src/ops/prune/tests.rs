//! Unit tests of prune steps.
