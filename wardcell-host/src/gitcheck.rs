//! The run's repository, watched by a process of its own (`wardcell-shim --git-watch`,
//! confined before it reads a byte there: wardcell-shim's gitcheck.rs), so that nothing
//! a sandbox leaves there is read or parsed by the broker. This module starts that
//! process, asks it to look (one byte on its stdin), and reads its typed answer (one
//! `GitLook` frame on its stdout) within a deadline. Anything else (it could not start,
//! died, sent garbage, broke a bound, took too long) is a repository that can no longer
//! be checked, reported as [`UNCHECKED`] from then on, which refuses every entry.

use std::io::{self, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use wardcell_common::protocol::GitLook;
use wardcell_common::text::shown;

use crate::process::{self, Watched};

/// How long one look may take (20,000 hooks and 64 changed configurations take well
/// under a second), and the snapshot when the run starts.
pub const DEADLINE: Duration = Duration::from_secs(10);
pub const START_DEADLINE: Duration = Duration::from_secs(30);

/// What is reported, from then on, once the watcher has failed.
pub const UNCHECKED: &str =
    "the run's repository (its watcher failed: what a sandbox leaves there can no longer be checked)";

/// Starts a command as a helper of the broker (from the shim it holds open, dying with
/// the calling thread) and returns it with its watch, which kills and reaps it when
/// dropped.
pub type Spawn<'a, W> = &'a dyn Fn(&mut Command) -> io::Result<(Child, process::Child<W>)>;

/// The watcher of one repository, or its failure.
pub struct GitWatch<W: Watched>(Mutex<Option<Watcher<W>>>);

struct Watcher<W: Watched> {
    ask: ChildStdin,
    answers: ChildStdout,
    /// Its first frame, which says the snapshot is taken, not read yet.
    unready: bool,
    // Killed and reaped when dropped.
    _child: process::Child<W>,
}

impl<W: Watched> GitWatch<W> {
    /// The watcher of `dir`, started by `spawn`, once it has taken its snapshot. With
    /// `empty` (no `dir/.git` before any sandbox ran) its snapshot is that of nothing,
    /// taken at once: the first look reads that it is ready, and the run's start does
    /// not wait for it.
    pub fn start(spawn: Spawn<'_, W>, dir: &Path, empty: bool) -> GitWatch<W> {
        let mut cmd = Command::new("wardcell-shim");
        cmd.arg("--git-watch")
            .arg(dir)
            .args(empty.then_some("--empty"))
            .env_clear()
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let watcher = spawn(&mut cmd).ok().and_then(|(mut child, watched)| {
            let mut w = Watcher {
                ask: child.stdin.take()?,
                answers: child.stdout.take()?,
                unready: true,
                _child: watched,
            };
            (empty || w.ready()).then_some(w)
        });
        GitWatch(Mutex::new(watcher))
    }

    /// What appeared since the run started that can make git run code, a line each (made
    /// safe to print); [`UNCHECKED`] once the watcher has failed.
    pub fn look(&self) -> Vec<String> {
        let mut watcher = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let look = watcher.as_mut().and_then(|w| {
            w.ready().then_some(())?;
            w.ask.write_all(b"?").ok()?;
            read_look(&mut w.answers, Instant::now() + DEADLINE)
        });
        match look {
            Some(look) => look.lines.iter().map(|l| shown(l).into_owned()).collect(),
            None => {
                *watcher = None; // killed and reaped
                vec![UNCHECKED.to_string()]
            }
        }
    }

    /// The run's end: the watcher killed and reaped (nothing of a run is left for its
    /// caller to reap); a look after this is [`UNCHECKED`].
    pub fn end(&self) {
        drop(self.0.lock().unwrap_or_else(|p| p.into_inner()).take());
    }
}

impl<W: Watched> Watcher<W> {
    /// Whether its snapshot is taken: its first frame, empty, read (once) within
    /// [`START_DEADLINE`].
    fn ready(&mut self) -> bool {
        let until = Instant::now() + START_DEADLINE;
        self.unready = self.unready
            && !read_look(&mut self.answers, until).is_some_and(|l| l.lines.is_empty());
        !self.unready
    }
}

/// One look, whole, read by `until`, within its bounds.
fn read_look(from: &mut ChildStdout, until: Instant) -> Option<GitLook> {
    process::read_frame_by::<GitLook>(from, until).filter(GitLook::is_bounded)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use wardcell_common::protocol;

    /// A watch by pid, for these tests' own children.
    pub(crate) struct ByPid(libc::pid_t, std::fs::File);
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

    /// `cmd` started as a stand-in for the watcher, its arguments ignored.
    pub(crate) fn instead(program: &str, args: &[&str]) -> impl Fn(&mut Command) -> SpawnResult {
        let (program, args) = (program.to_string(), args.iter().map(|a| a.to_string()));
        let args: Vec<String> = args.collect();
        move |_: &mut Command| {
            let mut c = Command::new(&program);
            c.args(&args).stdin(Stdio::piped()).stdout(Stdio::piped());
            process::watch(c.spawn()?, |pid| {
                Ok(ByPid(pid, std::fs::File::open("/dev/null")?))
            })
        }
    }
    pub(crate) type SpawnResult = io::Result<(Child, process::Child<ByPid>)>;

    fn frame(lines: &[&str]) -> String {
        let look = GitLook {
            lines: lines.iter().map(|l| l.to_string()).collect(),
        };
        printf(&[look])
    }

    /// `msgs` as frames, in octal escapes for a stand-in's `printf`.
    pub(crate) fn printf<T: protocol::Message>(msgs: &[T]) -> String {
        let bytes = msgs.iter().flat_map(|m| protocol::encode_frame(m).unwrap());
        bytes.map(|b| format!("\\{b:03o}")).collect()
    }

    #[test]
    fn a_watcher_that_fails_in_any_way_is_a_repository_that_cannot_be_checked() {
        let unchecked = vec![UNCHECKED.to_string()];
        // Says nothing, or garbage, or never answers (killed at the deadline).
        for (program, args) in [("/bin/true", vec![]), ("/bin/echo", vec!["garbage"])] {
            let w = GitWatch::start(&instead(program, &args), Path::new("/"), false);
            assert_eq!(w.look(), unchecked, "{program}");
        }
        // Ready, then an answer that breaks a bound, then nothing more is asked of it.
        let long = "x".repeat(GitLook::MOST_BYTES + 1);
        let script = format!(
            "printf '{}'; head -c1 >/dev/null; printf '{}'; sleep 60",
            frame(&[]),
            frame(&[&long])
        );
        let w = GitWatch::start(&instead("/bin/sh", &["-c", &script]), Path::new("/"), false);
        assert_eq!(w.look(), unchecked);
        assert_eq!(w.look(), unchecked);
        // Ready, then a line with a control character: printed escaped.
        let script = format!(
            "printf '{}'; head -c1 >/dev/null; printf '{}'",
            frame(&[]),
            frame(&["a\u{1b}[2Jb"])
        );
        let w = GitWatch::start(&instead("/bin/sh", &["-c", &script]), Path::new("/"), false);
        let got = w.look();
        assert_eq!(got.len(), 1);
        assert!(
            !got[0].contains('\u{1b}') && got[0].starts_with('a'),
            "{got:?}"
        );
    }

    #[test]
    fn an_empty_snapshot_is_not_waited_for_at_the_start_but_at_the_first_look() {
        let script = format!(
            "sleep 1; printf '{}'; head -c1 >/dev/null; printf '{}'",
            frame(&[]),
            frame(&["x"])
        );
        let t = Instant::now();
        let w = GitWatch::start(&instead("/bin/sh", &["-c", &script]), Path::new("/"), true);
        assert!(
            t.elapsed() < Duration::from_millis(500),
            "{:?}",
            t.elapsed()
        );
        assert_eq!(w.look(), vec!["x".to_string()]);
        // Not ready by the deadline, or never: a repository that cannot be checked.
        let w = GitWatch::start(&instead("/bin/true", &[]), Path::new("/"), true);
        assert_eq!(w.look(), vec![UNCHECKED.to_string()]);
    }

    #[test]
    fn a_watcher_that_hangs_is_given_up_at_the_deadline() {
        let script = format!("printf '{}'; sleep 60", frame(&[]));
        let w = GitWatch::start(&instead("/bin/sh", &["-c", &script]), Path::new("/"), false);
        let t = Instant::now();
        assert_eq!(w.look(), vec![UNCHECKED.to_string()]);
        assert!(t.elapsed() >= DEADLINE && t.elapsed() < DEADLINE + Duration::from_secs(3));
    }
}
