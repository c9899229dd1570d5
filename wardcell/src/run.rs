//! `wardcell run`: load and resolve the configuration into a plan, then launch it.

use std::convert::Infallible;
use std::ffi::OsString;

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use nix::{fcntl, unistd};

use wardcell_common::paths;
use wardcell_common::plan::{Plan, PlanTrace};
use wardcell_common::protocol::{self, Launch};
use wardcell_common::terminal;
use wardcell_common::trace;
use wardcell_config::resolve::{self, StartRequest};

use crate::agent_home::SANDBOX_STATE;
use crate::cli::RunArgs;
use crate::context;
use crate::credentials;
use crate::error::Error;
use crate::sys;

/// Commands travel as UTF-8 text (the plan is text end to end).
pub fn utf8_command(args: Vec<OsString>) -> Result<Vec<String>, Error> {
    args.into_iter()
        .enumerate()
        .map(|(i, a)| a.into_string().map_err(|_| Error::NotUtf8 { index: i + 1 }))
        .collect()
}

/// Make the missing `write` paths under [`SANDBOX_STATE`] of the profiles this run may
/// use: the start profile and every zone's. What cannot be made is left out and said
/// as any missing `write` path is.
fn make_state_dirs(
    config: &wardcell_config::config::Config,
    start: &StartRequest,
    home: &Path,
) -> Result<(), Error> {
    use std::os::unix::fs::DirBuilderExt;
    let named =
        |p: &wardcell_config::config::Profile| p.write.iter().any(|w| w.starts_with(SANDBOX_STATE));
    if !config.profiles.values().any(named) {
        return Ok(());
    }
    let mut names: Vec<&str> = config.zones.iter().map(|z| z.profile.as_str()).collect();
    if let StartRequest::Profile(p) = start {
        names.push(p);
    }
    let writes = names
        .iter()
        .filter_map(|n| config.effective_profile(n))
        .flat_map(|p| p.write);
    let base = home.join(".local/share/wardcell");
    for w in writes {
        let Some(rest) = w.strip_prefix(SANDBOX_STATE) else {
            continue;
        };
        let dir = base.join(rest);
        // A link there (planted by a sandbox that writes ~/.local/share) would give this
        // profile's sandboxes whatever it points at: refused, from `base` down.
        let link = dir
            .ancestors()
            .take_while(|a| a.starts_with(&base))
            .find(|a| std::fs::symlink_metadata(a).is_ok_and(|m| m.file_type().is_symlink()));
        if let Some(at) = link {
            return Err(Error::Refused(format!(
                "{} is a symbolic link; sandboxes keep their state under {} in real directories only: remove the link (a sandbox that could write there may have made it)",
                at.display(),
                base.display()
            )));
        }
        if !rest.split('/').any(|c| c == "..") && !dir.exists() {
            let _ = std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&dir);
        }
    }
    Ok(())
}

