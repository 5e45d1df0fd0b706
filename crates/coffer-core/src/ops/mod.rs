//! The operations a user runs, one module each. They use [`crate::repo`] and
//! [`crate::lifecycle`]; nothing below this module imports from it.

pub mod backup;
pub mod bench;
pub mod check;
pub mod copy;
pub mod diff;
pub mod dump;
pub mod find;
pub mod forget;
pub mod keys;
pub mod planted;
pub mod prove;
pub mod prune;
pub mod repair;
pub mod restore;
pub mod retention;
pub mod tag;
