//! Waiting for a sandbox (wardcell_host::wait: signals forwarded, a pty relayed, reports
//! read), and what its reports and status add up to ([`outcome`]): what the shim
//! reports is untrusted, and at most its exit status is relayed.

use std::os::unix::net::UnixStream;

use nix::sys::wait::WaitStatus;

use wardcell_common::protocol::ShimReport;
pub use wardcell_host::wait::Watch;

use crate::sys;

/// A sandbox that is running.
pub struct Running {
    /// The shim (on macOS, the command it became): killed and reaped if dropped unreaped.
    pub process: sys::Child,
    pub control: UnixStream,
}

pub use wardcell_host::messages::Outcome;

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

/// Relay until the sandbox ends (wardcell_host::wait::wait); how it ended.
pub fn wait(run: &mut Running, watch: Watch<'_>, on_report: &mut dyn FnMut(&ShimReport)) -> Ended {
    let w = wardcell_host::wait::wait(&mut run.process, &mut run.control, watch, on_report);
    Ended {
        outcome: outcome(&w.reports, w.status, sys::spawn::failed_step),
        caller_gone: w.caller_gone,
        bad_report: w.bad_report,
        timed_out: w.timed_out,
    }
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
        Some(WaitStatus::Exited(_, code)) if failed_step(code).is_some() => {
            Outcome::ChildFailed(code)
        }
        Some(WaitStatus::Exited(_, code)) => Outcome::Finished(code),
        Some(WaitStatus::Signaled(_, sig, _)) => Outcome::Finished(128 + sig as i32),
        _ => Outcome::Finished(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::signal::Signal;
    use nix::unistd::Pid;
    use std::time::Instant;

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
            process: sys::Child::new(pid, sys::Process::of_child(pid).unwrap()),
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
