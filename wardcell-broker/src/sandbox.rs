//! Starting one sandbox: the same steps for `wardcell run` and for every `zone enter`.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;

use wardcell_common::limits;
use wardcell_common::plan::SandboxSpec;
use wardcell_common::prepared::Asked;
use wardcell_common::protocol::{self, ShimReport, ShimRequest};

use crate::proxy::{self, Proxy};
use crate::run::Run;
use crate::{peer, sys};
use wardcell_host::error::BrokerError;
use wardcell_host::listener::Listener;
use wardcell_host::wait::{Waited, Watch};
use wardcell_host::{exe, messages};

use serde_json::json;

/// What serves a sandbox's zone socket (its zone's supervisor, supervisor.rs), as the
/// sandbox's life needs it: bound before the spec names its socket, serving once the
/// spec is sent, stopped when the sandbox ends. A trait, so that starting a sandbox does
/// not depend on the supervisor that starts entered ones.
pub trait Served: Send + Sync {
    /// Its socket: its path, and stopping it (wardcell_host::listener).
    fn listener(&self) -> &Listener;
    /// Answer on the socket, in a thread of its own.
    fn serve_in_background(self: Arc<Self>) -> io::Result<()>;
}

/// Binds a sandbox's supervisor: given the sandbox's name and mark (peer.rs).
pub type Supervise<'a> = &'a dyn Fn(&str, peer::Mark) -> io::Result<Arc<dyn Served>>;

/// One sandbox to start.
pub struct Request<'a> {
    /// What its spec is built from.
    pub asked: Asked<'a>,
    /// Its supervisor, in a zone.
    pub supervise: Option<Supervise<'a>>,
    pub stdio: [RawFd; 3],
    /// Signals the command starts ignoring: those its caller ignored (see spawn).
    pub ignored: u64,
}

/// A sandbox that is running.
pub struct Running {
    /// The shim (on macOS, the command it became): killed and reaped if dropped unreaped.
    pub process: sys::Child,
    pub control: UnixStream,
}

/// A started sandbox.
pub struct Sandbox {
    pub name: String,
    pub running: Running,
    pub supervisor: Option<Arc<dyn Served>>,
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
            s.listener().stop();
        }
        self.proxy = None;
    }

    /// The run's first sandbox has ended, and the broker with it once the entries still
    /// running end: as [`Sandbox::retire`], the supervisor's thread left to the exit
    /// (stopped first this way, its `stop` then does nothing). Its shim, if not reaped yet,
    /// is killed and reaped when the sandbox is dropped, before the broker exits: nothing
    /// of the run is left for the caller to reap (a subreaper collected it before).
    pub fn retire_first(&mut self) {
        if let Some(s) = &self.supervisor {
            s.listener().stop_at_exit();
        }
        self.retire();
    }

    /// Wait for it (wardcell_host::wait: signals forwarded, a pty relayed, reports read):
    /// its confinement audited (with `warn`, a kernel that lacks a part of it said once on
    /// stderr), a report that is none audited.
    pub fn wait(&mut self, run: &Run, watch: Watch<'_>, zone: Option<&str>, warn: bool) -> Waited {
        let name = self.name.clone();
        for (limit, value, line) in self.limits.unenforced() {
            let fields = json!({"sandbox": name, "limit": limit, "value": value});
            let _ = run.record("sandbox", "sandbox.limit_unenforced", fields);
            let _ = warn.then(|| wardcell_common::eprintln_line!("{line}"));
        }
        let mut warned = !warn;
        let Running { process, control } = &mut self.running;
        let failed_step = sys::spawn::failed_step;
        let ended = wardcell_host::wait::wait(
            process,
            control,
            watch,
            &mut |r| {
                let ShimReport::Confined {
                    landlock_abi: abi,
                    partial,
                } = r
                else {
                    return;
                };
                let mut fields = json!({"sandbox": name, "landlock_abi": abi, "missing": partial});
                if let Some(zone) = zone {
                    fields["zone"] = zone.into();
                }
                let _ = run.record("sandbox", "sandbox.confined", fields);
                if !partial.is_empty() && !warned {
                    warned = true;
                    wardcell_common::eprintln_line!("{}", messages::kernel_lacks(partial));
                }
            },
            failed_step,
        );
        if let Some(why) = &ended.bad_report {
            let fields = json!({"sandbox": name, "reason": why});
            let _ = run.record("sandbox", "sandbox.bad_report", fields);
        }
        ended
    }

    /// When its time limit ends, counted from now (its command starts).
    pub fn deadline(&self) -> Option<std::time::Instant> {
        self.limits.time().map(|t| std::time::Instant::now() + t)
    }

    /// It has ended: audit each limit it reached; its exit status and, when it did not
    /// run to its end (the time limit ended it, or it did not start), the one-line error.
    pub fn ended(&self, run: &Run, ended: &Waited) -> (i32, Option<String>) {
        for (kind, bound, mechanism, count) in self.limits.reached(ended.timed_out) {
            let (limit, value) = (kind.name(), kind.show(bound.value));
            let fields = json!({"sandbox": self.name, "limit": limit, "value": value, "mechanism": mechanism, "count": count});
            let _ = run.record("sandbox", "sandbox.limit_reached", fields);
        }
        if let Some((code, message)) = self.limits.ended_by_time(ended.timed_out) {
            return (code, Some(message));
        }
        let command = self.spec.argv.first().map_or("", |a| a);
        messages::describe(&ended.outcome, command, sys::spawn::failed_step)
    }
}

