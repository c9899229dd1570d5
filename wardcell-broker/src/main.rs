//! wardcell-broker: the trusted part of a run, small enough to audit on its own.
//!
//! `wardcell run` starts this binary at once, in a session of its own, and stays as its
//! terminal keeper (fd 4: it relays the command's pty and does job control with the
//! user's shell, so nothing stops this process); a copy of the client (the plan writer)
//! resolves the configuration into a plan and sends it on fd 3. The broker never parses
//! TOML or command lines and never reads a secret. It takes these steps:
//!
//! 1. open wardcell-shim (beside itself: its own build's), decide whether the
//!    command gets a pty (when any of stdin, stdout, stderr is a terminal), start the first
//!    sandbox's namespaces and shim at once (sandbox::spawn), while the client's plan
//!    writer is still resolving the plan;
//! 2. take the plan from fd 3 (a Hello, then exactly one `Launch::Run`), and open every
//!    other program the run may start (wardcell_host::exe: each started from that
//!    descriptor, never by path);
//! 3. make the run id, the run's directory (0700), the directories every sandbox masks,
//!    and the run's audit log (written by the run's helper, `wardcell-shim --helper`,
//!    started meanwhile: wardcell_host::audit, which also holds what the views hold:
//!    wardcell_host::guard);
//! 4. complete the sandbox (sandbox::complete): its supervisor's socket when it is in a
//!    zone, its spec, then, while the shim builds the mounts, audit the run's start,
//!    take over the signals it forwards (before any thread starts), start the
//!    supervisor (supervisor.rs answers `zone list` and decides `zone enter`) and, with
//!    network, the proxy; then tell the shim to proceed;
//! 5. hand the pty to the keeper, wait until the sandbox ends, have the keeper restore the
//!    terminal, audit the end, remove the run's directory, and exit with the command's
//!    status (128+N for a signal).
//!
//! The same steps, and every decision, on Linux and macOS: what differs is in `sys/linux`
//! and `sys/macos` (starting the shim: new namespaces, or a plain child whose shim applies
//! a Seatbelt profile; watching a child: pidfd or kqueue; taking signals: signalfd or
//! kqueue) and in `peer` (a sandbox's processes recognised by their network namespace,
//! or by their Seatbelt identity). macOS has no proxy yet: a sandbox with network is
//! refused there (proxy_macos.rs). docs/MACOS.md.
//!
//! What is done here that decides nothing (the pty, waiting, helper processes,
//! run directories, the words of messages) is wardcell-host's: docs/AUDITING.md says
//! what its API promises.

// `unsafe` only in `sys`, where every use says why it is sound.
#![deny(unsafe_code)]

mod chain;
mod peer;
// macOS: no proxy yet; a sandbox with network is refused there (proxy_macos.rs).
#[cfg_attr(target_os = "macos", path = "proxy_macos.rs")]
mod proxy;
mod run;
mod sandbox;
mod session;
mod supervisor;
#[allow(unsafe_code)]
mod sys;

// Host plumbing that decides nothing (wardcell-host; docs/AUDITING.md).
use wardcell_host::{error, launch, messages, rundir, runid, signals};

use std::fs;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use nix::sys::wait::{waitpid, WaitPidFlag};
use nix::unistd::Pid;
use serde_json::json;

use wardcell_common::plan::Plan;
use wardcell_common::text::shown;
use wardcell_common::trace;

use crate::run::Run;
use crate::supervisor::Supervisor;
use error::BrokerError;
use wardcell_host::audit::AuditLog;
use wardcell_host::exe::{Exe, Programs};
use wardcell_host::guard::Guard;
use wardcell_host::terminal::{Keeper, Terminal};
use wardcell_host::wait::Watch;

