//! One supervisor per sandbox in a zone: a Unix socket only that sandbox can reach, and
//! the one place that answers `zone list` and decides `zone enter`.
//!
//! For each connection, in order:
//! 1. who is calling, by the kernel's record (peer.rs): a process of this sandbox or
//!    nobody; a refusal is audited;
//! 2. Hello, then one request, all within [`REQUEST_DEADLINE`]; anything malformed or
//!    out of turn closes the connection and is logged;
//! 3. `List`: the zones the chain check admits; `Enter`: stdio a command may be given
//!    (pipes, sockets, character devices, regular files), one at a time per sandbox, the
//!    chain check, the approval plugin if the zone asks for it, the decision audited
//!    (refused if it cannot be written), a brand-new sandbox with the caller's stdio,
//!    its exit status relayed, the completion audited.
//!
//! Refusals and closed connections, and allowed entries, are audited at a bounded rate
//! (`wardcell_common::auditlog`, `Rate`): past it they are counted, and an allowed entry
//! that is not written is refused.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use wardcell_common::envrules;
use wardcell_common::plan::ZonePlan;
use wardcell_common::protocol::{self, ZoneEntry, ZoneRequest, ZoneResponse};
use wardcell_common::protocol::{Rate, COUNTED_PER_SECOND};
use wardcell_common::why;

use crate::peer::{self, Peer};
use crate::run::{Entry, Run};
use crate::session::{Event, Session};
use crate::sys::fds::{recv_fds, unfit_stdio};
use crate::{chain, sandbox, sys};
use wardcell_common::approval;
#[cfg(test)]
use wardcell_host::exe::Exe;
use wardcell_host::listener::{late, Deadline, Handler, Held, Listener, Slot};
use wardcell_host::plugin::Plugin;

/// A connection must send its whole request within this.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(5);
/// Connections served at once by one supervisor.
pub const MAX_CONNECTIONS: usize = 4;

pub struct Supervisor {
    run: Arc<Run>,
    /// The zones of its sandbox's chain: the first the run's, the last its sandbox's own.
    chain: Vec<String>,
    /// What every process of its sandbox carries (peer.rs).
    mark: peer::Mark,
    /// Its socket (wardcell_host::listener).
    listener: Listener,
    /// The one entry a sandbox runs at a time: its caller's connection, while it runs.
    entering: Slot,
}

impl Supervisor {
    /// Listen at `<run dir>/<name>.sock` (0600); [`Supervisor::serve_in_background`]
    /// answers.
    fn bind(
        run: Arc<Run>,
        name: &str,
        chain: Vec<String>,
        mark: peer::Mark,
    ) -> io::Result<Arc<Supervisor>> {
        let path = run.dir.join(format!("{name}.sock"));
        // sockaddr_un's path holds the terminating NUL too (108 bytes on Linux, 104 on macOS).
        let listener = Listener::bind(path, sys::SUN_PATH_LEN - 1, sys::wake_listener)?;
        Ok(Arc::new(Supervisor {
            run,
            chain,
            mark,
            listener,
            entering: Slot::default(),
        }))
    }

