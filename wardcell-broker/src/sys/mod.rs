//! Everything in the broker that needs `unsafe`, each block with its reason.
//!
//! - [`spawn`]: clone3 into new namespaces and exec the shim;
//! - [`launch_fd`]: taking the plan descriptor the client left at fd 3;
//! - terminal helpers: window size;
//! - pidfds ([`pidfd_open`], [`pidfd_send_signal`]) and helpers that die with the thread
//!   that starts them ([`spawn_with_control`], [`die_with_thread`]).
//! - which standard descriptors were closed at start ([`closed_at_start`]).

pub mod peer;
pub mod spawn;

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// Turn a -1 return into the thread's errno.
pub(crate) fn cerr(ret: libc::c_long) -> io::Result<libc::c_long> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// The descriptor on which the client hands over the plan.
pub const LAUNCH_FD: RawFd = 3;

/// Take ownership of the launch descriptor, refusing anything but a socket.
pub fn launch_fd() -> io::Result<OwnedFd> {
    // SAFETY: fstat only writes into `st`, plain old data.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above; a closed fd is an error, not undefined behaviour.
    cerr(unsafe { libc::fstat(LAUNCH_FD, &mut st) } as libc::c_long)?;
    if st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return Err(io::Error::other("fd 3 is not a socket"));
    }
    // SAFETY: fd 3 is open and a socket; nothing else in the broker owns it (taken once,
    // first thing in main).
    let fd = unsafe { OwnedFd::from_raw_fd(LAUNCH_FD) };
    set_cloexec(fd.as_raw_fd())?;
    Ok(fd)
}

pub fn set_cloexec(fd: RawFd) -> io::Result<()> {
    // SAFETY: F_SETFD takes an integer flag; a bad fd is an error.
    cerr(unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } as libc::c_long).map(drop)
}

/// Copy the window size of terminal `from` to terminal `to`.
pub fn copy_winsize(from: BorrowedFd<'_>, to: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: winsize is plain old data.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: TIOCGWINSZ writes a winsize into `ws`, which outlives the call.
    cerr(unsafe { libc::ioctl(from.as_raw_fd(), libc::TIOCGWINSZ, &mut ws) } as libc::c_long)?;
    // SAFETY: TIOCSWINSZ reads a winsize from `ws`.
    cerr(unsafe { libc::ioctl(to.as_raw_fd(), libc::TIOCSWINSZ, &ws) } as libc::c_long)?;
    Ok(())
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

/// pidfd_send_signal(2).
pub fn pidfd_send_signal(pidfd: BorrowedFd<'_>, sig: i32) -> io::Result<()> {
    // SAFETY: integer arguments and a null siginfo, which the kernel fills in itself.
    let r = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    cerr(r).map(drop)
}

/// Fill `buf` from the kernel's random source.
pub fn random_bytes(buf: &mut [u8]) -> io::Result<()> {
    let mut got = 0;
    while got < buf.len() {
        // SAFETY: the kernel writes at most `buf.len() - got` bytes into our buffer.
        let r = unsafe { libc::getrandom(buf[got..].as_mut_ptr().cast(), buf.len() - got, 0) };
        got += cerr(r as libc::c_long)? as usize;
    }
    Ok(())
}

/// Start a helper (the proxy) outside any sandbox with `control` as its fd 3, dying with
/// the thread that starts it. Its environment is the broker's (the caller's).
pub fn spawn_with_control(
    path: &std::path::Path,
    control: RawFd,
) -> io::Result<std::process::Child> {
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new(path);
    cmd.stdin(std::process::Stdio::null());
    // SAFETY: the closure runs in the child between fork and exec and makes only
    // async-signal-safe calls (dup2, fcntl, prctl) on integers captured by value.
    unsafe {
        cmd.pre_exec(move || {
            let ok = if control == LAUNCH_FD {
                libc::fcntl(LAUNCH_FD, libc::F_SETFD, 0) == 0
            } else {
                libc::dup2(control, LAUNCH_FD) == LAUNCH_FD
            };
            if !ok || libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.spawn()
}

/// pidfd_open(2) for a child of ours that has not been reaped (so `pid` is still its).
pub fn pidfd_open(pid: libc::pid_t) -> io::Result<OwnedFd> {
    // SAFETY: integer arguments; the kernel returns a new descriptor (close-on-exec) or -1.
    let fd = cerr(unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) })?;
    // SAFETY: the kernel just returned this descriptor, and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Have the process `cmd` starts killed when the thread starting it exits (a helper must
/// not outlive the broker thread waiting for it).
pub fn die_with_thread(cmd: &mut std::process::Command) -> &mut std::process::Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the child between fork and exec and makes one
    // async-signal-safe call (prctl) with integer arguments.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

// `closed_at_start()`: which standard descriptors this process was started without.
wardcell_common::closed_stdio_at_start!();