fn main() {
    // 0. Tracing, when WARDCELL_LOG asks (a plan from `run -v` turns it on later).
    if let Some(level) = trace::from_env() {
        trace::install("wardcell-broker", level);
    }
    let writer = match launch::args(std::env::args().skip(1)) {
        Ok(launch::Args::Version) => {
            println!("wardcell-broker {}", env!("CARGO_PKG_VERSION"));
            return;
        }
        Ok(launch::Args::Plan) => None,
        // Only a child of this process (the client forked it before exec) can be the
        // writer; peek without reaping it.
        Ok(launch::Args::Writer(pid)) if sys::is_child(pid) => Some(Pid::from_raw(pid)),
        Ok(launch::Args::Writer(pid)) => fail(BrokerError::Launch(format!(
            "--plan-writer \"{pid}\" is not a child of this process"
        ))),
        Err(e) => fail(e),
    };
    // Started by `wardcell run`: its terminal keeper (the client, this process's parent)
    // is on fd 4, and holds the caller's terminal (wardcell_host::terminal::Keeper).
    let keeper = writer.map(|_| Keeper::take(sys::inherited_socket).unwrap_or_else(|e| fail(e)));
    let code = run(writer, keeper.as_ref()).unwrap_or_else(|e| {
        wardcell_common::eprintln_line!("error: {}", shown(&e.to_string()));
        1
    });
    if let Some(writer) = writer {
        // Long gone by now; never wait on it.
        let _ = waitpid(writer, Some(WaitPidFlag::WNOHANG));
    }
    std::process::exit(code)
}

fn run(writer: Option<Pid>, keeper: Option<&Keeper>) -> Result<i32, BrokerError> {
    // 0. The run id first: every trace line carries it.
    let run_id = runid::new().map_err(|e| BrokerError::Launch(format!("/dev/urandom: {e}")))?;
    trace::set_run(&run_id);
    tracing::debug!(writer = writer.map(|p| p.as_raw()), "broker started");
    // 1. Steps 2 and 3 (the plan, then the run's directories and log) in a thread of
    //    their own, while this one starts the first sandbox: clone3 builds the new
    //    namespaces in the calling thread, most of a millisecond the plan no longer waits
    //    behind. This thread spawns (the shim's death signal follows the thread that
    //    started it) and joins the other before any signal is taken over.
    let shim = launch::shim();
    let scribe = launch::copy(&shim);
    let planner = std::thread::Builder::new()
        .name("plan".into())
        .stack_size(PLAN_STACK)
        .spawn({
            // Without a shim the run is not started, but the plan is still taken: the
            // writer then ends as usual, and the shim's line is the only one.
            let run_id = run_id.clone();
            let shim = launch::copy(&shim);
            move || take_and_prepare(writer, run_id, shim)
        })
        .map_err(|e| BrokerError::Launch(format!("starting a thread: {e}")))?;
    // Signals whoever started us ignores: the command starts ignoring them too, as after
    // an exec, and they are not forwarded (or taken over) either.
    let ignored = sys::ignored_signals();
    let started = shim.and_then(|shim| {
        let terminal = Terminal::for_stdio(sys::inherited_tty, keeper.is_some())?;
        let spawned = sandbox::spawn(&shim, terminal.stdio(sys::closed_at_start()), ignored)?;
        Ok((terminal, spawned))
    });
    // The run's helper (its audit writer; its guard on a socket at its fd 3), from this
    // thread (it lives as long as the run) while the plan is still being read.
    let (guard, theirs) = Guard::pair();
    let audit = AuditLog::start(&|cmd| match (&scribe, &theirs) {
        (Ok(shim), Some(fd)) => sys::spawn_helper(shim, cmd, fd.as_fd()),
        (Err(e), _) => Err(std::io::Error::other(e.clone())),
        (_, None) => Err(std::io::Error::other("no socket for the run's guard")),
    });
    drop(theirs);
    let helpers = (audit, guard);
    let prepared = planner
        .join()
        .unwrap_or_else(|_| Err(Some(BrokerError::Launch("reading the plan failed".into()))));
    let (run, (terminal, spawned)) = match (prepared, started) {
        (Ok(prepared), Ok(started)) => (Arc::new(prepared.open(run_id, helpers)?), started),
        // No sandbox, so no run: its directory does not stay, and no log was made.
        (Ok(prepared), Err(e)) => {
            let _ = fs::remove_dir_all(&prepared.dir);
            return Err(e);
        }
        (Err(why), started) => {
            // The sandbox started for it is killed and reaped.
            drop(started);
            return match (why, writer) {
                // The writer said why (or printed help): end as it did, quietly.
                (None, Some(writer)) => Ok(launch::exit_status_of(writer)),
                (None, None) => Err(BrokerError::Launch("no plan on fd 3".into())),
                (Some(e), _) => Err(e),
            };
        }
    };
    let result = run_first_sandbox(&run, spawned, (terminal, keeper), writer, ignored);
    // Empty by now (each supervisor removed its socket): one rmdir, or all that is left.
    if fs::remove_dir(&run.dir).is_err() {
        let _ = fs::remove_dir_all(&run.dir);
    }
    result
}