    /// What binds the supervisor of a sandbox whose chain is `chain`, given the
    /// sandbox's name and mark (sandbox::Supervise).
    pub fn binder(
        run: &Arc<Run>,
        chain: Vec<String>,
    ) -> impl Fn(&str, peer::Mark) -> io::Result<Arc<dyn sandbox::Served>> + '_ {
        move |name, mark| Ok(Supervisor::bind(run.clone(), name, chain.clone(), mark)?)
    }

    /// Its sandbox's zone: the chain's last.
    fn zone(&self) -> &str {
        self.chain.last().map_or("", |z| z)
    }

    /// What the sandbox can cause as fast as it connects: written at a bounded rate, the
    /// rest counted (`Ok(false)`); see `AuditLog::write`.
    fn counted(&self, category: &str, event: &str, fields: Value) -> io::Result<bool> {
        self.run
            .record_counted(Rate::Refusals, category, event, fields)
    }

    /// A connection closed for a malformed or late request: logged, nothing granted.
    fn closed(&self, peer: &Peer, reason: &str) {
        let fields = json!({"zone": self.zone(), "pid": peer.pid(), "reason": reason});
        let _ = self.counted("sandbox", "supervisor.closed", fields);
    }

    /// The caller, verified by what the kernel says; a refusal is audited and answered
    /// with nothing.
    fn verified(&self, conn: &UnixStream) -> Option<Peer> {
        peer::verify(conn, &self.mark)
            .inspect_err(|why| {
                let fields = json!({"zone": self.zone(), "chain": self.chain, "reason": why});
                let _ = self.counted("audit", "audit.peer_refused", fields);
            })
            .ok()
    }

    /// One connection, accepted `at`: its whole request is due [`REQUEST_DEADLINE`] later.
    fn handle(&self, mut conn: UnixStream, at: Instant) {
        let _ = conn.set_write_timeout(Some(REQUEST_DEADLINE));
        // 1. Who is calling.
        let Some(peer) = self.verified(&conn) else {
            return;
        };
        let mut session = Session::new(false);
        self.step(&mut session, Event::PeerVerified);
        // 2. The request, within the deadline.
        let deadline = at + REQUEST_DEADLINE;
        let request = (|| {
            protocol::send_hello(&mut conn)?;
            let mut r = Deadline::new(&conn, deadline);
            protocol::expect_hello(&mut r)?;
            protocol::read_frame::<ZoneRequest>(&mut r)
        })();
        let request = match request {
            Ok(r) => r,
            Err(protocol::FrameError::Io(e)) => {
                return self.closed(&peer, &late(&e, "request", REQUEST_DEADLINE))
            }
            Err(e) => return self.closed(&peer, &e.to_string()),
        };
        let asked = match &request {
            ZoneRequest::List => Event::List,
            ZoneRequest::Why => Event::Why,
            ZoneRequest::Enter { .. } => Event::Enter,
        };
        // A message out of turn (PROTOCOL 6.3) closes the connection.
        if let Err(why) = session.on(Event::Hello).and_then(|()| session.on(asked)) {
            return self.closed(&peer, &why);
        }
        // 3. Answer.
        let (target, argv, env, closed) = match request {
            ZoneRequest::List => {
                let zones = chain::enterable(&self.run.plan.zones, &self.chain).into_iter();
                let zones = zones.map(ZoneEntry::from).collect();
                let current = self.zone().to_string();
                let _ = protocol::write_frame(&mut conn, &ZoneResponse::Zones { current, zones });
                return;
            }
            ZoneRequest::Why => return self.why(&mut conn, &peer),
            ZoneRequest::Enter {
                zone,
                argv,
                env,
                closed,
            } => (zone, argv, env, closed),
        };
        let stdio = match recv_stdio(&conn, closed, deadline) {
            Ok(stdio) => stdio,
            Err(why) => return self.closed(&peer, &why),
        };
        if let Err(why) = session.on(Event::Descriptors) {
            return self.closed(&peer, &why);
        }
        // The caller's loader, shell and tool variables never pass (envrules::entered).
        let (env, env_changes) = envrules::entered(env, &self.run.host_env);
        let executable = why::command(&self.run.plan, &target, (&argv, &env, peer.cwd()));
        let asked = Asked {
            peer: &peer,
            target,
            argv,
            env,
            env_changes,
            executable,
            stdio,
        };
        self.enter(&mut conn, &mut session, asked);
    }

    /// `zone why`: the rules of this sandbox's zone and of each it may enter.
    fn why(&self, conn: &mut UnixStream, peer: &Peer) {
        let plan = &self.run.plan;
        let Some(current) = plan.rules(self.zone()) else {
            return self.closed(peer, "its zone is not in the plan");
        };
        let enterable = chain::enterable(&plan.zones, &self.chain);
        let answer = ZoneResponse::Rules {
            current: Box::new(current),
            enterable: enterable
                .iter()
                .filter_map(|z| plan.rules(&z.name))
                .collect(),
        };
        let _ = protocol::write_frame(conn, &answer);
    }

    fn enter(&self, conn: &mut UnixStream, session: &mut Session, asked: Asked<'_>) {
        match self.admit(conn, &asked) {
            // Every guard of the refused entry is dropped by now: the caller's next
            // request is not refused as busy.
            Err(message) => {
                self.step(session, Event::Refused);
                let _ = protocol::write_frame(conn, &ZoneResponse::Refused { message });
            }
            Ok(admitted) => {
                self.step(session, Event::Admitted);
                self.run_entered(conn, session, asked, admitted)
            }
        }
    }

    /// One of the supervisor's own steps in the connection's state table (a step out of
    /// turn is a bug: it is logged).
    fn step(&self, session: &mut Session, event: Event) {
        if let Err(why) = session.on(event) {
            tracing::error!(zone = self.zone(), "{why}");
        }
    }

    /// Steps a to e of an entry: every check, each refusal audited, and the decision
    /// written before anything starts. `Err` is the refusal's message for the caller.
    fn admit<'s>(&'s self, conn: &UnixStream, asked: &Asked<'_>) -> Result<Admitted<'s>, String> {
        let deny = |reason: &str, plugin: Option<&approval::Answer>| {
            let fields = asked.decision(self, "denied", reason, plugin);
            let _ = self.counted("audit", "audit.decision", fields);
        };
        // a. Only descriptors a command may be given as its stdio.
        for (name, fd) in ["stdin", "stdout", "stderr"].into_iter().zip(&asked.stdio) {
            if let Some(what) = fd.as_ref().and_then(|fd| unfit_stdio(fd.as_fd())) {
                let reason = format!("{name} is {what}: `wardcell zone enter` passes on only pipes, sockets, character devices and regular files");
                deny(&reason, None);
                return Err(reason);
            }
        }
        // b. One entry at a time per sandbox.
        let Some(slot) = self.entering.take(conn, REQUEST_DEADLINE) else {
            let reason = "this sandbox is already running a `wardcell zone enter`";
            deny(reason, None);
            return Err(format!("{reason}; wait for it to finish, then try again"));
        };
        // c. The chain check. From here on, the zone it returns is the one used.
        let zone = chain::may_enter(&self.run.plan.zones, &self.chain, &asked.target);
        let zone = zone.map_err(|denied| {
            deny(denied.reason(), None);
            denied.message()
        })?;
        // d. Approval, if the zone asks for it (the plugin is ended by the run's end
        //    until its decision is audited: `_plugin` is dropped last).
        let approve = || self.approve(conn, asked, zone);
        let (answer, _plugin) = zone.requires_approval.then(approve).unzip();
        if let Some(a) = answer.as_ref().filter(|a| !a.approved) {
            deny(&a.reason, Some(a));
            let (name, reason) = (&zone.name, &a.reason);
            return Err(format!("entering zone '{name}' was not approved: {reason}"));
        }
        // e. The decision, written before anything starts, for an entry the run's end
        //    will wait for: one allowed always has its completion written. An entry past
        //    the rate the log records one by one is refused (and counted).
        let Some(entry) = self.run.entry() else {
            let reason = "the run is ending";
            deny(reason, answer.as_ref());
            return Err(format!("{reason}; nothing was started"));
        };
        let allowed = "in enter_from for every zone on the chain";
        let fields = asked.decision(self, "allowed", allowed, answer.as_ref());
        match self
            .run
            .record_counted(Rate::Entries, "audit", "audit.decision", fields)
        {
            Ok(true) => Ok(Admitted { zone, slot, entry }),
            Err(e) => Err(format!("the audit log cannot be written ({e}), so the entry is refused; `wardcell doctor` shows where the log lives")),
            Ok(false) => Err(format!("this sandbox entered zones faster than the {COUNTED_PER_SECOND} a second the audit log records one by one, so the entry is refused; try again in a moment")),
        }
    }

    /// The approval plugin's answer to entering `zone` (channel E, docs/PROTOCOL.md 7; its
    /// request built and its answer parsed in wardcell_common::approval). The plugin runs
    /// outside any sandbox (wardcell_host::plugin: from `/`, the helper environment, a
    /// process group of its own, its answer taken when it exits, then its group killed).
    /// It is an entry of the run, reserved before it starts, while the returned guard
    /// lives: the run's end ends it, as do the caller going away and the zone's
    /// `approval_timeout`.
    fn approve<'s>(
        &'s self,
        conn: &UnixStream,
        asked: &Asked<'_>,
        zone: &ZonePlan,
    ) -> (approval::Answer, Option<Entry<'s>>) {
        let plan = &self.run.plan;
        let entry = approval::Entry {
            run: &self.run.id,
            user: nix::unistd::getuid().as_raw(),
            calling_zone: self.zone(),
            chain: &self.chain,
            target: zone,
            command: &asked.argv,
            cwd: asked.peer.cwd(),
            executable: &asked.executable,
            env_changes: &asked.env_changes,
        };
        let request = approval::request(plan, &entry);
        let Some(held) = self.run.entry() else {
            return (approval::Answer::refusal("the run is ending"), None);
        };
        let env = &self.run.host_env;
        // Started from the descriptor held since the run started (opened whenever a zone
        // requires approval and a plugin is configured).
        let spawn = |cmd: &mut _| sys::spawn_from(self.run.programs.plugin()?, cmd);
        let plugin = match Plugin::start(plan.approval.as_deref(), &request, env, spawn) {
            Ok(p) => p,
            Err(refusal) => return (refusal, Some(held)),
        };
        self.run.attach(&held, plugin.process());
        // The caller says at once that it waits, and for whom (its words, client-side).
        let waiting = ZoneResponse::waiting(plan.approval.as_deref(), zone.approval_timeout_secs);
        let _ = protocol::write_frame(&mut &*conn, &waiting);
        let timeout = zone.approval_timeout_secs.map(Duration::from_secs);
        let answer = plugin.answer(timeout, conn.as_fd());
        if self.run.is_ending() {
            let ended = "the run ended before the approval plugin answered; the plugin was ended";
            return (approval::Answer::refusal(ended), Some(held));
        }
        (answer, Some(held))
    }

    /// Steps f and g: a brand-new sandbox with the caller's stdio and working directory,
    /// waited for (ended if the caller goes away or its time is up; its confinement, a bad
    /// report and the limits it reached audited, its repository checked), its status
    /// relayed and its completion audited.
    fn run_entered(
        &self,
        conn: &mut UnixStream,
        session: &mut Session,
        asked: Asked<'_>,
        admitted: Admitted<'_>,
    ) {
        let Admitted { zone, slot, entry } = admitted;
        let (peer, argv, stdio) = (asked.peer, asked.argv, asked.stdio);
        let target = zone.name.as_str();
        let mut chain = self.chain.clone();
        chain.push(target.to_string());
        let supervise = Supervisor::binder(&self.run, chain.clone());
        let started = sandbox::start(
            &self.run,
            sandbox::Request {
                asked: wardcell_common::prepared::Asked {
                    profile: &zone.profile,
                    zone: Some(target),
                    chain: &chain,
                    argv: &argv,
                    cwd: PathBuf::from(peer.cwd()),
                    env: asked.env,
                    pty: false,
                    authenticated: zone.authenticated,
                },
                supervise: Some(&supervise),
                stdio: stdio
                    .each_ref()
                    .map(|f| f.as_ref().map_or(-1, |f| f.as_raw_fd())),
                ignored: peer.ignored(),
            },
        );
        drop(stdio);
        let completed = |status: Option<i32>, ended: &str| {
            let fields = json!({
                "calling_zone": self.zone(), "chain": chain, "target": target,
                "command": argv, "exit_status": status, "ended": ended,
            });
            let _ = self.run.record("audit", "audit.completed", fields);
        };
        let mut sb = match started {
            Ok(sb) => sb,
            Err(e) => {
                let message = e.to_string();
                completed(None, &format!("not started: {message}"));
                drop((entry, slot));
                self.step(session, Event::StartFailed);
                let _ = protocol::write_frame(conn, &ZoneResponse::Failed { message, code: 1 });
                return;
            }
        };
        self.run.attach(&entry, sb.running.process.watch());
        self.step(session, Event::Started);
        let _ = protocol::write_frame(conn, &ZoneResponse::Started);
        let watch = wardcell_host::wait::Watch {
            caller: Some(conn.as_fd()),
            deadline: sb.deadline(),
            ..Default::default()
        };
        let ended = sb.wait(&self.run, watch, Some(target), false);
        sb.retire();
        let (code, message) = sb.ended(&self.run, &ended);
        self.run.check_git(&sb.name);
        // What the caller sent while its sandbox ran (readable: gone) is fatal to the
        // connection: the sandbox was ended, and the connection closes without a reply.
        let spoke = ended.caller_gone && session.on(Event::Spoke).is_err();
        if spoke || self.run.is_ending() {
            let how = match ended.caller_gone {
                true => "the caller went away; the command's sandbox was ended",
                false => "the run ended; the command's sandbox was ended",
            };
            return completed(None, how);
        }
        self.step(session, Event::Ended);
        let how = message
            .as_ref()
            .map_or("exited".into(), |m| format!("failed: {m}"));
        completed(ended.outcome.finished(), &how);
        // Released before the caller is answered, so that its next request is not
        // refused as busy.
        drop((entry, slot));
        let response = match message {
            None => ZoneResponse::Exited { code },
            Some(message) => ZoneResponse::Failed { message, code },
        };
        let _ = protocol::write_frame(conn, &response);
        // The caller has its answer; now collect the shim (`wait` may have returned on
        // its last report).
        let _ = sb.running.process.wait();
    }

    /// The fifth connection: told why, closed, and audited (a verified peer's; anyone
    /// else's is refused without a word, as always).
    fn refuse_busy(&self, mut conn: UnixStream) {
        let _ = conn.set_write_timeout(Some(Duration::from_millis(200)));
        let Some(peer) = self.verified(&conn) else {
            return;
        };
        // Then `Hello` and `Refused`, nothing read (PROTOCOL 6.3).
        self.step(&mut Session::new(true), Event::PeerVerified);
        let reason =
            format!("this sandbox's supervisor already serves {MAX_CONNECTIONS} connections");
        let message = format!("{reason}; try again when one has finished");
        let _ = protocol::send_hello(&mut conn);
        let _ = protocol::write_frame(&mut conn, &ZoneResponse::Refused { message });
        self.closed(&peer, &reason);
    }
}

