//! Other programs' repositories and archives as coffer imports them
//! (docs/design.md#import): each adapts what a reader of `coffer-import` gives
//! to the [`coffer_core::ops::backup::ForeignTree`] the import stores.

pub mod borg;
pub mod kopia;
pub mod pump;
pub mod restic;
pub mod tar;
