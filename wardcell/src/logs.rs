//! `wardcell logs`: read the runs' audit logs back, and verify their hash chains.

use std::path::PathBuf;

use serde_json::Value;

use wardcell_common::audit::{self, Verdict};
use wardcell_common::paths;

use crate::cli::Output;
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
fn valid_id(id: &str) -> bool {
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

/// One event as a person reads it.
fn summary(v: &Value) -> String {
    match s(v, "event").as_str() {
        "run.started" => format!(
            "zone {}: {} (in {})",
            s(v, "zone"),
            words(v, "command"),
            s(v, "cwd")
        ),
        "run.finished" => format!("exit status {}", s(v, "exit_status")),
        "audit.decision" => format!(
            "{} {} -> {}: {} ({})",
            s(v, "decision"),
            words(v, "chain").replace(' ', " -> "),
            s(v, "target"),
            words(v, "command"),
            s(v, "reason")
        ),
        "audit.completed" => format!(
            "{}: {}: exit status {} ({})",
            s(v, "target"),
            words(v, "command"),
            s(v, "exit_status"),
            s(v, "ended")
        ),
        _ => {
            let mut rest = v.clone();
            if let Some(o) = rest.as_object_mut() {
                for k in ["ts", "run", "category", "event", "seq", "prev"] {
                    o.remove(k);
                }
            }
            rest.to_string()
        }
    }
}

pub fn show(id: &str, category: Option<&str>, format: Output) -> Result<(), Error> {
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
            Output::Json => line.to_string(),
            // One event, one line: nothing in it can start another.
            Output::Text => output::shown(&format!(
                "{}  {:<7}  {:<16}  {}",
                s(&v, "ts"),
                s(&v, "category"),
                s(&v, "event"),
                summary(&v)
            ))
            .into_owned(),
        });
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

pub fn list(format: Output) -> Result<(), Error> {
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
    let mut rows = vec![vec![
        "RUN".to_string(),
        "ZONE".into(),
        "EXIT".into(),
        "COMMAND".into(),
    ]];
    let mut json = Vec::new();
    for id in &ids {
        let text = std::fs::read_to_string(dir.join(format!("{id}.jsonl"))).unwrap_or_default();
        let events: Vec<Value> = text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        let started = events.iter().find(|v| s(v, "event") == "run.started");
        let finished = events.iter().find(|v| s(v, "event") == "run.finished");
        let zone = started.map(|v| s(v, "zone")).unwrap_or_default();
        let command = started.map(|v| words(v, "command")).unwrap_or_default();
        let exit = finished.map(|v| s(v, "exit_status"));
        json.push(
            serde_json::json!({"run": id, "zone": zone, "command": command, "exit_status": exit}),
        );
        rows.push(vec![
            id.clone(),
            if zone.is_empty() { "-".into() } else { zone },
            exit.unwrap_or_else(|| "-".into()),
            command,
        ]);
    }
    match format {
        Output::Json => output::print(&Value::Array(json).to_string()),
        Output::Text if ids.is_empty() => {
            output::print(&format!("no runs logged in {}", dir.display()))
        }
        Output::Text => output::print(&output::table(&rows)),
    }
}
