//! zones.toml as a user (or a file someone else wrote) could hand it over
//! (config/src/config.rs): parsing and validation, then every zone's profile with
//! `extends` applied. Errors are fine; panics and hangs are not.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wardcell_config::config;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match config::parse(text, "fuzz.toml") {
        Ok(c) => {
            for z in &c.zones {
                assert!(c.effective_profile(&z.profile).is_some(), "{}", z.profile);
            }
            let _ = c.default_zone();
        }
        Err(e) => {
            let message = e.to_string();
            assert!(!message.contains('\n'), "{message:?}");
        }
    }
});
