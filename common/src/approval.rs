//! The approval plugin's answer (channel E in docs/PROTOCOL.md): one JSON object,
//! `{"approved": bool, "reason": "...", "approver": "...", "reference": "..."}`. The
//! broker runs the plugin (wardcell-broker/src/approval.rs); the answer is parsed here, in
//! a pure function that unit tests and the fuzzer call directly.

use serde_json::Value;

/// The most of the plugin's stdout that is read.
pub const MAX_ANSWER: usize = 64 * 1024;

/// Longest `reason`, `approver` or `reference` kept, in characters.
pub const MAX_TEXT: usize = 500;

/// What the plugin said, or why there is no usable answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub approved: bool,
    pub reason: String,
    pub approver: Option<String>,
    pub reference: Option<String>,
}

impl Answer {
    /// A refusal that did not come from the plugin's answer.
    pub fn refusal(reason: impl Into<String>) -> Answer {
        Answer {
            approved: false,
            reason: reason.into(),
            approver: None,
            reference: None,
        }
    }

    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "approved": self.approved,
            "reason": self.reason,
            "approver": self.approver,
            "reference": self.reference,
        })
    }
}

/// Parse the plugin's whole stdout. Text fields lose their control characters and are
/// cut at [`MAX_TEXT`] characters, so that they cannot forge lines in a message or a log.
pub fn parse_answer(out: &[u8]) -> Answer {
    let v: Value = match serde_json::from_slice(out) {
        Ok(v) => v,
        Err(_) => return Answer::refusal("the approval plugin's answer is not one JSON object"),
    };
    let Some(approved) = v.get("approved").and_then(Value::as_bool) else {
        return Answer::refusal("the approval plugin's answer has no boolean \"approved\"");
    };
    let text = |k: &str| {
        v.get(k).and_then(Value::as_str).map(|s| {
            s.chars()
                .filter(|c| !c.is_control())
                .take(MAX_TEXT)
                .collect::<String>()
        })
    };
    Answer {
        approved,
        reason: text("reason").unwrap_or_else(|| {
            if approved {
                "approved"
            } else {
                "no reason given"
            }
            .to_string()
        }),
        approver: text("approver"),
        reference: text("reference"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers() {
        let a = parse_answer(br#"{"approved": true, "approver": "ana", "reference": "T-1"}"#);
        assert!(a.approved);
        assert_eq!(a.approver.as_deref(), Some("ana"));
        let a = parse_answer(br#"{"approved": false, "reason": "not during the release freeze"}"#);
        assert!(!a.approved);
        assert_eq!(a.reason, "not during the release freeze");
        for bad in [
            &b"nope"[..],
            b"{}",
            br#"{"approved": "yes"}"#,
            b"",
            b"[true]",
        ] {
            assert!(!parse_answer(bad).approved, "{bad:?}");
        }
        // Two objects are not one answer.
        assert!(!parse_answer(br#"{"approved": true} {"approved": true}"#).approved);
        // Control characters cannot forge extra lines in messages or logs.
        let a = parse_answer(br#"{"approved": false, "reason": "a\nerror: b\u001b[2J"}"#);
        assert_eq!(a.reason, "aerror: b[2J");
        let long = format!(r#"{{"approved": false, "reason": "{}"}}"#, "é".repeat(900));
        assert_eq!(
            parse_answer(long.as_bytes()).reason.chars().count(),
            MAX_TEXT
        );
    }
}
