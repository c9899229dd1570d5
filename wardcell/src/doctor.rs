//! `wardcell doctor`: can this machine run wardcell's sandboxes, and where are things.
//!
//! One line per check, `OK`, `WARN` or `FAIL`. It checks by doing where it can: the shim
//! reports what the kernel offers, and a throwaway sandbox runs `/bin/true` through the
//! real broker. Exit status 1 when wardcell cannot sandbox here.

use crate::cli::Output;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use wardcell_common::paths;
use wardcell_common::plan::Start;
use wardcell_config::config::{self, Source};
use wardcell_config::resolve::{self, StartRequest};

use crate::apparmor;
use crate::context;
use crate::run;

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Level {
    Ok,
    Warn,
    Fail,
}

struct Report {
    worst: Level,
    /// `--output json`: the checks, kept for one document at the end.
    json: Option<Vec<serde_json::Value>>,
}

/// One line on stdout; a reader that went away (`| head`) ends nothing.
fn out(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout().lock(), "{line}");
}

impl Report {
    fn line(&mut self, level: Level, what: &str, text: impl AsRef<str>) {
        let (tag, word) = match level {
            Level::Ok => ("OK  ", "ok"),
            Level::Warn => ("WARN", "warn"),
            Level::Fail => ("FAIL", "fail"),
        };
        match &mut self.json {
            Some(checks) => checks.push(serde_json::json!({
                "check": what, "level": word, "detail": text.as_ref(),
            })),
            None => out(&format!(
                "{tag}  {what:<16} {}",
                wardcell_common::text::shown(text.as_ref())
            )),
        }
        self.worst = self.worst.max(level);
    }

    fn line_for(&mut self, (level, text): (Level, String), what: &str) {
        self.line(level, what, text);
    }
}

fn read_sysctl(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// Run `path --version` and compare with ours.
fn helper_version(path: &Path) -> Result<String, String> {
    let out = Command::new(path)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let version = text.rsplit(' ').next().unwrap_or("").to_string();
    if version == env!("CARGO_PKG_VERSION") {
        Ok(version)
    } else {
        Err(format!(
            "version {version:?} does not match wardcell {}; install matching binaries",
            env!("CARGO_PKG_VERSION")
        ))
    }
}

pub fn run(config_file: Option<&Path>, format: Output) -> u8 {
    let mut r = Report {
        worst: Level::Ok,
        json: (format == Output::Json).then(Vec::new),
    };

    // 1. Helpers, found where `run` finds them, at the same version.
    let mut shim = None;
    for (name, needed) in [
        ("wardcell-broker", true),
        ("wardcell-shim", true),
        ("wardcell-proxy", false),
        ("wardcell-approve", false),
    ] {
        match run::find_helper(name) {
            Ok(path) => match helper_version(&path) {
                Ok(v) => {
                    r.line(Level::Ok, name, format!("{} ({v})", path.display()));
                    if name == "wardcell-shim" {
                        shim = Some(path);
                    }
                }
                Err(e) => r.line(Level::Fail, name, format!("{}: {e}", path.display())),
            },
            Err(e) if needed => r.line(Level::Fail, name, e.to_string()),
            Err(_) if name == "wardcell-approve" => r.line(
                Level::Warn,
                name,
                "not installed: no person can answer approvals here unless another plugin is configured",
            ),
            Err(_) => r.line(
                Level::Warn,
                name,
                "not installed: profiles with network cannot run",
            ),
        }
    }

    // 2. The kernel, and what it offers, as the shim sees it.
    if cfg!(target_os = "linux") {
        kernel_version(&mut r);
    }
    if let Some(shim) = &shim {
        if cfg!(target_os = "macos") {
            seatbelt_checks(&mut r, shim);
        } else {
            kernel_checks(&mut r, shim);
        }
    }

    // 3. User namespaces: the settings that commonly block them (Linux); the broker's
    //    peer check; what enforces each limit here.
    let mut limits = serde_json::Map::new();
    if cfg!(target_os = "linux") {
        userns_settings(&mut r);
        peer_check(&mut r);
        limits = limit_checks(&mut r);
    }

    // 4. Configuration and directories.
    let host = match context::load(config_file) {
        Ok(h) => {
            r.line(Level::Ok, "config", format!("{} (valid)", h.config.source));
            Some(h)
        }
        Err(e) => {
            r.line(Level::Fail, "config", e.to_string());
            None
        }
    };
    if let Some(h) = &host {
        let d = &h.context.dirs;
        r.line(Level::Ok, "config dirs", join(&d.config));
        r.line(
            Level::Ok,
            "audit logs",
            paths::runs_dir(d).display().to_string(),
        );
        r.line(Level::Ok, "runtime", d.runtime.display().to_string());
        if !matches!(
            config::locate(None, &|k| std::env::var(k).ok(), &h.context.home),
            Source::File(_)
        ) && config_file.is_none()
        {
            r.line(
                Level::Ok,
                "default config",
                "no zones.toml with settings found (one of comments alone counts as none): the built-in default is in use",
            );
        }
    }

    // 5. The proof: a real sandbox through the real broker.
    if r.worst < Level::Fail {
        if let Some(h) = host {
            trial_sandbox(&mut r, h);
        }
    }

    let can = r.worst < Level::Fail;
    match r.json {
        Some(checks) => {
            let doc = serde_json::json!({"ok": can, "checks": checks, "limits": limits});
            out(&doc.to_string());
        }
        None if !can => {
            out("wardcell cannot sandbox on this machine: fix the FAIL lines above");
        }
        None => {}
    }
    u8::from(!can)
}

/// What enforces a limit here, in words.
fn describe(m: wardcell_common::limits::Mechanism) -> &'static str {
    use wardcell_common::limits::Mechanism;
    match m {
        Mechanism::CgroupV2 => "a cgroup v2 made for each sandbox",
        Mechanism::CgroupV1 => "a cgroup v1 made for each sandbox",
        Mechanism::Rlimit => "RLIMIT_NPROC in the sandbox's user namespace",
        Mechanism::PidMax => {
            "pid_max of the sandbox's PID namespace (a bound of at least 300; below, a cgroup)"
        }
        Mechanism::Timer => "the broker's timer",
        Mechanism::None => {
            "nothing here (a profile that sets it is refused unless it marks it best effort)"
        }
    }
}

