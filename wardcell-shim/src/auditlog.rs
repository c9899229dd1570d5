//! The run's audit writer, the main thread of the run's helper (`wardcell-shim --helper`,
//! a process of its own that the broker starts from the shim it holds open when the run
//! starts; docs/PROTOCOL.md 7.3). It answers each request on stdin
//! (`protocol::AuditRequest`: create the log, then one event at a time) with one
//! `AuditAnswer` on stdout, until stdin ends; it dies with the broker, and blocks the
//! signals a terminal or `kill` of the broker's group send, so that the run's end is
//! still written when the broker is told to stop. The broker decides what each answer
//! allows (an event not written ends the run; an entry whose decision is not written does
//! not start) and ends the run when this process fails.
//!
//! The log: one JSON Lines file, 0600, in a 0700 directory, chained by hashes (format in
//! `wardcell_support::audit`).
//!
//! The file is opened afresh for every event, without O_CREAT after the first: a log that
//! was removed, replaced or made unwritable fails the write there and then, and a zone
//! entry whose decision cannot be written is refused.
//!
//! An event is written whole or not at all: a failed or short write (a full disk) is cut
//! back to the length the log had before it. The first failure is final: every later
//! write fails too, and the run ends its sandboxes rather than go on unaudited. Why it
//! failed is said by its cause (a full disk, a quota, an I/O error, no descriptors,
//! permission), never as a guess.
//!
//! What the sandbox can make the log hold is bounded three ways:
//! - every field of an event whose JSON text is over [`FIELD_CAP`] bytes is replaced by
//!   `{"cut": <its first FIELD_CAP bytes of JSON text>, "bytes": <length>, "sha256":
//!   <digest of the whole JSON text>}` (a 3 MB argv is 4 KiB in the log); a field that
//!   is an object has its own fields capped so;
//! - events the sandbox can cause as fast as it likes ([`AuditLog::write_counted`]:
//!   connections to a supervisor, refused and allowed zone entries) pass at a burst of
//!   [`COUNTED_BURST`] then [`COUNTED_PER_SECOND`] a second; the rest are counted by
//!   event name and written as one `audit.suppressed` before the next event. Allowed
//!   entries have a rate of their own ([`Rate::Entries`]), so that a flood of refusals
//!   or broken connections does not hold back an entry that would be allowed;
//! - the log may grow to `[audit] max_log_kib`: the event that would pass that, less
//!   [`RESERVE`] kept for the run's end, is not written; `audit.log_full` is, and every
//!   later event but `run.finished` fails, so that the run ends its sandboxes and closes
//!   its log with a chain `logs verify` calls intact.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Instant;

use nix::sys::signal::Signal;
use serde_json::{json, Map, Value};

use wardcell_common::protocol::{
    self, AuditAnswer, AuditRequest, Rate, COUNTED_BURST, COUNTED_PER_SECOND,
};
use wardcell_common::throttle::Throttle;
use wardcell_support::audit::{self, DEFAULT_MAX_LOG_KIB, FIELD_CAP, GENESIS, MIN_MAX_LOG_KIB};
use wardcell_support::syslog;

/// Room kept under the size limit for the run's end: `audit.suppressed`,
/// `audit.log_full` and `run.finished`, each of capped fields.
pub const RESERVE: u64 = 64 * 1024;

/// `wardcell-shim --helper`: the guard served on fd 3 (Linux) from a thread of its own,
/// and the audit log on stdin and stdout from this one.
pub fn helper() -> ! {
    #[cfg(target_os = "linux")]
    let _ = nix::sys::prctl::set_name(c"wardcell-helper");
    // The broker is told to stop by the keeper or by a signal to its group; this process
    // writes the run's end after that, and ends when the broker closes its stdin or dies.
    // Blocked before the guard's thread starts, which inherits the mask.
    let mut stops = nix::sys::signal::SigSet::empty();
    for sig in [
        Signal::SIGINT,
        Signal::SIGTERM,
        Signal::SIGHUP,
        Signal::SIGQUIT,
    ] {
        stops.add(sig);
    }
    let _ = stops.thread_block();
    #[cfg(target_os = "linux")]
    if let Ok(sock) = crate::sys::control_socket() {
        let guard = std::thread::Builder::new().name("wardcell-guard".into());
        let _ = guard.spawn(move || crate::guard::serve(sock));
    }
    serve()
}

