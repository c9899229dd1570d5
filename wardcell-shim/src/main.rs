//! wardcell-shim: PID 1 of a new sandbox.
//!
//! The broker starts this binary in fresh user, mount, network and PID namespaces, with
//! CAP_SYS_ADMIN, CAP_NET_ADMIN and CAP_SETPCAP in the new user namespace and the
//! control socket at fd 3. It then:
//!
//! 1. notes which signals it was started ignoring (the caller's, as the broker passed
//!    them on), puts its own at their defaults (SIGPIPE ignored), blocks what init waits
//!    for, says Hello on fd 3, and, while the broker builds the spec, compiles the
//!    seccomp filter, makes the view's own filesystems and brings loopback up;
//! 2. reads the sandbox spec (after the broker's Hello) from fd 3 and builds the view
//!    (mounts.rs); with network, makes every address local and hands the proxy's
//!    sockets to the broker (net.rs);
//! 3. forks the command (with a pty, init first makes a session of its own with the pty
//!    as controlling terminal), which in order: starts a new session (with a pty, a
//!    process group of its own in the terminal's foreground instead), sets the
//!    processes limit where the spec has one (RLIMIT_NPROC), sets no_new_privs, drops
//!    every capability, enforces Landlock, waits for init's go (step 4), enters the
//!    working directory, installs seccomp, marks every fd above 2 close-on-exec (and
//!    closes a standard one the shim was started without), sets every signal
//!    disposition to what the caller had (ignored, or the default: never wardcell's own
//!    ignored SIGPIPE), unblocks every signal, and execs;
//!    a failed step or exec is reported on fd 3 and nothing runs;
//! 4. meanwhile detaches the host's tree, sets the PID namespace's pid_max (root), drops
//!    its own capabilities, waits for the broker's Proceed, writes the CA bundle, says
//!    go, and becomes init: forwards signals to the command,
//!    reaps orphans, and when the command ends, reports its status and exits with it,
//!    which ends every process left in the sandbox.

// `unsafe` only in `sys`, where every use says why it is sound.
#![deny(unsafe_code)]

// Linux: namespaces, a view, Landlock and seccomp (this file). macOS: a Seatbelt profile
// from the same spec (macos.rs); what both use (the spec, reports, exec) is shared here.
mod auditlog;
#[cfg(target_os = "linux")]
mod caps;
#[cfg(target_os = "linux")]
mod changed;
mod gitcheck;
#[cfg(target_os = "linux")]
mod guard;
#[cfg(target_os = "linux")]
mod landlock;
#[cfg(target_os = "macos")]
mod macos;
#[cfg(target_os = "linux")]
mod mount_plan;
#[cfg(target_os = "linux")]
mod mounts;
#[cfg(target_os = "linux")]
mod net;
#[cfg(target_os = "linux")]
mod seccomp;
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
mod sys;

use std::ffi::CString;
#[cfg(target_os = "linux")]
use std::io::Write;
use std::os::unix::net::UnixStream;

#[cfg(target_os = "linux")]
use nix::sys::signal::{kill, SigSet, SigmaskHow, Signal};
#[cfg(target_os = "linux")]
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
#[cfg(target_os = "linux")]
use nix::unistd::Pid;

use wardcell_common::plan::SandboxSpec;
use wardcell_common::protocol::{self, ShimReport, ShimRequest};

#[cfg(target_os = "linux")]
/// Signals init passes on to the command's process group.
const FORWARDED: &[Signal] = &[
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGWINCH,
    Signal::SIGCONT,
    // The user's Ctrl-Z where the command has no pty (wardcell_common::terminal::FORWARDED).
    Signal::SIGTSTP,
];

fn report(control: &mut UnixStream, msg: &ShimReport) {
    // If the broker is gone there is no one to tell; we are about to exit anyway.
    let _ = protocol::write_frame(control, msg);
}

fn setup_failed(control: &mut UnixStream, step: &str, message: String) -> ! {
    report(
        control,
        &ShimReport::SetupFailed {
            step: step.to_string(),
            message,
        },
    );
    std::process::exit(1)
}

