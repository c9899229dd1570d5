//! The words of what the broker tells its user: it decides and returns typed outcomes;
//! this module only renders them (docs/OUTPUT.md and spec/zones.md give the lines).

use nix::sys::wait::WaitStatus;

use wardcell_common::protocol::ShimReport;
use wardcell_common::text::shown;

/// How a sandbox ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The command ran and ended: its exit status (128+N for signal N).
    Finished(i32),
    /// Exec of the command failed with this errno.
    ExecFailed(i32),
    /// Building the sandbox failed at `step`.
    SetupFailed { step: String, message: String },
    /// The shim died before exec with this status (see the broker's sys::spawn).
    ChildFailed(i32),
}

impl Outcome {
    /// What the shim's reports and its own exit status add up to: a failure it reported
    /// first, then the command's end it reported, then its status. `failed_step` says
    /// whether an exit status is the shim's own, from before it started (the broker's
    /// sys::spawn; never on macOS, where that status is the command's).
    pub fn of(
        reports: &[ShimReport],
        status: Option<WaitStatus>,
        failed_step: fn(i32) -> Option<&'static str>,
    ) -> Outcome {
        let failure = reports.iter().find_map(|r| match r {
            ShimReport::SetupFailed { step, message } => Some(Outcome::SetupFailed {
                step: step.clone(),
                message: message.clone(),
            }),
            ShimReport::ExecFailed { errno } => Some(Outcome::ExecFailed(*errno)),
            _ => None,
        });
        let end = || {
            reports.iter().find_map(|r| match r {
                ShimReport::Exited { code } => Some(Outcome::Finished(*code)),
                ShimReport::Signaled { signal } => Some(Outcome::Finished(128 + signal)),
                _ => None,
            })
        };
        failure.or_else(end).unwrap_or(match status {
            Some(WaitStatus::Exited(_, code)) if failed_step(code).is_some() => {
                Outcome::ChildFailed(code)
            }
            Some(WaitStatus::Exited(_, code)) => Outcome::Finished(code),
            Some(WaitStatus::Signaled(_, sig, _)) => Outcome::Finished(128 + sig as i32),
            _ => Outcome::Finished(1),
        })
    }

    /// The sandbox could not be built: the shim failed before the command (a failed exec
    /// of the command is the command's own failure).
    pub fn unbuilt(&self) -> bool {
        matches!(self, Outcome::SetupFailed { .. } | Outcome::ChildFailed(_))
    }

    /// The command's exit status, when it ran and ended.
    pub fn finished(&self) -> Option<i32> {
        match self {
            Outcome::Finished(code) => Some(*code),
            _ => None,
        }
    }
}

/// How a sandbox ended: the exit status, and the one-line error when it did not run.
/// `failed_step` names the step of the shim that an exit status stands for.
pub fn describe(
    outcome: &Outcome,
    program: &str,
    failed_step: fn(i32) -> Option<&'static str>,
) -> (i32, Option<String>) {
    match outcome {
        Outcome::Finished(code) => (*code, None),
        Outcome::ExecFailed(errno) => {
            let (code, why) = match *errno {
                libc::ENOENT => (
                    127,
                    "command not found in the sandbox; check its name and that the profile can read where it is installed".to_string(),
                ),
                libc::EACCES => (
                    126,
                    "permission denied: it is not executable, or the profile does not let the sandbox run it".to_string(),
                ),
                other => (126, std::io::Error::from_raw_os_error(other).to_string()),
            };
            (code, Some(format!("`{program}`: {why}")))
        }
        Outcome::SetupFailed { step, message } => (1, Some(setup_failed(step, message))),
        Outcome::ChildFailed(code) => {
            let what = failed_step(*code).unwrap_or("starting the shim");
            (
                1,
                Some(format!(
                    "could not start the sandbox: {what} failed; `wardcell doctor` checks what this machine supports"
                )),
            )
        }
    }
}

