//! `wardcell run`'s terminal keeper: the process the caller's shell started and waits
//! on. The broker, which decides, is its child in a session of its own, so nothing the
//! terminal or the shell does to the job (Ctrl-Z, `fg`, a read in the background) stops
//! it: its time limit, supervisors and audit go on. This process holds the caller's
//! terminal, as ssh's client does while sshd decides. It relays the command's pty (which
//! it made, and gave the broker the slave of), does job control with the shell, copies the window
//! size, and passes every signal of `wardcell_common::terminal::FORWARDED` on to the
//! broker. It decides nothing: what it says to the broker is a signal anyone could send,
//! and it ends with the broker's status. The broker dies with it (PR_SET_PDEATHSIG).

use std::io::{Stderr, Stdin, Stdout};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{kill, Signal};
use nix::sys::termios::{self, Termios};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use wardcell_common::terminal::{keeper, FORWARDED};

use crate::sys;

/// Keep the terminal for `broker` (this process's child) until it ends; end with its
/// status (128+N when a signal N ended it). `chan`: the other end of its fd 4; `pty`: the
/// master of the pty whose slave it has at fd 5, if the caller has a terminal.
pub fn keep(broker: Pid, chan: UnixStream, pty: Option<OwnedFd>) -> ! {
    // What this process was started ignoring stays ignored and is not passed on (the
    // broker, started ignoring it too, would not take it either).
    let passed: Vec<Signal> = FORWARDED
        .iter()
        .copied()
        .filter(|&s| !sys::ignores(s))
        .collect();
    let caught = [&passed[..], &[Signal::SIGCHLD, Signal::SIGWINCH]].concat();
    let signals = match sys::catch(&caught) {
        Ok(fd) => fd,
        Err(e) => {
            let _ = kill(broker, Signal::SIGKILL);
            let _ = waitpid(broker, None);
            wardcell_common::eprintln_line!("error: catching signals: {e}");
            std::process::exit(1)
        }
    };
    let std = (std::io::stdin(), std::io::stdout(), std::io::stderr());
    let mut k = Keeper {
        broker,
        chan: Some(chan),
        pty,
        relay: None,
        stop_asked: false,
    };
    // A broker that ended before SIGCHLD was caught (it refused at once) sent it for
    // nothing: look once now, or this process would wait for a signal that never comes.
    if let Some(code) = k.reap() {
        std::process::exit(code)
    }
    loop {
        if let Some(code) = k.once(signals.as_fd(), &std) {
            if let Some(r) = k.relay.as_mut() {
                r.finish();
            }
            std::process::exit(code)
        }
    }
}

struct Keeper<'a> {
    broker: Pid,
    /// The broker's fd 4, until it closes.
    chan: Option<UnixStream>,
    /// The command's pty, until the broker says the command holds it...
    pty: Option<OwnedFd>,
    /// ...then relayed, until the broker says it is finished.
    relay: Option<PtyRelay<'a>>,
    /// SIGTSTP came while the command has a pty: stop once it has stopped.
    stop_asked: bool,
}

impl<'a> Keeper<'a> {
    /// Wait for one thing to happen and handle it; the status to end with once the
    /// broker has ended.
    fn once(&mut self, signals: BorrowedFd<'_>, std: &'a (Stdin, Stdout, Stderr)) -> Option<i32> {
        let watched = [
            Some(signals),
            self.chan.as_ref().map(|c| c.as_fd()),
            self.relay.as_ref().and_then(|r| r.input()),
            self.relay.as_ref().and_then(|r| r.master()),
        ];
        let mut fds = Vec::new();
        let mut at = [usize::MAX; 4];
        for (i, fd) in watched.into_iter().enumerate() {
            if let Some(fd) = fd {
                at[i] = fds.len();
                fds.push(PollFd::new(fd, PollFlags::POLLIN));
            }
        }
        if poll(&mut fds, PollTimeout::NONE).is_err() {
            return None;
        }
        let ready = at.map(|i| {
            fds.get(i)
                .and_then(|f| f.revents())
                .is_some_and(|r| !r.is_empty())
        });
        drop(fds);
        let mut buf = [0u8; 16 * 1024];
        if ready[1] {
            self.broker_said(std);
        }
        if let Some(r) = self.relay.as_mut() {
            // The caller's terminal hung up: the broker ends the command as for SIGHUP.
            if ready[2] && !r.relay_input(&mut buf) {
                let _ = kill(self.broker, Signal::SIGHUP);
            }
            if ready[3] {
                r.relay_output(&mut buf);
            }
        }
        if ready[0] {
            return self.on_signals(signals);
        }
        None
    }