/// Serve the broker: the log created by the first request, then one event a request.
fn serve() -> ! {
    let (mut input, mut output) = (io::stdin().lock(), io::stdout().lock());
    let mut answer = |a: &AuditAnswer| protocol::write_frame(&mut output, a).is_ok();
    let log = match protocol::read_frame(&mut input) {
        Ok(AuditRequest::Open {
            path,
            run,
            syslog,
            max_log_kib,
        }) => match AuditLog::create(path, &run, syslog, max_log_kib) {
            Ok(log) if answer(&AuditAnswer::Written) => log,
            Ok(_) => std::process::exit(2),
            Err(e) => {
                answer(&AuditAnswer::Failed(cause(&e)));
                std::process::exit(1)
            }
        },
        _ => std::process::exit(2),
    };
    loop {
        let reply = match protocol::read_frame(&mut input) {
            Ok(AuditRequest::Event {
                category,
                event,
                fields,
                counted,
            }) => {
                let fields = serde_json::from_str(&fields).unwrap_or(Value::Null);
                let written = match counted {
                    Some(rate) => log.write_counted(rate, &category, &event, fields),
                    None => log.write(&category, &event, fields).map(|()| true),
                };
                match written {
                    Ok(true) => AuditAnswer::Written,
                    Ok(false) => AuditAnswer::Counted,
                    Err(e) => AuditAnswer::Failed(e.to_string()),
                }
            }
            Err(protocol::FrameError::Closed) => std::process::exit(0),
            _ => std::process::exit(2),
        };
        if !answer(&reply) {
            std::process::exit(2);
        }
    }
}

pub struct AuditLog {
    path: PathBuf,
    run: String,
    /// Who owns the log: a log owned by anyone else was replaced.
    uid: u32,
    max_bytes: u64,
    chain: Mutex<Chain>,
    /// Also send every event to syslog (authpriv): `[audit] syslog = true`.
    syslog: bool,
}

struct Chain {
    seq: u64,
    prev: String,
    /// The log's length after the last event written whole.
    len: u64,
    /// Why the log could not take an event; set once, never cleared.
    failed: Option<String>,
    /// The log reached its size limit: only `run.finished` is still written.
    full: Option<String>,
    /// `run.finished` is written: the log takes nothing after it (`logs verify` refuses
    /// a line there), so what comes late (a request racing the run's end) is refused,
    /// and an entry whose decision cannot be written does not start.
    finished: bool,
    refusals: Throttle,
    entries: Throttle,
    /// Counted events held back, by event name, not yet written as `audit.suppressed`.
    held: BTreeMap<String, u64>,
}

