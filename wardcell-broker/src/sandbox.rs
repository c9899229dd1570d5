//! Starting one sandbox: the same steps for `wardcell run` and for every `zone enter`.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

use nix::sys::wait::waitpid;
use nix::unistd::Pid;

use wardcell_common::auditlog::{AuditLog, Rate};
use wardcell_common::gitguard;
use wardcell_common::limits;
use wardcell_common::plan::{Plan, ProfilePlan, SandboxSpec};
use wardcell_common::protocol::{self, ShimRequest};

use crate::error::BrokerError;
use crate::proxy::{self, Proxy};
use crate::relay::Running;
use crate::supervisor::Supervisor;
use crate::{peer, spec, sys};

/// What every sandbox of one top-level run shares.
pub struct Run {
    pub plan: Plan,
    pub id: String,
    /// `$XDG_RUNTIME_DIR/wardcell/<run-id>`: the supervisors' sockets.
    pub dir: PathBuf,
    pub shim: CString,
    pub audit: AuditLog,
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
    entries: Mutex<Vec<(u32, Option<sys::Process>)>>,
    entries_done: Condvar,
    ending: AtomicBool,
    /// The run's repository, where code-running files may appear (see gitguard), and
    /// what was found there so far.
    git_watch: Option<gitguard::Watch>,
    git_found: Mutex<Vec<String>>,
    /// The first sandbox, once it is complete: what ends the run.
    first: OnceLock<sys::Process>,
}

impl Run {
    /// The line for the run's end when its proxies refused anything: how many, and the
    /// command that shows them.
    pub fn refusals(&self) -> Option<String> {
        let n = self.refused.load(Ordering::Relaxed);
        (n > 0).then(|| {
            format!(
                "wardcell: {n} connection{} refused in this run; `wardcell logs show {} --category proxy` shows which and why",
                if n == 1 { " was" } else { "s were" },
                self.id
            )
        })
    }

    pub fn new(plan: Plan, id: String, dir: PathBuf, shim: CString, audit: AuditLog) -> Run {
        let host_env = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect();
        let git_watch = git_watch(&plan);
        Run {
            plan,
            id,
            dir,
            shim,
            audit,
            host_env,
            next_sandbox: AtomicU32::new(1),
            refused: AtomicU64::new(0),
            entries: Mutex::new(Vec::new()),
            entries_done: Condvar::new(),
            ending: AtomicBool::new(false),
            git_watch,
            git_found: Mutex::new(Vec::new()),
            first: OnceLock::new(),
        }
    }

    /// Write one event to the run's log. If the log cannot take it, every sandbox of the
    /// run is killed: nothing goes on unaudited (main says why when the run ends).
    pub fn record(&self, category: &str, event: &str, fields: serde_json::Value) -> io::Result<()> {
        // Every audit event is a trace line too (the log never holds a secret).
        tracing::debug!(category, event, fields = %fields, "audit event");
        let written = self.audit.write(category, event, fields);
        if written.is_err() {
            self.end_unaudited();
        }
        written
    }

    /// [`Run::record`] for an event the sandbox can cause at will (see
    /// `AuditLog::write_counted`): `Ok(false)` when it was counted, not written.
    pub fn record_counted(
        &self,
        rate: Rate,
        category: &str,
        event: &str,
        fields: serde_json::Value,
    ) -> io::Result<bool> {
        let written = self.audit.write_counted(rate, category, event, fields);
        if written.is_err() {
            self.end_unaudited();
        }
        written
    }

    /// The first sandbox is complete: from now on a failed log write ends it. A write
    /// that failed before this ends it at once.
    pub fn set_first(&self, running: &Running) {
        if let Ok(p) = running.process.try_clone() {
            let _ = self.first.set(p);
        }
        if self.audit.failure().is_some() {
            self.end_unaudited();
        }
    }

