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
