//! What the run's views hold, watched on the host for the whole run (THREAT_MODEL 3.16)
//! by the run's guard, a thread of the run's helper process (`wardcell-shim --helper`,
//! started with the audit writer: audit.rs; the shim's guard.rs holds the inotify
//! watches and finds what each event undoes), so that none of that is the broker's code.
//! This module asks it, over the socket at the helper's fd 3, to hold each sandbox's
//! paths before the sandbox's view is built (channel H, PROTOCOL 7.4), and reads what it
//! reports from a thread: each path the host undid goes to the broker's `lost`, which
//! ends every sandbox of the run; each tick (at least one a second) to `tick`. A guard
//! that is not there, ends, says anything else or is silent for [`SILENT`] has lost
//! everything (`/`). Reports only: what is done about them is the broker's.

use std::io;
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use wardcell_common::protocol::{GuardReport, GuardRequest};

use crate::error::BrokerError;
use crate::process;

/// How long the guard may be silent (it ticks every second) or take to answer.
pub const SILENT: Duration = Duration::from_secs(10);

/// The run's guard, or why there is none.
pub struct Guard {
    io: Mutex<Io>,
    /// The run has ended: nothing is reported, and nothing held, after.
    ended: Arc<AtomicBool>,
}

struct Io {
    to: Option<UnixStream>,
    /// What it says, until the reading thread takes it.
    from: Option<UnixStream>,
    /// Paths lost before the thread started, reported once it has.
    early: Vec<PathBuf>,
    /// Its answers, once the thread reads them.
    answers: Option<Receiver<GuardReport>>,
}

impl Guard {
    /// The broker's end of the guard's socket, and the end to place at the run's helper's
    /// fd 3 (then closed here); without it nothing can be held, and no sandbox is built
    /// ([`Guard::hold`]).
    pub fn pair() -> (Guard, Option<UnixStream>) {
        // Non-blocking (both directions: one socket): written to and read with deadlines.
        let pair = UnixStream::pair().and_then(|(a, b)| a.set_nonblocking(true).map(|()| (a, b)));
        let (ours, theirs) = pair.map_or((None, None), |(a, b)| (Some(a), Some(b)));
        let to = ours.as_ref().and_then(|s| s.try_clone().ok());
        let io = Io {
            to,
            from: ours,
            early: Vec::new(),
            answers: None,
        };
        (
            Guard {
                io: Mutex::new(io),
                ended: Arc::default(),
            },
            theirs,
        )
    }

    /// Start reading what the guard says (in the broker: once the signals it takes are
    /// blocked, which the threads inherit). While `owner` (the run) lives, `lost` is
    /// called with each held path the host undid (`/` for events the kernel dropped, and
    /// for a guard gone or silent), and `tick` with each tick (the broker looks at the
    /// run's repository then), from a thread of their own: one reads, so that answers
    /// and silence are seen whatever the callbacks take.
    pub fn start<T: Send + Sync + 'static>(
        &self,
        owner: Weak<T>,
        lost: fn(&T, &Path),
        tick: fn(&T),
    ) -> Result<(), BrokerError> {
        let mut io = self.io.lock().unwrap_or_else(|p| p.into_inner());
        let (answers, to_broker) = channel();
        let (acts, acted) = channel();
        let (from, early) = (io.from.take(), std::mem::take(&mut io.early));
        io.answers = Some(to_broker);
        early.into_iter().for_each(|p| drop(acts.send(Some(p))));
        let ended = self.ended.clone();
        let reads = move || {
            let Some(mut from) = from else {
                return drop(acts.send(Some("/".into())));
            };
            loop {
                let said = process::read_frame_by(&mut from, Instant::now() + SILENT);
                let act = match said {
                    Some(GuardReport::Tick) => None,
                    Some(GuardReport::Lost(p)) => Some(p),
                    Some(answer) => {
                        let _ = answers.send(answer);
                        continue;
                    }
                    None if ended.load(Ordering::SeqCst) => return,
                    None => return drop(acts.send(Some("/".into()))),
                };
                if !ended.load(Ordering::SeqCst) {
                    let _ = acts.send(act);
                }
            }
        };
        let ended = self.ended.clone();
        let acts = move || {
            while let Ok(act) = acted.recv() {
                // Ticks that queued while a callback ran are one look.
                let act = act.or_else(|| acted.try_iter().find_map(|a| a));
                let Some(owner) = owner.upgrade().filter(|_| !ended.load(Ordering::SeqCst)) else {
                    continue;
                };
                match act {
                    Some(p) => lost(&owner, &p),
                    None => tick(&owner),
                }
            }
        };
        for (name, work) in [
            ("guard", Box::new(reads) as Box<dyn FnOnce() + Send>),
            ("guard-acts", Box::new(acts)),
        ] {
            let spawned = std::thread::Builder::new().name(name.into()).spawn(work);
            spawned.map_err(|e| BrokerError::Sandbox(format!("starting a thread: {e}")))?;
        }
        Ok(())
    }

    /// Hold `paths`, each `(path, tree)`: from now on the host replacing one is reported.
    /// An error (no watch could be added: the user's inotify limits; no guard) means it
    /// cannot be held, and the sandbox must not be built.
    pub fn hold(&self, paths: &[(PathBuf, PathBuf)]) -> Result<(), BrokerError> {
        if self.ended.load(Ordering::SeqCst) {
            return Err(unheld("the run has ended"));
        }
        match self.ask(GuardRequest::Hold(paths.to_vec())) {
            Some(GuardReport::Held) => Ok(()),
            Some(GuardReport::Unheld(why)) => Err(unheld(&why)),
            _ => Err(unheld(
                "the run's guard (wardcell-shim --helper) stopped answering",
            )),
        }
    }

    /// The run has ended: nothing more reported or held, every watch removed now (the
    /// kernel frees them while the run ends: see the shim's guard.rs), and the guard's
    /// socket closed (the helper ends with the audit log).
    pub fn end(&self) {
        self.ended.store(true, Ordering::SeqCst);
        let _ = self.ask(GuardRequest::End);
        cut_off(&mut self.io.lock().unwrap_or_else(|p| p.into_inner()).to);
    }

    /// One request and its answer: read here until the thread reads what the guard says
    /// (paths lost meanwhile kept for it), then from the thread. A guard that does not
    /// answer in time is cut off: the thread then reports everything lost.
    fn ask(&self, request: GuardRequest) -> Option<GuardReport> {
        let mut io = self.io.lock().unwrap_or_else(|p| p.into_inner());
        process::write_frame_by(io.to.as_mut()?, &request, Instant::now() + SILENT)?;
        let Io {
            to,
            from,
            early,
            answers,
        } = &mut *io;
        loop {
            let said = match (from.as_mut(), answers.as_ref()) {
                (Some(from), _) => process::read_frame_by(from, Instant::now() + SILENT),
                (None, Some(answers)) => answers.recv_timeout(SILENT).ok(),
                (None, None) => None,
            };
            match said {
                Some(GuardReport::Lost(p)) => early.push(p),
                Some(GuardReport::Tick) => {}
                Some(answer) => return Some(answer),
                None => {
                    cut_off(to);
                    return None;
                }
            }
        }
    }
}

