//! wardcell-support: what the client, the approval plugin and the configuration share
//! that the broker never links (`common` is what the broker links, and says so).
//!
//! - [`paths`]: where wardcell's directories are for a user, and how profile paths expand.
//! - [`text`]: a command's words as a shell would need them typed.
//! - [`roots`]: the certificates a credentialed proxy trusts upstream, read at the start.
#![forbid(unsafe_code)]

pub mod paths;
pub mod roots;
pub mod text;
