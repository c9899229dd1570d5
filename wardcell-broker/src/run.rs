//! What every sandbox of one top-level run shares: the plan, the audit log (an event
//! that cannot be written ends the run), the entered sandboxes the run's end waits for,
//! and the run's repository watched for code that would run on the host.

use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use wardcell_common::plan::Plan;
use wardcell_common::protocol::Rate;

use wardcell_host::audit::AuditLog;
use wardcell_host::entries::Entries;
use wardcell_host::exe::Programs;
use wardcell_host::gitcheck::GitWatch;
use wardcell_host::guard::Guard;
use wardcell_host::process::Watched;

use crate::sys;

/// What every sandbox of one top-level run shares.
pub struct Run {
    pub plan: Plan,
    pub id: String,
    /// `$XDG_RUNTIME_DIR/wardcell/<run-id>`: the supervisors' sockets.
    pub dir: PathBuf,
    /// Every program the run may start, held open since it started.
    pub programs: Programs,
    /// What the views hold against the host: replaced there, the run ends (`lost`).
    pub guard: Guard,
    pub audit: AuditLog<sys::Process>,
    /// The environment `wardcell run` started in (see spec::Request::host_env).
    pub host_env: Vec<(String, String)>,
    next_sandbox: AtomicU32,
    /// Connections the run's proxies refused (for the line at the run's end).
    pub refused: AtomicU64,
    /// Entered sandboxes still running, so the run's end can end them and wait for their
    /// completions to be audited.
    /// An entry is reserved before its decision is written, and has its process once
    /// started: the run's end waits for reserved ones too, so that every entry allowed
    /// has its completion written.
    entries: Entries<sys::Process>,
    /// The run's repository, where code-running files may appear, watched by a process
    /// of its own (wardcell_host::gitcheck) when a sandbox may write it; what was found
    /// there so far.
    git_watch: OnceLock<GitWatch<sys::Process>>,
    git_found: Mutex<Vec<String>>,
    /// The first sandbox, once it is complete: what ends the run.
    first: OnceLock<sys::Process>,
}

impl Run {
    /// The next sandbox's number in this run.
    pub fn next_number(&self) -> u32 {
        self.next_sandbox.fetch_add(1, Ordering::Relaxed)
    }

    pub fn new(
        plan: Plan,
        id: String,
        dir: PathBuf,
        programs: Programs,
        (audit, guard): (AuditLog<sys::Process>, Guard),
        host_env: Vec<(String, String)>,
    ) -> Run {
        Run {
            plan,
            id,
            dir,
            programs,
            guard,
            audit,
            host_env,
            next_sandbox: AtomicU32::new(1),
            refused: AtomicU64::new(0),
            entries: Entries::default(),
            git_watch: OnceLock::new(),
            git_found: Mutex::new(Vec::new()),
            first: OnceLock::new(),
        }
    }

    /// Write one event to the run's log. If the log cannot take it, every sandbox of the
    /// run is killed: nothing goes on unaudited (main says why when the run ends).
    pub fn record(&self, category: &str, event: &str, fields: serde_json::Value) -> io::Result<()> {
        // Every audit event is a trace line too (the log never holds a secret).
        tracing::debug!(category, event, fields = %fields, "audit event");
        self.unless_unaudited(self.audit.write(None, category, event, fields).map(drop))
    }

    /// [`Run::record`] for an event the sandbox can cause at will (see
    /// `AuditLog::write`): `Ok(false)` when it was counted, not written.
    pub fn record_counted(
        &self,
        rate: Rate,
        category: &str,
        event: &str,
        fields: serde_json::Value,
    ) -> io::Result<bool> {
        self.unless_unaudited(self.audit.write(Some(rate), category, event, fields))
    }

    /// `written`, after ending every sandbox of the run if it failed.
    fn unless_unaudited<T>(&self, written: io::Result<T>) -> io::Result<T> {
        if written.is_err() {
            self.end_unaudited();
        }
        written
    }

