//! Waiting for a sandbox: signals forwarded, a pty relayed, reports read, status returned.

use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags};
use nix::sys::signal::Signal;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use wardcell_common::protocol::{self, FrameError, ShimReport};
use wardcell_common::terminal;

use crate::sys;

/// A sandbox that is running.
pub struct Running {
    pub pid: libc::pid_t,
    /// Readable once the shim (on macOS, the command it became) has exited.
    pub process: sys::Process,
    pub control: UnixStream,
}

impl Running {
    /// Wait for the shim to be gone (after [`wait`] returned early on its report).
    pub fn reap(&self) {
        let _ = waitpid(Pid::from_raw(self.pid), None);
    }
}

pub use wardcell_host::messages::Outcome;
pub use wardcell_host::terminal::PtyRelay;

/// Signals that end a run: forwarded, then SIGCONT (a stopped command would never see
/// them), then, if the sandbox is still there after [`GRACE`], SIGKILL.
const ENDING: &[i32] = &[libc::SIGTERM, libc::SIGHUP, libc::SIGINT];

/// How long a sandbox has to end after an ending signal (README, on the terminal).
pub const GRACE: Duration = Duration::from_secs(5);

/// What to watch besides the sandbox itself.
#[derive(Default)]
pub struct Watch<'a> {
    /// Signals the broker forwards (and SIGWINCH when a pty is relayed, and SIGCHLD).
    pub signals: Option<&'a sys::Signals>,
    /// A child of the broker to reap when it exits (the client's plan writer), on SIGCHLD.
    pub reap: Option<Pid>,
    /// The first sandbox's pty, relayed to the caller's terminal.
    pub pty: Option<PtyRelay<'a>>,
    /// The `zone enter` connection: when the caller goes away, the sandbox is ended.
    pub caller: Option<BorrowedFd<'a>>,
    /// The time limit's end: then the sandbox is ended as by SIGTERM to `wardcell run`.
    pub deadline: Option<Instant>,
}

/// How the wait ended.
pub struct Ended {
    pub outcome: Outcome,
    /// The caller went away first, and the sandbox was ended for it.
    pub caller_gone: bool,
    /// The shim sent something that is not a report: reading stopped there, and the
    /// sandbox was ended.
    pub bad_report: Option<String>,
    /// The time limit ended it.
    pub timed_out: bool,
}