/// Stops a half-started sandbox's supervisor unless disarmed (its shim is killed and
/// reaped as its `sys::Child` is dropped).
struct Abort {
    supervisor: Option<Arc<dyn Served>>,
}

impl Drop for Abort {
    fn drop(&mut self) {
        if let Some(s) = &self.supervisor {
            s.listener().stop();
        }
    }
}

/// A sandbox whose namespaces exist and whose shim is starting, not yet given its spec.
/// Dropped, its shim is killed and reaped.
pub struct Spawned(Running);

/// Step 1: new namespaces and the shim. Returns at once; the kernel (and the other core)
/// builds the namespaces and execs the shim while the caller prepares the rest.
pub fn spawn(shim: &exe::Exe, stdio: [RawFd; 3], ignored: u64) -> Result<Spawned, BrokerError> {
    let (ours, theirs) =
        UnixStream::pair().map_err(|e| BrokerError::Sandbox(format!("socketpair: {e}")))?;
    let process = sys::spawn::spawn_sandbox(shim, stdio, theirs.as_raw_fd(), ignored)
        .map_err(|e| BrokerError::Sandbox(sys::spawn::explain_spawn_error(&e)))?;
    let control = ours;
    Ok(Spawned(Running { process, control }))
}

/// Both steps, for a sandbox started from a supervisor thread.
pub fn start(run: &Arc<Run>, req: Request<'_>) -> Result<Sandbox, BrokerError> {
    // Git in the new sandbox would run what a sandbox of this run planted in the
    // repository: no entry while it is there.
    if let Some(first) = run.git_now().first() {
        return Err(BrokerError::Refused(messages::git_code_blocks_entry(first)));
    }
    let spawned = spawn(&run.programs.shim, req.stdio, req.ignored)?;
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
    let mut running = spawned.0;
    let mut abort = Abort { supervisor: None };

    // What its processes carry: how its supervisor will recognise them.
    let (number, pid) = (run.next_number(), running.process.pid());
    let mark = peer::mark(pid, &run.id, number)
        .map_err(|e| BrokerError::Sandbox(format!("reading the sandbox's {}: {e}", peer::MARK)))?;

    // The sandbox prepared when the run started (wardcell_common::prepared), and its
    // limits: its cgroup, if one needs it, with the shim in it before the command.
    let prepared = run
        .plan
        .prepared(req.asked.zone)
        .map_err(BrokerError::Refused)?;
    let cgroup = format!("wardcell-{}-s{number}", run.id);
    let profile = req.asked.profile;
    let machine = &run.plan.machine;
    let limits = limits::Enforced::prepare(&prepared.limits, &profile.name, &cgroup, machine)
        .map_err(BrokerError::Refused)?;
    limits.join(pid).map_err(BrokerError::Sandbox)?;

    // A supervisor, in a zone.
    let name = format!("s{number}");
    let supervisor_failed = |e| BrokerError::Sandbox(format!("starting the zone supervisor: {e}"));
    let supervisor = req.supervise.map(|s| s(&name, mark.clone())).transpose();
    let supervisor = supervisor.map_err(supervisor_failed)?;
    abort.supervisor = supervisor.clone();

    // The spec.
    let socket = supervisor
        .as_ref()
        .map(|s| s.listener().path().to_path_buf());
    // The spec: the sandbox prepared when the run started, with the request's command,
    // directory and environment (wardcell_common::prepared).
    let prepared = run
        .plan
        .prepared(req.asked.zone)
        .map_err(BrokerError::Refused)?;
    let spec = prepared.spec(&run.plan, &req.asked, socket.as_deref());
    let mut spec = spec.map_err(BrokerError::Refused)?;
    spec.trace = wardcell_common::trace::spec(&run.id);
    (spec.processes, spec.pid_max) = (limits.nproc(), limits.pid_max());
    peer::stamp(&mut spec, &mark);
    // What its view holds, watched before the shim opens anything (events queue until read).
    run.guard.hold(&spec.held)?;
    tracing::debug!(zone = req.asked.zone, profile = %profile.name, "sandbox spec sent");

    // Hand it over.
    let control = &mut running.control;
    protocol::send_hello(control)?;
    protocol::expect_hello(control).map_err(|e| match e {
        // The child died before exec: its exit status says at which step.
        protocol::FrameError::Closed => {
            let status = running.process.wait();
            BrokerError::Sandbox(messages::shim_failed(status, sys::spawn::failed_step))
        }
        other => BrokerError::Shim(other),
    })?;
    let control = &mut running.control;
    protocol::write_frame(control, &ShimRequest::Start(Box::new(spec.clone())))?;

    // While the shim builds the mounts. `before_proceed` first: the first sandbox's caller
    // blocks the signals it forwards there, before this process starts any thread.
    let made = before_proceed()?;
    if let Some(s) = &supervisor {
        s.clone().serve_in_background().map_err(supervisor_failed)?;
    }

    // With network: the shim's listener, from inside the sandbox's network namespace, goes
    // to the zone's proxy; the command starts once the proxy serves.
    let handed = spec
        .proxy_port
        .map(|_| proxy::hand_over(run, control, &spec, &req.asked));
    let (proxy, ca_pem) = handed
        .transpose()?
        .map_or((None, None), |(p, ca)| (Some(p), ca));
    let proceed = protocol::write_frame(control, &ShimRequest::Proceed { ca_pem });
    // A shim that could not build the sandbox has reported why and exited; the relay
    // reads that report. With network the shim is known to be alive here.
    if proxy.is_some() {
        proceed?;
    }

    abort.supervisor = None;
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};
    use wardcell_host::wait::Outcome;

    #[test]
    fn a_shim_that_sends_what_is_no_report_is_ended() {
        use std::io::Write;
        let mut child = std::process::Command::new("/bin/sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id() as libc::pid_t;
        let (mut control, mut theirs) = UnixStream::pair().unwrap();
        let mut process = sys::Child::new(pid, sys::Process::of_child(pid).unwrap());
        // A frame whose length says 3 bytes of a message no report starts with.
        theirs.write_all(&[3, 0, 0, 0, 0xff, 0xff, 0xff]).unwrap();
        let started = Instant::now();
        let watch = Watch::default();
        let step = sys::spawn::failed_step;
        let ended = wardcell_host::wait::wait(&mut process, &mut control, watch, &mut |_| {}, step);
        assert!(ended.bad_report.is_some(), "{:?}", ended.bad_report);
        assert!(started.elapsed() < Duration::from_secs(10));
        assert_eq!(ended.outcome, Outcome::Finished(128 + 9));
        let _ = child.try_wait();
    }
}
