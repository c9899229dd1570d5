//! The client's calls that need `unsafe`: fork, made while the process has a single
//! thread, noting before `main` which standard descriptors were closed, and the
//! allocator.
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

// `closed_at_start()`: which standard descriptors this process was started without.
wardcell_common::closed_stdio_at_start!();

/// The system allocator, except in a process about to exit ([`keep_what_is_freed`]):
/// `wardcell run`'s plan writer lives about a millisecond, on the path of every start.
/// There the C library's allocator made some fifty `mmap` calls for small blocks and
/// thirty `munmap` calls returning them (each a TLB flush in a process just forked), all
/// of which the exit does anyway. From then on blocks come from one region, mapped once,
/// and nothing is given back.
pub struct Allocator;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

static KEEP: AtomicBool = AtomicBool::new(false);
/// The region: its start, how far it is used, and its end (all 0 until it is mapped).
static REGION: AtomicUsize = AtomicUsize::new(0);
static USED: AtomicUsize = AtomicUsize::new(0);
static END: AtomicUsize = AtomicUsize::new(0);
/// Enough for the plan of any configuration `policy check` accepts in a second; a larger
/// one goes on in the C library's allocator.
const REGION_SIZE: usize = 16 << 20;

/// From now on, memory is taken from one region and never given back until the process
/// exits. Only for a process that ends soon, whatever it does: the plan writer.
pub fn keep_what_is_freed() {
    // SAFETY: an anonymous private mapping of a fixed size, nothing else passed; pages
    // are only committed when touched (MAP_NORESERVE).
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            REGION_SIZE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p != libc::MAP_FAILED {
        REGION.store(p as usize, Ordering::Relaxed);
        USED.store(p as usize, Ordering::Relaxed);
        END.store(p as usize + REGION_SIZE, Ordering::Relaxed);
    }
    KEEP.store(true, Ordering::Release);
}

/// A block of `layout` from the region, or null when it has no room (or none is mapped).
fn from_region(layout: std::alloc::Layout) -> *mut u8 {
    let end = END.load(Ordering::Relaxed);
    let mut cur = USED.load(Ordering::Relaxed);
    loop {
        let start = (cur + layout.align() - 1) & !(layout.align() - 1);
        let next = match start.checked_add(layout.size()) {
            Some(n) if n <= end => n,
            _ => return std::ptr::null_mut(),
        };
        match USED.compare_exchange_weak(cur, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return start as *mut u8,
            Err(now) => cur = now,
        }
    }
}