/// Steps of `wardcell run`, on the host, in the plan writer: the broker is already
/// starting (see [`start_broker_early`]); the plan goes to it on `to_broker`, and this
/// process ends.
pub fn run(args: RunArgs, mut to_broker: UnixStream) -> Result<Infallible, Error> {
    // 0. `-v`: trace at debug unless WARDCELL_LOG already chose a level.
    if args.verbose && trace::level().is_none() {
        trace::install("wardcell", tracing::Level::DEBUG);
    }
    // 1. The command, as text.
    let command = utf8_command(args.command)?;
    // 2. The configuration, found and checked.
    let host = context::load_naming(args.config.file.as_deref(), args.profile.as_deref())?;
    // 3. Where to start.
    let start = StartRequest::from_flags(args.zone, args.profile);
    // 4. The plan: the same value `policy show` prints. First the directories of
    //    wardcell's own under which the agent profiles keep their state.
    make_state_dirs(&host.config, &start, &host.context.home)?;
    crate::agent_home::prepare(&host.config, &start, &host.context.home);
    let plan = resolve::resolve(&host.config, start, command, &host.context)?;
    let mut plan = resolve::with_overrides(plan, &host.config, &host.context, args.flags.into())?;
    for (what, path) in [
        ("the current directory", &plan.cwd),
        ("your home directory", &plan.home),
    ] {
        if path.to_str().is_none() {
            return Err(Error::Refused(format!(
                "{what} {} is not valid UTF-8, and wardcell hands paths to its sandboxes as UTF-8 text: run it from a directory whose path is UTF-8",
                path.as_os_str().as_encoded_bytes().escape_ascii()
            )));
        }
    }
    tracing::debug!(config = %plan.source, zones = plan.zones.len(), "plan resolved");
    // A run keeps its state under the home directory, and wardcell never creates one.
    if !plan.home.is_dir() {
        return Err(Error::HomeMissing(plan.home.clone()));
    }
    // 5. Secret files nobody else may read, before anything starts; write paths that
    //    are not there, said once.
    credentials::check_sources(&plan)?;
    credentials::check_start_keys(&plan)?;
    crate::trusted::check(&plan)?;
    // The certificates a proxy that attaches a credential trusts upstream, read now, once,
    // before any sandbox of the run exists (a bundle in a tree a sandbox writes is then
    // what it was when the run started).
    if !plan.credentials.is_empty() {
        let env = |k: &str| std::env::var(k).ok();
        plan.upstream_roots = wardcell_support::roots::read_roots(&env).map_err(|e| {
            Error::Refused(format!(
                "{e}; SSL_CERT_FILE and SSL_CERT_DIR must name certificates in regular files"
            ))
        })?;
    }
    // What this machine offers for limits, looked at once for every sandbox of the run.
    plan.machine = crate::machine::for_plan(&plan);
    if let Some((_, profile)) = plan.start_profile() {
        crate::checks::runnable(profile, open_file_limit()).map_err(Error::Refused)?;
        // A limit, not best effort, that nothing here can enforce (the broker checks again
        // as it makes each sandbox).
        crate::machine::choose(&profile.limits, &plan.machine, &profile.name)
            .map_err(Error::Refused)?;
    }
    for line in crate::checks::missing_writes(&plan) {
        wardcell_common::eprintln_line!("{}", crate::output::shown(&line));
    }
    // 6. Hand it over, with what this process traced (the broker prints it).
    tracing::debug!("handing the plan to the broker");
    plan.trace = trace::level().map(|level| PlanTrace {
        level: trace::name(level),
        lines: crate::held::take_held(),
    });
    plan.open_files = OPEN_FILES.get().copied().flatten();
    // What runs whose brokers are gone left, swept before this run's sandboxes exist: a
    // look at the runtime directory's few entries, and work only after a killed broker.
    crate::machine::sweep_stale_runs(&plan.dirs.runtime);
    // Every sandbox the run may build, prepared before any exists (crate::prepare).
    prepare(&mut plan)?;
    let launch = Launch::Run(Box::new(plan));
    send_plan(&mut to_broker, &launch)?;
    // The writer's work is done: end now, without freeing what it built.
    std::process::exit(0)
}

/// Start `wardcell run`'s broker at once. The process forks twice. The original stays
/// as the terminal keeper (crate::keeper: the process the caller's shell waits on, which
/// holds its terminal and does job control with it) and never returns from here. Its
/// child, in a session of its own, forks again: it execs the broker, and the copy, the
/// plan writer, returns here with its end of the socket the broker reads the plan from
/// (fd 3). The broker starts building the sandbox while the plan writer parses the
/// command line and resolves the configuration; if the writer ends without a plan (a
/// usage error, `--help`, a bad configuration), the broker ends with the writer's exit
/// status and says nothing: the writer already did.
pub fn start_broker_early() -> Result<UnixStream, Error> {
    let broker = find_helper("wardcell-broker")?;
    let _ = OPEN_FILES.set(raise_open_files());
    let (keeper_end, broker_end) = UnixStream::pair().map_err(|e| fail("socketpair", &e))?;
    // The command's pty, when the caller has a terminal: the keeper keeps the master, the
    // broker gets the slave.
    let pty = crate::tty::pty_for_run().map_err(|e| fail("opening a pty", &e))?;
    let (master, slave) = pty.unzip();
    // What goes to the broker at 4 and 5, above both first (test
    // `a_terminal_run_works_whatever_the_caller_left_at_3_and_4`).
    let last = terminal::keeper::PTY_FD;
    let moved = |fd: OwnedFd| sys::moved_above(fd, last).map_err(|e| fail("fcntl", &e));
    let broker_end = moved(broker_end.into())?;
    let slave = slave.map(moved).transpose()?;
    let keeper_pid = unistd::getpid();
    match sys::fork().map_err(|e| fail("fork", &e))? {
        sys::Forked::Parent(child) => {
            drop((broker_end, slave));
            crate::keeper::keep(child, keeper_end, master)
        }
        sys::Forked::Child => {
            drop((keeper_end, master));
            let placed_pty = slave.is_some();
            if let Some(slave) = slave {
                place_at(slave, terminal::keeper::PTY_FD)?;
            }
            // The broker dies with its keeper (killed, say): as before there was a keeper,
            // when `wardcell run` killed was the broker killed.
            die_with(keeper_pid);
            // A session of its own: no terminal's signal or job control ever stops it.
            unistd::setsid().map_err(|e| fail("setsid", &e))?;
            place_at(broker_end, terminal::keeper::FD)?;
            start_broker(&broker, placed_pty)
        }
    }
}

