//! The proxy's few calls that need `unsafe`: each block says why it is sound.
//! Nothing else in the crate uses `unsafe` (every other module is `#![forbid(unsafe_code)]`).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use nix::fcntl::{fcntl, FcntlArg, FdFlag};
use nix::sys::socket::{
    getsockname, getsockopt, sockopt, AddressFamily, SockType, SockaddrLike, SockaddrStorage,
};
use nix::sys::stat::{fstat, SFlag};

/// The descriptor the broker puts the control socket at.
pub const CONTROL_FD: RawFd = 3;

/// Turn a -1 return into the thread's errno.
fn cerr(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Take ownership of fd 3 after checking that it is an open Unix stream socket, and
/// mark it close-on-exec so that a credential command never inherits it.
pub fn take_control_fd() -> Result<OwnedFd, String> {
    let st = fstat(CONTROL_FD).map_err(|e| format!("fstat: {e}"))?;
    if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFSOCK {
        return Err("not a socket".into());
    }
    // SAFETY: fstat just proved fd 3 is open, and nothing else in this process owns it:
    // main calls this once, first, before any other descriptor is opened or adopted.
    let fd = unsafe { OwnedFd::from_raw_fd(CONTROL_FD) };
    fcntl(CONTROL_FD, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC)).map_err(|e| format!("fcntl: {e}"))?;
    match getsockopt(&fd, sockopt::SockType) {
        Ok(SockType::Stream) => {}
        Ok(other) => return Err(format!("a {other:?} socket, not a stream socket")),
        Err(e) => return Err(format!("getsockopt: {e}")),
    }
    let addr: SockaddrStorage = getsockname(CONTROL_FD).map_err(|e| format!("getsockname: {e}"))?;
    if addr.family() != Some(AddressFamily::Unix) {
        return Err("not a Unix socket".into());
    }
    Ok(fd)
}

/// Own a descriptor that recvmsg has just delivered as SCM_RIGHTS.
pub fn own_received_fd(fd: RawFd) -> OwnedFd {
    // SAFETY: the kernel installed this descriptor in our table during the recvmsg that
    // returned it; nothing else has seen the number, so this is its only owner.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// Make `cmd` start the program `exe` holds open (execveat, AT_EMPTY_PATH), never a
/// path, with the arguments and the environment `cmd` was given (cleared first, so that
/// what it was given is the whole): a credential's command, opened by the broker when
/// the run started. Registered last: it runs after every other step.
pub fn exec_from(
    cmd: &mut std::process::Command,
    exe: RawFd,
) -> io::Result<&mut std::process::Command> {
    use std::os::unix::process::CommandExt;
    let exec = wardcell_common::helper::Exec::of(cmd)?;
    // A copy above the descriptors the child places (0 to 2), closed with `cmd`.
    // SAFETY: integer arguments; the kernel returns a new descriptor or -1.
    let copy = cerr(unsafe { libc::fcntl(exe, libc::F_DUPFD_CLOEXEC, 10) })?;
    // SAFETY: the kernel just returned this descriptor, and nothing else owns it.
    let copy = unsafe { OwnedFd::from_raw_fd(copy) };
    let exe = copy.as_raw_fd();
    // SAFETY: between fork and exec the closure makes only async-signal-safe system calls
    // (fcntl, execveat) on an integer and on `exec`'s tables, NULL-terminated, of
    // NUL-terminated strings it owns.
    unsafe {
        cmd.pre_exec(move || {
            let _owned = &copy;
            // A script's interpreter opens it again as /dev/fd/N: left open across exec.
            libc::fcntl(exe, libc::F_SETFD, 0);
            let (path, flags) = (c"".as_ptr(), libc::AT_EMPTY_PATH);
            libc::syscall(
                libc::SYS_execveat,
                exe,
                path,
                exec.argv(),
                exec.envp(),
                flags,
            );
            Err(io::Error::last_os_error())
        })
    };
    Ok(cmd)
}

/// prctl(PR_SET_DUMPABLE, 0): no same-uid process may ptrace us, read our memory or
/// our /proc environ, and no core file is written.
pub fn set_undumpable() -> io::Result<()> {
    // SAFETY: integer arguments only; no memory is passed.
    let r = unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    cerr(r).map(drop)
}

/// prctl(PR_SET_NO_NEW_PRIVS, 1): required before an unprivileged seccomp filter.
pub fn set_no_new_privs() -> io::Result<()> {
    // SAFETY: integer arguments only; no memory is passed.
    let r = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
    cerr(r).map(drop)
}

/// One malloc arena for every thread: with glibc, the runtime's worker threads would
/// otherwise each keep an arena of their own, and the memory they held during a
/// transfer, at idle. musl's allocator has no per-thread arenas.
#[cfg(target_env = "gnu")]
pub fn single_malloc_arena() {
    const M_ARENA_MAX: libc::c_int = -8;
    // SAFETY: mallopt takes two integers; called once, before any thread is started.
    unsafe { libc::mallopt(M_ARENA_MAX, 1) };
}

#[cfg(not(target_env = "gnu"))]
pub fn single_malloc_arena() {}
