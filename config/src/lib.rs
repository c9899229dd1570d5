//! wardcell-config: the user's configuration, for the client (and the tools that document
//! it). The broker does not depend on it: it takes the plan this crate resolves and never
//! builds a TOML parser.
//!
//! - [`config`]: zones.toml, parsed and checked, and the built-in profiles.
//! - [`resolve`]: a configuration and a command line resolved into a
//!   [`wardcell_common::plan::Plan`].
//! - [`sizes`]: a limit's size or CPU share as zones.toml writes it.
#![forbid(unsafe_code)]

pub mod config;
pub mod resolve;
pub mod sizes;
