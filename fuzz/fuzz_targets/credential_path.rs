//! Credential path matching (wardcell-proxy/src/credentials.rs): a pattern and a request
//! path, split at the first NUL byte; the matcher must agree with a plain recursive one on
//! the normalised path, and the normaliser must keep its invariants (fuzz.rs says which):
//! never a dot segment, `;`, backslash, repeated slash or encoded separator admitted.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (pattern, path) = text.split_once('\0').unwrap_or((text, "/"));
    wardcell_proxy::fuzz::credential_path(pattern, path);
});
