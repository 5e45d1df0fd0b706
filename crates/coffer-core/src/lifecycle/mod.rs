//! How writers and prune coexist without locks (docs/design.md#prune): a running
//! backup announces itself with a session marker, prune announces what it will
//! delete with a notice and waits a grace period, and a writer checks the
//! notices before it commits a snapshot.

pub mod session;
