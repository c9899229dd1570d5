//! A packet a sandbox sends its DNS (wardcell-proxy/src/nameserver.rs): parsed and answered;
//! see `wardcell_proxy::fuzz::dns_query` for the invariants checked.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    wardcell_proxy::fuzz::dns_query(data);
});