/// The shim reported that building the sandbox failed at `step`.
pub fn setup_failed(step: &str, message: &str) -> String {
    format!(
        "could not start the sandbox: {step}: {message}; `wardcell doctor` checks what this machine supports"
    )
}

/// The warning when the kernel lacks parts of the confinement (said once a run).
pub fn kernel_lacks(partial: &[String]) -> String {
    format!(
        "warning: this kernel lacks {}; the sandbox runs without it (see `wardcell doctor`)",
        shown(&partial.join(", "))
    )
}

/// The warning for a file that appeared in the run's repository and runs code in git.
pub fn git_code_appeared(what: &str, cwd: &std::path::Path) -> String {
    format!(
        "warning: {} appeared during this run and runs code the next time git runs in {}; inspect it before you use git there",
        shown(what),
        shown(&cwd.display().to_string())
    )
}

/// The error when a zone's proxy died during the run (`zone` "-" for `run --profile`).
pub fn proxy_died(zone: &str, code: Option<i32>, signal: Option<i32>) -> String {
    let how = match (code, signal) {
        (Some(c), _) => format!("exited with status {c}"),
        (_, Some(s)) => format!("killed by signal {s}"),
        _ => "ended".to_string(),
    };
    let whose = match zone {
        "-" => "the sandbox's proxy".to_string(),
        z => format!("the proxy of zone '{z}'"),
    };
    format!(
        "error: {whose} died ({how}); connections from its sandbox now fail; start the run again to get its network back"
    )
}

/// What the shim was doing at step `step` between clone3 and exec (the broker's
/// sys::spawn::Step), when it failed there.
pub fn shim_step(step: i32) -> Option<&'static str> {
    Some(match step {
        1 => "denying setgroups in the new user namespace",
        2 => "writing the user namespace's uid map",
        3 => "writing the user namespace's gid map",
        4 => "tying the sandbox's life to the broker's",
        5 => "passing mount capabilities to the shim",
        6 => "raising ambient capabilities for the shim",
        7 => "arranging the sandbox's descriptors",
        8 => "executing wardcell-shim",
        _ => return None,
    })
}

/// Why creating a sandbox's namespaces failed: the error, and what on this machine
/// forbids them when that can be told (for `doctor` and for a failed spawn).
pub fn spawn_failed(e: &std::io::Error) -> String {
    let hint = match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => {
            if std::fs::read_to_string("/proc/sys/kernel/apparmor_restrict_unprivileged_userns")
                .is_ok_and(|v| v.trim() == "1")
            {
                "; AppArmor restricts unprivileged user namespaces here (sysctl kernel.apparmor_restrict_unprivileged_userns=1): install wardcell's AppArmor profile or ask your administrator"
            } else {
                "; unprivileged user namespaces are disabled (check sysctl user.max_user_namespaces and kernel.unprivileged_userns_clone)"
            }
        }
        Some(libc::ENOSPC) => {
            "; the user namespace limit is reached (sysctl user.max_user_namespaces)"
        }
        Some(libc::ENOSYS) => "; this kernel has no clone3 (Linux 5.3 or newer is required)",
        _ => "",
    };
    format!("creating the sandbox's namespaces failed: {e}{hint}")
}

/// An entry refused because the run's repository now holds `what`, which git would run.
pub fn git_code_blocks_entry(what: &str) -> String {
    format!("{what} appeared during this run and git would run it in the new sandbox; remove it, then enter again")
}

/// The shim ended before it started the command: why, from its status (`None`: it could
/// not be waited for).
pub fn shim_failed(
    status: Option<nix::sys::wait::WaitStatus>,
    failed_step: fn(i32) -> Option<&'static str>,
) -> String {
    use nix::sys::wait::WaitStatus;
    match status.ok_or(nix::errno::Errno::ECHILD) {
        Ok(WaitStatus::Exited(_, code)) => failed_step(code)
            .map(|s| format!("{s} failed"))
            .unwrap_or_else(|| format!("the shim exited with status {code}")),
        other => format!("the shim ended before it started: {other:?}"),
    }
}

