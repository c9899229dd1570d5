//! What a sandbox sends on a connection to its proxy (wardcell-proxy/src/front.rs): hyper
//! parses the heads, then the proxy routes each and prepares what would leave; see
//! `wardcell_proxy::fuzz::request_head` for the invariants checked.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    wardcell_proxy::fuzz::request_head(data);
});
