//! The run's audit log, written by the run's helper, a process of its own
//! (`wardcell-shim --helper`: the shim's auditlog.rs holds the file, its chain, its size
//! limit, the rates of counted events and the copy to syslog; a thread of it is the
//! run's guard, guard.rs), so that none of that is the broker's code. This module starts
//! that process, sends it each event (channel G, PROTOCOL 7.3) and reads its answer
//! within [`DEADLINE`]. A writer that cannot be started, dies, says anything but an
//! answer or takes too long is a log that failed: that answer, and every one after it,
//! is a failure, which ends the run (`Run::record`).

use std::io;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use serde_json::Value;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use wardcell_common::protocol::{AuditAnswer, AuditRequest, Rate};

use crate::gitcheck::Spawn;
use crate::process::{self, Watched};

/// How long one answer may take (a decision is synced to disk before it is answered).
pub const DEADLINE: Duration = Duration::from_secs(30);

/// The run's audit log, through its writer.
pub struct AuditLog<W: Watched>(Mutex<Writer<W>>);

struct Writer<W: Watched> {
    /// Its pipes and its process (killed and reaped when dropped); `None` once it failed.
    process: Option<(ChildStdin, ChildStdout, process::Child<W>)>,
    /// Why the log takes no more events, once it does not.
    failed: Option<String>,
    /// `run.finished` was answered: the writer is ended, and the log takes nothing more.
    finished: bool,
    deadline: Duration,
}

impl<W: Watched> AuditLog<W> {
    /// The writer, started by `spawn` (when the run starts, before its plan is read).
    pub fn start(spawn: Spawn<'_, W>) -> AuditLog<W> {
        let mut cmd = Command::new("wardcell-shim");
        cmd.arg("--helper").env_clear().current_dir("/");
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        // Its stdin written to with a deadline: a helper that stops reading fails the write.
        let started = spawn(&mut cmd).and_then(|(child, process)| match child {
            Child {
                stdin: Some(to),
                stdout: Some(from),
                ..
            } => process::nonblocking(to.as_fd()).map(|()| (to, from, process)),
            _ => Err(io::Error::other("its pipes are missing")),
        });
        let (process, failed) = match started {
            Ok(started) => (Some(started), None),
            Err(e) => (None, Some(e.to_string())),
        };
        let failed = failed.map(|e| {
            format!("the run's audit writer (wardcell-shim --helper) could not start: {e}")
        });
        AuditLog(Mutex::new(Writer {
            process,
            failed,
            finished: false,
            deadline: DEADLINE,
        }))
    }

    /// Create the run's log at `path`; why it cannot be.
    pub fn open(
        &self,
        path: PathBuf,
        run: &str,
        syslog: bool,
        max_log_kib: u64,
    ) -> Result<(), String> {
        let run = run.to_string();
        match self.ask(AuditRequest::Open {
            path,
            run,
            syslog,
            max_log_kib,
        }) {
            AuditAnswer::Failed(why) => Err(why),
            _ => Ok(()),
        }
    }

    /// Append one event, flushed to the kernel (synced when it is a decision) before it
    /// is answered: `Ok(true)`. With `counted` (an event a sandbox can cause at will),
    /// past that rate it is counted instead (`Ok(false)`) and written later as part of
    /// one `audit.suppressed`: what it would have allowed must not happen then.
    pub fn write(
        &self,
        counted: Option<Rate>,
        category: &str,
        event: &str,
        fields: Value,
    ) -> io::Result<bool> {
        let (category, event, fields) = (category.into(), event.into(), fields.to_string());
        match self.ask(AuditRequest::Event {
            category,
            event,
            fields,
            counted,
        }) {
            AuditAnswer::Written => Ok(true),
            AuditAnswer::Counted => Ok(false),
            AuditAnswer::Failed(why) => Err(io::Error::other(why)),
        }
    }