#[cfg(target_os = "macos")]
fn main() {
    match std::env::args().nth(1).as_deref() {
        Some("--git-watch") => gitcheck::main(),
        Some("--helper") => auditlog::helper(),
        _ => {}
    }
    macos::main()
}

#[cfg(target_os = "linux")]
fn main() {
    match std::env::args().nth(1).as_deref() {
        Some("--version") => {
            println!("wardcell-shim {}", env!("CARGO_PKG_VERSION"));
            return;
        }
        Some("--probe") => probe(),
        Some("--git-watch") => gitcheck::main(),
        Some("--helper") => auditlog::helper(),
        _ => {}
    }

    // 0. Only as PID 1 of the PID namespace the broker made: run by hand, with any socket
    //    at fd 3, the steps below would change the caller's own mounts and network.
    if std::process::id() != 1 {
        wardcell_common::eprintln_line!(
            "error: wardcell-shim is started by wardcell-broker, not by hand (it is not PID 1 of a new PID namespace)"
        );
        std::process::exit(1);
    }

    // 1. A clean signal state, then the spec. What the caller ignored, the command will
    //    ignore; init itself needs SIGCHLD at its default to reap.
    let inherited = sys::ignored_signals();
    sys::set_dispositions(1 << (libc::SIGPIPE - 1));
    let mut waited = SigSet::empty();
    waited.add(Signal::SIGCHLD);
    for &s in FORWARDED {
        waited.add(s);
    }
    // Block what init waits for before anything can arrive; the command unblocks.
    if let Err(e) = waited.thread_set_mask() {
        wardcell_common::eprintln_line!("error: wardcell-shim: setting the signal mask: {e}");
        std::process::exit(1);
    }
    let mut control = greet_broker(sys::control_socket());
    // The bounding set emptied while the broker prepares the spec, for init and the
    // command alike (caps.rs): off the path to the command's start.
    if let Err(e) = caps::drop_bounding_set() {
        setup_failed(&mut control, "capabilities", e);
    }
    // The filter does not depend on the spec: compile it while the broker prepares it.
    let filter = seccomp::policy();
    // Nor do the filesystems of the view that are not the host's (mounts.rs), nor
    // loopback.
    let prepared = mounts::prepare();
    let loopback = sys::loopback_up();
    let spec = match read_spec(&mut control) {
        Ok(s) => s,
        // The broker died or spoke out of turn: nothing to do and no one to tell.
        Err(_) => std::process::exit(1),
    };
    wardcell_support::trace::install_from("wardcell-shim", spec.trace.as_ref());
    tracing::debug!(
        view = spec.view.len(),
        proxy = spec.proxy_port,
        tty = spec.controlling_tty,
        "spec received"
    );

    // 2. The view (mounts.rs).
    let view = match prepared.and_then(|p| mounts::setup(&spec, p)) {
        Ok(v) => v,
        Err(f) => setup_failed(&mut control, f.step, f.message),
    };
    if let Err(e) = loopback {
        setup_failed(
            &mut control,
            "network",
            format!("bringing loopback up: {e}"),
        );
    }
    // With network, the listeners go to the broker before the command's process exists
    // (its reports must come after them), and one sysctl is written by name for them:
    // the host's tree goes first there; without, after the fork (step 4).
    if let Some(port) = spec.proxy_port {
        if let Err(f) = mounts::let_host_go() {
            setup_failed(&mut control, f.step, f.message);
        }
        if let Err(e) = net::hand_over(&mut control, port, &spec.egress_ports) {
            setup_failed(&mut control, "network", e);
        }
    }
    // 3. The command's process, at once. It confines itself (below, exec_command) while
    //    init detaches the host's tree, waits for the broker's Proceed (the broker has
    //    audited the run's start and, with network, started the proxy, whose CA the
    //    command's bundle then carries), writes that bundle, sets the PID namespace's
    //    pid_max and drops its capabilities (step 4); only then does init say go, and the
    //    command looks up a name (its working directory, the program) and execs. Until
    //    go, the host's tree still hangs on the view's root: nothing on either side looks
    //    a name up before it is detached.
    //    With a pty, the command's session is init's: its process group then has its
    //    parent in the same session, so it is not orphaned and Ctrl-Z (SIGTSTP from the
    //    terminal) stops it, as under a shell.
    if spec.controlling_tty {
        if let Err(e) = nix::unistd::setsid()
            .map_err(std::io::Error::from)
            .and_then(|_| sys::set_controlling_tty(wardcell_support::tty::first_std_tty()))
        {
            setup_failed(&mut control, "terminal", format!("TIOCSCTTY: {e}"));
        }
    }
    let (wait_go, go) = match nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC) {
        Ok(p) => p,
        Err(e) => setup_failed(&mut control, "fork", format!("pipe: {e}")),
    };
    let child = match sys::fork() {
        Ok(sys::Forked::Child) => {
            drop(go);
            exec_command(&spec, &view, &filter, &mut control, inherited, wait_go)
        }
        Ok(sys::Forked::Parent(pid)) => Pid::from_raw(pid),
        Err(e) => setup_failed(&mut control, "fork", e.to_string()),
    };
    drop(wait_go);
    let detached = match spec.proxy_port {
        None => mounts::let_host_go(),
        Some(_) => Ok(()),
    };
    // 4. Init: every step of its that can fail, dropping its capabilities among them,
    //    comes before go: the command never runs beside a capable init, nor at all when
    //    one of them fails. Proceed and the CA bundle (in the view's own /dev) need no
    //    capability: last, while the broker finishes.
    let ready = detached
        .map_err(|f| (f.step, f.message))
        .and_then(|()| set_pid_max(spec.pid_max).map_err(|e| ("rlimit", e)))
        .and_then(|()| become_init().map_err(|e| ("init", e)))
        .and_then(|()| await_proceed(&mut control, &view).map_err(|e| ("start", e)));
    if let Err((step, message)) = ready {
        let _ = kill(child, Signal::SIGKILL);
        setup_failed(&mut control, step, message);
    }
    // A command that failed its own steps has reported why and exited: no one reads.
    let _ = nix::unistd::write(&go, b"g");
    drop(go);
    // The host's detached tree is freed now, beside the command's start.
    sys::close_all(view.host);
    tracing::debug!(pid = child.as_raw(), "command started; init supervises it");
    let status = supervise(child, &waited, &mut control);
    tracing::debug!(status = ?status, "command ended");
    report(&mut control, &status);
    let _ = control.flush();
    std::process::exit(match status {
        ShimReport::Exited { code } => code,
        ShimReport::Signaled { signal } => 128 + signal,
        _ => 1,
    })
}