/// The plan thread's stack (the plan is decoded there; the main thread's is the default 8 MiB).
const PLAN_STACK: usize = 1024 * 1024;

/// The run's audit writer and guard (wardcell_host::audit, wardcell_host::guard).
type Helpers = (AuditLog<sys::Process>, Guard);

/// What a run is made of before its log exists.
struct Prepared {
    plan: Plan,
    dir: PathBuf,
    programs: Programs,
    host_env: Vec<(String, String)>,
}

impl Prepared {
    /// The run, once its log is created (else its directory is removed).
    fn open(self, run_id: String, helpers: Helpers) -> Result<Run, BrokerError> {
        rundir::open_log(&helpers.0, &self.plan, &run_id, &self.dir)?;
        let Prepared {
            plan,
            dir,
            programs,
            host_env,
        } = self;
        Ok(Run::new(plan, run_id, dir, programs, helpers, host_env))
    }
}

/// Steps 2 and 3: the plan from fd 3, then the run's directories. `Err(None)`: the writer
/// closed fd 3 without a plan.
fn take_and_prepare(
    writer: Option<Pid>,
    run_id: String,
    shim: Result<Exe, String>,
) -> Result<Prepared, Option<BrokerError>> {
    let fd = sys::inherited_socket(sys::LAUNCH_FD)
        .map_err(|e| Some(BrokerError::Launch(e.to_string())))?;
    let mut plan = launch::take_plan(fd).map_err(Some)?.ok_or(None)?;
    launch::trace_plan(&mut plan, writer);
    let programs = Programs::open(&plan, shim).map_err(Some)?;
    // The environment `wardcell run` started in, read once for the whole run.
    let host_env = wardcell_common::envrules::text_vars();
    // Every view pins what the run starts (the plan writer found the same programs).
    programs
        .pinned_in(&plan.pinned)
        .map_err(|e| Some(BrokerError::Refused(e)))?;
    rundir::prepare_own_dirs(&plan).map_err(Some)?;
    let dir = rundir::make_run_dir(&plan.dirs.runtime, &run_id).map_err(Some)?;
    Ok(Prepared {
        plan,
        dir,
        programs,
        host_env,
    })
}

/// The launch was wrong: one line, status 1.
fn fail(e: BrokerError) -> ! {
    wardcell_common::eprintln_line!("error: {e}");
    std::process::exit(1)
}

fn run_first_sandbox(
    run: &Arc<Run>,
    spawned: sandbox::Spawned,
    (terminal, keeper): (Terminal, Option<&Keeper>),
    writer: Option<Pid>,
    ignored: u64,
) -> Result<i32, BrokerError> {
    let (mut sb, signals) = start_first(run, spawned, &terminal, writer, ignored)?;
    run.set_first(sb.running.process.watch());
    // 6. Wait for the end (or the time limit's): signals forwarded, its pty relayed to
    //    the caller's terminal by the keeper, its confinement audited (and a kernel that
    //    lacks a part of it said once), a bad report audited.
    // Only with a pty has the keeper anything to do with the command (without one, a
    // command stopped stays stopped until continued, as under a shell).
    let keeper = keeper.filter(|_| terminal.has_pty());
    if terminal.hand_to(keeper).is_err() {
        let _ = sb.running.process.signal(libc::SIGKILL); // no one to relay its terminal
    }
    let watch = Watch {
        signals: Some(&signals),
        reap: writer,
        keeper,
        caller: None,
        deadline: sb.deadline(),
    };
    let ended = sb.wait(run, watch, None, true);
    // The run's end: the first sandbox retired, what it ended with audited, entered
    //    sandboxes ended, the repository's new code and the refusals said on stderr, and
    //    the run's status.
    sb.retire_first();
    let (code, message) = sb.ended(run, &ended);
    run.end_entries();
    run.guard.end();
    // Nothing of the first sandbox is left to change the repository during its last look.
    let _ = sb.running.process.signal(libc::SIGKILL);
    sb.running.process.wait();
    for line in run.check_git(&sb.name) {
        wardcell_common::eprintln_line!("{}", messages::git_code_appeared(&line, &run.plan.cwd));
    }
    run.end_git_watch();
    if let Some(line) = messages::refusals(run.refused.load(Ordering::Relaxed), &run.id) {
        wardcell_common::eprintln_line!("{line}");
    }
    let fields = json!({"exit_status": code, "error": message});
    let _ = run.record("run", "run.finished", fields);
    if let Some(e) = run.audit.failure().map(BrokerError::Audit) {
        return Err(e);
    }
    // The sandbox that could not be built is the run's error; the command's own failure
    // is said, and its status is the run's.
    let Some(m) = message else { return Ok(code) };
    if ended.outcome.unbuilt() {
        return Err(BrokerError::Refused(m));
    }
    wardcell_common::eprintln_line!("error: {}", shown(&m));
    Ok(code)
}

