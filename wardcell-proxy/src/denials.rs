//! What this proxy refused lately, for the sandbox it serves to read: `wardcell zone
//! denials` asks the proxy's own listener for `http://wardcell.invalid/denials` and
//! gets the last [`REMEMBERED`] refusals and how many there were in all. The name is
//! under `.invalid`, which never resolves (RFC 6761), and is answered by the proxy
//! itself before any allow list or lookup: it never leaves the proxy.
//!
//! Everything here is what the sandbox caused and may know: the host and port it asked
//! for and why they were refused (the same words as the 403 and the audit event).
//! Credentials never appear in a refusal.

#![forbid(unsafe_code)]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use serde::Serialize;

/// The host whose `/denials` the proxy answers itself.
pub const HOST: &str = "wardcell.invalid";
/// Refusals kept, newest last.
pub const REMEMBERED: usize = 64;
/// A reason is kept to this many bytes (refusals name a host and a rule; the rest is
/// cut at a character boundary).
const REASON_MAX: usize = 512;

#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
pub struct Denial {
    /// Milliseconds since the epoch.
    pub at_ms: i64,
    pub host: String,
    pub port: u16,
    pub reason: String,
}

#[derive(Serialize, Default, Debug)]
struct Recent {
    /// Every refusal since the proxy started, those held back from the audit log by its
    /// rate included.
    total: u64,
    recent: VecDeque<Denial>,
}

/// Shared by every connection; cheap to clone.
#[derive(Clone, Default)]
pub struct Denials(Arc<Mutex<Recent>>);

impl Denials {
    pub fn record(&self, host: &str, port: u16, reason: &str) {
        let mut cut = reason.len().min(REASON_MAX);
        while !reason.is_char_boundary(cut) {
            cut -= 1;
        }
        let at_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let mut r = self.0.lock().unwrap_or_else(|p| p.into_inner());
        r.total += 1;
        if r.recent.len() == REMEMBERED {
            r.recent.pop_front();
        }
        r.recent.push_back(Denial {
            at_ms,
            host: host.chars().take(255).collect(),
            port,
            reason: reason[..cut].to_string(),
        });
    }

    /// `{"total": N, "recent": [{"at_ms", "host", "port", "reason"}, ...]}`.
    pub fn json(&self) -> String {
        let r = self.0.lock().unwrap_or_else(|p| p.into_inner());
        serde_json::to_string(&*r).unwrap_or_else(|_| "{}".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_newest_and_counts_all() {
        let d = Denials::default();
        for i in 0..(REMEMBERED as u16 + 10) {
            d.record("a.example", i, "not in the allow list");
        }
        d.record("b.example", 1, &"é".repeat(600));
        let v: serde_json::Value = serde_json::from_str(&d.json()).unwrap();
        assert_eq!(v["total"], REMEMBERED as u64 + 11);
        let recent = v["recent"].as_array().unwrap();
        assert_eq!(recent.len(), REMEMBERED);
        assert_eq!(recent[0]["port"], 11);
        let last = recent.last().unwrap();
        assert_eq!(last["host"], "b.example");
        assert!(last["reason"].as_str().unwrap().len() <= REASON_MAX);
    }
}