    fn end_unaudited(&self) {
        self.ending.store(true, Ordering::SeqCst);
        if let Some(p) = self.first.get() {
            let _ = p.signal(libc::SIGKILL);
        }
        let e = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        for p in e.iter().filter_map(|(_, p)| p.as_ref()) {
            let _ = p.signal(libc::SIGKILL);
        }
    }

    /// What can make git run code in the run's repository that was not there at the start.
    pub fn git_now(&self) -> Vec<String> {
        self.git_watch
            .as_ref()
            .map(gitguard::changes)
            .unwrap_or_default()
    }

    /// After a sandbox ends: audit what appeared in the run's repository that runs code
    /// on the host (once each). Returns everything found so far, for the run's end.
    pub fn check_git(&self, sandbox: &str) -> Vec<String> {
        let mut found = self.git_found.lock().unwrap_or_else(|p| p.into_inner());
        if self.git_watch.is_some() {
            let new: Vec<String> = self
                .git_now()
                .into_iter()
                .filter(|l| !found.contains(l))
                .collect();
            if !new.is_empty() {
                let _ = self.record(
                    "sandbox",
                    "sandbox.git_changed",
                    serde_json::json!({"sandbox": sandbox, "paths": new}),
                );
                found.extend(new);
            }
        }
        found.clone()
    }

    /// An entry about to be decided and started; `None` once the run is ending. Until the
    /// [`Entry`] is dropped, the run's end waits for it.
    pub fn entry(&self) -> Option<Entry<'_>> {
        let mut e = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        // Checked under the lock [`Run::end_entries`] takes after setting `ending`: a
        // reservation made here is one it sees.
        if self.is_ending() {
            return None;
        }
        let key = self.next_sandbox.fetch_add(1, Ordering::Relaxed) | 0x8000_0000;
        e.push((key, None));
        Some(Entry { run: self, key })
    }

    /// Whether the run is ending (an entry ended now was ended by that).
    pub fn is_ending(&self) -> bool {
        self.ending.load(Ordering::SeqCst)
    }

    /// The top-level command has ended: end every entered sandbox still running and wait
    /// (a little) until each one's completion is audited.
    pub fn end_entries(&self) {
        self.ending.store(true, Ordering::SeqCst);
        let mut e = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        for p in e.iter().filter_map(|(_, p)| p.as_ref()) {
            let _ = p.signal(libc::SIGKILL);
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while !e.is_empty() {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break;
            }
            e = self
                .entries_done
                .wait_timeout(e, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

/// One sandbox to start.
pub struct Request<'a> {
    pub profile: &'a ProfilePlan,
    /// None for `run --profile`: no zone, no supervisor.
    pub zone: Option<&'a str>,
    /// The zone it starts in and every zone entered before it (empty without a zone).
    pub chain: Vec<String>,
    pub argv: &'a [String],
    pub cwd: PathBuf,
    pub env: Vec<(String, String)>,
    pub stdio: [RawFd; 3],
    /// Signals the command starts ignoring: those its caller ignored (see spawn).
    pub ignored: u64,
    pub pty: bool,
    /// The zone is `authenticated`: its proxy attaches the profile's credentials.
    pub authenticated: bool,
}

/// A started sandbox.
pub struct Sandbox {
    pub name: String,
    pub running: Running,
    pub supervisor: Option<Arc<Supervisor>>,
    pub spec: SandboxSpec,
    /// Its zone's proxy, when its profile has network.
    pub proxy: Option<Proxy>,
    /// Its limits: its cgroup, removed when it is dropped.
    pub limits: limits::Enforced,
}

impl Sandbox {
    /// It has ended: stop serving its socket, and end its proxy.
    pub fn retire(&mut self) {
        if let Some(s) = &self.supervisor {
            s.stop();
        }
        self.proxy = None;
    }

    /// The run's first sandbox has ended, and the broker with it once the entries still
    /// running end: as [`Sandbox::retire`], the supervisor's thread left to the exit
    /// (stopped first this way, its `stop` then does nothing).
    pub fn retire_first(&mut self) {
        if let Some(s) = &self.supervisor {
            s.stop_at_exit();
        }
        self.retire();
    }

    /// When its time limit ends, counted from now (its command starts).
    pub fn deadline(&self) -> Option<std::time::Instant> {
        self.limits.time().map(|t| std::time::Instant::now() + t)
    }

    /// It has ended: audit each limit it reached; its exit status and, when it did not
    /// run to its end (the time limit ended it, or it did not start), the one-line error.
    pub fn ended(&self, run: &Run, ended: &crate::relay::Ended) -> (i32, Option<String>) {
        for (kind, bound, mechanism, count) in self.limits.reached(ended.timed_out) {
            let _ = run.record(
                "sandbox",
                "sandbox.limit_reached",
                serde_json::json!({"sandbox": self.name, "limit": kind.name(), "value": kind.show(bound.value), "mechanism": mechanism, "count": count}),
            );
        }
        match self.limits.ended_by_time(ended.timed_out) {
            Some((code, message)) => (code, Some(message)),
            None => crate::describe(&ended.outcome, self.spec.argv.first().map_or("", |a| a)),
        }
    }
}

/// Kills and reaps a half-started sandbox unless disarmed.
struct Abort<'a> {
    running: Option<&'a Running>,
    supervisor: Option<Arc<Supervisor>>,
}

impl Drop for Abort<'_> {
    fn drop(&mut self) {
        if let Some(r) = self.running {
            let _ = r.process.signal(libc::SIGKILL);
            let _ = waitpid(Pid::from_raw(r.pid), None);
        }
        if let Some(s) = &self.supervisor {
            s.stop();
        }
    }
}

