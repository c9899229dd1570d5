//! The audit log's format: one JSON object per line, chained by hashes.
//!
//! Every line has `ts`, `run`, `category` (`run`, `audit`, `proxy`, `sandbox`), `event`,
//! `seq` (0, 1, 2, ...) and `prev`: the SHA-256 (hex) of the previous line's bytes, or
//! [`GENESIS`] for the first. Editing, removing or reordering a line breaks the chain;
//! a log without `run.finished` is reported as unfinished (the run may still be going,
//! or was killed, or its tail was cut). `run.finished` also carries `events` (how many
//! events precede it) and `head` (the hash of the last of them), so that its copy in
//! syslog alone pins down the whole log. A log is never empty: its first event is
//! `run.started`.
//!
//! The run's audit writer (the run's helper, `wardcell-shim --helper`: the shim's auditlog.rs) writes;
//! `wardcell logs` reads and verifies the chain (`wardcell/src/chain.rs`). Both take the
//! format from this module.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

pub use wardcell_common::audit::civil;

/// `[audit] max_log_kib` when unset: 64 MiB.
pub const DEFAULT_MAX_LOG_KIB: u64 = 64 * 1024;
/// The smallest `[audit] max_log_kib` accepted.
pub const MIN_MAX_LOG_KIB: u64 = 128;
/// The most bytes of JSON text one field of an event keeps (the writer cuts the rest).
pub const FIELD_CAP: usize = 4096;

/// `prev` of the first line.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// Hex SHA-256 of a line (without its newline).
pub fn hash_line(line: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digest = Sha256::digest(line.as_bytes());
    let mut out = String::with_capacity(2 * digest.len());
    for b in digest {
        out.push(HEX[usize::from(b >> 4)] as char);
        out.push(HEX[usize::from(b & 0xf)] as char);
    }
    out
}

/// RFC 3339 UTC with milliseconds, e.g. `2026-12-02T09:32:12.123Z`.
pub fn rfc3339(millis: i64) -> String {
    let secs = millis.div_euclid(1000);
    let (y, m, d) = civil(secs.div_euclid(86_400));
    let s = secs.rem_euclid(86_400);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        s / 3600,
        s / 60 % 60,
        s % 60,
        millis.rem_euclid(1000)
    )
}

pub fn now_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Build one line: the common fields first, then `fields` (an object), then the chain.
pub fn encode_line(
    millis: i64,
    run: &str,
    category: &str,
    event: &str,
    fields: Value,
    seq: u64,
    prev: &str,
) -> String {
    let mut obj = Map::new();
    obj.insert("ts".into(), Value::String(rfc3339(millis)));
    obj.insert("run".into(), Value::String(run.into()));
    obj.insert("category".into(), Value::String(category.into()));
    obj.insert("event".into(), Value::String(event.into()));
    if let Value::Object(extra) = fields {
        for (k, v) in extra {
            // The common fields cannot be overridden by an event's own.
            if !obj.contains_key(&k) && !["seq", "prev", "events", "head"].contains(&k.as_str()) {
                obj.insert(k, v);
            }
        }
    }
    if event == "run.finished" {
        obj.insert("events".into(), Value::from(seq));
        obj.insert("head".into(), Value::String(prev.into()));
    }
    obj.insert("seq".into(), Value::from(seq));
    obj.insert("prev".into(), Value::String(prev.into()));
    Value::Object(obj).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_known_vector() {
        assert_eq!(
            hash_line("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn timestamps() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_796_203_932_123), "2026-12-02T09:32:12.123Z");
    }
}
