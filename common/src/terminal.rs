//! The caller's terminal, shared by the broker (`wardcell run`) and the client
//! (`wardcell zone enter`): which standard descriptors are terminals, raw mode only in
//! the foreground, and the byte copies of a pty relay.
//!
//! A command never holds the caller's terminal: when any of stdin, stdout or stderr is
//! one, the command gets a pty of its own in its place, and the caller's side relays.
//! The relaying process stays in the caller's process group, so job control applies to
//! it as to any command: a read from the terminal in the background stops it (SIGTTIN),
//! a change of its modes too (SIGTTOU), and `fg` continues it.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

use std::time::Instant;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::termios::{self, SetArg, Termios};

/// Signals `wardcell run` passes on to its command: its terminal keeper (the client) to
/// the broker, the broker to the sandbox's init, init to the command. SIGTSTP is the
/// user's Ctrl-Z where the command has no pty (then the keeper stops once it has passed
/// it on); SIGCONT continues the command after a stop.
pub const FORWARDED: &[nix::sys::signal::Signal] = &[
    nix::sys::signal::Signal::SIGINT,
    nix::sys::signal::Signal::SIGTERM,
    nix::sys::signal::Signal::SIGHUP,
    nix::sys::signal::Signal::SIGQUIT,
    nix::sys::signal::Signal::SIGUSR1,
    nix::sys::signal::Signal::SIGUSR2,
    nix::sys::signal::Signal::SIGCONT,
    nix::sys::signal::Signal::SIGTSTP,
];

/// What `wardcell run`'s terminal keeper (the client, which the caller's shell waits on)
/// and its broker (a child in a session of its own) say on the broker's descriptor
/// [`keeper::FD`]: one byte each. The keeper holds the caller's terminal and does job
/// control with it; the broker decides and never stops (ssh's client keeps the terminal
/// while sshd decides).
pub mod keeper {
    /// The broker's end of the socket.
    pub const FD: i32 = 4;
    /// Broker to keeper: the command's pty master comes with this byte (SCM_RIGHTS); its
    /// low three bits say which of 0, 1, 2 are terminals (the pty in their place).
    pub const PTY: u8 = 0x10;
    /// Broker to keeper: the command stopped (only sent with a pty). The keeper stops as
    /// a job if the user typed their suspend character, and then, or at once, sends the
    /// broker SIGCONT.
    pub const STOPPED: u8 = b'S';
    /// Broker to keeper: the sandbox is gone: relay what the pty still shows until it is
    /// quiet, give the terminal back as it was, and answer [`FINISHED`].
    pub const FINISH: u8 = b'F';
    /// Keeper to broker: done; what the broker says now goes to a restored terminal.
    pub const FINISHED: u8 = b'f';
}

/// Whether `fd` is a terminal.
pub fn is_tty(fd: BorrowedFd<'_>) -> bool {
    termios::tcgetattr(fd).is_ok()
}

/// Which of descriptors 0, 1 and 2 are terminals (bit N for fd N).
pub fn std_ttys() -> u8 {
    let mut ttys = 0;
    if is_tty(io::stdin().as_fd()) {
        ttys |= 1;
    }
    if is_tty(io::stdout().as_fd()) {
        ttys |= 2;
    }
    if is_tty(io::stderr().as_fd()) {
        ttys |= 4;
    }
    ttys
}

/// Call `f` with standard descriptor `fd` (0, 1, else 2) borrowed.
pub fn with_std<R>(fd: i32, f: impl FnOnce(BorrowedFd<'_>) -> R) -> R {
    match fd {
        0 => f(io::stdin().as_fd()),
        1 => f(io::stdout().as_fd()),
        _ => f(io::stderr().as_fd()),
    }
}

/// The first of descriptors 0, 1 and 2 that is a terminal (in a sandbox with a pty: the
/// pty's slave), or 0.
pub fn first_std_tty() -> i32 {
    match std_ttys() {
        0 => 0,
        t => t.trailing_zeros() as i32,
    }
}

/// Where a relay writes what the command's pty shows: the first of stdout, stderr and
/// stdin that is a terminal (terminals are opened read-write), from `std_ttys`' mask.
pub fn output_fd(ttys: u8) -> Option<i32> {
    [1, 2, 0].into_iter().find(|fd| ttys & (1 << fd) != 0)
}

/// A new pty (master, slave) with settings `attrs`, both ends close-on-exec.
pub fn open_pty(attrs: &Termios) -> nix::Result<(OwnedFd, OwnedFd)> {
    let pty = nix::pty::openpty(None, Some(attrs))?;
    for fd in [&pty.master, &pty.slave] {
        use nix::fcntl::{fcntl, FcntlArg, FdFlag};
        fcntl(fd.as_raw_fd(), FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))?;
    }
    Ok((pty.master, pty.slave))
}

/// A command's descriptors 0, 1, 2: the pty's `slave` in place of each that is a
/// terminal (`ttys`), -1 for each that is closed (`closed`: it stays closed), else the
/// same descriptor.
pub fn stdio_for(slave: Option<RawFd>, ttys: u8, closed: u8) -> [RawFd; 3] {
    [0, 1, 2].map(|fd| match slave {
        Some(s) if ttys & (1 << fd) != 0 => s,
        _ if closed & (1 << fd) != 0 => -1,
        _ => fd,
    })
}

