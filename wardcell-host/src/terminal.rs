//! The first sandbox's terminal: a pty of its own in place of each of the caller's
//! standard descriptors that is a terminal, relayed to the caller's terminal, with job
//! control (Ctrl-Z and `fg`) and the window size. It only carries bytes: which
//! descriptors the sandbox gets, and when it ends, is the broker's.

use std::io::{self, Stderr, Stdin, Stdout};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

use nix::sys::signal::Signal;
use nix::sys::termios::{self, Termios};

use wardcell_common::terminal;

use crate::error::BrokerError;

/// Copies the window size of one terminal to another (the broker's `sys`, the one
/// place its `unsafe` lives).
pub type CopyWinsize = fn(BorrowedFd<'_>, BorrowedFd<'_>) -> io::Result<()>;

/// The first sandbox's stdio: the broker's own, with a new pty (master, slave) in place
/// of each that is a terminal (`ttys`): the command never holds the caller's terminal.
pub struct Terminal {
    pty: Option<(OwnedFd, OwnedFd)>,
    ttys: u8,
}

impl Terminal {
    pub fn for_stdio(copy_winsize: CopyWinsize) -> Result<Terminal, BrokerError> {
        let ttys = terminal::std_ttys();
        let Some(tty) = terminal::output_fd(ttys) else {
            return Ok(Terminal { pty: None, ttys });
        };
        // The caller's settings and window size. Without a terminal stdin, the caller's is
        // never raw: it does the output processing (`\n` to `\r\n`), not the pty.
        let pty = terminal::with_std(tty, |tty| {
            let mut attrs = termios::tcgetattr(tty)?;
            if ttys & 1 == 0 {
                attrs.output_flags.remove(termios::OutputFlags::OPOST);
            }
            let (master, slave) = terminal::open_pty(&attrs)?;
            let _ = copy_winsize(tty, master.as_fd());
            Ok((master, slave))
        })
        .map_err(|e: nix::Error| BrokerError::Sandbox(format!("opening a pty: {e}")))?;
        Ok(Terminal {
            pty: Some(pty),
            ttys,
        })
    }

    /// Whether the sandbox gets a pty.
    pub fn has_pty(&self) -> bool {
        self.pty.is_some()
    }

    /// Descriptors 0, 1, 2 of the sandbox (terminal::stdio_for); `closed`, those this
    /// process was started without.
    pub fn stdio(&self, closed: u8) -> [RawFd; 3] {
        let slave = self.pty.as_ref().map(|(_, s)| s.as_raw_fd());
        terminal::stdio_for(slave, self.ttys, closed)
    }

    /// The relay of the pty to the caller's terminal, once the sandbox holds the slave
    /// (dropped here); raw mode entered when in the foreground.
    pub fn relay(
        self,
        std: &(Stdin, Stdout, Stderr),
        copy_winsize: CopyWinsize,
    ) -> Option<PtyRelay<'_>> {
        let (master, _slave) = self.pty?;
        let output = match terminal::output_fd(self.ttys)? {
            0 => std.0.as_fd(),
            1 => std.1.as_fd(),
            _ => std.2.as_fd(),
        };
        let input = (self.ttys & 1 != 0).then(|| std.0.as_fd());
        Some(PtyRelay {
            master,
            input,
            output,
            saved: input.and_then(terminal::raw_mode),
            copy_winsize,
            input_open: input.is_some(),
            master_open: true,
            suspend_typed: false,
        })
    }
}

/// The caller's terminal when the sandbox got a pty: the master, the terminal read
/// (stdin, when it is one) and the one written (wardcell_common::terminal::output_fd);
/// `saved`, the settings of `input` before raw mode (entered only in the foreground).
pub struct PtyRelay<'a> {
    master: OwnedFd,
    input: Option<BorrowedFd<'a>>,
    output: BorrowedFd<'a>,
    saved: Option<Termios>,
    copy_winsize: CopyWinsize,
    input_open: bool,
    master_open: bool,
    /// The user typed the suspend character (Ctrl-Z) since the last stop: the stop that
    /// follows is theirs. Any other stop is the command's own, and never stops the run.
    suspend_typed: bool,
}

