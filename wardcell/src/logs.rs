//! `wardcell logs`: read the runs' audit logs back, and verify their hash chains.

use std::path::PathBuf;

use serde_json::Value;

use wardcell_common::audit::{self, Verdict};
use wardcell_common::paths;

use crate::cli::{Output, ShowOutput};
use crate::context;
use crate::error::Error;
use crate::output;

fn runs_dir() -> Result<PathBuf, Error> {
    let host = context::load_dirs()?;
    Ok(paths::runs_dir(&host))
}

/// Whether run `id`'s broker is still going: it holds a lock on its runtime directory
/// for as long as it lives.
fn is_running(id: &str) -> bool {
    use nix::fcntl::{Flock, FlockArg};
    let Ok(dirs) = context::load_dirs() else {
        return false;
    };
    let Ok(dir) = std::fs::File::open(dirs.runtime.join(id)) else {
        return false;
    };
    matches!(
        Flock::lock(dir, FlockArg::LockSharedNonblock),
        Err((_, nix::errno::Errno::EWOULDBLOCK))
    )
}

/// A run id names a file: only its exact shape is accepted.
pub fn valid_id(id: &str) -> bool {
    let b = id.as_bytes();
    b.len() == 25
        && b[8] == b'T'
        && b[15] == b'Z'
        && b[16] == b'-'
        && b[..8].iter().chain(&b[9..15]).all(u8::is_ascii_digit)
        && b[17..]
            .iter()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
}

fn read_log(id: &str) -> Result<String, Error> {
    if !valid_id(id) {
        return Err(Error::Refused(format!(
            "'{id}' is not a run id (they look like 20261202T093212Z-3f9a1c2b); `wardcell logs list` shows them"
        )));
    }
    let path = runs_dir()?.join(format!("{id}.jsonl"));
    std::fs::read_to_string(&path).map_err(|e| {
        Error::Refused(format!(
            "cannot read the log of run {id} ({}): {e}; `wardcell logs list` shows the runs there are",
            path.display()
        ))
    })
}

