//! wardcell-git: what a sandbox may leave in a git repository that runs code on the host,
//! read where a bug cannot change a decision. `wardcell-shim --git-watch` runs this
//! crate, confined (no writes, no network, no programs, bounded memory), and hands the
//! broker one typed frame a look (`protocol::GitLook`); the broker never links it.
//!
//! - [`config`]: git's configuration files read with git's own grammar, and the keys known
//!   to be harmless.
//! - [`guard`]: the snapshot of a run's repository and what changed since.
//! - [`watch`]: the watcher's side of the frames.
#![forbid(unsafe_code)]

pub mod config;
pub mod guard;
pub mod watch;