impl sandbox::Served for Supervisor {
    /// Start answering on the socket, in a thread of its own. Until then connections wait
    /// in the listen backlog; the broker starts it once the sandbox has its spec.
    fn serve_in_background(self: Arc<Self>) -> io::Result<()> {
        let name = self.listener.path().file_stem().unwrap_or_default();
        let name = format!("supervisor-{}", name.to_string_lossy());
        std::thread::Builder::new()
            .name(name)
            .spawn(move || {
                let me = self.clone();
                let handle: Handler = Arc::new(move |conn, at| me.handle(conn, at));
                let gone = |why: &str| {
                    let fields = json!({"zone": self.zone(), "reason": why});
                    drop(self.counted("sandbox", "supervisor.closed", fields))
                };
                let busy = |conn| self.refuse_busy(conn);
                self.listener.serve(MAX_CONNECTIONS, handle, &busy, &gone);
            })
            .map(drop)
    }

    fn listener(&self) -> &Listener {
        &self.listener
    }
}

/// An entry's stdio, its descriptors received before `deadline`; those the caller has
/// closed (bits 0 to 2 of `closed`) stay closed in the command (None). `Err` says why
/// the connection closes.
fn recv_stdio(
    conn: &UnixStream,
    closed: u8,
    deadline: Instant,
) -> Result<[Option<OwnedFd>; 3], String> {
    if closed > 0b111 {
        return Err(format!("closed is {closed}, not a set of fds 0 to 2"));
    }
    let left = deadline.saturating_duration_since(Instant::now());
    let _ = conn.set_read_timeout(Some(left.max(Duration::from_millis(1))));
    let fds = recv_fds(conn.as_raw_fd(), 3 - closed.count_ones() as usize);
    let _ = conn.set_read_timeout(None);
    let mut fds = fds
        .map_err(|e| late(&e, "descriptors", REQUEST_DEADLINE))?
        .into_iter();
    Ok([0, 1, 2].map(|fd| (closed & (1 << fd) == 0).then(|| fds.next()).flatten()))
}

