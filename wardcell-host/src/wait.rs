//! Waiting for a sandbox: the signals the broker took over forwarded (an ending one
//! with a grace, then SIGKILL), the first sandbox's stops told to `wardcell run`'s
//! terminal keeper, the `zone enter` caller and the time limit watched, and the shim's reports read until it is gone.
//! It returns what the reports and the shim's status add up to ([`Outcome::of`]: what
//! the shim reports is untrusted, and at most its exit status is relayed).

use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags};
use nix::sys::wait::{waitpid, WaitPidFlag};
use nix::unistd::Pid;

use wardcell_common::protocol::{self, FrameError, ShimReport};
use wardcell_common::terminal;

pub use crate::messages::Outcome;
use crate::process::Child;
pub use crate::process::Watched;
use crate::terminal::Keeper;

/// Signals taken over, read from a descriptor (`crate::signals::Signals` on Linux).
pub trait Taken: AsFd {
    /// The next signal taken, if one is waiting.
    fn next(&self) -> Option<i32>;
}

/// Signals that end a run: forwarded, then SIGCONT (a stopped command would never see
/// them), then, if the sandbox is still there after [`GRACE`], SIGKILL.
const ENDING: &[i32] = &[libc::SIGTERM, libc::SIGHUP, libc::SIGINT];

/// How long a sandbox has to end after an ending signal (docs/COMMANDS.md, on the terminal).
pub const GRACE: Duration = Duration::from_secs(5);

/// What to watch besides the sandbox itself.
#[derive(Default)]
pub struct Watch<'a> {
    /// Signals the broker forwards (and SIGCHLD).
    pub signals: Option<&'a dyn Taken>,
    /// A child of the broker to reap when it exits (the client's plan writer), on SIGCHLD.
    pub reap: Option<Pid>,
    /// `wardcell run`'s terminal keeper, which relays the first sandbox's pty: told when
    /// the command stops, and when the sandbox is gone.
    pub keeper: Option<&'a Keeper>,
    /// The `zone enter` connection: when the caller goes away, the sandbox is ended.
    pub caller: Option<BorrowedFd<'a>>,
    /// The time limit's end: then the sandbox is ended as by SIGTERM to `wardcell run`.
    pub deadline: Option<Instant>,
}

/// How the wait ended.
pub struct Waited {
    /// What the shim's reports and its own status (when it was reaped) add up to.
    pub outcome: Outcome,
    /// The caller went away first, and the sandbox was ended for it.
    pub caller_gone: bool,
    /// The shim sent something that is not a report: reading stopped there, and the
    /// sandbox was ended.
    pub bad_report: Option<String>,
    /// The time limit ended it.
    pub timed_out: bool,
}

