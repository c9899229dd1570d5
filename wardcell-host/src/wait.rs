//! Waiting for a sandbox: the signals the broker took over forwarded (an ending one
//! with a grace, then SIGKILL), the first sandbox's stops told to `wardcell run`'s
//! terminal keeper, the `zone enter` caller and the time limit watched, and the shim's reports read until it is gone.
//! It returns what the reports and the shim's status add up to ([`Outcome::of`]: what
//! the shim reports is untrusted, and at most its exit status is relayed).

use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags};
use nix::sys::signal::Signal;
use nix::sys::wait::{waitpid, WaitPidFlag};
use nix::unistd::Pid;

use wardcell_common::protocol::{self, FrameError, ShimReport};
use wardcell_common::terminal;

pub use crate::messages::Outcome;
use crate::process::Child;
pub use crate::process::Watched;
use crate::terminal::Keeper;

/// Signals taken over, read from a descriptor (`crate::signals::Signals` on Linux).
pub trait Taken: AsFd {
    /// The next signal taken, if one is waiting.
    fn next(&self) -> Option<i32>;
}

/// Signals that end a run: forwarded, then SIGCONT (a stopped command would never see
/// them), then, if the sandbox is still there after [`GRACE`], SIGKILL.
const ENDING: &[i32] = &[libc::SIGTERM, libc::SIGHUP, libc::SIGINT];

/// How long a sandbox has to end after an ending signal (docs/COMMANDS.md, on the terminal).
pub const GRACE: Duration = Duration::from_secs(5);

/// What to watch besides the sandbox itself.
#[derive(Default)]
pub struct Watch<'a> {
    /// Signals the broker forwards (and SIGCHLD).
    pub signals: Option<&'a dyn Taken>,
    /// A child of the broker to reap when it exits (the client's plan writer), on SIGCHLD.
    pub reap: Option<Pid>,
    /// `wardcell run`'s terminal keeper, which relays the first sandbox's pty: told when
    /// the command stops, and when the sandbox is gone.
    pub keeper: Option<&'a Keeper>,
    /// The `zone enter` connection: when the caller goes away, the sandbox is ended.
    pub caller: Option<BorrowedFd<'a>>,
    /// The time limit's end: then the sandbox is ended as by SIGTERM to `wardcell run`.
    pub deadline: Option<Instant>,
}

/// How the wait ended.
pub struct Waited {
    /// What the shim's reports and its own status (when it was reaped) add up to.
    pub outcome: Outcome,
    /// The caller went away first, and the sandbox was ended for it.
    pub caller_gone: bool,
    /// The shim sent something that is not a report: reading stopped there, and the
    /// sandbox was ended.
    pub bad_report: Option<String>,
    /// The time limit ended it.
    pub timed_out: bool,
}

/// Relay until the sandbox ends: `shim` is its shim, `control` the socket its reports
/// come on; `failed_step` names the shim's own exit statuses (see [`Outcome::of`]).
pub fn wait<W: Watched>(
    shim: &mut Child<W>,
    control: &mut UnixStream,
    watch: Watch<'_>,
    on_report: &mut dyn FnMut(&ShimReport),
    failed_step: fn(i32) -> Option<&'static str>,
) -> Waited {
    let Watch {
        signals,
        keeper,
        caller,
        reap,
        mut deadline,
    } = watch;
    let mut reports: Vec<ShimReport> = Vec::new();
    let mut open = Open {
        control: true,
        caller: caller.is_some(),
    };
    let mut caller_gone = false;
    let mut bad_report: Option<String> = None;
    let mut kill_at: Option<Instant> = None;
    let mut timed_out = false;
    let status = loop {
        let wake = kill_at.into_iter().chain(deadline).min();
        let [child_ready, sig_ready, control_ready, caller_ready] =
            match poll_ready(shim.watch(), control, signals, caller, &open, wake) {
                Ok(r) => r,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => break None,
            };
        if kill_at.is_some_and(|t| Instant::now() >= t) {
            // The grace is over: the sandbox ends now, whatever it does with signals.
            kill_at = None;
            let _ = shim.signal(libc::SIGKILL);
        }
        if deadline.is_some_and(|t| Instant::now() >= t) {
            deadline = None;
            timed_out = true;
            end(shim.watch(), libc::SIGTERM, &mut kill_at);
        }
        if caller_ready {
            // The caller sends nothing after its request: readable means gone (or
            // misbehaving, which ends the entry the same way).
            open.caller = false;
            caller_gone = true;
            let _ = shim.signal(libc::SIGKILL);
        }
        if let (true, Some(signals)) = (sig_ready, signals) {
            on_signals(signals, shim.watch(), reap, &mut kill_at);
        }
        if control_ready {
            match read_report(control, keeper, on_report, &mut reports) {
                // The command's status is known: finish now rather than wait for the
                // namespaces to be torn down (the keeper drains the pty meanwhile). What
                // is left of the sandbox is being killed by its init's exit, and dies
                // with the broker in any case.
                Ok(Some(true)) => {
                    open.control = false;
                    break None;
                }
                Ok(Some(_)) => {}
                Ok(None) => open.control = false,
                // Not a report: the shim is not speaking the protocol, and nothing it
                // says after can be believed. The sandbox is ended (PROTOCOL 4.2).
                Err(e) => {
                    bad_report = Some(e);
                    open.control = false;
                    let _ = shim.signal(libc::SIGKILL);
                }
            }
        }
        if child_ready {
            break shim.wait();
        }
    };

    // The command is gone: what its sandbox wrote is all there will be. On Linux every
    // process of that sandbox is gone with it, and the pty ends at once unless a sandbox
    // entered from it (`zone enter`) still holds it; on macOS one the command left behind
    // may. So the keeper's drain stops once the pty stays quiet: what such a process
    // writes later is not relayed (entries are killed when the run's first sandbox ends).
    if let Some(k) = keeper {
        k.finish();
    }
    if open.control {
        read_remaining(control, on_report, &mut reports, &mut bad_report);
    }
    Waited {
        outcome: Outcome::of(&reports, status, failed_step),
        caller_gone,
        bad_report,
        timed_out,
    }
}