/// How each of a profile's `limits` would be enforced here (the broker runs as this
/// user, in this cgroup): one line each, and for JSON each limit's mechanism.
fn limit_checks(r: &mut Report) -> serde_json::Map<String, serde_json::Value> {
    use wardcell_common::limits::{Kind, Mechanism};
    use wardcell_config::sizes::DEFAULT_PROCESSES;
    let machine = crate::machine::probe(true);
    let mut out = serde_json::Map::new();
    for kind in wardcell_config::sizes::ALL {
        // For processes, the built-in bound's mechanism (a bound below 300 may differ).
        let (mechanism, level, text) = match crate::machine::mechanism(&machine, kind, DEFAULT_PROCESSES) {
            Ok(m) => (m, Level::Ok, describe(m).to_string()),
            // What cannot be enforced here is a warning, never OK: a profile that sets
            // it is refused (or, best effort, runs without it).
            Err(why) => (
                Mechanism::None,
                Level::Warn,
                format!("cannot be enforced here: {why}; a profile that sets it is refused unless it marks it best effort"),
            ),
        };
        let text = match kind {
            Kind::Processes => {
                format!("{text}; the built-in profiles set {DEFAULT_PROCESSES}, best effort")
            }
            _ => text,
        };
        r.line(level, &format!("limits.{}", kind.name()), text);
        out.insert(kind.name().into(), serde_json::json!(mechanism));
    }
    out
}

