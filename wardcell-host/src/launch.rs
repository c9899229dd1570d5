//! How the broker was started: its arguments read, its tracing turned on, the plan
//! writer's end taken as its status. Whether the writer is a child of the broker, and
//! what the plan on fd 3 is, are the broker's checks (main.rs).

use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::Pid;

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;

use wardcell_common::plan::Plan;
use wardcell_common::protocol::{self, FrameError, Launch};
use wardcell_common::trace;

use crate::error::BrokerError;

/// What the command line asks.
#[derive(Debug, PartialEq, Eq)]
pub enum Args {
    /// `--version`.
    Version,
    /// `--plan`: the plan is already waiting on fd 3 (`wardcell doctor`'s trial run).
    Plan,
    /// `--plan-writer PID`: the plan is on its way from the client's plan writer, which
    /// must be a child of the broker (main.rs checks).
    Writer(i32),
}

/// The broker's arguments (its own name left out), or why they are wrong.
pub fn args(mut args: impl Iterator<Item = String>) -> Result<Args, BrokerError> {
    match (args.next().as_deref(), args.next(), args.next()) {
        (Some("--version"), None, None) => Ok(Args::Version),
        (Some("--plan"), None, None) => Ok(Args::Plan),
        (Some("--plan-writer"), Some(pid), None) => pid.parse().map(Args::Writer).map_err(|_| {
            BrokerError::Launch(format!(
                "--plan-writer {pid:?} is not a child of this process"
            ))
        }),
        _ => Err(BrokerError::Launch(
            "expected --plan-writer PID or --plan".into(),
        )),
    }
}

/// `wardcell run -v` turns tracing on here; the plan writer's own lines are printed now
/// that the run id exists (escaped and bounded by `trace::line` and the plan writer).
pub fn trace_plan(plan: &mut Plan, writer: Option<Pid>) {
    let Some(asked) = plan.trace.take() else {
        return;
    };
    if let Ok(Some(level)) = trace::parse(&asked.level) {
        trace::install("wardcell-broker", level);
    }
    if trace::level().is_some() {
        let pid = writer.map_or(0, |p| p.as_raw() as u32);
        for l in asked.lines.iter().take(trace::MAX_HELD + 1) {
            wardcell_common::eprintln_line!("{}", trace::line("wardcell", pid, trace::run(), l));
        }
    }
    tracing::debug!(
        zones = plan.zones.len(),
        command = ?plan.command,
        "plan received"
    );
}

/// How the plan writer ended, as an exit status for this process (128+N for signal N).
pub fn exit_status_of(writer: Pid) -> i32 {
    match waitpid(writer, None) {
        Ok(WaitStatus::Exited(_, code)) => code,
        Ok(WaitStatus::Signaled(_, sig, _)) => 128 + sig as i32,
        _ => 1,
    }
}

/// The plan on `fd` (the client's fd 3): a Hello, then exactly one `Launch::Run`; `None`
/// when the writer closed it without sending anything.
pub fn take_plan(fd: OwnedFd) -> Result<Option<Plan>, BrokerError> {
    let mut s = UnixStream::from(fd);
    let launch = |e: FrameError| BrokerError::Launch(e.to_string());
    match protocol::expect_hello(&mut s) {
        Err(FrameError::Closed) => return Ok(None),
        hello => hello.map_err(launch)?,
    }
    let Launch::Run(plan) = protocol::read_frame::<Launch>(&mut s).map_err(launch)?;
    Ok(Some(*plan))
}

/// Whether `pid` is a child of this process (peeked at, never reaped): only a child can
/// be the plan writer (`--plan-writer`). Linux (macOS's is the broker's sys::macos).
#[cfg(target_os = "linux")]
pub fn is_child(pid: libc::pid_t) -> bool {
    use nix::sys::wait::{waitid, Id, WaitPidFlag};
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    pid > 0 && waitid(Id::Pid(Pid::from_raw(pid)), flags).is_ok()
}

/// wardcell-shim, beside the broker, opened (crate::exe): what every sandbox of the run
/// starts.
pub fn shim() -> Result<crate::exe::Exe, BrokerError> {
    let path = BrokerError::helper("wardcell-shim")?;
    crate::exe::Exe::open(&path)
        .map_err(|e| BrokerError::Sandbox(format!("wardcell-shim: {e}; reinstall wardcell")))
}

/// A copy of `shim` for the plan thread (`Programs::open`), or its error in words.
pub fn copy(shim: &Result<crate::exe::Exe, BrokerError>) -> Result<crate::exe::Exe, String> {
    let shim = shim.as_ref().map_err(|e| e.to_string());
    shim.and_then(|s| s.try_clone().map_err(|e| e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(a: &[&str]) -> Result<Args, String> {
        args(a.iter().map(|s| s.to_string())).map_err(|e| e.to_string())
    }

    #[test]
    fn the_three_ways_to_start_and_nothing_else() {
        assert_eq!(of(&["--version"]), Ok(Args::Version));
        assert_eq!(of(&["--plan"]), Ok(Args::Plan));
        assert_eq!(of(&["--plan-writer", "42"]), Ok(Args::Writer(42)));
        for bad in [&[][..], &["--plan", "x"], &["--plan-writer"], &["run"]] {
            let e = of(bad).unwrap_err();
            assert!(e.contains("expected --plan-writer PID or --plan"), "{e}");
        }
        let e = of(&["--plan-writer", "x1"]).unwrap_err();
        assert!(e.contains("--plan-writer \"x1\" is not a child"), "{e}");
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn is_child_knows_its_own() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        assert!(is_child(child.id() as libc::pid_t));
        assert!(!is_child(1));
        assert!(!is_child(0));
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