/// What a caller asked: to enter `target` with `argv`, its environment and its stdio.
struct Asked<'a> {
    peer: &'a Peer,
    target: String,
    argv: Vec<String>,
    env: Vec<(String, String)>,
    /// The names the caller set otherwise than the run's environment.
    env_changes: Vec<String>,
    executable: Executable,
    stdio: [Option<OwnedFd>; 3],
}

/// An entered command's executable, and the zones that may write it (why::command).
type Executable = (Option<PathBuf>, Vec<String>);

impl Asked<'_> {
    /// An `audit.decision` event's fields.
    fn decision(
        &self,
        sup: &Supervisor,
        decision: &str,
        reason: &str,
        plugin: Option<&approval::Answer>,
    ) -> Value {
        let (cwd, pid) = (self.peer.cwd(), self.peer.pid());
        json!({
            "calling_zone": sup.zone(), "chain": sup.chain, "target": self.target,
            "command": self.argv, "executable": self.executable.0,
            "executable_writable_by": self.executable.1, "env_changes": self.env_changes,
            "cwd": cwd, "pid": pid, "decision": decision,
            "reason": reason, "approval": plugin.map(approval::Answer::to_json),
        })
    }
}

/// An entry that passed every check and whose decision is written: its zone (the one the
/// chain check returned), and the guards that the next caller and the run's end wait on.
struct Admitted<'s> {
    zone: &'s ZonePlan,
    slot: Held<'s>,
    entry: Entry<'s>,
}