// SAFETY: without KEEP every call goes to the system allocator with the caller's own
// arguments. With KEEP, blocks come from the region (each aligned and sized as asked,
// never handed out twice, zero-filled by the kernel until first written) or the system
// allocator, `dealloc` does nothing (the block stays valid and unused), and `realloc`
// makes a new block and copies the smaller of the two sizes into it.
unsafe impl std::alloc::GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        if KEEP.load(Ordering::Acquire) {
            let p = from_region(layout);
            if !p.is_null() {
                return p;
            }
        }
        // SAFETY: the caller's layout, passed on.
        unsafe { std::alloc::System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        // SAFETY: the caller's layout; a block from the region is written only here.
        unsafe {
            let p = self.alloc(layout);
            if !p.is_null() {
                std::ptr::write_bytes(p, 0, layout.size());
            }
            p
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        if !KEEP.load(Ordering::Acquire) {
            // SAFETY: without KEEP every block came from System with `layout`.
            unsafe { std::alloc::System.dealloc(ptr, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        if !KEEP.load(Ordering::Acquire) {
            // SAFETY: the caller's block, layout and size, passed on.
            return unsafe { std::alloc::System.realloc(ptr, layout, new_size) };
        }
        // SAFETY: the caller guarantees `new_size`, rounded up to `layout.align()`, does
        // not overflow isize, so this layout is valid.
        let new =
            unsafe { std::alloc::Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: a valid, non-zero layout (new_size > 0 by the contract).
        let out = unsafe { self.alloc(new) };
        if !out.is_null() {
            // SAFETY: both blocks are at least the smaller size and do not overlap (the
            // old one is still allocated).
            unsafe { std::ptr::copy_nonoverlapping(ptr, out, layout.size().min(new_size)) };
        }
        out
    }
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

/// Copy the window size of terminal `from` to terminal `to`.
pub fn copy_winsize(
    from: std::os::fd::BorrowedFd<'_>,
    to: std::os::fd::BorrowedFd<'_>,
) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: winsize is plain old data.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: TIOCGWINSZ writes a winsize into `ws`, which outlives the call.
    if unsafe { libc::ioctl(from.as_raw_fd(), libc::TIOCGWINSZ, &mut ws) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: TIOCSWINSZ reads a winsize from `ws`.
    if unsafe { libc::ioctl(to.as_raw_fd(), libc::TIOCSWINSZ, &ws) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Where the handler [`catch`] installs writes each signal caught (-1: nowhere yet).
static SIGNAL_PIPE: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

extern "C" fn on_signal(sig: libc::c_int) {
    let saved = nix::errno::Errno::last_raw();
    let byte = sig as u8;
    let fd = SIGNAL_PIPE.load(Ordering::Relaxed);
    // SAFETY: write(2) is async-signal-safe; one byte from our stack to a pipe that stays
    // open for the process's life (a full pipe fails with EAGAIN: a signal already waits).
    unsafe { libc::write(fd, (&byte as *const u8).cast(), 1) };
    nix::errno::Errno::set_raw(saved);
}

/// Catch `signals` into a pipe: each one caught writes its number there, which the
/// returned end reads (non-blocking). For one process's life, called once.
pub fn catch(signals: &[nix::sys::signal::Signal]) -> std::io::Result<std::os::fd::OwnedFd> {
    use nix::fcntl::{fcntl, FcntlArg, FdFlag, OFlag};
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet};
    use std::os::fd::{AsRawFd, IntoRawFd};
    let (read, write) = nix::unistd::pipe()?;
    for fd in [&read, &write] {
        fcntl(fd.as_raw_fd(), FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))?;
        fcntl(fd.as_raw_fd(), FcntlArg::F_SETFL(OFlag::O_NONBLOCK))?;
    }
    SIGNAL_PIPE.store(write.into_raw_fd(), Ordering::Relaxed);
    let action = SigAction::new(
        SigHandler::Handler(on_signal),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for &s in signals {
        // SAFETY: the handler only writes one byte with write(2) and restores errno.
        unsafe { sigaction(s, &action) }?;
    }
    Ok(read)
}

/// Whether this process ignores `sig` (as it was started: nothing here ignores one).
pub fn ignores(sig: nix::sys::signal::Signal) -> bool {
    // SAFETY: sigaction with no new action only writes the current one into `old`.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: as above; `old` outlives the call.
    let r = unsafe { libc::sigaction(sig as libc::c_int, std::ptr::null(), &mut old) };
    r == 0 && old.sa_sigaction == libc::SIG_IGN
}

/// Stop this process as a job stops (SIGTSTP at its default action, whatever [`catch`]
/// made of it), and return once it is continued.
pub fn stop_self() {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let default = SigAction::new(SigHandler::SigDfl, SaFlags::empty(), SigSet::empty());
    // SAFETY: setting a default action installs no code.
    let Ok(before) = (unsafe { sigaction(Signal::SIGTSTP, &default) }) else {
        return;
    };
    let _ = nix::sys::signal::raise(Signal::SIGTSTP);
    // SAFETY: the action that was there before, as `catch` made it.
    let _ = unsafe { sigaction(Signal::SIGTSTP, &before) };
}

/// `fd` at a number above `last` (a duplicate close-on-exec, the original closed), so
/// that placing others at the numbers up to `last` cannot overwrite it: a caller that
/// left 3 or 4 open makes a new socket or pty land at 4 or 5.
pub fn moved_above(fd: std::os::fd::OwnedFd, last: i32) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::{AsRawFd, FromRawFd};
    if fd.as_raw_fd() > last {
        return Ok(fd);
    }
    let moved = nix::fcntl::fcntl(
        fd.as_raw_fd(),
        nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(last + 1),
    )?;
    // SAFETY: `moved` was just made by F_DUPFD_CLOEXEC and nothing else owns it.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(moved) })
}
