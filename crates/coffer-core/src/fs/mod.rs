//! The local file system: opening sources without following links a local user
//! could plant ([`source`]), and reading and applying metadata ([`meta`]).

pub mod meta;
pub mod source;