#[cfg(test)]
mod tests {
    // The approval plugin, as `Supervisor::approve` starts it.
    use super::*;
    use approval::Answer;
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;
    use std::time::{Duration, Instant};

    fn sh(script: &str) -> Vec<String> {
        vec!["/bin/sh".into(), "-c".into(), script.into()]
    }

    /// As the run does: the program opened (here, just before), started from that.
    fn spawn(cmd: &mut std::process::Command) -> io::Result<(std::process::Child, sys::Child)> {
        let exe = Exe::open(std::path::Path::new(cmd.get_program())).map_err(io::Error::other)?;
        sys::spawn_from(&exe, cmd)
    }

    fn ask(plugin: Option<&[String]>, timeout: Option<Duration>) -> Answer {
        let (caller, _keep) = UnixStream::pair().unwrap();
        let req = serde_json::json!({"target": "push"});
        match Plugin::start(plugin, &req, &[], spawn) {
            Ok(p) => p.answer(timeout, caller.as_fd()),
            Err(refusal) => refusal,
        }
    }

    #[test]
    fn a_real_plugin_process() {
        let a = ask(
            Some(&sh(
                r#"read l; echo '{"approved": true, "approver": "me"}'"#,
            )),
            None,
        );
        assert!(a.approved, "{a:?}");
        let a = ask(Some(&sh("exit 3")), None);
        assert!(!a.approved && a.reason.contains("failed"), "{a:?}");
        let a = ask(Some(&sh("sleep 5")), Some(Duration::from_millis(200)));
        assert!(
            !a.approved && a.reason.contains("approval_timeout"),
            "{a:?}"
        );
        let a = ask(None, None);
        assert!(a.reason.contains("no approval plugin"), "{a:?}");
        let a = ask(Some(&["/nonexistent/plugin".to_string()]), None);
        assert!(a.reason.contains("could not be started"), "{a:?}");
        let a = ask(Some(&sh("head -c 70000 /dev/zero")), None);
        assert!(a.reason.contains("longer than 64 KiB"), "{a:?}");
    }

