//! The approval plugin's stdout (common/src/approval.rs): whatever it prints, the answer's
//! text is one line of at most 500 characters, and only a boolean `approved` approves.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wardcell_common::approval::{parse_answer, MAX_TEXT};

fuzz_target!(|data: &[u8]| {
    let a = parse_answer(data);
    for text in [Some(&a.reason), a.approver.as_ref(), a.reference.as_ref()]
        .into_iter()
        .flatten()
    {
        assert!(!text.chars().any(char::is_control), "{text:?}");
        assert!(text.chars().count() <= MAX_TEXT);
    }
    if a.approved {
        let v: serde_json::Value = serde_json::from_slice(data).expect("approved from JSON");
        assert_eq!(v["approved"], serde_json::Value::Bool(true));
    }
});
