//! The broker's Linux system calls: pidfds, clone3 (spawn.rs), helpers' pre-exec and
//! their start from a held descriptor (execveat), and
//! the peer's credentials, pidfd and namespace (peer.rs).

pub mod peer;
pub mod spawn;

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::process::{Child, Command};

use wardcell_common::helper::Exec;
use wardcell_host::exe::Exe;

use super::{cerr, LAUNCH_FD};

/// recvmsg's flag that makes received descriptors close-on-exec as they arrive.
pub const MSG_CMSG_CLOEXEC: libc::c_int = libc::MSG_CMSG_CLOEXEC;

/// The size of `sockaddr_un`'s path, its terminating NUL included.
pub const SUN_PATH_LEN: usize = 108;

/// A child of the broker, by its pidfd: readable once it has exited, and signalled
/// without the risk of reaching a process that reused its pid.
pub struct Process(OwnedFd);

impl Process {
    /// A child of ours that has not been reaped.
    pub fn of_child(pid: libc::pid_t) -> io::Result<Process> {
        pidfd_open(pid).map(Process)
    }
}

impl AsFd for Process {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// Signals blocked in this thread and read from a signalfd (no `unsafe` needed).
pub use wardcell_host::signals::Signals;

pub use wardcell_host::launch::is_child;

/// Wake the thread blocked in `accept` on a listener that is being stopped.
pub fn wake_listener(listener: BorrowedFd<'_>, _path: &std::path::Path) {
    // SAFETY: integer arguments; shutting down a socket we hold open.
    let _ = unsafe { libc::shutdown(listener.as_raw_fd(), libc::SHUT_RDWR) };
}

/// Whether `fd` is an `O_PATH` descriptor (a handle on a path, not an open file).
pub fn is_path_only(fd: BorrowedFd<'_>) -> io::Result<bool> {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let fl = fcntl(fd.as_raw_fd(), FcntlArg::F_GETFL)?;
    Ok(OFlag::from_bits_retain(fl).contains(OFlag::O_PATH))
}

/// pidfd_send_signal(2).
pub fn pidfd_send_signal(pidfd: BorrowedFd<'_>, sig: i32) -> io::Result<()> {
    let (fd, info) = (pidfd.as_raw_fd(), std::ptr::null::<libc::siginfo_t>());
    // SAFETY: integer arguments and a null siginfo, which the kernel fills in itself.
    cerr(unsafe { libc::syscall(libc::SYS_pidfd_send_signal, fd, sig, info, 0) }).map(drop)
}

/// Start the proxy `exe` outside any sandbox with `control` as its fd 3, dying with the
/// thread that starts it. Its environment is the broker's (the caller's).
pub fn spawn_with_control(exe: &Exe, control: RawFd) -> io::Result<Child> {
    let (mut cmd, env) = (Command::new(&exe.path), std::env::vars_os());
    cmd.stdin(std::process::Stdio::null()).env_clear().envs(env);
    helper(&mut cmd, exe, Some(control))?;
    cmd.spawn()
}

/// [`spawn_from`], with `control` as its fd 3 (the run's helper: the guard's socket).
pub fn spawn_helper(
    exe: &Exe,
    cmd: &mut Command,
    control: BorrowedFd<'_>,
) -> io::Result<(Child, super::Child)> {
    helper(cmd, exe, Some(control.as_raw_fd()))?;
    super::watch(cmd.spawn()?)
}

/// Start `cmd` from the program `exe` holds open (the approval plugin), dying with the
/// thread that starts it, and watched.
pub fn spawn_from(exe: &Exe, cmd: &mut Command) -> io::Result<(Child, super::Child)> {
    helper(cmd, exe, None)?;
    super::watch(cmd.spawn()?)
}

/// pidfd_open(2) for a child of ours that has not been reaped (so `pid` is still its).
fn pidfd_open(pid: libc::pid_t) -> io::Result<OwnedFd> {
    // SAFETY: integer arguments; the kernel returns a new descriptor (close-on-exec) or -1.
    let fd = cerr(unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) })?;
    // SAFETY: the kernel just returned this descriptor, and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Ready `cmd` to start the program `exe` holds open (execveat: never its path), with
/// `control`, when given, as its fd 3, killed when the thread starting it exits (a helper
/// must not outlive the broker thread waiting for it). Its arguments and environment are
/// those `cmd` was given (`Exec`: cleared first, so that what it was given is the whole).
fn helper(cmd: &mut Command, exe: &Exe, control: Option<RawFd>) -> io::Result<()> {
    use std::os::unix::process::CommandExt;
    let (exec, fd) = (Exec::of(cmd)?, exe.as_fd().as_raw_fd());
    // SAFETY: the closure runs in the child between fork and exec and makes only
    // async-signal-safe calls (dup2, fcntl, prctl, execveat) on integers captured by value
    // and on `exec`'s tables, NULL-terminated, of NUL-terminated strings it owns.
    unsafe {
        cmd.pre_exec(move || {
            let placed = control.is_none_or(|c| super::fds::place(c, LAUNCH_FD));
            // A script's interpreter reads it again as /dev/fd/N: left open across exec.
            let kept = libc::fcntl(fd, libc::F_SETFD, 0) == 0;
            let dies = libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) == 0;
            if !(placed && kept && dies) {
                return Err(io::Error::last_os_error());
            }
            let (nr, flags) = (libc::SYS_execveat, libc::AT_EMPTY_PATH);
            libc::syscall(nr, fd, c"".as_ptr(), exec.argv(), exec.envp(), flags);
            Err(io::Error::last_os_error())
        })
    };
    Ok(())
}

impl wardcell_host::process::Watched for Process {
    fn signal(&self, sig: i32) -> io::Result<()> {
        pidfd_send_signal(self.0.as_fd(), sig)
    }

    fn try_clone(&self) -> io::Result<Process> {
        self.0.try_clone().map(Process)
    }
}
