//! Everything in the broker that needs `unsafe`, each block with its reason.
//!
//! Here, the same on Linux and macOS:
//! - [`inherited_socket`], [`inherited_tty`]: taking the descriptors the client left at
//!   fd 3 (the plan), 4 (its terminal keeper) and 5 (the command's pty);
//! - which signals this process was started ignoring ([`ignored_signals`]) and which
//!   standard descriptors were closed at start ([`closed_at_start`]);
//! - [`fds`]: descriptors passed beside frames.
//!
//! Per platform, each with the same names (`linux/`, `macos/`):
//! - `spawn`: starting a sandbox's shim (Linux: clone3 into new namespaces; macOS: a
//!   plain child, no namespaces);
//! - `peer`: who is on the other end of a supervisor's socket;
//! - `Process`: a child to watch (readable once it has exited) and signal: the watch of
//!   the broker's one process type, [`Child`] (wardcell_host::process::Child);
//! - `Signals`: the signals the broker forwards, read from a descriptor (on Linux, a
//!   signalfd: wardcell_host::signals, no `unsafe` needed);
//! - `is_child` (Linux: wardcell_host's, no `unsafe` needed), `for_helper`,
//!   `wake_listener`, `is_path_only` and
//!   `MSG_CMSG_CLOEXEC` (what `fds` needs of the platform).
//!
//! Linux only: `spawn_with_control` and `pidfd_send_signal`, for the proxy
//! (macOS has none yet: proxy_macos.rs). macOS only: `random_bytes`, for a sandbox's
//! Seatbelt identity (a Linux sandbox's mark is its network namespace).
//!
//! wardcell-host has no `unsafe`: what it needs of these is passed to it (the window
//! size, the process watch, descriptors sent, the listener's wake-up).

pub mod fds;
#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
pub use linux::*;
#[cfg(target_os = "macos")]
mod macos;
#[cfg(target_os = "macos")]
pub use macos::*;

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Turn a -1 return into the thread's errno.
pub(crate) fn cerr(ret: libc::c_long) -> io::Result<libc::c_long> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// The broker's one process type: a child by its pid and its `Process`, killed and
/// reaped when dropped unreaped (wardcell_host::process).
pub type Child = wardcell_host::process::Child<Process>;

/// Watch `child`, a child of ours just started (wardcell_host::process::watch).
pub fn watch(child: std::process::Child) -> io::Result<(std::process::Child, Child)> {
    wardcell_host::process::watch(child, Process::of_child)
}

/// The descriptor on which the client hands over the plan.
pub const LAUNCH_FD: RawFd = 3;

/// Descriptor `fd`, which `wardcell run` left open for this process, when it is a socket
/// (3: the plan; 4: the terminal keeper), close-on-exec from now on.
pub fn inherited_socket(fd: RawFd) -> io::Result<OwnedFd> {
    inherited(fd, libc::S_IFSOCK)
}

/// ...when it is a character device (5: the command's pty, its slave).
pub fn inherited_tty(fd: RawFd) -> io::Result<OwnedFd> {
    inherited(fd, libc::S_IFCHR)
}

fn inherited(fd: RawFd, kind: libc::mode_t) -> io::Result<OwnedFd> {
    let st = nix::sys::stat::fstat(fd)?;
    if st.st_mode & libc::S_IFMT != kind {
        return Err(io::Error::other(format!(
            "fd {fd} is not what was left there"
        )));
    }
    // SAFETY: `fd` is open and of the kind `wardcell run` leaves there; nothing else in
    // the broker owns it (each is taken once, first thing).
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    set_cloexec(fd.as_raw_fd())?;
    Ok(fd)
}

pub fn set_cloexec(fd: RawFd) -> io::Result<()> {
    // SAFETY: F_SETFD takes an integer flag; a bad fd is an error.
    cerr(unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } as libc::c_long).map(drop)
}

/// The signals 1 to 31 this process ignores, as /proc's `SigIgn` writes them (bit N-1
/// for signal N), SIGPIPE left out: every Rust program ignores it, whatever it inherited.
pub fn ignored_signals() -> u64 {
    let mut set = 0;
    for sig in (1..32).filter(|&s| s != libc::SIGPIPE) {
        // SAFETY: sigaction is plain old data; a null new action only reads the current
        // one into `old`.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) } == 0
            && old.sa_sigaction == libc::SIG_IGN
        {
            set |= 1 << (sig - 1);
        }
    }
    set
}

// `closed_at_start()`: which standard descriptors this process was started without.
wardcell_common::closed_stdio_at_start!();

#[cfg(test)]
mod tests {
    use super::*;
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::os::fd::AsFd;
    use wardcell_host::process::Watched;

    fn exited(p: &Process, wait_ms: u16) -> bool {
        let mut fds = [PollFd::new(p.as_fd(), PollFlags::POLLIN)];
        poll(&mut fds, PollTimeout::from(wait_ms)).is_ok_and(|n| n > 0)
    }

    /// What sandbox.rs and wardcell_host::wait rely on, on every platform: a child's `Process` is
    /// readable once it has exited (a clone too), and a signal reaches it before then.
    #[test]
    fn a_process_is_readable_once_it_has_exited_and_signalled_until_then() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let p = Process::of_child(child.id() as libc::pid_t).unwrap();
        let clone = p.try_clone().unwrap();
        assert!(!exited(&p, 50));
        p.signal(libc::SIGKILL).unwrap();
        assert!(exited(&p, 5000));
        assert!(exited(&clone, 0));
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(child.wait().unwrap().signal(), Some(libc::SIGKILL));

        // A child that has already exited when it is watched is readable at once.
        let mut quick = std::process::Command::new("true").spawn().unwrap();
        // SAFETY: siginfo_t is plain data; all zeroes is a valid value to overwrite.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid writes one siginfo_t; WNOWAIT leaves the child unreaped.
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                quick.id() as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        assert_eq!(r, 0, "waiting for `true` to exit");
        let p = Process::of_child(quick.id() as libc::pid_t).unwrap();
        assert!(exited(&p, 0));
        quick.wait().unwrap();
    }

    /// The one process type (`Child`): dropped unreaped, its process is killed and
    /// reaped; reaped through it, or detached, it is left alone.
    #[test]
    fn a_child_dropped_unreaped_is_killed_and_reaped() {
        use nix::sys::wait::{waitpid, WaitStatus};
        use nix::unistd::Pid;
        let spawn = || {
            std::process::Command::new("sleep")
                .arg("30")
                .spawn()
                .unwrap()
        };
        let (_, child) = watch(spawn()).unwrap();
        let (pid, p) = (child.pid(), child.watch().try_clone().unwrap());
        drop(child);
        assert!(exited(&p, 0));
        assert_eq!(
            waitpid(Pid::from_raw(pid), None),
            Err(nix::errno::Errno::ECHILD)
        );

        let (_, mut child) = watch(spawn()).unwrap();
        child.signal(libc::SIGTERM).unwrap();
        let status = child.wait();
        assert!(
            matches!(
                status,
                Some(WaitStatus::Signaled(
                    _,
                    nix::sys::signal::Signal::SIGTERM,
                    _
                ))
            ),
            "{status:?}"
        );
        assert!(child.is_reaped());
        assert_eq!(child.wait(), None);
    }
}