/// The most reports kept of one shim (besides its stops, which are never kept).
const MAX_REPORTS: usize = 16;

/// One report from the shim, handed to `on_report` and kept (a stop told to the keeper):
/// `Some(true)` when it is the command's end, `None` when the control socket closed,
/// `Err` when what came is no report.
fn read_report(
    control: &mut UnixStream,
    keeper: Option<&Keeper>,
    on_report: &mut dyn FnMut(&ShimReport),
    reports: &mut Vec<ShimReport>,
) -> Result<Option<bool>, String> {
    match protocol::read_frame::<ShimReport>(control) {
        Ok(r) => {
            on_report(&r);
            if let ShimReport::Stopped { .. } = &r {
                // Ctrl-Z: the keeper stops as the command did (only for a stop the user
                // asked for), and has it continued (SIGCONT, forwarded). This process
                // never stops. Not kept: a command can stop as often as it likes.
                if let Some(k) = keeper {
                    k.stopped();
                }
                return Ok(Some(false));
            }
            let last = matches!(r, ShimReport::Exited { .. } | ShimReport::Signaled { .. });
            // The few reports a sandbox's end is told from; more is none of the shim's.
            if reports.len() >= MAX_REPORTS {
                return Err(format!("more than {MAX_REPORTS} reports"));
            }
            reports.push(r);
            Ok(Some(last))
        }
        Err(FrameError::Closed) => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

/// The shim is gone: its reports until the control socket closes.
fn read_remaining(
    control: &mut UnixStream,
    on_report: &mut dyn FnMut(&ShimReport),
    reports: &mut Vec<ShimReport>,
    bad_report: &mut Option<String>,
) {
    loop {
        match protocol::read_frame::<ShimReport>(control) {
            Ok(r) => {
                on_report(&r);
                reports.push(r);
            }
            Err(FrameError::Closed) => return,
            Err(e) => return *bad_report = Some(e.to_string()),
        }
    }
}

/// Which of the optional descriptors [`wait`] still watches.
struct Open {
    control: bool,
    caller: bool,
}

/// Poll once (until the grace's end, if one runs): which are ready, in the order child,
/// signals, control, caller.
fn poll_ready(
    process: &dyn Watched,
    control: &UnixStream,
    signals: Option<&dyn Taken>,
    caller: Option<BorrowedFd<'_>>,
    open: &Open,
    kill_at: Option<Instant>,
) -> nix::Result<[bool; 4]> {
    let mut fds = vec![PollFd::new(process.as_fd(), PollFlags::POLLIN)];
    let mut idx = [0, usize::MAX, usize::MAX, usize::MAX];
    let watched = [
        signals.map(|s| s.as_fd()),
        open.control.then(|| control.as_fd()),
        caller.filter(|_| open.caller),
    ];
    for (i, fd) in watched.into_iter().enumerate() {
        if let Some(fd) = fd {
            idx[i + 1] = fds.len();
            fds.push(PollFd::new(fd, PollFlags::POLLIN));
        }
    }
    poll(&mut fds, terminal::timeout_until(kill_at))?;
    Ok(idx.map(|i| {
        fds.get(i)
            .and_then(|f| f.revents())
            .is_some_and(|r| !r.is_empty())
    }))
}

/// Handle the signals taken: forward them (an ending one with SIGCONT and the grace),
/// reap the plan writer.
fn on_signals(
    signals: &dyn Taken,
    run: &dyn Watched,
    reap: Option<Pid>,
    kill_at: &mut Option<Instant>,
) {
    while let Some(sig) = signals.next() {
        if sig == Signal::SIGCHLD as i32 {
            // Never forwarded. The sandbox's own end is watched through its process.
            if let Some(pid) = reap {
                let _ = waitpid(pid, Some(WaitPidFlag::WNOHANG));
            }
        } else if ENDING.contains(&sig) {
            end(run, sig, kill_at);
        } else {
            let _ = run.signal(sig);
        }
    }
}

/// Send `sig`, then SIGCONT, and start the grace (if it is not running already).
fn end(run: &dyn Watched, sig: i32, kill_at: &mut Option<Instant>) {
    let _ = run.signal(sig);
    let _ = run.signal(libc::SIGCONT);
    kill_at.get_or_insert_with(|| Instant::now() + GRACE);
}
