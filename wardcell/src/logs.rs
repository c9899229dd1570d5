//! `wardcell logs`: read the runs' audit logs back, and verify their hash chains.

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::chain::{Checker, Lines, Verdict};
use wardcell_common::paths;
use wardcell_common::text::shown;
use wardcell_support::text::shell_words;

use crate::cli::{Output, ShowOutput};
use crate::context;
use crate::error::Error;
use crate::output;

/// The categories of the audit log's events (docs/OUTPUT.md).
pub const CATEGORIES: &[&str] = &["run", "audit", "proxy", "sandbox"];

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

/// What `logs show` and `logs verify` take for the newest run `logs list` shows.
pub const LATEST: &str = "latest";

/// The run ids with a log, newest first (for completion).
pub fn ids_newest_first() -> Vec<String> {
    runs_dir()
        .map(|d| newest_first(&d, log_ids(&d)))
        .unwrap_or_default()
}

/// `ids` newest first, as `logs list` orders them: by the id, which starts with the
/// start time in seconds, and within one second by the first event's milliseconds (only
/// the logs that share a second are read).
fn newest_first(dir: &Path, mut ids: Vec<String>) -> Vec<String> {
    ids.sort_by(|a, b| b.cmp(a));
    let mut i = 0;
    while i < ids.len() {
        let second = &ids[i][..16];
        let n = ids[i..]
            .iter()
            .take_while(|id| id.starts_with(second))
            .count();
        if n > 1 {
            ids[i..i + n].sort_by_cached_key(|id| {
                let ms = first_event(&dir.join(format!("{id}.jsonl")))
                    .and_then(|v| millis(&s(&v, "ts")));
                std::cmp::Reverse((ms, id.clone()))
            });
        }
        i += n;
    }
    ids
}

