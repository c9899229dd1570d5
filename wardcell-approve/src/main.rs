//! wardcell-approve: the reference approval plugin. It queues each zone entry for a person
//! on the host, who answers with `wardcell approvals approve|deny ID`.
//!
//! The broker runs it outside every sandbox (docs/PROTOCOL.md, section 7): the request on
//! stdin, the answer on stdout, killed with its process group when the caller goes away,
//! the zone's `approval_timeout` passes or the run ends. The queue is described in
//! `lib.rs`. Whatever goes wrong is answered as a refusal that says what, so the reason
//! reaches the person who ran `zone enter`.
#![forbid(unsafe_code)]

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use wardcell_approve as queue;
use wardcell_common::approval::Answer;
use wardcell_support::paths;

/// How often the answer is looked for.
const POLL: Duration = Duration::from_millis(100);

/// Requests nobody waits for any more are removed after this long (seconds).
const KEEP_STALE: u64 = 24 * 3600;

const USAGE: &str = "usage: wardcell-approve [--queue]: run by wardcell's broker as [approval] plugin, with one request on stdin";

fn main() -> ExitCode {
    // 1. Arguments: `--queue` (the one mode, also the default) or `--version`.
    for a in std::env::args().skip(1) {
        match a.as_str() {
            "--queue" => {}
            "--version" => {
                println!("wardcell-approve {}", env!("CARGO_PKG_VERSION"));
                return ExitCode::SUCCESS;
            }
            _ => {
                wardcell_common::eprintln_line!("error: unknown argument {a:?}; {USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    // Tracing, when the broker traces (it sets WARDCELL_LOG for us).
    if let Some(level) = wardcell_common::trace::from_env() {
        wardcell_common::trace::install("wardcell-approve", level);
    }
    let answer = match ask() {
        Ok(a) => a,
        Err(why) => {
            queue::syslog("wardcell-approve", &format!("refused: {why}"));
            Answer::refusal(format!("wardcell-approve: {why}"))
        }
    };
    // 7. The answer, for the broker.
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{}", answer.to_json()).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(_) => ExitCode::FAILURE,
    }
}

fn ask() -> Result<Answer, String> {
    // 2. The request: one JSON object, bounded.
    let mut raw = Vec::new();
    std::io::stdin()
        .take(queue::MAX_REQUEST + 1)
        .read_to_end(&mut raw)
        .map_err(|e| format!("cannot read the request: {e}"))?;
    if raw.len() as u64 > queue::MAX_REQUEST {
        return Err(format!(
            "the request is longer than {} KiB",
            queue::MAX_REQUEST / 1024
        ));
    }
    let request: Value = serde_json::from_slice(&raw)
        .ok()
        .filter(Value::is_object)
        .ok_or("the request on stdin is not one JSON object")?;
    let timeout = request["timeout_secs"].as_u64();
    if let Some(run) = request["run"].as_str() {
        wardcell_common::trace::set_run(run);
    }
    tracing::debug!(target_zone = request["target"].as_str(), "request read");

    // 3. The queue, in wardcell's state directory (masked in every sandbox).
    let q = queue::open_dir(&state_dir()?, true)?;
    queue::sweep(&q, KEEP_STALE);

    // 4. Queued, and locked while we wait.
    let queued_at = queue::now();
    let started = Instant::now();
    let record = json!({
        "queued": queued_at,
        "deadline": timeout.map(|t| queued_at.saturating_add(t)),
        "request": request,
    });
    let queued = queue::enqueue(&q, record)?;
    let id = queued.id.clone();
    tracing::debug!(id = %id, "queued; waiting for a person's answer");

    // 5. Tell the person: always a syslog line, a desktop notification where there is a
    //    session bus (never waited for; its absence changes nothing).
    let what = format!(
        "run {} asks to enter zone '{}' from '{}': {}",
        request["run"].as_str().unwrap_or("?"),
        request["target"].as_str().unwrap_or("?"),
        request["calling_zone"].as_str().unwrap_or("?"),
        queue::command_line(&request["command"]),
    );
    queue::syslog(
        "wardcell-approve",
        &format!("approval request {id}: {what}; `wardcell approvals show {id}`"),
    );
    if std::env::var_os("DBUS_SESSION_BUS_ADDRESS").is_some_and(|v| !v.is_empty()) {
        let _ = Command::new("notify-send")
            .args([
                "--app-name=wardcell",
                &format!("wardcell: approval request {id}"),
                &format!(
                    "{}\nwardcell approvals show {id}",
                    wardcell_common::text::shown(&what)
                ),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
    }

    // 6. Wait for the answer, or until just before the broker's own timeout (so that the
    //    request is removed and the reason says which request it was).
    let limit = timeout.map(|t| {
        let t = Duration::from_secs(t);
        t.saturating_sub((t / 2).min(Duration::from_millis(500)))
    });
    loop {
        if let Some(a) = queue::read_answer(&q, &id) {
            queued.finish();
            let answer = Answer {
                reference: Some(id.clone()),
                ..a
            };
            tracing::debug!(id = %id, approved = answer.approved, "answered");
            queue::syslog(
                "wardcell-approve",
                &format!(
                    "approval request {id} {} by {}: {}",
                    if answer.approved {
                        "approved"
                    } else {
                        "denied"
                    },
                    answer.approver.as_deref().unwrap_or("?"),
                    answer.reason
                ),
            );
            return Ok(answer);
        }
        if limit.is_some_and(|l| started.elapsed() >= l) {
            queued.finish();
            let reason = format!(
                "no one answered approval request {id} within the zone's approval_timeout ({} s)",
                timeout.unwrap_or(0)
            );
            queue::syslog("wardcell-approve", &reason);
            return Ok(Answer {
                reference: Some(id),
                ..Answer::refusal(reason)
            });
        }
        std::thread::sleep(POLL);
    }
}

/// wardcell's state directory, as `wardcell approvals` finds it: from `XDG_STATE_HOME` or
/// the home directory (the broker passes both on from the environment `run` started in).
fn state_dir() -> Result<PathBuf, String> {
    let uid = nix::unistd::geteuid();
    let home = match std::env::var("HOME") {
        Ok(h) if h.starts_with('/') => PathBuf::from(h),
        _ => nix::unistd::User::from_uid(uid)
            .ok()
            .flatten()
            .map(|u| u.dir)
            .filter(|d| d.is_absolute())
            .ok_or("cannot find the home directory (HOME is not set)")?,
    };
    Ok(paths::dirs(&|k| std::env::var(k).ok(), &home, uid.as_raw(), None).state)
}