fn join(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// macOS: whether Seatbelt applies a wardcell profile, as the shim's probe found.
fn seatbelt_checks(r: &mut Report, shim: &Path) {
    match Command::new(shim)
        .arg("--probe")
        .stdin(Stdio::null())
        .output()
    {
        Ok(o) => {
            let (level, text) = seatbelt_line(&String::from_utf8_lossy(&o.stdout));
            r.line(level, "seatbelt", text);
        }
        Err(e) => r.line(
            Level::Fail,
            "seatbelt",
            format!("running the shim's probe: {e}"),
        ),
    }
}

/// The doctor line for the macOS shim's `--probe` output (`seatbelt=ok` or
/// `seatbelt=failed (why)`).
fn seatbelt_line(probe: &str) -> (Level, String) {
    match probe
        .lines()
        .find_map(|l| l.strip_prefix("seatbelt="))
        .map(str::trim)
    {
        Some("ok") => (
            Level::Ok,
            "a wardcell profile applies (sandbox_init_with_parameters)".into(),
        ),
        Some(other) => (
            Level::Fail,
            format!("a wardcell profile does not apply: {other}"),
        ),
        None => (
            Level::Fail,
            "the shim's probe said nothing about Seatbelt; reinstall wardcell-shim".into(),
        ),
    }
}

fn kernel_checks(r: &mut Report, shim: &Path) {
    let out = match Command::new(shim)
        .arg("--probe")
        .stdin(Stdio::null())
        .output()
    {
        Ok(o) => String::from_utf8_lossy(&o.stdout).into_owned(),
        Err(e) => {
            r.line(
                Level::Fail,
                "kernel",
                format!("running wardcell-shim --probe ({}): {e}", shim.display()),
            );
            return;
        }
    };
    let get = |k: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(k)?.strip_prefix('='))
            .unwrap_or("")
            .to_string()
    };
    let abi: i32 = get("landlock_abi").parse().unwrap_or(0);
    let missing: Vec<&str> = [
        (4, "TCP rules (ABI 4)"),
        (5, "device ioctl rules (ABI 5)"),
        (6, "signal and abstract-socket scoping (ABI 6)"),
    ]
    .iter()
    .filter(|(need, _)| abi < *need)
    .map(|(_, what)| *what)
    .collect();
    match abi {
        0 => r.line(
            Level::Fail,
            "landlock",
            "not available: every profile needs Landlock ABI 3 (Linux 6.2); enable it with lsm=landlock,... on the kernel command line",
        ),
        1 | 2 => r.line(
            Level::Fail,
            "landlock",
            format!("ABI {abi}: every profile needs ABI 3 (Linux 6.2), the first that controls truncation"),
        ),
        _ if missing.is_empty() => r.line(
            Level::Ok,
            "landlock",
            format!("ABI {abi}: filesystem rules (ABI 3+), TCP rules, device ioctls, signal and abstract-socket scoping"),
        ),
        _ => r.line(
            Level::Warn,
            "landlock",
            format!("ABI {abi}: profiles run, without {}", missing.join(", ")),
        ),
    }
    match get("unix_sockets").as_str() {
        "view+landlock" => r.line(
            Level::Ok,
            "unix sockets",
            "kept out by the view (only what a profile names exists inside) and by Landlock's socket rules (ABI 9)",
        ),
        // Not enforced by the kernel here: a socket in a tree a profile reads is reached.
        _ => r.line(
            Level::Warn,
            "unix sockets",
            "kept out by the view only: the sockets a profile names exist inside, and so does any socket inside a tree a profile reads (Landlock's socket rules need ABI 9, Linux 7.1); keep such trees out of profiles, or deny the socket's path",
        ),
    }
    let seccomp = get("seccomp");
    if seccomp == "ok" {
        r.line(Level::Ok, "seccomp", "filters install");
    } else {
        r.line(
            Level::Fail,
            "seccomp",
            format!(
                "wardcell-shim ({}) cannot install filters: {seccomp}",
                shim.display()
            ),
        );
    }
}

/// The kernel's release, as `uname -r` prints it.
fn kernel_version(r: &mut Report) {
    match read_sysctl("/proc/sys/kernel/osrelease") {
        Some(release) => r.line(Level::Ok, "kernel", format!("Linux {release}")),
        None => r.line(
            Level::Warn,
            "kernel",
            "cannot read /proc/sys/kernel/osrelease: is /proc mounted?",
        ),
    }
}

/// SO_PEERPIDFD, without which wardcell-broker cannot verify who asks it for a zone.
fn peer_check(r: &mut Report) {
    r.line_for(peer_line(crate::sys::peer_pidfd()), "peer check");
}

/// The doctor line for the SO_PEERPIDFD check's result.
fn peer_line(result: std::io::Result<()>) -> (Level, String) {
    match result {
        Ok(()) => (
            Level::Ok,
            "SO_PEERPIDFD works: wardcell-broker can verify each zone request's process".into(),
        ),
        Err(e) => (
            Level::Warn,
            format!(
                "SO_PEERPIDFD is not available ({e}; it needs Linux 6.5): sandboxes run, but wardcell-broker refuses every `zone enter`, since it cannot verify the process asking"
            ),
        ),
    }
}

fn userns_settings(r: &mut Report) {
    let restrict = read_sysctl(apparmor::RESTRICT_SYSCTL);
    let loaded = std::fs::read_to_string(apparmor::LOADED_PROFILES).ok();
    let client = std::env::current_exe().unwrap_or_default();
    let broker = run::find_helper("wardcell-broker").unwrap_or_default();
    match apparmor::advice(&apparmor::Seen {
        restrict: restrict.as_deref(),
        loaded: loaded.as_deref(),
        profile_installed: Path::new(apparmor::PROFILE_PATH).exists(),
        profile_shipped: Path::new(apparmor::SHIPPED_PATH).exists(),
        client: &client,
        broker: &broker,
    }) {
        Some(apparmor::Advice::Covered(text)) => r.line(Level::Ok, "user namespaces", text),
        Some(apparmor::Advice::Act(text)) => r.line(Level::Warn, "user namespaces", text),
        None => {}
    }
    if read_sysctl("/proc/sys/kernel/unprivileged_userns_clone").as_deref() == Some("0") {
        r.line(
            Level::Warn,
            "user namespaces",
            "disabled for unprivileged users (sysctl kernel.unprivileged_userns_clone=0)",
        );
    }
    if read_sysctl("/proc/sys/user/max_user_namespaces").as_deref() == Some("0") {
        r.line(
            Level::Warn,
            "user namespaces",
            "the limit is 0 (sysctl user.max_user_namespaces)",
        );
    }
}