#[cfg(target_os = "linux")]
/// For root, the profile's processes limit as the PID namespace's pid_max: no PID, so no
/// process, past it. Init writes it (it still holds CAP_SYS_ADMIN in the namespace's
/// owner; the command never does) before the command may exec.
fn set_pid_max(pid_max: Option<u64>) -> Result<(), String> {
    match pid_max {
        Some(n) => std::fs::write("/proc/sys/kernel/pid_max", n.to_string())
            .map_err(|e| format!("setting the processes limit (pid_max {n}): {e}")),
        None => Ok(()),
    }
}

#[cfg(target_os = "linux")]
/// Whether init said go (one byte) rather than ending without it.
fn go_said(wait_go: std::os::fd::OwnedFd) -> bool {
    let mut b = [0u8; 1];
    loop {
        match nix::unistd::read(std::os::fd::AsRawFd::as_raw_fd(&wait_go), &mut b) {
            Ok(1) => return true,
            Err(nix::errno::Errno::EINTR) => continue,
            _ => return false,
        }
    }
}

#[cfg(target_os = "linux")]
/// Wait for the broker's `Proceed`; with the run's CA, write the bundle the command trusts.
fn await_proceed(control: &mut UnixStream, view: &mounts::View) -> Result<(), String> {
    let ca_pem = match protocol::read_frame::<ShimRequest>(control).map_err(|e| e.to_string())? {
        ShimRequest::Proceed { ca_pem } => ca_pem,
        ShimRequest::Start(_) => return Err("a second Start".into()),
    };
    if ca_pem.is_some() || !view.ca_certificates.is_empty() {
        let mut bundle = view.ca_certificates.clone();
        if !bundle.is_empty() && !bundle.ends_with(b"\n") {
            bundle.push(b'\n');
        }
        bundle.extend_from_slice(ca_pem.unwrap_or_default().as_bytes());
        let path = wardcell_support::sandbox_env::SANDBOX_CA_BUNDLE;
        std::fs::write(path, &bundle).map_err(|e| format!("writing {path}: {e}"))?;
    }
    Ok(())
}

