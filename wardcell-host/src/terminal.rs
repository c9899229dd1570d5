//! The first sandbox's terminal: a pty of its own in place of each of the caller's
//! standard descriptors that is a terminal. `wardcell run`'s terminal keeper (the client)
//! made it and keeps its master, which it relays, doing job control with the caller's
//! shell and copying the window size; this process gets the slave. Which descriptors the
//! sandbox gets, and when it ends, is the broker's.

use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

use wardcell_common::terminal::{self, keeper};

use crate::error::BrokerError;

/// Takes a descriptor `wardcell run` left open for this process, refusing any other kind
/// (the broker's `sys`).
pub type Inherited = fn(RawFd) -> io::Result<OwnedFd>;

/// The first sandbox's stdio: the broker's own, with the pty's slave in place of each
/// that is a terminal (`ttys`): the command never holds the caller's terminal.
pub struct Terminal {
    slave: Option<OwnedFd>,
    ttys: u8,
}

impl Terminal {
    /// `kept`: `wardcell run`'s keeper is there, with the pty's slave at
    /// [`keeper::PTY_FD`] (`inherited` takes it) when a descriptor is a terminal (not for
    /// `--plan`).
    pub fn for_stdio(inherited: Inherited, kept: bool) -> Result<Terminal, BrokerError> {
        let ttys = terminal::std_ttys();
        if ttys == 0 {
            return Ok(Terminal { slave: None, ttys });
        }
        if !kept {
            let why = "a terminal needs `wardcell run`, which keeps it";
            return Err(BrokerError::Launch(why.into()));
        }
        let slave = inherited(keeper::PTY_FD)
            .ok()
            .filter(|fd| terminal::is_tty(fd.as_fd()));
        let why = "`wardcell run` left no pty for its terminal";
        let slave = Some(slave.ok_or_else(|| BrokerError::Launch(why.into()))?);
        Ok(Terminal { slave, ttys })
    }

    /// Whether the sandbox gets a pty.
    pub fn has_pty(&self) -> bool {
        self.slave.is_some()
    }

    /// Descriptors 0, 1, 2 of the sandbox (terminal::stdio_for); `closed`, those this
    /// process was started without.
    pub fn stdio(&self, closed: u8) -> [RawFd; 3] {
        let slave = self.slave.as_ref().map(|s| s.as_raw_fd());
        terminal::stdio_for(slave, self.ttys, closed)
    }

    /// The sandbox holds the slave now, and this process none: `wardcell run`'s keeper
    /// starts relaying the master to the caller's terminal.
    pub fn hand_to(self, keeper: Option<&Keeper>) -> io::Result<()> {
        if self.slave.is_none() {
            return Ok(());
        }
        let Some(keeper) = keeper else {
            return Err(io::Error::other("no keeper to relay the pty"));
        };
        (&keeper.0).write_all(&[keeper::PTY | (self.ttys & 7)])
    }
}

/// `wardcell run`'s terminal keeper (the client, this process's parent), on fd
/// [`keeper::FD`]: it holds the caller's terminal and does job control with it, so this
/// process never stops (wardcell_common::terminal::keeper).
pub struct Keeper(UnixStream);

impl Keeper {
    /// The keeper's socket, which `wardcell run` left at fd [`keeper::FD`] (`inherited`
    /// takes it, refusing anything but a socket).
    /// Non-blocking: a keeper that does not read (stopped with the user's job) never
    /// holds this process up.
    pub fn take(inherited: Inherited) -> Result<Keeper, BrokerError> {
        let fd = inherited(keeper::FD).map_err(|e| BrokerError::Launch(e.to_string()))?;
        let sock = UnixStream::from(fd);
        sock.set_nonblocking(true)
            .map_err(|e| BrokerError::Launch(e.to_string()))?;
        Ok(Keeper(sock))
    }

    /// The command stopped (Ctrl-Z, or of itself): the keeper stops too if the user asked,
    /// and has it continued (SIGCONT, forwarded). Not said when the keeper has not read
    /// what was said before: it is told of a stop already.
    pub fn stopped(&self) {
        let _ = (&self.0).write(&[keeper::STOPPED]);
    }

    /// The sandbox is gone: the keeper relays what its pty still shows and gives the
    /// caller's terminal back; waited for (at most [`FINISH_WAIT`] in all, a stopped
    /// keeper never answers) so that what this process says next shows after it, on a
    /// terminal as the caller had it.
    pub fn finish(&self) {
        use nix::poll::{poll, PollFd, PollFlags};
        let until = std::time::Instant::now() + FINISH_WAIT;
        let ready = |flags: PollFlags| {
            let mut fds = [PollFd::new(self.0.as_fd(), flags)];
            poll(&mut fds, terminal::timeout_until(Some(until))).is_ok_and(|n| n > 0)
        };
        loop {
            match (&self.0).write(&[keeper::FINISH]) {
                Ok(_) => break,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && ready(PollFlags::POLLOUT) => {}
                Err(_) => return,
            }
        }
        let mut answer = [0u8; 1];
        while ready(PollFlags::POLLIN) {
            match (&self.0).read(&mut answer) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                _ => return,
            }
        }
    }
}

impl AsFd for Keeper {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// How long the run's end waits for the keeper to give the terminal back.
const FINISH_WAIT: std::time::Duration = std::time::Duration::from_secs(2);