/// A sandbox whose namespaces exist and whose shim is starting, not yet given its spec.
pub struct Spawned {
    running: Running,
}

impl Spawned {
    /// Kill and reap it: it will not be completed.
    pub fn abandon(self) {
        let _ = self.running.process.signal(libc::SIGKILL);
        let _ = waitpid(Pid::from_raw(self.running.pid), None);
    }
}

/// The run's directory is watched when a sandbox may write it: a snapshot of what can make
/// git run code there, taken before any sandbox runs code.
fn git_watch(plan: &Plan) -> Option<gitguard::Watch> {
    let start = match &plan.start {
        wardcell_common::plan::Start::Profile(p) => Some(p),
        wardcell_common::plan::Start::Zone(_) => None,
    };
    let writable = plan
        .zones
        .iter()
        .map(|z| &z.profile)
        .chain(start)
        .any(|p| p.write.iter().any(|w| plan.cwd.starts_with(w)));
    gitguard::watch(&plan.cwd, writable)
}

/// Step 1: new namespaces and the shim. Returns at once; the kernel (and the other core)
/// builds the namespaces and execs the shim while the caller prepares the rest.
pub fn spawn(shim: &CString, stdio: [RawFd; 3], ignored: u64) -> Result<Spawned, BrokerError> {
    let (ours, theirs) =
        UnixStream::pair().map_err(|e| BrokerError::Sandbox(format!("socketpair: {e}")))?;
    let spawned = sys::spawn::spawn_sandbox(shim, stdio, theirs.as_raw_fd(), ignored)
        .map_err(|e| BrokerError::Sandbox(sys::spawn::explain_spawn_error(&e)))?;
    Ok(Spawned {
        running: Running {
            pid: spawned.pid,
            process: spawned.process,
            control: ours,
        },
    })
}

/// Both steps, for a sandbox started from a supervisor thread.
pub fn start(run: &Arc<Run>, req: Request<'_>) -> Result<Sandbox, BrokerError> {
    // Git in the new sandbox would run what a sandbox of this run planted in the
    // repository: no entry while it is there.
    if let Some(first) = run.git_now().first() {
        return Err(BrokerError::Refused(format!(
            "{first} appeared during this run and git would run it in the new sandbox; remove it, then enter again"
        )));
    }
    let spawned = spawn(&run.shim, req.stdio, req.ignored)?;
    complete(run, spawned, req, || Ok(())).map(|(sandbox, ())| sandbox)
}

