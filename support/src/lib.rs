//! wardcell-support: what the client, the approval plugin and the configuration share
//! and the shim share that the broker never links (`common` is what the broker links, and says so).
//!
//! - [`audit`]: the audit log's format, its lines and their chain (the run's writer is
//!   `wardcell-shim --helper`; `wardcell logs` verifies).
//! - [`syslog`]: one line to the system log (the audit writer's copy, the approval plugin).
//! - [`paths`]: where wardcell's directories are for a user, and how profile paths expand.
//! - [`text`]: a command's words as a shell would need them typed.
//! - [`roots`]: the certificates a credentialed proxy trusts upstream, read at the start.
//! - [`sandbox_env`]: the proxy's and the CA bundle's variables in a sandbox, NO_PROXY.
//! - [`trace`]: tracing in a helper the broker starts, as its spec says.
//! - [`tty`]: which standard descriptor is a terminal, borrowed.
//! - [`view`]: what a sandbox's view holds against the host (the shim's skeletons, the
//!   run's watches).
#![forbid(unsafe_code)]

pub mod audit;
pub mod paths;
pub mod roots;
pub mod sandbox_env;
pub mod syslog;
pub mod text;
pub mod trace;
pub mod tty;
pub mod view;