/// Steps 4 and 5 of a run: the first sandbox completed (supervisor, spec, handover);
/// while the shim builds the mounts, the run's start is audited, signals are taken over,
/// and stale runs are swept.
fn start_first(
    run: &Arc<Run>,
    spawned: sandbox::Spawned,
    terminal: &Terminal,
    writer: Option<Pid>,
    ignored: u64,
) -> Result<(sandbox::Sandbox, sys::Signals), BrokerError> {
    let plan = &run.plan;
    let (zone, profile) = plan
        .start_profile()
        .ok_or_else(|| BrokerError::Launch("the plan has no zone to start in".into()))?;
    let log_started = || {
        let overrides = (!plan.overrides.is_empty()).then_some(&plan.overrides);
        let uid = nix::unistd::getuid().as_raw();
        // `trial`: `wardcell doctor`'s trial run (`--plan`), which `logs list` leaves out.
        let fields = json!({
            "zone": zone, "profile": profile.name, "command": plan.command, "cwd": plan.cwd,
            "config": plan.source, "overrides": overrides, "uid": uid, "trial": writer.is_none(),
        });
        run.record("run", "run.started", fields)
    };
    let audit_failed = || run.audit.failure().map(BrokerError::Audit);
    let mut logged = false;
    let before_proceed = || {
        logged = true;
        log_started().map_err(|e| audit_failed().unwrap_or(BrokerError::Audit(e.to_string())))?;
        // Forwarded signals (and SIGCHLD), read from a descriptor.
        let signals = sys::Signals::take(&signals::to_take(ignored))
            .map_err(|e| BrokerError::Sandbox(e.to_string()))?;
        // The run's repository watched by a process of its own, from this thread (it
        // lives as long as the run); what the views hold watched from a thread that
        // inherits the blocked signals, and the repository looked at every second (what
        // appears is audited then).
        run.watch_git();
        let tick = |r: &Run| drop(r.check_git("run"));
        run.guard.start(Arc::downgrade(run), Run::lost, tick)?;
        // The plan writer exits right after sending the plan. Reaped here if it has, else
        // on the SIGCHLD the relay now reads: never a zombie for the whole run.
        if let Some(writer) = writer {
            let _ = waitpid(writer, Some(WaitPidFlag::WNOHANG));
        }
        Ok(signals)
    };
    // In a zone, its supervisor: the chain is that zone alone.
    let chain = Vec::from_iter(zone.map(str::to_string));
    let supervise = Supervisor::binder(run, chain.clone());
    let started = sandbox::complete(
        run,
        spawned,
        sandbox::Request {
            asked: wardcell_common::prepared::Asked {
                profile,
                zone,
                chain: &chain,
                argv: &plan.command,
                cwd: plan.cwd.clone(),
                env: run.host_env.clone(),
                pty: terminal.has_pty(),
                authenticated: plan.start_authenticated(),
            },
            supervise: zone.is_some().then_some(&supervise),
            stdio: terminal.stdio(sys::closed_at_start()),
            ignored,
        },
        before_proceed,
    );
    started.map_err(|e| {
        if !logged {
            let _ = log_started();
        }
        // Nothing is held any more: the helper's end (after the log's) is no loss.
        run.guard.end();
        let fields = json!({"exit_status": 1, "error": e.to_string()});
        let _ = run.record("run", "run.finished", fields);
        audit_failed().unwrap_or(e)
    })
}
