//! The broker's macOS system calls, under the names the Linux ones have: no pidfd and no
//! signalfd here, so a kqueue stands in for each (`EVFILT_PROC` for a child's exit,
//! `EVFILT_SIGNAL` for the signals the broker forwards); a kqueue descriptor is readable
//! while an event is pending, so the relay polls it as it polls a pidfd on Linux.
//!
//! Compiled for macOS and checked in CI; untested on a Mac (docs/MACOS.md).

pub mod peer;
pub mod spawn;

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use nix::sys::event::{EventFilter, EventFlag, FilterFlag, KEvent, Kqueue};
use nix::sys::signal::{SigHandler, Signal};

/// recvmsg cannot make received descriptors close-on-exec here: `fds` sets the flag on
/// each as soon as it has it.
pub const MSG_CMSG_CLOEXEC: libc::c_int = 0;

/// The size of `sockaddr_un`'s path, its terminating NUL included.
pub const SUN_PATH_LEN: usize = 104;

/// A child of the broker: its pid, and a kqueue that becomes readable when it exits.
pub struct Process {
    pid: libc::pid_t,
    exited: OwnedFd,
}

impl Process {
    /// A child of ours that has not been reaped (so `pid` is still its).
    pub fn of_child(pid: libc::pid_t) -> io::Result<Process> {
        let kq = Kqueue::new()?;
        let watch = KEvent::new(
            pid as usize,
            EventFilter::EVFILT_PROC,
            EventFlag::EV_ADD,
            FilterFlag::NOTE_EXIT,
            0,
            0,
        );
        // XNU attaches only to a process that has not begun to exit, and
        // never fires for an exit before the attach: one found exited, before or just
        // after, makes the queue readable at once instead.
        let exited = match kq.kevent(&[watch], &mut [], None) {
            Ok(_) => peek_child(pid) == Some(true),
            Err(nix::errno::Errno::ESRCH) => true,
            Err(e) => return Err(e.into()),
        };
        if exited {
            let now = KEvent::new(
                1,
                EventFilter::EVFILT_USER,
                EventFlag::EV_ADD,
                FilterFlag::NOTE_TRIGGER,
                0,
                0,
            );
            kq.kevent(&[now], &mut [], None)?;
        }
        Ok(Process {
            pid,
            exited: kq.as_fd().try_clone_to_owned()?,
        })
    }

    fn has_exited(&self) -> bool {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        let mut fds = [PollFd::new(self.exited.as_fd(), PollFlags::POLLIN)];
        poll(&mut fds, PollTimeout::ZERO).is_ok_and(|n| n > 0)
    }
}

impl AsFd for Process {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.exited.as_fd()
    }
}

/// The signals [`Signals::take`] set to be ignored (bit N-1 for signal N), so that a
/// helper started later gets them back at their default.
static TAKEN: AtomicU64 = AtomicU64::new(0);

/// The signals the broker forwards, read from a kqueue (`EVFILT_SIGNAL` records a signal
/// even when it is ignored, so each is set ignored: none of them ends the broker).
pub struct Signals(Kqueue);

impl Signals {
    /// SIGCHLD is watched but never ignored: an ignored SIGCHLD reaps children itself.
    pub fn take(signals: &[Signal]) -> io::Result<Signals> {
        let kq = Kqueue::new()?;
        for &s in signals {
            let watch = KEvent::new(
                s as usize,
                EventFilter::EVFILT_SIGNAL,
                EventFlag::EV_ADD,
                FilterFlag::empty(),
                0,
                0,
            );
            kq.kevent(&[watch], &mut [], None)?;
            if s != Signal::SIGCHLD {
                // SAFETY: SIG_IGN installs no handler, so no code runs in signal context.
                unsafe { nix::sys::signal::signal(s, SigHandler::SigIgn) }?;
                TAKEN.fetch_or(1 << (s as i32 - 1), Ordering::SeqCst);
            }
        }
        Ok(Signals(kq))
    }

    /// The next signal taken, if one is waiting.
    pub fn next(&self) -> Option<i32> {
        let mut got = [KEvent::new(
            0,
            EventFilter::EVFILT_SIGNAL,
            EventFlag::empty(),
            FilterFlag::empty(),
            0,
            0,
        )];
        let zero = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        match self.0.kevent(&[], &mut got, Some(zero)) {
            Ok(1) => Some(got[0].ident() as i32),
            _ => None,
        }
    }
}

