//! The local file system: opening sources without following links a local user
//! could plant ([`source`]), reading and applying metadata ([`meta`]), the
//! paths a user gives ([`paths`]) and pattern matching over them ([`select`]).

pub mod meta;
pub mod paths;
pub mod select;
pub mod source;