/// Step 2: its supervisor, its spec, and the handover. On any failure the half-started
/// sandbox is killed and reaped.
///
/// The shim gets its spec as soon as it can be built, and builds the mount namespace
/// while this thread finishes: `before_proceed` runs (the first sandbox's caller audits
/// the run's start and blocks signals there, before any thread exists), the supervisor
/// starts serving, and the proxy starts (with network). Only then does the shim get
/// `Proceed` and start the command. What `before_proceed` made comes back with the sandbox.
pub fn complete<T>(
    run: &Arc<Run>,
    spawned: Spawned,
    req: Request<'_>,
    before_proceed: impl FnOnce() -> Result<T, BrokerError>,
) -> Result<(Sandbox, T), BrokerError> {
    let running = spawned.running;
    let mut abort = Abort {
        running: Some(&running),
        supervisor: None,
    };

    // What its processes carry: how its supervisor will recognise them.
    let number = run.next_sandbox.fetch_add(1, Ordering::Relaxed);
    let mark = peer::mark(&running, &run.id, number)
        .map_err(|e| BrokerError::Sandbox(format!("reading the sandbox's {}: {e}", peer::MARK)))?;

    // Its limits: its cgroup, if one needs it, with the shim in it before the command.
    let cgroup = format!("wardcell-{}-s{number}", run.id);
    let limits = limits::Enforced::prepare(&req.profile.limits, &req.profile.name, &cgroup)
        .map_err(BrokerError::Refused)?;
    limits.join(running.pid).map_err(BrokerError::Sandbox)?;

    // A supervisor, in a zone.
    let name = format!("s{number}");
    let supervisor = match req.zone {
        Some(zone) => {
            let s = Supervisor::bind(run.clone(), &name, zone, req.chain.clone(), mark.clone())
                .map_err(|e| BrokerError::Sandbox(format!("starting the zone supervisor: {e}")))?;
            abort.supervisor = Some(s.clone());
            Some(s)
        }
        None => None,
    };

    // The spec.
    let socket = supervisor.as_ref().map(|s| s.path().to_path_buf());
    let request = spec::Request {
        plan: &run.plan,
        profile: req.profile,
        zone: req.zone,
        argv: req.argv,
        cwd: &req.cwd,
        caller_env: req.env,
        host_env: &run.host_env,
        zone_socket: socket.as_deref(),
        pty: req.pty,
        authenticated: req.authenticated,
    };
    let mut spec = spec::build(&request, &|p| p.exists()).map_err(BrokerError::Refused)?;
    spec.trace = wardcell_common::trace::spec(&run.id);
    (spec.processes, spec.pid_max) = (limits.nproc(), limits.pid_max());
    peer::stamp(&mut spec, &mark);
    tracing::debug!(zone = req.zone, profile = %req.profile.name, "sandbox spec sent");

    // Hand it over.
    let mut control = running
        .control
        .try_clone()
        .map_err(|e| BrokerError::Sandbox(e.to_string()))?;
    protocol::send_hello(&mut control)?;
    protocol::expect_hello(&mut control).map_err(|e| match e {
        // The child died before exec: its exit status says at which step.
        protocol::FrameError::Closed => BrokerError::Sandbox(child_failure(&running)),
        other => BrokerError::Shim(other),
    })?;
    protocol::write_frame(&mut control, &ShimRequest::Start(Box::new(spec.clone())))?;

    // While the shim builds the mounts. `before_proceed` first: the first sandbox's caller
    // blocks the signals it forwards there, before this process starts any thread.
    let made = before_proceed()?;
    if let Some(s) = &supervisor {
        s.serve_in_background()
            .map_err(|e| BrokerError::Sandbox(format!("starting the zone supervisor: {e}")))?;
    }

    // With network: the shim's listener, from inside the sandbox's network namespace, goes
    // to the zone's proxy; the command starts once the proxy serves.
    let (proxy, ca_pem) = match spec.proxy_port {
        Some(_) => {
            let (proxy, ca_pem) = proxy::hand_over(
                run,
                &mut control,
                &spec,
                req.zone,
                req.profile,
                req.authenticated,
            )?;
            (Some(proxy), ca_pem)
        }
        None => (None, None),
    };
    let proceed = protocol::write_frame(&mut control, &ShimRequest::Proceed { ca_pem });
    // A shim that could not build the sandbox has reported why and exited; the relay
    // reads that report. With network the shim is known to be alive here.
    if proxy.is_some() {
        proceed?;
    }

    abort.running = None;
    abort.supervisor = None;
    drop(abort);
    let sandbox = Sandbox {
        name,
        running,
        supervisor,
        spec,
        proxy,
        limits,
    };
    Ok((sandbox, made))
}