impl AsFd for Signals {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// Fill `buf` from the kernel's random source.
pub fn random_bytes(buf: &mut [u8]) -> io::Result<()> {
    for chunk in buf.chunks_mut(256) {
        // SAFETY: getentropy writes exactly `chunk.len()` (at most 256) bytes into it.
        let r = unsafe { libc::getentropy(chunk.as_mut_ptr().cast(), chunk.len()) };
        super::cerr(r as libc::c_long)?;
    }
    Ok(())
}

/// Whether `pid` is a child of this process (peeked at, never reaped).
pub fn is_child(pid: libc::pid_t) -> bool {
    peek_child(pid).is_some()
}

/// For a child of ours, whether it has exited (without reaping it); None for any other.
fn peek_child(pid: libc::pid_t) -> Option<bool> {
    if pid <= 0 {
        return None;
    }
    // SAFETY: siginfo_t is plain old data.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: waitid writes one siginfo_t into `info`; WNOWAIT leaves the child as it is.
    let r = unsafe {
        libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    // With WNOHANG, a child that has not exited leaves `info` zeroed.
    (r == 0).then_some(info.si_pid == pid)
}

/// Ready `cmd` to start a helper (the approval plugin): the signals the broker took are
/// put back at their default in it. macOS has no parent-death signal: the helper is ended
/// by its process group instead (when the caller goes away, the timeout passes or the
/// run ends), not by the broker's own death.
pub fn for_helper(cmd: &mut std::process::Command) -> &mut std::process::Command {
    use std::os::unix::process::CommandExt;
    let taken = TAKEN.load(Ordering::SeqCst);
    // SAFETY: the closure runs in the child between fork and exec and makes only
    // async-signal-safe calls (signal, to the default) with integers captured by value.
    unsafe {
        cmd.pre_exec(move || {
            for sig in (1..32).filter(|s| taken & (1 << (s - 1)) != 0) {
                libc::signal(sig, libc::SIG_DFL);
            }
            Ok(())
        })
    }
}

/// Start `cmd` as a helper (`for_helper`), watched. macOS has no execveat: the program
/// `exe` holds is started by the path it was opened at (docs/MACOS.md).
pub fn spawn_from(
    _exe: &wardcell_host::exe::Exe,
    cmd: &mut std::process::Command,
) -> io::Result<(std::process::Child, super::Child)> {
    super::watch(for_helper(cmd).spawn()?)
}

/// [`spawn_from`]: the run's helper, whose fd 3 (the guard's socket) macOS leaves
/// unpassed, having nothing to watch.
pub fn spawn_helper(
    exe: &wardcell_host::exe::Exe,
    cmd: &mut std::process::Command,
    _control: BorrowedFd<'_>,
) -> io::Result<(std::process::Child, super::Child)> {
    spawn_from(exe, cmd)
}

/// Wake the thread blocked in `accept` on a listener that is being stopped: shutting a
/// listening socket down does not wake it here, so connect to it once.
pub fn wake_listener(_listener: BorrowedFd<'_>, path: &std::path::Path) {
    let _ = std::os::unix::net::UnixStream::connect(path);
}

/// Whether `fd` is a handle on a path rather than an open file: macOS has no `O_PATH`;
/// only whether it can be inspected.
pub fn is_path_only(fd: BorrowedFd<'_>) -> io::Result<bool> {
    nix::fcntl::fcntl(fd.as_raw_fd(), nix::fcntl::FcntlArg::F_GETFL)?;
    Ok(false)
}

impl wardcell_host::process::Watched for Process {
    /// Signal its process group (a sandbox's command leads its own; so does the approval
    /// plugin), or the process alone while it has none of its own yet. Nothing once it
    /// has exited: its pid may be reaped and reused (there is no pidfd to hold it).
    fn signal(&self, sig: i32) -> io::Result<()> {
        if self.has_exited() {
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
        // SAFETY: kill takes integers and touches no memory of ours.
        if unsafe { libc::kill(-self.pid, sig) } == 0 {
            return Ok(());
        }
        // SAFETY: as above.
        super::cerr(unsafe { libc::kill(self.pid, sig) } as libc::c_long).map(drop)
    }

    fn try_clone(&self) -> io::Result<Process> {
        Ok(Process {
            pid: self.pid,
            exited: self.exited.try_clone()?,
        })
    }
}

impl wardcell_host::wait::Taken for Signals {
    fn next(&self) -> Option<i32> {
        Signals::next(self)
    }
}
