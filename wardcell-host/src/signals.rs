//! The signals the broker takes over and forwards to the sandbox.

use nix::sys::signal::Signal;

/// Signals the broker passes to the sandbox (from its keeper, the client, or anyone).
pub use wardcell_common::terminal::FORWARDED;

/// The signals 1 to 31 process `pid` ignores, as /proc's `SigIgn` writes them (bit N-1
/// for signal N), SIGPIPE left out (a `zone enter` caller is a Rust program: it always
/// ignores it); none when /proc does not say. Linux.
pub fn ignored_by(pid: libc::pid_t) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let hex = status.lines().find_map(|l| l.strip_prefix("SigIgn:"));
    let set = hex.and_then(|h| u64::from_str_radix(h.trim(), 16).ok());
    set.unwrap_or(0) & 0x7fff_ffff & !(1 << (libc::SIGPIPE - 1))
}

/// Which signals the broker takes: one this process was started ignoring (bit N-1 of
/// `ignored` for signal N) stays ignored and is never forwarded (a blocked signal is
/// queued even when ignored, so taking it would forward it or not depending on when it
/// came); and SIGCHLD. (The window size is the terminal keeper's: the client.)
pub fn to_take(ignored: u64) -> Vec<Signal> {
    let mut take: Vec<Signal> = FORWARDED
        .iter()
        .copied()
        .filter(|&s| ignored & (1 << (s as i32 - 1)) == 0)
        .collect();
    take.push(Signal::SIGCHLD);
    take
}

#[cfg(target_os = "linux")]
pub use linux::Signals;

#[cfg(target_os = "linux")]
mod linux {
    use std::io;
    use std::os::fd::{AsFd, BorrowedFd};

    use nix::sys::signal::{SigSet, Signal};
    use nix::sys::signalfd::{SfdFlags, SignalFd};

    /// Signals blocked in this thread (and so in every thread it starts afterwards) and
    /// read from a signalfd.
    pub struct Signals(SignalFd);

    impl Signals {
        /// Must be called before the broker starts a thread.
        pub fn take(signals: &[Signal]) -> io::Result<Signals> {
            let mut mask = SigSet::empty();
            for &s in signals {
                mask.add(s);
            }
            mask.thread_block()
                .and_then(|()| {
                    SignalFd::with_flags(&mask, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
                })
                .map(Signals)
                .map_err(|e| io::Error::other(format!("signalfd: {e}")))
        }

        /// The next signal taken, if one is waiting.
        pub fn next(&self) -> Option<i32> {
            match self.0.read_signal() {
                Ok(Some(info)) => Some(info.ssi_signo as i32),
                _ => None,
            }
        }
    }

    impl AsFd for Signals {
        fn as_fd(&self) -> BorrowedFd<'_> {
            self.0.as_fd()
        }
    }

    impl crate::wait::Taken for Signals {
        fn next(&self) -> Option<i32> {
            Signals::next(self)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_os = "linux")]
    fn ignored_by_reads_what_the_kernel_says_a_process_ignores() {
        let mut child = std::process::Command::new("/bin/sh")
            .args(["-c", "trap '' USR1 HUP PIPE; exec sleep 30"])
            .spawn()
            .unwrap();
        let pid = child.id() as libc::pid_t;
        // With what this test was started ignoring, which the child inherits (a shell's
        // background job ignores INT and QUIT).
        let inherited = ignored_by(std::process::id() as libc::pid_t);
        let want = inherited | 1 << (libc::SIGUSR1 - 1) | 1 << (libc::SIGHUP - 1);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while ignored_by(pid) != want && std::time::Instant::now() < deadline {
            std::thread::yield_now();
        }
        // SIGPIPE is left out; nothing else is ignored.
        assert_eq!(ignored_by(pid), want);
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(ignored_by(0), 0, "no /proc/0: none");
    }

    #[test]
    fn signals_the_broker_takes() {
        let all = to_take(0);
        assert_eq!(&all[..FORWARDED.len()], FORWARDED);
        assert_eq!(all[FORWARDED.len()..], [Signal::SIGCHLD]);
        // Ctrl-Z without a pty, passed on by the keeper: the broker never stops for it.
        assert!(all.contains(&Signal::SIGTSTP));
        // One it was started ignoring (nohup: SIGHUP) is neither taken nor forwarded.
        let hup = 1 << (Signal::SIGHUP as i32 - 1);
        let taken = to_take(hup);
        assert!(!taken.contains(&Signal::SIGHUP), "{taken:?}");
        assert!(taken.contains(&Signal::SIGINT), "{taken:?}");
    }
}
