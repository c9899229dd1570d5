//! wardcell-host: what the broker (`wardcell-broker`) needs done on the host that decides
//! nothing: the first sandbox's pty (relayed by `wardcell run`'s keeper), the programs a run
//! starts held open (exe.rs), the approval plugin's process, run directories (private, locked, swept), the run id, the signals taken
//! over, and the words of what the broker tells its user.
//!
//! Its promise to an auditor of the broker (docs/AUDITING.md): every function here is
//! handed what to do and returns what happened, typed; none reads the plan's rules,
//! a peer, a chain or an answer to decide with it. What the approval plugin says is
//! parsed in `wardcell_common::approval`, and acted on in the broker. No `unsafe`: a
//! system call this crate needs and nix does not make safe is passed in from the
//! broker's `sys` (the window size, the process watch).

#![deny(unsafe_code)]

pub mod audit;
pub mod entries;
pub mod error;
pub mod exe;
pub mod gitcheck;
#[cfg_attr(target_os = "macos", path = "guard_macos.rs")]
pub mod guard;
pub mod launch;
pub mod listener;
pub mod messages;
pub mod plugin;
pub mod process;
pub mod proxy;
pub mod rundir;
pub mod runid;
pub mod signals;
pub mod terminal;
pub mod wait;

pub use error::BrokerError;