fn s(v: &Value, k: &str) -> String {
    match v.get(k) {
        Some(Value::String(x)) => x.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

fn words(v: &Value, k: &str) -> String {
    v.get(k)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|x| {
                    x.as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| x.to_string())
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

/// A value as words: text as it is, arrays joined by spaces, null as `-`.
fn word(v: &Value) -> String {
    match v {
        Value::String(x) => x.clone(),
        Value::Null => "-".into(),
        Value::Array(a) => a.iter().map(word).collect::<Vec<_>>().join(" "),
        Value::Object(o) => o
            .iter()
            .map(|(k, v)| format!("{k} {}", word(v)))
            .collect::<Vec<_>>()
            .join(", "),
        other => other.to_string(),
    }
}

/// How a sandbox or run ended, from `exit_status` (null when it did not run to an exit).
fn exit_words(v: &Value) -> String {
    match v.get("exit_status") {
        Some(Value::Number(n)) => format!("exit status {n}"),
        _ => "no exit status".into(),
    }
}

/// One event as a person reads it: words, never JSON.
fn summary(v: &Value) -> String {
    let w = |k: &str| v.get(k).map(word).unwrap_or_else(|| "-".into());
    match s(v, "event").as_str() {
        "run.started" => format!(
            "zone {}, profile {}: {} (in {}; configuration {})",
            w("zone"),
            w("profile"),
            words(v, "command"),
            w("cwd"),
            w("config")
        ),
        "run.finished" => match v.get("error") {
            Some(Value::String(e)) => format!("{}: {e}", exit_words(v)),
            _ => exit_words(v),
        },
        "audit.decision" => {
            let approval = match v.get("approval") {
                Some(a @ Value::Object(_)) => format!(
                    "; approval: {} by {} ({}), reference {}",
                    if a["approved"] == true {
                        "approved"
                    } else {
                        "denied"
                    },
                    a.get("approver").map(word).unwrap_or_else(|| "-".into()),
                    a.get("reason").map(word).unwrap_or_else(|| "-".into()),
                    a.get("reference").map(word).unwrap_or_else(|| "-".into()),
                ),
                _ => String::new(),
            };
            format!(
                "{} {} -> {}: {} ({}){approval}",
                w("decision"),
                words(v, "chain").replace(' ', " -> "),
                w("target"),
                words(v, "command"),
                w("reason")
            )
        }
        "audit.completed" => format!(
            "{}: {}: {} ({})",
            w("target"),
            words(v, "command"),
            exit_words(v),
            w("ended")
        ),
        "sandbox.confined" => {
            let missing = words(v, "missing");
            format!(
                "sandbox {}{}: Landlock ABI {}{}",
                w("sandbox"),
                v.get("zone")
                    .filter(|z| !z.is_null())
                    .map(|z| format!(" (zone {})", word(z)))
                    .unwrap_or_default(),
                w("landlock_abi"),
                if missing.is_empty() {
                    String::new()
                } else {
                    format!(", missing: {missing}")
                }
            )
        }
        "proxy.connect" => format!(
            "zone {}: {}:{} allowed{}, {} bytes up, {} down",
            w("zone"),
            w("host"),
            w("port"),
            match v.get("credential") {
                Some(Value::String(c)) => format!(" with credential {c}"),
                _ => String::new(),
            },
            w("bytes_up"),
            w("bytes_down")
        ),
        "proxy.denied" => format!(
            "zone {}: {}:{} denied: {}",
            w("zone"),
            w("host"),
            w("port"),
            w("reason")
        ),
        "proxy.died" => format!(
            "zone {}'s proxy died: {}{}",
            w("zone"),
            exit_words(v),
            match v.get("signal") {
                Some(Value::Number(n)) => format!(", signal {n}"),
                _ => String::new(),
            }
        ),
        "sandbox.git_changed" => {
            format!("sandbox {}: git can now run code: {}", w("sandbox"), {
                v.get("paths")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().map(word).collect::<Vec<_>>().join("; "))
                    .unwrap_or_default()
            })
        }
        // Any other event (and any added later): its fields as words.
        _ => {
            let mut rest = v.as_object().cloned().unwrap_or_default();
            for k in ["ts", "run", "category", "event", "seq", "prev"] {
                rest.remove(k);
            }
            rest.iter()
                .map(|(k, v)| format!("{k} {}", word(v)))
                .collect::<Vec<_>>()
                .join(", ")
        }
    }
}

pub fn show(id: &str, category: Option<&str>, format: ShowOutput) -> Result<(), Error> {
    if let Some(c) = category {
        if !audit::CATEGORIES.contains(&c) {
            return Err(Error::Usage(format!(
                "unknown category '{c}': use one of {}",
                audit::CATEGORIES.join(", ")
            )));
        }
    }
    let text = read_log(id)?;
    let mut out = Vec::new();
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if category.is_some_and(|c| s(&v, "category") != c) {
            continue;
        }
        out.push(match format {
            ShowOutput::Json | ShowOutput::Jsonl => line.to_string(),
            // One event, one line: nothing in it can start another.
            ShowOutput::Text => output::shown(&format!(
                "{}  {:<7}  {:<16}  {}",
                s(&v, "ts"),
                s(&v, "category"),
                s(&v, "event"),
                summary(&v)
            ))
            .into_owned(),
        });
    }
    if format == ShowOutput::Json {
        // One document: the events, each as the log has it.
        return output::print(&format!("[{}]", out.join(",")));
    }
    if out.is_empty() {
        return Ok(());
    }
    output::print(&out.join("\n"))
}

pub fn verify(id: &str) -> Result<(), Error> {
    let text = read_log(id)?;
    match audit::verify(&text, id) {
        Verdict::Intact {
            lines,
            finished: true,
            head,
        } => output::print(&format!(
            "ok: run {id}: {lines} events, the chain is intact and the run finished; last event's hash {head}"
        )),
        Verdict::Intact {
            lines,
            finished: false,
            ..
        } if is_running(id) => output::print(&format!(
            "ok: run {id}: {lines} events so far, the chain is intact; the run is still going"
        )),
        Verdict::Intact {
            lines,
            finished: false,
            ..
        } => Err(Error::Refused(format!(
            "run {id}: the log stops after {lines} events without run.finished, and the run is over: its last lines were cut, or its broker was killed; with `[audit] syslog`, syslog holds the finish event to compare"
        ))),
        Verdict::Broken { line, why } => Err(Error::Refused(format!(
            "run {id}: the log has been tampered with or damaged at line {line}: {why}"
        ))),
    }
}

/// Milliseconds since 1970 of an audit timestamp (`2026-12-02T09:32:12.123Z`).
fn millis(ts: &str) -> Option<i64> {
    let b = ts.as_bytes();
    if b.len() != 24 || b[23] != b'Z' {
        return None;
    }
    let n = |r: std::ops::Range<usize>| ts.get(r)?.parse::<i64>().ok();
    let (y, m, d) = (n(0..4)?, n(5..7)?, n(8..10)?);
    let (hh, mm, ss, ms) = (n(11..13)?, n(14..16)?, n(17..19)?, n(20..23)?);
    // Days from civil (the inverse of audit::civil).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some((((days * 24 + hh) * 60 + mm) * 60 + ss) * 1000 + ms)
}

/// One run as `logs list` shows it.
struct Listed {
    id: String,
    start: Option<String>,
    zone: Value,
    command: Value,
    exit: Value,
    finished: bool,
    duration_ms: Option<i64>,
    trial: bool,
}

fn listed(id: &str, text: &str) -> Listed {
    let events: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let started = events.iter().find(|v| s(v, "event") == "run.started");
    let finished = events.iter().find(|v| s(v, "event") == "run.finished");
    let start = started.or(events.first()).map(|v| s(v, "ts"));
    let duration_ms = match (start.as_deref().and_then(millis), finished) {
        (Some(a), Some(f)) => millis(&s(f, "ts")).map(|b| (b - a).max(0)),
        _ => None,
    };
    Listed {
        id: id.to_string(),
        start,
        zone: started.map_or(Value::Null, |v| v["zone"].clone()),
        command: started.map_or(Value::Null, |v| v["command"].clone()),
        exit: finished.map_or(Value::Null, |v| v["exit_status"].clone()),
        finished: finished.is_some(),
        duration_ms,
        trial: started.is_some_and(|v| v["trial"] == true),
    }
}

/// `wardcell logs list`: newest first, at most `limit`; `doctor`'s trial runs only with
/// `all` (marked).
pub fn list(format: Output, limit: Option<usize>, all: bool) -> Result<(), Error> {
    let dir = runs_dir()?;
    let mut ids: Vec<String> = match std::fs::read_dir(&dir) {
        Ok(rd) => rd
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter_map(|n| n.strip_suffix(".jsonl").map(str::to_string))
            .filter(|n| valid_id(n))
            .collect(),
        Err(_) => Vec::new(),
    };
    ids.sort();
    let mut runs: Vec<Listed> = ids
        .iter()
        .map(|id| {
            let text = std::fs::read_to_string(dir.join(format!("{id}.jsonl"))).unwrap_or_default();
            listed(id, &text)
        })
        .filter(|r| all || !r.trial)
        .collect();
    // Newest first: by the first event's time (milliseconds), then the id (whose start
    // is the same time in seconds).
    runs.sort_by_key(|r| std::cmp::Reverse((r.start.as_deref().and_then(millis), r.id.clone())));
    runs.truncate(limit.unwrap_or(usize::MAX));
    match format {
        Output::Json => {
            let json: Vec<Value> = runs
                .iter()
                .map(|r| {
                    serde_json::json!({
                        "run": r.id,
                        "start": r.start,
                        "zone": r.zone,
                        "command": r.command,
                        "exit_status": r.exit,
                        "finished": r.finished,
                        "duration_ms": r.duration_ms,
                        "trial": r.trial,
                    })
                })
                .collect();
            output::print(&Value::Array(json).to_string())
        }
        Output::Text if runs.is_empty() => {
            output::print(&format!("no runs logged in {}", dir.display()))
        }
        Output::Text => {
            let mut rows = vec![vec![
                "RUN".to_string(),
                "START".into(),
                "ZONE".into(),
                "EXIT".into(),
                "DURATION".into(),
                "COMMAND".into(),
            ]];
            for r in &runs {
                let zone = match &r.zone {
                    Value::String(z) => z.clone(),
                    _ => "-".into(),
                };
                rows.push(vec![
                    r.id.clone(),
                    r.start.clone().map_or("-".into(), |t| {
                        // `2026-12-02 09:32:12` (UTC, as the id)
                        t.get(..19).unwrap_or(&t).replacen('T', " ", 1)
                    }),
                    if r.trial {
                        format!("{zone} (doctor)")
                    } else {
                        zone
                    },
                    match (&r.exit, r.finished) {
                        (Value::Number(n), _) => n.to_string(),
                        (_, true) => "error".into(),
                        (_, false) => "running?".into(),
                    },
                    r.duration_ms.map_or("-".into(), |ms| {
                        if ms < 10_000 {
                            format!("{:.1}s", ms as f64 / 1000.0)
                        } else {
                            output::duration((ms / 1000) as u64)
                        }
                    }),
                    word(&r.command),
                ]);
            }
            output::print(&output::table(&rows))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_read_back() {
        for ms in [0, 1_764_751_932_123, 951_782_400_000, 4_107_542_399_999] {
            assert_eq!(millis(&audit::rfc3339(ms)), Some(ms));
        }
        assert_eq!(millis("2026-12-02T09:32:12Z"), None);
    }

    #[test]
    fn every_event_reads_as_words() {
        for line in [
            r#"{"event":"run.finished","exit_status":null,"error":"the shim died"}"#,
            r#"{"event":"audit.completed","target":"push","command":["git","push"],"exit_status":null,"ended":"not started: x"}"#,
            r#"{"event":"proxy.connect","zone":"push","host":"h","port":443,"credential":"git","bytes_up":1,"bytes_down":2}"#,
            r#"{"event":"something.new","a":{"b":[1,"c"]},"d":null}"#,
        ] {
            let got = summary(&serde_json::from_str(line).unwrap());
            assert!(!got.contains(['{', '"']), "{got}");
            assert!(
                !got.contains("exit status ,") && !got.ends_with("exit status "),
                "{got}"
            );
        }
        let v = serde_json::from_str(
            r#"{"event":"run.finished","exit_status":null,"error":"the shim died"}"#,
        )
        .unwrap();
        assert_eq!(summary(&v), "no exit status: the shim died");
    }
}