/// In a child just forked: be killed when `parent` (the process that forked it) ends,
/// and end now if it has already. Linux; elsewhere nothing.
fn die_with(parent: unistd::Pid) {
    #[cfg(target_os = "linux")]
    if nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL).is_err()
        || unistd::getppid() != parent
    {
        std::process::exit(1);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = parent;
}

/// In the keeper's child: fork the plan writer (which returns with its end of fd 3's
/// socket) and exec the broker (with the pty's slave at fd 5 when `placed_pty`).
fn start_broker(broker: &Path, placed_pty: bool) -> Result<UnixStream, Error> {
    let (ours, theirs) = UnixStream::pair().map_err(|e| fail("socketpair", &e))?;
    let broker_pid = unistd::getpid();
    match sys::fork().map_err(|e| fail("fork", &e))? {
        sys::Forked::Child => {
            // It dies with the broker (ended before it took the plan, by a signal say): a
            // plan for no one is not resolved on, nor its loss said after `wardcell run`
            // has ended. A broker already gone has no one to hand a plan to either.
            die_with(broker_pid);
            // The plan writer ends as soon as the plan is sent.
            sys::keep_what_is_freed();
            Ok(ours)
        }
        sys::Forked::Parent(writer) => {
            drop(ours);
            place_at(theirs, LAUNCH_FD)?;
            // What was closed when we started goes to the broker closed, not as the
            // runtime's /dev/null.
            for fd in (0..3).filter(|fd| sys::closed_at_start() & (1 << fd) != 0) {
                let _ = unistd::close(fd);
            }
            close_the_rest_on_exec(match placed_pty {
                true => terminal::keeper::PTY_FD,
                false => terminal::keeper::FD,
            });
            let e = Command::new(broker)
                .arg("--plan-writer")
                .arg(writer.to_string())
                .exec();
            // The writer would hand its plan to no one.
            let _ = nix::sys::signal::kill(writer, nix::sys::signal::Signal::SIGKILL);
            let _ = nix::sys::wait::waitpid(writer, None);
            Err(Error::Launch(format!(
                "executing {}: {e}",
                broker.display()
            )))
        }
    }
}

/// Every descriptor past the broker's own (up to `last`: stdio, the plan, the keeper, and
/// the pty when there is one) closes on exec: what whoever started `wardcell run` left
/// open (a shell's `7>file`, a parent's leaked socket) never reaches the broker, nor any
/// helper it starts (the proxy, the approval plugin, the repository's watcher). A
/// sandbox's shim closes them too, for the command.
fn close_the_rest_on_exec(last: i32) {
    let dir = if cfg!(target_os = "linux") {
        "/proc/self/fd"
    } else {
        "/dev/fd"
    };
    let open: Vec<i32> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    for fd in open.into_iter().filter(|&fd| fd > last) {
        let _ = fcntl::fcntl(fd, fcntl::FcntlArg::F_SETFD(fcntl::FdFlag::FD_CLOEXEC));
    }
}

/// The soft open-file limit this process was started with, when [`raise_open_files`]
/// raised it: the plan carries it, and every command of the run gets it back.
static OPEN_FILES: OnceLock<Option<u64>> = OnceLock::new();

