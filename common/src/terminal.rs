//! The caller's terminal, shared by the broker (`wardcell run`'s pty) and the client
//! (`wardcell zone enter`'s): which standard descriptors are terminals, the signals passed
//! on, what the keeper and the broker say. Making a pty, raw mode and the byte copies of
//! a relay are the client's alone (`wardcell/src/tty.rs`): the broker makes no pty and
//! relays nothing.
//!
//! A command never holds the caller's terminal: when any of stdin, stdout or stderr is
//! one, the command gets a pty of its own in its place, and the caller's side relays.
//! The relaying process stays in the caller's process group, so job control applies to
//! it as to any command: a read from the terminal in the background stops it (SIGTTIN),
//! a change of its modes too (SIGTTOU), and `fg` continues it.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, RawFd};

use std::time::Instant;

use nix::poll::PollTimeout;
use nix::sys::termios;

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
    /// The broker's descriptor of the command's pty, when any of 0, 1, 2 is a terminal:
    /// its slave, which the keeper made (it keeps the master, to relay) before it started
    /// the broker.
    pub const PTY_FD: i32 = 5;
    /// Broker to keeper: the command holds the pty now, start relaying it; the byte's low
    /// three bits say which of 0, 1, 2 are terminals (the pty in their place).
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

/// The `poll` timeout that wakes at `deadline` (none: no timeout).
pub fn timeout_until(deadline: Option<Instant>) -> PollTimeout {
    let Some(t) = deadline else {
        return PollTimeout::NONE;
    };
    let left = t.saturating_duration_since(Instant::now()).as_millis();
    PollTimeout::try_from(left.min(60_000) as i32).unwrap_or(PollTimeout::ZERO)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slave_replaces_terminals_and_closed_stays_closed() {
        assert_eq!(stdio_for(Some(9), 0b010, 0b001), [-1, 9, 2]);
        assert_eq!(stdio_for(None, 0, 0b100), [0, 1, -1]);
        assert_eq!(stdio_for(Some(9), 0b111, 0), [9, 9, 9]);
    }
}
