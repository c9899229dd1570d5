//! The broker's one process type: a child (a sandbox's shim, a proxy, the approval
//! plugin) by its pid and its watch, killed and reaped when it is dropped unreaped.

use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::time::Instant;

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::Pid;

use wardcell_common::protocol::{self, Message};
use wardcell_common::terminal;

/// How a child is watched and signalled (the broker's `sys::Process`: a pidfd on Linux,
/// so that a signal never reaches a process that reused the pid): readable once the
/// child has exited.
pub trait Watched: AsFd {
    fn signal(&self, sig: i32) -> io::Result<()>;

    /// Another watch of the same child.
    fn try_clone(&self) -> io::Result<Self>
    where
        Self: Sized;
}

/// A child of this process that has not been reaped, or was reaped through this value.
/// Dropped unreaped, it is killed and reaped: a half-started sandbox, a proxy or a
/// plugin never outlives the value that owns it, unless it is [`Child::detach`]ed.
pub struct Child<W: Watched> {
    pid: libc::pid_t,
    watch: W,
    reaped: bool,
}

impl<W: Watched> Child<W> {
    /// `pid` must be a child of ours not yet reaped, and `watch` its watch.
    pub fn new(pid: libc::pid_t, watch: W) -> Child<W> {
        Child {
            pid,
            watch,
            reaped: false,
        }
    }

    pub fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// Its watch: readable once it has exited; cloned by those that may end it.
    pub fn watch(&self) -> &W {
        &self.watch
    }

    /// Whether it was reaped (or detached): its pid may name another process now.
    pub fn is_reaped(&self) -> bool {
        self.reaped
    }

    /// Send `sig` (nothing reaches another process once it is reaped).
    pub fn signal(&self, sig: i32) -> io::Result<()> {
        self.watch.signal(sig)
    }

    /// Wait for it to end and reap it: its status (`None` when it was reaped already or
    /// waiting failed). A wait interrupted by a signal's handler waits again: the child
    /// is not reaped until it has been.
    pub fn wait(&mut self) -> Option<WaitStatus> {
        if self.reaped {
            return None;
        }
        let status = loop {
            match waitpid(Pid::from_raw(self.pid), None) {
                Err(nix::errno::Errno::EINTR) => continue,
                other => break other.ok(),
            }
        };
        self.reaped = true;
        status
    }
}

/// Watch `child`, a child of ours just started and not reaped, with `of_child` (the
/// broker's `sys::Process::of_child`); killed and reaped when it cannot be watched.
pub fn watch<W: Watched>(
    mut child: std::process::Child,
    of_child: fn(libc::pid_t) -> io::Result<W>,
) -> io::Result<(std::process::Child, Child<W>)> {
    let pid = child.id() as libc::pid_t;
    match of_child(pid) {
        Ok(watch) => Ok((child, Child::new(pid, watch))),
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(e)
        }
    }
}

impl<W: Watched> Drop for Child<W> {
    fn drop(&mut self) {
        if !self.reaped {
            let _ = self.watch.signal(libc::SIGKILL);
            let _ = waitpid(Pid::from_raw(self.pid), None);
        }
    }
}

/// One frame from a helper (the repository's watcher, the audit writer), whole, read by
/// `until` and within `T`'s limit; `None` for anything else.
pub fn read_frame_by<T: Message>(from: &mut (impl Read + AsFd), until: Instant) -> Option<T> {
    let mut len = [0u8; 4];
    read_by(from, &mut len, until)?;
    let len = u32::from_le_bytes(len) as usize;
    if len > T::MAX_LEN {
        return None;
    }
    let mut payload = vec![0u8; len];
    read_by(from, &mut payload, until)?;
    protocol::decode_payload(&payload).ok()
}

/// `buf` filled from `from` by `until`.
fn read_by(from: &mut (impl Read + AsFd), buf: &mut [u8], until: Instant) -> Option<()> {
    let mut got = 0;
    while got < buf.len() {
        match ready_by(from.as_fd(), PollFlags::POLLIN, until)?.then(|| from.read(&mut buf[got..]))
        {
            Some(Ok(0)) => return None,
            Some(Ok(n)) => got += n,
            Some(Err(e)) if !again(&e) => return None,
            _ => {}
        }
    }
    Some(())
}

/// One frame to a helper, whole, written by `until`: `to` must be non-blocking (a helper
/// that stops reading must not hold up the broker past its deadline).
pub fn write_frame_by<T: Message>(
    to: &mut (impl Write + AsFd),
    msg: &T,
    until: Instant,
) -> Option<()> {
    let frame = protocol::encode_frame(msg).ok()?;
    let mut sent = 0;
    while sent < frame.len() {
        match ready_by(to.as_fd(), PollFlags::POLLOUT, until)?.then(|| to.write(&frame[sent..])) {
            Some(Ok(0)) => return None,
            Some(Ok(n)) => sent += n,
            Some(Err(e)) if !again(&e) => return None,
            _ => {}
        }
    }
    Some(())
}

/// Make writes to `fd` return at once rather than wait for room.
pub fn nonblocking(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<()> {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    use std::os::fd::AsRawFd;
    fcntl(fd.as_raw_fd(), FcntlArg::F_SETFL(OFlag::O_NONBLOCK))?;
    Ok(())
}

/// Whether `fd` is ready for `what` (false: a signal came first), or `None` by `until`.
fn ready_by(fd: std::os::fd::BorrowedFd<'_>, what: PollFlags, until: Instant) -> Option<bool> {
    let mut fds = [PollFd::new(fd, what)];
    match poll(&mut fds, terminal::timeout_until(Some(until))) {
        Ok(1..) => Some(true),
        Err(Errno::EINTR) => Some(false),
        _ => None,
    }
}

/// An error that only says to wait and try again.
fn again(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
    )
}
