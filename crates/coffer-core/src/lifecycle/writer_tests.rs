//! Unit tests of WriterGuard.