impl AuditLog {
    /// Create the run's log; it must not exist yet. It may grow to `max_log_kib` KiB
    /// (0: the default).
    pub fn create(
        path: PathBuf,
        run: &str,
        syslog: bool,
        max_log_kib: u64,
    ) -> io::Result<AuditLog> {
        let f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)?;
        let uid = f.metadata()?.uid();
        Ok(AuditLog {
            path,
            run: run.to_string(),
            uid,
            max_bytes: match max_log_kib {
                0 => DEFAULT_MAX_LOG_KIB,
                n => n.max(MIN_MAX_LOG_KIB),
            }
            .saturating_mul(1024),
            chain: Mutex::new(Chain {
                seq: 0,
                prev: GENESIS.to_string(),
                len: 0,
                failed: None,
                full: None,
                finished: false,
                refusals: Throttle::new(Instant::now(), COUNTED_BURST, COUNTED_PER_SECOND),
                entries: Throttle::new(Instant::now(), COUNTED_BURST, COUNTED_PER_SECOND),
                held: BTreeMap::new(),
            }),
            syslog,
        })
    }

    /// Append one event and flush it to the kernel before returning.
    pub fn write(&self, category: &str, event: &str, fields: Value) -> io::Result<()> {
        let mut chain = self.chain.lock().unwrap_or_else(|p| p.into_inner());
        self.write_locked(&mut chain, category, event, fields)
    }

    /// An event the sandbox can cause at will: written if the rate allows (`Ok(true)`),
    /// else counted (`Ok(false)`) and written later as part of one `audit.suppressed`.
    /// What a counted event would have allowed must not happen when it is not written.
    pub fn write_counted(
        &self,
        rate: Rate,
        category: &str,
        event: &str,
        fields: Value,
    ) -> io::Result<bool> {
        let mut chain = self.chain.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(why) = chain.failed.clone().or_else(|| chain.full.clone()) {
            return Err(io::Error::other(why));
        }
        let throttle = match rate {
            Rate::Refusals => &mut chain.refusals,
            Rate::Entries => &mut chain.entries,
        };
        if !throttle.admit(Instant::now()) {
            throttle.take_held();
            *chain.held.entry(event.to_string()).or_insert(0) += 1;
            return Ok(false);
        }
        self.write_locked(&mut chain, category, event, fields)
            .map(|()| true)
    }

    /// Why the log stopped taking events, if it did: a failure, or its size limit.
    #[cfg(test)]
    pub fn failure(&self) -> Option<String> {
        let chain = self.chain.lock().unwrap_or_else(|p| p.into_inner());
        chain.failed.clone().or_else(|| chain.full.clone())
    }

    fn write_locked(
        &self,
        chain: &mut Chain,
        category: &str,
        event: &str,
        fields: Value,
    ) -> io::Result<()> {
        if let Some(why) = &chain.failed {
            return Err(io::Error::other(why.clone()));
        }
        if chain.finished {
            return Err(io::Error::other(
                "the run has finished: its log takes no more events",
            ));
        }
        let closing = event == "run.finished";
        if let Some(why) = chain.full.as_ref().filter(|_| !closing) {
            return Err(io::Error::other(why.clone()));
        }
        if !chain.held.is_empty() {
            let counts = std::mem::take(&mut chain.held);
            let fields = json!({
                "counts": counts,
                "reason": format!("over the {COUNTED_PER_SECOND} a second (after a burst of {COUNTED_BURST}) recorded one by one"),
            });
            self.append_event(chain, "audit", "audit.suppressed", fields)?;
        }
        let line = self.line(chain, category, event, cap_fields(fields));
        if !closing && chain.len + line.len() as u64 + 1 > self.max_bytes.saturating_sub(RESERVE) {
            let kib = self.max_bytes / 1024;
            let why = format!(
                "the run's audit log {} reached its size limit of {kib} KiB ([audit] max_log_kib)",
                self.path.display()
            );
            let fields = json!({"max_log_kib": kib, "bytes": chain.len, "refused": event});
            self.append_event(chain, "audit", "audit.log_full", fields)?;
            chain.full = Some(why.clone());
            return Err(io::Error::other(why));
        }
        self.append_line(chain, event, line)
    }

    fn line(&self, chain: &Chain, category: &str, event: &str, fields: Value) -> String {
        audit::encode_line(
            audit::now_millis(),
            &self.run,
            category,
            event,
            fields,
            chain.seq,
            &chain.prev,
        )
    }

    fn append_event(
        &self,
        chain: &mut Chain,
        category: &str,
        event: &str,
        fields: Value,
    ) -> io::Result<()> {
        let line = self.line(chain, category, event, fields);
        self.append_line(chain, event, line)
    }

    fn append_line(&self, chain: &mut Chain, event: &str, line: String) -> io::Result<()> {
        // A decision is durable before what it allows starts. The finish is not synced:
        // a machine crash cuts the log's tail, which `verify` reports as a cut log, and
        // an fsync at every run's end would cost every run a disk flush.
        let sync = event == "audit.decision";
        if let Err(e) = self.append(&line, chain.len, sync) {
            let why = format!(
                "the run's audit log {} cannot take another event: {}",
                self.path.display(),
                cause(&e)
            );
            if self.syslog {
                syslog::send("wardcell", &format!("run {}: {why}", self.run));
            }
            chain.failed = Some(why.clone());
            return Err(io::Error::new(e.kind(), why));
        }
        chain.len += line.len() as u64 + 1;
        chain.prev = audit::hash_line(&line);
        chain.seq += 1;
        chain.finished = event == "run.finished";
        if self.syslog {
            syslog::send("wardcell", &line);
        }
        Ok(())
    }

    /// Append `line` to a log that is `len` bytes long, whole or not at all.
    fn append(&self, line: &str, len: u64, sync: bool) -> io::Result<()> {
        let mut f = OpenOptions::new()
            .append(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&self.path)?;
        let meta = f.metadata()?;
        if !meta.is_file() || meta.uid() != self.uid {
            return Err(io::Error::other("the audit log was replaced"));
        }
        if meta.len() != len {
            return Err(io::Error::other(format!(
                "it is {} bytes long, not the {len} written to it: someone else changed it",
                meta.len()
            )));
        }
        let mut bytes = Vec::with_capacity(line.len() + 1);
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
        // One write(2) of the whole line; after a short one (a full disk), the next says
        // why it cannot go on.
        let written = f
            .write_all(&bytes)
            .and_then(|()| if sync { f.sync_data() } else { Ok(()) });
        if written.is_err() {
            // Never a partial line: back to the last event written whole.
            let _ = f.set_len(len);
        }
        written
    }
}