    /// What the broker says (keeper::*): all it has said so far at once, so that a
    /// command stopped again and again while this process was stopped is one stop.
    fn broker_said(&mut self, std: &'a (Stdin, Stdout, Stderr)) {
        let Some(chan) = &self.chan else { return };
        let mut said = [0u8; 4096];
        let n = match crate::tty::read_some(chan.as_fd(), &mut said) {
            Ok(n) if n > 0 => n,
            // Closed: it is ending; SIGCHLD says when.
            _ => return self.chan = None,
        };
        let said = &said[..n];
        if let Some(&b) = said.iter().find(|b| *b & !7 == keeper::PTY) {
            if let Some(master) = self.pty.take() {
                self.relay = PtyRelay::new(master, b & 7, std);
            }
        }
        if said.contains(&keeper::STOPPED) {
            let asked = std::mem::take(&mut self.stop_asked);
            if let Some(r) = self.relay.as_mut() {
                r.suspend(asked);
            }
            // The command goes on: at once when it stopped itself, else after `fg`.
            let _ = kill(self.broker, Signal::SIGCONT);
        }
        if said.contains(&keeper::FINISH) {
            if let Some(mut r) = self.relay.take() {
                r.finish();
            }
            let _ = std::io::Write::write_all(&mut &*chan, &[keeper::FINISHED]);
        }
    }

    /// Handle the signals caught; the broker's status once it has ended.
    fn on_signals(&mut self, signals: BorrowedFd<'_>) -> Option<i32> {
        let mut caught = [0u8; 64];
        let n = crate::tty::read_some(signals, &mut caught).unwrap_or(0);
        let mut ended = None;
        for &sig in &caught[..n] {
            match Signal::try_from(sig as i32) {
                Ok(Signal::SIGCHLD) => ended = ended.or_else(|| self.reap()),
                Ok(Signal::SIGWINCH) => {
                    if let Some(r) = &self.relay {
                        r.window_changed();
                    }
                }
                Ok(Signal::SIGTSTP) => {
                    let _ = kill(self.broker, Signal::SIGTSTP);
                    if self.relay.is_some() {
                        // The command stops (its init stops its group): so does this
                        // process then, when the broker says so.
                        self.stop_asked = true;
                    } else {
                        // Continued by SIGCONT, which is then passed on.
                        sys::stop_self();
                    }
                }
                Ok(s) => {
                    if s == Signal::SIGCONT {
                        if let Some(r) = self.relay.as_mut() {
                            r.resume();
                        }
                    }
                    let _ = kill(self.broker, s);
                }
                Err(_) => {}
            }
        }
        ended
    }

    /// The broker's status, once it has ended.
    fn reap(&self) -> Option<i32> {
        match waitpid(self.broker, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(_, code)) => Some(code),
            Ok(WaitStatus::Signaled(_, sig, _)) => Some(128 + sig as i32),
            Err(_) => Some(1),
            _ => None,
        }
    }
}

/// The caller's terminal when the command got a pty: the master, the terminal read
/// (stdin, when it is one) and the one written (`tty::output_fd`); `saved`, the
/// settings of `input` before raw mode (entered only in the foreground).
struct PtyRelay<'a> {
    master: OwnedFd,
    input: Option<BorrowedFd<'a>>,
    output: BorrowedFd<'a>,
    saved: Option<Termios>,
    input_open: bool,
    master_open: bool,
    /// The user typed the suspend character (Ctrl-Z) since the last stop: the stop that
    /// follows is theirs. Any other stop is the command's own, and never stops the run.
    suspend_typed: bool,
}

impl<'a> PtyRelay<'a> {
    /// The relay of `master`, in place of the caller's descriptors `ttys` (bit N for N);
    /// raw mode entered when in the foreground.
    fn new(master: OwnedFd, ttys: u8, std: &'a (Stdin, Stdout, Stderr)) -> Option<Self> {
        let output = match crate::tty::output_fd(ttys)? {
            0 => std.0.as_fd(),
            1 => std.1.as_fd(),
            _ => std.2.as_fd(),
        };
        let input = (ttys & 1 != 0).then(|| std.0.as_fd());
        // Non-blocking: a command that reads nothing never holds this process up (what
        // the pty cannot take is dropped, as a full terminal's input is), so signals are
        // still passed on.
        use nix::fcntl::{fcntl, FcntlArg, OFlag};
        let _ = fcntl(master.as_raw_fd(), FcntlArg::F_SETFL(OFlag::O_NONBLOCK));
        let relay = PtyRelay {
            master,
            input,
            output,
            saved: input.and_then(crate::tty::raw_mode),
            input_open: input.is_some(),
            master_open: true,
            suspend_typed: false,
        };
        relay.window_changed();
        Some(relay)
    }