#[cfg(target_os = "linux")]
/// `--probe`, for `wardcell doctor`: what this kernel offers, as `key=value` lines.
fn probe() -> ! {
    let abi = sys::landlock_abi();
    println!("landlock_abi={abi}");
    // Which layer keeps host Unix sockets out: the view always; Landlock's socket rules too
    // where the kernel has them.
    println!(
        "unix_sockets={}",
        if abi >= landlock::UNIX_SOCKET_RULES as i64 {
            "view+landlock"
        } else {
            "view"
        }
    );
    // Install the real filters in a throwaway child and see that it survives.
    let seccomp = match sys::fork() {
        Ok(sys::Forked::Child) => {
            let ok = nix::sys::prctl::set_no_new_privs().is_ok()
                && seccomp::install(&seccomp::policy()).is_ok();
            std::process::exit(if ok { 0 } else { 1 })
        }
        Ok(sys::Forked::Parent(pid)) => match waitpid(Pid::from_raw(pid), None) {
            Ok(WaitStatus::Exited(_, 0)) => "ok".to_string(),
            other => format!("failed ({other:?})"),
        },
        Err(e) => format!("failed (fork: {e})"),
    };
    println!("seccomp={seccomp}");
    std::process::exit(0)
}

/// The control socket the broker passed at fd 3 (`control`, as this system's sys module
/// took it), with our Hello sent: the broker sends the spec as soon as it has it, and the
/// spec waits in the socket while the shim does what does not depend on it. Without the
/// socket, or the broker, the shim ends.
fn greet_broker(control: std::io::Result<UnixStream>) -> UnixStream {
    let mut control = match control {
        Ok(s) => s,
        Err(e) => {
            wardcell_common::eprintln_line!(
                "error: wardcell-shim is started by wardcell-broker, not by hand ({e})"
            );
            std::process::exit(1);
        }
    };
    if protocol::send_hello(&mut control).is_err() {
        std::process::exit(1);
    }
    control
}

/// The broker's Hello (ours went first) and the spec.
fn read_spec(control: &mut UnixStream) -> Result<SandboxSpec, protocol::FrameError> {
    protocol::expect_hello(control)?;
    match protocol::read_frame::<ShimRequest>(control)? {
        ShimRequest::Start(spec) => Ok(*spec),
        ShimRequest::Proceed { .. } => Err(protocol::FrameError::Malformed(
            "Proceed before Start".into(),
        )),
    }
}

#[cfg(target_os = "linux")]
/// Init keeps nothing it does not need: no capabilities, no new privileges, undumpable.
fn become_init() -> Result<(), String> {
    nix::sys::prctl::set_no_new_privs().map_err(|e| format!("no_new_privs: {e}"))?;
    sys::set_undumpable().map_err(|e| format!("PR_SET_DUMPABLE: {e}"))?;
    caps::drop_all()
}