    /// The plugin that runs is the file opened when the run started, a script too (its
    /// interpreter reads it from the descriptor), whatever has replaced it since.
    #[test]
    #[cfg(target_os = "linux")]
    fn a_plugin_replaced_after_it_was_opened_is_not_what_runs() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("wardcell-plugin-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("approve.sh");
        let write = |answer: &str| {
            let tmp = dir.join("new");
            let script = format!("#!/bin/sh\nread l; printf '{{\"approved\": {answer}, \"approver\": \"%s\"}}' \"$0\"\n");
            std::fs::write(&tmp, script).unwrap();
            std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).unwrap();
            std::fs::rename(&tmp, &path).unwrap();
        };
        write("false");
        let exe = Exe::open(&path).unwrap();
        write("true");
        let (caller, _keep) = UnixStream::pair().unwrap();
        let argv = [path.display().to_string()];
        let p = Plugin::start(Some(&argv), &serde_json::json!({}), &[], |cmd: &mut _| {
            sys::spawn_from(&exe, cmd)
        });
        let a = p.unwrap().answer(None, caller.as_fd());
        assert!(!a.approved, "the replacement ran: {a:?}");
        assert!(
            a.approver
                .as_deref()
                .is_some_and(|s| s.starts_with("/dev/fd/")),
            "{a:?}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_answer_counts_when_the_plugin_exits_whatever_its_children_hold() {
        let start = Instant::now();
        let a = ask(
            Some(&sh(r#"sleep 100 & echo '{"approved": true}'"#)),
            Some(Duration::from_secs(20)),
        );
        assert!(a.approved, "{a:?}");
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{:?}",
            start.elapsed()
        );
    }

    #[test]
    fn a_caller_that_goes_away_ends_the_wait() {
        let (caller, gone) = UnixStream::pair().unwrap();
        let req = serde_json::json!({});
        let p = Plugin::start(Some(&sh("sleep 100")), &req, &[], spawn).unwrap();
        let t = std::thread::spawn(move || {
            // Meant to come while `answer` waits; before it would be seen as well.
            std::thread::sleep(Duration::from_millis(100));
            drop(gone);
        });
        let a = p.answer(None, caller.as_fd());
        t.join().unwrap();
        assert!(a.reason.contains("caller went away"), "{a:?}");
    }
}
