//! The run's audit log: one JSON Lines file, 0600, in a 0700 directory, chained by hashes
//! (format in `wardcell_common::audit`).
//!
//! The file is opened afresh for every event, without O_CREAT after the first: a log that
//! was removed, replaced or made unwritable fails the write there and then, and a zone
//! entry whose decision cannot be written is refused.

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
        let mut f = OpenOptions::new()
            .append(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&self.path)?;
        let meta = f.metadata()?;
        if !meta.is_file() || meta.uid() != nix::unistd::getuid().as_raw() {
            return Err(io::Error::other("the audit log was replaced"));
        }
        // One write(2) of the whole line: no partial line from this process.
        f.write_all(format!("{line}\n").as_bytes())?;
        // A decision is on disk before what it allows starts.
        if event == "audit.decision" {
            f.sync_data()?;
        }
        chain.prev = audit::hash_line(&line);
        chain.seq += 1;
        if self.syslog {
            crate::sys::syslog_authpriv(&line);
        }
        Ok(())
    }
}