#[cfg(target_os = "linux")]
/// Wait for the command, forwarding signals to its process group and reaping orphans.
fn supervise(child: Pid, waited: &SigSet, control: &mut UnixStream) -> ShimReport {
    loop {
        let sig = match waited.wait() {
            Ok(s) => s,
            Err(_) => continue,
        };
        if sig != Signal::SIGCHLD {
            // The user's Ctrl-Z, passed on by `wardcell run`: without a pty the command's
            // group is orphaned (its session is its own), where the kernel discards a
            // SIGTSTP at its default action, so it is stopped as a job is.
            let sig = if sig == Signal::SIGTSTP {
                Signal::SIGSTOP
            } else {
                sig
            };
            // The command leads its own process group (it called setsid).
            if kill(Pid::from_raw(-child.as_raw()), sig).is_err() {
                let _ = kill(child, sig);
            }
            continue;
        }
        loop {
            match waitpid(None, Some(WaitPidFlag::WNOHANG | WaitPidFlag::WUNTRACED)) {
                Ok(WaitStatus::Exited(pid, code)) if pid == child => {
                    return ShimReport::Exited { code };
                }
                Ok(WaitStatus::Signaled(pid, sig, _)) if pid == child => {
                    return ShimReport::Signaled { signal: sig as i32 };
                }
                Ok(WaitStatus::Stopped(pid, sig)) if pid == child => {
                    report(control, &ShimReport::Stopped { signal: sig as i32 })
                }
                Ok(WaitStatus::StillAlive) | Err(_) => break,
                Ok(_) => {} // an orphan reaped, or stopped: keep going
            }
        }
    }
}

#[cfg(target_os = "linux")]
/// The command's side of the fork: confine, then exec. Never returns.
fn exec_command(
    spec: &SandboxSpec,
    view: &mounts::View,
    filter: &Result<seccompiler::BpfProgram, String>,
    control: &mut UnixStream,
    ignored: u64,
    wait_go: std::os::fd::OwnedFd,
) -> ! {
    // a. Its own session; with a pty (init's session, see step 3), its own process
    //    group in the terminal's foreground (SIGTTOU blocked: until then it is in the
    //    background).
    if spec.controlling_tty {
        let _ = SigSet::from(Signal::SIGTTOU).thread_block();
        let me = nix::unistd::getpid();
        if let Err(e) = nix::unistd::setpgid(me, me).and_then(|()| {
            wardcell_support::tty::with_std(wardcell_support::tty::first_std_tty(), |tty| {
                nix::unistd::tcsetpgrp(tty, me)
            })
        }) {
            setup_failed(control, "terminal", format!("taking the foreground: {e}"));
        }
    } else if let Err(e) = nix::unistd::setsid() {
        setup_failed(control, "setsid", e.to_string());
    }
    // b. The caller's soft open-file limit back (wardcell ran with the hard one).
    if let Some(soft) = spec.open_files {
        use nix::sys::resource::{getrlimit, setrlimit, Resource};
        let lowered = getrlimit(Resource::RLIMIT_NOFILE)
            .and_then(|(_, hard)| setrlimit(Resource::RLIMIT_NOFILE, soft.min(hard), hard));
        if let Err(e) = lowered {
            setup_failed(
                control,
                "rlimit",
                format!("restoring the open-file limit: {e}"),
            );
        }
    }
    //    The profile's processes limit, where no cgroup holds it: in this user namespace
    //    it counts the sandbox's processes only (Linux 5.14 and later), the command
    //    cannot raise it (that needs CAP_SYS_RESOURCE in the host's namespace). (For
    //    root, exempt from RLIMIT_NPROC, init sets the PID namespace's pid_max instead.)
    //    A hard limit the caller already has below it stays (it is counted here too).
    if let Some(n) = spec.processes {
        use nix::sys::resource::{getrlimit, setrlimit, Resource};
        let set = getrlimit(Resource::RLIMIT_NPROC)
            .and_then(|(_, hard)| setrlimit(Resource::RLIMIT_NPROC, n.min(hard), n.min(hard)));
        if let Err(e) = set {
            setup_failed(
                control,
                "rlimit",
                format!("setting the processes limit: {e}"),
            );
        }
    }
    //    No new privileges: setuid bits and file capabilities mean nothing from here on.
    if let Err(e) = nix::sys::prctl::set_no_new_privs() {
        setup_failed(control, "no_new_privs", e.to_string());
    }
    // c. Every capability, in every set.
    if let Err(e) = caps::drop_all() {
        setup_failed(control, "capabilities", e);
    }
    // d. Landlock.
    match landlock::enforce(view, &spec.tcp_connect) {
        Ok(enforced) => report(
            control,
            &ShimReport::Confined {
                landlock_abi: enforced.abi,
                partial: enforced.missing,
            },
        ),
        Err(e) => setup_failed(control, "landlock", e),
    }
    // e. Init's go (main, step 3): the host's tree is gone from the view, the broker said
    //    proceed. Then, and only then, the first name: the working directory.
    if !go_said(wait_go) {
        // Init failed a step of its own, reported it, and is ending the sandbox.
        std::process::exit(1);
    }
    if let Err(e) = std::env::set_current_dir(&spec.cwd) {
        setup_failed(
            control,
            "cwd",
            format!(
                "cannot enter the working directory {}: {e}",
                spec.cwd.display()
            ),
        );
    }
    // f. Seccomp, last before exec: from here on the syscall surface is the sandbox's.
    if let Err(e) = seccomp::install(filter) {
        setup_failed(control, "seccomp", e);
    }
    // g. Nothing but 0, 1 and 2 survives exec (the control socket is close-on-exec too).
    if let Err(e) = sys::cloexec_from(3) {
        setup_failed(control, "descriptors", e.to_string());
    }
    //    A standard descriptor the shim was started without (the caller's `>&-`) is
    //    closed again: the runtime's /dev/null in its place would hide write errors.
    for fd in (0..3).filter(|fd| sys::closed_at_start() & (1 << fd) != 0) {
        let _ = nix::unistd::close(fd);
    }
    // h. The dispositions a plain exec by the caller would give (the shim's own ignored
    //    SIGPIPE must not leak: `yes | head -1` ends by SIGPIPE), and the signals init
    //    blocked are the command's again.
    //    Init set exactly SIGPIPE ignored (step 1) and nothing since: change what differs.
    sys::change_dispositions(1 << (libc::SIGPIPE - 1), ignored);
    let _ = SigSet::all().thread_unblock();
    let _ = nix::sys::signal::sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None);

    let errno = exec(spec);
    report(control, &ShimReport::ExecFailed { errno });
    std::process::exit(if errno == libc::ENOENT { 127 } else { 126 })
}