/// Nothing more is asked of the guard: its socket shut down, so that the reading thread
/// sees its end.
fn cut_off(to: &mut Option<UnixStream>) {
    if let Some(s) = to.take() {
        let _ = s.shutdown(Shutdown::Both);
    }
}

fn unheld(why: &str) -> BrokerError {
    BrokerError::Refused(crate::messages::unheld(&io::Error::other(why.to_string())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gitcheck::tests::printf;
    use std::process::{Command, Stdio};

    /// What the broker's run stands for here: what was reported, in order.
    type Owner = Mutex<Vec<String>>;

    /// A guard whose other end is `script` (its stdin and stdout), asked to hold once,
    /// then read from a thread.
    fn started(script: &str) -> (Guard, Arc<Owner>, std::process::Child) {
        let (g, theirs) = Guard::pair();
        let theirs = theirs.unwrap();
        let child = Command::new("/bin/sh")
            .args(["-c", script])
            .stdin(Stdio::from(std::os::fd::OwnedFd::from(
                theirs.try_clone().unwrap(),
            )))
            .stdout(Stdio::from(std::os::fd::OwnedFd::from(theirs)))
            .spawn()
            .unwrap();
        let owner = Arc::new(Owner::default());
        let _ = g.hold(&[("/a".into(), "/".into())]);
        let lost = |o: &Owner, p: &Path| o.lock().unwrap().push(p.display().to_string());
        let tick = |o: &Owner| o.lock().unwrap().push("tick".into());
        g.start(Arc::downgrade(&owner), lost, tick).unwrap();
        (g, owner, child)
    }

    fn reports(owner: &Owner, n: usize) -> Vec<String> {
        let until = Instant::now() + Duration::from_secs(5);
        while owner.lock().unwrap().len() < n && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        owner.lock().unwrap().clone()
    }

    #[test]
    fn what_the_guard_reports_reaches_the_run_and_its_end_is_everything_lost() {
        // Lost before the thread reads: kept for it. Then a tick, then the guard ends.
        let frames = printf(&[
            GuardReport::Lost("/a".into()),
            GuardReport::Held,
            GuardReport::Tick,
        ]);
        let (g, owner, mut child) = started(&format!("printf '{frames}'; head -c1 >/dev/null"));
        assert_eq!(reports(&owner, 3), ["/a", "tick", "/"]);
        // It is gone: nothing more can be held.
        assert!(g.hold(&[("/b".into(), "/".into())]).is_err());
        child.wait().unwrap();
    }

    #[test]
    fn no_guard_holds_nothing_and_after_the_end_nothing_is_reported() {
        let (g, theirs) = Guard::pair();
        drop(theirs);
        let e = g.hold(&[("/a".into(), "/".into())]).unwrap_err();
        assert!(e.to_string().contains("stopped answering"), "{e}");
        // Answers, then lost paths after the run's end: not reported, nothing held.
        let frames = printf(&[GuardReport::Held, GuardReport::Ended]);
        let late = printf(&[GuardReport::Lost("/a".into())]);
        let script = format!("printf '{frames}'; sleep 0.3; printf '{late}'; cat >/dev/null");
        let (g, owner, mut child) = started(&script);
        g.end();
        std::thread::sleep(Duration::from_millis(500));
        assert!(owner.lock().unwrap().is_empty());
        assert!(g.hold(&[("/b".into(), "/".into())]).is_err());
        child.wait().unwrap();
    }
}
