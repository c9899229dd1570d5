//! A git configuration file as a sandbox could leave it in the run's repository
//! (git/src/config.rs), read by the repository's watcher: parsed within its bounds, and
//! each entry judged harmless or not. Errors are fine; panics, hangs and entries past
//! the bound are not.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wardcell_git::config::{harmless_entry, Parsed, MAX_ENTRIES};

fuzz_target!(|data: &[u8]| {
    if let Parsed::Entries(entries) = Parsed::of(data) {
        let held: usize = entries
            .iter()
            .map(|e| e.key.len() + e.value.as_ref().map_or(0, Vec::len))
            .sum();
        assert!(held <= MAX_ENTRIES);
        for e in &entries {
            // A key before any section has none, as git reads it (and is never harmless).
            assert!(!e.key.is_empty(), "{:?}", e.key);
            if !e.key.contains('.') {
                assert!(!harmless_entry(&e.key, e.value.as_deref()), "{:?}", e.key);
            }
            let _ = harmless_entry(&e.key, e.value.as_deref());
        }
    }
});