/// execve the command, searching the sandbox's PATH like execvp. Returns the errno.
fn exec(spec: &SandboxSpec) -> i32 {
    let to_c = |s: &str| CString::new(s).ok();
    let Some(argv) = spec
        .argv
        .iter()
        .map(|a| to_c(a))
        .collect::<Option<Vec<_>>>()
    else {
        return libc::EINVAL;
    };
    let Some(envp) = spec
        .env
        .iter()
        .map(|(k, v)| to_c(&format!("{k}={v}")))
        .collect::<Option<Vec<_>>>()
    else {
        return libc::EINVAL;
    };
    // An empty name names no file: "command not found", as a shell says.
    let Some(prog) = spec.argv.first().filter(|p| !p.is_empty()) else {
        return libc::ENOENT;
    };
    if prog.contains('/') {
        let Some(path) = to_c(prog) else {
            return libc::EINVAL;
        };
        return nix::unistd::execve(&path, &argv, &envp).unwrap_err() as i32;
    }
    let path_var = spec
        .env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_str())
        .unwrap_or("/usr/local/bin:/usr/bin:/bin");
    let mut result = libc::ENOENT;
    for dir in path_var.split(':') {
        let dir = if dir.is_empty() { "." } else { dir };
        let Some(full) = to_c(&format!("{dir}/{prog}")) else {
            continue;
        };
        let errno = nix::unistd::execve(&full, &argv, &envp).unwrap_err() as i32;
        match errno {
            // Keep looking, as execvp does, but remember a file we were refused.
            libc::ENOENT | libc::ENOTDIR | libc::ESTALE | libc::ENODEV | libc::ETIMEDOUT => {}
            libc::EACCES => result = libc::EACCES,
            other => return other,
        }
    }
    result
}
