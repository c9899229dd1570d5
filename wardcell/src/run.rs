//! `wardcell run`: load and resolve the configuration into a plan, then launch it.

use std::convert::Infallible;
use std::ffi::OsString;

use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use nix::{fcntl, unistd};

use wardcell_common::paths;
use wardcell_common::plan::Plan;
use wardcell_common::protocol::{self, Launch};
use wardcell_common::resolve::{self, StartRequest};

use crate::cli::RunArgs;
use crate::context;
use crate::credentials;
use crate::error::Error;

/// Commands travel as UTF-8 text (the plan is text end to end).
pub fn utf8_command(args: Vec<OsString>) -> Result<Vec<String>, Error> {
    args.into_iter()
        .enumerate()
        .map(|(i, a)| a.into_string().map_err(|_| Error::NotUtf8 { index: i + 1 }))
        .collect()
}

/// Steps of `wardcell run`, on the host.
pub fn run(args: RunArgs) -> Result<Infallible, Error> {
    // 1. The command, as text.
    let command = utf8_command(args.command)?;
    // 2. The configuration, found and checked.
    let host = context::load(args.config.file.as_deref())?;
    // 3. Where to start.
    let start = match (args.zone, args.profile) {
        (Some(z), _) => StartRequest::Zone(z),
        (None, Some(p)) => StartRequest::Profile(p),
        (None, None) => StartRequest::Default,
    };
    // 4. The plan: the same value `policy show` prints.
    let plan = resolve::resolve(&host.config, start, command, &host.context)?;
    // 5. Secret files nobody else may read, before anything starts.
    credentials::check_sources(&plan)?;
    // 6. Hand it over.
    launch(plan)
}

/// Where the broker is: next to this binary (a cargo build), or in the package's
/// libexec directory. Never through PATH or an environment variable.
pub fn find_helper(name: &str) -> Result<PathBuf, Error> {
    let beside = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join(name)));
    beside
        .into_iter()
        .chain([Path::new(paths::LIBEXEC_DIR).join(name)])
        .find(|p| p.is_file())
        .ok_or_else(|| {
            Error::Launch(format!(
                "{name} was found neither next to wardcell nor in {}; reinstall wardcell",
                paths::LIBEXEC_DIR
            ))
        })
}

/// The descriptor on which the broker expects the plan.
const LAUNCH_FD: i32 = 3;

/// Put `plan` (a Hello, then one `Launch::Run` frame, at most 64 KiB) in a socketpair
/// whose reading end is left at fd 3, inheritable, for the broker. The socket buffer
/// holds the frames until the broker reads them. Returns the broker's path.
pub fn hand_over(plan: Plan) -> Result<PathBuf, Error> {
    let broker = find_helper("wardcell-broker")?;
    let fail = |what: &str, e: &dyn std::fmt::Display| Error::Launch(format!("{what}: {e}"));
    let (mut ours, theirs) = UnixStream::pair().map_err(|e| fail("socketpair", &e))?;
    protocol::send_hello(&mut ours).map_err(|e| fail("handing over the plan", &e))?;
    protocol::write_frame(&mut ours, &Launch::Run(Box::new(plan)))
        .map_err(|e| fail("handing over the plan", &e))?;
    drop(ours);
    if theirs.as_raw_fd() != LAUNCH_FD {
        unistd::dup2(theirs.as_raw_fd(), LAUNCH_FD).map_err(|e| fail("dup2", &e))?;
    } else {
        // Already at fd 3: keep it open past this function.
        std::mem::forget(theirs);
    }
    fcntl::fcntl(LAUNCH_FD, fcntl::FcntlArg::F_SETFD(fcntl::FdFlag::empty()))
        .map_err(|e| fail("fcntl", &e))?;
    Ok(broker)
}

/// Exec the broker with `plan` waiting on fd 3; returns only on failure.
pub fn launch(plan: Plan) -> Result<Infallible, Error> {
    let broker = hand_over(plan)?;
    let e = Command::new(&broker).exec();
    Err(Error::Launch(format!(
        "executing {}: {e}",
        broker.display()
    )))
}