/// Relay until the sandbox ends: `shim` is its shim, `control` the socket its reports
/// come on; `failed_step` names the shim's own exit statuses (see [`Outcome::of`]). What
/// each event means is [`Loop`]'s to decide; this only polls and carries out its acts.
pub fn wait<W: Watched>(
    shim: &mut Child<W>,
    control: &mut UnixStream,
    watch: Watch<'_>,
    on_report: &mut dyn FnMut(&ShimReport),
    failed_step: fn(i32) -> Option<&'static str>,
) -> Waited {
    let Watch {
        signals,
        keeper,
        caller,
        reap,
        deadline,
    } = watch;
    let mut table = Loop::new(deadline, caller.is_some());
    let mut status = None;
    while !table.over {
        let open = (table.control_open, table.caller_open);
        let [child_ready, sig_ready, control_ready, caller_ready] =
            match poll_ready(shim.watch(), control, signals, caller, open, table.wake()) {
                Ok(r) => r,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => break,
            };
        let mut events = vec![Event::Time];
        if caller_ready {
            // The caller sends nothing after its request: readable means gone (or
            // misbehaving, which ends the entry the same way).
            events.push(Event::CallerGone);
        }
        if let (true, Some(signals)) = (sig_ready, signals) {
            events.extend(std::iter::from_fn(|| signals.next()).map(Event::Signal));
        }
        if control_ready {
            events.push(next_report(control, on_report));
        }
        if child_ready {
            status = shim.wait();
            events.push(Event::ShimGone);
        }
        for event in events {
            for act in table.on(event, Instant::now()) {
                match act {
                    Act::Signal(sig) => drop(shim.signal(sig)),
                    Act::ReapWriter => drop(reap.map(|p| waitpid(p, Some(WaitPidFlag::WNOHANG)))),
                    Act::Stopped => keeper.iter().for_each(|k| k.stopped()),
                }
            }
        }
    }
    // The command is gone: what its sandbox wrote is all there will be. On Linux every
    // process of that sandbox is gone with it, and the pty ends at once unless a sandbox
    // entered from it (`zone enter`) still holds it; on macOS one the command left behind
    // may. So the keeper's drain stops once the pty stays quiet: what such a process
    // writes later is not relayed (entries are killed when the run's first sandbox ends).
    if let Some(k) = keeper {
        k.finish();
    }
    // What the shim sent before it went: its reports until the control socket closes.
    while table.control_open {
        table.on(next_report(control, on_report), Instant::now());
    }
    Waited {
        outcome: Outcome::of(&table.reports, status, failed_step),
        caller_gone: table.caller_gone,
        bad_report: table.bad_report,
        timed_out: table.timed_out,
    }
}

/// What comes next on the shim's control socket, a report handed to `on_report` first.
fn next_report(control: &mut UnixStream, on_report: &mut dyn FnMut(&ShimReport)) -> Event {
    match protocol::read_frame::<ShimReport>(control) {
        Ok(r) => {
            on_report(&r);
            Event::Report(r)
        }
        Err(FrameError::Closed) => Event::ControlClosed,
        Err(e) => Event::NotAReport(e.to_string()),
    }
}

/// The most reports kept of one shim (besides its stops, which are never kept).
const MAX_REPORTS: usize = 16;

/// The wait's decisions, a state table: each [`Event`] against where the wait is (its
/// time limit and grace, what it still watches, the reports kept), what the broker does
/// ([`Act`]) and whether the wait is over. Pure: no process, no descriptor, the time
/// given (unit-tested below, event by event). The sandbox's end is the broker's to see
/// on its pidfd ([`Event::ShimGone`]); the shim saying its command ended ends the wait
/// only with the sandbox killed, so that its word can end a sandbox sooner, never keep
/// one running that the broker takes for ended.
#[derive(Debug, Default)]
struct Loop {
    /// The time limit's end, until it is reached.
    deadline: Option<Instant>,
    /// The grace's end after an ending signal: then SIGKILL.
    kill_at: Option<Instant>,
    control_open: bool,
    caller_open: bool,
    reports: Vec<ShimReport>,
    caller_gone: bool,
    bad_report: Option<String>,
    timed_out: bool,
    over: bool,
}

/// What the wait sees.
#[derive(Debug, Clone, PartialEq)]
enum Event {
    /// It woke (the grace and the time limit are looked at).
    Time,
    /// The `zone enter` caller's connection became readable: gone.
    CallerGone,
    /// A signal taken over.
    Signal(i32),
    /// A report from the shim.
    Report(ShimReport),
    /// The shim's control socket closed.
    ControlClosed,
    /// What came on it is no report.
    NotAReport(String),
    /// The shim's pidfd: it has exited (and was reaped).
    ShimGone,
}

/// What the broker does for an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Act {
    /// This signal to the sandbox (its shim, init of its PID namespace).
    Signal(i32),
    /// Reap the plan writer, if it has exited (SIGCHLD).
    ReapWriter,
    /// Tell the terminal keeper the command stopped (Ctrl-Z).
    Stopped,
}

impl Loop {
    fn new(deadline: Option<Instant>, caller: bool) -> Loop {
        Loop {
            deadline,
            control_open: true,
            caller_open: caller,
            ..Loop::default()
        }
    }

    /// When to wake without an event: the grace's end, or the time limit's.
    fn wake(&self) -> Option<Instant> {
        self.kill_at.into_iter().chain(self.deadline).min()
    }

