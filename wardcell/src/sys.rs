//! The client's calls that need `unsafe`: fork, made while the process has a single
//! thread, and noting before `main` which standard descriptors were closed.
#![allow(unsafe_code)]

use nix::unistd::{ForkResult, Pid};

pub enum Forked {
    Parent(Pid),
    Child,
}

/// Fork. Must be called before the client starts any thread (it is called from `main`
/// before anything but reading the environment and the arguments has happened).
pub fn fork() -> nix::Result<Forked> {
    // SAFETY: the process has one thread (nothing has started another), so the child is a
    // complete copy: no lock in it can be held by a thread that does not exist there, and
    // it may go on running ordinary Rust code.
    match unsafe { nix::unistd::fork() }? {
        ForkResult::Parent { child } => Ok(Forked::Parent(child)),
        ForkResult::Child => Ok(Forked::Child),
    }
}

/// Which of descriptors 0, 1 and 2 were closed when this process started (bit N for fd
/// N). The Rust runtime opens /dev/null in their place before `main`; a command run with
/// `>&-` must find its stdout closed, as it would without wardcell.
pub fn closed_at_start() -> u8 {
    CLOSED_AT_START.load(std::sync::atomic::Ordering::Relaxed)
}

static CLOSED_AT_START: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Run by the C library before `main`, so before the Rust runtime fills the gaps.
#[used]
#[link_section = ".init_array"]
static NOTE_CLOSED_STDIO: extern "C" fn() = note_closed_stdio;

extern "C" fn note_closed_stdio() {
    let closed = (0..3)
        .filter(|&fd| {
            nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_GETFD) == Err(nix::errno::Errno::EBADF)
        })
        .fold(0u8, |m, fd| m | 1 << fd);
    CLOSED_AT_START.store(closed, std::sync::atomic::Ordering::Relaxed);
}

/// Whether the kernel hands out a pidfd for a Unix socket's peer (SO_PEERPIDFD, Linux
/// 6.5), which the broker's peer check needs: tried on a socketpair of our own.
#[cfg(target_os = "linux")]
pub fn peer_pidfd() -> std::io::Result<()> {
    use nix::libc;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    const SO_PEERPIDFD: libc::c_int = 77;
    let (a, _b) = std::os::unix::net::UnixStream::pair()?;
    let mut fd: libc::c_int = -1;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `fd`, an int of ours, and sets
    // `len`, also ours.
    let r = unsafe {
        libc::getsockopt(
            a.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_PEERPIDFD,
            (&mut fd as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the kernel just made this descriptor for us, and nothing else owns it.
    drop(unsafe { OwnedFd::from_raw_fd(fd) });
    Ok(())
}

/// macOS: the broker identifies peers by audit token instead.
#[cfg(not(target_os = "linux"))]
pub fn peer_pidfd() -> std::io::Result<()> {
    Err(std::io::ErrorKind::Unsupported.into())
}
