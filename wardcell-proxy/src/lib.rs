//! wardcell-proxy's modules. The binary (src/main.rs) is the proxy; the library exists so
//! that the fuzz targets (fuzz/, see docs/DEVELOPING.md) reach the parsers through [`fuzz`].

// sys.rs alone holds `unsafe`; every other module also forbids it on its own.
#![deny(unsafe_code)]

pub mod allow;
pub mod answer;
pub mod ca;
pub mod confine;
pub mod control;
pub mod credentials;
pub mod ctx;
pub mod denials;
pub mod dns;
pub mod error;
pub mod forward;
pub mod front;
#[doc(hidden)]
pub mod fuzz;
pub mod intercept;
pub mod names;
pub mod nameserver;
pub mod seccomp;
pub mod sniff;
#[allow(unsafe_code)]
pub mod sys;
pub mod transparent;
pub mod tunnel;
