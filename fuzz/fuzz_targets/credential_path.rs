//! Credential path matching (wardcell-proxy/src/credentials.rs): a pattern and a request
//! path, split at the first NUL byte; the matcher must agree with a plain recursive one
//! and never attach to a path with dot segments or encoded separators.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (pattern, path) = text.split_once('\0').unwrap_or((text, "/"));
    wardcell_proxy::fuzz::credential_path(pattern, path);
});