fn child_failure(running: &Running) -> String {
    use nix::sys::wait::WaitStatus;
    match waitpid(Pid::from_raw(running.pid), None) {
        Ok(WaitStatus::Exited(_, code)) => sys::spawn::failed_step(code)
            .map(|s| format!("{s} failed"))
            .unwrap_or_else(|| format!("the shim exited with status {code}")),
        other => format!("the shim ended before it started: {other:?}"),
    }
}

/// Why a sandbox with network cannot start on macOS: its proxy does not run there yet
/// (README, "macOS"). `zone` is None for `run --profile`.
#[cfg_attr(not(target_os = "macos"), allow(dead_code))]
pub fn network_refusal(zone: Option<&str>, profile: &str) -> String {
    let what = match zone {
        Some(z) => format!("zone '{z}' cannot start on macOS: its profile '{profile}' has"),
        None => format!("profile '{profile}' cannot start on macOS: it has"),
    };
    format!("{what} network (network.allow), and wardcell's proxy does not run on macOS yet; use one without network there")
}

/// An entered sandbox (or an approval plugin) the run's end waits for, from its
/// decision until it is dropped, once its completion is audited.
pub struct Entry<'a> {
    run: &'a Run,
    key: u32,
}

impl Entry<'_> {
    /// It has started `process`: the run's end can now end it (at once, if the run is
    /// ending already).
    pub fn attach(&self, process: &sys::Process) {
        let Ok(p) = process.try_clone() else {
            let _ = process.signal(libc::SIGKILL);
            return;
        };
        let run = self.run;
        let mut e = run.entries.lock().unwrap_or_else(|p| p.into_inner());
        if run.is_ending() {
            let _ = p.signal(libc::SIGKILL);
        }
        if let Some(slot) = e.iter_mut().find(|(k, _)| *k == self.key) {
            slot.1 = Some(p);
        }
        drop(e);
        if run.audit.failure().is_some() {
            run.end_unaudited();
        }
    }
}

impl Drop for Entry<'_> {
    fn drop(&mut self) {
        let mut e = self.run.entries.lock().unwrap_or_else(|p| p.into_inner());
        e.retain(|(k, _)| *k != self.key);
        self.run.entries_done.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::network_refusal;

    #[test]
    fn a_sandbox_with_network_is_refused_on_macos_in_one_line_naming_it() {
        assert_eq!(
            network_refusal(Some("push"), "git-push"),
            "zone 'push' cannot start on macOS: its profile 'git-push' has network (network.allow), and wardcell's proxy does not run on macOS yet; use one without network there"
        );
        let m = network_refusal(None, "web");
        assert!(m.starts_with("profile 'web' cannot start on macOS"), "{m}");
        assert!(!m.contains('\n'));
    }
}