/// Start `/bin/true` in a sandbox under the built-in `base` profile, from /usr; then
/// this client, which every sandbox gets at the path it was started from.
/// The program the trial runs first (macOS has no /bin/true).
const TRUE: &str = if cfg!(target_os = "macos") {
    "/usr/bin/true"
} else {
    "/bin/true"
};

fn trial_sandbox(r: &mut Report, host: context::Host) {
    if !trial(r, &host, &[TRUE], "sandbox") {
        return;
    }
    match &host.context.client {
        Some(client) => {
            // By name, as an agent runs it: the broker puts its directory on PATH.
            let by_name = ["/bin/sh", "-c", "exec wardcell --version"];
            if trial(r, &host, &by_name, "client inside") {
                r.line(
                    Level::Ok,
                    "client inside",
                    format!(
                        "{} runs inside every sandbox, as `wardcell`",
                        client.display()
                    ),
                );
            }
        }
        None => r.line(
            Level::Warn,
            "client inside",
            "cannot tell where this wardcell binary is, so sandboxes will not have it",
        ),
    }
}

/// One trial run of `command`; false after a FAIL line under `what`.
fn trial(r: &mut Report, host: &context::Host, command: &[&str], what: &str) -> bool {
    let mut host = context::Host {
        config: host.config.clone(),
        context: host.context.clone(),
    };
    host.context.cwd = PathBuf::from("/usr");
    let builtin = config::Config::builtin();
    let command = command.iter().map(|a| a.to_string()).collect();
    let plan = match resolve::resolve(
        &builtin,
        StartRequest::Profile("base".into()),
        command,
        &host.context,
    ) {
        Ok(p) => p,
        Err(e) => {
            r.line(Level::Fail, what, e.to_string());
            return false;
        }
    };
    debug_assert!(matches!(plan.start, Start::Profile(_)));
    let started = Instant::now();
    let result = run::hand_over(plan).and_then(|broker| {
        let child = Command::new(broker)
            .arg("--plan")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .current_dir("/usr")
            .spawn();
        let _ = nix::unistd::close(3);
        child
            .and_then(|c| c.wait_with_output())
            .map_err(|e| crate::error::Error::Launch(e.to_string()))
    });
    match result {
        Ok(out) if out.status.success() => {
            if what == "sandbox" {
                let how = if cfg!(target_os = "macos") {
                    "under a Seatbelt profile made from the plan (no namespaces on macOS)"
                } else {
                    "in new user, mount, network and PID namespaces, in a view built from nothing"
                };
                r.line(
                    Level::Ok,
                    what,
                    format!("ran {TRUE} {how} ({} ms)", started.elapsed().as_millis()),
                );
            }
            true
        }
        Ok(out) => {
            let err = String::from_utf8_lossy(&out.stderr);
            let err = err
                .lines()
                .next()
                .unwrap_or("no message")
                .trim_start_matches("error: ");
            r.line(
                Level::Fail,
                what,
                format!("wardcell-broker --plan (the trial run): {err}"),
            );
            false
        }
        Err(e) => {
            r.line(Level::Fail, what, e.to_string());
            false
        }
    }
}

#[cfg(test)]
mod macos_tests {
    use super::*;

    #[test]
    fn the_peer_check_names_the_broker_either_way() {
        let (l, t) = peer_line(Ok(()));
        assert!(l == Level::Ok && t.contains("wardcell-broker"), "{t}");
        let (l, t) = peer_line(Err(std::io::Error::from_raw_os_error(92)));
        assert!(
            l == Level::Warn && t.contains("Linux 6.5") && t.contains("wardcell-broker refuses"),
            "{t}"
        );
    }

    #[test]
    fn seatbelt_probe_lines() {
        let (l, t) = seatbelt_line("seatbelt=ok\n");
        assert!(l == Level::Ok, "{t}");
        let (l, t) = seatbelt_line("seatbelt=failed (Seatbelt refused the profile: x)\n");
        assert!(
            l == Level::Fail && t.contains("refused the profile: x"),
            "{t}"
        );
        // A Linux shim's probe (or an old shim): no Seatbelt line.
        let (l, t) = seatbelt_line("landlock_abi=6\nseccomp=ok\n");
        assert!(l == Level::Fail && t.contains("reinstall"), "{t}");
    }
}
