//! The run's audit log: one JSON Lines file, 0600, in a 0700 directory, chained by hashes
//! (format in `wardcell_common::audit`).
//!
//! The file is opened afresh for every event, without O_CREAT after the first: a log that
//! was removed, replaced or made unwritable fails the write there and then, and a zone
//! entry whose decision cannot be written is refused.
//!
//! An event is written whole or not at all: a failed or short write (a full disk) is cut
//! back to the length the log had before it. The first failure is final: every later
//! write fails too, and the run ends its sandboxes (`Run::record`) rather than go on
//! unaudited.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::Mutex;

use serde_json::Value;

use wardcell_common::audit::{self, GENESIS};

pub struct AuditLog {
    path: PathBuf,
    run: String,
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
    /// `run.finished` is written: the log takes nothing after it (`logs verify` refuses
    /// a line there), so what comes late (a request racing the run's end) is refused,
    /// and an entry whose decision cannot be written does not start.
    finished: bool,
}

impl AuditLog {
    /// Create the run's log; it must not exist yet.
    pub fn create(path: PathBuf, run: &str, syslog: bool) -> io::Result<AuditLog> {
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)?;
        Ok(AuditLog {
            path,
            run: run.to_string(),
            chain: Mutex::new(Chain {
                seq: 0,
                prev: GENESIS.to_string(),
                len: 0,
                failed: None,
                finished: false,
            }),
            syslog,
        })
    }

    /// Append one event and flush it to the kernel before returning.
    pub fn write(&self, category: &str, event: &str, fields: Value) -> io::Result<()> {
        let mut chain = self.chain.lock().unwrap_or_else(|p| p.into_inner());
        let line = audit::encode_line(
            audit::now_millis(),
            &self.run,
            category,
            event,
            fields,
            chain.seq,
            &chain.prev,
        );
        if let Some(why) = &chain.failed {
            return Err(io::Error::other(why.clone()));
        }
        if chain.finished {
            return Err(io::Error::other(
                "the run has finished: its log takes no more events",
            ));
        }
        // A decision is durable before what it allows starts. The finish is not synced:
        // a machine crash cuts the log's tail, which `verify` reports as a cut log, and
        // an fsync at every run's end would cost every run a disk flush.
        let sync = event == "audit.decision";
        if let Err(e) = self.append(&line, chain.len, sync) {
            let why = format!(
                "the run's audit log {} cannot take another event: {e}",
                self.path.display()
            );
            if self.syslog {
                wardcell_common::syslog::send("wardcell", &format!("run {}: {why}", self.run));
            }
            chain.failed = Some(why);
            return Err(e);
        }
        chain.len += line.len() as u64 + 1;
        chain.prev = audit::hash_line(&line);
        chain.seq += 1;
        chain.finished = event == "run.finished";
        if self.syslog {
            wardcell_common::syslog::send("wardcell", &line);
        }
        Ok(())
    }

    /// Why the log stopped taking events, if it did.
    pub fn failure(&self) -> Option<String> {
        let chain = self.chain.lock().unwrap_or_else(|p| p.into_inner());
        chain.failed.clone()
    }

    /// Append `line` to a log that is `len` bytes long, whole or not at all.
    fn append(&self, line: &str, len: u64, sync: bool) -> io::Result<()> {
        let mut f = OpenOptions::new()
            .append(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&self.path)?;
        let meta = f.metadata()?;
        if !meta.is_file() || meta.uid() != nix::unistd::getuid().as_raw() {
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
            // A decision is on disk before what it allows starts.
            .and_then(|()| if sync { f.sync_data() } else { Ok(()) });
        if written.is_err() {
            // Never a partial line: back to the last event written whole.
            let _ = f.set_len(len);
        }
        written
    }
}
