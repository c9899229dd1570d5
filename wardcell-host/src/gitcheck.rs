//! A git configuration file a sandbox may have written, parsed in a process of its own
//! (`wardcell-shim --git-config`, confined before it reads a byte: wardcell-shim's
//! gitcheck.rs), so that a bug in the parser cannot change what the broker does. This
//! module only runs that process and carries the bytes: the file's to its stdin, one
//! `gitconfig::Parsed` frame back from its stdout, read within [`DEADLINE`]. Anything
//! else (it could not start, died, sent garbage, took too long) is
//! [`Parsed::TooLarge`]: a file that could not be checked, which the broker reports as
//! it does one too large to check.

use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags};

use wardcell_common::gitconfig::{Parsed, MAX_FILE};
use wardcell_common::protocol::{self, Message};
use wardcell_common::terminal;

use crate::process::{self, Watched};

/// How long the parser has for one file (a megabyte parses in milliseconds).
pub const DEADLINE: Duration = Duration::from_secs(5);

/// Starts a command as a helper of the broker (from the shim it holds open, dying with
/// the calling thread) and returns it with its watch, which kills and reaps it when
/// dropped.
pub type Spawn<'a, W> = &'a dyn Fn(&mut Command) -> io::Result<(Child, process::Child<W>)>;

/// Parse `bytes` in the shim's `--git-config` mode, started by `spawn`.
pub fn parse<W: Watched>(spawn: Spawn<'_, W>, bytes: &[u8]) -> Parsed {
    if bytes.len() > MAX_FILE {
        return Parsed::TooLarge;
    }
    let mut cmd = Command::new("wardcell-shim");
    cmd.arg("--git-config")
        .env_clear()
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let (mut child, watched) = match spawn(&mut cmd) {
        Ok(started) => started,
        Err(e) => {
            tracing::debug!(error = %e, "the git configuration parser did not start");
            return Parsed::TooLarge;
        }
    };
    let (stdin, stdout) = (child.stdin.take(), child.stdout.take());
    let answer = std::thread::scope(|s| {
        // Written from a thread of its own: a parser that stops reading is killed at the
        // deadline below, which ends the write.
        s.spawn(move || stdin.map(|mut i| i.write_all(bytes)));
        let answer = stdout.and_then(read_answer);
        let _ = child.kill();
        answer
    });
    // Killed (if it is still there) and reaped.
    drop(watched);
    answer.unwrap_or_else(|| {
        tracing::debug!("the git configuration parser gave no answer");
        Parsed::TooLarge
    })
}

/// Its one frame, read within [`DEADLINE`] (the parser reads all its input first).
fn read_answer(mut out: std::process::ChildStdout) -> Option<Parsed> {
    let until = Instant::now() + DEADLINE;
    let mut got = Vec::new();
    let most = Parsed::MAX_LEN + 4;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let mut fds = [PollFd::new(out.as_fd(), PollFlags::POLLIN)];
        if poll(&mut fds, terminal::timeout_until(Some(until))).ok()? == 0 {
            return None;
        }
        match out.read(&mut buf) {
            Ok(0) => break,
            Ok(n) if got.len() + n <= most => got.extend_from_slice(&buf[..n]),
            Ok(_) => return None,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    protocol::read_frame(&mut got.as_slice()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A watch by pid, for these tests' own children.
    struct ByPid(libc::pid_t, std::fs::File);
    impl AsFd for ByPid {
        fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
            self.1.as_fd()
        }
    }
    impl Watched for ByPid {
        fn signal(&self, sig: i32) -> io::Result<()> {
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(self.0),
                nix::sys::signal::Signal::try_from(sig)?,
            )?;
            Ok(())
        }
        fn try_clone(&self) -> io::Result<Self> {
            Ok(ByPid(self.0, self.1.try_clone()?))
        }
    }

    fn started(child: io::Result<Child>) -> io::Result<(Child, process::Child<ByPid>)> {
        process::watch(child?, |pid| {
            Ok(ByPid(pid, std::fs::File::open("/dev/null")?))
        })
    }

    /// The shim of this build, where cargo puts it.
    fn shim() -> std::path::PathBuf {
        let exe = std::env::current_exe().unwrap();
        exe.parent()
            .unwrap()
            .parent()
            .unwrap()
            .join("wardcell-shim")
    }

    #[test]
    fn a_file_is_parsed_by_the_shim_and_failures_are_files_not_checked() {
        let shim = shim();
        if !shim.exists() {
            eprintln!("skipped: no {} (cargo build first)", shim.display());
            return;
        }
        let spawn = |cmd: &mut Command| {
            let mut real = Command::new(&shim);
            real.args(cmd.get_args())
                .env_clear()
                .stdin(Stdio::piped())
                .stdout(Stdio::piped());
            started(real.spawn())
        };
        let got = parse(&spawn, b"[core]\n\tfsmonitor = x\n");
        let Parsed::Entries(e) = got else {
            panic!("{got:?}")
        };
        assert_eq!(e[0].key, "core.fsmonitor");
        // A program that answers nothing, or garbage.
        let silent = |_: &mut Command| {
            let mut c = Command::new("/bin/true");
            started(c.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn())
        };
        assert_eq!(parse(&silent, b"[core]\n"), Parsed::TooLarge);
        let garbage = |_: &mut Command| {
            let mut c = Command::new("/bin/echo");
            started(
                c.arg("garbage")
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .spawn(),
            )
        };
        assert_eq!(parse(&garbage, b"[core]\n"), Parsed::TooLarge);
        // One that never answers is killed at the deadline.
        let hung = |_: &mut Command| {
            let mut c = Command::new("/bin/sleep");
            started(
                c.arg("60")
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .spawn(),
            )
        };
        let t = std::time::Instant::now();
        assert_eq!(parse(&hung, b"[core]\n"), Parsed::TooLarge);
        assert!(t.elapsed() < DEADLINE + Duration::from_secs(2));
    }
}