impl PtyRelay<'_> {
    /// The caller's terminal to read, while it has not hung up.
    pub fn input(&self) -> Option<BorrowedFd<'_>> {
        self.input.filter(|_| self.input_open)
    }

    /// The pty's master to read, while it is open.
    pub fn master(&self) -> Option<BorrowedFd<'_>> {
        self.master_open.then(|| self.master.as_fd())
    }

    /// The command stopped (Ctrl-Z): do as a stopped job does under the user's shell.
    /// Give the terminal back as it was and stop (SIGTSTP: a shell without job control,
    /// which ignores it, or an orphaned group, which never gets it, resumes at once);
    /// when continued (`fg`), take the terminal again. The caller then continues the
    /// command.
    pub fn suspend(&mut self) {
        if !std::mem::take(&mut self.suspend_typed) {
            // The command stopped itself, or was stopped from inside: the run goes on
            // (the caller continues the command).
            return;
        }
        // What the pty echoed before the stop (`^Z`) shows before the shell's prompt.
        terminal::drain(self.master.as_fd(), self.output, 0);
        if let (Some(input), Some(saved)) = (self.input, self.saved.take()) {
            terminal::restore(input, &saved);
        }
        let _ = nix::sys::signal::raise(Signal::SIGTSTP);
        self.resume();
    }

    /// Continued (`fg`, or after a stop of our own): raw mode again if in the foreground
    /// now, and the window size, which may have changed meanwhile.
    pub fn resume(&mut self) {
        if let (Some(input), None) = (self.input, &self.saved) {
            self.saved = terminal::raw_mode(input);
        }
        self.window_changed();
    }

    /// SIGWINCH: the caller's window size, copied to the pty.
    pub fn window_changed(&self) {
        let _ = (self.copy_winsize)(self.output, self.master.as_fd());
    }

    /// Relay what the caller typed; false once the terminal hung up (in raw mode, a read
    /// returns at least one byte otherwise): then the command gets the hangup a terminal
    /// gives, and the input is no longer read.
    pub fn relay_input(&mut self, buf: &mut [u8]) -> bool {
        let Some(input) = self.input() else {
            return false;
        };
        // In the background a read would stop this process inside it (SIGTTIN) and, after
        // `fg`, go on reading in the shell's line mode until a whole line came. Stop
        // before reading instead, as a background reader does; once continued in the
        // foreground, take raw mode again and look anew. (Where the stop is discarded, in
        // an orphaned process group, the read below fails as it would.)
        if !terminal::in_foreground(input) {
            let _ = nix::sys::signal::raise(Signal::SIGTTIN);
            if terminal::in_foreground(input) {
                self.resume();
                return true;
            }
        }
        // The user's own suspend character, as their terminal has it (never the pty's,
        // which the sandbox may change).
        let suspend = self.saved.as_ref().map(|t| t.control_chars[libc::VSUSP]);
        if let Ok(n @ 1..) = terminal::read_some(input, buf) {
            self.suspend_typed |= suspend.is_some_and(|c| c != 0 && buf[..n].contains(&c));
            let _ = terminal::write_all(self.master.as_fd(), &buf[..n]);
            return true;
        }
        self.input_open = false;
        false
    }

    /// Relay what the command wrote; the master is no longer read once it has ended.
    pub fn relay_output(&mut self, buf: &mut [u8]) {
        if !terminal::relay_once(self.master.as_fd(), self.output, buf) {
            self.master_open = false;
        }
    }

    /// The sandbox is gone: what it wrote is relayed until the pty stays quiet (a
    /// process entered from it may still hold it), and the caller's terminal restored,
    /// discarding input the sandbox provoked that no one read (its queries' answers).
    pub fn finish(&mut self) {
        if self.master_open {
            terminal::drain(self.master.as_fd(), self.output, 200);
        }
        if let (Some(input), Some(saved)) = (self.input, &self.saved) {
            terminal::restore_at_end(input, saved);
        }
    }
}