/// An event's fields, each over [`FIELD_CAP`] bytes of JSON text cut to that, with the
/// whole text's length and SHA-256. An object's own fields are capped each (so that the
/// approval answer keeps its `approved`), never the object as a whole.
pub fn cap_fields(fields: Value) -> Value {
    match fields {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (k, cap_fields(v)))
                .collect::<Map<String, Value>>(),
        ),
        v => cap_value(v),
    }
}

fn cap_value(v: Value) -> Value {
    let text = v.to_string();
    if text.len() <= FIELD_CAP {
        return v;
    }
    let mut end = FIELD_CAP;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    json!({
        "cut": &text[..end],
        "bytes": text.len(),
        "sha256": audit::hash_line(&text),
    })
}

/// Why a write failed, in words a person can act on, with the system's own words.
pub fn cause(e: &io::Error) -> String {
    let words = match e.raw_os_error() {
        Some(libc::ENOSPC) => "the file system holding it is full: make room for the log, then run again",
        Some(libc::EDQUOT) => "the disk quota is used up: free some of it, then run again",
        Some(libc::EIO) => "the disk or file system reported an input/output error: check it before you trust what it holds",
        Some(libc::EMFILE) => "this process has no file descriptor left: raise `ulimit -n`, then run again",
        Some(libc::ENFILE) => "the system has no file descriptor left",
        Some(libc::EACCES | libc::EPERM) => "permission denied: the log or its directory was made unwritable",
        Some(libc::EROFS) => "its file system is now read-only",
        Some(libc::ENOENT) => "the log was removed",
        Some(libc::ELOOP) => "the log was replaced by a symbolic link",
        Some(libc::EFBIG) => "it is over the file size limit (`ulimit -f`)",
        _ => return e.to_string(),
    };
    format!("{words} ({e})")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether every line of `text` chains to the one before it, and the last is
    /// `run.finished` (the whole check is the client's `logs verify`).
    fn chained_and_finished(text: &str) -> bool {
        let mut prev = audit::GENESIS.to_string();
        let mut last = Value::Null;
        for line in text.lines() {
            last = serde_json::from_str(line).unwrap();
            if last["prev"] != prev.as_str() {
                return false;
            }
            prev = audit::hash_line(line);
        }
        last["event"] == "run.finished"
    }

    fn tmp(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("wardcell-auditlog-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d.join("r.jsonl")
    }

    #[test]
    fn a_long_field_is_cut_with_its_length_and_digest() {
        let argv: Vec<String> = vec!["x".repeat(3_000_000)];
        let whole = Value::from(argv.clone()).to_string();
        let v = cap_fields(json!({"command": argv, "zone": "push"}));
        assert_eq!(v["zone"], "push");
        assert_eq!(v["command"]["bytes"], whole.len());
        assert_eq!(v["command"]["sha256"], audit::hash_line(&whole));
        assert_eq!(v["command"]["cut"].as_str().unwrap().len(), FIELD_CAP);
        // Cut on a character boundary.
        let v = cap_fields(json!({"s": "é".repeat(5000)}));
        assert!(v["s"]["cut"].as_str().unwrap().len() <= FIELD_CAP);
        // An object keeps its shape: its long fields are cut each.
        let long = "\u{200b}".repeat(1500);
        let v =
            cap_fields(json!({"approval": {"approved": true, "reason": long, "approver": long}}));
        assert_eq!(v["approval"]["approved"], true);
        assert!(v["approval"]["reason"]["sha256"].is_string());
    }

    #[test]
    fn counted_events_past_the_rate_are_one_line_and_the_chain_holds() {
        let path = tmp("counted");
        let log = AuditLog::create(path.clone(), "r", false, DEFAULT_MAX_LOG_KIB).unwrap();
        log.write("run", "run.started", json!({})).unwrap();
        let written = (0..10_000)
            .filter(|_| {
                log.write_counted(Rate::Refusals, "sandbox", "supervisor.closed", json!({}))
                    .unwrap()
            })
            .count();
        assert!(written < 200, "{written}");
        log.write("run", "run.finished", json!({})).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let last_but_one = text.lines().rev().nth(1).unwrap();
        let v: Value = serde_json::from_str(last_but_one).unwrap();
        assert_eq!(v["event"], "audit.suppressed");
        assert_eq!(v["counts"]["supervisor.closed"], 10_000 - written as u64);
        assert!(chained_and_finished(&text), "{text}");
    }

    #[test]
    fn refusals_do_not_use_up_the_rate_of_allowed_entries() {
        let log = AuditLog::create(tmp("rates"), "r", false, 0).unwrap();
        log.write("run", "run.started", json!({})).unwrap();
        for _ in 0..1000 {
            let _ = log.write_counted(Rate::Refusals, "sandbox", "supervisor.closed", json!({}));
        }
        assert!(log
            .write_counted(Rate::Entries, "audit", "audit.decision", json!({}))
            .unwrap());
        let allowed = (0..1000)
            .filter(|_| {
                log.write_counted(Rate::Entries, "audit", "audit.decision", json!({}))
                    .unwrap()
            })
            .count();
        assert!(allowed < 200, "{allowed}");
    }

    #[test]
    fn a_full_log_takes_its_end_and_nothing_else() {
        let path = tmp("full");
        let log = AuditLog::create(path.clone(), "r", false, MIN_MAX_LOG_KIB).unwrap();
        log.write("run", "run.started", json!({})).unwrap();
        let mut n = 0;
        while log
            .write("sandbox", "x", json!({"pad": "p".repeat(4000)}))
            .is_ok()
        {
            n += 1;
        }
        assert!(n > 5, "{n}");
        let why = log.failure().unwrap();
        assert!(why.contains("size limit of 128 KiB"), "{why}");
        assert!(log.write("sandbox", "x", json!({})).is_err());
        log.write("run", "run.finished", json!({"error": why}))
            .unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.len() as u64 <= MIN_MAX_LOG_KIB * 1024,
            "{}",
            text.len()
        );
        assert!(text.contains("\"audit.log_full\""));
        assert!(chained_and_finished(&text), "{text}");
    }

    #[test]
    fn failures_are_worded_by_their_cause() {
        let e = |n| cause(&io::Error::from_raw_os_error(n));
        assert!(e(libc::ENOSPC).starts_with("the file system holding it is full"));
        assert!(e(libc::EDQUOT).starts_with("the disk quota is used up"));
        assert!(e(libc::EIO).contains("input/output error"));
        assert!(e(libc::EMFILE).contains("ulimit -n"));
        assert!(e(libc::EACCES).starts_with("permission denied"));
        assert!(!e(libc::EIO).contains("make room"));
    }
}