/// Whether this process's group is the foreground of terminal `fd`.
pub fn in_foreground(fd: BorrowedFd<'_>) -> bool {
    nix::unistd::tcgetpgrp(fd).is_ok_and(|g| g == nix::unistd::getpgrp())
}

/// Put terminal `fd` in raw mode, when this process is in its foreground (in the
/// background, changing its modes would stop us with SIGTTOU: `fg` comes first).
/// Returns its settings before, to restore.
pub fn raw_mode(fd: BorrowedFd<'_>) -> Option<Termios> {
    if !in_foreground(fd) {
        return None;
    }
    let saved = termios::tcgetattr(fd).ok()?;
    let mut raw = saved.clone();
    termios::cfmakeraw(&mut raw);
    termios::tcsetattr(fd, SetArg::TCSADRAIN, &raw).ok()?;
    Some(saved)
}

/// Put back settings `raw_mode` returned.
pub fn restore(fd: BorrowedFd<'_>, saved: &Termios) {
    let _ = termios::tcsetattr(fd, SetArg::TCSADRAIN, saved);
}

/// [`restore`] at the run's end, discarding what arrived on the terminal meanwhile and
/// was not read: the terminal's answers to queries the sandbox sent (a cursor position, a
/// colour) arrive after it has gone, and the user's shell would read them as typed.
pub fn restore_at_end(fd: BorrowedFd<'_>, saved: &Termios) {
    let _ = termios::tcsetattr(fd, SetArg::TCSAFLUSH, saved);
}

/// Copy what `master` shows to `output` until it is gone or quiet for `quiet` (a
/// `poll` timeout in milliseconds; 0: only what is there now).
pub fn drain(master: BorrowedFd<'_>, output: BorrowedFd<'_>, quiet: u16) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        let mut ready = [PollFd::new(master, PollFlags::POLLIN)];
        if !poll(&mut ready, PollTimeout::from(quiet)).is_ok_and(|n| n > 0) {
            return;
        }
        if !relay_once(master, output, &mut buf) {
            return;
        }
    }
}

/// The `poll` timeout that wakes at `deadline` (none: no timeout).
pub fn timeout_until(deadline: Option<Instant>) -> PollTimeout {
    let Some(t) = deadline else {
        return PollTimeout::NONE;
    };
    let left = t.saturating_duration_since(Instant::now()).as_millis();
    PollTimeout::try_from(left.min(60_000) as i32).unwrap_or(PollTimeout::ZERO)
}

/// Copy one read of `from` to `to`; false once `from` has ended.
pub fn relay_once(from: BorrowedFd<'_>, to: BorrowedFd<'_>, buf: &mut [u8]) -> bool {
    match read_some(from, buf) {
        Ok(n) if n > 0 => {
            let _ = write_all(to, &buf[..n]);
            true
        }
        _ => false,
    }
}

/// Read what is there (one read).
pub fn read_some(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match nix::unistd::read(fd.as_raw_fd(), buf) {
            Err(nix::errno::Errno::EINTR) => {}
            r => return r.map_err(io::Error::from),
        }
    }
}

/// Write all of `data`.
pub fn write_all(fd: BorrowedFd<'_>, mut data: &[u8]) -> io::Result<()> {
    while !data.is_empty() {
        match nix::unistd::write(fd, data) {
            Ok(n) => data = &data[n..],
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    /// What arrived on a terminal and was not read (the answer to a query the sandbox
    /// sent) is gone once the run restores the terminal at its end; a plain restore keeps it.
    #[test]
    fn input_left_at_the_end_is_discarded() {
        use std::os::fd::AsFd;
        let pending = |fd: BorrowedFd<'_>| {
            let mut ready = [PollFd::new(fd, PollFlags::POLLIN)];
            poll(&mut ready, PollTimeout::from(100u16)).is_ok_and(|n| n > 0)
        };
        for at_end in [false, true] {
            let pty = nix::pty::openpty(None, None).unwrap();
            let saved = termios::tcgetattr(pty.slave.as_fd()).unwrap();
            // Raw, as the run's terminal is while the sandbox runs.
            let mut raw = saved.clone();
            termios::cfmakeraw(&mut raw);
            termios::tcsetattr(pty.slave.as_fd(), SetArg::TCSANOW, &raw).unwrap();
            nix::unistd::write(&pty.master, b"\x1b[12;1R").unwrap();
            assert!(pending(pty.slave.as_fd()));
            match at_end {
                true => restore_at_end(pty.slave.as_fd(), &saved),
                false => restore(pty.slave.as_fd(), &saved),
            }
            assert_eq!(pending(pty.slave.as_fd()), !at_end, "at the end: {at_end}");
        }
    }
    use super::*;

    #[test]
    fn output_goes_to_the_first_terminal_of_stdout_stderr_stdin() {
        assert_eq!(output_fd(0), None);
        assert_eq!(output_fd(0b111), Some(1));
        assert_eq!(output_fd(0b101), Some(2));
        assert_eq!(output_fd(0b001), Some(0));
    }

    #[test]
    fn the_slave_replaces_terminals_and_closed_stays_closed() {
        assert_eq!(stdio_for(Some(9), 0b010, 0b001), [-1, 9, 2]);
        assert_eq!(stdio_for(None, 0, 0b100), [0, 1, -1]);
        assert_eq!(stdio_for(Some(9), 0b111, 0), [9, 9, 9]);
    }
}