    /// The caller's terminal to read, while it has not hung up.
    fn input(&self) -> Option<BorrowedFd<'_>> {
        self.input.filter(|_| self.input_open)
    }

    /// The pty's master to read, while it is open.
    fn master(&self) -> Option<BorrowedFd<'_>> {
        self.master_open.then(|| self.master.as_fd())
    }

    /// The command stopped: when the user typed Ctrl-Z (or SIGTSTP came, `asked`), do as
    /// a stopped job does under the user's shell. Give the terminal back as it was and
    /// stop (a shell without job control, which ignores SIGTSTP, or an orphaned group,
    /// which never gets it, resumes at once); when continued (`fg`), take the terminal
    /// again. The caller then has the command continued.
    fn suspend(&mut self, asked: bool) {
        if !std::mem::take(&mut self.suspend_typed) && !asked {
            // The command stopped itself, or was stopped from inside: the run goes on.
            return;
        }
        // What the pty echoed before the stop (`^Z`) shows before the shell's prompt.
        crate::tty::drain(self.master.as_fd(), self.output, 0);
        if let (Some(input), Some(saved)) = (self.input, self.saved.take()) {
            crate::tty::restore(input, &saved);
        }
        sys::stop_self();
        self.resume();
    }

    /// Continued (`fg`, or after a stop of our own): raw mode again if in the foreground
    /// now, and the window size, which may have changed meanwhile.
    fn resume(&mut self) {
        if let (Some(input), None) = (self.input, &self.saved) {
            self.saved = crate::tty::raw_mode(input);
        }
        self.window_changed();
    }

    /// The caller's window size, copied to the pty.
    fn window_changed(&self) {
        let _ = sys::copy_winsize(self.output, self.master.as_fd());
    }

    /// Relay what the caller typed; false once the terminal hung up (in raw mode, a read
    /// returns at least one byte otherwise): then the command gets the hangup a terminal
    /// gives, and the input is no longer read.
    fn relay_input(&mut self, buf: &mut [u8]) -> bool {
        let Some(input) = self.input() else {
            return false;
        };
        // In the background a read would stop this process inside it (SIGTTIN) and, after
        // `fg`, go on reading in the shell's line mode until a whole line came. Stop
        // before reading instead, as a background reader does; once continued in the
        // foreground, take raw mode again and look anew. (Where the stop is discarded, in
        // an orphaned process group, the read below fails as it would.)
        if !crate::tty::in_foreground(input) {
            let _ = nix::sys::signal::raise(Signal::SIGTTIN);
            if crate::tty::in_foreground(input) {
                self.resume();
                return true;
            }
        }
        // The user's own suspend character, as their terminal has it, when it stops the
        // command at the pty too (which the sandbox may have changed, or told not to).
        let suspend = self.saved.as_ref().map(|t| t.control_chars[libc::VSUSP]);
        let pty = termios::tcgetattr(self.master.as_fd()).ok();
        let pty = pty.filter(|t| t.local_flags.contains(termios::LocalFlags::ISIG));
        let stops = pty.map(|t| t.control_chars[libc::VSUSP]);
        let suspend = suspend.filter(|c| *c != 0 && Some(*c) == stops);
        if let Ok(n @ 1..) = crate::tty::read_some(input, buf) {
            self.suspend_typed |= suspend.is_some_and(|c| buf[..n].contains(&c));
            let _ = crate::tty::write_all(self.master.as_fd(), &buf[..n]);
            return true;
        }
        self.input_open = false;
        false
    }

    /// Relay what the command wrote; the master is no longer read once it has ended.
    fn relay_output(&mut self, buf: &mut [u8]) {
        match crate::tty::read_some(self.master.as_fd(), buf) {
            Ok(n @ 1..) => drop(crate::tty::write_all(self.output, &buf[..n])),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            _ => self.master_open = false,
        }
    }

    /// The sandbox is gone: what it wrote is relayed until the pty stays quiet (a
    /// process entered from it may still hold it), and the caller's terminal restored,
    /// discarding input the sandbox provoked that no one read (its queries' answers).
    fn finish(&mut self) {
        if self.master_open {
            crate::tty::drain(self.master.as_fd(), self.output, 200);
            self.master_open = false;
        }
        if let (Some(input), Some(saved)) = (self.input, self.saved.take()) {
            crate::tty::restore_at_end(input, &saved);
        }
    }
}
