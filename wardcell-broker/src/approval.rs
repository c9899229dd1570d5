//! Asking the machine's approval plugin about one zone entry.
//!
//! The plugin runs outside any sandbox with one JSON object on stdin and answers with one
//! JSON object on stdout: `{"approved": bool, "reason": "...", "approver": "...",
//! "reference": "..."}`. No plugin, a crash, bad JSON, or the zone's timeout is a refusal
//! whose reason says which. Its answer is read up to [`MAX_ANSWER`] bytes.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

/// The most of the plugin's stdout that is read.
pub const MAX_ANSWER: u64 = 64 * 1024;

/// What the plugin said, or why there is no usable answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub approved: bool,
    pub reason: String,
    pub approver: Option<String>,
    pub reference: Option<String>,
}

impl Answer {
    fn refusal(reason: impl Into<String>) -> Answer {
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

/// Parse the plugin's answer. Pure: unit tests call it directly.
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
                .take(500)
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

/// Ask `plugin` about `request`, waiting at most `timeout` (None: as long as it takes).
pub fn ask(plugin: Option<&[String]>, request: &Value, timeout: Option<Duration>) -> Answer {
    let Some((prog, args)) = plugin.and_then(|p| p.split_first()) else {
        return Answer::refusal(
            "no approval plugin is configured ([approval] plugin in zones.toml)",
        );
    };
    let mut child = match Command::new(prog)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => return Answer::refusal(format!("the approval plugin could not be started: {e}")),
    };
    let mut stdin = child.stdin.take().expect("piped");
    let mut stdout = child.stdout.take().expect("piped");
    let input = format!("{request}\n");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        // A plugin that does not read its stdin must not block us: write from here.
        let _ = stdin.write_all(input.as_bytes());
        drop(stdin);
        let mut out = Vec::new();
        let r = (&mut stdout).take(MAX_ANSWER).read_to_end(&mut out);
        let _ = tx.send(r.map(|_| out));
    });
    let got = match timeout {
        Some(t) => rx.recv_timeout(t).map_err(|_| ()),
        None => rx.recv().map_err(|_| ()),
    };
    let out = match got {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => {
            let _ = child.kill();
            let _ = child.wait();
            return Answer::refusal(format!("reading the approval plugin's answer failed: {e}"));
        }
        Err(()) => {
            let _ = child.kill();
            let _ = child.wait();
            return Answer::refusal(
                "the approval plugin did not answer within the zone's approval_timeout",
            );
        }
    };
    match child.wait() {
        Ok(status) if status.success() => parse_answer(&out),
        Ok(status) => Answer::refusal(format!("the approval plugin failed ({status})")),
        Err(e) => Answer::refusal(format!("the approval plugin failed: {e}")),
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
        for bad in [&b"nope"[..], b"{}", br#"{"approved": "yes"}"#, b""] {
            assert!(!parse_answer(bad).approved, "{bad:?}");
        }
        // Control characters cannot forge extra lines in messages or logs.
        let a = parse_answer(br#"{"approved": false, "reason": "a\nerror: b"}"#);
        assert_eq!(a.reason, "aerror: b");
    }

    #[test]
    fn a_real_plugin_process() {
        let sh = |script: &str| vec!["/bin/sh".to_string(), "-c".to_string(), script.to_string()];
        let req = serde_json::json!({"target": "push"});
        let a = ask(
            Some(&sh(
                r#"read l; echo '{"approved": true, "approver": "me"}'"#,
            )),
            &req,
            None,
        );
        assert!(a.approved, "{a:?}");
        let a = ask(Some(&sh("exit 3")), &req, None);
        assert!(!a.approved && a.reason.contains("failed"), "{a:?}");
        let a = ask(Some(&sh("sleep 5")), &req, Some(Duration::from_millis(200)));
        assert!(
            !a.approved && a.reason.contains("approval_timeout"),
            "{a:?}"
        );
        let a = ask(None, &req, None);
        assert!(a.reason.contains("no approval plugin"), "{a:?}");
        let a = ask(Some(&["/nonexistent/plugin".to_string()]), &req, None);
        assert!(a.reason.contains("could not be started"), "{a:?}");
    }
}
