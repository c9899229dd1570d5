//! The first bytes of a transparent connection (wardcell-proxy/src/sniff.rs, transparent.rs):
//! the TLS server name or HTTP Host read, then the decision; see
//! `wardcell_proxy::fuzz::first_bytes` for the invariants checked.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    wardcell_proxy::fuzz::first_bytes(data);
});
