//! Running the machine's approval plugin for one zone entry (channel E, docs/PROTOCOL.md
//! section 7). Its request is built, and its answer parsed, in wardcell_common::approval;
//! the broker decides with that answer. This module only runs the process and carries
//! its bytes, bounded, to `parse_answer`; every way it can fail is a refusal.
//!
//! The plugin runs outside any sandbox, from `/`, with the helper environment
//! (wardcell_common::helper), in a process group of its own. Its answer is taken when the
//! plugin itself exits, whatever its children still hold open; then its whole group is
//! killed. It is also killed with its group when the caller goes away, when the zone's
//! `approval_timeout` passes, and when the run ends (the supervisor tracks its process like
//! an entered sandbox's).

use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{killpg, Signal};
use nix::sys::wait::WaitStatus;
use nix::unistd::Pid;
use serde_json::Value;
use wardcell_common::trace;

use wardcell_common::approval::Answer;
use wardcell_common::approval::{parse_answer, MAX_ANSWER};
use wardcell_common::helper;

use crate::process::{self, Watched};

/// A started plugin; dropping it kills its process group and reaps it.
pub struct Plugin<W: Watched> {
    process: process::Child<W>,
    stdout: ChildStdout,
}

impl<W: Watched> Drop for Plugin<W> {
    fn drop(&mut self) {
        // Its group first; then `process` is killed and reaped as it is dropped.
        if !self.process.is_reaped() {
            self.end();
        }
    }
}

impl<W: Watched> Plugin<W> {
    /// Start `plugin` with `request` on its stdin. `host_env` is the environment `wardcell
    /// run` started in; the plugin gets only the helper variables of it. `spawn` starts
    /// the command as a helper of the broker (dying with the thread that starts it) and
    /// returns it with its watch.
    pub fn start(
        plugin: Option<&[String]>,
        request: &Value,
        host_env: &[(String, String)],
        spawn: impl FnOnce(&mut Command) -> io::Result<(Child, process::Child<W>)>,
    ) -> Result<Plugin<W>, Answer> {
        let Some((prog, args)) = plugin.and_then(|p| p.split_first()) else {
            return Err(Answer::refusal(
                "no approval plugin is configured ([approval] plugin in zones.toml)",
            ));
        };
        tracing::debug!(plugin = %prog, "asking the approval plugin");
        let mut cmd = Command::new(prog);
        cmd.args(args)
            .current_dir(helper::HELPER_CWD)
            .env_clear()
            .envs(helper::helper_env(host_env.iter().map(|(k, v)| (k, v))))
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        // A tracing run traces its plugin too, to the same stderr.
        if let Some(level) = trace::level() {
            cmd.env(trace::VAR, trace::name(level))
                .stderr(Stdio::inherit());
        }
        let (mut child, process) = spawn(&mut cmd).map_err(|e| {
            Answer::refusal(format!("the approval plugin could not be started: {e}"))
        })?;
        let mut stdin = child.stdin.take().expect("piped");
        let stdout = child.stdout.take().expect("piped");
        let plugin = Plugin { process, stdout };
        // Its stdout is drained as it comes, and read to what is there once it exits.
        process::nonblocking(plugin.stdout.as_fd()).map_err(|e| {
            Answer::refusal(format!("the approval plugin could not be started: {e}"))
        })?;
        // A plugin that does not read its stdin must not block the supervisor: written
        // from a thread of its own, which ends when the plugin's group is killed.
        let input = format!("{request}\n");
        std::thread::spawn(move || {
            let _ = stdin.write_all(input.as_bytes());
        });
        Ok(plugin)
    }

    /// The process: SIGKILL through it ends the wait in [`Plugin::answer`].
    pub fn process(&self) -> &W {
        self.process.watch()
    }

    /// Kill its process group. Safe while the plugin is not reaped: its process ID, which
    /// is the group's ID, cannot be reused before then.
    fn end(&self) {
        let _ = killpg(Pid::from_raw(self.process.pid()), Signal::SIGKILL);
    }

    /// Wait for the answer: until the plugin exits, the caller's connection `caller` shows
    /// it is gone, or `timeout` (None: as long as it takes) passes.
    pub fn answer(mut self, timeout: Option<Duration>, caller: BorrowedFd<'_>) -> Answer {
        let until = timeout.map(|t| Instant::now() + t);
        let mut out = Vec::new();
        let mut stdout_open = true;
        loop {
            let wait = match until {
                None => PollTimeout::NONE,
                Some(until) => {
                    let left = until.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Answer::refusal(
                            "the approval plugin did not answer within the zone's approval_timeout",
                        );
                    }
                    PollTimeout::try_from(left).unwrap_or(PollTimeout::MAX)
                }
            };
            let mut fds = vec![
                PollFd::new(self.process.watch().as_fd(), PollFlags::POLLIN),
                PollFd::new(caller, PollFlags::POLLIN),
            ];
            if stdout_open {
                fds.push(PollFd::new(self.stdout.as_fd(), PollFlags::POLLIN));
            }
            match poll(&mut fds, wait) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Answer::refusal(format!("waiting for the approval plugin: {e}")),
            }
            let ready = |i: usize| {
                fds.get(i)
                    .and_then(|f| f.revents())
                    .is_some_and(|r| !r.is_empty())
            };
            let (exited, caller_gone, readable) = (ready(0), ready(1), ready(2));
            drop(fds);
            if caller_gone {
                // The caller sends nothing after its request: readable means gone.
                return Answer::refusal(
                    "the caller went away before the approval plugin answered; the plugin was ended",
                );
            }
            if readable || exited {
                match self.drain(&mut out) {
                    Ok(open) => stdout_open = open,
                    Err(refusal) => return refusal,
                }
            }
            if exited {
                // Its children may still hold stdout: what is there now is the answer.
                self.end();
                return match self.process.wait().map(exit_status) {
                    Some(status) if status.success() => parse_answer(&out),
                    Some(status) => {
                        Answer::refusal(format!("the approval plugin failed ({status})"))
                    }
                    None => {
                        Answer::refusal("the approval plugin failed: it could not be waited for")
                    }
                };
            }
        }
    }

    /// Read what its stdout holds now; false once it is closed.
    fn drain(&mut self, out: &mut Vec<u8>) -> Result<bool, Answer> {
        let mut buf = [0u8; 4096];
        loop {
            match self.stdout.read(&mut buf) {
                Ok(0) => return Ok(false),
                Ok(n) if out.len() + n > MAX_ANSWER => {
                    return Err(Answer::refusal(format!(
                        "the approval plugin's answer is longer than {} KiB",
                        MAX_ANSWER / 1024
                    )))
                }
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(true),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(Answer::refusal(format!(
                        "reading the approval plugin's answer failed: {e}"
                    )))
                }
            }
        }
    }
}

/// A status as std shows it ("exit status: 3", "signal: 9 (SIGKILL)").
fn exit_status(status: WaitStatus) -> ExitStatus {
    match status {
        WaitStatus::Exited(_, code) => ExitStatus::from_raw((code & 0xff) << 8),
        WaitStatus::Signaled(_, sig, core) => ExitStatus::from_raw(sig as i32 | (core as i32) << 7),
        _ => ExitStatus::from_raw(0xff << 8),
    }
}
