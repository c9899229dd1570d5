//! The relay's side of the caller's terminal, which only the client does (`wardcell
//! run`'s keeper, `wardcell zone enter`): the command's pty made, raw mode only in the
//! foreground, the terminal put back, and the byte copies of a pty relay.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use wardcell_common::terminal;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::termios::{self, SetArg, Termios};

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

/// `wardcell run`'s pty (master, slave), when any of 0, 1, 2 is a terminal, with the
/// caller's settings and window size; without a terminal stdin, the caller's is never
/// raw, so it does the output processing (`\n` to `\r\n`), not the pty. The keeper
/// keeps the master and relays it; the broker gets the slave (`keeper::PTY_FD`).
pub fn pty_for_run() -> nix::Result<Option<(OwnedFd, OwnedFd)>> {
    let ttys = terminal::std_ttys();
    let Some(tty) = output_fd(ttys) else {
        return Ok(None);
    };
    wardcell_support::tty::with_std(tty, |tty| {
        let mut attrs = termios::tcgetattr(tty)?;
        if ttys & 1 == 0 {
            attrs.output_flags.remove(termios::OutputFlags::OPOST);
        }
        let (master, slave) = open_pty(&attrs)?;
        let _ = crate::sys::copy_winsize(tty, master.as_fd());
        Ok(Some((master, slave)))
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
    use super::*;

    #[test]
    fn output_goes_to_the_first_terminal_of_stdout_stderr_stdin() {
        assert_eq!(output_fd(0), None);
        assert_eq!(output_fd(0b111), Some(1));
        assert_eq!(output_fd(0b101), Some(2));
        assert_eq!(output_fd(0b001), Some(0));
    }

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
}
