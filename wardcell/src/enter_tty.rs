//! `zone enter` from a terminal: the entered command gets a pty of its own, never the
//! caller's terminal (which would let it read what the user types once the client is in
//! the background, or after the entry ends). The client, in the caller's process group,
//! relays between the two, so job control applies to it as to any command: in the
//! background, its read of the terminal stops it (SIGTTIN) and the line stays the shell's.
//!
//! The caller's terminal keeps its modes: it echoes, edits lines and sends Ctrl-C and
//! Ctrl-Z to the client (which a Ctrl-C ends, and with it the entry). The pty passes on
//! what it is given: no echo, no signals, no output processing, but lines (so that the
//! caller's end of input, relayed as the pty's end-of-file character, ends the command's).
//! The entered command has no controlling terminal (it starts a session of its own): a
//! program that changes the terminal's modes (an editor) changes only its pty's, and the
//! pty's window size is the caller's at the start (a later change is not passed on).
//! Linux only: on macOS the caller's descriptors are passed as they are (docs/MACOS.md).

use std::os::fd::{AsFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::termios::{self, LocalFlags, OutputFlags, SpecialCharacterIndices};
use wardcell_common::terminal;

use crate::error::Error;

/// The entered command's pty, and the caller's terminal it is relayed with.
pub struct EnterPty {
    master: OwnedFd,
    /// Until the request is sent: then only the entered sandbox holds it.
    slave: Option<OwnedFd>,
    /// Which of the caller's 0, 1, 2 are terminals (the slave goes in their place).
    ttys: u8,
    /// The pty's end-of-file character, written when the caller's input ends.
    eof: u8,
}

impl EnterPty {
    /// A pty when any of the caller's open 0, 1, 2 (`closed` left out) is a terminal.
    pub fn open(closed: u8) -> Result<Option<EnterPty>, Error> {
        let ttys = terminal::std_ttys() & !closed;
        let Some(tty) = crate::tty::output_fd(ttys) else {
            return Ok(None);
        };
        let fail =
            |e: nix::Error| Error::Refused(format!("opening a pty for the entered command: {e}"));
        let mut attrs =
            wardcell_support::tty::with_std(tty, |t| termios::tcgetattr(t)).map_err(fail)?;
        attrs.local_flags.remove(
            LocalFlags::ECHO
                | LocalFlags::ECHOE
                | LocalFlags::ECHOK
                | LocalFlags::ECHONL
                | LocalFlags::ECHOCTL
                | LocalFlags::ISIG
                | LocalFlags::IEXTEN,
        );
        attrs.local_flags.insert(LocalFlags::ICANON);
        attrs.output_flags.remove(OutputFlags::OPOST);
        let eof = attrs.control_chars[SpecialCharacterIndices::VEOF as usize];
        let (master, slave) = crate::tty::open_pty(&attrs).map_err(fail)?;
        let _ =
            wardcell_support::tty::with_std(tty, |t| crate::sys::copy_winsize(t, master.as_fd()));
        Ok(Some(EnterPty {
            master,
            slave: Some(slave),
            ttys,
            eof: if eof == 0 { 4 } else { eof },
        }))
    }

    /// The descriptor to send in place of the caller's `fd`.
    pub fn stand_in(&self, fd: RawFd) -> RawFd {
        match &self.slave {
            Some(s) if self.ttys & (1 << fd) != 0 => std::os::fd::AsRawFd::as_raw_fd(s),
            _ => fd,
        }
    }

    /// The request is sent: the entered sandbox holds the slave, we no longer do.
    pub fn sent(&mut self) {
        self.slave = None;
    }

    /// Relay until the supervisor has something to say on `conn`.
    pub fn relay_until_answer(&mut self, conn: &UnixStream) {
        let mut buf = [0u8; 16 * 1024];
        let input = self.ttys & 1 != 0;
        let output = crate::tty::output_fd(self.ttys).unwrap_or(1);
        loop {
            let stdin = std::io::stdin();
            let mut fds = vec![
                PollFd::new(conn.as_fd(), PollFlags::POLLIN),
                PollFd::new(self.master.as_fd(), PollFlags::POLLIN),
            ];
            if input && self.eof != 0 {
                fds.push(PollFd::new(stdin.as_fd(), PollFlags::POLLIN));
            }
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => return,
            }
            let ready = |i: usize| {
                fds.get(i)
                    .and_then(|f| f.revents())
                    .is_some_and(|r| !r.is_empty())
            };
            let (answer, shown, typed) = (ready(0), ready(1), ready(2));
            drop(fds);
            if shown && !self.show(output, &mut buf) {
                // The pty is gone (every holder closed it): only the answer is left.
                return;
            }
            if typed {
                match crate::tty::read_some(stdin.as_fd(), &mut buf) {
                    Ok(n) if n > 0 => {
                        let _ = crate::tty::write_all(self.master.as_fd(), &buf[..n]);
                    }
                    // The caller's input ended: so does the command's, once.
                    _ => {
                        let _ = crate::tty::write_all(self.master.as_fd(), &[self.eof]);
                        self.eof = 0;
                    }
                }
            }
            if answer {
                return;
            }
        }
    }

    /// The entry ended: what the command wrote last, until the pty is gone or quiet.
    pub fn drain(&mut self) {
        let output = crate::tty::output_fd(self.ttys).unwrap_or(1);
        wardcell_support::tty::with_std(output, |out| {
            crate::tty::drain(self.master.as_fd(), out, 200)
        });
    }

    /// Copy what the pty shows to the caller's terminal; false once it is gone.
    fn show(&self, output: i32, buf: &mut [u8]) -> bool {
        wardcell_support::tty::with_std(output, |out| {
            crate::tty::relay_once(self.master.as_fd(), out, buf)
        })
    }
}
