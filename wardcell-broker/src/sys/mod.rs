//! Everything in the broker that needs `unsafe`, each block with its reason.
//!
//! - [`spawn`]: clone3 into new namespaces and exec the shim;
//! - [`launch_fd`]: taking the plan descriptor the client left at fd 3;
//! - terminal helpers: window size.

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

/// What `path` (absolute) is, opened `O_PATH` without following a symbolic link at any
/// component or a magic link (`openat2` with `RESOLVE_NO_SYMLINKS |
/// RESOLVE_NO_MAGICLINKS`).
pub fn identity_of(path: &std::path::Path) -> io::Result<wardcell_common::identity::Identity> {
    use nix::fcntl::{openat2, OFlag, OpenHow, ResolveFlag};
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW)
        .resolve(ResolveFlag::RESOLVE_NO_SYMLINKS | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    let fd = openat2(libc::AT_FDCWD, path, how).map_err(io::Error::from)?;
    // SAFETY: openat2 just returned `fd`, and nothing else owns it.
    let file = unsafe { std::fs::File::from_raw_fd(fd) };
    let meta = file.metadata()?;
    // O_PATH | O_NOFOLLOW opens a final symbolic link itself: never what a plan means.
    if meta.file_type().is_symlink() {
        return Err(io::Error::from_raw_os_error(libc::ELOOP));
    }
    Ok(wardcell_common::identity::Identity::of(&meta))
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

/// Send one audit line to syslog, facility authpriv, as "wardcell".
pub fn syslog_authpriv(line: &str) {
    static OPEN: std::sync::Once = std::sync::Once::new();
    OPEN.call_once(|| {
        // SAFETY: the identifier is a 'static C string, as openlog requires (it keeps
        // the pointer).
        unsafe { libc::openlog(c"wardcell".as_ptr(), libc::LOG_PID, libc::LOG_AUTHPRIV) };
    });
    let Ok(msg) = std::ffi::CString::new(line) else {
        return;
    };
    // SAFETY: a constant "%s" format with one C string argument.
    unsafe {
        libc::syslog(
            libc::LOG_AUTHPRIV | libc::LOG_INFO,
            c"%s".as_ptr(),
            msg.as_ptr(),
        )
    };
}