/// The line at the run's end when its proxies refused `n` connections.
pub fn refusals(n: u64, run_id: &str) -> Option<String> {
    (n > 0).then(|| {
        format!(
            "wardcell: {n} connection{} refused in this run; `wardcell logs show {run_id} --category proxy` shows which and why",
            if n == 1 { " was" } else { "s were" },
        )
    })
}

/// A zone name from a `zone enter` request as it may appear in a one-line message:
/// control characters written out (`text::shown`), at most 64 characters of the name
/// (zone names are shorter; anything else is a probe).
fn asked_zone(name: &str) -> String {
    let name: String = name.chars().take(64).collect();
    shown(&name).into_owned()
}

/// The chain check's refusal: not every zone on the chain is in `target`'s `enter_from`,
/// or there is no such zone (the same words, so that probing names reveals nothing).
pub fn zone_not_allowed(target: &str) -> String {
    let target = asked_zone(target);
    format!("this zone may not enter zone '{target}'; `wardcell zone list` shows the zones it may")
}

/// The chain check's refusal: the chain is already `max` zones deep.
pub fn chain_too_deep(target: &str, max: usize) -> String {
    let target = asked_zone(target);
    format!(
        "this zone may not enter zone '{target}': a chain of entered zones is at most {max} deep"
    )
}

/// The host side of a view could not be watched (the user's inotify limits).
pub fn unheld(e: &std::io::Error) -> String {
    format!("{e}: a sandbox's masks and read-only paths are watched on the host for the whole run, and this one's cannot be; raise fs.inotify.max_user_watches or narrow the profile")
}

/// A path a sandbox's view held was replaced on the host: the run is ended.
pub fn protection_lost(path: &std::path::Path) -> String {
    if path == std::path::Path::new("/") {
        return "error: the run could no longer follow what the host did to the paths its sandboxes held masked or read-only (the kernel's queue of file events overflowed, or the run's guard ended); every sandbox of the run was ended rather than go on unwatched".into();
    }
    let path = wardcell_common::text::shown(&path.display().to_string()).into_owned();
    format!("error: {path} was replaced, removed or created while a sandbox of this run held it masked or read-only; every sandbox of the run was ended rather than let it see {path} unprotected")
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::signal::Signal;
    use nix::unistd::Pid;

    fn linux_steps(code: i32) -> Option<&'static str> {
        (201..=208).contains(&code).then_some("a step")
    }

    fn no_steps(_: i32) -> Option<&'static str> {
        None
    }

    #[test]
    fn reports_come_first_then_the_exit_status() {
        let pid = Pid::from_raw(1);
        let exited = |c| Some(WaitStatus::Exited(pid, c));
        let failed = ShimReport::ExecFailed { errno: 2 };
        let exit = ShimReport::Exited { code: 3 };
        let of = Outcome::of;
        assert_eq!(
            of(std::slice::from_ref(&failed), exited(127), linux_steps),
            Outcome::ExecFailed(2)
        );
        // A failure reported wins over an end reported before it.
        assert_eq!(
            of(&[exit.clone(), failed], exited(3), linux_steps),
            Outcome::ExecFailed(2)
        );
        assert_eq!(of(&[exit], exited(3), linux_steps), Outcome::Finished(3));
        let signaled = ShimReport::Signaled { signal: 9 };
        assert_eq!(of(&[signaled], None, linux_steps), Outcome::Finished(137));
        // No report: on Linux, a status in the steps' range is the shim's before exec.
        assert_eq!(of(&[], exited(203), linux_steps), Outcome::ChildFailed(203));
        // On macOS the shim became the command: the same status is the command's own.
        assert_eq!(of(&[], exited(203), no_steps), Outcome::Finished(203));
        let term = Some(WaitStatus::Signaled(pid, Signal::SIGTERM, false));
        assert_eq!(of(&[], term, no_steps), Outcome::Finished(128 + 15));
        assert_eq!(of(&[], None, no_steps), Outcome::Finished(1));
    }
}