    /// Why the log stopped taking events, if it did: a failure, or its size limit.
    pub fn failure(&self) -> Option<String> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .failed
            .clone()
    }

    /// One request and its answer. A failure is kept (the writer's own, or the writer
    /// failing) and answers every later request, but `run.finished` is still asked for
    /// while the writer lives: a log at its size limit takes the run's end. Once that is
    /// answered, the writer is ended (killed and reaped: nothing of the run outlives it).
    fn ask(&self, request: AuditRequest) -> AuditAnswer {
        let mut w = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let closing =
            matches!(&request, AuditRequest::Event { event, .. } if event == "run.finished");
        let failed = w.failed.clone().filter(|_| !closing || w.process.is_none());
        if let Some(why) = w.finished.then(|| FINISHED.to_string()).or(failed) {
            return AuditAnswer::Failed(why);
        }
        let until = Instant::now() + w.deadline;
        let answer = w.process.as_mut().and_then(|(to, from, _)| {
            process::write_frame_by(to, &request, until)?;
            process::read_frame_by::<AuditAnswer>(from, until)
        });
        // A writer that stopped answering is killed and reaped, and so is one whose last
        // event was the run's end.
        if answer.is_none() || closing {
            w.process = None;
        }
        let answer = answer.unwrap_or(AuditAnswer::Failed(STOPPED.into()));
        if let AuditAnswer::Failed(why) = &answer {
            w.failed.get_or_insert_with(|| why.clone());
        }
        w.finished |= closing;
        answer
    }
}

const FINISHED: &str = "the run has finished: its log takes no more events";
const STOPPED: &str = "the run's audit writer (wardcell-shim --helper) stopped answering";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gitcheck::tests::{instead, printf, ByPid};
    use serde_json::json;

    fn writer(script: &str) -> AuditLog<ByPid> {
        let log = AuditLog::start(&instead("/bin/sh", &["-c", script]));
        log.0.lock().unwrap().deadline = Duration::from_secs(2);
        log
    }

    #[test]
    fn the_writers_answers_are_what_the_broker_acts_on() {
        let script = format!(
            "printf '{}'; cat >/dev/null",
            printf(&[
                AuditAnswer::Written,
                AuditAnswer::Written,
                AuditAnswer::Counted,
                AuditAnswer::Failed("the log is full".into()),
                AuditAnswer::Written,
            ])
        );
        let log = writer(&script);
        assert_eq!(log.open("/x".into(), "r", false, 0), Ok(()));
        assert!(log.write(None, "run", "run.started", json!({})).is_ok());
        let counted = log.write(Some(Rate::Refusals), "sandbox", "x", json!({}));
        assert!(!counted.unwrap());
        let e = log.write(None, "sandbox", "y", json!({})).unwrap_err();
        assert_eq!(e.to_string(), "the log is full");
        // Kept: no later event is asked for, and the failure is said; but the run's end
        // still is (a log at its size limit takes it), and nothing after it.
        assert!(log.write(None, "sandbox", "z", json!({})).is_err());
        assert_eq!(log.failure().as_deref(), Some("the log is full"));
        assert!(log.write(None, "run", "run.finished", json!({})).is_ok());
        let e = log
            .write(None, "run", "run.finished", json!({}))
            .unwrap_err();
        assert_eq!(e.to_string(), FINISHED);
    }

    #[test]
    fn a_writer_that_fails_in_any_way_is_a_log_that_failed() {
        // Says nothing and ends, says garbage, never answers (given up at the deadline).
        for script in ["exit 0", "echo garbage; cat >/dev/null", "sleep 60"] {
            let log = writer(script);
            let t = Instant::now();
            let why = log.open("/x".into(), "r", false, 0).unwrap_err();
            assert!(why.contains("stopped answering"), "{script}: {why}");
            assert!(t.elapsed() < Duration::from_secs(5), "{script}");
            assert!(log.write(None, "run", "run.finished", json!({})).is_err());
            assert!(log.failure().is_some());
        }
        // Takes the log, then reads nothing: an event bigger than the pipe is not waited
        // for past the deadline either.
        let log = writer(&format!(
            "printf '{}'; sleep 60",
            printf(&[AuditAnswer::Written])
        ));
        assert_eq!(log.open("/x".into(), "r", false, 0), Ok(()));
        let t = Instant::now();
        let argv = vec!["x".repeat(1 << 20)];
        assert!(log
            .write(None, "audit", "audit.decision", json!({ "command": argv }))
            .is_err());
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        // Cannot be started at all.
        let log: AuditLog<ByPid> =
            AuditLog::start(&|_: &mut Command| Err(io::Error::other("no shim")));
        let why = log.open("/x".into(), "r", false, 0).unwrap_err();
        assert!(why.contains("could not start: no shim"), "{why}");
    }
}