/// Relay until the sandbox ends.
pub fn wait(run: &mut Running, watch: Watch<'_>, on_report: &mut dyn FnMut(&ShimReport)) -> Ended {
    let Watch {
        signals,
        mut pty,
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
    let mut buf = vec![0u8; 16 * 1024];
    let status = loop {
        let wake = kill_at.into_iter().chain(deadline).min();
        let [child_ready, sig_ready, control_ready, caller_ready, stdin_ready, master_ready] =
            match poll_ready(run, signals, caller, pty.as_ref(), &open, wake) {
                Ok(r) => r,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => break None,
            };
        if kill_at.is_some_and(|t| Instant::now() >= t) {
            // The grace is over: the sandbox ends now, whatever it does with signals.
            kill_at = None;
            let _ = run.process.signal(libc::SIGKILL);
        }
        if deadline.is_some_and(|t| Instant::now() >= t) {
            deadline = None;
            timed_out = true;
            end(run, libc::SIGTERM, &mut kill_at);
        }
        if caller_ready {
            // The caller sends nothing after its request: readable means gone (or
            // misbehaving, which ends the entry the same way).
            open.caller = false;
            caller_gone = true;
            let _ = run.process.signal(libc::SIGKILL);
        }
        if let (true, Some(signals)) = (sig_ready, signals) {
            on_signals(signals, run, pty.as_mut(), reap, &mut kill_at);
        }
        if control_ready {
            match protocol::read_frame::<ShimReport>(&mut run.control) {
                Ok(r) => {
                    on_report(&r);
                    if let (ShimReport::Stopped { .. }, Some(p)) = (&r, pty.as_mut()) {
                        // Ctrl-Z: this process stops as the command did, and when it
                        // is continued, continues the command.
                        p.suspend();
                        let _ = run.process.signal(libc::SIGCONT);
                    }
                    let last = matches!(r, ShimReport::Exited { .. } | ShimReport::Signaled { .. });
                    reports.push(r);
                    // The command's status is known and there is no pty output to
                    // drain: finish now rather than wait for the namespaces to be torn
                    // down. What is left of the sandbox is being killed by its init's
                    // exit, and dies with the broker in any case.
                    if last && pty.is_none() {
                        open.control = false;
                        break None;
                    }
                }
                Err(FrameError::Closed) => open.control = false,
                // Not a report: the shim is not speaking the protocol, and nothing it
                // says after can be believed. The sandbox is ended (PROTOCOL 4.2).
                Err(e) => {
                    bad_report = Some(e.to_string());
                    open.control = false;
                    let _ = run.process.signal(libc::SIGKILL);
                }
            }
        }
        if let Some(p) = pty.as_mut() {
            // The caller's terminal hung up: the command gets the hangup a terminal gives.
            if stdin_ready && !p.relay_input(&mut buf) {
                end(run, libc::SIGHUP, &mut kill_at);
            }
            if master_ready {
                p.relay_output(&mut buf);
            }
        }
        if child_ready {
            break waitpid(Pid::from_raw(run.pid), None).ok();
        }
    };

    // The shim is gone: what its sandbox wrote is all there will be. On Linux every
    // process of that sandbox is gone with it, and the pty ends at once unless a sandbox
    // entered from it (`zone enter`) still holds it; on macOS one the command left behind
    // may. So the drain stops once the pty stays quiet: what such a process writes later
    // is not relayed (entries are killed when the run's first sandbox ends).
    if let Some(p) = pty.as_mut() {
        p.finish();
    }
    if open.control {
        read_remaining(&mut run.control, on_report, &mut reports, &mut bad_report);
    }
    Ended {
        outcome: outcome(&reports, status, sys::spawn::failed_step),
        caller_gone,
        bad_report,
        timed_out,
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
/// signals, control, caller, stdin, master.
fn poll_ready(
    run: &Running,
    signals: Option<&sys::Signals>,
    caller: Option<BorrowedFd<'_>>,
    pty: Option<&PtyRelay<'_>>,
    open: &Open,
    kill_at: Option<Instant>,
) -> nix::Result<[bool; 6]> {
    let mut fds = vec![PollFd::new(run.process.as_fd(), PollFlags::POLLIN)];
    let mut idx = [
        0,
        usize::MAX,
        usize::MAX,
        usize::MAX,
        usize::MAX,
        usize::MAX,
    ];
    let watched = [
        signals.map(|s| s.as_fd()),
        open.control.then(|| run.control.as_fd()),
        caller.filter(|_| open.caller),
        pty.and_then(|p| p.input()),
        pty.and_then(|p| p.master()),
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
/// copy the window size, reap the plan writer.
fn on_signals(
    signals: &sys::Signals,
    run: &Running,
    mut pty: Option<&mut PtyRelay<'_>>,
    reap: Option<Pid>,
    kill_at: &mut Option<Instant>,
) {
    while let Some(sig) = signals.next() {
        if sig == Signal::SIGWINCH as i32 {
            if let Some(p) = &pty {
                p.window_changed();
            }
        } else if sig == Signal::SIGCHLD as i32 {
            // Never forwarded. The sandbox's own end is watched through its process.
            if let Some(pid) = reap {
                let _ = waitpid(pid, Some(WaitPidFlag::WNOHANG));
            }
        } else {
            if sig == libc::SIGCONT {
                if let Some(p) = pty.as_mut() {
                    p.resume();
                }
            }
            if ENDING.contains(&sig) {
                end(run, sig, kill_at);
            } else {
                let _ = run.process.signal(sig);
            }
        }
    }
}

/// Send `sig`, then SIGCONT, and start the grace (if it is not running already).
fn end(run: &Running, sig: i32, kill_at: &mut Option<Instant>) {
    let _ = run.process.signal(sig);
    let _ = run.process.signal(libc::SIGCONT);
    kill_at.get_or_insert_with(|| Instant::now() + GRACE);
}

/// What the reports and the shim's own exit status add up to.
/// `failed_step` says whether an exit status is the shim's own, from before it started
/// (sys::spawn; never on macOS, where that status is the command's).
pub fn outcome(
    reports: &[ShimReport],
    status: Option<WaitStatus>,
    failed_step: fn(i32) -> Option<&'static str>,
) -> Outcome {
    for r in reports {
        match r {
            ShimReport::SetupFailed { step, message } => {
                return Outcome::SetupFailed {
                    step: step.clone(),
                    message: message.clone(),
                }
            }
            ShimReport::ExecFailed { errno } => return Outcome::ExecFailed(*errno),
            _ => {}
        }
    }
    for r in reports {
        match r {
            ShimReport::Exited { code } => return Outcome::Finished(*code),
            ShimReport::Signaled { signal } => return Outcome::Finished(128 + signal),
            _ => {}
        }
    }
    match status {
        Some(WaitStatus::Exited(_, code)) => {
            if failed_step(code).is_some() {
                Outcome::ChildFailed(code)
            } else {
                Outcome::Finished(code)
            }
        }
        Some(WaitStatus::Signaled(_, sig, _)) => Outcome::Finished(128 + sig as i32),
        _ => Outcome::Finished(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn linux_steps(code: i32) -> Option<&'static str> {
        (201..=208).contains(&code).then_some("a step")
    }

    fn no_steps(_: i32) -> Option<&'static str> {
        None
    }

    #[test]
    fn a_shim_that_sends_what_is_no_report_is_ended() {
        use std::io::Write;
        use std::os::unix::process::ExitStatusExt;
        let child = std::process::Command::new("/bin/sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id() as libc::pid_t;
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        let mut running = Running {
            pid,
            process: sys::Process::of_child(pid).unwrap(),
            control: ours,
        };
        // A frame whose length says 3 bytes of a message no report starts with.
        theirs.write_all(&[3, 0, 0, 0, 0xff, 0xff, 0xff]).unwrap();
        let started = Instant::now();
        let ended = wait(&mut running, Watch::default(), &mut |_| {});
        assert!(ended.bad_report.is_some(), "{:?}", ended.bad_report);
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
        assert_eq!(ended.outcome, Outcome::Finished(128 + 9));
        drop(child.wait_with_output().map(|o| o.status.signal()));
    }

    #[test]
    fn reports_come_first_then_the_exit_status() {
        let pid = Pid::from_raw(1);
        let exited = |c| Some(WaitStatus::Exited(pid, c));
        let failed = ShimReport::ExecFailed { errno: 2 };
        assert_eq!(
            outcome(&[failed], exited(127), linux_steps),
            Outcome::ExecFailed(2)
        );
        assert_eq!(
            outcome(&[ShimReport::Exited { code: 3 }], exited(3), linux_steps),
            Outcome::Finished(3)
        );
        // No report: on Linux, a status in the steps' range is the shim's before exec.
        assert_eq!(
            outcome(&[], exited(203), linux_steps),
            Outcome::ChildFailed(203)
        );
        // On macOS the shim became the command: the same status is the command's own.
        assert_eq!(outcome(&[], exited(203), no_steps), Outcome::Finished(203));
        assert_eq!(
            outcome(
                &[],
                Some(WaitStatus::Signaled(pid, Signal::SIGTERM, false)),
                no_steps
            ),
            Outcome::Finished(128 + 15)
        );
        assert_eq!(outcome(&[], None, no_steps), Outcome::Finished(1));
    }
}