    /// The first sandbox is complete: from now on a failed log write, or a held path
    /// lost, ends it. One that came before this (the run is ending already) ends it at
    /// once.
    pub fn set_first(&self, first: &sys::Process) {
        if let Ok(p) = first.try_clone() {
            let _ = self.first.set(p);
        }
        if self.audit.failure().is_some() || self.entries.is_ending() {
            self.end_unaudited();
        }
    }

    /// A path a view held was replaced on the host (wardcell_host::guard): audited, said,
    /// and every sandbox of the run ended.
    pub fn lost(&self, path: &std::path::Path) {
        // Ended first: every microsecond after the host's rename, the name is unprotected.
        self.end_unaudited();
        let fields = serde_json::json!({"path": path});
        let _ = self.record("sandbox", "sandbox.protection_lost", fields);
        wardcell_common::eprintln_line!("{}", wardcell_host::messages::protection_lost(path));
    }

    fn end_unaudited(&self) {
        self.entries.kill();
        if let Some(p) = self.first.get() {
            let _ = p.signal(libc::SIGKILL);
        }
    }

    /// `entry` has started `process`: the run's end can now end it (at once, if the run
    /// is ending already, or its log has failed).
    pub fn attach(&self, entry: &Entry<'_>, process: &sys::Process) {
        entry.attach(process);
        if self.audit.failure().is_some() {
            self.end_unaudited();
        }
    }

    /// Start watching the run's repository, when a sandbox may write it: a snapshot of
    /// what can make git run code there, taken before any sandbox runs code. From the
    /// thread that lives as long as the run (the watcher dies with it).
    pub fn watch_git(&self) {
        let plan = &self.plan;
        let writable = plan
            .profiles()
            .any(|p| p.write.iter().any(|w| plan.cwd.starts_with(w)));
        if writable {
            let spawn = |cmd: &mut _| sys::spawn_from(&self.programs.shim, cmd);
            let empty = plan.cwd.join(".git").symlink_metadata().is_err();
            let _ = self
                .git_watch
                .set(GitWatch::start(&spawn, &plan.cwd, empty));
        }
    }

    /// What can make git run code in the run's repository that was not there at the start.
    pub fn git_now(&self) -> Vec<String> {
        self.git_watch.get().map(GitWatch::look).unwrap_or_default()
    }

    /// The run's end: its repository's watcher ended (after the last look).
    pub fn end_git_watch(&self) {
        let _ = self.git_watch.get().map(GitWatch::end);
    }

    /// After a sandbox ends: audit what appeared in the run's repository that runs code
    /// on the host (once each). Returns everything found so far, for the run's end.
    pub fn check_git(&self, sandbox: &str) -> Vec<String> {
        let mut found = self.git_found.lock().unwrap_or_else(|p| p.into_inner());
        // (Nothing when the repository is not watched.)
        let mut new = self.git_now();
        new.retain(|l| !found.contains(l));
        if !new.is_empty() {
            let fields = serde_json::json!({"sandbox": sandbox, "paths": new});
            let _ = self.record("sandbox", "sandbox.git_changed", fields);
            // At most MAX_FOUND kept for the run's end (the audit log has every one).
            let room = MAX_FOUND.saturating_sub(found.len());
            found.extend(new.into_iter().take(room));
        }
        found.clone()
    }

    /// An entry about to be decided and started; `None` once the run is ending. Until the
    /// [`Entry`] is dropped, the run's end waits for it.
    pub fn entry(&self) -> Option<Entry<'_>> {
        self.entries.reserve()
    }

    /// Whether the run is ending (an entry ended now was ended by that).
    pub fn is_ending(&self) -> bool {
        self.entries.is_ending()
    }

    /// The top-level command has ended: end every entered sandbox still running and wait
    /// (a little) until each one's completion is audited.
    pub fn end_entries(&self) {
        self.entries.end(std::time::Duration::from_secs(2));
    }
}

/// The most lines kept of what appeared in the run's repository: a sandbox can make new
/// ones every second, and the broker's memory is not the sandbox's to grow.
const MAX_FOUND: usize = 256;

/// An entered sandbox (or an approval plugin) the run's end waits for, from its
/// decision until it is dropped, once its completion is audited.
pub type Entry<'a> = wardcell_host::entries::Entry<'a, sys::Process>;
