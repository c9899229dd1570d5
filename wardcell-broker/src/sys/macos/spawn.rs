//! Starting a sandbox on macOS: no namespaces to make, so the shim is a plain child of
//! the broker, with the sandbox's stdio at 0 to 2, the control socket at fd 3, an empty
//! environment, and the signal dispositions the command is to start with. The shim
//! applies the Seatbelt profile itself, then execs the command in its place.

use std::io;
use std::os::fd::RawFd;
use std::os::unix::process::CommandExt;

use super::Process;

/// Start `shim` with `stdio` as its 0, 1, 2 (closed where -1) and `control` as its fd 3,
/// ignoring the signals in `ignored` (bit N-1 for signal N) and every other at its
/// default.
pub fn spawn_sandbox(
    shim: &wardcell_host::exe::Exe,
    stdio: [RawFd; 3],
    control: RawFd,
    ignored: u64,
) -> io::Result<crate::sys::Child> {
    // macOS has no execveat: the shim is started by the path it was opened at.
    let mut cmd = std::process::Command::new(&shim.path);
    cmd.arg0("wardcell-shim").env_clear();
    // SAFETY: the closure runs in the child between fork and exec and makes only
    // async-signal-safe calls (dup2, fcntl, close, signal) on integers captured by value.
    unsafe {
        cmd.pre_exec(move || {
            if !crate::sys::fds::place_for_exec(stdio, control) {
                return Err(io::Error::last_os_error());
            }
            crate::sys::fds::dispositions_for_exec(ignored);
            Ok(())
        });
    }
    let mut child = cmd.spawn()?;
    let pid = child.id() as libc::pid_t;
    match Process::of_child(pid) {
        Ok(process) => Ok(crate::sys::Child::new(pid, process)),
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(e)
        }
    }
}

/// What the shim's exit status says failed before it ran: nothing here. A failure
/// between fork and exec is returned by [`spawn_sandbox`] itself, so an exit status is
/// always the shim's report or the command's own.
pub fn failed_step(_code: i32) -> Option<&'static str> {
    None
}

/// Why the shim could not be started, in words.
pub fn explain_spawn_error(e: &io::Error) -> String {
    format!("starting wardcell-shim failed: {e}")
}