/// Raise the soft open-file limit to the hard one, for the broker, the plan writer and
/// every shim (a sandbox holds a descriptor or two per path of its profile while it
/// builds its view). Returns the soft limit it replaced, `None` when it left it alone.
/// macOS refuses a soft limit above `OPEN_MAX` (10,240) when the hard one is unlimited.
fn raise_open_files() -> Option<u64> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    [hard, 10_240]
        .into_iter()
        .filter(|&want| want > soft && want <= hard)
        .find(|&want| setrlimit(Resource::RLIMIT_NOFILE, want, hard).is_ok())
        .map(|_| soft)
}

/// The hard open-file limit, which bounds what [`raise_open_files`] can do.
pub fn open_file_limit() -> Option<u64> {
    nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .ok()
        .map(|(_, hard)| hard)
}

/// A launch step that failed: `<what>: <why>`.
fn fail(what: &str, e: &dyn std::fmt::Display) -> Error {
    Error::Launch(format!("{what}: {e}"))
}

/// Write the Hello and the one `Launch` frame (at most 32 MiB) the broker reads on fd 3.
/// The frame is made first: a plan over its limit sends nothing, not even the Hello, so
/// the broker ends quietly and this one line is the only one.
fn send_plan(socket: &mut UnixStream, launch: &Launch) -> Result<(), Error> {
    let frame = protocol::encode_frame(launch).map_err(|e| fail("handing over the plan", &e))?;
    protocol::send_hello(socket).map_err(|e| fail("handing over the plan", &e))?;
    std::io::Write::write_all(socket, &frame).map_err(|e| fail("handing over the plan", &e))
}

/// Leave `socket` at `fd` (3: the plan, 4: the keeper, 5: the pty), inheritable, for
/// the broker.
fn place_at(socket: impl Into<std::os::fd::OwnedFd>, fd: i32) -> Result<(), Error> {
    let socket = socket.into();
    if socket.as_raw_fd() != fd {
        unistd::dup2(socket.as_raw_fd(), fd).map_err(|e| fail("dup2", &e))?;
    } else {
        // Already there: keep it open past this function.
        std::mem::forget(socket);
    }
    fcntl::fcntl(fd, fcntl::FcntlArg::F_SETFD(fcntl::FdFlag::empty()))
        .map_err(|e| fail("fcntl", &e))?;
    Ok(())
}

/// Where a helper of this build is: next to this binary (a cargo build), or, for the
/// packaged client, in the package's libexec directory (`paths::helper_dir`). Never
/// another installation's, never through PATH or an environment variable.
pub fn find_helper(name: &str) -> Result<PathBuf, Error> {
    paths::helper(name).ok_or_else(|| {
        let dir = std::env::current_exe().map(|e| paths::helper_dir(&e));
        Error::Launch(format!(
            "{name} is not in {}, where this build of wardcell keeps its helpers; reinstall wardcell",
            dir.unwrap_or_default().display()
        ))
    })
}

/// Prepare every sandbox of `plan` (crate::prepare) for the broker of this build, with
/// the environment this process started in (the broker's own). Returns the broker's path.
fn prepare(plan: &mut Plan) -> Result<PathBuf, Error> {
    let broker = find_helper("wardcell-broker")?;
    let real = std::fs::canonicalize(&broker).unwrap_or_else(|_| broker.clone());
    let host_env = wardcell_common::envrules::text_vars();
    crate::prepare::prepare(plan, &real, &host_env).map_err(Error::Refused)?;
    Ok(broker)
}

/// The descriptor on which the broker expects the plan.
const LAUNCH_FD: i32 = 3;

/// Put `plan` in a socketpair whose reading end is left at fd 3, inheritable, for a broker
/// started with `--plan` (`wardcell doctor`'s trial run). The socket buffer holds the
/// frames until the broker reads them. Returns the broker's path.
pub fn hand_over(mut plan: Plan) -> Result<PathBuf, Error> {
    plan.machine = crate::machine::for_plan(&plan);
    let broker = prepare(&mut plan)?;
    let (mut ours, theirs) = UnixStream::pair().map_err(|e| fail("socketpair", &e))?;
    send_plan(&mut ours, &Launch::Run(Box::new(plan)))?;
    drop(ours);
    place_at(theirs, LAUNCH_FD)?;
    Ok(broker)
}