/// The ids of the logs in `dir` (unsorted; none when it cannot be read).
fn log_ids(dir: &Path) -> Vec<String> {
    match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter_map(|n| n.strip_suffix(".jsonl").map(str::to_string))
            .filter(|n| valid_id(n))
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// The run a command line names: a whole id, `latest` (the first run `logs list` shows,
/// `doctor`'s trial runs aside), or the start of exactly one id. Anything else is refused
/// in one line: an ambiguous start lists the ids it matches.
pub fn resolve_id(given: &str) -> Result<String, Error> {
    if valid_id(given) {
        return Ok(given.to_string());
    }
    let dir = runs_dir()?;
    let mut ids = log_ids(&dir);
    if given == LATEST {
        return latest(&dir, newest_first(&dir, ids)).ok_or_else(|| {
            Error::Refused(format!(
                "there is no run to show yet: no audit log in {}",
                shown(&dir.display().to_string())
            ))
        });
    }
    let id_like = given.len() < 25
        && !given.is_empty()
        && given
            .bytes()
            .all(|c| c.is_ascii_digit() || b"TZ-abcdef".contains(&c));
    if !id_like {
        return Err(not_an_id(given));
    }
    ids.sort_by(|a, b| b.cmp(a));
    let matching: Vec<&String> = ids.iter().filter(|i| i.starts_with(given)).collect();
    match matching.as_slice() {
        [one] => Ok(one.to_string()),
        [] => Err(Error::Refused(format!(
            "no run id starts with '{given}'; `wardcell logs list` shows the runs there are"
        ))),
        many => {
            const SHOWN: usize = 10;
            let mut list: Vec<&str> = many.iter().take(SHOWN).map(|s| s.as_str()).collect();
            let more = format!("and {} more", many.len().saturating_sub(SHOWN));
            if many.len() > SHOWN {
                list.push(&more);
            }
            Err(Error::Refused(format!(
                "'{given}' is the start of {} run ids: {}; give more of the id",
                many.len(),
                list.join(", ")
            )))
        }
    }
}

/// The first of `ids` (newest first) that is not a `doctor` trial.
fn latest(dir: &Path, ids: Vec<String>) -> Option<String> {
    ids.into_iter().find(|id| {
        first_event(&dir.join(format!("{id}.jsonl"))).is_some_and(|v| v["trial"] != true)
    })
}

/// A log's first event, or None when it cannot be read as `run.started`.
fn first_event(path: &Path) -> Option<Value> {
    let file = open_nofollow(path).ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let line = Lines::new(&mut BufReader::new(file)).next()?.ok()?;
    let v: Value = serde_json::from_str(&line).ok()?;
    (s(&v, "event") == "run.started").then_some(v)
}

fn not_an_id(given: &str) -> Error {
    Error::Refused(format!(
        "'{}' is not a run id (they look like 20261202T093212Z-3f9a1c2b, or `latest`, or the start of one); `wardcell logs list` shows them",
        shown(given)
    ))
}

/// Run `id`'s log, opened without following a symbolic link: a log replaced by a link
/// (or anything but a file) is refused in words, never followed nor shown as empty.
fn open_log(id: &str) -> Result<File, Error> {
    if !valid_id(id) {
        return Err(not_an_id(id));
    }
    let path = runs_dir()?.join(format!("{id}.jsonl"));
    let cannot = |why: String| {
        Error::Refused(format!(
            "cannot read the log of run {id} ({}): {why}",
            shown(&path.display().to_string())
        ))
    };
    let file = match open_nofollow(&path) {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Err(cannot(
            "it is a symbolic link, not a log: the log was replaced, and nothing of it is shown"
                .into(),
        )),
        Err(e) => {
            return Err(cannot(format!(
                "{e}; `wardcell logs list` shows the runs there are"
            )))
        }
    };
    match file.metadata() {
        Ok(m) if m.is_file() => Ok(file),
        Ok(_) => Err(cannot(
            "it is not a regular file: the log was replaced".into(),
        )),
        Err(e) => Err(cannot(e.to_string())),
    }
}

fn open_nofollow(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
}

fn s(v: &Value, k: &str) -> String {
    match v.get(k) {
        Some(Value::String(x)) => x.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

/// A list of words (a command) as a shell would need it typed; a field the log cut, as
/// [`cut`] says.
fn words(v: &Value, k: &str) -> String {
    match v.get(k) {
        Some(Value::Array(a)) => shell_words(
            &a.iter()
                .map(|x| x.as_str().map_or_else(|| x.to_string(), str::to_string))
                .collect::<Vec<_>>(),
        ),
        Some(c @ Value::Object(_)) => word(c),
        _ => String::new(),
    }
}

/// A field the writer cut (`{"cut", "bytes", "sha256"}`, see `auditlog::cap_fields`).
fn cut(v: &Value) -> Option<String> {
    let o = v.as_object()?;
    if o.len() != 3 {
        return None;
    }
    Some(format!(
        "{}... [cut: {} bytes in all, sha256 {}]",
        o.get("cut")?.as_str()?,
        o.get("bytes")?.as_u64()?,
        o.get("sha256")?.as_str()?
    ))
}

/// A value as words: text as it is, arrays joined by spaces, null as `-`.
fn word(v: &Value) -> String {
    match v {
        Value::String(x) => x.clone(),
        Value::Null => "-".into(),
        Value::Array(a) => a.iter().map(word).collect::<Vec<_>>().join(" "),
        Value::Object(o) => cut(v).unwrap_or_else(|| {
            o.iter()
                .map(|(k, v)| format!("{k} {}", word(v)))
                .collect::<Vec<_>>()
                .join(", ")
        }),
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
        "sandbox.protection_lost" => format!(
            "{} was replaced, removed or created on the host while held; every sandbox was ended",
            w("path")
        ),
        "sandbox.limit_reached" => format!(
            "sandbox {} reached its {} limit of {} ({}, counted {})",
            w("sandbox"),
            w("limit"),
            w("value"),
            w("mechanism"),
            w("count")
        ),
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

/// `wardcell logs show`: the events as they are read (never the whole log in memory),
/// the chain checked on the way. A damaged log shows the events before the damage, then
/// says where it is and fails; one that ends without `run.finished` after its run is
/// over is said to be so.
pub fn show(id: &str, category: Option<&str>, format: ShowOutput) -> Result<(), Error> {
    if let Some(c) = category {
        if !CATEGORIES.contains(&c) {
            return Err(Error::Usage(format!(
                "unknown category '{c}': use one of {}",
                CATEGORIES.join(", ")
            )));
        }
    }
    let id = resolve_id(id)?;
    let id = id.as_str();
    let file = open_log(id)?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut checker = Checker::new(id);
    let mut damage = None;
    let mut shown_any = false;
    if format == ShowOutput::Json {
        // One document: the run's id and its events, each as the log has it.
        let head = format!("{{\"run\":{},\"events\":[", Value::from(id));
        out.write_all(head.as_bytes()).map_err(Error::Stdout)?;
    }
    for line in Lines::new(BufReader::new(file)) {
        let v = match line.and_then(|l| checker.line(&l).map(|v| (l, v))) {
            Ok(x) => x,
            Err(broken) => {
                damage = Some(broken);
                break;
            }
        };
        let (line, v) = v;
        if category.is_some_and(|c| s(&v, "category") != c) {
            continue;
        }
        let text = match format {
            ShowOutput::Json if shown_any => format!(",{line}"),
            ShowOutput::Json => line,
            ShowOutput::Jsonl => format!("{line}\n"),
            // One event, one line: nothing in it can start another.
            ShowOutput::Text => format!(
                "{}\n",
                shown(&format!(
                    "{}  {:<7}  {:<16}  {}",
                    s(&v, "ts"),
                    s(&v, "category"),
                    s(&v, "event"),
                    summary(&v)
                ))
            ),
        };
        shown_any = true;
        out.write_all(text.as_bytes()).map_err(Error::Stdout)?;
    }
    if format == ShowOutput::Json {
        out.write_all(b"]}\n").map_err(Error::Stdout)?;
    }
    out.flush().map_err(Error::Stdout)?;
    drop(out);
    match damage.unwrap_or_else(|| checker.end()) {
        Verdict::Broken { line, why } => Err(Error::Refused(format!(
            "run {id}: the log is damaged at line {line}: {why}; only the events before it were shown (`wardcell logs verify {id}`)"
        ))),
        Verdict::Intact {
            lines,
            finished: false,
            ..
        } if !is_running(id) => {
            wardcell_common::eprintln_line!(
                "warning: run {id}: the log stops after {lines} events without run.finished, and the run is over: its broker was killed, or its last lines were cut"
            );
            Ok(())
        }
        Verdict::Intact { .. } => Ok(()),
    }
}

pub fn verify(id: &str, format: Output) -> Result<(), Error> {
    let id = resolve_id(id)?;
    let id = id.as_str();
    let file = open_log(id)?;
    let verdict = crate::chain::verify_reader(BufReader::new(file), id);
    let running = matches!(
        verdict,
        Verdict::Intact {
            finished: false,
            ..
        }
    ) && is_running(id);
    let outcome: Result<String, String> = match &verdict {
        Verdict::Intact {
            lines,
            finished: true,
            head,
        } => Ok(format!(
            "ok: run {id}: {lines} events, the chain is intact and the run finished; last event's hash {head}"
        )),
        Verdict::Intact { lines, .. } if running => Ok(format!(
            "ok: run {id}: {lines} events so far, the chain is intact; the run is still going"
        )),
        Verdict::Intact { lines, .. } => Err(format!(
            "run {id}: the log stops after {lines} events without run.finished, and the run is over: its last lines were cut, or its broker was killed; with `[audit] syslog`, syslog holds the finish event to compare"
        )),
        Verdict::Broken { line, why } => Err(format!(
            "run {id}: the log has been tampered with or damaged at line {line}: {shown}",
            shown = shown(why)
        )),
    };
    if format == Output::Json {
        let (events, finished, head, damage) = match &verdict {
            Verdict::Intact {
                lines,
                finished,
                head,
            } => (Some(*lines), *finished, Some(head.clone()), Value::Null),
            Verdict::Broken { line, why } => (
                None,
                false,
                None,
                serde_json::json!({"line": line, "why": why}),
            ),
        };
        let doc = serde_json::json!({
            "run": id, "ok": outcome.is_ok(), "events": events, "finished": finished,
            "running": running, "head": head, "damage": damage,
            "message": outcome.as_ref().map_or_else(|e| e.as_str(), |m| m.as_str()),
        });
        output::print(&doc.to_string())?;
    }
    match outcome {
        Ok(m) if format == Output::Text => output::print(&m),
        Ok(_) => Ok(()),
        Err(e) => Err(Error::Refused(e)),
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
    state: State,
    duration_ms: Option<i64>,
    trial: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Finished,
    Running,
    /// No `run.finished`, and no broker holds the run any more: it was killed (or its
    /// log's tail was cut).
    Killed,
    /// The log cannot be read as one (not a file, a first line that is not an event).
    Damaged,
}

impl State {
    fn word(self) -> &'static str {
        match self {
            State::Finished => "finished",
            State::Running => "running",
            State::Killed => "killed",
            State::Damaged => "damaged",
        }
    }
}

/// How much of a log's end `logs list` reads for its last event: more than one event's
/// line can be (each field is cut at 4 KiB).
const TAIL: u64 = 256 * 1024;

/// The first and the last event of a log, read from its first line and its last
/// [`TAIL`] bytes: never the whole log.
fn ends(path: &Path) -> Option<(Value, Option<Value>)> {
    let file = open_nofollow(path).ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() {
        return None;
    }
    let mut reader = BufReader::new(file);
    let first: Value = serde_json::from_str(&Lines::new(&mut reader).next()?.ok()?).ok()?;
    let len = meta.len();
    let mut tail = Vec::new();
    let mut file = reader.into_inner();
    file.seek(SeekFrom::Start(len.saturating_sub(TAIL))).ok()?;
    file.take(TAIL).read_to_end(&mut tail).ok()?;
    let last = tail
        .strip_suffix(b"\n")
        .and_then(|t| t.rsplit(|&b| b == b'\n').next())
        .and_then(|l| serde_json::from_slice::<Value>(l).ok());
    Some((first, last))
}

fn listed(id: &str, path: &Path) -> Listed {
    let (first, last) = match ends(path) {
        Some((f, l)) => (Some(f), l),
        None => (None, None),
    };
    let started = first.filter(|v| s(v, "event") == "run.started");
    let finished = last.filter(|v| s(v, "event") == "run.finished");
    let start = started.as_ref().map(|v| s(v, "ts"));
    let duration_ms = match (start.as_deref().and_then(millis), &finished) {
        (Some(a), Some(f)) => millis(&s(f, "ts")).map(|b| (b - a).max(0)),
        _ => None,
    };
    let state = match (&started, &finished) {
        (None, _) => State::Damaged,
        (_, Some(_)) => State::Finished,
        _ if is_running(id) => State::Running,
        _ => State::Killed,
    };
    Listed {
        id: id.to_string(),
        start,
        zone: started.as_ref().map_or(Value::Null, |v| v["zone"].clone()),
        command: started
            .as_ref()
            .map_or(Value::Null, |v| v["command"].clone()),
        exit: finished
            .as_ref()
            .map_or(Value::Null, |v| v["exit_status"].clone()),
        state,
        duration_ms,
        trial: started.is_some_and(|v| v["trial"] == true),
    }
}

/// `wardcell logs list`: newest first, at most `limit`; `doctor`'s trial runs only with
/// `all` (marked).
pub fn list(format: Output, limit: Option<usize>, all: bool) -> Result<(), Error> {
    let dir = runs_dir()?;
    let mut ids = log_ids(&dir);
    ids.sort();
    let mut runs: Vec<Listed> = ids
        .iter()
        .map(|id| listed(id, &dir.join(format!("{id}.jsonl"))))
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
                        "finished": r.state == State::Finished,
                        "state": r.state.word(),
                        "duration_ms": r.duration_ms,
                        "trial": r.trial,
                    })
                })
                .collect();
            output::print(&serde_json::json!({ "runs": json }).to_string())
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
                    match (&r.exit, r.state) {
                        (Value::Number(n), _) => n.to_string(),
                        (_, State::Finished) => "error".into(),
                        (_, state) => state.word().into(),
                    },
                    r.duration_ms.map_or("-".into(), |ms| {
                        if ms < 10_000 {
                            format!("{:.1}s", ms as f64 / 1000.0)
                        } else {
                            output::duration((ms / 1000) as u64)
                        }
                    }),
                    match &r.command {
                        c @ Value::Array(_) => words(&serde_json::json!({ "c": c }), "c"),
                        other => word(other),
                    },
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
            assert_eq!(millis(&wardcell_support::audit::rfc3339(ms)), Some(ms));
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
