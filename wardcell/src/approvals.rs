//! `wardcell approvals` (host only): the person's side of the reference approval plugin.
//! The queue and its checks are `wardcell_approve` (wardcell-approve/src/lib.rs); this
//! module lists, shows, answers and watches. Everything in a request came, in part, from
//! a sandbox: text output passes it through `output::shown` (tables do it themselves).

use std::collections::BTreeSet;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Value};
use wardcell_approve::{self as queue, Request};

use crate::cli::Output;
use crate::context;
use crate::error::Error;
use crate::output::{self, shown};

/// How often `watch` looks at the queue.
const WATCH_EVERY: Duration = Duration::from_millis(300);

fn queue_dir() -> Result<PathBuf, Error> {
    let dirs = context::load_dirs()?;
    queue::open_dir(&dirs.state, true).map_err(Error::Approvals)
}

/// `12s`, `5m`, `3h`, `2d`.
fn span(secs: u64) -> String {
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

fn text(v: &Value) -> String {
    v.as_str().unwrap_or("-").to_string()
}

fn chain(v: &Value) -> String {
    v.as_array()
        .map(|a| a.iter().map(text).collect::<Vec<_>>().join(" > "))
        .unwrap_or_default()
}

fn left(r: &Request, now: u64) -> Option<u64> {
    r.deadline().map(|d| d.saturating_sub(now))
}

fn json_of(r: &Request, now: u64) -> Value {
    json!({
        "id": r.id,
        "age_secs": now.saturating_sub(r.queued()),
        "run": r.field("run"),
        "calling_zone": r.field("calling_zone"),
        "chain": r.field("chain"),
        "target": r.field("target"),
        "command": r.field("command"),
        "executable": r.field("executable"),
        "executable_writable_by": r.field("executable_writable_by"),
        "env_changes": r.field("env_changes"),
        "cwd": r.field("cwd"),
        "time_left_secs": left(r, now),
        "waiting": r.waiting,
    })
}

fn row(r: &Request, now: u64) -> Vec<String> {
    vec![
        r.id.clone(),
        span(now.saturating_sub(r.queued())),
        text(r.field("run")),
        text(r.field("calling_zone")),
        chain(r.field("chain")),
        text(r.field("target")),
        queue::command_line(r.field("command")),
        text(r.field("cwd")),
        left(r, now).map_or("-".to_string(), span),
    ]
}

const HEADER: [&str; 9] = [
    "ID", "AGE", "RUN", "FROM", "CHAIN", "TARGET", "COMMAND", "CWD", "LEFT",
];

/// The requests in queue `q` whose plugin still waits for an answer, newest first.
fn waiting(q: &std::path::Path) -> Result<Vec<Request>, Error> {
    Ok(queue::list(q)
        .map_err(Error::Approvals)?
        .into_iter()
        .filter(|r| r.waiting)
        .collect())
}

/// The requests still waiting, newest first.
pub fn list(format: Output) -> Result<(), Error> {
    let q = queue_dir()?;
    let now = queue::now();
    let waiting = waiting(&q)?;
    match format {
        Output::Json => {
            let all: Vec<Value> = waiting.iter().map(|r| json_of(r, now)).collect();
            output::print(&serde_json::json!({ "requests": all }).to_string())
        }
        Output::Text if waiting.is_empty() => output::print("no approval request is waiting"),
        Output::Text => {
            let mut rows = vec![HEADER.iter().map(|s| s.to_string()).collect()];
            rows.extend(waiting.iter().map(|r| row(r, now)));
            output::print(&output::table(&rows))
        }
    }
}

fn names(v: &Value) -> String {
    match v.as_array() {
        Some(a) if !a.is_empty() => a.iter().map(text).collect::<Vec<_>>().join(", "),
        _ => "nothing".to_string(),
    }
}

/// One request whole, with what the entry would add over the calling zone.
pub fn show(id: &str, format: Output) -> Result<(), Error> {
    let q = queue_dir()?;
    let r = queue::read(&q, id).map_err(Error::Approvals)?;
    let now = queue::now();
    if format == Output::Json {
        let mut v = json_of(&r, now);
        v["log"] = r.field("log").clone();
        v["user"] = r.field("user").clone();
        v["adds"] = r.field("adds").clone();
        return output::print(&v.to_string());
    }
    let adds = r.field("adds");
    let creds = match adds["credentials"].as_array() {
        Some(a) if !a.is_empty() => a
            .iter()
            .map(|c| {
                let hosts: Vec<String> = c["hosts"]
                    .as_array()
                    .map(|h| h.iter().map(text).collect())
                    .unwrap_or_default();
                format!("{} ({})", text(&c["name"]), hosts.join(", "))
            })
            .collect::<Vec<_>>()
            .join(", "),
        _ => "nothing".to_string(),
    };
    let state = if r.waiting {
        "waiting".to_string()
    } else {
        "no longer waiting (its caller went away, its time ran out or its run ended)".to_string()
    };
    let lines: Vec<(&str, String)> = vec![
        ("request", r.id.clone()),
        ("state", state),
        ("age", span(now.saturating_sub(r.queued()))),
        (
            "time left",
            left(&r, now).map_or("no limit".to_string(), span),
        ),
        ("run", text(r.field("run"))),
        ("log", text(r.field("log"))),
        ("user", r.field("user").to_string()),
        ("calling zone", text(r.field("calling_zone"))),
        ("chain", chain(r.field("chain"))),
        ("target", text(r.field("target"))),
        ("command", queue::command_line(r.field("command"))),
        ("executable", text(r.field("executable"))),
        ("written by zones", names(r.field("executable_writable_by"))),
        ("caller changed", names(r.field("env_changes"))),
        ("cwd", text(r.field("cwd"))),
        ("adds: write", names(&adds["write"])),
        ("adds: network", names(&adds["hosts"])),
        ("adds: credentials", creds),
        ("adds: unix sockets", names(&adds["unix_sockets"])),
    ];
    let rows: Vec<Vec<String>> = lines
        .into_iter()
        .map(|(k, v)| vec![format!("{k}:"), v])
        .collect();
    output::print(&output::table(&rows))
}

/// Who answers: the user `sudo` ran as, or this user.
fn approver() -> String {
    if let Some(u) = std::env::var("SUDO_USER")
        .ok()
        .filter(|u| !u.is_empty() && !u.chars().any(char::is_control))
    {
        return u;
    }
    let uid = nix::unistd::getuid();
    match nix::unistd::User::from_uid(uid) {
        Ok(Some(u)) => u.name,
        _ => std::env::var("USER").unwrap_or_else(|_| uid.to_string()),
    }
}

/// Approve or deny `id`; the answer is recorded even when nobody waits for it any more.
pub fn answer(id: &str, approved: bool, reason: &str) -> Result<(), Error> {
    let q = queue_dir()?;
    let r = queue::read(&q, id).map_err(Error::Approvals)?;
    let who = approver();
    queue::answer(&q, id, approved, reason, &who).map_err(Error::Approvals)?;
    let verb = if approved { "approved" } else { "denied" };
    queue::syslog(
        "wardcell-approvals",
        &format!("approval request {id} {verb} by {who}: {reason}"),
    );
    // Whether it was waiting when answered: the plugin may have been ended meanwhile.
    if !r.waiting || !queue::waiting(&q, id) {
        return Err(Error::Approvals(format!(
            "request {id} is no longer waiting (its caller went away, its time ran out or its run ended): your answer is recorded, but nothing will start; the run's audit log says how the entry ended"
        )));
    }
    output::print(&format!(
        "{verb} request {id}: zone '{}' for run {}",
        shown(&text(r.field("target"))),
        shown(&text(r.field("run")))
    ))
}

/// Print each request as it arrives, one line each, until interrupted.
pub fn watch() -> Result<(), Error> {
    let q = queue_dir()?;
    wardcell_common::eprintln_line!(
        "waiting for approval requests in {} (Ctrl-C to stop)",
        shown(&q.display().to_string())
    );
    let mut seen: BTreeSet<String> = BTreeSet::new();
    loop {
        let now = queue::now();
        let waiting = waiting(&q)?;
        let mut out = std::io::stdout().lock();
        for r in waiting.iter().rev().filter(|r| !seen.contains(&r.id)) {
            let line = format!(
                "{}  {} > {}  {}  in {}  (run {}, {} left)  `wardcell approvals show {}`",
                r.id,
                text(r.field("calling_zone")),
                text(r.field("target")),
                queue::command_line(r.field("command")),
                text(r.field("cwd")),
                text(r.field("run")),
                left(r, now).map_or("no limit".to_string(), span),
                r.id,
            );
            writeln!(out, "{}", shown(&line))
                .and_then(|()| out.flush())
                .map_err(Error::Stdout)?;
        }
        // Only ids still waiting are remembered: the set stays as small as the queue.
        seen = waiting.into_iter().map(|r| r.id).collect();
        drop(out);
        std::thread::sleep(WATCH_EVERY);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans() {
        assert_eq!(span(5), "5s");
        assert_eq!(span(600), "10m");
        assert_eq!(span(3 * 3600), "3h");
        assert_eq!(span(3 * 86_400), "3d");
    }
}