    fn on(&mut self, event: Event, now: Instant) -> Vec<Act> {
        const KILL: Act = Act::Signal(libc::SIGKILL);
        match event {
            Event::Time => {
                let mut acts = Vec::new();
                if self.kill_at.is_some_and(|t| now >= t) {
                    // The grace is over: the sandbox ends now, whatever it does with signals.
                    self.kill_at = None;
                    acts.push(KILL);
                }
                if self.deadline.is_some_and(|t| now >= t) {
                    self.deadline = None;
                    self.timed_out = true;
                    acts.extend(self.end(libc::SIGTERM, now));
                }
                acts
            }
            Event::CallerGone => {
                (self.caller_open, self.caller_gone) = (false, true);
                vec![KILL]
            }
            // Never forwarded: the sandbox's own end is watched through its pidfd.
            Event::Signal(libc::SIGCHLD) => vec![Act::ReapWriter],
            Event::Signal(sig) if ENDING.contains(&sig) => self.end(sig, now),
            Event::Signal(sig) => vec![Act::Signal(sig)],
            // Ctrl-Z: the keeper stops as the command did (only for a stop the user asked
            // for), and has it continued (SIGCONT, forwarded). The broker never stops.
            // Not kept: a command can stop as often as it likes.
            Event::Report(ShimReport::Stopped { .. }) => vec![Act::Stopped],
            // The few reports a sandbox's end is told from; more is none of the shim's.
            Event::Report(_) if self.reports.len() >= MAX_REPORTS => {
                self.not_a_report(format!("more than {MAX_REPORTS} reports"))
            }
            Event::Report(r) => {
                let last = matches!(r, ShimReport::Exited { .. } | ShimReport::Signaled { .. });
                self.reports.push(r);
                // The command's status is known: finish now rather than wait for the
                // namespaces to be torn down (the keeper drains the pty meanwhile), with
                // the sandbox killed (and reaped when it is dropped).
                if last && !self.over {
                    (self.control_open, self.over) = (false, true);
                    return vec![KILL];
                }
                Vec::new()
            }
            Event::ControlClosed => {
                self.control_open = false;
                Vec::new()
            }
            // The shim is not speaking the protocol, and nothing it says after can be
            // believed: the sandbox is ended (PROTOCOL 4.2).
            Event::NotAReport(e) => self.not_a_report(e),
            Event::ShimGone => {
                self.over = true;
                Vec::new()
            }
        }
    }

    /// Send `sig`, then SIGCONT (a stopped command would never see it), and start the
    /// grace (if it is not running already).
    fn end(&mut self, sig: i32, now: Instant) -> Vec<Act> {
        self.kill_at.get_or_insert(now + GRACE);
        vec![Act::Signal(sig), Act::Signal(libc::SIGCONT)]
    }

    fn not_a_report(&mut self, why: String) -> Vec<Act> {
        self.bad_report.get_or_insert(why);
        self.control_open = false;
        vec![Act::Signal(libc::SIGKILL)]
    }
}

