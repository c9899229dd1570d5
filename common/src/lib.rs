//! wardcell-common: what the client, broker, shim and proxy agree on. The configuration's
//! parser and its resolution into a plan are the client's alone (`wardcell-config`): the
//! broker takes a plan and never builds a TOML parser.
//!
//! - [`protocol`]: frames (u32 LE length + one bincode 2 message) and the message enums,
//!   typed by direction. The codec lives in that one module.
//! - [`plan`]: the resolved plan the client hands the broker, and the sandbox spec the
//!   broker hands the shim.
//! - [`paths`]: where wardcell's own directories are, and path expansion.
//! - [`envrules`]: the environment a sandbox receives.
//! - [`helper`]: where host-side helpers run, with what environment.
//! - [`approval`]: the approval plugin's answer.
//! - [`seatbelt`]: the Seatbelt (macOS) profile text made from a sandbox spec.
//! - [`text`]: text from a sandbox or a configuration, made safe to print; commands
//!   quoted as a shell would need them.
//! - [`audit`]: the calendar run ids and the audit log's times are written in (the
//!   log's format is `wardcell-support`'s, its writer the run's helper,
//!   `wardcell-shim --helper`).
//! - [`throttle`]: the token bucket for events a sandbox can cause at will.
//! - [`stdio`]: which standard descriptors a process was started without.
//! - [`limits`]: a sandbox's resource limits, how each is enforced here, its cgroup.
//! - [`prepared`]: a sandbox as the plan writer prepared it, and its spec once asked for.
//! - [`why`]: whether a zone may read, write or reach something, and which rule decides.
#![forbid(unsafe_code)]

pub mod approval;
pub mod audit;
pub mod envrules;
pub mod helper;
pub mod identity;
pub mod limits;
pub mod paths;
pub mod plan;
pub mod prepared;
pub mod protocol;
pub mod stdio;
pub mod terminal;
pub mod text;
pub mod throttle;
pub mod trace;
pub mod why;