/// Poll once (until the grace's end, if one runs): which are ready, in the order child,
/// signals, control, caller.
fn poll_ready(
    process: &dyn Watched,
    control: &UnixStream,
    signals: Option<&dyn Taken>,
    caller: Option<BorrowedFd<'_>>,
    (control_open, caller_open): (bool, bool),
    kill_at: Option<Instant>,
) -> nix::Result<[bool; 4]> {
    let mut fds = vec![PollFd::new(process.as_fd(), PollFlags::POLLIN)];
    let mut idx = [0, usize::MAX, usize::MAX, usize::MAX];
    let watched = [
        signals.map(|s| s.as_fd()),
        control_open.then(|| control.as_fd()),
        caller.filter(|_| caller_open),
    ];
    for (i, fd) in watched.into_iter().enumerate() {
        if let Some(fd) = fd {
            idx[i + 1] = fds.len();
            fds.push(PollFd::new(fd, PollFlags::POLLIN));
        }
    }
    poll(&mut fds, terminal::timeout_until(kill_at))?;
    Ok(idx.map(|i| {
        fds.get(i)
            .and_then(|f| f.revents())
            .is_some_and(|r| !r.is_empty())
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const KILL: Act = Act::Signal(libc::SIGKILL);
    const CONT: Act = Act::Signal(libc::SIGCONT);

    fn exited() -> Event {
        Event::Report(ShimReport::Exited { code: 0 })
    }

    /// Where a wait can be when an event comes.
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum At {
        /// The command runs.
        Running,
        /// An ending signal came: its grace runs.
        Grace,
        /// Its time limit was reached: ended as by SIGTERM, its grace runs.
        TimedOut,
        /// The shim said the command ended: killed, the wait over.
        Said,
    }

    fn at(state: At, t0: Instant) -> Loop {
        let mut l = Loop::new(Some(t0 + Duration::from_secs(60)), true);
        match state {
            At::Running => {}
            At::Grace => drop(l.on(Event::Signal(libc::SIGTERM), t0)),
            At::TimedOut => drop(l.on(Event::Time, t0 + Duration::from_secs(60))),
            At::Said => drop(l.on(exited(), t0)),
        }
        l
    }

    /// Every event against every state: what the broker does, and whether the wait is
    /// over after it. Times: `t0` is when the state was reached; the events come one
    /// second later, except `Time` after the grace.
    #[test]
    fn every_event_in_every_state() {
        use At::*;
        let term = Act::Signal(libc::SIGTERM);
        let usr1 = Act::Signal(libc::SIGUSR1);
        let events: Vec<(Event, &str)> = vec![
            (Event::Time, "time, within the grace"),
            (Event::CallerGone, "caller gone"),
            (Event::Signal(libc::SIGTERM), "SIGTERM"),
            (Event::Signal(libc::SIGUSR1), "SIGUSR1"),
            (Event::Signal(libc::SIGCHLD), "SIGCHLD"),
            (Event::Report(ShimReport::Stopped { signal: 20 }), "stopped"),
            (
                Event::Report(ShimReport::Confined {
                    landlock_abi: 7,
                    partial: vec![],
                }),
                "confined",
            ),
            (exited(), "exited"),
            (Event::ControlClosed, "control closed"),
            (Event::NotAReport("garbage".into()), "not a report"),
            (Event::ShimGone, "shim gone"),
        ];
        // (state, event) -> (acts, over after)
        #[rustfmt::skip]
        let table: &[(At, &str, &[Act], bool)] = &[
            (Running, "time, within the grace", &[], false),
            (Running, "caller gone", &[KILL], false),
            (Running, "SIGTERM", &[term, CONT], false),
            (Running, "SIGUSR1", &[usr1], false),
            (Running, "SIGCHLD", &[Act::ReapWriter], false),
            (Running, "stopped", &[Act::Stopped], false),
            (Running, "confined", &[], false),
            (Running, "exited", &[KILL], true),
            (Running, "control closed", &[], false),
            (Running, "not a report", &[KILL], false),
            (Running, "shim gone", &[], true),
            (Grace, "time, within the grace", &[], false),
            (Grace, "caller gone", &[KILL], false),
            (Grace, "SIGTERM", &[term, CONT], false),
            (Grace, "SIGUSR1", &[usr1], false),
            (Grace, "SIGCHLD", &[Act::ReapWriter], false),
            (Grace, "stopped", &[Act::Stopped], false),
            (Grace, "confined", &[], false),
            (Grace, "exited", &[KILL], true),
            (Grace, "control closed", &[], false),
            (Grace, "not a report", &[KILL], false),
            (Grace, "shim gone", &[], true),
            (TimedOut, "time, within the grace", &[], false),
            (TimedOut, "caller gone", &[KILL], false),
            (TimedOut, "SIGTERM", &[term, CONT], false),
            (TimedOut, "SIGUSR1", &[usr1], false),
            (TimedOut, "SIGCHLD", &[Act::ReapWriter], false),
            (TimedOut, "stopped", &[Act::Stopped], false),
            (TimedOut, "confined", &[], false),
            (TimedOut, "exited", &[KILL], true),
            (TimedOut, "control closed", &[], false),
            (TimedOut, "not a report", &[KILL], false),
            (TimedOut, "shim gone", &[], true),
            // Over already: a report after the end kills nothing more.
            (Said, "time, within the grace", &[], true),
            (Said, "caller gone", &[KILL], true),
            (Said, "SIGTERM", &[term, CONT], true),
            (Said, "SIGUSR1", &[usr1], true),
            (Said, "SIGCHLD", &[Act::ReapWriter], true),
            (Said, "stopped", &[Act::Stopped], true),
            (Said, "confined", &[], true),
            (Said, "exited", &[], true),
            (Said, "control closed", &[], true),
            (Said, "not a report", &[KILL], true),
            (Said, "shim gone", &[], true),
        ];
        assert_eq!(table.len(), 4 * events.len(), "every event in every state");
        let t0 = Instant::now();
        for &(state, name, acts, over) in table {
            let event = events.iter().find(|(_, n)| *n == name).unwrap().0.clone();
            let mut l = at(state, t0);
            let got = l.on(event, t0 + Duration::from_secs(1));
            assert_eq!((got.as_slice(), l.over), (acts, over), "{state:?}, {name}");
        }
    }

    #[test]
    fn the_grace_ends_in_one_kill_and_a_second_ending_signal_does_not_extend_it() {
        let t0 = Instant::now();
        let mut l = Loop::new(None, false);
        l.on(Event::Signal(libc::SIGINT), t0);
        assert_eq!(l.wake(), Some(t0 + GRACE));
        l.on(Event::Signal(libc::SIGTERM), t0 + Duration::from_secs(4));
        assert_eq!(l.wake(), Some(t0 + GRACE));
        assert_eq!(l.on(Event::Time, t0 + GRACE), [KILL]);
        assert_eq!(
            (l.wake(), l.on(Event::Time, t0 + GRACE * 2)),
            (None, vec![])
        );
        // Killed is not over: the wait ends on the shim's pidfd.
        assert!(!l.over);
    }

    #[test]
    fn the_time_limit_ends_as_sigterm_once_then_the_grace() {
        let t0 = Instant::now();
        let limit = t0 + Duration::from_secs(30);
        let mut l = Loop::new(Some(limit), false);
        assert_eq!(l.wake(), Some(limit));
        assert!(l
            .on(Event::Time, limit - Duration::from_millis(1))
            .is_empty());
        let acts = l.on(Event::Time, limit);
        assert_eq!(acts, [Act::Signal(libc::SIGTERM), CONT]);
        assert!(l.timed_out);
        assert_eq!(l.wake(), Some(limit + GRACE));
        assert_eq!(l.on(Event::Time, limit + GRACE), [KILL]);
    }

    #[test]
    fn reports_are_bounded_and_what_is_no_report_is_said_once() {
        let t0 = Instant::now();
        let mut l = Loop::new(None, false);
        let confined = || {
            Event::Report(ShimReport::Confined {
                landlock_abi: 7,
                partial: vec![],
            })
        };
        for _ in 0..MAX_REPORTS {
            assert!(l.on(confined(), t0).is_empty());
        }
        // Stops are never kept, however many.
        for _ in 0..100 {
            l.on(Event::Report(ShimReport::Stopped { signal: 20 }), t0);
        }
        assert_eq!(l.reports.len(), MAX_REPORTS);
        assert_eq!(l.on(confined(), t0), [KILL]);
        assert!(!l.control_open && l.reports.len() == MAX_REPORTS);
        l.on(Event::NotAReport("later".into()), t0);
        assert_eq!(l.bad_report.as_deref(), Some("more than 16 reports"));
        // The caller's departure stops watching it.
        let mut l = Loop::new(None, true);
        l.on(Event::CallerGone, t0);
        assert!(!l.caller_open && l.caller_gone && !l.over);
    }
}
